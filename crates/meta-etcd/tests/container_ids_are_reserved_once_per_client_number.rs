//! The container-id ledger (`CollectionBoard::ids_reserved`): the highest
//! id mark any repository of a client number reserved is kept in etcd,
//! and a repository whose mark is behind it (a copy used since it was
//! copied) is refused the ids it would hand out again; other client
//! numbers are not affected.

mod common;

use meta::CollectionBoard;
use meta_etcd::EtcdError;

#[test]
fn a_repository_behind_the_recorded_mark_is_refused() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let original = etcd.open(&fs);
    let copy = etcd.open(&fs);

    // Both start at mark 256 (the copy was made there).
    original.ids_reserved(1, 256, 256).unwrap();
    copy.ids_reserved(1, 256, 256).unwrap();
    // The original reserves the next batch; asking again (its first
    // outcome unknown) is answered yes.
    original.ids_reserved(1, 256, 512).unwrap();
    original.ids_reserved(1, 256, 512).unwrap();

    // The copy, at 256, would hand out 256..512 again.
    for (from, below) in [(256, 256), (256, 512), (300, 768)] {
        let e = copy.ids_reserved(1, from, below).unwrap_err();
        assert!(
            matches!(
                common::etcd_error(&e),
                Some(EtcdError::IdsBehind {
                    client: 1,
                    recorded: 512,
                    ..
                })
            ),
            "{e}"
        );
    }
    // From the recorded mark on, ids are new to every repository.
    original.ids_reserved(1, 512, 768).unwrap();
    // Another client number has a mark of its own.
    copy.ids_reserved(2, 0, 256).unwrap();
}
