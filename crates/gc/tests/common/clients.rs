//! Clients of one shared namespace for the collection-across-clients
//! scenarios: file systems numbered 0, 1, ... over one local branch, each
//! with its own index, their namespace in one (simulated) etcd.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use branch::{Branch, LocalDir};
use cas::{CatchUp, ClientNo, RepoKey, Store};
use fs::{Fs, FsSettings};
use meta::{InodeId, Phase};
use meta_etcd::{EtcdMeta, EtcdOptions};

/// Client `n` under `dir` (its index in `dir/client<n>`, the branch in
/// `dir/branch`), its namespace on `etcd`.
pub fn client(dir: &Path, key: &RepoKey, n: u16, etcd: &str) -> Arc<Fs> {
    client_on(dir, key, n, &[etcd.to_string()], EtcdOptions::default()).0
}

/// [`client`] on etcd `endpoints` with `options`; also its engine.
pub fn client_on(
    dir: &Path,
    key: &RepoKey,
    n: u16,
    endpoints: &[String],
    options: EtcdOptions,
) -> (Arc<Fs>, Arc<EtcdMeta>) {
    let (branch, _) = LocalDir::open("shared", dir.join("branch")).unwrap();
    client_over(dir, key, n, endpoints, options, Arc::new(branch))
}

/// [`client_on`] over `branch` (`dir/branch`, perhaps behind faults).
pub fn client_over(
    dir: &Path,
    key: &RepoKey,
    n: u16,
    endpoints: &[String],
    options: EtcdOptions,
    branch: Arc<dyn Branch>,
) -> (Arc<Fs>, Arc<EtcdMeta>) {
    let meta_dir = dir.join(format!("client{n}"));
    std::fs::create_dir_all(&meta_dir).unwrap();
    let mut s = super::settings();
    s.client = ClientNo::new(n);
    let store = Store::open(branch, &meta_dir, key.clone(), s).unwrap();
    store.set_shared_index(CatchUp::new(&store));
    let meta = Arc::new(EtcdMeta::open(endpoints, "fs", 0, 0, options).unwrap());
    let fs = Fs::new(
        meta.clone(),
        store,
        super::params(),
        FsSettings {
            version_interval: Duration::ZERO,
            ..FsSettings::default()
        },
    )
    .unwrap();
    (Arc::new(fs), meta)
}

/// Creates `name` in the root holding `data`, recorded and durable.
pub fn write(fs: &Fs, name: &str, data: &[u8]) {
    super::create_file(fs, name, data);
    fs.sync_all().unwrap();
}

/// Everything `name` in the root holds.
pub fn read(fs: &Fs, name: &str) -> Vec<u8> {
    let ino = fs.lookup(InodeId::ROOT, name.as_bytes()).unwrap().id;
    fs.open(ino).unwrap();
    let size = fs.getattr(ino).unwrap().attr.size;
    let data = fs.read(ino, 0, size as u32).unwrap();
    fs.release(ino).unwrap();
    data
}

/// Client `a` collects across clients in a thread of its own (every
/// container with garbage chosen; each client waited for up to a minute).
pub fn spawn_collector(a: &Arc<Fs>) -> std::thread::JoinHandle<gc::Result<gc::GcReport>> {
    spawn_collector_with(a, |_| {})
}

/// [`spawn_collector`], telling `progress` where it is.
pub fn spawn_collector_with(
    a: &Arc<Fs>,
    progress: impl Fn(gc::GcProgress) + Send + Sync + 'static,
) -> std::thread::JoinHandle<gc::Result<gc::GcReport>> {
    let a = a.clone();
    std::thread::spawn(move || {
        let options = gc::GcOptions {
            threshold: 1.0,
            peer_wait: Duration::from_secs(60),
            ..gc::GcOptions::default()
        };
        gc::collect(a.store(), gc::Live::Mounted(&a), options, &progress)
    })
}

/// Waits until the board shows a collection in `phase`.
pub fn until_phase(fs: &Fs, phase: Phase) {
    for _ in 0..3000 {
        if fs.board().unwrap().collecting().unwrap().map(|c| c.phase) == Some(phase) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the collection never reached {phase:?}");
}
