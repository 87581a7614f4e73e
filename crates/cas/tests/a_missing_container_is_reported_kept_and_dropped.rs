//! A container whose blob is gone: `check` and `rebuild_index` go on past
//! it and report it, the rebuild keeps its row (so it is not an orphan),
//! `drop_damaged` gives it up, and then the store checks clean. An index
//! emptied behind the store's back is a mismatch until rebuilt.

use std::path::Path;
use std::sync::Arc;

use branch::LocalDir;
use bytes::Bytes;
use cas::{CasError, ContainerId, Problem, RepoKey, Store, StoreSettings};

fn open(dir: &Path, key: &RepoKey) -> Store {
    let (branch, _) = LocalDir::open("local", dir.join("branch")).unwrap();
    let settings = StoreSettings {
        container_size: 256 << 10,
        region_size: 32 << 10,
        ..Default::default()
    };
    Store::open(Arc::new(branch), dir, key.clone(), settings).unwrap()
}

fn random(len: usize) -> Bytes {
    (0..len)
        .map(|_| rand::random::<u8>())
        .collect::<Vec<_>>()
        .into()
}

fn container_path(dir: &Path, c: ContainerId) -> std::path::PathBuf {
    dir.join("branch").join(c.blob_key().as_str())
}

#[test]
fn a_missing_container_does_not_stop_check_or_rebuild_and_can_be_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let store = open(dir.path(), &key);
    let chunks: Vec<Bytes> = (0..40).map(|_| random(20_000)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    drop(w);
    let containers = store.indexed_containers().unwrap();
    assert!(containers.len() >= 3, "{containers:?}");
    let gone = containers[1];
    std::fs::remove_file(container_path(dir.path(), gone)).unwrap();
    let in_gone: Vec<usize> = (0..ids.len())
        .filter(|&i| store.locate(&ids[i]).unwrap().container == gone)
        .collect();
    assert!(!in_gone.is_empty());

    let report = store.check(&|_| {}).unwrap();
    assert!(!report.is_clean());
    let unreadable: Vec<&Problem> = report
        .problems
        .iter()
        .filter(|p| matches!(p, Problem::UnreadableContainer { .. }))
        .collect();
    assert_eq!(unreadable.len(), 1, "{:?}", report.problems);
    assert!(
        matches!(unreadable[0], Problem::UnreadableContainer { container, indexed_chunks, .. }
            if *container == gone && *indexed_chunks == in_gone.len() as u64)
    );
    for &i in &in_gone {
        assert!(report.damage_of(&ids[i]).is_some());
    }
    assert!(report.damage_of(&ids[0]).is_none() || in_gone.contains(&0));
    assert_eq!(report.damaged_containers(), [gone]);

    // The rebuild leaves the lost chunks out but keeps the container's row.
    let rebuilt = store.rebuild_index(&|_| {}).unwrap();
    assert!(rebuilt
        .problems
        .iter()
        .any(|p| matches!(p, Problem::UnreadableContainer { .. })));
    assert!(store.indexed_containers().unwrap().contains(&gone));
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(store.contains(id).unwrap(), !in_gone.contains(&i));
    }
    store.verify_index().unwrap();

    let dropped = store.drop_damaged(&[gone]).unwrap();
    assert_eq!(dropped.containers, [gone]);
    assert!(!store.indexed_containers().unwrap().contains(&gone));
    assert!(store.check(&|_| {}).unwrap().is_clean());
    for (i, id) in ids.iter().enumerate() {
        if !in_gone.contains(&i) {
            assert_eq!(store.read_chunk(id).unwrap(), chunks[i]);
        }
    }

    // An index emptied behind the store's back does not describe it.
    drop(store);
    std::fs::File::create(dir.path().join(cas::INDEX_FILE)).unwrap();
    let store = open(dir.path(), &key);
    assert!(matches!(
        store.verify_index(),
        Err(CasError::IndexMismatch { .. })
    ));
    assert!(store.check(&|_| {}).unwrap().index_mismatch());
    store.rebuild_index(&|_| {}).unwrap();
    store.verify_index().unwrap();
    assert_eq!(store.read_chunk(&ids[0]).unwrap(), chunks[0]);
}
