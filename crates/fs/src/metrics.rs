//! The file system's figures for `/metrics`: how long commits take and
//! how many failed (recorded as they happen), and the store's and the
//! caches' counts (read when scraped, from counters the file system keeps
//! anyway, so a scrape walks nothing). Logical bytes and the dedup ratio
//! need a walk of every root and are left to `cairn stats`.

use std::sync::{Arc, Weak};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use crate::{Fs, Inner};

/// Figures recorded as things happen; kept whether or not anything
/// scrapes them (a few atomics).
#[derive(Debug)]
pub(crate) struct Recorded {
    commit_seconds: Histogram,
    commit_failures: Counter,
}

impl Default for Recorded {
    fn default() -> Recorded {
        Recorded {
            // 100 µs to ~26 s in 4x steps: an empty commit to a slow disk.
            commit_seconds: Histogram::new(exponential_buckets(1e-4, 4.0, 10)),
            commit_failures: Counter::default(),
        }
    }
}

impl Recorded {
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
        gauge(
            e,
            "cairn_dirty",
            "Bytes written and not yet chunked",
            Some(Unit::Bytes),
            inner.dirty_total.load(std::sync::atomic::Ordering::Relaxed) as u64,
        )?;
        let (store_reads, tier) = inner.fetcher.figures();
        gauge(
            e,
            "cairn_cache_dram",
            "Bytes held by the DRAM chunk cache",
            Some(Unit::Bytes),
            inner.cache.bytes() as u64,
        )?;
        counters(
            e,
            "cairn_cache_misses",
            "Chunk reads no cache answered (the store did), by the last cache asked",
            &[(Cache { cache: "dram" }, store_reads)],
        )?;
        if let Some(t) = tier {
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
        Ok(())
    }
}
