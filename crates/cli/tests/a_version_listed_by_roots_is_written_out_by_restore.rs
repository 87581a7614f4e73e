//! A version `cairn roots` lists is a whole tree: `cairn get` refuses it
//! and names what to run instead, and `cairn restore version/N / --out DIR`
//! writes it into a host directory (mounted, through the daemon, and
//! unmounted), bytes, modes, times, symlinks and hard links as they were.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use common::{cairn, ok, Mount};

/// A tree of regular files, directories and symlinks under `dir`: relative
/// path -> (mode, bytes or link target).
fn tree(dir: &Path) -> Vec<(String, u32, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            let m = fs::symlink_metadata(&p).unwrap();
            let bytes = if m.is_dir() {
                stack.push(p.clone());
                Vec::new()
            } else if m.is_symlink() {
                fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                fs::read(&p).unwrap()
            };
            out.push((rel, m.mode(), bytes));
        }
    }
    out.sort();
    out
}

#[test]
fn get_refuses_a_version_and_restore_out_writes_it_to_a_host_directory() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    let big: Vec<u8> = (0..2_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::create_dir_all(m.path("docs/deep")).unwrap();
    fs::write(m.path("docs/a.txt"), b"version one").unwrap();
    fs::write(m.path("docs/deep/big.bin"), &big).unwrap();
    fs::set_permissions(m.path("docs/a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::hard_link(m.path("docs/deep/big.bin"), m.path("docs/big-link")).unwrap();
    std::os::unix::fs::symlink("a.txt", m.path("docs/sym")).unwrap();
    let before = tree(&m.dir);
    let a_mtime = fs::metadata(m.path("docs/a.txt")).unwrap().mtime();
    let written = ok(&m.repo, &["version"]);
    assert!(written.starts_with("version/1:"), "{written}");
    let roots = ok(&m.repo, &["roots"]);
    assert!(roots.contains("version/1"), "{roots}");

    // Later changes are not in the version.
    fs::write(m.path("docs/a.txt"), b"changed since").unwrap();
    fs::remove_file(m.path("docs/deep/big.bin")).unwrap();

    let got = cairn(&m.repo, &["get", "version/1"]);
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(!got.status.success() && got.stdout.is_empty(), "{err}");
    assert!(
        err.contains("version/1 is a version of the whole file system")
            && err.contains("cairn restore version/1 / --out DIR")
            && !err.contains("recipe"),
        "{err}"
    );

    let out = base.path().join("v1");
    fs::create_dir(&out).unwrap();
    let report: serde_json::Value = serde_json::from_str(&ok(
        &m.repo,
        &[
            "restore",
            "version/1",
            "/",
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
    ))
    .unwrap();
    assert_eq!(tree(&out), before, "the version as it was written");
    // A hard link is counted once; the symlink by its target's length.
    assert_eq!(report["files"], 3, "{report}");
    assert_eq!(report["bytes"], big.len() as u64 + 11 + 5, "{report}");
    let a = fs::metadata(out.join("docs/a.txt")).unwrap();
    assert_eq!((a.mode() & 0o7777, a.mtime()), (0o640, a_mtime));
    assert_eq!(
        fs::metadata(out.join("docs/deep/big.bin")).unwrap().ino(),
        fs::metadata(out.join("docs/big-link")).unwrap().ino(),
        "hard links stay links"
    );

    // Written out again, a name in the way is refused, naming --overwrite.
    let again = cairn(
        &m.repo,
        &[
            "restore",
            "version/1",
            "/docs",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        !again.status.success() && err.contains("--overwrite"),
        "{err}"
    );

    // Unmounted, the same command runs in this process.
    let (repo, _) = m.unmount();
    let one = base.path().join("one");
    fs::create_dir(&one).unwrap();
    ok(
        &repo,
        &[
            "restore",
            "version/1",
            "/docs/deep/big.bin",
            "--out",
            one.to_str().unwrap(),
        ],
    );
    assert_eq!(fs::read(one.join("big.bin")).unwrap(), big);
    let gone = cairn(
        &repo,
        &["restore", "version/99", "/", "--out", one.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&gone.stderr);
    assert!(
        err.contains("no version version/99") && err.contains("cairn roots"),
        "{err}"
    );
}
