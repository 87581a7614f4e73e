//! Where shards live is recoverable from the branches alone.

mod common;

use branch::{Branch, Fault, LocalDir};
use common::{branch_root, key, pattern, policy, Rig};
use redundancy::{BranchId, Error};

const POLICIES: &[&str] = &["single", "stripe:2", "mirror:3", "parity:2@b4", "rs:2+2"];

#[test]
fn a_fresh_process_finds_every_container_where_it_was() {
    let rig = Rig::new(5);
    let mut shards = 0;
    for (i, text) in POLICIES.iter().enumerate() {
        for j in 0..3 {
            let k = key(&format!("containers/{i}/{j}"));
            let placed = rig
                .store
                .put(
                    &k,
                    &pattern(j * 70_000, i as u64),
                    &policy(text),
                    &rig.all(),
                )
                .unwrap();
            shards += placed.shards.len();
        }
    }
    let (foreign, _) = LocalDir::open("raw", branch_root(rig.dir.path(), 0)).unwrap();
    foreign.put(&key("notes/readme"), b"not a shard").unwrap();

    let fresh = rig.reopen();
    let found = &fresh.found;
    assert_eq!(found.containers, POLICIES.len() * 3);
    assert_eq!(found.shards, shards);
    assert_eq!(found.ignored, 1);
    assert!(
        found.incomplete.is_empty() && found.unreadable.is_empty(),
        "{found:?}"
    );
    assert!(
        found.bad_shards.is_empty() && found.unlisted.is_empty(),
        "{found:?}"
    );
    assert_eq!(fresh.store.list("").unwrap(), rig.store.list("").unwrap());
    for k in rig.store.list("").unwrap() {
        assert_eq!(
            fresh.store.locate(&k).unwrap(),
            rig.store.locate(&k).unwrap()
        );
        assert!(fresh.store.get(&k).unwrap() == rig.store.get(&k).unwrap());
    }
    assert_eq!(fresh.store.list("containers/4/").unwrap().len(), 3);
}

#[test]
fn bad_headers_and_missing_shards_are_reported() {
    let rig = Rig::new(4);
    let all = rig.all();
    let (healthy, damaged, lost) = (key("c/healthy"), key("c/damaged"), key("c/lost"));
    for k in [&healthy, &damaged, &lost] {
        rig.store
            .put(k, &pattern(100_000, 1), &policy("rs:2+1"), &all)
            .unwrap();
    }
    // One shard's header garbled: still readable from the other two.
    let garbled = rig.shard_file(&damaged, 1, rig.holder(&damaged, 1));
    let mut bytes = std::fs::read(&garbled).unwrap();
    bytes[10] ^= 0xff;
    std::fs::write(&garbled, bytes).unwrap();
    // Two of three shards gone: known, but not readable.
    for i in [0, 2] {
        std::fs::remove_file(rig.shard_file(&lost, i, rig.holder(&lost, i))).unwrap();
    }

    let fresh = rig.reopen();
    let found = &fresh.found;
    assert_eq!(found.containers, 3);
    assert_eq!(found.incomplete, vec![damaged.clone()]);
    assert_eq!(found.bad_shards.len(), 1, "{found:?}");
    assert!(found.bad_shards[0].2.contains("checksum"), "{found:?}");
    assert_eq!(found.unreadable.len(), 1);
    assert_eq!(found.unreadable[0].0, lost);
    assert!(
        found.unreadable[0]
            .1
            .contains("1 intact shards, rs:2+1 needs 2"),
        "{found:?}"
    );

    assert!(fresh.store.get(&damaged).unwrap() == pattern(100_000, 1));
    let err = fresh.store.get(&lost).unwrap_err();
    assert!(matches!(err, Error::Unrecoverable { .. }), "{err}");
    assert!(
        err.to_string().contains("no branch is known to hold it"),
        "{err}"
    );
    // The garbled shard is scrubbed back into shape.
    let report = fresh.store.scrub(&damaged).unwrap();
    assert_eq!(report.repaired.len(), 1, "{report:?}");
    assert!(rig.reopen().found.incomplete.is_empty());
}

#[test]
fn a_container_with_no_valid_header_is_left_out() {
    let rig = Rig::new(2);
    let k = key("c/1");
    rig.store
        .put(&k, b"payload", &policy("mirror:2"), &rig.all())
        .unwrap();
    for i in 0..2 {
        let path = rig.shard_file(&k, i, rig.holder(&k, i));
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        std::fs::write(&path, vec![0u8; len]).unwrap();
    }
    let fresh = rig.reopen();
    assert_eq!(fresh.found.containers, 0);
    assert_eq!(fresh.found.bad_shards.len(), 2);
    assert_eq!(fresh.found.unreadable.len(), 1, "{:?}", fresh.found);
    assert!(matches!(fresh.store.get(&k), Err(Error::NotFound(_))));
}

#[test]
fn a_branch_that_cannot_be_listed_is_reported_and_the_rest_found() {
    let rig = Rig::new(3);
    let k = key("c/1");
    let data = pattern(150_000, 2);
    rig.store
        .put(&k, &data, &policy("parity:2"), &rig.all())
        .unwrap();
    rig.controls[1].set(Fault::FailAll);
    let found = rig.store.discover();
    assert_eq!(found.unlisted.len(), 1);
    assert_eq!(found.unlisted[0].0, BranchId(1));
    assert_eq!(found.incomplete, vec![k.clone()]);
    assert!(rig.store.status()[1].degraded);
    assert!(rig.store.get(&k).unwrap() == data);
}
