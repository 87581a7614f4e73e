//! Every file of the persistent cache tier damaged between two mounts:
//! reads through the mount return the right bytes (from the store), each
//! damaged entry read is counted as corrupt and its file deleted, none is
//! served. `check` is clean.

mod common;

use std::fs;

use common::tier::{entries, figures, mounted, offsets, read_at, READS};
use common::{ok, Mount};

#[test]
fn a_corrupt_cache_tier_entry_is_dropped_and_read_from_the_store() {
    let base = tempfile::tempdir().unwrap();
    let (m, tier, data) = mounted(base.path());
    let (repo, dir) = m.unmount();
    let m = Mount::start(repo, dir);
    let reads = offsets();
    read_at(&m.path("img"), &data, &reads);
    let (repo, dir) = m.unmount();
    let damaged = entries(&tier);
    assert!(!damaged.is_empty(), "random reads admitted chunks");
    let mut bad = Vec::new();
    for path in &damaged {
        let mut bytes = fs::read(path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        fs::write(path, &bytes).unwrap();
        bad.push(bytes);
    }

    let m = Mount::start(repo, dir);
    let late = &reads[READS / 2..];
    let (store_before, _) = figures(&m.repo);
    read_at(&m.path("img"), &data, late);
    let (store_after, t) = figures(&m.repo);
    let corrupt = t["corrupt"].as_u64().unwrap();
    assert!(corrupt > 0, "damaged entries are detected: {t}");
    assert_eq!(
        t["hits"].as_u64().unwrap(),
        0,
        "nothing damaged is served: {t}"
    );
    assert!(
        store_after >= store_before + corrupt,
        "the store served them: {t}"
    );
    // Each one detected was deleted (a random read may admit its chunk
    // again, from the store: then the file holds the right bytes).
    let left = damaged
        .iter()
        .zip(&bad)
        .filter(|(p, b)| fs::read(p).is_ok_and(|now| now == **b))
        .count();
    assert!(
        left <= damaged.len() - corrupt as usize,
        "{corrupt} corrupt entries, {left} of {} damaged files left",
        damaged.len()
    );
    assert!(fs::read(m.path("img")).unwrap() == data);
    let (repo, _) = m.unmount();
    ok(&repo, &["check"]);
}
