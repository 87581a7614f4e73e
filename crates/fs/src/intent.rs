//! The intent log: an `fsync` of a few writes made durable in one metadata
//! commit, without storing chunks.
//!
//! Storing a file's changes means cutting chunks, writing a container
//! (its own fsync, a rename, a directory fsync) and then the metadata that
//! points at it. A database fsyncs a few pages several times per
//! transaction; paying all of that per fsync made sqlite five times slower
//! than a plain directory and left a container per fsync. Instead an
//! `fsync` of a file with little new data appends the writes themselves
//! (offset and bytes, truncates, the size and mtime) to the file's log in
//! the metadata engine ([`meta::MetaStore::append_intent`]) and syncs the
//! engine: one disk flush. The bytes stay dirty in memory and are stored
//! as chunks by the next whole record (the committer's, a close, a larger
//! fsync); setting the content drops the log in the same transaction, so
//! what is durable is always the recorded content plus the log replayed in
//! order. When the file system opens, every log left by a crash is
//! replayed through the ordinary write path and recorded ([`replay`]).
//!
//! A log holds at most [`FSYNC_MAX`] bytes per fsync and [`FILE_MAX`] per
//! file between records; past either the file is recorded whole, as
//! before. Each record carries a checksum: a damaged record is never
//! replayed as file content.

use bytes::Bytes;
use meta::{InodeId, Timestamp};

use crate::file::FileState;
use crate::tree::LeftWhole;
use crate::{Inner, Result};

/// New bytes one fsync may log; more are stored as chunks.
pub(crate) const FSYNC_MAX: usize = 1 << 20;
/// Bytes a file may log between two records of its content: what a log
/// adds to the metadata engine's file (which does not shrink).
pub(crate) const FILE_MAX: usize = 2 << 20;

/// A change to a file's bytes, in the order the program made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Write { offset: u64, bytes: Vec<u8> },
    Truncate(u64),
}

/// What a file changed since its content was last recorded or logged.
#[derive(Debug, Default)]
pub(crate) struct Intent {
    ops: Vec<Op>,
    /// Bytes in `ops`.
    bytes: usize,
    /// Bytes logged since the content was last recorded.
    logged: usize,
    /// Records logged since the content was last recorded.
    records: usize,
    /// A change the log cannot say (a hole punched), or too much to log:
    /// the next fsync records the file whole.
    broken: bool,
}

impl Intent {
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        if self.broken {
            return;
        }
        self.bytes += data.len();
        if self.bytes > FSYNC_MAX {
            self.broken();
            return;
        }
        self.ops.push(Op::Write {
            offset,
            bytes: data.to_vec(),
        });
    }

    pub(crate) fn truncate(&mut self, size: u64) {
        if !self.broken {
            self.ops.push(Op::Truncate(size));
        }
    }

    /// The file changed in a way the log does not record.
    pub(crate) fn broken(&mut self) {
        self.broken = true;
        self.ops = Vec::new();
        self.bytes = 0;
    }

    /// Something was logged since the content was last recorded.
    pub(crate) fn has_log(&self) -> bool {
        self.records > 0
    }

    /// Nothing changed since the last log: the file is as at its last
    /// fsync.
    pub(crate) fn quiet(&self) -> bool {
        self.ops.is_empty() && !self.broken
    }

    /// The content was recorded whole: nothing is logged any more.
    pub(crate) fn recorded(&mut self) {
        *self = Intent::default();
    }

    /// The record an fsync appends (the ops since the last one, then the
    /// file's `size` and `mtime`), or `None` when the file must be
    /// recorded whole. The ops count as logged from here: if the append
    /// fails, the caller calls [`Intent::broken`].
    pub(crate) fn take(&mut self, size: u64, mtime: Timestamp) -> Option<Vec<u8>> {
        if self.broken || self.logged + self.bytes > FILE_MAX {
            return None;
        }
        self.logged += self.bytes;
        self.records += 1;
        self.bytes = 0;
        Some(encode(&std::mem::take(&mut self.ops), size, mtime))
    }
}

/// One record as replayed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub ops: Vec<Op>,
    pub size: u64,
    pub mtime: Timestamp,
}

/// A record whose checksum or layout is wrong.
#[derive(Debug, thiserror::Error)]
#[error("intent record damaged: {0}")]
pub struct Damaged(&'static str);

const WRITE: u8 = 0;
const TRUNCATE: u8 = 1;
const SUM: usize = 16;

/// `[size u64][mtime secs i64, nanos u32][ops][blake3 of all before, 16 bytes]`,
/// an op being `0, offset u64, len u32, bytes` or `1, size u64`, little-endian.
pub(crate) fn encode(ops: &[Op], size: u64, mtime: Timestamp) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        28 + ops
            .iter()
            .map(|o| match o {
                Op::Write { bytes, .. } => 13 + bytes.len(),
                Op::Truncate(_) => 9,
            })
            .sum::<usize>(),
    );
    out.extend_from_slice(&size.to_le_bytes());
    out.extend_from_slice(&mtime.secs.to_le_bytes());
    out.extend_from_slice(&mtime.nanos.to_le_bytes());
    for op in ops {
        match op {
            Op::Write { offset, bytes } => {
                out.push(WRITE);
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Op::Truncate(size) => {
                out.push(TRUNCATE);
                out.extend_from_slice(&size.to_le_bytes());
            }
        }
    }
    let sum = blake3::hash(&out);
    out.extend_from_slice(&sum.as_bytes()[..SUM]);
    out
}

pub(crate) fn decode(record: &[u8]) -> std::result::Result<Record, Damaged> {
    let body_len = record
        .len()
        .checked_sub(SUM)
        .ok_or(Damaged("shorter than its checksum"))?;
    let (body, sum) = record.split_at(body_len);
    if blake3::hash(body).as_bytes()[..SUM] != *sum {
        return Err(Damaged("checksum mismatch"));
    }
    let mut r = body;
    let size = u64::from_le_bytes(take::<8>(&mut r)?);
    let secs = i64::from_le_bytes(take::<8>(&mut r)?);
    let nanos = u32::from_le_bytes(take::<4>(&mut r)?);
    let mut ops = Vec::new();
    while let Some((&tag, rest)) = r.split_first() {
        r = rest;
        ops.push(match tag {
            WRITE => {
                let offset = u64::from_le_bytes(take::<8>(&mut r)?);
                let len = u32::from_le_bytes(take::<4>(&mut r)?) as usize;
                if r.len() < len {
                    return Err(Damaged("a write longer than the record"));
                }
                let (bytes, rest) = r.split_at(len);
                r = rest;
                Op::Write {
                    offset,
                    bytes: bytes.to_vec(),
                }
            }
            TRUNCATE => Op::Truncate(u64::from_le_bytes(take::<8>(&mut r)?)),
            _ => return Err(Damaged("an unknown operation")),
        });
    }
    Ok(Record {
        ops,
        size,
        mtime: Timestamp { secs, nanos },
    })
}

fn take<const N: usize>(r: &mut &[u8]) -> std::result::Result<[u8; N], Damaged> {
    if r.len() < N {
        return Err(Damaged("cut short"));
    }
    let (head, rest) = r.split_at(N);
    *r = rest;
    Ok(head.try_into().expect("N bytes"))
}

/// Replays every intent log a crash left: each file's records are applied
/// in order over its recorded content and the file is recorded whole,
/// then everything is committed. A file whose log is damaged keeps its
/// recorded content (logged as an error); a log of an inode that is gone
/// is dropped.
pub(crate) fn replay(inner: &Inner) -> Result<()> {
    let logs = inner.meta.intents()?;
    if logs.is_empty() {
        return Ok(());
    }
    let mut files = 0;
    for (ino, records) in logs {
        let decoded: std::result::Result<Vec<Record>, Damaged> =
            records.iter().map(|r| decode(r)).collect();
        match decoded {
            Ok(records) => match replay_file(inner, ino, &records) {
                Err(crate::FsError::Meta(meta::MetaError::NotFound)) => {
                    inner.meta.clear_intents(ino)?
                }
                other => other?,
            },
            Err(e) => {
                tracing::error!(
                    file = %inner.describe(ino), error = %e,
                    "an fsync'd change of the file cannot be replayed: it keeps its content as last stored"
                );
                inner.meta.clear_intents(ino)?;
            }
        }
        files += 1;
    }
    inner.commit()?;
    tracing::info!(
        files,
        "replayed the changes fsync'd before the file system was last closed"
    );
    Ok(())
}

/// Applies `records` in order to `f` (its dirty bytes counted in the
/// global total).
fn apply(inner: &Inner, f: &mut FileState, records: &[Record]) -> Result<()> {
    let read = |id: &cas::ChunkId| -> Result<Bytes> { inner.read_one(id) };
    for record in records {
        for op in &record.ops {
            let before = f.held();
            match op {
                Op::Write { offset, bytes } => {
                    f.write(*offset, bytes, record.mtime);
                }
                Op::Truncate(size) => f.truncate(*size, record.mtime, &read)?,
            }
            inner.account(before, f.held());
        }
        if f.size != record.size {
            let before = f.held();
            f.truncate(record.size, record.mtime, &read)?;
            inner.account(before, f.held());
        }
        f.mtime = Some(record.mtime);
        f.mtime_set = false;
    }
    Ok(())
}

fn replay_file(inner: &Inner, ino: InodeId, records: &[Record]) -> Result<()> {
    let state = inner.state(ino)?;
    let recording = inner.recording.read();
    let mut f = state.lock();
    apply(inner, &mut f, records)?;
    let recorded = inner.finalize_left_whole(&mut f);
    drop(f);
    drop(recording);
    inner.release_state(ino, state);
    recorded
}

/// The file `ino` as at its last fsync, from its recorded content and its
/// log, stored as a content of its own (durable at the next commit): what
/// a version takes of an open file written since it was last fsynced. On
/// any error, the content as last recorded (an earlier whole state).
pub(crate) fn logged_whole(inner: &Inner, ino: InodeId) -> Result<LeftWhole> {
    let inode = inner.meta.get(ino)?;
    let recorded = LeftWhole {
        content: inode.content.clone(),
        size: inode.attr.size,
        mtime: inode.attr.mtime,
    };
    match rebuild(inner, inode) {
        Ok(whole) => Ok(whole),
        Err(e) => {
            tracing::warn!(file = %inner.describe(ino), error = %e, "a version takes the file as last recorded, not as last fsynced");
            Ok(recorded)
        }
    }
}

/// The decoded intent records of `ino`, in order.
fn records_of(inner: &Inner, ino: InodeId) -> Result<Vec<Record>> {
    inner
        .meta
        .intents_of(ino)?
        .iter()
        .map(|r| decode(r).map_err(|source| crate::FsError::DamagedIntent { ino, source }))
        .collect()
}

/// A state of `ino` as durable: its recorded content with its intent log
/// applied in memory (dirty, counted in the global total), the log kept
/// until the file is next recorded (the next fsync records it whole).
pub(crate) fn durable_state(inner: &Inner, ino: InodeId) -> Result<FileState> {
    let inode = inner.meta.get(ino)?;
    let records = records_of(inner, ino)?;
    let extents = inner.extents_of(&inode.content)?;
    let mut f = FileState::new(ino, inode.attr.size, inode.content, extents);
    inner.account(0, f.held());
    if let Err(e) = apply(inner, &mut f, &records) {
        inner.account(f.held(), 0);
        return Err(e);
    }
    f.intent = Intent::default();
    if !records.is_empty() {
        f.intent.broken();
    }
    Ok(f)
}

fn rebuild(inner: &Inner, inode: meta::Inode) -> Result<LeftWhole> {
    let ino = inode.id;
    let records = records_of(inner, ino)?;
    let extents = inner.extents_of(&inode.content)?;
    let mut scratch = FileState::new(ino, inode.attr.size, inode.content, extents);
    inner.account(0, scratch.held());
    let applied = apply(inner, &mut scratch, &records);
    let mtime = scratch.mtime.unwrap_or(inode.attr.mtime);
    let content = applied.and_then(|()| {
        if scratch.size as usize <= inner.settings.inline_max {
            let bytes = scratch.read(0, scratch.size, &|ids| inner.read_many(ids))?;
            return Ok(if bytes.is_empty() {
                meta::Content::Empty
            } else {
                meta::Content::Inline(bytes)
            });
        }
        let content = inner.record_chunks(&mut scratch)?;
        if let Some(mut w) = scratch.writer.take() {
            w.seal()?;
            inner.pending.lock().push(w);
        }
        Ok(content)
    });
    inner.account(scratch.held(), 0);
    Ok(LeftWhole {
        content: content?,
        size: scratch.size,
        mtime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..300))
                .prop_map(|(offset, bytes)| Op::Write { offset, bytes }),
            any::<u64>().prop_map(Op::Truncate),
        ]
    }

    proptest! {
        #[test]
        fn records_round_trip(ops in proptest::collection::vec(op(), 0..20), size: u64, secs: i64, nanos in 0u32..1_000_000_000) {
            let mtime = Timestamp { secs, nanos };
            let record = encode(&ops, size, mtime);
            prop_assert_eq!(decode(&record).unwrap(), Record { ops, size, mtime });
        }

        #[test]
        fn a_flipped_bit_is_never_replayed(ops in proptest::collection::vec(op(), 1..8), bit: usize) {
            let mut record = encode(&ops, 7, Timestamp::default());
            let bit = bit % (record.len() * 8);
            record[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode(&record).is_err());
        }
    }

    #[test]
    fn too_much_for_one_fsync_records_the_file_whole_until_it_is_recorded() {
        let mut i = Intent::default();
        i.write(0, &vec![1; FSYNC_MAX]);
        assert!(i.take(FSYNC_MAX as u64, Timestamp::default()).is_some());
        i.write(0, &vec![1; FSYNC_MAX + 1]);
        i.write(0, b"x");
        assert!(i.take(1, Timestamp::default()).is_none());
        i.recorded();
        i.write(0, b"x");
        let r = decode(&i.take(1, Timestamp::default()).unwrap()).unwrap();
        assert_eq!(
            r.ops,
            vec![Op::Write {
                offset: 0,
                bytes: b"x".to_vec()
            }]
        );
    }

    #[test]
    fn a_file_logs_at_most_file_max_between_records() {
        let mut i = Intent::default();
        let mut taken = 0;
        while i.take(0, Timestamp::default()).is_some() {
            taken += 1;
            i.write(0, &vec![0; FSYNC_MAX / 2]);
        }
        assert_eq!(taken, 2 * FILE_MAX / FSYNC_MAX + 1);
    }
}
