//! `cairn.toml`: what a user may tune, with errors that name the key and line.

use std::path::{Path, PathBuf};

use cas::{Compression, StoreSettings};
use chunking::ChunkerParams;
use fs::FsSettings;
use redundancy::Policy;
use serde::Deserialize;

/// The settings of a repository, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub chunking: ChunkerParams,
    pub store: StoreSettings,
    pub fs: FsSettings,
    /// `fs.page_cache_max`: files larger than this are read around the
    /// kernel's page cache (see `fuse::MountOptions::page_cache_max`).
    pub page_cache_max: u64,
    /// The `[[branch]]`, `[[rule]]` and `[default_rule]` sections; `None`
    /// when no branch is configured (one plain local branch, `single`).
    pub redundancy: Option<RedundancyConfig>,
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

#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ConfigError {
    pub path: PathBuf,
    pub message: String,
}

/// Default `fs.page_cache_max`: files a tree of sources or documents is made
/// of stay in the page cache; media, images and archives stream past it.
pub const PAGE_CACHE_MAX: u64 = 16 << 20;

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

[compression]
# "zstd", "lz4" or "none". A region that does not shrink is stored raw.
codec = "zstd"
level = 2           # zstd level, 1 (fast) to 19 (small)
region = "1MiB"     # raw bytes of consecutive chunks compressed together

[containers]
size = "4MiB"       # containers are sealed and written at about this size

[memory]
budget = "256MiB"   # data in flight (chunked, compressing, unwritten) at once

[fs]
inline_max = "16KiB"    # files up to this size live in their inode (one read, no container)
file_dirty = "32MiB"    # written bytes one file buffers before writing them behind
total_dirty = "256MiB"  # written bytes all files together buffer
readahead = "32MiB"     # how far ahead of a sequential reader chunks are fetched
cache = "256MiB"        # DRAM cache of chunks
page_cache_max = "16MiB" # bigger files are read around the kernel's page cache (one copy less)
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
"#;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    branch: Vec<RawBranch>,
    #[serde(default)]
    rule: Vec<RawRule>,
    default_rule: Option<RawDefault>,
    #[serde(default)]
    chunking: RawChunking,
    #[serde(default)]
    compression: RawCompression,
    #[serde(default)]
    containers: RawContainers,
    #[serde(default)]
    memory: RawMemory,
    #[serde(default)]
    fs: RawFs,
    #[serde(default)]
    versions: RawVersions,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawVersions {
    keep_last: Option<u64>,
    keep_minutes: Option<u64>,
    keep_hourly: Option<u64>,
    keep_daily: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFs {
    #[serde(default = "inline_max")]
    inline_max: Size,
    #[serde(default = "file_dirty")]
    file_dirty: Size,
    #[serde(default = "total_dirty")]
    total_dirty: Size,
    #[serde(default = "readahead")]
    readahead: Size,
    #[serde(default = "cache")]
    cache: Size,
    #[serde(default = "page_cache_max")]
    page_cache_max: Size,
    #[serde(default = "commit_seconds")]
    commit_seconds: u64,
    #[serde(default = "version_seconds")]
    version_seconds: u64,
    /// The older name of `versions.keep_last`.
    versions_keep: Option<u64>,
}

fn inline_max() -> Size {
    Size(FsSettings::default().inline_max as u64)
}
fn file_dirty() -> Size {
    Size(FsSettings::default().file_dirty_max as u64)
}
fn total_dirty() -> Size {
    Size(FsSettings::default().total_dirty_max as u64)
}
fn readahead() -> Size {
    Size(FsSettings::default().readahead)
}
fn cache() -> Size {
    Size(FsSettings::default().cache_bytes as u64)
}
fn page_cache_max() -> Size {
    Size(PAGE_CACHE_MAX)
}
fn commit_seconds() -> u64 {
    FsSettings::default().commit_interval.as_secs()
}
fn version_seconds() -> u64 {
    FsSettings::default().version_interval.as_secs()
}

impl Default for RawFs {
    fn default() -> Self {
        RawFs {
            inline_max: inline_max(),
            file_dirty: file_dirty(),
            total_dirty: total_dirty(),
            readahead: readahead(),
            cache: cache(),
            page_cache_max: page_cache_max(),
            commit_seconds: commit_seconds(),
            version_seconds: version_seconds(),
            versions_keep: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChunking {
    #[serde(default = "cdc")]
    mode: Mode,
    min: Option<Size>,
    avg: Option<Size>,
    max: Option<Size>,
    size: Option<Size>,
}

fn cdc() -> Mode {
    Mode::Cdc
}

impl Default for RawChunking {
    fn default() -> Self {
        RawChunking {
            mode: Mode::Cdc,
            min: None,
            avg: None,
            max: None,
            size: None,
        }
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Cdc,
    Fixed,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Codec {
    Zstd,
    Lz4,
    None,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCompression {
    #[serde(default = "zstd")]
    codec: Codec,
    #[serde(default = "two")]
    level: i32,
    #[serde(default = "region")]
    region: Size,
}

fn zstd() -> Codec {
    Codec::Zstd
}
fn two() -> i32 {
    2
}
fn region() -> Size {
    Size(1 << 20)
}

impl Default for RawCompression {
    fn default() -> Self {
        RawCompression {
            codec: Codec::Zstd,
            level: 2,
            region: region(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawContainers {
    size: Size,
}

impl Default for RawContainers {
    fn default() -> Self {
        RawContainers {
            size: Size(4 << 20),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMemory {
    budget: Size,
}

impl Default for RawMemory {
    fn default() -> Self {
        RawMemory {
            budget: Size(256 << 20),
        }
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum BranchKind {
    Local,
    S3,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBranch {
    name: String,
    kind: BranchKind,
    path: Option<PathBuf>,
    endpoint: Option<String>,
    bucket: Option<String>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
    #[serde(default)]
    labels: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: Option<String>,
    path: Option<String>,
    #[serde(default)]
    extension: OneOrMany,
    min_size: Option<Size>,
    max_size: Option<Size>,
    uid: Option<u32>,
    policy: String,
    branches: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDefault {
    policy: String,
    branches: Option<Vec<String>>,
}

/// `extension = "jpg"` or `extension = ["jpg", "png"]`.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<String> {
        match self {
            OneOrMany::None => Vec::new(),
            OneOrMany::One(s) => vec![s],
            OneOrMany::Many(v) => v,
        }
    }
}

/// A byte count written as a number or as "64KiB", "4 MiB", "1GiB".
#[derive(Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(try_from = "SizeRepr")]
struct Size(u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(i64),
    Str(String),
}

impl TryFrom<SizeRepr> for Size {
    type Error = String;

    fn try_from(r: SizeRepr) -> Result<Self, String> {
        match r {
            SizeRepr::Int(n) if n >= 0 => Ok(Size(n as u64)),
            SizeRepr::Int(n) => Err(format!("size {n} is negative")),
            SizeRepr::Str(s) => parse_size(&s).ok_or_else(|| {
                format!("{s:?} is not a size (use e.g. 65536, \"64KiB\", \"4MiB\", \"1GiB\")")
            }),
        }
    }
}

fn parse_size(s: &str) -> Option<Size> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult).map(Size)
}

/// A semantic error in a section: reported with the line of the offending key.
fn at_key(text: &str, section: &str, key: &str, message: String) -> String {
    let mut in_section = false;
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with('[') {
            in_section = t.trim_start_matches('[').trim_end_matches(']').trim() == section;
        } else if in_section && t.split('=').next().map(str::trim) == Some(key) {
            return format!("line {}: {section}.{key}: {message}", n + 1);
        }
    }
    format!("{section}.{key}: {message}")
}

fn u32_size(text: &str, section: &str, key: &str, v: Size) -> Result<u32, String> {
    u32::try_from(v.0).map_err(|_| at_key(text, section, key, format!("{} is too large", v.0)))
}

impl Config {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::load_with_text(path).map(|(config, _)| config)
    }

    /// [`Config::load`], with the text it was parsed from.
    pub fn load_with_text(path: &Path) -> Result<(Self, String), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        let config = Self::parse(&text).map_err(|message| ConfigError {
            path: path.to_path_buf(),
            message,
        })?;
        Ok((config, text))
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        let chunking = match raw.chunking.mode {
            Mode::Cdc => {
                if raw.chunking.size.is_some() {
                    return Err(at_key(
                        text,
                        "chunking",
                        "size",
                        "only applies to mode = \"fixed\"".into(),
                    ));
                }
                let d = ChunkerParams::default();
                let ChunkerParams::ContentDefined { min, avg, max } = d else {
                    unreachable!("the default is content-defined")
                };
                ChunkerParams::ContentDefined {
                    min: raw
                        .chunking
                        .min
                        .map(|v| u32_size(text, "chunking", "min", v))
                        .transpose()?
                        .unwrap_or(min),
                    avg: raw
                        .chunking
                        .avg
                        .map(|v| u32_size(text, "chunking", "avg", v))
                        .transpose()?
                        .unwrap_or(avg),
                    max: raw
                        .chunking
                        .max
                        .map(|v| u32_size(text, "chunking", "max", v))
                        .transpose()?
                        .unwrap_or(max),
                }
            }
            Mode::Fixed => {
                for (key, v) in [
                    ("min", raw.chunking.min),
                    ("avg", raw.chunking.avg),
                    ("max", raw.chunking.max),
                ] {
                    if v.is_some() {
                        return Err(at_key(
                            text,
                            "chunking",
                            key,
                            "only applies to mode = \"cdc\"".into(),
                        ));
                    }
                }
                let size = raw.chunking.size.unwrap_or(Size(64 << 10));
                ChunkerParams::Fixed {
                    size: u32_size(text, "chunking", "size", size)?,
                }
            }
        };
        if let Err(e) = chunking.validate() {
            let key = match e {
                chunking::ParamsError::OutOfRange { name, .. }
                | chunking::ParamsError::Odd { name, .. } => name,
                chunking::ParamsError::Order { .. } => "avg",
            };
            return Err(at_key(text, "chunking", key, e.to_string()));
        }
        let compression = match raw.compression.codec {
            Codec::Zstd => {
                let level = raw.compression.level;
                if !(1..=19).contains(&level) {
                    return Err(at_key(
                        text,
                        "compression",
                        "level",
                        format!("{level} is outside 1..=19"),
                    ));
                }
                Compression::Zstd { level }
            }
            Codec::Lz4 => Compression::Lz4,
            Codec::None => Compression::None,
        };
        let region = raw.compression.region.0;
        if !(4 << 10..=4 << 20).contains(&region) {
            return Err(at_key(
                text,
                "compression",
                "region",
                format!("{region} is outside 4KiB..=4MiB"),
            ));
        }
        let container = raw.containers.size.0;
        if !(64 << 10..=1 << 30).contains(&container) || container < region {
            return Err(at_key(
                text,
                "containers",
                "size",
                format!("{container} must be within 64KiB..=1GiB and at least compression.region"),
            ));
        }
        let budget = raw.memory.budget.0;
        if budget < 4 * container {
            return Err(at_key(
                text,
                "memory",
                "budget",
                format!("{budget} must be at least 4 containers ({})", 4 * container),
            ));
        }
        let f = &raw.fs;
        if f.inline_max.0 > 64 << 10 {
            return Err(at_key(
                text,
                "fs",
                "inline_max",
                format!("{} is over 64KiB", f.inline_max.0),
            ));
        }
        if f.file_dirty.0 < 1 << 20 || f.total_dirty.0 < f.file_dirty.0 {
            return Err(at_key(
                text,
                "fs",
                "total_dirty",
                "fs.file_dirty must be at least 1MiB and fs.total_dirty at least fs.file_dirty"
                    .into(),
            ));
        }
        if !(1..=3600).contains(&f.commit_seconds) {
            return Err(at_key(
                text,
                "fs",
                "commit_seconds",
                format!("{} is outside 1..=3600", f.commit_seconds),
            ));
        }
        if f.version_seconds > 7 * 86400 {
            return Err(at_key(
                text,
                "fs",
                "version_seconds",
                format!("{} is over a week (604800)", f.version_seconds),
            ));
        }
        let retention = retention(text, &raw.versions, f.versions_keep)?;
        let redundancy = redundancy(raw.branch, raw.rule, raw.default_rule)?;
        Ok(Config {
            redundancy,
            chunking,
            store: StoreSettings {
                compression,
                container_size: container as usize,
                region_size: region as usize,
                memory_budget: budget as usize,
            },
            fs: FsSettings {
                inline_max: f.inline_max.0 as usize,
                file_dirty_max: f.file_dirty.0 as usize,
                total_dirty_max: f.total_dirty.0 as usize,
                readahead: f.readahead.0,
                cache_bytes: f.cache.0 as usize,
                commit_interval: std::time::Duration::from_secs(f.commit_seconds),
                version_interval: std::time::Duration::from_secs(f.version_seconds),
                retention,
            },
            page_cache_max: f.page_cache_max.0,
        })
    }
}

/// The `[versions]` section, each key within its bounds; `versions_keep`
/// (in `[fs]`, its older name) stands for `keep_last`.
fn retention(
    text: &str,
    v: &RawVersions,
    versions_keep: Option<u64>,
) -> Result<fs::retention::Retention, String> {
    let d = fs::retention::Retention::default();
    let last = match (v.keep_last, versions_keep) {
        (Some(_), Some(_)) => {
            return Err(at_key(
                text,
                "fs",
                "versions_keep",
                "is the older name of versions.keep_last: set only keep_last".into(),
            ))
        }
        (Some(n), None) => ("versions", "keep_last", n),
        (None, Some(n)) => ("fs", "versions_keep", n),
        (None, None) => ("versions", "keep_last", u64::from(d.last)),
    };
    let check = |(section, key, n): (&str, &str, u64), min: u64, max: u64| {
        if (min..=max).contains(&n) {
            Ok(n as u32)
        } else {
            Err(at_key(
                text,
                section,
                key,
                format!("{n} is outside {min}..={max}"),
            ))
        }
    };
    let or = |v: Option<u64>, d: u32| v.unwrap_or(u64::from(d));
    Ok(fs::retention::Retention {
        last: check(last, 1, 100_000)?,
        minutes: check(
            ("versions", "keep_minutes", or(v.keep_minutes, d.minutes)),
            0,
            7 * 24 * 60,
        )?,
        hourly: check(
            ("versions", "keep_hourly", or(v.keep_hourly, d.hourly)),
            0,
            24 * 366,
        )?,
        daily: check(
            ("versions", "keep_daily", or(v.keep_daily, d.daily)),
            0,
            3660,
        )?,
    })
}

/// Longest branch name: a `parity:K@NAME` policy must be able to name it.
const MAX_NAME: usize = redundancy::MAX_BRANCH_NAME;

fn branch_spec(b: RawBranch) -> Result<BranchSpec, String> {
    let name = b.name;
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
    if !ok {
        return Err(format!(
            "branch name {name:?} must be 1 to {MAX_NAME} characters of [A-Za-z0-9._-]"
        ));
    }
    let s3_keys = [
        ("endpoint", b.endpoint.is_some()),
        ("bucket", b.bucket.is_some()),
        ("region", b.region.is_some()),
        ("access_key_id", b.access_key_id.is_some()),
        ("secret_access_key", b.secret_access_key.is_some()),
    ];
    let location = match b.kind {
        BranchKind::Local => {
            if let Some((key, _)) = s3_keys.iter().find(|(_, set)| *set) {
                return Err(format!(
                    "branch {name:?}: {key} applies only to kind = \"s3\""
                ));
            }
            let path = b.path.ok_or_else(|| {
                format!("branch {name:?}: a local branch needs path = \"DIRECTORY\"")
            })?;
            Location::Local(path)
        }
        BranchKind::S3 => {
            if b.path.is_some() {
                return Err(format!(
                    "branch {name:?}: path applies only to kind = \"local\""
                ));
            }
            let need = |v: Option<String>, key: &str| {
                v.ok_or_else(|| format!("branch {name:?}: an s3 branch needs {key}"))
            };
            Location::S3(S3Location {
                endpoint: need(b.endpoint, "endpoint")?,
                bucket: need(b.bucket, "bucket")?,
                region: b.region.unwrap_or_else(|| "us-east-1".into()),
                access_key_id: need(b.access_key_id, "access_key_id")?,
                secret_access_key: need(b.secret_access_key, "secret_access_key")?,
            })
        }
    };
    Ok(BranchSpec {
        name,
        location,
        labels: b.labels,
    })
}

/// The branch names a rule's `branches` list stands for, in configuration
/// order: each entry is a branch name or a label; none means all.
fn allowed(
    rule: &str,
    wanted: Option<&[String]>,
    branches: &[BranchSpec],
) -> Result<Vec<String>, String> {
    let Some(wanted) = wanted else {
        return Ok(branches.iter().map(|b| b.name.clone()).collect());
    };
    for w in wanted {
        let known = branches
            .iter()
            .any(|b| b.name == *w || b.labels.contains(w));
        if !known {
            return Err(format!("{rule}: unknown branch or label {w:?}"));
        }
    }
    let names: Vec<String> = branches
        .iter()
        .filter(|b| wanted.iter().any(|w| b.name == *w || b.labels.contains(w)))
        .map(|b| b.name.clone())
        .collect();
    if names.is_empty() {
        return Err(format!(
            "{rule}: branches = [] leaves no branch to store on"
        ));
    }
    Ok(names)
}

fn rule_policy(rule: &str, text: &str, allowed: &[String]) -> Result<Policy, String> {
    let policy: Policy = text.parse().map_err(|e| format!("{rule}: {e}"))?;
    if policy.width() > allowed.len() {
        return Err(format!(
            "{rule}: policy {policy} needs {} distinct branches but may use {} ({})",
            policy.width(),
            allowed.len(),
            allowed.join(", ")
        ));
    }
    if let Some(fixed) = policy.fixed_parity_branch() {
        if !allowed.iter().any(|a| a == fixed) {
            return Err(format!(
                "{rule}: policy {policy} puts parity on {fixed:?}, which is not among its \
                 branches ({})",
                allowed.join(", ")
            ));
        }
    }
    Ok(policy)
}

fn redundancy(
    branches: Vec<RawBranch>,
    rules: Vec<RawRule>,
    default: Option<RawDefault>,
) -> Result<Option<RedundancyConfig>, String> {
    if branches.is_empty() {
        if !rules.is_empty() || default.is_some() {
            return Err(
                "[[rule]] and [default_rule] choose among branches: configure [[branch]] \
                 entries first"
                    .into(),
            );
        }
        return Ok(None);
    }
    let branches: Vec<BranchSpec> = branches
        .into_iter()
        .map(branch_spec)
        .collect::<Result<_, _>>()?;
    for (i, b) in branches.iter().enumerate() {
        if branches[..i].iter().any(|o| o.name == b.name) {
            return Err(format!("branch {:?} is configured twice", b.name));
        }
    }
    let mut specs = Vec::new();
    for (i, r) in rules.into_iter().enumerate() {
        let name = r.name.unwrap_or_else(|| format!("rule {}", i + 1));
        let label = format!("rule {name:?}");
        if specs.iter().any(|s: &RuleSpec| s.name == name) {
            return Err(format!("{label} is configured twice"));
        }
        let allowed = allowed(&label, r.branches.as_deref(), &branches)?;
        let spec = RuleSpec {
            policy: rule_policy(&label, &r.policy, &allowed)?,
            branches: allowed,
            path: r.path,
            extensions: r.extension.into_vec(),
            min_size: r.min_size.map(|s| s.0),
            max_size: r.max_size.map(|s| s.0),
            uid: r.uid,
            name,
        };
        spec.matcher().map_err(|e| format!("{label}: {e}"))?;
        specs.push(spec);
    }
    let (text, wanted) = match default {
        Some(d) => (d.policy, d.branches),
        None => ("single".to_string(), None),
    };
    let label = "default_rule";
    let allowed = allowed(label, wanted.as_deref(), &branches)?;
    let default = RuleSpec {
        name: "default".into(),
        policy: rule_policy(label, &text, &allowed)?,
        branches: allowed,
        path: None,
        extensions: Vec::new(),
        min_size: None,
        max_size: None,
        uid: None,
    };
    Ok(Some(RedundancyConfig {
        branches,
        rules: specs,
        default,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.fs.retention, d.retention);
        assert_eq!(Config::parse("").unwrap(), c);
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
        assert_eq!(parse_size("64KiB"), Some(Size(65536)));
        assert_eq!(parse_size("4 MiB"), Some(Size(4 << 20)));
        assert_eq!(parse_size("12"), Some(Size(12)));
        assert_eq!(parse_size("12 parsecs"), None);
        let c = Config::parse("[chunking]\nmode = \"fixed\"\nsize = 8192\n").unwrap();
        assert_eq!(c.chunking, ChunkerParams::Fixed { size: 8192 });
    }

    fn err(text: &str) -> String {
        Config::parse(text).unwrap_err()
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
    }
}
