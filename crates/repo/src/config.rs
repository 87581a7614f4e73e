//! `cairn.toml`: what a user may tune, with errors that name the key and line.

use std::path::{Path, PathBuf};

use cas::{Compression, StoreSettings};
use chunking::ChunkerParams;
use fs::FsSettings;
use serde::Deserialize;

/// The settings of a repository, already validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub chunking: ChunkerParams,
    pub store: StoreSettings,
    pub fs: FsSettings,
}

#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct ConfigError {
    pub path: PathBuf,
    pub message: String,
}

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
commit_seconds = 5      # written data and metadata become durable at least this often
version_seconds = 30    # a version of the namespace is written this often (0: never)
versions_keep = 10      # how many versions are kept; older ones are dropped
"#;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
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
    #[serde(default = "commit_seconds")]
    commit_seconds: u64,
    #[serde(default = "version_seconds")]
    version_seconds: u64,
    #[serde(default = "versions_keep")]
    versions_keep: u64,
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
fn commit_seconds() -> u64 {
    FsSettings::default().commit_interval.as_secs()
}
fn version_seconds() -> u64 {
    FsSettings::default().version_interval.as_secs()
}
fn versions_keep() -> u64 {
    FsSettings::default().versions_keep as u64
}

impl Default for RawFs {
    fn default() -> Self {
        RawFs {
            inline_max: inline_max(),
            file_dirty: file_dirty(),
            total_dirty: total_dirty(),
            readahead: readahead(),
            cache: cache(),
            commit_seconds: commit_seconds(),
            version_seconds: version_seconds(),
            versions_keep: versions_keep(),
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
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            path: path.to_path_buf(),
            message: format!("cannot read: {e}"),
        })?;
        Self::parse(&text).map_err(|message| ConfigError {
            path: path.to_path_buf(),
            message,
        })
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
        if !(1..=100_000).contains(&f.versions_keep) {
            return Err(at_key(
                text,
                "fs",
                "versions_keep",
                format!("{} is outside 1..=100000", f.versions_keep),
            ));
        }
        Ok(Config {
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
                versions_keep: f.versions_keep as usize,
            },
        })
    }
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
        assert_eq!(Config::parse("").unwrap(), c);
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
