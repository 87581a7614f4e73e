//! A `[[rule]]` by path protects a file whose name this mount never looked
//! up: the file is made in one mount, and written in the next right after
//! `ls -l` listed its directory (the kernel takes its entry from that
//! listing and asks for no lookup). The path comes from the metadata
//! engine's parent pointers, so the data goes to the rule's branch, and
//! `policy show` names the rule.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{ok, random, sh, Mount};

/// The container files on a branch directory.
fn containers(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else if p.to_string_lossy().contains("containers/") {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn a_path_rule_matches_a_file_this_mount_never_looked_up() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(&repo, &["init"]);
    let mut config = fs::read_to_string(repo.join("cairn.toml")).unwrap();
    for (name, label) in [("plain", "d"), ("pinned", "p")] {
        config += &format!(
            "\n[[branch]]\nname = \"{name}\"\nkind = \"local\"\npath = \"br/{name}\"\nlabels = [\"{label}\"]\n"
        );
    }
    config += "\n[[rule]]\nname = \"pinned\"\npath = \"keep/**\"\npolicy = \"single\"\nbranches = [\"p\"]\n";
    config += "\n[default_rule]\npolicy = \"single\"\nbranches = [\"d\"]\n";
    fs::write(repo.join("cairn.toml"), config).unwrap();

    // First mount: the file exists, empty (no data stored anywhere).
    let m = Mount::start(repo.clone(), dir.clone());
    fs::create_dir_all(m.path("keep/deep")).unwrap();
    fs::write(m.path("keep/deep/f.bin"), b"").unwrap();
    let (repo, dir) = m.unmount();
    let pinned = repo.join("br/pinned");
    assert!(containers(&pinned).is_empty(), "nothing stored on it yet");

    // Second mount: listed, then written (past the inline limit).
    let data = random(300_000, 7);
    let src = base.path().join("src.bin");
    fs::write(&src, &data).unwrap();
    let m = Mount::start(repo.clone(), dir.clone());
    let deep = m.path("keep/deep");
    sh(&format!(
        "ls -l '{d}' >/dev/null && cat '{s}' > '{d}/f.bin'",
        d = deep.display(),
        s = src.display()
    ));
    let show: serde_json::Value = serde_json::from_str(&ok(
        &repo,
        &["policy", "show", "/keep/deep/f.bin", "--json"],
    ))
    .unwrap();
    assert_eq!(show["source"], "rule \"pinned\"", "{show}");
    let (repo, dir) = m.unmount();
    assert!(
        !containers(&pinned).is_empty(),
        "the rule's branch holds the file's data"
    );

    // Brought back: the repository checks clean and the bytes are exact.
    ok(&repo, &["check"]);
    let m = Mount::start(repo.clone(), dir);
    assert_eq!(fs::read(m.path("keep/deep/f.bin")).unwrap(), data);
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
