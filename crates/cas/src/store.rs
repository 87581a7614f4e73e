use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;

use branch::Branch;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use redundancy::{Policy, PutRequest, Redundant};
use serde::{Deserialize, Serialize};

use crate::budget::{Budget, Permit};
use crate::container::{ChunkLocation, Sealed};
use crate::id::{ChunkId, ContainerId, RepoKey};
use crate::index::Index;
use crate::protection::{needs_restore, Protection};
use crate::region::Compression;
use crate::stall;
use crate::writer::StreamWriter;
use crate::{CasError, Result, WriteFailure};

/// How a store lays out and compresses data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreSettings {
    pub compression: Compression,
    /// Target container size; a container is sealed before it grows past it.
    pub container_size: usize,
    /// Raw bytes of consecutive new chunks compressed together.
    pub region_size: usize,
    /// Bytes of data that may be in flight across all writers: batches
    /// waiting to be compressed and sealed containers waiting for the disk.
    /// (Each stream's one open container, at most `container_size`, is not
    /// counted: a writer blocked on the budget must never hold what the
    /// budget waits for.)
    pub memory_budget: usize,
    /// Bytes of redb's page caches for the chunk index and the roots.
    #[serde(default = "index_cache")]
    pub index_cache: usize,
    /// How storage reads are shared between random readers, streams and
    /// background work.
    #[serde(default)]
    pub qos: crate::qos::QosSettings,
    /// Which client of its file system this store is: its container ids
    /// and roots are this client's. Not configured: the repository sets
    /// it from its client record (`repo`).
    #[serde(skip)]
    pub client: crate::id::ClientNo,
}

fn index_cache() -> usize {
    crate::index::DEFAULT_CACHE
}

impl Default for StoreSettings {
    fn default() -> Self {
        StoreSettings {
            compression: Compression::default(),
            container_size: 4 << 20,
            region_size: 1 << 20,
            memory_budget: 256 << 20,
            index_cache: crate::index::DEFAULT_CACHE,
            qos: crate::qos::QosSettings::default(),
            client: crate::id::ClientNo::default(),
        }
    }
}

/// Counters describing what a store holds.
#[derive(Debug, Clone, Serialize)]
pub struct StoreStats {
    pub chunks: u64,
    pub containers: u64,
    /// Bytes of containers on the branch.
    pub stored_bytes: u64,
    /// Uncompressed bytes of the containers' chunks.
    pub unique_bytes: u64,
    pub index_ram_bytes: u64,
    pub index_ram_bytes_per_chunk: f64,
}

/// Chunks in sealed containers that are not yet durable and indexed.
#[derive(Default)]
pub(crate) struct Inflight {
    pub pending: HashMap<ChunkId, ContainerId>,
    /// Sealed containers not yet durable, with their policies.
    pub containers: HashMap<ContainerId, Policy>,
    pub failed: HashMap<ContainerId, Arc<WriteFailure>>,
    /// Containers a full branch refused, kept to be written again (see
    /// [`crate::stall`]), with why. They stay in `containers`.
    pub parked: HashMap<ContainerId, String>,
    /// The chunks of each parked container (also while the I/O thread is
    /// trying it again), for [`Store::parked_chunks`].
    pub parked_chunks: HashMap<ContainerId, Vec<ChunkId>>,
    /// The I/O thread panicked: nothing pending will become durable, so
    /// every waiter gets [`CasError::IoThreadDead`] instead of waiting.
    pub io_dead: bool,
}

/// Container buffers handed back by the I/O thread for the next container,
/// so writing does not fault in fresh pages for every container.
#[derive(Default)]
pub(crate) struct BufferPool(Mutex<Vec<Vec<u8>>>);

const POOLED_BUFFERS: usize = 4;

impl BufferPool {
    pub fn take(&self, capacity: usize) -> Vec<u8> {
        let reused = self.0.lock().pop();
        reused.unwrap_or_else(|| Vec::with_capacity(capacity))
    }

    fn give(&self, buf: Vec<u8>) {
        let mut pool = self.0.lock();
        if pool.len() < POOLED_BUFFERS {
            pool.push(buf);
        }
    }
}

pub(crate) struct Shared {
    /// Where every container and root blob is written, read, listed and
    /// deleted (see [`crate::storage`]); a plain repository's is a layer
    /// in the plain layout.
    pub layer: Arc<Redundant>,
    /// The protection of streams that ask for none.
    pub default: RwLock<Protection>,
    /// Chunks in streams' open containers: readable before they are sealed
    /// (a file reopened right after it was written), never deduplicated
    /// against by other streams (they could not wait for its durability).
    pub unsealed: Mutex<HashMap<ChunkId, bytes::Bytes>>,
    pub buffers: BufferPool,
    pub key: RepoKey,
    pub settings: StoreSettings,
    pub index: Index,
    pub budget: Budget,
    pub inflight: Mutex<Inflight>,
    pub inflight_cv: Condvar,
    /// Containers parked by the I/O thread between its rounds (see
    /// [`crate::stall`]); garbage collection may drop those nothing uses.
    pub parked_jobs: Mutex<Vec<IoJob>>,
    ids: Mutex<(u64, u64)>,
    /// Container ids handed out and not yet indexed (in a stream's open
    /// container, on their way to the branch, parked, or failed): the
    /// lowest is the indexed mark each index commit records (see the
    /// `index` module). Taken after `ids` when both are.
    pub unindexed: Mutex<BTreeSet<ContainerId>>,
    /// While a garbage collection runs, the chunks writers deduplicated
    /// against (see the `gc` module for the protocol).
    pub retained: RwLock<Option<Mutex<HashSet<ChunkId>>>>,
    /// Containers another client's collection is about to delete: never
    /// deduplicated against nor indexed again (see [`crate::peers`]).
    /// Taken before `retained` when both are.
    pub doomed: RwLock<HashSet<ContainerId>>,
    /// `retained` was turned on for another client's collection, not
    /// this store's own.
    pub peer_recording: std::sync::atomic::AtomicBool,
    /// Other clients' collections this store saw end (raised under the
    /// write lock on `doomed`): containers read before one ended may be
    /// gone, so they are not indexed (see [`crate::shared`]).
    pub peer_collections_ended: std::sync::atomic::AtomicU64,
    /// Reads of containers and root blobs asked of the layer since the
    /// store opened (see [`Store::storage_reads`]).
    pub reads: std::sync::atomic::AtomicU64,
    /// The gate every storage read passes (see [`crate::qos`]).
    pub qos: crate::qos::Scheduler,
    /// Asked for chunks the index does not know (see [`crate::shared`]).
    pub shared_index: RwLock<Option<Arc<dyn crate::shared::SharedIndex>>>,
    /// Told of each reservation of container ids ([`Store::set_id_ledger`]).
    pub id_ledger: RwLock<Option<Arc<dyn crate::shared::IdLedger>>>,
    /// The ledger refused a reservation: no container is written again.
    pub ids_refused: std::sync::atomic::AtomicBool,
    /// Held by the one catch-up running ([`Store::catch_up`]).
    pub catching_up: Mutex<()>,
}

impl Shared {
    /// The indexed mark an index commit of `written` records: the lowest
    /// container id handed out and still unindexed once they are, else
    /// the next id to hand out (every later one is higher).
    fn indexed_mark(&self, written: &[&Sealed]) -> u64 {
        let ids = self.ids.lock();
        let unindexed = self.unindexed.lock();
        unindexed
            .iter()
            .find(|c| !written.iter().any(|s| s.id == **c))
            .map_or(ids.0, |c| c.0)
    }

    /// Whether a chunk is indexed under a policy at least as strong as
    /// `want`, for a writer about to reference it instead of storing it
    /// (a weaker copy, or one known to be damaged, counts as a miss: the
    /// chunk is stored again; so does a copy in a container another
    /// client's collection is deleting). While a
    /// collection runs the hit is recorded, and the read lock orders it
    /// against the sweep's removal of index entries.
    pub(crate) fn dedup_lookup(&self, id: &ChunkId, want: &Policy) -> Result<bool> {
        let doomed = self.doomed.read();
        let retained = self.retained.read();
        let hit = match self.index.lookup_sound(id)? {
            None => false,
            Some(loc) if doomed.contains(&loc.container) => false,
            Some(_) if *want == Policy::Single => true,
            Some(loc) => !needs_restore(&self.index.container_policy(loc.container)?, want),
        };
        if hit {
            if let Some(set) = retained.as_ref() {
                set.lock().insert(*id);
            }
        }
        Ok(hit)
    }
}

pub(crate) struct IoJob {
    pub sealed: Sealed,
    pub _permit: Permit,
}

/// The background thread that makes sealed containers durable and then
/// indexes them, several per index transaction when they queue up.
pub(crate) struct Io {
    tx: Option<Sender<IoJob>>,
    thread: Option<JoinHandle<()>>,
}

impl Io {
    /// Hands a sealed container to the I/O thread; an error once that
    /// thread is dead (its receiver went with it).
    pub fn send(&self, job: IoJob) -> Result<()> {
        match &self.tx {
            Some(tx) => tx.send(job).map_err(|_| CasError::IoThreadDead),
            None => Err(CasError::IoThreadDead),
        }
    }
}

/// Marks the store's I/O thread dead if it unwinds, so that writers and
/// readers waiting for pending containers get an error rather than wait
/// for ever; the death is logged here, once.
struct DeadOnPanic<'a>(&'a Shared);

impl Drop for DeadOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!("the chunk store's I/O thread panicked: no container can be made durable until cairn restarts");
            self.0.inflight.lock().io_dead = true;
            self.0.inflight_cv.notify_all();
        }
    }
}

impl Drop for Io {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub const INDEX_FILE: &str = "index.redb";
pub const ROOTS_FILE: &str = "roots.redb";
const IDS_PER_RESERVATION: u64 = 256;
const MAX_CONTAINERS_PER_COMMIT: usize = 16;

/// A content-addressed chunk store over one branch. Cheap to clone; all
/// clones share one index, budget and I/O thread.
#[derive(Clone)]
pub struct Store {
    pub(crate) shared: Arc<Shared>,
    pub(crate) io: Arc<Io>,
}

impl Store {
    /// Opens the store whose containers live on `branch` (each as one
    /// plain blob, policy `single`: a layer in the plain layout over
    /// `branch`) and whose index and roots are
    /// `index.redb` and `roots.redb` in `meta_dir` (created if missing).
    /// Every open first indexes the containers a crash left on the
    /// branch unindexed (see the `index` module: the write path does not
    /// sync the index).
    pub fn open(
        branch: Arc<dyn Branch>,
        meta_dir: &Path,
        key: RepoKey,
        settings: StoreSettings,
    ) -> Result<Store> {
        let roots_lost = !meta_dir.join(ROOTS_FILE).exists();
        let index = Index::open(
            &meta_dir.join(INDEX_FILE),
            &meta_dir.join(ROOTS_FILE),
            settings.index_cache,
        )?;
        let layer = Arc::new(Redundant::plain(branch));
        let plain = Protection::plain();
        Self::open_with(layer, plain, index, roots_lost, key, settings)
    }

    /// [`Store::open`] with the index and the roots on redb storage
    /// backends rather than in files (the power-loss tests give it
    /// backends that lose unsynced writes). An empty roots backend is a
    /// lost roots file: the roots are recovered from the branch.
    pub fn open_on(
        branch: Arc<dyn Branch>,
        index: impl redb::StorageBackend,
        roots: impl redb::StorageBackend,
        key: RepoKey,
        settings: StoreSettings,
    ) -> Result<Store> {
        let roots_lost = roots.len().map_err(|e| CasError::IndexOpen {
            path: ROOTS_FILE.into(),
            source: e.into(),
        })? == 0;
        let index = Index::on_backends(index, roots)?;
        let layer = Arc::new(Redundant::plain(branch));
        let plain = Protection::plain();
        Self::open_with(layer, plain, index, roots_lost, key, settings)
    }

    /// Opens a store whose containers are stored through the redundancy
    /// layer `layer` (its map already discovered), each under its stream's
    /// protection; streams and root blobs that ask for none get `default`.
    pub fn open_redundant(
        layer: Arc<Redundant>,
        default: Protection,
        meta_dir: &Path,
        key: RepoKey,
        settings: StoreSettings,
    ) -> Result<Store> {
        layer.validate(&default.policy, &default.branches)?;
        let roots_lost = !meta_dir.join(ROOTS_FILE).exists();
        let index = Index::open(
            &meta_dir.join(INDEX_FILE),
            &meta_dir.join(ROOTS_FILE),
            settings.index_cache,
        )?;
        Self::open_with(layer, default, index, roots_lost, key, settings)
    }

    fn open_with(
        layer: Arc<Redundant>,
        default: Protection,
        index: Index,
        roots_lost: bool,
        key: RepoKey,
        settings: StoreSettings,
    ) -> Result<Store> {
        let shared = Arc::new(Shared {
            layer,
            default: RwLock::new(default),
            unsealed: Mutex::new(HashMap::new()),
            buffers: BufferPool::default(),
            key,
            settings,
            index,
            budget: Budget::new(settings.memory_budget),
            inflight: Mutex::new(Inflight::default()),
            inflight_cv: Condvar::new(),
            parked_jobs: Mutex::new(Vec::new()),
            ids: Mutex::new((0, 0)),
            unindexed: Mutex::new(BTreeSet::new()),
            retained: RwLock::new(None),
            doomed: RwLock::new(HashSet::new()),
            peer_recording: std::sync::atomic::AtomicBool::new(false),
            peer_collections_ended: std::sync::atomic::AtomicU64::new(0),
            reads: std::sync::atomic::AtomicU64::new(0),
            qos: crate::qos::Scheduler::new(
                settings.qos,
                std::sync::Arc::new(branch::SystemClock::default()),
            ),
            shared_index: RwLock::new(None),
            id_ledger: RwLock::new(None),
            ids_refused: std::sync::atomic::AtomicBool::new(false),
            catching_up: Mutex::new(()),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let io_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("cas-io".into())
            .spawn(move || io_loop(&io_shared, rx))
            .expect("spawn the container writer thread");
        let store = Store {
            shared,
            io: Arc::new(Io {
                tx: Some(tx),
                thread: Some(thread),
            }),
        };
        // A new roots file over an existing branch: the roots are still on
        // the branch as blobs.
        if roots_lost {
            store.recover_roots()?;
        }
        store.index_unrecorded()?;
        Ok(store)
    }

    pub fn settings(&self) -> &StoreSettings {
        &self.shared.settings
    }

    /// The memory budget writers share; callers that buffer data for the
    /// store (a chunking pipeline) take their permits from it too.
    pub fn budget(&self) -> &Budget {
        &self.shared.budget
    }

    /// The id of one chunk's bytes (a cache that keeps chunks elsewhere
    /// verifies them with it).
    pub fn chunk_id(&self, data: &[u8]) -> ChunkId {
        self.shared.key.chunk_id(data)
    }

    /// The ids of `chunks`, hashed on every core.
    pub fn chunk_ids(&self, chunks: &[bytes::Bytes]) -> Vec<ChunkId> {
        use rayon::prelude::*;
        chunks
            .par_iter()
            .map(|c| self.shared.key.chunk_id(c))
            .collect()
    }

    /// A new write stream with its own open container, so the chunks of one
    /// stream stay together on disk; its containers get the default
    /// protection.
    pub fn stream(&self) -> StreamWriter {
        StreamWriter::new(self.clone(), self.default_protection(), false)
    }

    /// A write stream whose containers are stored under `protection`.
    pub fn stream_with(&self, protection: Protection) -> Result<StreamWriter> {
        self.check_protection(&protection)?;
        Ok(StreamWriter::new(self.clone(), protection, false))
    }

    /// Whether containers can be stored under `protection` here.
    pub fn check_protection(&self, protection: &Protection) -> Result<()> {
        Ok(self
            .shared
            .layer
            .validate(&protection.policy, &protection.branches)?)
    }

    /// The protection of streams that ask for none.
    pub fn default_protection(&self) -> Protection {
        self.shared.default.read().clone()
    }

    /// Changes the protection of streams that ask for none (after the
    /// branches were reconfigured); streams already open keep theirs.
    pub fn set_default_protection(&self, protection: Protection) -> Result<()> {
        self.check_protection(&protection)?;
        *self.shared.default.write() = protection;
        Ok(())
    }

    /// What the default protection can still store, and could hold in
    /// all, in data bytes; `None` when a branch cannot tell (S3).
    pub fn space(&self) -> Result<Option<branch::Space>> {
        let p = self.default_protection();
        Ok(self.shared.layer.space(&p.policy, &p.branches)?)
    }

    /// The redundancy layer containers are stored through; for a store on
    /// one plain branch, a layer in the plain layout
    /// ([`Redundant::is_plain`]).
    pub fn layer(&self) -> &Arc<Redundant> {
        &self.shared.layer
    }

    /// Every container the index knows, in id order.
    pub fn indexed_containers(&self) -> Result<Vec<ContainerId>> {
        let mut ids: Vec<ContainerId> = self
            .shared
            .index
            .containers()?
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// The containers at least one index entry points into: those whose
    /// loss loses data.
    pub fn containers_in_use(&self) -> Result<std::collections::HashSet<ContainerId>> {
        let mut out = std::collections::HashSet::new();
        self.shared.index.for_each_chunk(|_, loc| {
            out.insert(loc.container);
        })?;
        Ok(out)
    }

    /// The policy container `id` is stored under.
    pub fn container_policy(&self, id: ContainerId) -> Result<Policy> {
        self.shared.index.container_policy(id)
    }

    /// The policy the container holding chunk `id` is stored under.
    pub fn chunk_policy(&self, id: &ChunkId) -> Result<Policy> {
        let at = self.locate(id)?;
        self.container_policy(at.container)
    }

    /// Garbage collection's stream: stores chunks even when they are indexed
    /// (in a container being reclaimed) and points their entries at the copy.
    pub(crate) fn relocation_stream(&self, protection: Protection) -> StreamWriter {
        StreamWriter::new(self.clone(), protection, true)
    }

    pub(crate) fn allocate_container(&self) -> Result<ContainerId> {
        let client = self.shared.settings.client;
        let mut ids = self.shared.ids.lock();
        if ids.0 == ids.1 {
            if self
                .shared
                .ids_refused
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                return Err(CasError::IdsRefused(None));
            }
            let first = self
                .shared
                .index
                .reserve_container_ids(IDS_PER_RESERVATION, || self.next_unused_container())?;
            let below = first + IDS_PER_RESERVATION;
            let ledger = self.shared.id_ledger.read().clone();
            if let Some(ledger) = ledger {
                if let Err(e) = ledger.reserved(first, below) {
                    if let crate::shared::LedgerError::Refused(_) = e {
                        // For good: reserving again would only raise this
                        // index's mark past ids it must not use.
                        self.shared
                            .ids_refused
                            .store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    tracing::error!(error = %e, "container ids not recorded by the ledger: the container is not written");
                    return Err(CasError::IdsRefused(Some(e)));
                }
            }
            *ids = (first, below);
        }
        let id = ids.0;
        if id > client.last_container() || ContainerId(id).client() != client {
            return Err(CasError::ContainerIdsExhausted(client));
        }
        ids.0 += 1;
        self.shared.unindexed.lock().insert(ContainerId(id));
        Ok(ContainerId(id))
    }

    /// Makes the index durable (its write-path commits are not synced) with
    /// its indexed mark raised as far as it can be: what a file system
    /// does when it is unmounted, so that nothing the index recorded is
    /// lost when the process exits, whoever still holds the store.
    pub fn persist_index(&self) -> Result<()> {
        close_marks(&self.shared)
    }

    /// Indexes this client's containers that a crash left on the branches
    /// but not in the durable index: those at or above its indexed mark
    /// (and below its id mark) that it does not know, read from their
    /// footers (a damaged one through salvage). Their chunks may be what
    /// durable metadata references (see the `index` module); run at open,
    /// before anything (a collection, a check) trusts the index. A clean
    /// close leaves the marks equal, and this lists nothing. A container
    /// that is gone or cannot give its chunks back is logged and skipped
    /// (its loss is what `cairn check` reports); any other error fails the
    /// open, leaving the mark where it was. Returns how many it indexed.
    fn index_unrecorded(&self) -> Result<usize> {
        let index = &self.shared.index;
        let (Some(hwm), Some(below)) = (index.container_mark()?, index.indexed_mark()?) else {
            return Ok(0);
        };
        if below >= hwm {
            return Ok(0);
        }
        let client = self.client();
        let mut rows = Vec::new();
        let mut entries = Vec::new();
        for c in self.container_ids()? {
            if !client.owns(c) || c.0 < below || c.0 >= hwm || index.has_container(c)? {
                continue;
            }
            match self.container_row(c) {
                Ok((info, policy, e)) => {
                    rows.push((c, info, policy));
                    entries.extend(e);
                }
                Err(e) if e.loses_data() => {
                    tracing::warn!(container = %c, error = %e, "a container a crash left unindexed cannot be read; its chunks are lost");
                }
                Err(e) => return Err(e),
            }
        }
        index.add_recovered(&rows, &entries, hwm)?;
        if !rows.is_empty() {
            tracing::info!(
                containers = rows.len(),
                chunks = entries.len(),
                "indexed containers a crash left unindexed"
            );
        }
        Ok(rows.len())
    }

    /// One past the highest container id of this client on the branch
    /// (the first of its range when it has none).
    fn next_unused_container(&self) -> Result<u64> {
        let client = self.shared.settings.client;
        let stored = self.shared.stored_containers()?;
        Ok(stored
            .iter()
            .rfind(|c| client.owns(**c))
            .map_or(client.first_container(), |c| c.0 + 1))
    }

    /// Which client of its file system this store is.
    pub fn client(&self) -> crate::id::ClientNo {
        self.shared.settings.client
    }

    /// Registers this store's client on the branches (a small blob under
    /// `clients/`), refused with [`CasError::ClientTaken`] if the number
    /// is registered already. Client 0 needs no registration.
    pub fn register_client(&self, note: &str) -> Result<()> {
        let client = self.client();
        if self.clients()?.contains(&client) {
            return Err(CasError::ClientTaken(client));
        }
        self.shared
            .put_blob(&client_blob_key(client), note.as_bytes())
    }

    /// What client `client` registered with ([`Store::register_client`]);
    /// `None` when it is not registered.
    pub fn client_note(&self, client: crate::id::ClientNo) -> Result<Option<Vec<u8>>> {
        let key = client_blob_key(client);
        let wanted = key.clone();
        self.shared
            .layer
            .discover_new(key.as_str(), &|k| *k == wanted);
        match self.shared.get_blob(&key) {
            Ok(note) => Ok(Some(note)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Every client registered on the branches, and client 0 (the first
    /// client, which never registers), in number order.
    pub fn clients(&self) -> Result<Vec<crate::id::ClientNo>> {
        registered_clients(&self.shared.layer)
    }

    /// [`CasError::NoSpace`] naming a container a full branch refused, if
    /// any is waiting for space: nothing that points at its chunks may be
    /// made durable, and new data should be refused, until it is stored.
    pub fn waiting_for_space(&self) -> Option<CasError> {
        let inflight = self.shared.inflight.lock();
        inflight
            .parked
            .iter()
            .min_by_key(|(id, _)| **id)
            .map(|(id, reason)| stall::no_space(*id, reason))
    }

    /// The containers waiting for space now.
    pub fn parked_containers(&self) -> Vec<ContainerId> {
        self.shared.inflight.lock().parked.keys().copied().collect()
    }

    /// The chunks (data and recipe nodes) of the containers waiting for
    /// space: nothing that reaches one may be made durable.
    pub fn parked_chunks(&self) -> Vec<ChunkId> {
        let inflight = self.shared.inflight.lock();
        inflight.parked_chunks.values().flatten().copied().collect()
    }

    /// Drops the containers of `among` still waiting for space that hold
    /// no chunk `used` names: garbage collection's way out of a full disk,
    /// where the files that wrote them were deleted before they could be
    /// stored. Returns how many were dropped. A container the I/O thread is
    /// trying again at this moment is left for the next collection.
    pub fn drop_unused_parked(
        &self,
        among: &[ContainerId],
        used: &dyn Fn(&ChunkId) -> bool,
    ) -> usize {
        let dropped: Vec<IoJob> = {
            let mut jobs = self.shared.parked_jobs.lock();
            let (drop, keep) = std::mem::take(&mut *jobs).into_iter().partition(|j| {
                among.contains(&j.sealed.id) && !j.sealed.entries.iter().any(|(id, _)| used(id))
            });
            *jobs = keep;
            drop
        };
        for job in &dropped {
            stall::unpark(&self.shared, &job.sealed);
            self.shared.unindexed.lock().remove(&job.sealed.id);
        }
        let mut inflight = self.shared.inflight.lock();
        for job in &dropped {
            inflight.parked.remove(&job.sealed.id);
            inflight.parked_chunks.remove(&job.sealed.id);
            inflight.containers.remove(&job.sealed.id);
            tracing::info!(container = %job.sealed.id, "dropped a container waiting for space that no file uses");
        }
        drop(inflight);
        self.shared.inflight_cv.notify_all();
        dropped.len()
    }

    /// Where a chunk is, waiting if its container is still being written.
    pub fn locate(&self, id: &ChunkId) -> Result<ChunkLocation> {
        {
            let mut inflight = self.shared.inflight.lock();
            while inflight.pending.contains_key(id) {
                if inflight.io_dead {
                    return Err(CasError::IoThreadDead);
                }
                self.shared.inflight_cv.wait(&mut inflight);
            }
        }
        if let Some(loc) = self.shared.index.lookup(id)? {
            return Ok(loc);
        }
        // Perhaps another client's (see `shared`).
        self.learn(std::slice::from_ref(id), crate::shared::Asker::Reader)?;
        self.shared
            .index
            .lookup(id)?
            .ok_or(CasError::UnknownChunk(*id))
    }

    /// [`Store::locate`] of many chunks, with one index transaction.
    pub fn locate_many(&self, ids: &[ChunkId]) -> Result<Vec<ChunkLocation>> {
        {
            let mut inflight = self.shared.inflight.lock();
            while ids.iter().any(|id| inflight.pending.contains_key(id)) {
                if inflight.io_dead {
                    return Err(CasError::IoThreadDead);
                }
                self.shared.inflight_cv.wait(&mut inflight);
            }
        }
        let mut found = self.shared.index.lookup_many(ids)?;
        if found.iter().any(Option::is_none) && self.has_shared_index() {
            // Perhaps other clients' (see `shared`).
            self.learn(ids, crate::shared::Asker::Reader)?;
            found = self.shared.index.lookup_many(ids)?;
        }
        ids.iter()
            .zip(found)
            .map(|(id, loc)| loc.ok_or(CasError::UnknownChunk(*id)))
            .collect()
    }

    /// Whether the store holds the chunk (durably, or about to).
    pub fn contains(&self, id: &ChunkId) -> Result<bool> {
        match self.locate(id) {
            Ok(_) => Ok(true),
            Err(CasError::UnknownChunk(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Names `id` as root `label`. The root is written twice: as a small
    /// blob on the branch (so a repository whose metadata files are lost can
    /// find its roots again, see [`Store::recover_roots`]) and in
    /// `roots.redb`, which is what lookups read.
    pub fn put_root(&self, label: &str, id: &ChunkId) -> Result<()> {
        check_label(label)?;
        self.locate(id)?;
        let key = root_blob_key(self.client(), label);
        self.shared.delete_blob(&key)?;
        self.shared.put_blob(&key, id.as_bytes())?;
        self.shared.index.put_root(label, id)
    }

    pub fn get_root(&self, label: &str) -> Result<ChunkId> {
        self.shared
            .index
            .get_root(label)?
            .ok_or_else(|| CasError::NoSuchRoot(label.to_string()))
    }

    pub fn delete_root(&self, label: &str) -> Result<()> {
        if self.shared.index.delete_root(label)? {
            self.shared
                .delete_blob(&root_blob_key(self.client(), label))?;
            Ok(())
        } else {
            Err(CasError::NoSuchRoot(label.to_string()))
        }
    }

    /// Puts back into `roots.redb` every root whose blob is on the branch
    /// (after the metadata files were lost). Returns how many.
    pub fn recover_roots(&self) -> Result<usize> {
        let prefix = roots_prefix(self.client());
        let keys = self.shared.list_blobs(&prefix)?;
        let mut n = 0;
        for key in keys {
            let Some(label) = label_of_root_blob(&prefix, &key) else {
                continue;
            };
            let bytes = self.shared.get_blob(&key)?;
            let Ok(id) = <[u8; 32]>::try_from(bytes.as_slice()) else {
                continue;
            };
            self.shared
                .index
                .put_root(&label, &ChunkId::from_bytes(id))?;
            n += 1;
        }
        Ok(n)
    }

    pub fn list_roots(&self) -> Result<Vec<(String, ChunkId)>> {
        self.shared.index.list_roots()
    }

    /// Reads of containers and root blobs asked of storage since the store
    /// opened: an exact count (one per request to the redundancy layer,
    /// however many branches serve it), for benchmarks that report storage
    /// reads per operation.
    pub fn storage_reads(&self) -> u64 {
        self.shared.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Shrinks `index.redb` to its live rows (see [`crate::Compaction`]):
    /// after a collection, by a process that has the repository to itself.
    pub fn compact_index(&self) -> Result<crate::Compaction> {
        self.shared.index.compact()
    }

    /// Storage reads admitted since the store opened, by kind (see
    /// [`crate::qos`]).
    pub fn reads_by_class(&self) -> crate::qos::ReadsByClass {
        self.shared.qos.admitted()
    }

    /// Reads of the chunk index's and the roots' redb files since the store
    /// opened (exact; the index's share of an operation's storage reads).
    pub fn index_reads(&self) -> u64 {
        self.shared.index.storage_reads()
    }

    /// What the page caches of the chunk index's and the roots' redb
    /// files did since the store opened.
    pub fn index_page_caches(&self) -> [redb::CacheStats; 2] {
        self.shared.index.page_caches()
    }

    /// Bytes of the indexed containers, [`StoreStats::stored_bytes`]
    /// without reading the index: a counter it keeps (for `statfs`).
    pub fn stored_bytes(&self) -> u64 {
        self.shared.index.stored_bytes()
    }

    pub fn stats(&self) -> Result<StoreStats> {
        let containers = self.shared.index.containers()?;
        let (ram, per_chunk) = self.shared.index.compact_ram_bytes();
        Ok(StoreStats {
            chunks: self.shared.index.chunk_count()?,
            containers: containers.len() as u64,
            stored_bytes: containers.iter().map(|(_, i)| i.stored_bytes).sum(),
            unique_bytes: containers.iter().map(|(_, i)| i.raw_bytes).sum(),
            index_ram_bytes: ram as u64,
            index_ram_bytes_per_chunk: per_chunk,
        })
    }
}

const ROOTS_PREFIX: &str = "roots/";
/// Where clients other than the first register and keep their roots:
/// `clients/<n>/client` and `clients/<n>/roots/...`.
const CLIENTS_PREFIX: &str = "clients/";
const CLIENT_BLOB: &str = "/client";

/// Where a client's root blobs are: the first client's where they always
/// were, every other client's under its own prefix, so that two clients'
/// roots of one label (`version/3`) never overwrite each other.
pub(crate) fn roots_prefix(client: crate::id::ClientNo) -> String {
    match client.get() {
        0 => ROOTS_PREFIX.to_string(),
        n => format!("{CLIENTS_PREFIX}{n}/{ROOTS_PREFIX}"),
    }
}

/// Every client registered on `layer`'s branches, and client 0 (the
/// first client, which never registers), in number order: what
/// [`Store::clients`] answers, for a caller with no store open (a client
/// repository being made picks its number from it).
pub fn registered_clients(layer: &Redundant) -> Result<Vec<crate::id::ClientNo>> {
    let mut out = vec![crate::id::ClientNo::default()];
    // Registered since the layer opened: found by listing the branches.
    layer.discover_new(CLIENTS_PREFIX, &|_| true);
    for key in layer.list(CLIENTS_PREFIX)? {
        let n = key
            .as_str()
            .strip_prefix(CLIENTS_PREFIX)
            .and_then(|rest| rest.strip_suffix(CLIENT_BLOB))
            .and_then(|n| n.parse::<u16>().ok());
        if let Some(n) = n.filter(|n| *n != 0) {
            out.push(crate::id::ClientNo::new(n));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn client_blob_key(client: crate::id::ClientNo) -> branch::BlobKey {
    branch::BlobKey::new(format!("{CLIENTS_PREFIX}{client}{CLIENT_BLOB}"))
        .expect("client keys are valid")
}
/// Hex digits per key segment: a label of 255 bytes is 510 digits, more
/// than a file name may hold.
const ROOT_SEGMENT: usize = 200;

/// `roots/<hex of the label, in segments>/r`: hex keeps any label a valid
/// key, and the final `r` keeps a short label's blob from colliding with a
/// longer label's directory.
fn root_blob_key(client: crate::id::ClientNo, label: &str) -> branch::BlobKey {
    let hex = hex::encode(label);
    let segments: Vec<&str> = hex
        .as_bytes()
        .chunks(ROOT_SEGMENT)
        .map(|c| std::str::from_utf8(c).expect("hex is ascii"))
        .collect();
    branch::BlobKey::new(format!("{}{}/r", roots_prefix(client), segments.join("/")))
        .expect("hex segments are valid keys")
}

pub(crate) fn label_of_root_blob(prefix: &str, key: &branch::BlobKey) -> Option<String> {
    let hex: String = key
        .as_str()
        .strip_prefix(prefix)?
        .strip_suffix("/r")?
        .split('/')
        .collect();
    String::from_utf8(hex::decode(hex).ok()?).ok()
}

fn check_label(label: &str) -> Result<()> {
    if label.is_empty() || label.len() > 255 || label.chars().any(char::is_control) {
        return Err(CasError::BadLabel(label.to_string()));
    }
    Ok(())
}

/// Why a container could not be stored.
struct PutFailure {
    /// A branch is full: worth trying again once space is freed.
    no_space: bool,
    source: WriteFailure,
}

/// Makes sealed containers durable through the redundancy layer, each
/// under its own protection, the whole batch at once (shards bound for one
/// branch are written together and share its directory syncs).
fn put_containers(shared: &Shared, jobs: &[IoJob]) -> Vec<std::result::Result<(), PutFailure>> {
    let keys: Vec<_> = jobs.iter().map(|j| j.sealed.id.blob_key()).collect();
    let requests: Vec<PutRequest<'_>> = jobs
        .iter()
        .zip(&keys)
        .map(|(j, key)| PutRequest {
            key,
            data: &j.sealed.bytes,
            policy: &j.sealed.protection.policy,
            allowed: &j.sealed.protection.branches,
        })
        .collect();
    shared
        .layer
        .put_many(&requests)
        .into_iter()
        .map(|r| {
            r.map(|_| ()).map_err(|e| PutFailure {
                no_space: e.is_no_space(),
                source: WriteFailure::Redundancy(Box::new(e)),
            })
        })
        .collect()
}

fn io_loop(shared: &Shared, rx: Receiver<IoJob>) {
    // Declared after `rx`, so dropped before it: the store is marked dead
    // before a sender can see the channel closed.
    let _dead = DeadOnPanic(shared);
    // Containers a full branch refused, oldest first (in
    // `shared.parked_jobs` between rounds): tried again before anything
    // new, every `RETRY_EVERY` and whenever new work comes.
    loop {
        let waiting = !shared.parked_jobs.lock().is_empty();
        let first = if !waiting {
            match rx.recv() {
                Ok(job) => Some(job),
                Err(_) => break,
            }
        } else {
            match rx.recv_timeout(stall::RETRY_EVERY) {
                Ok(job) => Some(job),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        };
        let mut jobs = std::mem::take(&mut *shared.parked_jobs.lock());
        let retried = jobs.len();
        jobs.extend(first);
        while jobs.len() < retried + MAX_CONTAINERS_PER_COMMIT {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let mut outcomes: Vec<Outcome> = put_containers(shared, &jobs)
            .into_iter()
            .map(|r| match r {
                Ok(()) => Outcome::Written,
                Err(f) if f.no_space => Outcome::Parked(f.source.to_string()),
                Err(f) => Outcome::Failed(Arc::new(f.source)),
            })
            .collect();
        let written: Vec<&Sealed> = jobs
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, Outcome::Written))
            .map(|(j, _)| &j.sealed)
            .collect();
        match shared.index.commit_containers(
            &written,
            shared.indexed_mark(&written),
            &shared.doomed.read().clone(),
        ) {
            Ok(()) => {
                let mut unindexed = shared.unindexed.lock();
                for sealed in &written {
                    unindexed.remove(&sealed.id);
                }
                drop(unindexed);
                for sealed in &written {
                    Store::publish(shared, sealed);
                }
            }
            Err(e) => {
                let failure = Arc::new(WriteFailure::Index(Box::new(e)));
                for o in outcomes.iter_mut() {
                    if matches!(o, Outcome::Written) {
                        *o = Outcome::Failed(failure.clone());
                    }
                }
            }
        }
        let mut inflight = shared.inflight.lock();
        for (job, outcome) in jobs.iter().zip(&outcomes) {
            let id = job.sealed.id;
            let was_parked = inflight.parked.remove(&id).is_some();
            if let Outcome::Parked(reason) = outcome {
                if !was_parked {
                    // Readable from memory before it stops being pending.
                    stall::park(shared, &job.sealed);
                    let chunks = job.sealed.entries.iter().map(|(c, _)| *c).collect();
                    inflight.parked_chunks.insert(id, chunks);
                    tracing::warn!(container = %id, reason = %reason, "a branch is full: keeping the container in memory and trying again");
                }
                for (chunk, _) in &job.sealed.entries {
                    if inflight.pending.get(chunk) == Some(&id) {
                        inflight.pending.remove(chunk);
                    }
                }
                inflight.parked.insert(id, reason.clone());
                continue;
            }
            if was_parked {
                stall::unpark(shared, &job.sealed);
                inflight.parked_chunks.remove(&id);
                if matches!(outcome, Outcome::Written) {
                    tracing::info!(container = %id, "stored a container that waited for space");
                }
            }
            for (chunk, _) in &job.sealed.entries {
                if inflight.pending.get(chunk) == Some(&id) {
                    inflight.pending.remove(chunk);
                }
            }
            inflight.containers.remove(&id);
            if let Outcome::Failed(reason) = outcome {
                tracing::error!(container = %id, reason = %reason, "a container failed to be written");
                inflight.failed.insert(id, reason.clone());
            }
        }
        drop(inflight);
        shared.inflight_cv.notify_all();
        let mut parked = shared.parked_jobs.lock();
        for (job, outcome) in jobs.into_iter().zip(outcomes) {
            match outcome {
                Outcome::Parked(_) => parked.push(job),
                _ => shared.buffers.give(job.sealed.bytes),
            }
        }
    }
    let parked = shared.parked_jobs.lock();
    if !parked.is_empty() {
        tracing::error!(
            containers = parked.len(),
            "the store closed while containers waited for space; their data is lost"
        );
    }
    drop(parked);
    if let Err(e) = close_marks(shared) {
        tracing::warn!(error = %e, "the index could not be made durable at close");
    }
}

/// At a clean close: makes the index durable with its indexed mark as high
/// as what is left unindexed allows (the id mark when nothing is), so the
/// next open has nothing to look for. Always a durable commit: the write
/// path's commits are not synced, and a process that exits keeps only
/// what a durable commit covered (a container lost while unmounted would
/// otherwise be forgotten rather than reported as still indexed).
fn close_marks(shared: &Shared) -> Result<()> {
    let index = &shared.index;
    let marks = index.container_mark().and_then(|hwm| {
        let below = index.indexed_mark()?;
        Ok(hwm.zip(below))
    });
    let Some((hwm, below)) = marks? else {
        return Ok(());
    };
    let target = shared
        .unindexed
        .lock()
        .first()
        .map_or(hwm, |c| c.0)
        .max(below);
    index.set_indexed_mark(target)
}

/// What became of one container the I/O thread was given.
enum Outcome {
    Written,
    /// A branch is full: kept and tried again.
    Parked(String),
    Failed(Arc<WriteFailure>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_blob_keys_round_trip() {
        for client in [0, 1, 700] {
            let client = crate::id::ClientNo::new(client);
            let prefix = roots_prefix(client);
            for label in ["a", "version/12", "snapshot/with space", &"x".repeat(255)] {
                let key = root_blob_key(client, label);
                assert_eq!(label_of_root_blob(&prefix, &key).as_deref(), Some(label));
                // Another client's roots are not this one's.
                let other = roots_prefix(crate::id::ClientNo::new(3));
                assert_eq!(label_of_root_blob(&other, &key), None);
            }
        }
    }
}
