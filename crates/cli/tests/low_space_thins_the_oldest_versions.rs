//! When free space runs low, the file system drops its oldest automatic
//! versions by itself (never the newest, never a snapshot) and collects
//! what only they held, before writes fail: a repository on a 64 MiB disk,
//! a 16 MiB file held only by an old version, then enough written to go
//! under `gc.keep_free_percent` of free space. `cairn versions` lists and
//! prunes them on demand too.

mod common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{edit_config, ok, plain_container_bytes, random, write_synced, Mount};

fn versions(repo: &Path) -> Vec<String> {
    let list: serde_json::Value =
        serde_json::from_str(&ok(repo, &["versions", "list", "--json"])).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v["label"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_oldest_versions_go_when_space_runs_low() {
    let base = tempfile::tempdir().unwrap();
    let (_disk, repo, mnt) = common::repo_on_tmpfs(base.path(), 64);
    edit_config(
        &repo,
        &[
            ("version_seconds = 30", "version_seconds = 0"),
            ("auto_after = \"8MiB\"", "auto_after = 0"),
            ("auto_check_seconds = 5", "auto_check_seconds = 1"),
            ("keep_free_percent = 5", "keep_free_percent = 50"),
        ],
    );
    let m = Mount::start(repo.clone(), mnt);
    write_synced(&m.path("old"), &random(16 << 20, 1)).unwrap();
    ok(&repo, &["snapshot", "create", "kept"]);
    ok(&repo, &["version"]);
    fs::remove_file(m.path("old")).unwrap();
    write_synced(&m.path("small"), b"a small file").unwrap();
    ok(&repo, &["version"]);
    // The snapshot holds "old" too: dropped, so only versions hold it.
    ok(&repo, &["snapshot", "delete", "kept"]);
    assert_eq!(versions(&repo).len(), 2);
    let held = plain_container_bytes(&repo);

    // Under half the disk free: the daemon drops the older version.
    let new = random(16 << 20, 2);
    write_synced(&m.path("new"), &new).unwrap();
    let started = Instant::now();
    while versions(&repo).len() > 1 && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(versions(&repo).len(), 1, "the older version is still there");
    let mut now = plain_container_bytes(&repo);
    while now + (12 << 20) > held + (16 << 20) && started.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(200));
        now = plain_container_bytes(&repo);
    }
    assert!(
        now + (12 << 20) <= held + (16 << 20),
        "containers {held} + 16 MiB written -> {now}: the deleted file was not collected"
    );
    assert!(fs::read(m.path("new")).unwrap() == new);
    m.unmount();
}

#[test]
fn versions_are_listed_and_pruned_on_demand() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let mnt = base.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    ok(&repo, &["init"]);
    edit_config(&repo, &[("version_seconds = 30", "version_seconds = 0")]);
    let m = Mount::start(repo.clone(), mnt);
    for i in 0..3 {
        write_synced(&m.path(&format!("f{i}")), b"x").unwrap();
        ok(&repo, &["version"]);
    }
    let list: serde_json::Value =
        serde_json::from_str(&ok(&repo, &["versions", "list", "--json"])).unwrap();
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3);
    // Written within the hour: kept at least an hour; the newest without end.
    let created = list[0]["created"].as_i64().unwrap();
    assert!(list[0]["kept_until"].as_i64().unwrap() >= created + 3600);
    assert!(list[2]["kept_until"].is_null());
    let text = ok(&repo, &["versions", "list"]);
    assert!(
        text.contains("version/1") && text.contains("KEPT UNTIL"),
        "{text}"
    );

    let dry = ok(&repo, &["versions", "prune", "--dry-run"]);
    assert!(dry.contains("would drop 2 version(s)"), "{dry}");
    assert_eq!(versions(&repo).len(), 3);
    let pruned: serde_json::Value =
        serde_json::from_str(&ok(&repo, &["versions", "prune", "--json"])).unwrap();
    assert_eq!(pruned["kept"], 1);
    assert_eq!(pruned["dropped"].as_array().unwrap().len(), 2);
    assert_eq!(versions(&repo), vec![list[2]["label"].as_str().unwrap()]);
    // The newest always stays.
    let again = ok(&repo, &["versions", "prune", "--keep", "0"]);
    assert!(again.contains("nothing to drop"), "{again}");
    m.unmount();
}
