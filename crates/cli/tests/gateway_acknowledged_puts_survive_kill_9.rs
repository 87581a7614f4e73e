//! Acknowledged means durable, also when many small PUTs share a commit:
//! sixteen boto3 threads PUT 400 small objects to `cairn serve`, which is
//! killed with SIGKILL the moment the last reply arrived. A new mount
//! serves every acknowledged object byte-exact, and the repository checks
//! clean.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::collections::BTreeMap;
use std::fs;

use common::{ok, Mount};

const PUTS: &str = r#"
import hashlib, json, os
from concurrent.futures import ThreadPoolExecutor
from cairn_s3 import client
s3 = client(max_pool_connections=16)
s3.create_bucket(Bucket="small")
def put(i):
    key = f"d{i % 10}/obj {i:04}"
    body = hashlib.sha256(b"%d" % i).digest() * (30 + i % 250)
    etag = s3.put_object(Bucket="small", Key=key, Body=body)["ETag"]
    assert etag == '"%s"' % hashlib.md5(body).hexdigest()
    return key, body.hex()
with ThreadPoolExecutor(16) as pool:
    done = dict(pool.map(put, range(400)))
json.dump(done, open(os.environ["EXPECTED"], "w"))
print("OK")
"#;

#[test]
fn acknowledged_small_puts_survive_kill_9() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let expected = base.path().join("expected.json");
    let s = serve::serve(&repo, &dir);
    let out = s
        .python()
        .args(["-c", PUTS])
        .env("EXPECTED", &expected)
        .output()
        .unwrap();
    let (repo, dir) = s.mount.kill();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let done: BTreeMap<String, String> =
        serde_json::from_slice(&fs::read(&expected).unwrap()).unwrap();
    assert_eq!(done.len(), 400);
    let m = Mount::start(repo, dir);
    for (key, hex) in &done {
        let want: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert_eq!(
            fs::read(m.path(&format!("small/{key}"))).unwrap(),
            want,
            "{key}"
        );
    }
    let (repo, _) = m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
}
