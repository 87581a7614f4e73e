//! A client that mounts while another client's collection sweeps (after
//! the collector gathered the answers of the clients it waits for, before
//! it deleted the containers it chose) must not deduplicate against those
//! containers: nobody asks it what it deduplicated against, so the
//! collection would delete chunks its new file uses. It joins the
//! collection knowing the doomed containers (`Participant::join`).
//!
//! Client 0 collects a deleted file's containers; its delete of the first
//! one is held at a gate (a branch whose slow operations wait on it) until
//! client 2 has mounted and written the deleted file's data again. Every
//! client then reads that file back whole.

mod common;

use std::sync::Arc;

use branch::testing::GateClock;
use branch::{Fault, FaultyBranch, LocalDir};
use cas::RepoKey;
use common::clients::{client, client_over, read, spawn_collector, until_phase, write};
use common::{data_chunks, random};
use gc::peers::Participant;
use meta::{InodeId, Phase};
use meta_etcd::sim::{Open, SimCluster};
use meta_etcd::EtcdOptions;

const MIB: usize = 1 << 20;

#[test]
fn a_client_mounted_while_a_collection_deletes_stores_the_doomed_data_anew() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = SimCluster::new("gc-late-mount", Arc::new(Open));
    let key = RepoKey::generate();
    let gate = GateClock::new();
    let (local, _) = LocalDir::open("shared", dir.path().join("branch")).unwrap();
    let faulty = FaultyBranch::with_clock(Arc::new(local), gate.clone());
    let control = faulty.control();
    let endpoints = [etcd.endpoint()];
    let (a, _) = client_over(
        dir.path(),
        &key,
        0,
        &endpoints,
        EtcdOptions::default(),
        Arc::new(faulty),
    );
    let b = client(dir.path(), &key, 1, &etcd.endpoint());
    let mut peer_b = Participant::join(&b).unwrap().expect("a shared namespace");

    let doomed = random(MIB, 1);
    let kept = random(MIB, 2);
    write(&a, "doomed", &doomed);
    write(&a, "kept", &kept);
    let first = data_chunks(&doomed, a.store())[0];
    let container = a.store().locate(&first).unwrap().container;
    a.unlink(InodeId::ROOT, b"doomed").unwrap();
    a.sync_all().unwrap();

    let collector = spawn_collector(&a);
    until_phase(&b, Phase::Marking);
    peer_b.step(&b).unwrap();
    // Sweeping: the collector copied what it keeps and waits for B's
    // answer; past it, the next operation on the doomed container is its
    // delete, held at the gate.
    until_phase(&b, Phase::Sweeping);
    control.set_for_prefix(
        Fault::Slow(std::time::Duration::from_secs(1)),
        container.blob_key().as_str(),
    );
    peer_b.step(&b).unwrap();
    gate.until_waiting();

    // Client 2 mounts now, after every answer the collector waits for,
    // and writes the deleted file's data again.
    let c = client(dir.path(), &key, 2, &etcd.endpoint());
    let mut peer_c = Participant::join(&c).unwrap().expect("a shared namespace");
    write(&c, "again", &doomed);

    gate.open();
    let report = collector.join().unwrap().unwrap();
    assert!(report.reclaimed_containers > 0, "{report:?}");
    control.heal();
    peer_b.step(&b).unwrap();
    peer_c.step(&c).unwrap();

    for fs in [&a, &b, &c] {
        assert!(
            read(fs, "again") == doomed,
            "the file client 2 wrote reads wrong"
        );
        assert!(read(fs, "kept") == kept);
    }
    for fs in [&a, &b, &c] {
        let report = fs.store().check(&|_| {}).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
