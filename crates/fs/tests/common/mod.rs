//! A store and a metadata engine in a temporary directory, for the tests
//! that build an `Fs` over them.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use branch::LocalDir;
use cas::{RepoKey, Store, StoreSettings};
use meta::RedbMeta;

/// A plain local branch under `dir/branch`, the index under `dir/meta`, and
/// the file-system metadata in `dir/fs.redb`.
pub fn store_and_meta(dir: &Path) -> (Store, RedbMeta) {
    let (branch, _) = LocalDir::open("local", dir.join("branch")).unwrap();
    std::fs::create_dir(dir.join("meta")).unwrap();
    let store = Store::open(
        Arc::new(branch),
        &dir.join("meta"),
        RepoKey::generate(),
        StoreSettings::default(),
    )
    .unwrap();
    let meta = RedbMeta::open(&dir.join("fs.redb"), 0, 0).unwrap();
    (store, meta)
}

/// A collection that rewrites every container holding any garbage.
pub fn collect_all(fs: &fs::Fs) -> gc::GcReport {
    let options = gc::GcOptions {
        threshold: 1.0,
        dry_run: false,
        max_garbage: 1.0,
        compact_index: false,
        peer_wait: gc::PEER_WAIT,
    };
    gc::collect(fs.store(), gc::Live::Mounted(fs), options, &|_| {}).unwrap()
}

/// What a new empty regular file is created with (0644, root's).
pub fn new_file() -> meta::NewInode {
    meta::NewInode {
        kind: meta::FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: meta::Content::Empty,
        xattrs: Vec::new(),
    }
}
