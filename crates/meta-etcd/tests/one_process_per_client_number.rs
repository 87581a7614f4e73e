//! One process per client number: a second store marking itself mounted
//! as a client another live process holds is refused, naming the holder
//! (two processes with one number would hand out the same container
//! ids). Once the holder closed (a clean unmount), or its registration
//! lapsed (it hung), the mark can be taken; the hung holder, back, finds
//! the mark gone and writes nothing more.

mod common;

use meta::conformance::{new, t, ROOT};
use meta::{CollectionBoard, FileKind, MetaStore};
use meta_etcd::EtcdError;
use testkit::wait::until;

#[test]
fn a_client_number_is_mounted_by_one_process_at_a_time() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let a = etcd.open(&fs);
    let b = etcd.open(&fs);
    a.mounted(1).unwrap();
    a.mounted(1).unwrap();
    let e = b.mounted(1).unwrap_err();
    assert!(
        matches!(
            common::etcd_error(&e),
            Some(EtcdError::MountedElsewhere { client: 1, .. })
        ),
        "{e}"
    );
    assert!(
        e.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "the refusal names the holder: {e}"
    );
    b.mounted(2).unwrap();
    assert_eq!(a.mounted_clients().unwrap(), vec![1, 2]);

    // A closes (a clean unmount): B may take number 1.
    a.close();
    b.mounted(1).unwrap();

    // B hangs: once its registration lapsed, C takes number 1, and B,
    // back, writes nothing more.
    let c = etcd.open(&fs);
    b.stop_renewing();
    until("B's registration lapsed and C took number 1", || {
        c.mounted(1).is_ok()
    });
    let e = b
        .create(ROOT, b"late", new(FileKind::File), t(1))
        .unwrap_err();
    assert!(
        matches!(common::etcd_error(&e), Some(EtcdError::Forgotten(_))),
        "{e}"
    );
    c.create(ROOT, b"from-c", new(FileKind::File), t(2))
        .unwrap();
}
