//! `cairn serve --cluster URL`: the mount and the S3 gateway together over
//! a namespace sharded on two etcd clusters. An object PUT over S3 is the
//! mount's file, a file written through the mount is an object; after
//! serve stops, `cairn serve` without the URL is refused (the namespace is
//! not in the repository) and with it everything is still there.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use common::etcd::{cluster_init, Etcd};
use common::{cairn, ok};

const ROUNDTRIP: &str = r#"
import os
from cairn_s3 import client
s3 = client()
m = os.environ["MOUNT"]
s3.create_bucket(Bucket="data")
body = os.urandom(300_000)
s3.put_object(Bucket="data", Key="deep/er/obj.bin", Body=body)
assert open(f"{m}/data/deep/er/obj.bin", "rb").read() == body, "PUT seen by the mount"
open(f"{m}/data/from-mount.txt", "wb").write(b"through FUSE")
got = s3.get_object(Bucket="data", Key="from-mount.txt")["Body"].read()
assert got == b"through FUSE", got
open(f"{m}/body.bin", "wb").write(body)
print("OK")
"#;

#[test]
fn serve_over_etcd_clusters_answers_s3_and_the_mount() {
    let (control, d0, d1) = (Etcd::start(), Etcd::start(), Etcd::start());
    let base = tempfile::tempdir().unwrap();
    let (repo, dir) = (base.path().join("repo"), base.path().join("mnt"));
    ok(&repo, &["init"]);
    let made = cluster_init(&repo, &control, &[&d0, &d1], "web", &[]);
    let url = made["url"].as_str().unwrap().to_string();
    let s = serve::serve_with(&repo, &dir, &["--cluster", &url]);
    let out = s.python().args(["-c", ROUNDTRIP]).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let body = std::fs::read(dir.join("body.bin")).unwrap();
    let key = (s.key_id.clone(), s.secret.clone());
    let (repo, _) = s.mount.unmount();

    let refused = cairn(&repo, &["mount", dir.to_str().unwrap()]);
    assert!(
        !refused.status.success(),
        "a mount without --cluster is refused"
    );
    let s = serve::serve_again_with(&repo, &dir, key, &["--cluster", &url]);
    assert!(std::fs::read(dir.join("data/deep/er/obj.bin")).unwrap() == body);
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
    s.mount.unmount();
}
