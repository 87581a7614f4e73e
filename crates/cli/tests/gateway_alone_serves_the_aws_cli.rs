//! `cairn gateway` (no mount) driven by the AWS CLI, a client nobody here
//! wrote: a tree of files with awkward names synced up and copied back
//! byte-exact, a server-side copy, Content-Type and user metadata,
//! conditional requests, a bad Content-MD5 refused with nothing stored,
//! batch and recursive deletes; then SIGTERM, `cairn check` clean, and a
//! second gateway serving every object as it was.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use common::{ok, random, CAIRN};

struct Gateway {
    child: Child,
    endpoint: String,
    key_id: Option<String>,
    secret: Option<String>,
}

/// `cairn gateway` on a free port; on the `first` start, the key it
/// wrote to `REPO/gateway/first-key`.
fn gateway(repo: &Path, first: bool) -> Gateway {
    let mut child = Command::new(CAIRN)
        .args([
            "--repo",
            repo.to_str().unwrap(),
            "gateway",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut key_id = None;
    let mut secret = None;
    let mut endpoint = None;
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(e) = line.strip_prefix("cairn: S3 gateway at ") {
            endpoint = Some(e.to_string());
        }
        if line.starts_with("cairn: serving ") {
            break;
        }
    }
    // Its standard output is no terminal: the first key is in a file.
    if first {
        let text = std::fs::read_to_string(repo.join("gateway/first-key")).unwrap();
        for line in text.lines() {
            if let Some(k) = line.strip_prefix("aws_access_key_id = ") {
                key_id = Some(k.to_string());
            }
            if let Some(s) = line.strip_prefix("aws_secret_access_key = ") {
                secret = Some(s.to_string());
            }
        }
    }
    Gateway {
        child,
        endpoint: endpoint.expect("the gateway printed no endpoint"),
        key_id,
        secret,
    }
}

impl Gateway {
    /// SIGTERM, and the exit status is success.
    fn stop(mut self) {
        // SAFETY: a plain syscall on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        assert!(status.success(), "cairn gateway exited with {status}");
    }
}

struct Aws {
    endpoint: String,
    key_id: String,
    secret: String,
    home: PathBuf,
}

impl Aws {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("aws")
            .arg("--endpoint-url")
            .arg(&self.endpoint)
            .args(args)
            .env("AWS_ACCESS_KEY_ID", &self.key_id)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            // One attempt: botocore retries BadDigest with a backoff of
            // seconds, and on loopback a retry would only hide a fault.
            .env("AWS_MAX_ATTEMPTS", "1")
            .env("AWS_CONFIG_FILE", self.home.join("config"))
            .env("AWS_SHARED_CREDENTIALS_FILE", self.home.join("credentials"))
            .env("HOME", &self.home)
            .output()
            .expect("the AWS CLI (pip install awscli)")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "aws {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The error text of a command that must fail.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(!out.status.success(), "aws {args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
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
fn the_aws_cli_syncs_copies_and_deletes_through_cairn_gateway() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
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
    let home = base.path().join("home");
    fs::create_dir_all(&home).unwrap();

    let g = gateway(&repo, true);
    let aws = Aws {
        endpoint: g.endpoint.clone(),
        key_id: g.key_id.clone().unwrap(),
        secret: g.secret.clone().unwrap(),
        home,
    };
    let s3 = |p: &str| format!("s3://tree/{p}");
    aws.ok(&["s3", "mb", "s3://tree"]);
    aws.ok(&["s3", "sync", src.to_str().unwrap(), &s3("backup")]);
    let listed = aws.ok(&["s3", "ls", "--recursive", "s3://tree"]);
    assert_eq!(listed.lines().count(), names.len(), "{listed}");
    let back = base.path().join("back");
    aws.ok(&[
        "s3",
        "cp",
        "--recursive",
        &s3("backup"),
        back.to_str().unwrap(),
    ]);
    assert_eq!(tree(&back), tree(&src));
    // A second sync finds nothing to do.
    let again = aws.ok(&["s3", "sync", src.to_str().unwrap(), &s3("backup")]);
    assert!(again.trim().is_empty(), "{again}");

    // Server-side copy (a clone), metadata and Content-Type.
    aws.ok(&[
        "s3api",
        "copy-object",
        "--bucket",
        "tree",
        "--key",
        "copies/big.bin",
        "--copy-source",
        "tree/backup/big.bin",
    ]);
    let copied = base.path().join("copied");
    aws.ok(&["s3", "cp", &s3("copies/big.bin"), copied.to_str().unwrap()]);
    assert_eq!(
        fs::read(&copied).unwrap(),
        fs::read(src.join("big.bin")).unwrap()
    );
    let note = base.path().join("note");
    fs::write(&note, b"a note").unwrap();
    aws.ok(&[
        "s3api",
        "put-object",
        "--bucket",
        "tree",
        "--key",
        "notes/n1",
        "--body",
        note.to_str().unwrap(),
        "--content-type",
        "text/x-note",
        "--metadata",
        "color=blue,owner=ana",
    ]);
    let head: serde_json::Value = serde_json::from_str(&aws.ok(&[
        "s3api",
        "head-object",
        "--bucket",
        "tree",
        "--key",
        "notes/n1",
    ]))
    .unwrap();
    assert_eq!(head["ContentType"], "text/x-note", "{head}");
    assert_eq!(head["Metadata"]["color"], "blue", "{head}");
    assert_eq!(head["Metadata"]["owner"], "ana", "{head}");
    let etag = head["ETag"].as_str().unwrap().to_string();
    assert_eq!(etag, format!("\"{}\"", md5_hex(b"a note")));

    // Conditional requests.
    let not_modified = aws.fails(&[
        "s3api",
        "head-object",
        "--bucket",
        "tree",
        "--key",
        "notes/n1",
        "--if-none-match",
        &etag,
    ]);
    assert!(
        not_modified.contains("304") || not_modified.contains("Not Modified"),
        "{not_modified}"
    );
    let failed = aws.fails(&[
        "s3api",
        "head-object",
        "--bucket",
        "tree",
        "--key",
        "notes/n1",
        "--if-match",
        "\"0000\"",
    ]);
    assert!(
        failed.contains("412") || failed.contains("Precondition"),
        "{failed}"
    );
    aws.ok(&[
        "s3api",
        "head-object",
        "--bucket",
        "tree",
        "--key",
        "notes/n1",
        "--if-match",
        &etag,
    ]);

    // A bad Content-MD5 stores nothing.
    let bad = aws.fails(&[
        "s3api",
        "put-object",
        "--bucket",
        "tree",
        "--key",
        "notes/bad",
        "--body",
        note.to_str().unwrap(),
        "--content-md5",
        "1B2M2Y8AsgTpgAmY7PhCfg==",
    ]);
    assert!(
        bad.contains("BadDigest") && !bad.contains("Unknown"),
        "{bad}"
    );
    // A refusal says why in S3's words, not "Unknown".
    let missing = aws.fails(&[
        "s3api",
        "get-object",
        "--bucket",
        "tree",
        "--key",
        "notes/never-was",
        base.path().join("never-was").to_str().unwrap(),
    ]);
    assert!(
        missing.contains(
            "(NoSuchKey) when calling the GetObject operation: The specified key does not exist."
        ),
        "{missing}"
    );
    aws.fails(&[
        "s3api",
        "head-object",
        "--bucket",
        "tree",
        "--key",
        "notes/bad",
    ]);

    // Batch delete, recursive delete.
    aws.ok(&["s3", "cp", note.to_str().unwrap(), &s3("scratch/a")]);
    aws.ok(&["s3", "cp", note.to_str().unwrap(), &s3("scratch/b/c")]);
    aws.ok(&[
        "s3api",
        "delete-objects",
        "--bucket",
        "tree",
        "--delete",
        "Objects=[{Key=scratch/a},{Key=never-was}]",
    ]);
    aws.fails(&[
        "s3api",
        "head-object",
        "--bucket",
        "tree",
        "--key",
        "scratch/a",
    ]);
    aws.ok(&["s3", "rm", "--recursive", &s3("scratch")]);
    // Directories left empty went with their last key.
    let left = aws.ok(&[
        "s3api",
        "list-objects-v2",
        "--bucket",
        "tree",
        "--prefix",
        "scratch",
    ]);
    assert!(!left.contains("Contents"), "{left}");
    g.stop();

    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");

    // A second start prints no key and serves every object as it was.
    let g = gateway(&repo, false);
    let printed = ok(&repo, &["access-key", "list"]);
    assert_eq!(
        printed.lines().count(),
        1,
        "a second start made a key: {printed}"
    );
    let aws = Aws {
        endpoint: g.endpoint.clone(),
        ..aws
    };
    let again = base.path().join("again");
    aws.ok(&[
        "s3",
        "cp",
        "--recursive",
        &s3("backup"),
        again.to_str().unwrap(),
    ]);
    assert_eq!(tree(&again), tree(&src));
    let copied2 = base.path().join("copied2");
    aws.ok(&["s3", "cp", &s3("copies/big.bin"), copied2.to_str().unwrap()]);
    assert_eq!(
        fs::read(&copied2).unwrap(),
        fs::read(src.join("big.bin")).unwrap()
    );
    g.stop();
}

fn md5_hex(data: &[u8]) -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import hashlib,sys; print(hashlib.md5(sys.stdin.buffer.read()).hexdigest())",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data)?;
            c.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
