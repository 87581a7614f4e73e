//! Verifying every container and index entry, and rebuilding the index from
//! the containers alone.
//!
//! Both go on past a container that cannot be read at all (its blob gone,
//! or its shards lost beyond what its policy absorbs): it is one problem in
//! the report, never an abort. A rebuild keeps such a container's row in the
//! container table (without chunk entries), so that nothing treats its
//! leftover shards as an orphan to delete: only [`Store::drop_damaged`],
//! asked for by name, gives up on it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::container::{self, ChunkLocation};
use crate::id::{as_text, ChunkId, ContainerId};
use crate::index::ContainerInfo;
use crate::qos::{self, IoClass};
use crate::store::Store;
use crate::{region, CasError, RegionError, Result};

#[derive(Debug, Clone, Copy)]
pub struct CheckProgress {
    pub containers_done: u64,
    pub containers_total: u64,
    pub bytes_done: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// The container cannot be read at all: its blob is gone, or too few
    /// of its shards are left for its policy. None of the chunks the index
    /// places in it can be read.
    UnreadableContainer {
        #[serde(with = "as_text")]
        container: ContainerId,
        reason: String,
        indexed_chunks: u64,
    },
    /// The index does not describe the store: it is empty, lost or older
    /// than the containers on the branches. Reads of what it does not know
    /// fail until it is rebuilt.
    IndexMismatch { reason: String },
    /// The container cannot be parsed: none of its chunks can be trusted.
    CorruptContainer {
        #[serde(with = "as_text")]
        container: ContainerId,
        reason: String,
    },
    /// A chunk whose bytes do not match its id (or do not decode).
    CorruptChunk {
        #[serde(with = "as_text")]
        container: ContainerId,
        #[serde(with = "as_text")]
        chunk: ChunkId,
        reason: String,
    },
    /// An index entry that leads nowhere valid: reading the chunk fails.
    DanglingIndexEntry {
        #[serde(with = "as_text")]
        chunk: ChunkId,
        #[serde(with = "as_text")]
        container: ContainerId,
        reason: String,
    },
    /// Chunks that are stored but not indexed (left by an interrupted write,
    /// or a duplicate copy); harmless, reclaimable.
    UnindexedChunks {
        #[serde(with = "as_text")]
        container: ContainerId,
        count: u64,
    },
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
            Problem::UnreadableContainer {
                container,
                reason,
                indexed_chunks,
            } => write!(
                f,
                "container {container} is unreadable ({indexed_chunks} indexed chunk(s)): {reason}"
            ),
            Problem::IndexMismatch { reason } => {
                write!(
                    f,
                    "the fingerprint index does not match the store: {reason}"
                )
            }
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
    /// Indexed chunks that cannot be read, each with why: what files and
    /// roots that use them lose. Not sent over the control socket (the
    /// daemon names the files itself).
    #[serde(skip)]
    damaged: HashMap<ChunkId, String>,
}

impl CheckReport {
    pub fn is_clean(&self) -> bool {
        !self.problems.iter().any(Problem::is_damage)
    }

    /// Why an indexed chunk cannot be read, if the check found it cannot.
    pub fn damage_of(&self, id: &ChunkId) -> Option<&str> {
        self.damaged.get(id).map(String::as_str)
    }

    /// Whether the index itself must be rebuilt to match the store.
    pub fn index_mismatch(&self) -> bool {
        self.problems
            .iter()
            .any(|p| matches!(p, Problem::IndexMismatch { .. }))
    }

    /// The containers whose damage [`Store::drop_damaged`] would drop.
    pub fn damaged_containers(&self) -> Vec<ContainerId> {
        damaged_containers(&self.problems)
    }
}

impl RebuildReport {
    /// The containers the rebuild found damaged: what
    /// [`Store::drop_damaged`] gives up.
    pub fn damaged_containers(&self) -> Vec<ContainerId> {
        damaged_containers(&self.problems)
    }

    /// The damaged containers the rebuild could read (a corrupt footer or
    /// corrupt chunks): rewriting them keeps every chunk that verified
    /// and loses nothing that could come back, unlike a container that
    /// could not be read at all (its branch may return).
    pub fn rewritable_containers(&self) -> Vec<ContainerId> {
        let unreadable: HashSet<ContainerId> = self
            .problems
            .iter()
            .filter_map(|p| match p {
                Problem::UnreadableContainer { container, .. }
                | Problem::DanglingIndexEntry { container, .. } => Some(*container),
                _ => None,
            })
            .collect();
        damaged_containers(&self.problems)
            .into_iter()
            .filter(|c| !unreadable.contains(c))
            .collect()
    }
}

fn damaged_containers(problems: &[Problem]) -> Vec<ContainerId> {
    let mut out: Vec<ContainerId> = problems
        .iter()
        .filter_map(|p| match p {
            Problem::UnreadableContainer { container, .. }
            | Problem::CorruptContainer { container, .. }
            | Problem::CorruptChunk { container, .. }
            | Problem::DanglingIndexEntry { container, .. } => Some(*container),
            _ => None,
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct RebuildReport {
    pub containers: u64,
    pub chunks_indexed: u64,
    /// What could not be indexed because it is damaged.
    pub problems: Vec<Problem>,
}

/// What [`Store::drop_damaged`] did.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Dropped {
    /// Containers deleted (with whatever shards of them were left).
    #[serde(with = "as_text::list")]
    pub containers: Vec<ContainerId>,
    /// Chunks that still verified, copied into new containers first.
    pub chunks_kept: u64,
    /// Index entries removed with the containers.
    pub entries_dropped: u64,
}

/// Why a container cannot be read, for a report that already names it:
/// the innermost cause, as the layers above it name the container again
/// ("read containers/..: container containers/.. cannot be read"). A blob
/// that is not found is said so plainly: the branch the error names is the
/// store's default view, not where the container was stored.
pub(crate) fn root_cause(e: &CasError) -> String {
    if e.is_not_found() {
        return "it is on no branch".into();
    }
    let mut cause: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// What verifying one container found.
struct Scanned {
    id: ContainerId,
    /// Footer entries whose chunk verified.
    good: Vec<(ChunkId, ChunkLocation)>,
    info: ContainerInfo,
    problems: Vec<Problem>,
    /// Footer entries whose chunk did not verify.
    bad: Vec<(ChunkId, ChunkLocation)>,
    /// The footer parsed.
    ok: bool,
    /// Unreadable because it is on no branch any more.
    gone: bool,
    /// Why the container could not be read at all.
    unreadable: Option<String>,
    bytes: u64,
}

impl Store {
    /// Refuses an index that does not describe the store (see
    /// [`Store::index_mismatch`]); repositories run it at open.
    pub fn verify_index(&self) -> Result<()> {
        match self.index_mismatch(&self.container_ids()?)? {
            Some(reason) => Err(CasError::IndexMismatch { reason }),
            None => Ok(()),
        }
    }

    /// Why the index cannot be the one the containers on the branch were
    /// written under, if it cannot: it never handed out a container id
    /// while containers exist (an empty or recreated file), or a container
    /// is newer than its id mark (an old copy). Containers below the mark
    /// that it does not know are what a crash leaves (written, not yet
    /// indexed; or reclaimed, not yet deleted) and are not a mismatch.
    /// Only this client's containers count: other clients' are indexed as
    /// they are found (`shared`), and their ids are not this index's.
    fn index_mismatch(&self, listed: &[ContainerId]) -> Result<Option<String>> {
        let client = self.client();
        let listed: Vec<ContainerId> = listed.iter().copied().filter(|c| client.owns(*c)).collect();
        let Some(newest) = listed.iter().max() else {
            return Ok(None);
        };
        let index = &self.shared.index;
        let reason = match index.container_mark()? {
            None => format!(
                "it records no container, but the branches hold {}",
                listed.len()
            ),
            Some(mark) if newest.0 >= mark => {
                let newer = listed.iter().filter(|c| c.0 >= mark).count();
                let mut reason = format!(
                    "{newer} container(s) on the branches are newer than anything it recorded"
                );
                if client != crate::ClientNo::default() {
                    reason.push_str(&format!(
                        ". If another repository has client number {client} (a copy of this \
                         one, used since it was copied), this one is stale: do not rebuild it; \
                         remove it, and join again (`cairn init --join`) for a number of its own"
                    ));
                }
                reason
            }
            Some(_) => return Ok(None),
        };
        Ok(Some(reason))
    }

    /// Reads every container, verifies every chunk against its id, and checks
    /// that every index entry leads to a verified chunk. A container that
    /// cannot be read is reported and the check goes on.
    pub fn check(&self, progress: &(dyn Fn(CheckProgress) + Sync)) -> Result<CheckReport> {
        // Other clients' containers are indexed first: the index then
        // describes every container on the branches.
        if self.has_shared_index() {
            self.catch_up()?;
        }
        let index = &self.shared.index;
        let mut per_container: HashMap<ContainerId, u64> = HashMap::new();
        let mut report = CheckReport::default();
        index.for_each_chunk(|_, loc| {
            *per_container.entry(loc.container).or_default() += 1;
            report.index_entries += 1;
        })?;
        let ids = self.container_ids()?;
        if let Some(reason) = self.index_mismatch(&ids)? {
            report.problems.push(Problem::IndexMismatch { reason });
        }
        report.containers = ids.len() as u64;
        let scanned = self.scan(&ids, progress)?;
        let mut suspicious: HashSet<ContainerId> = HashSet::new();
        let mut unreadable: HashMap<ContainerId, String> = HashMap::new();
        let present: HashSet<ContainerId> = ids.iter().copied().collect();
        // Other clients' containers gone since this store indexed them.
        let mut vanished = HashSet::new();
        for s in scanned {
            let expected = per_container.get(&s.id).copied().unwrap_or(0);
            if s.gone && !self.client().owns(s.id) {
                vanished.insert(s.id);
                continue;
            }
            if let Some(reason) = s.unreadable {
                report.problems.push(Problem::UnreadableContainer {
                    container: s.id,
                    reason: reason.clone(),
                    indexed_chunks: expected,
                });
                unreadable.insert(s.id, reason);
                continue;
            }
            report.containers_ok += s.ok as u64;
            report.chunks_verified += s.good.len() as u64;
            report.bytes_verified += s.bytes;
            report.problems.extend(s.problems);
            // Recorded, so that writing the same data again stores a good
            // copy instead of deduplicating against this one.
            let bad: Vec<(ChunkId, ContainerId)> =
                s.bad.iter().map(|(id, _)| (*id, s.id)).collect();
            self.note_damaged_chunks(&bad);
            // A corrupt chunk the index points at is named once, here,
            // not again as an entry leading nowhere.
            let mut bad_indexed = 0u64;
            for (id, loc) in &s.bad {
                if index.lookup(id)?.as_ref() == Some(loc) {
                    bad_indexed += 1;
                    report
                        .damaged
                        .insert(*id, format!("it is corrupt in container {}", s.id));
                }
            }
            let (mut indexed_here, mut copies_here) = (0u64, 0u64);
            for (id, loc) in &s.good {
                if index.lookup(id)?.as_ref() == Some(loc) {
                    indexed_here += 1;
                } else if index.copy_in(id, s.id)?.as_ref() == Some(loc) {
                    copies_here += 1;
                }
            }
            report.index_entries_ok += indexed_here;
            if indexed_here + bad_indexed < expected {
                suspicious.insert(s.id);
            }
            // A copy the index records beside its entry is indexed too.
            let found = indexed_here + copies_here;
            let unindexed = s.info.chunks as u64 - found.min(s.info.chunks as u64);
            // Another client's container may hold chunks this index
            // places elsewhere (each client stores what it could not
            // deduplicate): its own client judges it.
            if s.ok && unindexed > 0 && !suspicious.contains(&s.id) && self.client().owns(s.id) {
                report.problems.push(Problem::UnindexedChunks {
                    container: s.id,
                    count: unindexed,
                });
            }
        }
        for (&c, &count) in &per_container {
            if !present.contains(&c) && !self.client().owns(c) {
                // Another client's, deleted by its collection since this
                // store indexed it: forgotten, found afresh where its live
                // chunks went.
                vanished.insert(c);
            } else if !present.contains(&c) {
                let reason = "it is on no branch".to_string();
                report.problems.push(Problem::UnreadableContainer {
                    container: c,
                    reason: reason.clone(),
                    indexed_chunks: count,
                });
                unreadable.insert(c, reason);
            }
        }
        if !vanished.is_empty() {
            let dropped = index.forget_containers(&vanished)?;
            tracing::info!(
                containers = vanished.len(),
                entries = dropped,
                "forgot other clients' containers that are gone"
            );
        }
        if !unreadable.is_empty() {
            index.for_each_chunk(|id, loc| {
                if unreadable.contains_key(&loc.container) {
                    let why = format!("container {} cannot be read", loc.container);
                    report.damaged.insert(id, why);
                }
            })?;
        }
        if !suspicious.is_empty() {
            self.report_dangling(&suspicious, &mut report)?;
        }
        report.problems.sort_by_key(|p| match p {
            Problem::IndexMismatch { .. } => 0,
            Problem::UnindexedChunks { .. } => 2,
            _ => 1,
        });
        Ok(report)
    }

    /// Names each index entry pointing into a damaged (but readable)
    /// container that does not lead to a verified chunk.
    fn report_dangling(
        &self,
        suspicious: &HashSet<ContainerId>,
        report: &mut CheckReport,
    ) -> Result<()> {
        let mut entries = Vec::new();
        self.shared.index.for_each_chunk(|id, loc| {
            if suspicious.contains(&loc.container) {
                entries.push((id, loc));
            }
        })?;
        for (id, loc) in entries {
            if report.damaged.contains_key(&id) {
                continue;
            }
            let reason = match self
                .read_region(&loc, &id)
                .and_then(|r| self.verify(&id, &loc, &r))
            {
                Ok(_) => continue,
                Err(CasError::CorruptChunk { reason, .. }) => reason,
                Err(e) => e.to_string(),
            };
            report
                .damaged
                .insert(id, format!("its index entry leads nowhere: {reason}"));
            report.problems.push(Problem::DanglingIndexEntry {
                chunk: id,
                container: loc.container,
                reason,
            });
        }
        Ok(())
    }

    /// Rebuilds the fingerprint index from the containers alone: every chunk
    /// that verifies is indexed (for a chunk stored twice, the copy under the
    /// stronger policy wins, then the lowest container id). Roots are kept.
    /// A container that cannot be read keeps its row (its policy and size,
    /// from the old index) without entries, and is reported: its chunks can
    /// be stored again, and its remains are dropped only by
    /// [`Store::drop_damaged`]. One transaction: a crash midway keeps the
    /// old index.
    pub fn rebuild_index(
        &self,
        progress: &(dyn Fn(CheckProgress) + Sync),
    ) -> Result<RebuildReport> {
        let ids = self.container_ids()?;
        let scanned = self.scan(&ids, progress)?;
        let old: HashMap<ContainerId, ContainerInfo> =
            self.shared.index.containers()?.into_iter().collect();
        let mut report = RebuildReport {
            containers: scanned.iter().filter(|s| s.ok).count() as u64,
            ..Default::default()
        };
        let mut infos = Vec::new();
        let mut entries = Vec::new();
        for s in scanned {
            report.problems.extend(s.problems);
            // Another client's, deleted since: nothing to rebuild.
            if s.gone && !self.client().owns(s.id) {
                continue;
            }
            if let Some(reason) = s.unreadable {
                report.problems.push(Problem::UnreadableContainer {
                    container: s.id,
                    reason,
                    indexed_chunks: 0,
                });
                let (info, policy) = match old.get(&s.id) {
                    Some(info) => (*info, self.shared.index.container_policy(s.id)?),
                    None => (
                        ContainerInfo::default(),
                        self.stored_policy(s.id)
                            .unwrap_or(redundancy::Policy::Single),
                    ),
                };
                infos.push((s.id, info, policy));
                continue;
            }
            if s.ok {
                infos.push((s.id, s.info, self.stored_policy(s.id)?));
            }
            entries.extend(s.good);
        }
        // Indexed but on no branch: perhaps on one that is unreachable now.
        let listed: HashSet<ContainerId> = ids.iter().copied().collect();
        for (c, info) in &old {
            if !listed.contains(c) {
                report.problems.push(Problem::UnreadableContainer {
                    container: *c,
                    reason: "it is on no branch".into(),
                    indexed_chunks: 0,
                });
                infos.push((*c, *info, self.shared.index.container_policy(*c)?));
            }
        }
        report.chunks_indexed = entries
            .iter()
            .map(|(id, _)| *id)
            .collect::<HashSet<_>>()
            .len() as u64;
        self.shared.index.replace_all(entries, &infos)?;
        // A recreated index has no id mark: it takes one past the newest
        // container, so ids are never reused and the next open trusts it.
        let client = self.client();
        let next = ids
            .iter()
            .filter(|c| client.owns(**c))
            .map(|c| c.0 + 1)
            .max()
            .unwrap_or(client.first_container());
        self.shared.index.reserve_container_ids(0, || Ok(next))?;
        Ok(report)
    }

    /// Gives up on damaged containers for good: copies every chunk the
    /// index places in one of them that still verifies into a new
    /// container, then removes their index entries and deletes them (with
    /// whatever shards of them are left on any branch). Chunks that did not
    /// verify are gone from the store afterwards: files using them read
    /// EIO until they are written again or deleted.
    pub fn drop_damaged(&self, containers: &[ContainerId]) -> Result<Dropped> {
        let mut dropped = Dropped::default();
        if containers.is_empty() {
            return Ok(dropped);
        }
        let collection = self.begin_collection()?;
        for &c in containers {
            dropped.chunks_kept += collection.evacuate(c)?;
            dropped.containers.push(c);
        }
        dropped.entries_dropped = collection.commit()?.dropped_chunks;
        Ok(dropped)
    }

    /// The chunks the index places in any of `containers`.
    pub fn chunks_in(&self, containers: &HashSet<ContainerId>) -> Result<Vec<ChunkId>> {
        let mut out = Vec::new();
        self.shared.index.for_each_chunk(|id, loc| {
            if containers.contains(&loc.container) {
                out.push(id);
            }
        })?;
        Ok(out)
    }
    /// The policy a container's shards say it is stored under: what the
    /// index records, rebuilt from the branches alone.
    pub(crate) fn stored_policy(&self, id: ContainerId) -> Result<redundancy::Policy> {
        Ok(self.layer().locate(&id.blob_key())?.policy)
    }

    pub(crate) fn container_ids(&self) -> Result<Vec<ContainerId>> {
        self.shared.stored_containers()
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
                // Reading every container is maintenance, whoever asked.
                let s = qos::with_class(IoClass::Background, || self.scan_one(id))?;
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
        let mut s = Scanned {
            id,
            good: Vec::new(),
            info: ContainerInfo::default(),
            problems: Vec::new(),
            bad: Vec::new(),
            ok: false,
            unreadable: None,
            gone: false,
            bytes: 0,
        };
        let bytes = match self.shared.read_container(id) {
            Ok(b) => Bytes::from(b),
            Err(e) => {
                s.gone = e.is_gone();
                s.unreadable = Some(root_cause(&e));
                return Ok(s);
            }
        };
        s.info.stored_bytes = bytes.len() as u64;
        s.bytes = bytes.len() as u64;
        let entries = match container::parse(id, &bytes) {
            Ok(e) => e,
            Err(e) => {
                s.problems.push(Problem::CorruptContainer {
                    container: id,
                    reason: e.to_string(),
                });
                self.salvage(id, &bytes, &e)
            }
        };
        s.ok = true;
        s.info.chunks = entries.len() as u32;
        let mut regions: HashMap<u64, std::result::Result<Bytes, RegionError>> = HashMap::new();
        for (chunk, loc) in entries {
            s.info.raw_bytes += loc.len as u64;
            let region = regions.entry(loc.region_offset).or_insert_with(|| {
                let start = loc.region_offset as usize;
                region::decode(bytes.slice(start..start + loc.region_len as usize))
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
                Err(reason) => {
                    s.bad.push((chunk, loc));
                    s.problems.push(Problem::CorruptChunk {
                        container: id,
                        chunk,
                        reason,
                    })
                }
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Typed ids travel as the text they always did: what `cairn check`
    /// prints and the control socket carries does not change.
    #[test]
    fn problems_keep_their_text_and_json() {
        let chunk = ChunkId::from_bytes([0xab; 32]);
        let p = Problem::CorruptChunk {
            container: ContainerId(0x2a),
            chunk,
            reason: "bad".into(),
        };
        assert_eq!(
            p.to_string(),
            format!(
                "chunk {} in container 000000000000002a is corrupt: bad",
                "ab".repeat(32)
            )
        );
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"kind":"corrupt_chunk","container":"000000000000002a","chunk":"{}","reason":"bad"}}"#,
                "ab".repeat(32)
            )
        );
        assert_eq!(serde_json::from_str::<Problem>(&json).unwrap(), p);
        let dropped = Dropped {
            containers: vec![ContainerId(1), ContainerId(0xff)],
            chunks_kept: 2,
            entries_dropped: 3,
        };
        let json = serde_json::to_string(&dropped).unwrap();
        assert!(
            json.contains(r#"["0000000000000001","00000000000000ff"]"#),
            "{json}"
        );
        let back: Dropped = serde_json::from_str(&json).unwrap();
        assert_eq!(back.containers, dropped.containers);
    }
}
