//! `cairn stats` is one computation whether the daemon answers it (mounted)
//! or the command opens the repository itself (unmounted): with inline
//! small files, big files, a symlink, a snapshot and a stored stream, every
//! field of `stats --json` is the same before and after the unmount.

mod common;

use std::fs;
use std::path::Path;

use common::{ok, random, Mount};
use serde_json::Value;

fn stats(repo: &Path) -> serde_json::Map<String, Value> {
    match serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap() {
        Value::Object(m) => m,
        other => panic!("stats --json is not an object: {other}"),
    }
}

#[test]
fn stats_json_is_the_same_mounted_and_unmounted() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    // No version timer: unmounting must change nothing the answers count.
    common::no_versions(&repo);

    let m = Mount::start(repo.clone(), dir);
    let mut files = Vec::new();
    fs::create_dir_all(m.path("small/deeper")).unwrap();
    fs::create_dir(m.path("empty")).unwrap();
    for i in 0..40u64 {
        let rel = if i % 2 == 0 {
            format!("small/f{i}")
        } else {
            format!("small/deeper/f{i}")
        };
        let data = random(100 + (i as usize * 131) % 3000, i + 1);
        fs::write(m.path(&rel), &data).unwrap();
        files.push((rel, data));
    }
    let big = random(3 << 20, 77);
    fs::write(m.path("big"), &big).unwrap();
    fs::write(m.path("big-copy"), &big).unwrap();
    files.push(("big".into(), big.clone()));
    files.push(("big-copy".into(), big));
    std::os::unix::fs::symlink("big", m.path("link")).unwrap();
    ok(&m.repo, &["snapshot", "create", "before-stream"]);
    let stream = random(1 << 20, 5);
    let stream_file = base.path().join("stream");
    fs::write(&stream_file, &stream).unwrap();
    ok(
        &m.repo,
        &["put", stream_file.to_str().unwrap(), "--name", "stream"],
    );

    let mounted = stats(&m.repo);
    // The counts are of what this test made (the root directory included).
    assert_eq!(mounted["fs_files"], files.len() as u64 + 1, "{mounted:?}");
    assert_eq!(mounted["fs_dirs"], 4, "{mounted:?}");
    assert_eq!(mounted["fs_inline_files"], 40, "{mounted:?}");
    assert_eq!(mounted["snapshots"], 1, "{mounted:?}");

    let (repo, dir) = m.unmount();
    let unmounted = stats(&repo);
    let keys = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&mounted), keys(&unmounted));
    // `read_cache` is what the mount's caches did: there only while mounted.
    for (field, value) in mounted.iter().filter(|(f, _)| *f != "read_cache") {
        assert_eq!(
            &unmounted[field], value,
            "stats field {field:?} differs: mounted {value}, unmounted {}",
            unmounted[field]
        );
    }

    // Brought back: check is clean, every file and the stream byte-exact.
    ok(&repo, &["check"]);
    let out = base.path().join("stream-back");
    ok(&repo, &["get", "stream", "-o", out.to_str().unwrap()]);
    assert!(
        fs::read(&out).unwrap() == stream,
        "the stream reads back changed"
    );
    let m = Mount::start(repo, dir);
    for (rel, data) in &files {
        assert!(
            fs::read(m.path(rel)).unwrap() == *data,
            "{rel} reads back changed"
        );
    }
    m.unmount();
}
