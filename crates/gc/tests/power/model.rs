//! What the file system should hold: the namespace, each file's content as
//! a reader sees it and as it was last recorded in the metadata engine,
//! and the last state a sync made durable.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use meta::{FileKind, InodeId};

/// One file's bytes, shared between snapshots.
pub type Bytes = Arc<Vec<u8>>;

/// The namespace and the recorded file contents: what the metadata engine
/// holds, and what a recovery must find whole.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// (parent, name) -> (inode, is a directory).
    pub entries: BTreeMap<(u64, Vec<u8>), (u64, bool)>,
    /// Every reachable file's content.
    pub contents: BTreeMap<u64, Bytes>,
}

impl Snapshot {
    /// The differences from `other`, briefly, for a failure message.
    pub fn diff(&self, other: &Snapshot) -> String {
        let mut out = Vec::new();
        let names = |s: &Snapshot| s.entries.keys().cloned().collect::<BTreeSet<_>>();
        for key in names(self).symmetric_difference(&names(other)) {
            let side = |s: &Snapshot| s.entries.get(key).map(|(ino, _)| *ino);
            out.push(format!(
                "entry {}/{}: found inode {:?}, expected {:?}",
                key.0,
                String::from_utf8_lossy(&key.1),
                side(self),
                side(other)
            ));
        }
        for (ino, bytes) in &self.contents {
            match other.contents.get(ino) {
                Some(want) if want != bytes => out.push(format!(
                    "inode {ino}: {} bytes, expected {}{}",
                    bytes.len(),
                    want.len(),
                    first_difference(bytes, want)
                        .map(|at| format!(", first differing at byte {at}"))
                        .unwrap_or_default()
                )),
                _ => {}
            }
        }
        if out.is_empty() {
            out.push("entries agree; an entry names a different inode or kind".into());
        }
        out.truncate(8);
        out.join("; ")
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} entries, {} files",
            self.entries.len(),
            self.contents.len()
        )
    }
}

/// A namespace by path: a directory's value is `None`, a file's its bytes.
pub type Tree = BTreeMap<Vec<u8>, Option<Bytes>>;

impl Snapshot {
    /// The same namespace by path, as a version or snapshot stores it (a
    /// file with several names at each of them).
    pub fn tree(&self) -> Tree {
        let dirs: HashMap<u64, (u64, &[u8])> = self
            .entries
            .iter()
            .filter(|(_, (_, dir))| *dir)
            .map(|((parent, name), (ino, _))| (*ino, (*parent, name.as_slice())))
            .collect();
        self.entries
            .iter()
            .map(|((parent, name), (ino, dir))| {
                let mut parts = vec![name.as_slice()];
                let mut at = *parent;
                while let Some((up, name)) = dirs.get(&at) {
                    parts.push(*name);
                    at = *up;
                }
                parts.reverse();
                let content = (!dir).then(|| self.contents[ino].clone());
                (parts.join(&b'/'), content)
            })
            .collect()
    }
}

/// A root (a version or a snapshot) the workload made: the tree it holds,
/// and whether it must survive (its creation returned and nothing that
/// may delete it ran since).
pub struct Rooted {
    pub tree: Tree,
    pub must: bool,
}

/// The expected state, kept in step with the workload.
#[derive(Default)]
pub struct Model {
    /// Roots by label.
    pub roots: BTreeMap<String, Rooted>,
    /// Snapshots named so far, so that each gets a new name.
    pub snapshots_named: u64,
    pub entries: BTreeMap<(u64, Vec<u8>), (u64, bool)>,
    /// What a reader of each file sees now (ordered, so that the workload
    /// drawn from it is the same in every run).
    pub live: BTreeMap<u64, Bytes>,
    /// What the metadata engine records for each file (its last flush,
    /// close, fsync or truncate).
    pub recorded: BTreeMap<u64, Bytes>,
    /// Files with a handle open.
    pub open: BTreeSet<u64>,
    /// Each file as of its last close or fsync, or as it was when it was
    /// opened or created: what a version takes of a file still open.
    pub whole: BTreeMap<u64, Bytes>,
    /// The state the last completed sync made durable.
    pub durable: Snapshot,
}

impl Model {
    pub fn snapshot(&self) -> Snapshot {
        let contents = self
            .entries
            .values()
            .filter(|(_, dir)| !dir)
            .map(|(ino, _)| (*ino, self.recorded[ino].clone()))
            .collect();
        Snapshot {
            entries: self.entries.clone(),
            contents,
        }
    }

    /// The namespace as a version takes it: files still open as they
    /// were last left whole.
    pub fn version(&self) -> Snapshot {
        let mut s = self.snapshot();
        for ino in &self.open {
            if let Some(c) = s.contents.get_mut(ino) {
                *c = self.whole[ino].clone();
            }
        }
        s
    }

    /// Notes that `ino` is left whole as it reads now (closed, fsynced,
    /// or opened while it had no handle).
    pub fn left_whole(&mut self, ino: u64) {
        self.whole.insert(ino, self.live[&ino].clone());
    }

    pub fn dirs(&self) -> Vec<u64> {
        let mut dirs = vec![InodeId::ROOT.0];
        dirs.extend(
            self.entries
                .values()
                .filter(|(_, dir)| *dir)
                .map(|(ino, _)| *ino),
        );
        dirs
    }

    pub fn files(&self) -> Vec<u64> {
        let files: BTreeSet<u64> = self
            .entries
            .values()
            .filter(|(_, dir)| !dir)
            .map(|(ino, _)| *ino)
            .collect();
        files.into_iter().collect()
    }

    /// The (parent, name) of every entry of this kind.
    pub fn names(&self, dirs: bool) -> Vec<(u64, Vec<u8>)> {
        self.entries
            .iter()
            .filter(|(_, (_, dir))| *dir == dirs)
            .map(|(k, _)| k.clone())
            .collect()
    }

    pub fn is_empty_dir(&self, ino: u64) -> bool {
        !self.entries.keys().any(|(parent, _)| *parent == ino)
    }

    /// Whether `dir` is `ancestor` or lies under it.
    pub fn is_within(&self, dir: u64, ancestor: u64) -> bool {
        let parents: HashMap<u64, u64> = self
            .entries
            .iter()
            .filter(|(_, (_, d))| *d)
            .map(|((parent, _), (ino, _))| (*ino, *parent))
            .collect();
        let mut at = dir;
        // Bounded by the number of directories: the tree has no cycles.
        for _ in 0..=parents.len() {
            if at == ancestor {
                return true;
            }
            match parents.get(&at) {
                Some(p) => at = *p,
                None => return false,
            }
        }
        false
    }

    /// Records that `ino` is a new, empty file named `name` in `parent`.
    pub fn add(&mut self, parent: u64, name: &[u8], ino: u64, dir: bool) {
        self.entries.insert((parent, name.to_vec()), (ino, dir));
        if !dir {
            self.live.insert(ino, Arc::new(Vec::new()));
            self.recorded.insert(ino, Arc::new(Vec::new()));
            self.whole.insert(ino, Arc::new(Vec::new()));
        }
    }

    /// Removes a name; a file that had no other is gone.
    pub fn remove(&mut self, parent: u64, name: &[u8]) {
        if let Some((ino, _)) = self.entries.remove(&(parent, name.to_vec())) {
            if !self.entries.values().any(|(other, _)| *other == ino) {
                self.live.remove(&ino);
                self.recorded.remove(&ino);
                self.whole.remove(&ino);
                self.open.remove(&ino);
            }
        }
    }

    pub fn record(&mut self, ino: u64) {
        self.recorded.insert(ino, self.live[&ino].clone());
    }

    pub fn kind(dir: bool) -> FileKind {
        if dir {
            FileKind::Dir
        } else {
            FileKind::File
        }
    }
}
