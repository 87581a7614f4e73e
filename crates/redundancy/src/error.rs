use std::fmt;

use branch::BlobKey;

use crate::codec::CodingError;
use crate::members::{BranchId, FaultKind};
use crate::policy::{Policy, PolicyError};

/// Why one shard of a container could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardFault {
    pub index: u16,
    /// The branch it was read from (or written to); `None` when no branch
    /// is known to hold the shard.
    pub branch: Option<String>,
    pub kind: FaultKind,
    pub detail: String,
}

impl fmt::Display for ShardFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.branch {
            Some(b) => write!(
                f,
                "shard {} on {b}: {} ({})",
                self.index, self.kind, self.detail
            ),
            None => write!(f, "shard {}: {}", self.index, self.detail),
        }
    }
}

struct List<'a>(&'a [ShardFault]);

impl fmt::Display for List<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no shard fault was recorded");
        }
        for (i, fault) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{fault}")?;
        }
        Ok(())
    }
}

/// Numbers (ascending) of blocks or rows as "block 3" or "blocks 0-4, 9",
/// at most a few runs of them.
pub(crate) struct Runs<'a>(pub &'static str, pub &'a [u64]);

impl fmt::Display for Runs<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        if self.1.is_empty() {
            return write!(f, "every {}", self.0);
        }
        let runs = crate::read::runs(self.1);
        let plural = if self.1.len() == 1 { "" } else { "s" };
        write!(f, "{}{plural} ", self.0)?;
        for (i, run) in runs.iter().take(SHOWN).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            match run.end - run.start {
                1 => write!(f, "{}", run.start)?,
                _ => write!(f, "{}-{}", run.start, run.end - 1)?,
            }
        }
        if runs.len() > SHOWN {
            write!(f, " and {} more runs", runs.len() - SHOWN)?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("no branch has id {0}")]
    UnknownBranch(BranchId),
    #[error("branch {0:?} is given twice")]
    DuplicateBranch(String),
    #[error("policy {policy} needs {needs} distinct branches but has {has}")]
    NotEnoughBranches {
        policy: Policy,
        needs: usize,
        has: usize,
    },
    #[error(
        "policy {policy} puts parity on branch {branch:?}, which is not among its allowed branches"
    )]
    ParityBranchNotAllowed { policy: Policy, branch: String },
    #[error(
        "policy {0} needs a redundancy layer; this repository stores on one plain \
         branch (configure [[branch]] entries in cairn.toml)"
    )]
    NoRedundancy(Policy),
    /// Asked of a layer in the plain layout, which has one branch and no
    /// shards.
    #[error("this repository stores on one plain branch: it cannot {0}")]
    Plain(&'static str),
    #[error("container {0} not found")]
    NotFound(BlobKey),
    #[error("container {0} already exists; containers are never replaced")]
    Exists(BlobKey),
    #[error("{len} bytes at offset {offset} reach past the end of container {key} ({size} bytes)")]
    OutOfRange {
        key: BlobKey,
        offset: u64,
        len: usize,
        size: u64,
    },
    #[error(
        "container {key} ({policy}) cannot be read: fewer than the {needed} intact blocks \
         a read needs in {} (64 KiB of every shard); lost {}",
        Runs("row", rows),
        List(lost)
    )]
    Unrecoverable {
        key: BlobKey,
        policy: Policy,
        needed: u16,
        /// The block rows (64 KiB of each shard) with too few intact blocks.
        rows: Vec<u64>,
        lost: Vec<ShardFault>,
    },
    #[error("could not {op} container {key} ({policy}): {}", List(failures))]
    Write {
        op: &'static str,
        key: BlobKey,
        policy: Policy,
        failures: Vec<ShardFault>,
    },
    /// Boxed: a branch error is large, and every result of this crate
    /// (and of `cas` and `fs` above it) would carry its size.
    #[error("branch {branch}: {source}")]
    Branch {
        branch: String,
        #[source]
        source: Box<branch::BranchError>,
    },
    #[error("coding container {key}: {source}")]
    Coding {
        key: BlobKey,
        #[source]
        source: CodingError,
    },
}

impl Error {
    /// Whether a write failed only because branches are full: it may work
    /// once space is freed.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Write { failures, .. } => {
                !failures.is_empty() && failures.iter().all(|f| f.kind == FaultKind::Full)
            }
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_never_empty_and_runs_are_short() {
        assert_eq!(List(&[]).to_string(), "no shard fault was recorded");
        assert_eq!(Runs("row", &[]).to_string(), "every row");
        assert_eq!(Runs("block", &[3]).to_string(), "block 3");
        assert_eq!(Runs("row", &[0, 1, 2, 5]).to_string(), "rows 0-2, 5");
        let many: Vec<u64> = (0..40).map(|i| i * 2).collect();
        assert_eq!(
            Runs("block", &many).to_string(),
            "blocks 0, 2, 4, 6, 8, 10, 12, 14 and 32 more runs"
        );
    }
}
