//! Editing cairn.toml by hand on an unmounted repository: dropping a
//! branch that holds data, pointing a branch at an empty directory or at
//! another repository's branch is refused by `policy reload`, `mount` and
//! `status` before anything is written; adding a branch by hand or with
//! `branch add`, and moving a branch's directory along with its path, keep
//! working. Every file reads back exactly and `check` is clean at the end.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{cairn, ok, random, Mount};

fn branch(name: &str, path: &str) -> String {
    format!("\n[[branch]]\nname = \"{name}\"\nkind = \"local\"\npath = \"{path}\"\nlabels = [\"pool\"]\n")
}

/// Every shard and marker under `dir`, with its bytes.
fn blobs(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.insert(p.display().to_string(), fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// `args` fails naming `want`, and nothing under the branches or the
/// record changed.
fn refused(repo: &Path, args: &[&str], want: &str) {
    let before = (blobs(&repo.join("br")), blobs(&repo.join("meta")));
    let out = cairn(repo, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(want),
        "{args:?}: want {want:?} in {err}"
    );
    let after = (blobs(&repo.join("br")), blobs(&repo.join("meta")));
    assert!(before == after, "{args:?} wrote something");
}

#[test]
fn branches_dropped_moved_or_foreign_are_refused_and_additions_kept() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let mnt = base.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    ok(&repo, &["init"]);
    let path = repo.join("cairn.toml");
    let rule = "\n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"pool\"]\n";
    let good = fs::read_to_string(&path).unwrap()
        + &branch("a", "br/a")
        + &branch("b", "br/b")
        + &branch("c", "br/c")
        + rule;
    fs::write(&path, &good).unwrap();
    let m = Mount::start(repo.clone(), mnt.clone());
    let files: BTreeMap<String, Vec<u8>> = (0..8u64)
        .map(|i| (format!("f{i}"), random(25_000 + 5_000 * i as usize, 40 + i)))
        .collect();
    for (rel, data) in &files {
        fs::write(m.path(rel), data).unwrap();
    }
    m.unmount();
    assert!(blobs(&repo.join("br/c"))
        .keys()
        .any(|k| k.contains("containers/")));

    // Dropped: mirror:2 over a and b alone would parse and open.
    let without_c = good.replace(&branch("c", "br/c"), "");
    fs::write(&path, &without_c).unwrap();
    let mnt_arg = mnt.to_str().unwrap();
    for args in [
        &["policy", "reload"][..],
        &["mount", mnt_arg][..],
        &["status"][..],
    ] {
        refused(&repo, args, "branch \"c\"");
    }
    assert!(!common::is_mounted(&mnt));

    // Pointed at an empty directory: not where c is, and not marked as c.
    fs::write(&path, good.replace("path = \"br/c\"", "path = \"br/typo\"")).unwrap();
    refused(&repo, &["status"], "is at");
    assert!(!repo.join("br/typo").exists(), "the typo was created");

    // Pointed at another repository's branch.
    let other = base.path().join("other");
    ok(&other, &["init"]);
    let other_toml = other.join("cairn.toml");
    let text = fs::read_to_string(&other_toml).unwrap() + &branch("x", "br/x");
    fs::write(&other_toml, text).unwrap();
    ok(&other, &["status"]);
    let foreign = other.join("br/x");
    let with_foreign = good.clone() + &branch("d", foreign.to_str().unwrap());
    fs::write(&path, with_foreign).unwrap();
    refused(
        &repo,
        &["policy", "reload"],
        "belongs to another cairn repository",
    );

    // Adding branches by hand and with `branch add` is recorded.
    let with_d = good.clone() + &branch("d", "br/d");
    fs::write(&path, &with_d).unwrap();
    ok(&repo, &["policy", "reload"]);
    ok(
        &repo,
        &["branch", "add", "e", "--path", "br/e", "--label", "pool"],
    );
    let record = fs::read_to_string(repo.join("meta/repository.toml")).unwrap();
    for name in ["a", "b", "c", "d", "e"] {
        assert!(record.contains(&format!("name = \"{name}\"")), "{record}");
    }
    assert!(repo.join("br/d/cairn-branch").exists());

    // A branch's directory moved along with its path is still that branch.
    fs::rename(repo.join("br/b"), repo.join("br/b-moved")).unwrap();
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("path = \"br/b\"", "path = \"br/b-moved\"");
    fs::write(&path, text).unwrap();
    // Swapped with another branch's directory, it is refused.
    let swapped = fs::read_to_string(&path)
        .unwrap()
        .replace("path = \"br/a\"", "path = \"br/TMP\"")
        .replace("path = \"br/d\"", "path = \"br/a\"")
        .replace("path = \"br/TMP\"", "path = \"br/d\"");
    let moved = fs::read_to_string(&path).unwrap();
    fs::write(&path, swapped).unwrap();
    refused(&repo, &["status"], "this repository's branch");
    fs::write(&path, moved).unwrap();

    let m = Mount::start(repo.clone(), mnt);
    for (rel, data) in &files {
        assert!(fs::read(m.path(rel)).unwrap() == *data, "{rel} differs");
    }
    m.unmount();
    let report = ok(&repo, &["check"]);
    assert!(report.contains("no damage found"), "{report}");
}
