//! A client killed while mounted leaves its mark on the collection board,
//! and collections wait for it; `forget` takes the mark away, but only
//! once the client's registration has lapsed. A client forgotten while it
//! was only hung finds out before it writes again, and writes nothing
//! more; one whose registration lapsed but whom nobody forgot writes on.

mod common;

use std::time::Duration;

use meta::conformance::{new, t, ROOT};
use meta::{CollectionBoard, FileKind, Forget, MetaStore};
use meta_etcd::EtcdError;
use testkit::wait::until;

#[test]
fn a_dead_client_is_forgotten_and_writes_nothing_after() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let a = etcd.open(&fs);
    let b = etcd.open(&fs);
    let c = etcd.open(&fs);
    a.mounted(0).unwrap();
    b.mounted(1).unwrap();
    c.mounted(2).unwrap();
    b.create(ROOT, b"before", new(FileKind::File), t(1))
        .unwrap();

    assert_eq!(a.forget(1).unwrap(), Forget::Alive, "B is registered");
    assert_eq!(a.forget(7).unwrap(), Forget::NotMounted);
    assert_eq!(a.mounted_clients().unwrap(), vec![0, 1, 2]);

    // B hangs: its registration lapses, and then it can be forgotten.
    b.stop_renewing();
    until("B forgotten once its registration lapsed", || {
        a.forget(1).unwrap() == Forget::Forgotten
    });
    assert_eq!(a.mounted_clients().unwrap(), vec![0, 2]);

    // B comes back: it finds its mark gone before its first write, and
    // from then on writes nothing.
    for name in [&b"after"[..], b"again"] {
        let e = b.create(ROOT, name, new(FileKind::File), t(2)).unwrap_err();
        assert!(
            matches!(common::etcd_error(&e), Some(EtcdError::Forgotten(1))),
            "B wrote after it was forgotten: {e}"
        );
    }
    // Nor may it write a root (a version or snapshot) on the branches.
    let e = b.may_write().unwrap_err();
    assert!(
        matches!(common::etcd_error(&e), Some(EtcdError::Forgotten(1))),
        "{e}"
    );
    assert!(matches!(
        a.lookup(ROOT, b"after"),
        Err(meta::MetaError::NotFound)
    ));

    // C's registration lapses too, but nobody forgets it: it registers
    // again, finds its mark, and writes on.
    c.stop_renewing();
    std::thread::sleep(Duration::from_secs(4));
    c.may_write().unwrap();
    c.create(ROOT, b"from-c", new(FileKind::File), t(3))
        .unwrap();
    assert!(a.lookup(ROOT, b"from-c").is_ok());
    assert_eq!(a.mounted_clients().unwrap(), vec![0, 2]);
    a.create(ROOT, b"from-a", new(FileKind::File), t(4))
        .unwrap();
}
