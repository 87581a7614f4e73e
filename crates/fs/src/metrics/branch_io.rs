//! Every branch read and write, by branch and op, as the redundancy
//! layer's watcher ([`redundancy::IoWatcher`]) hears of it: latency,
//! bytes and faults for `cairn_branch_io_*`.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BranchOp {
    branch: String,
    op: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BranchOpFault {
    branch: String,
    op: &'static str,
    kind: &'static str,
}

type BranchLatencies = Family<BranchOp, Histogram, fn() -> Histogram>;

/// 50 µs to ~13 s in 4x steps: a page-cached shard to a slow bucket.
fn branch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(5e-5, 4.0, 10))
}

/// The branch I/O figures; the file system hands them to its store's
/// layer as its watcher.
#[derive(Debug)]
pub(crate) struct BranchFigures {
    seconds: BranchLatencies,
    bytes: Family<BranchOp, Counter>,
    faults: Family<BranchOpFault, Counter>,
}

impl Default for BranchFigures {
    fn default() -> BranchFigures {
        BranchFigures {
            seconds: BranchLatencies::new_with_constructor(branch_histogram),
            bytes: Family::default(),
            faults: Family::default(),
        }
    }
}

impl BranchFigures {
    /// Registers `cairn_branch_io_duration_seconds`,
    /// `cairn_branch_io_bytes_total` and `cairn_branch_io_faults_total`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "cairn_branch_io_duration",
            "Time each branch read and write call took, by branch and op",
            Unit::Seconds,
            self.seconds.clone(),
        );
        registry.register_with_unit(
            "cairn_branch_io",
            "Bytes read from and written to each branch, by branch and op",
            Unit::Bytes,
            self.bytes.clone(),
        );
        registry.register(
            "cairn_branch_io_faults",
            "Branch reads and writes that failed, by branch, op and kind",
            self.faults.clone(),
        );
    }
}

impl redundancy::IoWatcher for BranchFigures {
    fn io(&self, io: &redundancy::BranchIo<'_>) {
        let labels = BranchOp {
            branch: io.branch.to_owned(),
            op: io.op.as_str(),
        };
        self.seconds
            .get_or_create(&labels)
            .observe(io.took.as_secs_f64());
        if io.bytes > 0 {
            self.bytes.get_or_create(&labels).inc_by(io.bytes);
        }
        for kind in &io.faults {
            let kind = match kind {
                redundancy::FaultKind::Missing => "missing",
                redundancy::FaultKind::Unavailable => "unavailable",
                redundancy::FaultKind::Corrupt => "corrupt",
                redundancy::FaultKind::Full => "full",
            };
            self.faults
                .get_or_create(&BranchOpFault {
                    branch: labels.branch.clone(),
                    op: labels.op,
                    kind,
                })
                .inc();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redundancy::{BranchIo, FaultKind, IoOp, IoWatcher};
    use std::time::Duration;

    #[test]
    fn branch_calls_are_counted_by_branch_op_and_fault() {
        let figures = BranchFigures::default();
        let mut registry = Registry::default();
        figures.register(&mut registry);
        let call = |op, took_ms, bytes, faults: Vec<FaultKind>| BranchIo {
            branch: "a",
            op,
            took: Duration::from_millis(took_ms),
            bytes,
            faults,
        };
        let w: &dyn IoWatcher = &figures;
        w.io(&call(IoOp::Write, 2, 1000, vec![]));
        w.io(&call(IoOp::Write, 4, 500, vec![FaultKind::Full]));
        w.io(&call(IoOp::Read, 1, 0, vec![FaultKind::Missing]));
        let mut t = String::new();
        prometheus_client::encoding::text::encode(&mut t, &registry).unwrap();
        for line in [
            r#"cairn_branch_io_bytes_total{branch="a",op="write"} 1500"#,
            r#"cairn_branch_io_faults_total{branch="a",op="write",kind="full"} 1"#,
            r#"cairn_branch_io_faults_total{branch="a",op="read",kind="missing"} 1"#,
            r#"cairn_branch_io_duration_seconds_count{branch="a",op="write"} 2"#,
            r#"cairn_branch_io_duration_seconds_sum{branch="a",op="write"} 0.006"#,
            r#"cairn_branch_io_duration_seconds_count{branch="a",op="read"} 1"#,
        ] {
            assert!(t.contains(line), "{line} in\n{t}");
        }
        assert!(!t.contains(r#"cairn_branch_io_bytes_total{branch="a",op="read"}"#));
    }
}
