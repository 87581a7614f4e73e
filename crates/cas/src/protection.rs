//! How a stream's containers are protected: a redundancy policy and the
//! branches it may use. The policy types are the redundancy layer's,
//! re-exported by the crate so that callers choosing a protection (`fs`)
//! need not depend on that layer.

pub use redundancy::{BranchId, Policy, PolicyError};

/// The policy a container is stored under and the branches its shards may
/// go to. A store over one plain branch knows only `single` over branch 0.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Protection {
    pub policy: Policy,
    pub branches: Vec<BranchId>,
}

impl Protection {
    /// `single` on the first branch: what a store without a redundancy
    /// layer does.
    pub fn plain() -> Protection {
        Protection {
            policy: Policy::Single,
            branches: vec![BranchId(0)],
        }
    }
}

/// Whether a chunk stored under `have` must be stored again for a stream
/// that asks for `want`: only when `want` is strictly stronger. A weaker
/// request is always served by the stronger copy.
pub fn needs_restore(have: &Policy, want: &Policy) -> bool {
    !have.at_least_as_strong_as(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Policy {
        s.parse().unwrap()
    }

    #[test]
    fn only_a_stronger_request_stores_again() {
        assert!(needs_restore(&p("single"), &p("mirror:2")));
        assert!(needs_restore(&p("mirror:2"), &p("rs:2+2")));
        assert!(!needs_restore(&p("mirror:2"), &p("single")));
        assert!(!needs_restore(&p("mirror:2"), &p("mirror:2")));
        assert!(!needs_restore(&p("rs:4+2"), &p("parity:3")));
        assert!(!needs_restore(&p("stripe:3"), &p("single")));
    }
}
