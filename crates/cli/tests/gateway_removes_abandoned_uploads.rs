//! What abandoned requests leave in a bucket — a multipart upload never
//! completed and a PUT's temporary file from a gateway killed mid-PUT —
//! is removed by the sweep at the next `cairn serve` once unchanged for
//! `--abandoned-after`; an upload and a temporary file changed recently
//! stay, and so does every object. The repository then checks clean.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::fs::{self, File};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use common::ok;

/// Runs a boto3 snippet against `s`; its standard output.
fn boto3(s: &serve::Served, code: &str) -> String {
    let script = format!(
        "import boto3\nfrom botocore.config import Config\n\
         s3 = boto3.client('s3', endpoint_url='{}', aws_access_key_id='{}', \
         aws_secret_access_key='{}', region_name='us-east-1', \
         config=Config(s3={{'addressing_style': 'path'}}, retries={{'max_attempts': 1}}))\n{code}",
        s.endpoint, s.key_id, s.secret
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Sets the mtime of `path` (a file or a directory) two days back.
fn age(path: &Path) {
    let old = SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
    File::open(path).unwrap().set_modified(old).unwrap();
}

#[test]
fn abandoned_uploads_and_temporary_files_are_swept() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let s = serve::serve(&repo, &dir);
    let ids = boto3(
        &s,
        "s3.create_bucket(Bucket='bkt')\n\
         s3.put_object(Bucket='bkt', Key='dir/kept', Body=b'an object')\n\
         for key in ['old', 'fresh']:\n\
         \x20   u = s3.create_multipart_upload(Bucket='bkt', Key=key)['UploadId']\n\
         \x20   s3.upload_part(Bucket='bkt', Key=key, UploadId=u, PartNumber=1, Body=b'part')\n\
         \x20   print(u)\n",
    );
    let ids: Vec<&str> = ids.lines().collect();
    let old_upload = dir.join(format!("bkt/.cairn-put.upload.{}", ids[0]));
    let fresh_upload = dir.join(format!("bkt/.cairn-put.upload.{}", ids[1]));
    // What a gateway killed mid-PUT leaves.
    let old_tmp = dir.join("bkt/dir/.cairn-put.00000000deadbeef");
    let fresh_tmp = dir.join("bkt/dir/.cairn-put.00000000cafe0000");
    fs::write(&old_tmp, b"half a body").unwrap();
    fs::write(&fresh_tmp, b"a body in progress").unwrap();
    age(&old_tmp);
    age(&old_upload);
    let (key_id, secret) = (s.key_id.clone(), s.secret.clone());
    let (repo, dir) = s.mount.unmount();

    let s = serve::serve_again(&repo, &dir, key_id, secret);
    let started = Instant::now();
    while old_upload.exists() || old_tmp.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the sweep at start removed nothing"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(fresh_upload.is_dir() && fresh_tmp.is_file());
    assert_eq!(fs::read(dir.join("bkt/dir/kept")).unwrap(), b"an object");
    let uploads = boto3(
        &s,
        "print([u['UploadId'] for u in s3.list_multipart_uploads(Bucket='bkt').get('Uploads', [])])",
    );
    assert_eq!(uploads.trim(), format!("['{}']", ids[1]));
    let (repo, _) = s.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
}
