//! `Store::stored_bytes`, the counter `statfs` reads, agrees with the sum
//! over the index's container rows after writes, a collection, a reopen
//! and a rebuild.

mod common;

use cas::{ChunkId, RepoKey, Store};

use common::*;

fn summed(store: &Store) -> u64 {
    store.stats().unwrap().stored_bytes
}

#[test]
fn the_stored_bytes_counter_agrees_with_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    assert_eq!(store.stored_bytes(), 0);
    let mut w = store.stream();
    let kept = w.write_chunk(random(300_000)).unwrap();
    w.flush().unwrap();
    drop(w);
    let mut w = store.stream();
    let dropped = w.write_chunk(random(200_000)).unwrap();
    w.flush().unwrap();
    drop(w);
    let written = store.stored_bytes();
    assert!(written > 500_000, "{written}: random bytes do not compress");
    assert_eq!(written, summed(&store));

    let doomed = store.locate(&dropped).unwrap().container;
    let gc = store.begin_collection().unwrap();
    let live = |id: &ChunkId| *id == kept;
    gc.prepare(doomed, &live).unwrap();
    assert_eq!(gc.commit().unwrap().containers, 1);
    drop(gc);
    let after_gc = store.stored_bytes();
    assert!(after_gc < written - 200_000, "{after_gc} of {written}");
    assert_eq!(after_gc, summed(&store));
    drop(store);

    let (store, _) = open(dir.path(), &key);
    assert_eq!(store.stored_bytes(), after_gc, "reopened");
    store.rebuild_index(&no_progress()).unwrap();
    assert_eq!(store.stored_bytes(), summed(&store), "rebuilt");
    assert_eq!(store.stored_bytes(), after_gc);
}
