//! A container whose trailer is cut, whose footer length is garbled, or
//! whose footer is wiped keeps every chunk: the index rebuild recovers them
//! from the region records, reads give the exact bytes, and garbage
//! collection rewrites the container so that `check` is clean again.

use std::path::Path;
use std::sync::Arc;

use branch::LocalDir;
use bytes::Bytes;
use cas::{ChunkId, ContainerId, Problem, RepoKey, Store, StoreSettings};

fn open(dir: &Path, key: &RepoKey) -> Store {
    let (branch, _) = LocalDir::open("local", dir.join("branch")).unwrap();
    let settings = StoreSettings {
        container_size: 256 << 10,
        region_size: 32 << 10,
        ..Default::default()
    };
    Store::open(Arc::new(branch), dir, key.clone(), settings).unwrap()
}

fn random(len: usize, seed: u64) -> Bytes {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect::<Vec<_>>()
        .into()
}

fn container_path(dir: &Path, id: ContainerId) -> std::path::PathBuf {
    dir.join("branch").join(id.blob_key().as_str())
}

/// Collects with every chunk live, as a file system that uses them all.
fn gc_all_live(store: &Store) -> u64 {
    let gc = store.begin_collection().unwrap();
    let live = |_: &ChunkId| true;
    let mut rewritten = 0;
    for a in gc.assess(&live).unwrap() {
        if a.damaged {
            gc.prepare(a.container, &live).unwrap();
            rewritten += 1;
        }
    }
    gc.commit().unwrap();
    rewritten
}

fn damaged_footer_scenario(damage: impl Fn(&mut Vec<u8>)) {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let store = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..12)
        .map(|i| random(9_000 + i * 100, 2 * i as u64 + 1))
        .collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    drop(w);
    let container = store.locate(&ids[0]).unwrap().container;
    assert!(ids
        .iter()
        .all(|id| store.locate(id).unwrap().container == container));
    let path = container_path(dir.path(), container);
    let mut bytes = std::fs::read(&path).unwrap();
    damage(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();

    let report = store.check(&|_| {}).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| matches!(p, Problem::CorruptContainer { .. })),
        "{:?}",
        report.problems
    );
    assert!(
        !report.problems.iter().any(|p| matches!(
            p,
            Problem::CorruptChunk { .. } | Problem::DanglingIndexEntry { .. }
        )),
        "{:?}",
        report.problems
    );
    assert_eq!(store.damaged_containers().unwrap(), vec![container]);

    let rebuilt = store.rebuild_index(&|_| {}).unwrap();
    assert_eq!(rebuilt.chunks_indexed, chunks.len() as u64);
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);

    assert_eq!(gc_all_live(&store), 1);
    assert!(store.damaged_containers().unwrap().is_empty());
    assert!(!path.exists(), "the damaged container is still there");
    let report = store.check(&|_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.chunks_verified, chunks.len() as u64);
    drop(store);
    let store = open(dir.path(), &key);
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
}

const TRAILER: usize = 20;

#[test]
fn a_cut_trailer_keeps_every_chunk() {
    damaged_footer_scenario(|b| b.truncate(b.len() - 7));
}

#[test]
fn a_garbled_footer_length_keeps_every_chunk() {
    damaged_footer_scenario(|b| {
        let at = b.len() - TRAILER;
        b[at + 1] ^= 0x5a;
    });
}

#[test]
fn a_wiped_footer_keeps_every_chunk() {
    damaged_footer_scenario(|b| {
        let n = b.len();
        let footer_len = u32::from_le_bytes(b[n - TRAILER..n - TRAILER + 4].try_into().unwrap());
        let start = n - TRAILER - footer_len as usize;
        b[start..].fill(0);
    });
}
