//! Redundancy policies: how one container is laid out over branches.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use reed_solomon_simd::ReedSolomonEncoder;

/// How one container is stored. The text form, parsed by [`FromStr`] and
/// printed by [`fmt::Display`]:
///
/// | text | layout | survives |
/// |---|---|---|
/// | `single` | one copy on the first allowed branch | nothing |
/// | `mirror:N` | N full copies on N distinct branches, N >= 2 | N-1 losses |
/// | `stripe:W` | one copy on one of the first W allowed branches, chosen by key, W >= 2 | nothing |
/// | `parity:K` | K data shards + 1 XOR parity shard on K+1 distinct branches; which branch holds the parity rotates with the key | 1 loss |
/// | `parity:K@NAME` | as `parity:K`, with every parity shard on the branch named NAME (a fast branch, say) | 1 loss |
/// | `rs:K+M` | K data shards + M Reed-Solomon shards on K+M distinct branches | M losses |
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Policy {
    Single,
    Mirror {
        copies: u16,
    },
    Stripe {
        width: u16,
    },
    Parity {
        data: u16,
        parity_branch: Option<String>,
    },
    ReedSolomon {
        data: u16,
        parity: u16,
    },
}

/// How a policy turns a container into shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coding {
    /// Every shard is the whole container.
    Copies,
    /// K data shards and their XOR.
    Xor,
    /// K data shards and M Reed-Solomon recovery shards.
    ReedSolomon,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid redundancy policy {input:?}: {reason}")]
pub struct PolicyError {
    pub input: String,
    pub reason: PolicyProblem,
}

/// What is wrong with a policy's text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyProblem {
    #[error("{0:?} is not a number; {SYNTAX}")]
    NotANumber(String),
    #[error("{0} is too large (at most {max})", max = u16::MAX)]
    TooLarge(String),
    #[error("{0}")]
    TooSmall(Count),
    #[error("{0} data shards leave no room for the parity shard")]
    NoRoomForParity(u16),
    #[error("rs takes K+M (data + parity shards), got {0:?}")]
    NotKPlusM(String),
    #[error("Reed-Solomon cannot code {data} data with {parity} parity shards")]
    Uncodable { data: u16, parity: u16 },
    #[error("parity branch {0:?} must be 1 to {MAX_BRANCH_NAME} characters of [A-Za-z0-9._-]")]
    BadBranchName(String),
    #[error("{SYNTAX}")]
    Syntax,
}

/// A count in a policy below its least value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    MirrorCopies,
    StripeWidth,
    ParityData,
    RsData,
    RsParity,
}

impl Count {
    fn min(self) -> u16 {
        match self {
            Count::MirrorCopies | Count::StripeWidth => 2,
            Count::ParityData | Count::RsData | Count::RsParity => 1,
        }
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Count::MirrorCopies => "a mirror keeps at least 2 copies; use single for one",
            Count::StripeWidth => "a stripe spans at least 2 branches; use single for one",
            Count::ParityData => "parity needs at least 1 data shard",
            Count::RsData => "rs needs at least 1 data shard",
            Count::RsParity => "rs needs at least 1 parity shard; use single for none",
        })
    }
}

const SYNTAX: &str = "expected single, mirror:N, stripe:W, parity:K, parity:K@BRANCH or rs:K+M";

/// Longest branch name a `parity:K@NAME` policy may fix; keeps the policy
/// text short enough for a shard header.
pub const MAX_BRANCH_NAME: usize = 64;

impl Policy {
    pub(crate) fn coding(&self) -> Coding {
        match self {
            Policy::Single | Policy::Mirror { .. } | Policy::Stripe { .. } => Coding::Copies,
            Policy::Parity { .. } => Coding::Xor,
            Policy::ReedSolomon { .. } => Coding::ReedSolomon,
        }
    }

    /// Shards needed to read the container back (K); 1 for copies.
    pub fn data_shards(&self) -> u16 {
        match self {
            Policy::Single | Policy::Mirror { .. } | Policy::Stripe { .. } => 1,
            Policy::Parity { data, .. } | Policy::ReedSolomon { data, .. } => *data,
        }
    }

    /// Shards written per container.
    pub fn shard_count(&self) -> u16 {
        match self {
            Policy::Single | Policy::Stripe { .. } => 1,
            Policy::Mirror { copies } => *copies,
            Policy::Parity { data, .. } => data + 1,
            Policy::ReedSolomon { data, parity } => data + parity,
        }
    }

    /// How many of a container's branches may be lost (or return garbage)
    /// with the container still readable.
    pub fn tolerance(&self) -> usize {
        usize::from(self.shard_count() - self.data_shards())
    }

    /// How many allowed branches the policy needs.
    pub fn width(&self) -> usize {
        match self {
            Policy::Stripe { width } => usize::from(*width),
            _ => usize::from(self.shard_count()),
        }
    }

    /// The branch every parity shard goes to, for `parity:K@NAME`.
    pub fn fixed_parity_branch(&self) -> Option<&str> {
        match self {
            Policy::Parity {
                parity_branch: Some(name),
                ..
            } => Some(name),
            _ => None,
        }
    }

    pub fn strength(&self) -> Strength {
        Strength {
            tolerance: self.tolerance(),
            shards: self.shard_count(),
            data: self.data_shards(),
        }
    }

    /// Whether this policy protects a container at least as well as
    /// `other`: it survives as many losses, and at equal tolerance it stores
    /// at least as much redundancy per byte.
    pub fn at_least_as_strong_as(&self, other: &Policy) -> bool {
        self.strength() >= other.strength()
    }
}

/// A policy's protection, ordered by tolerance first and then by stored
/// bytes per container byte (`mirror:3` > `rs:2+2` > `mirror:2` >
/// `parity:4` > `single`).
#[derive(Debug, Clone, Copy)]
pub struct Strength {
    pub tolerance: usize,
    shards: u16,
    data: u16,
}

impl Ord for Strength {
    fn cmp(&self, other: &Self) -> Ordering {
        let ratio = |a: &Strength, b: &Strength| u32::from(a.shards) * u32::from(b.data);
        self.tolerance
            .cmp(&other.tolerance)
            .then_with(|| ratio(self, other).cmp(&ratio(other, self)))
    }
}

impl PartialOrd for Strength {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Strength {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Strength {}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::Single => f.write_str("single"),
            Policy::Mirror { copies } => write!(f, "mirror:{copies}"),
            Policy::Stripe { width } => write!(f, "stripe:{width}"),
            Policy::Parity {
                data,
                parity_branch: None,
            } => write!(f, "parity:{data}"),
            Policy::Parity {
                data,
                parity_branch: Some(name),
            } => write!(f, "parity:{data}@{name}"),
            Policy::ReedSolomon { data, parity } => write!(f, "rs:{data}+{parity}"),
        }
    }
}

impl FromStr for Policy {
    type Err = PolicyError;

    fn from_str(input: &str) -> Result<Self, PolicyError> {
        parse(input).map_err(|reason| PolicyError {
            input: input.to_string(),
            reason,
        })
    }
}

fn parse(input: &str) -> Result<Policy, PolicyProblem> {
    let (kind, arg) = input.split_once(':').unwrap_or((input, ""));
    let policy = match (kind, arg) {
        ("single", "") => Policy::Single,
        ("mirror", n) => Policy::Mirror {
            copies: count(n, Count::MirrorCopies)?,
        },
        ("stripe", w) => Policy::Stripe {
            width: count(w, Count::StripeWidth)?,
        },
        ("parity", arg) => {
            let (k, name) = match arg.split_once('@') {
                Some((k, name)) => (k, Some(branch_name(name)?)),
                None => (arg, None),
            };
            let data = count(k, Count::ParityData)?;
            if data == u16::MAX {
                return Err(PolicyProblem::NoRoomForParity(data));
            }
            Policy::Parity {
                data,
                parity_branch: name,
            }
        }
        ("rs", arg) => {
            let (k, m) = arg
                .split_once('+')
                .ok_or_else(|| PolicyProblem::NotKPlusM(arg.to_owned()))?;
            let data = count(k, Count::RsData)?;
            let parity = count(m, Count::RsParity)?;
            let fits = u32::from(data) + u32::from(parity) <= u32::from(u16::MAX);
            if !fits || !ReedSolomonEncoder::supports(data.into(), parity.into()) {
                return Err(PolicyProblem::Uncodable { data, parity });
            }
            Policy::ReedSolomon { data, parity }
        }
        _ => return Err(PolicyProblem::Syntax),
    };
    Ok(policy)
}

fn count(text: &str, what: Count) -> Result<u16, PolicyProblem> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PolicyProblem::NotANumber(text.to_owned()));
    }
    let n: u16 = text
        .parse()
        .map_err(|_| PolicyProblem::TooLarge(text.to_owned()))?;
    if n < what.min() {
        return Err(PolicyProblem::TooSmall(what));
    }
    Ok(n)
}

fn branch_name(name: &str) -> Result<String, PolicyProblem> {
    let valid = !name.is_empty()
        && name.len() <= MAX_BRANCH_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if valid {
        Ok(name.to_string())
    } else {
        Err(PolicyProblem::BadBranchName(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Policy {
        s.parse().unwrap()
    }

    #[test]
    fn text_round_trips() {
        for s in [
            "single",
            "mirror:2",
            "mirror:5",
            "stripe:3",
            "parity:4",
            "parity:2@fast-ssd",
            "rs:1+1",
            "rs:10+4",
        ] {
            assert_eq!(p(s).to_string(), s);
        }
    }

    #[test]
    fn bad_text_says_what_is_wrong() {
        let cases = [
            ("raid5", "expected single"),
            ("mirror:1", "use single"),
            ("mirror:", "not a number"),
            ("mirror:+2", "not a number"),
            ("stripe:1", "use single"),
            ("parity:0", "at least 1 data shard"),
            ("parity:3@", "parity branch"),
            ("parity:3@a/b", "parity branch"),
            ("rs:4", "K+M"),
            ("rs:4+0", "at least 1 parity"),
            ("rs:70000+1", "too large"),
            ("rs:40000+40000", "cannot code"),
            ("single:2", "expected single"),
        ];
        for (input, want) in cases {
            let err = input.parse::<Policy>().unwrap_err();
            assert_eq!(err.input, input);
            assert!(err.to_string().contains(want), "{input}: {err}");
        }
    }

    #[test]
    fn tolerance_and_width() {
        let cases = [
            ("single", 0, 1),
            ("mirror:3", 2, 3),
            ("stripe:4", 0, 4),
            ("parity:4", 1, 5),
            ("parity:4@x", 1, 5),
            ("rs:6+3", 3, 9),
        ];
        for (s, tolerance, width) in cases {
            assert_eq!(p(s).tolerance(), tolerance, "{s}");
            assert_eq!(p(s).width(), width, "{s}");
        }
    }

    #[test]
    fn strength_orders_by_tolerance_then_overhead() {
        let order = [
            "single", "parity:4", "mirror:2", "rs:4+2", "rs:2+2", "mirror:3",
        ];
        for pair in order.windows(2) {
            let (weak, strong) = (p(pair[0]), p(pair[1]));
            assert!(strong.at_least_as_strong_as(&weak), "{strong} >= {weak}");
            assert!(!weak.at_least_as_strong_as(&strong), "{weak} < {strong}");
        }
        assert!(p("stripe:4").at_least_as_strong_as(&p("single")));
        assert!(p("single").at_least_as_strong_as(&p("stripe:4")));
        assert_eq!(p("mirror:2").strength(), p("rs:1+1").strength());
        assert!(p("parity:4@fast").at_least_as_strong_as(&p("parity:4")));
    }
}
