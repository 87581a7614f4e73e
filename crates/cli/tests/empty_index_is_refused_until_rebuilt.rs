//! A zero-length `index.redb` (the fingerprint index lost its content):
//! `mount` and other commands refuse the repository naming the command
//! that fixes it, `check` reports the mismatch instead of "no damage",
//! and both `repair --rebuild-index` and `check --repair` bring every file
//! back exactly.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{cairn, ok, random, Mount};

fn empty_the_index(repo: &Path) {
    let index = repo.join("meta/index.redb");
    assert!(index.exists(), "no index at {}", index.display());
    fs::File::create(&index).unwrap();
}

fn assert_all_read_back(m: &Mount, files: &BTreeMap<String, Vec<u8>>) {
    for (rel, data) in files {
        let got = fs::read(m.path(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(got == *data, "{rel} reads back different bytes");
    }
}

#[test]
fn an_empty_index_is_refused_at_open_and_rebuilt_by_either_repair() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut files = BTreeMap::new();
    for i in 0..12u64 {
        files.insert(format!("f{i}.bin"), random(150_000 + i as usize, i + 1));
    }
    for (rel, data) in &files {
        common::write_synced(&m.path(rel), data).unwrap();
    }
    let (repo, dir) = m.unmount();

    empty_the_index(&repo);
    let out = cairn(&repo, &["mount", dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mounted over an empty index");
    assert!(
        err.contains("does not match the store") && err.contains("cairn repair --rebuild-index"),
        "the refusal does not say what to run: {err}"
    );
    let out = cairn(&repo, &["stats"]);
    assert!(!out.status.success(), "stats opened an empty index");

    // check reports it (not "no damage") and says what to run.
    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "check passed over an empty index:\n{text}"
    );
    assert!(
        text.contains("the fingerprint index does not match the store"),
        "{text}"
    );
    let summary: Vec<&str> = text.lines().filter(|l| l.starts_with("summary:")).collect();
    assert_eq!(summary.len(), 1, "{text}");
    assert!(summary[0].contains("cairn check --repair"), "{text}");

    ok(&repo, &["repair", "--rebuild-index"]);
    let m = Mount::start(repo.clone(), dir.clone());
    assert_all_read_back(&m, &files);
    let (repo, _) = m.unmount();
    let text = ok(&repo, &["check"]);
    assert!(text.contains("summary: clean"), "{text}");

    // The same loss, repaired by check --repair this time.
    empty_the_index(&repo);
    let text = ok(&repo, &["check", "--repair"]);
    assert!(text.contains("summary: repaired, now clean"), "{text}");
    let m = Mount::start(repo.clone(), dir);
    assert_all_read_back(&m, &files);
    let (repo, _) = m.unmount();
    assert!(ok(&repo, &["check"]).contains("summary: clean"));
}
