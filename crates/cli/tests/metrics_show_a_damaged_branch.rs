//! `/metrics` names a damaged branch: over six branches (rs:4+2), every
//! shard on one branch is corrupted while `cairn serve` runs; after a scrub
//! reads every shard and rewrites the bad ones, the scrape counts that
//! branch's corrupt reads (and none of the other five's), shows it healthy
//! again like the others, every file still reads back, and the repository
//! checks clean.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::collections::BTreeMap;
use std::fs;

use common::shards::{assert_reads_back, repo_over, shard_files};
use common::{ok, random, write_synced};

/// Every sample of an unsigned scrape of `endpoint`'s `/metrics`.
fn scrape(endpoint: &str) -> BTreeMap<String, f64> {
    common::metrics::scrape(&format!("{endpoint}/metrics"))
}

#[test]
fn metrics_show_a_damaged_branch() {
    let base = tempfile::tempdir().unwrap();
    let names = ["a", "b", "c", "d", "e", "f"];
    let repo = repo_over(base.path(), &names, "rs:4+2");
    let dir = base.path().join("mnt");
    let s = serve::serve(&repo, &dir);
    let files: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| (format!("f{i}"), random(300_000 + i * 50_003, i as u64 + 11)))
        .collect();
    for (name, data) in &files {
        write_synced(&dir.join(name), data).unwrap();
    }
    let healthy = scrape(&s.endpoint);
    for n in names {
        assert_eq!(
            healthy[&format!("cairn_branch_degraded{{branch=\"{n}\"}}")],
            0.0,
            "{n}"
        );
    }

    // Every shard on c flipped in its middle.
    let shards = shard_files(&repo.join("br/c"));
    assert!(!shards.is_empty());
    for p in &shards {
        let mut bytes = fs::read(p).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        fs::write(p, bytes).unwrap();
    }
    ok(&repo, &["scrub"]);
    let after = scrape(&s.endpoint);
    assert_eq!(
        after["cairn_branch_degraded{branch=\"c\"}"], 0.0,
        "healed by the scrub: {after:?}"
    );
    assert!(
        after["cairn_branch_faults_total{branch=\"c\",kind=\"corrupt\"}"] >= 1.0,
        "{after:?}"
    );
    for n in ["a", "b", "d", "e", "f"] {
        assert_eq!(
            after[&format!("cairn_branch_degraded{{branch=\"{n}\"}}")],
            0.0,
            "{n}: {after:?}"
        );
        assert_eq!(
            after[&format!("cairn_branch_faults_total{{branch=\"{n}\",kind=\"corrupt\"}}")],
            0.0,
            "{n}"
        );
        assert!(
            after[&format!("cairn_branch_reads_total{{branch=\"{n}\"}}")] >= 1.0,
            "{n}: {after:?}"
        );
    }
    for (name, data) in &files {
        assert!(fs::read(dir.join(name)).unwrap() == *data, "{name}");
    }
    let (repo, dir) = s.mount.unmount();
    let m = common::shards::mount(&repo, dir.parent().unwrap());
    assert_reads_back(&m, &files);
    m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
}
