//! contrib/systemd/cairn.service, pointed at the cairn under test, passes
//! `systemd-analyze verify`, and what it runs exists: `cairn serve` and
//! `cairn doctor` with the options the unit gives them.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::CAIRN;

#[test]
fn the_systemd_unit_verifies() {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd/cairn.service");
    let text = fs::read_to_string(&unit).unwrap();
    assert!(text.contains("/usr/local/bin/cairn serve"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("cairn.service");
    fs::write(&ours, text.replace("/usr/local/bin/cairn", CAIRN)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&ours)
        .output()
        .expect("systemd-analyze not found: apt-get install -y systemd");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert!(!said.contains("cairn.service:"), "{said}");

    // The unit's commands parse as the unit gives them.
    for args in [
        &["serve", "--help"][..],
        &["doctor", "--min-free", "5", "--help"],
    ] {
        let out = Command::new(CAIRN).args(args).output().unwrap();
        assert!(out.status.success(), "{args:?}");
    }
    let line = text.lines().find(|l| l.starts_with("ExecStart=")).unwrap();
    assert!(line.contains("--listen"), "{line}");
}
