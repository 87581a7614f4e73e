//! A file client B writes that client A already stored costs (almost) no
//! new container bytes in the shared bucket: B's writer finds A's chunks
//! through the catch-up before it stores anything. Both copies read back
//! byte-exact from both clients, and `cairn check` is clean on both.

mod common;
mod two_clients_common;

use std::fs;

use common::{ok, random};

#[test]
fn a_file_the_other_client_stored_stores_almost_nothing() {
    let c = two_clients_common::cluster();
    let ma = c.mount(&c.a, "mnt-a");
    let mb = c.mount(&c.b, "mnt-b");

    let data = random(4 << 20, 7);
    fs::write(ma.path("by-a"), &data).unwrap();
    let before = c.container_bytes();
    assert!(before >= data.len() as u64, "A's data is in the bucket");

    fs::write(mb.path("by-b"), &data).unwrap();
    let added = c.container_bytes() - before;
    assert!(
        added * 20 < data.len() as u64,
        "B stored {added} new container bytes for a {}-byte duplicate",
        data.len()
    );

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
