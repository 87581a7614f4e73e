//! The root directory is made once, in an empty file system: clients
//! opening one at the same time make one root between them, and a file
//! system that lost its root while holding other inodes is refused as
//! damaged (`RootMissing`), never given a fresh, empty root; one that lost
//! every inode gets a root again, and no inode number twice.

mod common;

use meta::conformance::{mkfile, ROOT};
use meta::{MetaError, MetaStore};
use meta_etcd::EtcdMeta;

#[test]
fn one_root_per_file_system_and_none_over_a_lost_one() {
    let etcd = common::Etcd::start();
    let fs = common::fsid();
    let opened: Vec<EtcdMeta> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4).map(|_| s.spawn(|| etcd.open(&fs))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let root = opened[0].get(ROOT).unwrap();
    for m in &opened {
        assert_eq!(m.get(ROOT).unwrap(), root, "every client sees the one root");
    }
    let f = mkfile(&opened[1], ROOT, "f");
    assert_eq!(opened[2].lookup(ROOT, b"f").unwrap().id, f);
    assert_eq!(opened[3].counts().unwrap().dirs, 1);
    drop(opened);

    // The root's record deleted behind cairn's back.
    let mut key = format!("/{fs}/i/").into_bytes();
    key.extend_from_slice(&ROOT.0.to_be_bytes());
    let endpoints = etcd.endpoints();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut c = etcd_client::Client::connect(endpoints, None).await.unwrap();
        assert_eq!(c.delete(key, None).await.unwrap().deleted(), 1);
    });
    let e = EtcdMeta::open(&etcd.endpoints(), &fs, 0, 0, common::quick()).unwrap_err();
    assert!(matches!(e, MetaError::RootMissing(1)), "{e}");
    assert!(e.is_damage());

    // With every inode gone, a root is made again, and numbers handed out
    // before are not handed out again.
    let mut key = format!("/{fs}/i/").into_bytes();
    key.extend_from_slice(&f.0.to_be_bytes());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let mut c = etcd_client::Client::connect(etcd.endpoints(), None)
            .await
            .unwrap();
        assert_eq!(c.delete(key, None).await.unwrap().deleted(), 1);
    });
    let m = etcd.open(&fs);
    assert!(mkfile(&m, ROOT, "g").0 > f.0, "no number reused");
}
