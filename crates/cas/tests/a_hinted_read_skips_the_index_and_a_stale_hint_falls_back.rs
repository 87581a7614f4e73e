//! A chunk read at a remembered location costs one container read and no
//! read of the index; a hint that no longer holds (another chunk's place,
//! a container that is gone) still gives the chunk's own bytes, through the
//! normal read, and is not taken for damage.

mod common;

use bytes::Bytes;
use cas::{ChunkLocation, ContainerId, RepoKey};

use common::*;

#[test]
fn a_hinted_read_skips_the_index_and_a_stale_hint_falls_back() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (store, _) = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..4).map(|_| random(30_000)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    drop(w);
    let hints: Vec<ChunkLocation> = ids
        .iter()
        .map(|id| {
            store
                .location_hint(id)
                .unwrap()
                .expect("a sealed chunk has a place")
        })
        .collect();

    let (index, containers) = (store.index_reads(), store.storage_reads());
    assert_eq!(store.read_hinted(&ids[0], &hints[0]).unwrap(), chunks[0]);
    assert_eq!(store.index_reads() - index, 0, "the index was not asked");
    assert_eq!(store.storage_reads() - containers, 1, "one container read");

    // Another chunk's place: its bytes do not match the id.
    assert_eq!(store.read_hinted(&ids[0], &hints[1]).unwrap(), chunks[0]);
    // A container that does not exist.
    let gone = ChunkLocation {
        container: ContainerId(hints[2].container.0 + 1000),
        ..hints[2]
    };
    assert_eq!(store.read_hinted(&ids[2], &gone).unwrap(), chunks[2]);

    // Nothing was recorded as damaged: the copies read as before.
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
    assert_eq!(store.location_hint(&ids[1]).unwrap(), Some(hints[1]));
    let report = store.check(&|_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
}
