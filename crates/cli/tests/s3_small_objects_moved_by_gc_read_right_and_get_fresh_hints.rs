//! A path-index entry's chunk locations are only hints: after `cairn gc`
//! copied the live chunks of small objects into new containers and
//! deleted the old ones, every GET still answers the object's exact bytes
//! (the hint misses, the chunk is found through the index), and the GET
//! that found a hint stale gives the entry fresh ones: the next cold GETs
//! read storage at most twice on average, never the chunk index.
//!
//! The objects are written through the mount, so that many share a
//! container and have entries without hints until their first GET gives
//! them some. Versions are off (`no_versions`), so the objects deleted
//! before gc are garbage and gc rewrites the containers holding the rest.

mod common;
#[path = "s3_clients/driver.rs"]
mod driver;
#[path = "s3_clients/serve.rs"]
mod serve;

use common::{no_versions, ok, plain_containers, random};
use driver::{storage_reads, Driver};

const OBJECTS: usize = 160;

#[test]
fn small_objects_moved_by_gc_read_right_and_get_fresh_hints() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    ok(&repo, &["init"]);
    no_versions(&repo);
    let s = serve::serve(&repo, &dir);
    let (key_id, secret) = (s.key_id.clone(), s.secret.clone());
    let objects: Vec<(String, Vec<u8>)> = (0..OBJECTS)
        .map(|i| {
            let key = format!("d{}/obj {i}", i % 5);
            (key, random(17 * 1024 + i * 61, 900 + i as u64))
        })
        .collect();
    for d in 0..5 {
        std::fs::create_dir_all(s.mount.path(&format!("bkt/d{d}"))).unwrap();
    }
    for (key, body) in &objects {
        std::fs::write(s.mount.path(&format!("bkt/{key}")), body).unwrap();
    }
    let (repo, dir) = s.mount.unmount();

    // The first GETs give the entries their hints; three in four objects
    // then go, so the containers holding the rest are mostly garbage.
    let s = serve::serve_again(&repo, &dir, key_id.clone(), secret.clone());
    let mut s3 = Driver::start(&s);
    for (key, body) in &objects {
        assert!(s3.get("bkt", key) == *body, "GET {key} differs");
    }
    let kept: Vec<&(String, Vec<u8>)> = objects.iter().step_by(4).collect();
    for (i, (key, _)) in objects.iter().enumerate() {
        if i % 4 != 0 {
            s3.delete("bkt", key);
        }
    }
    s3.stop();
    let (repo, dir) = s.mount.unmount();

    let before_gc = plain_containers(&repo);
    ok(&repo, &["gc", "--threshold", "1", "--max-garbage", "0"]);
    let after_gc = plain_containers(&repo);
    assert!(
        before_gc.iter().all(|c| !after_gc.contains(c)),
        "gc left a container in place: {before_gc:?} -> {after_gc:?}"
    );
    let live: Vec<u64> = after_gc.iter().map(|p| container_id(p)).collect();
    // Every kept object's entry has hints, all into deleted containers.
    for c in hinted_containers(&repo, &kept) {
        assert!(
            !live.contains(&c),
            "a hint into live container {c:x} before any GET"
        );
    }

    // The hints point at deleted containers: each GET finds its chunk
    // through the index instead, and answers the same bytes.
    let s = serve::serve_again(&repo, &dir, key_id.clone(), secret.clone());
    let mut s3 = Driver::start(&s);
    for (key, body) in &kept {
        assert!(s3.get("bkt", key) == *body, "GET {key} after gc differs");
    }
    s3.stop();
    let (repo, dir) = s.mount.unmount();
    // Those GETs found the hints stale and wrote where the chunks are now.
    for c in hinted_containers(&repo, &kept) {
        assert!(
            live.contains(&c),
            "a hint into deleted container {c:x} after the GETs"
        );
    }

    // Those GETs gave the entries fresh hints: cold again, two reads.
    let s = serve::serve_again(&repo, &dir, key_id, secret);
    let mut s3 = Driver::start(&s);
    let before = storage_reads(&repo);
    for (key, body) in &kept {
        assert!(s3.get("bkt", key) == *body, "GET {key} differs");
    }
    let after = storage_reads(&repo);
    let [meta, index, containers] = [0, 1, 2].map(|k| after[k] - before[k]);
    let n = kept.len() as f64;
    eprintln!("{n} cold GETs after gc read: meta {meta}, index {index}, containers {containers}");
    assert_eq!(index, 0, "a GET asked the chunk index");
    assert!((meta + containers) as f64 / n <= 2.0);
    s3.stop();
    let (repo, _) = s.mount.unmount();
    let check = ok(&repo, &["check"]);
    assert!(check.contains("clean"), "{check}");
    let problems = meta::RedbMeta::open(&repo.join("meta/fs.redb"), 0, 0)
        .unwrap()
        .verify()
        .unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

/// The id of a container blob (its file name, hex).
fn container_id(path: &std::path::Path) -> u64 {
    u64::from_str_radix(path.file_name().unwrap().to_str().unwrap(), 16).unwrap()
}

/// The containers the path-index entries of `objects` say their chunks
/// are in (a location starts with its container's id, little-endian),
/// read from the unmounted repository's metadata; every entry has hints.
fn hinted_containers(repo: &std::path::Path, objects: &[&(String, Vec<u8>)]) -> Vec<u64> {
    use meta::MetaStore;
    let m = meta::RedbMeta::open(&repo.join("meta/fs.redb"), 0, 0).unwrap();
    let mut out = Vec::new();
    for (key, _) in objects {
        let found = m.lookup_path(format!("bkt/{key}").as_bytes()).unwrap();
        let hints = found.hints.unwrap_or_else(|| panic!("no hints for {key}"));
        for c in hints.chunks {
            out.push(u64::from_le_bytes(c.location[..8].try_into().unwrap()));
        }
    }
    m.sync().unwrap();
    out
}
