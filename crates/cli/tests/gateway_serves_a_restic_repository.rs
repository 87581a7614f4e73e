//! restic (Debian's) keeps its repository in a bucket of `cairn serve`: a
//! backup tool storing into a deduplicating store. `init`, two `backup`s
//! (the second of a changed tree), `check --read-data` reading every pack
//! back, and `restore` byte-exact; after the unmount the cairn repository
//! checks clean and restic's own check passes again through a new serve.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use common::{ok, random};

fn restic(served: &serve::Served, cache: &Path, args: &[&str]) -> Output {
    Command::new("restic")
        .args(args)
        .arg("--cache-dir")
        .arg(cache)
        .env(
            "RESTIC_REPOSITORY",
            format!("s3:{}/backups/restic", served.endpoint),
        )
        .env("RESTIC_PASSWORD", "not a secret: a test")
        .env("AWS_ACCESS_KEY_ID", &served.key_id)
        .env("AWS_SECRET_ACCESS_KEY", &served.secret)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .output()
        .expect("restic (apt-get install restic)")
}

fn restic_ok(served: &serve::Served, cache: &Path, args: &[&str]) -> String {
    let out = restic(served, cache, args);
    assert!(
        out.status.success(),
        "restic {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
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
fn restic_backs_up_into_the_gateway_and_restores_byte_exact() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let cache = base.path().join("restic-cache");
    let data = base.path().join("data");
    for i in 0..20u64 {
        let p = data.join(format!("d{}/file {i}.bin", i % 4));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, random(((i as usize) * 37_000) % 300_000, i)).unwrap();
    }
    fs::write(data.join("big.bin"), random(6 << 20, 100)).unwrap();
    fs::write(data.join("empty"), b"").unwrap();

    let served = serve::serve(&repo, &dir);
    let d = data.to_str().unwrap();
    restic_ok(&served, &cache, &["init"]);
    restic_ok(&served, &cache, &["backup", d]);
    // A changed tree: one file rewritten, one new, one gone.
    fs::write(data.join("d1/file 1.bin"), random(50_000, 200)).unwrap();
    fs::write(data.join("new.txt"), b"a file of the second backup").unwrap();
    fs::remove_file(data.join("d2/file 2.bin")).unwrap();
    restic_ok(&served, &cache, &["backup", d]);
    let snapshots = restic_ok(&served, &cache, &["snapshots", "--json"]);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&snapshots).unwrap();
    assert_eq!(listed.len(), 2, "{snapshots}");
    restic_ok(&served, &cache, &["check", "--read-data"]);

    let target = base.path().join("restored");
    restic_ok(
        &served,
        &cache,
        &["restore", "latest", "--target", target.to_str().unwrap()],
    );
    // restic restores the absolute path below the target.
    let restored = target.join(data.strip_prefix("/").unwrap());
    assert_eq!(tree(&restored), tree(&data));
    // The repository is files of the mount.
    assert!(dir.join("backups/restic/config").is_file());

    let (key_id, secret) = (served.key_id.clone(), served.secret.clone());
    let (repo, dir) = served.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");

    // Served again, restic reads every pack back once more.
    let again = serve::serve_again(&repo, &dir, key_id, secret);
    restic_ok(&again, &cache, &["check", "--read-data"]);
    again.mount.unmount();
}
