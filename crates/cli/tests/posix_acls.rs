//! POSIX ACLs on the mount work as on ext4: the kernel enforces them (an
//! entry denies what the mode allows, and grants what it denies), new
//! files and directories inherit a default ACL with the umask set aside,
//! chmod moves the mask, a setfacl by someone outside the file's group
//! drops set-group-id, getfacl/setfacl round-trip, the ACL xattrs answer as
//! ext4's do, and all of it survives a remount.
//!
//! Needs FUSE and getfacl/setfacl (Debian packages fuse3 and acl;
//! `.ci/run` installs them). Runs as root and acts as other users.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

mod common;
use common::{sh, xattrs, Mount};

/// A user named in ACL entries (its own group, 4242, too).
const NAMED: u32 = 4242;
/// A user whom an entry denies.
const DENIED: u32 = 65534;

/// `sh -c SCRIPT` in `dir` as `uid` (group `uid`, no others): whether it
/// succeeded, and its standard error.
fn as_user(uid: u32, dir: &Path, script: &str) -> (bool, String) {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_denied(uid: u32, dir: &Path, script: &str) {
    let (ok, err) = as_user(uid, dir, script);
    assert!(
        !ok && err.contains("Permission denied"),
        "{uid}: {script}: {err}"
    );
}

fn assert_allowed(uid: u32, dir: &Path, script: &str) {
    let (ok, err) = as_user(uid, dir, script);
    assert!(ok, "{uid}: {script}: {err}");
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// The errno of `setxattr` (0 on success).
fn setxattr(path: &Path, name: &str, value: &[u8]) -> i32 {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a value of the length given.
    let r = unsafe {
        libc::setxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// The errno of `getxattr` (0 on success).
fn getxattr(path: &Path, name: &str) -> i32 {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = [0u8; 256];
    // SAFETY: as above, with a buffer of the length given.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r >= 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// A directory with a default ACL, and what `NAMED` creates in it under a
/// umask of 077 (which a default ACL sets aside).
const INHERIT: &str = "set -e
    mkdir proj
    setfacl -m u:4242:rwx proj
    setfacl -d -m u:4242:rwx,g::rx,o::- proj";
const CREATE_AS_NAMED: &str = "set -e; umask 077
    mkdir proj/sub
    echo data > proj/sub/file
    echo data > proj/file
    mkfifo proj/fifo
    ln -s file proj/link";

#[test]
fn acls_are_enforced_inherited_and_kept() {
    let base = tempfile::tempdir().unwrap();
    // The mount point's parents must let other users through.
    fs::set_permissions(base.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let m = Mount::new(base.path());
    let d = m.dir.clone();

    // An entry denies what the mode allows.
    fs::write(d.join("secret"), b"s").unwrap();
    fs::set_permissions(d.join("secret"), fs::Permissions::from_mode(0o644)).unwrap();
    assert_allowed(DENIED, &d, "cat secret");
    sh(&format!(
        "setfacl -m u:{DENIED}:--- '{}/secret'",
        d.display()
    ));
    assert_denied(DENIED, &d, "cat secret");
    assert_allowed(NAMED, &d, "cat secret");
    assert_eq!(
        mode(&d.join("secret")),
        0o644,
        "the mask is the group's r--"
    );

    // A named entry grants what the mode denies.
    fs::write(d.join("shared"), b"s").unwrap();
    fs::set_permissions(d.join("shared"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_denied(NAMED, &d, "cat shared");
    sh(&format!("setfacl -m u:{NAMED}:rw '{}/shared'", d.display()));
    assert_allowed(NAMED, &d, "cat shared && printf x >> shared");
    assert_denied(DENIED, &d, "cat shared");
    assert_eq!(
        mode(&d.join("shared")),
        0o660,
        "the group bits show the mask"
    );
    assert!(sh(&format!("ls -l '{}/shared'", d.display())).starts_with("-rw-rw----+"));

    // chmod moves the mask: the named user keeps read, loses write.
    sh(&format!("chmod 640 '{}/shared'", d.display()));
    let acl = sh(&format!("getfacl -n '{}/shared'", d.display()));
    assert!(acl.contains("mask::r--"), "{acl}");
    assert!(acl.contains("user:4242:rw-\t#effective:r--"), "{acl}");
    assert_allowed(NAMED, &d, "cat shared");
    assert_denied(NAMED, &d, "printf x >> shared");

    // Inheritance, compared with the same steps on the host's file system.
    let reference = base.path().join("reference");
    fs::create_dir(&reference).unwrap();
    for root in [&d, &reference] {
        sh(&format!("cd '{}' && {INHERIT}", root.display()));
        assert_allowed(NAMED, root, CREATE_AS_NAMED);
    }
    // One block per path; directories list in a different order there.
    let getfacl = |root: &Path| {
        let out = sh(&format!("cd '{}' && getfacl -R -n -p proj", root.display()));
        let mut blocks: Vec<String> = out
            .split("\n\n")
            .filter(|b| !b.is_empty())
            .map(str::to_owned)
            .collect();
        blocks.sort();
        blocks
    };
    let inherited = getfacl(&d);
    assert_eq!(inherited.len(), 5, "{inherited:?}");
    assert_eq!(inherited, getfacl(&reference), "as on the host");
    let proj = d.join("proj");
    assert_eq!(mode(&proj.join("sub")), 0o770, "the umask set aside");
    assert_eq!(mode(&proj.join("file")), 0o660);
    assert_eq!(mode(&proj.join("fifo")), 0o660);
    let sub = xattrs(&proj.join("sub"));
    assert_eq!(
        sub.get(&b"system.posix_acl_default"[..]),
        xattrs(&proj).get(&b"system.posix_acl_default"[..]),
        "a new directory inherits the default ACL as its own"
    );
    assert!(xattrs(&proj.join("file")).contains_key(&b"system.posix_acl_access"[..]));
    assert!(
        xattrs(&proj.join("link")).is_empty(),
        "a symlink takes no ACL"
    );
    assert_allowed(NAMED, &proj, "cat sub/file && printf x >> file");
    assert_denied(DENIED, &proj, "ls sub");

    // A setfacl by the owner drops set-group-id when the owner is outside
    // the file's group; root, and a member through a supplementary group,
    // keep it.
    let setfacl = format!("setfacl -m u:{DENIED}:r");
    for (name, how) in [
        ("by-root", setfacl.clone()),
        (
            "by-outsider",
            format!("setpriv --reuid={NAMED} --regid={NAMED} --clear-groups {setfacl}"),
        ),
        (
            "by-member",
            format!("setpriv --reuid={NAMED} --regid={NAMED} --groups=4343 {setfacl}"),
        ),
    ] {
        let p = d.join(name);
        fs::write(&p, b"g").unwrap();
        sh(&format!(
            "chown {NAMED}:4343 '{0}' && chmod 2770 '{0}'",
            p.display()
        ));
        sh(&format!("cd '{}' && {how} {name}", d.display()));
    }
    assert_eq!(mode(&d.join("by-root")), 0o2770);
    assert_eq!(mode(&d.join("by-outsider")), 0o0770);
    assert_eq!(mode(&d.join("by-member")), 0o2770);

    // What the ACL xattrs answer, as on ext4.
    let plain = d.join("plain");
    fs::write(&plain, b"p").unwrap();
    // user::rw-, group::r--, other::r--: what the mode 0644 says.
    let minimal: [u8; 28] = [
        2, 0, 0, 0, 0x01, 0, 6, 0, 255, 255, 255, 255, 0x04, 0, 4, 0, 255, 255, 255, 255, 0x20, 0,
        4, 0, 255, 255, 255, 255,
    ];
    assert_eq!(getxattr(&plain, "system.posix_acl_access"), libc::ENODATA);
    assert_eq!(
        setxattr(&plain, "system.posix_acl_default", &minimal),
        libc::EACCES
    );
    assert_eq!(
        setxattr(&plain, "system.posix_acl_access", &minimal[..9]),
        libc::EINVAL
    );
    assert_eq!(setxattr(&plain, "system.other", b"x"), libc::EOPNOTSUPP);
    fs::set_permissions(&plain, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(setxattr(&plain, "system.posix_acl_access", &minimal), 0);
    assert_eq!(mode(&plain), 0o644, "a minimal ACL is the mode");
    assert!(xattrs(&plain).is_empty(), "and is not kept");

    // getfacl's dump restores what it dumped.
    let all = |root: &Path| {
        sh(&format!(
            "cd '{}' && getfacl -R -n -p proj secret shared by-root by-outsider by-member",
            root.display()
        ))
    };
    let dump = all(&d);
    fs::write(base.path().join("dump"), &dump).unwrap();
    sh(&format!(
        "cd '{}' && setfacl -R -b proj secret shared",
        d.display()
    ));
    assert!(xattrs(&d.join("secret")).is_empty());
    assert_allowed(DENIED, &d, "cat secret");
    sh(&format!(
        "cd '{}' && setfacl --restore='{}'",
        d.display(),
        base.path().join("dump").display()
    ));
    assert_eq!(all(&d), dump);

    // All of it survives a remount, enforcement included.
    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    assert_eq!(all(&m.dir), dump);
    assert_denied(DENIED, &m.dir, "cat secret");
    assert_allowed(NAMED, &m.dir, "cat shared");
    assert_denied(NAMED, &m.dir, "printf x >> shared");
    m.unmount();
}
