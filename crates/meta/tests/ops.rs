//! Every operation of `RedbMeta`, its error cases, and the nlink and
//! timestamp rules.

mod common;

use std::cell::Cell;

use common::*;
use ids::ChunkId;
use meta::{
    Content, Counts, FileKind, InodeId, MetaStore, NewInode, RedbMeta, RenameFlags, SetAttr,
    XattrChange, XattrFlags, NAME_MAX,
};

const NOREPLACE: RenameFlags = RenameFlags {
    noreplace: true,
    exchange: false,
};
const EXCHANGE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: true,
};
const PLAIN: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
};

fn keep(_: InodeId) -> bool {
    true
}
fn nokeep(_: InodeId) -> bool {
    false
}

fn rename(
    m: &RedbMeta,
    p: InodeId,
    n: &str,
    np: InodeId,
    nn: &str,
    flags: RenameFlags,
) -> meta::Result<Option<meta::Inode>> {
    m.rename(p, n.as_bytes(), np, nn.as_bytes(), flags, &nokeep, t(50))
}

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
fn create_sets_attributes_links_and_times() {
    let (_d, m) = store();
    let f = m
        .create(
            ROOT,
            b"f",
            NewInode {
                perm: 0o104755,
                ..new(FileKind::File)
            },
            t(10),
        )
        .unwrap();
    assert_eq!(f.id, InodeId(2), "numbers start after the root");
    assert_eq!(f.attr.kind, FileKind::File);
    assert_eq!(f.attr.perm, 0o4755, "perm keeps only mode & 0o7777");
    assert_eq!((f.attr.uid, f.attr.gid), (1000, 100));
    assert_eq!((f.attr.nlink, f.attr.size), (1, 0));
    for ts in [f.attr.atime, f.attr.mtime, f.attr.ctime, f.attr.crtime] {
        assert_eq!(ts, t(10));
    }
    let root = m.get(ROOT).unwrap();
    assert_eq!(
        root.attr.nlink, 2,
        "a file does not raise the parent's nlink"
    );
    assert_eq!((root.attr.mtime, root.attr.ctime), (t(10), t(10)));

    let d = m.create(ROOT, b"d", new(FileKind::Dir), t(11)).unwrap();
    assert_eq!(d.id, InodeId(3));
    assert_eq!(d.attr.nlink, 2);
    let root = m.get(ROOT).unwrap();
    assert_eq!(
        root.attr.nlink, 3,
        "a subdirectory raises the parent's nlink"
    );
    assert_eq!((root.attr.mtime, root.attr.ctime), (t(11), t(11)));

    let s = m.create(d.id, b"s", symlink(b"../target"), t(12)).unwrap();
    assert_eq!(s.attr.kind, FileKind::Symlink);
    assert_eq!(s.attr.size, 9, "a symlink's size is its target's length");
    assert_eq!(s.content, Content::Inline(b"../target".to_vec()));
    assert_eq!(m.get(d.id).unwrap().attr.mtime, t(12));
    assert_eq!(
        m.get(ROOT).unwrap().attr.mtime,
        t(11),
        "only the parent changes"
    );

    let dev = m
        .create(
            ROOT,
            b"dev",
            NewInode {
                rdev: 0x0801,
                ..new(FileKind::BlockDevice)
            },
            t(13),
        )
        .unwrap();
    assert_eq!(
        (dev.attr.kind, dev.attr.rdev),
        (FileKind::BlockDevice, 0x0801)
    );
    let small = m
        .create(
            ROOT,
            b"small",
            NewInode {
                content: Content::Inline(b"hello".to_vec()),
                ..new(FileKind::File)
            },
            t(13),
        )
        .unwrap();
    assert_eq!(small.attr.size, 5);

    for (name, ino) in [("f", f.id), ("d", d.id), ("dev", dev.id)] {
        assert_eq!(m.lookup(ROOT, name.as_bytes()).unwrap().id, ino);
    }
    assert_eq!(m.lookup(d.id, b"s").unwrap(), s);
    assert_eq!(m.get(s.id).unwrap(), s);
    assert_eq!(m.counts().unwrap(), Counts { files: 4, dirs: 2 });
    assert_consistent(&m);
}

#[test]
fn create_errors_change_nothing() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    assert_eq!(
        err(m.create(ROOT, b"f", new(FileKind::Dir), t(5))),
        "Exists"
    );
    assert_eq!(err(m.create(f, b"x", new(FileKind::File), t(5))), "NotDir");
    assert_eq!(
        err(m.create(InodeId(99), b"x", new(FileKind::File), t(5))),
        "NotFound"
    );
    assert_eq!(
        err(m.create(ROOT, b"s", new(FileKind::Symlink), t(5))),
        "Invalid"
    );
    assert_eq!(err(m.create(ROOT, b"s", symlink(b""), t(5))), "Invalid");
    let dir_with_content = NewInode {
        content: Content::Inline(b"x".to_vec()),
        ..new(FileKind::Dir)
    };
    assert_eq!(err(m.create(ROOT, b"d", dir_with_content, t(5))), "Invalid");
    let recipe = NewInode {
        content: Content::Recipe(ChunkId::from_bytes([1; 32])),
        ..new(FileKind::File)
    };
    assert_eq!(err(m.create(ROOT, b"r", recipe, t(5))), "Invalid");
    // Nothing happened: no times, no counts, no inode numbers were used.
    assert_eq!(m.get(ROOT).unwrap().attr.mtime, t(1));
    assert_eq!(m.counts().unwrap(), Counts { files: 1, dirs: 1 });
    assert_eq!(mkfile(&m, ROOT, "g"), InodeId(f.0 + 1));
    assert_consistent(&m);
}

#[test]
fn names_are_checked_everywhere() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    let longest = vec![b'n'; NAME_MAX];
    let too_long = vec![b'n'; NAME_MAX + 1];
    let invalid: [&[u8]; 6] = [b"", b".", b"..", b"a/b", b"/", b"a\0b"];

    assert!(m.create(ROOT, &longest, new(FileKind::File), t(2)).is_ok());
    assert!(m.lookup(ROOT, &longest).is_ok());
    assert!(
        m.create(ROOT, b"...", new(FileKind::File), t(2)).is_ok(),
        "`...` is a name"
    );
    assert!(
        m.create(ROOT, &[0xff, 0xfe], new(FileKind::File), t(2))
            .is_ok(),
        "names are bytes"
    );
    assert_eq!(
        err(m.create(ROOT, &too_long, new(FileKind::File), t(2))),
        "NameTooLong"
    );
    assert_eq!(err(m.lookup(ROOT, &too_long)), "NameTooLong");
    assert_eq!(err(m.link(f, ROOT, &too_long, t(2))), "NameTooLong");
    assert_eq!(err(m.unlink(ROOT, &too_long, false, t(2))), "NameTooLong");
    assert_eq!(err(m.rmdir(ROOT, &too_long, t(2))), "NameTooLong");
    assert_eq!(
        err(m.rename(ROOT, b"f", ROOT, &too_long, PLAIN, &nokeep, t(2))),
        "NameTooLong"
    );
    assert_eq!(
        err(m.rename(ROOT, &too_long, ROOT, b"g", PLAIN, &nokeep, t(2))),
        "NameTooLong"
    );
    for name in invalid {
        assert_eq!(
            err(m.create(ROOT, name, new(FileKind::File), t(2))),
            "Invalid",
            "{name:?}"
        );
        assert_eq!(
            err(m.create(ROOT, name, new(FileKind::Dir), t(2))),
            "Invalid",
            "{name:?}"
        );
        assert_eq!(err(m.lookup(ROOT, name)), "Invalid", "{name:?}");
        assert_eq!(err(m.link(f, ROOT, name, t(2))), "Invalid", "{name:?}");
        assert_eq!(
            err(m.unlink(ROOT, name, false, t(2))),
            "Invalid",
            "{name:?}"
        );
        assert_eq!(err(m.rmdir(ROOT, name, t(2))), "Invalid", "{name:?}");
        assert_eq!(
            err(m.rename(ROOT, b"f", ROOT, name, PLAIN, &nokeep, t(2))),
            "Invalid"
        );
        assert_eq!(
            err(m.rename(ROOT, name, ROOT, b"g", PLAIN, &nokeep, t(2))),
            "Invalid"
        );
    }
    assert_eq!(m.readdir(ROOT, None, 100).unwrap().len(), 4);
    assert_consistent(&m);
}

#[test]
fn lookup_and_get_errors() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    assert_eq!(err(m.lookup(ROOT, b"missing")), "NotFound");
    assert_eq!(err(m.lookup(f, b"x")), "NotDir");
    assert_eq!(err(m.lookup(InodeId(77), b"x")), "NotFound");
    assert_eq!(err(m.get(InodeId(77))), "NotFound");
    assert_eq!(err(m.get(InodeId(0))), "NotFound");
    assert_eq!(err(m.readdir(f, None, 10)), "NotDir");
    assert_eq!(err(m.readdir(InodeId(77), None, 10)), "NotFound");
}

#[test]
fn link_raises_nlink_and_ctime() {
    let (_d, m) = store();
    let d = mkdir(&m, ROOT, "d");
    let f = mkfile(&m, ROOT, "f");
    let linked = m.link(f, d, b"g", t(20)).unwrap();
    assert_eq!(linked.id, f);
    assert_eq!(linked.attr.nlink, 2);
    assert_eq!(linked.attr.ctime, t(20));
    assert_eq!(linked.attr.mtime, t(1), "a link changes ctime only");
    let dir = m.get(d).unwrap();
    assert_eq!(
        (dir.attr.mtime, dir.attr.ctime, dir.attr.nlink),
        (t(20), t(20), 2)
    );
    assert_eq!(
        m.get(ROOT).unwrap().attr.mtime,
        t(1),
        "the old parent is untouched"
    );
    assert_eq!(m.lookup(d, b"g").unwrap().id, f);
    assert_eq!(m.readdir(d, None, 10).unwrap()[0].kind, FileKind::File);
    m.link(f, ROOT, b"h", t(21)).unwrap();
    assert_eq!(nlink(&m, f), 3);
    assert_eq!(
        m.counts().unwrap(),
        Counts { files: 1, dirs: 2 },
        "links are not files"
    );

    assert_eq!(err(m.link(d, ROOT, b"dlink", t(22))), "Invalid");
    assert_eq!(err(m.link(f, ROOT, b"d", t(22))), "Exists");
    assert_eq!(err(m.link(f, ROOT, b"h", t(22))), "Exists");
    assert_eq!(err(m.link(InodeId(99), ROOT, b"x", t(22))), "NotFound");
    assert_eq!(err(m.link(f, f, b"x", t(22))), "NotDir");
    assert_eq!(err(m.link(f, InodeId(99), b"x", t(22))), "NotFound");
    assert_eq!(nlink(&m, f), 3);
    assert_consistent(&m);
}

#[test]
fn link_of_an_orphan_is_refused() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    m.unlink(ROOT, b"f", true, t(2)).unwrap();
    assert_eq!(err(m.link(f, ROOT, b"again", t(3))), "NotFound");
    assert_eq!(nlink(&m, f), 0);
    assert_consistent(&m);
}

#[test]
fn unlink_lowers_nlink_then_deletes() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    m.link(f, ROOT, b"g", t(2)).unwrap();
    m.set_xattr(f, b"user.a", b"1", XattrFlags::Either, t(2))
        .unwrap();

    let after = m.unlink(ROOT, b"f", false, t(30)).unwrap();
    assert_eq!(
        (after.id, after.attr.nlink, after.attr.ctime),
        (f, 1, t(30))
    );
    assert_eq!(m.get(f).unwrap().attr.nlink, 1, "still named g");
    let root = m.get(ROOT).unwrap();
    assert_eq!((root.attr.mtime, root.attr.ctime), (t(30), t(30)));
    assert_eq!(names(&m, ROOT), ["g"]);

    let after = m.unlink(ROOT, b"g", false, t(31)).unwrap();
    assert_eq!((after.id, after.attr.nlink), (f, 0));
    assert_eq!(err(m.get(f)), "NotFound");
    assert_eq!(err(m.get_xattr(f, b"user.a")), "NotFound");
    assert_eq!(m.counts().unwrap(), Counts { files: 0, dirs: 1 });
    assert!(names(&m, ROOT).is_empty());
    assert_consistent(&m);
}

#[test]
fn unlink_errors() {
    let (_d, m) = store();
    let d = mkdir(&m, ROOT, "d");
    let f = mkfile(&m, ROOT, "f");
    assert_eq!(err(m.unlink(ROOT, b"d", false, t(2))), "IsDir");
    assert_eq!(err(m.unlink(ROOT, b"missing", false, t(2))), "NotFound");
    assert_eq!(err(m.unlink(f, b"x", false, t(2))), "NotDir");
    assert_eq!(err(m.unlink(InodeId(99), b"x", false, t(2))), "NotFound");
    assert_eq!(m.get(ROOT).unwrap().attr.mtime, t(1));
    assert_eq!(nlink(&m, d), 2);
    assert_eq!(nlink(&m, f), 1);
    assert_consistent(&m);
}

#[test]
fn orphans_live_until_dropped_or_purged() {
    let (_d, m) = store();
    let a = mkfile(&m, ROOT, "a");
    let b = mkfile(&m, ROOT, "b");
    let c = mkfile(&m, ROOT, "c");
    let kept = mkfile(&m, ROOT, "kept");
    m.set_xattr(a, b"user.x", b"v", XattrFlags::Either, t(2))
        .unwrap();
    for name in ["a", "b", "c"] {
        let after = m.unlink(ROOT, name.as_bytes(), true, t(3)).unwrap();
        assert_eq!(after.attr.nlink, 0);
    }
    // An orphan is still an inode: get, set_content, xattrs work.
    assert_eq!(m.get(a).unwrap().attr.nlink, 0);
    assert_eq!(m.get_xattr(a, b"user.x").unwrap(), b"v");
    let written = m
        .set_content(a, Content::Inline(b"data".to_vec()), 4, t(4))
        .unwrap();
    assert_eq!(written.attr.size, 4);
    assert_eq!(m.counts().unwrap(), Counts { files: 4, dirs: 1 });
    assert_eq!(names(&m, ROOT), ["kept"]);
    assert_consistent(&m);

    m.drop_orphan(a).unwrap();
    assert_eq!(err(m.get(a)), "NotFound");
    assert_eq!(err(m.get_xattr(a, b"user.x")), "NotFound");
    assert_eq!(m.counts().unwrap(), Counts { files: 3, dirs: 1 });
    m.drop_orphan(a).unwrap(); // already gone: nothing happens
    m.drop_orphan(kept).unwrap(); // named: left alone
    assert_eq!(m.get(kept).unwrap().attr.nlink, 1);
    assert_consistent(&m);

    assert_eq!(m.purge_orphans().unwrap(), 2);
    assert_eq!(err(m.get(b)), "NotFound");
    assert_eq!(err(m.get(c)), "NotFound");
    assert_eq!(m.purge_orphans().unwrap(), 0);
    assert_eq!(m.counts().unwrap(), Counts { files: 1, dirs: 1 });
    assert_consistent(&m);
}

#[test]
fn rmdir_removes_an_empty_directory() {
    let (_d, m) = store();
    let d = mkdir(&m, ROOT, "d");
    let e = mkdir(&m, d, "e");
    mkfile(&m, d, "f");
    m.set_xattr(e, b"user.k", b"v", XattrFlags::Either, t(2))
        .unwrap();
    assert_eq!(nlink(&m, d), 3);
    assert_eq!(nlink(&m, ROOT), 3);

    assert_eq!(err(m.rmdir(ROOT, b"d", t(5))), "NotEmpty");
    assert_eq!(err(m.rmdir(d, b"f", t(5))), "NotDir");
    assert_eq!(err(m.rmdir(d, b"missing", t(5))), "NotFound");
    assert_eq!(
        err(m.rmdir(m.lookup(d, b"f").unwrap().id, b"x", t(5))),
        "NotDir"
    );
    assert_eq!(err(m.rmdir(InodeId(99), b"x", t(5))), "NotFound");
    assert_eq!(
        m.get(d).unwrap().attr.mtime,
        t(1),
        "failures change nothing"
    );

    m.rmdir(d, b"e", t(6)).unwrap();
    assert_eq!(err(m.get(e)), "NotFound");
    let dir = m.get(d).unwrap();
    assert_eq!(
        (dir.attr.nlink, dir.attr.mtime, dir.attr.ctime),
        (2, t(6), t(6))
    );
    assert_eq!(m.counts().unwrap(), Counts { files: 1, dirs: 2 });
    m.unlink(d, b"f", false, t(7)).unwrap();
    m.rmdir(ROOT, b"d", t(8)).unwrap();
    assert_eq!(nlink(&m, ROOT), 2);
    assert_eq!(m.counts().unwrap(), Counts { files: 0, dirs: 1 });
    assert_consistent(&m);
}

#[test]
fn rename_moves_a_file_and_sets_times() {
    let (_d, m) = store();
    let a = mkdir(&m, ROOT, "a");
    let b = mkdir(&m, ROOT, "b");
    let f = mkfile(&m, a, "f");
    assert_eq!(rename(&m, a, "f", a, "g", PLAIN).unwrap(), None);
    assert_eq!(names(&m, a), ["g"]);
    assert_eq!(m.get(f).unwrap().attr.ctime, t(50));

    m.rename(a, b"g", b, b"h", PLAIN, &nokeep, t(60)).unwrap();
    assert!(names(&m, a).is_empty());
    assert_eq!(names(&m, b), ["h"]);
    assert_eq!(m.lookup(b, b"h").unwrap().id, f);
    let fa = m.get(f).unwrap().attr;
    assert_eq!((fa.ctime, fa.mtime, fa.nlink), (t(60), t(1), 1));
    for dir in [a, b] {
        let attr = m.get(dir).unwrap().attr;
        assert_eq!((attr.mtime, attr.ctime, attr.nlink), (t(60), t(60), 2));
    }
    assert_eq!(m.get(ROOT).unwrap().attr.mtime, t(1));
    assert_consistent(&m);
}

#[test]
fn rename_of_a_directory_moves_one_nlink_and_its_parent_pointer() {
    let (_d, m) = store();
    let a = mkdir(&m, ROOT, "a");
    let b = mkdir(&m, ROOT, "b");
    let c = mkdir(&m, a, "c");
    assert_eq!((nlink(&m, a), nlink(&m, b)), (3, 2));
    rename(&m, a, "c", b, "c", PLAIN).unwrap();
    assert_eq!((nlink(&m, a), nlink(&m, b), nlink(&m, c)), (2, 3, 2));
    assert_eq!(nlink(&m, ROOT), 4);
    // Within one directory the parent keeps its count.
    rename(&m, b, "c", b, "c2", PLAIN).unwrap();
    assert_eq!(nlink(&m, b), 3);
    // c's parent pointer now says b: moving b under c is refused, moving a
    // under c is fine.
    assert_eq!(err(rename(&m, ROOT, "b", c, "b", PLAIN)), "Invalid");
    rename(&m, ROOT, "a", c, "a", PLAIN).unwrap();
    assert_eq!(nlink(&m, c), 3);
    assert_eq!(nlink(&m, ROOT), 3);
    assert_eq!(err(rename(&m, ROOT, "b", a, "b", PLAIN)), "Invalid");
    assert_consistent(&m);
}

#[test]
fn rename_into_its_own_subtree_is_invalid() {
    let (_d, m) = store();
    let a = mkdir(&m, ROOT, "a");
    let b = mkdir(&m, a, "b");
    let c = mkdir(&m, b, "c");
    for (target, name) in [(a, "x"), (b, "x"), (c, "x")] {
        assert_eq!(err(rename(&m, ROOT, "a", target, name, PLAIN)), "Invalid");
        assert_eq!(
            err(rename(&m, ROOT, "a", target, name, NOREPLACE)),
            "Invalid"
        );
    }
    assert_eq!(err(rename(&m, a, "b", c, "x", PLAIN)), "Invalid");
    // Exchanging a directory with its own ancestor is refused both ways.
    assert_eq!(err(rename(&m, b, "c", ROOT, "a", EXCHANGE)), "Invalid");
    assert_eq!(err(rename(&m, ROOT, "a", b, "c", EXCHANGE)), "Invalid");
    // A target that is an ancestor of the source is not empty.
    assert_eq!(err(rename(&m, b, "c", ROOT, "a", PLAIN)), "NotEmpty");
    // A file may go anywhere below.
    mkfile(&m, ROOT, "f");
    rename(&m, ROOT, "f", c, "f", PLAIN).unwrap();
    assert_eq!(names(&m, c), ["f"]);
    assert_eq!(names(&m, ROOT), ["a"]);
    assert_consistent(&m);
}

#[test]
fn rename_replacing_a_file_follows_unlink() {
    let (_d, m) = store();
    let src = mkfile(&m, ROOT, "src");
    let dst = mkfile(&m, ROOT, "dst");
    m.set_xattr(dst, b"user.a", b"1", XattrFlags::Either, t(2))
        .unwrap();
    let asked = Cell::new(None);
    let gone = m
        .rename(
            ROOT,
            b"src",
            ROOT,
            b"dst",
            PLAIN,
            &|ino| {
                asked.set(Some(ino));
                false
            },
            t(70),
        )
        .unwrap()
        .expect("the target lost its last name");
    assert_eq!(asked.get(), Some(dst));
    assert_eq!((gone.id, gone.attr.nlink), (dst, 0));
    assert_eq!(err(m.get(dst)), "NotFound");
    assert_eq!(err(m.get_xattr(dst, b"user.a")), "NotFound");
    assert_eq!(names(&m, ROOT), ["dst"]);
    assert_eq!(m.lookup(ROOT, b"dst").unwrap().id, src);
    assert_eq!(m.counts().unwrap(), Counts { files: 1, dirs: 1 });

    // keep_orphan: the replaced file stays as an orphan.
    let other = mkfile(&m, ROOT, "other");
    let gone = m
        .rename(ROOT, b"dst", ROOT, b"other", PLAIN, &keep, t(71))
        .unwrap()
        .unwrap();
    assert_eq!(gone.id, other);
    let orphan = m.get(other).unwrap();
    assert_eq!((orphan.attr.nlink, orphan.attr.ctime), (0, t(71)));
    assert_eq!(m.purge_orphans().unwrap(), 1);

    // A target with more names loses one and is not reported; keep_orphan
    // is not even asked.
    let linked = mkfile(&m, ROOT, "l1");
    m.link(linked, ROOT, b"l2", t(72)).unwrap();
    let asked = Cell::new(false);
    let gone = m
        .rename(
            ROOT,
            b"other",
            ROOT,
            b"l1",
            PLAIN,
            &|_| {
                asked.set(true);
                true
            },
            t(73),
        )
        .unwrap();
    assert_eq!(gone, None);
    assert!(!asked.get());
    let l = m.get(linked).unwrap();
    assert_eq!((l.attr.nlink, l.attr.ctime), (1, t(73)));
    assert_eq!(names(&m, ROOT), ["l1", "l2"]);
    assert_eq!(m.lookup(ROOT, b"l1").unwrap().id, src);
    assert_consistent(&m);
}

#[test]
fn rename_replacing_a_directory() {
    let (_d, m) = store();
    let a = mkdir(&m, ROOT, "a");
    let b = mkdir(&m, ROOT, "b");
    let sub = mkdir(&m, a, "sub");
    let empty = mkdir(&m, b, "empty");
    let full = mkdir(&m, b, "full");
    mkfile(&m, full, "x");
    let file = mkfile(&m, b, "file");
    assert_eq!((nlink(&m, a), nlink(&m, b)), (3, 4));

    assert_eq!(err(rename(&m, a, "sub", b, "full", PLAIN)), "NotEmpty");
    assert_eq!(err(rename(&m, a, "sub", b, "file", PLAIN)), "NotDir");
    assert_eq!(err(rename(&m, b, "file", b, "empty", PLAIN)), "IsDir");
    assert_eq!(
        (nlink(&m, a), nlink(&m, b)),
        (3, 4),
        "failures change nothing"
    );
    assert_eq!(m.lookup(b, b"file").unwrap().id, file);

    let gone = rename(&m, a, "sub", b, "empty", PLAIN).unwrap().unwrap();
    assert_eq!((gone.id, gone.attr.nlink), (empty, 0));
    assert_eq!(err(m.get(empty)), "NotFound");
    assert_eq!(m.lookup(b, b"empty").unwrap().id, sub);
    assert_eq!((nlink(&m, a), nlink(&m, b)), (2, 4));
    assert_eq!(m.counts().unwrap(), Counts { files: 2, dirs: 5 });
    // Within one directory.
    let e2 = mkdir(&m, b, "e2");
    assert_eq!(nlink(&m, b), 5);
    rename(&m, b, "empty", b, "e2", PLAIN).unwrap();
    assert_eq!(err(m.get(e2)), "NotFound");
    assert_eq!(nlink(&m, b), 4);
    assert_eq!(names(&m, b), ["e2", "file", "full"]);
    assert_consistent(&m);
}

#[test]
fn rename_noreplace() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    let g = mkfile(&m, ROOT, "g");
    assert_eq!(err(rename(&m, ROOT, "f", ROOT, "g", NOREPLACE)), "Exists");
    // As in Linux, even onto itself.
    assert_eq!(err(rename(&m, ROOT, "f", ROOT, "f", NOREPLACE)), "Exists");
    assert_eq!(m.lookup(ROOT, b"g").unwrap().id, g);
    assert_eq!(rename(&m, ROOT, "f", ROOT, "h", NOREPLACE).unwrap(), None);
    assert_eq!(m.lookup(ROOT, b"h").unwrap().id, f);
    assert_eq!(names(&m, ROOT), ["g", "h"]);
    assert_consistent(&m);
}

#[test]
fn rename_exchange() {
    let (_d, m) = store();
    let a = mkdir(&m, ROOT, "a");
    let b = mkdir(&m, ROOT, "b");
    let f = mkfile(&m, a, "f");
    let g = mkfile(&m, b, "g");
    let d = mkdir(&m, b, "d");
    mkfile(&m, d, "inside");

    // Two files.
    assert_eq!(
        m.rename(a, b"f", b, b"g", EXCHANGE, &nokeep, t(80))
            .unwrap(),
        None
    );
    assert_eq!(m.lookup(a, b"f").unwrap().id, g);
    assert_eq!(m.lookup(b, b"g").unwrap().id, f);
    for ino in [f, g] {
        let attr = m.get(ino).unwrap().attr;
        assert_eq!((attr.ctime, attr.nlink), (t(80), 1));
    }
    for dir in [a, b] {
        assert_eq!(m.get(dir).unwrap().attr.mtime, t(80));
    }
    // A file and a non-empty directory, across parents: one nlink moves.
    assert_eq!((nlink(&m, a), nlink(&m, b)), (2, 3));
    rename(&m, a, "f", b, "d", EXCHANGE).unwrap();
    assert_eq!(m.lookup(a, b"f").unwrap().id, d);
    assert_eq!(m.lookup(b, b"d").unwrap().id, g);
    assert_eq!((nlink(&m, a), nlink(&m, b)), (3, 2));
    assert_eq!(names(&m, d), ["inside"], "the directory keeps its contents");
    // The moved directory's parent pointer follows: b can now go into it.
    rename(&m, ROOT, "b", d, "b", PLAIN).unwrap();
    assert_eq!(err(rename(&m, ROOT, "a", d, "x", PLAIN)), "Invalid");
    // Two directories in one parent.
    let x = mkdir(&m, a, "x");
    rename(&m, a, "x", a, "f", EXCHANGE).unwrap();
    assert_eq!(m.lookup(a, b"x").unwrap().id, d);
    assert_eq!(m.lookup(a, b"f").unwrap().id, x);
    assert_eq!(nlink(&m, a), 4);

    assert_eq!(err(rename(&m, a, "x", a, "missing", EXCHANGE)), "NotFound");
    assert_eq!(err(rename(&m, a, "missing", a, "x", EXCHANGE)), "NotFound");
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
    };
    assert_eq!(err(rename(&m, a, "x", a, "f", both)), "Invalid");
    assert_eq!(m.lookup(a, b"x").unwrap().id, d);
    assert_consistent(&m);
}

#[test]
fn rename_onto_the_same_inode_is_a_no_op() {
    let (_d, m) = store();
    let d = mkdir(&m, ROOT, "d");
    let f = mkfile(&m, ROOT, "f");
    m.link(f, d, b"f2", t(5)).unwrap();
    let before_root = m.get(ROOT).unwrap();
    let before_f = m.get(f).unwrap();
    assert_eq!(rename(&m, ROOT, "f", ROOT, "f", PLAIN).unwrap(), None);
    assert_eq!(rename(&m, ROOT, "d", ROOT, "d", PLAIN).unwrap(), None);
    assert_eq!(rename(&m, ROOT, "d", ROOT, "d", EXCHANGE).unwrap(), None);
    // Hard links of one inode: both names stay.
    assert_eq!(rename(&m, ROOT, "f", d, "f2", PLAIN).unwrap(), None);
    assert_eq!(rename(&m, d, "f2", ROOT, "f", EXCHANGE).unwrap(), None);
    assert_eq!(m.get(ROOT).unwrap(), before_root);
    assert_eq!(m.get(f).unwrap(), before_f);
    assert_eq!(nlink(&m, f), 2);
    assert_eq!(names(&m, ROOT), ["d", "f"]);
    assert_eq!(names(&m, d), ["f2"]);
    assert_consistent(&m);
}

#[test]
fn rename_errors() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    assert_eq!(
        err(rename(&m, ROOT, "missing", ROOT, "x", PLAIN)),
        "NotFound"
    );
    assert_eq!(err(rename(&m, f, "x", ROOT, "y", PLAIN)), "NotDir");
    assert_eq!(err(rename(&m, ROOT, "f", f, "y", PLAIN)), "NotDir");
    assert_eq!(
        err(rename(&m, InodeId(99), "x", ROOT, "y", PLAIN)),
        "NotFound"
    );
    assert_eq!(
        err(rename(&m, ROOT, "f", InodeId(99), "y", PLAIN)),
        "NotFound"
    );
    assert_eq!(names(&m, ROOT), ["f"]);
    assert_eq!(m.get(ROOT).unwrap().attr.mtime, t(1));
    assert_consistent(&m);
}

#[test]
fn readdir_is_ordered_and_pages() {
    let (_d, m) = store();
    let d = mkdir(&m, ROOT, "d");
    mkfile(&m, ROOT, "zz"); // a sibling's entries must not show up
    let all: Vec<&[u8]> = vec![b"b", b"B", b"a", b"ab", b"aa", &[0xff], &[0x01], b"a\xffz"];
    for name in &all {
        m.create(d, name, new(FileKind::File), t(1)).unwrap();
    }
    mkdir(&m, d, "sub");
    let mut want: Vec<Vec<u8>> = all.iter().map(|n| n.to_vec()).collect();
    want.push(b"sub".to_vec());
    want.sort();
    let listed = m.readdir(d, None, 100).unwrap();
    assert_eq!(
        listed.iter().map(|e| e.name.clone()).collect::<Vec<_>>(),
        want
    );
    let sub = listed.iter().find(|e| e.name == b"sub").unwrap();
    assert_eq!(sub.kind, FileKind::Dir);
    assert_eq!(sub.ino, m.lookup(d, b"sub").unwrap().id);

    // Paging by 2 gives the same list.
    let mut paged = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = m.readdir(d, after.as_deref(), 2).unwrap();
        assert!(page.len() <= 2);
        if page.is_empty() {
            break;
        }
        after = Some(page.last().unwrap().name.clone());
        paged.extend(page.into_iter().map(|e| e.name));
    }
    assert_eq!(paged, want);
    // `after` is exclusive and need not exist.
    let page = m.readdir(d, Some(b"aa"), 2).unwrap();
    assert_eq!(
        page.iter().map(|e| e.name.as_slice()).collect::<Vec<_>>(),
        [&b"ab"[..], b"a\xffz"]
    );
    let page = m.readdir(d, Some(b"ac"), 1).unwrap();
    assert_eq!(page[0].name, b"a\xffz", "bytes, not characters");
    let page = m.readdir(d, Some(b"a\xff{"), 1).unwrap();
    assert_eq!(page[0].name, b"b");
    assert!(m.readdir(d, Some(&[0xff]), 10).unwrap().is_empty());
    assert!(m.readdir(d, None, 0).unwrap().is_empty());
    assert_eq!(names(&m, ROOT), ["d", "zz"]);
}

#[test]
fn readdir_keeps_directories_apart_past_255_inodes() {
    // Entry keys start with the parent in big-endian order: a directory's
    // entries are one range even when inode numbers cross byte boundaries.
    let (_d, m) = store();
    let mut dirs = Vec::new();
    for i in 0..300 {
        let d = mkdir(&m, ROOT, &format!("d{i:03}"));
        let f = mkfile(&m, d, &format!("f{i}"));
        dirs.push((d, f, i));
    }
    for (d, f, i) in dirs {
        let listed = m.readdir(d, None, 10).unwrap();
        assert_eq!(listed.len(), 1, "directory {d:?}");
        assert_eq!(
            (listed[0].ino, listed[0].name.clone()),
            (f, format!("f{i}").into_bytes())
        );
    }
    assert_eq!(m.readdir(ROOT, None, 1000).unwrap().len(), 300);
    assert_eq!(nlink(&m, ROOT), 302);
    assert_eq!(
        m.counts().unwrap(),
        Counts {
            files: 300,
            dirs: 301
        }
    );
}

#[test]
fn set_attr_changes_only_what_is_given() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    let a = m
        .set_attr(
            f,
            &SetAttr {
                perm: Some(0o170600),
                ..Default::default()
            },
            t(90),
        )
        .unwrap();
    assert_eq!((a.attr.perm, a.attr.uid, a.attr.gid), (0o600, 1000, 100));
    assert_eq!(
        (a.attr.ctime, a.attr.mtime, a.attr.atime),
        (t(90), t(1), t(1))
    );
    let changes = SetAttr {
        uid: Some(7),
        gid: Some(8),
        atime: Some(t(3)),
        mtime: Some(t(4)),
        perm: None,
    };
    let a = m.set_attr(f, &changes, t(91)).unwrap();
    assert_eq!((a.attr.perm, a.attr.uid, a.attr.gid), (0o600, 7, 8));
    assert_eq!(
        (a.attr.atime, a.attr.mtime, a.attr.ctime, a.attr.crtime),
        (t(3), t(4), t(91), t(1))
    );
    assert_eq!(m.get(f).unwrap(), a);
    let a = m.set_attr(f, &SetAttr::default(), t(92)).unwrap();
    assert_eq!(
        (a.attr.ctime, a.attr.uid),
        (t(92), 7),
        "an empty change still sets ctime"
    );
    assert_eq!(
        err(m.set_attr(InodeId(99), &SetAttr::default(), t(92))),
        "NotFound"
    );
}

#[test]
fn set_content_and_for_each_content() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    let g = mkfile(&m, ROOT, "g");
    let d = mkdir(&m, ROOT, "d");
    let s = m.create(ROOT, b"s", symlink(b"t"), t(1)).unwrap().id;
    let id = ChunkId::from_bytes([7; 32]);
    let out = m
        .set_content(f, Content::Recipe(id), 1 << 40, t(100))
        .unwrap();
    assert_eq!(out.content, Content::Recipe(id));
    assert_eq!(out.attr.size, 1 << 40);
    assert_eq!(
        (out.attr.mtime, out.attr.ctime, out.attr.atime),
        (t(100), t(100), t(1))
    );
    assert_eq!(m.get(f).unwrap(), out);
    m.set_content(g, Content::Inline(b"abc".to_vec()), 3, t(101))
        .unwrap();
    assert_eq!(m.get(g).unwrap().content, Content::Inline(b"abc".to_vec()));
    assert_eq!(err(m.set_content(d, Content::Empty, 0, t(102))), "IsDir");
    assert_eq!(err(m.set_content(s, Content::Empty, 0, t(102))), "Invalid");
    assert_eq!(
        err(m.set_content(InodeId(99), Content::Empty, 0, t(102))),
        "NotFound"
    );

    let mut seen = Vec::new();
    m.for_each_content(&mut |ino, c, size| seen.push((ino, c.clone(), size)))
        .unwrap();
    assert_eq!(seen, [(f, Content::Recipe(id), 1 << 40)]);
    // Truncating to empty drops it from the visit.
    m.set_content(f, Content::Empty, 0, t(103)).unwrap();
    let mut n = 0;
    m.for_each_content(&mut |_, _, _| n += 1).unwrap();
    assert_eq!(n, 0);
}

#[test]
fn xattrs() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    let g = mkfile(&m, ROOT, "g");
    assert!(m.list_xattr(f).unwrap().is_empty());
    assert_eq!(err(m.get_xattr(f, b"user.a")), "NoXattr");
    m.set_xattr(f, b"user.b", b"2", XattrFlags::Create, t(110))
        .unwrap();
    assert_eq!(m.get(f).unwrap().attr.ctime, t(110));
    m.set_xattr(f, b"user.a", b"", XattrFlags::Either, t(111))
        .unwrap();
    m.set_xattr(g, b"user.a", b"other", XattrFlags::Either, t(111))
        .unwrap();
    assert_eq!(
        m.list_xattr(f).unwrap(),
        [b"user.a".to_vec(), b"user.b".to_vec()]
    );
    assert_eq!(m.get_xattr(f, b"user.a").unwrap(), b"");
    assert_eq!(m.get_xattr(g, b"user.a").unwrap(), b"other");

    assert_eq!(
        err(m.set_xattr(f, b"user.b", b"3", XattrFlags::Create, t(112))),
        "Exists"
    );
    assert_eq!(
        err(m.set_xattr(f, b"user.c", b"3", XattrFlags::Replace, t(112))),
        "NoXattr"
    );
    assert_eq!(m.get_xattr(f, b"user.b").unwrap(), b"2");
    assert_eq!(
        m.get(f).unwrap().attr.ctime,
        t(111),
        "a refused set changes nothing"
    );
    m.set_xattr(f, b"user.b", b"3", XattrFlags::Replace, t(113))
        .unwrap();
    assert_eq!(m.get_xattr(f, b"user.b").unwrap(), b"3");
    m.set_xattr(f, b"user.b", &vec![9; 10_000], XattrFlags::Either, t(113))
        .unwrap();
    assert_eq!(m.get_xattr(f, b"user.b").unwrap().len(), 10_000);

    m.remove_xattr(f, b"user.a", t(114)).unwrap();
    assert_eq!(m.get(f).unwrap().attr.ctime, t(114));
    assert_eq!(err(m.remove_xattr(f, b"user.a", t(115))), "NoXattr");
    assert_eq!(m.list_xattr(f).unwrap(), [b"user.b".to_vec()]);
    assert_eq!(
        m.get_xattr(g, b"user.a").unwrap(),
        b"other",
        "other inodes untouched"
    );

    // Directories have xattrs too, and the root.
    m.set_xattr(ROOT, b"user.r", b"1", XattrFlags::Either, t(116))
        .unwrap();
    assert_eq!(m.list_xattr(ROOT).unwrap(), [b"user.r".to_vec()]);

    let missing = InodeId(99);
    assert_eq!(err(m.get_xattr(missing, b"user.a")), "NotFound");
    assert_eq!(
        err(m.set_xattr(missing, b"user.a", b"", XattrFlags::Either, t(1))),
        "NotFound"
    );
    assert_eq!(err(m.list_xattr(missing)), "NotFound");
    assert_eq!(err(m.remove_xattr(missing, b"user.a", t(1))), "NotFound");
    assert_eq!(
        err(m.set_xattr(f, b"", b"", XattrFlags::Either, t(1))),
        "Invalid"
    );
    assert_eq!(
        err(m.set_xattr(f, b"a\0b", b"", XattrFlags::Either, t(1))),
        "Invalid"
    );
    assert_eq!(
        err(m.set_xattr(f, &[b'x'; 256], b"", XattrFlags::Either, t(1))),
        "NameTooLong"
    );
    m.set_xattr(f, &[b'x'; 255], b"", XattrFlags::Either, t(1))
        .unwrap();
    assert_consistent(&m);
}

#[test]
fn counts_follow_every_operation() {
    let (_d, m) = store();
    let c = |files, dirs| Counts { files, dirs };
    let d = mkdir(&m, ROOT, "d");
    let f = mkfile(&m, d, "f");
    m.create(d, b"s", symlink(b"x"), t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(2, 2));
    m.link(f, ROOT, b"f2", t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(2, 2));
    m.unlink(d, b"s", false, t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(1, 2));
    m.unlink(d, b"f", false, t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(1, 2));
    m.unlink(ROOT, b"f2", true, t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(1, 2), "an orphan still counts");
    m.drop_orphan(f).unwrap();
    assert_eq!(m.counts().unwrap(), c(0, 2));
    m.rmdir(ROOT, b"d", t(1)).unwrap();
    assert_eq!(m.counts().unwrap(), c(0, 1));
}

#[test]
fn concurrent_mutations_from_many_threads() {
    let (_d, m) = store();
    let m = &m;
    std::thread::scope(|s| {
        for th in 0..4 {
            s.spawn(move || {
                let dir = mkdir(m, ROOT, &format!("t{th}"));
                for i in 0..50 {
                    let f = mkfile(m, dir, &format!("f{i}"));
                    m.link(f, ROOT, format!("t{th}-{i}").as_bytes(), t(2))
                        .unwrap();
                    if i % 2 == 0 {
                        m.unlink(dir, format!("f{i}").as_bytes(), false, t(3))
                            .unwrap();
                    }
                }
            });
        }
    });
    assert_eq!(
        m.counts().unwrap(),
        Counts {
            files: 200,
            dirs: 5
        }
    );
    assert_eq!(nlink(m, ROOT), 6);
    assert_eq!(m.readdir(ROOT, None, 1000).unwrap().len(), 204);
    let mut inos: Vec<u64> = m
        .readdir(ROOT, None, 1000)
        .unwrap()
        .iter()
        .map(|e| e.ino.0)
        .collect();
    inos.sort();
    inos.dedup();
    assert_eq!(inos.len(), 204, "every inode number was handed out once");
    assert_consistent(m);
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
fn create_stores_the_xattrs_it_is_given() {
    let (_d, m) = store();
    let with = NewInode {
        xattrs: vec![
            (b"user.a".to_vec(), b"1".to_vec()),
            (b"system.posix_acl_default".to_vec(), vec![2, 0, 0, 0]),
        ],
        ..new(FileKind::Dir)
    };
    let d = m.create(ROOT, b"d", with, t(5)).unwrap().id;
    assert_eq!(
        m.list_xattr(d).unwrap(),
        [b"system.posix_acl_default".to_vec(), b"user.a".to_vec()]
    );
    assert_eq!(m.get_xattr(d, b"user.a").unwrap(), b"1");
    let bad = NewInode {
        xattrs: vec![(Vec::new(), b"1".to_vec())],
        ..new(FileKind::File)
    };
    assert_eq!(err(m.create(ROOT, b"f", bad, t(6))), "Invalid");
    assert_eq!(err(m.lookup(ROOT, b"f")), "NotFound", "refused whole");
    assert_consistent(&m);
}

#[test]
fn update_changes_attributes_and_xattrs_in_one_step() {
    let (_d, m) = store();
    let f = mkfile(&m, ROOT, "f");
    m.set_xattr(f, b"user.gone", b"x", XattrFlags::Either, t(2))
        .unwrap();
    let changes = SetAttr {
        perm: Some(0o750),
        ..SetAttr::default()
    };
    let set = |name: &[u8], value: Option<&[u8]>| XattrChange {
        name: name.to_vec(),
        value: value.map(<[u8]>::to_vec),
    };
    let a = m
        .update(
            f,
            &changes,
            &[
                set(b"user.new", Some(b"y")),
                set(b"user.gone", None),
                set(b"user.never", None),
            ],
            t(3),
        )
        .unwrap();
    assert_eq!((a.attr.perm, a.attr.ctime), (0o750, t(3)));
    assert_eq!(m.list_xattr(f).unwrap(), [b"user.new".to_vec()]);
    assert_eq!(
        err(m.update(f, &SetAttr::default(), &[set(b"", None)], t(4))),
        "Invalid"
    );
    assert_eq!(m.get(f).unwrap().attr.ctime, t(3), "refused whole");
    assert_consistent(&m);
}
