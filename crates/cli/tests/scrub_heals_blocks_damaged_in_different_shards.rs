//! Damage is judged per 64 KiB block: with every shard of every container
//! damaged, but no block row beyond what the policy tolerates (two mirror
//! copies bad in different blocks; parity and RS shards bad in different
//! rows), every file reads back exactly through a fresh mount, `cairn
//! scrub` rewrites every shard and exits 0, and `cairn check` is clean.

mod common;

use common::shards::{
    assert_reads_back, blocks_in, containers, corrupt_block, mount, repo_over, write_all,
};
use common::{cairn, ok, random};
use serde_json::Value;

#[test]
fn scrub_heals_blocks_damaged_in_different_shards() {
    for (policy, names) in [
        ("mirror:2", &["a", "b"][..]),
        ("parity:2", &["a", "b", "c"][..]),
        ("rs:4+2", &["a", "b", "c", "d", "e", "f"][..]),
    ] {
        let base = tempfile::tempdir().unwrap();
        let repo = repo_over(base.path(), names, policy);
        let files: Vec<(String, Vec<u8>)> = (0..3)
            .map(|i| (format!("f{i}"), random(600_000 + i * 70_001, i as u64 + 1)))
            .collect();
        let m = mount(&repo, base.path());
        write_all(&m, &files);
        m.unmount();

        // Shard i bad in block i (mod its blocks): every shard damaged,
        // each row at most as many times as the policy tolerates.
        let br = repo.join("br");
        let found = containers(&br);
        assert!(!found.is_empty(), "{policy}: no shards stored");
        let tolerance = match policy {
            "rs:4+2" => 2,
            _ => 1,
        };
        let mut damaged = 0;
        for (_, shards) in &found {
            // A small container (metadata) has too few rows to spread
            // the damage over.
            let blocks = blocks_in(&shards[0].1, policy);
            if (shards.len() as u64).div_ceil(blocks) > tolerance {
                continue;
            }
            for (i, path) in shards {
                corrupt_block(path, policy, u64::from(*i) % blocks);
            }
            damaged += 1;
        }
        assert!(damaged >= 2, "{policy}: too little damaged: {found:?}");

        let m = mount(&repo, base.path());
        assert_reads_back(&m, &files);
        let out = cairn(&repo, &["scrub", "--json"]);
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(out.status.code(), Some(0), "{policy}: {report}");
        assert_eq!(report["lost"], serde_json::json!([]), "{policy}: {report}");
        assert_eq!(
            report["degraded"],
            serde_json::json!([]),
            "{policy}: {report}"
        );
        assert_eq!(
            report["repaired"].as_array().unwrap().len(),
            damaged,
            "{policy}: {report}"
        );
        let again: Value = serde_json::from_str(&ok(&repo, &["scrub", "--json"])).unwrap();
        assert_eq!(again["healthy"], again["containers"], "{policy}: {again}");
        assert_reads_back(&m, &files);
        m.unmount();
        ok(&repo, &["check"]);
    }
}
