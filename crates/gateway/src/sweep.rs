//! Housekeeping: what a gateway killed mid-request (or a client that never
//! came back) leaves behind — a PUT's temporary file `.cairn-put.*`, a
//! multipart upload never completed nor aborted — is removed once it has
//! not changed for a configured age, at start and then periodically, on a
//! thread of its own.

use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fs::Fs;
use meta::{FileKind, InodeId};

use crate::names::UPLOAD_PREFIX;

/// Entries one readdir call returns: the walk holds at most this many
/// directories per level of the tree.
const PAGE: usize = 256;
/// How often a sweep runs after the first.
pub const EVERY: Duration = Duration::from_secs(3600);

/// What one sweep removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub temporary_files: u64,
    pub uploads: u64,
}

/// Sweeps the buckets at once and then every [`EVERY`] until `stop` says so (or its
/// sender is gone).
pub fn run(fs: Arc<Fs>, age: Duration, stop: Receiver<()>) {
    let seen = std::cell::Cell::new(false);
    let stopped = || {
        if !seen.get() && !matches!(stop.try_recv(), Err(TryRecvError::Empty)) {
            seen.set(true);
        }
        seen.get()
    };
    loop {
        match sweep(&fs, age, stopped) {
            Ok(s) if s != Swept::default() => tracing::info!(
                temporary_files = s.temporary_files,
                uploads = s.uploads,
                "the gateway removed what abandoned requests left"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "the gateway's sweep of abandoned uploads failed"),
        }
        if seen.get() {
            return;
        }
        match stop.recv_timeout(EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
    }
}

/// Whether an inode last changed more than `age` ago.
fn stale(fs: &Fs, ino: InodeId, age: Duration) -> Result<bool, fs::FsError> {
    let t = match fs.getattr(ino) {
        Ok(i) => i.attr.mtime,
        // Gone meanwhile (its PUT completed or failed).
        Err(e) if e.errno() == libc::ENOENT => return Ok(false),
        Err(e) => return Err(e),
    };
    let changed = UNIX_EPOCH + Duration::new(t.secs.max(0) as u64, t.nanos);
    Ok(SystemTime::now()
        .duration_since(changed)
        .is_ok_and(|d| d > age))
}

/// Whether a name in the root is a bucket's: only buckets are swept.
fn is_bucket(name: &[u8]) -> bool {
    std::str::from_utf8(name).is_ok_and(s3s::path::check_bucket_name)
}

/// One walk of every bucket (iterative: a stack of
/// directories with where their listing stopped), removing temporary files
/// and upload directories unchanged for `age`. Ends early once `stopped`
/// says so (asked between pages).
pub fn sweep(fs: &Fs, age: Duration, stopped: impl Fn() -> bool) -> Result<Swept, fs::FsError> {
    let mut swept = Swept::default();
    let mut stack: Vec<(InodeId, Option<Vec<u8>>)> = vec![(InodeId::ROOT, None)];
    while let Some((dir, after)) = stack.pop() {
        if stopped() {
            break;
        }
        let page = match fs.readdir(dir, after.as_deref(), PAGE) {
            Ok(p) => p,
            // Removed while the walk was below it.
            Err(e) if e.errno() == libc::ENOENT => continue,
            Err(e) => return Err(e),
        };
        let Some(last) = page.last() else { continue };
        stack.push((dir, Some(last.name.clone())));
        for e in page {
            if fs::is_virtual(e.ino) || (dir == InodeId::ROOT && !is_bucket(&e.name)) {
                continue;
            }
            let ours = e.name.starts_with(UPLOAD_PREFIX.as_bytes());
            match (ours, e.kind) {
                (true, FileKind::File) if stale(fs, e.ino, age)? => match fs.unlink(dir, &e.name) {
                    Ok(()) => swept.temporary_files += 1,
                    Err(e) if e.errno() == libc::ENOENT => {}
                    Err(e) => return Err(e),
                },
                (true, FileKind::Dir) if stale(fs, e.ino, age)? => {
                    remove_upload(fs, dir, &e.name, e.ino)?;
                    swept.uploads += 1;
                }
                (false, FileKind::Dir) => stack.push((e.ino, None)),
                _ => {}
            }
        }
    }
    if swept != Swept::default() {
        fs.sync_all()?;
    }
    Ok(swept)
}

/// Removes an upload's directory and its parts (files only: an upload
/// holds nothing else).
fn remove_upload(fs: &Fs, parent: InodeId, name: &[u8], dir: InodeId) -> Result<(), fs::FsError> {
    loop {
        let page = fs.readdir(dir, None, PAGE)?;
        if page.is_empty() {
            break;
        }
        for e in page {
            fs.unlink(dir, &e.name)?;
        }
    }
    fs.rmdir(parent, name)
}
