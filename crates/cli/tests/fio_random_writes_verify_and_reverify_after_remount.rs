//! fio's own checker on the mount: 4 KiB random writes with a crc32c in
//! every block (`verify=crc32c`), buffered and with O_DIRECT, into a file
//! the detector switches to fixed-size chunks when it sees them (O_DIRECT;
//! the writeback cache orders buffered ones); fio verifies them as it
//! goes and again, read-only, after a remount. `check` is clean.

mod common;

use std::path::Path;
use std::process::Command;

use common::{ok, Mount};

fn fio(dir: &Path, args: &[&str]) {
    let out = Command::new("fio")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("fio is needed for this test (apt-get install -y fio): {e}"));
    assert!(
        out.status.success(),
        "fio {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn job(name: &str, direct: &str, verify_only: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        format!("--name={name}"),
        format!("--filename={name}"),
        "--size=24m".into(),
        "--bs=4k".into(),
        "--rw=randwrite".into(),
        "--ioengine=psync".into(),
        format!("--direct={direct}"),
        "--refill_buffers=1".into(),
        "--verify=crc32c".into(),
        "--verify_fatal=1".into(),
        "--randrepeat=1".into(),
        "--randseed=42".into(),
    ]
    .into();
    if verify_only {
        a.push("--verify_only=1".into());
    } else {
        a.push("--do_verify=1".into());
        a.push("--fsync_on_close=1".into());
    }
    a
}

#[test]
fn fio_random_writes_verify_and_reverify_after_remount() {
    let base = tempfile::tempdir().unwrap();
    let m = Mount::new(base.path());
    for (name, direct) in [("buffered", "0"), ("direct", "1")] {
        let args = job(name, direct, false);
        fio(&m.dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let (repo, dir) = m.unmount();

    let m = Mount::start(repo, dir);
    // Written at random with O_DIRECT and past the detector's size:
    // switched to fixed-size chunks, recorded in the xattr. The buffered
    // job's pages go through the kernel's writeback cache, which hands
    // them over in file order at fsync: the daemon sees the file rewritten
    // front to back, and content-defined chunks are right for that.
    let x = common::xattrs(&m.path("direct"));
    assert_eq!(
        x.get(&b"user.cairn.chunking"[..]).map(Vec::as_slice),
        Some(&b"fixed:4K"[..]),
        "direct: not switched to fixed chunks"
    );
    for (name, direct) in [("buffered", "0"), ("direct", "1")] {
        let args = job(name, direct, true);
        fio(&m.dir, &args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
