//! Mount points that cannot take a mount are refused before anything is
//! opened: a live cairn mount (stacking one on another made stopping the
//! top one take down both), another mount or a non-empty directory (unless
//! `--nonempty`). A dead mount left by a `kill -9` is cleared by `mount`,
//! `serve` and `umount`; `umount` of what is not mounted says so.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::{cairn, is_mounted, ok, require_fuse, Mount, CAIRN};

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn refused(out: Output, expect: &[&str]) {
    let t = text(&out);
    assert!(!out.status.success(), "should have been refused: {t}");
    for e in expect {
        assert!(t.contains(e), "{e:?} missing from: {t}");
    }
}

fn umount(dir: &Path) -> Output {
    Command::new(CAIRN).arg("umount").arg(dir).output().unwrap()
}

/// `kill -9` of the daemon, leaving its mount dead.
fn kill_leaving_dead_mount(mut m: Mount) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut child = m.child.take().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs::metadata(&m.dir).err().and_then(|e| e.raw_os_error()) != Some(libc::ENOTCONN) {
        assert!(Instant::now() < deadline, "the mount did not go dead");
        std::thread::sleep(Duration::from_millis(20));
    }
    (m.repo.clone(), m.dir.clone())
}

#[test]
fn stacked_nonempty_and_dead_mount_points() {
    require_fuse();
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    fs::write(m.path("a"), b"lower").unwrap();
    let other = base.path().join("other");
    ok(&other, &["init"]);

    // On top of a live cairn mount: refused, with or without --nonempty.
    let dir = m.dir.to_str().unwrap();
    refused(
        cairn(&other, &["mount", dir]),
        &["already mounted there", "cairn umount"],
    );
    refused(
        cairn(&other, &["mount", "--nonempty", dir]),
        &["already mounted there"],
    );
    // The same repository elsewhere: its lock names the mount.
    let elsewhere = base.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    refused(
        cairn(&m.repo, &["mount", elsewhere.to_str().unwrap()]),
        &[&format!(
            "mounted at {}",
            m.dir.canonicalize().unwrap().display()
        )],
    );
    assert_eq!(
        fs::read(m.path("a")).unwrap(),
        b"lower",
        "the mount survives"
    );

    // A directory that is not empty, or is another file system's mount.
    let full = base.path().join("full");
    fs::create_dir(&full).unwrap();
    fs::write(full.join("kept"), b"x").unwrap();
    refused(
        cairn(&other, &["mount", full.to_str().unwrap()]),
        &["not empty", "--nonempty"],
    );
    let tmpfs = base.path().join("tmpfs");
    fs::create_dir(&tmpfs).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&tmpfs)
        .status()
        .unwrap();
    assert!(st.success(), "mount -t tmpfs needs root");
    refused(
        cairn(&other, &["mount", tmpfs.to_str().unwrap()]),
        &["already a mount point", "--nonempty"],
    );
    let over = Mount::start_cmd(other.clone(), tmpfs.clone(), &["mount", "--nonempty"]);
    fs::write(over.path("b"), b"over tmpfs").unwrap();
    over.unmount();
    assert!(Command::new("umount")
        .arg(&tmpfs)
        .status()
        .unwrap()
        .success());
    let over = Mount::start_cmd(other.clone(), full.clone(), &["mount", "--nonempty"]);
    assert_eq!(fs::read(over.path("b")).unwrap(), b"over tmpfs");
    over.unmount();
    assert_eq!(fs::read(full.join("kept")).unwrap(), b"x");

    // Not mounted at all.
    refused(umount(&full), &["is not mounted"]);

    // kill -9: `umount` clears the dead mount, and says so.
    let f = fs::File::create(m.path("synced")).unwrap();
    std::io::Write::write_all(&mut &f, b"durable").unwrap();
    f.sync_all().unwrap();
    drop(f);
    let (repo, dir) = kill_leaving_dead_mount(m);
    let out = umount(&dir);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("dead mount"), "{}", text(&out));
    assert!(!is_mounted(&dir));
    refused(umount(&dir), &["is not mounted"]);

    // kill -9 again: `mount` on the dead mount point clears it and mounts.
    let m = Mount::start(repo.clone(), dir.clone());
    assert_eq!(fs::read(m.path("synced")).unwrap(), b"durable");
    let (repo, dir) = kill_leaving_dead_mount(m);
    let m = Mount::start(repo.clone(), dir.clone());
    assert_eq!(fs::read(m.path("a")).unwrap(), b"lower");
    // And `serve` does the same.
    let (repo, dir) = kill_leaving_dead_mount(m);
    let m = Mount::start_cmd(repo, dir, &["serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(fs::read(m.path("synced")).unwrap(), b"durable");
    m.unmount();
}
