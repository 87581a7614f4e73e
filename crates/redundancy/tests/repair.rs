//! Scrub heals what it can and says what it cannot; rebuilding onto a
//! replacement branch restores full redundancy and can be run again.

mod common;

use std::collections::BTreeSet;

use branch::{BlobKey, Fault};
use common::{key, pattern, policy, Rig};
use redundancy::{BranchId, FaultKind, Redundant};

fn store(rig: &Rig, text: &str, allowed: &[BranchId], n: usize) -> Vec<(BlobKey, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let k = key(&format!("containers/{i:04}"));
            let data = pattern(50_000 + i * 40_001, i as u64);
            rig.store.put(&k, &data, &policy(text), allowed).unwrap();
            (k, data)
        })
        .collect()
}

fn assert_distinct(store: &Redundant, k: &BlobKey) -> Vec<BranchId> {
    let placed = store.locate(k).unwrap();
    let ids: Vec<BranchId> = placed
        .shards
        .iter()
        .flat_map(|s| s.branches.clone())
        .collect();
    let distinct: BTreeSet<BranchId> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), ids.len(), "{k}: {placed:?}");
    assert_eq!(
        ids.len(),
        placed.shards.len(),
        "{k}: every shard placed once"
    );
    ids
}

#[test]
fn scrub_heals_corrupt_and_missing_shards() {
    for text in ["mirror:3", "parity:3", "parity:2@b4", "rs:3+2"] {
        let rig = Rig::new(5);
        let containers = store(&rig, text, &rig.all(), 6);
        let f = policy(text).tolerance();
        // Up to f faults per container: flipped bytes, then a deleted file.
        for (n, (k, _)) in containers.iter().enumerate() {
            rig.corrupt_file(k, (n % 3) as u16);
            if f > 1 {
                let index = ((n + 1) % 3) as u16;
                std::fs::remove_file(rig.shard_file(k, index, rig.holder(k, index))).unwrap();
            }
        }
        let mut seen = Vec::new();
        let summary = rig.store.scrub_all(|p| {
            assert_eq!(p.total, containers.len());
            seen.push((p.done, p.key.clone()));
        });
        assert_eq!(seen.len(), containers.len(), "{text}: progress after each");
        assert_eq!(summary.containers, containers.len());
        assert_eq!(
            summary.repaired.len(),
            containers.len(),
            "{text}: {summary:?}"
        );
        assert!(summary.lost.is_empty(), "{text}: {summary:?}");
        assert!(summary.degraded.is_empty(), "{text}: {summary:?}");
        for report in &summary.repaired {
            assert_eq!(report.repaired.len(), f.min(2), "{text}: {report:?}");
            assert!(report.repaired.iter().any(|r| r.was == FaultKind::Corrupt));
        }
        // Healed for real: a fresh process over the same directories
        // finds every shard intact.
        let fresh = rig.reopen().store;
        let again = fresh.scrub_all(|_| {});
        assert_eq!(again.healthy, containers.len(), "{text}: {again:?}");
        for (k, data) in &containers {
            assert!(fresh.get(k).unwrap() == *data);
            assert_distinct(&fresh, k);
        }
    }
}

#[test]
fn scrub_moves_shards_off_a_branch_that_refuses_writes() {
    let rig = Rig::new(5);
    let containers = store(&rig, "rs:2+1", &rig.all()[..3], 4);
    rig.controls[1].set(Fault::FailAll);
    let summary = rig.store.scrub_all(|_| {});
    assert_eq!(summary.repaired.len(), containers.len(), "{summary:?}");
    for (k, data) in &containers {
        let ids = assert_distinct(&rig.store, k);
        assert!(!ids.contains(&BranchId(1)), "{k}: {ids:?}");
        assert!(rig.store.get(k).unwrap() == *data);
    }
}

#[test]
fn scrub_reports_what_it_cannot_repair_and_keeps_the_rest() {
    let rig = Rig::new(3);
    let containers = store(&rig, "parity:2", &rig.all(), 1);
    let k = &containers[0].0;
    rig.corrupt_file(k, 0);
    rig.corrupt_file(k, 1);
    let report = rig.store.scrub(k).unwrap();
    assert_eq!(report.faults.len(), 2);
    assert!(report.repaired.is_empty());
    assert_eq!(report.unrepaired.len(), 2);
    let why = report.unrepaired[0].to_string();
    assert!(
        why.contains("cannot rebuild") && why.contains("containers/0000"),
        "{why}"
    );
    let parity_file = rig.shard_file(k, 2, rig.holder(k, 2));
    assert!(parity_file.exists(), "the surviving shard is kept");
}

#[test]
fn rebuild_onto_restores_full_redundancy() {
    for text in ["mirror:2", "parity:2", "rs:2+2"] {
        let rig = Rig::new(6);
        let old_set = &rig.all()[..5];
        let containers = store(&rig, text, old_set, 10);
        let (old, new) = (BranchId(1), BranchId(5));
        let on_old = containers
            .iter()
            .filter(|(k, _)| {
                rig.store
                    .locate(k)
                    .unwrap()
                    .shards
                    .iter()
                    .any(|s| s.branches == [old])
            })
            .count();
        assert!(on_old > 0);
        std::fs::remove_dir_all(common::branch_root(rig.dir.path(), 1)).unwrap();
        let mut calls = 0;
        let report = rig.store.rebuild_onto(old, new, |_| calls += 1).unwrap();
        assert_eq!(calls, containers.len());
        assert_eq!(
            (report.containers, report.rebuilt),
            (on_old, on_old),
            "{text}: {report:?}"
        );
        assert!(
            report.failed.is_empty() && report.conflicts.is_empty(),
            "{report:?}"
        );
        // Full redundancy: the old branch is gone, and the policy's whole
        // tolerance of other branches can still be lost.
        let f = policy(text).tolerance();
        for id in 0..f {
            rig.controls[2 + id].set(Fault::FailAll);
        }
        for (k, data) in &containers {
            let ids = assert_distinct(&rig.store, k);
            assert!(!ids.contains(&old), "{k}: {ids:?}");
            assert!(rig.store.get(k).unwrap() == *data, "{text}: {k}");
        }
        rig.heal();
        let again = rig.store.rebuild_onto(old, new, |_| {}).unwrap();
        assert_eq!(again, Default::default(), "{text}: nothing left to do");
    }
}

#[test]
fn an_interrupted_rebuild_resumes_where_it_stopped() {
    let rig = Rig::new(5);
    let containers = store(&rig, "rs:2+1", &rig.all()[..4], 20);
    let (old, new) = (BranchId(0), BranchId(4));
    // The new branch fails for half of the containers, as if the first
    // run died half-way through.
    rig.controls[4].set_for_prefix(Fault::FailAll, "containers/000");
    let first = rig.store.rebuild_onto(old, new, |_| {}).unwrap();
    assert!(first.rebuilt > 0 && !first.failed.is_empty(), "{first:?}");
    // A new process: discovery sees the copies already on the new branch
    // beside the originals on the old one.
    rig.heal();
    let store = rig.reopen().store;
    let second = store.rebuild_onto(old, new, |_| {}).unwrap();
    assert_eq!(second.already_present, first.rebuilt, "{second:?}");
    assert_eq!(second.rebuilt, first.failed.len(), "{second:?}");
    assert!(second.failed.is_empty(), "{second:?}");
    for (k, data) in &containers {
        let ids = assert_distinct(&store, k);
        assert!(!ids.contains(&old));
        assert!(store.get(k).unwrap() == *data);
    }
}

#[test]
fn rebuild_after_a_restart_finds_the_lost_branch_by_what_is_missing() {
    let rig = Rig::new(4);
    let containers = store(&rig, "mirror:2", &rig.all()[..3], 8);
    let (old, new) = (BranchId(2), BranchId(3));
    std::fs::remove_dir_all(common::branch_root(rig.dir.path(), 2)).unwrap();
    // After a restart nothing says which shards the dead branch held,
    // only that some are missing.
    let restarted = rig.reopen();
    let found = &restarted.found;
    assert!(!found.incomplete.is_empty(), "{found:?}");
    let report = restarted.store.rebuild_onto(old, new, |_| {}).unwrap();
    assert_eq!(report.rebuilt, found.incomplete.len());
    let after = rig.reopen();
    let found = &after.found;
    assert!(
        found.incomplete.is_empty() && found.unreadable.is_empty(),
        "{found:?}"
    );
    for (k, data) in &containers {
        assert_distinct(&after.store, k);
        assert!(after.store.get(k).unwrap() == *data);
    }
}

#[test]
fn rebuild_never_puts_two_shards_of_a_container_on_one_branch() {
    let rig = Rig::new(3);
    let containers = store(&rig, "mirror:2", &rig.all(), 12);
    let report = rig
        .store
        .rebuild_onto(BranchId(0), BranchId(1), |_| {})
        .unwrap();
    // Containers already on branch 1 get their shard on the spare branch 2.
    assert!(!report.conflicts.is_empty(), "{report:?}");
    assert_eq!(report.rebuilt, report.containers, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    for (k, data) in &containers {
        let ids = assert_distinct(&rig.store, k);
        assert!(!ids.contains(&BranchId(0)), "{k}: {ids:?}");
        assert!(rig.store.get(k).unwrap() == *data);
    }
}
