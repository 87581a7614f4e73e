//! redb never shrinks its file: after a collection dropped most chunks,
//! `index.redb` keeps its size until the collection compacts it. The
//! compaction gives the space back and the index still answers for every
//! live chunk.

mod common;

use common::*;
use gc::{GcOptions, Live};

/// Small chunks, so that a few megabytes make thousands of index rows.
const SMALL: u32 = 4 << 10;

fn put_small(store: &cas::Store, label: &str, data: &[u8]) -> cas::ChunkId {
    let params = chunking::ChunkerParams::Fixed { size: SMALL };
    let stored = recipe::store_stream(store, data, params, &|_| {}).unwrap();
    store.put_root(label, &stored.root).unwrap();
    stored.root
}

fn index_size(dir: &std::path::Path) -> u64 {
    std::fs::metadata(dir.join("meta").join(cas::INDEX_FILE))
        .unwrap()
        .len()
}

fn options(compact_index: bool) -> GcOptions {
    GcOptions {
        threshold: 1.0,
        max_garbage: 1.0,
        dry_run: false,
        compact_index,
        peer_wait: gc::PEER_WAIT,
    }
}

#[test]
fn an_offline_collection_compacts_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _branch) = store(dir.path());
    let kept = random(256 << 10, 1);
    let kept_root = put_small(&store, "kept", &kept);
    put_small(&store, "dropped", &random(24 << 20, 2));
    store.delete_root("dropped").unwrap();

    let full = index_size(dir.path());
    let swept = gc::collect(&store, Live::StoreOnly, options(false), &|_| {}).unwrap();
    assert!(swept.dropped_chunks > 6000, "{swept:?}");
    assert_eq!(swept.index_bytes_freed, 0);
    let after_sweep = index_size(dir.path());
    assert!(
        after_sweep >= full,
        "redb shrank by itself ({full} -> {after_sweep}): the compaction is not what this measures"
    );

    let compacted = gc::collect(&store, Live::StoreOnly, options(true), &|_| {}).unwrap();
    let after = index_size(dir.path());
    assert!(
        after * 2 < after_sweep,
        "the index kept {after} of {after_sweep} bytes for a tenth of its rows"
    );
    assert_eq!(compacted.index_bytes_freed, after_sweep - after);

    assert_eq!(read(&store, kept_root), kept);
    assert_clean(&store);
}
