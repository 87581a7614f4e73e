//! `cairn serve` mounts the repository and serves the same namespace over
//! S3: boto3 (a client nobody here wrote) stores and reads objects that
//! are files of the mount and the other way round, lists them as S3 does,
//! and gets 403 with a forged signature, an unknown, revoked or read-only
//! key, and nothing is stored then. After the unmount the repository
//! checks clean and every object reads back byte-exact.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{is_cairn_mounted, key_field, ok, require_fuse, Mount, CAIRN};

/// Starts `cairn serve` on any free port; the endpoint it said, and the
/// lines of the first key it wrote to `REPO/gateway/first-key` (its
/// standard output is no terminal: the secret is not printed).
fn serve(repo: &Path, dir: &Path) -> (Mount, String, Vec<String>) {
    require_fuse();
    let mut child = Command::new(CAIRN)
        .args([
            "--repo",
            repo.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .arg(dir)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(child.stderr.take().unwrap()).lines();
    let endpoint = said
        .by_ref()
        .map(Result::unwrap)
        .find_map(|l| l.strip_prefix("cairn: S3 gateway at ").map(String::from))
        .expect("cairn serve said no endpoint");
    std::thread::spawn(move || said.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
    let lines = fs::read_to_string(repo.join("gateway/first-key"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let m = Mount {
        repo: repo.to_path_buf(),
        dir: dir.to_path_buf(),
        child: Some(child),
    };
    let started = Instant::now();
    while !is_cairn_mounted(dir) {
        assert!(started.elapsed() < Duration::from_secs(30), "no mount");
        std::thread::sleep(Duration::from_millis(20));
    }
    (m, endpoint, lines)
}

#[test]
fn boto3_and_the_mount_share_one_namespace() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let expected = base.path().join("expected");
    fs::create_dir_all(&dir).unwrap();
    fs::create_dir_all(&expected).unwrap();
    let (m, endpoint, lines) = serve(&repo, &dir);
    let key_id = key_field(&lines, "aws_access_key_id");
    let secret = key_field(&lines, "aws_secret_access_key");

    // A second gateway on the mounted repository is refused, naming the
    // mount.
    let second = common::cairn(&repo, &["gateway", "--listen", "127.0.0.1:0"]);
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success() && said.contains("mounted"),
        "{said}"
    );

    // Keys made while the gateway runs count at once; secrets are shown
    // by `create` only.
    let ro = ok(&repo, &["access-key", "create", "--read-only"])
        .lines()
        .map(String::from)
        .collect::<Vec<_>>();
    let (ro_id, ro_secret) = (
        key_field(&ro, "aws_access_key_id"),
        key_field(&ro, "aws_secret_access_key"),
    );
    let listed = ok(&repo, &["access-key", "list"]);
    assert!(
        listed.contains(&key_id) && listed.contains(&ro_id),
        "{listed}"
    );
    assert!(!listed.contains(&secret) && !listed.contains(&ro_secret));

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3_clients/boto3_basics.py");
    let out = Command::new("python3")
        .arg(&script)
        .env("ENDPOINT", &endpoint)
        .env("KEY_ID", &key_id)
        .env("SECRET", &secret)
        .env("RO_KEY_ID", &ro_id)
        .env("RO_SECRET", &ro_secret)
        .env("MOUNT", &dir)
        .env("EXPECTED", &expected)
        .output()
        .expect("python3 with boto3 (pip install boto3)");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "boto3 script failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // A revoked key is refused from its next request on.
    ok(&repo, &["access-key", "revoke", &ro_id]);
    let revoked = Command::new("python3")
        .args(["-c", REVOKED])
        .env("ENDPOINT", &endpoint)
        .env("KEY_ID", &ro_id)
        .env("SECRET", &ro_secret)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&revoked.stdout).trim(),
        "403",
        "{}",
        String::from_utf8_lossy(&revoked.stderr)
    );

    let (repo, dir) = m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");

    let manifest: BTreeMap<String, String> =
        serde_json::from_slice(&fs::read(expected.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest.len() > 30, "{manifest:?}");
    let m = Mount::start(repo, dir);
    for (path, want) in &manifest {
        assert_eq!(
            fs::read(m.path(path)).unwrap(),
            fs::read(expected.join(want)).unwrap(),
            "{path}"
        );
    }
    m.unmount();
}

const REVOKED: &str = r#"
import os, boto3
from botocore.config import Config
from botocore.exceptions import ClientError
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"],
    aws_access_key_id=os.environ["KEY_ID"], aws_secret_access_key=os.environ["SECRET"],
    region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
try:
    s3.list_objects_v2(Bucket="photos")
    print("allowed")
except ClientError as e:
    print(e.response["ResponseMetadata"]["HTTPStatusCode"])
"#;
