//! What a policy can still store over its branches, for `statfs`.
//!
//! A container under a policy puts `shard_count` shards of equal size on
//! as many distinct branches (one shard on one of them for a stripe), and
//! `data_shards` of them carry data. With `c` bytes of shards per branch at
//! most, the branches take `sum(min(avail_i, c))` bytes of shards, which
//! must cover `shard_count * c`; the largest such `c` times `data_shards`
//! is the data the policy can still place. Branches on one disk each count
//! that disk's space: the figure is an upper bound there.

use branch::Space;

use crate::policy::Policy;

/// The data bytes `policy` can place given each branch's bytes.
fn placeable(policy: &Policy, per_branch: &[u64]) -> u64 {
    let shards = u64::from(match policy {
        // One shard per container, on any one of the branches.
        Policy::Stripe { .. } | Policy::Single => 1,
        _ => policy.shard_count(),
    });
    if (per_branch.len() as u64) < shards || shards == 0 {
        return 0;
    }
    let fits = |c: u64| {
        let held: u128 = per_branch.iter().map(|&a| u128::from(a.min(c))).sum();
        held >= u128::from(shards) * u128::from(c)
    };
    let (mut lo, mut hi) = (0u64, per_branch.iter().copied().max().unwrap_or(0));
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let per_shard_total = if shards == 1 {
        per_branch.iter().sum::<u64>()
    } else {
        lo
    };
    per_shard_total.saturating_mul(u64::from(policy.data_shards()))
}

/// What `policy` can store over branches of `spaces`: `None` when any
/// branch cannot tell (an object store).
pub(crate) fn of_policy(policy: &Policy, spaces: &[Option<Space>]) -> Option<Space> {
    let known: Option<Vec<Space>> = spaces.iter().copied().collect();
    let known = known?;
    let totals: Vec<u64> = known.iter().map(|s| s.total).collect();
    let available: Vec<u64> = known.iter().map(|s| s.available).collect();
    Some(Space {
        total: placeable(policy, &totals),
        available: placeable(policy, &available),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Policy {
        s.parse().unwrap()
    }

    #[test]
    fn each_policy_places_what_its_shards_allow() {
        assert_eq!(placeable(&p("single"), &[100]), 100);
        assert_eq!(placeable(&p("mirror:2"), &[100, 60]), 60);
        assert_eq!(placeable(&p("mirror:2"), &[100, 60, 40]), 100);
        assert_eq!(placeable(&p("stripe:3"), &[10, 20, 30]), 60);
        assert_eq!(placeable(&p("rs:4+2"), &[10; 6]), 40);
        assert_eq!(placeable(&p("rs:4+2"), &[10, 10, 10, 10, 10, 0]), 0);
        assert_eq!(placeable(&p("mirror:3"), &[10, 10]), 0);
    }

    #[test]
    fn an_unknown_branch_makes_the_space_unknown() {
        let s = Space {
            total: 10,
            available: 5,
        };
        assert_eq!(of_policy(&p("mirror:2"), &[Some(s), None]), None);
        assert_eq!(
            of_policy(&p("mirror:2"), &[Some(s), Some(s)]),
            Some(Space {
                total: 10,
                available: 5
            })
        );
    }
}
