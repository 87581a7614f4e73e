//! Damage is judged per 64 KiB block, not per shard: with every shard
//! of a mirror, parity or RS container damaged in other blocks, the
//! container still reads back exactly and scrub rewrites every shard.

mod common;

use branch::BlobKey;
use common::{key, pattern, policy, Rig};
use redundancy::shard::BLOCK;

/// One container of `blocks` 64 KiB rows per shard (plus a short one)
/// under `text`.
fn one(rig: &Rig, text: &str, blocks: u64) -> (BlobKey, Vec<u8>) {
    let k = key("containers/0001");
    let data_shards = u64::from(policy(text).data_shards());
    let data = pattern(((blocks * BLOCK - 999) * data_shards) as usize, 7);
    rig.store.put(&k, &data, &policy(text), &rig.all()).unwrap();
    (k, data)
}

fn assert_reads(rig: &Rig, k: &BlobKey, data: &[u8], what: &str) {
    assert!(rig.store.get(k).unwrap() == data, "{what}: whole read");
    for (at, n) in [(0, 10), (BLOCK as usize - 5, 10), (data.len() / 2, 70_000)] {
        let got = rig.store.read_range(k, at as u64, n).unwrap();
        assert!(got == data[at..at + n], "{what}: {n} bytes at {at}");
    }
}

#[test]
fn every_shard_damaged_in_other_blocks_reads_back_and_scrub_heals_all() {
    for (text, branches) in [("mirror:2", 3), ("parity:3", 4), ("rs:4+2", 6)] {
        let rig = Rig::new(branches);
        let (k, data) = one(&rig, text, 8);
        let shards = policy(text).shard_count();
        // Shard i is bad in rows 2i and 2i+1 (mod 8): no row has more bad
        // blocks than the policy tolerates, and every shard is damaged, so
        // a per-shard verdict would call the container lost.
        for i in 0..u64::from(shards) {
            for row in [2 * i % 8, (2 * i + 1) % 8] {
                rig.corrupt_block(&k, i as u16, row);
            }
        }
        assert_reads(&rig, &k, &data, text);
        let summary = rig.store.scrub_all(|_| {});
        assert!(summary.lost.is_empty(), "{text}: {summary:?}");
        assert!(summary.degraded.is_empty(), "{text}: {summary:?}");
        assert_eq!(summary.repaired.len(), 1, "{text}: {summary:?}");
        assert_eq!(
            summary.repaired[0].repaired.len(),
            usize::from(shards),
            "{text}: every shard rewritten"
        );
        // Healed on disk: a fresh process finds nothing wrong.
        let fresh = rig.reopen();
        let again = fresh.store.scrub_all(|_| {});
        assert_eq!(again.healthy, 1, "{text}: {again:?}");
        assert!(fresh.store.get(&k).unwrap() == data, "{text}");
    }
}
