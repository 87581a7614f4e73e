//! The layer's watcher hears of every read and write of a branch: on
//! virtual time a slow branch's calls take exactly its slowness, bytes
//! are those moved, and a read of a missing shard is a fault of the
//! branch that lacks it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use branch::Fault;
use common::{key, pattern, policy, Rig};
use parking_lot::Mutex;
use redundancy::{BranchIo, FaultKind, IoOp, IoWatcher};

/// One call heard: branch, op, time, bytes, faults.
type Call = (String, IoOp, Duration, u64, Vec<FaultKind>);

/// Every call heard.
#[derive(Default)]
struct Heard(Mutex<Vec<Call>>);

impl IoWatcher for Heard {
    fn io(&self, io: &BranchIo<'_>) {
        self.0.lock().push((
            io.branch.to_string(),
            io.op,
            io.took,
            io.bytes,
            io.faults.clone(),
        ));
    }
}

impl Heard {
    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.0.lock())
    }
}

#[test]
fn every_branch_call_is_timed_and_counted() {
    let rig = Rig::timed(2, 7);
    let heard = Arc::new(Heard::default());
    rig.store.watch_io(heard.clone());
    rig.controls[1].set(Fault::Slow(Duration::from_millis(3)));

    let k = key("containers/0001");
    let data = pattern(100_000, 1);
    rig.store
        .put(&k, &data, &policy("mirror:2"), &rig.all())
        .unwrap();
    let mut writes = heard.take();
    writes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(writes.len(), 2, "{writes:?}");
    for (i, (branch, op, took, bytes, faults)) in writes.iter().enumerate() {
        assert_eq!(branch, &format!("b{i}"));
        assert_eq!(*op, IoOp::Write);
        // A mirror's shard is the container and its block digests.
        assert!(*bytes > data.len() as u64, "{bytes}");
        assert!(faults.is_empty());
        let slow = if i == 1 { 3 } else { 0 };
        assert_eq!(*took, Duration::from_millis(slow));
    }

    // Reading from the slow branch alone: b0's copy is gone.
    std::fs::remove_file(rig.shard_file(&k, 0, redundancy::BranchId(0))).unwrap();
    assert!(rig.store.get(&k).unwrap() == data);
    let reads = heard.take();
    let b0: Vec<_> = reads.iter().filter(|r| r.0 == "b0").collect();
    let b1: Vec<_> = reads.iter().filter(|r| r.0 == "b1").collect();
    assert!(b0
        .iter()
        .all(|r| r.1 == IoOp::Read && r.3 == 0 && r.4 == [FaultKind::Missing]));
    assert!(!b1.is_empty());
    for r in &b1 {
        assert_eq!((r.1, r.2), (IoOp::Read, Duration::from_millis(3)));
        assert!(r.4.is_empty());
    }
    assert!(b1.iter().map(|r| r.3).sum::<u64>() >= data.len() as u64);
}
