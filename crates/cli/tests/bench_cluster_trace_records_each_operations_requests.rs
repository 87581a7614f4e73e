//! `cairn bench cluster-trace` records what each metadata operation asks
//! of etcd, over simulated clusters: what the scaling simulation of
//! `bench/cluster.py` replays. A stat only reads, a create writes once in
//! one data cluster, a rename across directories on two clusters goes
//! through an intent in the control cluster (on one data cluster it
//! does not), and every request names a cluster that exists.

mod common;

use std::path::Path;

use serde_json::Value;

fn trace(clusters: u32) -> Value {
    let clusters = clusters.to_string();
    let args = [
        "bench",
        "cluster-trace",
        "--clusters",
        &clusters,
        "--dirs",
        "8",
        "--files",
        "32",
    ];
    serde_json::from_str(&common::ok(Path::new("/nonexistent"), &args)).unwrap()
}

/// The requests of one operation: (cluster, kind).
fn requests(op: &Value) -> Vec<(i64, String)> {
    op.as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_i64().unwrap(), r[1].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn each_operations_requests_are_recorded() {
    let t = trace(3);
    let phases = &t["phases"];
    let ops = |phase: &str| -> Vec<Vec<(i64, String)>> {
        phases[phase]
            .as_array()
            .unwrap()
            .iter()
            .map(requests)
            .collect()
    };
    assert_eq!(ops("mkdir").len(), 8);
    for phase in ["create", "stat", "rename", "rename-across"] {
        assert_eq!(ops(phase).len(), 32, "{phase}");
    }
    for op in ops("stat") {
        assert!(!op.is_empty());
        assert!(
            op.iter()
                .all(|(c, k)| (0..3).contains(c) && (k == "range" || k == "read-txn")),
            "{op:?}"
        );
    }
    for op in ops("create") {
        let writes: Vec<_> = op.iter().filter(|(_, k)| k == "txn").collect();
        assert_eq!(writes.len(), 1, "{op:?}");
        assert!((0..3).contains(&writes[0].0), "{op:?}");
    }
    // Some move crosses clusters: its intent is written in the control
    // cluster (-1).
    assert!(ops("rename-across")
        .iter()
        .any(|op| op.iter().any(|(c, k)| *c == -1 && k == "txn")));
    for phase in phases.as_object().unwrap().keys() {
        for op in ops(phase) {
            assert!(
                op.iter().all(|(c, _)| (-1..3).contains(c)),
                "{phase}: {op:?}"
            );
        }
    }
    // One data cluster: every move stays in it, no intent.
    let one = trace(1);
    for op in one["phases"]["rename-across"]
        .as_array()
        .unwrap()
        .iter()
        .map(requests)
    {
        assert!(op.iter().all(|(c, _)| *c == 0), "{op:?}");
    }
}
