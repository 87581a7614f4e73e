//! Latency-aware reads: the read share moves off a branch made slow, in
//! proportion to how slow, and balancing can be switched off.
//!
//! Slowness is virtual ([`Rig::timed`]): a slow branch moves the reading
//! thread's clock on instead of sleeping, and balancing draws from a fixed
//! seed, so each test reads the same way on any machine, however loaded.

mod common;

use std::time::Duration;

use branch::{BlobKey, Fault};
use common::{key, pattern, policy, Rig};

const CONTAINERS: usize = 16;

/// The seed balancing draws from, printed so a failure can be replayed.
fn timed(n: usize, seed: u64) -> Rig {
    println!("balancing seed {seed}");
    Rig::timed(n, seed)
}

fn mirrored(rig: &Rig) -> Vec<BlobKey> {
    (0..CONTAINERS)
        .map(|i| {
            let k = key(&format!("containers/{i:04}"));
            let data = pattern(100_000, i as u64);
            rig.store
                .put(&k, &data, &policy("mirror:2"), &rig.all())
                .unwrap();
            k
        })
        .collect()
}

/// Reads `n` small ranges round the containers; returns each branch's
/// share of the reads.
fn shares(rig: &Rig, keys: &[BlobKey], n: usize) -> Vec<f64> {
    rig.controls.iter().for_each(|c| c.reset_counters());
    for i in 0..n {
        let k = &keys[i % keys.len()];
        let offset = (i * 7919 % 90_000) as u64;
        rig.store.read_range(k, offset, 4096).unwrap();
    }
    let reads: Vec<u64> = rig.controls.iter().map(|c| c.reads()).collect();
    let total: u64 = reads.iter().sum();
    assert_eq!(total, n as u64, "one branch read per healthy read");
    reads.iter().map(|&r| r as f64 / total as f64).collect()
}

#[test]
fn reads_move_off_a_slow_branch() {
    let rig = timed(2, 1);
    let keys = mirrored(&rig);
    shares(&rig, &keys, 100);
    rig.controls[0].set(Fault::Slow(Duration::from_millis(4)));
    // Let the estimate learn the slowdown, then measure.
    shares(&rig, &keys, 100);
    let slow = shares(&rig, &keys, 300)[0];
    assert!(
        slow < 0.2,
        "the slow branch still serves {slow:.2} of reads"
    );
}

#[test]
fn a_branch_twice_as_slow_gets_about_half_the_share() {
    let rig = timed(2, 2);
    let keys = mirrored(&rig);
    rig.controls[0].set(Fault::Slow(Duration::from_millis(4)));
    rig.controls[1].set(Fault::Slow(Duration::from_millis(2)));
    shares(&rig, &keys, 60);
    let s = shares(&rig, &keys, 400);
    // Inverse to latency: 1/4 : 1/2, i.e. one third to the slower.
    assert!(s[0] > 0.18 && s[0] < 0.45, "shares {s:?}");
}

#[test]
fn without_balancing_every_read_goes_to_the_first_copy() {
    let rig = timed(2, 3);
    let keys = mirrored(&rig);
    rig.store.set_balancing(false);
    rig.controls[0].set(Fault::Slow(Duration::from_millis(1)));
    let s = shares(&rig, &keys, 2 * CONTAINERS);
    let primaries_on_0 = keys.iter().filter(|k| rig.holder(k, 0).0 == 0).count();
    assert!(
        primaries_on_0 > 0 && primaries_on_0 < CONTAINERS,
        "placement rotates"
    );
    let expected = primaries_on_0 as f64 / CONTAINERS as f64;
    assert!((s[0] - expected).abs() < 1e-9, "{s:?} vs {expected}");
}

#[test]
fn degraded_reads_rebuild_from_the_faster_shards() {
    let rig = timed(3, 4);
    let k = key("containers/0001");
    let data = pattern(200_000, 1);
    rig.store
        .put(&k, &data, &policy("rs:1+2"), &rig.all())
        .unwrap();
    let holders: Vec<usize> = (0..3).map(|i| usize::from(rig.holder(&k, i).0)).collect();
    rig.controls[holders[0]].set(Fault::FailReads);
    rig.controls[holders[1]].set(Fault::Slow(Duration::from_millis(4)));
    for _ in 0..60 {
        assert!(rig.store.read_range(&k, 1000, 5000).unwrap() == data[1000..6000]);
    }
    rig.controls.iter().for_each(|c| c.reset_counters());
    for _ in 0..200 {
        assert!(rig.store.read_range(&k, 1000, 5000).unwrap() == data[1000..6000]);
    }
    let (slow, fast) = (
        rig.controls[holders[1]].reads(),
        rig.controls[holders[2]].reads(),
    );
    assert_eq!(slow + fast, 200, "one helper per read");
    assert!(
        slow < 40,
        "the slow parity shard served {slow} of 200 rebuilds"
    );
}
