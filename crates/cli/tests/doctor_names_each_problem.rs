//! `cairn doctor` on a healthy repository finds nothing to do (exit 0);
//! on one deliberately broken three ways at once (its key deleted, its
//! mount left dead by `kill -9` of the daemon, its branch's disk full)
//! it names each problem with what to do and exits 2; fixed as it says,
//! it is healthy again and every file reads back byte-exact.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ok, random, Mount, Tmpfs, CAIRN};

/// The checks that look at this repository (a dead mount of another test
/// elsewhere on the machine is not this test's business).
const OURS: [&str; 9] = [
    "fuse_device",
    "fuse_package",
    "repository",
    "permissions",
    "config",
    "key",
    "key_backup",
    "free_space",
    "clock",
];

/// Detaches whatever is left mounted at its directory when dropped.
struct Detach(std::path::PathBuf);

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(&self.0)
            .output();
    }
}

struct Doctor {
    code: i32,
    json: serde_json::Value,
    text: String,
}

fn doctor(repo: &Path) -> Doctor {
    let run = |json: bool| {
        let mut cmd = Command::new(CAIRN);
        cmd.arg("--repo").arg(repo).arg("doctor");
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let j = run(true);
    let t = run(false);
    assert_eq!(j.status.code(), t.status.code());
    let json: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    for f in json["findings"].as_array().unwrap() {
        for field in ["check", "severity", "message"] {
            assert!(f[field].is_string(), "{field} in {f}");
        }
        assert!(f["fix"].is_string() || f["fix"].is_null(), "{f}");
        assert!(f["subject"].is_string() || f["subject"].is_null(), "{f}");
    }
    Doctor {
        code: j.status.code().unwrap(),
        json,
        text: String::from_utf8(t.stdout).unwrap(),
    }
}

impl Doctor {
    /// The findings of `check` at `severity`.
    fn find(&self, check: &str, severity: &str) -> Vec<&serde_json::Value> {
        self.json["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["check"] == check && f["severity"] == severity)
            .collect()
    }

    /// The exit status its worst finding calls for (0, 1 or 2).
    fn expected_code(&self) -> i32 {
        match self.json["status"].as_str().unwrap() {
            "ok" | "info" => 0,
            "warning" => 1,
            "problem" => 2,
            s => panic!("status {s}"),
        }
    }

    fn assert_ours_healthy(&self) {
        assert_eq!(self.code, self.expected_code(), "{}", self.text);
        for f in self.json["findings"].as_array().unwrap() {
            if OURS.contains(&f["check"].as_str().unwrap()) {
                let sev = f["severity"].as_str().unwrap();
                assert!(sev == "ok" || sev == "info", "{f}\n{}", self.text);
            }
        }
    }
}

#[test]
fn doctor_names_each_problem() {
    let base = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(base.path()).unwrap();
    let _disk = Tmpfs::new(&base.join("disk"), 48);
    let repo = base.join("disk/repo");
    let dir = base.join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(&repo, &["init"]);
    let data = random(400_000, 9);
    let m = Mount::start(repo.clone(), dir.clone());
    fs::write(m.path("f"), &data).unwrap();
    m.unmount();

    // Healthy but for the key's backup, which doctor cannot see made.
    let d = doctor(&repo);
    assert_eq!(d.find("key_backup", "warning").len(), 1, "{}", d.text);
    let backup = base.join("key.backup");
    ok(&repo, &["key", "export", backup.to_str().unwrap()]);
    let d = doctor(&repo);
    d.assert_ours_healthy();
    assert_eq!(d.find("free_space", "ok").len(), 2, "{}", d.text);
    assert_eq!(d.find("key", "ok").len(), 1, "{}", d.text);

    // A dead mount: the daemon killed, its mount point left behind (and
    // detached at the end whatever happens). While it lives, doctor names
    // it as this repository's mount, and runs beside it.
    let _detach = Detach(dir.clone());
    let mut m = Mount::start(repo.clone(), dir.clone());
    let d = doctor(&repo);
    d.assert_ours_healthy();
    assert!(
        d.find("mount", "ok")
            .iter()
            .any(|f| f["subject"] == dir.to_str().unwrap()
                && f["message"].as_str().unwrap().contains("this repository")),
        "{}",
        d.text
    );
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    // Dead once the kernel's cached attributes of it have run out.
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::metadata(&dir).err().and_then(|e| e.raw_os_error()) != Some(libc::ENOTCONN) {
        assert!(Instant::now() < deadline, "the mount did not go dead");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The key lost, and the branch's disk filled to the last byte.
    fs::remove_file(repo.join("key")).unwrap();
    let filler = base.join("disk/filler");
    let fill = fs::write(&filler, vec![7u8; 48 << 20]).unwrap_err();
    assert!(common::is_enospc(&fill), "{fill}");

    let d = doctor(&repo);
    assert_eq!(d.code, 2, "{}", d.text);
    assert_eq!(d.json["status"], "problem");
    let key = d.find("key", "problem");
    assert_eq!(key.len(), 1, "{}", d.text);
    assert!(key[0]["fix"].as_str().unwrap().contains("cairn key import"));
    let dead = d.find("mount", "problem");
    assert!(
        dead.iter().any(|f| f["subject"] == dir.to_str().unwrap()
            && f["fix"].as_str().unwrap().contains("cairn umount")),
        "{}",
        d.text
    );
    let full: Vec<_> = d.find("free_space", "problem");
    assert!(
        full.iter().any(|f| f["subject"] == "branch local"),
        "{}",
        d.text
    );
    assert!(
        full.iter().any(|f| f["subject"] == "metadata"),
        "{}",
        d.text
    );
    for said in [
        "PROBLEM  key",
        "dead cairn mount is at",
        "full, writes fail with ENOSPC",
        "summary: PROBLEMS found",
    ] {
        assert!(d.text.contains(said), "{said:?} not in:\n{}", d.text);
    }

    // Fixed as doctor says: healthy again, nothing lost.
    ok(&repo, &["umount", dir.to_str().unwrap()]);
    fs::remove_file(&filler).unwrap();
    ok(&repo, &["key", "import", backup.to_str().unwrap()]);
    doctor(&repo).assert_ours_healthy();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");
    let m = Mount::start(repo, dir);
    assert_eq!(fs::read(m.path("f")).unwrap(), data);
    m.unmount();
}
