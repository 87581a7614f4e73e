//! Which protection a file's data gets (its policy xattr, else the rules
//! of `cairn.toml` matched against its path, size and owner), the write
//! streams that store it, and re-storing a file whose policy changed.

use std::sync::Arc;

use cas::{ChunkId, Protection, StreamWriter};
use meta::{Inode, InodeId, MetaError};
use recipe::Recipe;

use crate::file::FileState;
use crate::rules::{Choice, FileFacts, Source, POLICY_XATTR};
use crate::{FsError, Inner, PolicyProblem, Result};

impl Inner {
    /// A policy written to `user.cairn.policy`: parsed and checked against
    /// every branch of the store, which is what such a policy may use.
    pub(crate) fn xattr_protection(&self, value: &[u8]) -> Result<Protection> {
        let text =
            std::str::from_utf8(value).map_err(|_| FsError::BadPolicy(PolicyProblem::NotUtf8))?;
        let policy: cas::Policy = text
            .trim()
            .parse()
            .map_err(|e: cas::PolicyError| FsError::BadPolicy(e.into()))?;
        let branches = self.store.layer().branch_ids();
        let protection = Protection { policy, branches };
        self.store
            .check_protection(&protection)
            .map_err(|e| FsError::BadPolicy(PolicyProblem::Unusable(Box::new(e))))?;
        Ok(protection)
    }

    /// The file's xattr policy if it has a usable one, else the first
    /// matching rule, else the default.
    pub(crate) fn choose(&self, inode: &Inode, path: Option<&str>) -> Result<Choice> {
        match self.meta.get_xattr(inode.id, POLICY_XATTR) {
            Ok(value) => match self.xattr_protection(&value) {
                Ok(protection) => {
                    return Ok(Choice {
                        source: Source::Xattr,
                        protection,
                    })
                }
                // Set before the branches changed, or restored from a
                // snapshot: the rules still protect the file.
                Err(e) => tracing::warn!(
                    file = %self.describe(inode.id),
                    xattr = %String::from_utf8_lossy(POLICY_XATTR),
                    error = %e,
                    "ignoring a policy the branches cannot give; the rules protect the file"
                ),
            },
            Err(MetaError::NoXattr) => {}
            Err(e) => return Err(e.into()),
        }
        let known = match path {
            Some(p) => Some(p.trim_start_matches('/').to_string()),
            // A walk up the tree only for rules that look at the path (and
            // without the rules' lock: `rules` is a leaf).
            None if self.rules.read().match_paths() => self.path_of(inode.id)?,
            None => None,
        };
        Ok(self.rules.read().choose(&FileFacts {
            path: known.as_deref(),
            size: inode.attr.size,
            uid: inode.attr.uid,
        }))
    }

    /// The write stream of a file about to store data, protected as its
    /// xattr or rules say, with the size it has now.
    pub(crate) fn open_stream(&self, f: &FileState) -> Result<StreamWriter> {
        Ok(self.store.stream_with(self.protection_of(f)?)?)
    }

    pub(crate) fn protection_of(&self, f: &FileState) -> Result<Protection> {
        let mut inode = self.meta.get(f.ino)?;
        inode.attr.size = f.size;
        Ok(self.choose(&inode, None)?.protection)
    }

    /// An idle shared stream for small files under `protection`; give it
    /// back with [`Inner::give_small`] before the recording lock is let go.
    pub(crate) fn take_small(&self, protection: Protection) -> Result<StreamWriter> {
        let mut idle = self.small.lock();
        match idle.iter().position(|w| *w.protection() == protection) {
            Some(i) => Ok(idle.swap_remove(i)),
            None => Ok(self.store.stream_with(protection)?),
        }
    }

    pub(crate) fn give_small(&self, w: StreamWriter) {
        self.small.lock().push(w);
    }

    /// Re-stores, in the background, the chunks a file shares with the one
    /// it was copied from (a clone, a splice, a restore: the recipe `root`
    /// lists chunks stored under the source's protection) when the file's
    /// own protection, at `size`, asks for a stronger policy than they
    /// have. The policy of the recipe's root node stands for its chunks':
    /// the stream that stored the root stored or found every chunk it lists
    /// at least that strong. A failed check is logged, not returned: the
    /// copy is made and readable; only its protection is not raised.
    pub(crate) fn protect_shared(self: &Arc<Self>, ino: InodeId, size: u64, root: ChunkId) {
        let wanted = || -> Result<Option<Protection>> {
            let mut inode = self.meta.get(ino)?;
            inode.attr.size = size;
            let want = self.choose(&inode, None)?.protection;
            let have = self.store.chunk_policy(&root)?;
            Ok(cas::needs_restore(&have, &want.policy).then_some(want))
        };
        match wanted() {
            Ok(Some(protection)) => self.migrate(ino, root, protection),
            Ok(None) => {}
            Err(e) => tracing::error!(
                file = %self.describe(ino),
                error = %e,
                "cannot tell whether a copy's shared chunks need a stronger policy; they keep the source's"
            ),
        }
    }

    /// Stores the chunks of a file's recipe again under `protection`, in
    /// the background. The recipe's ids do not change, so no metadata does:
    /// under a stronger policy each chunk's index entry moves to the new
    /// copy; under a weaker one every chunk is found already stored
    /// (stronger) and nothing is written, as other files may share them.
    pub(crate) fn migrate(self: &Arc<Self>, ino: InodeId, root: ChunkId, protection: Protection) {
        let inner = self.clone();
        let logged = self.clone();
        let run = move || -> Result<()> {
            let recipe = Recipe::open(&inner.store, root)?;
            let extents = recipe.extents(0, recipe.len())?;
            let mut writer = inner.store.stream_with(protection)?;
            let ids: Vec<ChunkId> = extents.iter().filter_map(|e| e.chunk).collect();
            for batch in ids.chunks(64) {
                let data = inner.store.read_chunks(batch)?;
                writer.write_hashed(&data, batch)?;
            }
            recipe::store_tree(&mut writer, extents.iter().map(|e| (e.len, e.chunk)))?;
            writer.flush()?;
            Ok(())
        };
        let queued = self.migrators.submit(Box::new(move || {
            if let Err(e) = run() {
                tracing::error!(file = %logged.describe(ino), error = %e, "re-storing a file under its new policy failed");
            }
        }));
        if queued.is_err() {
            tracing::error!(file = %self.describe(ino), "cannot re-store a file under its new policy: no migration thread runs");
        }
    }
}
