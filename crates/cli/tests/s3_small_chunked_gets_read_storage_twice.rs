//! hashFS's goal for objects stored in chunks: a cold GET of a small one
//! reads storage at most twice on average — its path-index entry, then
//! its data chunk where the entry says it is — never the chunk index nor
//! the recipe. Objects of 17-28 KiB (past the 16 KiB kept inline) are PUT
//! through `cairn serve`, the daemon restarted (its caches empty), and
//! each GET byte-exact while the daemon's `storage_reads` counts what the
//! GETs read. The repository checks clean and every entry the index
//! trusts, hints included, describes its inode.

mod common;
#[path = "s3_clients/driver.rs"]
mod driver;
#[path = "s3_clients/serve.rs"]
mod serve;

use common::{ok, random};
use driver::{storage_reads, Driver};

const OBJECTS: usize = 120;

#[test]
fn a_cold_get_of_a_small_chunked_object_reads_storage_twice() {
    let base = tempfile::tempdir().unwrap();
    let repo = base.path().join("repo");
    let dir = base.path().join("mnt");
    ok(&repo, &["init"]);
    let s = serve::serve(&repo, &dir);
    let mut s3 = Driver::start(&s);
    s3.create_bucket("bkt");
    let objects: Vec<(String, Vec<u8>)> = (0..OBJECTS)
        .map(|i| {
            let key = format!("d{}/e{}/obj {i}", i % 4, i % 3);
            (key, random(17 * 1024 + i * 97, 500 + i as u64))
        })
        .collect();
    for (key, body) in &objects {
        s3.put("bkt", key, body);
    }
    s3.stop();
    let (key_id, secret) = (s.key_id.clone(), s.secret.clone());
    s.mount.unmount();

    // Cold: a new daemon, nothing of the file set in its caches.
    let s = serve::serve_again(&repo, &dir, key_id, secret);
    let mut s3 = Driver::start(&s);
    let before = storage_reads(&repo);
    for (key, body) in &objects {
        assert!(s3.get("bkt", key) == *body, "GET {key} differs");
    }
    let after = storage_reads(&repo);
    let [meta, index, containers] = [0, 1, 2].map(|k| after[k] - before[k]);
    eprintln!("{OBJECTS} cold GETs read: meta {meta}, index {index}, containers {containers}");
    assert_eq!(index, 0, "a hinted GET asked the chunk index");
    assert!(containers > 0, "cold GETs read no container");
    assert!(
        (meta + containers) as f64 / OBJECTS as f64 <= 2.0,
        "{meta} metadata and {containers} container reads for {OBJECTS} cold GETs"
    );
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
