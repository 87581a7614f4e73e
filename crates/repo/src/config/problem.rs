//! What is wrong with a `cairn.toml`, as data: the key (with its line when
//! the file holds it), the branch or the rule, and why. The messages are the
//! ones a user reads; the cli prefixes the file's path.

use redundancy::Policy;

use super::validate::MAX_NAME;

/// Why a `cairn.toml` was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigProblem {
    /// Not TOML, an unknown key or a value of the wrong type (toml's own
    /// message, which shows the line).
    #[error("{}", .0.to_string().trim_end())]
    Syntax(Box<toml::de::Error>),
    /// A key's value is out of bounds or does not fit the other keys.
    #[error("{}{section}.{key}: {problem}", line.map(|n| format!("line {n}: ")).unwrap_or_default())]
    Key {
        section: &'static str,
        key: &'static str,
        /// 1-based; `None` when the key is not in the file (its default).
        line: Option<usize>,
        problem: KeyProblem,
    },
    #[error("branch name {0:?} must be 1 to {MAX_NAME} characters of [A-Za-z0-9._-]")]
    BranchName(String),
    #[error("branch {name:?}: {problem}")]
    Branch {
        name: String,
        problem: BranchProblem,
    },
    #[error("branch {0:?} is configured twice")]
    BranchTwice(String),
    #[error("rule {0:?} is configured twice")]
    RuleTwice(String),
    #[error(
        "[[rule]] and [default_rule] choose among branches: configure [[branch]] entries first"
    )]
    RulesWithoutBranches,
    /// `rule` is `rule "NAME"` or `default_rule`.
    #[error("{rule}: {problem}")]
    Rule { rule: String, problem: RuleProblem },
    #[error("chunking rule {rule:?}: {problem}")]
    ChunkingRule {
        rule: String,
        problem: ChunkingRuleProblem,
    },
    #[error("chunking rule {0:?} is configured twice")]
    ChunkingRuleTwice(String),
}

/// Why a `[[chunking.rule]]` was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChunkingRuleProblem {
    #[error("mode: {0}")]
    Mode(#[from] fs::chunkmode::ChunkingError),
    #[error(transparent)]
    Match(#[from] fs::rules::MatchError),
}

#[derive(Debug, thiserror::Error)]
pub enum KeyProblem {
    #[error("only applies to mode = \"{0}\"")]
    OnlyForMode(&'static str),
    #[error("{0} is too large")]
    TooLarge(u64),
    #[error(transparent)]
    Chunking(#[from] chunking::ParamsError),
    #[error("{value} is outside {min}..={max}")]
    OutOfRange { value: i64, min: i64, max: i64 },
    #[error("{0} is outside 4KiB..=4MiB")]
    Region(u64),
    #[error("{0} must be within 64KiB..=1GiB and at least compression.region")]
    ContainerSize(u64),
    #[error("{budget} must be at least 4 containers ({least})")]
    Budget { budget: u64, least: u64 },
    #[error("{0} is over 64KiB")]
    InlineMax(u64),
    #[error("fs.file_dirty must be at least 1MiB and fs.total_dirty at least fs.file_dirty")]
    Dirty,
    #[error("{0} is over a week (604800)")]
    VersionSeconds(u64),
    #[error("is the older name of versions.keep_last: set only keep_last")]
    OlderName,
    #[error("{0} is not an absolute path")]
    CacheDir(String),
    #[error("{0} must be at least 1MiB")]
    CacheAtLeastMiB(u64),
    #[error("{0} is outside 1MiB..=64GiB")]
    CacheMiBToGiB(u64),
    #[error("is required")]
    Required,
    #[error("{0:?} is not an etcd endpoint (http://HOST:PORT or https://HOST:PORT)")]
    EtcdEndpoint(String),
    #[error("must name 1 to {0} etcd endpoints")]
    EtcdCount(usize),
    #[error("{0:?} must be 1 to 64 characters of [A-Za-z0-9._-]")]
    Fsid(String),
}

#[derive(Debug, thiserror::Error)]
pub enum BranchProblem {
    #[error("{0} applies only to kind = \"s3\"")]
    OnlyForS3(&'static str),
    #[error("path applies only to kind = \"local\"")]
    PathOnlyForLocal,
    #[error("a local branch needs path = \"DIRECTORY\"")]
    NeedsPath,
    #[error("an s3 branch needs {0}")]
    S3Needs(&'static str),
    #[error("{0} applies only to kind = \"chunkd\"")]
    OnlyForChunkd(&'static str),
    #[error("a chunkd branch needs {0}")]
    ChunkdNeeds(&'static str),
}

#[derive(Debug, thiserror::Error)]
pub enum RuleProblem {
    #[error("unknown branch or label {0:?}")]
    UnknownBranch(String),
    #[error("branches = [] leaves no branch to store on")]
    NoBranch,
    #[error(transparent)]
    Policy(#[from] redundancy::PolicyError),
    #[error(
        "policy {policy} needs {} distinct branches but may use {} ({})",
        policy.width(),
        allowed.len(),
        allowed.join(", ")
    )]
    TooWide {
        policy: Policy,
        allowed: Vec<String>,
    },
    #[error(
        "policy {policy} puts parity on {:?}, which is not among its branches ({})",
        policy.fixed_parity_branch().unwrap_or_default(),
        allowed.join(", ")
    )]
    ParityElsewhere {
        policy: Policy,
        allowed: Vec<String>,
    },
    #[error(transparent)]
    Match(#[from] fs::rules::MatchError),
}
