//! An operation across clusters interrupted between its parts (the client
//! stops after applying the first part, then is dropped, as if it died):
//! until it is settled no reader meets a dangling entry, and the next
//! client that touches a locked shard rolls it forward. Link counts and
//! the tree are right afterwards.

mod common;

use meta::conformance::{consistent, new, nokeep, t, ROOT};
use meta::{FileKind, InodeId, MetaError, MetaStore, RenameFlags};
use meta_etcd::{EtcdError, EtcdMeta};

fn injected(e: &MetaError) -> bool {
    matches!(common::etcd_error(e), Some(EtcdError::Injected))
}

/// Makes directories `prefix{i}` in `parent` until one lands on another
/// cluster than `parent`; with `stop` that mkdir is interrupted. Returns
/// its name (and the inode, when it completed).
fn cross_mkdir(
    m: &EtcdMeta,
    ring: &common::Ring,
    parent: InodeId,
    prefix: &str,
    stop: bool,
) -> (String, Option<InodeId>) {
    let home = common::cluster_of(m, &ring.control, parent);
    if stop {
        m.stop_after_first_part();
    }
    for i in 0..200 {
        let name = format!("{prefix}{i}");
        match m.create(parent, name.as_bytes(), new(FileKind::Dir), t(1)) {
            Ok(d) if common::cluster_of(m, &ring.control, d.id) != home => {
                return (name, Some(d.id));
            }
            Ok(_) => {}
            Err(e) if stop && injected(&e) => return (name, None),
            Err(e) => panic!("mkdir {name}: {e}"),
        }
    }
    panic!("no directory landed on another cluster");
}

#[test]
fn an_interrupted_mkdir_and_rename_are_rolled_forward_by_another_client() {
    let ring = common::Ring::start(2);
    let fs = ring.init(16);
    let a = ring.open(&fs);
    let b = ring.open(&fs);

    // A mkdir across clusters stops after its first part: the child's
    // record (created first); its name is not there yet.
    let (name, done) = cross_mkdir(&a, &ring, ROOT, "m", true);
    assert!(done.is_none());
    let dirs_before = b.readdir(ROOT, None, usize::MAX).unwrap().len();
    assert!(
        matches!(b.lookup(ROOT, name.as_bytes()), Err(MetaError::NotFound)),
        "no name before the intent is settled"
    );
    drop(a);
    // B creates in the root, whose shard the intent holds: B settles it
    // (rolls it forward) and goes on.
    b.create(ROOT, b"after", new(FileKind::File), t(2)).unwrap();
    let d = b.lookup(ROOT, name.as_bytes()).unwrap();
    assert_eq!(d.attr.kind, FileKind::Dir);
    assert_eq!(d.attr.nlink, 2);
    assert_eq!(
        b.readdir(ROOT, None, usize::MAX).unwrap().len(),
        dirs_before + 2
    );
    consistent(&b);

    // A rename of a file between directories on two clusters, stopped
    // after its first part, then settled by a client that opens later.
    let c = ring.open(&fs);
    let (x, _) = cross_mkdir(&c, &ring, ROOT, "x", false);
    let x = c.lookup(ROOT, x.as_bytes()).unwrap().id;
    let f = c.create(x, b"f", new(FileKind::File), t(3)).unwrap();
    let (y, _) = cross_mkdir(&c, &ring, x, "y", false);
    let y = c.lookup(x, y.as_bytes()).unwrap().id;
    assert_ne!(
        common::cluster_of(&c, &ring.control, x),
        common::cluster_of(&c, &ring.control, y)
    );
    c.stop_after_first_part();
    let e = c
        .rename(x, b"f", y, b"g", RenameFlags::default(), &nokeep, t(4))
        .unwrap_err();
    assert!(injected(&e), "{e}");
    // Half applied: the file has one name or two, never none that
    // dangles: each name there resolves.
    for (dir, n) in [(x, &b"f"[..]), (y, b"g")] {
        match b.lookup(dir, n) {
            Ok(i) => assert_eq!(i.id, f.id),
            Err(MetaError::NotFound) => {}
            Err(e) => panic!("{e}"),
        }
    }
    drop(c);
    let d = ring.open(&fs);
    assert!(d
        .cluster_status(&ring.control.endpoints())
        .unwrap()
        .intents
        .is_empty());
    assert!(matches!(d.lookup(x, b"f"), Err(MetaError::NotFound)));
    let g = d.lookup(y, b"g").unwrap();
    assert_eq!((g.id, g.attr.nlink), (f.id, 1));
    assert_eq!(d.path_of(f.id).unwrap().unwrap().last().unwrap(), b"g");
    consistent(&d);
    consistent(&b);
}
