//! A container its client's index forgot but whose delete failed is an
//! orphan: still on the branches, where another client's catch-up finds
//! it and deduplicates against it. The next collection across clients
//! must index it again and copy what is live in it before it goes
//! (`Collection::adopt_orphans`), never delete it unread.

mod common;

use std::sync::Arc;

use branch::{Fault, FaultyBranch, LocalDir};
use bytes::Bytes;
use cas::{CasError, ChunkId, RepoKey};

use common::*;

#[test]
fn an_orphan_is_indexed_again_and_its_live_chunks_copied() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (mine, _) = LocalDir::open("shared", dir.path().join("branch")).unwrap();
    let faulty = FaultyBranch::new(Arc::new(mine));
    let control = faulty.control();
    let a = client(dir.path(), &key, 0, Arc::new(faulty));
    let b = client(dir.path(), &key, 1, shared_branch(dir.path()));

    let data: Vec<Bytes> = (0..6).map(|_| random(20_000)).collect();
    let mut w = a.stream();
    let ids = w.write_batch(&data).unwrap();
    w.flush().unwrap();
    drop(w);
    let orphan = a.locate(&ids[0]).unwrap().container;

    // Client 0 collects it, nothing live, but the delete fails.
    let dead = |_: &ChunkId| false;
    let gc = a.begin_collection_among_clients().unwrap();
    for x in gc.assess(&dead).unwrap() {
        gc.prepare(x.container, &dead).unwrap();
    }
    control.set_for_prefix(Fault::FailAll, orphan.blob_key().as_str());
    assert!(gc.commit().is_err());
    drop(gc);
    control.heal();
    assert!(container_path(dir.path(), orphan).exists());
    assert!(
        matches!(a.locate(&ids[0]), Err(CasError::UnknownChunk(_))),
        "an orphan: its own index forgot it"
    );

    // Client 1 finds it and stores the same data, deduplicated against it.
    b.catch_up().unwrap();
    let mut w = b.stream();
    w.write_batch(&data).unwrap();
    w.flush().unwrap();
    assert_eq!(w.stats().new_chunks, 0, "deduplicated against the orphan");
    drop(w);

    // The next collection: client 1's file keeps the chunks live.
    let live = |id: &ChunkId| ids.contains(id);
    let gc = a.begin_collection_among_clients().unwrap();
    for x in gc.assess(&live).unwrap() {
        gc.prepare(x.container, &live).unwrap();
    }
    gc.commit().unwrap();
    gc.remove_orphans().unwrap();
    drop(gc);
    assert!(!container_path(dir.path(), orphan).exists(), "collected");

    assert_eq!(b.read_chunks(&ids).unwrap(), data);
    assert_eq!(a.read_chunks(&ids).unwrap(), data);
    for store in [&a, &b] {
        let report = store.check(&no_progress()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
