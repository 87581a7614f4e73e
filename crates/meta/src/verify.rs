//! The engine's fsck: every invariant of the tables, checked from one
//! read transaction.

use std::collections::HashMap;

use redb::ReadableTable;

use crate::record::{
    decode, dval_decode, Rec, DIRENTS, DIRS, FILES, INODES, META, NEXT_INO, ORPHANS, XATTRS,
};
use crate::rules::check_name;
use crate::{InodeId, RedbMeta, Result};

impl RedbMeta {
    /// Checks every invariant of the store (an fsck): entries point at
    /// inodes of their kind, link counts match the names, parent pointers
    /// match, every inode has a name or an orphan mark, the counters and the
    /// next inode number are right, xattrs belong to inodes. Returns the
    /// problems found, none when the store is consistent.
    pub fn verify(&self) -> Result<Vec<String>> {
        let tx = self.begin_read()?;
        let inodes = tx.open_table(INODES)?;
        let dirents = tx.open_table(DIRENTS)?;
        let xattrs = tx.open_table(XATTRS)?;
        let orphans = tx.open_table(ORPHANS)?;
        let meta = tx.open_table(META)?;
        let mut problems = Vec::new();

        let mut recs: HashMap<u64, Rec> = HashMap::new();
        let mut max_ino = 0;
        for entry in inodes.iter()? {
            let (k, v) = entry?;
            let ino = k.value();
            max_ino = max_ino.max(ino);
            match decode(ino, v.value()) {
                Ok(rec) => {
                    recs.insert(ino, rec);
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
        let mut names: HashMap<u64, u32> = HashMap::new();
        let mut subdirs: HashMap<u64, u32> = HashMap::new();
        for entry in dirents.iter()? {
            let (k, v) = entry?;
            let key = k.value();
            if key.len() < 9 {
                problems.push(format!("entry key {key:?} too short"));
                continue;
            }
            let parent = u64::from_be_bytes(key[..8].try_into().unwrap());
            let name = &key[8..];
            let Ok((ino, kind)) = dval_decode(v.value()) else {
                problems.push(format!("entry {parent}/{name:?}: bad value"));
                continue;
            };
            if check_name(name).is_err() {
                problems.push(format!("entry {parent}/{name:?}: invalid name"));
            }
            match recs.get(&parent) {
                Some(p) if p.is_dir() => {}
                _ => problems.push(format!(
                    "entry {parent}/{name:?}: parent is not a directory"
                )),
            }
            match recs.get(&ino.0) {
                None => problems.push(format!("entry {parent}/{name:?}: inode {} missing", ino.0)),
                Some(rec) => {
                    if rec.inode.attr.kind != kind {
                        problems.push(format!("entry {parent}/{name:?}: kind differs from inode"));
                    }
                    if rec.is_dir() {
                        *subdirs.entry(parent).or_default() += 1;
                        if rec.parent != Some(InodeId(parent)) {
                            problems.push(format!(
                                "directory {}: parent pointer {:?} but named in {parent}",
                                ino.0, rec.parent
                            ));
                        }
                    }
                }
            }
            *names.entry(ino.0).or_default() += 1;
        }
        let mut orphan_set = std::collections::HashSet::new();
        for entry in orphans.iter()? {
            orphan_set.insert(entry?.0.value());
        }
        let (mut files, mut dirs) = (0u64, 0u64);
        for (ino, rec) in &recs {
            let n = names.get(ino).copied().unwrap_or(0);
            let nlink = rec.inode.attr.nlink;
            let orphan = orphan_set.contains(ino);
            if rec.is_dir() {
                dirs += 1;
                let want = 2 + subdirs.get(ino).copied().unwrap_or(0);
                if nlink != want {
                    problems.push(format!("directory {ino}: nlink {nlink}, want {want}"));
                }
                let want_names = u32::from(*ino != InodeId::ROOT.0);
                if n != want_names {
                    problems.push(format!("directory {ino}: {n} names"));
                }
                if orphan {
                    problems.push(format!("directory {ino} is an orphan"));
                }
            } else {
                files += 1;
                if nlink != n {
                    problems.push(format!("inode {ino}: nlink {nlink}, {n} names"));
                }
                if (n == 0) != orphan {
                    problems.push(format!("inode {ino}: {n} names, orphan mark {orphan}"));
                }
            }
        }
        for ino in &orphan_set {
            if !recs.contains_key(ino) {
                problems.push(format!("orphan {ino} has no inode"));
            }
        }
        match recs.get(&InodeId::ROOT.0) {
            Some(r) if r.is_dir() && r.parent == Some(InodeId::ROOT) => {}
            _ => problems.push("the root directory is missing or wrong".into()),
        }
        let counter =
            |key: &str| -> Result<u64> { Ok(meta.get(key)?.map(|v| v.value()).unwrap_or(0)) };
        if counter(FILES)? != files || counter(DIRS)? != dirs {
            problems.push(format!(
                "counters say {} files, {} dirs; there are {files}, {dirs}",
                counter(FILES)?,
                counter(DIRS)?
            ));
        }
        if counter(NEXT_INO)? <= max_ino {
            problems.push(format!(
                "next inode {} not above {max_ino}",
                counter(NEXT_INO)?
            ));
        }
        for entry in xattrs.iter()? {
            let (k, _) = entry?;
            let key = k.value();
            let owner = key
                .get(..8)
                .map(|b| u64::from_be_bytes(b.try_into().unwrap()));
            if !owner.is_some_and(|o| recs.contains_key(&o)) {
                problems.push(format!("xattr {key:?} has no inode"));
            }
        }
        crate::pathindex::verify(&tx, &recs, &mut problems)?;
        Ok(problems)
    }
}
