//! A chunk two clients stored, each in a container of its own (they
//! wrote it at once, or one wrote it before it knew of the other's), must
//! stay readable when a collection deletes one copy: the index keeps the
//! other copy's location too and falls back to it. Found by the
//! dedup-versus-collection simulation: client 0 collected its copy of
//! data nothing referenced any more; client 1 then wrote that data again,
//! deduplicating against its own copy, and client 0 could not read the
//! file (its index had dropped the chunk and knew the other container
//! already, so no catch-up looked in it again).

mod common;

use bytes::Bytes;
use cas::{ChunkId, ContainerId, RepoKey, Store};

use common::*;

/// Stores `data` in one new container of `store`'s; its id.
fn store_all(store: &Store, data: &[Bytes]) -> (Vec<ChunkId>, ContainerId) {
    let mut w = store.stream();
    let ids = w.write_batch(data).unwrap();
    w.flush().unwrap();
    assert_eq!(w.stats().new_chunks, data.len() as u64, "stored anew");
    let container = store.locate(&ids[0]).unwrap().container;
    (ids, container)
}

/// `store`'s own collection with nothing live: every container of its
/// own deleted.
fn collect_everything(store: &Store) {
    let dead = |_: &ChunkId| false;
    let gc = store.begin_collection().unwrap();
    for a in gc.assess(&dead).unwrap() {
        gc.prepare(a.container, &dead).unwrap();
    }
    gc.commit().unwrap();
}

/// Client 0 (catching up) and client 1 (not looking at client 0's
/// containers) each store the same data in a container of their own.
struct TwoCopies {
    a: Store,
    data: Vec<Bytes>,
    ids: Vec<ChunkId>,
    mine: ContainerId,
    theirs: ContainerId,
}

fn two_copies(dir: &std::path::Path) -> TwoCopies {
    let key = RepoKey::generate();
    let data: Vec<Bytes> = (0..6).map(|_| random(20_000)).collect();
    let a = client(dir, &key, 0, shared_branch(dir));
    let b = client_alone(dir, &key, 1, shared_branch(dir));
    let (ids, mine) = store_all(&a, &data);
    let (_, theirs) = store_all(&b, &data);
    assert_ne!(mine, theirs);
    TwoCopies {
        a,
        data,
        ids,
        mine,
        theirs,
    }
}

#[test]
fn the_collector_reads_on_from_the_other_clients_copy() {
    let dir = tempfile::tempdir().unwrap();
    let TwoCopies {
        a,
        data,
        ids,
        mine,
        theirs,
    } = two_copies(dir.path());
    a.catch_up().unwrap();
    assert_eq!(a.locate(&ids[0]).unwrap().container, mine, "first kept");

    collect_everything(&a);
    assert!(!container_path(dir.path(), mine).exists(), "collected");

    for id in &ids {
        assert_eq!(a.locate(id).unwrap().container, theirs);
    }
    assert_eq!(a.read_chunks(&ids).unwrap(), data);
    // And a writer deduplicates against that copy.
    let mut w = a.stream();
    w.write_batch(&data).unwrap();
    w.flush().unwrap();
    assert_eq!(w.stats().new_chunks, 0);
    assert!(a.check(&no_progress()).unwrap().problems.is_empty());
}

#[test]
fn a_client_taking_part_reads_on_from_a_third_clients_copy() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let data: Vec<Bytes> = (0..6).map(|_| random(20_000)).collect();
    let a = client(dir.path(), &key, 0, shared_branch(dir.path()));
    let b = client(dir.path(), &key, 1, shared_branch(dir.path()));
    let c = client_alone(dir.path(), &key, 2, shared_branch(dir.path()));
    let (ids, collected) = store_all(&a, &data);
    b.catch_up().unwrap();
    // Client 2 stores the same data without looking; client 1 learns of
    // its container while its entries still name client 0's.
    let (_, kept) = store_all(&c, &data);
    b.catch_up().unwrap();
    assert_eq!(b.locate(&ids[0]).unwrap().container, collected);

    // Client 0 collects its copy as client 1 takes part.
    b.record_for_peer();
    b.doom(&[collected]);
    collect_everything(&a);
    b.peer_collection_ended().unwrap();

    for id in &ids {
        assert_eq!(b.locate(id).unwrap().container, kept);
    }
    assert_eq!(b.read_chunks(&ids).unwrap(), data);
    assert!(b.check(&no_progress()).unwrap().problems.is_empty());
}

#[test]
fn a_rebuilt_index_knows_both_copies() {
    let dir = tempfile::tempdir().unwrap();
    let TwoCopies {
        a,
        data,
        ids,
        mine,
        theirs,
        ..
    } = two_copies(dir.path());
    a.rebuild_index(&no_progress()).unwrap();
    assert_eq!(a.locate(&ids[0]).unwrap().container, mine);

    collect_everything(&a);
    assert!(!container_path(dir.path(), mine).exists(), "collected");
    assert_eq!(a.read_chunks(&ids).unwrap(), data);
    assert_eq!(a.locate(&ids[0]).unwrap().container, theirs);
}
