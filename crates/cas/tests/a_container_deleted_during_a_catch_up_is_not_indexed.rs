//! A catch-up that read another client's container, and indexes it only
//! after that client's collection deleted it and ended (its doomed mark
//! gone with it), must not index it: a writer would then deduplicate
//! against chunks that are gone. Client 1's catch-up reads container K1,
//! then waits on its read of K2 (a branch whose slow reads wait on a
//! gate);
//! meanwhile client 0's collection dooms K1 on client 1, deletes it, and
//! ends. Then the catch-up goes on: client 1 must store K1's data anew
//! when it writes it again, and read back both.

mod common;

use std::sync::Arc;
use std::time::Duration;

use branch::testing::GateClock;
use branch::{Branch, Fault, FaultyBranch, LocalDir};
use cas::RepoKey;

use common::*;

#[test]
fn a_container_deleted_during_a_catch_up_is_not_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let (raw, _) = LocalDir::open("shared", dir.path().join("branch")).unwrap();
    let raw = Arc::new(raw);
    let a = client(dir.path(), &key, 0, raw.clone());
    let gate = GateClock::new();
    let (theirs, _) = LocalDir::open("shared", dir.path().join("branch")).unwrap();
    let faulty = FaultyBranch::with_clock(Arc::new(theirs), gate.clone());
    let control = faulty.control();
    let b = client(dir.path(), &key, 1, Arc::new(faulty));

    // Two containers of client 0's, one batch each.
    let first: Vec<_> = (0..8).map(|_| random(20_000)).collect();
    let second: Vec<_> = (0..8).map(|_| random(20_000)).collect();
    let mut w = a.stream();
    let first_ids = w.write_batch(&first).unwrap();
    w.flush().unwrap();
    let mut w = a.stream();
    let second_ids = w.write_batch(&second).unwrap();
    w.flush().unwrap();
    let k1 = a.locate(&first_ids[0]).unwrap().container;
    let k2 = a.locate(&second_ids[0]).unwrap().container;
    assert!(k1 < k2, "K1 is read first");
    assert!(first_ids
        .iter()
        .all(|id| a.locate(id).unwrap().container == k1));

    // Client 1's catch-up reads K1, then waits at K2.
    control.set_for_prefix(
        Fault::SlowReads(Duration::from_secs(1)),
        k2.blob_key().as_str(),
    );
    let catching = {
        let b = b.clone();
        std::thread::spawn(move || b.catch_up())
    };
    gate.until_waiting();

    // Client 0's collection, as client 1 takes part: K1 doomed, deleted,
    // and the collection over.
    b.record_for_peer();
    b.doom(&[k1]);
    let k1_prefix = k1.blob_key().as_str().to_string();
    for blob in raw.list(&k1_prefix).unwrap() {
        raw.delete(&blob).unwrap();
    }
    b.peer_collection_ended().unwrap();

    gate.open();
    catching.join().unwrap().unwrap();
    control.heal();

    // Client 1 writes K1's data: stored anew, never deduplicated against
    // the deleted container, and read back whole.
    let mut w = b.stream();
    let again = w.write_batch(&first).unwrap();
    w.flush().unwrap();
    assert_eq!(
        w.stats().new_chunks,
        first.len() as u64,
        "client 1 deduplicated against a container that is gone"
    );
    assert_eq!(again, first_ids);
    assert_eq!(b.read_chunks(&first_ids).unwrap(), first);
    assert_eq!(b.read_chunks(&second_ids).unwrap(), second);
}
