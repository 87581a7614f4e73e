//! The shared fingerprint index over `cairn chunkd` (`[shared_index] kind =
//! "chunkd"`, `docs/cluster.md`): a [`cas::SharedIndex`] whose questions go
//! to the owners of the fingerprint ranges, in batches, instead of listing
//! the branches.
//!
//! It lives in `repo` because it joins two crates below it: `cas` (the
//! trait, chunk locations) and `chunkd` (the index client, which only
//! knows `branch`); neither may know the other.
//!
//! What an owner's failure costs: a lookup part it does not answer is
//! "not found", so a writer stores those chunks again (missed dedup); a
//! read must find its chunk, so for it the unanswered ones are looked for
//! on the branches ([`cas::CatchUp`]). A container whose `add` failed waits
//! in a bounded queue and is sent again later; never does it fail a write.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cas::{CatchUp, ChunkId, ChunkLocation, ContainerId, Policy, SharedIndex};
use chunkd::{Fingerprint, IndexClient, Location};

/// Entries waiting to be added again, at most: about 1000 containers of
/// 64 chunks, a few MiB. When full, the oldest containers are dropped
/// (logged): their chunks are then only missed dedup for other clients.
const MAX_PENDING_ENTRIES: usize = 65_536;

/// How often pending adds are tried again while owners keep failing.
const RETRY_EVERY: Duration = Duration::from_secs(5);

/// How often one owner's failures are logged.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Most owners whose last log time is remembered (the table has at most
/// 4096 ranges; owners are far fewer).
const MAX_OWNERS_LOGGED: usize = 4096;

/// The index service as the store's shared index.
pub struct ChunkdIndex {
    client: IndexClient,
    /// Where a read looks for chunks an unanswering owner may hold.
    fallback: Arc<CatchUp>,
    pending: Mutex<Pending>,
    /// When each owner's failure ("lookup OWNER", "add OWNER") was last
    /// logged.
    logged: Mutex<HashMap<String, Instant>>,
}

#[derive(Default)]
struct Pending {
    containers: VecDeque<(ContainerId, Vec<(Fingerprint, Location)>)>,
    entries: usize,
    /// Not before this instant: the last retry failed.
    next_try: Option<Instant>,
}

impl ChunkdIndex {
    /// The index reached through `client`; `fallback` answers reads for
    /// chunks whose owner does not answer.
    pub fn new(client: IndexClient, fallback: Arc<CatchUp>) -> Arc<ChunkdIndex> {
        Arc::new(ChunkdIndex {
            client,
            fallback,
            pending: Mutex::new(Pending::default()),
            logged: Mutex::new(HashMap::new()),
        })
    }

    /// Containers whose add waits to be sent again.
    pub fn pending(&self) -> usize {
        self.lock_pending().containers.len()
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs an owner's failure, at most once per [`LOG_EVERY`] for each
    /// owner and request kind.
    fn log_owner(&self, owner: &str, what: &'static str, error: &dyn std::fmt::Display) {
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let key = format!("{what} {owner}");
        if logged
            .get(&key)
            .is_some_and(|t| now.duration_since(*t) < LOG_EVERY)
        {
            return;
        }
        if logged.len() >= MAX_OWNERS_LOGGED {
            logged.clear();
        }
        logged.insert(key, now);
        tracing::warn!(%owner, %error, "chunkd index owner failed ({what}); its chunks cost missed dedup until it is back (logged once a minute)");
    }

    /// Asks the owners; with `fallback`, the chunks an unanswering owner
    /// was asked about are looked for on the branches as well.
    fn ask(&self, ids: &[ChunkId], fallback: bool) -> cas::Result<Vec<Option<ChunkLocation>>> {
        self.retry_pending(false);
        let fps: Vec<Fingerprint> = ids
            .iter()
            .map(|id| Fingerprint::new(*id.as_bytes()))
            .collect();
        let found = self.client.lookup(&fps);
        for (owner, failure) in &found.unavailable {
            self.log_owner(owner, "lookup", failure);
        }
        let mut out: Vec<Option<ChunkLocation>> = found
            .locations
            .iter()
            .map(|l| l.as_ref().and_then(decode))
            .collect();
        if fallback && !found.unavailable.is_empty() {
            let missing: Vec<usize> = (0..ids.len()).filter(|&i| out[i].is_none()).collect();
            let asked: Vec<ChunkId> = missing.iter().map(|&i| ids[i]).collect();
            for (i, loc) in missing.into_iter().zip(self.fallback.locate(&asked)?) {
                out[i] = loc;
            }
        }
        Ok(out)
    }

    /// Sends the pending adds again if the last try is long enough ago, or
    /// at once with `now` (an add just succeeded: the owners are back).
    fn retry_pending(&self, now: bool) {
        let batch = {
            let mut p = self.lock_pending();
            let early = !now && p.next_try.is_some_and(|t| Instant::now() < t);
            if p.containers.is_empty() || early {
                return;
            }
            p.entries = 0;
            std::mem::take(&mut p.containers)
        };
        let mut failed = VecDeque::new();
        for (container, entries) in batch {
            if failed.is_empty() && self.client.add(container.0, &entries).is_ok() {
                continue;
            }
            failed.push_back((container, entries));
        }
        let sent_all = failed.is_empty();
        for (container, entries) in failed.into_iter().rev() {
            self.queue(container, entries, true);
        }
        let mut p = self.lock_pending();
        p.next_try = (!sent_all).then(|| Instant::now() + RETRY_EVERY);
        if sent_all {
            tracing::info!("chunkd index: pending adds sent");
        }
    }

    /// Puts a container's entries in the queue (`front`: an older one put
    /// back), dropping the oldest while it is over its bound.
    fn queue(&self, container: ContainerId, entries: Vec<(Fingerprint, Location)>, front: bool) {
        let mut p = self.lock_pending();
        p.entries += entries.len();
        if front {
            p.containers.push_front((container, entries));
        } else {
            p.containers.push_back((container, entries));
        }
        while p.entries > MAX_PENDING_ENTRIES {
            let Some((dropped, e)) = p.containers.pop_front() else {
                break;
            };
            p.entries -= e.len();
            tracing::warn!(container = %dropped, chunks = e.len(), "chunkd index: too many adds pending; this container's chunks are not added (other clients miss their dedup)");
        }
    }
}

/// A location from the index, or `None` if it is not one of ours.
fn decode(l: &Location) -> Option<ChunkLocation> {
    match <&[u8; 28]>::try_from(l.as_bytes()) {
        Ok(b) => Some(ChunkLocation::decode(b)),
        Err(_) => {
            tracing::warn!(
                bytes = l.as_bytes().len(),
                "chunkd index: a location that is not a chunk location; ignored"
            );
            None
        }
    }
}

impl SharedIndex for ChunkdIndex {
    fn locate(&self, ids: &[ChunkId]) -> cas::Result<Vec<Option<ChunkLocation>>> {
        self.ask(ids, true)
    }

    /// A writer's miss only costs storing again: no fallback listing.
    fn locate_for_write(&self, ids: &[ChunkId]) -> cas::Result<Vec<Option<ChunkLocation>>> {
        self.ask(ids, false)
    }

    /// Adds the container's chunks; a failure queues them for later and is
    /// not the writer's error.
    fn publish(
        &self,
        container: ContainerId,
        _: &Policy,
        entries: &[(ChunkId, ChunkLocation)],
    ) -> cas::Result<()> {
        let entries: Vec<(Fingerprint, Location)> = entries
            .iter()
            .map(|(id, loc)| {
                let location = Location::new(loc.encode().to_vec())
                    .expect("a chunk location is 28 bytes, under the limit");
                (Fingerprint::new(*id.as_bytes()), location)
            })
            .collect();
        match self.client.add(container.0, &entries) {
            Ok(()) => self.retry_pending(true),
            Err(e) => {
                let owner = match &e {
                    chunkd::ClientError::Owner { owner, .. } => owner.clone(),
                    _ => "the range table".to_string(),
                };
                self.log_owner(&owner, "add", &e);
                self.queue(container, entries, false);
                let mut p = self.lock_pending();
                p.next_try
                    .get_or_insert_with(|| Instant::now() + RETRY_EVERY);
            }
        }
        Ok(())
    }

    /// Every owner the table names removes the containers' entries before
    /// gc deletes them (an error, some owner not answering, keeps the
    /// containers). An add still queued for them is dropped, or its retry
    /// would name them once they are gone (one already being sent may
    /// still land: a stale entry, which costs a probe).
    fn forget(&self, containers: &[ContainerId]) -> cas::Result<()> {
        {
            let going: HashSet<ContainerId> = containers.iter().copied().collect();
            let mut p = self.lock_pending();
            p.containers.retain(|(c, _)| !going.contains(c));
            p.entries = p.containers.iter().map(|(_, e)| e.len()).sum();
        }
        let ids: Vec<u64> = containers.iter().map(|c| c.0).collect();
        self.client
            .forget(&ids)
            .map(|_| ())
            .map_err(|e| cas::CasError::SharedIndexForget {
                containers: containers.len(),
                source: Box::new(e),
            })
    }
}
