//! `restore --to` and `clone` take paths inside the file system; given a
//! host directory, they say so and name `--out`, which writes the files
//! into a host directory (a relative one is the caller's). A name in the
//! way is refused naming `--overwrite`, which then replaces it.

mod common;

use std::fs;
use std::process::Command;
use std::time::Duration;

use common::{cairn, ok, Mount, CAIRN};

fn err(out: &std::process::Output) -> String {
    assert!(!out.status.success(), "accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn host_paths_are_named_and_restore_out_writes_there() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/s2.txt"), b"as snapshotted").unwrap();
    ok(&m.repo, &["snapshot", "create", "s1"]);
    fs::write(m.path("d/s2.txt"), b"changed").unwrap();

    let host = base.path().join("host");
    fs::create_dir(&host).unwrap();
    let into = host.join("d");
    let e = err(&cairn(
        &m.repo,
        &["restore", "s1", "/d", "--to", into.to_str().unwrap()],
    ));
    assert!(
        e.contains("does not exist in the file system") && e.contains("--out DIR"),
        "{e}"
    );
    let e = err(&cairn(&m.repo, &["clone", "/d", into.to_str().unwrap()]));
    assert!(
        e.contains("does not exist in the file system") && e.contains("MOUNTPOINT/a/b"),
        "{e}"
    );
    assert!(!into.exists(), "nothing written to the host");

    // In the way inside the file system: --overwrite is named, then works.
    let e = err(&cairn(&m.repo, &["restore", "s1", "/d/s2.txt"]));
    assert!(
        e.contains("s2.txt exists") && e.contains("--overwrite"),
        "{e}"
    );
    ok(&m.repo, &["restore", "s1", "/d/s2.txt", "--overwrite"]);
    // The restore went behind the kernel's back: its cache of the entry
    // lasts 1 s.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(fs::read(m.path("d/s2.txt")).unwrap(), b"as snapshotted");

    // --out DIR, relative to where the command runs.
    let out = Command::new(CAIRN)
        .current_dir(&host)
        .arg("--repo")
        .arg(&m.repo)
        .args(["-q", "restore", "s1", "/d", "--out", "."])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read(host.join("d/s2.txt")).unwrap(), b"as snapshotted");

    fs::write(host.join("d/s2.txt"), b"edited on the host").unwrap();
    let e = err(&cairn(
        &m.repo,
        &["restore", "s1", "/d", "--out", host.to_str().unwrap()],
    ));
    let named = format!("{} exists", host.join("d").display());
    assert!(e.contains(&named) && e.contains("--overwrite"), "{e}");
    assert_eq!(
        fs::read(host.join("d/s2.txt")).unwrap(),
        b"edited on the host"
    );
    ok(
        &m.repo,
        &[
            "restore",
            "s1",
            "/d",
            "--out",
            host.to_str().unwrap(),
            "--overwrite",
        ],
    );
    assert_eq!(fs::read(host.join("d/s2.txt")).unwrap(), b"as snapshotted");
}
