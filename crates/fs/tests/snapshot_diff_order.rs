//! `snapshot diff` lists changes in one fixed order, which scripts read:
//! depth first in name order, a changed directory's changes where it
//! stands among its siblings, and what only the newer snapshot has after
//! the rest of its directory.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::history::{Change, ChangeKind};
use fs::{Fs, FsSettings};
use meta::{Content, FileKind, InodeId, NewInode};

fn new_inode(kind: FileKind, content: &[u8]) -> NewInode {
    NewInode {
        kind,
        perm: 0o755,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: if content.is_empty() {
            Content::Empty
        } else {
            Content::Inline(content.to_vec())
        },
        xattrs: Vec::new(),
    }
}

fn at(fs: &Fs, path: &str) -> InodeId {
    fs.resolve(path).unwrap().id
}

fn mkdir(fs: &Fs, parent: &str, name: &str) {
    fs.create(
        at(fs, parent),
        name.as_bytes(),
        new_inode(FileKind::Dir, b""),
    )
    .unwrap();
}

fn file(fs: &Fs, parent: &str, name: &str, bytes: &[u8]) {
    fs.create(
        at(fs, parent),
        name.as_bytes(),
        new_inode(FileKind::File, bytes),
    )
    .unwrap();
}

fn rewrite(fs: &Fs, path: &str, bytes: &[u8]) {
    let ino = at(fs, path);
    fs.open(ino).unwrap();
    fs.write(ino, 0, bytes).unwrap();
    fs.flush(ino).unwrap();
    fs.release(ino).unwrap();
}

fn change(kind: ChangeKind, path: &str) -> Change {
    Change {
        kind,
        path: path.to_string(),
    }
}

#[test]
fn a_diff_lists_changes_depth_first_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let fs = Fs::new(
        Arc::new(meta),
        store,
        ChunkerParams::default(),
        FsSettings::default(),
    )
    .unwrap();

    mkdir(&fs, "/", "a");
    file(&fs, "/a", "x", b"1");
    file(&fs, "/a", "y", b"2");
    mkdir(&fs, "/a", "sub");
    file(&fs, "/a/sub", "k", b"3");
    file(&fs, "/", "b", b"4");
    mkdir(&fs, "/", "c");
    file(&fs, "/c", "z", b"5");
    file(&fs, "/", "e", b"6");
    fs.snapshot_create("s1").unwrap();

    rewrite(&fs, "/a/x", b"one");
    fs.unlink(at(&fs, "/a"), b"y").unwrap();
    file(&fs, "/a", "new", b"7");
    rewrite(&fs, "/a/sub/k", b"three");
    file(&fs, "/a/sub", "l", b"8");
    fs.unlink(InodeId::ROOT, b"b").unwrap();
    mkdir(&fs, "/", "b");
    fs.unlink(at(&fs, "/c"), b"z").unwrap();
    fs.rmdir(InodeId::ROOT, b"c").unwrap();
    file(&fs, "/", "d", b"9");
    fs.snapshot_create("s2").unwrap();

    use ChangeKind::{Added, Changed, Removed};
    assert_eq!(
        fs.snapshot_diff("s1", "s2").unwrap(),
        vec![
            change(Changed, "/a/sub/k"),
            change(Added, "/a/sub/l"),
            change(Changed, "/a/x"),
            change(Removed, "/a/y"),
            change(Added, "/a/new"),
            change(Removed, "/b"),
            change(Added, "/b"),
            change(Removed, "/c"),
            change(Added, "/d"),
        ]
    );
    fs.shutdown().unwrap();
}
