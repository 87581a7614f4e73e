//! Garbage spread thinly over containers that are each mostly live (what
//! random overwrites inside an image leave) is not left forever: past the
//! live-fraction threshold, the sparsest containers are rewritten until
//! the garbage kept is at most `max_garbage` of the bytes kept. With the
//! bound off, the threshold alone leaves every such container as it is.

mod common;

use cas::{ChunkId, Store};
use common::*;
use gc::{GcOptions, Live};

/// One container holding a file of `live` chunks, then one of `dead`
/// chunks; returns both recipe roots.
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

/// Containers of (live, dead) chunks: 8%, 17%, 25% and 0% garbage, 12.5%
/// overall; only the 25% one must go for the rest to be under 10%.
const SHAPES: [(usize, usize); 4] = [(11, 1), (10, 2), (9, 3), (12, 0)];

struct Setup {
    live: Vec<(Vec<u8>, ChunkId)>,
    dead: Vec<Vec<u8>>,
}

fn setup(store: &Store) -> Setup {
    let mut s = Setup {
        live: Vec::new(),
        dead: Vec::new(),
    };
    for (i, &(live, dead)) in SHAPES.iter().enumerate() {
        let seed = 100 * i as u64;
        let (l, d) = (random(live * CHUNK, seed), random(dead * CHUNK, seed + 1));
        let (root, _) = one_container(store, &l, &d);
        store.put_root(&format!("live{i}"), &root).unwrap();
        s.live.push((l, root));
        s.dead.push(d);
    }
    assert_eq!(store.stats().unwrap().containers, SHAPES.len() as u64);
    s
}

#[test]
fn thin_garbage_is_bounded_by_max_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _branch) = store(dir.path());
    let s = setup(&store);

    let off = collect(&store, 0.5, false);
    assert_eq!(off.reclaimed_containers, 0, "threshold alone: {off:?}");
    // The fourth holds an empty file's recipe node as its only garbage.
    assert_eq!(off.kept_with_garbage, 4, "{off:?}");

    // The shapes are made for a bound of a tenth.
    let tenth = GcOptions {
        max_garbage: 0.1,
        ..GcOptions::default()
    };
    let report = gc::collect(&store, Live::StoreOnly, tenth, &|_| {}).unwrap();
    assert_eq!(report.reclaimed_containers, 1, "{report:?}");
    assert_eq!(report.kept_with_garbage, 3, "{report:?}");
    for id in data_chunks(&s.dead[2], &store) {
        assert!(
            !store.contains(&id).unwrap(),
            "the sparsest container's garbage survived"
        );
    }
    for i in [0, 1] {
        let kept = data_chunks(&s.dead[i], &store);
        assert!(
            kept.iter().all(|id| store.contains(id).unwrap()),
            "container {i}"
        );
    }
    for (data, root) in &s.live {
        assert!(read(&store, *root) == *data);
    }
    assert_clean(&store);
}
