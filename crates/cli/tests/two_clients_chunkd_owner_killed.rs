//! The chunkd index owners killed (`kill -9`) while two clients write:
//! with one down, A's and B's writes still succeed (chunks whose owner is
//! down are stored again, their adds wait); with both down, B reads A's
//! new file (found by listing the bucket instead). Once the owners are
//! back, a duplicate costs (almost) nothing again, found through them. Nothing
//! acknowledged is lost: every file reads back byte-exact on both
//! clients, and `cairn check` is clean on both.

mod common;
mod two_clients_common;

use std::fs;

use common::{ok, random};

/// What the store logs (at debug) each time it lists the branches for
/// other clients' containers.
const LISTING: &str = "listing the branches for other clients' containers";

/// Container bytes a small file's recipe may add (a container of its own).
const RECIPE_SLACK: u64 = 32 << 10;

#[test]
fn a_dead_owner_costs_dedup_never_data() {
    // The mounts log the store's listings to their repository's log.
    std::env::set_var("RUST_LOG", "info,cas=debug,s3s=off");
    let c = two_clients_common::cluster_with(two_clients_common::shared_index_toml);
    let mut index = c.chunkd_index();
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");

    let files: Vec<(&str, Vec<u8>)> = ["x", "y", "z"]
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, random(2 << 20, 41 + 2 * i as u64)))
        .collect();
    let mut written: Vec<(String, &[u8])> = Vec::new();

    index.owners[1].kill();
    // A's adds to the dead owner fail and wait; its write does not, and
    // neither does B's duplicate (what it cannot find, it stores again).
    fs::write(ma.path("x-by-a"), &files[0].1).unwrap();
    fs::write(mb.path("x-by-b"), &files[0].1).unwrap();
    written.push(("x-by-a".into(), &files[0].1));
    written.push(("x-by-b".into(), &files[0].1));

    // Both owners down: B finds A's new file on the bucket.
    index.owners[0].kill();
    fs::write(ma.path("y-by-a"), &files[1].1).unwrap();
    written.push(("y-by-a".into(), &files[1].1));
    let listings = c.log_lines(&c.b, LISTING);
    two_clients_common::reads_back(&mb.path("y-by-a"), &files[1].1);
    assert!(
        c.log_lines(&c.b, LISTING) > listings,
        "B's read fell back to listing the bucket"
    );

    // The owners back: A's next add goes through and its waiting ones
    // follow; B's duplicate of A's new file costs (almost) nothing.
    index.owners[0].restart();
    index.owners[1].restart();
    fs::write(ma.path("z-by-a"), &files[2].1).unwrap();
    let before = c.container_bytes();
    let listings = c.log_lines(&c.b, LISTING);
    fs::write(mb.path("z-by-b"), &files[2].1).unwrap();
    let added = c.container_bytes() - before;
    assert_eq!(
        c.log_lines(&c.b, LISTING),
        listings,
        "B found A's chunks through the index, not the bucket"
    );
    assert!(
        added < files[2].1.len() as u64 / 100 + RECIPE_SLACK,
        "B stored {added} new container bytes for a {}-byte duplicate once the owner was back",
        files[2].1.len()
    );
    written.push(("z-by-a".into(), &files[2].1));
    written.push(("z-by-b".into(), &files[2].1));

    for m in [&ma, &mb] {
        for (name, data) in &written {
            two_clients_common::reads_back(&m.path(name), data);
        }
    }
    for repo in [&c.a, &c.b] {
        ok(repo, &["check"]);
    }
    mb.unmount();
    ma.unmount();
}
