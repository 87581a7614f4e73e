//! The gateway moves bodies in pieces of 1 MiB: a PUT's body, however
//! its client chunks it (boto3 sends aws-chunked bodies with a checksum
//! trailer), is cut at every piece boundary, and a GET reads piece by
//! piece. Objects of sizes on and around those boundaries are PUT with
//! boto3, and read back byte-exact: whole and by ranges that cross a
//! boundary over S3, and through the mount. After the unmount the
//! repository checks clean, and a new daemon serves every object as it was.

mod common;
#[path = "s3_clients/driver.rs"]
mod driver;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::process::Command;

use common::{ok, random};
use driver::{hex, Driver};
use serve::Served;

/// The gateway's piece (`gateway::tree::PIECE`).
const PIECE: usize = 1 << 20;

/// Ranged GETs by boto3: for each `(first, last)` (inclusive, as the
/// Range header), the body in hex.
fn ranges(s: &Served, key: &str, ranges: &[(usize, usize)]) -> Vec<String> {
    const SCRIPT: &str = r#"
import binascii, json, os, sys
import boto3
from botocore.config import Config
s3 = boto3.client("s3", endpoint_url=os.environ["ENDPOINT"],
    aws_access_key_id=os.environ["KEY_ID"], aws_secret_access_key=os.environ["SECRET"],
    region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
for first, last in json.loads(sys.argv[2]):
    r = s3.get_object(Bucket="bkt", Key=sys.argv[1], Range=f"bytes={first}-{last}")
    assert r["ResponseMetadata"]["HTTPStatusCode"] == 206, r["ResponseMetadata"]
    print(binascii.hexlify(r["Body"].read()).decode())
"#;
    let out = Command::new("python3")
        .args(["-c", SCRIPT, key, &serde_json::to_string(ranges).unwrap()])
        .env("ENDPOINT", &s.endpoint)
        .env("KEY_ID", &s.key_id)
        .env("SECRET", &s.secret)
        .output()
        .expect("python3 with boto3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn bodies_on_and_around_piece_boundaries_read_back_exact() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    ok(&repo, &["init"]);
    let s = serve::serve(&repo, &dir);
    let mut s3 = Driver::start(&s);
    s3.create_bucket("bkt");
    let sizes = [1, PIECE - 1, PIECE, PIECE + 1, 2 * PIECE + 4099];
    let objects: Vec<(String, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| (format!("d/obj-{len}"), random(len, 1600 + i as u64)))
        .collect();
    for (key, body) in &objects {
        s3.put("bkt", key, body);
    }
    for (key, body) in &objects {
        assert!(s3.get("bkt", key) == *body, "GET {key} differs");
        let through_mount = std::fs::read(dir.join("bkt").join(key)).unwrap();
        assert!(
            through_mount == *body,
            "{key} read through the mount differs"
        );
    }
    let (key, body) = objects.last().unwrap();
    let wanted = [
        (PIECE - 3, PIECE + 2),
        (0, 2 * PIECE),
        (PIECE, 2 * PIECE + 9),
        (2 * PIECE - 1, body.len() - 1),
    ];
    for (got, (first, last)) in ranges(&s, key, &wanted).iter().zip(wanted) {
        assert!(
            *got == hex(&body[first..=last]),
            "bytes {first}-{last} of {key} differ"
        );
    }
    s3.stop();
    let (key_id, secret) = (s.key_id.clone(), s.secret.clone());
    let (repo, _) = s.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");

    let s = serve::serve_again(&repo, &dir, key_id, secret);
    let mut s3 = Driver::start(&s);
    for (key, body) in &objects {
        assert!(
            s3.get("bkt", key) == *body,
            "GET {key} after a restart differs"
        );
    }
    s3.stop();
    s.mount.unmount();
}
