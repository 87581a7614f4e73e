//! Changing the branch set while the layer is in use: adding a branch,
//! retiring one (new shards go to its successor, or elsewhere), and a
//! retirement that waits for puts in flight.

mod common;

use std::sync::Arc;
use std::time::Duration;

use branch::{Branch, Fault, LocalDir};
use common::{key, pattern, policy, Rig};
use redundancy::BranchId;

fn local(rig: &Rig, name: &str) -> Arc<dyn Branch> {
    Arc::new(LocalDir::open(name, rig.dir.path().join(name)).unwrap().0)
}

fn branches_of(rig: &Rig, k: &branch::BlobKey) -> Vec<BranchId> {
    rig.store
        .locate(k)
        .unwrap()
        .shards
        .iter()
        .flat_map(|s| s.branches.clone())
        .collect()
}

#[test]
fn an_added_branch_takes_shards_and_a_name_is_not_added_twice() {
    let rig = Rig::new(2);
    let id = rig.store.add_branch(local(&rig, "extra")).unwrap();
    assert_eq!(id, BranchId(2));
    assert_eq!(rig.store.branch_ids(), [BranchId(0), BranchId(1), id]);
    assert_eq!(rig.store.branch_name(id).as_deref(), Some("extra"));
    let e = rig.store.add_branch(local(&rig, "b1")).unwrap_err();
    assert!(e.to_string().contains("b1"), "{e}");
    let k = key("containers/0001");
    let data = pattern(50_000, 1);
    rig.store
        .put(&k, &data, &policy("mirror:3"), &rig.all())
        .unwrap();
    assert!(branches_of(&rig, &k).contains(&id));
    assert_eq!(rig.store.get(&k).unwrap(), data);
}

#[test]
fn a_retired_branch_gets_no_new_shards_but_stays_readable() {
    let rig = Rig::new(4);
    let all = rig.all();
    let before = key("containers/before");
    let old_data = pattern(60_000, 7);
    rig.store
        .put(&before, &old_data, &policy("mirror:2"), &all[..2])
        .unwrap();
    // Retired with a successor: a put naming it stores there instead.
    rig.store.retire(BranchId(1), Some(BranchId(3))).unwrap();
    assert!(rig.store.is_retired(BranchId(1)));
    assert!(!rig.store.branch_ids().contains(&BranchId(1)));
    let status = rig.store.status();
    assert!(status.iter().any(|s| s.id == BranchId(1) && s.retired));
    assert!(status.iter().all(|s| s.retired == (s.id == BranchId(1))));
    for i in 0..8 {
        let k = key(&format!("containers/after{i}"));
        rig.store
            .put(&k, &pattern(10_000, i), &policy("mirror:2"), &all[..2])
            .unwrap();
        let mut ids = branches_of(&rig, &k);
        ids.sort();
        assert_eq!(ids, [BranchId(0), BranchId(3)], "{k}");
    }
    assert_eq!(rig.store.get(&before).unwrap(), old_data);
    // Without a successor, another branch tops the set up to the width.
    rig.store.retire(BranchId(3), None).unwrap();
    let k = key("containers/topped");
    rig.store
        .put(
            &k,
            &pattern(10_000, 99),
            &policy("mirror:2"),
            &[BranchId(0), BranchId(3)],
        )
        .unwrap();
    let mut ids = branches_of(&rig, &k);
    ids.sort();
    assert_eq!(ids, [BranchId(0), BranchId(2)]);
    // Moving the old shards off empties the retired branch; reinstating
    // it makes it a target again.
    let report = rig
        .store
        .rebuild_onto(BranchId(1), BranchId(2), |_| {})
        .unwrap();
    assert_eq!(report.rebuilt, 1);
    assert!(!branches_of(&rig, &before).contains(&BranchId(1)));
    rig.store.reinstate(BranchId(1));
    assert!(rig.store.branch_ids().contains(&BranchId(1)));
}

#[test]
fn re_adding_a_retired_name_takes_its_id_back() {
    let rig = Rig::new(3);
    rig.store.retire(BranchId(2), None).unwrap();
    let id = rig.store.add_branch(local(&rig, "b2")).unwrap();
    assert_eq!(id, BranchId(2));
    assert!(!rig.store.is_retired(id));
}

#[test]
fn retiring_waits_for_a_put_in_flight() {
    let rig = Rig::new(3);
    rig.controls[1].set(Fault::Slow(Duration::from_millis(300)));
    let store = rig.store.clone();
    let all = rig.all();
    let k = key("containers/slow");
    let writer = {
        let k = k.clone();
        std::thread::spawn(move || {
            store
                .put(&k, &pattern(20_000, 3), &policy("mirror:3"), &all)
                .unwrap()
        })
    };
    // The slow branch counts the write as it starts sleeping in it.
    while rig.controls[1].writes() == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    rig.store.retire(BranchId(1), Some(BranchId(2))).unwrap();
    // The put was placed before the retirement and must be finished (and
    // mapped) by the time `retire` returns, so a rebuild pass sees it.
    // (Checked through the map, not the writer thread: that thread may
    // still be exiting after its put released the layer.)
    assert!(
        rig.store.locate(&k).is_ok(),
        "retire returned while a put to the branch was in flight"
    );
    assert!(branches_of(&rig, &k).contains(&BranchId(1)));
    writer.join().unwrap();
}

#[test]
fn spreading_off_a_branch_balances_over_the_others_and_resumes() {
    let rig = Rig::new(5);
    let all = rig.all();
    let mut stored = Vec::new();
    for i in 0..30 {
        let k = key(&format!("containers/{i:04}"));
        let data = pattern(8_000, i);
        rig.store.put(&k, &data, &policy("mirror:2"), &all).unwrap();
        stored.push((k, data));
    }
    let gone = BranchId(0);
    let on_gone = stored
        .iter()
        .filter(|(k, _)| branches_of(&rig, k).contains(&gone))
        .count();
    assert!(on_gone > 4, "{on_gone}");
    let mut before = [0usize; 5];
    for (k, _) in &stored {
        branches_of(&rig, k)
            .iter()
            .for_each(|id| before[usize::from(id.0)] += 1);
    }
    rig.store.retire(gone, None).unwrap();
    let report = rig.store.spread_off(gone, |_| {}).unwrap();
    assert_eq!(report.rebuilt, on_gone, "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    let mut took = [0usize; 5];
    for (k, data) in &stored {
        let ids = branches_of(&rig, k);
        assert!(!ids.contains(&gone), "{k}: {ids:?}");
        assert_eq!(ids.len(), 2, "{k}: {ids:?}");
        assert_ne!(ids[0], ids[1], "{k}: {ids:?}");
        ids.iter().for_each(|id| took[usize::from(id.0)] += 1);
        assert_eq!(rig.store.get(k).unwrap(), *data);
    }
    // Every other branch took part of the moved shards.
    let before_each = 2 * stored.len() / 4;
    assert!(
        took[1..].iter().all(|&n| n > before_each - on_gone),
        "{took:?}"
    );
    let again = rig.store.spread_off(gone, |_| {}).unwrap();
    assert_eq!((again.rebuilt, again.containers), (0, 0), "{again:?}");
}
