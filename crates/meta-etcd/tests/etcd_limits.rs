//! The operations closest to etcd's limits fit them: a create with the
//! most and largest xattrs and the largest inline content, and a rename
//! into a target just within the ancestor bound; past the bounds they are
//! refused with typed errors before anything is sent.

mod common;

use meta::conformance::{kind, mkdir, new, nokeep, t, ROOT};
use meta::{Content, FileKind, InodeId, MetaStore, NewInode, RenameFlags};
use meta_etcd::{EtcdError, MAX_ANCESTORS, MAX_INLINE, MAX_OP_XATTRS, XATTR_SIZE_MAX};

#[test]
fn the_largest_operations_fit_in_one_transaction() {
    let etcd = common::Etcd::start();
    let m = etcd.open(&common::fsid());

    let xattrs: Vec<_> = (0..MAX_OP_XATTRS)
        .map(|i| {
            (
                format!("user.a{i}").into_bytes(),
                vec![i as u8; XATTR_SIZE_MAX],
            )
        })
        .collect();
    let big = NewInode {
        content: Content::Inline(vec![7; MAX_INLINE]),
        xattrs: xattrs.clone(),
        ..new(FileKind::File)
    };
    let f = m.create(ROOT, b"big", big.clone(), t(1)).unwrap();
    assert_eq!(f.attr.size, MAX_INLINE as u64);
    assert_eq!(m.list_xattr(f.id).unwrap().len(), MAX_OP_XATTRS);
    assert_eq!(m.get_xattr(f.id, b"user.a3").unwrap(), xattrs[3].1);

    let over = NewInode {
        content: Content::Inline(vec![7; MAX_INLINE + 1]),
        ..big.clone()
    };
    assert_eq!(
        kind(&m.create(ROOT, b"over", over, t(1)).unwrap_err()),
        "Invalid"
    );
    let mut many = big;
    many.xattrs.push((b"user.one-more".to_vec(), Vec::new()));
    assert_eq!(
        kind(&m.create(ROOT, b"many", many, t(1)).unwrap_err()),
        "Invalid"
    );

    // A chain of directories: a rename into its deepest one walks past
    // the bound; one just within it commits.
    let mut chain = vec![ROOT];
    for i in 0..MAX_ANCESTORS + 1 {
        chain.push(mkdir(&m, *chain.last().unwrap(), &format!("c{i}")));
    }
    let moving = mkdir(&m, ROOT, "moving");
    let plain = RenameFlags::default();
    let deepest: InodeId = *chain.last().unwrap();
    let e = m
        .rename(ROOT, b"moving", deepest, b"m", plain, &nokeep, t(2))
        .unwrap_err();
    assert!(
        matches!(common::etcd_error(&e), Some(EtcdError::TooDeep(_))),
        "{e}"
    );
    let within = chain[MAX_ANCESTORS];
    m.rename(ROOT, b"moving", within, b"m", plain, &nokeep, t(2))
        .unwrap();
    assert_eq!(m.parent(moving).unwrap(), within);
    let path = m.path_of(moving).unwrap().unwrap();
    assert_eq!(path.len(), MAX_ANCESTORS + 1);
    assert_eq!(path.last().unwrap(), b"m");
    assert_eq!(
        m.get(within).unwrap().attr.nlink,
        4,
        "the next link of the chain and m"
    );
    assert_eq!(m.get(deepest).unwrap().attr.nlink, 2);
}
