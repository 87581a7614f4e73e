//! Inode numbers are reserved in batches per client (one transaction per
//! batch, no counter written by every create) and never reused: not after
//! a delete, not by a client opened later.

mod common;

use meta::conformance::{mkfile, ROOT};
use meta::{InodeId, MetaStore};
use meta_etcd::INO_BATCH;

#[test]
fn numbers_come_in_batches_per_client_and_are_never_reused() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let (x, y) = (etcd.open(&fs), etcd.open(&fs));
    let a = mkfile(&x, ROOT, "a");
    let b = mkfile(&y, ROOT, "b");
    let c = mkfile(&x, ROOT, "c");
    assert_eq!(a, InodeId(2), "x's batch starts after the root");
    assert_eq!(b, InodeId(2 + INO_BATCH), "y reserved the next batch");
    assert_eq!(c, InodeId(3), "x hands out its own batch");
    x.unlink(ROOT, b"a", false, meta::Timestamp::default())
        .unwrap();
    assert_eq!(
        mkfile(&x, ROOT, "a"),
        InodeId(4),
        "a freed number is not reused"
    );
    drop(x);
    let z = etcd.open(&fs);
    assert_eq!(
        mkfile(&z, ROOT, "z"),
        InodeId(2 + 2 * INO_BATCH),
        "a new client skips every batch reserved before"
    );
    // A whole batch used up reserves the next one after every other.
    for i in 1..INO_BATCH {
        mkfile(&y, ROOT, &format!("y{i}"));
    }
    assert_eq!(mkfile(&y, ROOT, "next"), InodeId(2 + 3 * INO_BATCH));
}
