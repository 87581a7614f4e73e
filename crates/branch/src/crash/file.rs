//! [`CrashFile`]: an in-memory file for redb's `StorageBackend` that keeps
//! its durable bytes apart from what was written since the last sync.

use parking_lot::{Mutex, MutexGuard};
use std::fmt;
use std::io;
use std::sync::Arc;

use super::{fates, Kept, Power, Step};

/// A file in memory: what a reader sees now, what would survive a power
/// cut (the bytes as of the last `sync_data`), and the writes and length
/// changes in between, in order. Clones share the file: hand one to redb
/// and keep one to [`CrashFile::recover`] after the crash.
#[derive(Clone)]
pub struct CrashFile {
    name: Arc<str>,
    power: Power,
    image: Arc<Mutex<Image>>,
}

#[derive(Default)]
struct Image {
    durable: Vec<u8>,
    current: Vec<u8>,
    unsynced: Vec<Change>,
}

enum Change {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

impl Change {
    fn apply(&self, bytes: &mut Vec<u8>, kept: Kept) {
        match (self, kept) {
            (_, Kept::Nothing) => {}
            (Change::SetLen(len), _) => bytes.resize(*len as usize, 0),
            (Change::Write { offset, data }, kept) => {
                let n = match kept {
                    Kept::Prefix(n) => n,
                    _ => data.len(),
                };
                let start = *offset as usize;
                if bytes.len() < start + n {
                    bytes.resize(start + n, 0);
                }
                bytes[start..start + n].copy_from_slice(&data[..n]);
            }
        }
    }

    fn len(&self) -> usize {
        match self {
            Change::Write { data, .. } => data.len(),
            Change::SetLen(_) => 0,
        }
    }
}

impl fmt::Debug for CrashFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "crash-file:{}", self.name)
    }
}

impl CrashFile {
    /// An empty file named `name` (in messages, and to draw its own dice).
    pub fn new(name: &str, power: &Power) -> CrashFile {
        Self::with_bytes(name, power, Vec::new())
    }

    fn with_bytes(name: &str, power: &Power, bytes: Vec<u8>) -> CrashFile {
        CrashFile {
            name: name.into(),
            power: power.clone(),
            image: Arc::new(Mutex::new(Image {
                durable: bytes.clone(),
                current: bytes,
                unsynced: Vec::new(),
            })),
        }
    }

    fn image(&self) -> MutexGuard<'_, Image> {
        self.image.lock()
    }

    /// After the power cut: decides what the disk kept of each unsynced
    /// change, and returns a fresh file over the result, powered by
    /// `power`. This file stays dead. Panics while its power is on.
    pub fn recover(&self, power: &Power) -> CrashFile {
        let (loss, mut rng) = self.power.dice(&self.name);
        let image = self.image();
        let lens: Vec<usize> = image.unsynced.iter().map(Change::len).collect();
        let mut bytes = image.durable.clone();
        for (change, kept) in image
            .unsynced
            .iter()
            .zip(fates(loss, &mut rng, &lens, true))
        {
            change.apply(&mut bytes, kept);
        }
        Self::with_bytes(&self.name, power, bytes)
    }

    /// A fresh file with this one's bytes as they are now, synced or not,
    /// powered by `power` (a clean copy, as after an orderly shutdown).
    pub fn copy(&self, power: &Power) -> CrashFile {
        Self::with_bytes(&self.name, power, self.image().current.clone())
    }

    /// Bytes written or length changes made since the last sync.
    pub fn unsynced(&self) -> usize {
        self.image().unsynced.len()
    }

    /// Runs a change as one operation of the power switch.
    fn change(&self, change: Change) -> io::Result<()> {
        let mut held = self.power.hold()?;
        let step = held.step();
        let mut image = self.image();
        let Image {
            current, unsynced, ..
        } = &mut *image;
        change.apply(current, Kept::Whole);
        unsynced.push(change);
        match step {
            Step::Run => Ok(()),
            Step::CutShort => Err(super::power_off()),
        }
    }
}

impl redb::StorageBackend for CrashFile {
    fn len(&self) -> io::Result<u64> {
        self.power.check()?;
        Ok(self.image().current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.power.check()?;
        let image = self.image();
        let start = offset as usize;
        let bytes = image
            .current
            .get(start..start + out.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        out.copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.change(Change::SetLen(len))
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut held = self.power.hold()?;
        if held.step() == Step::CutShort {
            return Err(super::power_off());
        }
        let mut image = self.image();
        let Image {
            durable, unsynced, ..
        } = &mut *image;
        for change in unsynced.drain(..) {
            change.apply(durable, Kept::Whole);
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.change(Change::Write {
            offset,
            data: data.to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use redb::{ReadableDatabase, StorageBackend, TableDefinition};

    use super::*;
    use crate::crash::Loss;

    const T: TableDefinition<u64, u64> = TableDefinition::new("t");

    #[test]
    fn only_synced_bytes_survive_a_tail_cut() {
        let power = Power::on();
        let f = CrashFile::new("f", &power);
        f.write(0, b"durable").unwrap();
        f.sync_data().unwrap();
        f.write(0, b"DUR").unwrap();
        f.set_len(100).unwrap();
        f.write(3, b"ABLE").unwrap();
        assert_eq!(f.len().unwrap(), 100);
        power.cut(Loss::Tail, 7);
        assert!(f.len().is_err() && f.write(0, b"x").is_err() && f.sync_data().is_err());
        let after = f.recover(&Power::on());
        // Only a prefix of the last write ("ABLE" at 3) may have landed.
        let mut out = [0u8; 7];
        after.read(0, &mut out).unwrap();
        assert_eq!(&out[..3], b"dur");
        let torn = out[3..]
            .iter()
            .zip(b"able")
            .take_while(|(a, b)| a != b)
            .count();
        assert_eq!(&out[3..3 + torn], &b"ABLE"[..torn]);
        assert_eq!(&out[3 + torn..], &b"able"[torn..]);
        assert_eq!(after.len().unwrap(), 7);
    }

    #[test]
    fn the_operation_cut_short_fails_and_later_ones_too() {
        let power = Power::on();
        let f = CrashFile::new("f", &power);
        power.crash_after(2, Loss::Scatter, 1);
        f.write(0, b"a").unwrap();
        assert!(f.sync_data().is_err(), "the second operation is cut short");
        assert!(power.is_off());
        let mut out = [0u8; 1];
        assert!(f.read(0, &mut out).is_err());
        assert_eq!(power.cut_info().unwrap().during, Some(2));
    }

    #[test]
    fn the_same_seed_keeps_the_same_bytes() {
        let run = |seed| {
            let power = Power::on();
            let f = CrashFile::new("f", &power);
            for i in 0..20u8 {
                f.write(u64::from(i) * 10, &[i; 10]).unwrap();
            }
            power.cut(Loss::Scatter, seed);
            let after = f.recover(&Power::on());
            let mut out = vec![0u8; after.len().unwrap() as usize];
            after.read(0, &mut out).unwrap();
            out
        };
        assert_eq!(run(3), run(3));
        assert!((0..8).any(|s| run(s) != run(3)), "the seed decides nothing");
    }

    /// redb over a crash file, cut at every operation of a run of
    /// transactions: it always reopens, with every durable commit in it.
    #[test]
    fn redb_keeps_every_durable_commit_through_any_cut() {
        let commits = 6u64;
        let run = |power: &Power, file: &CrashFile| -> u64 {
            let Ok(db) = redb::Builder::new().create_with_backend(file.clone()) else {
                return 0;
            };
            let mut durable = 0;
            for i in 0..commits {
                let mut tx = match db.begin_write() {
                    Ok(tx) => tx,
                    Err(_) => break,
                };
                if i % 2 == 1 {
                    tx.set_durability(redb::Durability::None).unwrap();
                }
                let inserted = match tx.open_table(T) {
                    Ok(mut t) => t.insert(i, i * 100).is_ok(),
                    Err(_) => false,
                };
                if !inserted || tx.commit().is_err() {
                    break;
                }
                if i % 2 == 0 && !power.is_off() {
                    durable = i + 1;
                }
            }
            durable
        };
        let setup = Power::on();
        let clean = CrashFile::new("db", &setup);
        drop(
            redb::Builder::new()
                .create_with_backend(clean.clone())
                .unwrap(),
        );
        let total = {
            let power = Power::on();
            run(&power, &clean.copy(&power));
            power.ops()
        };
        assert!(total > 10, "{total} operations");
        for loss in [Loss::Tail, Loss::Scatter] {
            for at in 1..=total {
                let power = Power::on();
                let file = clean.copy(&power);
                power.crash_after(at, loss, at);
                let durable = run(&power, &file);
                power.cut(loss, at);
                let after = file.recover(&Power::on());
                let db = redb::Builder::new()
                    .create_with_backend(after)
                    .unwrap_or_else(|e| panic!("{loss:?} cut at {at}: {e}"));
                let tx = db.begin_read().unwrap();
                let Ok(table) = tx.open_table(T) else {
                    assert_eq!(durable, 0, "{loss:?} cut at {at}: table lost");
                    continue;
                };
                for i in 0..durable {
                    let got = table.get(i).unwrap().map(|v| v.value());
                    assert_eq!(got, Some(i * 100), "{loss:?} cut at {at}: row {i}");
                }
            }
        }
    }
}
