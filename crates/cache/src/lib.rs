//! The persistent chunk cache tier: verified chunk bytes in a directory on
//! a fast device, below the file system's DRAM cache and above the store
//! (DDFS's persistent cache for nonsequential workloads).
//!
//! **Owns:** one directory (`[cache] dir` in `cairn.toml`): a file per
//! chunk, `<dir>/chunks/<first two hex digits>/<id in hex>`, holding the
//! chunk's bytes and nothing else; the in-memory list of those files, least
//! recently used first; admission under a write-rate budget; hit, miss and
//! corruption counts ([`TierStats`]).
//!
//! **Never:** is the only copy of anything (the store always is: a lost or
//! wiped cache directory costs reads, never data); serves bytes it has not
//! verified; decides what to admit (the caller does, by access pattern: a
//! random reader's chunks are admitted, a sequential reader's are not);
//! knows files, recipes or containers.
//!
//! **Invariants:**
//! 1. Every chunk [`ChunkTier::get`] returns hashes to the id it was asked
//!    by (the caller's keyed BLAKE3, [`Verify`]). A file that does not
//!    (torn, bit-flipped, replaced) is counted, logged, deleted and reported
//!    as a miss: the caller reads the store instead.
//! 2. The files under `chunks/` hold at most `size` bytes of chunks; the
//!    least recently used are deleted first. Reopening the directory finds
//!    every complete entry (oldest first by modification time), so the
//!    cache survives a restart.
//! 3. Bytes written to the device stay within the write-rate budget (a
//!    token bucket holding one second of it): over budget, or with the
//!    writer's bounded queue full, a chunk is simply not admitted.
//! 4. A chunk is written to a temporary name and renamed into place, so a
//!    crash leaves either a whole file or a temporary one (deleted at the
//!    next open); nothing is fsynced (invariant 1 catches what a crash
//!    tears).
//!
//! Written by hand rather than with `foyer`'s hybrid cache: foyer 0.22
//! builds on our toolchain (it needs Rust 1.91), but it is asynchronous
//! on a tokio runtime while the file system's read path is synchronous
//! threads, its API has broken across most of its 67 releases, and what
//! cairn needs here is small: chunks are immutable and self-verifying
//! (their name is their hash), so a file per chunk with an LRU list is
//! the whole design, and the file system's DRAM cache already is the
//! memory tier foyer would add.

mod budget;
mod scan;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use crossbeam_channel::{Sender, TrySendError};
use ids::ChunkId;
use lru::LruCache;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use budget::Budget;

/// Chunks waiting for the writer thread at most: admission is a hint, so
/// with the queue full a chunk is dropped, not waited for.
const QUEUED: usize = 256;

/// Where the tier lives and what it may cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierSettings {
    pub dir: PathBuf,
    /// Bytes of chunks kept at most.
    pub size: u64,
    /// Bytes per second written to the device at most (device endurance).
    pub write_rate: u64,
}

/// Computes a chunk's id from its bytes (the store's keyed BLAKE3).
pub type Verify = Arc<dyn Fn(&[u8]) -> ChunkId + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("cache directory {path}: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// What the tier did since it was opened, and what it holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierStats {
    /// Chunks served from the tier.
    pub hits: u64,
    /// Chunks asked for and not there (the store served them).
    pub misses: u64,
    /// Chunks written to the tier.
    pub admitted: u64,
    pub admitted_bytes: u64,
    /// Chunks not admitted: over the write-rate budget or the writer busy.
    pub skipped: u64,
    /// Files that failed verification and were deleted.
    pub corrupt: u64,
    pub entries: u64,
    pub bytes: u64,
    pub size: u64,
}

#[derive(Default)]
struct Counters {
    hits: AtomicU64,
    misses: AtomicU64,
    admitted: AtomicU64,
    admitted_bytes: AtomicU64,
    skipped: AtomicU64,
    corrupt: AtomicU64,
}

/// The entries on disk, least recently used first, and their total bytes.
struct Entries {
    lru: LruCache<ChunkId, u64>,
    bytes: u64,
}

struct Shared {
    dir: PathBuf,
    size: u64,
    verify: Verify,
    entries: Mutex<Entries>,
    budget: Mutex<Budget>,
    counters: Counters,
}

/// The open tier. Cheap to share behind an `Arc`; [`ChunkTier::close`]
/// (or dropping it) lets the writer finish what is queued.
pub struct ChunkTier {
    shared: Arc<Shared>,
    queue: Mutex<Option<Sender<(ChunkId, Bytes)>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl ChunkTier {
    /// Opens (creating) the directory and lists the entries it holds.
    pub fn open(settings: &TierSettings, verify: Verify) -> Result<ChunkTier, TierError> {
        Self::open_with_clock(settings, verify, Box::new(std::time::Instant::now))
    }

    /// [`ChunkTier::open`] with the write budget's time from `clock`.
    fn open_with_clock(
        settings: &TierSettings,
        verify: Verify,
        clock: budget::Clock,
    ) -> Result<ChunkTier, TierError> {
        let dir = settings.dir.join("chunks");
        let path = dir.clone();
        let err = |source| TierError::Dir {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&dir).map_err(err)?;
        let found = scan::entries(&dir).map_err(err)?;
        let mut entries = Entries {
            lru: LruCache::unbounded(),
            bytes: 0,
        };
        for (id, len) in found {
            entries.lru.put(id, len);
            entries.bytes += len;
        }
        let shared = Arc::new(Shared {
            dir,
            size: settings.size,
            verify,
            entries: Mutex::new(entries),
            budget: Mutex::new(Budget::new(settings.write_rate, clock)),
            counters: Counters::default(),
        });
        shared.evict();
        let (tx, rx) = crossbeam_channel::bounded::<(ChunkId, Bytes)>(QUEUED);
        let bg = shared.clone();
        let writer = std::thread::Builder::new()
            .name("cache-tier".into())
            .spawn(move || {
                for (id, data) in rx {
                    bg.store(id, &data);
                }
            })
            .map_err(err)?;
        tracing::info!(dir = %settings.dir.display(), entries = shared.entries.lock().lru.len(), "cache tier open");
        Ok(ChunkTier {
            shared,
            queue: Mutex::new(Some(tx)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// The chunk `id`, verified, or `None` (also when its file was corrupt:
    /// then it is deleted).
    pub fn get(&self, id: &ChunkId) -> Option<Bytes> {
        let s = &self.shared;
        let c = &s.counters;
        if !s.entries.lock().lru.contains(id) {
            c.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let path = s.path(id);
        let data = match fs::read(&path) {
            Ok(data) => data,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cache tier entry unreadable; dropped");
                s.forget(id);
                c.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        if (s.verify)(&data) != *id {
            tracing::warn!(path = %path.display(), "cache tier entry does not match its chunk id; deleted, the store serves the chunk");
            s.forget(id);
            c.corrupt.fetch_add(1, Ordering::Relaxed);
            c.misses.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        s.entries.lock().lru.promote(id);
        c.hits.fetch_add(1, Ordering::Relaxed);
        Some(Bytes::from(data))
    }

    /// Offers a verified chunk for the tier: written in the background,
    /// unless already there, larger than the tier, over the write-rate
    /// budget, or the writer is busy.
    pub fn admit(&self, id: ChunkId, data: Bytes) {
        let s = &self.shared;
        let len = data.len() as u64;
        if len > s.size || s.entries.lock().lru.contains(&id) {
            return;
        }
        let queue = self.queue.lock();
        let Some(tx) = queue.as_ref() else {
            return;
        };
        if !s.budget.lock().take(len) {
            s.counters.skipped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        match tx.try_send((id, data)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                s.counters.skipped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub fn stats(&self) -> TierStats {
        let s = &self.shared;
        let c = &s.counters;
        let entries = s.entries.lock();
        TierStats {
            hits: c.hits.load(Ordering::Relaxed),
            misses: c.misses.load(Ordering::Relaxed),
            admitted: c.admitted.load(Ordering::Relaxed),
            admitted_bytes: c.admitted_bytes.load(Ordering::Relaxed),
            skipped: c.skipped.load(Ordering::Relaxed),
            corrupt: c.corrupt.load(Ordering::Relaxed),
            entries: entries.lru.len() as u64,
            bytes: entries.bytes,
            size: s.size,
        }
    }

    /// Writes what is queued and stops admitting; reads still work.
    pub fn close(&self) {
        drop(self.queue.lock().take());
        if let Some(w) = self.writer.lock().take() {
            let _ = w.join();
        }
    }
}

impl Drop for ChunkTier {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    fn path(&self, id: &ChunkId) -> PathBuf {
        let hex = id.to_hex();
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Drops an entry and deletes its file.
    fn forget(&self, id: &ChunkId) {
        let mut entries = self.entries.lock();
        if let Some(len) = entries.lru.pop(id) {
            entries.bytes -= len;
        }
        drop(entries);
        remove(&self.path(id));
    }

    /// Writes one chunk's file (on the writer thread) and makes room.
    fn store(&self, id: ChunkId, data: &[u8]) {
        let path = self.path(&id);
        if let Err(e) = write_whole(&path, data) {
            tracing::warn!(path = %path.display(), error = %e, "writing a cache tier entry failed");
            return;
        }
        let len = data.len() as u64;
        let mut entries = self.entries.lock();
        if let Some(old) = entries.lru.put(id, len) {
            entries.bytes -= old;
        }
        entries.bytes += len;
        drop(entries);
        self.counters.admitted.fetch_add(1, Ordering::Relaxed);
        self.counters
            .admitted_bytes
            .fetch_add(len, Ordering::Relaxed);
        self.evict();
    }

    /// Deletes least recently used entries until the tier fits its size.
    fn evict(&self) {
        loop {
            let mut entries = self.entries.lock();
            if entries.bytes <= self.size {
                return;
            }
            let Some((id, len)) = entries.lru.pop_lru() else {
                return;
            };
            entries.bytes -= len;
            drop(entries);
            remove(&self.path(&id));
        }
    }
}

fn remove(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "deleting a cache tier entry failed");
        }
    }
}

/// Writes `data` under a temporary name and renames it into place.
fn write_whole(path: &Path, data: &[u8]) -> io::Result<()> {
    let dir = path.parent().expect("an entry is in a fan-out directory");
    fs::create_dir_all(dir)?;
    let tmp = path.with_extension(scan::TMP);
    fs::write(&tmp, data)?;
    fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests;
