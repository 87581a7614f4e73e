//! Bad input to `cairn serve` (limits set low: 1 MiB a PUT, 2 MiB an
//! object): bodies over the limits (one announcing 6 GB refused before it
//! is sent), a 1,025-byte key, bad bucket names, malformed XML, a body
//! cut short or longer than its Content-Length, a bad checksum trailer,
//! expired presigned URLs, a forged signature, an unknown key and a body
//! altered after signing. Each gets S3's error code (checked by
//! `s3_clients/bad_input.py`, boto3 and hand-written signed requests) and
//! stores nothing: no object, no temporary file, no directory. The
//! repository then checks clean.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::{ok, Mount};

/// Every name below `dir`, relative, directories with a trailing `/`.
fn names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
            if p.is_dir() {
                out.push(format!("{rel}/"));
                stack.push(p);
            } else {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn bad_requests_get_s3_errors_and_store_nothing() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let served = serve::serve_with(
        &repo,
        &dir,
        &["--max-put-size", "1048576", "--max-object-size", "2097152"],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3_clients/bad_input.py");
    let out = Command::new("python3")
        .arg(&script)
        .env("ENDPOINT", &served.endpoint)
        .env("KEY_ID", &served.key_id)
        .env("SECRET", &served.secret)
        .output()
        .expect("python3 with boto3 (pip install boto3)");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "bad_input.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Through the mount: the one object kept, nothing else (no temporary
    // file, no directory a refused PUT made).
    assert_eq!(names(&dir), ["bad/", "bad/keep"]);

    let (repo, dir) = served.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
    let m = Mount::start(repo, dir);
    assert_eq!(fs::read(m.path("bad/keep")).unwrap(), b"kept");
    m.unmount();
}
