//! The file system's figures for `/metrics`: how long commits take and
//! how many failed, how long writers waited for dirty-bytes admission,
//! and every branch read and write (time, bytes, faults, heard from the
//! redundancy layer's watcher: `branch_io`), all recorded as they happen;
//! and the store's and the caches' counts (read when scraped, from counters the file system keeps
//! anyway, so a scrape walks nothing). Logical bytes and the dedup ratio
//! need a walk of every root: they are those of the last space report
//! (`cairn stats`, the dashboard and its five-minute sampler compute one),
//! with its age.

mod branch_io;

use std::sync::{Arc, Weak};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::history::{SNAPSHOT_PREFIX, VERSION_PREFIX};
use crate::{Fs, Inner};

/// Which dirty-bytes limit held a writer back ([`Recorded::admission_waited`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Limit {
    /// `fs.total_dirty`: the writer stored its own bytes before going on.
    Total,
    /// `fs.file_dirty`: it waited for its file's write-behind in flight.
    File,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: &'static str,
}

type Waits = Family<LimitLabel, Histogram, fn() -> Histogram>;

/// 10 µs to ~2.6 s in 4x steps: a settled file to a slow disk's apply.
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 4.0, 10))
}

/// Figures recorded as things happen; kept whether or not anything
/// scrapes them (a few atomics).
#[derive(Debug)]
pub(crate) struct Recorded {
    commit_seconds: Histogram,
    commit_failures: Counter,
    admission: Waits,
    pub(crate) branches: Arc<branch_io::BranchFigures>,
    /// The last space report's logical bytes and dedup ratio, and when it
    /// was computed (by `cairn stats`, the dashboard, its sampler).
    last_space: parking_lot::Mutex<Option<(Instant, u64, f64)>>,
}

impl Default for Recorded {
    fn default() -> Recorded {
        Recorded {
            // 100 µs to ~26 s in 4x steps: an empty commit to a slow disk.
            commit_seconds: Histogram::new(exponential_buckets(1e-4, 4.0, 10)),
            commit_failures: Counter::default(),
            admission: Waits::new_with_constructor(wait_histogram),
            branches: Arc::default(),
            last_space: parking_lot::Mutex::new(None),
        }
    }
}

impl Recorded {
    pub(crate) fn space(&self, report: &crate::space::SpaceReport) {
        *self.last_space.lock() = Some((Instant::now(), report.logical_bytes, report.dedup_ratio));
    }

    /// A writer held back by `limit` since `started` goes on.
    pub(crate) fn admission_waited(&self, limit: Limit, started: Instant) {
        let limit = match limit {
            Limit::Total => "total",
            Limit::File => "file",
        };
        self.admission
            .get_or_create(&LimitLabel { limit })
            .observe(started.elapsed().as_secs_f64());
    }

    pub(crate) fn commit_done(&self, started: Instant, ok: bool) {
        if ok {
            self.commit_seconds.observe(started.elapsed().as_secs_f64());
        } else {
            self.commit_failures.inc();
        }
    }
}

impl Fs {
    /// Registers the file system's figures (`cairn_commit_*`, `cairn_store_*`,
    /// `cairn_cache_*`, ...; `docs/metrics.md` lists them) in `registry`.
    pub fn register_metrics(&self, registry: &mut Registry) {
        let recorded = &self.inner.recorded;
        registry.register_with_unit(
            "cairn_commit_duration",
            "Time a commit took to make data and metadata durable",
            Unit::Seconds,
            recorded.commit_seconds.clone(),
        );
        registry.register(
            "cairn_commit_failures",
            "Commits that failed (retried at the next interval)",
            recorded.commit_failures.clone(),
        );
        registry.register_with_unit(
            "cairn_admission_wait",
            "Time writers past a dirty-bytes limit waited before going on, by limit (total, file)",
            Unit::Seconds,
            recorded.admission.clone(),
        );
        recorded.branches.register(registry);
        registry.register_collector(Box::new(Scraped(Arc::downgrade(&self.inner))));
    }
}

/// Figures read at each scrape; nothing once the file system is gone.
struct Scraped(Weak<Inner>);

impl std::fmt::Debug for Scraped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scraped")
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Class {
    class: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Cache {
    cache: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Branch {
    branch: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BranchFault {
    branch: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RootKind {
    kind: &'static str,
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    value: u64,
) -> std::fmt::Result {
    let g = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
    g.encode(enc.encode_descriptor(name, help, unit.as_ref(), g.metric_type())?)
}

fn gauge_f(enc: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> std::fmt::Result {
    let g = ConstGauge::new(value);
    g.encode(enc.encode_descriptor(name, help, None, g.metric_type())?)
}

fn gauges<L: EncodeLabelSet, N: Copy + std::fmt::Debug>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<Unit>,
    values: &[(L, N)],
) -> std::fmt::Result
where
    ConstGauge<N>: EncodeMetric,
{
    let mut family = enc.encode_descriptor(
        name,
        help,
        unit.as_ref(),
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (labels, v) in values {
        ConstGauge::new(*v).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

fn counters<L: EncodeLabelSet>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: &[(L, u64)],
) -> std::fmt::Result {
    let mut family = enc.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (labels, v) in values {
        ConstCounter::new(*v).encode(family.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for Scraped {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let Some(inner) = self.0.upgrade() else {
            return Ok(());
        };
        let e = &mut enc;
        match inner.meta.counts() {
            Ok(c) => {
                gauge(
                    e,
                    "cairn_files",
                    "Regular files in the namespace",
                    None,
                    c.files,
                )?;
                gauge(
                    e,
                    "cairn_directories",
                    "Directories in the namespace",
                    None,
                    c.dirs,
                )?;
            }
            Err(err) => tracing::warn!(error = %err, "metrics: cannot count files"),
        }
        match inner.store.stats() {
            Ok(s) => {
                gauge(
                    e,
                    "cairn_store_chunks",
                    "Distinct chunks in the store",
                    None,
                    s.chunks,
                )?;
                gauge(
                    e,
                    "cairn_store_containers",
                    "Containers in the store",
                    None,
                    s.containers,
                )?;
                gauge(
                    e,
                    "cairn_store_unique",
                    "Bytes of the distinct chunks, uncompressed",
                    Some(Unit::Bytes),
                    s.unique_bytes,
                )?;
                gauge(
                    e,
                    "cairn_store_stored",
                    "Bytes of containers on the branches",
                    Some(Unit::Bytes),
                    s.stored_bytes,
                )?;
                gauge(
                    e,
                    "cairn_store_index_ram",
                    "Memory of the compact fingerprint index",
                    Some(Unit::Bytes),
                    s.index_ram_bytes,
                )?;
                if s.stored_bytes > 0 {
                    gauge_f(
                        e,
                        "cairn_store_compression_ratio",
                        "Unique bytes per stored byte",
                        s.unique_bytes as f64 / s.stored_bytes as f64,
                    )?;
                }
            }
            Err(err) => tracing::warn!(error = %err, "metrics: cannot read the store's counts"),
        }
        if let Some((at, logical, dedup)) = *inner.recorded.last_space.lock() {
            gauge(e, "cairn_logical", "Bytes the live files, versions, snapshots and streams hold, as of the last space report", Some(Unit::Bytes), logical)?;
            gauge_f(
                e,
                "cairn_dedup_ratio",
                "Logical bytes per unique byte, as of the last space report",
                dedup,
            )?;
            gauge_f(
                e,
                "cairn_space_report_age_seconds",
                "Seconds since the last space report (cairn stats, the dashboard)",
                at.elapsed().as_secs_f64(),
            )?;
        }
        gauge(
            e,
            "cairn_dirty",
            "Bytes written and not yet chunked",
            Some(Unit::Bytes),
            inner.dirty_total.load(std::sync::atomic::Ordering::Relaxed) as u64,
        )?;
        let caches = inner.fetcher.figures();
        gauge(
            e,
            "cairn_cache_dram",
            "Bytes held by the DRAM chunk cache",
            Some(Unit::Bytes),
            inner.cache.bytes() as u64,
        )?;
        let (pages_hit, pages_missed) = page_caches(&inner);
        counters(
            e,
            "cairn_cache_hits",
            "Lookups a cache answered: chunks in DRAM, pages in the metadata and index redb caches",
            &[
                (Cache { cache: "dram" }, caches.dram_hits),
                (Cache { cache: "metadata" }, pages_hit[0]),
                (Cache { cache: "index" }, pages_hit[1]),
            ],
        )?;
        counters(
            e,
            "cairn_cache_misses",
            "Lookups no cache answered: chunks read from the store (by the last cache asked), pages read from disk",
            &[
                (Cache { cache: "dram" }, caches.store_reads),
                (Cache { cache: "metadata" }, pages_missed[0]),
                (Cache { cache: "index" }, pages_missed[1]),
            ],
        )?;
        counters(
            e,
            "cairn_cache_fetch_joins",
            "Chunks a reader missed in DRAM, found being fetched (by read-ahead or another reader) and waited for",
            &[(Cache { cache: "dram" }, caches.joined)],
        )?;
        if let Some(t) = caches.tier {
            counters(
                e,
                "cairn_cache_tier_hits",
                "Chunks served from the persistent cache tier",
                &[(Cache { cache: "tier" }, t.hits)],
            )?;
            counters(
                e,
                "cairn_cache_tier_misses",
                "Chunks asked of the tier and not there",
                &[(Cache { cache: "tier" }, t.misses)],
            )?;
            gauge(
                e,
                "cairn_cache_tier",
                "Bytes held by the persistent cache tier",
                Some(Unit::Bytes),
                t.bytes,
            )?;
        }
        let reads = inner.store.reads_by_class();
        counters(
            e,
            "cairn_store_reads",
            "Container reads admitted, by kind of reader",
            &[
                (Class { class: "random" }, reads.random),
                (
                    Class {
                        class: "sequential",
                    },
                    reads.sequential,
                ),
                (
                    Class {
                        class: "background",
                    },
                    reads.background,
                ),
            ],
        )?;
        roots(e, &inner)?;
        branches(e, &inner)
    }
}

/// Page lookups the redb caches answered and missed: of the metadata
/// engine (`fs.redb`), and of the chunk index and roots together.
fn page_caches(inner: &Inner) -> ([u64; 2], [u64; 2]) {
    let (mut hits, mut misses) = ([0; 2], [0; 2]);
    let metadata = inner.meta.page_cache().into_iter();
    let index = inner.store.index_page_caches().into_iter();
    for (i, stats) in metadata.map(|s| (0, s)).chain(index.map(|s| (1, s))) {
        hits[i] += stats.read_hits() + stats.write_hits();
        misses[i] += stats.read_misses() + stats.write_misses();
    }
    (hits, misses)
}

/// Versions, snapshots and stored streams (`cairn put`), by kind.
fn roots(e: &mut DescriptorEncoder, inner: &Inner) -> std::fmt::Result {
    let roots = match inner.store.list_roots() {
        Ok(r) => r,
        Err(err) => {
            tracing::warn!(error = %err, "metrics: cannot list the roots");
            return Ok(());
        }
    };
    let (mut versions, mut snapshots) = (0i64, 0i64);
    for (label, _) in &roots {
        if label.starts_with(VERSION_PREFIX) {
            versions += 1;
        } else if label.starts_with(SNAPSHOT_PREFIX) {
            snapshots += 1;
        }
    }
    let streams = roots.len() as i64 - versions - snapshots;
    gauges(
        e,
        "cairn_roots",
        "Roots the store keeps: versions, snapshots and stored streams",
        None,
        &[
            (RootKind { kind: "version" }, versions),
            (RootKind { kind: "snapshot" }, snapshots),
            (RootKind { kind: "stream" }, streams),
        ],
    )
}

/// Each branch's health, reads, faults and read latency (none for the one
/// plain branch of a repository without redundancy: it has no such record).
fn branches(e: &mut DescriptorEncoder, inner: &Inner) -> std::fmt::Result {
    let layer = inner.store.layer();
    if layer.is_plain() {
        return Ok(());
    }
    let status = layer.status();
    let label = |name: &str| Branch {
        branch: name.to_owned(),
    };
    let flag = |b: bool| i64::from(b);
    let degraded: Vec<_> = status
        .iter()
        .map(|s| (label(&s.name), flag(s.degraded)))
        .collect();
    gauges(
        e,
        "cairn_branch_degraded",
        "1 when a read from the branch failed since its health was last reset",
        None,
        &degraded,
    )?;
    let retired: Vec<_> = status
        .iter()
        .map(|s| (label(&s.name), flag(s.retired)))
        .collect();
    gauges(
        e,
        "cairn_branch_retired",
        "1 when the branch takes no new shards",
        None,
        &retired,
    )?;
    let reads: Vec<_> = status
        .iter()
        .map(|s| (label(&s.name), s.totals.reads))
        .collect();
    counters(
        e,
        "cairn_branch_reads",
        "Verified shard reads the branch served",
        &reads,
    )?;
    let faults: Vec<_> = status
        .iter()
        .flat_map(|s| {
            [
                ("missing", s.totals.missing),
                ("unavailable", s.totals.unavailable),
                ("corrupt", s.totals.corrupt),
            ]
            .map(|(kind, n)| {
                (
                    BranchFault {
                        branch: s.name.clone(),
                        kind,
                    },
                    n,
                )
            })
        })
        .collect();
    counters(
        e,
        "cairn_branch_faults",
        "Shard reads from the branch that failed, by kind",
        &faults,
    )?;
    let latency: Vec<_> = status
        .iter()
        .filter_map(|s| Some((label(&s.name), s.read_latency?.as_secs_f64())))
        .collect();
    gauges(
        e,
        "cairn_branch_read_latency",
        "The read latency estimate that latency-aware reads balance by",
        Some(Unit::Seconds),
        &latency,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(registry: &Registry) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn admission_waits_are_counted_by_limit() {
        let recorded = Recorded::default();
        let mut registry = Registry::default();
        registry.register_with_unit(
            "cairn_admission_wait",
            "waits",
            Unit::Seconds,
            recorded.admission.clone(),
        );
        recorded.admission_waited(Limit::File, Instant::now());
        recorded.admission_waited(Limit::File, Instant::now());
        recorded.admission_waited(Limit::Total, Instant::now());
        let t = text(&registry);
        assert!(
            t.contains(r#"cairn_admission_wait_seconds_count{limit="file"} 2"#),
            "{t}"
        );
        assert!(
            t.contains(r#"cairn_admission_wait_seconds_count{limit="total"} 1"#),
            "{t}"
        );
    }
}
