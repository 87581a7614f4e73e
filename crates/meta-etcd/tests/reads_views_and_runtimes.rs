//! Reads: a view is one instant (later changes do not show in it), every
//! read request is counted, and the store works when called from inside
//! another tokio runtime (as the S3 gateway calls it), never panicking,
//! also when it is opened and dropped there.

mod common;

use meta::conformance::{mkdir, mkfile, new, t, ROOT};
use meta::{FileKind, MetaStore};

#[test]
fn views_are_instants_reads_are_counted_and_any_thread_may_call() {
    let etcd = common::Etcd::start();
    let m = etcd.open(&common::fsid());
    let d = mkdir(&m, ROOT, "d");
    let f = mkfile(&m, d, "f");
    let view = m.view().unwrap();
    mkfile(&m, d, "later");
    m.unlink(d, b"f", false, t(2)).unwrap();
    let names: Vec<_> = view
        .entries(d)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        vec![b"f".to_vec()],
        "the view is the instant it was taken"
    );
    assert_eq!(view.get(f).unwrap().attr.nlink, 1);
    let mut inodes = 0;
    view.for_each_inode(&mut |_| inodes += 1).unwrap();
    assert_eq!(inodes, 3);
    assert_eq!(m.readdir(d, None, 10).unwrap().len(), 1, "the store is now");

    let before = m.storage_reads();
    m.get(d).unwrap();
    assert_eq!(m.storage_reads(), before + 1, "one read request for a get");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let inside = rt.block_on(async { m.create(d, b"from-async", new(FileKind::File), t(3)) });
    let blocking =
        rt.block_on(async { tokio::task::block_in_place(|| m.lookup(d, b"from-async")) });
    assert_eq!(inside.unwrap().id, blocking.unwrap().id);
    // Opened and dropped inside an async task: no panic either.
    let fs = common::fsid();
    let other = rt.block_on(async { etcd.open(&fs) });
    rt.block_on(async move { drop(other) });
}
