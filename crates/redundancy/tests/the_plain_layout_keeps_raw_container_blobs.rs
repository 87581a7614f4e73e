//! A layer in the plain layout stores each container as the raw blob it
//! was given, under its own key on its one branch (the layout of a
//! repository without `[[branch]]` entries), reads and lists it back from
//! the branch, calls a missing blob `NotFound` as the sharded layout does,
//! and refuses what one plain branch cannot do.

mod common;

use std::sync::Arc;

use branch::{Branch, LocalDir};
use common::{key, pattern, policy};
use redundancy::{BranchId, Error, PutRequest, Redundant};

#[test]
fn containers_stay_raw_blobs_under_their_own_keys() {
    let dir = tempfile::tempdir().unwrap();
    let (local, _) = LocalDir::open("local", dir.path().join("local")).unwrap();
    let branch: Arc<dyn Branch> = Arc::new(local);
    let layer = Redundant::plain(branch.clone());
    assert!(layer.is_plain());
    let (a, b) = (key("containers/00000/0000000000000001"), key("roots/72/r"));
    let (data_a, data_b) = (pattern(200_000, 3), pattern(32, 9));
    let single = policy("single");
    let only = [BranchId(0)];
    let placed: Vec<_> = layer
        .put_many(&[
            PutRequest {
                key: &a,
                data: &data_a,
                policy: &single,
                allowed: &only,
            },
            PutRequest {
                key: &b,
                data: &data_b,
                policy: &single,
                allowed: &only,
            },
        ])
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(placed[0].shards.len(), 1);
    assert_eq!(placed[0].shards[0].blob, a);
    assert_eq!(placed[0].container_len, data_a.len() as u64);

    // On the branch: the bytes given, no shard header, no `.s0` suffix.
    assert!(branch.get(&a).unwrap() == data_a);
    assert!(branch.get(&b).unwrap() == data_b);
    assert_eq!(branch.list("").unwrap(), vec![a.clone(), b.clone()]);

    assert!(layer.get(&a).unwrap() == data_a);
    assert_eq!(layer.read_range(&a, 1000, 10).unwrap(), &data_a[1000..1010]);
    assert_eq!(layer.size(&a).unwrap(), data_a.len() as u64);
    assert_eq!(layer.list("containers/").unwrap(), vec![a.clone()]);
    assert_eq!(layer.locate(&a).unwrap(), placed[0]);

    layer.delete(&a).unwrap();
    layer.delete(&a).unwrap();
    assert!(matches!(layer.get(&a), Err(Error::NotFound(k)) if k == a));
    assert!(matches!(
        layer.read_range(&a, 0, 1),
        Err(Error::NotFound(_))
    ));
    assert_eq!(branch.list("").unwrap(), vec![b.clone()]);

    // Nothing but `single` on its one branch.
    let err = layer.validate(&policy("mirror:2"), &only).unwrap_err();
    assert!(matches!(err, Error::NoRedundancy(_)), "{err}");
    assert!(
        err.to_string().contains("needs a redundancy layer"),
        "{err}"
    );
    let (other, _) = LocalDir::open("other", dir.path().join("other")).unwrap();
    assert!(matches!(
        layer.add_branch(Arc::new(other)),
        Err(Error::Plain(_))
    ));
    assert!(matches!(
        layer.spread_off(BranchId(0), |_| {}),
        Err(Error::Plain(_))
    ));
    assert_eq!(layer.discover().containers, 0);
    assert!(layer.get(&b).unwrap() == data_b);
}
