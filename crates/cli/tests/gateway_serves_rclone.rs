//! rclone (Debian's, a client nobody here wrote) against `cairn serve`:
//! `copy` of a tree with awkward names, `check --download` comparing every
//! byte, `sync` deleting what the source lost, a ranged `cat`, and a
//! server-side copy (S3 CopyObject) of a 3 MiB object. The files rclone
//! stored are files of the mount; after the unmount the repository checks
//! clean and every object reads back byte-exact.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{ok, random, Mount};

struct Rclone {
    served: serve::Served,
    config: PathBuf,
}

impl Rclone {
    fn run(&self, args: &[&str]) -> Output {
        let s = &self.served;
        Command::new("rclone")
            .args(args)
            .arg("--config")
            .arg(&self.config)
            // rclone fails on AWS_CA_BUNDLE (set where TLS is
            // intercepted); the gateway here is plain HTTP.
            .env_remove("AWS_CA_BUNDLE")
            .env("RCLONE_CONFIG_CAIRN_TYPE", "s3")
            .env("RCLONE_CONFIG_CAIRN_PROVIDER", "Other")
            .env("RCLONE_CONFIG_CAIRN_ENDPOINT", &s.endpoint)
            .env("RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID", &s.key_id)
            .env("RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY", &s.secret)
            .env("RCLONE_CONFIG_CAIRN_REGION", "us-east-1")
            .env("RCLONE_CONFIG_CAIRN_FORCE_PATH_STYLE", "true")
            .output()
            .expect("rclone (apt-get install rclone)")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "rclone {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// Every file below `dir`, by relative path, with its bytes.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
                out.push((rel, fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn rclone_copies_syncs_checks_and_copies_server_side() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let src = base.path().join("src");
    let names = [
        "plain.txt",
        "with space.txt",
        "plus+sign",
        "per%cent",
        "ünïcödé/日本.txt",
        "deep/a/b/c/d/e/leaf",
        "empty",
        "big.bin",
    ];
    for (i, n) in names.iter().enumerate() {
        let p = src.join(n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        let len = match *n {
            "empty" => 0,
            "big.bin" => 3 << 20,
            _ => 1000 + i * 7000,
        };
        fs::write(&p, random(len, i as u64)).unwrap();
    }
    let config = base.path().join("rclone.conf");
    fs::write(&config, "").unwrap();
    let rc = Rclone {
        served: serve::serve(&repo, &dir),
        config,
    };
    let s = src.to_str().unwrap();

    rc.ok(&["mkdir", "cairn:files"]);
    rc.ok(&["copy", s, "cairn:files/backup"]);
    // Every object is a file of the mount, byte for byte.
    assert_eq!(tree(&dir.join("files/backup")), tree(&src));
    rc.ok(&["check", "--download", s, "cairn:files/backup"]);

    // A changed source fails the check until synced; sync deletes what
    // the source lost.
    fs::write(src.join("plain.txt"), random(5000, 99)).unwrap();
    fs::remove_file(src.join("per%cent")).unwrap();
    assert!(!rc
        .run(&["check", "--download", s, "cairn:files/backup"])
        .status
        .success());
    rc.ok(&["sync", s, "cairn:files/backup"]);
    rc.ok(&["check", "--download", s, "cairn:files/backup"]);
    assert!(!dir.join("files/backup/per%cent").exists());
    assert_eq!(tree(&dir.join("files/backup")), tree(&src));

    // A ranged read.
    let big = fs::read(src.join("big.bin")).unwrap();
    let out = rc.run(&[
        "cat",
        "--offset",
        "1000000",
        "--count",
        "70000",
        "cairn:files/backup/big.bin",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, big[1_000_000..1_070_000]);

    // A server-side copy (CopyObject), then read back.
    rc.ok(&[
        "copyto",
        "cairn:files/backup/big.bin",
        "cairn:files/copies/big copy.bin",
    ]);
    assert_eq!(
        fs::read(dir.join("files/copies/big copy.bin")).unwrap(),
        big
    );
    let listed = rc.ok(&["lsf", "-R", "cairn:files"]);
    assert!(listed.contains("copies/big copy.bin"), "{listed}");

    let served = rc.served;
    let (repo, dir) = served.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
    let m = Mount::start(repo, dir);
    assert_eq!(tree(&m.path("files/backup")), tree(&src));
    assert_eq!(fs::read(m.path("files/copies/big copy.bin")).unwrap(), big);
    m.unmount();
}
