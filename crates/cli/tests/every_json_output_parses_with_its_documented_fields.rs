//! Every command that reports something, with --json, prints exactly one
//! JSON document with the fields docs/operations.md lists, and `[]` where
//! there is nothing to list. Walks the commands over one repository, then
//! checks it is clean and its files read back byte-exact.

mod common;

use std::fs;
use std::path::Path;

use common::{ok, random, Mount};
use serde_json::Value;

/// `cairn --repo REPO -q ARGS... ` (which must succeed) as one JSON
/// document, holding every field in `fields`.
fn json(repo: &Path, args: &[&str], fields: &[&str]) -> Value {
    let out = ok(repo, args);
    let v: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{args:?} printed no single JSON document ({e}):\n{out}"));
    let one = match &v {
        Value::Array(items) => items.first().cloned().unwrap_or(Value::Null),
        _ => v.clone(),
    };
    for f in fields {
        assert!(one.get(f).is_some(), "{args:?}: no field {f:?} in {one}");
    }
    v
}

fn empty_list(repo: &Path, args: &[&str]) {
    let v = json(repo, args, &[]);
    assert_eq!(v, Value::Array(Vec::new()), "{args:?}");
}

#[test]
fn every_json_output_parses_with_its_documented_fields() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(&repo, &["init"]);

    // Nothing yet: empty arrays.
    empty_list(&repo, &["roots", "--json"]);
    empty_list(&repo, &["snapshot", "list", "--json"]);
    empty_list(&repo, &["access-key", "list", "--json"]);
    empty_list(&repo, &["bucket", "list-public", "--json"]);

    let big = random(300_000, 3);
    let m = Mount::start(repo.clone(), dir.clone());
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/big"), &big).unwrap();
    fs::write(m.path("d/small"), b"small").unwrap();
    m.unmount();

    let file = base.path().join("stream");
    let stream = random(200_000, 4);
    fs::write(&file, &stream).unwrap();
    let put = json(
        &repo,
        &["put", file.to_str().unwrap(), "--name", "s", "--json"],
        &["len", "chunks", "new_chunks", "new_bytes", "stored_bytes"],
    );
    assert_eq!(put["len"], 200_000);
    let back = base.path().join("back");
    let get = json(
        &repo,
        &["get", "s", "-o", back.to_str().unwrap(), "--json"],
        &["bytes", "closed"],
    );
    assert_eq!(get["bytes"], 200_000);
    assert_eq!(fs::read(&back).unwrap(), stream);
    let roots = json(
        &repo,
        &["roots", "--json"],
        &["label", "kind", "root", "bytes", "created", "error"],
    );
    assert!(roots.as_array().unwrap().iter().any(|r| r["label"] == "s"));
    json(
        &repo,
        &["stats", "--json"],
        &[
            "logical_bytes",
            "stored_bytes",
            "dedup_ratio",
            "compression_ratio",
            "held",
            "chunks",
            "containers",
        ],
    );
    json(
        &repo,
        &["check", "--json"],
        &["check", "damaged_files", "damaged_roots"],
    );

    json(
        &repo,
        &["snapshot", "create", "s1", "--json"],
        &["name", "created", "files", "dirs", "logical_bytes"],
    );
    let list = json(
        &repo,
        &["snapshot", "list", "--json"],
        &["name", "created", "files", "logical_bytes", "unique_bytes"],
    );
    assert_eq!(list.as_array().unwrap().len(), 1);
    empty_list(&repo, &["snapshot", "diff", "s1", "s1", "--json"]);
    let cloned = json(
        &repo,
        &["clone", "/d", "/d2", "--json"],
        &["files", "dirs", "bytes"],
    );
    assert_eq!(cloned["files"], 2);
    json(&repo, &["snapshot", "create", "s2", "--json"], &["name"]);
    let diff = json(
        &repo,
        &["snapshot", "diff", "s1", "s2", "--json"],
        &["path", "kind"],
    );
    assert!(diff
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["kind"] == "added"));
    json(
        &repo,
        &["restore", "s1", "/d", "--to", "/d3", "--json"],
        &["files", "dirs", "bytes"],
    );
    json(
        &repo,
        &["version", "--json"],
        &["label", "written", "files", "dropped"],
    );
    json(
        &repo,
        &["gc", "--dry-run", "--json"],
        &[
            "marked_chunks",
            "candidates",
            "freed_bytes",
            "dropped_versions",
            "versions_kept",
            "oldest_version",
            "damaged_files",
        ],
    );
    json(
        &repo,
        &["versions", "list", "--json"],
        &["label", "number", "created", "logical_bytes", "kept_until"],
    );
    json(
        &repo,
        &["versions", "prune", "--dry-run", "--json"],
        &["dropped", "kept"],
    );
    json(
        &repo,
        &["gc", "--json"],
        &[
            "marked_chunks",
            "reclaimed_containers",
            "freed_bytes",
            "index_bytes_freed",
        ],
    );
    json(
        &repo,
        &["status", "--json"],
        &[
            "name", "degraded", "retired", "shards", "bytes", "delay_ms", "reads", "faults",
        ],
    );
    json(
        &repo,
        &["scrub", "--json"],
        &["containers", "healthy", "repaired", "lost", "plain"],
    );
    json(
        &repo,
        &["policy", "show", "/d/big", "--json"],
        &[
            "path",
            "policy",
            "branches",
            "source",
            "inline",
            "containers",
        ],
    );
    json(
        &repo,
        &["policy", "reload", "--json"],
        &["added", "reinstated"],
    );

    let key = json(
        &repo,
        &["access-key", "create", "--read-only", "--json"],
        &["id", "secret", "read_only", "buckets"],
    );
    let keys = json(
        &repo,
        &["access-key", "list", "--json"],
        &["id", "read_only", "buckets"],
    );
    assert_eq!(keys[0]["id"], key["id"]);
    assert!(keys[0].get("secret").is_none(), "a listed secret: {keys}");
    ok(&repo, &["bucket", "public", "web", "on"]);
    assert_eq!(
        json(&repo, &["bucket", "list-public", "--json"], &[]),
        serde_json::json!(["web"])
    );
    // doctor exits 1 or 2 when it finds something (a key never exported
    // here; a dead mount elsewhere on the machine): still one document.
    let out = common::cairn(&repo, &["doctor", "--json"]);
    assert!(matches!(out.status.code(), Some(0..=2)), "{out:?}");
    let doctor: Value = serde_json::from_slice(&out.stdout).unwrap();
    for f in ["repository", "status", "findings", "shared_index"] {
        assert!(doctor.get(f).is_some(), "no {f} in {doctor}");
    }
    // No [shared_index] in this repository's config.
    assert!(doctor["shared_index"].is_null(), "{doctor}");
    for f in ["check", "severity", "subject", "message", "fix"] {
        assert!(doctor["findings"][0].get(f).is_some(), "no {f} in {doctor}");
    }

    json(
        &repo,
        &["repair", "--rebuild-index", "--json"],
        &["containers", "chunks_indexed", "problems"],
    );
    json(
        &repo,
        &["config", "recover", "--force", "--json"],
        &["path", "kept", "branches"],
    );
    json(
        &repo,
        &["recover", "--json"],
        &["label", "files", "dirs", "roots"],
    );

    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");
    let m = Mount::start(repo, dir);
    for d in ["d", "d2", "d3"] {
        assert_eq!(fs::read(m.path(&format!("{d}/big"))).unwrap(), big, "{d}");
        assert_eq!(fs::read(m.path(&format!("{d}/small"))).unwrap(), b"small");
    }
    m.unmount();
}

/// The branch moves report as JSON too; doctor measures every local branch.
#[test]
fn branch_moves_and_doctor_on_branches_print_their_documents() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let toml = repo.join("cairn.toml");
    let mut config = fs::read_to_string(&toml).unwrap();
    for name in ["a", "b", "c"] {
        config += &format!(
            "\n[[branch]]\nname = \"{name}\"\nkind = \"local\"\npath = \"br/{name}\"\nlabels = [\"x\"]\n"
        );
    }
    config += "\n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"x\"]\n";
    fs::write(&toml, config).unwrap();
    let data = random(500_000, 8);
    let file = base.path().join("data");
    fs::write(&file, &data).unwrap();
    ok(&repo, &["put", file.to_str().unwrap(), "--name", "data"]);
    let status = json(&repo, &["status", "--json"], &["name", "shards", "bytes"]);
    assert_eq!(status.as_array().unwrap().len(), 3);

    ok(
        &repo,
        &["branch", "add", "d", "--path", "br/d", "--label", "x"],
    );
    let fields = ["rebuilt", "already_present", "failed", "lost", "lost_files"];
    let moved = json(&repo, &["branch", "replace", "a", "d", "--json"], &fields);
    assert_eq!(moved["lost"], serde_json::json!([]));
    json(&repo, &["branch", "remove", "b", "--json"], &fields);
    let status = json(&repo, &["status", "--json"], &["name"]);
    let names: Vec<_> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].clone())
        .collect();
    assert_eq!(names, ["c", "d"]);

    let out = common::cairn(&repo, &["doctor", "--json"]);
    let doctor: Value = serde_json::from_slice(&out.stdout).unwrap();
    for branch in ["branch c", "branch d", "metadata"] {
        assert!(
            doctor["findings"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["check"] == "free_space" && f["subject"] == branch),
            "no free space of {branch}: {doctor}"
        );
    }

    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");
    let back = base.path().join("back");
    ok(&repo, &["get", "data", "-o", back.to_str().unwrap()]);
    assert_eq!(fs::read(&back).unwrap(), data);
}
