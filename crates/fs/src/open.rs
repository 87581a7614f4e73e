//! Open files: a file's state while it is open or has bytes to record
//! (its extent list, dirty runs and write stream), the write path into it
//! (admission control, write-behind), the read path out of it (read-ahead,
//! the chunk cache), and recording its content in the metadata engine.

use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use cas::ChunkId;
use meta::{Content, FileKind, Inode, InodeId, MetaError, Timestamp};
use recipe::Recipe;

use crate::file::FileState;
use crate::metrics::Limit;
use crate::snapview::is_virtual;
use crate::{now, writable, Caller, Fs, FsError, Inner, Result};

/// A stream a reader reads a file by, front to back ([`Fs::read_stream`]):
/// where it ends and how far it has been read ahead. The reader keeps it
/// between reads.
#[derive(Debug)]
pub struct Stream {
    end: u64,
    ahead_until: u64,
}

impl Stream {
    /// A stream that reads no further than `end`.
    pub fn new(end: u64) -> Stream {
        Stream {
            end,
            ahead_until: 0,
        }
    }
}

/// Files up to this size that have no stream of their own are recorded
/// through a stream shared with other small files, so many of them fill
/// one container. Larger files keep their chunks together in their own.
const SMALL_FILE_MAX: u64 = 1 << 20;

impl Fs {
    /// Opens a regular file (one more handle on its state).
    pub fn open(&self, ino: InodeId) -> Result<()> {
        if is_virtual(ino) {
            return self.snap_open(ino);
        }
        let state = self.inner.state(ino)?;
        let mut f = state.lock();
        f.handles += 1;
        // Another client's collection is marking: what this handle reads
        // must outlive it even if that client drops it from the namespace
        // before it marks (gc's `peers`, "opened after the answer").
        if self.inner.store.recording_for_peer() {
            let chunks = f.extents.iter().filter_map(|e| e.chunk);
            let root = match f.content {
                Content::Recipe(id) => Some(id),
                _ => None,
            };
            self.inner.store.retain_for_peer(chunks.chain(root));
        }
        Ok(())
    }

    /// Whether a file is overwritten and read in place: it has fixed-size
    /// chunks (a VM image or a database, by xattr, rule or the detector).
    /// Its readers want the kernel's page cache even when it is large,
    /// where a big file's readers otherwise stream past it.
    pub fn random_access(&self, ino: InodeId) -> Result<bool> {
        if is_virtual(ino) {
            return Ok(false);
        }
        let state = self.inner.state(ino)?;
        let mut f = state.lock();
        self.inner.know_chunking(&mut f)?;
        Ok(f.chunking.block().is_some())
    }

    /// Closes a handle: the last one writes the file behind and records its
    /// content (durable at the next commit), and deletes it if it was
    /// unlinked meanwhile.
    pub fn release(&self, ino: InodeId) -> Result<()> {
        if is_virtual(ino) {
            self.snap_release(ino);
            return Ok(());
        }
        let Some(state) = self.inner.files.lock().get(&ino).cloned() else {
            return Ok(());
        };
        let recording = self.inner.recording.read();
        let mut f = self.inner.lock_settled(&state);
        f.handles = f.handles.saturating_sub(1);
        let wrote = f.changed;
        let result = self
            .inner
            .finalize_left_whole(&mut f)
            .and_then(|()| self.inner.stored_or_waiting(wrote));
        drop(f);
        drop(recording);
        self.inner.release_state(ino, state);
        result
    }

    pub fn read(&self, ino: InodeId, offset: u64, len: u32) -> Result<Vec<u8>> {
        self.read_near(ino, offset, len).map(|(data, _)| data)
    }

    /// [`Fs::read`], also saying, for a random reader, the part of the file
    /// around the read whose chunks it brought into the DRAM cache (whole
    /// chunks, at most [`crate::ahead::AROUND`] bytes): what a reader is
    /// likely to ask for next, which [`Fs::read_cached`] then gives
    /// without a storage read (the mount pushes it into the kernel's page
    /// cache). `None` for other readers.
    pub fn read_near(
        &self,
        ino: InodeId,
        offset: u64,
        len: u32,
    ) -> Result<(Vec<u8>, Option<std::ops::Range<u64>>)> {
        if is_virtual(ino) {
            return Ok((self.snap_read(ino, offset, len)?, None));
        }
        let state = self.inner.state(ino)?;
        let mut f = state.lock();
        let (near, around) = self.inner.near_random_read(&mut f, offset, len);
        let ahead = self.inner.read_ahead(&mut f, offset, len);
        let plan = f.read_plan(offset, len as u64);
        // The chunks are fetched without the file's lock: the kernel's
        // read-ahead requests for the file are served in parallel.
        drop(f);
        self.fetch_planned(ino, state, &plan, &ahead, &near)
            .map(|data| (data, around))
    }

    /// Starts fetching `ahead`, reads `plan`'s chunks (admitting `near`
    /// when a random read decodes them anyway) and releases the file's
    /// state.
    fn fetch_planned(
        &self,
        ino: InodeId,
        state: Arc<Mutex<FileState>>,
        plan: &crate::file::ReadPlan,
        ahead: &[ChunkId],
        near: &[ChunkId],
    ) -> Result<Vec<u8>> {
        self.inner.fetcher.ahead(ahead);
        let out = self
            .inner
            .fetcher
            .get_around(&plan.ids(), near)
            .map(|chunks| plan.assemble(chunks));
        self.inner.release_state(ino, state);
        out
    }

    /// A read that is one step of a stream whose reader says where it
    /// ends (a GET of an object or of a range of it): the chunks of the
    /// next `readahead` bytes of the stream, never past its end, are
    /// fetched ahead in half-window strides, as for a sequential reader.
    /// The file's own access pattern and read position are left alone, so
    /// streams over different parts of one file at once (the ranged GETs a
    /// client sends in parallel) each get their read-ahead instead of
    /// looking like one random reader.
    pub fn read_stream(
        &self,
        ino: InodeId,
        offset: u64,
        len: u32,
        stream: &mut Stream,
    ) -> Result<Vec<u8>> {
        if is_virtual(ino) {
            return self.snap_read(ino, offset, len);
        }
        let state = self.inner.state(ino)?;
        let f = state.lock();
        let window = self.inner.settings.readahead;
        let read_end = offset + len as u64;
        let mut ahead = Vec::new();
        if window > 0 && read_end + window / 2 >= stream.ahead_until {
            let from = stream.ahead_until.max(read_end);
            let to = stream.end.min(read_end + window);
            stream.ahead_until = read_end + window;
            ahead = f.chunks_in(from, to);
        }
        let plan = f.read_plan(offset, len as u64);
        drop(f);
        self.fetch_planned(ino, state, &plan, &ahead, &[])
    }

    /// The parts of `range` of a regular file, as it is now, whose chunks
    /// the DRAM cache holds, each with its offset and bytes: no storage
    /// read, and no reader's access pattern or read-ahead moves.
    pub fn read_cached(
        &self,
        ino: InodeId,
        range: std::ops::Range<u64>,
    ) -> Result<Vec<(u64, Vec<u8>)>> {
        if is_virtual(ino) || range.is_empty() {
            return Ok(Vec::new());
        }
        let state = self.inner.state(ino)?;
        let plan = state.lock().read_plan(range.start, range.end - range.start);
        let out = plan.assemble_cached(|id| self.inner.fetcher.cached(id));
        self.inner.release_state(ino, state);
        Ok(out)
    }

    /// Writes at `offset` as root does; see [`Fs::write_as`].
    pub fn write(&self, ino: InodeId, offset: u64, data: &[u8]) -> Result<u32> {
        self.write_as(ino, offset, data, &Caller::root())
    }

    /// Writes at `offset` for `caller`. A write by anyone but root clears
    /// the file's set-id bits, under the file's lock before its bytes are
    /// taken. Admission control: past the file's or the global dirty limit,
    /// the writer first writes its own dirty bytes behind.
    pub fn write_as(&self, ino: InodeId, offset: u64, data: &[u8], caller: &Caller) -> Result<u32> {
        writable(ino)?;
        // Data already accepted waits for space: taking more would only
        // grow what memory holds for a disk that cannot take it.
        if let Some(e) = self.inner.store.waiting_for_space() {
            return Err(e.into());
        }
        let state = self.inner.state(ino)?;
        let mut f = state.lock();
        if let Some(e) = f.failed.take() {
            drop(f);
            self.inner.release_state(ino, state);
            return Err(e);
        }
        if let Err(e) = self.inner.kill_priv_for(ino, caller) {
            drop(f);
            self.inner.release_state(ino, state);
            return Err(e);
        }
        if let Err(e) = self.inner.know_chunking(&mut f) {
            drop(f);
            self.inner.release_state(ino, state);
            return Err(e);
        }
        let added = f.write(offset, data, now());
        if f.chunking_auto {
            self.inner.watch_write(&mut f, offset, data.len() as u64);
        }
        self.inner.dirty_total.fetch_add(added, Ordering::Relaxed);
        let settings = &self.inner.settings;
        let total = self.inner.dirty_total.load(Ordering::Relaxed);
        // A file's last chunk stays dirty until it is flushed, so a file
        // holding less than two chunks' worth has nothing to store yet,
        // unless so many files are written at once that twice the limit is
        // held: then even its last chunk is stored now.
        let storable = f.dirty_bytes > 2 * self.inner.params.max_chunk();
        let result = if total > settings.total_dirty_max
            && (storable || total > 2 * settings.total_dirty_max)
        {
            // Past the global limit the writer waits until its bytes are
            // stored, so that all files together stay within it.
            let started = std::time::Instant::now();
            f = self.inner.settle(f);
            let applied = self.inner.apply(&mut f, !storable);
            self.inner.recorded.admission_waited(Limit::Total, started);
            applied
        } else if f.dirty_bytes > settings.file_dirty_max {
            // Past the file's limit it waits for the file's apply in
            // flight, then hands its bytes to an applier.
            let started = std::time::Instant::now();
            f = self.inner.settle(f);
            let handed = self.inner.apply_behind(&state, &mut f);
            self.inner.recorded.admission_waited(Limit::File, started);
            handed
        } else {
            Ok(())
        };
        drop(f);
        self.inner.release_state(ino, state);
        result.map(|()| data.len() as u32)
    }

    /// `fallocate(2)`, under the file's lock like a write (space is never
    /// reserved in a deduplicating store):
    /// - `0`: the file becomes at least `offset + length` bytes long;
    /// - `KEEP_SIZE`: nothing changes (there is nothing to allocate);
    /// - `PUNCH_HOLE | KEEP_SIZE`: the range reads zeros and the chunks
    ///   wholly inside it leave the file (see [`crate::punch`]);
    /// - `ZERO_RANGE` (`| KEEP_SIZE`): the range reads zeros, and without
    ///   `KEEP_SIZE` the file grows to its end as with mode `0`.
    ///
    /// Every other mode is not supported; no bytes are invalid; an end
    /// past `i64::MAX` is too big.
    pub fn fallocate(&self, ino: InodeId, offset: u64, length: u64, mode: i32) -> Result<()> {
        use libc::FALLOC_FL_ZERO_RANGE as ZERO;
        use libc::{FALLOC_FL_KEEP_SIZE as KEEP, FALLOC_FL_PUNCH_HOLE as PUNCH};
        writable(ino)?;
        let (zero, grow) = match mode {
            0 => (false, true),
            KEEP => (false, false),
            m if m == PUNCH | KEEP || m == ZERO | KEEP => (true, false),
            ZERO => (true, true),
            _ => return Err(FsError::NotSupported),
        };
        if length == 0 {
            return Err(MetaError::Invalid("fallocate of no bytes").into());
        }
        let end = offset
            .checked_add(length)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or(FsError::TooBig)?;
        if !zero && !grow {
            return Ok(());
        }
        let state = self.inner.state(ino)?;
        let recording = self.inner.recording.read();
        let mut f = self.inner.lock_settled(&state);
        let inner = &self.inner;
        let before = f.held();
        let punched = if zero {
            self.inner.punch(&mut f, offset, end)
        } else {
            Ok(())
        };
        let result = if punched.is_err() {
            punched
        } else if grow && end > f.size {
            let read = |id: &ChunkId| inner.read_one(id);
            let grown = f.truncate(end, now(), &read);
            inner.account(before, f.held());
            grown.and_then(|()| inner.finalize(&mut f))
        } else {
            // Recorded at the next flush or commit: a guest's discards
            // must not each store the file's recipe.
            inner.account(before, f.held());
            Ok(())
        };
        drop(f);
        drop(recording);
        self.inner.release_state(ino, state);
        result
    }

    /// `flush` (on close of a descriptor): records the content, durable at
    /// the next commit.
    pub fn flush(&self, ino: InodeId) -> Result<()> {
        let Some(state) = self.inner.files.lock().get(&ino).cloned() else {
            return Ok(());
        };
        let _recording = self.inner.recording.read();
        let mut f = self.inner.lock_settled(&state);
        let wrote = f.changed;
        self.inner.finalize_left_whole(&mut f)?;
        self.inner.stored_or_waiting(wrote)
    }

    /// `fsync` of a directory: returns when its entries are durable (every
    /// namespace change so far, and the data what is recorded points at).
    /// Open files are not recorded for it: their content is theirs to
    /// fsync.
    pub fn fsync_dir(&self, _ino: InodeId) -> Result<()> {
        // The namespace is durable even while file data waits for space.
        self.inner.commit_synced().map(drop)
    }

    /// Returns when the file's data and metadata are durable: its new
    /// writes logged when they are few (see [`crate::intent`]), else
    /// recorded whole.
    pub fn fsync(&self, ino: InodeId) -> Result<()> {
        if !self.inner.log_intent(ino)? {
            self.flush(ino)?;
        }
        self.inner.commit()
    }
}

/// Why the overwrite judge ([`crate::coverage`]) switched a file.
pub(crate) const OVERWRITTEN: &str = "overwritten in place";

impl Inner {
    pub(crate) fn overlay(&self, inode: &mut Inode) {
        if let Some(state) = self.files.lock().get(&inode.id) {
            let f = state.lock();
            inode.attr.size = f.size;
            if let Some(t) = f.mtime {
                inode.attr.mtime = t;
                if !f.mtime_set {
                    inode.attr.ctime = t;
                }
            }
        }
    }

    /// Whether the file system holds anything of `ino` in memory (open
    /// handles, unwritten or unrecorded data): then its record may be
    /// older than what a read returns.
    pub(crate) fn has_state(&self, ino: InodeId) -> bool {
        self.files.lock().contains_key(&ino)
    }

    /// Makes `mtime` the time recorded with the file's content written
    /// since it was last recorded, if any.
    pub(crate) fn set_unrecorded_mtime(&self, ino: InodeId, mtime: Timestamp) {
        let state = self.files.lock().get(&ino).cloned();
        if let Some(state) = state {
            let mut f = state.lock();
            if f.changed {
                f.mtime = Some(mtime);
                f.mtime_set = true;
            }
        }
    }

    /// Appends the writes of `ino` since its last record or log to its
    /// intent log, for an fsync; `false` when the file must be recorded
    /// whole instead (too much written, an engine without a log, data
    /// waiting for space). An inline file logs too: a journal's header
    /// rewritten is 12 bytes logged, not the whole file recorded again.
    fn log_intent(&self, ino: InodeId) -> Result<bool> {
        let Some(state) = self.files.lock().get(&ino).cloned() else {
            return Ok(false);
        };
        let _recording = self.recording.read();
        let mut f = self.lock_settled(&state);
        if !f.changed || f.failed.is_some() || self.store.waiting_for_space().is_some() {
            return Ok(false);
        }
        let mtime = match f.mtime {
            Some(m) => m,
            None => now(),
        };
        let size = f.size;
        let Some(record) = f.intent.take(size, mtime) else {
            return Ok(false);
        };
        match self.meta.append_intent(ino, &record) {
            Ok(true) => {
                // The file is whole as it is now; what a version takes of
                // it is rebuilt from the log when it is next recorded.
                f.left_whole = None;
                Ok(true)
            }
            Err(e) if e.is_no_space() => {
                // Metadata's disk is full: the chunks may still fit.
                f.intent.broken();
                Ok(false)
            }
            Ok(false) => {
                f.intent.broken();
                Ok(false)
            }
            Err(e) => {
                f.intent.broken();
                Err(e.into())
            }
        }
    }

    /// Counts the data of a file whose name `inode` was just removed or
    /// replaced, when that was its last.
    pub(crate) fn released_with(&self, inode: &Inode) {
        if inode.attr.kind == FileKind::File && inode.attr.nlink <= 1 {
            self.released.fetch_add(inode.attr.size, Ordering::Relaxed);
        }
    }

    pub(crate) fn is_open(&self, ino: InodeId) -> bool {
        self.files
            .lock()
            .get(&ino)
            .is_some_and(|s| s.lock().handles > 0)
    }

    /// The open state of a regular file, loading its extents on first use.
    pub(crate) fn state(&self, ino: InodeId) -> Result<Arc<Mutex<FileState>>> {
        if let Some(s) = self.files.lock().get(&ino) {
            return Ok(s.clone());
        }
        let inode = self.meta.get(ino)?;
        if inode.attr.kind != FileKind::File {
            return Err(match inode.attr.kind {
                FileKind::Dir => MetaError::IsDir.into(),
                _ => FsError::NotFile,
            });
        }
        let extents = self.extents_of(&inode.content)?;
        let state = FileState::new(ino, inode.attr.size, inode.content.clone(), extents);
        let mut files = self.files.lock();
        Ok(files
            .entry(ino)
            .or_insert_with(|| {
                // An inline file's bytes are held as dirty runs from here
                // on, counted until the state is forgotten.
                self.account(0, state.held());
                Arc::new(Mutex::new(state))
            })
            .clone())
    }

    /// Zeroes `lo..hi` of the file (see [`crate::punch`]): an edge chunk
    /// is rewritten through the file's stream.
    fn punch(&self, f: &mut FileState, lo: u64, hi: u64) -> Result<()> {
        let mut writer = match f.writer.take() {
            Some(w) => w,
            None => self.open_stream(f)?,
        };
        let mut rewrite = |id: &ChunkId, zeroed: std::ops::Range<usize>| -> Result<ChunkId> {
            let mut bytes = self.read_one(id)?.to_vec();
            bytes[zeroed].fill(0);
            Ok(writer.write_batch(&[Bytes::from(bytes)])?[0])
        };
        let result = f.punch(lo, hi, now(), &mut rewrite);
        f.writer = Some(writer);
        result
    }

    /// The extents of recorded content (none for inline or empty content).
    pub(crate) fn extents_of(&self, content: &Content) -> Result<Vec<recipe::Extent>> {
        Ok(match content {
            Content::Recipe(root) => {
                let r = Recipe::open(&self.store, *root)?;
                r.extents(0, r.len())?
            }
            _ => Vec::new(),
        })
    }

    /// Forgets the state of a file nobody holds open and that has nothing
    /// left to record; deletes an orphan whose last handle closed.
    pub(crate) fn release_state(&self, ino: InodeId, state: Arc<Mutex<FileState>>) {
        let mut files = self.files.lock();
        let f = state.lock();
        if f.handles > 0 || f.changed || f.writer.is_some() || f.busy() {
            return;
        }
        // An inline file keeps its recorded bytes as dirty runs while its
        // state lives; they stop counting with it. (They once stayed
        // counted, and an inline file reopened was taken off without being
        // added, so the count drifted past the global limit and every write
        // stored its bytes at once, in a container per file.)
        self.account(f.held(), 0);
        drop(f);
        files.remove(&ino);
        drop(files);
        if let Ok(inode) = self.meta.get(ino) {
            if inode.attr.nlink == 0 {
                let _ = self.meta.drop_orphan(ino);
            }
        }
    }

    /// ENOSPC for a close or flush of a file that was written while data
    /// waits for space: its bytes are kept and stored once space is freed,
    /// but a writer that never calls fsync (`cp`) must still hear that
    /// they are not on disk.
    pub(crate) fn stored_or_waiting(&self, wrote: bool) -> Result<()> {
        match self.store.waiting_for_space() {
            Some(e) if wrote => Err(e.into()),
            _ => Ok(()),
        }
    }

    pub(crate) fn account(&self, before: usize, after: usize) {
        if after >= before {
            self.dirty_total
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.dirty_total
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// Writes the file's dirty bytes behind on this thread (no apply may be
    /// in flight for it).
    pub(crate) fn apply(&self, f: &mut FileState, whole: bool) -> Result<()> {
        self.know_chunking(f)?;
        let before = f.held();
        let mut writer = match f.writer.take() {
            Some(w) => w,
            None => self.open_stream(f)?,
        };
        let result = f.apply(whole, self.params, &mut writer, &self.cache);
        f.writer = Some(writer);
        if f.switched {
            self.record_switch(f, OVERWRITTEN);
        }
        self.account(before, f.held());
        result
    }

    /// Records the file's current content in the metadata engine (small
    /// files inline, others as a recipe tree), for the committer, a version
    /// or a truncate: a file open for writing keeps what it was at its last
    /// close or fsync as [`FileState::left_whole`] (read from the engine before
    /// the first such record). Durable at the next commit.
    pub(crate) fn finalize(&self, f: &mut FileState) -> Result<()> {
        if f.changed && f.handles > 0 && f.left_whole.is_none() {
            if f.intent.has_log() {
                if f.intent.quiet() {
                    // As at its last fsync: whole.
                    return self.finalize_left_whole(f);
                }
                f.left_whole = Some(crate::intent::logged_whole(self, f.ino)?);
            } else {
                let inode = self.meta.get(f.ino)?;
                f.left_whole = Some(crate::tree::LeftWhole {
                    content: inode.content,
                    size: inode.attr.size,
                    mtime: inode.attr.mtime,
                });
            }
        }
        self.record(f)
    }

    /// [`Inner::finalize`] for a close or fsync: what is recorded is what
    /// the program left whole.
    pub(crate) fn finalize_left_whole(&self, f: &mut FileState) -> Result<()> {
        self.record(f)?;
        f.left_whole = None;
        Ok(())
    }

    fn record(&self, f: &mut FileState) -> Result<()> {
        if f.changed {
            let content = if f.size as usize <= self.settings.inline_max {
                let bytes = f.read(0, f.size, &|ids| self.read_many(ids))?;
                let before = f.dirty_bytes;
                f.dirty.clear();
                f.dirty_bytes = 0;
                self.account(before, 0);
                if bytes.is_empty() {
                    f.extents.clear();
                    f.touched.everything();
                    Content::Empty
                } else {
                    f.dirty.insert(0, bytes.clone());
                    f.dirty_bytes = bytes.len();
                    self.account(0, bytes.len());
                    f.extents.clear();
                    f.touched.everything();
                    Content::Inline(bytes)
                }
            } else {
                // A small file with no stream of its own writes into a
                // shared one; it is taken back out below, also on error.
                // Shared with other clients, the record is seen at once:
                // its chunks are made durable before it is written.
                let durable = self.settings.close_to_open;
                if f.writer.is_none() && f.size <= SMALL_FILE_MAX {
                    f.writer = Some(self.take_small(self.protection_of(f)?)?);
                    let recorded = self.record_chunks(f);
                    let mut shared = f.writer.take().expect("installed above");
                    let flushed = match (&recorded, durable) {
                        (Ok(_), true) => shared.flush(),
                        _ => Ok(()),
                    };
                    self.give_small(shared);
                    let content = recorded?;
                    flushed?;
                    content
                } else {
                    let content = self.record_chunks(f)?;
                    if let (Some(w), true) = (f.writer.as_mut(), durable) {
                        w.flush()?;
                    }
                    content
                }
            };
            let t = now();
            let mtime = match (f.mtime, f.mtime_set) {
                (Some(m), false) => m,
                _ => t,
            };
            self.meta
                .set_content(f.ino, content.clone(), f.size, mtime)?;
            if let (Some(m), true) = (f.mtime, f.mtime_set) {
                // The time a program set after its last write (the change
                // itself is now).
                let times = meta::SetAttr {
                    mtime: Some(m),
                    ..meta::SetAttr::default()
                };
                self.set_attr_posix(f.ino, &times, t)?;
            }
            self.queue_hints(f.ino, &content, f.size, &f.extents);
            f.content = content;
            f.recorded();
            self.released
                .fetch_add(std::mem::take(&mut f.released), Ordering::Relaxed);
        }
        if f.handles == 0 {
            if let Some(mut w) = f.writer.take() {
                // Sealed now, so a closed file holds no open container; the
                // next commit waits for it to be durable.
                w.seal()?;
                self.pending.lock().push(w);
            }
        }
        Ok(())
    }

    /// Writes the file's dirty bytes and its recipe tree through its
    /// stream (which the caller provides) and returns the content.
    pub(crate) fn record_chunks(&self, f: &mut FileState) -> Result<Content> {
        self.apply(f, true)?;
        // Any failure of an apply in the background is mended now.
        f.failed = None;
        if f.extents_end() < f.size {
            let end = f.extents_end();
            f.touched.touch(end..f.size);
            f.extents.push(recipe::Extent {
                offset: end,
                len: f.size - end,
                chunk: None,
            });
        }
        let writer = f.writer.as_mut().expect("apply opened a stream");
        // The last tree's nodes are known to exist only while it is the
        // recorded content (which garbage collection marks).
        let last = f
            .memo
            .take()
            .filter(|m| f.content == Content::Recipe(m.root()));
        let touched = f.touched.take();
        let memo =
            recipe::store_tree_changed(writer, &f.extents, last.as_ref(), touched.as_deref())?;
        let root = memo.root();
        if cfg!(debug_assertions) {
            // A change to the extents not noted in `touched` would leave
            // a stale leaf: the test suites store every tree both ways.
            let full = recipe::store_tree(writer, f.extents.iter().map(|e| (e.len, e.chunk)))?;
            assert_eq!(
                full, root,
                "a change to {:?}'s extents was not noted",
                f.ino
            );
        }
        f.memo = Some(memo);
        Ok(Content::Recipe(root))
    }

    pub(crate) fn read_one(&self, id: &ChunkId) -> Result<Bytes> {
        if let Some(b) = self.cache.get(id) {
            return Ok(b);
        }
        let data = self.store.read_chunk(id)?;
        self.cache.put(*id, data.clone());
        Ok(data)
    }

    pub(crate) fn read_many(&self, ids: &[ChunkId]) -> Result<Vec<Bytes>> {
        self.fetcher.get_many(ids)
    }

    /// The chunks around a read of a file being read at random (DDFS
    /// admits the surrounding [`crate::ahead::AROUND`] bytes): worth
    /// keeping when a miss decodes them anyway. None for other readers,
    /// whose read-ahead brings what they need and who must not fill the
    /// caches with more. The detector judges the read's region of the
    /// file; until it has a verdict (it tracks a few regions of a file, and
    /// a random reader of a big one moves between many), a read that does
    /// not continue a recent one counts as random. Call before
    /// [`Inner::read_ahead`], which moves the file's read position.
    pub(crate) fn near_random_read(
        &self,
        f: &mut FileState,
        offset: u64,
        len: u32,
    ) -> (Vec<ChunkId>, Option<std::ops::Range<u64>>) {
        use crate::pattern::Access;
        let jumped = offset.abs_diff(f.read_next) > self.settings.readahead / 4;
        let random = match f.read_pattern.observe(offset, len as u64) {
            Some(access) => access == Access::Random,
            None => jumped,
        };
        if !random {
            return (Vec::new(), None);
        }
        let half = crate::ahead::AROUND / 2;
        let from = offset.saturating_sub(half);
        let to = (offset + len as u64 + half).min(f.extents_end());
        let first = f.extents.partition_point(|e| e.offset + e.len <= from);
        let near: Vec<_> = f.extents[first..]
            .iter()
            .take_while(|e| e.offset < to)
            .collect();
        // Whole extents, but never more than AROUND: a big chunk at either
        // end is left out rather than widening the range.
        let start = near
            .iter()
            .map(|e| e.offset)
            .find(|&o| o >= from)
            .unwrap_or(offset);
        let end = near
            .iter()
            .map(|e| e.offset + e.len)
            .take_while(|&e| e <= to)
            .last()
            .unwrap_or(offset);
        let ids = near.iter().filter_map(|e| e.chunk).collect();
        (ids, (start < end).then_some(start..end))
    }

    /// The chunks to fetch so that `readahead` bytes past a sequential
    /// reader are in the cache; asked for in half-window strides. The
    /// kernel's own read-ahead sends several requests at once, which arrive
    /// in any order: one near where the last ended counts as sequential.
    pub(crate) fn read_ahead(&self, f: &mut FileState, offset: u64, len: u32) -> Vec<ChunkId> {
        let window = self.settings.readahead;
        let end = offset + len as u64;
        let sequential = offset.abs_diff(f.read_next) <= window / 4;
        f.read_next = if sequential {
            f.read_next.max(end)
        } else {
            end
        };
        if !sequential || window == 0 || end + window / 2 < f.read_ahead_until {
            return Vec::new();
        }
        let from = f.read_ahead_until.max(end);
        let to = (end + window).min(f.extents_end());
        f.read_ahead_until = end + window;
        f.chunks_in(from, to)
    }
}
