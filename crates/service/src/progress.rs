//! How a long operation tells its caller how far it is, and learns that the
//! caller went away.

use serde::{Deserialize, Serialize};

/// Where progress goes: the CLI's bar, the control socket's progress lines,
/// a dashboard. Called from the operation's threads.
pub trait Progress: Sync {
    /// `done` of `total` steps of `what`; a `total` of 0 means unknown.
    fn step(&self, what: &str, done: u64, total: u64);

    /// Whether the caller stopped waiting for the answer.
    fn cancelled(&self) -> bool {
        false
    }
}

/// No progress shown, never cancelled.
pub struct Silent;

impl Progress for Silent {
    fn step(&self, _: &str, _: u64, _: u64) {}
}

/// One step of a long operation, as the control socket carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub what: String,
    pub done: u64,
    /// 0 while the total is not known.
    pub total: u64,
}
