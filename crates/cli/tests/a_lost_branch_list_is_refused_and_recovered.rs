//! A cairn.toml that lost its `[[branch]]` entries (emptied, or cut short)
//! on a three-branch repository: `mount`, `check` and `policy reload` each
//! refuse it, naming what differs, and write nothing; `cairn config
//! recover` writes the recorded file back, after which every file reads
//! back exactly and `check` is clean.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use common::{cairn, ok, random, Mount};

/// Every file under `dir` with its bytes, but the lock and the log (a
/// refused command may take the lock and log why).
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if rel.starts_with("run") || rel.starts_with("log") {
                continue;
            }
            if p.is_dir() {
                out.insert(rel, Vec::new());
                todo.push(p);
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn branch(name: &str) -> String {
    format!("\n[[branch]]\nname = \"{name}\"\nkind = \"local\"\npath = \"br/{name}\"\n")
}

#[test]
fn an_emptied_or_truncated_config_is_refused_and_recovered() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let mnt = base.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    ok(&repo, &["init"]);
    let path = repo.join("cairn.toml");
    let good = fs::read_to_string(&path).unwrap()
        + &branch("a")
        + &branch("b")
        + &branch("c")
        + "\n[default_rule]\npolicy = \"rs:2+1\"\n";
    fs::write(&path, &good).unwrap();

    let m = Mount::start(repo.clone(), mnt.clone());
    let files: BTreeMap<String, Vec<u8>> = (0..6u64)
        .map(|i| {
            (
                format!("d/f{i}"),
                random(30_000 + 7_000 * i as usize, i + 1),
            )
        })
        .collect();
    fs::create_dir_all(m.path("d")).unwrap();
    for (rel, data) in &files {
        fs::write(m.path(rel), data).unwrap();
    }
    m.unmount();

    // Emptied, and cut just before the second branch (which leaves a file
    // that parses: branch a alone, with the default single policy).
    let cut = good.find("\n[[branch]]\nname = \"b\"").unwrap();
    for (what, damaged, want) in [
        (
            "emptied",
            String::new(),
            vec!["configures no [[branch]]", "a, b, c"],
        ),
        (
            "truncated",
            good[..cut].to_string(),
            vec!["branch \"b\"", "branch \"c\"", "is missing"],
        ),
    ] {
        fs::write(&path, &damaged).unwrap();
        let before = tree(&repo);
        for args in [
            vec!["mount", mnt.to_str().unwrap()],
            vec!["check"],
            vec!["policy", "reload"],
        ] {
            let out = cairn(&repo, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{what}: {args:?} was accepted");
            for w in &want {
                assert!(err.contains(w), "{what}: {args:?}: want {w:?} in {err}");
            }
            assert!(err.contains("cairn config recover"), "{what}: {err}");
            assert!(!common::is_mounted(&mnt), "{what}: mounted anyway");
            assert!(tree(&repo) == before, "{what}: {args:?} wrote something");
        }
        // An existing file is replaced only with --force, and kept.
        let out = cairn(&repo, &["config", "recover"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("--force"));
        assert_eq!(fs::read_to_string(&path).unwrap(), damaged);
        let said = ok(&repo, &["config", "recover", "--force"]);
        assert!(said.contains("branches a, b, c"), "{said}");
        assert_eq!(fs::read_to_string(&path).unwrap(), good, "{what}");
        assert_eq!(
            fs::read_to_string(repo.join("cairn.toml.old")).unwrap(),
            damaged
        );
    }

    // A lost file comes back the same way, without --force.
    fs::remove_file(&path).unwrap();
    let out = cairn(&repo, &["check"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cairn config recover"));
    // init does not take the directory for an empty one.
    let out = cairn(&repo, &["init"]);
    assert!(
        !out.status.success(),
        "init over a repository that lost its config"
    );
    assert!(!path.exists(), "init wrote a new cairn.toml");
    ok(&repo, &["config", "recover"]);
    assert_eq!(fs::read_to_string(&path).unwrap(), good);

    let m = Mount::start(repo.clone(), mnt);
    for (rel, data) in &files {
        assert!(fs::read(m.path(rel)).unwrap() == *data, "{rel} differs");
    }
    m.unmount();
    let report = ok(&repo, &["check"]);
    assert!(report.contains("no damage found"), "{report}");
    assert!(
        repo.join("br/a/cairn-branch").exists(),
        "the branches are marked"
    );
}
