//! The conformance suite of `meta` over a file system sharded over three
//! data clusters (plus the control cluster): a fresh file system per
//! scenario, 16 shards so that directories land on every cluster and most
//! operations between a directory and its parent cross clusters.

mod common;

use meta::MetaStore;

#[test]
fn every_conformance_scenario_passes_over_three_clusters() {
    let ring = common::Ring::start(3);
    meta::conformance::run_all(&|| {
        let fs = ring.init(16);
        Box::new(ring.open(&fs)) as Box<dyn MetaStore>
    });
}
