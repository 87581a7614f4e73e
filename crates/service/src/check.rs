//! `check`, `repair`, `roots` and `stats` on a repository: what the store
//! holds, whether it reads back, and what loses data when it does not.

use cas::{CheckProgress, Store};
use fs::space::SpaceReport;
use recipe::Recipe;
use repo::Repo;
use serde::{Deserialize, Serialize};

use crate::request::{RootKind, RootLine};
use crate::{open_fs, Progress, Result};

/// Every root: stored files by label, then snapshots by name, then
/// versions by number (`version/2` before `version/10`).
pub(crate) fn root_lines(store: &Store) -> Result<Vec<RootLine>> {
    let mut lines: Vec<RootLine> = store
        .list_roots()?
        .into_iter()
        .map(|(label, id)| {
            let kind = RootKind::of(&label);
            let (size, created) = if kind == RootKind::Stream {
                let size = Recipe::open(store, id).map(|r| r.len());
                (size.map_err(|e| e.to_string()), None)
            } else {
                match fs::tree::read_record(store, &id) {
                    Ok(r) => (Ok(r.logical_bytes), Some(r.created.secs)),
                    Err(e) => (Err(e.to_string()), None),
                }
            };
            RootLine {
                label,
                root: id.to_string(),
                bytes: size.as_ref().ok().copied(),
                error: size.err(),
                kind,
                created,
            }
        })
        .collect();
    let number = |l: &RootLine| {
        l.label
            .strip_prefix(fs::history::VERSION_PREFIX)
            .and_then(|n| n.parse::<u64>().ok())
    };
    lines.sort_by(|a, b| (a.kind, number(a), &a.label).cmp(&(b.kind, number(b), &b.label)));
    Ok(lines)
}

/// What holds the space of a repository opened by this process: the
/// same computation a mount runs ([`fs::Fs::space_report`]), over the
/// metadata engine opened as a mount would open it (refused the same way).
pub(crate) fn space_unmounted(repo: &Repo) -> Result<SpaceReport> {
    let has_versions = || -> Result<bool> {
        Ok(repo
            .store
            .list_roots()?
            .iter()
            .any(|(l, _)| l.starts_with(fs::history::VERSION_PREFIX)))
    };
    // A repository never mounted has no file system; opening one would
    // create it.
    if !repo.fs_meta_path().exists() && !has_versions()? {
        return Ok(fs::space::report(&repo.store, None)?);
    }
    use meta::MetaStore;
    let meta = repo.open_meta(0, 0)?;
    let view = meta.view()?;
    Ok(fs::space::report(&repo.store, Some(view.as_ref()))?)
}

/// Roots whose data is damaged or missing, each with how many of its chunks
/// (data or recipe) cannot be read.
fn damaged_roots(
    store: &Store,
    known: fs::damage::KnownDamage<'_>,
) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (label, id) in store.list_roots()? {
        // Versions and snapshots: trees of the file system's files.
        if RootKind::of(&label) != RootKind::Stream {
            if let Err(e) = fs::reach::MarkSet::default().root(store, &id) {
                out.push((label, format!("tree unreadable: {e}")));
            }
            continue;
        }
        let verdict = match Recipe::open(store, id) {
            Err(e) => Some(format!("recipe unreadable: {e}")),
            Ok(r) => match r.extents(0, r.len()) {
                Err(e) => Some(format!("recipe unreadable: {e}")),
                Ok(extents) => {
                    let mut bad = 0;
                    let chunks: Vec<cas::ChunkId> =
                        extents.iter().filter_map(|e| e.chunk).collect();
                    for id in &chunks {
                        if known(id).is_some() || !store.contains(id)? {
                            bad += 1;
                        }
                    }
                    (bad > 0)
                        .then(|| format!("{bad} of {} chunks damaged or missing", chunks.len()))
                }
            },
        };
        if let Some(v) = verdict {
            out.push((label, v));
        }
    }
    Ok(out)
}

/// What `cairn check` found (and, with `--repair`, did): the store's
/// report and the roots and live files that lose data.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckOut {
    pub check: cas::CheckReport,
    /// What `--repair` did, and the store's state after it.
    pub repaired: Option<Repaired>,
    pub damaged_roots: Vec<(String, String)>,
    /// Live files that point at chunks the store cannot give back.
    pub damaged_files: Vec<fs::damage::DamagedFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Repaired {
    pub rebuilt: cas::RebuildReport,
    /// The damaged containers rewritten without what did not verify: with
    /// `--drop-lost` every damaged one, else those that could be read.
    pub dropped: Option<cas::Dropped>,
    /// Whether unreadable containers were given up too (`--drop-lost`).
    pub gave_up_unreadable: bool,
    /// A check of the store after the repair.
    pub after: cas::CheckReport,
}

impl CheckOut {
    /// The store as it is now: after the repair when one ran.
    pub fn now(&self) -> &cas::CheckReport {
        self.repaired.as_ref().map_or(&self.check, |r| &r.after)
    }

    pub fn is_healthy(&self) -> bool {
        self.now().is_clean() && self.damaged_files.is_empty() && self.damaged_roots.is_empty()
    }
}

/// Roots (label, why) and live files that lose data.
type Losses = (Vec<(String, String)>, Vec<fs::damage::DamagedFile>);

/// The live files and roots that lose data, given what the check found.
fn losses(store: &Store, fs: Option<&fs::Fs>, report: &cas::CheckReport) -> Result<Losses> {
    let known = |id: &cas::ChunkId| report.damage_of(id).map(str::to_string);
    let roots = damaged_roots(store, &known)?;
    let files = match fs {
        Some(fs) => fs.damaged_files(&known)?,
        None => Vec::new(),
    };
    Ok((roots, files))
}

pub(crate) fn check_store(
    store: &Store,
    fs: Option<&fs::Fs>,
    progress: &(dyn Fn(CheckProgress) + Sync),
) -> Result<CheckOut> {
    let check = store.check(progress)?;
    let (damaged_roots, damaged_files) = losses(store, fs, &check)?;
    Ok(CheckOut {
        check,
        repaired: None,
        damaged_roots,
        damaged_files,
    })
}

/// The store's progress as steps of `what`.
fn steps<'a>(progress: &'a dyn Progress, what: &'a str) -> impl Fn(CheckProgress) + Sync + 'a {
    move |p| progress.step(what, p.containers_done, p.containers_total)
}

/// What `repair` does to a damaged store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Repair {
    /// Only check.
    #[default]
    No,
    /// Rebuild the index and rewrite the damaged containers that can be
    /// read without what did not verify.
    Rewrite,
    /// As `Rewrite`, and give up the containers that cannot be read.
    DropLost,
}

/// Checks the repository opened by this process (opened with
/// [`crate::open_to_check`], or [`crate::open_for_rebuild`] to repair) and,
/// as `repair` asks, repairs it: the report names the roots and live files
/// that lose data.
pub fn check_repo(repo: &Repo, repair: Repair, progress: &dyn Progress) -> Result<CheckOut> {
    let store = &repo.store;
    let check = store.check(&steps(progress, "check"))?;
    // The live file system, when the repository has one.
    let live = if repo.fs_meta_path().exists() {
        Some(open_fs(repo)?)
    } else {
        None
    };
    let mut repaired = None;
    if repair != Repair::No && !check.is_clean() {
        let rebuilt = store.rebuild_index(&steps(progress, "rebuild"))?;
        let drop_lost = repair == Repair::DropLost;
        let give_up = if drop_lost {
            rebuilt.damaged_containers()
        } else {
            rebuilt.rewritable_containers()
        };
        let dropped = Some(store.drop_damaged(&give_up)?);
        let after = store.check(&steps(progress, "check again"))?;
        repaired = Some(Repaired {
            rebuilt,
            dropped,
            gave_up_unreadable: drop_lost,
            after,
        });
    }
    let now = repaired.as_ref().map_or(&check, |r| &r.after);
    let (damaged_roots, damaged_files) = losses(store, live.as_deref(), now)?;
    Ok(CheckOut {
        check,
        repaired,
        damaged_roots,
        damaged_files,
    })
}

/// Rebuilds the fingerprint index of the repository opened by this process
/// from its containers.
pub fn rebuild_index(repo: &Repo, progress: &dyn Progress) -> Result<cas::RebuildReport> {
    Ok(repo.store.rebuild_index(&steps(progress, "rebuild"))?)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use cas::{RepoKey, Store, StoreSettings};

    use super::damaged_roots;

    fn store_in(dir: &std::path::Path) -> Store {
        let (branch, _) = branch::LocalDir::open("local", dir.join("branch")).unwrap();
        std::fs::create_dir(dir.join("meta")).unwrap();
        Store::open(
            Arc::new(branch),
            &dir.join("meta"),
            RepoKey::generate(),
            StoreSettings::default(),
        )
        .unwrap()
    }

    /// A hole is no chunk: a sparse recipe whose data all reads back is
    /// not damaged, and one whose data chunk is gone counts only that one.
    #[test]
    fn holes_are_not_counted_as_missing_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        let mut writer = store.stream();
        let data = [bytes::Bytes::from_static(b"some bytes")];
        let ids = writer.write_batch(&data).unwrap();
        let sparse =
            recipe::store_tree(&mut writer, [(10, Some(ids[0])), (1 << 20, None)]).unwrap();
        let absent = cas::ChunkId::from_bytes([7; 32]);
        let broken =
            recipe::store_tree(&mut writer, [(1 << 20, None), (10, Some(absent))]).unwrap();
        writer.flush().unwrap();
        store.put_root("sparse", &sparse).unwrap();
        store.put_root("broken", &broken).unwrap();

        let damaged = damaged_roots(&store, &|_| None).unwrap();
        assert_eq!(
            damaged,
            [(
                "broken".to_string(),
                "1 of 1 chunks damaged or missing".to_string()
            )]
        );
    }
}
