//! `cairn.toml`: what a user may tune, with errors that name the key and line.
//! Its shape as serde reads it is `schema`; what the values mean, and the
//! settings they become, `validate`; why a file is refused, `problem`.

mod problem;
mod schema;
mod validate;

use std::path::{Path, PathBuf};

use cas::StoreSettings;
use chunking::ChunkerParams;
use fs::FsSettings;
use redundancy::Policy;

pub use problem::{BranchProblem, ChunkingRuleProblem, ConfigProblem, KeyProblem, RuleProblem};

/// The settings of a repository, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub chunking: ChunkerParams,
    pub store: StoreSettings,
    pub fs: FsSettings,
    /// `memory.metadata_cache`: bytes of the metadata engine's page cache
    /// (`meta::RedbMeta::open_cached`).
    pub metadata_cache: usize,
    /// `fs.page_cache_max`: files larger than this are read around the
    /// kernel's page cache (see `fuse::MountOptions::page_cache_max`).
    pub page_cache_max: u64,
    /// `fs.writeback_cache`: the kernel's writeback cache for the mount
    /// (see `fuse::MountOptions::writeback_cache`).
    pub writeback_cache: bool,
    /// `fs.kernel_dirty`: bytes of written data the kernel may hold for the
    /// mount before it slows writers down (see
    /// `fuse::MountOptions::kernel_dirty`); 0 keeps the kernel's default.
    pub kernel_dirty: u64,
    /// `[gc]`: when a mount's daemon collects garbage by itself.
    pub auto_gc: AutoGc,
    /// The `[[branch]]`, `[[rule]]` and `[default_rule]` sections; `None`
    /// when no branch is configured (one plain local branch, `single`).
    pub redundancy: Option<RedundancyConfig>,
    /// The `[[chunking.rule]]` sections choosing a file's chunking mode;
    /// `None` when there are none (the built-in rules apply:
    /// [`fs::rules::default_chunking_rules`]).
    pub chunking_rules: Option<Vec<ChunkingRuleSpec>>,
    /// `[shared_index]`: the fingerprint index the clients of a file
    /// system share; `None`: they find each other's chunks on the branches
    /// (`cas::CatchUp`).
    pub shared_index: Option<SharedIndexConfig>,
}

impl Config {
    /// What the mount daemon's memory is held to: the sum of its budgets
    /// (`memory.budget`, `fs.total_dirty`, `fs.cache`,
    /// `memory.metadata_cache`, `memory.index_cache`; docs/file-system.md,
    /// "Memory").
    pub fn memory_limit(&self) -> u64 {
        [
            self.store.memory_budget,
            self.fs.total_dirty_max,
            self.fs.cache_bytes,
            self.metadata_cache,
            self.store.index_cache,
        ]
        .iter()
        .map(|&b| b as u64)
        .sum()
    }
}

/// When a mount's daemon starts a collection by itself (`[gc]`; the
/// daemon's side is `service::autogc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoGc {
    /// `gc.auto_after`: bytes files gave up (`fs::Fs::released_bytes`)
    /// since the last collection that start the next one (and at least an
    /// eighth of what the store held after it, so that the cost of marking
    /// stays in proportion to what changed); 0 turns this off. (The store
    /// growing is no trigger: new data is not garbage.)
    pub after: u64,
    /// `gc.auto_check_seconds`: how often the figures are looked at.
    pub check: std::time::Duration,
    /// `gc.keep_free_percent`: when the space the store can still take
    /// falls under this share of its capacity, the oldest automatic
    /// versions are dropped, one per check, and garbage collected; 0 turns
    /// this off.
    pub keep_free_percent: u8,
}

impl Default for AutoGc {
    fn default() -> Self {
        AutoGc {
            after: 8 << 20,
            check: std::time::Duration::from_secs(5),
            keep_free_percent: 5,
        }
    }
}

impl AutoGc {
    /// Whether the next collection is due: the store held `base` bytes
    /// after the last collection, and files gave up `released` bytes since.
    pub fn due(&self, base: u64, released: u64) -> bool {
        self.after > 0 && released >= self.after.max(base / 8)
    }

    /// Whether `space` is low enough to thin versions.
    pub fn space_low(&self, space: &cas::Space) -> bool {
        space.available < space.total / 100 * u64::from(self.keep_free_percent)
    }
}

/// `[shared_index] kind = "chunkd"`: the range table of file system
/// `fsid` in etcd, and the chunkds' token (a relative path is taken from
/// the repository root).
#[derive(Debug, Clone, PartialEq)]
pub struct SharedIndexConfig {
    pub etcd: Vec<String>,
    pub fsid: String,
    pub token_file: PathBuf,
}

/// One `[[chunking.rule]]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkingRuleSpec {
    pub name: String,
    pub path: Option<String>,
    pub extensions: Vec<String>,
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    pub chunking: fs::chunkmode::Chunking,
}

impl ChunkingRuleSpec {
    pub fn rule(&self) -> Result<fs::rules::ChunkingRule, fs::rules::MatchError> {
        Ok(fs::rules::ChunkingRule {
            name: self.name.clone(),
            matcher: fs::rules::Match::new(
                self.path.as_deref(),
                &self.extensions,
                self.min_size,
                self.max_size,
                None,
            )?,
            chunking: self.chunking,
        })
    }
}

/// Branches and the rules choosing a policy over them, validated: every
/// rule names known branches or labels, and each policy fits its branches.
#[derive(Debug, Clone, PartialEq)]
pub struct RedundancyConfig {
    pub branches: Vec<BranchSpec>,
    /// In the order they are matched.
    pub rules: Vec<RuleSpec>,
    /// Applies when no rule matches; its match fields are empty.
    pub default: RuleSpec,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BranchSpec {
    pub name: String,
    pub location: Location,
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    /// A directory; a relative path is taken from the repository root.
    Local(PathBuf),
    S3(S3Location),
    /// A directory another machine serves with `cairn chunkd`.
    Chunkd(ChunkdLocation),
}

/// A `cairn chunkd` and the file holding its token; a relative path is
/// taken from the repository root.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkdLocation {
    pub url: String,
    pub token_file: PathBuf,
}

#[derive(Debug, Clone, PartialEq)]
pub struct S3Location {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// One rule: what it matches, its policy, and the branches (by name) its
/// containers may use.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    pub name: String,
    pub path: Option<String>,
    pub extensions: Vec<String>,
    pub min_size: Option<u64>,
    pub max_size: Option<u64>,
    pub uid: Option<u32>,
    pub policy: Policy,
    pub branches: Vec<String>,
}

impl RuleSpec {
    pub fn matcher(&self) -> Result<fs::rules::Match, fs::rules::MatchError> {
        fs::rules::Match::new(
            self.path.as_deref(),
            &self.extensions,
            self.min_size,
            self.max_size,
            self.uid,
        )
    }
}

/// A `cairn.toml` that cannot be read or is refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {problem}", path.display())]
    Refused {
        path: PathBuf,
        problem: Box<ConfigProblem>,
    },
}

/// Default `fs.page_cache_max`: files a tree of sources or documents is made
/// of stay in the page cache; media, images and archives stream past it.
pub const PAGE_CACHE_MAX: u64 = 16 << 20;

/// Default `fs.kernel_dirty`: the kernel may hold a gibibyte of a mount's
/// written pages (the whole working set of a random-write job on a VM
/// image or database) instead of FUSE's default of about 1% of its dirty
/// limit, which throttles random writers to one FUSE write per page.
pub const KERNEL_DIRTY: u64 = 1 << 30;

/// The file `cairn init` writes: every setting with its default, explained.
pub const DEFAULT_TOML: &str = r#"# cairn repository settings. Sizes take B, KiB, MiB or GiB ("64KiB") or a
# plain number of bytes. Changing chunking or compression affects only data
# stored afterwards; everything already stored stays readable.

[chunking]
# "cdc": content-defined chunking (FastCDC), so an insert shifts few chunks.
# "fixed": cut every `size` bytes, for block-aligned files (VM images).
mode = "cdc"
min = "16KiB"
avg = "64KiB"
max = "256KiB"
# size = "64KiB"    # only for mode = "fixed"
#
# Per file, a file's user.cairn.chunking xattr ("fixed:16K" or "cdc",
# inherited by files created in a directory that has one) wins; else the
# first [[chunking.rule]] that matches (path glob, extension, min_size,
# max_size); else a file starts content-defined and switches to fixed 4K
# blocks (recorded in its xattr) once it is over 16MiB and written at
# random, or over 1MiB and its overwrites re-store much more than they
# write. Fixed blocks make an aligned overwrite store only the blocks it
# covers. Without any [[chunking.rule]], this one applies:
# [[chunking.rule]]
# name = "images and databases"
# extension = ["img", "qcow2", "vmdk", "raw", "vdi", "vhd", "vhdx", "db",
#              "sqlite", "sqlite3", "mdb", "ibd", "ldb"]
# mode = "fixed:4K"

[compression]
# "zstd", "lz4" or "none". A region that does not shrink is stored raw.
codec = "zstd"
level = 2           # zstd level, 1 (fast) to 19 (small)
region = "1MiB"     # raw bytes of consecutive chunks compressed together

[containers]
size = "4MiB"       # containers are sealed and written at about this size

[memory]
# What the mount daemon's memory is made of, each part bounded here or in
# [fs] (cache, total_dirty); see docs/file-system.md, "Memory".
budget = "256MiB"   # data in flight (chunked, compressing, unwritten) at once
metadata_cache = "64MiB" # the metadata engine's page cache (fs.redb)
index_cache = "32MiB"    # the chunk index's page caches (index.redb, roots.redb)

[qos]
# Storage reads in flight at once, and each kind's weight while kinds
# compete: a random reader's misses, sequential streams (with their
# read-ahead), background work (gc, check). A kind alone uses every read.
reads = 8
random = 8
sequential = 2
background = 1

[fs]
inline_max = "16KiB"    # files up to this size live in their inode (one read, no container)
file_dirty = "32MiB"    # written bytes one file buffers before writing them behind
total_dirty = "256MiB"  # written bytes all files together buffer
readahead = "32MiB"     # how far ahead of a sequential reader chunks are fetched
cache = "256MiB"        # DRAM cache of chunks
page_cache_max = "16MiB" # bigger files are read around the kernel's page cache (one copy less)
writeback_cache = true  # the kernel merges small writes in its page cache (fsync and close still write through)
kernel_dirty = "1GiB"   # written pages the kernel may hold for the mount before writers wait (needs root; 0: the kernel's default, ~1% of its dirty limit)
commit_seconds = 5      # written data and metadata become durable at least this often
version_seconds = 30    # a version of the namespace is written this often (0: never)

[versions]
# Which automatic versions are kept as they age (snapshots are never dropped).
# A version is kept if any line keeps it; the newest always is. Applied when
# a version is written and by `cairn gc`, so data deleted from the file
# system is freed once no kept version holds it (a week with these values).
keep_last = 1           # the newest N versions, however old
keep_minutes = 60       # every version written in the last N minutes
keep_hourly = 24        # the newest version of each of the last N hours (UTC)
keep_daily = 7          # the newest version of each of the last N days (UTC)

[gc]
# A mounted file system collects garbage by itself (as `cairn gc` would,
# in the background) once its files gave up `auto_after` bytes (deleted,
# truncated, overwritten) since the last collection, and an eighth of what
# the containers held after it; "0" turns this off. Not over a namespace other clients share. What versions
# or snapshots still hold is not garbage (see [versions]).
auto_after = "8MiB"
auto_check_seconds = 5  # how often the figures are looked at
# When the space the store can still take falls under this share of its
# capacity, the oldest automatic versions are dropped (one per check, never
# the newest, never a snapshot or label) and their garbage collected, so
# that writes do not fail while old versions hold space. 0 turns this off.
keep_free_percent = 5

[cache]
# A persistent cache of chunks in a directory on a fast device (an SSD in
# front of a slow or remote branch), below the DRAM cache: off unless `dir`
# is set. Random readers' chunks (and the ~128KiB around each read) are kept
# there and survive a restart; sequential readers are served by read-ahead
# and do not fill it. Every entry is verified against its chunk id when
# read; a bad one is deleted and the chunk read from the store.
# dir = "/mnt/nvme/cairn-cache"  # an absolute path
size = "4GiB"           # chunk bytes kept at most (least recently used leave first)
write_rate = "32MiB"    # bytes per second written to the device at most (endurance)
"#;

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with_text(path).map(|(config, _)| config)
    }

    /// [`Config::load`], with the text it was parsed from.
    pub fn load_with_text(path: &Path) -> Result<(Self, String), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let config = Self::parse(&text).map_err(|problem| ConfigError::Refused {
            path: path.to_path_buf(),
            problem: Box::new(problem),
        })?;
        Ok((config, text))
    }

    /// Reads and checks the text of a `cairn.toml`.
    pub fn parse(text: &str) -> Result<Self, ConfigProblem> {
        let raw = toml::from_str(text).map_err(|e| ConfigProblem::Syntax(Box::new(e)))?;
        validate::config(raw, text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_collection_is_due_after_the_growth_asked_and_an_eighth() {
        let s = AutoGc {
            after: 100,
            check: std::time::Duration::from_secs(1),
            keep_free_percent: 5,
        };
        assert!(!s.due(0, 99));
        assert!(s.due(0, 100));
        // A large store waits for an eighth of itself.
        assert!(!s.due(8000, 999));
        assert!(s.due(8000, 1000));
        let off = AutoGc { after: 0, ..s };
        assert!(!off.due(0, u64::MAX));
    }

    #[test]
    fn the_gc_section_is_read_and_checked() {
        let c = Config::parse("[gc]\nauto_after = \"1MiB\"\nauto_check_seconds = 5\n").unwrap();
        assert_eq!(
            c.auto_gc,
            AutoGc {
                after: 1 << 20,
                check: std::time::Duration::from_secs(5),
                keep_free_percent: 5,
            }
        );
        assert_eq!(Config::parse("").unwrap().auto_gc, AutoGc::default());
        let e = Config::parse("[gc]\nauto_check_seconds = 0\n").unwrap_err();
        assert!(e.to_string().contains("auto_check_seconds"), "{e}");
    }

    #[test]
    fn default_file_is_the_default() {
        let c = Config::parse(DEFAULT_TOML).unwrap();
        assert_eq!(c.chunking, ChunkerParams::default());
        assert_eq!(c.store, StoreSettings::default());
        let d = FsSettings::default();
        assert_eq!(
            (
                c.fs.inline_max,
                c.fs.file_dirty_max,
                c.fs.total_dirty_max,
                c.fs.readahead,
                c.fs.cache_bytes
            ),
            (
                d.inline_max,
                d.file_dirty_max,
                d.total_dirty_max,
                d.readahead,
                d.cache_bytes
            )
        );
        assert_eq!(c.page_cache_max, PAGE_CACHE_MAX);
        assert_eq!(c.kernel_dirty, KERNEL_DIRTY);
        assert_eq!(c.metadata_cache, meta::DEFAULT_CACHE);
        assert_eq!(c.fs.retention, d.retention);
        assert_eq!(Config::parse("").unwrap(), c);
    }

    #[test]
    fn shared_index_section_is_read_and_garbage_refused() {
        assert_eq!(Config::parse("").unwrap().shared_index, None);
        let good = "[shared_index]\nkind = \"chunkd\"\netcd = [\"http://10.0.0.1:2379\"]\n\
                    fsid = \"home\"\ntoken_file = \"chunkd.token\"\n";
        assert_eq!(
            Config::parse(good).unwrap().shared_index,
            Some(SharedIndexConfig {
                etcd: vec!["http://10.0.0.1:2379".into()],
                fsid: "home".into(),
                token_file: "chunkd.token".into(),
            })
        );
        for (from, to, wanted) in [
            ("kind = \"chunkd\"", "kind = \"redis\"", "unknown variant"),
            (
                "\"http://10.0.0.1:2379\"",
                "\"10.0.0.1\"",
                "line 3: shared_index.etcd",
            ),
            (
                "[\"http://10.0.0.1:2379\"]",
                "[]",
                "shared_index.etcd: must name 1 to",
            ),
            (
                "etcd = [\"http://10.0.0.1:2379\"]\n",
                "",
                "shared_index.etcd: is required",
            ),
            ("\"home\"", "\"a/b\"", "line 4: shared_index.fsid"),
            (
                "token_file = \"chunkd.token\"\n",
                "",
                "shared_index.token_file: is required",
            ),
            ("kind", "knd", "unknown field"),
        ] {
            let e = Config::parse(&good.replace(from, to))
                .unwrap_err()
                .to_string();
            assert!(e.contains(wanted), "{from} -> {to}: {e}");
        }
    }

    #[test]
    fn memory_limit_adds_every_budget() {
        assert_eq!(Config::parse("").unwrap().memory_limit(), 864 << 20);
        let c = Config::parse(
            "[memory]\nbudget = \"64MiB\"\nmetadata_cache = \"16MiB\"\nindex_cache = \"8MiB\"\n\
             [fs]\ntotal_dirty = \"32MiB\"\ncache = \"128MiB\"\n",
        )
        .unwrap();
        assert_eq!(c.memory_limit(), 248 << 20);
    }

    #[test]
    fn memory_section_sets_the_redb_caches_within_bounds() {
        let c = Config::parse(
            "[memory]
metadata_cache = \"8MiB\"
index_cache = \"2MiB\"
",
        )
        .unwrap();
        assert_eq!((c.metadata_cache, c.store.index_cache), (8 << 20, 2 << 20));
        for key in ["metadata_cache", "index_cache"] {
            let e = Config::parse(&format!("[memory]\n{key} = \"512KiB\"\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("memory.{key}")) && e.contains("line 2"),
                "{e}"
            );
        }
    }

    #[test]
    fn cache_section_sets_the_tier_and_refuses_a_relative_dir() {
        assert_eq!(Config::parse("").unwrap().fs.tier, None, "off by default");
        let c = Config::parse("[cache]\ndir = \"/fast/c\"\nsize = \"2GiB\"\n").unwrap();
        assert_eq!(
            c.fs.tier,
            Some(cache::TierSettings {
                dir: "/fast/c".into(),
                size: 2 << 30,
                write_rate: 32 << 20,
            })
        );
        let e = Config::parse("[cache]\ndir = \"fast/c\"\n").unwrap_err();
        assert!(e.to_string().contains("not an absolute path"), "{e}");
        let e = Config::parse("[cache]\ndir = \"/c\"\nwrite_rate = \"4KiB\"\n").unwrap_err();
        assert!(e.to_string().contains("write_rate"), "{e}");
    }

    #[test]
    fn versions_section_and_its_older_key() {
        let c = Config::parse("[versions]\nkeep_last = 3\nkeep_daily = 0\n").unwrap();
        let d = fs::retention::Retention::default();
        assert_eq!(
            c.fs.retention,
            fs::retention::Retention {
                last: 3,
                daily: 0,
                ..d
            }
        );
        // A cairn.toml written before [versions] existed still opens.
        let c = Config::parse("[fs]\nversions_keep = 10\n").unwrap();
        assert_eq!(c.fs.retention.last, 10);
        let e = err("[fs]\nversions_keep = 2\n[versions]\nkeep_last = 3\n");
        assert!(e.contains("versions_keep") && e.contains("line 2"), "{e}");
        let e = err("[versions]\nkeep_last = 0\n");
        assert!(e.contains("keep_last") && e.contains("1..=100000"), "{e}");
        let e = err("[versions]\nkeep_minutes = 99999999\n");
        assert!(e.contains("keep_minutes"), "{e}");
        let e = err("[versions]\nkeep_weekly = 4\n");
        assert!(e.contains("keep_weekly"), "{e}");
    }

    #[test]
    fn sizes_parse() {
        let c = Config::parse("[chunking]\nmode = \"fixed\"\nsize = 8192\n").unwrap();
        assert_eq!(c.chunking, ChunkerParams::Fixed { size: 8192 });
    }

    fn err(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn chunking_rules_parse_and_bad_ones_are_refused() {
        assert_eq!(Config::parse("").unwrap().chunking_rules, None);
        assert_eq!(Config::parse(DEFAULT_TOML).unwrap().chunking_rules, None);
        let c = Config::parse(
            "[chunking]\nmode = \"cdc\"\n[[chunking.rule]]\nname = \"vm\"\npath = \"vm/**\"\nmode = \"fixed:64K\"\n[[chunking.rule]]\nextension = [\"db\"]\nmode = \"cdc\"\n",
        )
        .unwrap();
        let rules = c.chunking_rules.unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(rules[0].name, "vm");
        assert_eq!(rules[0].chunking.to_string(), "fixed:64K");
        assert_eq!(rules[1].name, "rule 2");
        assert_eq!(rules[1].chunking, fs::chunkmode::Chunking::ContentDefined);
        let e = err("[[chunking.rule]]\nname = \"x\"\nmode = \"fixed:5K\"\n");
        assert!(
            e.contains("chunking rule \"x\"") && e.contains("power of two"),
            "{e}"
        );
        let e = err("[[chunking.rule]]\npath = \"a/[b\"\nmode = \"cdc\"\n");
        assert!(e.contains("glob"), "{e}");
        let e = err("[[chunking.rule]]\nname = \"a\"\nmode = \"cdc\"\n[[chunking.rule]]\nname = \"a\"\nmode = \"cdc\"\n");
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = err("[chunking]\nmode = \"cdc\"\nagv = \"64KiB\"\n");
        assert!(e.contains("line 3") && e.contains("agv"), "{e}");
        let e = err("[compresion]\ncodec = \"zstd\"\n");
        assert!(e.contains("line 1") && e.contains("compresion"), "{e}");
    }

    const BRANCHES: &str = r#"
[[branch]]
name = "a"
kind = "local"
path = "/tmp/a"
labels = ["ssd"]

[[branch]]
name = "b"
kind = "local"
path = "b"
labels = ["ssd"]

[[branch]]
name = "c"
kind = "s3"
endpoint = "http://127.0.0.1:9"
bucket = "bkt"
access_key_id = "k"
secret_access_key = "s"
"#;

    #[test]
    fn branches_rules_and_default_parse() {
        let text = format!(
            "{BRANCHES}
[[rule]]
name = \"photos\"
path = \"photos/**\"
extension = [\"jpg\", \"png\"]
min_size = \"1KiB\"
policy = \"mirror:2\"
branches = [\"ssd\"]

[[rule]]
extension = \"iso\"
uid = 1000
policy = \"parity:2@c\"

[default_rule]
policy = \"rs:2+1\"
"
        );
        let c = Config::parse(&text).unwrap();
        let r = c.redundancy.unwrap();
        let names: Vec<&str> = r.branches.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(r.branches[1].location, Location::Local("b".into()));
        assert!(
            matches!(&r.branches[2].location, Location::S3(s) if s.bucket == "bkt" && s.region == "us-east-1")
        );
        assert_eq!(r.rules[0].name, "photos");
        assert_eq!(r.rules[0].branches, ["a", "b"]);
        assert_eq!(r.rules[0].extensions, ["jpg", "png"]);
        assert_eq!(r.rules[0].min_size, Some(1024));
        assert_eq!(r.rules[1].name, "rule 2");
        assert_eq!(r.rules[1].branches, ["a", "b", "c"]);
        assert_eq!(r.rules[1].policy.to_string(), "parity:2@c");
        assert_eq!(r.default.policy.to_string(), "rs:2+1");
        assert!(Config::parse("").unwrap().redundancy.is_none());
    }

    #[test]
    fn bad_redundancy_config_names_the_culprit() {
        let rule = |body: &str| format!("{BRANCHES}\n[[rule]]\nname = \"r\"\n{body}\n");
        let cases = [
            (
                rule("policy = \"mirror:2\"\nbranches = [\"zz\"]"),
                "unknown branch or label \"zz\"",
            ),
            (
                rule("policy = \"mirror:3\"\nbranches = [\"ssd\"]"),
                "rule \"r\": policy mirror:3 needs 3 distinct branches but may use 2 (a, b)",
            ),
            (rule("policy = \"rs:4+2\""), "needs 6 distinct branches"),
            (
                rule("policy = \"parity:1@c\"\nbranches = [\"ssd\"]"),
                "not among its branches",
            ),
            (
                rule("policy = \"raid5\""),
                "rule \"r\": invalid redundancy policy \"raid5\"",
            ),
            (rule("path = \"a/[\"\npolicy = \"single\""), "bad path glob"),
            (
                rule("policy = \"single\"\nbranches = []"),
                "leaves no branch",
            ),
            (
                format!("{BRANCHES}\n[[branch]]\nname = \"a\"\nkind = \"local\"\npath = \"x\"\n"),
                "branch \"a\" is configured twice",
            ),
            (
                format!("{BRANCHES}\n[default_rule]\npolicy = \"mirror:4\"\n"),
                "default_rule: policy mirror:4 needs 4",
            ),
            (
                "[[branch]]\nname = \"x\"\nkind = \"local\"\n".to_string(),
                "branch \"x\": a local branch needs path",
            ),
            (
                "[[branch]]\nname = \"x\"\nkind = \"s3\"\nbucket = \"b\"\n".to_string(),
                "branch \"x\": an s3 branch needs endpoint",
            ),
            (
                "[[branch]]\nname = \"x/y\"\nkind = \"local\"\npath = \"p\"\n".to_string(),
                "branch name \"x/y\"",
            ),
            (
                "[[rule]]\npolicy = \"single\"\n".to_string(),
                "configure [[branch]] entries first",
            ),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(e.contains(want), "want {want:?} in {e:?}");
        }
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let e = err("[compression]\ncodec = \"brotli\"\n");
        assert!(e.contains("line 2") && e.contains("brotli"), "{e}");
        let e = err("[containers]\nsize = \"4 furlongs\"\n");
        assert!(e.contains("line 2") && e.contains("furlongs"), "{e}");
        let e = err("[chunking]\nmin = \"128KiB\"\navg = \"64KiB\"\n");
        assert!(e.contains("line 3") && e.contains("chunking.avg"), "{e}");
        let e = err("[compression]\nlevel = 40\n");
        assert!(
            e.contains("line 2") && e.contains("compression.level"),
            "{e}"
        );
        let e = err("[memory]\n\nbudget = \"1MiB\"\n");
        assert!(e.contains("line 3") && e.contains("memory.budget"), "{e}");
        let e = err("[chunking\nmode = 1");
        assert!(e.contains("line 1"), "{e}");
        let e = err("[qos]\nrandom = 8\nreads = 0\n");
        assert!(e.contains("line 3") && e.contains("qos.reads"), "{e}");
        let e = err("[qos]\nbackground = 1000\n");
        assert!(e.contains("qos.background"), "{e}");
    }

    #[test]
    fn a_chunkd_branch_parses_and_its_keys_stay_its_own() {
        let chunkd = "[[branch]]\nname = \"r\"\nkind = \"chunkd\"\nurl = \"http://10.0.0.2:7878\"\ntoken_file = \"/etc/cairn/chunkd.token\"\n";
        let c = Config::parse(chunkd).unwrap();
        let r = c.redundancy.unwrap();
        assert_eq!(
            r.branches[0].location,
            Location::Chunkd(ChunkdLocation {
                url: "http://10.0.0.2:7878".into(),
                token_file: "/etc/cairn/chunkd.token".into(),
            })
        );
        let e = err("[[branch]]\nname = \"r\"\nkind = \"chunkd\"\nurl = \"http://h:1\"\n");
        assert!(e.contains("token_file"), "{e}");
        let e =
            err("[[branch]]\nname = \"r\"\nkind = \"local\"\npath = \"x\"\nurl = \"http://h:1\"\n");
        assert!(e.contains("url applies only to kind = \"chunkd\""), "{e}");
        let e = err("[[branch]]\nname = \"r\"\nkind = \"chunkd\"\nurl = \"http://h:1\"\ntoken_file = \"t\"\npath = \"x\"\n");
        assert!(e.contains("path applies only"), "{e}");
    }
}
