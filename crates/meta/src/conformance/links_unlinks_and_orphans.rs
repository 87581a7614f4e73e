//! Hard links, unlinks, orphans kept for open handles, and rmdir: the
//! nlink and ctime rules.

use super::*;
use crate::{Content, Counts, FileKind, InodeId, MetaStore, XattrFlags};

pub fn link_raises_nlink_and_ctime(m: &dyn MetaStore) {
    let d = mkdir(m, ROOT, "d");
    let f = mkfile(m, ROOT, "f");
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
    assert_eq!(nlink(m, f), 3);
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
    assert_eq!(nlink(m, f), 3);
    consistent(m);
}

pub fn link_of_an_orphan_is_refused(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
    m.unlink(ROOT, b"f", true, t(2)).unwrap();
    assert_eq!(err(m.link(f, ROOT, b"again", t(3))), "NotFound");
    assert_eq!(nlink(m, f), 0);
    consistent(m);
}

pub fn unlink_lowers_nlink_then_deletes(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
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
    assert_eq!(names(m, ROOT), ["g"]);

    let after = m.unlink(ROOT, b"g", false, t(31)).unwrap();
    assert_eq!((after.id, after.attr.nlink), (f, 0));
    assert_eq!(err(m.get(f)), "NotFound");
    assert_eq!(err(m.get_xattr(f, b"user.a")), "NotFound");
    assert_eq!(m.counts().unwrap(), Counts { files: 0, dirs: 1 });
    assert!(names(m, ROOT).is_empty());
    consistent(m);
}

pub fn unlink_errors(m: &dyn MetaStore) {
    let d = mkdir(m, ROOT, "d");
    let f = mkfile(m, ROOT, "f");
    assert_eq!(err(m.unlink(ROOT, b"d", false, t(2))), "IsDir");
    assert_eq!(err(m.unlink(ROOT, b"missing", false, t(2))), "NotFound");
    assert_eq!(err(m.unlink(f, b"x", false, t(2))), "NotDir");
    assert_eq!(err(m.unlink(InodeId(99), b"x", false, t(2))), "NotFound");
    assert_eq!(m.get(ROOT).unwrap().attr.mtime, t(1));
    assert_eq!(nlink(m, d), 2);
    assert_eq!(nlink(m, f), 1);
    consistent(m);
}

pub fn orphans_live_until_dropped_or_purged(m: &dyn MetaStore) {
    let a = mkfile(m, ROOT, "a");
    let b = mkfile(m, ROOT, "b");
    let c = mkfile(m, ROOT, "c");
    let kept = mkfile(m, ROOT, "kept");
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
    assert_eq!(names(m, ROOT), ["kept"]);
    consistent(m);

    m.drop_orphan(a).unwrap();
    assert_eq!(err(m.get(a)), "NotFound");
    assert_eq!(err(m.get_xattr(a, b"user.x")), "NotFound");
    assert_eq!(m.counts().unwrap(), Counts { files: 3, dirs: 1 });
    m.drop_orphan(a).unwrap(); // already gone: nothing happens
    m.drop_orphan(kept).unwrap(); // named: left alone
    assert_eq!(m.get(kept).unwrap().attr.nlink, 1);
    consistent(m);

    assert_eq!(m.purge_orphans().unwrap(), 2);
    assert_eq!(err(m.get(b)), "NotFound");
    assert_eq!(err(m.get(c)), "NotFound");
    assert_eq!(m.purge_orphans().unwrap(), 0);
    assert_eq!(m.counts().unwrap(), Counts { files: 1, dirs: 1 });
    consistent(m);
}

pub fn rmdir_removes_an_empty_directory(m: &dyn MetaStore) {
    let d = mkdir(m, ROOT, "d");
    let e = mkdir(m, d, "e");
    mkfile(m, d, "f");
    m.set_xattr(e, b"user.k", b"v", XattrFlags::Either, t(2))
        .unwrap();
    assert_eq!(nlink(m, d), 3);
    assert_eq!(nlink(m, ROOT), 3);

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
    assert_eq!(nlink(m, ROOT), 2);
    assert_eq!(m.counts().unwrap(), Counts { files: 0, dirs: 1 });
    consistent(m);
}
