//! The disk is shared by kind of read (`cas::qos`): a reader the file
//! system sees jumping around a file has its misses counted, and
//! scheduled, as random reads; a sequential pass over the same file as a
//! stream's. Counts, no timing.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::{Content, FileKind, InodeId, NewInode};

const MIB: usize = 1 << 20;

#[test]
fn a_random_readers_storage_reads_are_the_random_kind() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    // A cache too small to keep anything and a short read-ahead window,
    // so every read below reaches the store and a jump of a few MiB is
    // one a sequential reader never makes.
    let settings = FsSettings {
        cache_bytes: 64 << 10,
        readahead: MIB as u64,
        ..FsSettings::default()
    };
    let fs = Fs::new(Arc::new(meta), store, ChunkerParams::default(), settings).unwrap();
    let new = NewInode {
        kind: FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    };
    let ino = fs.create(InodeId::ROOT, b"image", new).unwrap().id;
    fs.open(ino).unwrap();
    let bytes = branch::testing::pattern(16 * MIB, 1);
    for (i, piece) in bytes.chunks(MIB).enumerate() {
        fs.write(ino, (i * MIB) as u64, piece).unwrap();
    }
    fs.flush(ino).unwrap();
    fs.release(ino).unwrap();
    fs.sync_all().unwrap();

    fs.open(ino).unwrap();
    let before = fs.store().reads_by_class();
    for at in [15 * MIB, MIB, 9 * MIB, 4 * MIB, 12 * MIB, 6 * MIB] {
        let got = fs.read(ino, at as u64, 4096).unwrap();
        assert!(got[..] == bytes[at..at + 4096], "bytes at {at}");
    }
    let random = fs.store().reads_by_class();
    assert!(
        random.random >= before.random + 5,
        "jumping reads were not the random kind: {before:?} -> {random:?}"
    );
    assert_eq!(random.background, before.background);

    for at in (0..16 * MIB).step_by(128 << 10) {
        let got = fs.read(ino, at as u64, 128 << 10).unwrap();
        assert!(got[..] == bytes[at..at + (128 << 10)], "bytes at {at}");
    }
    let sequential = fs.store().reads_by_class();
    assert!(
        sequential.sequential > random.sequential,
        "a sequential pass made no stream reads: {random:?} -> {sequential:?}"
    );
    fs.release(ino).unwrap();
}
