//! A database's pattern (16 KiB random writes, fsync every 32) and then
//! `kill -9` of the daemon right after an fsync returned: the index's
//! latest commits were never synced (the write path does not sync it), so
//! the remount finds the containers they recorded on the branch. Every
//! fsynced byte reads back, new writes after the remount are kept apart
//! from the old ones, `check` is clean, and `gc` deletes nothing a file
//! uses.

mod common;

use std::fs;
use std::os::unix::fs::FileExt;

use common::{ok, random, Mount};

const BLOCK: usize = 16 << 10;

fn write_rounds(path: &std::path::Path, model: &mut [u8], rounds: usize, seed: u64) {
    let f = fs::OpenOptions::new().write(true).open(path).unwrap();
    let blocks = model.len() / BLOCK;
    let picks = random(rounds * 32 * 2, seed);
    for (i, p) in picks.chunks(2).enumerate() {
        let at = (u16::from_le_bytes([p[0], p[1]]) as usize % blocks) * BLOCK;
        let data = random(BLOCK, seed + 1 + i as u64);
        f.write_all_at(&data, at as u64).unwrap();
        model[at..at + BLOCK].copy_from_slice(&data);
        if i % 32 == 31 {
            f.sync_data().unwrap();
        }
    }
}

#[test]
fn database_fsyncs_survive_kill_9_then_gc() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let path = m.path("db.bin");
    let mut model = random(4 << 20, 3);
    fs::write(&path, &model).unwrap();
    fs::File::open(&path).unwrap().sync_all().unwrap();
    write_rounds(&path, &mut model, 4, 100);
    let (repo, dir) = m.kill();

    let m = Mount::start(repo, dir);
    assert!(
        fs::read(m.path("db.bin")).unwrap() == model,
        "fsynced bytes lost or wrong after kill -9"
    );
    // New containers after the remount must not take the found ones' ids.
    let path = m.path("db.bin");
    write_rounds(&path, &mut model, 2, 5000);
    let other = random(1 << 20, 7);
    fs::write(m.path("other.bin"), &other).unwrap();
    let (repo, dir) = m.unmount();
    ok(&repo, &["check"]);
    ok(&repo, &["gc"]);
    ok(&repo, &["check"]);

    let m = Mount::start(repo, dir);
    assert!(
        fs::read(m.path("db.bin")).unwrap() == model,
        "db.bin after gc"
    );
    assert!(
        fs::read(m.path("other.bin")).unwrap() == other,
        "other.bin after gc"
    );
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
