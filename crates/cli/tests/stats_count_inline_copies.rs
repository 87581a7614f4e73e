//! `stats` reports dedup and compression as separate ratios and counts
//! inline small files: a second copy of a tree of small files doubles what
//! they take (they live in their inodes, one copy each), while a second
//! copy of a large file costs nothing. Mounted and unmounted, the answer
//! is the same.

mod common;

use std::fs;

use common::{ok, random, Mount};

fn stats(repo: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&ok(repo, &["stats", "--json"])).unwrap()
}

#[test]
fn dedup_ratio_counts_inline_copies_and_is_the_same_unmounted() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    fs::create_dir_all(&dir).unwrap();
    ok(&repo, &["init"]);
    // No versions: unmounting must change nothing the two answers count.
    common::no_versions(&repo);

    let m = Mount::start(repo.clone(), dir);
    let mut small_bytes = 0u64;
    for copy in ["a", "b"] {
        fs::create_dir(m.path(copy)).unwrap();
        for i in 0..120u64 {
            let data = random(1000 + (i as usize * 97) % 9000, i + 1);
            fs::write(m.path(&format!("{copy}/f{i}")), &data).unwrap();
            small_bytes += data.len() as u64;
        }
    }
    let big = random(2 << 20, 99);
    fs::write(m.path("big"), &big).unwrap();
    fs::write(m.path("big-copy"), &big).unwrap();
    let big = big.len() as u64;

    let mounted = stats(&repo);
    assert_eq!(mounted["fs_inline_files"], 240, "{mounted}");
    assert_eq!(mounted["fs_inline_bytes"], small_bytes, "{mounted}");
    assert_eq!(mounted["logical_bytes"], small_bytes + 2 * big, "{mounted}");
    // The two small trees are both stored; the big file once.
    assert_eq!(mounted["referenced_bytes"], small_bytes + big, "{mounted}");
    let want = (small_bytes + 2 * big) as f64 / (small_bytes + big) as f64;
    let dedup = mounted["dedup_ratio"].as_f64().unwrap();
    assert!((dedup - want).abs() < 1e-9, "dedup {dedup}, want {want}");
    // Random data does not compress: about 1x, never a dedup figure.
    let compression = mounted["compression_ratio"].as_f64().unwrap();
    assert!((0.9..1.1).contains(&compression), "{mounted}");
    assert_eq!(mounted["held"]["live_bytes"], big, "{mounted}");
    let human = ok(&repo, &["stats"]);
    assert!(
        human.contains("dedup ratio") && human.contains("compression"),
        "{human}"
    );
    assert!(human.contains("inline          240 files"), "{human}");

    let (repo, _) = m.unmount();
    // `read_cache` is what the mount's caches did: there only while mounted.
    let (mut mounted, mut unmounted) = (mounted, stats(&repo));
    for s in [&mut mounted, &mut unmounted] {
        s.as_object_mut().unwrap().remove("read_cache");
    }
    assert_eq!(unmounted, mounted, "unmounted stats differ");
    ok(&repo, &["check"]);
}
