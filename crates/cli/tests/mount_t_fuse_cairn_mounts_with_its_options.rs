//! `mount -t fuse.cairn REPO DIR -o OPTS`, as an fstab line does it: with
//! cairn on the system's PATH (fuse3's mount.fuse3 runs it) or installed
//! as /sbin/mount.fuse.cairn, mount(8) mounts the repository in the
//! background with the options mapped (ro here),
//! a plain `umount` ends it cleanly, and a bad option or repository fails
//! the mount with cairn's own message and leaves nothing mounted.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{is_cairn_mounted, ok, random, require_fuse, CAIRN};

/// A symlink to the cairn under test at a system path (or nothing there,
/// with `None`); whatever was there before is put back when dropped.
struct Installed {
    path: PathBuf,
    aside: Option<PathBuf>,
}

impl Installed {
    fn new(path: &str, target: Option<&str>) -> Installed {
        let path = PathBuf::from(path);
        let aside = fs::symlink_metadata(&path).is_ok().then(|| {
            let aside = path.with_extension("cairn-test-aside");
            fs::rename(&path, &aside).unwrap();
            aside
        });
        if let Some(t) = target {
            std::os::unix::fs::symlink(t, &path).unwrap_or_else(|e| {
                panic!("this test needs root to install {}: {e}", path.display())
            });
        }
        Installed { path, aside }
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
        if let Some(aside) = &self.aside {
            let _ = fs::rename(aside, &self.path);
        }
    }
}

fn mount(repo: &Path, dir: &Path, opts: &str) -> Output {
    Command::new("mount")
        .args(["-t", "fuse.cairn"])
        .arg(repo)
        .arg(dir)
        .args(["-o", opts])
        .output()
        .unwrap()
}

/// Waits until the daemon the helper started has made everything durable
/// and ended: it no longer holds the repository (`REPO/run/holder` names
/// the holder while it does).
fn wait_until_unlocked(repo: &Path) {
    let started = Instant::now();
    while repo.join("run/holder").exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the daemon did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn mount_t_fuse_cairn_mounts_with_its_options() {
    require_fuse();
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir(&dir).unwrap();
    ok(&repo, &["init"]);
    let data = random(300_000, 5);
    let src = base.path().join("src");
    fs::write(&src, &data).unwrap();
    let m = common::Mount::start(repo.clone(), dir.clone());
    fs::copy(&src, m.path("f")).unwrap();
    m.unmount();

    // Without a helper of its own, mount(8) runs fuse3's mount.fuse3, which
    // runs `cairn REPO DIR -o OPTS` from the system's PATH.
    {
        let _none = Installed::new("/sbin/mount.fuse.cairn", None);
        let _cairn = Installed::new("/usr/local/bin/cairn", Some(CAIRN));
        let out = mount(&repo, &dir, "ro,nofail");
        assert!(
            out.status.success(),
            "mount -t fuse.cairn through mount.fuse3 failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(is_cairn_mounted(&dir));
        assert_eq!(fs::read(dir.join("f")).unwrap(), data);
        let e = fs::write(dir.join("g"), b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
        let out = Command::new("umount").arg(&dir).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        wait_until_unlocked(&repo);
    }

    let _helper = Installed::new("/sbin/mount.fuse.cairn", Some(CAIRN));

    let out = mount(&repo, &dir, "defaults,ro,threads=2,_netdev");
    assert!(
        out.status.success(),
        "mount -t fuse.cairn failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        is_cairn_mounted(&dir),
        "mount returned, but nothing is mounted"
    );
    let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.contains(dir.to_str().unwrap()))
        .unwrap();
    assert!(
        line.contains(" ro,") || line.contains(" ro "),
        "not ro: {line}"
    );
    assert_eq!(fs::read(dir.join("f")).unwrap(), data);
    let e = fs::write(dir.join("g"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{e}");
    let out = Command::new("umount").arg(&dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until_unlocked(&repo);
    assert!(!is_cairn_mounted(&dir));

    // An option cairn does not know: refused before anything starts.
    let out = mount(&repo, &dir, "rw,bogus");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("bogus"), "{err}");
    assert!(!is_cairn_mounted(&dir));
    // No repository there: the daemon's own error comes back.
    let out = mount(&base.path().join("none"), &dir, "rw");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "mounted a repository that is not there"
    );
    assert!(err.contains("none"), "{err}");
    assert!(!is_cairn_mounted(&dir));

    // Writable through the helper too; what it wrote is there afterwards.
    let out = mount(&repo, &dir, "rw");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(dir.join("g"), b"written through fstab's way").unwrap();
    let out = Command::new("umount").arg(&dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until_unlocked(&repo);
    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");
    let m = common::Mount::start(repo, dir);
    assert_eq!(fs::read(m.path("f")).unwrap(), data);
    assert_eq!(
        fs::read(m.path("g")).unwrap(),
        b"written through fstab's way"
    );
    m.unmount();
}
