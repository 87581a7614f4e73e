//! A partition's entries in redb: fingerprint -> (container, location),
//! the other containers holding a copy of an entry's chunk, and container
//! -> its fingerprints for `forget`. Clients may each store a chunk (at
//! once, or before one knew of the other's container): when the
//! container an entry names is forgotten, the entry moves to another
//! copy, or a chunk that lives on elsewhere would be unknown here for
//! good. Every write commits with redb's default durability (fsync)
//! before it returns.

use std::path::Path;

use redb::{
    Database, MultimapTableDefinition, ReadableDatabase, ReadableMultimapTable, ReadableTable,
    TableDefinition,
};

use crate::ranges::Range;
use crate::{Fingerprint, Location};

/// Fingerprint -> container (8 bytes, big-endian) then location.
const ENTRIES: TableDefinition<&[u8; 32], &[u8]> = TableDefinition::new("entries");
/// (fingerprint, container) -> location of each copy an entry does not
/// name.
const COPIES: TableDefinition<([u8; 32], u64), &[u8]> = TableDefinition::new("copies");
/// Container -> its fingerprints (entries and copies), for `forget`.
const BY_CONTAINER: MultimapTableDefinition<u64, &[u8; 32]> =
    MultimapTableDefinition::new("by_container");

/// A redb failure, naming the database.
#[derive(Debug, thiserror::Error)]
#[error("index database {path}: {source}")]
pub struct EntriesError {
    path: String,
    #[source]
    source: Box<redb::Error>,
}

pub(crate) struct Entries {
    db: Database,
    path: String,
}

impl Entries {
    /// Opens (creating) the database at `file` and its tables.
    pub(crate) fn open(file: &Path) -> Result<Self, EntriesError> {
        let path = file.display().to_string();
        let err = |e: redb::Error| EntriesError {
            path: path.clone(),
            source: Box::new(e),
        };
        let db = Database::create(file).map_err(|e| err(e.into()))?;
        let tx = db.begin_write().map_err(|e| err(e.into()))?;
        tx.open_table(ENTRIES).map_err(|e| err(e.into()))?;
        tx.open_table(COPIES).map_err(|e| err(e.into()))?;
        tx.open_multimap_table(BY_CONTAINER)
            .map_err(|e| err(e.into()))?;
        tx.commit().map_err(|e| err(e.into()))?;
        Ok(Entries { db, path })
    }

    fn failed(&self, e: impl Into<redb::Error>) -> EntriesError {
        EntriesError {
            path: self.path.clone(),
            source: Box::new(e.into()),
        }
    }

    pub(crate) fn lookup(
        &self,
        fps: &[Fingerprint],
    ) -> Result<Vec<Option<Location>>, EntriesError> {
        let tx = self.db.begin_read().map_err(|e| self.failed(e))?;
        let table = tx.open_table(ENTRIES).map_err(|e| self.failed(e))?;
        fps.iter()
            .map(|fp| {
                let v = table.get(fp.as_bytes()).map_err(|e| self.failed(e))?;
                Ok(
                    v.map(|v| {
                        Location::new(v.value()[8..].to_vec()).expect("stored locations fit")
                    }),
                )
            })
            .collect()
    }

    /// Adds each entry not present yet; an entry already present keeps its
    /// container and `container`'s copy is recorded beside it (adding
    /// again is a no-op, so a retried add is safe).
    pub(crate) fn add(
        &self,
        container: u64,
        entries: &[(Fingerprint, Location)],
    ) -> Result<(), EntriesError> {
        let tx = self.db.begin_write().map_err(|e| self.failed(e))?;
        {
            let mut table = tx.open_table(ENTRIES).map_err(|e| self.failed(e))?;
            let mut by = tx
                .open_multimap_table(BY_CONTAINER)
                .map_err(|e| self.failed(e))?;
            let mut copies = tx.open_table(COPIES).map_err(|e| self.failed(e))?;
            for (fp, loc) in entries {
                let named = table
                    .get(fp.as_bytes())
                    .map_err(|e| self.failed(e))?
                    .map(|v| container_of(v.value()));
                match named {
                    None => {
                        let mut v = container.to_be_bytes().to_vec();
                        v.extend_from_slice(loc.as_bytes());
                        table
                            .insert(fp.as_bytes(), v.as_slice())
                            .map_err(|e| self.failed(e))?;
                    }
                    Some(c) if c != container => {
                        copies
                            .insert((*fp.as_bytes(), container), loc.as_bytes())
                            .map_err(|e| self.failed(e))?;
                    }
                    Some(_) => continue,
                }
                by.insert(container, fp.as_bytes())
                    .map_err(|e| self.failed(e))?;
            }
        }
        tx.commit().map_err(|e| self.failed(e))
    }

    /// Removes the containers' entries and copies that lie in `range`; an
    /// entry with a copy elsewhere moves to it. Returns how many entries
    /// went.
    pub(crate) fn forget(&self, range: &Range, containers: &[u64]) -> Result<u64, EntriesError> {
        let tx = self.db.begin_write().map_err(|e| self.failed(e))?;
        let mut removed = 0;
        {
            let mut table = tx.open_table(ENTRIES).map_err(|e| self.failed(e))?;
            let mut by = tx
                .open_multimap_table(BY_CONTAINER)
                .map_err(|e| self.failed(e))?;
            let mut copies = tx.open_table(COPIES).map_err(|e| self.failed(e))?;
            for &c in containers {
                let fps: Vec<[u8; 32]> = by
                    .get(c)
                    .map_err(|e| self.failed(e))?
                    .map(|v| v.map(|v| *v.value()))
                    .collect::<Result<_, _>>()
                    .map_err(|e| self.failed(e))?;
                for fp in fps
                    .into_iter()
                    .filter(|fp| range.holds(&Fingerprint::new(*fp)))
                {
                    copies.remove((fp, c)).map_err(|e| self.failed(e))?;
                    by.remove(c, &fp).map_err(|e| self.failed(e))?;
                    let owned_by_c = table
                        .get(&fp)
                        .map_err(|e| self.failed(e))?
                        .is_some_and(|v| container_of(v.value()) == c);
                    if !owned_by_c {
                        continue;
                    }
                    let next = copies
                        .range((fp, 0)..=(fp, u64::MAX))
                        .map_err(|e| self.failed(e))?
                        .find(|row| {
                            row.as_ref()
                                .map_or(true, |(k, _)| !containers.contains(&k.value().1))
                        })
                        .transpose()
                        .map_err(|e| self.failed(e))?
                        .map(|(k, v)| (k.value().1, v.value().to_vec()));
                    match next {
                        Some((other, loc)) => {
                            let mut v = other.to_be_bytes().to_vec();
                            v.extend_from_slice(&loc);
                            table
                                .insert(&fp, v.as_slice())
                                .map_err(|e| self.failed(e))?;
                            copies.remove((fp, other)).map_err(|e| self.failed(e))?;
                        }
                        None => {
                            table.remove(&fp).map_err(|e| self.failed(e))?;
                            removed += 1;
                        }
                    }
                }
            }
        }
        tx.commit().map_err(|e| self.failed(e))?;
        Ok(removed)
    }
}

/// The container an `entries` value names.
fn container_of(value: &[u8]) -> u64 {
    u64::from_be_bytes(
        value[..8]
            .try_into()
            .expect("values start with a container"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(first: u8, n: u8) -> Fingerprint {
        let mut b = [n; 32];
        b[0] = first;
        Fingerprint::new(b)
    }

    fn loc(s: &str) -> Location {
        Location::new(s.as_bytes().to_vec()).unwrap()
    }

    fn whole() -> Range {
        Range {
            start: 0,
            end: u64::MAX,
            owner: "http://a:1".into(),
            epoch: 1,
        }
    }

    #[test]
    fn the_first_container_keeps_an_entry_and_forget_removes_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let e = Entries::open(&dir.path().join("i.redb")).unwrap();
        e.add(1, &[(fp(1, 1), loc("one")), (fp(2, 2), loc("one-b"))])
            .unwrap();
        e.add(2, &[(fp(1, 1), loc("two")), (fp(3, 3), loc("two-c"))])
            .unwrap();
        e.add(1, &[(fp(1, 1), loc("one"))]).unwrap();
        let asked = [fp(1, 1), fp(2, 2), fp(3, 3), fp(4, 4)];
        assert_eq!(
            e.lookup(&asked).unwrap(),
            [
                Some(loc("one")),
                Some(loc("one-b")),
                Some(loc("two-c")),
                None
            ]
        );
        // Container 2's copy of fp 1 is not the entry: forgetting 2 keeps
        // container 1's.
        assert_eq!(e.forget(&whole(), &[2]).unwrap(), 1);
        assert_eq!(
            e.lookup(&asked).unwrap(),
            [Some(loc("one")), Some(loc("one-b")), None, None]
        );
        assert_eq!(e.forget(&whole(), &[1, 7]).unwrap(), 2);
        assert_eq!(e.lookup(&asked).unwrap(), [None, None, None, None]);
    }

    #[test]
    fn an_entry_moves_to_another_copy_when_its_container_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let e = Entries::open(&dir.path().join("i.redb")).unwrap();
        e.add(1, &[(fp(1, 1), loc("one"))]).unwrap();
        e.add(2, &[(fp(1, 1), loc("two"))]).unwrap();
        e.add(3, &[(fp(1, 1), loc("three"))]).unwrap();
        assert_eq!(e.lookup(&[fp(1, 1)]).unwrap(), [Some(loc("one"))]);
        // Forgetting 1 and 2 at once: the entry skips 2's copy.
        assert_eq!(e.forget(&whole(), &[1, 2]).unwrap(), 0);
        assert_eq!(e.lookup(&[fp(1, 1)]).unwrap(), [Some(loc("three"))]);
        // And 3's entry goes with 3, the last copy.
        assert_eq!(e.forget(&whole(), &[3]).unwrap(), 1);
        assert_eq!(e.lookup(&[fp(1, 1)]).unwrap(), [None]);
        // A copy forgotten first is no fallback later.
        e.add(4, &[(fp(2, 2), loc("four"))]).unwrap();
        e.add(5, &[(fp(2, 2), loc("five"))]).unwrap();
        assert_eq!(e.forget(&whole(), &[5]).unwrap(), 0);
        assert_eq!(e.forget(&whole(), &[4]).unwrap(), 1);
        assert_eq!(e.lookup(&[fp(2, 2)]).unwrap(), [None]);
    }

    #[test]
    fn forget_stays_in_its_range_and_entries_outlive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("i.redb");
        let e = Entries::open(&file).unwrap();
        e.add(5, &[(fp(0x10, 1), loc("low")), (fp(0x90, 2), loc("high"))])
            .unwrap();
        let low = Range {
            start: 0,
            end: 0x7fff_ffff_ffff_ffff,
            owner: "http://a:1".into(),
            epoch: 1,
        };
        assert_eq!(e.forget(&low, &[5]).unwrap(), 1);
        drop(e);
        let e = Entries::open(&file).unwrap();
        assert_eq!(
            e.lookup(&[fp(0x10, 1), fp(0x90, 2)]).unwrap(),
            [None, Some(loc("high"))]
        );
    }
}
