//! `fallocate(PUNCH_HOLE | KEEP_SIZE)` through the mount, as a guest's
//! discard sends it: the range reads zeros at once and after a remount,
//! the size stays, and once no version holds the punched chunks `gc`
//! frees them (counted in `cairn stats --json`, not timed).

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;

use common::{ok, random, Mount};

const SIZE: usize = 8 << 20;
const LO: usize = 1 << 20;
const HI: usize = 7 << 20;
/// The largest content-defined chunk: a chunk across an edge stays.
const CHUNK_MAX: usize = 256 << 10;

fn unique(repo: &std::path::Path) -> u64 {
    let st: serde_json::Value = serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap();
    st["unique_bytes"].as_u64().unwrap()
}

#[test]
fn punched_range_reads_zeros_and_is_freed_by_gc() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    // Keep only the newest version, so the punched chunks are held by
    // nothing once the next version is written.
    let toml = repo.join("cairn.toml");
    let text = fs::read_to_string(&toml).unwrap();
    let text = ["keep_minutes = 60", "keep_hourly = 24", "keep_daily = 7"]
        .iter()
        .fold(text, |t, line| {
            assert!(t.contains(line), "cairn.toml has no {line:?}");
            t.replace(line, &format!("{} = 0", line.split(" = ").next().unwrap()))
        });
    fs::write(&toml, text).unwrap();

    let m = Mount::start(repo.clone(), dir);
    let mut want = random(SIZE, 15);
    fs::write(m.path("disk.img"), &want).unwrap();
    ok(&repo, &["version"]);
    let whole = unique(&repo);
    assert!(whole >= SIZE as u64, "{whole} bytes stored for {SIZE}");

    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("disk.img"))
        .unwrap();
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: a valid open descriptor and plain integers.
    let r = unsafe { libc::fallocate(f.as_raw_fd(), mode, LO as i64, (HI - LO) as i64) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    want[LO..HI].fill(0);
    assert_eq!(f.metadata().unwrap().len(), SIZE as u64, "the size is kept");
    let mut back = vec![0u8; SIZE];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back == want, "the punched range does not read zeros");
    drop(f);

    let v = ok(&repo, &["version"]);
    assert!(v.contains("retention dropped 1 version(s)"), "{v}");
    let gc = ok(&repo, &["gc", "--threshold", "1", "--json"]);
    let gc: serde_json::Value = serde_json::from_str(gc.trim()).unwrap();
    assert!(gc["freed_bytes"].as_u64().unwrap() > 0, "{gc}");
    let after = unique(&repo);
    let punched_whole = (HI - LO - 2 * CHUNK_MAX) as u64;
    assert!(
        after + punched_whole <= whole,
        "gc did not free the punched chunks: {whole} -> {after}"
    );
    let (repo, dir) = m.unmount();

    ok(&repo, &["check"]);
    let m = Mount::start(repo.clone(), dir);
    assert!(fs::read(m.path("disk.img")).unwrap() == want);
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
