//! Orphans per client over two data clusters, across a shard move: A
//! keeps an orphan in a directory whose shard then moves to the other
//! cluster; B's purge spares it (A is registered in the control cluster);
//! once A is closed, B's purge drops it.

mod common;

use meta::conformance::{consistent, new, t, ROOT};
use meta::{FileKind, MetaError, MetaStore};

#[test]
fn a_moved_orphan_of_a_live_client_survives_a_purge() {
    let ring = common::Ring::start(2);
    let fs = ring.init(16);
    let a = ring.open(&fs);
    let d = a.create(ROOT, b"d", new(FileKind::Dir), t(1)).unwrap();
    let f = a.create(d.id, b"held", new(FileKind::File), t(2)).unwrap();
    a.unlink(d.id, b"held", true, t(3)).unwrap();

    let b = ring.open(&fs);
    let home = common::cluster_of(&b, &ring.control, d.id);
    b.move_shard(meta_etcd::shard_of(d.id), 1 - home).unwrap();
    assert_eq!(b.purge_orphans().unwrap(), 0, "A is alive");
    assert_eq!(a.get(f.id).unwrap().attr.nlink, 0);
    drop(a);
    assert_eq!(b.purge_orphans().unwrap(), 1);
    assert!(matches!(b.get(f.id), Err(MetaError::NotFound)));
    assert_eq!(b.counts().unwrap().files, 0);
    consistent(&b);
}
