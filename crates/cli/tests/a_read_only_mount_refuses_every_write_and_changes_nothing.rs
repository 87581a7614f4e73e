//! `cairn mount --read-only` (and `-o ro`): every write through the mount
//! gets EROFS, commands that would change the repository are refused by
//! its daemon, reads are byte-exact, and afterwards the repository holds
//! exactly what it held before: the same roots, the same containers, and
//! `cairn check` clean.

mod common;

use std::fs;
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use common::{cairn, ok, plain_containers, random, Mount};

fn erofs<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    let e = r.expect_err(what);
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EROFS),
        "{what}: {e} ({:?})",
        e.kind()
    );
}

/// Every container's name and bytes.
fn containers(repo: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    plain_containers(repo)
        .into_iter()
        .map(|p| {
            let bytes = fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect()
}

fn setxattr(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid NUL-terminated strings and a buffer of the length given.
    let r = unsafe { libc::setxattr(p.as_ptr(), c"user.x".as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[test]
fn a_read_only_mount_refuses_every_write_and_changes_nothing() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let big = random(700_000, 17);
    fs::create_dir(m.path("d")).unwrap();
    fs::write(m.path("d/big"), &big).unwrap();
    fs::write(m.path("small"), b"small and inline").unwrap();
    let (repo, dir) = m.unmount();
    let roots = ok(&repo, &["roots", "--json"]);
    let before = containers(&repo);
    assert!(!before.is_empty());

    for flag in [
        &["mount", "--read-only"][..],
        &["mount", "-o", "ro,noatime"],
    ] {
        let m = Mount::start_cmd(repo.clone(), dir.clone(), flag);
        assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
        assert_eq!(fs::read(m.path("small")).unwrap(), b"small and inline");
        erofs("create", fs::write(m.path("new"), b"x"));
        erofs(
            "append",
            fs::OpenOptions::new().append(true).open(m.path("small")),
        );
        erofs("mkdir", fs::create_dir(m.path("d2")));
        erofs("unlink", fs::remove_file(m.path("small")));
        erofs("rmdir", fs::remove_dir(m.path("d")));
        erofs("rename", fs::rename(m.path("small"), m.path("moved")));
        erofs(
            "chmod",
            fs::set_permissions(m.path("small"), fs::Permissions::from_mode(0o600)),
        );
        erofs("symlink", std::os::unix::fs::symlink("small", m.path("l")));
        erofs("hard link", fs::hard_link(m.path("small"), m.path("h")));
        erofs("setxattr", setxattr(&m.path("small")));
        // Commands that would change the repository are refused by the
        // daemon, naming the read-only mount; reading ones still work.
        for args in [
            &["snapshot", "create", "s"][..],
            &["version"],
            &["gc"],
            &["rm", "version/1"],
        ] {
            let out = cairn(&repo, args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} went through");
            assert!(err.contains("read-only"), "{args:?}: {err}");
        }
        ok(&repo, &["stats", "--json"]);
        ok(&repo, &["gc", "--dry-run", "--json"]);
        m.unmount();
        assert_eq!(ok(&repo, &["roots", "--json"]), roots);
        assert!(containers(&repo) == before, "the containers changed");
    }
    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");

    // Mounted writable again, the tree is as it was and takes writes.
    let m = Mount::start(repo.clone(), dir);
    assert_eq!(fs::read(m.path("d/big")).unwrap(), big);
    fs::write(m.path("new"), b"x").unwrap();
    assert!(fs::metadata(m.path("moved")).is_err_and(|e| e.kind() == ErrorKind::NotFound));
    m.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("summary: clean"), "{check}");
}
