//! Healing: scrub (check every shard block by block, rewrite damaged ones
//! whole from the good blocks of all of them) and rebuilding a replaced
//! branch's shards onto its successor. Both go on past a container lost
//! beyond its policy and report it apart from what failed to be written.
//!
//! Branches never replace a blob, so a bad shard is deleted before its
//! rebuilt bytes are written under the same name. A shard that cannot be
//! written back where it was goes to another branch that holds no shard of
//! its container, keeping the shards on distinct branches.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use branch::{BlobKey, BranchError};

use crate::error::{Error, Result, Runs, ShardFault};
use crate::map::{shard_key, Entry};
use crate::members::{BranchId, FaultKind};
use crate::parallel::fan_out;
use crate::policy::{Coding, Policy};
use crate::read::{located, unlocated};
use crate::rows::{self, LostRow, Span};
use crate::shard::{self, key_tag, Layout};
use crate::Redundant;

/// Where a long operation is: `done` of `total` containers, the last
/// being `key`.
#[derive(Debug, Clone, Copy)]
pub struct Progress<'a> {
    pub done: usize,
    pub total: usize,
    pub key: &'a BlobKey,
}

/// A shard written anew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub index: u16,
    pub branch: BranchId,
    /// What was wrong with it.
    pub was: FaultKind,
}

/// What scrubbing one container found and did.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrubReport {
    pub key: BlobKey,
    pub policy: Policy,
    /// Shard blobs read and verified.
    pub checked: usize,
    /// Every fault found, repaired or not.
    pub faults: Vec<ShardFault>,
    pub repaired: Vec<Repair>,
    /// Faults left, each with why it could not be repaired.
    pub unrepaired: Vec<ShardFault>,
    /// Container byte ranges no read can give back: data blocks whose row
    /// has fewer good blocks than the policy needs. Empty when the whole
    /// container reads back, faults left or not.
    pub lost: Vec<Range<u64>>,
}

impl ScrubReport {
    /// Whether some of the container's bytes cannot be read back.
    pub fn is_lost(&self) -> bool {
        !self.lost.is_empty()
    }
}

/// What [`Redundant::scrub_all`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScrubSummary {
    pub containers: usize,
    pub healthy: usize,
    /// Containers that had faults, all repaired.
    pub repaired: Vec<ScrubReport>,
    /// Containers that read back whole but have faults left: a bad shard
    /// could not be written anywhere (its branch refuses writes and no
    /// other branch may take it), so redundancy is below the policy.
    pub degraded: Vec<ScrubReport>,
    /// Containers some bytes of which cannot be read back.
    pub lost: Vec<ScrubReport>,
}

/// What [`Redundant::rebuild_onto`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RebuildReport {
    /// Containers that had a shard on the old branch, or a shard no
    /// branch holds.
    pub containers: usize,
    /// Shards written to the new branch.
    pub rebuilt: usize,
    /// Shards the new branch already held intact (from an earlier run).
    pub already_present: usize,
    /// Containers that already had another shard on the new branch: theirs
    /// went to a spare branch instead (one holding no shard of the
    /// container), so no branch holds two shards of one container.
    pub conflicts: Vec<BlobKey>,
    /// Shards that could not be written, with why: running again may help.
    pub failed: Vec<(BlobKey, String)>,
    /// Containers damaged beyond their policy, with why: their shards
    /// cannot be rebuilt from what is left, and running again will not
    /// change that.
    pub lost: Vec<(BlobKey, String)>,
}

impl RebuildReport {
    fn merge(&mut self, other: RebuildReport) {
        self.containers += other.containers;
        self.rebuilt += other.rebuilt;
        self.already_present += other.already_present;
        self.conflicts.extend(other.conflicts);
        self.failed.extend(other.failed);
        self.lost.extend(other.lost);
    }
}

/// A container's shards as [`Redundant::examine`] found them.
struct Examined {
    entry: Arc<Entry>,
    /// Shard blobs read.
    checked: usize,
    /// Every fault, with the branch it was read from.
    bad: Vec<(Option<BranchId>, ShardFault)>,
    /// A whole payload per damaged shard; bad blocks left where its row
    /// has too few good ones.
    rebuilt: Vec<Span>,
    /// Container bytes no read can give back.
    lost: Vec<Range<u64>>,
}

/// Why a shard could not be rebuilt onto its new branch.
enum Failure {
    /// The container has too few good blocks left in some row.
    Lost(String),
    /// Writing failed, or no branch may take it.
    Write(String),
}

/// The container bytes that `lost` rows leave unreadable: the bad data
/// blocks of each row (every block of a copied container's row).
fn lost_bytes(layout: &Layout, lost: &[LostRow]) -> Vec<Range<u64>> {
    let copies = layout.policy.coding() == Coding::Copies;
    let mut out: Vec<Range<u64>> = Vec::new();
    for l in lost {
        let row = layout.payload_span(&(l.row..l.row + 1));
        let data = l.shards.iter().filter(|&&i| copies || i < layout.k());
        for &i in data {
            let base = if copies {
                0
            } else {
                u64::from(i) * layout.shard_len
            };
            let end = (base + row.end).min(layout.container_len);
            if base + row.start < end {
                out.push(base + row.start..end);
            }
            if copies {
                break;
            }
        }
    }
    out.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::new();
    for r in out {
        match merged.last_mut() {
            Some(m) if m.end >= r.start => m.end = m.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

/// Containers rebuilt at once by [`Redundant::rebuild_onto`].
const REBUILD_IN_FLIGHT: usize = 8;

/// Why a shard could not be written back: each branch tried, by name, with
/// its error; none when no branch was free to take it.
#[derive(Debug)]
struct RewriteFailed(Vec<(String, BranchError)>);

impl std::fmt::Display for RewriteFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no branch is free of this container's other shards");
        }
        for (i, (branch, e)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{branch}: {e}")?;
        }
        Ok(())
    }
}

/// What one scrub pass learnt of the branches' health.
#[derive(Default)]
struct Vouched {
    /// Branches holding a shard the pass scrubbed.
    held: HashSet<BranchId>,
    /// Branches, by name, a fault was left on or could not be rewritten to.
    faulty: HashSet<String>,
}

impl Vouched {
    fn note(&mut self, layer: &Redundant, entry: &Entry, report: &ScrubReport) {
        self.held.extend(entry.locations.iter().flatten());
        for fault in &report.faults {
            let Some(name) = &fault.branch else {
                continue;
            };
            let in_place = report.repaired.iter().any(|r| {
                r.index == fault.index && layer.branch_name(r.branch).as_ref() == Some(name)
            });
            if !in_place {
                self.faulty.insert(name.clone());
            }
        }
    }

    fn vouches_for(&self, layer: &Redundant, id: BranchId) -> bool {
        self.held.contains(&id)
            && layer
                .branch_name(id)
                .is_some_and(|name| !self.faulty.contains(&name))
    }
}

impl Redundant {
    /// Reads and verifies every shard of `key`, block by block, and
    /// rewrites each missing or damaged one whole: its good blocks kept,
    /// the others decoded from the rows of the other shards.
    pub fn scrub(&self, key: &BlobKey) -> Result<ScrubReport> {
        let Examined {
            entry,
            checked,
            bad,
            rebuilt,
            lost,
        } = self.examine(key)?;
        let layout = &entry.layout;
        let mut report = ScrubReport {
            key: key.clone(),
            policy: layout.policy.clone(),
            checked,
            faults: bad.iter().map(|(_, f)| f.clone()).collect(),
            repaired: Vec::new(),
            unrepaired: Vec::new(),
            lost,
        };
        for (from, fault) in bad {
            let span = rebuilt
                .iter()
                .find(|s| s.index == fault.index)
                .expect("a span per damaged shard");
            if !span.is_clean() {
                let rows = Runs("row", span.bad());
                report.unrepaired.push(ShardFault {
                    detail: format!(
                        "{}; cannot rebuild: fewer than {} intact blocks in {rows} of {key}",
                        fault.detail,
                        layout.k()
                    ),
                    ..fault
                });
                continue;
            }
            let payload = span.payload();
            let blob = shard::encode(layout, fault.index, payload);
            match self.rewrite(key, &entry, fault.index, from, &blob) {
                Ok(to) => report.repaired.push(Repair {
                    index: fault.index,
                    branch: to,
                    was: fault.kind,
                }),
                Err(why) => report.unrepaired.push(ShardFault {
                    detail: format!("{}; rewrite failed: {why}", fault.detail),
                    ..fault
                }),
            }
        }
        Ok(report)
    }

    /// The byte ranges of container `key` that no read can give back
    /// (empty when it all reads back), judged as [`Redundant::scrub`]
    /// judges them but writing nothing.
    pub fn unreadable(&self, key: &BlobKey) -> Result<Vec<Range<u64>>> {
        Ok(self.examine(key)?.lost)
    }

    /// Reads every shard of `key` whole and restores the damaged ones as
    /// far as their rows allow.
    fn examine(&self, key: &BlobKey) -> Result<Examined> {
        let entry = self.entry(key)?;
        let layout = &entry.layout;
        let all = 0..layout.blocks();
        let jobs: Vec<(u16, BranchId)> = located(&entry, &[]);
        let results = fan_out(&jobs, |&(index, id)| {
            self.read_span(key, layout, index, id, &all)
        });
        let mut read: Vec<Span> = Vec::new();
        let mut bad: Vec<(Option<BranchId>, ShardFault)> = Vec::new();
        for (&(_, id), (span, fault)) in jobs.iter().zip(results) {
            read.push(span);
            bad.extend(fault.map(|f| (Some(id), f)));
        }
        for (index, ids) in (0..).zip(&entry.locations) {
            if ids.is_empty() {
                bad.push((None, unlocated(index)));
            }
        }
        // One whole payload per damaged shard, from its good blocks
        // wherever they are and the rows of the others.
        let mut damaged: Vec<u16> = bad.iter().map(|(_, f)| f.index).collect();
        damaged.sort_unstable();
        damaged.dedup();
        let mut rebuilt: Vec<Span> = damaged
            .iter()
            .map(|&i| Span::failed(i, all.clone()))
            .collect();
        let lost = rows::restore(layout, &mut rebuilt, &read).map_err(|source| Error::Coding {
            key: key.clone(),
            source,
        })?;
        Ok(Examined {
            lost: lost_bytes(layout, &lost),
            checked: jobs.len(),
            entry,
            bad,
            rebuilt,
        })
    }

    /// Scrubs every container, calling `progress` after each. A layer in
    /// the plain layout has no shards to check: it reports none.
    ///
    /// Then forgets the faults of each branch the pass vouched for: one
    /// holding a shard it scrubbed, with no fault left on it (a shard
    /// that had to be written elsewhere counts as left). Without this, a
    /// branch stays degraded in `cairn status` until the next mount, long
    /// after scrub healed it. A fault a concurrent read met on such a
    /// branch during the pass is forgotten with the rest.
    pub fn scrub_all(&self, mut progress: impl FnMut(Progress<'_>)) -> ScrubSummary {
        let all = self.map.snapshot();
        let mut summary = ScrubSummary::default();
        let mut health = Vouched::default();
        for (done, (key, entry)) in all.iter().enumerate() {
            let report = match self.scrub(key) {
                Ok(report) => {
                    health.note(self, entry, &report);
                    Some(report)
                }
                // Deleted since the snapshot: nothing to scrub.
                Err(Error::NotFound(_)) => None,
                // The coder refused its shards: nothing can be read.
                Err(e) => Some(ScrubReport {
                    key: key.clone(),
                    policy: entry.layout.policy.clone(),
                    checked: 0,
                    faults: Vec::new(),
                    repaired: Vec::new(),
                    unrepaired: vec![ShardFault {
                        index: 0,
                        branch: None,
                        kind: FaultKind::Corrupt,
                        detail: e.to_string(),
                    }],
                    lost: std::iter::once(0..entry.layout.container_len.max(1)).collect(),
                }),
            };
            if let Some(report) = report {
                summary.containers += 1;
                if report.is_lost() {
                    summary.lost.push(report);
                } else if report.faults.is_empty() {
                    summary.healthy += 1;
                } else if report.unrepaired.is_empty() {
                    summary.repaired.push(report);
                } else {
                    summary.degraded.push(report);
                }
            }
            progress(Progress {
                done: done + 1,
                total: all.len(),
                key,
            });
        }
        for id in self.all_ids() {
            if health.vouches_for(self, id) {
                self.reset_health(id);
            }
        }
        summary
    }

    /// Replaces branch `old` by `new`: every shard on `old` (and every
    /// shard no branch holds, as a branch lost before discovery leaves
    /// them) is rebuilt onto `new` and the map moved over; `old`'s blobs
    /// are left alone. Shards `new` already holds intact are skipped, so
    /// an interrupted run can simply be run again.
    pub fn rebuild_onto(
        &self,
        old: BranchId,
        new: BranchId,
        progress: impl FnMut(Progress<'_>),
    ) -> Result<RebuildReport> {
        self.branch_name(new).ok_or(Error::UnknownBranch(new))?;
        if old == new {
            return Err(Error::DuplicateBranch(self.member(old).name.clone()));
        }
        self.move_off(old, Some(new), progress)
    }

    /// Moves every shard off `old` (and rebuilds every shard no branch
    /// holds), each onto a branch holding no other shard of its container,
    /// spread by key and healthy branches first. Retire `old` first, or new
    /// containers may still land on it. A shard already copied elsewhere by
    /// an interrupted run is verified there and only unmapped from `old`.
    pub fn spread_off(
        &self,
        old: BranchId,
        progress: impl FnMut(Progress<'_>),
    ) -> Result<RebuildReport> {
        self.move_off(old, None, progress)
    }

    fn move_off(
        &self,
        old: BranchId,
        new: Option<BranchId>,
        mut progress: impl FnMut(Progress<'_>),
    ) -> Result<RebuildReport> {
        if self.plain.is_some() {
            return Err(Error::Plain("move containers to another branch"));
        }
        self.branch_name(old).ok_or(Error::UnknownBranch(old))?;
        let all = self.map.snapshot();
        let mut report = RebuildReport::default();
        let mut done = 0;
        // Several containers at once: each one waits on reads from K
        // branches and one synced write, which do not use a core.
        for window in all.chunks(REBUILD_IN_FLIGHT) {
            let parts = fan_out(window, |(key, entry)| {
                self.rebuild_container(key, entry, old, new)
            });
            for ((key, _), part) in window.iter().zip(parts) {
                report.merge(part);
                done += 1;
                progress(Progress {
                    done,
                    total: all.len(),
                    key,
                });
            }
        }
        Ok(report)
    }

    /// Rebuilds the shards of one container that sit on `old` or on no
    /// branch: onto `new`, or (`None`) onto spare branches.
    fn rebuild_container(
        &self,
        key: &BlobKey,
        entry: &Entry,
        old: BranchId,
        new: Option<BranchId>,
    ) -> RebuildReport {
        let mut report = RebuildReport::default();
        let targets: Vec<u16> = (0..)
            .zip(&entry.locations)
            .filter(|(_, ids)| ids.is_empty() || ids.contains(&old))
            .map(|(i, _)| i)
            .collect();
        if !targets.is_empty() {
            report.containers += 1;
        }
        for index in targets {
            match self.rebuild_shard(key, entry, index, old, new, &mut report) {
                Ok(()) => {}
                Err(Failure::Lost(why)) => {
                    // Every shard of it would fail alike.
                    report.lost.push((key.clone(), why));
                    break;
                }
                Err(Failure::Write(why)) => report
                    .failed
                    .push((key.clone(), format!("shard {index}: {why}"))),
            }
        }
        report
    }

    fn rebuild_shard(
        &self,
        key: &BlobKey,
        entry: &Entry,
        index: u16,
        old: BranchId,
        new: Option<BranchId>,
        report: &mut RebuildReport,
    ) -> Result<(), Failure> {
        let layout = &entry.layout;
        let all = 0..layout.blocks();
        let here = &entry.locations[usize::from(index)];
        let copied = here
            .iter()
            .copied()
            .filter(|id| *id != old && new.is_none_or(|n| n == *id))
            .find(|id| self.read_span(key, layout, index, *id, &all).1.is_none());
        if copied.is_some() {
            report.already_present += 1;
            self.map
                .update(key, |locs| locs[usize::from(index)].retain(|id| *id != old));
            return Ok(());
        }
        // A branch added while the old one still took shards may hold
        // another shard of this container already.
        let conflict = new.is_some_and(|n| entry.holds(n) && !here.contains(&n));
        if conflict {
            report.conflicts.push(key.clone());
        }
        // What is left of it on the old branch counts block by block.
        let mut sources = Vec::new();
        let mut faults = Vec::new();
        if here.contains(&old) {
            let (span, fault) = self.read_span(key, layout, index, old, &all);
            sources.push(span);
            faults.extend(fault);
        }
        let mut target = [Span::failed(index, all.clone())];
        self.fill_rows(key, entry, &mut target, &[index], sources, faults)
            .map_err(|e| match e {
                Error::Unrecoverable { .. } => Failure::Lost(e.to_string()),
                other => Failure::Write(other.to_string()),
            })?;
        let [payload] = target;
        let blob = shard::encode(layout, index, &payload.into_payload());
        let targets = match new {
            Some(new) if !conflict => vec![new],
            _ => {
                let current = self.map.get(key).unwrap_or_else(|| Arc::new(entry.clone()));
                self.spare_branches(key, &current, index)
            }
        };
        let mut errors = Vec::new();
        for to in targets {
            match self.put_fresh(to, &shard_key(key, index), &blob) {
                Ok(()) => {
                    report.rebuilt += 1;
                    self.map.update(key, |locs| {
                        let place = &mut locs[usize::from(index)];
                        place.retain(|id| *id != old && *id != to);
                        place.push(to);
                    });
                    return Ok(());
                }
                Err(e) => errors.push(format!("{}: {e}", self.member(to).name)),
            }
        }
        if errors.is_empty() {
            errors.push(
                "no other branch can take it without holding two shards of one container".into(),
            );
        }
        Err(Failure::Write(errors.join("; ")))
    }

    /// Writes shard `index` back: where it was (`from`, after deleting the
    /// bad blob), else on a branch holding no shard of this container.
    /// Returns where it went.
    fn rewrite(
        &self,
        key: &BlobKey,
        entry: &Entry,
        index: u16,
        from: Option<BranchId>,
        blob: &[u8],
    ) -> Result<BranchId, RewriteFailed> {
        let name = shard_key(key, index);
        let current = self.map.get(key).unwrap_or_else(|| Arc::new(entry.clone()));
        let mut targets: Vec<BranchId> = from
            .filter(|id| !self.is_retired(*id))
            .into_iter()
            .collect();
        targets.extend(self.spare_branches(key, &current, index));
        let mut errors = Vec::new();
        for to in targets {
            match self.put_fresh(to, &name, blob) {
                Ok(()) => {
                    self.map.update(key, |locs| {
                        let place = &mut locs[usize::from(index)];
                        place.retain(|id| Some(*id) != from && *id != to);
                        place.push(to);
                    });
                    return Ok(to);
                }
                Err(e) => errors.push((self.member(to).name.clone(), e)),
            }
        }
        Err(RewriteFailed(errors))
    }

    /// Branches holding no shard of the container, the fixed parity branch
    /// first for a parity shard, then healthy before degraded, spread by key.
    fn spare_branches(&self, key: &BlobKey, entry: &Entry, index: u16) -> Vec<BranchId> {
        let ids = self.branch_ids();
        let spin = u64::from_le_bytes(key_tag(key.as_str())) as usize;
        let mut spare: Vec<BranchId> = (0..ids.len())
            .map(|i| ids[(spin + i) % ids.len()])
            .filter(|id| !entry.holds(*id))
            .collect();
        let fixed = entry
            .layout
            .policy
            .fixed_parity_branch()
            .filter(|_| index == entry.layout.k());
        spare.sort_by_key(|id| {
            let preferred = fixed.is_some() && self.branch_name(*id).as_deref() == fixed;
            (!preferred, self.member(*id).degraded())
        });
        spare
    }

    /// Puts a blob where a bad or stale one of the same name may be:
    /// delete first, as branches never replace.
    fn put_fresh(&self, id: BranchId, name: &BlobKey, blob: &[u8]) -> Result<(), BranchError> {
        let branch = &self.member(id).branch.clone();
        branch.delete(name)?;
        branch.put(name, blob)
    }
}
