//! A writer that deduplicates against a chunk while a collection runs,
//! after marking looked at the roots, keeps that chunk: the store records
//! the dedup hit, and the collection does not reclaim it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use common::*;
use gc::{GcOptions, GcProgress, Live};

#[test]
fn a_chunk_deduplicated_during_a_collection_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _branch) = store(dir.path());
    let kept = random(256 << 10, 9);
    let garbage = random(1 << 20, 10);
    let kept_root = put(&store, "kept", &kept);
    let garbage_root = put(&store, "garbage", &garbage);
    store.delete_root("garbage").unwrap();

    // Once marking has read the roots, the same bytes are stored again:
    // every chunk is a dedup hit on a chunk nothing marked.
    let again = std::sync::Mutex::new(None);
    let written = AtomicBool::new(false);
    let progress = |p: GcProgress| {
        if matches!(p, GcProgress::Marking { .. }) && !written.swap(true, Ordering::SeqCst) {
            let stored = recipe::store_stream(&store, &garbage[..], params(), &|_| {}).unwrap();
            assert_eq!(stored.stats.new_chunks, 0, "every chunk deduplicates");
            store.put_root("again", &stored.root).unwrap();
            *again.lock().unwrap() = Some(stored.root);
        }
    };
    let options = GcOptions {
        threshold: 1.0,
        dry_run: false,
        max_garbage: 1.0,
        compact_index: false,
        peer_wait: gc::PEER_WAIT,
    };
    gc::collect(&store, Live::StoreOnly, options, &progress).unwrap();

    let again = again.into_inner().unwrap().expect("written during marking");
    assert_eq!(again, garbage_root, "the same bytes make the same recipe");
    for id in data_chunks(&garbage, &store) {
        assert!(
            store.contains(&id).unwrap(),
            "deduplicated chunk {id} was freed"
        );
    }
    assert!(read(&store, again) == garbage);
    assert!(read(&store, kept_root) == kept);
    assert_clean(&store);
    // Without the writer, the same chunks are garbage: the next collection
    // frees them, so it was the dedup hit that kept them.
    store.delete_root("again").unwrap();
    collect(&store, 1.0, false);
    assert!(!store.contains(&garbage_root).unwrap());
}
