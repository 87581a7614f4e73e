//! A snapshot and a version keep the chunks of files deleted from the live
//! file system since: a collection frees what no root and no live file
//! reaches, and leaves what a snapshot or a version still holds byte-exact.
//! Once the snapshot is deleted, its chunks go with the next collection.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cas::{ChunkId, Store};
use common::*;
use fs::tree::{self, TreeContent};
use fs::{Fs, FsSettings};
use gc::{GcOptions, Live};
use meta::{InodeId, RedbMeta};

/// The bytes of file `name` in the tree a root (a version or a snapshot)
/// holds.
fn file_in_root(store: &Store, root: &ChunkId, name: &str) -> Vec<u8> {
    let record = tree::read_record(store, root).unwrap();
    let TreeContent::Dir(listing) = record.root.content else {
        panic!("a root's root is a directory");
    };
    let entries = tree::read_listing(store, &listing).unwrap();
    let entry = entries
        .iter()
        .find(|e| e.name == name.as_bytes())
        .unwrap_or_else(|| panic!("{name} is not in the root"));
    let TreeContent::Recipe(id) = entry.content else {
        panic!("{name} is stored as a recipe");
    };
    read(store, id)
}

fn collect_mounted(fs: &Fs) -> gc::GcReport {
    let options = GcOptions {
        threshold: 1.0,
        dry_run: false,
        max_garbage: 1.0,
        compact_index: false,
        peer_wait: gc::PEER_WAIT,
    };
    gc::collect(fs.store(), Live::Mounted(fs), options, &|_| {}).unwrap()
}

#[test]
fn snapshots_and_versions_keep_their_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _branch) = store(dir.path());
    let meta = Arc::new(RedbMeta::open(&dir.path().join("fs.redb"), 0, 0).unwrap());
    // Versions only when the test writes one.
    let settings = FsSettings {
        commit_interval: Duration::from_secs(3600),
        version_interval: Duration::ZERO,
        ..FsSettings::default()
    };
    let fs = Fs::new(meta, store, params(), settings).unwrap();
    let (snapped, versioned, garbage) = (
        random(512 << 10, 11),
        random(512 << 10, 12),
        random(512 << 10, 13),
    );
    // Stays live, so retention never sees an empty namespace.
    create_file(&fs, "stays", b"a small file that stays");

    create_file(&fs, "snapped", &snapped);
    fs.snapshot_create("s").unwrap();
    fs.unlink(InodeId::ROOT, b"snapped").unwrap();
    create_file(&fs, "versioned", &versioned);
    fs.write_version().unwrap();
    fs.unlink(InodeId::ROOT, b"versioned").unwrap();
    create_file(&fs, "garbage", &garbage);
    fs.unlink(InodeId::ROOT, b"garbage").unwrap();
    fs.sync_all().unwrap();

    let report = collect_mounted(&fs);

    let store = fs.store();
    assert!(report.freed_bytes > 0, "{report:?}");
    for id in data_chunks(&garbage, store) {
        assert!(!store.contains(&id).unwrap(), "garbage chunk {id} survived");
    }
    let snapshot = store.get_root("snapshot/s").unwrap();
    assert!(file_in_root(store, &snapshot, "snapped") == snapped);
    let (_, version) = *fs.versions().unwrap().last().expect("a version");
    assert!(file_in_root(store, &version, "versioned") == versioned);
    assert_clean(store);

    fs.snapshot_delete("s").unwrap();
    collect_mounted(&fs);
    let store = fs.store();
    for id in data_chunks(&snapped, store) {
        assert!(
            !store.contains(&id).unwrap(),
            "chunk {id} outlived its snapshot"
        );
    }
    assert!(file_in_root(store, &version, "versioned") == versioned);
    assert_clean(store);
    fs.shutdown().unwrap();
}
