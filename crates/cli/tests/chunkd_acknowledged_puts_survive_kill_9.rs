//! `kill -9` of a chunkd while four writers put blobs through
//! `ChunkdBranch`: after a restart every put that was acknowledged reads
//! back byte-exact, and a put that was cut off left either nothing or the
//! whole blob, never part of one.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use branch::testing::pattern;
use branch::{BlobKey, Branch, BranchError, ChunkdBranch};
use common::chunkd::{token_file, Chunkd};
use parking_lot::Mutex;

fn len_of(seed: u64) -> usize {
    20_000 + (seed as usize * 7919) % 200_000
}

#[test]
fn acknowledged_puts_survive_kill_9() {
    let base = tempfile::tempdir().unwrap();
    let token = token_file(base.path());
    let mut server = Chunkd::start(&base.path().join("served"), &token);
    let branch = Arc::new(ChunkdBranch::open("remote", &server.config()).unwrap());
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let attempted = Arc::new(Mutex::new(Vec::<u64>::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (branch, acked, attempted, next, stop) = (
                branch.clone(),
                acked.clone(),
                attempted.clone(),
                next.clone(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed) as u64;
                    attempted.lock().push(seed);
                    let key = BlobKey::new(format!("c/{seed:06}")).unwrap();
                    if branch.put(&key, &pattern(len_of(seed), seed)).is_ok() {
                        acked.lock().push(seed);
                    }
                }
            })
        })
        .collect();
    while acked.lock().len() < 60 {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.kill();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().clone();
    assert!(acked.len() >= 60);

    server.restart();
    let branch = ChunkdBranch::open("remote", &server.config()).unwrap();
    for &seed in &acked {
        let key = BlobKey::new(format!("c/{seed:06}")).unwrap();
        let got = branch
            .get(&key)
            .unwrap_or_else(|e| panic!("acknowledged {key}: {e}"));
        assert!(
            got == pattern(len_of(seed), seed),
            "{key} reads back different bytes"
        );
    }
    for &seed in attempted.lock().iter().filter(|s| !acked.contains(s)) {
        let key = BlobKey::new(format!("c/{seed:06}")).unwrap();
        match branch.get(&key) {
            Ok(got) => assert!(got == pattern(len_of(seed), seed), "{key} is partial"),
            Err(BranchError::NotFound { .. }) => {}
            Err(e) => panic!("{key}: {e}"),
        }
    }
    let listed = branch.list("c/").unwrap();
    assert!(listed.len() >= acked.len());
}
