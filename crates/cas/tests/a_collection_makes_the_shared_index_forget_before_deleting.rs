//! A collection tells the shared index to forget the containers it is
//! about to delete, while their blobs are still there and before its own
//! index forgets them; when the shared index cannot, nothing is deleted
//! and the containers stay indexed here (not orphans, which another
//! client could find and deduplicate against), and a later collection
//! asks again before it deletes them.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use branch::LocalDir;
use bytes::Bytes;
use cas::{
    ChunkId, ChunkLocation, ContainerId, Policy, RepoKey, SharedIndex, Store, StoreSettings,
};

/// Records each `forget`: the containers and whether their blobs were
/// still on the branch; refuses while `failing`.
struct Recorder {
    branch: PathBuf,
    failing: Mutex<bool>,
    forgotten: Mutex<Vec<(ContainerId, bool)>>,
}

impl SharedIndex for Recorder {
    fn locate(&self, ids: &[ChunkId]) -> cas::Result<Vec<Option<ChunkLocation>>> {
        Ok(vec![None; ids.len()])
    }

    fn publish(
        &self,
        _: ContainerId,
        _: &Policy,
        _: &[(ChunkId, ChunkLocation)],
    ) -> cas::Result<()> {
        Ok(())
    }

    fn forget(&self, containers: &[ContainerId]) -> cas::Result<()> {
        let mut forgotten = self.forgotten.lock().unwrap();
        for c in containers {
            forgotten.push((*c, blob(&self.branch, *c).exists()));
        }
        if *self.failing.lock().unwrap() {
            return Err(cas::CasError::SharedIndexForget {
                containers: containers.len(),
                source: "the index owner is down".into(),
            });
        }
        Ok(())
    }
}

fn blob(branch: &Path, c: ContainerId) -> PathBuf {
    branch.join(c.blob_key().as_str())
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

#[test]
fn forget_comes_before_delete_and_its_failure_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let branch_dir = dir.path().join("branch");
    let (branch, _) = LocalDir::open("local", &branch_dir).unwrap();
    let settings = StoreSettings {
        container_size: 256 << 10,
        region_size: 32 << 10,
        ..Default::default()
    };
    let store = Store::open(Arc::new(branch), dir.path(), RepoKey::generate(), settings).unwrap();
    let index = Arc::new(Recorder {
        branch: branch_dir.clone(),
        failing: Mutex::new(true),
        forgotten: Mutex::new(Vec::new()),
    });
    store.set_shared_index(index.clone());

    let chunks: Vec<Bytes> = (0..8).map(|i| random(20_000, 2 * i + 1)).collect();
    let mut w = store.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    drop(w);
    let container = store.locate(&ids[0]).unwrap().container;
    assert!(blob(&branch_dir, container).exists());

    // Nothing is live: the container is collected, but the index refuses.
    let dead = |_: &ChunkId| false;
    let gc = store.begin_collection().unwrap();
    for a in gc.assess(&dead).unwrap() {
        gc.prepare(a.container, &dead).unwrap();
    }
    let err = gc.commit().unwrap_err();
    assert!(
        matches!(err, cas::CasError::SharedIndexForget { .. }),
        "{err}"
    );
    assert!(
        blob(&branch_dir, container).exists(),
        "a container the index may still name is kept"
    );
    assert_eq!(*index.forgotten.lock().unwrap(), vec![(container, true)]);
    drop(gc);
    assert_eq!(store.locate(&ids[0]).unwrap().container, container);
    let gc = store.begin_collection().unwrap();
    assert!(gc.orphans().unwrap().is_empty(), "still indexed, no orphan");
    drop(gc);

    // The index answers again: the next collection has it forgotten, then
    // deletes it.
    *index.failing.lock().unwrap() = false;
    let gc = store.begin_collection().unwrap();
    for a in gc.assess(&dead).unwrap() {
        gc.prepare(a.container, &dead).unwrap();
    }
    assert_eq!(gc.commit().unwrap().containers, 1);
    assert!(!blob(&branch_dir, container).exists());
    assert_eq!(
        *index.forgotten.lock().unwrap(),
        vec![(container, true), (container, true)],
        "asked again, while the blob was still there"
    );
    assert!(store.check(&|_| {}).unwrap().problems.is_empty());
}
