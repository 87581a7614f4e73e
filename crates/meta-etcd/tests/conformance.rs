//! The conformance suite of `meta` (the same scenarios the redb engine
//! runs) over etcd: one etcd for the binary, a fresh file system per
//! scenario.

mod common;

use meta::MetaStore;

#[test]
fn every_conformance_scenario_passes_on_etcd() {
    let etcd = common::Etcd::start();
    meta::conformance::run_all(&|| Box::new(etcd.open(&common::fsid())) as Box<dyn MetaStore>);
}
