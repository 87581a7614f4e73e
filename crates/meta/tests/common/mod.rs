#![allow(dead_code)]

use meta::{
    Content, FileKind, InodeId, MetaError, MetaStore, NewInode, RedbMeta, RenameFlags, Timestamp,
};

pub const ROOT: InodeId = InodeId::ROOT;

pub fn store() -> (tempfile::TempDir, RedbMeta) {
    let dir = tempfile::tempdir().unwrap();
    let meta = RedbMeta::open(&dir.path().join("meta.redb"), 1000, 1000).unwrap();
    (dir, meta)
}

pub fn t(secs: i64) -> Timestamp {
    Timestamp { secs, nanos: 7 }
}

pub fn new(kind: FileKind) -> NewInode {
    NewInode {
        kind,
        perm: 0o644,
        uid: 1000,
        gid: 100,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

pub fn symlink(target: &[u8]) -> NewInode {
    NewInode {
        content: Content::Inline(target.to_vec()),
        ..new(FileKind::Symlink)
    }
}

pub fn mkfile(m: &RedbMeta, parent: InodeId, name: &str) -> InodeId {
    m.create(parent, name.as_bytes(), new(FileKind::File), t(1))
        .unwrap()
        .id
}

pub fn mkdir(m: &RedbMeta, parent: InodeId, name: &str) -> InodeId {
    m.create(parent, name.as_bytes(), new(FileKind::Dir), t(1))
        .unwrap()
        .id
}

pub fn nlink(m: &RedbMeta, ino: InodeId) -> u32 {
    m.get(ino).unwrap().attr.nlink
}

/// Every name in `dir`, in order.
pub fn names(m: &RedbMeta, dir: InodeId) -> Vec<String> {
    m.readdir(dir, None, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect()
}

/// A short name for an error's kind, to compare outcomes.
pub fn kind(e: &MetaError) -> &'static str {
    match e {
        MetaError::NotFound => "NotFound",
        MetaError::Exists => "Exists",
        MetaError::NotEmpty => "NotEmpty",
        MetaError::NotDir => "NotDir",
        MetaError::IsDir => "IsDir",
        MetaError::NameTooLong => "NameTooLong",
        MetaError::NoXattr => "NoXattr",
        MetaError::Invalid(_) => "Invalid",
        MetaError::Store(_) => "Store",
        MetaError::Open { .. } => "Open",
        MetaError::Busy(_) => "Busy",
        MetaError::NoSpace { .. } => "NoSpace",
        MetaError::RootMissing(_) => "RootMissing",
        MetaError::Remote(_) => "Remote",
    }
}

pub fn err<T: std::fmt::Debug>(r: meta::Result<T>) -> &'static str {
    kind(&r.expect_err("expected an error"))
}

pub fn assert_consistent(m: &RedbMeta) {
    let problems = m.verify().unwrap();
    assert!(problems.is_empty(), "store inconsistent: {problems:#?}");
}

pub const NOREPLACE: RenameFlags = RenameFlags {
    noreplace: true,
    exchange: false,
};

pub const EXCHANGE: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: true,
};

pub const PLAIN: RenameFlags = RenameFlags {
    noreplace: false,
    exchange: false,
};

pub fn keep(_: InodeId) -> bool {
    true
}

pub fn nokeep(_: InodeId) -> bool {
    false
}

pub fn rename(
    m: &RedbMeta,
    p: InodeId,
    n: &str,
    np: InodeId,
    nn: &str,
    flags: RenameFlags,
) -> meta::Result<Option<meta::Inode>> {
    m.rename(p, n.as_bytes(), np, nn.as_bytes(), flags, &nokeep, t(50))
}
