//! The redundancy layer seen by an operator: where a file's shards are
//! (`policy show`), each branch's health and usage (`status`), `scrub`
//! reconciled with the index, and moving shards off a branch (`branch
//! replace`, `branch remove`), each naming the files a loss touches.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Range;

use cas::{ContainerId, Store};
use fs::Fs;
use meta::{Content, FileKind, InodeId};
use redundancy::{Redundant, ScrubReport};
use serde::{Deserialize, Serialize};

use crate::{Progress, Result, ServiceError};

/// Where one container's shards are.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContainerPlace {
    pub container: String,
    pub policy: String,
    /// Per shard index, the branches holding it (empty: lost).
    pub shards: Vec<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyShow {
    pub path: String,
    /// "xattr user.cairn.policy", "rule \"NAME\"" or "the default rule".
    pub source: String,
    pub policy: String,
    pub branches: Vec<String>,
    /// The file's bytes live in its inode (no container).
    pub inline: bool,
    pub containers: Vec<ContainerPlace>,
}

fn names(layer: &Redundant, ids: &[redundancy::BranchId]) -> Vec<String> {
    ids.iter()
        .map(|id| match layer.branch_name(*id) {
            Some(n) => n.to_string(),
            None => "local".to_string(),
        })
        .collect()
}

/// Every chunk of a file: its recipe's nodes and data chunks.
fn file_chunks(store: &Store, root: cas::ChunkId) -> Result<Vec<cas::ChunkId>> {
    let recipe = recipe::Recipe::open(store, root)?;
    let mut ids: Vec<cas::ChunkId> = recipe
        .extents(0, recipe.len())?
        .into_iter()
        .filter_map(|e| e.chunk)
        .collect();
    ids.push(root);
    Ok(ids)
}

fn containers_of(store: &Store, root: cas::ChunkId) -> Result<BTreeSet<ContainerId>> {
    let mut out = BTreeSet::new();
    for id in file_chunks(store, root)? {
        out.insert(store.locate(&id)?.container);
    }
    Ok(out)
}

pub(crate) fn policy_show(fs: &Fs, path: &str) -> Result<PolicyShow> {
    let mut inode = fs.resolve(path)?;
    if inode.attr.kind == FileKind::File {
        // Shards have places only once their container is sealed and
        // stored; a small file's chunks may wait in a shared open container
        // until the next commit, so commit now.
        fs.fsync(inode.id)?;
        inode = fs.resolve(path)?;
    }
    let choice = fs.policy_of(inode.id, Some(path))?;
    let store = fs.store();
    let layer = store.layer();
    let mut containers = Vec::new();
    if let Content::Recipe(root) = inode.content {
        for c in containers_of(store, root)? {
            let placed = layer.locate(&c.blob_key())?;
            let shards = placed
                .shards
                .iter()
                .map(|s| names(layer, &s.branches))
                .collect();
            let policy = placed.policy.to_string();
            containers.push(ContainerPlace {
                container: c.to_string(),
                policy,
                shards,
            });
        }
    }
    Ok(PolicyShow {
        path: path.to_string(),
        source: choice.source.to_string(),
        policy: choice.protection.policy.to_string(),
        branches: names(layer, &choice.protection.branches),
        inline: matches!(inode.content, Content::Inline(_)) && inode.attr.kind == FileKind::File,
        containers,
    })
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BranchLine {
    pub name: String,
    pub degraded: bool,
    pub last_error: Option<String>,
    /// Shards the branch holds and their payload bytes (headers and block
    /// digests not counted).
    pub shards: u64,
    pub bytes: u64,
    /// The read latency estimate balancing uses, in milliseconds.
    pub delay_ms: Option<f64>,
    pub reads: u64,
    pub faults: u64,
    /// Taking no new shards: being moved off by `branch remove` or
    /// `replace` (a retired branch holding nothing is not listed).
    #[serde(default)]
    pub retired: bool,
    /// The one plain branch of a repository without `[[branch]]` entries:
    /// containers are stored once, with no redundancy to heal from.
    #[serde(default)]
    pub plain: bool,
}

/// How much of the store one redundancy policy holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyShare {
    /// The policy as `cairn.toml` writes it (`mirror:2`, `rs:4+2`), or
    /// `single` for the one plain branch of a repository without
    /// redundancy.
    pub policy: String,
    pub containers: u64,
    /// Bytes of those containers (before their redundancy).
    pub bytes: u64,
}

/// The store's containers by redundancy policy, most bytes first (one
/// listing of the containers' placements, as `status` makes).
pub fn policy_mix(store: &Store) -> Result<Vec<PolicyShare>> {
    let layer = store.layer();
    if layer.is_plain() {
        let s = store.stats()?;
        return Ok(vec![PolicyShare {
            policy: "single".into(),
            containers: s.containers,
            bytes: s.stored_bytes,
        }]);
    }
    let mut mix: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for key in layer.list(ContainerId::list_prefix())? {
        let Ok(placed) = layer.locate(&key) else {
            continue;
        };
        let share = mix.entry(placed.policy.to_string()).or_default();
        share.0 += 1;
        share.1 += placed.container_len;
    }
    let mut out: Vec<PolicyShare> = mix
        .into_iter()
        .map(|(policy, (containers, bytes))| PolicyShare {
            policy,
            containers,
            bytes,
        })
        .collect();
    out.sort_by_key(|s| std::cmp::Reverse(s.bytes));
    Ok(out)
}

pub(crate) fn status(store: &Store) -> Result<Vec<BranchLine>> {
    let layer = store.layer();
    if layer.is_plain() {
        // The default layout: one plain branch, every container once.
        let s = store.stats()?;
        return Ok(vec![BranchLine {
            name: "local".into(),
            degraded: false,
            last_error: None,
            shards: s.containers,
            bytes: s.stored_bytes,
            delay_ms: None,
            reads: 0,
            faults: 0,
            retired: false,
            plain: true,
        }]);
    }
    let mut usage: BTreeMap<redundancy::BranchId, (u64, u64)> = BTreeMap::new();
    for key in layer.list("")? {
        let Ok(placed) = layer.locate(&key) else {
            continue;
        };
        let k = u64::from(placed.policy.data_shards());
        let per_shard = if placed.policy.data_shards() == 1 {
            placed.container_len
        } else {
            placed.container_len.div_ceil(k)
        };
        for shard in &placed.shards {
            for id in &shard.branches {
                let u = usage.entry(*id).or_default();
                u.0 += 1;
                u.1 += per_shard;
            }
        }
    }
    Ok(layer
        .status()
        .into_iter()
        .filter(|s| !s.retired || usage.contains_key(&s.id))
        .map(|s| {
            let (shards, bytes) = usage.get(&s.id).copied().unwrap_or_default();
            BranchLine {
                plain: false,
                retired: s.retired,
                name: s.name,
                degraded: s.degraded,
                last_error: s.last_error,
                shards,
                bytes,
                delay_ms: s.read_latency.map(|d| d.as_secs_f64() * 1000.0),
                reads: s.reads,
                faults: s.missing + s.unavailable + s.corrupt,
            }
        })
        .collect())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScrubOut {
    pub containers: usize,
    pub healthy: usize,
    pub repaired: Vec<String>,
    /// Containers that read back whole but still have bad shards, each
    /// with why they could not be rewritten (a branch refusing writes and
    /// no other free to take them): redundancy is below their policy.
    #[serde(default)]
    pub degraded: Vec<String>,
    /// Containers with bytes no read can give back, each with what is
    /// lost and why.
    pub lost: Vec<String>,
    /// Files with data in lost bytes, by path.
    pub affected_files: Vec<String>,
    /// The repository has one plain branch: nothing was scrubbed, as there
    /// is no other copy to heal from (`cairn check` verifies every chunk).
    #[serde(default)]
    pub plain: bool,
}

/// A container and its faults: those left when some are, else those
/// repaired.
fn describe(r: &ScrubReport) -> String {
    let faults = if r.unrepaired.is_empty() {
        &r.faults
    } else {
        &r.unrepaired
    };
    let mut text: Vec<String> = faults.iter().map(|f| f.to_string()).collect();
    if text.is_empty() {
        text.push("no fault recorded".into());
    }
    let lost = if r.lost.is_empty() {
        String::new()
    } else {
        let total: u64 = r.lost.iter().map(|l| l.end - l.start).sum();
        format!("{} unreadable; ", crate::human_bytes(total))
    };
    format!("{} ({}): {lost}{}", r.key, r.policy, text.join("; "))
}

/// Which bytes of which containers are lost: `None` for all of it.
type LostBytes = HashMap<ContainerId, Option<Vec<Range<u64>>>>;

pub(crate) fn scrub(fs: &Fs, progress: &dyn Progress) -> Result<ScrubOut> {
    let layer = fs.store().layer();
    if layer.is_plain() {
        return Ok(ScrubOut {
            containers: fs.store().stats()?.containers as usize,
            healthy: 0,
            repaired: Vec::new(),
            degraded: Vec::new(),
            lost: Vec::new(),
            affected_files: Vec::new(),
            plain: true,
        });
    }
    let summary = layer.scrub_all(|p| progress.step("scrub", p.done as u64, p.total as u64));
    let mut lost_bytes: LostBytes = summary
        .lost
        .iter()
        .filter_map(|r| Some((ContainerId::from_blob_key(&r.key)?, Some(r.lost.clone()))))
        .collect();
    let mut lost: Vec<String> = summary.lost.iter().map(describe).collect();
    // A container none of whose shards any branch holds is not in the
    // layer's map at all; the index still knows it.
    lost.extend(unplaced(fs, layer, &mut lost_bytes)?);
    let affected_files = if lost_bytes.is_empty() {
        Vec::new()
    } else {
        files_touching(fs, &lost_bytes)?
    };
    for r in &lost {
        tracing::error!("scrub: lost {r}");
    }
    for r in summary.degraded.iter().map(describe) {
        tracing::warn!("scrub: could not restore {r}");
    }
    Ok(ScrubOut {
        containers: summary.containers + lost.len() - summary.lost.len(),
        healthy: summary.healthy,
        repaired: summary.repaired.iter().map(describe).collect(),
        degraded: summary.degraded.iter().map(describe).collect(),
        lost,
        affected_files,
        plain: false,
    })
}

/// The indexed containers no branch holds a shard of, described, each
/// added to `lost` whole.
fn unplaced(fs: &Fs, layer: &Redundant, lost: &mut LostBytes) -> Result<Vec<String>> {
    let placed: HashSet<ContainerId> = layer
        .list(ContainerId::list_prefix())?
        .iter()
        .filter_map(ContainerId::from_blob_key)
        .collect();
    let in_use = fs.store().containers_in_use()?;
    let mut out = Vec::new();
    for c in fs.store().indexed_containers()? {
        // A row no entry points into holds nothing to lose (gc drops it).
        if !placed.contains(&c) && in_use.contains(&c) {
            let policy = fs.store().container_policy(c)?;
            out.push(format!(
                "{} ({policy}): no branch holds any of its shards",
                c.blob_key()
            ));
            lost.insert(c, None);
        }
    }
    Ok(out)
}

/// Paths of the files with a chunk (or recipe node) in `lost` bytes. A
/// chunk whose location cannot be read counts as lost.
fn files_touching(fs: &Fs, lost: &LostBytes) -> Result<Vec<String>> {
    let store = fs.store();
    let hit = |id: &cas::ChunkId| match store.locate(id) {
        Err(_) => true,
        Ok(l) => match lost.get(&l.container) {
            None => false,
            Some(None) => true,
            Some(Some(ranges)) => {
                let region = l.region_offset..l.region_offset + u64::from(l.region_len);
                ranges
                    .iter()
                    .any(|r| r.start < region.end && region.start < r.end)
            }
        },
    };
    let mut out = Vec::new();
    let mut stack: Vec<(InodeId, String)> = vec![(InodeId::ROOT, String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = fs.readdir(dir, after.as_deref(), 1024)?;
            let Some(last) = page.last() else { break };
            after = Some(last.name.clone());
            for e in page {
                let path = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
                match e.kind {
                    FileKind::Dir => stack.push((e.ino, path)),
                    FileKind::File => {
                        if let Content::Recipe(root) = fs.getattr(e.ino)?.content {
                            let touched = match file_chunks(store, root) {
                                Ok(ids) => ids.iter().any(hit),
                                Err(_) => true,
                            };
                            if touched {
                                out.push(path);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MoveOut {
    /// Shards written to their new branch.
    pub rebuilt: usize,
    /// Shards found already in place (from an interrupted run).
    pub already_present: usize,
    /// Shards that could not be moved, each with why: running again may
    /// help.
    pub failed: Vec<String>,
    /// Containers lost beyond their policy, each with why: nothing is left
    /// to rebuild them from.
    #[serde(default)]
    pub lost: Vec<String>,
    /// Files with data in the lost containers, by path.
    #[serde(default)]
    pub lost_files: Vec<String>,
}

impl MoveOut {
    /// What `layer`'s rebuild did; lost containers named with the files
    /// that have data in their unreadable bytes.
    fn of(fs: &Fs, layer: &Redundant, report: &redundancy::RebuildReport) -> Result<MoveOut> {
        let mut lost_bytes: LostBytes = HashMap::new();
        for (key, _) in &report.lost {
            if let Some(c) = ContainerId::from_blob_key(key) {
                // Judged as scrub judges; unknown bytes count as lost.
                lost_bytes.insert(c, layer.unreadable(key).ok());
            }
        }
        let lost_files = if lost_bytes.is_empty() {
            Vec::new()
        } else {
            files_touching(fs, &lost_bytes)?
        };
        let lines = |list: &[(branch::BlobKey, String)]| -> Vec<String> {
            list.iter().map(|(k, why)| format!("{k}: {why}")).collect()
        };
        for l in lines(&report.lost) {
            tracing::error!("lost {l}");
        }
        Ok(MoveOut {
            rebuilt: report.rebuilt,
            already_present: report.already_present,
            failed: lines(&report.failed),
            lost: lines(&report.lost),
            lost_files,
        })
    }
}

fn branch_id(layer: &Redundant, name: &str) -> Result<redundancy::BranchId> {
    layer
        .branch_id(name)
        .ok_or_else(|| ServiceError::NoBranch(name.to_string()))
}

/// Rebuilds every shard `old` holds (and every lost shard) onto `new`.
pub(crate) fn replace(fs: &Fs, old: &str, new: &str, progress: &dyn Progress) -> Result<MoveOut> {
    let layer = fs.store().layer();
    if layer.is_plain() {
        return Err(ServiceError::PlainRepository("replace"));
    }
    let (from, to) = (branch_id(layer, old)?, branch_id(layer, new)?);
    let mut report = layer.rebuild_onto(from, to, |p| {
        progress.step("rebuild", p.done as u64, p.total as u64)
    })?;
    // Containers whose every shard was on an unreachable branch are not in
    // the layer's map at all; the index still knows them.
    let listed: HashSet<branch::BlobKey> = report.lost.iter().map(|(k, _)| k.clone()).collect();
    let in_use = fs.store().containers_in_use()?;
    for c in fs.store().indexed_containers()? {
        let key = c.blob_key();
        if in_use.contains(&c) && !listed.contains(&key) && layer.locate(&key).is_err() {
            report
                .lost
                .push((key, "no branch holds any of its shards".into()));
        }
    }
    layer.reset_health(to);
    MoveOut::of(fs, layer, &report)
}

/// Moves every shard off `name` onto the other branches, each shard to a
/// branch holding no other shard of its container, spread by container.
pub(crate) fn drain(fs: &Fs, name: &str, progress: &dyn Progress) -> Result<MoveOut> {
    let layer = fs.store().layer();
    if layer.is_plain() {
        return Err(ServiceError::PlainRepository("remove"));
    }
    let from = branch_id(layer, name)?;
    let report = layer.spread_off(from, |p| {
        progress.step("move", p.done as u64, p.total as u64)
    })?;
    let mut out = MoveOut::of(fs, layer, &report)?;
    // A safety net: the branch is retired, so nothing new can be on it.
    let keys = if out.failed.is_empty() {
        layer.list("")?
    } else {
        Vec::new()
    };
    let lost: HashSet<&branch::BlobKey> = report.lost.iter().map(|(k, _)| k).collect();
    for key in keys.into_iter().filter(|k| !lost.contains(k)) {
        let placed = layer.locate(&key)?;
        for s in placed.shards {
            if s.branches.contains(&from) || s.branches.is_empty() {
                out.failed.push(format!(
                    "{key} shard {}: still on {name} after the move",
                    s.index
                ));
            }
        }
    }
    Ok(out)
}
