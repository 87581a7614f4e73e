//! `cairn cluster init|status|add-etcd|move-shard` and `cairn mount
//! --cluster`: a file system whose namespace is sharded over two data
//! etcd clusters (plus the control cluster). Directories, renames and hard
//! links across them through a real FUSE mount; the root's shard moved to
//! the other cluster while mounted; after a remount every file reads back
//! byte-exact and `cairn check` is clean.

mod common;

use std::fs;

use common::etcd::{cluster_init, Etcd};
use common::{cairn, ok, random, Mount};

fn status(repo: &std::path::Path, url: &str) -> serde_json::Value {
    let out = cairn(repo, &["cluster", "status", "--cluster", url, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_mount_over_two_etcd_clusters_survives_a_shard_move_and_a_remount() {
    let (control, d0, d1) = (Etcd::start(), Etcd::start(), Etcd::start());
    let base = tempfile::tempdir().unwrap();
    let (repo, dir) = (base.path().join("repo"), base.path().join("mnt"));
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);

    let made = cluster_init(&repo, &control, &[&d0, &d1], "home", &["--shards", "16"]);
    let url = made["url"].as_str().unwrap().to_string();
    assert_eq!(url, control.url("home"));
    assert_eq!(made["clusters"].as_array().unwrap().len(), 2);
    let again = cairn(
        &repo,
        &[
            "cluster",
            "init",
            "--control",
            &control.hosts(),
            "--data",
            &d0.hosts(),
            "--fsid",
            "home",
        ],
    );
    assert!(
        !again.status.success(),
        "a second init of one file system is refused"
    );

    let st = status(&repo, &url);
    assert_eq!(st["shards"].as_array().unwrap().len(), 16);
    assert!(st["intents"].as_array().unwrap().is_empty());
    let root_home = st["shards"][0][0].as_u64().unwrap();

    let m = Mount::start_cmd(repo.clone(), dir.clone(), &["mount", "--cluster", &url]);
    let big = random(300_000, 7);
    let mut written = Vec::new();
    for i in 0..8 {
        let d = format!("d{i}");
        fs::create_dir(m.path(&d)).unwrap();
        fs::write(m.path(&format!("{d}/small")), format!("bytes {i}")).unwrap();
        written.push((format!("{d}/small"), format!("bytes {i}").into_bytes()));
    }
    fs::write(m.path("d0/big"), &big).unwrap();
    // Across directories (so, mostly, across clusters).
    for (i, w) in written.iter_mut().enumerate().skip(1) {
        let to = format!("d{}/moved{i}", i - 1);
        fs::rename(m.path(&w.0), m.path(&to)).unwrap();
        w.0 = to;
    }
    fs::hard_link(m.path("d0/small"), m.path("d7/link")).unwrap();
    fs::rename(m.path("d3"), m.path("d4/d3")).unwrap();
    for w in &mut written {
        if w.0.starts_with("d3/") {
            w.0 = format!("d4/{}", w.0);
        }
    }
    fs::remove_dir(m.path("d5")).unwrap_err();

    // The root's shard moves to the other data cluster under the mount.
    let to = (1 - root_home).to_string();
    ok(
        &repo,
        &["cluster", "move-shard", "--cluster", &url, "0", &to],
    );
    let st = status(&repo, &url);
    assert_eq!(st["shards"][0][0].as_u64().unwrap(), 1 - root_home);
    // The mount is on the collection board, and running.
    assert_eq!(
        st["mounted"],
        serde_json::json!([{"client": 0, "registered": true}]),
        "{st}"
    );
    fs::write(m.path("after-move"), b"written after the move").unwrap();
    written.push(("after-move".into(), b"written after the move".to_vec()));
    fs::File::open(m.path("d0/big"))
        .unwrap()
        .sync_all()
        .unwrap();
    ok(&repo, &["check"]);
    let (repo, dir) = m.unmount();
    assert_eq!(
        fs::read_to_string(repo.join("meta/remote")).unwrap().trim(),
        format!("cluster:{url}")
    );

    let m = Mount::start_cmd(repo.clone(), dir, &["mount", "--cluster", &url]);
    for (path, bytes) in &written {
        assert_eq!(&fs::read(m.path(path)).unwrap(), bytes, "{path}");
    }
    assert_eq!(fs::read(m.path("d0/big")).unwrap(), big);
    assert_eq!(fs::read(m.path("d7/link")).unwrap(), b"bytes 0");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(fs::metadata(m.path("d0/small")).unwrap().nlink(), 2);
    assert!(!m.path("d3").exists());
    ok(&repo, &["check"]);
    m.unmount();

    // A third data cluster joins; it owns nothing until a shard moves.
    let d2 = Etcd::start();
    let said = ok(
        &repo,
        &["cluster", "add-etcd", "--cluster", &url, &d2.hosts()],
    );
    assert!(said.contains("added data cluster 2"), "{said}");
    let st = status(&repo, &url);
    assert_eq!(st["clusters"].as_array().unwrap().len(), 3);
    assert_eq!(st["clusters"][2]["shards"].as_u64().unwrap(), 0);
    let human = ok(&repo, &["cluster", "status", "--cluster", &url]);
    assert!(human.contains("no unfinished intents"), "{human}");
    assert!(human.contains("no client mounted"), "{human}");
}
