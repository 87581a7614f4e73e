//! A lost key file: every command says how to restore it (`cairn key
//! import`); importing another repository's key is refused and writes
//! nothing; the backup made with `cairn key export` brings every file back
//! exactly, and `check` is clean.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::{cairn, ok, random, Mount, CAIRN};

#[test]
fn an_exported_key_restores_a_lost_one_and_a_wrong_key_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let files: BTreeMap<String, Vec<u8>> = (0..4u64)
        .map(|i| (format!("f{i}"), random(20_000 + 9_000 * i as usize, 7 + i)))
        .collect();
    for (rel, data) in &files {
        fs::write(m.path(rel), data).unwrap();
    }
    let (repo, mnt) = m.unmount();
    let key = repo.join("key");

    // Export to a file (owner-only) and to standard output, with a warning.
    let backup = base.path().join("key.backup");
    ok(&repo, &["key", "export", backup.to_str().unwrap()]);
    assert_eq!(fs::read(&backup).unwrap(), fs::read(&key).unwrap());
    let mode = fs::metadata(&backup).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "the backup is readable by others");
    let out = Command::new(CAIRN)
        .arg("--repo")
        .arg(&repo)
        .args(["key", "export"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(out.stdout, fs::read(&key).unwrap());
    assert!(String::from_utf8_lossy(&out.stderr).contains("secret"));
    let again = cairn(&repo, &["key", "export", backup.to_str().unwrap()]);
    assert!(!again.status.success(), "an existing file was overwritten");

    fs::remove_file(&key).unwrap();
    for args in [vec!["check"], vec!["mount", mnt.to_str().unwrap()]] {
        let out = cairn(&repo, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("cairn key import"),
            "{args:?}: {err}"
        );
    }

    // Another repository's key is recognised and refused.
    let other = base.path().join("other");
    ok(&other, &["init"]);
    let out = cairn(
        &repo,
        &["key", "import", other.join("key").to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not this repository's"),
        "{err}"
    );
    assert!(!key.exists(), "a refused key was written");
    // So is a key file that holds another key.
    fs::copy(other.join("key"), &key).unwrap();
    let out = cairn(&repo, &["check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not this repository's key"),
        "{err}"
    );

    ok(&repo, &["key", "import", backup.to_str().unwrap()]);
    assert_eq!(fs::read(&key).unwrap(), fs::read(&backup).unwrap());
    assert_eq!(
        fs::read(repo.join("key.damaged")).unwrap(),
        fs::read(other.join("key")).unwrap(),
        "the replaced key was not kept"
    );
    let m = Mount::start(repo.clone(), mnt);
    for (rel, data) in &files {
        assert!(fs::read(m.path(rel)).unwrap() == *data, "{rel} differs");
    }
    m.unmount();
    let report = ok(&repo, &["check"]);
    assert!(report.contains("no damage found"), "{report}");
}
