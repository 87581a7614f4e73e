//! Opening a store, its counters, operations batched into commits, and
//! mutations from many threads at once.

mod common;

use common::*;
use meta::conformance;
use meta::{Content, Counts, FileKind, MetaStore, NewInode, RedbMeta, SetAttr, XattrFlags};

#[test]
fn open_creates_the_root_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    {
        let m = RedbMeta::open(&path, 1234, 5678).unwrap();
        let root = m.get(ROOT).unwrap();
        assert_eq!(root.id, ROOT);
        assert_eq!(root.attr.kind, FileKind::Dir);
        assert_eq!(root.attr.perm, 0o755);
        assert_eq!(root.attr.nlink, 2);
        assert_eq!((root.attr.uid, root.attr.gid), (1234, 5678));
        assert_eq!(root.content, Content::Empty);
        assert_eq!(m.counts().unwrap(), Counts { files: 0, dirs: 1 });
        assert!(m.readdir(ROOT, None, 10).unwrap().is_empty());
        m.set_attr(
            ROOT,
            &SetAttr {
                perm: Some(0o700),
                ..Default::default()
            },
            t(3),
        )
        .unwrap();
        assert_consistent(&m);
    }
    // Reopening with other ids keeps the existing root.
    let m = RedbMeta::open(&path, 1, 2).unwrap();
    let root = m.get(ROOT).unwrap();
    assert_eq!(
        (root.attr.uid, root.attr.gid, root.attr.perm),
        (1234, 5678, 0o700)
    );
    assert_eq!(m.counts().unwrap(), Counts { files: 0, dirs: 1 });
}

#[test]
fn a_second_open_is_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("meta.redb");
    let _m = RedbMeta::open(&path, 0, 0).unwrap();
    assert_eq!(err(RedbMeta::open(&path, 0, 0)), "Busy");
}

#[test]
fn counts_follow_every_operation() {
    let (_d, m) = store();
    conformance::counting::counts_follow_every_operation(&m);
    assert_consistent(&m);
}

/// Operations are batched into one open transaction: every read sees them
/// at once, failures in between leave them alone, and `sync` makes them
/// durable for the next process.
#[test]
fn batched_operations_are_seen_at_once_and_kept_by_sync() {
    let (d, m) = store();
    let dir = mkdir(&m, ROOT, "d");
    // More operations than one batch holds, with failures among them.
    for i in 0..600 {
        let name = format!("f{i}");
        let f = mkfile(&m, dir, &name);
        assert_eq!(m.lookup(dir, name.as_bytes()).unwrap().id, f);
        assert_eq!(m.get(f).unwrap().attr.nlink, 1);
        assert_eq!(
            err(m.create(dir, name.as_bytes(), new(FileKind::File), t(2))),
            "Exists"
        );
        m.set_content(
            f,
            Content::Inline(name.clone().into_bytes()),
            name.len() as u64,
            t(3),
        )
        .unwrap();
        assert_eq!(
            err(m.remove_xattr(f, b"user.none", t(4))),
            "NoXattr",
            "a failed removal after a batched change"
        );
    }
    assert_eq!(m.readdir(dir, None, 1000).unwrap().len(), 600);
    assert_eq!(
        m.counts().unwrap(),
        Counts {
            files: 600,
            dirs: 2
        }
    );
    m.sync().unwrap();
    drop(m);
    let m = RedbMeta::open(&d.path().join("meta.redb"), 0, 0).unwrap();
    assert_eq!(
        m.counts().unwrap(),
        Counts {
            files: 600,
            dirs: 2
        }
    );
    let f = m.lookup(dir, b"f599").unwrap();
    assert_eq!(f.content, Content::Inline(b"f599".to_vec()));
    assert_consistent(&m);
}

#[test]
fn concurrent_mutations_from_many_threads() {
    let (_d, m) = store();
    conformance::counting::concurrent_mutations_from_many_threads(&m);
    assert_consistent(&m);
}

/// The count of changes moves with every operation that writes (a name, a
/// mode, an xattr, an unlink) and stays through reads, syncs and refused
/// operations: `fs` skips walking an unchanged namespace on it.
#[test]
fn the_change_count_moves_with_every_write_and_only_then() {
    let (_d, m) = store();
    let count = || m.changes().expect("redb counts its changes");
    let mut last = count();
    let moved = |what: &str, last: &mut u64| {
        let now = count();
        assert!(now > *last, "{what} did not move the count");
        *last = now;
    };
    let f = m
        .create(ROOT, b"f", NewInode::empty(FileKind::File), t(1))
        .unwrap();
    moved("a create", &mut last);
    m.get(f.id).unwrap();
    m.lookup(ROOT, b"f").unwrap();
    m.readdir(ROOT, None, 10).unwrap();
    m.view().unwrap();
    m.sync().unwrap();
    assert!(m
        .create(ROOT, b"f", NewInode::empty(FileKind::File), t(2))
        .is_err());
    assert_eq!(count(), last, "reads, a sync and a refused create");
    let chmod = SetAttr {
        perm: Some(0o600),
        ..Default::default()
    };
    m.set_attr(f.id, &chmod, t(3)).unwrap();
    moved("a chmod", &mut last);
    m.set_xattr(f.id, b"user.a", b"1", XattrFlags::Either, t(4))
        .unwrap();
    moved("an xattr", &mut last);
    m.unlink(ROOT, b"f", false, t(5)).unwrap();
    moved("an unlink", &mut last);
}
