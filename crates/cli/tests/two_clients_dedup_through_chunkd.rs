//! With `[shared_index] kind = "chunkd"`, client B asks the chunkd index
//! owners for the chunks of a file client A already stored: B adds almost
//! no container bytes to the bucket (under 1% of the file, plus its
//! recipe's container) and never lists the bucket's containers to find
//! A's chunks. Both copies read back byte-exact from both clients and
//! `cairn check` is clean on both. `init --join` copied the index's token
//! file (named by a path relative to the repository) to B.

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
fn a_duplicate_is_found_through_the_index_without_listing() {
    // The mounts log the store's listings to their repository's log.
    std::env::set_var("RUST_LOG", "info,cas=debug,s3s=off");
    let c = two_clients_common::cluster_with(two_clients_common::shared_index_toml);
    assert_eq!(
        fs::read(c.b.join("index.token")).unwrap(),
        fs::read(c.a.join("index.token")).unwrap(),
        "init --join copies the index token the config names"
    );
    let _index = c.chunkd_index();
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");

    let data = random(4 << 20, 17);
    fs::write(ma.path("by-a"), &data).unwrap();
    let before = c.container_bytes();
    assert!(before >= data.len() as u64, "A's data is in the bucket");
    let listings = c.log_lines(&c.b, LISTING);

    fs::write(mb.path("by-b"), &data).unwrap();
    let added = c.container_bytes() - before;
    assert!(
        added < data.len() as u64 / 100 + RECIPE_SLACK,
        "B stored {added} new container bytes for a {}-byte duplicate",
        data.len()
    );
    assert_eq!(
        c.log_lines(&c.b, LISTING),
        listings,
        "B listed the bucket to find A's chunks"
    );
    // B's read of A's file finds every chunk without a listing too.
    two_clients_common::reads_back(&mb.path("by-a"), &data);
    assert_eq!(c.log_lines(&c.b, LISTING), listings);

    for m in [&ma, &mb] {
        for name in ["by-a", "by-b"] {
            two_clients_common::reads_back(&m.path(name), &data);
        }
    }
    for repo in [&c.a, &c.b] {
        ok(repo, &["check"]);
    }
    mb.unmount();
    ma.unmount();
}
