//! A retry after an unknown outcome returns the first result: each
//! operation below has its transaction applied and its reply dropped
//! (`lose_next_reply`), so the store retries; a second run of the
//! operation would answer `Exists`, `NotFound` or a count raised twice.

mod common;

use meta::conformance::{consistent, mkfile, new, nokeep, t, ROOT};
use meta::{FileKind, MetaStore, RenameFlags, XattrFlags};

#[test]
fn a_retry_after_a_lost_reply_returns_the_first_result() {
    let etcd = common::Etcd::start();
    let m = etcd.open(&common::fsid());

    m.lose_next_reply();
    let d = m.create(ROOT, b"d", new(FileKind::Dir), t(1)).unwrap();
    assert_eq!(m.lookup(ROOT, b"d").unwrap().id, d.id);
    assert_eq!(
        m.get(ROOT).unwrap().attr.nlink,
        3,
        "the root's link raised once"
    );

    let f = mkfile(&m, d.id, "f");
    m.lose_next_reply();
    let linked = m.link(f, ROOT, b"g", t(2)).unwrap();
    assert_eq!(linked.attr.nlink, 2);
    assert_eq!(m.get(f).unwrap().attr.nlink, 2);

    m.lose_next_reply();
    let gone = m
        .rename(
            d.id,
            b"f",
            ROOT,
            b"g",
            RenameFlags::default(),
            &nokeep,
            t(3),
        )
        .unwrap();
    assert_eq!(gone, None, "two names of one inode: a no-op");
    m.lose_next_reply();
    let gone = m
        .rename(
            d.id,
            b"f",
            ROOT,
            b"h",
            RenameFlags::default(),
            &nokeep,
            t(3),
        )
        .unwrap();
    assert_eq!(gone, None);
    assert_eq!(m.lookup(ROOT, b"h").unwrap().id, f);

    m.lose_next_reply();
    let unlinked = m.unlink(ROOT, b"g", false, t(4)).unwrap();
    assert_eq!(
        unlinked.attr.nlink, 1,
        "the unlink's own result, not NotFound"
    );

    m.lose_next_reply();
    m.set_xattr(f, b"user.k", b"v", XattrFlags::Create, t(5))
        .unwrap();
    m.lose_next_reply();
    m.remove_xattr(f, b"user.k", t(6)).unwrap();
    assert!(m.list_xattr(f).unwrap().is_empty());

    m.lose_next_reply();
    m.rmdir(ROOT, b"d", t(7)).unwrap();
    assert_eq!(m.get(ROOT).unwrap().attr.nlink, 2, "lowered once");
    consistent(&m);
}
