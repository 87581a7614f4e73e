//! Directory listings: one per `opendir`, loaded from `fs` a page at a
//! time, so that the offsets handed to the kernel stay valid while the
//! directory changes.

use parking_lot::Mutex;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fs::FsError;
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, ReplyDirectory, ReplyDirectoryPlus, ReplyOpen,
};
use meta::{FileKind, InodeId};

use crate::convert::{file_attr, file_type, ino};

/// Entries whose attributes `readdirplus` reads at once: about what one
/// reply holds (a page of the kernel's buffer takes some 25 entries with
/// their attributes), so few reads are wasted when the reply fills.
const ATTR_BATCH: usize = 32;
use crate::ops::CairnFs;

/// Directory entries fetched from `fs` at a time.
const DIR_PAGE: usize = 1024;

struct DirEntryOut {
    name: Vec<u8>,
    ino: InodeId,
    kind: FileKind,
}

/// The entries of one open directory, loaded a page at a time. An entry's
/// offset is its index + 1 and the list only grows until the kernel
/// rewinds (offset 0), so offsets stay valid while entries are added to or
/// removed from the directory.
struct DirListing {
    entries: Vec<DirEntryOut>,
    complete: bool,
}

pub(crate) struct DirHandle {
    ino: InodeId,
    listing: Mutex<DirListing>,
}

impl CairnFs {
    fn dir_handle(&self, fh: FileHandle) -> Option<Arc<DirHandle>> {
        self.dirs.lock().get(&fh.0).cloned()
    }

    fn rewind(&self, h: &DirHandle, l: &mut DirListing) {
        l.entries.clear();
        l.entries.push(DirEntryOut {
            name: b".".to_vec(),
            ino: h.ino,
            kind: FileKind::Dir,
        });
        l.entries.push(DirEntryOut {
            name: b"..".to_vec(),
            // A directory removed meanwhile answers itself.
            ino: self.fs.parent(h.ino).unwrap_or(h.ino),
            kind: FileKind::Dir,
        });
        l.complete = false;
    }

    /// Makes sure entry `i` is loaded if the directory has one; false at
    /// the end of the directory.
    fn load_upto(&self, h: &DirHandle, l: &mut DirListing, i: usize) -> Result<bool, FsError> {
        while i >= l.entries.len() {
            if l.complete {
                return Ok(false);
            }
            let after = if l.entries.len() > 2 {
                Some(l.entries.last().expect("non-empty").name.clone())
            } else {
                None
            };
            let page = match self.fs.readdir(h.ino, after.as_deref(), DIR_PAGE) {
                Ok(page) => page,
                // Removed while open: an empty directory from here on.
                Err(e) if e.errno() == libc::ENOENT => Vec::new(),
                Err(e) => return Err(e),
            };
            if page.len() < DIR_PAGE {
                l.complete = true;
            }
            l.entries.extend(page.into_iter().map(|e| DirEntryOut {
                name: e.name,
                ino: e.ino,
                kind: e.kind,
            }));
        }
        Ok(true)
    }

    /// `opendir`: a new listing of `ino`, from its start.
    pub(crate) fn open_dir(&self, ino: InodeId, reply: ReplyOpen) {
        match self.fs.getattr(ino) {
            Ok(inode) if inode.attr.kind != FileKind::Dir => return reply.error(Errno::ENOTDIR),
            Ok(_) => {}
            Err(e) => return reply.error(self.fail("opendir", ino, &e)),
        }
        let h = DirHandle {
            ino,
            listing: Mutex::new(DirListing {
                entries: Vec::new(),
                complete: false,
            }),
        };
        self.rewind(&h, &mut h.listing.lock());
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().insert(fh, Arc::new(h));
        reply.opened(FileHandle(fh), FopenFlags::empty());
    }

    /// `readdir`: the entries of listing `fh` from `offset` on.
    pub(crate) fn list(&self, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let Some(h) = self.dir_handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        let mut l = h.listing.lock();
        if offset == 0 {
            self.rewind(&h, &mut l);
        }
        let mut i = offset as usize;
        loop {
            match self.load_upto(&h, &mut l, i) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => return reply.error(self.fail("readdir", h.ino, &e)),
            }
            let e = &l.entries[i];
            let name = OsStr::from_bytes(&e.name);
            if reply.add(ino(e.ino), i as u64 + 1, file_type(e.kind), name) {
                break;
            }
            i += 1;
        }
        reply.ok();
    }

    /// `readdirplus`: as [`CairnFs::list`], with each entry's attributes.
    pub(crate) fn list_plus(&self, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let Some(h) = self.dir_handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        let mut l = h.listing.lock();
        if offset == 0 {
            self.rewind(&h, &mut l);
        }
        let mut i = offset as usize;
        let mut added = 0usize;
        // Attributes of the next entries, read ahead together: one request
        // to the metadata engine per batch, not one per entry.
        let mut ahead: std::collections::VecDeque<Result<meta::Inode, FsError>> =
            Default::default();
        loop {
            match self.load_upto(&h, &mut l, i) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if added == 0 => return reply.error(self.fail("readdir", h.ino, &e)),
                Err(_) => break,
            }
            // The kernel ignores the attributes of `.` and `..`; they get
            // the directory's own.
            let target = |i: usize, e: &DirEntryOut| if i < 2 { h.ino } else { e.ino };
            if ahead.is_empty() {
                let end = l.entries.len().min(i + ATTR_BATCH);
                let inos: Vec<InodeId> = (i..end).map(|j| target(j, &l.entries[j])).collect();
                ahead.extend(self.fs.getattr_many(&inos));
            }
            let e = &l.entries[i];
            let target = target(i, e);
            let inode = match ahead.pop_front().expect("read ahead above") {
                Ok(inode) => inode,
                // Gone since it was listed: skip it.
                Err(err) if err.errno() == libc::ENOENT => {
                    i += 1;
                    continue;
                }
                Err(err) if added == 0 => return reply.error(self.fail("readdir", target, &err)),
                Err(_) => break,
            };
            let mut attr = file_attr(inode.id, &inode.attr);
            attr.ino = ino(e.ino);
            let name = OsStr::from_bytes(&e.name);
            if reply.add(
                ino(e.ino),
                i as u64 + 1,
                name,
                &self.ttl,
                &attr,
                Generation(0),
            ) {
                break;
            }
            added += 1;
            i += 1;
        }
        reply.ok();
    }
}
