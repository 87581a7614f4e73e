//! Small random writes to a read-write handle, which the kernel's
//! writeback cache merges, are durable once `fsync` returns: the daemon
//! killed with `kill -9` right after, the file reads back exact after a
//! remount. The same with `fs.writeback_cache = false`, and the size and
//! mtime the kernel kept while pages were dirty are the ones recorded.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{ok, random, Mount};

const SIZE: usize = 4 << 20;
const BLOCK: usize = 4096;

fn set_writeback(repo: &Path, on: bool) {
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap();
    let line = |v: bool| format!("writeback_cache = {v}");
    assert!(
        text.contains(&line(true)) || text.contains(&line(false)),
        "{text}"
    );
    let text = text.replace(&line(!on), &line(on));
    fs::write(&toml, text).unwrap();
}

/// Random 4 KiB writes over a file, an append past its end, `fsync`, then
/// `kill -9`: what a remount reads.
fn round(repo: &Path, dir: &Path, on: bool, seed: u64) {
    set_writeback(repo, on);
    let name = format!("db-{on}");
    let m = Mount::start(repo.to_path_buf(), dir.to_path_buf());
    let mut want = random(SIZE, seed);
    fs::write(m.path(&name), &want).unwrap();
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path(&name))
        .unwrap();
    let blocks = random(512 * BLOCK, seed + 1);
    let offsets = random(512 * 4, seed + 2);
    for (i, block) in blocks.chunks(BLOCK).enumerate() {
        let raw = u32::from_le_bytes(offsets[i * 4..i * 4 + 4].try_into().unwrap());
        let at = (raw as usize % (SIZE / BLOCK)) * BLOCK;
        f.write_all_at(block, at as u64).unwrap();
        want[at..at + BLOCK].copy_from_slice(block);
    }
    f.write_all_at(b"tail", SIZE as u64 + 10).unwrap();
    want.resize(SIZE + 10, 0);
    want.extend_from_slice(b"tail");
    f.sync_all().unwrap();
    let meta = f.metadata().unwrap();
    assert_eq!(meta.len(), want.len() as u64);
    let (repo, dir) = m.kill();

    let m = Mount::start(repo, dir);
    assert!(fs::read(m.path(&name)).unwrap() == want, "{name} differs");
    let after = fs::metadata(m.path(&name)).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(after.len(), want.len() as u64);
    assert_eq!(
        (after.mtime(), after.mtime_nsec()),
        (meta.mtime(), meta.mtime_nsec()),
        "the mtime seen before the kill is the one recorded"
    );
    m.unmount();
}

#[test]
fn fsync_after_random_writes_survives_kill_with_writeback() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    round(&repo, &dir, true, 40);
    round(&repo, &dir, false, 50);
    ok(&repo, &["check"]);
}
