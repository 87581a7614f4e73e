//! The chunkd server in this process, under the branch conformance suite
//! through `ChunkdBranch` (the cli's tests run the same over the `cairn`
//! binary): one server per check, each on a fresh directory.

use std::net::SocketAddr;
use std::sync::Arc;

use branch::testing::conformance;
use branch::{Branch, ChunkdBranch, ChunkdConfig};
use parking_lot::Mutex;

#[test]
fn an_in_process_chunkd_passes_the_conformance_suite() {
    let base = tempfile::tempdir().unwrap();
    let token = base.path().join("token");
    std::fs::write(&token, "in-process-token-0123456789\n").unwrap();
    let servers: Mutex<Vec<chunkd::Running>> = Mutex::new(Vec::new());
    conformance(|| {
        let mut servers = servers.lock();
        let running = chunkd::start(chunkd::Config {
            dir: base.path().join(servers.len().to_string()),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token_file: token.clone(),
            max_body: 64 << 20,
            index: None,
        })
        .unwrap();
        let url = format!("http://{}", running.addr());
        servers.push(running);
        let branch = ChunkdBranch::open("remote", &ChunkdConfig::new(url, &token)).unwrap();
        Arc::new(branch) as Arc<dyn Branch>
    });
}

#[test]
fn a_short_token_is_refused_at_start() {
    let base = tempfile::tempdir().unwrap();
    let token = base.path().join("token");
    std::fs::write(&token, "short\n").unwrap();
    let err = chunkd::start(chunkd::Config {
        dir: base.path().join("d"),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token_file: token,
        max_body: 1 << 20,
        index: None,
    })
    .err()
    .expect("a 5-byte token is refused");
    assert!(
        matches!(err, chunkd::ChunkdError::WeakToken { len: 5, .. }),
        "{err}"
    );
}
