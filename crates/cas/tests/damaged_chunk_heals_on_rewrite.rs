//! A chunk copy that failed verification is never deduplicated against
//! again: writing the same data stores a good copy, the index moves to it
//! (in the running store and after a reopen), and garbage collection
//! reclaims the damaged container, after which `check` is clean.

use std::path::Path;
use std::sync::Arc;

use branch::LocalDir;
use bytes::Bytes;
use cas::{CasError, ChunkId, ContainerId, RepoKey, Store, StoreSettings};

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

#[test]
fn writing_the_data_again_heals_a_corrupt_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let store = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..6).map(|i| random(20_000, 2 * i + 1)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    drop(w);
    let bad = store.locate(&ids[2]).unwrap();
    let path = container_path(dir.path(), bad.container);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[bad.region_offset as usize + 5 + bad.offset_in_region as usize + 99] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();

    let err = store.read_chunks(&ids).unwrap_err();
    assert!(matches!(err, CasError::CorruptChunk { .. }), "{err}");
    assert!(store.read_chunk(&ids[2]).is_err());
    assert_eq!(store.damaged_containers().unwrap(), vec![bad.container]);

    // The same data written again (another stream, as another file): not
    // deduplicated against the damaged copy.
    let mut w = store.stream();
    assert_eq!(w.write_batch(&[chunks[2].clone()]).unwrap(), vec![ids[2]]);
    assert_eq!(
        w.stats().new_chunks,
        1,
        "deduplicated against a damaged copy"
    );
    w.flush().unwrap();
    drop(w);
    let healed = store.locate(&ids[2]).unwrap();
    assert_ne!(healed.container, bad.container);
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
    // A good copy is deduplicated against as usual.
    let mut w = store.stream();
    w.write_batch(&[chunks[2].clone()]).unwrap();
    assert_eq!(w.stats().new_chunks, 0);
    drop(w);

    // The heal is durable.
    drop(store);
    let store = open(dir.path(), &key);
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
    assert!(!store.check(&|_| {}).unwrap().is_clean());

    let gc = store.begin_collection().unwrap();
    let live = |_: &ChunkId| true;
    let chosen: Vec<_> = gc
        .assess(&live)
        .unwrap()
        .into_iter()
        .filter(|a| a.damaged)
        .collect();
    assert_eq!(chosen.len(), 1);
    assert_eq!(chosen[0].container, bad.container);
    let cas::Prepared::Copied(copied) = gc.prepare(bad.container, &live).unwrap() else {
        panic!("the damaged container's live chunks can be read");
    };
    let sharing = ids
        .iter()
        .filter(|id| store.locate(id).unwrap().container == bad.container)
        .count();
    assert_eq!(copied.copied_chunks, sharing as u64);
    assert_eq!(chosen[0].live_chunks as usize, sharing);
    assert_eq!(gc.commit().unwrap().containers, 1);
    drop(gc);
    assert!(!path.exists());
    assert!(store.damaged_containers().unwrap().is_empty());
    let report = store.check(&|_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(store.read_chunks(&ids).unwrap(), chunks);
}
