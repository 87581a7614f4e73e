//! Redundancy through a real mount and the real `cairn` commands: files
//! under every policy read back exactly after losing as many branches as
//! their policy tolerates (deleted directories, garbage shards, reads that
//! fail with an I/O error), one more
//! loss is reported with the files it affects, scrub heals, `branch
//! replace` survives `kill -9`, rules and xattrs choose policies, and bad
//! configurations are refused naming the culprit.

mod common;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use branch::testing::S3Proxy;
use common::{cairn, ok, Mount, CAIRN};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use serde_json::Value;

fn json(repo: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&ok(repo, args)).unwrap()
}

fn random(seed: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut v);
    v
}

/// A repository (not mounted) with `config` appended to its cairn.toml.
fn repo_with(base: &Path, config: &str) -> PathBuf {
    let repo = base.join("repo");
    ok(&repo, &["init"]);
    let path = repo.join("cairn.toml");
    let mut text = fs::read_to_string(&path).unwrap();
    text.push_str(config);
    fs::write(&path, text).unwrap();
    repo
}

fn local_branches(names: &[&str], label: &str) -> String {
    names
        .iter()
        .map(|n| {
            format!("\n[[branch]]\nname = \"{n}\"\nkind = \"local\"\npath = \"br/{n}\"\nlabels = [\"{label}\"]\n")
        })
        .collect()
}

fn rule(name: &str, path: &str, policy: &str, label: &str) -> String {
    format!(
        "\n[[rule]]\nname = \"{name}\"\npath = \"{path}\"\npolicy = \"{policy}\"\nbranches = [\"{label}\"]\n"
    )
}

fn mount(repo: &Path, base: &Path) -> Mount {
    let dir = base.join("mnt");
    fs::create_dir_all(&dir).unwrap();
    Mount::start(repo.to_path_buf(), dir)
}

/// After `gone` was replaced or removed: `status` lists `active` as the
/// branches in use, and `gone` at most as retired while shards are mapped
/// to it.
fn assert_moved_off(repo: &Path, gone: &str, active: &[&str]) {
    let status = json(repo, &["status", "--json"]);
    let listed: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["retired"] == false)
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, active, "{status}");
    for b in status.as_array().unwrap() {
        if b["retired"] == true {
            assert!(
                b["name"] == gone && b["shards"].as_u64() > Some(0),
                "{status}"
            );
        }
    }
}

/// Writes each file (creating its directory) and makes it durable.
fn write_files(m: &Mount, files: &BTreeMap<String, Vec<u8>>) {
    for (rel, data) in files {
        let p = m.path(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
        fs::File::open(&p).unwrap().sync_all().unwrap();
    }
}

fn assert_reads_back(m: &Mount, files: &BTreeMap<String, Vec<u8>>) {
    for (rel, data) in files {
        let got = fs::read(m.path(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"));
        assert!(got == *data, "{rel} reads back different bytes");
    }
}

/// Every shard blob on a local branch directory.
fn shard_files(dir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.to_string_lossy().contains("containers/") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.sort();
    out
}

/// Overwrites every shard on a branch with garbage of the same length.
fn garble(dir: &Path) {
    let shards = shard_files(dir);
    assert!(!shards.is_empty(), "{} holds no shard", dir.display());
    for (i, p) in shards.iter().enumerate() {
        let len = fs::metadata(p).unwrap().len() as usize;
        fs::write(p, random(1000 + i as u64, len)).unwrap();
    }
}

fn set_xattr(path: &Path, value: &str) -> std::io::Result<()> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let name = CString::new("user.cairn.policy").unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the given length.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn every_policy_reads_back_after_its_tolerance_of_losses_and_one_more_is_named() {
    let base = tempfile::tempdir().unwrap();
    let s3 = S3Proxy::start();
    let bucket = s3.new_bucket();
    let mut config = local_branches(&["m0", "m1"], "m");
    config += &local_branches(&["p0", "p1", "p2"], "p");
    config += &local_branches(&["r0", "r1", "r2", "r3"], "r");
    config += &local_branches(&["s0", "s1"], "s");
    config += &local_branches(&["d0"], "d");
    config += &format!(
        "\n[[branch]]\nname = \"cloud\"\nkind = \"s3\"\nendpoint = \"{}\"\nbucket = \"{}\"\naccess_key_id = \"{}\"\nsecret_access_key = \"{}\"\nlabels = [\"d\"]\n",
        bucket.endpoint, bucket.bucket, bucket.access_key_id, bucket.secret_access_key
    );
    config += &rule("mirror", "mirror/**", "mirror:2", "m");
    config += &rule("parity", "parity/**", "parity:2", "p");
    config += &rule("rs", "rs/**", "rs:2+2", "r");
    config += &rule("stripe", "stripe/**", "stripe:2", "s");
    config += "\n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"d\"]\n";
    let repo = repo_with(base.path(), &config);
    let mut files = BTreeMap::new();
    for (i, dir) in ["mirror", "parity", "rs", "stripe", "plain"]
        .iter()
        .enumerate()
    {
        for j in 0..3u64 {
            let len = 40_000 + 70_000 * j as usize;
            files.insert(format!("{dir}/f{j}"), random(i as u64 * 10 + j, len));
        }
    }
    let m = mount(&repo, base.path());
    write_files(&m, &files);
    let show = json(&repo, &["policy", "show", "/rs/f1", "--json"]);
    assert_eq!(show["source"], "rule \"rs\"");
    assert_eq!(show["policy"], "rs:2+2");
    let shards = show["containers"][0]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 4);
    let plain = json(&repo, &["policy", "show", "/plain/f0", "--json"]);
    assert_eq!(plain["source"], "the default rule");
    assert_eq!(plain["branches"], serde_json::json!(["d0", "cloud"]));
    let (repo, _) = m.unmount();

    // Each policy loses exactly what it tolerates.
    let br = repo.join("br");
    fs::remove_dir_all(br.join("m0")).unwrap();
    garble(&br.join("p1"));
    fs::remove_dir_all(br.join("r0")).unwrap();
    garble(&br.join("r3"));
    let m = mount(&repo, base.path());
    assert_reads_back(&m, &files);

    // Scrub heals it all while mounted; a second scrub finds nothing.
    let healed = json(&repo, &["scrub", "--json"]);
    assert!(healed["lost"].as_array().unwrap().is_empty(), "{healed}");
    assert!(
        !healed["repaired"].as_array().unwrap().is_empty(),
        "{healed}"
    );
    // Reads pick K of a coded container's shards by latency, so they need
    // not have met the garbage; scrub reads every shard, names the
    // branches it found bad, and once it rewrote their shards status calls
    // them healthy again.
    let repaired = healed["repaired"].to_string();
    assert!(
        repaired.contains("on p1") && repaired.contains("on r3"),
        "{healed}"
    );
    let status = json(&repo, &["status", "--json"]);
    let degraded: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["degraded"] == true)
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert!(
        !degraded.contains(&"p1") && !degraded.contains(&"r3"),
        "{status}"
    );
    let again = json(&repo, &["scrub", "--json"]);
    assert_eq!(again["healthy"], again["containers"], "{again}");

    // One loss more than mirror:2 tolerates for /mirror/f0: every shard
    // of its containers gone.
    let show = json(&repo, &["policy", "show", "/mirror/f0", "--json"]);
    let (repo, _) = m.unmount();
    for c in show["containers"].as_array().unwrap() {
        let id = u64::from_str_radix(c["container"].as_str().unwrap(), 16).unwrap();
        for (i, on) in c["shards"].as_array().unwrap().iter().enumerate() {
            for b in on.as_array().unwrap() {
                let shard = br
                    .join(b.as_str().unwrap())
                    .join(format!("containers/{:05x}/{id:016x}.s{i}", id >> 12));
                fs::remove_file(&shard).unwrap_or_else(|e| panic!("{}: {e}", shard.display()));
            }
        }
    }
    let m = mount(&repo, base.path());
    let err = fs::read(m.path("mirror/f0")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let out = cairn(&repo, &["scrub", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["affected_files"],
        serde_json::json!(["/mirror/f0"]),
        "{report}"
    );
    let lost = report["lost"].to_string();
    assert!(lost.contains("mirror:2"), "{lost}");
    let mut others = files.clone();
    others.remove("mirror/f0");
    assert_reads_back(&m, &others);
    let (repo, _) = m.unmount();

    // An I/O error from the kernel (not a missing or garbled blob): once
    // the mount has mapped them, every shard file on r1 becomes a
    // directory, so reading it fails with EISDIR. Coded reads always fetch
    // the data shards, so the rs files meet it and rebuild from parity.
    let m = mount(&repo, base.path());
    let on_r1 = shard_files(&br.join("r1"));
    assert!(!on_r1.is_empty());
    for shard in on_r1 {
        fs::remove_file(&shard).unwrap();
        fs::create_dir(&shard).unwrap();
    }
    let rs: BTreeMap<String, Vec<u8>> = files
        .iter()
        .filter(|(k, _)| k.starts_with("rs/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_reads_back(&m, &rs);
    let status = json(&repo, &["status", "--json"]);
    let r1 = status
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "r1")
        .unwrap();
    assert_eq!(r1["degraded"], true, "{status}");
    assert!(
        r1["last_error"].as_str().unwrap().contains("directory"),
        "{status}"
    );
    m.unmount();
}

#[test]
fn rules_and_xattrs_choose_the_policy_and_garbage_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let mut config = local_branches(&["a", "b", "c"], "all");
    config += "\n[[rule]]\nname = \"isos\"\nextension = \"iso\"\npolicy = \"mirror:3\"\n";
    config += "\n[[rule]]\nname = \"big\"\nmin_size = \"100KiB\"\npolicy = \"parity:2\"\n";
    let repo = repo_with(base.path(), &config);
    let m = mount(&repo, base.path());
    let files: BTreeMap<String, Vec<u8>> = [
        ("x.iso", 30_000),
        ("big.bin", 300_000),
        ("small.bin", 30_000),
        ("keep/inherits.bin", 300_000),
        ("keep/sub/deeper.bin", 30_000),
    ]
    .iter()
    .enumerate()
    .map(|(i, (n, len))| (n.to_string(), random(i as u64, *len)))
    .collect();
    fs::create_dir(m.path("keep")).unwrap();
    set_xattr(&m.path("keep"), "mirror:2").unwrap();
    let err = set_xattr(&m.path("keep"), "raid5").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    let err = set_xattr(&m.path("keep"), "mirror:4").unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::EINVAL),
        "needs 4 of 3 branches"
    );
    write_files(&m, &files);
    let show = |p: &str| json(&repo, &["policy", "show", p, "--json"]);
    let source_policy = |p: &str| {
        let v = show(p);
        (
            v["source"].as_str().unwrap().to_string(),
            v["policy"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(
        source_policy("/x.iso"),
        ("rule \"isos\"".into(), "mirror:3".into())
    );
    assert_eq!(
        source_policy("/big.bin"),
        ("rule \"big\"".into(), "parity:2".into())
    );
    assert_eq!(
        source_policy("/small.bin"),
        ("the default rule".into(), "single".into())
    );
    let xattr = "xattr user.cairn.policy".to_string();
    assert_eq!(
        source_policy("/keep/inherits.bin"),
        (xattr.clone(), "mirror:2".into())
    );
    assert_eq!(
        source_policy("/keep/sub/deeper.bin"),
        (xattr.clone(), "mirror:2".into())
    );
    // The containers really are stored that way.
    for (p, policy) in [
        ("/x.iso", "mirror:3"),
        ("/big.bin", "parity:2"),
        ("/keep/inherits.bin", "mirror:2"),
    ] {
        let v = show(p);
        for c in v["containers"].as_array().unwrap() {
            assert_eq!(c["policy"], policy, "{p}: {v}");
        }
    }

    // A stronger xattr on a stored file re-stores its data in the
    // background; the index then points at mirror:3 containers.
    set_xattr(&m.path("small.bin"), "mirror:3").unwrap();
    assert_eq!(source_policy("/small.bin"), (xattr, "mirror:3".into()));
    let migrated = (0..600).any(|_| {
        let v = show("/small.bin");
        let all = v["containers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["policy"] == "mirror:3");
        if !all {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        all
    });
    assert!(
        migrated,
        "small.bin was not re-stored under mirror:3: {}",
        show("/small.bin")
    );
    let (repo, _) = m.unmount();
    // Its old single copy is no longer needed: losing every shard of
    // branch a and b still leaves the mirror:3 copy on c.
    fs::remove_dir_all(repo.join("br/a")).unwrap();
    fs::remove_dir_all(repo.join("br/b")).unwrap();
    let m = mount(&repo, base.path());
    assert!(fs::read(m.path("small.bin")).unwrap() == files["small.bin"]);
    assert!(fs::read(m.path("x.iso")).unwrap() == files["x.iso"]);
    m.unmount();
}

#[test]
fn branch_replace_killed_and_run_again_ends_complete() {
    let base = tempfile::tempdir().unwrap();
    let mut config = local_branches(&["a", "b", "c"], "pool");
    config += "\n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"pool\"]\n";
    let repo = repo_with(base.path(), &config);
    let m = mount(&repo, base.path());
    let files: BTreeMap<String, Vec<u8>> = (0..24u64)
        .map(|i| (format!("f{i}"), random(i, 20_000 + 3_000 * i as usize)))
        .collect();
    write_files(&m, &files);
    let (repo, _) = m.unmount();
    fs::remove_dir_all(repo.join("br/a")).unwrap();
    ok(
        &repo,
        &["branch", "add", "d", "--path", "br/d", "--label", "pool"],
    );

    let mut child = Command::new(CAIRN)
        .arg("--repo")
        .arg(&repo)
        .args(["-q", "branch", "replace", "a", "d"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed once it has written something to d (or finished already).
    while shard_files(&repo.join("br/d")).is_empty() && child.try_wait().unwrap().is_none() {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    child.kill().ok();
    child.wait().unwrap();

    ok(&repo, &["branch", "replace", "a", "d"]);
    let config = fs::read_to_string(repo.join("cairn.toml")).unwrap();
    assert!(!config.contains("name = \"a\""), "{config}");
    assert_moved_off(&repo, "a", &["b", "c", "d"]);
    let m = mount(&repo, base.path());
    assert_reads_back(&m, &files);
    for name in files.keys() {
        let v = json(&repo, &["policy", "show", &format!("/{name}"), "--json"]);
        for c in v["containers"].as_array().unwrap() {
            for shard in c["shards"].as_array().unwrap() {
                let on = shard.as_array().unwrap();
                assert_eq!(on.len(), 1, "{name}: {v}");
                assert_ne!(on[0], "a", "{name}: {v}");
            }
        }
    }
    let healthy = json(&repo, &["scrub", "--json"]);
    assert_eq!(healthy["healthy"], healthy["containers"], "{healthy}");
    m.unmount();
}

#[test]
fn bad_configurations_are_refused_naming_the_culprit() {
    let base = tempfile::tempdir().unwrap();
    let cases = [
        (
            local_branches(&["a", "b"], "x") + "\n[[rule]]\nname = \"r\"\npolicy = \"mirror:2\"\nbranches = [\"nope\"]\n",
            "unknown branch or label \"nope\"",
        ),
        (
            local_branches(&["a", "b"], "x") + "\n[default_rule]\npolicy = \"rs:2+1\"\n",
            "default_rule: policy rs:2+1 needs 3 distinct branches but may use 2",
        ),
        (local_branches(&["a", "a"], "x"), "branch \"a\" is configured twice"),
        (
            local_branches(&["a"], "x")
                + "\n[[branch]]\nname = \"gone\"\nkind = \"s3\"\nendpoint = \"http://127.0.0.1:1\"\nbucket = \"b\"\naccess_key_id = \"k\"\nsecret_access_key = \"s\"\n",
            "branch gone: cannot use bucket",
        ),
    ];
    for (i, (config, want)) in cases.iter().enumerate() {
        let dir = base.path().join(i.to_string());
        let repo = repo_with(&dir, config);
        let out = cairn(&repo, &["status"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "case {i}: want {want:?} in {err}"
        );
        assert!(
            shard_files(&repo.join("br")).is_empty(),
            "case {i}: data was written"
        );
    }
    // A plain repository that holds data refuses branches rather than hide it.
    let m = Mount::new(&base.path().join("plain"));
    fs::write(m.path("f"), random(1, 100_000)).unwrap();
    let (repo, _) = m.unmount();
    let path = repo.join("cairn.toml");
    let text = fs::read_to_string(&path).unwrap() + &local_branches(&["a"], "x");
    fs::write(&path, text).unwrap();
    let out = cairn(&repo, &["status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("plain branch"),
        "{err}"
    );
}

#[test]
fn branch_remove_moves_data_off_first_and_refuses_what_rules_need() {
    let base = tempfile::tempdir().unwrap();
    let mut config = local_branches(&["a", "b", "c"], "pool");
    config += "\n[[rule]]\nname = \"pinned\"\npath = \"pinned/**\"\npolicy = \"single\"\nbranches = [\"b\"]\n";
    config += "\n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"pool\"]\n";
    let repo = repo_with(base.path(), &config);
    let m = mount(&repo, base.path());
    let files: BTreeMap<String, Vec<u8>> = (0..8u64)
        .map(|i| (format!("f{i}"), random(100 + i, 30_000)))
        .chain([("pinned/p".to_string(), random(99, 30_000))])
        .collect();
    write_files(&m, &files);
    let out = cairn(&repo, &["branch", "remove", "b"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("unknown branch or label \"b\""),
        "{err}"
    );
    let (repo, _) = m.unmount();
    assert!(!shard_files(&repo.join("br/c")).is_empty());
    ok(&repo, &["branch", "remove", "c"]);
    let config = fs::read_to_string(repo.join("cairn.toml")).unwrap();
    assert!(!config.contains("name = \"c\""), "{config}");
    // Its directory is left as it was; gone, nothing is missed.
    fs::remove_dir_all(repo.join("br/c")).unwrap();
    let m = mount(&repo, base.path());
    assert_reads_back(&m, &files);
    let healthy = json(&repo, &["scrub", "--json"]);
    assert_eq!(healthy["healthy"], healthy["containers"], "{healthy}");
    m.unmount();
}

#[test]
fn branch_changes_reach_a_mounted_busy_file_system_at_once() {
    let base = tempfile::tempdir().unwrap();
    let mut config = local_branches(&["a", "b", "c"], "pool");
    config += "\n[default_rule]\npolicy = \"mirror:2\"\nbranches = [\"pool\"]\n";
    let repo = repo_with(base.path(), &config);
    let m = mount(&repo, base.path());
    let mut files: BTreeMap<String, Vec<u8>> = (0..12u64)
        .map(|i| (format!("before/f{i}"), random(200 + i, 40_000)))
        .collect();
    write_files(&m, &files);

    // A writer keeps the file system busy through both changes.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let busy = {
        let (stop, dir) = (stop.clone(), m.path("busy"));
        std::thread::spawn(move || {
            fs::create_dir_all(&dir).unwrap();
            let mut written = BTreeMap::new();
            for i in 0u64.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) && i >= 4 {
                    break;
                }
                let data = random(500 + i, 25_000 + (i as usize % 7) * 1_000);
                let p = dir.join(format!("w{i}"));
                fs::write(&p, &data).unwrap();
                fs::File::open(&p).unwrap().sync_all().unwrap();
                written.insert(format!("busy/w{i}"), data);
            }
            written
        })
    };

    // A file open across the changes: its write stream chose its branches
    // (a among them) before a was retired.
    let long_data = random(77, 24 << 20);
    let mut long = fs::File::create(m.path("long")).unwrap();
    std::io::Write::write_all(&mut long, &long_data[..8 << 20]).unwrap();
    long.sync_all().unwrap();

    ok(
        &repo,
        &["branch", "add", "d", "--path", "br/d", "--label", "pool"],
    );
    let status = json(&repo, &["status", "--json"]);
    let names: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c", "d"], "{status}");
    ok(&repo, &["branch", "replace", "a", "d"]);
    let config = fs::read_to_string(repo.join("cairn.toml")).unwrap();
    assert!(!config.contains("name = \"a\""), "{config}");
    assert_moved_off(&repo, "a", &["b", "c", "d"]);

    // From now on nothing new lands on a, and its old shards are not needed.
    let on_a = shard_files(&repo.join("br/a"));
    std::io::Write::write_all(&mut long, &long_data[8 << 20..]).unwrap();
    long.sync_all().unwrap();
    drop(long);
    files.insert("long".into(), long_data);
    let after: BTreeMap<String, Vec<u8>> = (0..12u64)
        .map(|i| (format!("after/f{i}"), random(300 + i, 40_000)))
        .collect();
    write_files(&m, &after);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    files.extend(busy.join().unwrap());
    files.extend(after);
    assert_eq!(
        shard_files(&repo.join("br/a")),
        on_a,
        "new shards went to a"
    );
    assert!(!shard_files(&repo.join("br/d")).is_empty());
    fs::remove_dir_all(repo.join("br/a")).unwrap();
    assert_reads_back(&m, &files);
    let v = json(&repo, &["policy", "show", "/after/f0", "--json"]);
    assert!(!v.to_string().contains("\"a\""), "{v}");
    let healthy = json(&repo, &["scrub", "--json"]);
    assert_eq!(healthy["healthy"], healthy["containers"], "{healthy}");

    // The same holds after a remount with the rewritten cairn.toml.
    let (repo, _) = m.unmount();
    let m = mount(&repo, base.path());
    assert_reads_back(&m, &files);
    m.unmount();
}

#[test]
fn rules_edited_by_hand_reach_a_mounted_file_system_on_reload() {
    let base = tempfile::tempdir().unwrap();
    let repo = repo_with(base.path(), &local_branches(&["a", "b", "c"], "all"));
    let m = mount(&repo, base.path());
    let before = random(1, 40_000);
    fs::write(m.path("before.bin"), &before).unwrap();
    let policy = |p: &str| {
        let v = json(&repo, &["policy", "show", p, "--json"]);
        (
            v["source"].as_str().unwrap().to_string(),
            v["policy"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(
        policy("/before.bin"),
        ("the default rule".into(), "single".into())
    );
    let path = repo.join("cairn.toml");
    let original = fs::read_to_string(&path).unwrap();
    let with_rule = original.clone()
        + "\n[[rule]]\nname = \"bins\"\nextension = \"bin\"\npolicy = \"mirror:3\"\n";

    // A rule that cannot be met is refused, naming it; nothing changes.
    fs::write(&path, with_rule.replace("mirror:3", "mirror:4")).unwrap();
    let out = cairn(&repo, &["policy", "reload"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("rule \"bins\"") && err.contains("mirror:4"),
        "{err}"
    );

    // A good edit applies at once: new files follow the rule.
    fs::write(&path, &with_rule).unwrap();
    ok(&repo, &["policy", "reload"]);
    let after = random(2, 40_000);
    fs::write(m.path("after.bin"), &after).unwrap();
    fs::File::open(m.path("after.bin"))
        .unwrap()
        .sync_all()
        .unwrap();
    assert_eq!(
        policy("/after.bin"),
        ("rule \"bins\"".into(), "mirror:3".into())
    );
    let shown = json(&repo, &["policy", "show", "/after.bin", "--json"]);
    let containers = shown["containers"].as_array().unwrap();
    assert!(
        !containers.is_empty()
            && containers
                .iter()
                .all(|c| c["policy"] == "mirror:3" && c["shards"].as_array().unwrap().len() == 3),
        "after.bin is not stored as three copies: {shown}"
    );

    // Leaving out a branch that holds data is refused, naming it (the rule
    // asks for fewer copies, so the file is otherwise valid).
    let without_c = with_rule
        .replace(
            "\n[[branch]]\nname = \"c\"\nkind = \"local\"\npath = \"br/c\"\nlabels = [\"all\"]\n",
            "",
        )
        .replace("mirror:3", "mirror:2");
    assert_ne!(without_c, with_rule);
    fs::write(&path, &without_c).unwrap();
    let out = cairn(&repo, &["policy", "reload"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("no longer lists branch(es) c"),
        "{err}"
    );
    fs::write(&path, &with_rule).unwrap();
    assert_eq!(fs::read(m.path("before.bin")).unwrap(), before);
    assert_eq!(fs::read(m.path("after.bin")).unwrap(), after);
    m.unmount();
}
