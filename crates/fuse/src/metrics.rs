//! What the mount did, for `/metrics`: how long each kind of kernel
//! request took, and the bytes read and written. Recorded by the worker
//! that answered the request, from its start to its reply.

use std::sync::Arc;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Op {
    op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Direction {
    direction: &'static str,
}

type Latencies = Family<Op, Histogram, fn() -> Histogram>;

/// 10 µs to ~2.6 s in 4x steps: a cached getattr to a commit's fsync.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 4.0, 10))
}

/// The mount's request figures; [`FuseMetrics::new`] registers them.
#[derive(Debug)]
pub struct FuseMetrics {
    latency: Latencies,
    bytes: Family<Direction, Counter>,
}

impl FuseMetrics {
    /// Figures registered in `registry` under `cairn_fuse_*`, to be given
    /// to the mount in [`crate::MountOptions::metrics`].
    pub fn new(registry: &mut Registry) -> Arc<FuseMetrics> {
        let m = FuseMetrics {
            latency: Latencies::new_with_constructor(latency_histogram),
            bytes: Family::default(),
        };
        registry.register_with_unit(
            "cairn_fuse_request_duration",
            "Time from a kernel request's arrival to its reply, by operation",
            Unit::Seconds,
            m.latency.clone(),
        );
        registry.register_with_unit(
            "cairn_fuse",
            "Bytes read and written through the mount",
            Unit::Bytes,
            m.bytes.clone(),
        );
        Arc::new(m)
    }

    /// Times one request of kind `op` until the returned guard drops.
    pub(crate) fn time(&self, op: &'static str) -> Timer<'_> {
        Timer {
            metrics: self,
            op,
            start: Instant::now(),
        }
    }

    pub(crate) fn transferred(&self, direction: &'static str, bytes: usize) {
        self.bytes
            .get_or_create(&Direction { direction })
            .inc_by(bytes as u64);
    }
}

/// Records a request's duration when dropped.
pub(crate) struct Timer<'a> {
    metrics: &'a FuseMetrics,
    op: &'static str,
    start: Instant,
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        self.metrics
            .latency
            .get_or_create(&Op { op: self.op })
            .observe(self.start.elapsed().as_secs_f64());
    }
}
