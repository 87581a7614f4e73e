//! The live-fraction threshold decides which containers are rewritten: one
//! mostly garbage (below it) is rewritten and its garbage freed, one mostly
//! live (above it) is left as it is, garbage and all.

mod common;

use cas::{ChunkId, Store};
use common::*;

/// Two files written into one container: the first of `live` chunks, the
/// second of `dead` chunks; returns their recipe roots.
fn one_container(store: &Store, live: &[u8], dead: &[u8]) -> (ChunkId, ChunkId) {
    let mut writer = store.stream();
    let mut file = |data: &[u8]| {
        let chunks: Vec<bytes::Bytes> = data
            .chunks(CHUNK)
            .map(bytes::Bytes::copy_from_slice)
            .collect();
        let ids = writer.write_batch(&chunks).unwrap();
        let children = chunks
            .iter()
            .map(|c| c.len() as u64)
            .zip(ids.into_iter().map(Some));
        recipe::store_tree(&mut writer, children).unwrap()
    };
    let roots = (file(live), file(dead));
    writer.flush().unwrap();
    roots
}

#[test]
fn threshold_chooses_the_containers_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _branch) = store(dir.path());
    // Container A: 10 live chunks, 2 dead (about 0.8 live).
    let (a_live, a_dead) = (random(10 * CHUNK, 5), random(2 * CHUNK, 6));
    let (a_live_root, a_dead_root) = one_container(&store, &a_live, &a_dead);
    // Container B: 2 live chunks, 10 dead (about 0.2 live).
    let (b_live, b_dead) = (random(2 * CHUNK, 7), random(10 * CHUNK, 8));
    let (b_live_root, b_dead_root) = one_container(&store, &b_live, &b_dead);
    assert_eq!(
        store.stats().unwrap().containers,
        2,
        "the setup wants two containers"
    );
    store.put_root("a", &a_live_root).unwrap();
    store.put_root("b", &b_live_root).unwrap();

    let report = collect(&store, 0.5, false);

    assert_eq!(report.reclaimed_containers, 1, "{report:?}");
    assert_eq!(report.kept_with_garbage, 1, "{report:?}");
    assert_eq!(
        report.copied_chunks,
        2 + 1,
        "B's live data and recipe: {report:?}"
    );
    // B's garbage is gone; A's stays until A falls below the threshold.
    for id in data_chunks(&b_dead, &store).iter().chain([&b_dead_root]) {
        assert!(!store.contains(id).unwrap(), "B's garbage {id} survived");
    }
    for id in data_chunks(&a_dead, &store).iter().chain([&a_dead_root]) {
        assert!(
            store.contains(id).unwrap(),
            "A's garbage {id} was freed above the threshold"
        );
    }
    assert!(read(&store, a_live_root) == a_live);
    assert!(read(&store, b_live_root) == b_live);
    assert_eq!(
        store.stats().unwrap().containers,
        2,
        "A, and B's live part rewritten"
    );
    assert_clean(&store);
}
