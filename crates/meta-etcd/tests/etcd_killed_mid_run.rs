//! etcd killed (SIGKILL) while a client creates files: operations fail
//! with the typed error (no hang), and after a restart the store works
//! again and every create that was acknowledged is there.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use meta::conformance::{consistent, new, t, ROOT};
use meta::{FileKind, MetaStore};
use meta_etcd::EtcdError;

#[test]
fn a_killed_etcd_fails_operations_and_loses_nothing_acknowledged() {
    let mut etcd = common::Etcd::start();
    let fs = common::fsid();
    let m = etcd.open(&fs);
    let acked = Mutex::new(Vec::new());
    let failed = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let name = format!("f{i}");
                i += 1;
                match m.create(ROOT, name.as_bytes(), new(FileKind::File), t(1)) {
                    Ok(f) => acked.lock().unwrap().push((name, f.id)),
                    Err(e) => failed.lock().unwrap().push(e),
                }
            }
        });
        // Kill once some creates are acknowledged, restart once some failed.
        while acked.lock().unwrap().len() < 20 {
            std::thread::yield_now();
        }
        etcd.kill();
        while failed.lock().unwrap().is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        etcd.restart();
        let before = acked.lock().unwrap().len();
        while acked.lock().unwrap().len() < before + 20 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        stop.store(true, Ordering::SeqCst);
    });
    for e in failed.lock().unwrap().iter() {
        assert!(
            matches!(
                common::etcd_error(e),
                Some(EtcdError::Unavailable { .. } | EtcdError::Timeout { .. } | EtcdError::Rpc(_))
            ),
            "a lost cluster is a typed error: {e}"
        );
    }
    let acked = acked.into_inner().unwrap();
    // The client that wrote them and a new one see every one.
    let other = etcd.open(&fs);
    for (name, ino) in &acked {
        assert_eq!(m.lookup(ROOT, name.as_bytes()).unwrap().id, *ino, "{name}");
        assert_eq!(other.lookup(ROOT, name.as_bytes()).unwrap().id, *ino);
    }
    consistent(&m);

    // While etcd is down, each kind of operation fails the same way.
    etcd.kill();
    let e = m.get(ROOT).unwrap_err();
    assert!(common::etcd_error(&e).is_some(), "{e}");
    let e = m
        .create(ROOT, b"late", new(FileKind::File), t(2))
        .unwrap_err();
    assert!(
        matches!(common::etcd_error(&e), Some(EtcdError::Unavailable { .. })),
        "{e}"
    );
    etcd.restart();
    m.create(ROOT, b"after", new(FileKind::File), t(3)).unwrap();
    assert_eq!(
        m.counts().unwrap().files as usize,
        acked.len() + 1 + unknown(&m, &acked)
    );
}

/// Files whose create failed but which exist (an unknown outcome that had
/// applied): allowed, and counted here so that the count check is exact.
fn unknown(m: &dyn MetaStore, acked: &[(String, meta::InodeId)]) -> usize {
    let names: Vec<_> = m.readdir(ROOT, None, usize::MAX).unwrap();
    names
        .iter()
        .filter(|e| e.name != b"after" && !acked.iter().any(|(n, _)| n.as_bytes() == e.name))
        .count()
}
