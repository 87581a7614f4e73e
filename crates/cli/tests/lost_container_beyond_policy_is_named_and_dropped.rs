//! Containers lost beyond their policy (rs:4+2, three of six shards gone)
//! while some shards remain: `check` goes on and names the file by path,
//! `gc` skips them and finishes, `check --repair` rebuilds the index and
//! says what is still lost, `check --drop-lost` deletes the leftover
//! shards, and once the lost file is deleted `check` is clean and every
//! other file reads back exactly.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::{cairn, ok, random, Mount};

const BRANCHES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// A repository over six local branches, rs:4+2 for everything, no
/// versions written while mounted (a deleted file must be garbage).
fn repo(base: &Path) -> PathBuf {
    let repo = base.join("repo");
    ok(&repo, &["init"]);
    let path = repo.join("cairn.toml");
    let mut text = fs::read_to_string(&path)
        .unwrap()
        .replace("version_seconds = 30", "version_seconds = 0");
    for n in BRANCHES {
        text += &format!(
            "\n[[branch]]\nname = \"{n}\"\nkind = \"local\"\npath = \"br/{n}\"\nlabels = [\"p\"]\n"
        );
    }
    text += "\n[default_rule]\npolicy = \"rs:4+2\"\nbranches = [\"p\"]\n";
    fs::write(&path, text).unwrap();
    repo
}

/// Shard files per container id (the file name before `.s<index>`).
fn shards(repo: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut out: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for n in BRANCHES {
        let dir = repo.join("br").join(n).join("containers");
        for sub in fs::read_dir(&dir).unwrap() {
            for f in fs::read_dir(sub.unwrap().path()).unwrap() {
                let p = f.unwrap().path();
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                let (id, _) = name.rsplit_once(".s").unwrap();
                out.entry(id.to_string()).or_default().push(p);
            }
        }
    }
    out
}

/// Asserts what every `check` prints: one summary line, last, and no line
/// that says the same thing twice ("container X is corrupt: container X
/// is corrupt: ...").
fn assert_one_summary(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    let summaries = lines.iter().filter(|l| l.starts_with("summary:")).count();
    assert_eq!(summaries, 1, "{text}");
    assert!(lines.last().unwrap().starts_with("summary:"), "{text}");
    for line in &lines {
        let parts: Vec<&str> = line.split(": ").map(str::trim).collect();
        for (i, p) in parts.iter().enumerate() {
            assert!(
                !parts[i + 1..].contains(p),
                "a cause is repeated in {line:?}"
            );
        }
    }
}

fn check(repo: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["check"];
    all.extend_from_slice(args);
    let out = cairn(repo, &all);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_one_summary(&text);
    (out.status.success(), text)
}

#[test]
fn lost_containers_are_named_skipped_by_gc_and_dropped_for_good() {
    let base = tempfile::tempdir().unwrap();
    let repo = repo(base.path());
    let mnt = base.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = Mount::start(repo.clone(), mnt);
    // One file per stream, each stream's containers in order: the first
    // container of a 6 MiB file holds its data only (the recipe comes last).
    let junk = random(6 << 20, 1);
    let lost = random(6 << 20, 2);
    let mut kept = BTreeMap::new();
    for i in 0..4 {
        kept.insert(format!("keep/k{i}.bin"), random(300_000, 10 + i));
    }
    fs::create_dir_all(m.path("gone")).unwrap();
    fs::create_dir_all(m.path("data")).unwrap();
    fs::create_dir_all(m.path("keep")).unwrap();
    common::write_synced(&m.path("gone/junk.bin"), &junk).unwrap();
    let before_lost = shards(&repo).len();
    common::write_synced(&m.path("data/lost.bin"), &lost).unwrap();
    for (rel, data) in &kept {
        common::write_synced(&m.path(rel), data).unwrap();
    }
    fs::remove_file(m.path("gone/junk.bin")).unwrap();
    let (repo, dir) = m.unmount();

    // The first container of each big file loses three of its six shards.
    let all = shards(&repo);
    let ids: Vec<String> = all.keys().cloned().collect();
    let victims = [ids[0].clone(), ids[before_lost].clone()];
    for v in &victims {
        assert_eq!(all[v].len(), 6, "{v} is not stored as six shards");
        for p in &all[v][..3] {
            fs::remove_file(p).unwrap();
        }
    }

    // check goes on past both and names the live file by path.
    let (clean, text) = check(&repo, &[]);
    assert!(!clean, "check passed with two containers lost:\n{text}");
    for v in &victims {
        assert!(
            text.lines()
                .any(|l| l.contains(&format!("container {v} is unreadable"))),
            "container {v} is not reported:\n{text}"
        );
    }
    assert!(text.contains("LOST: file /data/lost.bin"), "{text}");
    assert!(!text.contains("/keep/"), "{text}");
    assert!(text.contains("--repair"), "no next step:\n{text}");

    // gc reclaims the deleted file's containers it can read and skips the
    // lost one, instead of failing.
    let gc = ok(&repo, &["gc", "--threshold", "1.0"]);
    assert!(
        gc.contains("skipped") && gc.contains(&victims[0]),
        "gc does not say it skipped the lost container:\n{gc}"
    );

    // --repair rebuilds the index and says what is still lost.
    let (clean, text) = check(&repo, &["--repair"]);
    assert!(!clean, "{text}");
    assert!(text.contains("repaired: rebuilt the index"), "{text}");
    assert!(text.contains("still DAMAGE"), "{text}");
    assert!(text.contains("--drop-lost"), "{text}");

    // --drop-lost gives the lost containers up: no shard of them is left.
    let (clean, text) = check(&repo, &["--drop-lost"]);
    assert!(!clean, "the lost file is no longer named:\n{text}");
    for v in &victims {
        assert!(
            text.contains(&format!("dropped damaged container {v}")),
            "{text}"
        );
    }
    assert!(text.contains("LOST: file /data/lost.bin"), "{text}");
    assert!(!text.contains("still DAMAGE"), "{text}");
    let left = shards(&repo);
    for v in &victims {
        assert!(!left.contains_key(v), "shards of {v} are left: {left:?}");
    }

    // Every other file reads back exactly; the lost one is an error, never
    // wrong bytes; deleting it leaves a clean repository.
    let m = Mount::start(repo.clone(), dir);
    for (rel, data) in &kept {
        assert!(fs::read(m.path(rel)).unwrap() == *data, "{rel} differs");
    }
    let e = fs::read(m.path("data/lost.bin")).expect_err("a lost file read back");
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    fs::remove_file(m.path("data/lost.bin")).unwrap();
    let (repo, _) = m.unmount();
    let (clean, text) = check(&repo, &[]);
    assert!(clean, "{text}");
    assert!(text.contains("summary: clean"), "{text}");
}
