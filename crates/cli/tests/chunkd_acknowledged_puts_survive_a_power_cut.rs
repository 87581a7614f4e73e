//! The power cut under a chunkd while four writers put blobs through
//! `ChunkdBranch`, its directory on an ext4 disk that keeps only what was
//! flushed plus a random part of the rest (`testkit::powercut`): after the
//! machine starts again every put that was acknowledged reads back
//! byte-exact, and a put in flight left nothing or the whole blob. Unlike
//! `kill -9`, this fails if a 201 is sent before the blob and its
//! directory entry are synced. `CAIRN_POWERCUT_SEED=S` replays a seed.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use branch::testing::pattern;
use branch::{BlobKey, Branch, BranchError, ChunkdBranch};
use common::chunkd::{token_file, Chunkd};
use parking_lot::Mutex;
use testkit::powercut::{Disks, Keep};

fn len_of(seed: u64) -> usize {
    20_000 + (seed as usize * 7919) % 200_000
}

fn key(seed: u64) -> BlobKey {
    BlobKey::new(format!("c/{seed:06}")).unwrap()
}

#[test]
fn acknowledged_puts_survive_a_power_cut() {
    let cut_seed = match std::env::var("CAIRN_POWERCUT_SEED") {
        Ok(s) => s.parse().expect("CAIRN_POWERCUT_SEED is a number"),
        Err(_) => std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15,
    };
    eprintln!("CAIRN_POWERCUT_SEED={cut_seed}");
    let mut disks = Disks::new(1, 1 << 30);
    let base = tempfile::tempdir().unwrap();
    let token = token_file(base.path());
    let mut server = Chunkd::start(&disks.path(0).join("served"), &token);
    let branch = Arc::new(ChunkdBranch::open("remote", &server.config()).unwrap());
    let acked = Arc::new(Mutex::new(Vec::<u64>::new()));
    let attempted = Arc::new(Mutex::new(Vec::<u64>::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let cut = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (branch, acked, attempted, next, cut) = (
                branch.clone(),
                acked.clone(),
                attempted.clone(),
                next.clone(),
                cut.clone(),
            );
            std::thread::spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::SeqCst) as u64;
                attempted.lock().push(seed);
                let ok = branch.put(&key(seed), &pattern(len_of(seed), seed)).is_ok();
                // Acknowledged before the cut only if the cut had not
                // begun when the answer came.
                if cut.load(Ordering::SeqCst) {
                    return;
                }
                if ok {
                    acked.lock().push(seed);
                }
            })
        })
        .collect();
    while acked.lock().len() < 80 {
        std::thread::sleep(Duration::from_millis(5));
    }
    cut.store(true, Ordering::SeqCst);
    let (kept, dropped) = disks.cut(Keep::Random(cut_seed));
    eprintln!("cut kept {kept} unflushed writes, dropped {dropped}");
    server.kill();
    for w in writers {
        w.join().unwrap();
    }
    let acked = acked.lock().clone();
    disks.power_on();
    server.restart();

    let branch = ChunkdBranch::open("remote", &server.config()).unwrap();
    for &seed in &acked {
        let got = branch
            .get(&key(seed))
            .unwrap_or_else(|e| panic!("seed {cut_seed}: acknowledged {}: {e}", key(seed)));
        assert!(
            got == pattern(len_of(seed), seed),
            "seed {cut_seed}: {} reads back different bytes",
            key(seed)
        );
    }
    for &seed in attempted.lock().iter().filter(|s| !acked.contains(s)) {
        match branch.get(&key(seed)) {
            Ok(got) => assert!(
                got == pattern(len_of(seed), seed),
                "seed {cut_seed}: {} is partial",
                key(seed)
            ),
            Err(BranchError::NotFound { .. }) => {}
            Err(e) => panic!("seed {cut_seed}: {}: {e}", key(seed)),
        }
    }
    assert!(branch.list("c/").unwrap().len() >= acked.len());
}
