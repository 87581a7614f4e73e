//! An ACL an older repository kept without checking it (any bytes were
//! stored under `system.posix_acl_*`) that does not parse makes creating
//! under it and chmod fail with EIO, not EINVAL as if the caller had asked
//! for something wrong; removing it, or setting a good one, mends it.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{acl, Caller, Fs, FsSettings};
use meta::{Content, FileKind, InodeId, MetaStore, NewInode, SetAttr, Timestamp, XattrFlags};

fn new(kind: FileKind) -> NewInode {
    NewInode {
        kind,
        perm: 0o777,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

#[test]
fn a_damaged_stored_acl_reads_eio_until_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, meta) = common::store_and_meta(dir.path());
    let meta = Arc::new(meta);
    let fs = Fs::new(
        meta.clone(),
        store,
        ChunkerParams::default(),
        FsSettings::default(),
    )
    .unwrap();
    let d = fs
        .create(InodeId::ROOT, b"d", new(FileKind::Dir))
        .unwrap()
        .id;
    // Written past fs, as an older version stored any value.
    let t = Timestamp::now();
    meta.set_xattr(d, acl::DEFAULT, b"junk", XattrFlags::Either, t)
        .unwrap();
    meta.set_xattr(d, acl::ACCESS, b"junk", XattrFlags::Either, t)
        .unwrap();

    let made = fs.create_posix(d, b"f", new(FileKind::File), 0o022);
    assert_eq!(made.unwrap_err().errno(), libc::EIO);
    let chmod = SetAttr {
        perm: Some(0o700),
        ..SetAttr::default()
    };
    assert_eq!(fs.setattr(d, &chmod, None).unwrap_err().errno(), libc::EIO);

    fs.remove_xattr(d, acl::DEFAULT).unwrap();
    let f = fs
        .create_posix(d, b"f", new(FileKind::File), 0o022)
        .unwrap();
    assert_eq!(f.attr.perm, 0o755, "the umask, with no default ACL");
    // user::rwx, group::r-x, other::---: a good ACL replaces the junk.
    let good = [
        2, 0, 0, 0, 1, 0, 7, 0, 255, 255, 255, 255, 4, 0, 5, 0, 255, 255, 255, 255, 0x20, 0, 0, 0,
        255, 255, 255, 255,
    ];
    fs.set_xattr(d, acl::ACCESS, &good, XattrFlags::Either, &Caller::root())
        .unwrap();
    assert_eq!(fs.getattr(d).unwrap().attr.perm, 0o750);
    assert_eq!(fs.setattr(d, &chmod, None).unwrap().attr.perm, 0o700);
    fs.shutdown().unwrap();
}
