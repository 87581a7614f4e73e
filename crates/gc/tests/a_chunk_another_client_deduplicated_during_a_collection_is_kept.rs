//! The dedup-versus-collection race across clients, step by step: two
//! file systems (clients 0 and 1, each with its own index) over one
//! branch, their namespace in one simulated etcd. Client 0 deletes a file
//! and collects; client 1, having answered the marking phase, stores the
//! same data again (deduplicated against client 0's container, which the
//! collection is about to delete) and records it before it answers the
//! sweeping phase. The chunk is kept: the collection copies it before it
//! deletes the container, and both clients read the file back whole.
//! A file stored after client 1 answered the sweep is stored anew.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cas::RepoKey;
use common::clients::{client, read, until_phase, write};
use common::random;
use gc::peers::Participant;
use gc::{GcOptions, Live};
use meta::{InodeId, Phase};
use meta_etcd::sim::{Open, SimCluster};

const MIB: usize = 1 << 20;

/// Bytes of the containers on the branch whose ids start with `prefix`
/// (`0001`: client 1's).
fn client_bytes(dir: &Path, prefix: &str) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.join("branch")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(prefix) {
                total += meta.len();
            }
        }
    }
    total
}

#[test]
fn a_chunk_deduplicated_between_the_answers_is_copied_before_its_container_goes() {
    let dir = tempfile::tempdir().unwrap();
    let etcd = SimCluster::new("gc-race", Arc::new(Open));
    let key = RepoKey::generate();
    let a = client(dir.path(), &key, 0, &etcd.endpoint());
    let b = client(dir.path(), &key, 1, &etcd.endpoint());
    let mut peer = Participant::join(&b).unwrap().expect("a shared namespace");

    let doomed = random(MIB, 1);
    let kept = random(MIB, 2);
    write(&a, "doomed", &doomed);
    write(&a, "kept", &kept);
    a.unlink(InodeId::ROOT, b"doomed").unwrap();
    a.sync_all().unwrap();

    let (marked, marked_rx) = std::sync::mpsc::channel();
    let collector = {
        let a = a.clone();
        let marked = std::sync::Mutex::new(marked);
        std::thread::spawn(move || {
            let options = GcOptions {
                threshold: 1.0,
                peer_wait: Duration::from_secs(60),
                ..GcOptions::default()
            };
            gc::collect(a.store(), Live::Mounted(&a), options, &|p| {
                if let gc::GcProgress::Sweeping { .. } = p {
                    let _ = marked.lock().unwrap().send(());
                }
            })
        })
    };
    until_phase(&b, Phase::Marking);
    peer.step(&b).unwrap();
    // A has marked (it read the namespace without "again") and is
    // copying: B now stores A's deleted data again, deduplicated against
    // a container the collection chose to delete.
    marked_rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the collection chose nothing to reclaim");
    let before = client_bytes(dir.path(), "0001");
    write(&b, "again", &doomed);
    let grew = client_bytes(dir.path(), "0001") - before;
    assert!(
        grew < (MIB / 4) as u64,
        "B stored {grew} bytes: the data anew instead of deduplicating"
    );
    until_phase(&b, Phase::Sweeping);
    peer.step(&b).unwrap();
    // After its sweep answer B never deduplicates against the doomed
    // containers: this copy is stored anew.
    write(&b, "after", &doomed);
    let report = collector.join().unwrap().unwrap();
    assert!(report.reclaimed_containers > 0, "{report:?}");
    assert!(
        report.copied_chunks >= (MIB / common::CHUNK) as u64,
        "the chunks B deduplicated against were not copied: {report:?}"
    );
    peer.step(&b).unwrap();

    for fs in [&a, &b] {
        assert!(read(fs, "again") == doomed, "a file B stored reads wrong");
        assert!(read(fs, "after") == doomed);
        assert!(read(fs, "kept") == kept);
    }
    for fs in [&a, &b] {
        let report = fs.store().check(&|_| {}).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
    }
}
