//! A policy-bound view is a Branch like any other, so code written for a
//! branch stores redundantly without change.

mod common;

use std::sync::{Arc, Mutex};

use branch::testing::conformance;
use branch::{BlobKey, Branch, BranchError, Fault, LocalDir};
use common::{key, pattern, policy, Rig};
use redundancy::{PolicyView, Redundant};

#[test]
fn every_policy_view_passes_the_branch_conformance_suite() {
    for text in ["single", "stripe:2", "mirror:2", "parity:2", "rs:3+2"] {
        let rigs = Mutex::new(Vec::new());
        conformance(|| {
            let rig = Rig::new(5);
            let view = PolicyView::new(rig.store.clone(), policy(text), rig.all()).unwrap();
            rigs.lock().unwrap().push(rig);
            Arc::new(view)
        });
    }
}

#[test]
fn a_view_reads_through_lost_branches_and_reports_what_it_cannot() {
    let rig = Rig::new(3);
    let view = PolicyView::new(rig.store.clone(), policy("parity:2"), rig.all()).unwrap();
    assert_eq!(view.name(), "[b0,b1,b2]");
    let k = key("containers/00000/0000000000000001");
    let data = pattern(500_000, 4);
    view.put(&k, &data).unwrap();
    rig.controls[0].set(Fault::FailAll);
    assert!(view.get(&k).unwrap() == data);
    assert_eq!(
        view.read_range(&k, 123_456, 1000).unwrap(),
        &data[123_456..124_456]
    );
    rig.controls[1].set(Fault::Garbage);
    let err = view.get(&k).unwrap_err();
    assert!(matches!(err, BranchError::Io { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("cannot be read") && msg.contains("(parity:2)"),
        "{msg}"
    );
}

#[test]
fn one_blob_can_take_another_policy() {
    let rig = Rig::new(4);
    let view = PolicyView::new(rig.store.clone(), policy("mirror:2"), rig.all()).unwrap();
    view.put(&key("a"), b"default").unwrap();
    view.put_with(&key("b"), b"special", &policy("rs:2+2"))
        .unwrap();
    assert_eq!(
        rig.store.locate(&key("a")).unwrap().policy,
        policy("mirror:2")
    );
    assert_eq!(
        rig.store.locate(&key("b")).unwrap().policy,
        policy("rs:2+2")
    );
    assert_eq!(view.get(&key("b")).unwrap(), b"special");
    assert_eq!(view.list("").unwrap(), vec![key("a"), key("b")]);
}

#[test]
fn a_view_its_branches_cannot_hold_is_refused() {
    let rig = Rig::new(2);
    let err = PolicyView::new(rig.store.clone(), policy("mirror:3"), rig.all())
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "policy mirror:3 needs 3 distinct branches but has 2"
    );
}

/// A branch that notes the prefetch hints it gets.
struct Hints {
    inner: Arc<dyn Branch>,
    seen: Mutex<Vec<(BlobKey, u64, u64)>>,
}

impl Branch for Hints {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn put(&self, key: &BlobKey, data: &[u8]) -> branch::Result<()> {
        self.inner.put(key, data)
    }
    fn get(&self, key: &BlobKey) -> branch::Result<Vec<u8>> {
        self.inner.get(key)
    }
    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> branch::Result<Vec<u8>> {
        self.inner.read_range(key, offset, len)
    }
    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        self.seen.lock().unwrap().push((key.clone(), offset, len));
    }
    fn size(&self, key: &BlobKey) -> branch::Result<u64> {
        self.inner.size(key)
    }
    fn list(&self, prefix: &str) -> branch::Result<Vec<BlobKey>> {
        self.inner.list(prefix)
    }
    fn delete(&self, key: &BlobKey) -> branch::Result<()> {
        self.inner.delete(key)
    }
}

#[test]
fn prefetch_hints_the_data_shard_holding_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let hints: Vec<Arc<Hints>> = (0..3)
        .map(|i| {
            let (local, _) =
                LocalDir::open(format!("b{i}"), dir.path().join(i.to_string())).unwrap();
            Arc::new(Hints {
                inner: Arc::new(local),
                seen: Mutex::new(Vec::new()),
            })
        })
        .collect();
    let branches: Vec<Arc<dyn Branch>> =
        hints.iter().map(|h| h.clone() as Arc<dyn Branch>).collect();
    let store = Arc::new(Redundant::new(branches).unwrap());
    let view = PolicyView::new(store.clone(), policy("rs:2+1"), store.branch_ids()).unwrap();
    let k = key("containers/1");
    view.put(&k, &pattern(300_000, 1)).unwrap();
    // Bytes 160_000.. are in data shard 1 (each holds 150_000 bytes).
    view.prefetch(&k, 160_000, 1000);
    let holder = store.locate(&k).unwrap().shards[1].branches[0];
    for (i, h) in hints.iter().enumerate() {
        let seen = h.seen.lock().unwrap();
        if i == usize::from(holder.0) {
            assert_eq!(seen.len(), 1);
            let (blob, offset, len) = &seen[0];
            assert_eq!(blob.as_str(), "containers/1.s1");
            let size = h.inner.size(blob).unwrap();
            assert!(
                *offset > 0 && offset + len <= size,
                "{offset}+{len} of {size}"
            );
        } else {
            assert!(seen.is_empty(), "branch {i} got {seen:?}");
        }
    }
}
