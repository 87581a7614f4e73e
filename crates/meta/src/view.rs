//! A consistent read-only view of the whole namespace, and building a new
//! engine from a namespace read elsewhere (recovery from a version).

use redb::{Durability, ReadTransaction, ReadableTable};

use crate::record::{
    as_slices, decode, dkey, dval, dval_decode, encode, prefix_range, Rec, DIRENTS, DIRS, FILES,
    INODES, META, NEXT_INO, ORPHANS, XATTRS,
};
use crate::{DirEntry, FileKind, Inode, InodeId, MetaError, MetaView, RedbMeta, Result};

/// A redb read transaction: everything it reads is from one instant.
pub(crate) struct RedbView(pub ReadTransaction);

impl MetaView for RedbView {
    fn get(&self, ino: InodeId) -> Result<Inode> {
        match self.0.open_table(INODES)?.get(ino.0)? {
            Some(v) => Ok(decode(ino.0, v.value())?.inode),
            None => Err(MetaError::NotFound),
        }
    }

    fn entries(&self, dir: InodeId) -> Result<Vec<DirEntry>> {
        let dirents = self.0.open_table(DIRENTS)?;
        let range = prefix_range(dir.0);
        let mut out = Vec::new();
        for entry in dirents.range::<&[u8]>(as_slices(&range))? {
            let (k, v) = entry?;
            let (ino, kind) = dval_decode(v.value())?;
            out.push(DirEntry {
                name: k.value()[8..].to_vec(),
                ino,
                kind,
            });
        }
        Ok(out)
    }

    fn xattrs(&self, ino: InodeId) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let xattrs = self.0.open_table(XATTRS)?;
        let range = prefix_range(ino.0);
        let mut out = Vec::new();
        for entry in xattrs.range::<&[u8]>(as_slices(&range))? {
            let (k, v) = entry?;
            out.push((k.value()[8..].to_vec(), v.value().to_vec()));
        }
        Ok(out)
    }

    fn for_each_inode(&self, f: &mut dyn FnMut(&Inode)) -> Result<()> {
        for entry in self.0.open_table(INODES)?.iter()? {
            let (k, v) = entry?;
            f(&decode(k.value(), v.value())?.inode);
        }
        Ok(())
    }
}

/// One inode of a namespace being imported, with its extended attributes.
#[derive(Debug, Clone)]
pub struct ImportInode {
    pub inode: Inode,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// One name: `name` in directory `parent` is `ino`.
#[derive(Debug, Clone)]
pub struct ImportEntry {
    pub parent: InodeId,
    pub name: Vec<u8>,
    pub ino: InodeId,
}

impl RedbMeta {
    /// Creates an engine at `path` (which must not exist) holding exactly
    /// `inodes` and `entries`, as one durable transaction. Link counts,
    /// parent pointers and counters are derived from the entries, so the
    /// result passes [`RedbMeta::verify`] whenever the entries form a tree.
    pub fn import(
        path: &std::path::Path,
        inodes: Vec<ImportInode>,
        entries: Vec<ImportEntry>,
    ) -> Result<RedbMeta> {
        if path.exists() {
            return Err(MetaError::Invalid("import target exists"));
        }
        let mut recs: std::collections::HashMap<u64, Rec> = inodes
            .iter()
            .map(|i| {
                let mut inode = i.inode.clone();
                inode.attr.nlink = if inode.attr.kind == FileKind::Dir {
                    2
                } else {
                    0
                };
                let parent = (inode.id == InodeId::ROOT).then_some(InodeId::ROOT);
                (inode.id.0, Rec { inode, parent })
            })
            .collect();
        let mut kinds = Vec::with_capacity(entries.len());
        for e in &entries {
            let kind = recs
                .get(&e.ino.0)
                .map(|r| r.inode.attr.kind)
                .ok_or(MetaError::Invalid("an entry names a missing inode"))?;
            recs.get_mut(&e.ino.0).expect("checked").parent = Some(e.parent);
            if kind == FileKind::Dir {
                recs.get_mut(&e.parent.0)
                    .ok_or(MetaError::Invalid("an entry's directory is missing"))?
                    .inode
                    .attr
                    .nlink += 1;
            } else {
                recs.get_mut(&e.ino.0).expect("checked").inode.attr.nlink += 1;
            }
            kinds.push(kind);
        }
        let db = RedbMeta::open(path, 0, 0)?;
        let mut tx = db.db()?.begin_write()?;
        tx.set_durability(Durability::Immediate)?;
        {
            let mut table = tx.open_table(INODES)?;
            for rec in recs.values() {
                table.insert(rec.inode.id.0, encode(rec.inode.id.0, rec).as_slice())?;
            }
            let mut dirents = tx.open_table(DIRENTS)?;
            for (e, kind) in entries.iter().zip(kinds) {
                dirents.insert(dkey(e.parent, &e.name).as_slice(), dval(e.ino, kind))?;
            }
            let mut xattrs = tx.open_table(XATTRS)?;
            for i in &inodes {
                for (name, value) in &i.xattrs {
                    xattrs.insert(dkey(i.inode.id, name).as_slice(), value.as_slice())?;
                }
            }
            tx.open_table(ORPHANS)?;
            let dirs = recs.values().filter(|r| r.is_dir()).count() as u64;
            let max = recs.keys().copied().max().unwrap_or(1);
            let mut meta = tx.open_table(META)?;
            meta.insert(DIRS, dirs)?;
            meta.insert(FILES, recs.len() as u64 - dirs)?;
            meta.insert(NEXT_INO, max + 1)?;
        }
        tx.commit()?;
        Ok(db)
    }
}
