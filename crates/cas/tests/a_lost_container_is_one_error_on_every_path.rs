//! A container that is gone is one error, `CasError::ContainerLost` naming
//! it, whichever way the store reached it: a single or a batched read, on
//! a plain repository (its raw blob deleted) or over the redundancy layer
//! (every shard deleted, so the layer still maps it; or deleted before the
//! store opened, so the layer never mapped it). Each store is then brought
//! back: the lost container dropped, the check clean, every other chunk
//! read back byte-exact.

use std::path::Path;
use std::sync::Arc;

use branch::{Branch, LocalDir};
use bytes::Bytes;
use cas::{BranchId, CasError, ChunkId, ContainerId, Protection, RepoKey, Store, StoreSettings};
use redundancy::Redundant;

fn settings() -> StoreSettings {
    StoreSettings {
        container_size: 128 << 10,
        region_size: 32 << 10,
        ..Default::default()
    }
}

fn random(len: usize) -> Bytes {
    (0..len)
        .map(|_| rand::random::<u8>())
        .collect::<Vec<_>>()
        .into()
}

fn plain(dir: &Path, key: &RepoKey) -> Store {
    let (branch, _) = LocalDir::open("local", dir.join("local")).unwrap();
    Store::open(Arc::new(branch), dir, key.clone(), settings()).unwrap()
}

/// A store keeping every container `mirror:2` on branches `b0` and `b1`.
fn mirrored(dir: &Path, key: &RepoKey) -> Store {
    let branches: Vec<Arc<dyn Branch>> = (0..2)
        .map(|i| {
            let name = format!("b{i}");
            let (b, _) = LocalDir::open(name.clone(), dir.join(name)).unwrap();
            Arc::new(b) as Arc<dyn Branch>
        })
        .collect();
    let (layer, _) = Redundant::open(branches).unwrap();
    let mirror = Protection {
        policy: "mirror:2".parse().unwrap(),
        branches: vec![BranchId(0), BranchId(1)],
    };
    Store::open_redundant(Arc::new(layer), mirror, dir, key.clone(), settings()).unwrap()
}

/// Writes chunks filling several containers; returns them, their ids and
/// a container in the middle (which holds some, not all, of them).
fn fill(store: &Store) -> (Vec<Bytes>, Vec<ChunkId>, ContainerId) {
    let chunks: Vec<Bytes> = (0..24).map(|_| random(20_000)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    let first = store.locate(&ids[0]).unwrap().container;
    let middle = store.locate(&ids[ids.len() / 2]).unwrap().container;
    assert_ne!(first, middle);
    (chunks, ids, middle)
}

/// Every blob file of `container` under `root`: the container itself on a
/// plain branch, its shards (`<key>.s<i>`) on a redundant one.
fn remove_blobs(root: &Path, container: ContainerId) -> usize {
    let key = container.blob_key();
    let (dir, name) = key.as_str().rsplit_once('/').unwrap();
    let mut removed = 0;
    for branch in std::fs::read_dir(root).unwrap() {
        let folder = branch.unwrap().path().join(dir);
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            let file = path.file_name().unwrap().to_str().unwrap().to_string();
            if file == name || file.starts_with(&format!("{name}.s")) {
                std::fs::remove_file(path).unwrap();
                removed += 1;
            }
        }
    }
    removed
}

/// Both read paths give `ContainerLost` naming `gone` for a chunk in it;
/// returns whether the layer said the container is on no branch at all.
fn lost_on_every_path(store: &Store, ids: &[ChunkId], gone: ContainerId) -> bool {
    let i = ids
        .iter()
        .position(|id| store.locate(id).unwrap().container == gone)
        .unwrap();
    let single = store.read_chunk(&ids[i]).unwrap_err();
    let batch = store.read_chunks(&ids[i..=i]).unwrap_err();
    for err in [&single, &batch] {
        assert!(
            matches!(err, CasError::ContainerLost { container, .. } if *container == gone),
            "{err:?}"
        );
        assert!(err.loses_data(), "{err}");
    }
    assert_eq!(single.is_not_found(), batch.is_not_found());
    single.is_not_found()
}

/// Drops the lost container and checks that the store is whole again.
fn bring_back(store: &Store, chunks: &[Bytes], ids: &[ChunkId], gone: ContainerId) {
    let lost: Vec<usize> = (0..ids.len())
        .filter(|&i| store.locate(&ids[i]).unwrap().container == gone)
        .collect();
    store.drop_damaged(&[gone]).unwrap();
    assert!(store.check(&|_| {}).unwrap().is_clean());
    for (i, id) in ids.iter().enumerate() {
        if lost.contains(&i) {
            assert!(!store.contains(id).unwrap());
        } else {
            assert_eq!(store.read_chunk(id).unwrap(), chunks[i]);
        }
    }
}

#[test]
fn a_plain_repositorys_deleted_container_is_lost_and_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let store = plain(dir.path(), &key);
    let (chunks, ids, gone) = fill(&store);
    assert_eq!(remove_blobs(dir.path(), gone), 1);
    assert!(lost_on_every_path(&store, &ids, gone));
    bring_back(&store, &chunks, &ids, gone);
}

#[test]
fn a_redundant_containers_deleted_shards_are_the_same_error() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let store = mirrored(dir.path(), &key);
    let (chunks, ids, gone) = fill(&store);
    assert_eq!(remove_blobs(dir.path(), gone), 2);
    // Still mapped: the layer knows its shards and finds both missing.
    assert!(!lost_on_every_path(&store, &ids, gone));
    bring_back(&store, &chunks, &ids, gone);

    // Gone before the store opened: the layer never mapped it.
    let (chunks, ids, gone) = fill(&store);
    drop(store);
    assert_eq!(remove_blobs(dir.path(), gone), 2);
    let store = mirrored(dir.path(), &key);
    assert!(lost_on_every_path(&store, &ids, gone));
    bring_back(&store, &chunks, &ids, gone);
}
