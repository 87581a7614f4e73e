//! `cp -a`, `rsync -aHAX` and `tar --xattrs --acls` copy a real tree into
//! the mount, and every path keeps what the tool copies: type, mode
//! (set-id and sticky bits included), owner, mtime to the nanosecond,
//! size, device number, hard links, extended attributes (ACLs among them),
//! symlink target and content; before an unmount and after a remount.
//!
//! Needs FUSE, rsync and getfacl/setfacl (Debian packages fuse3, rsync,
//! acl; `.ci/run` installs them).

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

mod common;
use common::{sh, xattrs, Mount};

/// What a copy must keep of one path of a tree.
#[derive(Debug, PartialEq, Eq)]
struct Facts {
    /// The file-type bits of the mode.
    kind: u32,
    /// The permission, set-id and sticky bits.
    mode: u32,
    uid: u32,
    gid: u32,
    mtime: (i64, i64),
    /// Regular files' and symlinks' (directory sizes are the file
    /// system's own).
    size: Option<u64>,
    rdev: u64,
    nlink: u64,
    /// Every name of the same inode in the tree (hard links), itself
    /// included.
    names: Vec<PathBuf>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    target: Option<PathBuf>,
}

/// Every path under `root` (relative, `""` for the root itself) and its
/// facts; walked with a stack, not recursion.
fn survey(root: &Path) -> BTreeMap<PathBuf, Facts> {
    let mut stats = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let path = root.join(&rel);
        let meta = fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            for entry in fs::read_dir(&path).unwrap() {
                todo.push(rel.join(entry.unwrap().file_name()));
            }
        }
        stats.push((rel, meta));
    }
    let mut names: HashMap<u64, Vec<PathBuf>> = HashMap::new();
    for (rel, meta) in &stats {
        names.entry(meta.ino()).or_default().push(rel.clone());
    }
    stats
        .into_iter()
        .map(|(rel, m)| {
            let path = root.join(&rel);
            let is_link = m.file_type().is_symlink();
            let mut same = names[&m.ino()].clone();
            same.sort();
            let facts = Facts {
                kind: m.mode() & libc::S_IFMT,
                mode: m.mode() & 0o7777,
                uid: m.uid(),
                gid: m.gid(),
                mtime: (m.mtime(), m.mtime_nsec()),
                size: (m.is_file() || is_link).then_some(m.size()),
                rdev: m.rdev(),
                nlink: m.nlink(),
                names: same,
                xattrs: xattrs(&path),
                target: is_link.then(|| fs::read_link(&path).unwrap()),
            };
            (rel, facts)
        })
        .collect()
}

/// Asserts that `copy` holds what `source` does, path for path, listing
/// every difference.
fn assert_same_tree(tool: &str, source: &Path, copy: &Path) {
    let want = survey(source);
    let got = survey(copy);
    let mut wrong = Vec::new();
    for (rel, facts) in &want {
        match got.get(rel) {
            None => wrong.push(format!("{}: missing", rel.display())),
            Some(g) if g != facts => wrong.push(format!(
                "{}:\n  source {facts:?}\n  copy   {g:?}",
                rel.display()
            )),
            Some(_) if facts.kind == libc::S_IFREG => {
                if fs::read(source.join(rel)).unwrap() != fs::read(copy.join(rel)).unwrap() {
                    wrong.push(format!("{}: content differs", rel.display()));
                }
            }
            Some(_) => {}
        }
    }
    for rel in got.keys().filter(|rel| !want.contains_key(*rel)) {
        wrong.push(format!("{}: not in the source", rel.display()));
    }
    assert!(
        wrong.is_empty(),
        "{tool}: {} of {} paths differ:\n{}",
        wrong.len(),
        want.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
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
    assert_eq!(r, 0, "setxattr {name}: {}", std::io::Error::last_os_error());
}

/// A tree with what copy tools find hard to keep, next to a copy of the
/// first 60 packages of /usr/share/doc (a real tree, kept small for CI).
fn build_source(src: &Path) {
    fs::create_dir(src).unwrap();
    sh(&format!(
        "set -e; cd '{}'
        mkdir doc; ls /usr/share/doc | head -60 | sed 's#^#/usr/share/doc/#' | xargs cp -a -t doc
        mkdir odd links acl
        : > odd/empty
        head -c 3145728 /dev/urandom > odd/big
        head -c 20000 /dev/urandom > odd/over-inline
        head -c 16384 /dev/urandom > odd/inline-limit
        head -c 16385 /dev/urandom > odd/inline-limit-and-one
        echo none > odd/none; chmod 0000 odd/none
        echo suid > odd/suid; chmod 4755 odd/suid
        echo sgid > odd/sgid; chmod 2755 odd/sgid
        echo ro > odd/readonly; chmod 0444 odd/readonly
        chown 4242:4343 odd/suid odd/sgid odd/big
        mkdir odd/sticky; chmod 1777 odd/sticky; echo x > odd/sticky/inside
        mkdir odd/setgid-dir; chown :4343 odd/setgid-dir; chmod 2775 odd/setgid-dir
        echo y > odd/setgid-dir/inside; mkdir odd/setgid-dir/sub
        ln -s readonly odd/relative-link
        ln -s /usr/share/doc odd/absolute-link
        ln -s no/such/file odd/dangling-link
        chown -h 4242:4343 odd/relative-link
        mkfifo odd/fifo
        mknod odd/null c 1 3
        echo linked > links/a; ln links/a links/b; ln links/a odd/also-a
        echo acl > acl/file; setfacl -m u:4242:rw,g:4343:r acl/file
        mkdir acl/dir; setfacl -m u:4242:rwx -d -m u:4242:rwx,g::rx,o::- acl/dir
        echo inherited > acl/dir/file; mkdir acl/dir/sub
        echo default-only > acl/minimal; setfacl -m u::rw,g::r,o::- acl/minimal",
        src.display()
    ));
    set_xattr(&src.join("odd/readonly"), "user.color", b"blue");
    set_xattr(&src.join("links/a"), "user.empty", b"");
    set_xattr(&src.join("odd/setgid-dir"), "user.big", &[7u8; 3000]);
    set_xattr(&src.join("acl/dir"), "user.dir", b"d");
    // Times last, deepest first so a directory's is not moved by its
    // children; nanoseconds that are not zero, and ones before 1970. Every
    // directory gets a time in the past: rsync re-sets a directory's time
    // only when the seconds differ, so one made in the second rsync runs
    // keeps the time rsync's own writes gave it (plain ext4 does the same).
    sh(&format!(
        "set -e; cd '{}'
        touch -d @1500000000.25 doc
        find odd links acl -depth -exec touch -h -d @946684799.123456789 {{}} +
        touch -h -d @1234567890.987654321 odd/relative-link odd/big acl/dir
        touch -h -d @-86400.5 odd/none
        chmod 0750 .; touch -d @1000000000.000000001 .",
        src.display()
    ));
}

/// The three tools, each into its own directory of the mount.
fn copy_with_each_tool(src: &Path, m: &Mount) -> Vec<(&'static str, PathBuf)> {
    let (s, mnt) = (src.display(), m.dir.display());
    sh(&format!("cp -a '{s}' '{mnt}/cp'"));
    sh(&format!("rsync -aHAX '{s}/' '{mnt}/rsync/'"));
    sh(&format!(
        "set -e; mkdir '{mnt}/tar'
        tar --format=posix --xattrs --xattrs-include='*' --acls -cpf - -C '{s}' . \
          | tar --xattrs --xattrs-include='*' --acls --numeric-owner -xpf - -C '{mnt}/tar'"
    ));
    ["cp", "rsync", "tar"]
        .into_iter()
        .map(|tool| (tool, m.path(tool)))
        .collect()
}

#[test]
fn cp_rsync_and_tar_keep_every_attribute() {
    let base = tempfile::tempdir().unwrap();
    let src = base.path().join("src");
    build_source(&src);
    // The source itself is what the tools are held to: check it has what
    // it was made with.
    let source = survey(&src);
    assert!(source.len() > 100, "a real tree: {} paths", source.len());
    let acl_file = &source[Path::new("acl/file")];
    assert!(acl_file
        .xattrs
        .contains_key(&b"system.posix_acl_access"[..]));
    assert_eq!(source[Path::new("odd/big")].mtime, (1234567890, 987654321));
    assert_eq!(source[Path::new("links/b")].nlink, 3);

    let m = Mount::new(base.path());
    let copies = copy_with_each_tool(&src, &m);
    for (tool, copy) in &copies {
        assert_same_tree(tool, &src, copy);
    }
    // Plain permission bits where the source has no ACL: no `+` in ls -l.
    let listing = sh(&format!("ls -l '{}/cp/odd'", m.dir.display()));
    assert!(!listing.contains("+ "), "{listing}");

    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    for (tool, copy) in &copies {
        assert_same_tree(&format!("{tool}, after a remount"), &src, copy);
    }
    m.unmount();
}
