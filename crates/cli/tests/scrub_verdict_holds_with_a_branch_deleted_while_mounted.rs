//! A branch directory deleted while mounted: the rs:4+2 containers still
//! read back, so `cairn scrub` must not call them lost. It says which
//! shards it could not rewrite (their branch refuses writes and no other
//! branch is free), names no file, and exits 0; once the branch is back
//! (the next mount recreates its directory) scrub restores every shard and
//! `cairn check` is clean.

mod common;

use std::fs;

use common::shards::{assert_reads_back, mount, repo_over, write_all};
use common::{cairn, ok, random};
use serde_json::Value;

#[test]
fn scrub_verdict_holds_with_a_branch_deleted_while_mounted() {
    let base = tempfile::tempdir().unwrap();
    let repo = repo_over(base.path(), &["a", "b", "c", "d", "e", "f"], "rs:4+2");
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("f{i}"), random(250_000 + i * 40_001, i as u64 + 3)))
        .collect();
    let m = mount(&repo, base.path());
    write_all(&m, &files);
    m.unmount();

    let m = mount(&repo, base.path());
    fs::remove_dir_all(repo.join("br/c")).unwrap();
    let out = cairn(&repo, &["scrub", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["lost"], serde_json::json!([]), "{report}");
    assert_eq!(report["affected_files"], serde_json::json!([]), "{report}");
    let degraded = report["degraded"].as_array().unwrap();
    assert!(!degraded.is_empty(), "{report}");
    for d in degraded {
        let d = d.as_str().unwrap();
        assert!(d.contains("on c:") && d.contains("rewrite failed"), "{d}");
    }
    assert_reads_back(&m, &files);
    let text = String::from_utf8_lossy(&cairn(&repo, &["scrub"]).stdout).to_string();
    assert!(
        text.contains("NOT RESTORED") && !text.contains("LOST"),
        "{text}"
    );
    m.unmount();

    // Mounting again recreates the branch's directory: scrub refills it.
    let m = mount(&repo, base.path());
    let healed: Value = serde_json::from_str(&ok(&repo, &["scrub", "--json"])).unwrap();
    assert_eq!(
        healed["repaired"].as_array().unwrap().len(),
        degraded.len(),
        "{healed}"
    );
    let again: Value = serde_json::from_str(&ok(&repo, &["scrub", "--json"])).unwrap();
    assert_eq!(again["healthy"], again["containers"], "{again}");
    assert_reads_back(&m, &files);
    m.unmount();
    ok(&repo, &["check"]);
}
