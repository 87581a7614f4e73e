//! A policy-bound view is a Branch like any other, so code written for a
//! branch stores redundantly without change.

mod common;

use std::sync::{Arc, Mutex};

use branch::testing::conformance;
use branch::{Branch, BranchError, Fault};
use common::{key, pattern, policy, Rig};
use redundancy::PolicyView;

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
    assert_eq!(view.name(), "parity:2[b0,b1,b2]");
    let k = key("containers/00000/0000000000000001");
    let data = pattern(500_000, 4);
    view.put(&k, &data).unwrap();
    rig.controls[0].set(Fault::FailAll);
    assert!(view.get(&k).unwrap() == data);
    assert_eq!(view.read_range(&k, 123_456, 1000).unwrap(), &data[123_456..124_456]);
    rig.controls[1].set(Fault::Garbage);
    let err = view.get(&k).unwrap_err();
    assert!(matches!(err, BranchError::Io { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("cannot be read") && msg.contains("(parity:2)"), "{msg}");
}

#[test]
fn one_blob_can_take_another_policy() {
    let rig = Rig::new(4);
    let view = PolicyView::new(rig.store.clone(), policy("mirror:2"), rig.all()).unwrap();
    view.put(&key("a"), b"default").unwrap();
    view.put_with(&key("b"), b"special", &policy("rs:2+2")).unwrap();
    assert_eq!(rig.store.locate(&key("a")).unwrap().policy, policy("mirror:2"));
    assert_eq!(rig.store.locate(&key("b")).unwrap().policy, policy("rs:2+2"));
    assert_eq!(view.get(&key("b")).unwrap(), b"special");
    assert_eq!(view.list("").unwrap(), vec![key("a"), key("b")]);
}

#[test]
fn a_view_its_branches_cannot_hold_is_refused() {
    let rig = Rig::new(2);
    let err = PolicyView::new(rig.store.clone(), policy("mirror:3"), rig.all()).err().unwrap();
    assert_eq!(err.to_string(), "policy mirror:3 needs 3 distinct branches but has 2");
}
