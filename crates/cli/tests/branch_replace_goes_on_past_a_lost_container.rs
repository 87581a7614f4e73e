//! `cairn branch replace` with one container lost beyond its policy (its
//! branch gone and a block of another of its shards bad in the same row):
//! every other container is rebuilt onto the new branch, cairn.toml drops
//! the old one, and the lost container is listed with the files that have
//! data in it; exit status 1. Every file then reads back exactly or is
//! named, and scrub agrees.

mod common;

use std::fs;

use common::shards::{blocks_in, containers, corrupt_block, mount, repo_over, write_all};
use common::{cairn, random};
use serde_json::Value;

#[test]
fn branch_replace_goes_on_past_a_lost_container() {
    let base = tempfile::tempdir().unwrap();
    let policy = "parity:2";
    let repo = repo_over(base.path(), &["a", "b", "c"], policy);
    // A spare branch no rule uses yet.
    let toml = repo.join("cairn.toml");
    let mut text = fs::read_to_string(&toml).unwrap();
    text += "\n[[branch]]\nname = \"d\"\nkind = \"local\"\npath = \"br/d\"\n";
    fs::write(&toml, text).unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("f{i}"), random(300_000 + i * 50_001, i as u64 + 11)))
        .collect();
    let m = mount(&repo, base.path());
    write_all(&m, &files);
    m.unmount();

    // Branch a is gone; in the largest container, the shard on b is also
    // bad in row 1, which leaves that row one good block of the two needed.
    let br = repo.join("br");
    let (name, shards) = containers(&br)
        .into_iter()
        .max_by_key(|(_, s)| blocks_in(&s[0].1, policy))
        .unwrap();
    let on_b = shards
        .iter()
        .find(|(_, p)| p.starts_with(br.join("b")))
        .map(|(_, p)| p.clone())
        .unwrap();
    corrupt_block(&on_b, policy, 1);
    fs::remove_dir_all(br.join("a")).unwrap();

    let out = cairn(&repo, &["branch", "replace", "a", "d"]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("LOST containers/00000/{name}")),
        "{stderr}"
    );
    assert!(stderr.contains("cannot be read"), "{stderr}");
    assert!(!stderr.contains("could not be moved"), "{stderr}");
    let named: Vec<String> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("lost data in file: "))
        .map(str::to_string)
        .collect();
    assert!(!named.is_empty(), "{stderr}");
    let toml_now = fs::read_to_string(&toml).unwrap();
    assert!(!toml_now.contains("name = \"a\""), "{toml_now}");

    // Everything else was rebuilt onto d: each file reads back exactly or
    // is one of those named, and fails.
    assert!(!common::shards::shard_files(&br.join("d")).is_empty());
    let m = mount(&repo, base.path());
    for (file, data) in &files {
        let path = format!("/{file}");
        match fs::read(m.path(file)) {
            Ok(got) => {
                assert!(got == *data, "{file} read back wrong bytes");
                assert!(!named.contains(&path), "{file} reads but is named lost");
            }
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{file}: {e}");
                assert!(named.contains(&path), "{file} fails but is not named");
            }
        }
    }
    let out = cairn(&repo, &["scrub", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert_eq!(report["lost"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(
        report["affected_files"],
        serde_json::json!(named),
        "{report}"
    );
    m.unmount();
}
