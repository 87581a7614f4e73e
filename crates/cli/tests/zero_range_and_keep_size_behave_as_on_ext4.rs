//! `fallocate`'s `KEEP_SIZE`, `ZERO_RANGE` (with and without `KEEP_SIZE`)
//! and `PUNCH_HOLE` through the mount do what they do on a local ext4
//! file: the same calls on both, the same answers, sizes and bytes after
//! each, and after a remount.

mod common;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use common::{ok, random, Mount};

use libc::FALLOC_FL_ZERO_RANGE as ZERO;
use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH};

fn fallocate(f: &File, mode: i32, offset: i64, len: i64) -> i32 {
    // SAFETY: a valid open descriptor and plain integers.
    if unsafe { libc::fallocate(f.as_raw_fd(), mode, offset, len) } == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

fn open(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap()
}

fn content(f: &File) -> Vec<u8> {
    let mut buf = vec![0u8; f.metadata().unwrap().len() as usize];
    f.read_exact_at(&mut buf, 0).unwrap();
    buf
}

#[test]
fn zero_range_and_keep_size_behave_as_on_ext4() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let reference = open(&base.path().join("reference"));
    let ours = open(&m.path("f"));
    let data = random(900_000, 3);
    for f in [&reference, &ours] {
        f.write_all_at(&data, 0).unwrap();
    }
    // (mode, offset, length): allocation past the end that keeps the size,
    // zeroing inside, across and past the end, punching, and a punch
    // without KEEP_SIZE (refused).
    let calls: [(i32, i64, i64); 9] = [
        (KEEP, 0, 4 << 20),
        (KEEP, 800_000, 1 << 20),
        (ZERO | KEEP, 100_000, 50_000),
        (ZERO | KEEP, 850_000, 200_000),
        (ZERO, 300_000, 70_001),
        (ZERO, 880_000, 300_000),
        (PUNCH | KEEP, 5, 333_333),
        (PUNCH | KEEP, 1_000_000, 1 << 20),
        (PUNCH, 0, 4096),
    ];
    for (mode, offset, len) in calls {
        let want = fallocate(&reference, mode, offset, len);
        let got = fallocate(&ours, mode, offset, len);
        assert_eq!(got, want, "mode {mode:#x} at {offset}+{len}");
        assert_eq!(
            ours.metadata().unwrap().len(),
            reference.metadata().unwrap().len(),
            "size after mode {mode:#x} at {offset}+{len}"
        );
        assert!(
            content(&ours) == content(&reference),
            "bytes after mode {mode:#x} at {offset}+{len}"
        );
    }
    let want = content(&reference);
    assert_eq!(
        want.len(),
        1_180_000,
        "ZERO_RANGE without KEEP_SIZE grew it"
    );
    drop(ours);
    let (repo, dir) = m.unmount();

    ok(&repo, &["check"]);
    let m = Mount::start(repo, dir);
    assert!(fs::read(m.path("f")).unwrap() == want);
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
