//! Chunk-range failover of the chunkd index, simulated: no network, no
//! etcd, no sleeps. Three owners, each a `chunkd::PartitionCore` over its
//! own redb entries, answer in-process; the range table (2 to 4 ranges)
//! lives in the simulation's stand-in for etcd; two clients, real
//! `cas::Store`s (clients 0 and 1) over one branch directory, each use
//! `repo::ChunkdIndex` over an `IndexClient` whose transport calls the
//! owners directly. What is simulated is the transport and etcd, and when
//! time passes: an owner reads the table again only when a step says so
//! (its periodic read) or when a request names a newer epoch (as the
//! server does); a client only when refused for a stale epoch (as the
//! real one does). Everything else is the real code.
//!
//! A seeded mix of steps: write a batch of chunks (from a pool both
//! clients share, so they deduplicate against each other, or new ones),
//! read chunks back on either client, drop references, give a range to
//! another owner (back to an earlier one too), let an owner's view catch
//! up, take an owner down and bring it back, and collect one client's
//! containers with the other taking part (`gc`'s protocol across clients:
//! record, mark, prepare, doom, retain, commit with the index's forget,
//! orphans, end), with steps between its phases.
//!
//! After each collection: every chunk a client references reads back its
//! exact bytes on both clients; neither client's index names a container
//! that is gone; neither `Store::check` finds damage. A run ends with every
//! owner up and reading the table, and a collection by each client; then
//! both checks are clean, and no answer of the index names a container
//! those last collections deleted (their forget reached every owner).
//! A lagging or unreachable owner may cost deduplication, never data.
//!
//! Owners may be down when a collection forgets (nothing is deleted
//! then), and the client taking part reads between the collector's
//! deletes and its own end of the collection; a read must find its
//! chunks through the store alone (the index, then the branches).
//!
//! A failing seed prints itself, its steps and where the owners have the
//! chunk; replay it with `CAIRN_CHUNKD_SIM_SEED=S` (the repository key,
//! the data and every choice come from the seed; the one clock left is
//! `ChunkdIndex`'s 5 s retry of queued adds, which a run never reaches).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use branch::LocalDir;
use bytes::Bytes;
use cas::{
    CasError, CatchUp, ChunkId, ChunkLocation, ClientNo, ContainerId, Prepared, RepoKey, Store,
    StoreSettings,
};
use chunkd::ranges::{RangeTable, RangesError};
use chunkd::{Fingerprint, IndexClient, IndexOp, IndexTransport, OwnerFailure, PartitionCore};
use repo::ChunkdIndex;

/// Fresh seeds per test (a tenth of a second each in a debug build).
const RUNS: u64 = 30;
/// Seeds that once failed, run first every time: 0 and 7 read another
/// client's chunk the index did not place (a read now lists the branches
/// after such a miss); 9 lost a chunk in containers a failed forget left
/// as orphans (the shared index now forgets first, and a collection
/// adopts its orphans); 67 and 133 read containers the collector had
/// deleted (a read now tries again while containers vanish under it).
const REGRESSIONS: &[u64] = &[0, 7, 9, 67, 133];
/// Steps per run, besides those in collections.
const STEPS: usize = 40;
/// Chunks both clients draw from.
const POOL: usize = 16;
const OWNERS: usize = 3;

/// SplitMix64: every choice of a run comes from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Bytes {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next().to_le_bytes());
        }
        out.truncate(len);
        out.into()
    }
}

/// One simulated chunkd: the real request handling, and whether it
/// answers at all.
struct Owner {
    core: PartitionCore,
    up: AtomicBool,
}

/// The owners and the table as etcd would keep it.
struct Net {
    table: Mutex<RangeTable>,
    owners: BTreeMap<String, Owner>,
}

impl Net {
    fn table(&self) -> RangeTable {
        self.table.lock().unwrap().clone()
    }
}

/// The clients' transport: each part goes to its owner's core, which
/// reads the table at once if the request names a newer epoch.
struct Transport(Arc<Net>);

impl IndexTransport for Transport {
    fn send(
        &self,
        op: IndexOp,
        parts: Vec<(String, Vec<u8>)>,
    ) -> Vec<Result<Vec<u8>, OwnerFailure>> {
        parts
            .into_iter()
            .map(|(url, body)| {
                let owner = self
                    .0
                    .owners
                    .get(&url)
                    .ok_or_else(|| OwnerFailure::Unreachable(format!("no chunkd at {url}")))?;
                if !owner.up.load(Ordering::SeqCst) {
                    return Err(OwnerFailure::Unreachable("down".into()));
                }
                owner
                    .core
                    .handle(op, &body, || Some(self.0.table()))
                    .map_err(OwnerFailure::from)
            })
            .collect()
    }

    fn read_table(&self) -> Result<RangeTable, RangesError> {
        Ok(self.0.table())
    }
}

struct World {
    dir: PathBuf,
    rng: Rng,
    net: Arc<Net>,
    clients: [Store; 2],
    pool: Vec<Bytes>,
    /// What each client references: chunk -> its bytes.
    refs: [BTreeMap<ChunkId, Bytes>; 2],
    /// Every chunk written.
    written: BTreeSet<ChunkId>,
    log: Vec<String>,
}

fn settings(client: u16) -> StoreSettings {
    StoreSettings {
        container_size: 256 << 10,
        region_size: 32 << 10,
        client: ClientNo::new(client),
        ..Default::default()
    }
}

fn owner_url(i: usize) -> String {
    format!("http://owner{i}:7878")
}

impl World {
    fn new(dir: &Path, seed: u64) -> World {
        let mut rng = Rng(seed);
        let key_bytes: Vec<u8> = rng.bytes(32).to_vec();
        let key = RepoKey::from_hex(&hex(&key_bytes)).expect("32 bytes of hex");
        let ranges = 2 + rng.below(3);
        let first: Vec<String> = (0..ranges).map(|i| owner_url(i % OWNERS)).collect();
        let table = RangeTable::even(&first, 1).unwrap();
        let owners = (0..OWNERS)
            .map(|i| {
                let url = owner_url(i);
                let file = dir.join(format!("owner{i}.redb"));
                let core = PartitionCore::open(&file, &url).unwrap();
                core.set_view(table.clone());
                let owner = Owner {
                    core,
                    up: AtomicBool::new(true),
                };
                (url, owner)
            })
            .collect();
        let net = Arc::new(Net {
            table: Mutex::new(table),
            owners,
        });
        let (branch, _) = LocalDir::open("shared", dir.join("branch")).unwrap();
        let branch = Arc::new(branch);
        let open = |n: u16| {
            let meta = dir.join(format!("client{n}"));
            std::fs::create_dir_all(&meta).unwrap();
            let store = Store::open(branch.clone(), &meta, key.clone(), settings(n)).unwrap();
            let client = IndexClient::with_transport(Arc::new(Transport(net.clone()))).unwrap();
            store.set_shared_index(ChunkdIndex::new(client, CatchUp::new(&store)));
            store
        };
        let clients = [open(0), open(1)];
        let pool = (0..POOL)
            .map(|_| {
                let len = 4096 + rng.below(8192);
                rng.bytes(len)
            })
            .collect();
        World {
            dir: dir.to_path_buf(),
            rng,
            net,
            clients,
            pool,
            refs: [BTreeMap::new(), BTreeMap::new()],
            written: BTreeSet::new(),
            log: vec![format!("{ranges} ranges over {OWNERS} owners")],
        }
    }

    fn note(&mut self, line: String) {
        self.log.push(line);
    }

    /// One step, none of them a collection when `in_collection`, nor a
    /// read without `reads`.
    fn step(&mut self, window: &str, in_collection: bool, reads: bool) {
        let who = self.rng.below(2);
        match self.rng.below(if in_collection { 11 } else { 12 }) {
            0..=2 => self.write(window, who),
            3 | 4 if reads => self.read(window, who),
            3 | 4 => self.drop_refs(window, who),
            5 => self.drop_refs(window, who),
            6 | 7 => self.reassign(window),
            8 => self.refresh_owner(window),
            9 | 10 => self.toggle_owner(window),
            _ => {
                self.collect(who, true);
            }
        }
    }

    fn write(&mut self, window: &str, who: usize) {
        let n = 1 + self.rng.below(8);
        let mut batch = Vec::with_capacity(n);
        let mut from_pool = 0;
        for _ in 0..n {
            if self.rng.below(3) < 2 {
                from_pool += 1;
                batch.push(self.pool[self.rng.below(POOL)].clone());
            } else {
                let len = 4096 + self.rng.below(8192);
                batch.push(self.rng.bytes(len));
            }
        }
        let store = &self.clients[who];
        let mut w = store.stream();
        let ids = w.write_batch(&batch).unwrap();
        w.flush().unwrap();
        let new = w.stats().new_chunks;
        drop(w);
        self.note(format!(
            "{window}: client {who} writes {n} chunks ({from_pool} from the pool): {new} stored anew"
        ));
        for (id, data) in ids.into_iter().zip(batch) {
            self.written.insert(id);
            self.refs[who].insert(id, data);
        }
    }

    /// Every chunk either client references, with its bytes.
    fn referenced(&self) -> BTreeMap<ChunkId, Bytes> {
        let mut all = self.refs[0].clone();
        all.extend(self.refs[1].iter().map(|(id, d)| (*id, d.clone())));
        all
    }

    fn read(&mut self, window: &str, who: usize) {
        let all: Vec<(ChunkId, Bytes)> = self.referenced().into_iter().collect();
        if all.is_empty() {
            return;
        }
        let n = 1 + self.rng.below(4.min(all.len()));
        let picked: Vec<(ChunkId, Bytes)> = (0..n)
            .map(|_| all[self.rng.below(all.len())].clone())
            .collect();
        self.note(format!("{window}: client {who} reads {n} chunks"));
        self.read_back(who, &picked, window);
    }

    /// Reads `chunks` on client `who`: each must read back its bytes.
    fn read_back(&mut self, who: usize, chunks: &[(ChunkId, Bytes)], when: &str) {
        let ids: Vec<ChunkId> = chunks.iter().map(|(id, _)| *id).collect();
        let got = match self.clients[who].read_chunks(&ids) {
            Ok(got) => got,
            Err(e) => self.unreadable(who, &ids, when, e),
        };
        for ((id, want), got) in chunks.iter().zip(got) {
            assert!(
                got == *want,
                "{when}: client {who} reads wrong bytes for {id:?}"
            );
        }
    }

    fn unreadable(&self, who: usize, ids: &[ChunkId], when: &str, e: CasError) -> ! {
        let described: String = ids.iter().map(|id| self.describe(id)).collect();
        panic!("{when}: client {who} cannot read: {e}\n{described}")
    }

    /// Containers deleted by a collection while every owner was up and
    /// read the table (so after any reassignment): no answer of the index
    /// names them, for any chunk written.
    fn index_forgot(&mut self, deleted: &[ContainerId]) {
        self.note(format!("the index names none of {deleted:?}"));
        let client = IndexClient::with_transport(Arc::new(Transport(self.net.clone()))).unwrap();
        let ids: Vec<ChunkId> = self.written.iter().copied().collect();
        let fps: Vec<Fingerprint> = ids
            .iter()
            .map(|id| Fingerprint::new(*id.as_bytes()))
            .collect();
        let found = client.lookup(&fps);
        assert!(found.unavailable.is_empty(), "{:?}", found.unavailable);
        for (id, l) in ids.iter().zip(found.locations) {
            let Some(l) = l else { continue };
            let c = ChunkLocation::decode(l.as_bytes().try_into().expect("28 bytes")).container;
            assert!(
                !deleted.contains(&c),
                "the index places {id:?} in {c}, deleted by a collection after every owner \
                 read the table\n{}",
                self.describe(id)
            );
        }
    }

    /// Where the index has a chunk: the range table's owner, and each
    /// owner's view and entry (whether its container is on the branch).
    fn describe(&self, id: &ChunkId) -> String {
        let fp = Fingerprint::new(*id.as_bytes());
        let range = self.net.table().range_of(&fp).clone();
        let mut out = format!(
            "{id:?}: range {:016x} of {} at epoch {}\n",
            range.start, range.owner, range.epoch
        );
        for (url, o) in &self.net.owners {
            let view = o
                .core
                .view()
                .map(|t| t.range_of(&fp).clone())
                .map(|r| format!("{} at epoch {}", r.owner, r.epoch));
            let entry = o.core.peek(&[fp]).unwrap().remove(0).map(|l| {
                let c = ChunkLocation::decode(l.as_bytes().try_into().expect("28 bytes")).container;
                let there = self.dir.join("branch").join(c.blob_key().as_str()).exists();
                format!("{c} (on the branch: {there})")
            });
            out += &format!(
                "  {url}: up {}, sees {view:?}, entry {entry:?}\n",
                o.up.load(Ordering::SeqCst)
            );
        }
        out
    }

    fn drop_refs(&mut self, window: &str, who: usize) {
        let n = self.refs[who].len();
        if n == 0 {
            return;
        }
        let k = 1 + self.rng.below(n.min(6));
        for _ in 0..k {
            let i = self.rng.below(self.refs[who].len());
            let id = *self.refs[who].keys().nth(i).expect("in range");
            self.refs[who].remove(&id);
        }
        self.note(format!("{window}: client {who} drops {k} references"));
    }

    fn reassign(&mut self, window: &str) {
        let mut table = self.net.table.lock().unwrap();
        let i = self.rng.below(table.ranges.len());
        let start = table.ranges[i].start;
        let to = owner_url(self.rng.below(OWNERS));
        let from = table.ranges[i].owner.clone();
        let epoch = table.assign(start, &to).unwrap().epoch;
        drop(table);
        self.note(format!(
            "{window}: range {start:016x} goes from {from} to {to} at epoch {epoch}"
        ));
    }

    fn refresh_owner(&mut self, window: &str) {
        let i = self.rng.below(OWNERS);
        let url = owner_url(i);
        self.net.owners[&url].core.set_view(self.net.table());
        self.note(format!("{window}: {url} reads the range table"));
    }

    fn toggle_owner(&mut self, window: &str) {
        let url = owner_url(self.rng.below(OWNERS));
        let up = &self.net.owners[&url].up;
        let now = !up.load(Ordering::SeqCst);
        up.store(now, Ordering::SeqCst);
        let what = if now { "is back" } else { "goes down" };
        self.note(format!("{window}: {url} {what}"));
    }

    /// Up to `most` steps in a window of a collection.
    fn steps(&mut self, window: &str, most: usize, reads: bool) {
        for _ in 0..self.rng.below(most + 1) {
            self.step(window, true, reads);
        }
    }

    /// `who` collects its own containers; the other client takes part,
    /// as `gc` runs it across clients; `windows`: with steps between its
    /// phases.
    /// Returns the containers it deleted.
    fn collect(&mut self, who: usize, windows: bool) -> Vec<ContainerId> {
        let most = if windows { 3 } else { 0 };
        let (collector, peer) = (self.clients[who].clone(), self.clients[1 - who].clone());
        self.note(format!(
            "client {who} collects; client {} takes part",
            1 - who
        ));
        peer.record_for_peer();
        let gc = collector.begin_collection_among_clients().unwrap();
        self.steps("marking", most, true);
        let marked: HashSet<ChunkId> = self.referenced().into_keys().collect();
        let live = |id: &ChunkId| marked.contains(id);
        let mut chosen = 0;
        for a in gc.assess(&live).unwrap() {
            if self.rng.below(4) == 0 {
                continue;
            }
            match gc.prepare(a.container, &live).unwrap() {
                Prepared::Copied(_) => chosen += 1,
                Prepared::Unreadable(e) => panic!("container {} unreadable: {e}", a.container),
            }
        }
        self.note(format!("prepared: {chosen} containers"));
        self.steps("prepared", most, true);
        gc.flush_copies().unwrap();
        let orphans = gc.orphans().unwrap();
        let mut doomed = gc.prepared_containers();
        doomed.extend(&orphans);
        if !doomed.is_empty() {
            gc.retain(peer.doom(&doomed));
        }
        self.note(format!(
            "doomed: {} containers ({} orphans)",
            doomed.len(),
            orphans.len()
        ));
        self.steps("swept", most, true);
        let mut deleted = Vec::new();
        match gc.commit() {
            Ok(r) => {
                self.note(format!("committed: {} containers deleted", r.containers));
                deleted.extend(doomed.iter().filter(|c| !orphans.contains(c)));
                let among: HashSet<ContainerId> = orphans.iter().copied().collect();
                match gc.remove_orphans_among(&among) {
                    Ok((n, _)) => {
                        self.note(format!("orphans removed: {n}"));
                        deleted.extend(orphans);
                    }
                    Err(e) => self.forget_failed(e),
                }
            }
            Err(e) => self.forget_failed(e),
        }
        drop(gc);
        self.steps("deleted", most, true);
        peer.peer_collection_ended().unwrap();
        self.note(format!("client {who}'s collection ended"));
        self.check("after the collection", false);
        deleted
    }

    /// Only the index's forget may stop a collection (an owner down):
    /// its containers are then kept.
    fn forget_failed(&mut self, e: cas::CasError) {
        assert!(
            matches!(e, cas::CasError::SharedIndexForget { .. }),
            "the collection failed: {e}"
        );
        self.note(format!("nothing deleted: {e}"));
    }

    /// Every owner up and reading the table: what a run ends with.
    fn heal(&mut self) {
        let table = self.net.table();
        for owner in self.net.owners.values() {
            owner.up.store(true, Ordering::SeqCst);
            owner.core.set_view(table.clone());
        }
        self.note("every owner is up and reads the range table".into());
    }

    /// The properties: every referenced chunk reads back on both clients,
    /// no index names a container that is gone, and neither check finds
    /// damage; `clean`: nor anything else. (Before the collections that
    /// end a run, a collection whose forget failed leaves garbage
    /// containers behind, and a client may hold a chunk it stored while it
    /// could not deduplicate: chunks stored but not indexed, harmless.)
    fn check(&mut self, when: &str, clean: bool) {
        self.note(format!("check {when}"));
        let all: Vec<(ChunkId, Bytes)> = self.referenced().into_iter().collect();
        for who in 0..2 {
            for chunk in &all {
                self.read_back(who, std::slice::from_ref(chunk), when);
            }
        }
        for (who, store) in self.clients.iter().enumerate() {
            for c in store.indexed_containers().unwrap() {
                assert!(
                    self.dir.join("branch").join(c.blob_key().as_str()).exists(),
                    "{when}: client {who}'s index names container {c}, which is gone"
                );
            }
            // After the index check: a check forgets other clients'
            // containers that are gone.
            let report = store.check(&|_| {}).unwrap();
            let wrong: Vec<_> = report
                .problems
                .iter()
                .filter(|p| clean || p.is_damage())
                .collect();
            assert!(wrong.is_empty(), "{when}: client {who}'s check: {wrong:?}");
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn run(seed: u64) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let mut w = World::new(dir.path(), seed);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for _ in 0..STEPS {
            w.step("", false, true);
        }
        let who = w.rng.below(2);
        w.collect(who, true);
        w.heal();
        let mut deleted = w.collect(0, false);
        deleted.extend(w.collect(1, false));
        w.check("at the end", true);
        w.index_forgot(&deleted);
    }));
    outcome.map_err(|p| {
        let what = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        format!(
            "CAIRN_CHUNKD_SIM_SEED={seed}: {what}\nsteps:\n  {}",
            w.log.join("\n  ")
        )
    })
}

/// The seeds to run: `CAIRN_CHUNKD_SIM_SEED`, or `regressions` and
/// [`RUNS`] fresh ones.
fn seeds(regressions: &[u64]) -> Vec<u64> {
    match std::env::var("CAIRN_CHUNKD_SIM_SEED") {
        Ok(s) => vec![s.parse().expect("CAIRN_CHUNKD_SIM_SEED is a number")],
        Err(_) => {
            let base = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            let fresh = (0..RUNS).map(|i| base.wrapping_mul(31).wrapping_add(i));
            regressions.iter().copied().chain(fresh).collect()
        }
    }
}

#[test]
fn ranges_move_between_owners_while_clients_write_read_and_collect() {
    for seed in seeds(REGRESSIONS) {
        if let Err(e) = run(seed) {
            panic!("{e}");
        }
    }
}
