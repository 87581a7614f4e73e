//! `recover`: rebuilds the index, the roots and the metadata engine from
//! what the store holds, picking a version (or a snapshot) of the file
//! system to bring back.

use std::collections::HashMap;
use std::path::PathBuf;

use cas::ChunkId;
use fs::tree::{self, TreeContent, TreeEntry};
use meta::{ImportEntry, ImportInode, Inode, InodeId};
use repo::Repo;
use serde::{Deserialize, Serialize};

use crate::{Progress, Result, ServiceError};

/// What `recover` found and brought back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recovered {
    pub rebuilt: cas::RebuildReport,
    /// Roots found on the branch.
    pub roots: usize,
    /// The version or snapshot the file system was recovered from.
    pub label: String,
    /// When it was taken, in seconds since the Unix epoch.
    pub created: i64,
    pub files: u64,
    pub dirs: u64,
    /// Where the metadata engine that was there went.
    pub set_aside: Option<PathBuf>,
}

/// Which state of the file system to bring back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RecoverFrom {
    /// The newest version.
    #[default]
    Newest,
    Version(u64),
    Snapshot(String),
}

/// Rebuilds the index, the roots and the metadata engine of the
/// repository opened by this process (with [`crate::open_for_rebuild`]:
/// a mounted one is refused there) from the store.
pub fn recover(repo: &Repo, from: &RecoverFrom, progress: &dyn Progress) -> Result<Recovered> {
    let store = &repo.store;
    let rebuilt =
        store.rebuild_index(&|p| progress.step("index", p.containers_done, p.containers_total))?;
    let roots = store.recover_roots()?;
    let (label, id) = match from {
        RecoverFrom::Snapshot(name) => {
            let label = format!("{}{name}", fs::history::SNAPSHOT_PREFIX);
            let id = store
                .get_root(&label)
                .map_err(|source| ServiceError::NoSnapshot {
                    name: name.clone(),
                    source: Box::new(source),
                })?;
            (label, id)
        }
        RecoverFrom::Newest | RecoverFrom::Version(_) => {
            let mut versions: Vec<(u64, ChunkId)> = store
                .list_roots()?
                .into_iter()
                .filter_map(|(l, id)| {
                    Some((
                        l.strip_prefix(fs::history::VERSION_PREFIX)?.parse().ok()?,
                        id,
                    ))
                })
                .collect();
            versions.sort();
            let found = match from {
                RecoverFrom::Version(n) => versions.into_iter().find(|(v, _)| v == n),
                _ => versions.pop(),
            };
            let (n, id) = found.ok_or(ServiceError::NoVersion)?;
            (format!("{}{n}", fs::history::VERSION_PREFIX), id)
        }
    };
    let record = tree::read_record(store, &id)?;
    let (inodes, entries) = flatten(store, &record.root)?;
    let path = repo.fs_meta_path();
    let set_aside = if path.exists() {
        Some(Repo::set_aside(&path)?)
    } else {
        None
    };
    meta::RedbMeta::import(&path, inodes, entries)?;
    tracing::info!(from = %label, files = record.files, dirs = record.dirs, "recovered the file system");
    Ok(Recovered {
        rebuilt,
        roots,
        label,
        created: record.created.secs,
        files: record.files,
        dirs: record.dirs,
        set_aside,
    })
}

/// Every inode and name of a stored tree, hard links once.
fn flatten(store: &cas::Store, root: &TreeEntry) -> Result<(Vec<ImportInode>, Vec<ImportEntry>)> {
    let mut inodes: HashMap<InodeId, ImportInode> = HashMap::new();
    let mut entries = Vec::new();
    let mut stack = vec![(InodeId::ROOT, root.clone())];
    while let Some((parent, e)) = stack.pop() {
        let ino = if e.ino == InodeId::ROOT || parent == InodeId::ROOT && e.name.is_empty() {
            InodeId::ROOT
        } else {
            e.ino
        };
        if !e.name.is_empty() {
            entries.push(ImportEntry {
                parent,
                name: e.name.clone(),
                ino,
            });
        }
        inodes.entry(ino).or_insert_with(|| ImportInode {
            inode: Inode {
                id: ino,
                attr: e.attr,
                content: e.meta_content(),
            },
            xattrs: e.xattrs.clone(),
        });
        if let TreeContent::Dir(listing) = &e.content {
            for child in tree::read_listing(store, listing)? {
                stack.push((ino, child));
            }
        }
    }
    Ok((inodes.into_values().collect(), entries))
}
