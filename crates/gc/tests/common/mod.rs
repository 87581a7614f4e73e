//! A real store over a temporary directory (a local branch, a redb index),
//! files put into it as roots, and a collection run over it, for the
//! collector's scenarios.
#![allow(dead_code)]

pub mod clients;

use std::path::Path;
use std::sync::Arc;

use branch::{BlobKey, Branch, LocalDir};
use cas::{ChunkId, RepoKey, Store, StoreSettings};
use chunking::ChunkerParams;
use gc::{GcOptions, GcReport, Live};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// Chunks of 16 KiB exactly, so a file's chunk count is known.
pub const CHUNK: usize = 16 << 10;

pub fn params() -> ChunkerParams {
    ChunkerParams::Fixed { size: CHUNK as u32 }
}

/// Containers of 256 KiB: a megabyte of data fills a few.
pub fn settings() -> StoreSettings {
    StoreSettings {
        container_size: 256 << 10,
        region_size: CHUNK,
        ..StoreSettings::default()
    }
}

/// A store on a local branch under `dir/branch`, its index under
/// `dir/meta`; also the branch, to list what it holds.
pub fn store(dir: &Path) -> (Store, Arc<LocalDir>) {
    let (branch, _) = LocalDir::open("local", dir.join("branch")).unwrap();
    let branch = Arc::new(branch);
    std::fs::create_dir_all(dir.join("meta")).unwrap();
    let store = Store::open(
        branch.clone(),
        &dir.join("meta"),
        RepoKey::generate(),
        settings(),
    )
    .unwrap();
    (store, branch)
}

/// Creates `name` in the root of `fs` holding `data`, written and
/// fsynced, its handle closed.
pub fn create_file(fs: &fs::Fs, name: &str, data: &[u8]) {
    let new = meta::NewInode {
        kind: meta::FileKind::File,
        perm: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        content: meta::Content::Empty,
        xattrs: Vec::new(),
    };
    let ino = fs
        .create(meta::InodeId::ROOT, name.as_bytes(), new)
        .unwrap()
        .id;
    fs.open(ino).unwrap();
    fs.write(ino, 0, data).unwrap();
    fs.fsync(ino).unwrap();
    fs.release(ino).unwrap();
}

/// Incompressible bytes, the same for the same seed.
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    StdRng::seed_from_u64(seed).fill_bytes(&mut out);
    out
}

/// Stores `data` as a file and roots it under `label`.
pub fn put(store: &Store, label: &str, data: &[u8]) -> ChunkId {
    let stored = recipe::store_stream(store, data, params(), &|_| {}).unwrap();
    store.put_root(label, &stored.root).unwrap();
    stored.root
}

/// The whole file a recipe root stands for.
pub fn read(store: &Store, root: ChunkId) -> Vec<u8> {
    let recipe = recipe::Recipe::open(store, root).unwrap();
    recipe.read_at(0, recipe.len()).unwrap()
}

/// The chunk ids of the data of a stored file, in file order.
pub fn data_chunks(data: &[u8], store: &Store) -> Vec<ChunkId> {
    let chunks: Vec<bytes::Bytes> = data
        .chunks(CHUNK)
        .map(bytes::Bytes::copy_from_slice)
        .collect();
    store.chunk_ids(&chunks)
}

/// One collection of a store without a file system.
pub fn collect(store: &Store, threshold: f64, dry_run: bool) -> GcReport {
    let options = GcOptions {
        threshold,
        max_garbage: 1.0,
        dry_run,
        compact_index: false,
        peer_wait: gc::PEER_WAIT,
    };
    gc::collect(store, Live::StoreOnly, options, &|_| {}).unwrap()
}

/// The blobs on the branch, sorted.
pub fn blobs(branch: &LocalDir) -> Vec<BlobKey> {
    let mut keys = branch.list("").unwrap();
    keys.sort();
    keys
}

/// The store's full check finds no damage.
pub fn assert_clean(store: &Store) {
    let report = store.check(&|_| {}).unwrap();
    let damage: Vec<_> = report.problems.iter().filter(|p| p.is_damage()).collect();
    assert!(damage.is_empty(), "the check found damage: {damage:?}");
}
