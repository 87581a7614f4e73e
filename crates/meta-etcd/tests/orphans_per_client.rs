//! Orphans belong to the client that kept them: two clients on one file
//! system; A keeps an orphan (an unlinked file it holds open); B starts
//! and purges: A's orphan survives. Once A is closed (its registration
//! revoked, and not renewed again), or stops renewing it (its lease
//! lapses), a purge drops it.

mod common;

use meta::conformance::{new, t, ROOT};
use meta::{CollectionBoard, FileKind, Forget, MetaStore};

#[test]
fn a_purge_spares_a_live_client_s_orphans() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let a = etcd.open(&fs);
    a.mounted(0).unwrap();
    let f = a.create(ROOT, b"held", new(FileKind::File), t(1)).unwrap();
    let gone = a.unlink(ROOT, b"held", true, t(2)).unwrap();
    assert_eq!(gone.attr.nlink, 0);

    let b = etcd.open(&fs);
    let mine = b.create(ROOT, b"mine", new(FileKind::File), t(3)).unwrap();
    b.unlink(ROOT, b"mine", true, t(4)).unwrap();
    assert_eq!(b.purge_orphans().unwrap(), 1, "only B's own orphan");
    assert_eq!(
        b.get(mine.id).unwrap_err().to_string(),
        "no such file or directory"
    );
    assert_eq!(
        b.get(f.id).unwrap().attr.nlink,
        0,
        "A's orphan survives B's purge"
    );
    // Another client's drop_orphan does not drop it either.
    b.drop_orphan(f.id).unwrap();
    assert!(a.get(f.id).is_ok());

    // A closes (as at a clean unmount, where the daemon's threads keep
    // the store alive): its registration goes at once, and its orphans
    // with the next purge.
    a.close();
    assert_eq!(b.purge_orphans().unwrap(), 1);
    assert!(matches!(b.get(f.id), Err(meta::MetaError::NotFound)));
    assert_eq!(b.counts().unwrap().files, 0);
    meta::conformance::consistent(&b);
    // Its renewer does not register it again: marked mounted, it can be
    // forgotten at once, and still a while later.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(b.forget(0).unwrap(), Forget::Forgotten);
    drop(a);
}

#[test]
fn a_client_that_stops_renewing_loses_its_orphans_after_its_ttl() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let a = etcd.open(&fs);
    let f = a.create(ROOT, b"held", new(FileKind::File), t(1)).unwrap();
    a.unlink(ROOT, b"held", true, t(2)).unwrap();
    let b = etcd.open(&fs);
    // Past A's TTL, A renewing: nothing of A's is purged.
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(b.purge_orphans().unwrap(), 0, "A renews its registration");
    a.stop_renewing();
    // The test TTL is 2 s; etcd may round a lease up a little.
    let start = std::time::Instant::now();
    while b.purge_orphans().unwrap() == 0 {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(20),
            "A's lease never lapsed"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(matches!(b.get(f.id), Err(meta::MetaError::NotFound)));
    meta::conformance::consistent(&b);
}
