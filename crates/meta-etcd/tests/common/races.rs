//! Two clients (two `EtcdMeta` on one file system) racing: creates of
//! one name (exactly one wins), a create in a directory against its rmdir
//! (never an entry in a deleted directory), and crossing renames of two
//! directories into each other's subtree (never a loop). Each race runs
//! many times, the two sides released together by a barrier.
#![allow(dead_code)]

use std::sync::Barrier;

use meta::conformance::{consistent, kind, mkdir, new, nokeep, t, ROOT};
use meta::{FileKind, InodeId, MetaStore, RenameFlags};
use meta_etcd::EtcdMeta;

const ROUNDS: usize = 25;

/// Runs `a` on one client and `b` on the other at the same instant.
fn race<A: Send, B: Send>(
    x: &EtcdMeta,
    y: &EtcdMeta,
    a: impl FnOnce(&EtcdMeta) -> A + Send,
    b: impl FnOnce(&EtcdMeta) -> B + Send,
) -> (A, B) {
    let gate = Barrier::new(2);
    std::thread::scope(|s| {
        let ha = s.spawn(|| {
            gate.wait();
            a(x)
        });
        let hb = s.spawn(|| {
            gate.wait();
            b(y)
        });
        (ha.join().unwrap(), hb.join().unwrap())
    })
}

/// Files and directories reachable from the root.
fn reachable(m: &dyn MetaStore) -> (u64, u64) {
    let (mut files, mut dirs) = (0, 0);
    let mut todo = vec![ROOT];
    while let Some(d) = todo.pop() {
        dirs += 1;
        for e in m.readdir(d, None, usize::MAX).unwrap() {
            if e.kind == FileKind::Dir {
                todo.push(e.ino);
            } else {
                files += 1;
            }
        }
    }
    (files, dirs)
}

/// Every race, `ROUNDS` times, between clients `x` and `y`.
pub fn run(x: &EtcdMeta, y: &EtcdMeta) {
    // One name created by both: exactly one wins, the other sees Exists.
    for i in 0..ROUNDS {
        let name = format!("same{i}");
        let create = |m: &EtcdMeta| m.create(ROOT, name.as_bytes(), new(FileKind::File), t(1));
        let (a, b) = race(x, y, create, create);
        let winner = match (&a, &b) {
            (Ok(w), Err(e)) | (Err(e), Ok(w)) => {
                assert_eq!(kind(e), "Exists", "round {i}");
                w.id
            }
            _ => panic!("round {i}: exactly one create wins: {a:?} {b:?}"),
        };
        assert_eq!(y.lookup(ROOT, name.as_bytes()).unwrap().id, winner);
        assert_eq!(x.lookup(ROOT, name.as_bytes()).unwrap().id, winner);
    }

    // A create in a directory against its rmdir.
    let mut created = 0;
    for i in 0..ROUNDS {
        let dname = format!("d{i}");
        let d = mkdir(x, ROOT, &dname);
        let (rm, mk) = race(
            x,
            y,
            |m| m.rmdir(ROOT, dname.as_bytes(), t(2)),
            |m| m.create(d, b"f", new(FileKind::File), t(2)),
        );
        match (&rm, &mk) {
            (Ok(()), Err(e)) => {
                assert_eq!(kind(e), "NotFound", "round {i}");
                assert_eq!(kind(&y.get(d).unwrap_err()), "NotFound");
            }
            (Err(e), Ok(f)) => {
                assert_eq!(kind(e), "NotEmpty", "round {i}");
                assert_eq!(x.lookup(d, b"f").unwrap().id, f.id);
                created += 1;
            }
            _ => panic!("round {i}: rmdir {rm:?}, create {mk:?}"),
        }
    }
    // A file created in a deleted directory would be counted but not
    // reachable.
    let (files, dirs) = reachable(x);
    assert_eq!(files, ROUNDS as u64 + created);
    let counts = y.counts().unwrap();
    assert_eq!((counts.files, counts.dirs), (files, dirs));

    // p/a/x and q/b/y; one client moves a into b/y, the other b into
    // a/x. The two write no common key (each its source's parent, target
    // and moved directory): only the ancestors each compares keep the
    // second from committing a loop.
    let mut moved = 0;
    for i in 0..ROUNDS {
        let p = mkdir(x, ROOT, &format!("p{i}"));
        let q = mkdir(x, ROOT, &format!("q{i}"));
        let a = mkdir(x, p, "a");
        let b = mkdir(x, q, "b");
        let ax: InodeId = mkdir(x, a, "x");
        let by: InodeId = mkdir(x, b, "y");
        let (ra, rb) = race(
            x,
            y,
            |m| m.rename(p, b"a", by, b"a", RenameFlags::default(), &nokeep, t(3)),
            |m| m.rename(q, b"b", ax, b"b", RenameFlags::default(), &nokeep, t(3)),
        );
        match (&ra, &rb) {
            (Ok(None), Err(e)) | (Err(e), Ok(None)) => {
                assert_eq!(kind(e), "Invalid", "round {i}: the loser sees the loop");
                moved += 1;
            }
            _ => panic!("round {i}: at most one crossing rename commits: {ra:?} {rb:?}"),
        }
    }
    assert_eq!(moved, ROUNDS);
    let (files, dirs) = reachable(y);
    let counts = x.counts().unwrap();
    assert_eq!(
        (counts.files, counts.dirs),
        (files, dirs),
        "no directory left in a loop"
    );
    consistent(x);
    consistent(y);
}
