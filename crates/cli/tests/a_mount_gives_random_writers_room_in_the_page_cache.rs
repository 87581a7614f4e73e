//! A mount with the writeback cache raises the kernel's dirty limit for
//! its bdi to `fs.kernel_dirty` (FUSE's own default, about 1% of the
//! kernel's limit, makes a random writer over a big image wait on
//! writeback page by page), and `kernel_dirty = 0` leaves the kernel's
//! default. Needs root, as the mount itself does here.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{edit_config, Mount};

fn max_bytes(mountpoint: &Path) -> u64 {
    let dev = std::fs::metadata(mountpoint).unwrap().dev();
    let knob = format!(
        "/sys/class/bdi/{}:{}/max_bytes",
        libc::major(dev),
        libc::minor(dev)
    );
    std::fs::read_to_string(&knob)
        .unwrap_or_else(|e| panic!("{knob}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn the_dirty_limit_follows_kernel_dirty() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let raised = max_bytes(&m.path(""));
    // The kernel keeps the limit as a ratio: close to, not exactly, 1 GiB.
    assert!(
        raised.abs_diff(1 << 30) < (1 << 30) / 100,
        "max_bytes {raised}, not about 1 GiB"
    );
    let (repo, dir) = m.unmount();

    edit_config(&repo, &[("kernel_dirty = \"1GiB\"", "kernel_dirty = 0")]);
    let m = Mount::start(repo, dir);
    let default = max_bytes(&m.path(""));
    assert!(
        default < (1 << 30) / 2,
        "max_bytes {default} with kernel_dirty = 0"
    );
    m.unmount();
}
