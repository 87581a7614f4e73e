//! A name the gateway changes is dropped from the kernel's entry cache of
//! the mount `cairn serve` runs: a file read through the mount, then
//! replaced, copied over or deleted through S3, is seen changed by the very
//! next look through the mount (without the invalidation the kernel would
//! keep the old entry for its cache time, a second). Many rounds, each
//! reading right after the S3 reply. The repository then checks clean.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use common::ok;

const ROUNDS: &str = r#"
import os
from cairn_s3 import client
s3 = client()
m = os.environ["MOUNT"]
s3.create_bucket(Bucket="live")
for i in range(30):
    body = b"round %d " % i + os.urandom(100 + i)
    s3.put_object(Bucket="live", Key="dir/file", Body=body)
    assert open(f"{m}/live/dir/file", "rb").read() == body, f"PUT, round {i}"
    s3.put_object(Bucket="live", Key="src", Body=body[::-1])
    s3.copy_object(Bucket="live", Key="dir/file", CopySource={"Bucket": "live", "Key": "src"})
    assert open(f"{m}/live/dir/file", "rb").read() == body[::-1], f"copy, round {i}"
    os.stat(f"{m}/live/src")
    s3.delete_object(Bucket="live", Key="src")
    assert not os.path.exists(f"{m}/live/src"), f"DELETE, round {i}"
s3.delete_object(Bucket="live", Key="dir/file")
assert not os.path.exists(f"{m}/live/dir"), "the directory left empty"
s3.put_object(Bucket="live", Key="kept", Body=b"kept")
print("OK")
"#;

#[test]
fn the_mount_sees_s3_changes_at_once() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let s = serve::serve(&repo, &dir);
    let out = s.python().args(["-c", ROUNDS]).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(dir.join("live/kept")).unwrap(), b"kept");
    let (repo, _) = s.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
}
