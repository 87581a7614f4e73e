//! A directory served by `cairn chunkd` passes the same conformance suite
//! as a local directory, through `branch::ChunkdBranch`: one chunkd
//! process per check, each on a fresh directory.

mod common;

use std::sync::Arc;

use branch::testing::conformance;
use branch::{Branch, ChunkdBranch};
use common::chunkd::{token_file, Chunkd};
use parking_lot::Mutex;

#[test]
fn a_chunkd_branch_passes_the_conformance_suite() {
    let base = tempfile::tempdir().unwrap();
    let token = token_file(base.path());
    let servers: Mutex<Vec<Chunkd>> = Mutex::new(Vec::new());
    conformance(|| {
        let mut servers = servers.lock();
        let dir = base.path().join(servers.len().to_string());
        let server = Chunkd::start(&dir, &token);
        let branch = ChunkdBranch::open("remote", &server.config()).unwrap();
        servers.push(server);
        Arc::new(branch) as Arc<dyn Branch>
    });
}
