//! Choosing the branches that hold a new container's shards.
//!
//! The choice is a pure function of the key, the policy and the allowed
//! branches, so it needs no state and spreads load: the branch of shard 0
//! (a mirror's first copy, a coded container's first data shard) rotates
//! with a hash of the key.

use crate::error::{Error, Result};
use crate::members::BranchId;
use crate::policy::Policy;
use crate::shard::key_tag;

/// Checks that `allowed` can hold `policy`: every id known, none twice,
/// enough of them, and a fixed parity branch among them. `name` resolves
/// an id to its branch name, `None` for an unknown id.
pub fn validate(
    policy: &Policy,
    allowed: &[BranchId],
    name: impl Fn(BranchId) -> Option<String>,
) -> Result<()> {
    for (i, id) in allowed.iter().enumerate() {
        let n = name(*id).ok_or(Error::UnknownBranch(*id))?;
        if allowed[..i].contains(id) {
            return Err(Error::DuplicateBranch(n));
        }
    }
    if allowed.len() < policy.width() {
        return Err(Error::NotEnoughBranches {
            policy: policy.clone(),
            needs: policy.width(),
            has: allowed.len(),
        });
    }
    if let Some(fixed) = policy.fixed_parity_branch() {
        if !allowed.iter().any(|id| name(*id).as_deref() == Some(fixed)) {
            return Err(Error::ParityBranchNotAllowed {
                policy: policy.clone(),
                branch: fixed.to_string(),
            });
        }
    }
    Ok(())
}

/// The branch for each shard index of container `key`; `allowed` must
/// have passed [`validate`] and `parity_at` is the position in `allowed`
/// of a fixed parity branch.
///
/// - `single`: the first allowed branch.
/// - `stripe:W`: one of the first W allowed branches, by key.
/// - `mirror`, `parity`, `rs`: consecutive allowed branches from a
///   rotating start; a fixed parity branch takes the parity shard and the
///   data shards rotate over the others.
pub fn choose(
    policy: &Policy,
    key: &str,
    allowed: &[BranchId],
    parity_at: Option<usize>,
) -> Vec<BranchId> {
    let spin = u64::from_le_bytes(key_tag(key)) as usize;
    match (policy, parity_at) {
        (Policy::Single, _) => vec![allowed[0]],
        (Policy::Stripe { width }, _) => vec![allowed[spin % usize::from(*width)]],
        (Policy::Parity { data, .. }, Some(p)) => {
            let others: Vec<BranchId> = allowed
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != p)
                .map(|(_, id)| *id)
                .collect();
            let mut ids: Vec<BranchId> = (0..usize::from(*data))
                .map(|i| others[(spin + i) % others.len()])
                .collect();
            ids.push(allowed[p]);
            ids
        }
        _ => (0..usize::from(policy.shard_count()))
            .map(|i| allowed[(spin + i) % allowed.len()])
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMES: [&str; 5] = ["a", "b", "c", "d", "fast"];

    fn ids(n: u16) -> Vec<BranchId> {
        (0..n).map(BranchId).collect()
    }

    fn name(id: BranchId) -> Option<String> {
        NAMES.get(usize::from(id.0)).map(|n| n.to_string())
    }

    fn p(s: &str) -> Policy {
        s.parse().unwrap()
    }

    #[test]
    fn validation_names_the_problem() {
        let err = validate(&p("rs:4+2"), &ids(5), name).unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy rs:4+2 needs 6 distinct branches but has 5"
        );
        let err = validate(&p("mirror:2"), &[BranchId(0), BranchId(0)], name).unwrap_err();
        assert!(matches!(err, Error::DuplicateBranch(n) if n == "a"));
        let err = validate(&p("mirror:2"), &[BranchId(0), BranchId(9)], name).unwrap_err();
        assert!(matches!(err, Error::UnknownBranch(BranchId(9))));
        let err = validate(&p("parity:2@fast"), &ids(3), name).unwrap_err();
        assert!(err.to_string().contains("\"fast\""), "{err}");
        validate(
            &p("parity:2@fast"),
            &[BranchId(4), BranchId(1), BranchId(2)],
            name,
        )
        .unwrap();
        validate(&p("stripe:3"), &ids(5), name).unwrap();
    }

    #[test]
    fn shards_land_on_distinct_branches_and_starts_rotate() {
        for policy in ["mirror:3", "parity:3", "rs:2+2", "parity:3@fast"] {
            let policy = p(policy);
            let parity_at = policy.fixed_parity_branch().map(|_| 4);
            let mut starts = [0usize; 5];
            for n in 0..500 {
                let chosen = choose(&policy, &format!("c/{n}"), &ids(5), parity_at);
                assert_eq!(chosen.len(), usize::from(policy.shard_count()));
                let mut distinct = chosen.clone();
                distinct.sort();
                distinct.dedup();
                assert_eq!(distinct.len(), chosen.len(), "{policy}: {chosen:?}");
                if parity_at.is_some() {
                    assert_eq!(*chosen.last().unwrap(), BranchId(4));
                }
                starts[usize::from(chosen[0].0)] += 1;
            }
            let used: Vec<usize> = starts.iter().copied().filter(|&n| n > 0).collect();
            let expect = if parity_at.is_some() { 4 } else { 5 };
            assert_eq!(used.len(), expect, "{policy}: {starts:?}");
            assert!(
                used.iter().all(|&n| n > 500 / expect / 2),
                "{policy}: {starts:?}"
            );
        }
    }

    #[test]
    fn single_and_stripe() {
        for n in 0..50 {
            let key = format!("c/{n}");
            assert_eq!(choose(&p("single"), &key, &ids(4), None), vec![BranchId(0)]);
            let s = choose(&p("stripe:2"), &key, &ids(4), None);
            assert!(s == [BranchId(0)] || s == [BranchId(1)]);
        }
    }
}
