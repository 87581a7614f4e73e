//! Automatic versions no longer hold deleted data forever: with
//! `[versions]` keeping only the newest version, the version written after
//! a delete drops the one that held the data, and `gc` frees it. A
//! snapshot is never dropped by retention, so what it holds stays.

mod common;

use std::fs;

use common::{ok, random, Mount};

fn stats(repo: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap()
}

fn unique(repo: &std::path::Path) -> u64 {
    stats(repo)["unique_bytes"].as_u64().unwrap()
}

#[test]
fn gc_frees_deleted_data_once_retention_drops_its_versions() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap();
    let text = ["keep_minutes = 60", "keep_hourly = 24", "keep_daily = 7"]
        .iter()
        .fold(text, |t, line| {
            assert!(t.contains(line), "cairn.toml has no {line:?}");
            t.replace(line, &format!("{} = 0", line.split(" = ").next().unwrap()))
        });
    fs::write(&toml, text).unwrap();

    let m = Mount::start(repo.clone(), dir);
    let doomed = random(1 << 20, 7);
    let snapped = random(256 << 10, 8);
    fs::write(m.path("snapped"), &snapped).unwrap();
    fs::write(m.path("small"), b"an inline file").unwrap();
    ok(&repo, &["snapshot", "create", "s"]);
    fs::write(m.path("doomed"), &doomed).unwrap();
    let v = ok(&repo, &["version"]);
    assert!(v.starts_with("version/"), "{v}");
    let with_doomed = unique(&repo);

    fs::remove_file(m.path("doomed")).unwrap();
    fs::remove_file(m.path("snapped")).unwrap();
    let v = ok(&repo, &["version"]);
    assert!(v.contains("retention dropped 1 version(s)"), "{v}");
    let st = stats(&repo);
    assert_eq!(st["versions"], 1, "{st}");
    assert_eq!(st["snapshots"], 1, "{st}");
    assert!(
        st["held"]["snapshots_only_bytes"].as_u64().unwrap() >= snapped.len() as u64,
        "{st}"
    );
    assert!(
        st["held"]["versions_only_bytes"].as_u64().unwrap() < doomed.len() as u64,
        "a version still holds the deleted file: {st}"
    );

    let gc = ok(&repo, &["gc", "--threshold", "1", "--json"]);
    let gc: serde_json::Value = serde_json::from_str(gc.trim()).unwrap();
    assert!(gc["freed_bytes"].as_u64().unwrap() > 0, "{gc}");
    let after = unique(&repo);
    assert!(
        after + doomed.len() as u64 <= with_doomed,
        "gc did not free the deleted file: {with_doomed} -> {after}"
    );
    let (repo, dir) = m.unmount();

    // Brought back: check is clean, the snapshot's file restores exact.
    ok(&repo, &["check"]);
    ok(&repo, &["restore", "s", "/snapped"]);
    let m = Mount::start(repo.clone(), dir);
    assert_eq!(fs::read(m.path("snapped")).unwrap(), snapped);
    assert_eq!(fs::read(m.path("small")).unwrap(), b"an inline file");
    assert!(!m.path("doomed").exists());
    m.unmount();
    ok(&repo, &["check"]);
}
