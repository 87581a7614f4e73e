//! With `[cache] dir` set, a sequential reader's chunks stay out of the
//! persistent tier and a random reader's enter it; after an unmount and a mount (the DRAM cache empty) the same reads
//! are served by the tier: its hits rise and the store is not read. The
//! file reads back byte-exact and `check` is clean.

mod common;

use common::tier::{entries, figures, mounted, offsets, read_at, READS};
use common::{ok, Mount};

#[test]
fn the_cache_tier_serves_random_reads_after_a_restart() {
    let base = tempfile::tempdir().unwrap();
    let (m, tier, data) = mounted(base.path());
    let (repo, dir) = m.unmount();
    // A fresh mount: nothing of the file in DRAM. A sequential reader
    // fills DRAM and leaves the tier alone.
    let m = Mount::start(repo, dir);
    assert!(std::fs::read(m.path("img")).unwrap() == data);
    let (_, t) = figures(&m.repo);
    assert_eq!(
        t["admitted"].as_u64().unwrap(),
        0,
        "sequential reads admit nothing: {t}"
    );
    let reads = offsets();
    read_at(&m.path("img"), &data, &reads);
    let (_, t) = figures(&m.repo);
    assert!(
        t["admitted"].as_u64().unwrap() > 0,
        "random reads admit: {t}"
    );
    let (repo, dir) = m.unmount();
    let kept = entries(&tier).len();
    assert!(kept > 0, "the tier's files outlive the mount");

    let m = Mount::start(repo, dir);
    // The late reads of the pass: the detector had called the file random.
    let late = &reads[READS / 2..];
    read_at(&m.path("img"), &data, &late[..1]);
    let (store_before, t) = figures(&m.repo);
    assert_eq!(
        t["entries"].as_u64().unwrap(),
        kept as u64,
        "reopen finds every entry: {t}"
    );
    assert_eq!(t["admitted"].as_u64().unwrap(), 0, "{t}");
    let hits_before = t["hits"].as_u64().unwrap();
    assert!(hits_before > 0, "the first read is a tier hit: {t}");
    read_at(&m.path("img"), &data, &late[1..]);
    let (store_after, t) = figures(&m.repo);
    assert_eq!(
        store_after, store_before,
        "no chunk read from the store: {t}"
    );
    assert!(t["hits"].as_u64().unwrap() > hits_before, "{t}");
    assert_eq!(t["corrupt"].as_u64().unwrap(), 0, "{t}");
    read_at(&m.path("img"), &data, &reads);
    assert!(std::fs::read(m.path("img")).unwrap() == data);
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
