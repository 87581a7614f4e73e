//! Creating inodes (attributes, links, times, xattrs), the names every
//! operation checks, and lookups.

use super::*;
use crate::{Content, Counts, FileKind, InodeId, MetaStore, NewInode, NAME_MAX};
use ids::ChunkId;

pub fn create_sets_attributes_links_and_times(m: &dyn MetaStore) {
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
    // A new number; an engine sharded over several clusters puts the
    // directory's shard in its high bits, so not necessarily 3.
    assert!(d.id != f.id && d.id != ROOT && d.id.0 & 0xffff_ffff_ffff == 3);
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
    consistent(m);
}

pub fn create_errors_change_nothing(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
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
    assert_eq!(mkfile(m, ROOT, "g"), InodeId(f.0 + 1));
    consistent(m);
}

pub fn create_stores_the_xattrs_it_is_given(m: &dyn MetaStore) {
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
    consistent(m);
}

pub fn names_are_checked_everywhere(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
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
    consistent(m);
}

pub fn lookup_and_get_errors(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
    assert_eq!(err(m.lookup(ROOT, b"missing")), "NotFound");
    assert_eq!(err(m.lookup(f, b"x")), "NotDir");
    assert_eq!(err(m.lookup(InodeId(77), b"x")), "NotFound");
    assert_eq!(err(m.get(InodeId(77))), "NotFound");
    assert_eq!(err(m.get(InodeId(0))), "NotFound");
    assert_eq!(err(m.readdir(f, None, 10)), "NotDir");
    assert_eq!(err(m.readdir(InodeId(77), None, 10)), "NotFound");
}

/// `get_many` answers as `get` does, inode by inode, in the order asked,
/// missing ones included.
pub fn get_many_answers_as_get(m: &dyn MetaStore) {
    let f = mkfile(m, ROOT, "f");
    let d = m.create(ROOT, b"d", new(FileKind::Dir), t(2)).unwrap().id;
    let g = mkfile(m, d, "g");
    let asked = [g, InodeId(77), ROOT, f, d, f, InodeId(0)];
    let many = m.get_many(&asked);
    assert_eq!(many.len(), asked.len());
    for (ino, got) in asked.iter().zip(many) {
        match (m.get(*ino), got) {
            (Ok(one), Ok(together)) => assert_eq!(one, together, "inode {ino:?}"),
            (Err(a), Err(b)) => assert_eq!(err::<()>(Err(a)), err::<()>(Err(b))),
            (a, b) => panic!("inode {ino:?}: get {a:?}, get_many {b:?}"),
        }
    }
    assert!(m.get_many(&[]).is_empty());
}
