//! boto3 against `cairn serve`, the operations of the gateway's second
//! slice (`s3_clients/boto3_keys_and_versions.py`): 1,050 keys written
//! through the mount listed page by page (V2, V1, ListObjectVersions with
//! version "null"), keys with spaces, `+`, `%`, Unicode, deep paths and
//! empty objects, conditional PUTs, UploadPartCopy whole and ranged,
//! GetBucketLocation. After the unmount the repository checks clean and
//! every object reads back byte-exact through a new mount.

mod common;
#[path = "s3_clients/serve.rs"]
mod serve;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use common::{ok, Mount};

#[test]
fn boto3_pages_past_a_thousand_keys_and_puts_on_conditions() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    let expected = base.path().join("expected");
    fs::create_dir_all(&expected).unwrap();
    let served = serve::serve(&repo, &dir);

    // Keys through the mount, each holding its own name.
    let mut many = Vec::new();
    for i in 0..1050 {
        let key = match i % 3 {
            0 => format!("top {i:04}"),
            1 => format!("d{}/k{i:04}", i % 7),
            _ => format!("d{}/sub/k{i:04}+x", i % 5),
        };
        let path = dir.join("many").join(&key);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, key.as_bytes()).unwrap();
        many.push(key);
    }

    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/s3_clients/boto3_keys_and_versions.py");
    let out = served
        .python()
        .arg(&script)
        .env("MANY", many.join(","))
        .env("EXPECTED", &expected)
        .output()
        .expect("python3 with boto3 (pip install boto3)");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "boto3 script failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let (repo, dir) = served.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
    let manifest: BTreeMap<String, String> =
        serde_json::from_slice(&fs::read(expected.join("manifest.json")).unwrap()).unwrap();
    assert!(manifest.len() > 15, "{manifest:?}");
    let m = Mount::start(repo, dir);
    for (path, want) in &manifest {
        assert_eq!(
            fs::read(m.path(path)).unwrap(),
            fs::read(expected.join(want)).unwrap(),
            "{path}"
        );
    }
    for key in many.iter().step_by(50) {
        assert_eq!(
            fs::read(m.path(&format!("many/{key}"))).unwrap(),
            key.as_bytes()
        );
    }
    m.unmount();
}
