//! Snapshots, clones, restores, versions, garbage collection and recovery,
//! through a real mount and the real `cairn` commands (which reach the
//! mounted file system over its control socket).

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{cairn, ok, Mount, CAIRN};
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

fn random(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill_bytes(&mut v);
    v
}

/// Every regular file under `dir` (relative path -> bytes), symlink targets
/// and directories, skipping `.snapshots`.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(base, &p, out);
            } else if t.is_symlink() {
                out.insert(
                    rel,
                    fs::read_link(&p)
                        .unwrap()
                        .into_os_string()
                        .into_encoded_bytes(),
                );
            } else {
                out.insert(rel, fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Changes made through the CLI reach the mount behind the kernel's back:
/// they show once the kernel's entry and attribute cache (1 s) expires.
fn settle() {
    std::thread::sleep(Duration::from_millis(1200));
}

fn errno(r: std::io::Result<impl std::fmt::Debug>) -> i32 {
    r.expect_err("should fail").raw_os_error().unwrap()
}

#[test]
fn snapshots_are_frozen_read_only_and_restorable() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut rng = StdRng::seed_from_u64(7);
    let big = random(&mut rng, 3 << 20);
    fs::create_dir_all(m.path("dir/sub")).unwrap();
    fs::write(m.path("small.txt"), b"hello").unwrap();
    fs::write(m.path("big.bin"), &big).unwrap();
    fs::write(m.path("dir/sub/c.txt"), b"deep").unwrap();
    fs::hard_link(m.path("big.bin"), m.path("dir/link.bin")).unwrap();
    std::os::unix::fs::symlink("small.txt", m.path("sym")).unwrap();
    let before = tree(&m.dir);

    ok(&m.repo, &["snapshot", "create", "s1"]);
    fs::write(m.path("big.bin"), b"overwritten").unwrap();
    fs::remove_file(m.path("small.txt")).unwrap();
    fs::rename(m.path("dir"), m.path("moved")).unwrap();
    fs::write(m.path("new.txt"), b"new").unwrap();

    let snap = m.path(".snapshots/s1");
    assert_eq!(
        tree(&snap),
        before,
        "a snapshot never changes after later writes"
    );
    let root_names: Vec<_> = fs::read_dir(&m.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !root_names.iter().any(|n| n == ".snapshots"),
        "hidden from readdir"
    );
    let listed: Vec<_> = fs::read_dir(m.path(".snapshots"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(listed, ["s1"]);
    let a = fs::metadata(snap.join("big.bin")).unwrap();
    let b = fs::metadata(snap.join("dir/link.bin")).unwrap();
    assert_eq!(
        a.ino(),
        b.ino(),
        "hard links share an inode in a snapshot too"
    );

    assert_eq!(errno(fs::write(snap.join("x"), b"no")), libc::EROFS);
    assert_eq!(
        errno(
            fs::OpenOptions::new()
                .write(true)
                .open(snap.join("big.bin"))
                .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"))
        ),
        libc::EROFS
    );
    assert_eq!(errno(fs::remove_file(snap.join("small.txt"))), libc::EROFS);
    assert_eq!(errno(fs::create_dir(snap.join("d"))), libc::EROFS);
    assert_eq!(
        errno(fs::rename(snap.join("sym"), snap.join("sym2"))),
        libc::EROFS
    );

    ok(&m.repo, &["snapshot", "create", "s2"]);
    let diff = ok(&m.repo, &["snapshot", "diff", "s1", "s2"]);
    for line in [
        "- /small.txt",
        "- /dir",
        "+ /moved",
        "+ /new.txt",
        "M /big.bin",
    ] {
        assert!(
            diff.lines().any(|l| l == line),
            "{line:?} missing from diff:\n{diff}"
        );
    }
    let list: serde_json::Value =
        serde_json::from_str(&ok(&m.repo, &["snapshot", "list", "--json"])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2, "{list}");

    // Restore a deleted file, and a whole directory under a new name.
    ok(&m.repo, &["restore", "s1", "/small.txt"]);
    settle();
    assert_eq!(fs::read(m.path("small.txt")).unwrap(), b"hello");
    ok(&m.repo, &["restore", "s1", "dir", "--to", "dir-back"]);
    settle();
    assert_eq!(fs::read(m.path("dir-back/sub/c.txt")).unwrap(), b"deep");
    assert_eq!(fs::read(m.path("dir-back/link.bin")).unwrap(), big);
    let refused = cairn(&m.repo, &["restore", "s1", "/small.txt"]);
    assert!(
        !refused.status.success(),
        "restoring over an existing file needs --overwrite"
    );
    ok(&m.repo, &["restore", "s1", "/big.bin", "--overwrite"]);
    settle();
    assert_eq!(fs::read(m.path("big.bin")).unwrap(), big);

    // A clone is independent of its source, both ways.
    ok(&m.repo, &["clone", "/big.bin", "/clone.bin"]);
    settle();
    assert_eq!(fs::read(m.path("clone.bin")).unwrap(), big);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m.path("clone.bin"))
        .unwrap();
    std::io::Write::write_all(&mut f, b"CHANGED").unwrap();
    drop(f);
    assert_eq!(fs::read(m.path("big.bin")).unwrap(), big);
    fs::write(m.path("big.bin"), b"source changed").unwrap();
    assert_eq!(&fs::read(m.path("clone.bin")).unwrap()[..7], b"CHANGED");
    assert_eq!(fs::read(m.path("clone.bin")).unwrap()[7..], big[7..]);
    ok(
        &m.repo,
        &["clone", &m.path("moved").display().to_string(), "tree-copy"],
    );
    settle();
    assert_eq!(tree(&m.path("tree-copy")), tree(&m.path("moved")));

    let stats = ok(&m.repo, &["stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert!(stats["fs_files"].as_u64().unwrap() >= 8, "{stats}");

    ok(&m.repo, &["snapshot", "delete", "s1"]);
    assert!(!cairn(&m.repo, &["snapshot", "delete", "s1"])
        .status
        .success());
    let (repo, _) = m.unmount();
    // Without a daemon the same commands open the repository themselves.
    let list: serde_json::Value =
        serde_json::from_str(&ok(&repo, &["snapshot", "list", "--json"])).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
}

#[test]
fn gc_reclaims_space_and_keeps_everything_reachable_under_concurrent_writes() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut rng = StdRng::seed_from_u64(11);
    // The model: path -> content, and per snapshot its own copy.
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut snapshots: Vec<(String, BTreeMap<String, Vec<u8>>)> = Vec::new();
    let mut pool: Vec<Vec<u8>> = (0..6).map(|_| random(&mut rng, 300 << 10)).collect();

    let repo = m.repo.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gc_loop = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                ok(&repo, &["gc", "--threshold", "1.0"]);
                runs += 1;
            }
            runs
        })
    };
    for round in 0..40 {
        match rng.gen_range(0..10) {
            0..=4 => {
                // New data, or a copy of earlier data (deduplicated).
                let data = if rng.gen_bool(0.5) {
                    pool[rng.gen_range(0..pool.len())].clone()
                } else {
                    let len = rng.gen_range(1..400) << 10;
                    let d = random(&mut rng, len);
                    pool.push(d.clone());
                    d
                };
                let name = format!("f{round}");
                fs::write(m.path(&name), &data).unwrap();
                model.insert(name, data);
            }
            5..=7 if !model.is_empty() => {
                let k = model
                    .keys()
                    .nth(rng.gen_range(0..model.len()))
                    .unwrap()
                    .clone();
                fs::remove_file(m.path(&k)).unwrap();
                model.remove(&k);
            }
            8 => {
                let name = format!("s{round}");
                ok(&m.repo, &["snapshot", "create", &name]);
                snapshots.push((name, model.clone()));
            }
            _ if snapshots.len() > 1 => {
                let (name, _) = snapshots.remove(0);
                ok(&m.repo, &["snapshot", "delete", &name]);
            }
            _ => {}
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = gc_loop.join().unwrap();
    assert!(runs >= 1);
    ok(&m.repo, &["gc", "--threshold", "1.0"]);
    let live: BTreeMap<String, Vec<u8>> = tree(&m.dir);
    assert_eq!(live, model, "every surviving file reads back exactly");
    for (name, files) in &snapshots {
        assert_eq!(
            &tree(&m.path(&format!(".snapshots/{name}"))),
            files,
            "snapshot {name}"
        );
    }
    let (repo, _) = m.unmount();
    let check = cairn(&repo, &["check"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    // Deleting everything and collecting shrinks the repository on disk.
    let m = Mount::start(repo.clone(), base.path().join("mnt"));
    for name in model.keys() {
        fs::remove_file(m.path(name)).unwrap();
    }
    for (name, _) in &snapshots {
        ok(&m.repo, &["snapshot", "delete", name]);
    }
    let (repo, _) = m.unmount();
    // Versions keep history too: with every version dropped but the newest
    // (written now, of the empty tree), nothing old stays reachable.
    let roots: serde_json::Value = serde_json::from_str(&ok(&repo, &["roots", "--json"])).unwrap();
    for v in roots.as_array().unwrap() {
        let label = v["label"].as_str().unwrap();
        if label.starts_with("version/") {
            ok(&repo, &["rm", label]);
        }
    }
    let size = |p: &Path| -> u64 {
        let out = Command::new("du").arg("-sb").arg(p).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let before = size(&repo.join("branches"));
    let report = ok(&repo, &["gc", "--threshold", "1.0", "--json"]);
    let after = size(&repo.join("branches"));
    let report: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert!(
        report["freed_bytes"].as_u64().unwrap() > 1 << 20,
        "{report}"
    );
    assert!(after + (1 << 20) < before, "disk use {before} -> {after}");
    assert!(cairn(&repo, &["check"]).status.success());
}

#[test]
fn recovery_from_a_deleted_metadata_engine_reproduces_the_tree() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let mut rng = StdRng::seed_from_u64(3);
    for d in 0..4 {
        fs::create_dir_all(m.path(&format!("d{d}/e"))).unwrap();
        for f in 0..5 {
            let len = if f % 2 == 0 { 100 } else { 200 << 10 };
            fs::write(m.path(&format!("d{d}/e/f{f}")), random(&mut rng, len)).unwrap();
        }
    }
    std::os::unix::fs::symlink("d0/e/f0", m.path("link")).unwrap();
    fs::hard_link(m.path("d1/e/f1"), m.path("hard")).unwrap();
    ok(&m.repo, &["version"]);
    let expected = tree(&m.dir);
    let modes: Vec<u32> = fs::read_dir(m.path("d0/e"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().mode())
        .collect();
    let (repo, dir) = m.unmount();

    fs::remove_dir_all(repo.join("meta")).unwrap();
    let refused = Command::new(CAIRN)
        .args([
            "--repo",
            repo.to_str().unwrap(),
            "mount",
            dir.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(msg.contains("cairn recover"), "{msg}");

    ok(&repo, &["recover"]);
    let m = Mount::start(repo, dir);
    assert_eq!(tree(&m.dir), expected);
    let again: Vec<u32> = fs::read_dir(m.path("d0/e"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().mode())
        .collect();
    assert_eq!(again, modes);
    assert_eq!(
        fs::metadata(m.path("hard")).unwrap().ino(),
        fs::metadata(m.path("d1/e/f1")).unwrap().ino()
    );
    fs::write(m.path("after"), b"writable").unwrap();
    let (repo, _) = m.unmount();

    // A damaged (not missing) engine is named on mount too.
    fs::write(repo.join("meta/fs.redb"), b"garbage").unwrap();
    let out = Command::new(CAIRN)
        .args([
            "--repo",
            repo.to_str().unwrap(),
            "mount",
            base.path().join("mnt").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cairn recover"));
}

#[test]
fn gc_killed_mid_run_leaves_a_consistent_repo() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let mut rng = StdRng::seed_from_u64(5);
    // Blocks shared between kept and dropped files, so dropped files'
    // containers stay partly live and gc has chunks to copy forward.
    let pool: Vec<Vec<u8>> = (0..24).map(|_| random(&mut rng, 256 << 10)).collect();
    let mut kept = Vec::new();
    let mut landed = 0;
    let mut n = 0;
    for delay_ms in [5u64, 20, 40, 70, 100, 150, 220, 300] {
        // Fresh garbage for every run, so each one has work when it is killed.
        for _ in 0..4 {
            let mut data = random(&mut rng, 1 << 20);
            for _ in 0..4 {
                data.extend_from_slice(&pool[rng.gen_range(0..pool.len())]);
            }
            let file = base.path().join("in");
            fs::write(&file, &data).unwrap();
            let label = format!("r{n}");
            ok(&repo, &["put", file.to_str().unwrap(), "--name", &label]);
            if n % 2 == 0 {
                kept.push((label, data));
            } else {
                ok(&repo, &["rm", &label]);
            }
            n += 1;
        }
        let mut child = Command::new(CAIRN)
            .args([
                "--repo",
                repo.to_str().unwrap(),
                "-q",
                "gc",
                "--threshold",
                "1.0",
            ])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        if child.try_wait().unwrap().is_none() {
            landed += 1;
        }
        let _ = child.kill();
        child.wait().unwrap();
        let check = cairn(&repo, &["check"]);
        assert!(
            check.status.success(),
            "after kill at {delay_ms} ms: {}",
            String::from_utf8_lossy(&check.stdout)
        );
        for (label, data) in &kept {
            let out = cairn(&repo, &["get", label]);
            assert!(out.status.success(), "{label} after kill at {delay_ms} ms");
            assert!(
                out.stdout == *data,
                "{label} differs after kill at {delay_ms} ms"
            );
        }
    }
    assert!(landed > 0, "no kill landed while gc was running");
    ok(&repo, &["gc", "--threshold", "1.0"]);
    assert!(cairn(&repo, &["check"]).status.success());
    for (label, data) in &kept {
        assert_eq!(cairn(&repo, &["get", label]).stdout, *data, "{label}");
    }
}
