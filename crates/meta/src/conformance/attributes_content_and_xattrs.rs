//! Changing attributes, content and extended attributes, alone or in one
//! step.

use super::*;
use crate::{Content, InodeId, MetaStore, SetAttr, XattrChange, XattrFlags};
use ids::ChunkId;

pub fn set_attr_changes_only_what_is_given(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
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

pub fn set_content_and_for_each_content(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
    let g = mkfile(m, ROOT, "g");
    let d = mkdir(m, ROOT, "d");
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

pub fn xattrs(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
    let g = mkfile(m, ROOT, "g");
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
    consistent(m);
}

pub fn update_changes_attributes_and_xattrs_in_one_step(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
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
    consistent(m);
}
