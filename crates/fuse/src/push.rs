//! Pushing a random reader's neighbourhood into the kernel's page cache.
//!
//! A cold random reader of a VM image or a database asks for one 4 KiB
//! page at a time, and every page the kernel does not hold costs a round
//! trip to the daemon. The daemon already decodes the ~128 KiB around each
//! such read into its DRAM cache (DDFS's admission of a random reader's
//! neighbourhood, `fs::Fs::read_near`); this hands those bytes to the
//! kernel as well (`FUSE_NOTIFY_STORE`), so the reader's next pages in the
//! region are page-cache hits that never reach the daemon.
//!
//! The kernel copies stored bytes into its pages whether or not a page is
//! dirty, so a store must never race a writer: with the writeback cache a
//! page can hold a write the daemon has not seen yet, which a store would
//! overwrite. Hence the rule: bytes are pushed only for an inode with no
//! handle open for writing and no size change under way, and the check
//! and the store happen under one read lock that opening for writing,
//! closing such a handle and changing a size take for writing. A handle
//! open for writing is the only way to a dirty page (a shared writable
//! mapping keeps its handle open), and the kernel writes a handle's dirty
//! pages back before it releases it. The daemon's other writers (the S3
//! gateway) write a temporary file and rename it over the name, so they
//! never change the bytes of an inode the kernel caches.
//!
//! The lock is never taken before a request is answered, so a store
//! waiting for a page that a reader holds locked (waiting for the daemon's
//! answer) always gets it.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::OnceLock;

use fs::Fs;
use meta::InodeId;
use parking_lot::RwLock;

/// Pages are pushed whole (the kernel marks a partly stored page as not
/// up to date anyway).
const PAGE: u64 = 4096;

#[derive(Default, Debug)]
pub(crate) struct Pushes {
    notifier: OnceLock<fuser::Notifier>,
    /// Inodes with a handle open for writing or a size change under way,
    /// with how many.
    writing: RwLock<HashMap<InodeId, u32>>,
}

impl Pushes {
    /// Set once the session exists, before it serves a request.
    pub(crate) fn set_notifier(&self, notifier: fuser::Notifier) {
        let _ = self.notifier.set(notifier);
    }

    /// Marks `ino` as being written (a handle opened for writing, a size
    /// change starting): no store for it until [`Pushes::done_writing`].
    /// Waits for the stores under way.
    pub(crate) fn writing(&self, ino: InodeId) {
        *self.writing.write().entry(ino).or_default() += 1;
    }

    pub(crate) fn done_writing(&self, ino: InodeId) {
        let mut writing = self.writing.write();
        if let Some(n) = writing.get_mut(&ino) {
            *n -= 1;
            if *n == 0 {
                writing.remove(&ino);
            }
        }
    }

    /// Pushes the whole pages of `around` that the daemon's DRAM cache
    /// holds, but those of `read` (answered already), into the kernel's
    /// page cache, if nobody writes `ino`. Returns the bytes pushed.
    pub(crate) fn push(
        &self,
        fs: &Fs,
        ino: InodeId,
        around: Range<u64>,
        read: Range<u64>,
    ) -> usize {
        let Some(notifier) = self.notifier.get() else {
            return 0;
        };
        let writing = self.writing.read();
        if writing.contains_key(&ino) {
            return 0;
        }
        let runs = match fs.read_cached(ino, around) {
            Ok(runs) => runs,
            Err(_) => return 0,
        };
        // The read's own pages are answered already.
        let (a, b) = (read.start / PAGE * PAGE, read.end.next_multiple_of(PAGE));
        let mut pushed = 0;
        for (at, bytes) in &runs {
            let (start, end) = (
                at.next_multiple_of(PAGE),
                (at + bytes.len() as u64) / PAGE * PAGE,
            );
            for part in [start..end.min(a), start.max(b)..end] {
                if part.is_empty() {
                    continue;
                }
                let slice = &bytes[(part.start - at) as usize..(part.end - at) as usize];
                match notifier.store(crate::convert::ino(ino), part.start, slice) {
                    Ok(()) => pushed += slice.len(),
                    // The kernel forgot the inode, or the mount is going away.
                    Err(e) => tracing::debug!(?ino, error = %e, "page-cache store refused"),
                }
            }
        }
        drop(writing);
        pushed
    }
}
