//! Rebuilding a lost branch onto a new one goes on past a container lost
//! beyond its policy: every other container is rebuilt, the lost one is
//! reported as lost (not as a failure to retry).

mod common;

use common::{key, pattern, policy, Rig};

#[test]
fn rebuild_onto_a_new_branch_goes_on_past_a_lost_container() {
    let rig = Rig::new(5);
    let allowed = &rig.all()[..3];
    let mut kept = Vec::new();
    for i in 0..4 {
        let k = key(&format!("containers/{i:04}"));
        let data = pattern(300_000 + i * 1000, i as u64);
        rig.store
            .put(&k, &data, &policy("parity:2"), allowed)
            .unwrap();
        kept.push((k, data));
    }
    let (old, new) = (rig.all()[0], rig.all()[4]);
    // Branch b0 is gone; one container also lost a block row elsewhere.
    std::fs::remove_dir_all(common::branch_root(rig.dir.path(), 0)).unwrap();
    let (doomed, _) = kept.remove(2);
    let other = (0..3).find(|&i| rig.holder(&doomed, i) != old).unwrap();
    rig.corrupt_block(&doomed, other, 2);
    let report = rig.store.rebuild_onto(old, new, |_| {}).unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.lost.len(), 1, "{report:?}");
    assert_eq!(report.lost[0].0, doomed);
    assert!(report.lost[0].1.contains("cannot be read"), "{report:?}");
    assert_eq!(report.rebuilt, kept.len(), "{report:?}");
    for (k, data) in &kept {
        let placed = rig.store.locate(k).unwrap();
        assert!(placed.shards.iter().all(|s| !s.branches.contains(&old)));
        assert!(rig.store.get(k).unwrap() == *data);
    }
}
