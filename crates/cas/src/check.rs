//! Verifying every container and index entry, and rebuilding the index from
//! the containers alone.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::container::{self, ChunkLocation};
use crate::id::{ChunkId, ContainerId};
use crate::index::ContainerInfo;
use crate::store::Store;
use crate::{region, CasError, Result};

#[derive(Debug, Clone, Copy)]
pub struct CheckProgress {
    pub containers_done: u64,
    pub containers_total: u64,
    pub bytes_done: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// The container cannot be parsed: none of its chunks can be trusted.
    CorruptContainer { container: String, reason: String },
    /// A chunk whose bytes do not match its id (or do not decode).
    CorruptChunk {
        container: String,
        chunk: String,
        reason: String,
    },
    /// An index entry that leads nowhere valid: reading the chunk fails.
    DanglingIndexEntry {
        chunk: String,
        container: String,
        reason: String,
    },
    /// Chunks that are stored but not indexed (left by an interrupted write,
    /// or a duplicate copy); harmless, reclaimable.
    UnindexedChunks { container: String, count: u64 },
}

impl Problem {
    /// Whether the problem can make a read fail (as opposed to wasted space).
    pub fn is_damage(&self) -> bool {
        !matches!(self, Problem::UnindexedChunks { .. })
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::CorruptContainer { container, reason } => {
                write!(f, "container {container} is corrupt: {reason}")
            }
            Problem::CorruptChunk {
                container,
                chunk,
                reason,
            } => write!(
                f,
                "chunk {chunk} in container {container} is corrupt: {reason}"
            ),
            Problem::DanglingIndexEntry {
                chunk,
                container,
                reason,
            } => write!(
                f,
                "index entry for chunk {chunk} points into container {container}: {reason}"
            ),
            Problem::UnindexedChunks { container, count } => write!(
                f,
                "container {container} holds {count} unindexed chunk(s) (reclaimable)"
            ),
        }
    }
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct CheckReport {
    pub containers: u64,
    pub containers_ok: u64,
    pub chunks_verified: u64,
    pub bytes_verified: u64,
    pub index_entries: u64,
    pub index_entries_ok: u64,
    pub problems: Vec<Problem>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        !self.problems.iter().any(Problem::is_damage)
    }
}

#[derive(Debug, Default, Clone, Serialize)]
pub struct RebuildReport {
    pub containers: u64,
    pub chunks_indexed: u64,
    /// What could not be indexed because it is damaged.
    pub problems: Vec<Problem>,
}

/// What verifying one container found.
struct Scanned {
    id: ContainerId,
    /// Footer entries whose chunk verified.
    good: Vec<(ChunkId, ChunkLocation)>,
    info: ContainerInfo,
    problems: Vec<Problem>,
    ok: bool,
    bytes: u64,
}

impl Store {
    /// Reads every container, verifies every chunk against its id, and checks
    /// that every index entry leads to a verified chunk.
    pub fn check(&self, progress: &(dyn Fn(CheckProgress) + Sync)) -> Result<CheckReport> {
        let index = &self.shared.index;
        let mut per_container: HashMap<ContainerId, u64> = HashMap::new();
        let mut report = CheckReport::default();
        index.for_each_chunk(|_, loc| {
            *per_container.entry(loc.container).or_default() += 1;
            report.index_entries += 1;
        })?;
        let ids = self.container_ids()?;
        report.containers = ids.len() as u64;
        let scanned = self.scan(&ids, progress)?;
        let mut suspicious: HashSet<ContainerId> = HashSet::new();
        let present: HashSet<ContainerId> = ids.iter().copied().collect();
        for s in scanned {
            report.containers_ok += s.ok as u64;
            report.chunks_verified += s.good.len() as u64;
            report.bytes_verified += s.bytes;
            report.problems.extend(s.problems);
            let mut indexed_here = 0u64;
            for (id, loc) in &s.good {
                if index.lookup(id)?.as_ref() == Some(loc) {
                    indexed_here += 1;
                }
            }
            report.index_entries_ok += indexed_here;
            let expected = per_container.get(&s.id).copied().unwrap_or(0);
            if indexed_here < expected {
                suspicious.insert(s.id);
            }
            let unindexed = s.info.chunks as u64 - indexed_here.min(s.info.chunks as u64);
            if s.ok && unindexed > 0 && !suspicious.contains(&s.id) {
                report.problems.push(Problem::UnindexedChunks {
                    container: s.id.to_string(),
                    count: unindexed,
                });
            }
        }
        suspicious.extend(per_container.keys().filter(|c| !present.contains(c)));
        if !suspicious.is_empty() {
            self.report_dangling(&suspicious, &present, &mut report)?;
        }
        Ok(report)
    }

    /// Names each index entry pointing into a missing or damaged container.
    fn report_dangling(
        &self,
        suspicious: &HashSet<ContainerId>,
        present: &HashSet<ContainerId>,
        report: &mut CheckReport,
    ) -> Result<()> {
        let mut entries = Vec::new();
        self.shared.index.for_each_chunk(|id, loc| {
            if suspicious.contains(&loc.container) {
                entries.push((id, loc));
            }
        })?;
        for (id, loc) in entries {
            let reason = if !present.contains(&loc.container) {
                "the container is missing".to_string()
            } else {
                match self
                    .read_region(&loc)
                    .and_then(|r| self.verify(&id, &loc, &r))
                {
                    Ok(_) => continue,
                    Err(e) => e.to_string(),
                }
            };
            report.problems.push(Problem::DanglingIndexEntry {
                chunk: id.to_string(),
                container: loc.container.to_string(),
                reason,
            });
        }
        Ok(())
    }

    /// Rebuilds the fingerprint index from the containers alone: every chunk
    /// that verifies is indexed (for a chunk stored twice, the copy under the
    /// stronger policy wins, then the lowest container id). Roots are kept.
    /// One transaction: a crash midway keeps
    /// the old index.
    pub fn rebuild_index(
        &self,
        progress: &(dyn Fn(CheckProgress) + Sync),
    ) -> Result<RebuildReport> {
        let ids = self.container_ids()?;
        let scanned = self.scan(&ids, progress)?;
        let mut report = RebuildReport {
            containers: scanned.iter().filter(|s| s.ok).count() as u64,
            ..Default::default()
        };
        let mut infos = Vec::new();
        let mut entries = Vec::new();
        for s in scanned {
            report.problems.extend(s.problems);
            if s.ok {
                infos.push((s.id, s.info, self.stored_policy(s.id)?));
            }
            entries.extend(s.good);
        }
        report.chunks_indexed = entries
            .iter()
            .map(|(id, _)| *id)
            .collect::<HashSet<_>>()
            .len() as u64;
        self.shared.index.replace_all(entries, &infos)?;
        Ok(report)
    }

    /// The policy a container's shards say it is stored under: what the
    /// index records, rebuilt from the branches alone.
    fn stored_policy(&self, id: ContainerId) -> Result<redundancy::Policy> {
        match self.layer() {
            Some(layer) => Ok(layer.locate(&id.blob_key())?.policy),
            None => Ok(redundancy::Policy::Single),
        }
    }

    pub(crate) fn container_ids(&self) -> Result<Vec<ContainerId>> {
        let keys = self.shared.branch.list(ContainerId::list_prefix())?;
        let mut ids: Vec<ContainerId> =
            keys.iter().filter_map(ContainerId::from_blob_key).collect();
        ids.sort();
        Ok(ids)
    }

    /// Verifies containers in parallel, in id order.
    fn scan(
        &self,
        ids: &[ContainerId],
        progress: &(dyn Fn(CheckProgress) + Sync),
    ) -> Result<Vec<Scanned>> {
        let done = AtomicU64::new(0);
        let bytes = AtomicU64::new(0);
        let total = ids.len() as u64;
        progress(CheckProgress {
            containers_done: 0,
            containers_total: total,
            bytes_done: 0,
        });
        ids.par_iter()
            .map(|&id| {
                let s = self.scan_one(id)?;
                progress(CheckProgress {
                    containers_done: done.fetch_add(1, Ordering::Relaxed) + 1,
                    containers_total: total,
                    bytes_done: bytes.fetch_add(s.bytes, Ordering::Relaxed) + s.bytes,
                });
                Ok(s)
            })
            .collect()
    }

    fn scan_one(&self, id: ContainerId) -> Result<Scanned> {
        let bytes = Bytes::from(self.shared.branch.get(&id.blob_key())?);
        let mut s = Scanned {
            id,
            good: Vec::new(),
            info: ContainerInfo {
                stored_bytes: bytes.len() as u64,
                ..Default::default()
            },
            problems: Vec::new(),
            ok: false,
            bytes: bytes.len() as u64,
        };
        let entries = match container::parse(id, &bytes) {
            Ok(e) => e,
            Err(e) => {
                s.problems.push(Problem::CorruptContainer {
                    container: id.to_string(),
                    reason: CasError::CorruptContainer {
                        container: id,
                        source: e.clone(),
                    }
                    .to_string(),
                });
                self.salvage(id, &bytes, &e)
            }
        };
        s.ok = true;
        s.info.chunks = entries.len() as u32;
        let mut regions: HashMap<u64, std::result::Result<Bytes, String>> = HashMap::new();
        for (chunk, loc) in entries {
            s.info.raw_bytes += loc.len as u64;
            let region = regions.entry(loc.region_offset).or_insert_with(|| {
                let start = loc.region_offset as usize;
                region::decode(bytes.slice(start..start + loc.region_len as usize))
                    .map_err(|e| e.to_string())
            });
            let verdict = match region {
                Ok(r) => self
                    .verify(&chunk, &loc, r)
                    .map(|_| ())
                    .map_err(|e| match e {
                        CasError::CorruptChunk { reason, .. } => reason,
                        other => other.to_string(),
                    }),
                Err(e) => Err(format!("region at offset {}: {e}", loc.region_offset)),
            };
            match verdict {
                Ok(()) => s.good.push((chunk, loc)),
                Err(reason) => s.problems.push(Problem::CorruptChunk {
                    container: id.to_string(),
                    chunk: chunk.to_string(),
                    reason,
                }),
            }
        }
        Ok(s)
    }
}
