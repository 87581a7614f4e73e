//! A version never pins the half-written state of a file open for
//! writing: it takes the file as of its last close or fsync (a file still
//! being written for the first time is empty there), even though the
//! committer records its writes every few seconds. A snapshot, asked for
//! by name, takes it as it is. What a version took is never collected
//! while the file is open.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::InodeId;
use rand::{RngCore, SeedableRng};

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// File `name` of version or snapshot `root`, as `cairn restore --out`
/// writes it.
fn stored(fs: &Fs, root: &str, name: &str) -> Vec<u8> {
    let out = tempfile::tempdir().unwrap();
    fs.export(root, &format!("/{name}"), out.path(), false)
        .unwrap();
    std::fs::read(out.path().join(name)).unwrap()
}

fn newest(fs: &Fs) -> String {
    let (n, _) = *fs.versions().unwrap().last().unwrap();
    format!("version/{n}")
}

#[test]
fn versions_take_open_files_as_of_their_last_close_or_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let settings = FsSettings {
        version_interval: std::time::Duration::ZERO,
        ..FsSettings::default()
    };
    let fs = Fs::new(Arc::new(meta), store, ChunkerParams::default(), settings).unwrap();
    let first = random(300 << 10, 1);
    let more = random(500 << 10, 2);

    // Created and being written: a version has it empty.
    let f = fs
        .create(InodeId::ROOT, b"f", common::new_file())
        .unwrap()
        .id;
    fs.open(f).unwrap();
    fs.write(f, 0, &first).unwrap();
    fs.sync_all().unwrap(); // what the committer does every 5 s
    fs.write_version().unwrap();
    assert!(stored(&fs, &newest(&fs), "f").is_empty());

    // Fsynced: that is what versions take from then on.
    fs.fsync(f).unwrap();
    fs.write(f, first.len() as u64, &more).unwrap();
    fs.sync_all().unwrap();
    fs.write_version().unwrap();
    let v = newest(&fs);
    assert!(
        stored(&fs, &v, "f") == first,
        "the version has it as fsynced"
    );

    // A snapshot takes it as it is now; the file system reads it whole.
    fs.snapshot_create("now").unwrap();
    let whole = [first.clone(), more.clone()].concat();
    assert!(
        stored(&fs, "now", "f") == whole,
        "the snapshot has it as it is"
    );
    assert!(fs.read(f, 0, whole.len() as u32).unwrap() == whole);

    // A collection while the file is open keeps what the version took
    // (its record was replaced by the committer's).
    common::collect_all(&fs);
    assert!(
        stored(&fs, &v, "f") == first,
        "the version's data survives gc"
    );

    // Closed: the next version has it whole.
    fs.flush(f).unwrap();
    fs.release(f).unwrap();
    fs.write_version().unwrap();
    assert!(
        stored(&fs, &newest(&fs), "f") == whole,
        "closed, it is taken whole"
    );
    fs.shutdown().unwrap();
}
