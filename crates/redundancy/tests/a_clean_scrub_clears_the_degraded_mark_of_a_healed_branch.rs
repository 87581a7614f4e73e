//! A branch a read found damaged is degraded until a scrub vouches for
//! it: once scrub has rewritten its bad shard in place, status says it is
//! healthy again; a branch that still refuses the rewrite stays degraded.

mod common;

use branch::Fault;
use common::{key, pattern, policy, Rig};

fn degraded(rig: &Rig) -> Vec<bool> {
    rig.store.status().iter().map(|s| s.degraded).collect()
}

#[test]
fn a_clean_scrub_clears_the_degraded_mark_of_a_healed_branch() {
    let rig = Rig::new(3);
    let k = key("containers/1");
    let data = pattern(300_000, 7);
    rig.store
        .put(&k, &data, &policy("mirror:2"), &rig.all())
        .unwrap();
    let bad = usize::from(rig.holder(&k, 0).0);
    rig.corrupt_file(&k, 0);
    rig.store.set_balancing(false);
    assert!(rig.store.get(&k).unwrap() == data);
    assert!(degraded(&rig)[bad], "{:?}", rig.store.status());

    let summary = rig.store.scrub_all(|_| {});
    assert_eq!(summary.repaired.len(), 1, "{summary:?}");
    assert_eq!(degraded(&rig), vec![false; 3], "{:?}", rig.store.status());

    // A branch that fails every operation cannot take its shard back: the
    // shard goes to the spare branch, and the failing one stays degraded.
    let k2 = key("containers/2");
    rig.store
        .put(&k2, &data, &policy("mirror:2"), &rig.all())
        .unwrap();
    let failing = usize::from(rig.holder(&k2, 0).0);
    rig.controls[failing].set(Fault::FailAll);
    let summary = rig.store.scrub_all(|_| {});
    assert!(summary.lost.is_empty(), "{summary:?}");
    assert!(degraded(&rig)[failing], "{:?}", rig.store.status());
}
