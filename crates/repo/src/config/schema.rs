//! The shape of `cairn.toml` as serde reads it: every section and key, with
//! its default, before any check of what the values mean (`validate`). The
//! keys a check may refuse keep their span, so the refusal names their line.

use std::path::PathBuf;

use fs::FsSettings;
use serde::Deserialize;
use toml::Spanned;

use super::{KERNEL_DIRTY, PAGE_CACHE_MAX};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct Raw {
    #[serde(default)]
    pub(super) branch: Vec<RawBranch>,
    #[serde(default)]
    pub(super) rule: Vec<RawRule>,
    pub(super) default_rule: Option<RawDefault>,
    #[serde(default)]
    pub(super) chunking: RawChunking,
    #[serde(default)]
    pub(super) compression: RawCompression,
    #[serde(default)]
    pub(super) containers: RawContainers,
    #[serde(default)]
    pub(super) memory: RawMemory,
    #[serde(default)]
    pub(super) fs: RawFs,
    #[serde(default)]
    pub(super) versions: RawVersions,
    #[serde(default)]
    pub(super) qos: RawQos,
    #[serde(default)]
    pub(super) gc: RawGc,
    #[serde(default)]
    pub(super) cache: RawCache,
    pub(super) shared_index: Option<RawSharedIndex>,
}

/// `[shared_index]`: the fingerprint index the clients of a file system
/// share (`docs/cluster.md`); without it they find each other's chunks by
/// listing the branches.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSharedIndex {
    pub(super) kind: SharedIndexKind,
    pub(super) etcd: Option<Spanned<Vec<String>>>,
    pub(super) fsid: Option<Spanned<String>>,
    pub(super) token_file: Option<Spanned<PathBuf>>,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(super) enum SharedIndexKind {
    /// `cairn chunkd` processes owning ranges of the fingerprint space.
    Chunkd,
}

/// `[gc]`: when collections start by themselves.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawGc {
    pub(super) auto_after: Size,
    pub(super) auto_check_seconds: Spanned<u64>,
    pub(super) keep_free_percent: Spanned<u64>,
}

impl Default for RawGc {
    fn default() -> Self {
        let d = super::AutoGc::default();
        RawGc {
            auto_after: Size(d.after),
            auto_check_seconds: absent(d.check.as_secs()),
            keep_free_percent: absent(u64::from(d.keep_free_percent)),
        }
    }
}

/// `[qos]`: how storage reads are shared (see `cas::qos`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawQos {
    pub(super) reads: Spanned<u32>,
    pub(super) random: Spanned<u32>,
    pub(super) sequential: Spanned<u32>,
    pub(super) background: Spanned<u32>,
}

impl Default for RawQos {
    fn default() -> Self {
        let d = cas::qos::QosSettings::default();
        RawQos {
            reads: absent(d.reads as u32),
            random: absent(d.random),
            sequential: absent(d.sequential),
            background: absent(d.background),
        }
    }
}

/// `[cache]`: the persistent chunk cache tier, off without `dir`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    pub(super) dir: Option<Spanned<PathBuf>>,
    #[serde(default = "cache_size")]
    pub(super) size: Spanned<Size>,
    #[serde(default = "cache_write_rate")]
    pub(super) write_rate: Spanned<Size>,
}

/// Default `cache.size`.
pub(super) const CACHE_SIZE: u64 = 4 << 30;
/// Default `cache.write_rate`, bytes per second: at most ~2.7 TB a day
/// even if random readers missed all day long, within what a datacenter
/// SSD's daily writes allow; in practice the tier writes only on misses.
pub(super) const CACHE_WRITE_RATE: u64 = 32 << 20;

fn cache_size() -> Spanned<Size> {
    absent(Size(CACHE_SIZE))
}
fn cache_write_rate() -> Spanned<Size> {
    absent(Size(CACHE_WRITE_RATE))
}

impl Default for RawCache {
    fn default() -> Self {
        RawCache {
            dir: None,
            size: cache_size(),
            write_rate: cache_write_rate(),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVersions {
    pub(super) keep_last: Option<Spanned<u64>>,
    pub(super) keep_minutes: Option<Spanned<u64>>,
    pub(super) keep_hourly: Option<Spanned<u64>>,
    pub(super) keep_daily: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawFs {
    #[serde(default = "inline_max")]
    pub(super) inline_max: Spanned<Size>,
    #[serde(default = "file_dirty")]
    pub(super) file_dirty: Size,
    #[serde(default = "total_dirty")]
    pub(super) total_dirty: Spanned<Size>,
    #[serde(default = "readahead")]
    pub(super) readahead: Size,
    #[serde(default = "cache")]
    pub(super) cache: Size,
    #[serde(default = "page_cache_max")]
    pub(super) page_cache_max: Size,
    #[serde(default = "writeback_cache")]
    pub(super) writeback_cache: bool,
    #[serde(default = "kernel_dirty")]
    pub(super) kernel_dirty: Size,
    #[serde(default = "commit_seconds")]
    pub(super) commit_seconds: Spanned<u64>,
    #[serde(default = "version_seconds")]
    pub(super) version_seconds: Spanned<u64>,
    /// The older name of `versions.keep_last`.
    pub(super) versions_keep: Option<Spanned<u64>>,
}

fn inline_max() -> Spanned<Size> {
    absent(Size(FsSettings::default().inline_max as u64))
}
fn file_dirty() -> Size {
    Size(FsSettings::default().file_dirty_max as u64)
}
fn total_dirty() -> Spanned<Size> {
    absent(Size(FsSettings::default().total_dirty_max as u64))
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
fn writeback_cache() -> bool {
    true
}
fn kernel_dirty() -> Size {
    Size(KERNEL_DIRTY)
}
fn commit_seconds() -> Spanned<u64> {
    absent(FsSettings::default().commit_interval.as_secs())
}
fn version_seconds() -> Spanned<u64> {
    absent(FsSettings::default().version_interval.as_secs())
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
            writeback_cache: writeback_cache(),
            kernel_dirty: kernel_dirty(),
            commit_seconds: commit_seconds(),
            version_seconds: version_seconds(),
            versions_keep: None,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChunking {
    #[serde(default = "cdc")]
    pub(super) mode: Mode,
    pub(super) min: Option<Spanned<Size>>,
    pub(super) avg: Option<Spanned<Size>>,
    pub(super) max: Option<Spanned<Size>>,
    pub(super) size: Option<Spanned<Size>>,
    /// `[[chunking.rule]]`: absent, the built-in rules apply; present
    /// (even empty), they are replaced.
    pub(super) rule: Option<Vec<RawChunkingRule>>,
}

/// One `[[chunking.rule]]`: which files, and `mode = "fixed:16K"` or
/// `"cdc"` (the values of the `user.cairn.chunking` xattr).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChunkingRule {
    pub(super) name: Option<String>,
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) extension: OneOrMany,
    pub(super) min_size: Option<Size>,
    pub(super) max_size: Option<Size>,
    pub(super) mode: String,
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
            rule: None,
        }
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum Mode {
    Cdc,
    Fixed,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum Codec {
    Zstd,
    Lz4,
    None,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCompression {
    #[serde(default = "zstd")]
    pub(super) codec: Codec,
    #[serde(default = "two")]
    pub(super) level: Spanned<i32>,
    #[serde(default = "region")]
    pub(super) region: Spanned<Size>,
}

fn zstd() -> Codec {
    Codec::Zstd
}
fn two() -> Spanned<i32> {
    absent(2)
}
fn region() -> Spanned<Size> {
    absent(Size(1 << 20))
}

impl Default for RawCompression {
    fn default() -> Self {
        RawCompression {
            codec: Codec::Zstd,
            level: two(),
            region: region(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawContainers {
    pub(super) size: Spanned<Size>,
}

impl Default for RawContainers {
    fn default() -> Self {
        RawContainers {
            size: absent(Size(4 << 20)),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMemory {
    #[serde(default = "memory_budget")]
    pub(super) budget: Spanned<Size>,
    #[serde(default = "metadata_cache")]
    pub(super) metadata_cache: Spanned<Size>,
    #[serde(default = "index_cache")]
    pub(super) index_cache: Spanned<Size>,
}

fn memory_budget() -> Spanned<Size> {
    absent(Size(256 << 20))
}
fn metadata_cache() -> Spanned<Size> {
    absent(Size(meta::DEFAULT_CACHE as u64))
}
fn index_cache() -> Spanned<Size> {
    absent(Size(cas::StoreSettings::default().index_cache as u64))
}

impl Default for RawMemory {
    fn default() -> Self {
        RawMemory {
            budget: memory_budget(),
            metadata_cache: metadata_cache(),
            index_cache: index_cache(),
        }
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(super) enum BranchKind {
    Local,
    S3,
    Chunkd,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBranch {
    pub(super) name: String,
    pub(super) kind: BranchKind,
    pub(super) path: Option<PathBuf>,
    pub(super) endpoint: Option<String>,
    pub(super) bucket: Option<String>,
    pub(super) region: Option<String>,
    pub(super) access_key_id: Option<String>,
    pub(super) secret_access_key: Option<String>,
    pub(super) url: Option<String>,
    pub(super) token_file: Option<PathBuf>,
    #[serde(default)]
    pub(super) labels: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRule {
    pub(super) name: Option<String>,
    pub(super) path: Option<String>,
    #[serde(default)]
    pub(super) extension: OneOrMany,
    pub(super) min_size: Option<Size>,
    pub(super) max_size: Option<Size>,
    pub(super) uid: Option<u32>,
    pub(super) policy: String,
    pub(super) branches: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefault {
    pub(super) policy: String,
    pub(super) branches: Option<Vec<String>>,
}

/// `extension = "jpg"` or `extension = ["jpg", "png"]`.
#[derive(Deserialize, Default)]
#[serde(untagged)]
pub(super) enum OneOrMany {
    #[default]
    None,
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub(super) fn into_vec(self) -> Vec<String> {
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
pub(super) struct Size(pub(super) u64);

#[derive(Deserialize)]
#[serde(untagged)]
enum SizeRepr {
    Int(i64),
    Str(String),
}

/// Why a size does not read (serde shows the message, with the line).
#[derive(Debug, thiserror::Error)]
pub(super) enum SizeError {
    #[error("size {0} is negative")]
    Negative(i64),
    #[error("{0:?} is not a size (use e.g. 65536, \"64KiB\", \"4MiB\", \"1GiB\")")]
    NotASize(String),
}

impl TryFrom<SizeRepr> for Size {
    type Error = SizeError;

    fn try_from(r: SizeRepr) -> Result<Self, SizeError> {
        match r {
            SizeRepr::Int(n) => u64::try_from(n)
                .map(Size)
                .map_err(|_| SizeError::Negative(n)),
            SizeRepr::Str(s) => parse_size(&s).ok_or(SizeError::NotASize(s)),
        }
    }
}

/// A size as `bytesize` reads it, except that a bare `K`, `M` or `G` is
/// binary (KiB, MiB, GiB), as cairn.toml has always read it (bytesize takes
/// it as decimal). A size too large for a u64 is refused.
pub(super) fn parse_size(s: &str) -> Option<Size> {
    let s = s.trim();
    let binary = match s.strip_suffix(['K', 'M', 'G']) {
        Some(num) if num.trim_end().bytes().all(|b| b.is_ascii_digit()) => {
            format!("{s}iB")
        }
        _ => s.to_string(),
    };
    let size: bytesize::ByteSize = binary.parse().ok()?;
    (size.0 != u64::MAX).then_some(Size(size.0))
}

/// The value a key has when the file does not hold it: an empty span.
fn absent<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("64KiB"), Some(Size(65536)));
        assert_eq!(parse_size("4 MiB"), Some(Size(4 << 20)));
        assert_eq!(parse_size("12"), Some(Size(12)));
        assert_eq!(parse_size("12 parsecs"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("-5"), None);
        // A bare K, M or G is binary, as it always was in cairn.toml.
        assert_eq!(parse_size("64K"), Some(Size(64 << 10)));
        assert_eq!(parse_size("4 M"), Some(Size(4 << 20)));
        assert_eq!(parse_size("1G"), Some(Size(1 << 30)));
        assert_eq!(parse_size("99999999999999999999GiB"), None);
    }
}
