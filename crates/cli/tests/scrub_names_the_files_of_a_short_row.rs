//! A block row with fewer good blocks than the policy needs loses data,
//! but only there: reading a file with data in it fails with EIO, `cairn
//! scrub` names exactly the files that cannot be read back (by path, never
//! one that reads), repairs the rest, and exits 1; every other file reads
//! back exactly.

mod common;

use std::fs;

use common::shards::{blocks_in, containers, corrupt_block, mount, repo_over, write_all};
use common::{cairn, random};
use serde_json::Value;

#[test]
fn scrub_names_the_files_of_a_short_row() {
    let base = tempfile::tempdir().unwrap();
    let policy = "rs:2+1";
    let repo = repo_over(base.path(), &["a", "b", "c"], policy);
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("f{i}"), random(300_000 + i * 50_001, i as u64 + 7)))
        .collect();
    let m = mount(&repo, base.path());
    write_all(&m, &files);
    m.unmount();

    // In the largest container, row 1 keeps only shard 1's block: shard
    // 0's data there is lost. Shard 1 is also bad in row 0 (repairable).
    let br = repo.join("br");
    let (name, shards) = containers(&br)
        .into_iter()
        .max_by_key(|(_, s)| blocks_in(&s[0].1, policy))
        .unwrap();
    assert!(blocks_in(&shards[0].1, policy) >= 2, "{name}");
    corrupt_block(&shards[0].1, policy, 1);
    corrupt_block(&shards[2].1, policy, 1);
    corrupt_block(&shards[1].1, policy, 0);

    let m = mount(&repo, base.path());
    let out = cairn(&repo, &["scrub", "--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{report}");
    let lost = report["lost"].as_array().unwrap();
    assert_eq!(lost.len(), 1, "{report}");
    let line = lost[0].as_str().unwrap();
    assert!(line.contains(&name) && line.contains("(rs:2+1)"), "{line}");
    assert!(line.contains("row 1 "), "{line}");
    let named: Vec<&str> = report["affected_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(!named.is_empty(), "{report}");
    // Every file is either exact or named, and every named one fails.
    for (file, data) in &files {
        let path = format!("/{file}");
        match fs::read(m.path(file)) {
            Ok(got) => {
                assert!(got == *data, "{file} read back wrong bytes");
                assert!(
                    !named.contains(&path.as_str()),
                    "{file} reads but is named lost"
                );
            }
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{file}: {e}");
                assert!(
                    named.contains(&path.as_str()),
                    "{file} fails but is not named"
                );
            }
        }
    }

    // The text report: the container, its lost bytes, the files; never an
    // empty list.
    let out = cairn(&repo, &["scrub"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("LOST containers/"), "{text}");
    assert!(text.contains("unreadable"), "{text}");
    for f in &named {
        assert!(text.contains(&format!("lost data in file: {f}")), "{text}");
    }
    assert!(!text.contains("lost )") && !text.contains("()"), "{text}");
    let (repo, _) = m.unmount();

    // The way back: give up the lost bytes (the container's other chunks
    // are kept), delete the named files and the versions that held them;
    // then check is clean and every other file reads back exactly.
    let out = cairn(&repo, &["check", "--drop-lost"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for f in &named {
        assert!(text.contains(&format!("LOST: file {f}")), "{text}");
    }
    let m = mount(&repo, base.path());
    for f in &named {
        fs::remove_file(m.path(f.trim_start_matches('/'))).unwrap();
    }
    for (file, data) in files
        .iter()
        .filter(|(f, _)| !named.contains(&format!("/{f}").as_str()))
    {
        assert!(fs::read(m.path(file)).unwrap() == *data, "{file} differs");
    }
    let (repo, _) = m.unmount();
    let out = cairn(&repo, &["check"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for line in text.lines().filter(|l| l.contains("LOST: root")) {
        let label = line.split('"').nth(1).unwrap();
        assert!(label.starts_with("version/"), "{text}");
        assert!(cairn(&repo, &["rm", label]).status.success());
    }
    let out = cairn(&repo, &["check"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
