//! The first `cairn serve` on a new repository, whose --listen port is
//! taken, fails after creating the repository (and says to back its key up
//! with `cairn key export FILE`) but makes no access key; once the port is
//! free, the next `serve` makes a key and says where it is, even with -q
//! (without a terminal its secret goes to `REPO/gateway/first-key`), and
//! the AWS CLI works with it.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{is_cairn_mounted, key_field, ok, require_fuse, Mount, CAIRN};

fn aws(endpoint: &str, id: &str, secret: &str, home: &Path, args: &[&str]) -> Output {
    Command::new("aws")
        .arg("--endpoint-url")
        .arg(endpoint)
        .args(args)
        .env("AWS_ACCESS_KEY_ID", id)
        .env("AWS_SECRET_ACCESS_KEY", secret)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_MAX_ATTEMPTS", "1")
        .env("AWS_CONFIG_FILE", home.join("config"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("credentials"))
        .env("HOME", home)
        .output()
        .expect("the AWS CLI (pip install awscli)")
}

#[test]
fn a_first_serve_that_cannot_listen_leaves_no_key_and_the_next_prints_one() {
    require_fuse();
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();

    let first = Command::new(CAIRN)
        .args(["--repo", repo.to_str().unwrap(), "serve", "--listen", &addr])
        .arg(&dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&first.stderr);
    let printed = String::from_utf8_lossy(&first.stdout);
    assert!(!first.status.success(), "{said}");
    assert!(
        said.contains(&addr),
        "the address in use is not named: {said}"
    );
    assert!(
        said.contains("back it up now") && said.contains("`cairn key export FILE`"),
        "{said}"
    );
    assert!(!printed.contains("aws_secret_access_key"), "{printed}");
    assert!(!is_cairn_mounted(&dir));
    assert_eq!(
        ok(&repo, &["access-key", "list"]),
        "",
        "a key was left behind"
    );

    drop(taken);
    let mut child = Command::new(CAIRN)
        .args([
            "--repo",
            repo.to_str().unwrap(),
            "-q",
            "serve",
            "--listen",
            &addr,
        ])
        .arg(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let done = line.contains("gateway/first-key");
        said.push(line);
        if done {
            break;
        }
    }
    assert!(
        said.iter().any(|l| l.starts_with("cairn: access key ")),
        "{said:?}"
    );
    let m = Mount {
        repo: repo.clone(),
        dir: dir.clone(),
        child: Some(child),
    };
    let started = Instant::now();
    while !is_cairn_mounted(&dir) {
        assert!(started.elapsed() < Duration::from_secs(30), "no mount");
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines: Vec<String> = std::fs::read_to_string(repo.join("gateway/first-key"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let id = key_field(&lines, "aws_access_key_id");
    let secret = key_field(&lines, "aws_secret_access_key");
    assert!(
        ok(&repo, &["access-key", "list"]).contains(&id),
        "the printed key is not listed"
    );

    let endpoint = format!("http://{addr}");
    let made = aws(
        &endpoint,
        &id,
        &secret,
        base.path(),
        &["s3", "mb", "s3://first"],
    );
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let listed = aws(&endpoint, &id, &secret, base.path(), &["s3", "ls"]);
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains("first"),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert!(
        m.path("first").is_dir(),
        "the bucket is not a directory of the mount"
    );
    m.unmount();
}
