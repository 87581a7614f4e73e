//! The operations: each kernel request becomes one `fs` call, its result
//! one reply (an errno through [`FsError::errno`]).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fs::{Fs, FsError};
use fuser::{
    AccessFlags, CopyFileRangeFlags, Errno, FileHandle, Filesystem, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use meta::{Content, FileKind, InodeId, NewInode, SetAttr, NAME_MAX};

use crate::convert::{
    caller, check_name, empty_attr, file_attr, id, mknod_kind, open_flags, rename_flags,
    reply_xattr, time_or_now, writer, xattr_flags, xattr_list, BLOCK_SIZE,
};
use crate::dir::DirHandle;
use crate::metrics::{FuseMetrics, Timer};
use crate::session::{MountOptions, Shared};

/// How long the kernel may cache attributes and directory entries
/// (including negative ones) before asking again; 0 on a close-to-open
/// mount ([`MountOptions::close_to_open`]), whose other clients change them.
const TTL: Duration = Duration::from_secs(1);
/// Files whose attributes at their last open a close-to-open mount
/// remembers; past it the memory is cleared (costing only page-cache
/// drops at the next opens).
const OPENED_MAX: usize = 1 << 16;
/// The largest write the kernel is asked to send in one request.
const MAX_WRITE: u32 = 1 << 20;
/// The file handle of a read-only handle of a file read in place, whose
/// random reads get their neighbours pushed into the page cache
/// (`crate::push`); every other handle is 0.
const PUSHING: u64 = 1;
/// Files up to this size are not asked whether they are read in place at
/// open (the kernel's read-ahead covers most of a small file anyway).
const PUSH_MIN: u64 = 1 << 20;
/// A cap on read-ahead so that fuser's page count stays representable.
const MAX_READAHEAD: u32 = 16 << 20;

/// Free blocks reported by `statfs` when a branch cannot tell (an object
/// store grows as needed), and free inodes (the namespace has no fixed table).
const FREE_BLOCKS: u64 = 1 << 40;
const FREE_FILES: u64 = 1 << 32;

/// A file's size, mtime and ctime at its last open.
type Seen = (u64, meta::Timestamp, meta::Timestamp);

/// The `fuser` file system: `fs` and the open directory listings.
pub(crate) struct CairnFs {
    pub(crate) fs: Arc<Fs>,
    pub(crate) dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    pub(crate) next_fh: AtomicU64,
    shared: Arc<Shared>,
    page_cache_max: u64,
    writeback_cache: bool,
    metrics: Option<Arc<FuseMetrics>>,
    read_only: bool,
    pub(crate) ttl: Duration,
    /// On a close-to-open mount, each file's (size, mtime, ctime) when it
    /// was last opened: the page cache is kept at an open only if they did
    /// not change (see [`crate::convert::open_flags`]). `None` otherwise.
    opened: Option<Mutex<HashMap<InodeId, Seen>>>,
}

impl CairnFs {
    pub(crate) fn new(fs: Arc<Fs>, shared: Arc<Shared>, opts: &MountOptions) -> CairnFs {
        CairnFs {
            fs,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            shared,
            page_cache_max: opts.page_cache_max,
            // Nothing to write back on a read-only mount; a close-to-open
            // one must see the other clients' sizes.
            writeback_cache: opts.writeback_cache && !opts.read_only && !opts.close_to_open,
            metrics: opts.metrics.clone(),
            read_only: opts.read_only,
            ttl: if opts.close_to_open {
                Duration::ZERO
            } else {
                TTL
            },
            opened: opts.close_to_open.then(Default::default),
        }
    }

    /// Whether the kernel's cached pages of a file being opened may be
    /// kept: always, unless this is a close-to-open mount and the file
    /// changed (another client wrote it) since its last open here.
    fn cache_still_valid(&self, inode: &meta::Inode) -> bool {
        let Some(opened) = &self.opened else {
            return true;
        };
        let now = (inode.attr.size, inode.attr.mtime, inode.attr.ctime);
        let mut opened = opened.lock();
        if opened.len() >= OPENED_MAX {
            opened.clear();
        }
        opened.insert(inode.id, now) == Some(now)
    }

    /// Times a request of kind `op` (when figures are kept) until the
    /// guard drops.
    /// See [`crate::push`]. Called after the read was answered.
    fn push(&self, ino: InodeId, around: std::ops::Range<u64>, read: std::ops::Range<u64>) {
        let pushed = self.shared.pushes.push(&self.fs, ino, around, read);
        if let (Some(m), true) = (&self.metrics, pushed > 0) {
            m.transferred("pushed", pushed);
        }
    }

    fn timed(&self, op: &'static str) -> Option<Timer<'_>> {
        self.metrics.as_ref().map(|m| m.time(op))
    }

    /// A new inode's description: owned by the caller, with the mode it
    /// asked for (`fs` applies the directory's ACL or the umask, and a
    /// set-group-id directory's group).
    fn new_inode(
        req: &Request,
        kind: FileKind,
        perm: u32,
        rdev: u32,
        content: Content,
    ) -> NewInode {
        NewInode {
            kind,
            perm: (perm & 0o7777) as u16,
            uid: req.uid(),
            gid: req.gid(),
            rdev,
            content,
            xattrs: Vec::new(),
        }
    }

    fn make(&self, parent: InodeId, name: &[u8], new: NewInode, umask: u32, reply: ReplyEntry) {
        match self
            .fs
            .create_posix(parent, name, new, (umask & 0o777) as u16)
        {
            Ok(inode) => reply.entry(&self.ttl, &file_attr(inode.id, &inode.attr), Generation(0)),
            Err(e) => reply.error(self.fail("create", parent, &e)),
        }
    }

    /// The errno `op` on `ino` answers for `e`. An I/O error reaches a
    /// caller only here, so it is logged here, once, with the file and the
    /// whole chain of causes; so is a full disk, which an operator must see.
    pub(crate) fn fail(&self, op: &'static str, ino: InodeId, e: &FsError) -> Errno {
        let code = e.errno();
        if code == libc::EIO || code == libc::ENOSPC {
            let mut cause = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                let text = s.to_string();
                if !cause.contains(&text) {
                    cause = format!("{cause}: {text}");
                }
                source = s.source();
            }
            let file = self.fs.describe(ino);
            if code == libc::EIO {
                tracing::error!(op, file = %file, cause = %cause, "I/O error returned to the caller");
            } else {
                tracing::warn!(op, file = %file, cause = %cause, "no space left: returned ENOSPC");
            }
        }
        Errno::from_i32(code)
    }

    /// Answers an operation that returns nothing: ok, or its errno.
    fn reply_empty(
        &self,
        op: &'static str,
        ino: InodeId,
        reply: ReplyEmpty,
        result: fs::Result<()>,
    ) {
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(self.fail(op, ino, &e)),
        }
    }

    fn finish_session(&self, sync: Option<Result<(), FsError>>) {
        let mut state = self.shared.state.lock();
        if let Some(Err(e)) = sync {
            state.sync_error = Some(e);
        }
        state.ended = true;
        self.shared.ended.notify_all();
    }
}

impl Drop for CairnFs {
    fn drop(&mut self) {
        // `destroy` has normally said so already; this covers a session that
        // ended some other way.
        self.finish_session(None);
    }
}

impl Filesystem for CairnFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        for flag in [
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_MAX_PAGES,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
            // The engine's operations are atomic: lookups and readdirs of
            // one directory may run in parallel.
            InitFlags::FUSE_PARALLEL_DIROPS,
            // A symlink's target never changes.
            InitFlags::FUSE_CACHE_SYMLINKS,
            // Set-id bits are cleared by `fs` (`write_as`, `setattr_as`),
            // so the kernel need not ask for security.capability before
            // every write: one round trip less per write.
            InitFlags::FUSE_HANDLE_KILLPRIV_V2,
            // Shared mappings of a file opened with `DIRECT_IO` (see
            // `open_flags`); without it they fail with ENODEV.
            InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP,
            // The kernel enforces POSIX ACLs and hands the ACL xattrs to
            // `fs`, which keeps them in step with the mode.
            InitFlags::FUSE_POSIX_ACL,
            // Create modes arrive with the umask not applied: under a
            // directory with a default ACL the umask must not apply, so
            // `fs` decides (the kernel would mask them before sending).
            InitFlags::FUSE_DONT_MASK,
        ] {
            // A flag the kernel lacks is simply left off.
            let _ = config.add_capabilities(flag);
        }
        if self.writeback_cache {
            // The kernel merges small writes in its page cache and owns the
            // size and mtime of a file with dirty pages; it writes them
            // back before a flush, fsync, truncate, fallocate or copy
            // reaches `fs`, and writes through when set-id bits must go.
            let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
        }
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        // The kernel offers its largest read-ahead; only less can be asked.
        if let Err(max) = config.set_max_readahead(u32::MAX) {
            let _ = config.set_max_readahead(max.min(MAX_READAHEAD));
        }
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn destroy(&mut self) {
        // Unmounted: record every open file's content and make it durable.
        let result = self.fs.sync_all();
        self.finish_session(Some(result));
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _timer = self.timed("lookup");
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let parent = id(parent);
        match self.fs.lookup(parent, name) {
            Ok(inode) => reply.entry(&self.ttl, &file_attr(inode.id, &inode.attr), Generation(0)),
            Err(e) if e.errno() == libc::ENOENT => {
                // A negative entry: the kernel remembers the name is absent
                // for TTL (every create goes through the kernel and
                // replaces it).
                reply.entry(
                    &self.ttl,
                    &file_attr(InodeId(0), &empty_attr()),
                    Generation(0),
                );
            }
            Err(e) => reply.error(self.fail("lookup", parent, &e)),
        }
    }

    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {
        // Inodes live in the metadata engine; nothing is held per lookup.
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _timer = self.timed("getattr");
        match self.fs.getattr(id(ino)) {
            Ok(inode) => reply.attr(&self.ttl, &file_attr(inode.id, &inode.attr)),
            Err(e) => reply.error(self.fail("getattr", id(ino), &e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _timer = self.timed("setattr");
        // ctime is the engine's: every change sets it.
        let changes = SetAttr {
            perm: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
        };
        // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves the set-id bits a
        // truncate clears to `fs`.
        // A size change is a write no handle may carry: no store while it runs.
        if size.is_some() {
            self.shared.pushes.writing(id(ino));
        }
        let changed = self.fs.setattr_as(id(ino), &changes, size, &writer(req));
        if size.is_some() {
            self.shared.pushes.done_writing(id(ino));
        }
        match changed {
            Ok(inode) => reply.attr(&self.ttl, &file_attr(inode.id, &inode.attr)),
            Err(e) => reply.error(self.fail("setattr", id(ino), &e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _timer = self.timed("readlink");
        match self.fs.readlink(id(ino)) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(self.fail("readlink", id(ino), &e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _timer = self.timed("mknod");
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let Some(kind) = mknod_kind(mode) else {
            return reply.error(Errno::EINVAL);
        };
        let rdev = match kind {
            FileKind::CharDevice | FileKind::BlockDevice => rdev,
            _ => 0,
        };
        let new = Self::new_inode(req, kind, mode, rdev, Content::Empty);
        self.make(id(parent), name, new, umask, reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let _timer = self.timed("mkdir");
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let new = Self::new_inode(req, FileKind::Dir, mode, 0, Content::Empty);
        self.make(id(parent), name, new, umask, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.timed("unlink");
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        self.reply_empty(
            "unlink",
            id(parent),
            reply,
            self.fs.unlink(id(parent), name),
        )
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.timed("rmdir");
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        self.reply_empty("rmdir", id(parent), reply, self.fs.rmdir(id(parent), name))
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _timer = self.timed("symlink");
        let name = match check_name(link_name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let target = target.as_os_str().as_bytes().to_vec();
        let new = Self::new_inode(req, FileKind::Symlink, 0o777, 0, Content::Inline(target));
        self.make(id(parent), name, new, 0, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("rename");
        let (name, newname) = match (check_name(name), check_name(newname)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        let flags = match rename_flags(flags) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let (parent, newparent) = (id(parent), id(newparent));
        self.reply_empty(
            "rename",
            parent,
            reply,
            self.fs.rename(parent, name, newparent, newname, flags),
        )
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _timer = self.timed("link");
        let name = match check_name(newname) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.fs.link(id(ino), id(newparent), name) {
            Ok(inode) => reply.entry(&self.ttl, &file_attr(inode.id, &inode.attr), Generation(0)),
            Err(e) => reply.error(self.fail("link", id(ino), &e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _timer = self.timed("open");
        // Directories arrive as opendir: this is never one.
        if flags.0 & libc::O_DIRECTORY != 0 {
            return reply.error(Errno::ENOTDIR);
        }
        // The kernel refuses these on an `ro` mount already; this keeps
        // the promise should a request get past it.
        if self.read_only && flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let ino = id(ino);
        let writer = flags.0 & libc::O_ACCMODE != libc::O_RDONLY;
        if writer {
            self.shared.pushes.writing(ino);
        }
        let opened = self.fs.open(ino).and_then(|()| self.fs.getattr(ino));
        match opened {
            Ok(inode) => {
                // Asked only of a reader of a file big enough for it to
                // matter: it may cost a metadata read.
                let in_place = !writer
                    && inode.attr.size > PUSH_MIN
                    && self.fs.random_access(ino).unwrap_or_else(|e| {
                        tracing::warn!(file = %self.fs.describe(ino), error = %e, "cannot tell how a file is read; streaming it past the page cache");
                        false
                    });
                let mut open =
                    open_flags(flags.0, inode.attr.size, self.page_cache_max, || in_place);
                if !self.cache_still_valid(&inode) {
                    // Another client changed it: the kernel drops its pages.
                    open.remove(fuser::FopenFlags::FOPEN_KEEP_CACHE);
                }
                // Such a handle keeps the page cache: its random reads get
                // their neighbours pushed into it (`push`).
                reply.opened(FileHandle(if in_place { PUSHING } else { 0 }), open)
            }
            Err(e) => {
                if writer {
                    self.shared.pushes.done_writing(ino);
                }
                reply.error(self.fail("open", ino, &e))
            }
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _timer = self.timed("read");
        match self.fs.read_near(id(ino), offset, size) {
            Ok((data, around)) => {
                if let Some(m) = &self.metrics {
                    m.transferred("read", data.len());
                }
                let read = offset..offset + data.len() as u64;
                let short = data.len() < size as usize;
                reply.data(&data);
                if let (Some(around), PUSHING, false) = (around, fh.0, short) {
                    self.push(id(ino), around, read);
                }
            }
            Err(e) => reply.error(self.fail("read", id(ino), &e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _timer = self.timed("write");
        // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves the set-id bits a
        // write clears to `fs`.
        match self.fs.write_as(id(ino), offset, data, &writer(req)) {
            Ok(n) => {
                if let Some(m) = &self.metrics {
                    m.transferred("written", n as usize);
                }
                reply.written(n)
            }
            Err(e) => reply.error(self.fail("write", id(ino), &e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("flush");
        self.reply_empty("flush", id(ino), reply, self.fs.flush(id(ino)))
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("release");
        let released = self.fs.release(id(ino));
        // The kernel wrote the handle's dirty pages back before releasing it.
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            self.shared.pushes.done_writing(id(ino));
        }
        self.reply_empty("release", id(ino), reply, released)
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("fsync");
        self.reply_empty("fsync", id(ino), reply, self.fs.fsync(id(ino)))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let _timer = self.timed("opendir");
        self.open_dir(id(ino), reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let _timer = self.timed("readdir");
        self.list(fh, offset, reply)
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let _timer = self.timed("readdirplus");
        self.list_plus(fh, offset, reply)
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("releasedir");
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("fsyncdir");
        self.reply_empty("fsyncdir", id(ino), reply, self.fs.fsync_dir(id(ino)))
    }

    /// cairn's own space, not the host disk's (docs/file-system.md, "What
    /// df shows"): used blocks are the store's container bytes (after
    /// dedup and compression), free blocks what the default policy can
    /// still store (free space less the metadata reserve, divided by the
    /// policy's overhead), and the size their sum, so that `df`'s Used
    /// (size less free) is cairn's and nothing else on the branches' disks.
    /// Where a branch cannot tell (S3), the free figure is a large constant.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _timer = self.timed("statfs");
        let measured = self.fs.stats().and_then(|s| Ok((s, self.fs.space()?)));
        match measured {
            Ok((s, space)) => {
                let block = u64::from(BLOCK_SIZE);
                let used = s.stored_bytes.div_ceil(block);
                let free = space.map_or(FREE_BLOCKS, |sp| sp.available / block);
                let files = s.files + s.dirs;
                reply.statfs(
                    used + free,
                    free,
                    free,
                    files + FREE_FILES,
                    FREE_FILES,
                    BLOCK_SIZE,
                    NAME_MAX as u32,
                    BLOCK_SIZE,
                );
            }
            Err(e) => reply.error(self.fail("statfs", InodeId::ROOT, &e)),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("setxattr");
        if position != 0 {
            return reply.error(Errno::EINVAL);
        }
        let flags = match xattr_flags(flags) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        self.reply_empty(
            "setxattr",
            id(ino),
            reply,
            self.fs
                .set_xattr(id(ino), name.as_bytes(), value, flags, &caller(req)),
        )
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _timer = self.timed("getxattr");
        match self.fs.get_xattr(id(ino), name.as_bytes()) {
            Ok(value) => reply_xattr(reply, &value, size),
            Err(e) => reply.error(self.fail("getxattr", id(ino), &e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _timer = self.timed("listxattr");
        match self.fs.list_xattr(id(ino)) {
            Ok(names) => reply_xattr(reply, &xattr_list(&names), size),
            Err(e) => reply.error(self.fail("listxattr", id(ino), &e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _timer = self.timed("removexattr");
        self.reply_empty(
            "removexattr",
            id(ino),
            reply,
            self.fs.remove_xattr(id(ino), name.as_bytes()),
        )
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        let _timer = self.timed("access");
        // With default_permissions the kernel checks; only existence here.
        match self.fs.getattr(id(ino)) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(self.fail("access", id(ino), &e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _timer = self.timed("create");
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        if flags & libc::O_DIRECTORY != 0 {
            return reply.error(Errno::EINVAL);
        }
        let parent = id(parent);
        let new = Self::new_inode(req, FileKind::File, mode, 0, Content::Empty);
        let created = self
            .fs
            .create_posix(parent, name, new, (umask & 0o777) as u16)
            .and_then(|inode| self.fs.open(inode.id).map(|()| inode));
        match created {
            Ok(inode) => {
                if flags & libc::O_ACCMODE != libc::O_RDONLY {
                    self.shared.pushes.writing(inode.id);
                }
                reply.created(
                    &self.ttl,
                    &file_attr(inode.id, &inode.attr),
                    Generation(0),
                    FileHandle(0),
                    open_flags(flags, inode.attr.size, self.page_cache_max, || false),
                )
            }
            Err(e) => reply.error(self.fail("create", parent, &e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _timer = self.timed("fallocate");
        self.reply_empty(
            "fallocate",
            id(ino),
            reply,
            self.fs.fallocate(id(ino), offset, length, mode),
        )
    }

    /// `copy_file_range`: `fs` clones a whole file onto an empty one (no
    /// data copied) and copies any other range inside the daemon, so no
    /// byte passes through the kernel. (`FICLONE` never arrives: the
    /// kernel refuses it for FUSE, see `docs/file-system.md`.)
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _timer = self.timed("copy_file_range");
        // The reply counts in 32 bits; the kernel asks for no more.
        let len = len.min(u32::MAX as u64);
        let copied = self.fs.copy_range(
            id(ino_in),
            offset_in,
            id(ino_out),
            offset_out,
            len,
            &writer(req),
        );
        match copied {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(self.fail("copy_file_range", id(ino_out), &e)),
        }
    }
}
