//! A repository whose only branch is a directory served by `cairn chunkd`:
//! files written through the mount land on the chunkd's disk, `cairn
//! check` is clean, and after a remount (and a restart of the chunkd)
//! every file reads back byte-exact.

mod common;

use std::fs;

use common::chunkd::{token_file, Chunkd};
use common::shards::{assert_reads_back, mount, shard_files, write_all};
use common::{ok, random};

#[test]
fn files_on_a_chunkd_branch_read_back_after_remount() {
    let base = tempfile::tempdir().unwrap();
    let token = token_file(base.path());
    let mut server = Chunkd::start(&base.path().join("served"), &token);
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap()
        + &server.branch_toml("remote")
        + "\n[default_rule]\npolicy = \"single\"\nbranches = [\"remote\"]\n";
    fs::write(&toml, text).unwrap();

    let files: Vec<(String, Vec<u8>)> = vec![
        ("a".to_string(), random(700_000, 1)),
        ("dir/b".to_string(), random(150_000, 2)),
        ("dir/c".to_string(), random(3_000, 3)),
    ];
    let m = mount(&repo, base.path());
    write_all(&m, &files);
    let (repo, _) = m.unmount();

    let held = shard_files(&base.path().join("served"));
    assert!(
        !held.is_empty(),
        "the chunkd's directory holds no containers"
    );

    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");

    server.restart();
    let m = mount(&repo, base.path());
    assert_reads_back(&m, &files);
    let (repo, _) = m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");
}
