//! A store over a real local-directory branch and redb index in a
//! temporary directory, and the data the store tests write into it.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;

use branch::LocalDir;
use bytes::Bytes;
use cas::{ContainerId, RepoKey, Store, StoreSettings};

pub fn settings() -> StoreSettings {
    StoreSettings {
        container_size: 256 << 10,
        region_size: 32 << 10,
        ..Default::default()
    }
}

pub fn open(dir: &Path, key: &RepoKey) -> (Store, Arc<LocalDir>) {
    let (branch, _) = LocalDir::open("local", dir.join("branch")).unwrap();
    let branch = Arc::new(branch);
    let store = Store::open(branch.clone(), dir, key.clone(), settings()).unwrap();
    (store, branch)
}

/// Client `n`'s store (its index in `dir/client<n>`) over `branch`, one
/// several clients share; without a shared index.
pub fn client_alone(dir: &Path, key: &RepoKey, n: u16, branch: Arc<dyn branch::Branch>) -> Store {
    let meta = dir.join(format!("client{n}"));
    std::fs::create_dir_all(&meta).unwrap();
    let mut s = settings();
    s.client = cas::ClientNo::new(n);
    Store::open(branch, &meta, key.clone(), s).unwrap()
}

/// [`client_alone`] that finds other clients' chunks by catching up.
pub fn client(dir: &Path, key: &RepoKey, n: u16, branch: Arc<dyn branch::Branch>) -> Store {
    let store = client_alone(dir, key, n, branch);
    store.set_shared_index(cas::CatchUp::new(&store));
    store
}

/// `dir/branch`, which clients share.
pub fn shared_branch(dir: &Path) -> Arc<dyn branch::Branch> {
    let (branch, _) = LocalDir::open("shared", dir.join("branch")).unwrap();
    Arc::new(branch)
}

pub fn random(len: usize) -> Bytes {
    (0..len)
        .map(|_| rand::random::<u8>())
        .collect::<Vec<_>>()
        .into()
}

pub fn text(len: usize, seed: u32) -> Bytes {
    let words = ["cairn ", "stone ", "path ", "marker ", "summit "];
    let mut out = Vec::with_capacity(len + 8);
    let mut x = seed;
    while out.len() < len {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        out.extend_from_slice(words[(x >> 16) as usize % words.len()].as_bytes());
    }
    out.truncate(len);
    out.into()
}

pub fn no_progress() -> impl Fn(cas::CheckProgress) + Sync {
    |_| {}
}

pub fn container_path(dir: &Path, id: ContainerId) -> std::path::PathBuf {
    dir.join("branch").join(id.blob_key().as_str())
}
