//! The committer: data first, then the metadata that reaches it, in
//! batches on an interval, and at `fsync`, unmount and shutdown.
//!
//! **Lock order** (a thread holding one takes only those below it):
//! 1. `history` (versions and garbage collection's marking, see
//!    [`crate::history`]);
//! 2. `commit_lock` (one commit at a time);
//! 3. `recording`: read while a file's content is recorded (chunks, then
//!    the metadata pointing at them), write by a commit from its first
//!    flush to the metadata sync;
//! 4. `files` (the open-file table: held only to find, add or drop a
//!    state, never while waiting);
//! 5. one file's `FileState` (through `lock_settled`: no apply of it in
//!    flight), never two at once;
//! 6. the leaves, held briefly and taking nothing else but the metadata
//!    engine's: `modes` (a mode and its ACL), `small`, `pending`, `rules`,
//!    `names`, the chunk cache's and `.snapshots`' own.

use parking_lot::Mutex;
use std::sync::Arc;

use cas::StreamWriter;
use meta::InodeId;

use crate::file::FileState;
use crate::{Fs, FsError, Inner, Result};
use std::sync::atomic::Ordering;

impl Fs {
    /// Records every open file's content and makes everything durable.
    pub fn sync_all(&self) -> Result<()> {
        self.inner.sync_all()
    }

    /// Makes everything durable and stops the committer.
    pub fn shutdown(&self) -> Result<()> {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        let mut result = self.inner.sync_all();
        if let (Err(_), Some(waiting)) = (&result, self.inner.store.waiting_for_space()) {
            result = Err(FsError::NotStored {
                files: self.inner.unstored_files(),
                source: Box::new(waiting),
            });
        }
        // A file system that is only ever mounted briefly never reaches the
        // version timer: unmount leaves a version, so `cairn recover` always
        // has one to rebuild from (none is written when nothing changed).
        if result.is_ok() && !self.inner.settings.version_interval.is_zero() {
            match self.inner.write_version() {
                Err(e @ FsError::HistoryPaused { .. }) => {
                    tracing::info!("no version written at unmount: {e}")
                }
                Err(e) => {
                    tracing::error!(error = %e, "writing a version of the file system at unmount failed")
                }
                Ok(_) => {}
            }
        }
        self.inner.fetcher.close();
        *self.inner.stop.0.lock() = true;
        self.inner.stop.1.notify_all();
        if let Some(t) = self.committer.lock().take() {
            let _ = t.join();
        }
        // The store's index commits on the write path are not synced.
        if let Err(e) = self.inner.store.persist_index() {
            tracing::error!(error = %e, "making the chunk index durable at unmount failed");
            result = result.and(Err(e.into()));
        }
        result
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl Inner {
    /// Flushes every stream with new chunks, then syncs the metadata: data
    /// is always durable before the metadata that reaches it.
    /// Fails with ENOSPC while data waits for space, although everything
    /// else was made durable (see [`Inner::commit_synced`]).
    pub(crate) fn commit(&self) -> Result<()> {
        match self.commit_synced()? {
            Some(waiting) => Err(waiting.into()),
            None => Ok(()),
        }
    }

    /// [`Inner::commit`] that counts a commit made durable without the
    /// data waiting for space (and the records reaching it) as done: the
    /// namespace is durable. Returns what waits, if anything does.
    pub(crate) fn commit_synced(&self) -> Result<Option<cas::CasError>> {
        let _guard = self.commit_lock.lock();
        let started = std::time::Instant::now();
        let result = self.commit_locked();
        self.recorded
            .commit_done(started, matches!(result, Ok(None)));
        result
    }

    /// [`Inner::commit_synced`], under the commit lock.
    fn commit_locked(&self) -> Result<Option<cas::CasError>> {
        let _recording = self.recording.write();
        let pending: Vec<StreamWriter> = std::mem::take(&mut *self.pending.lock());
        // Every stream is sealed before any is waited for, so their
        // containers reach the store's I/O thread together and share its
        // syncs; every stream is flushed even after one failed.
        let mut first_error = None;
        let mut waits = Vec::new();
        let mut start = |w: &mut StreamWriter| match w.start_flush() {
            Ok(durable) => waits.push(durable),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        };
        for mut w in pending {
            start(&mut w);
        }
        // No file is being recorded, so every shared stream is idle here.
        for w in self.small.lock().iter_mut() {
            start(w);
        }
        let open: Vec<Arc<Mutex<FileState>>> = self.files.lock().values().cloned().collect();
        // Open files' streams are sealed under their lock and waited for
        // without it, so a writer goes on while the disk drains.
        for state in open {
            if let Some(w) = self.lock_settled(&state).writer.as_mut() {
                waits.push(w.start_flush()?);
            }
        }
        for durable in waits {
            if let Err(e) = durable.wait() {
                first_error.get_or_insert(e);
            }
        }
        // A container a full branch refused waits for space; anything else
        // that failed fails the commit (tried again at the next interval).
        if let Some(e) = first_error.filter(|e| !e.is_no_space()) {
            return Err(e.into());
        }
        // Records set since the last sync that reach a container waiting
        // for space go back to the files' durable content; the rest (the
        // namespace, the files whose data is stored) is made durable.
        let waiting = self.store.waiting_for_space();
        if waiting.is_some() {
            self.revert_waiting()?;
        }
        // The chunks of the files recorded since the last commit are in
        // sealed containers now: their entries can say where (not while a
        // container waits: it may never be stored).
        if waiting.is_none() {
            self.give_queued_hints();
        }
        self.meta.sync()?;
        Ok(waiting)
    }

    pub(crate) fn sync_all(&self) -> Result<()> {
        let open: Vec<(InodeId, Arc<Mutex<FileState>>)> = self
            .files
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        for (ino, state) in open {
            let recording = self.recording.read();
            let mut f = self.lock_settled(&state);
            self.finalize(&mut f)?;
            drop(f);
            drop(recording);
            self.release_state(ino, state);
        }
        self.commit()
    }

    pub(crate) fn commit_loop(&self) {
        let (lock, cv) = &self.stop;
        let mut last_version = std::time::Instant::now();
        let mut stopped = lock.lock();
        while !*stopped {
            cv.wait_for(&mut stopped, self.settings.commit_interval);
            if *stopped {
                break;
            }
            drop(stopped);
            if let Err(e) = self.sync_all() {
                tracing::error!(error = %e, "the background commit failed; it is retried at the next interval");
            }
            let every = self.settings.version_interval;
            if !every.is_zero() && last_version.elapsed() >= every {
                last_version = std::time::Instant::now();
                match self.write_version() {
                    // Written at the next interval after the collection.
                    Err(FsError::HistoryPaused { .. }) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "writing a version of the file system failed")
                    }
                    Ok(_) => {}
                }
            }
            stopped = lock.lock();
        }
    }
}
