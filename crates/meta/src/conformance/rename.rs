//! Rename: moves, replacing a file or a directory, noreplace, exchange,
//! the same inode, parent pointers, a directory into its own subtree, errors.

use super::*;
use crate::{Counts, InodeId, MetaStore, RenameFlags, XattrFlags};
use std::cell::Cell;

pub fn rename_moves_a_file_and_sets_times(m: &dyn MetaStore) {
    let a = mkdir(m, ROOT, "a");
    let b = mkdir(m, ROOT, "b");
    let f = mkfile(m, a, "f");
    assert_eq!(rename(m, a, "f", a, "g", PLAIN).unwrap(), None);
    assert_eq!(names(m, a), ["g"]);
    assert_eq!(m.get(f).unwrap().attr.ctime, t(50));

    m.rename(a, b"g", b, b"h", PLAIN, &nokeep, t(60)).unwrap();
    assert!(names(m, a).is_empty());
    assert_eq!(names(m, b), ["h"]);
    assert_eq!(m.lookup(b, b"h").unwrap().id, f);
    let fa = m.get(f).unwrap().attr;
    assert_eq!((fa.ctime, fa.mtime, fa.nlink), (t(60), t(1), 1));
    for dir in [a, b] {
        let attr = m.get(dir).unwrap().attr;
        assert_eq!((attr.mtime, attr.ctime, attr.nlink), (t(60), t(60), 2));
    }
    assert_eq!(m.get(ROOT).unwrap().attr.mtime, t(1));
    consistent(m);
}

pub fn rename_of_a_directory_moves_one_nlink_and_its_parent_pointer(m: &dyn MetaStore) {
    let a = mkdir(m, ROOT, "a");
    let b = mkdir(m, ROOT, "b");
    let c = mkdir(m, a, "c");
    assert_eq!((nlink(m, a), nlink(m, b)), (3, 2));
    rename(m, a, "c", b, "c", PLAIN).unwrap();
    assert_eq!((nlink(m, a), nlink(m, b), nlink(m, c)), (2, 3, 2));
    assert_eq!(nlink(m, ROOT), 4);
    // Within one directory the parent keeps its count.
    rename(m, b, "c", b, "c2", PLAIN).unwrap();
    assert_eq!(nlink(m, b), 3);
    // c's parent pointer now says b: moving b under c is refused, moving a
    // under c is fine.
    assert_eq!(err(rename(m, ROOT, "b", c, "b", PLAIN)), "Invalid");
    rename(m, ROOT, "a", c, "a", PLAIN).unwrap();
    assert_eq!(nlink(m, c), 3);
    assert_eq!(nlink(m, ROOT), 3);
    assert_eq!(err(rename(m, ROOT, "b", a, "b", PLAIN)), "Invalid");
    consistent(m);
}

pub fn rename_into_its_own_subtree_is_invalid(m: &dyn MetaStore) {
    let a = mkdir(m, ROOT, "a");
    let b = mkdir(m, a, "b");
    let c = mkdir(m, b, "c");
    for (target, name) in [(a, "x"), (b, "x"), (c, "x")] {
        assert_eq!(err(rename(m, ROOT, "a", target, name, PLAIN)), "Invalid");
        assert_eq!(
            err(rename(m, ROOT, "a", target, name, NOREPLACE)),
            "Invalid"
        );
    }
    assert_eq!(err(rename(m, a, "b", c, "x", PLAIN)), "Invalid");
    // Exchanging a directory with its own ancestor is refused both ways.
    assert_eq!(err(rename(m, b, "c", ROOT, "a", EXCHANGE)), "Invalid");
    assert_eq!(err(rename(m, ROOT, "a", b, "c", EXCHANGE)), "Invalid");
    // A target that is an ancestor of the source is not empty.
    assert_eq!(err(rename(m, b, "c", ROOT, "a", PLAIN)), "NotEmpty");
    // A file may go anywhere below.
    mkfile(m, ROOT, "f");
    rename(m, ROOT, "f", c, "f", PLAIN).unwrap();
    assert_eq!(names(m, c), ["f"]);
    assert_eq!(names(m, ROOT), ["a"]);
    consistent(m);
}

pub fn rename_replacing_a_file_follows_unlink(m: &dyn MetaStore) {
    let src = mkfile(m, ROOT, "src");
    let dst = mkfile(m, ROOT, "dst");
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
    assert_eq!(names(m, ROOT), ["dst"]);
    assert_eq!(m.lookup(ROOT, b"dst").unwrap().id, src);
    assert_eq!(m.counts().unwrap(), Counts { files: 1, dirs: 1 });

    // keep_orphan: the replaced file stays as an orphan.
    let other = mkfile(m, ROOT, "other");
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
    let linked = mkfile(m, ROOT, "l1");
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
    assert_eq!(names(m, ROOT), ["l1", "l2"]);
    assert_eq!(m.lookup(ROOT, b"l1").unwrap().id, src);
    consistent(m);
}

pub fn rename_replacing_a_directory(m: &dyn MetaStore) {
    let a = mkdir(m, ROOT, "a");
    let b = mkdir(m, ROOT, "b");
    let sub = mkdir(m, a, "sub");
    let empty = mkdir(m, b, "empty");
    let full = mkdir(m, b, "full");
    mkfile(m, full, "x");
    let file = mkfile(m, b, "file");
    assert_eq!((nlink(m, a), nlink(m, b)), (3, 4));

    assert_eq!(err(rename(m, a, "sub", b, "full", PLAIN)), "NotEmpty");
    assert_eq!(err(rename(m, a, "sub", b, "file", PLAIN)), "NotDir");
    assert_eq!(err(rename(m, b, "file", b, "empty", PLAIN)), "IsDir");
    assert_eq!(
        (nlink(m, a), nlink(m, b)),
        (3, 4),
        "failures change nothing"
    );
    assert_eq!(m.lookup(b, b"file").unwrap().id, file);

    let gone = rename(m, a, "sub", b, "empty", PLAIN).unwrap().unwrap();
    assert_eq!((gone.id, gone.attr.nlink), (empty, 0));
    assert_eq!(err(m.get(empty)), "NotFound");
    assert_eq!(m.lookup(b, b"empty").unwrap().id, sub);
    assert_eq!((nlink(m, a), nlink(m, b)), (2, 4));
    assert_eq!(m.counts().unwrap(), Counts { files: 2, dirs: 5 });
    // Within one directory.
    let e2 = mkdir(m, b, "e2");
    assert_eq!(nlink(m, b), 5);
    rename(m, b, "empty", b, "e2", PLAIN).unwrap();
    assert_eq!(err(m.get(e2)), "NotFound");
    assert_eq!(nlink(m, b), 4);
    assert_eq!(names(m, b), ["e2", "file", "full"]);
    consistent(m);
}

pub fn rename_noreplace(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
    let g = mkfile(m, ROOT, "g");
    assert_eq!(err(rename(m, ROOT, "f", ROOT, "g", NOREPLACE)), "Exists");
    // As in Linux, even onto itself.
    assert_eq!(err(rename(m, ROOT, "f", ROOT, "f", NOREPLACE)), "Exists");
    assert_eq!(m.lookup(ROOT, b"g").unwrap().id, g);
    assert_eq!(rename(m, ROOT, "f", ROOT, "h", NOREPLACE).unwrap(), None);
    assert_eq!(m.lookup(ROOT, b"h").unwrap().id, f);
    assert_eq!(names(m, ROOT), ["g", "h"]);
    consistent(m);
}

pub fn rename_exchange(m: &dyn MetaStore) {
    let a = mkdir(m, ROOT, "a");
    let b = mkdir(m, ROOT, "b");
    let f = mkfile(m, a, "f");
    let g = mkfile(m, b, "g");
    let d = mkdir(m, b, "d");
    mkfile(m, d, "inside");

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
    assert_eq!((nlink(m, a), nlink(m, b)), (2, 3));
    rename(m, a, "f", b, "d", EXCHANGE).unwrap();
    assert_eq!(m.lookup(a, b"f").unwrap().id, d);
    assert_eq!(m.lookup(b, b"d").unwrap().id, g);
    assert_eq!((nlink(m, a), nlink(m, b)), (3, 2));
    assert_eq!(names(m, d), ["inside"], "the directory keeps its contents");
    // The moved directory's parent pointer follows: b can now go into it.
    rename(m, ROOT, "b", d, "b", PLAIN).unwrap();
    assert_eq!(err(rename(m, ROOT, "a", d, "x", PLAIN)), "Invalid");
    // Two directories in one parent.
    let x = mkdir(m, a, "x");
    rename(m, a, "x", a, "f", EXCHANGE).unwrap();
    assert_eq!(m.lookup(a, b"x").unwrap().id, d);
    assert_eq!(m.lookup(a, b"f").unwrap().id, x);
    assert_eq!(nlink(m, a), 4);

    assert_eq!(err(rename(m, a, "x", a, "missing", EXCHANGE)), "NotFound");
    assert_eq!(err(rename(m, a, "missing", a, "x", EXCHANGE)), "NotFound");
    let both = RenameFlags {
        noreplace: true,
        exchange: true,
    };
    assert_eq!(err(rename(m, a, "x", a, "f", both)), "Invalid");
    assert_eq!(m.lookup(a, b"x").unwrap().id, d);
    consistent(m);
}

pub fn rename_onto_the_same_inode_is_a_no_op(m: &dyn MetaStore) {
    let d = mkdir(m, ROOT, "d");
    let f = mkfile(m, ROOT, "f");
    m.link(f, d, b"f2", t(5)).unwrap();
    let before_root = m.get(ROOT).unwrap();
    let before_f = m.get(f).unwrap();
    assert_eq!(rename(m, ROOT, "f", ROOT, "f", PLAIN).unwrap(), None);
    assert_eq!(rename(m, ROOT, "d", ROOT, "d", PLAIN).unwrap(), None);
    assert_eq!(rename(m, ROOT, "d", ROOT, "d", EXCHANGE).unwrap(), None);
    // Hard links of one inode: both names stay.
    assert_eq!(rename(m, ROOT, "f", d, "f2", PLAIN).unwrap(), None);
    assert_eq!(rename(m, d, "f2", ROOT, "f", EXCHANGE).unwrap(), None);
    assert_eq!(m.get(ROOT).unwrap(), before_root);
    assert_eq!(m.get(f).unwrap(), before_f);
    assert_eq!(nlink(m, f), 2);
    assert_eq!(names(m, ROOT), ["d", "f"]);
    assert_eq!(names(m, d), ["f2"]);
    consistent(m);
}

pub fn rename_errors(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
    assert_eq!(
        err(rename(m, ROOT, "missing", ROOT, "x", PLAIN)),
        "NotFound"
    );
    assert_eq!(err(rename(m, f, "x", ROOT, "y", PLAIN)), "NotDir");
    assert_eq!(err(rename(m, ROOT, "f", f, "y", PLAIN)), "NotDir");
    assert_eq!(
        err(rename(m, InodeId(99), "x", ROOT, "y", PLAIN)),
        "NotFound"
    );
    assert_eq!(
        err(rename(m, ROOT, "f", InodeId(99), "y", PLAIN)),
        "NotFound"
    );
    assert_eq!(names(m, ROOT), ["f"]);
    assert_eq!(m.get(ROOT).unwrap().attr.mtime, t(1));
    consistent(m);
}
