//! A store over the redundancy layer: containers keep their stream's
//! policy, a weaker copy of a chunk is stored again for a stronger stream
//! (never the other way), gc and index rebuilds keep each chunk's policy,
//! and reads survive an injected I/O error on a branch.

use std::sync::Arc;

use branch::{Branch, Fault, FaultControl, FaultyBranch, LocalDir};
use bytes::Bytes;
use cas::{CasError, ChunkId, Protection, RepoKey, Store, StoreSettings};
use redundancy::{BranchId, Policy, Redundant};

struct Rig {
    _dir: tempfile::TempDir,
    store: Store,
    faults: Vec<FaultControl>,
}

fn rig() -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let mut branches: Vec<Arc<dyn Branch>> = Vec::new();
    let mut faults = Vec::new();
    for i in 0..3 {
        let (local, _) = LocalDir::open(format!("b{i}"), dir.path().join(format!("b{i}"))).unwrap();
        let faulty = FaultyBranch::new(Arc::new(local));
        faults.push(faulty.control());
        branches.push(Arc::new(faulty));
    }
    let (layer, _) = Redundant::open(branches).unwrap();
    std::fs::create_dir(dir.path().join("meta")).unwrap();
    let store = Store::open_redundant(
        Arc::new(layer),
        protection("single"),
        &dir.path().join("meta"),
        RepoKey::generate(),
        StoreSettings::default(),
    )
    .unwrap();
    Rig {
        _dir: dir,
        store,
        faults,
    }
}

fn protection(policy: &str) -> Protection {
    Protection {
        policy: policy.parse().unwrap(),
        branches: vec![BranchId(0), BranchId(1), BranchId(2)],
    }
}

fn chunk(seed: u8) -> Bytes {
    Bytes::from(
        (0..50_000u32)
            .map(|i| (i as u8).wrapping_mul(seed) ^ seed)
            .collect::<Vec<u8>>(),
    )
}

/// Writes `data` through a stream of `policy`; returns the id and how many
/// chunks the stream stored anew.
fn write(store: &Store, policy: &str, data: &Bytes) -> (ChunkId, u64) {
    let mut w = store.stream_with(protection(policy)).unwrap();
    let id = w.write_chunk(data.clone()).unwrap();
    w.flush().unwrap();
    (id, w.stats().new_chunks)
}

fn policy_of(store: &Store, id: &ChunkId) -> Policy {
    store
        .container_policy(store.locate(id).unwrap().container)
        .unwrap()
}

#[test]
fn a_stronger_stream_stores_again_a_weaker_one_reuses() {
    let r = rig();
    let data = chunk(3);
    let (id, new) = write(&r.store, "single", &data);
    assert_eq!((new, policy_of(&r.store, &id)), (1, Policy::Single));
    let (_, new) = write(&r.store, "mirror:2", &data);
    assert_eq!(new, 1, "a single copy does not serve a mirror:2 stream");
    assert_eq!(policy_of(&r.store, &id).to_string(), "mirror:2");
    for weaker in ["single", "mirror:2", "parity:2"] {
        let (_, new) = write(&r.store, weaker, &data);
        assert_eq!(new, 0, "{weaker} reuses the mirror:2 copy");
    }
    assert_eq!(policy_of(&r.store, &id).to_string(), "mirror:2");
    let placed = r
        .store
        .layer()
        .locate(&r.store.locate(&id).unwrap().container.blob_key())
        .unwrap();
    assert_eq!(placed.policy.to_string(), "mirror:2");
    assert_eq!(placed.shards.len(), 2);
}

#[test]
fn plain_stores_refuse_policies_they_cannot_keep() {
    let dir = tempfile::tempdir().unwrap();
    let (local, _) = LocalDir::open("local", dir.path().join("b")).unwrap();
    std::fs::create_dir(dir.path().join("meta")).unwrap();
    let store = Store::open(
        Arc::new(local),
        &dir.path().join("meta"),
        RepoKey::generate(),
        StoreSettings::default(),
    )
    .unwrap();
    assert!(store.stream_with(Protection::plain()).is_ok());
    let err = store.stream_with(protection("mirror:2")).err().unwrap();
    assert!(
        matches!(&err, CasError::Redundancy(e) if matches!(**e, redundancy::Error::NoRedundancy(_))),
        "{err}"
    );
    let r = rig();
    let err = r.store.stream_with(protection("mirror:4")).err().unwrap();
    assert!(
        err.to_string().contains("needs 4 distinct branches"),
        "{err}"
    );
}

#[test]
fn gc_and_index_rebuild_keep_each_chunks_policy() {
    let r = rig();
    let (weak, _) = write(&r.store, "single", &chunk(5));
    let (strong, _) = write(&r.store, "rs:2+1", &chunk(7));
    write(&r.store, "rs:2+1", &chunk(5));
    let before = r.store.locate(&strong).unwrap().container;
    let gc = r.store.begin_collection().unwrap();
    let all = |_: &ChunkId| true;
    gc.prepare(before, &all).unwrap();
    let reclaimed = gc.commit().unwrap();
    assert_eq!(reclaimed.containers, 1);
    drop(gc);
    let after = r.store.locate(&strong).unwrap().container;
    assert_ne!(after, before, "the chunk was copied forward");
    assert_eq!(policy_of(&r.store, &strong).to_string(), "rs:2+1");
    assert!(r.store.read_chunk(&strong).unwrap() == chunk(7));

    r.store.rebuild_index(&|_| {}).unwrap();
    assert_eq!(policy_of(&r.store, &strong).to_string(), "rs:2+1");
    assert_eq!(
        policy_of(&r.store, &weak).to_string(),
        "rs:2+1",
        "of two copies the rebuilt index keeps the stronger"
    );
}

#[test]
fn reads_survive_an_injected_io_error_up_to_the_policys_tolerance() {
    let r = rig();
    let mut ids = Vec::new();
    for (seed, policy) in [(11, "mirror:2"), (12, "parity:2"), (13, "rs:1+2")] {
        ids.push((write(&r.store, policy, &chunk(seed)).0, seed, policy));
    }
    r.faults[0].set(Fault::FailAll);
    for (id, seed, policy) in &ids {
        let got = r
            .store
            .read_chunk(id)
            .unwrap_or_else(|e| panic!("{policy}: {e}"));
        assert!(got == chunk(*seed), "{policy}");
    }
    r.faults[1].set(Fault::FailReads);
    let (id, seed, _) = ids[2];
    assert!(
        r.store.read_chunk(&id).unwrap() == chunk(seed),
        "rs:1+2 survives two"
    );
    let err = r.store.read_chunk(&ids[0].0).unwrap_err().to_string();
    assert!(
        err.contains("mirror:2") && err.contains("cannot be read"),
        "{err}"
    );
    let status = r.store.layer().status();
    assert!(status[0].degraded && status[1].degraded && !status[2].degraded);
}
