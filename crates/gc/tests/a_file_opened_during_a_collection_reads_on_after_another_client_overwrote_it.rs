//! A handle opened on client 1 after it answered the marking phase of
//! client 0's collection, on a file client 0 then overwrites before it
//! reads the namespace: the old content is reachable only through that
//! handle, yet the collection must not delete it (the handle keeps
//! reading what it had, docs/cluster.md).

mod common;

use std::sync::Arc;
use std::time::Duration;

use cas::RepoKey;
use common::clients::{client, spawn_collector, until_phase, write};
use common::random;
use gc::peers::Participant;
use meta::{InodeId, Phase};
use meta_etcd::sim::{Open, SimCluster};

const LEN: usize = 192 << 10;

#[test]
fn a_file_opened_during_a_collection_reads_on_after_another_client_overwrote_it() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = SimCluster::new("opened-during", Arc::new(Open));
    let key = RepoKey::generate();
    let a = client(dir.path(), &key, 0, &etcd.endpoint());
    let b = client(dir.path(), &key, 1, &etcd.endpoint());
    let mut peer = Participant::join(&b).unwrap().expect("a shared namespace");
    let old = random(LEN, 1);
    write(&a, "x", &old);
    write(&a, "garbage", &random(LEN, 2));
    a.unlink(InodeId::ROOT, b"garbage").unwrap();
    a.sync_all().unwrap();

    let collector = spawn_collector(&a);
    until_phase(&b, Phase::Marking);
    peer.step(&b).unwrap();
    // B opens x after its answer; A overwrites x before it marks (it
    // looks for answers every 200 ms).
    let ino = b.lookup(InodeId::ROOT, b"x").unwrap().id;
    b.open(ino).unwrap();
    let ax = a.lookup(InodeId::ROOT, b"x").unwrap().id;
    a.open(ax).unwrap();
    a.write(ax, 0, &random(LEN, 3)).unwrap();
    a.fsync(ax).unwrap();
    a.release(ax).unwrap();
    a.sync_all().unwrap();
    for _ in 0..3000 {
        match b.board().unwrap().collecting().unwrap() {
            Some(c) if c.phase == Phase::Marking => std::thread::sleep(Duration::from_millis(10)),
            _ => break,
        }
    }
    peer.step(&b).unwrap();
    let report = collector.join().unwrap().unwrap();
    peer.step(&b).unwrap();
    eprintln!("{report:?}");
    let got = b.read(ino, 0, LEN as u32).unwrap();
    assert!(got == old, "the handle B opened reads wrong");
}
