//! What the values of a `cairn.toml` mean: each key within its bounds and
//! consistent with the others, branches and rules that fit together, turned
//! into each layer's settings. A refusal names the key and its line (from
//! the span serde kept, [`toml::Spanned`]), or the branch or rule.

use cas::{Compression, StoreSettings};
use chunking::ChunkerParams;
use fs::FsSettings;
use redundancy::Policy;
use toml::Spanned;

use super::problem::{BranchProblem, ChunkingRuleProblem, ConfigProblem, KeyProblem, RuleProblem};
use super::schema::{
    BranchKind, Codec, Mode, Raw, RawBranch, RawCache, RawChunkingRule, RawDefault, RawGc, RawQos,
    RawRule, RawSharedIndex, RawVersions, SharedIndexKind, Size,
};
use super::{
    BranchSpec, ChunkdLocation, ChunkingRuleSpec, Config, Location, RedundancyConfig, RuleSpec,
    S3Location, SharedIndexConfig,
};

type Result<T> = std::result::Result<T, ConfigProblem>;

/// Longest branch name: a `parity:K@NAME` policy must be able to name it.
pub(super) const MAX_NAME: usize = redundancy::MAX_BRANCH_NAME;

/// A refused key, at the line its value starts on (none if it is absent).
fn at<T>(
    text: &str,
    value: &Spanned<T>,
    section: &'static str,
    key: &'static str,
    problem: KeyProblem,
) -> ConfigProblem {
    let span = value.span();
    let line = (!span.is_empty())
        .then(|| text.get(..span.start))
        .flatten()
        .map(|before| before.matches('\n').count() + 1);
    ConfigProblem::Key {
        section,
        key,
        line,
        problem,
    }
}

fn u32_size(text: &str, v: &Spanned<Size>, key: &'static str) -> Result<u32> {
    let n = v.get_ref().0;
    u32::try_from(n).map_err(|_| at(text, v, "chunking", key, KeyProblem::TooLarge(n)))
}

pub(super) fn config(mut raw: Raw, text: &str) -> Result<Config> {
    let chunking = chunking(&raw, text)?;
    let chunking_rules = raw.chunking.rule.take().map(chunking_rules).transpose()?;
    let c = &raw.compression;
    let compression = match c.codec {
        Codec::Zstd => {
            let level = *c.level.get_ref();
            if !(1..=19).contains(&level) {
                let problem = KeyProblem::OutOfRange {
                    value: level.into(),
                    min: 1,
                    max: 19,
                };
                return Err(at(text, &c.level, "compression", "level", problem));
            }
            Compression::Zstd { level }
        }
        Codec::Lz4 => Compression::Lz4,
        Codec::None => Compression::None,
    };
    let region = c.region.get_ref().0;
    if !(4 << 10..=4 << 20).contains(&region) {
        let problem = KeyProblem::Region(region);
        return Err(at(text, &c.region, "compression", "region", problem));
    }
    let size = &raw.containers.size;
    let container = size.get_ref().0;
    if !(64 << 10..=1 << 30).contains(&container) || container < region {
        let problem = KeyProblem::ContainerSize(container);
        return Err(at(text, size, "containers", "size", problem));
    }
    let budget = &raw.memory.budget;
    if budget.get_ref().0 < 4 * container {
        let problem = KeyProblem::Budget {
            budget: budget.get_ref().0,
            least: 4 * container,
        };
        return Err(at(text, budget, "memory", "budget", problem));
    }
    let m = &raw.memory;
    for (value, key) in [
        (&m.metadata_cache, "metadata_cache"),
        (&m.index_cache, "index_cache"),
    ] {
        let v = value.get_ref().0;
        if !(1 << 20..=64 << 30).contains(&v) {
            let problem = KeyProblem::CacheMiBToGiB(v);
            return Err(at(text, value, "memory", key, problem));
        }
    }
    let f = &raw.fs;
    let inline_max = f.inline_max.get_ref().0;
    if inline_max > 64 << 10 {
        let problem = KeyProblem::InlineMax(inline_max);
        return Err(at(text, &f.inline_max, "fs", "inline_max", problem));
    }
    if f.file_dirty.0 < 1 << 20 || f.total_dirty.get_ref().0 < f.file_dirty.0 {
        return Err(at(
            text,
            &f.total_dirty,
            "fs",
            "total_dirty",
            KeyProblem::Dirty,
        ));
    }
    let commit = *f.commit_seconds.get_ref();
    if !(1..=3600).contains(&commit) {
        let problem = out_of_range(commit, 1, 3600);
        return Err(at(text, &f.commit_seconds, "fs", "commit_seconds", problem));
    }
    let version = *f.version_seconds.get_ref();
    if version > 7 * 86400 {
        let problem = KeyProblem::VersionSeconds(version);
        return Err(at(
            text,
            &f.version_seconds,
            "fs",
            "version_seconds",
            problem,
        ));
    }
    let retention = retention(text, &raw.versions, f.versions_keep.as_ref())?;
    let qos = qos(text, &raw.qos)?;
    let auto_gc = auto_gc(text, &raw.gc)?;
    let tier = tier(text, &raw.cache)?;
    let shared_index = raw
        .shared_index
        .as_ref()
        .map(|s| shared_index(text, s))
        .transpose()?;
    let redundancy = redundancy(raw.branch, raw.rule, raw.default_rule)?;
    Ok(Config {
        redundancy,
        shared_index,
        chunking_rules,
        chunking,
        store: StoreSettings {
            compression,
            container_size: container as usize,
            region_size: region as usize,
            memory_budget: budget.get_ref().0 as usize,
            index_cache: m.index_cache.get_ref().0 as usize,
            qos,
            client: cas::ClientNo::default(),
        },
        fs: FsSettings {
            inline_max: inline_max as usize,
            file_dirty_max: f.file_dirty.0 as usize,
            total_dirty_max: f.total_dirty.get_ref().0 as usize,
            readahead: f.readahead.0,
            cache_bytes: f.cache.0 as usize,
            commit_interval: std::time::Duration::from_secs(commit),
            version_interval: std::time::Duration::from_secs(version),
            retention,
            tier,
            close_to_open: false,
        },
        metadata_cache: m.metadata_cache.get_ref().0 as usize,
        page_cache_max: f.page_cache_max.0,
        writeback_cache: f.writeback_cache,
        kernel_dirty: f.kernel_dirty.0,
        auto_gc,
    })
}

/// `[qos]`: at most 256 reads in flight, weights 1 to 100.
fn qos(text: &str, q: &RawQos) -> Result<cas::qos::QosSettings> {
    let check = |key: &'static str, v: &toml::Spanned<u32>, max: u32| {
        let value = *v.get_ref();
        if (1..=max).contains(&value) {
            Ok(value)
        } else {
            Err(at(
                text,
                v,
                "qos",
                key,
                out_of_range(value.into(), 1, max.into()),
            ))
        }
    };
    Ok(cas::qos::QosSettings {
        reads: check("reads", &q.reads, 256)? as usize,
        random: check("random", &q.random, 100)?,
        sequential: check("sequential", &q.sequential, 100)?,
        background: check("background", &q.background, 100)?,
    })
}

/// `[cache]`: the persistent tier's settings, or `None` without `dir`.
fn tier(text: &str, c: &RawCache) -> Result<Option<cache::TierSettings>> {
    let Some(dir) = &c.dir else {
        return Ok(None);
    };
    if !dir.get_ref().is_absolute() {
        let shown = dir.get_ref().display().to_string();
        return Err(at(text, dir, "cache", "dir", KeyProblem::CacheDir(shown)));
    }
    for (value, key) in [(&c.size, "size"), (&c.write_rate, "write_rate")] {
        let v = value.get_ref().0;
        if v < 1 << 20 {
            return Err(at(
                text,
                value,
                "cache",
                key,
                KeyProblem::CacheAtLeastMiB(v),
            ));
        }
    }
    Ok(Some(cache::TierSettings {
        dir: dir.get_ref().clone(),
        size: c.size.get_ref().0,
        write_rate: c.write_rate.get_ref().0,
    }))
}

/// The `[[chunking.rule]]` sections, each with a unique name and a mode
/// and match that parse.
fn chunking_rules(raw: Vec<RawChunkingRule>) -> Result<Vec<ChunkingRuleSpec>> {
    let mut specs: Vec<ChunkingRuleSpec> = Vec::with_capacity(raw.len());
    for (i, r) in raw.into_iter().enumerate() {
        let name = r.name.unwrap_or_else(|| format!("rule {}", i + 1));
        if specs.iter().any(|s| s.name == name) {
            return Err(ConfigProblem::ChunkingRuleTwice(name));
        }
        let refuse = |problem: ChunkingRuleProblem| ConfigProblem::ChunkingRule {
            rule: name.clone(),
            problem,
        };
        let spec = ChunkingRuleSpec {
            chunking: r
                .mode
                .parse()
                .map_err(|e| refuse(ChunkingRuleProblem::Mode(e)))?,
            path: r.path,
            extensions: r.extension.into_vec(),
            min_size: r.min_size.map(|s| s.0),
            max_size: r.max_size.map(|s| s.0),
            name: name.clone(),
        };
        spec.rule().map_err(|e| refuse(e.into()))?;
        specs.push(spec);
    }
    Ok(specs)
}

/// `[gc]`: the check interval 1 s to a day, the free share 0 to 50%.
fn auto_gc(text: &str, g: &RawGc) -> Result<super::AutoGc> {
    let within = |key: &'static str, v: &Spanned<u64>, min: u64, max: u64| {
        let value = *v.get_ref();
        if (min..=max).contains(&value) {
            Ok(value)
        } else {
            Err(at(text, v, "gc", key, out_of_range(value, min, max)))
        }
    };
    let check = within("auto_check_seconds", &g.auto_check_seconds, 1, 86400)?;
    let keep_free = within("keep_free_percent", &g.keep_free_percent, 0, 50)?;
    Ok(super::AutoGc {
        after: g.auto_after.0,
        check: std::time::Duration::from_secs(check),
        keep_free_percent: keep_free as u8,
    })
}

fn out_of_range(value: u64, min: u64, max: u64) -> KeyProblem {
    let wide = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    KeyProblem::OutOfRange {
        value: wide(value),
        min: wide(min),
        max: wide(max),
    }
}

fn chunking(raw: &Raw, text: &str) -> Result<ChunkerParams> {
    let c = &raw.chunking;
    let params = match c.mode {
        Mode::Cdc => {
            if let Some(size) = &c.size {
                let problem = KeyProblem::OnlyForMode("fixed");
                return Err(at(text, size, "chunking", "size", problem));
            }
            let ChunkerParams::ContentDefined { min, avg, max } = ChunkerParams::default() else {
                unreachable!("the default is content-defined")
            };
            let or = |v: &Option<Spanned<Size>>, key, default| match v {
                Some(v) => u32_size(text, v, key),
                None => Ok(default),
            };
            ChunkerParams::ContentDefined {
                min: or(&c.min, "min", min)?,
                avg: or(&c.avg, "avg", avg)?,
                max: or(&c.max, "max", max)?,
            }
        }
        Mode::Fixed => {
            for (key, v) in [("min", &c.min), ("avg", &c.avg), ("max", &c.max)] {
                if let Some(v) = v {
                    let problem = KeyProblem::OnlyForMode("cdc");
                    return Err(at(text, v, "chunking", key, problem));
                }
            }
            let size = match &c.size {
                Some(size) => u32_size(text, size, "size")?,
                None => 64 << 10,
            };
            ChunkerParams::Fixed { size }
        }
    };
    if let Err(e) = params.validate() {
        let (key, value) = match e {
            chunking::ParamsError::OutOfRange { name, .. }
            | chunking::ParamsError::Odd { name, .. } => match name {
                "min" => ("min", &c.min),
                "max" => ("max", &c.max),
                "size" => ("size", &c.size),
                _ => ("avg", &c.avg),
            },
            chunking::ParamsError::Order { .. } => ("avg", &c.avg),
        };
        let absent = Spanned::new(0..0, Size(0));
        let value = value.as_ref().unwrap_or(&absent);
        return Err(at(text, value, "chunking", key, KeyProblem::Chunking(e)));
    }
    Ok(params)
}

/// The `[versions]` section, each key within its bounds; `versions_keep`
/// (in `[fs]`, its older name) stands for `keep_last`.
fn retention(
    text: &str,
    v: &RawVersions,
    versions_keep: Option<&Spanned<u64>>,
) -> Result<fs::retention::Retention> {
    let d = fs::retention::Retention::default();
    let absent = |n: u32| Spanned::new(0..0, u64::from(n));
    let last = match (&v.keep_last, versions_keep) {
        (Some(_), Some(old)) => {
            return Err(at(text, old, "fs", "versions_keep", KeyProblem::OlderName));
        }
        (Some(n), None) => ("versions", "keep_last", n.clone()),
        (None, Some(n)) => ("fs", "versions_keep", n.clone()),
        (None, None) => ("versions", "keep_last", absent(d.last)),
    };
    let check = |(section, key, n): (&'static str, &'static str, Spanned<u64>), min, max| {
        let value = *n.get_ref();
        if (min..=max).contains(&value) {
            Ok(value as u32)
        } else {
            Err(at(text, &n, section, key, out_of_range(value, min, max)))
        }
    };
    let or = |v: &Option<Spanned<u64>>, d: u32| v.clone().unwrap_or_else(|| absent(d));
    Ok(fs::retention::Retention {
        last: check(last, 1, 100_000)?,
        minutes: check(
            ("versions", "keep_minutes", or(&v.keep_minutes, d.minutes)),
            0,
            7 * 24 * 60,
        )?,
        hourly: check(
            ("versions", "keep_hourly", or(&v.keep_hourly, d.hourly)),
            0,
            24 * 366,
        )?,
        daily: check(
            ("versions", "keep_daily", or(&v.keep_daily, d.daily)),
            0,
            3660,
        )?,
    })
}

fn branch_spec(b: RawBranch) -> Result<BranchSpec> {
    let name = b.name;
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
    if !ok {
        return Err(ConfigProblem::BranchName(name));
    }
    let refuse = |problem| ConfigProblem::Branch {
        name: name.clone(),
        problem,
    };
    let s3_keys = [
        ("endpoint", b.endpoint.is_some()),
        ("bucket", b.bucket.is_some()),
        ("region", b.region.is_some()),
        ("access_key_id", b.access_key_id.is_some()),
        ("secret_access_key", b.secret_access_key.is_some()),
    ];
    let chunkd_keys = [
        ("url", b.url.is_some()),
        ("token_file", b.token_file.is_some()),
    ];
    if b.kind != BranchKind::Chunkd {
        if let Some((key, _)) = chunkd_keys.iter().find(|(_, set)| *set) {
            return Err(refuse(BranchProblem::OnlyForChunkd(key)));
        }
    }
    let location = match b.kind {
        BranchKind::Local => {
            if let Some((key, _)) = s3_keys.iter().find(|(_, set)| *set) {
                return Err(refuse(BranchProblem::OnlyForS3(key)));
            }
            Location::Local(b.path.ok_or_else(|| refuse(BranchProblem::NeedsPath))?)
        }
        BranchKind::S3 => {
            if b.path.is_some() {
                return Err(refuse(BranchProblem::PathOnlyForLocal));
            }
            let need =
                |v: Option<String>, key| v.ok_or_else(|| refuse(BranchProblem::S3Needs(key)));
            Location::S3(S3Location {
                endpoint: need(b.endpoint, "endpoint")?,
                bucket: need(b.bucket, "bucket")?,
                region: b.region.unwrap_or_else(|| "us-east-1".into()),
                access_key_id: need(b.access_key_id, "access_key_id")?,
                secret_access_key: need(b.secret_access_key, "secret_access_key")?,
            })
        }
        BranchKind::Chunkd => {
            if let Some((key, _)) = s3_keys.iter().find(|(_, set)| *set) {
                return Err(refuse(BranchProblem::OnlyForS3(key)));
            }
            if b.path.is_some() {
                return Err(refuse(BranchProblem::PathOnlyForLocal));
            }
            Location::Chunkd(ChunkdLocation {
                url: b
                    .url
                    .ok_or_else(|| refuse(BranchProblem::ChunkdNeeds("url")))?,
                token_file: b
                    .token_file
                    .ok_or_else(|| refuse(BranchProblem::ChunkdNeeds("token_file")))?,
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
    wanted: Option<&[String]>,
    branches: &[BranchSpec],
) -> std::result::Result<Vec<String>, RuleProblem> {
    let Some(wanted) = wanted else {
        return Ok(branches.iter().map(|b| b.name.clone()).collect());
    };
    for w in wanted {
        let known = branches
            .iter()
            .any(|b| b.name == *w || b.labels.contains(w));
        if !known {
            return Err(RuleProblem::UnknownBranch(w.clone()));
        }
    }
    let names: Vec<String> = branches
        .iter()
        .filter(|b| wanted.iter().any(|w| b.name == *w || b.labels.contains(w)))
        .map(|b| b.name.clone())
        .collect();
    if names.is_empty() {
        return Err(RuleProblem::NoBranch);
    }
    Ok(names)
}

fn rule_policy(text: &str, allowed: &[String]) -> std::result::Result<Policy, RuleProblem> {
    let policy: Policy = text.parse()?;
    if policy.width() > allowed.len() {
        return Err(RuleProblem::TooWide {
            policy,
            allowed: allowed.to_vec(),
        });
    }
    if let Some(fixed) = policy.fixed_parity_branch() {
        if !allowed.iter().any(|a| a == fixed) {
            return Err(RuleProblem::ParityElsewhere {
                policy,
                allowed: allowed.to_vec(),
            });
        }
    }
    Ok(policy)
}

/// One `[[rule]]`, checked against the branches.
fn rule_spec(
    name: String,
    r: RawRule,
    branches: &[BranchSpec],
) -> std::result::Result<RuleSpec, RuleProblem> {
    let allowed = allowed(r.branches.as_deref(), branches)?;
    let spec = RuleSpec {
        policy: rule_policy(&r.policy, &allowed)?,
        branches: allowed,
        path: r.path,
        extensions: r.extension.into_vec(),
        min_size: r.min_size.map(|s| s.0),
        max_size: r.max_size.map(|s| s.0),
        uid: r.uid,
        name,
    };
    spec.matcher()?;
    Ok(spec)
}

fn redundancy(
    branches: Vec<RawBranch>,
    rules: Vec<RawRule>,
    default: Option<RawDefault>,
) -> Result<Option<RedundancyConfig>> {
    if branches.is_empty() {
        if !rules.is_empty() || default.is_some() {
            return Err(ConfigProblem::RulesWithoutBranches);
        }
        return Ok(None);
    }
    let branches: Vec<BranchSpec> = branches
        .into_iter()
        .map(branch_spec)
        .collect::<Result<_>>()?;
    for (i, b) in branches.iter().enumerate() {
        if branches[..i].iter().any(|o| o.name == b.name) {
            return Err(ConfigProblem::BranchTwice(b.name.clone()));
        }
    }
    let mut specs: Vec<RuleSpec> = Vec::new();
    for (i, r) in rules.into_iter().enumerate() {
        let name = r.name.clone().unwrap_or_else(|| format!("rule {}", i + 1));
        let refuse = |problem| ConfigProblem::Rule {
            rule: format!("rule {name:?}"),
            problem,
        };
        if specs.iter().any(|s| s.name == name) {
            return Err(ConfigProblem::RuleTwice(name));
        }
        let spec = rule_spec(name.clone(), r, &branches).map_err(refuse)?;
        specs.push(spec);
    }
    let (text, wanted) = match default {
        Some(d) => (d.policy, d.branches),
        None => ("single".to_string(), None),
    };
    let refuse = |problem| ConfigProblem::Rule {
        rule: "default_rule".into(),
        problem,
    };
    let allowed = allowed(wanted.as_deref(), &branches).map_err(refuse)?;
    let default = RuleSpec {
        name: "default".into(),
        policy: rule_policy(&text, &allowed).map_err(refuse)?,
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

/// Most etcd endpoints a `[shared_index]` may name.
const MAX_ETCD: usize = 16;

/// `[shared_index]`: every key present and well-formed; the index itself
/// is reached only when a mount opens it.
fn shared_index(text: &str, s: &RawSharedIndex) -> Result<SharedIndexConfig> {
    const SECTION: &str = "shared_index";
    let SharedIndexKind::Chunkd = s.kind;
    let missing = |key| ConfigProblem::Key {
        section: SECTION,
        key,
        line: None,
        problem: KeyProblem::Required,
    };
    let endpoints = s.etcd.as_ref().ok_or_else(|| missing("etcd"))?;
    let etcd = endpoints.get_ref();
    if etcd.is_empty() || etcd.len() > MAX_ETCD {
        let problem = KeyProblem::EtcdCount(MAX_ETCD);
        return Err(at(text, endpoints, SECTION, "etcd", problem));
    }
    if let Some(bad) = etcd.iter().find(|e| !is_endpoint(e)) {
        let problem = KeyProblem::EtcdEndpoint(bad.clone());
        return Err(at(text, endpoints, SECTION, "etcd", problem));
    }
    let fsid = s.fsid.as_ref().ok_or_else(|| missing("fsid"))?;
    let name = fsid.get_ref();
    let valid = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !valid {
        return Err(at(
            text,
            fsid,
            SECTION,
            "fsid",
            KeyProblem::Fsid(name.clone()),
        ));
    }
    let token_file = s.token_file.as_ref().ok_or_else(|| missing("token_file"))?;
    Ok(SharedIndexConfig {
        etcd: etcd.clone(),
        fsid: name.clone(),
        token_file: token_file.get_ref().clone(),
    })
}

/// `http://HOST:PORT` or `https://HOST:PORT`, nothing after the port.
fn is_endpoint(e: &str) -> bool {
    let Some(rest) = e
        .strip_prefix("http://")
        .or_else(|| e.strip_prefix("https://"))
    else {
        return false;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    match rest.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains('/') && port.parse::<u16>().is_ok_and(|p| p > 0)
        }
        None => false,
    }
}
