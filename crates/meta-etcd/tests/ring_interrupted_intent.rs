//! An operation across clusters interrupted between its parts (the client
//! stops after applying the first part, then is dropped, as if it died):
//! the next client that reads or writes a shard it holds locked rolls it
//! forward first, so none sees half of it. Link counts and
//! the tree are right afterwards. One interrupted before its commit (all
//! locks held) is aborted once its client is gone, and a lock whose
//! intent vanished is released: nothing of either is applied.

mod common;

use meta::conformance::{consistent, new, nokeep, t, ROOT};
use meta::{FileKind, InodeId, MetaError, MetaStore, RenameFlags};
use meta_etcd::{EtcdError, EtcdMeta};

fn injected(e: &MetaError) -> bool {
    matches!(common::etcd_error(e), Some(EtcdError::Injected))
}

/// Makes directories `prefix{i}` in `parent` until one lands on another
/// cluster than `parent`; with `stop` (a fault armed on `m`) that mkdir
/// is interrupted. Returns its name (and the inode, when it completed).
fn cross_mkdir(
    m: &EtcdMeta,
    ring: &common::Ring,
    parent: InodeId,
    prefix: &str,
    stop: Option<fn(&EtcdMeta)>,
) -> (String, Option<InodeId>) {
    let home = common::cluster_of(m, &ring.control, parent);
    if let Some(arm) = stop {
        arm(m);
    }
    let stop = stop.is_some();
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
    let (name, done) = cross_mkdir(&a, &ring, ROOT, "m", Some(EtcdMeta::stop_after_first_part));
    assert!(done.is_none());
    // A reader meets the lock of the committed intent: it rolls it
    // forward first, and sees the whole mkdir, never half of it.
    let d = b.lookup(ROOT, name.as_bytes()).unwrap();
    assert_eq!(d.attr.kind, FileKind::Dir);
    assert_eq!(d.attr.nlink, 2);
    let dirs_before = b.readdir(ROOT, None, usize::MAX).unwrap().len();
    drop(a);
    b.create(ROOT, b"after", new(FileKind::File), t(2)).unwrap();
    assert_eq!(
        b.readdir(ROOT, None, usize::MAX).unwrap().len(),
        dirs_before + 1
    );
    consistent(&b);

    // A rename of a file between directories on two clusters, stopped
    // after its first part, then settled by a client that opens later.
    let c = ring.open(&fs);
    let (x, _) = cross_mkdir(&c, &ring, ROOT, "x", None);
    let x = c.lookup(ROOT, x.as_bytes()).unwrap().id;
    let f = c.create(x, b"f", new(FileKind::File), t(3)).unwrap();
    let (y, _) = cross_mkdir(&c, &ring, x, "y", None);
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

#[test]
fn an_intent_stopped_before_its_commit_is_aborted_and_a_stray_lock_released() {
    let ring = common::Ring::start(2);
    let fs = ring.init(16);
    let b = ring.open(&fs);
    let dirs = |m: &EtcdMeta| m.counts().unwrap().dirs;

    // Stopped holding every lock: preparing, its client alive, then gone.
    let a = ring.open(&fs);
    let before = dirs(&b);
    let (name, done) = cross_mkdir(&a, &ring, ROOT, "p", Some(EtcdMeta::stop_after_locks));
    assert!(done.is_none());
    let made = dirs(&b) - before;
    let st = b.cluster_status(&ring.control.endpoints()).unwrap();
    assert_eq!(st.intents.len(), 1);
    assert_eq!(st.intents[0].state, "preparing");
    drop(a);
    // B writes in the root's (locked) shard: it aborts the dead client's
    // intent and goes on; the mkdir never happened.
    b.create(ROOT, b"after", new(FileKind::File), t(5)).unwrap();
    assert!(matches!(
        b.lookup(ROOT, name.as_bytes()),
        Err(MetaError::NotFound)
    ));
    assert_eq!(dirs(&b), before + made, "no record of the aborted mkdir");
    assert!(b
        .cluster_status(&ring.control.endpoints())
        .unwrap()
        .intents
        .is_empty());

    // A lock whose intent is gone (its client died between its lock and
    // its abort): released by the next writer.
    let a = ring.open(&fs);
    let (name, _) = cross_mkdir(&a, &ring, ROOT, "q", Some(EtcdMeta::stop_after_locks));
    drop(a);
    delete_intents(&ring.control.endpoint(), &fs);
    b.create(ROOT, b"after2", new(FileKind::File), t(6))
        .unwrap();
    assert!(matches!(
        b.lookup(ROOT, name.as_bytes()),
        Err(MetaError::NotFound)
    ));
    consistent(&b);
}

/// Deletes every intent record of `fsid` in the control cluster.
fn delete_intents(endpoint: &str, fsid: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut c = etcd_client::Client::connect([endpoint], None)
            .await
            .unwrap();
        let n = c
            .delete(
                format!("/{fsid}/t/"),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            )
            .await
            .unwrap()
            .deleted();
        assert_eq!(n, 1);
    });
}
