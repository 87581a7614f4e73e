//! What survives a reopen: everything after `sync`, and a consistent store
//! after a crash without one.

mod common;

use common::*;
use ids::ChunkId;
use meta::{Content, Counts, FileKind, InodeId, MetaStore, RedbMeta, XattrFlags};

/// A small tree with every kind of record: returns the highest inode
/// number used (that inode has been deleted again).
fn populate(m: &RedbMeta) -> InodeId {
    let d = mkdir(m, ROOT, "d");
    let f = mkfile(m, d, "f");
    m.link(f, ROOT, b"f-link", t(2)).unwrap();
    m.create(d, b"s", symlink(b"/some/where"), t(2)).unwrap();
    m.set_content(
        f,
        Content::Recipe(ChunkId::from_bytes([3; 32])),
        12345,
        t(3),
    )
    .unwrap();
    m.set_xattr(f, b"user.k", b"v", XattrFlags::Either, t(3))
        .unwrap();
    let orphan = mkfile(m, ROOT, "orphan");
    m.unlink(ROOT, b"orphan", true, t(4)).unwrap();
    assert_eq!(orphan, InodeId(5));
    let last = mkfile(m, ROOT, "last");
    m.unlink(ROOT, b"last", false, t(4)).unwrap();
    last
}

fn check_populated(m: &RedbMeta) {
    assert_eq!(names(m, ROOT), ["d", "f-link"]);
    let d = m.lookup(ROOT, b"d").unwrap().id;
    assert_eq!(names(m, d), ["f", "s"]);
    let f = m.lookup(d, b"f").unwrap();
    assert_eq!(f.attr.nlink, 2);
    assert_eq!(f.attr.size, 12345);
    assert_eq!(f.content, Content::Recipe(ChunkId::from_bytes([3; 32])));
    assert_eq!(m.get_xattr(f.id, b"user.k").unwrap(), b"v");
    let s = m.lookup(d, b"s").unwrap();
    assert_eq!(s.content, Content::Inline(b"/some/where".to_vec()));
    assert_eq!(m.get(d).unwrap().attr.nlink, 2);
    assert_eq!(m.get(ROOT).unwrap().attr.nlink, 3);
    assert_eq!(m.get(InodeId(5)).unwrap().attr.nlink, 0, "the orphan");
    assert_eq!(m.counts().unwrap(), Counts { files: 3, dirs: 2 });
    let mut recipes = 0;
    m.for_each_content(&mut |_, _, _| recipes += 1).unwrap();
    assert_eq!(recipes, 1);
    assert_consistent(m);
}

#[test]
fn synced_state_survives_a_reopen_and_numbers_continue() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let last = {
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        let last = populate(&m);
        m.sync().unwrap();
        last
    };
    let m = RedbMeta::open(&path, 0, 0).unwrap();
    check_populated(&m);
    // The deleted highest number is not handed out again.
    let next = mkfile(&m, ROOT, "next");
    assert_eq!(next, InodeId(last.0 + 1));
    // purge_orphans at mount removes the orphan.
    assert_eq!(m.purge_orphans().unwrap(), 1);
    assert_eq!(err(m.get(InodeId(5))), "NotFound");
    assert_consistent(&m);
}

/// Copies the file of an open store: what a crash of the process right now
/// would leave on disk.
fn crash_image(path: &std::path::Path, to: &std::path::Path) {
    std::fs::copy(path, to).unwrap();
}

#[test]
fn a_crash_without_sync_leaves_a_consistent_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let crashed = dir.path().join("crashed.redb");
    let m = RedbMeta::open(&path, 0, 0).unwrap();
    populate(&m);
    m.sync().unwrap();
    // Unsynced work on top of the synced tree.
    let d = m.lookup(ROOT, b"d").unwrap().id;
    for i in 0..50 {
        let sub = mkdir(&m, d, &format!("sub{i}"));
        mkfile(&m, sub, "x");
        if i % 3 == 0 {
            m.rename(
                d,
                format!("sub{i}").as_bytes(),
                ROOT,
                format!("moved{i}").as_bytes(),
                Default::default(),
                &|_| false,
                t(9),
            )
            .unwrap();
        }
    }
    m.unlink(ROOT, b"f-link", false, t(9)).unwrap();
    crash_image(&path, &crashed);
    let highest = mkfile(&m, ROOT, "probe").0;
    drop(m);

    let m = RedbMeta::open(&crashed, 0, 0).unwrap();
    assert_consistent(&m);
    // What was synced is there (the unsynced work may or may not be).
    let f = m.lookup(d, b"f").unwrap();
    assert_eq!(f.content, Content::Recipe(ChunkId::from_bytes([3; 32])));
    assert_eq!(m.lookup(d, b"s").unwrap().attr.kind, FileKind::Symlink);
    assert!(m.get(InodeId(5)).is_ok(), "the synced orphan");
    // New inodes never collide with anything in the store.
    let fresh = mkfile(&m, ROOT, "fresh");
    assert!(fresh.0 > 6, "numbers continue after the synced ones");
    assert!(fresh.0 <= highest);
    assert_consistent(&m);
    assert_eq!(m.purge_orphans().unwrap(), 1);
    assert_consistent(&m);
}

#[test]
fn a_clean_close_without_sync_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    {
        let m = RedbMeta::open(&path, 0, 0).unwrap();
        populate(&m);
    }
    let m = RedbMeta::open(&path, 0, 0).unwrap();
    check_populated(&m);
}
