//! Random 4 KiB writes into a fixed-chunk file, then fsync, then `kill -9`
//! of the daemon: after a remount every byte is what was written before the
//! fsync, and `check` is clean.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;

use common::{ok, random, Mount};

#[test]
fn fsync_after_random_writes_survives_kill_9() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    // `.img`: fixed-size chunks by the default chunking rule.
    let path = m.path("disk.img");
    let mut model = random(8 << 20, 5);
    fs::write(&path, &model).unwrap();
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    let offsets = random(3 * 400, 9);
    for (i, o) in offsets.chunks(3).enumerate() {
        // Unaligned on purpose for some: a write may straddle two blocks.
        let at = (u32::from_le_bytes([o[0], o[1], o[2], 0]) as usize * 7) % (model.len() - 4096);
        let data = random(4096, 1000 + 2 * i as u64);
        f.write_all_at(&data, at as u64).unwrap();
        model[at..at + 4096].copy_from_slice(&data);
    }
    f.sync_all().unwrap();
    let (repo, dir) = m.kill();

    let m = Mount::start(repo, dir);
    assert!(
        fs::read(m.path("disk.img")).unwrap() == model,
        "fsynced bytes lost or wrong"
    );
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
