//! Two stores (client 0 and client 1, each with its own index) over the
//! same branches, plain or through the redundancy layer (whose map of
//! blobs is filled at open, so the other's later containers must be
//! discovered): each reads what the other stored once its catch-up indexes
//! the other's containers, a chunk the other stored is not stored again,
//! their container ids and roots never meet, and garbage collection is
//! refused.

mod common;

use std::path::Path;
use std::sync::Arc;

use branch::{Branch, LocalDir};
use cas::{BranchId, CasError, CatchUp, ClientNo, Protection, RepoKey, Store};
use redundancy::Redundant;

use common::*;

/// Client `n` over the plain branch `dir/branch`, or with `mirrored`
/// over `dir/b0` and `dir/b1` under `mirror:2`.
fn client(dir: &Path, key: &RepoKey, n: u16, mirrored: bool) -> Store {
    let meta = dir.join(format!("client{n}"));
    std::fs::create_dir_all(&meta).unwrap();
    let mut s = settings();
    s.client = ClientNo::new(n);
    let store = if mirrored {
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
        Store::open_redundant(Arc::new(layer), mirror, &meta, key.clone(), s).unwrap()
    } else {
        let (b, _) = LocalDir::open("shared", dir.join("branch")).unwrap();
        Store::open(Arc::new(b), &meta, key.clone(), s).unwrap()
    };
    store.set_shared_index(CatchUp::new(&store));
    store
}

#[test]
fn clients_on_a_plain_branch_read_and_deduplicate_each_others_chunks() {
    two_clients(false);
}

#[test]
fn clients_on_mirrored_branches_read_and_deduplicate_each_others_chunks() {
    two_clients(true);
}

fn two_clients(mirrored: bool) {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let a = client(dir.path(), &key, 0, mirrored);
    let b = client(dir.path(), &key, 1, mirrored);
    b.register_client("test").unwrap();
    assert!(matches!(
        b.register_client("again"),
        Err(CasError::ClientTaken(c)) if c == ClientNo::new(1)
    ));
    assert_eq!(a.clients().unwrap(), [ClientNo::new(0), ClientNo::new(1)]);

    let chunks: Vec<_> = (0..20).map(|_| random(20_000)).collect();
    let mut w = a.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();

    // B never saw them: its index learns them from the branch.
    assert_eq!(b.read_chunks(&ids).unwrap(), chunks);
    assert_eq!(b.read_chunk(&ids[3]).unwrap(), chunks[3]);

    // The same data written by B stores nothing new.
    let mut w = b.stream();
    w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    assert_eq!(w.stats().new_chunks, 0);

    // B's own new data is read by A, and lands in B's id range.
    let mine: Vec<_> = (0..5).map(|_| random(30_000)).collect();
    let mut w = b.stream();
    let mine_ids = w.write_batch(&mine).unwrap();
    w.flush().unwrap();
    assert_eq!(a.read_chunks(&mine_ids).unwrap(), mine);
    let located = a.locate_many(&mine_ids).unwrap();
    assert!(located
        .iter()
        .all(|l| l.container.client() == ClientNo::new(1)));
    let by_a = a.locate_many(&ids).unwrap();
    assert!(by_a
        .iter()
        .all(|l| l.container.client() == ClientNo::new(0)));

    // Roots of one label stay apart.
    a.put_root("version/1", &ids[0]).unwrap();
    b.put_root("version/1", &mine_ids[0]).unwrap();
    assert_eq!(a.get_root("version/1").unwrap(), ids[0]);
    assert_eq!(b.get_root("version/1").unwrap(), mine_ids[0]);

    // Both indexes describe the branch: each check is clean.
    for s in [&a, &b] {
        let report = s.check(&no_progress()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        s.verify_index().unwrap();
    }

    // Neither collects: each would miss the other's unrecorded chunks.
    for s in [&a, &b] {
        assert!(matches!(
            s.begin_collection(),
            Err(CasError::SharedBranches { clients: 2 })
        ));
    }
}

/// A shared index that answers from another store's index, as a
/// fingerprint-index service would, and records what it is told.
struct Service {
    placed_by: Store,
    told: parking_lot::Mutex<Vec<cas::ContainerId>>,
}

impl cas::SharedIndex for Service {
    fn locate(&self, ids: &[cas::ChunkId]) -> cas::Result<Vec<Option<cas::ChunkLocation>>> {
        Ok(ids
            .iter()
            .map(|id| self.placed_by.locate(id).ok())
            .collect())
    }

    fn publish(
        &self,
        container: cas::ContainerId,
        _: &cas::Policy,
        entries: &[(cas::ChunkId, cas::ChunkLocation)],
    ) -> cas::Result<()> {
        assert!(!entries.is_empty());
        self.told.lock().push(container);
        Ok(())
    }
}

/// With an index service placing another client's chunks (no catch-up),
/// a client reads them from containers its layer never mapped, stores
/// none of them again, and tells the service of each container it makes.
#[test]
fn a_shared_index_service_is_enough_to_read_and_deduplicate() {
    let dir = tempfile::tempdir().unwrap();
    let key = RepoKey::generate();
    let a = client(dir.path(), &key, 0, true);
    let b = client(dir.path(), &key, 1, true);
    let service = Arc::new(Service {
        placed_by: a.clone(),
        told: Default::default(),
    });
    b.set_shared_index(service.clone());

    let chunks: Vec<_> = (0..12).map(|_| random(25_000)).collect();
    let mut w = a.stream();
    let ids = w.write_batch(&chunks).unwrap();
    w.flush().unwrap();
    assert_eq!(b.read_chunks(&ids).unwrap(), chunks);

    let mut w = b.stream();
    w.write_batch(&chunks).unwrap();
    w.write_batch(&[random(40_000)]).unwrap();
    w.flush().unwrap();
    assert_eq!(w.stats().new_chunks, 1);
    let told = service.told.lock().clone();
    assert!(!told.is_empty());
    assert!(told.iter().all(|c| c.client() == ClientNo::new(1)));
}
