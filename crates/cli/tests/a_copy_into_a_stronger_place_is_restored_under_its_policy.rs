//! Copies that share their source's chunks — a `copy_file_range` clone, a
//! splice onto the end of a file, `cairn clone`, a snapshot restore — made
//! into a directory whose rule asks for `mirror:2` while the source is
//! `single`: each copy's chunks are re-stored under `mirror:2` (every
//! container `policy show` lists for it is mirrored), and each copy reads
//! back byte-exact after one of the two branches is deleted.

mod common;

use std::fs;
use std::os::fd::AsRawFd;
use std::path::Path;

use common::{ok, random, Mount};
use serde_json::Value;

const CONFIG: &str = r#"
[[branch]]
name = "a"
kind = "local"
path = "br/a"
labels = ["all"]

[[branch]]
name = "b"
kind = "local"
path = "br/b"
labels = ["all"]

[[rule]]
name = "safe"
path = "safe/**"
policy = "mirror:2"
branches = ["all"]
"#;

fn policy_show(repo: &Path, path: &str) -> Value {
    serde_json::from_str(&ok(repo, &["policy", "show", path, "--json"])).unwrap()
}

/// The policies of the containers `policy show` lists for `path`.
fn container_policies(repo: &Path, path: &str) -> Vec<String> {
    let v = policy_show(repo, path);
    let containers = v["containers"].as_array().expect("containers");
    assert!(!containers.is_empty(), "{path} has no container: {v}");
    containers
        .iter()
        .map(|c| c["policy"].as_str().unwrap().to_string())
        .collect()
}

/// Waits (bounded: re-storing runs in the background) until every
/// container of `path` is `mirror:2`; the last answer when it never is.
fn restored(repo: &Path, path: &str) -> Result<(), Vec<String>> {
    let mut last = Vec::new();
    for _ in 0..600 {
        last = container_policies(repo, path);
        if last.iter().all(|p| p == "mirror:2") {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Err(last)
}

/// `copy_file_range(2)` of all of `src` onto `dst` at `dst_off`, as `cp`
/// does: through the mount, a whole-file clone or a splice.
fn copy_range(src: &Path, dst: &Path, dst_off: u64, append: bool) {
    let from = fs::File::open(src).unwrap();
    let to = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(!append)
        .open(dst)
        .unwrap();
    let len = from.metadata().unwrap().len() as usize;
    let mut off_in: i64 = 0;
    let mut off_out = dst_off as i64;
    let mut left = len;
    while left > 0 {
        // SAFETY: two open descriptors and offsets owned by this frame.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off_in,
                to.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        assert!(
            n > 0,
            "copy_file_range: {}",
            std::io::Error::last_os_error()
        );
        left -= n as usize;
    }
    to.sync_all().unwrap();
}

#[test]
fn a_copy_into_a_stronger_place_is_restored_under_its_policy() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    ok(&repo, &["init"]);
    let toml = repo.join("cairn.toml");
    let mut text = fs::read_to_string(&toml).unwrap();
    text.push_str(CONFIG);
    fs::write(&toml, text).unwrap();
    let mnt = base.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let m = Mount::start(repo.clone(), mnt);

    let src = random(3 << 20, 1);
    let head = random(2 << 20, 2);
    fs::create_dir(m.path("plain")).unwrap();
    fs::create_dir(m.path("safe")).unwrap();
    fs::write(m.path("plain/f"), &src).unwrap();
    fs::File::open(m.path("plain/f"))
        .unwrap()
        .sync_all()
        .unwrap();
    assert!(container_policies(&repo, "/plain/f")
        .iter()
        .all(|p| p == "single"));
    fs::write(m.path("safe/joined"), &head).unwrap();
    fs::File::open(m.path("safe/joined"))
        .unwrap()
        .sync_all()
        .unwrap();
    ok(&repo, &["snapshot", "create", "before"]);

    copy_range(&m.path("plain/f"), &m.path("safe/cloned"), 0, false);
    copy_range(
        &m.path("plain/f"),
        &m.path("safe/joined"),
        head.len() as u64,
        true,
    );
    ok(&repo, &["clone", "/plain/f", "/safe/by-clone"]);
    ok(
        &repo,
        &["restore", "before", "/plain/f", "--to", "/safe/restored"],
    );

    // The copies share the source's chunks: nothing was read and written
    // through, so only re-storing can have made them mirror:2.
    for copy in [
        "/safe/cloned",
        "/safe/joined",
        "/safe/by-clone",
        "/safe/restored",
    ] {
        if let Err(last) = restored(&repo, copy) {
            panic!("{copy} was not re-stored under mirror:2: {last:?}");
        }
    }
    let joined = [head.as_slice(), src.as_slice()].concat();
    let (repo, _) = m.unmount();

    // One branch gone: each copy is whole on the other.
    fs::remove_dir_all(repo.join("br/a")).unwrap();
    let mnt = base.path().join("mnt");
    let m = Mount::start(repo.clone(), mnt);
    for copy in ["safe/cloned", "safe/by-clone", "safe/restored"] {
        let got = fs::read(m.path(copy)).unwrap_or_else(|e| panic!("{copy}: {e}"));
        assert!(got == src, "{copy} reads back different bytes");
    }
    let got = fs::read(m.path("safe/joined")).unwrap();
    assert!(got == joined, "safe/joined reads back different bytes");
    m.unmount();
}
