//! Storing several containers at once: each is stored whole or not at
//! all, whatever happens to the others in the batch.

mod common;

use branch::Fault;
use common::{key, pattern, policy, Rig};
use redundancy::{BranchId, PutRequest};

#[test]
fn a_batch_stores_each_container_whole_or_not_at_all() {
    let rig = Rig::new(5);
    let all = rig.all();
    let policies = ["single", "mirror:2", "parity:2", "rs:2+2"];
    let items: Vec<(branch::BlobKey, Vec<u8>, redundancy::Policy)> = (0..24u64)
        .map(|i| {
            (
                key(&format!("containers/{i:04}")),
                pattern(20_000 + 1_000 * i as usize, i),
                policy(policies[i as usize % policies.len()]),
            )
        })
        .collect();
    // Branch 3 refuses every write: containers with a shard there fail.
    rig.controls[3].set(Fault::FailAll);
    let requests: Vec<PutRequest<'_>> = items
        .iter()
        .map(|(k, data, p)| PutRequest {
            key: k,
            data,
            policy: p,
            allowed: &all,
        })
        .collect();
    let results = rig.store.put_many(&requests);
    rig.heal();
    let (mut stored, mut failed) = (0, 0);
    for ((k, data, _), r) in items.iter().zip(&results) {
        match r {
            Ok(placed) => {
                stored += 1;
                assert!(placed.shards.iter().all(|s| s.branches != [BranchId(3)]));
                assert!(rig.store.get(k).unwrap() == *data, "{k}");
            }
            Err(e) => {
                failed += 1;
                assert!(e.to_string().contains("b3"), "{k}: {e}");
                assert!(rig.store.locate(k).is_err(), "{k} is mapped");
                assert!(!rig.store.list("").unwrap().contains(k));
                // No shard of it is left on any branch.
                for id in 0..5u16 {
                    for index in 0..4 {
                        assert!(
                            !rig.shard_file(k, index, BranchId(id)).exists(),
                            "{k}: shard {index} left on b{id}"
                        );
                    }
                }
            }
        }
    }
    assert!(stored > 0 && failed > 0, "{stored} stored, {failed} failed");
    // A fresh process finds exactly the stored ones.
    let again = rig.reopen();
    assert_eq!(again.found.containers, stored);
    assert!(again.found.unreadable.is_empty() && again.found.incomplete.is_empty());
}
