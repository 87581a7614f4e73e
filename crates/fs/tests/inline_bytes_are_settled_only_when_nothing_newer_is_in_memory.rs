//! A GET found through the path index takes a small file's bytes from the
//! record it read (`Fs::settled_inline`) only when the file system holds
//! nothing newer of that file: while a writer has it open, the answer is
//! "read the file", never the older bytes.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::{Content, FileKind, InodeId, NewInode};

#[test]
fn inline_bytes_are_settled_only_when_nothing_newer_is_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let fs = Fs::new(
        Arc::new(meta),
        store,
        ChunkerParams::default(),
        FsSettings::default(),
    )
    .unwrap();
    let new = NewInode {
        kind: FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    };
    let ino = fs.create(InodeId::ROOT, b"small", new).unwrap().id;
    fs.open(ino).unwrap();
    fs.write(ino, 0, b"first version").unwrap();
    fs.flush(ino).unwrap();
    fs.release(ino).unwrap();
    fs.sync_all().unwrap();

    let found = fs.lookup_path(b"small").unwrap();
    assert_eq!(fs.settled_inline(&found.inode), Some(&b"first version"[..]));

    // A writer has newer bytes in memory: the record's are not the answer.
    fs.open(ino).unwrap();
    fs.write(ino, 0, b"second").unwrap();
    let found = fs.lookup_path(b"small").unwrap();
    assert_eq!(fs.settled_inline(&found.inode), None);
    assert_eq!(fs.read(ino, 0, 64).unwrap(), b"secondversion");
    fs.flush(ino).unwrap();
    fs.release(ino).unwrap();
    fs.sync_all().unwrap();
    let found = fs.lookup_path(b"small").unwrap();
    assert_eq!(fs.settled_inline(&found.inode), Some(&b"secondversion"[..]));
}
