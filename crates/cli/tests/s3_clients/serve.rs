//! `cairn serve` on a free loopback port, for the tests that drive the
//! gateway with S3 clients: the mount, the endpoint and the first key.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{is_cairn_mounted, key_field, require_fuse, Mount, CAIRN};

/// A running `cairn serve`: its mount, where the gateway listens and the
/// key it printed at its first start.
pub struct Served {
    pub mount: Mount,
    pub endpoint: String,
    pub key_id: String,
    pub secret: String,
}

impl Served {
    /// `python3` with what a script of `s3_clients/` needs to reach this
    /// gateway: ENDPOINT, KEY_ID, SECRET and MOUNT in its environment, and
    /// `cairn_s3` (`client()`) on its module path.
    pub fn python(&self) -> Command {
        let mut python = Command::new("python3");
        python
            .env(
                "PYTHONPATH",
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3_clients"),
            )
            .env("ENDPOINT", &self.endpoint)
            .env("KEY_ID", &self.key_id)
            .env("SECRET", &self.secret)
            .env("MOUNT", &self.mount.dir);
        python
    }
}

/// The key a first start without a terminal wrote to
/// `REPO/gateway/first-key` (before it said where it listens).
pub fn first_key(repo: &Path) -> (String, String) {
    let text = std::fs::read_to_string(repo.join("gateway/first-key")).unwrap();
    let lines: Vec<String> = text.lines().map(String::from).collect();
    (
        key_field(&lines, "aws_access_key_id"),
        key_field(&lines, "aws_secret_access_key"),
    )
}

/// Starts `cairn serve` of a new repository `repo` mounted at `dir`.
pub fn serve(repo: &Path, dir: &Path) -> Served {
    start(repo, dir, None, &[])
}

/// [`serve`] with more arguments for `cairn serve`.
pub fn serve_with(repo: &Path, dir: &Path, args: &[&str]) -> Served {
    start(repo, dir, None, args)
}

/// Starts `cairn serve` again on `repo`, whose key is `key_id`, `secret`.
pub fn serve_again(repo: &Path, dir: &Path, key_id: String, secret: String) -> Served {
    start(repo, dir, Some((key_id, secret)), &[])
}

/// [`serve_again`] with more arguments for `cairn serve`.
pub fn serve_again_with(repo: &Path, dir: &Path, key: (String, String), args: &[&str]) -> Served {
    start(repo, dir, Some(key), args)
}

fn start(repo: &Path, dir: &Path, key: Option<(String, String)>, args: &[&str]) -> Served {
    require_fuse();
    std::fs::create_dir_all(dir).unwrap();
    let mut child = Command::new(CAIRN)
        .args([
            "--repo",
            repo.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(args)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(child.stderr.take().unwrap()).lines();
    let endpoint = said
        .by_ref()
        .map(Result::unwrap)
        .find_map(|l| l.strip_prefix("cairn: S3 gateway at ").map(String::from))
        .expect("cairn serve printed no endpoint");
    // The rest of what it says (its log) goes on to the test's stderr.
    std::thread::spawn(move || {
        for line in said.map_while(Result::ok) {
            eprintln!("{line}");
        }
    });
    let (key_id, secret) = key.unwrap_or_else(|| first_key(repo));
    let mount = Mount {
        repo: repo.to_path_buf(),
        dir: dir.to_path_buf(),
        child: Some(child),
    };
    let started = Instant::now();
    while !is_cairn_mounted(dir) {
        assert!(started.elapsed() < Duration::from_secs(30), "no mount");
        std::thread::sleep(Duration::from_millis(20));
    }
    Served {
        mount,
        endpoint,
        key_id,
        secret,
    }
}
