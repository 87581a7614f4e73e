//! Every policy reads back exactly after losing as many branches as it
//! tolerates, however they are lost; one more loss is a clear error.

mod common;

use branch::{BlobKey, Fault};
use common::{branch_root, key, pattern, policy, Rig};
use redundancy::{BranchId, Error, FaultKind, Policy};

const BRANCHES: usize = 6;

const POLICIES: &[&str] = &[
    "single",
    "stripe:3",
    "mirror:2",
    "mirror:3",
    "parity:1",
    "parity:3",
    "parity:2@b5",
    "rs:1+1",
    "rs:3+2",
    "rs:2+3",
    "rs:4+1",
];

/// Empty, tiny, odd, block-sized, just past a block, and several blocks.
const SIZES: &[usize] = &[0, 1, 3, 1000, 65_536, 65_537, 200_001, 1 << 20];

#[derive(Debug, Clone, Copy)]
enum Loss {
    /// The branch's directory is removed.
    Deleted,
    /// Every operation fails.
    Errors,
    /// Reads return inverted bytes.
    Garbage,
    /// The shard files on disk are overwritten with other bytes.
    Scribbled,
    /// The storage is gone: nothing found, nothing listed.
    Vanished,
}

const LOSSES: [Loss; 5] = [
    Loss::Deleted,
    Loss::Errors,
    Loss::Garbage,
    Loss::Scribbled,
    Loss::Vanished,
];

fn lose(rig: &Rig, id: BranchId, loss: Loss) {
    let control = &rig.controls[usize::from(id.0)];
    let root = branch_root(rig.dir.path(), usize::from(id.0));
    match loss {
        Loss::Deleted => std::fs::remove_dir_all(root).unwrap(),
        Loss::Errors => control.set(Fault::FailAll),
        Loss::Garbage => control.set(Fault::Garbage),
        Loss::Vanished => control.set(Fault::Vanished),
        Loss::Scribbled => {
            let mut stack = vec![root];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(dir).unwrap() {
                    let path = entry.unwrap().path();
                    if path.is_dir() {
                        stack.push(path);
                    } else {
                        let len = std::fs::metadata(&path).unwrap().len() as usize;
                        std::fs::write(&path, pattern(len, 99)).unwrap();
                    }
                }
            }
        }
    }
}

fn store_all(rig: &Rig, p: &Policy) -> Vec<(BlobKey, Vec<u8>)> {
    SIZES
        .iter()
        .enumerate()
        .map(|(n, &size)| {
            let k = key(&format!("containers/{n:04}"));
            let data = pattern(size, n as u64 + 1);
            rig.store.put(&k, &data, p, &rig.all()).unwrap();
            (k, data)
        })
        .collect()
}

/// Whole reads, and ranges at the start, the end, across block and shard
/// boundaries, all exact.
fn check_all(rig: &Rig, containers: &[(BlobKey, Vec<u8>)], what: &str) {
    for (k, data) in containers {
        let got = rig
            .store
            .get(k)
            .unwrap_or_else(|e| panic!("{what}: get {k}: {e}"));
        assert!(got == *data, "{what}: {k} came back different");
        let len = data.len();
        let mut ranges = vec![
            (0, len),
            (len / 3, len / 3),
            (len.saturating_sub(1), len.min(1)),
        ];
        for edge in [65_536usize, 131_072, len / 2, len / 3, len / 4] {
            if edge >= 7 && edge + 7 <= len {
                ranges.push((edge - 7, 14));
            }
        }
        for (offset, n) in ranges {
            let got = rig
                .store
                .read_range(k, offset as u64, n)
                .unwrap_or_else(|e| panic!("{what}: read {n} at {offset} of {k}: {e}"));
            assert!(
                got == data[offset..offset + n],
                "{what}: {n} bytes at {offset} of {k} came back different"
            );
        }
    }
}

#[test]
fn every_policy_survives_its_tolerance() {
    for (pn, text) in POLICIES.iter().enumerate() {
        let p = policy(text);
        let f = p.tolerance();
        for (ln, loss) in LOSSES.into_iter().enumerate() {
            let rig = Rig::new(BRANCHES);
            let containers = store_all(&rig, &p);
            // f branches of one container, a different container and shard
            // for each case, so losses hit data shards, parity shards and
            // fixed parity branches alike.
            let start = pn + ln;
            let target = &containers[start % containers.len()].0;
            let holders: Vec<BranchId> = rig
                .store
                .locate(target)
                .unwrap()
                .shards
                .iter()
                .map(|s| s.branches[0])
                .collect();
            let lost: Vec<BranchId> = (0..f)
                .map(|i| holders[(start + i) % holders.len()])
                .collect();
            for &id in &lost {
                lose(&rig, id, loss);
            }
            let what = format!("{text} after {loss:?} of {lost:?}");
            check_all(&rig, &containers, &what);
            // The losses were real: a scrub finds them.
            let scrubbed = rig.store.scrub_all(|_| {});
            assert_eq!(scrubbed.containers, SIZES.len());
            assert!(
                f == 0 || scrubbed.healthy < SIZES.len(),
                "{what}: {scrubbed:?}"
            );
        }
    }
}

#[test]
fn reads_with_lost_shards_mark_their_branch_degraded() {
    let rig = Rig::new(4);
    let k = key("containers/1");
    let data = pattern(300_000, 5);
    rig.store
        .put(&k, &data, &policy("rs:2+2"), &rig.all())
        .unwrap();
    let bad = rig.holder(&k, 0);
    rig.controls[usize::from(bad.0)].set(Fault::Garbage);
    assert!(rig.store.get(&k).unwrap() == data);
    for status in rig.store.status() {
        if status.id == bad {
            assert!(status.degraded);
            assert_eq!(status.corrupt, 1);
            let err = status.last_error.unwrap();
            assert!(err.starts_with("containers/1.s0: "), "{err}");
        } else {
            assert!(!status.degraded, "{status:?}");
            assert!(status.read_latency.is_some() || status.reads == 0);
        }
    }
    rig.store.reset_health(bad);
    assert!(!rig.store.status()[usize::from(bad.0)].degraded);
}

#[test]
fn one_loss_too_many_names_the_container_policy_and_shards() {
    for text in POLICIES {
        let p = policy(text);
        let rig = Rig::new(BRANCHES);
        let k = key("containers/00ff");
        rig.store
            .put(&k, &pattern(200_001, 3), &p, &rig.all())
            .unwrap();
        let placed = rig.store.locate(&k).unwrap();
        let holders: Vec<BranchId> = placed.shards.iter().map(|s| s.branches[0]).collect();
        // The first lost branch fails outright; the others vanish.
        for (i, id) in holders.iter().take(p.tolerance() + 1).enumerate() {
            let fault = if i == 0 {
                Fault::FailAll
            } else {
                Fault::Vanished
            };
            rig.controls[usize::from(id.0)].set(fault);
        }
        for err in [
            rig.store.get(&k).unwrap_err(),
            rig.store.read_range(&k, 100, 10).unwrap_err(),
        ] {
            let msg = err.to_string();
            assert!(msg.contains("containers/00ff"), "{msg}");
            assert!(msg.contains(&format!("({text})")), "{msg}");
            let first = rig.store.branch_name(holders[0]).unwrap();
            assert!(msg.contains(&format!("on {first}: unavailable")), "{msg}");
            assert!(msg.contains("injected fault"), "{msg}");
            match err {
                Error::Unrecoverable {
                    policy,
                    lost,
                    needed,
                    ..
                } => {
                    assert_eq!(policy, p);
                    assert_eq!(needed, p.data_shards());
                    assert!(lost.iter().any(|f| f.kind == FaultKind::Unavailable));
                    if p.tolerance() > 0 {
                        assert!(lost.iter().any(|f| f.kind == FaultKind::Missing), "{msg}");
                    }
                }
                other => panic!("{text}: {other}"),
            }
        }
    }
}

#[test]
fn a_failed_put_leaves_nothing_behind() {
    let rig = Rig::new(3);
    rig.controls[2].set(Fault::FailAll);
    let k = key("containers/1");
    let err = rig
        .store
        .put(&k, &pattern(1000, 1), &policy("mirror:3"), &rig.all())
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("could not store container containers/1 (mirror:3)"),
        "{msg}"
    );
    assert!(msg.contains("on b2"), "{msg}");
    assert!(matches!(rig.store.get(&k), Err(Error::NotFound(_))));
    rig.heal();
    let reopened = rig.reopen();
    assert_eq!(reopened.found.shards, 0, "shards were left behind");
    rig.store
        .put(&k, &pattern(1000, 1), &policy("mirror:3"), &rig.all())
        .unwrap();
    let again = rig
        .store
        .put(&k, b"x", &policy("single"), &rig.all())
        .unwrap_err();
    assert!(matches!(again, Error::Exists(_)), "{again}");
}

#[test]
fn a_policy_wider_than_its_branches_is_refused() {
    let rig = Rig::new(3);
    let err = rig
        .store
        .put(&key("c"), b"x", &policy("rs:3+1"), &rig.all())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy rs:3+1 needs 4 distinct branches but has 3"
    );
    let err = rig
        .store
        .put(&key("c"), b"x", &policy("parity:1@fast"), &rig.all())
        .unwrap_err();
    assert!(err.to_string().contains("\"fast\""), "{err}");
}
