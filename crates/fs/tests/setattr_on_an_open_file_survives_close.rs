//! What a tool sets through an open handle after writing (futimens,
//! fchmod, fchown, ftruncate) is what the file has after flush and close,
//! on a real store and metadata engine; a write after it sets the mtime
//! again, as on ext4.

mod common;

use std::sync::Arc;

use chunking::ChunkerParams;
use fs::{Fs, FsSettings};
use meta::{Content, FileKind, InodeId, NewInode, SetAttr, Timestamp};

fn fs_in(dir: &std::path::Path) -> Fs {
    let (store, meta) = common::store_and_meta(dir);
    Fs::new(
        Arc::new(meta),
        store,
        ChunkerParams::default(),
        FsSettings::default(),
    )
    .unwrap()
}

fn new_file() -> NewInode {
    NewInode {
        kind: FileKind::File,
        perm: 0o600,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

const OLD: Timestamp = Timestamp {
    secs: 946_684_799,
    nanos: 123_456_789,
};
const OLDER: Timestamp = Timestamp {
    secs: 915_148_799,
    nanos: 987_654_321,
};

#[test]
fn attributes_set_on_an_open_file_survive_flush_and_close() {
    let dir = tempfile::tempdir().unwrap();
    let fs = fs_in(dir.path());
    // An inline file and one stored as chunks.
    for (name, len) in [("small", 100usize), ("large", 3 << 20)] {
        let ino = fs
            .create(InodeId::ROOT, name.as_bytes(), new_file())
            .unwrap()
            .id;
        fs.open(ino).unwrap();
        let data = vec![b'x'; len];
        for (i, piece) in data.chunks(1 << 20).enumerate() {
            fs.write(ino, (i << 20) as u64, piece).unwrap();
        }
        // What copy tools do before they close the copy, one call each.
        let owner = SetAttr {
            uid: Some(4242),
            gid: Some(4343),
            ..SetAttr::default()
        };
        let mode = SetAttr {
            perm: Some(0o4751),
            ..SetAttr::default()
        };
        let times = SetAttr {
            atime: Some(OLDER),
            mtime: Some(OLD),
            ..SetAttr::default()
        };
        fs.setattr(ino, &SetAttr::default(), Some(len as u64 - 10))
            .unwrap();
        // Written after the truncate: content not yet recorded at close.
        fs.write(ino, 1, b"z").unwrap();
        fs.setattr(ino, &owner, None).unwrap();
        fs.setattr(ino, &mode, None).unwrap();
        fs.setattr(ino, &times, None).unwrap();
        let seen = fs.getattr(ino).unwrap().attr;
        assert_eq!(seen.mtime, OLD, "{name}: while open");
        fs.flush(ino).unwrap();
        fs.release(ino).unwrap();
        fs.sync_all().unwrap();
        let a = fs.getattr(ino).unwrap().attr;
        assert_eq!(
            (a.perm, a.uid, a.gid, a.atime, a.mtime, a.size),
            (0o4751, 4242, 4343, OLDER, OLD, len as u64 - 10),
            "{name}: after close"
        );
        assert!(a.ctime > OLD, "{name}: ctime is the change's own time");

        // A write after the explicit mtime sets it again.
        fs.open(ino).unwrap();
        fs.write(ino, 0, b"y").unwrap();
        fs.flush(ino).unwrap();
        fs.release(ino).unwrap();
        let a = fs.getattr(ino).unwrap().attr;
        assert!(a.mtime > OLD, "{name}: a later write moves the mtime");
        assert_eq!(fs.read(ino, 0, 3).unwrap(), b"yzx");
    }
    fs.shutdown().unwrap();
}
