//! A shard moved from one data cluster to another, and back, while
//! another client keeps creating files in a directory of that shard: no
//! acknowledged create is lost, none is applied twice (each name is there
//! once, with the number its create returned), and the tree is whole. A
//! third client counting meanwhile never counts a file twice (the copy in
//! the target is not counted before the map says so) nor goes back.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use meta::conformance::{consistent, new, t, ROOT};
use meta::{FileKind, MetaStore};

#[test]
fn creates_during_shard_moves_are_all_there_once() {
    let ring = common::Ring::start(2);
    let fs = ring.init(16);
    let mover = ring.open(&fs);
    let writer = ring.open(&fs);
    let d = mover
        .create(ROOT, b"busy", new(FileKind::Dir), t(1))
        .unwrap();
    let shard = meta_etcd::shard_of(d.id);
    let home = common::cluster_of(&mover, &ring.control, d.id);

    let counter = ring.open(&fs);
    let stop = AtomicBool::new(false);
    let started = AtomicU64::new(0);
    let acked = std::thread::scope(|s| {
        let c = s.spawn(|| {
            let mut last = 0;
            let mut counted = 0;
            while !stop.load(Ordering::SeqCst) {
                let files = counter.counts().unwrap().files;
                // Read after counting: every file counted was started.
                let most = started.load(Ordering::SeqCst);
                assert!(files >= last, "counts went back: {last} -> {files}");
                assert!(files <= most, "counted {files} of at most {most} files");
                last = files;
                counted += 1;
            }
            counted
        });
        let w = s.spawn(|| {
            let mut acked = Vec::new();
            let mut i = 0u32;
            // At least a few hundred creates, and until both moves are done.
            while i < 300 || !stop.load(Ordering::SeqCst) {
                let name = format!("f{i}");
                started.fetch_add(1, Ordering::SeqCst);
                let f = writer
                    .create(d.id, name.as_bytes(), new(FileKind::File), t(2))
                    .unwrap_or_else(|e| panic!("create {name}: {e}"));
                acked.push((name, f.id));
                i += 1;
            }
            acked
        });
        // Wait for the writer to be going, then move the shard away and
        // back while it writes.
        while writer.readdir(d.id, None, 20).unwrap().len() < 20 {
            std::thread::yield_now();
        }
        mover.move_shard(shard, 1 - home).unwrap();
        assert_eq!(common::cluster_of(&mover, &ring.control, d.id), 1 - home);
        while writer.readdir(d.id, None, usize::MAX).unwrap().len() < 150 {
            std::thread::yield_now();
        }
        mover.move_shard(shard, home).unwrap();
        stop.store(true, Ordering::SeqCst);
        assert!(c.join().unwrap() > 0);
        w.join().unwrap()
    });

    assert!(acked.len() >= 300);
    let listed = mover.readdir(d.id, None, usize::MAX).unwrap();
    assert_eq!(listed.len(), acked.len(), "every acknowledged create, once");
    for (name, ino) in &acked {
        assert_eq!(
            mover.lookup(d.id, name.as_bytes()).unwrap().id,
            *ino,
            "{name}"
        );
    }
    assert_eq!(mover.get(d.id).unwrap().attr.nlink, 2);
    let counts = writer.counts().unwrap();
    assert_eq!((counts.files, counts.dirs), (acked.len() as u64, 2));
    let st = mover.cluster_status(&ring.control.endpoints()).unwrap();
    assert_eq!(
        st.shards[shard as usize],
        (home as u16, 3),
        "two moves: epoch 1 + 2"
    );
    consistent(&mover);
    consistent(&writer);
}
