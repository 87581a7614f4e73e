//! The write path records containers in the index without syncing it: a
//! flush returns once its containers are durable on the branch, and a
//! power cut may then lose the index's latest commits. Simulated power
//! loss (the index's unsynced writes dropped): the reopened store finds
//! the containers on the branch and reads every flushed chunk back
//! exactly, hands out no container id twice, checks clean, and a
//! collection keeping the flushed chunks deletes none of them.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use branch::crash::{CrashBranch, CrashFile, Loss, Power};
use branch::LocalDir;
use bytes::Bytes;
use cas::{ChunkId, ContainerId, RepoKey, Store, StoreSettings};
use redb::ReadableTableMetadata;

fn settings() -> StoreSettings {
    StoreSettings {
        container_size: 64 << 10,
        region_size: 16 << 10,
        ..Default::default()
    }
}

/// The machine's disks: a branch directory and the two redb files.
struct Disks {
    power: Power,
    local: Arc<LocalDir>,
    index: CrashFile,
    roots: CrashFile,
}

impl Disks {
    fn boot(&self, key: &RepoKey) -> Store {
        let branch = Arc::new(CrashBranch::new(self.local.clone(), &self.power));
        Store::open_on(
            branch,
            self.index.clone(),
            self.roots.clone(),
            key.clone(),
            settings(),
        )
        .expect("the store opens")
    }

    /// What survives the power cut, powered anew.
    fn recover(self, branch: &CrashBranch) -> Disks {
        branch.recover().expect("the branch takes the outcome");
        let power = Power::on();
        Disks {
            index: self.index.recover(&power),
            roots: self.roots.recover(&power),
            power,
            local: self.local,
        }
    }
}

/// How many containers a copy of the index file records, read with redb
/// directly (the store would find the rest at open).
fn indexed_rows(index: &CrashFile) -> u64 {
    let db = redb::Database::builder()
        .create_with_backend(index.copy(&Power::on()))
        .expect("the index file opens");
    let tx = redb::ReadableDatabase::begin_read(&db).unwrap();
    let table = redb::TableDefinition::<u64, [u8; 20]>::new("containers");
    tx.open_table(table).unwrap().len().unwrap()
}

fn random(len: usize) -> Bytes {
    (0..len)
        .map(|_| rand::random::<u8>())
        .collect::<Vec<_>>()
        .into()
}

fn on_branch(dir: &Path) -> HashSet<ContainerId> {
    let (local, _) = LocalDir::open("look", dir).unwrap();
    branch::Branch::list(&local, ContainerId::list_prefix())
        .unwrap()
        .iter()
        .filter_map(ContainerId::from_blob_key)
        .collect()
}

#[test]
fn flushed_chunks_survive_a_power_cut_that_loses_the_index_commits() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let power = Power::on();
    let (local, _) = LocalDir::open("local", dir.path()).unwrap();
    let disks = Disks {
        local: Arc::new(local),
        index: CrashFile::new("index.redb", &power),
        roots: CrashFile::new("roots.redb", &power),
        power,
    };
    let branch = Arc::new(CrashBranch::new(disks.local.clone(), &disks.power));
    let store = Store::open_on(
        branch.clone(),
        disks.index.clone(),
        disks.roots.clone(),
        key.clone(),
        settings(),
    )
    .unwrap();

    // Like a database's fsyncs: small batches, each flushed.
    let mut flushed: Vec<(ChunkId, Bytes)> = Vec::new();
    let mut w = store.stream();
    for _ in 0..12 {
        let chunks: Vec<Bytes> = (0..6).map(|_| random(16 << 10)).collect();
        let ids = w.write_batch(&chunks).unwrap();
        w.flush().unwrap();
        flushed.extend(ids.into_iter().zip(chunks));
    }
    let before = on_branch(dir.path());
    assert!(before.len() >= 12, "{before:?}");
    // The power goes off with the writer still open (never closed cleanly).
    disks.power.cut(Loss::Tail, 15);
    drop(w);
    drop(store);
    let disks = disks.recover(&branch);
    assert!(
        indexed_rows(&disks.index) < before.len() as u64,
        "the cut lost index commits: what the test is about"
    );

    let store = disks.boot(&key);
    let ids: Vec<ChunkId> = flushed.iter().map(|(id, _)| *id).collect();
    let data: Vec<Bytes> = flushed.iter().map(|(_, d)| d.clone()).collect();
    assert_eq!(store.read_chunks(&ids).unwrap(), data);
    let indexed: HashSet<ContainerId> = store.indexed_containers().unwrap().into_iter().collect();
    assert_eq!(indexed, before, "every container on the branch is indexed");
    let report = store.check(&|_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // New containers get ids never handed out before.
    let mut w = store.stream();
    let fresh: Vec<Bytes> = (0..8).map(|_| random(16 << 10)).collect();
    let fresh_ids = w.write_batch(&fresh).unwrap();
    w.flush().unwrap();
    drop(w);
    for id in &fresh_ids {
        let c = store.locate(id).unwrap().container;
        assert!(!before.contains(&c), "container id {c} handed out twice");
        assert!(c > *before.iter().max().unwrap());
    }

    // A collection that keeps the flushed chunks deletes none of them.
    let live: HashSet<ChunkId> = ids.iter().chain(&fresh_ids).copied().collect();
    let marked = |id: &ChunkId| live.contains(id);
    let gc = store.begin_collection().unwrap();
    for a in gc.assess(&marked).unwrap() {
        gc.prepare(a.container, &marked).unwrap();
    }
    gc.commit().unwrap();
    gc.remove_orphans().unwrap();
    drop(gc);
    assert_eq!(store.read_chunks(&ids).unwrap(), data);
    assert_eq!(store.read_chunks(&fresh_ids).unwrap(), fresh);
    let report = store.check(&|_| {}).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);

    // A clean close leaves nothing to find: the next open reads it all.
    drop(store);
    let store = disks.boot(&key);
    assert_eq!(store.read_chunks(&ids).unwrap(), data);
    assert_eq!(store.read_chunks(&fresh_ids).unwrap(), fresh);
}
