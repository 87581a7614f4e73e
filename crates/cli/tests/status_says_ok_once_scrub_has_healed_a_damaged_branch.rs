//! A branch whose shards a scrub found damaged and rewrote is healthy
//! again: `cairn status` of the mount that ran the scrub says `ok` for it,
//! not `degraded` until the next mount; a second scrub finds nothing.

mod common;

use common::shards::{containers, corrupt_block, mount, repo_over, write_all};
use common::{ok, random};
use serde_json::Value;

/// Each branch's name and whether status calls it degraded.
fn health(repo: &std::path::Path) -> Vec<(String, bool, Value)> {
    let lines: Value = serde_json::from_str(&ok(repo, &["status", "--json"])).unwrap();
    lines
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["name"].as_str().unwrap().to_string(),
                b["degraded"].as_bool().unwrap(),
                b["last_error"].clone(),
            )
        })
        .collect()
}

#[test]
fn status_says_ok_once_scrub_has_healed_a_damaged_branch() {
    let base = tempfile::tempdir().unwrap();
    let repo = repo_over(base.path(), &["a", "b"], "mirror:2");
    let files: Vec<(String, Vec<u8>)> = (0..2)
        .map(|i| (format!("f{i}"), random(300_000, i + 1)))
        .collect();
    let m = mount(&repo, base.path());
    write_all(&m, &files);
    assert!(
        health(&repo).iter().all(|(_, degraded, _)| !degraded),
        "{:?}",
        health(&repo)
    );

    // Every copy on branch b damaged in its first block.
    let mut damaged = 0;
    for (_, shards) in containers(&repo.join("br")) {
        for (_, path) in shards
            .iter()
            .filter(|(_, p)| p.starts_with(repo.join("br/b")))
        {
            corrupt_block(path, "mirror:2", 0);
            damaged += 1;
        }
    }
    assert!(damaged > 0, "no shard on branch b");

    let scrub: Value = serde_json::from_str(&ok(&repo, &["scrub", "--json"])).unwrap();
    assert_eq!(
        scrub["repaired"].as_array().unwrap().len(),
        damaged,
        "{scrub}"
    );
    assert_eq!(scrub["degraded"], serde_json::json!([]), "{scrub}");
    assert_eq!(scrub["lost"], serde_json::json!([]), "{scrub}");

    let after = health(&repo);
    assert_eq!(after.len(), 2, "{after:?}");
    for (name, degraded, last_error) in &after {
        assert!(
            !degraded,
            "{name} still degraded after a clean scrub: {after:?}"
        );
        assert!(last_error.is_null(), "{name}: {last_error}");
    }
    let text = ok(&repo, &["status"]);
    assert!(!text.contains("degraded"), "{text}");
    let again: Value = serde_json::from_str(&ok(&repo, &["scrub", "--json"])).unwrap();
    assert_eq!(again["healthy"], again["containers"], "{again}");
    m.unmount();
}
