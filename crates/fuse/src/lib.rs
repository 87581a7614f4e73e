//! The FUSE adapter: cairn's file system as a kernel mount.
//!
//! **Owns:** translating kernel FUSE requests (through `fuser`) into
//! [`fs::Fs`] calls and their errors into errno values
//! ([`fs::FsError::errno`]); converting attributes between
//! [`meta::Attr`] and the kernel's; the per-`opendir` directory listings
//! that keep `readdir` offsets stable; the mount, its worker threads and
//! its unmount ([`mount`], [`Mounted`]); what is mounted where
//! ([`mount_state`]) and which directories can take a mount
//! ([`check_mountpoint`]).
//!
//! **Never:** stores, chunks, caches or commits data, and never touches the
//! metadata engine directly: every operation goes through [`fs::Fs`], which
//! owns the ordering of data before metadata. It checks no permissions
//! either: the mount uses `default_permissions` and POSIX ACLs
//! (`FUSE_POSIX_ACL`), so the kernel does; the rules it leaves to the file
//! system (the umask, inherited and chmod-ed ACLs) are `fs`'s.
//!
//! **Invariants:**
//! - Every request gets exactly one reply; every failure of `fs` reaches the
//!   caller as `FsError::errno()`, never as a panic.
//! - A name longer than [`meta::NAME_MAX`] bytes is refused with
//!   `ENAMETOOLONG` before `fs` sees it.
//! - Each successful `open`/`create` is matched by exactly one
//!   [`fs::Fs::release`] (the kernel sends one `release` per open).
//! - Directory offsets handed to the kernel index a listing that only grows
//!   for the life of the directory handle, so an offset always resumes
//!   where the previous `readdir` stopped.
//! - Inode numbers are the metadata engine's, unchanged (the root is 1 on
//!   both sides), and never reused, so the generation is always 0.
//! - A mount never goes on top of a live cairn mount, and the unmount of
//!   one never takes down a mount beneath it: a mount point is unmounted at
//!   most once, while this session's mount is still the one on top.
//! - When the session ends (unmount from inside or outside) every open
//!   file's content is recorded and made durable ([`fs::Fs::sync_all`])
//!   before [`Mounted::unmount`] or [`Mounted::wait`] return.
//! - Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!   does not spread to later callers (`docs/engineering.md`).

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fs::{Caller, Fs, FsError};
use fuser::{
    AccessFlags, BackgroundSession, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, MountOption, OpenFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, SessionACL, TimeOrNow, WriteFlags,
};
use meta::{Attr, Content, FileKind, InodeId, NewInode, SetAttr, Timestamp, XattrFlags, NAME_MAX};

/// How long the kernel may cache attributes and directory entries
/// (including negative ones) before asking again.
const TTL: Duration = Duration::from_secs(1);
/// The block size reported by `stat` and `statfs`.
const BLOCK_SIZE: u32 = 4096;
/// The largest write the kernel is asked to send in one request.
const MAX_WRITE: u32 = 1 << 20;
/// A cap on read-ahead so that fuser's page count stays representable.
const MAX_READAHEAD: u32 = 16 << 20;
/// The kernel's read-ahead for the mount, in KiB: one largest read request.
/// A FUSE mount starts at 128 KiB (and `max_readahead` at init can only
/// lower it), so a sequential reader cost a round trip per 128 KiB.
const KERNEL_READAHEAD_KB: u32 = 1024;
/// Free blocks reported by `statfs` when a branch cannot tell (an object
/// store grows as needed), and free inodes (the namespace has no fixed table).
const FREE_BLOCKS: u64 = 1 << 40;
const FREE_FILES: u64 = 1 << 32;
/// Directory entries fetched from `fs` at a time.
const DIR_PAGE: usize = 1024;

const DEV_FUSE: &str = "/dev/fuse";

/// How to mount.
#[derive(Debug, Clone)]
pub struct MountOptions {
    /// Let users other than the one mounting use the mount (`allow_other`;
    /// an unprivileged user needs `user_allow_other` in /etc/fuse.conf).
    pub allow_other: bool,
    /// The source shown in /proc/mounts and `df`.
    pub fsname: String,
    /// Kernel request worker threads.
    pub threads: usize,
    /// Files larger than this, opened read-only, are read around the
    /// kernel's page cache (`FOPEN_DIRECT_IO`); see [`open_flags`].
    pub page_cache_max: u64,
    /// Mount on a directory that is not empty or is itself a mount point
    /// (never on a live cairn mount: see [`check_mountpoint`]).
    pub nonempty: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            fsname: "cairn".into(),
            threads: 4,
            page_cache_max: 16 << 20,
            nonempty: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FuseError {
    #[error(
        "/dev/fuse is missing: load the fuse module (modprobe fuse) or run with --device /dev/fuse"
    )]
    DevFuseMissing,
    #[error("fusermount3 not found: install the fuse3 package (apt-get install fuse3)")]
    FusermountMissing,
    #[error("cannot mount at {}: {source}", path.display())]
    Mountpoint {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot mount at {}: not a directory", path.display())]
    NotADirectory { path: PathBuf },
    #[error(
        "cannot mount at {}: a cairn file system is already mounted there; \
         `cairn umount {}` first",
        path.display(), path.display()
    )]
    CairnMounted { path: PathBuf },
    #[error(
        "cannot mount at {}: it is already a mount point ({what}); give --nonempty to \
         mount on top of it anyway",
        path.display()
    )]
    AlreadyMounted { path: PathBuf, what: String },
    #[error(
        "cannot mount at {}: the directory is not empty (its files would be hidden while \
         mounted); give --nonempty to mount anyway",
        path.display()
    )]
    NotEmpty { path: PathBuf },
    #[error(
        "cannot mount at {}: a dead mount is there ({what}, \"Transport endpoint is not \
         connected\": its daemon ended without unmounting); run `fusermount3 -u {}`",
        path.display(), path.display()
    )]
    DeadMount { path: PathBuf, what: String },
    #[error("cannot mount at {}: the file-system name {name:?} must not be empty or contain ','", path.display())]
    InvalidFsname { path: PathBuf, name: String },
    #[error("cannot mount at {}: {source}", path.display())]
    Mount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot unmount {}: {source}", path.display())]
    Unmount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot unmount {}: it is busy (a process has a file open or its working directory in it)",
        path.display()
    )]
    Busy { path: PathBuf },
    #[error("the FUSE session at {} failed: {source}", path.display())]
    Session {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("unmounted {}, but making its data durable failed: {source}", path.display())]
    Sync {
        path: PathBuf,
        #[source]
        source: Box<FsError>,
    },
}

/// Checks that FUSE can be used here: `/dev/fuse` exists and the
/// `fusermount3` helper (which unprivileged mounts and unmounts need) is
/// installed.
pub fn check_fuse_available() -> Result<(), FuseError> {
    check_dev_fuse()?;
    fusermount_bin().ok_or(FuseError::FusermountMissing)?;
    Ok(())
}

fn check_dev_fuse() -> Result<(), FuseError> {
    // Existence only: an unprivileged user may not open it, fusermount3 does.
    match std::fs::metadata(DEV_FUSE) {
        Ok(m) if m.file_type().is_char_device() => Ok(()),
        _ => Err(FuseError::DevFuseMissing),
    }
}

/// The FUSE mount helper, found the way fuser finds it.
fn fusermount_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FUSERMOUNT_PATH") {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/bin", "/sbin", "/usr/bin", "/usr/sbin"].map(PathBuf::from));
    for name in ["fusermount3", "fusermount"] {
        for dir in &dirs {
            let p = dir.join(name);
            if std::fs::metadata(&p)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            {
                return Some(p);
            }
        }
    }
    None
}

/// One entry of the kernel's mount table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// `fuse`, `fuse.cairn`, `ext4` ...
    pub fstype: String,
    /// What was mounted: a device, or a FUSE file system's name.
    pub source: String,
}

impl MountEntry {
    /// A cairn mount: its source is [`MountOptions::fsname`]'s default, and
    /// its type `fuse.cairn` (`fuse` when root mounted it directly).
    pub fn is_cairn(&self) -> bool {
        self.fstype == "fuse.cairn" || (self.fstype == "fuse" && self.source == "cairn")
    }
}

impl std::fmt::Display for MountEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.fstype, self.source)
    }
}

/// What the kernel's mount table says is mounted at a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountState {
    NotMounted,
    /// A file system is mounted there and answers.
    Live(MountEntry),
    /// A FUSE mount whose daemon is gone ("Transport endpoint is not
    /// connected"): nothing can be read or written there until it is
    /// detached.
    Dead(MountEntry),
}

/// What is mounted at `dir` (the topmost mount when several are stacked).
pub fn mount_state(dir: &Path) -> io::Result<MountState> {
    let target = absolute_path(dir)?;
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    // (id, parent id, entry) of every mount at `dir`.
    let here: Vec<(&str, &str, MountEntry)> = table
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut left = left.split(' ');
            let (id, parent) = (left.next()?, left.next()?);
            let point = unescape_mountinfo(left.nth(2)?);
            let mut right = right.split(' ');
            let fstype = right.next()?.to_string();
            let source = unescape_mountinfo(right.next()?);
            (Path::new(&point) == target).then_some((id, parent, MountEntry { fstype, source }))
        })
        .collect();
    // Stacked mounts: the top one is no other's parent (the table's order
    // does not say, as propagation can tuck a mount beneath another).
    let entry = here
        .iter()
        .find(|(id, _, _)| !here.iter().any(|(_, parent, _)| parent == id))
        .map(|(_, _, e)| e.clone());
    let Some(entry) = entry else {
        return Ok(MountState::NotMounted);
    };
    Ok(match std::fs::metadata(&target) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => MountState::Dead(entry),
        _ => MountState::Live(entry),
    })
}

/// `dir` made absolute and canonical without touching `dir` itself (a
/// dead mount fails every look at it).
fn absolute_path(dir: &Path) -> io::Result<PathBuf> {
    let abs = std::path::absolute(dir)?;
    match (abs.parent(), abs.file_name()) {
        (Some(parent), Some(name)) => Ok(parent.canonicalize()?.join(name)),
        _ => Ok(abs),
    }
}

/// Mount points in mountinfo escape space, tab, newline and backslash as
/// three octal digits.
fn unescape_mountinfo(field: &str) -> String {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches whatever is mounted at `dir` (lazily, as `fusermount3 -u -z`):
/// for a dead mount, whose daemon can no longer lose anything.
pub fn detach(dir: &Path) -> Result<(), FuseError> {
    let path = absolute_path(dir).map_err(|source| FuseError::Unmount {
        path: dir.to_path_buf(),
        source,
    })?;
    unmount_path(&path, true).map_err(|source| FuseError::Unmount { path, source })
}

/// Refuses a mount point that is a live cairn mount (stacking one on
/// another makes stopping the top one take down both), a dead mount, and,
/// unless `nonempty`, a mount point of another file system or a directory
/// that is not empty.
pub fn check_mountpoint(mountpoint: &Path, nonempty: bool) -> Result<(), FuseError> {
    let path = mountpoint.to_path_buf();
    let state = mount_state(mountpoint).map_err(|source| FuseError::Mountpoint {
        path: path.clone(),
        source,
    })?;
    match state {
        MountState::Dead(entry) => {
            return Err(FuseError::DeadMount {
                path,
                what: entry.to_string(),
            })
        }
        MountState::Live(entry) if entry.is_cairn() => {
            return Err(FuseError::CairnMounted { path })
        }
        MountState::Live(entry) if !nonempty => {
            return Err(FuseError::AlreadyMounted {
                path,
                what: entry.to_string(),
            })
        }
        _ => {}
    }
    let meta = std::fs::metadata(mountpoint).map_err(|source| FuseError::Mountpoint {
        path: path.clone(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(FuseError::NotADirectory { path });
    }
    let mut entries = std::fs::read_dir(mountpoint).map_err(|source| FuseError::Mountpoint {
        path: path.clone(),
        source,
    })?;
    if !nonempty && entries.next().is_some() {
        return Err(FuseError::NotEmpty { path });
    }
    Ok(())
}

/// Mounts `fs` at `mountpoint` and serves it from `opts.threads` background
/// threads. Returns once the kernel has completed its handshake, so the
/// mount is usable as soon as this returns. The mount point is checked
/// first ([`check_mountpoint`]).
pub fn mount(fs: Arc<Fs>, mountpoint: &Path, opts: &MountOptions) -> Result<Mounted, FuseError> {
    check_dev_fuse()?;
    check_mountpoint(mountpoint, opts.nonempty)?;
    let path = mountpoint.to_path_buf();
    let meta = std::fs::metadata(mountpoint).map_err(|source| FuseError::Mountpoint {
        path: path.clone(),
        source,
    })?;
    if !meta.is_dir() {
        return Err(FuseError::NotADirectory { path });
    }
    let path = mountpoint
        .canonicalize()
        .map_err(|source| FuseError::Mountpoint {
            path: path.clone(),
            source,
        })?;
    if opts.fsname.is_empty() || opts.fsname.contains(',') {
        return Err(FuseError::InvalidFsname {
            path,
            name: opts.fsname.clone(),
        });
    }

    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::DefaultPermissions,
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("cairn".into()),
    ];
    // fuser adds `allow_other` to the mount options for `SessionACL::All`.
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let threads = opts.threads.max(1);
    config.n_threads = Some(threads);
    // One /dev/fuse descriptor per worker (FUSE_DEV_IOC_CLONE, Linux 4.5+).
    config.clone_fd = threads > 1;

    let shared = Arc::new(Shared::default());
    let filesystem = CairnFs::new(fs, shared.clone(), opts.page_cache_max);
    let mount_error = |source: io::Error| {
        if source.kind() == io::ErrorKind::NotFound && fusermount_bin().is_none() {
            FuseError::FusermountMissing
        } else {
            FuseError::Mount {
                path: path.clone(),
                source,
            }
        }
    };
    let session = fuser::Session::new(filesystem, &path, &config).map_err(mount_error)?;
    let session = session.spawn().map_err(mount_error)?;
    raise_kernel_readahead(&path);
    Ok(Mounted {
        mountpoint: path,
        session: Some(session),
        shared,
    })
}

/// Sets the read-ahead of the mount's backing device (`read_ahead_kb` of its
/// bdi in sysfs). Only root may; for anyone else the mount keeps the
/// kernel's default, which is slower for large reads but correct.
fn raise_kernel_readahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let knob = format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        libc::major(dev),
        libc::minor(dev)
    );
    let _ = std::fs::write(knob, KERNEL_READAHEAD_KB.to_string());
}

/// A mounted file system. Dropping it unmounts (as [`Mounted::unmount`],
/// ignoring errors).
pub struct Mounted {
    mountpoint: PathBuf,
    session: Option<BackgroundSession>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted")
            .field("mountpoint", &self.mountpoint)
            .field("ended", &self.is_ended())
            .finish()
    }
}

impl Mounted {
    /// Where it is mounted (canonical path).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the session has ended: the kernel unmounted the file system
    /// (`fusermount3 -u`, `umount`) and its data was made durable.
    pub fn is_ended(&self) -> bool {
        self.shared.state.lock().ended
    }

    /// Blocks until the session ends: until someone unmounts the file
    /// system from outside and its data has been made durable. Call
    /// [`Mounted::unmount`] afterwards to collect the outcome.
    pub fn wait(&self) {
        let mut state = self.shared.state.lock();
        while !state.ended {
            self.shared.ended.wait(&mut state);
        }
    }

    /// Like [`Mounted::wait`], giving up after `timeout`; true if the
    /// session ended.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let mut state = self.shared.state.lock();
        self.shared
            .ended
            .wait_while_for(&mut state, |s| !s.ended, timeout);
        state.ended
    }

    /// A handle that can ask for the unmount from another thread (a signal
    /// handler's, say) while this one is in [`Mounted::wait`].
    pub fn unmounter(&self) -> Unmounter {
        Unmounter {
            mountpoint: self.mountpoint.clone(),
            shared: self.shared.clone(),
        }
    }

    /// Unmounts (unless the kernel already did), waits for the worker
    /// threads, and reports whether the data was made durable. When the
    /// mount is busy (or the unmount fails otherwise) it is detached lazily
    /// instead and [`FuseError::Busy`] (or [`FuseError::Unmount`]) is
    /// returned: the mount leaves the namespace at once, and its worker
    /// threads serve the files still open until the last one is closed,
    /// then make the data durable.
    pub fn unmount(mut self) -> Result<(), FuseError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<(), FuseError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let path = self.mountpoint.clone();
        if !self.is_ended() {
            if let Err(e) = unmount_path(&path, false) {
                if e.raw_os_error() != Some(libc::EINVAL) {
                    // Still mounted: detach it; the worker threads go on
                    // serving open files until the last one is closed.
                    let _ = unmount_path(&path, true);
                    drop(without_unmount(session));
                    return Err(if e.raw_os_error() == Some(libc::EBUSY) {
                        FuseError::Busy { path }
                    } else {
                        FuseError::Unmount { path, source: e }
                    });
                }
                // EINVAL: not mounted any more; the session is ending.
            }
        }
        let guard = without_unmount(session);
        let joined = guard
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the FUSE session thread panicked")));
        joined.map_err(|source| FuseError::Session {
            path: path.clone(),
            source,
        })?;
        match self.shared.state.lock().sync_error.take() {
            Some(source) => Err(FuseError::Sync {
                path,
                source: Box::new(source),
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The session's thread, with the rest of the session leaked: fuser 0.18
/// unmounts the mount point again when a session is dropped, even after the
/// kernel unmounted it (its `is_mounted` takes the disconnected device's
/// POLLERR for "mounted"), and so took down whatever was mounted beneath
/// (`--nonempty` over another mount). The leak is a disconnected
/// `/dev/fuse` descriptor and the mount's path, once per mount.
fn without_unmount(mut session: BackgroundSession) -> std::thread::JoinHandle<io::Result<()>> {
    let guard = std::mem::replace(&mut session.guard, std::thread::spawn(|| Ok(())));
    std::mem::forget(session);
    guard
}

/// Asks the kernel to unmount a [`Mounted`] file system, from any thread;
/// [`Mounted::wait`] returns once it has.
#[derive(Debug, Clone)]
pub struct Unmounter {
    mountpoint: PathBuf,
    shared: Arc<Shared>,
}

impl Unmounter {
    /// Unmounts (not lazily): `Busy` if something still uses the mount,
    /// which then stays mounted. Ok if it is unmounted already.
    pub fn unmount(&self) -> Result<(), FuseError> {
        if self.shared.state.lock().ended {
            return Ok(());
        }
        match unmount_path(&self.mountpoint, false) {
            Ok(()) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(FuseError::Busy {
                path: self.mountpoint.clone(),
            }),
            Err(source) => Err(FuseError::Unmount {
                path: self.mountpoint.clone(),
                source,
            }),
        }
    }
}

/// Unmounts `path` directly (root) or through fusermount3 (anyone else).
fn unmount_path(path: &Path, lazy: bool) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes())?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    if unsafe { libc::umount2(c.as_ptr(), flags) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    let Some(bin) = fusermount_bin() else {
        return Err(err);
    };
    let mut cmd = Command::new(bin);
    cmd.arg("-u");
    if lazy {
        cmd.arg("-z");
    }
    let out = cmd.arg("--").arg(path).output()?;
    if out.status.success() {
        return Ok(());
    }
    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Err(if msg.contains("busy") {
        io::Error::from_raw_os_error(libc::EBUSY)
    } else if msg.contains("not found in") || msg.contains("not mounted") {
        io::Error::from_raw_os_error(libc::EINVAL)
    } else {
        io::Error::other(msg)
    })
}

/// What the file system and the [`Mounted`] handle share: whether the
/// session ended, and how making the data durable at its end went.
#[derive(Default, Debug)]
struct Shared {
    state: Mutex<SessionState>,
    ended: Condvar,
}

#[derive(Default, Debug)]
struct SessionState {
    ended: bool,
    sync_error: Option<FsError>,
}

// ---------------------------------------------------------------------------
// Pure helpers

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// The kind `mknod` asks for in `mode`'s file-type bits.
fn mknod_kind(mode: u32) -> Option<FileKind> {
    match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => Some(FileKind::File),
        libc::S_IFIFO => Some(FileKind::Fifo),
        libc::S_IFSOCK => Some(FileKind::Socket),
        libc::S_IFCHR => Some(FileKind::CharDevice),
        libc::S_IFBLK => Some(FileKind::BlockDevice),
        _ => None,
    }
}

fn to_system_time(t: Timestamp) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nanos.min(999_999_999)));
    let base = if t.secs >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(t.secs as u64))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(t.secs.unsigned_abs()))
    };
    base.and_then(|b| b.checked_add(nanos))
        .unwrap_or(UNIX_EPOCH)
}

/// The time a `setattr` asks for, as fuser 0.18 hands it over. The kernel
/// sends a timespec, whose nanoseconds count forward from its second also
/// before 1970 (-2 s + 0.5 s is 1.5 s before the epoch); fuser 0.18 turns a
/// negative one into the epoch minus seconds *and* nanoseconds (2.5 s
/// before), so that is undone here. (Fixed in fuser after 0.18.0; the
/// copy-tools mount test sets a pre-1970 time with nanoseconds and would
/// catch a change.)
fn from_request_time(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp {
            secs: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: d.subsec_nanos(),
        },
        Err(e) => {
            let d = e.duration();
            Timestamp {
                secs: i64::try_from(d.as_secs()).map_or(i64::MIN, |s| -s),
                nanos: d.subsec_nanos(),
            }
        }
    }
}

fn time_or_now(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::Now => Timestamp::now(),
        TimeOrNow::SpecificTime(t) => from_request_time(t),
    }
}

/// The kernel's view of an inode's attributes.
fn file_attr(ino: InodeId, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino.0),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: to_system_time(a.atime),
        mtime: to_system_time(a.mtime),
        ctime: to_system_time(a.ctime),
        crtime: to_system_time(a.crtime),
        kind: file_type(a.kind),
        perm: a.perm & 0o7777,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

/// The permission bits after a write by an unprivileged user: set-user-id
/// goes, and set-group-id when the group may execute (otherwise it marks
/// mandatory locking and stays). `None` if nothing changes.
fn kill_priv(perm: u16) -> Option<u16> {
    let mut new = perm & !0o4000;
    if perm & 0o010 != 0 {
        new &= !0o2000;
    }
    (new != perm).then_some(new)
}

/// `renameat2` flags to the engine's; `RENAME_WHITEOUT` (overlayfs only),
/// unknown bits and contradictory combinations are `EINVAL`.
fn rename_flags(flags: fuser::RenameFlags) -> Result<meta::RenameFlags, Errno> {
    let bits = flags.bits();
    let known = libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE;
    if bits & !known != 0 {
        return Err(Errno::EINVAL);
    }
    let out = meta::RenameFlags {
        noreplace: bits & libc::RENAME_NOREPLACE != 0,
        exchange: bits & libc::RENAME_EXCHANGE != 0,
    };
    if out.noreplace && out.exchange {
        return Err(Errno::EINVAL);
    }
    Ok(out)
}

/// `setxattr` flags to the engine's.
fn xattr_flags(flags: i32) -> Result<XattrFlags, Errno> {
    match flags {
        0 => Ok(XattrFlags::Either),
        libc::XATTR_CREATE => Ok(XattrFlags::Create),
        libc::XATTR_REPLACE => Ok(XattrFlags::Replace),
        _ => Err(Errno::EINVAL),
    }
}

/// How to answer a `getxattr`/`listxattr` of a `len`-byte value for a
/// caller's buffer of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
enum XattrAnswer {
    /// A size probe (`size == 0`): report the length.
    Size(u32),
    /// The value fits: send it.
    Data,
    /// The buffer is too small: `ERANGE`.
    TooSmall,
}

fn xattr_answer(len: usize, size: u32) -> XattrAnswer {
    if size == 0 {
        match u32::try_from(len) {
            Ok(n) => XattrAnswer::Size(n),
            Err(_) => XattrAnswer::TooSmall,
        }
    } else if len > size as usize {
        XattrAnswer::TooSmall
    } else {
        XattrAnswer::Data
    }
}

fn reply_xattr(reply: ReplyXattr, value: &[u8], size: u32) {
    match xattr_answer(value.len(), size) {
        XattrAnswer::Size(n) => reply.size(n),
        XattrAnswer::Data => reply.data(value),
        XattrAnswer::TooSmall => reply.error(Errno::ERANGE),
    }
}

/// `listxattr`'s format: each name followed by a NUL.
fn xattr_list(names: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(names.iter().map(|n| n.len() + 1).sum());
    for n in names {
        out.extend_from_slice(n);
        out.push(0);
    }
    out
}

/// The caller of a request, for the rules in `fs` that depend on it. FUSE
/// sends only the primary group: the others are read from /proc; a caller
/// gone already (or in another pid namespace) counts with its primary group.
fn caller(req: &Request) -> Caller {
    let mut groups = vec![req.gid()];
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", req.pid())) {
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:")) {
            groups.extend(
                line.split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
    }
    Caller {
        uid: req.uid(),
        groups,
    }
}

fn check_name(name: &OsStr) -> Result<&[u8], Errno> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(b)
    }
}

// ---------------------------------------------------------------------------
// Directory handles

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

struct DirHandle {
    ino: InodeId,
    listing: Mutex<DirListing>,
}

// ---------------------------------------------------------------------------
// The file system

struct CairnFs {
    fs: Arc<Fs>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    next_fh: AtomicU64,
    /// The parent of each directory seen (directories have one name), for
    /// the `..` entry of `readdir`.
    parents: Mutex<HashMap<InodeId, InodeId>>,
    shared: Arc<Shared>,
    page_cache_max: u64,
}

impl CairnFs {
    fn new(fs: Arc<Fs>, shared: Arc<Shared>, page_cache_max: u64) -> CairnFs {
        CairnFs {
            fs,
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            parents: Mutex::new(HashMap::new()),
            shared,
            page_cache_max,
        }
    }

    fn note_parent(&self, inode: &meta::Inode, parent: InodeId) {
        if inode.attr.kind == FileKind::Dir {
            self.parents.lock().insert(inode.id, parent);
        }
    }

    fn parent_of(&self, dir: InodeId) -> InodeId {
        if dir == InodeId::ROOT {
            return dir;
        }
        self.parents.lock().get(&dir).copied().unwrap_or(dir)
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
            Ok(inode) => {
                self.note_parent(&inode, parent);
                reply.entry(&TTL, &file_attr(inode.id, &inode.attr), Generation(0));
            }
            Err(e) => reply.error(self.fail("create", parent, &e)),
        }
    }

    /// The errno `op` on `ino` answers for `e`. An I/O error reaches a
    /// caller only here, so it is logged here, once, with the file and the
    /// whole chain of causes; so is a full disk, which an operator must see.
    fn fail(&self, op: &'static str, ino: InodeId, e: &FsError) -> Errno {
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
            ino: self.parent_of(h.ino),
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

    fn finish_session(&self, sync: Option<Result<(), FsError>>) {
        let mut state = self.shared.state.lock();
        if let Some(Err(e)) = sync {
            state.sync_error = Some(e);
        }
        state.ended = true;
        self.shared.ended.notify_all();
    }
}

/// How the kernel caches an opened file.
///
/// `fs` is the only writer, through this kernel, so the page cache stays
/// valid across opens (`KEEP_CACHE`), and a read-only handle, with nothing
/// to flush, closes without a round trip (`NOFLUSH`).
///
/// A write-only handle, and a read-only one of a file over
/// `page_cache_max`, bypass the page cache (`DIRECT_IO`): the kernel passes
/// the caller's own buffer to the daemon instead of copying it into page
/// cache pages first. That copy cost a writer two thirds of its CPU (most of
/// it allocating fresh pages), and streaming a big file through the cache
/// also evicts what smaller files keep there. Such a handle never reads
/// back what it wrote, and the daemon keeps its own chunk cache. The kernel
/// drops cached pages a direct write overlaps, so handles of either kind
/// stay coherent, and `DIRECT_IO_ALLOW_MMAP` (asked for at init) keeps
/// shared mappings working. A read-write handle (a database, a VM image)
/// keeps the page cache for its small random reads.
fn open_flags(flags: i32, size: u64, page_cache_max: u64) -> FopenFlags {
    let mut open = FopenFlags::FOPEN_KEEP_CACHE;
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => open |= FopenFlags::FOPEN_DIRECT_IO,
        libc::O_RDONLY => {
            open |= FopenFlags::FOPEN_NOFLUSH;
            if size > page_cache_max {
                open |= FopenFlags::FOPEN_DIRECT_IO;
            }
        }
        _ => {}
    }
    open
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
            // Set-id bits are cleared here (`write`, `setattr`), so the
            // kernel need not ask for security.capability before every
            // write: one round trip less per write.
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
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let parent = InodeId(parent.0);
        match self.fs.lookup(parent, name) {
            Ok(inode) => {
                self.note_parent(&inode, parent);
                reply.entry(&TTL, &file_attr(inode.id, &inode.attr), Generation(0));
            }
            Err(e) if e.errno() == libc::ENOENT => {
                // A negative entry: the kernel remembers the name is absent
                // for TTL (every create goes through the kernel and
                // replaces it).
                reply.entry(&TTL, &file_attr(InodeId(0), &empty_attr()), Generation(0));
            }
            Err(e) => reply.error(self.fail("lookup", InodeId(parent.0), &e)),
        }
    }

    fn forget(&self, _req: &Request, _ino: INodeNo, _nlookup: u64) {
        // Inodes live in the metadata engine; nothing is held per lookup.
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs.getattr(InodeId(ino.0)) {
            Ok(inode) => reply.attr(&TTL, &file_attr(inode.id, &inode.attr)),
            Err(e) => reply.error(self.fail("getattr", InodeId(ino.0), &e)),
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
        // ctime is the engine's: every change sets it.
        let mut changes = SetAttr {
            perm: mode.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
        };
        // With FUSE_HANDLE_KILLPRIV_V2 the kernel leaves it to us: a
        // truncate by anyone but root drops set-user-id/set-group-id, as a
        // write does.
        if size.is_some() && mode.is_none() && req.uid() != 0 {
            match self.fs.getattr(InodeId(ino.0)) {
                Ok(inode) => changes.perm = kill_priv(inode.attr.perm),
                Err(e) => return reply.error(self.fail("setattr", InodeId(ino.0), &e)),
            }
        }
        match self.fs.setattr(InodeId(ino.0), &changes, size) {
            Ok(inode) => reply.attr(&TTL, &file_attr(inode.id, &inode.attr)),
            Err(e) => reply.error(self.fail("setattr", InodeId(ino.0), &e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs.readlink(InodeId(ino.0)) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(self.fail("readlink", InodeId(ino.0), &e)),
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
        self.make(InodeId(parent.0), name, new, umask, reply);
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
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let new = Self::new_inode(req, FileKind::Dir, mode, 0, Content::Empty);
        self.make(InodeId(parent.0), name, new, umask, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        self.reply_empty(
            "unlink",
            InodeId(parent.0),
            reply,
            self.fs.unlink(InodeId(parent.0), name),
        )
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        self.reply_empty(
            "rmdir",
            InodeId(parent.0),
            reply,
            self.fs.rmdir(InodeId(parent.0), name),
        )
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let name = match check_name(link_name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let target = target.as_os_str().as_bytes().to_vec();
        let new = Self::new_inode(req, FileKind::Symlink, 0o777, 0, Content::Inline(target));
        self.make(InodeId(parent.0), name, new, 0, reply);
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
        let (name, newname) = match (check_name(name), check_name(newname)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return reply.error(e),
        };
        let flags = match rename_flags(flags) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let (parent, newparent) = (InodeId(parent.0), InodeId(newparent.0));
        match self.fs.rename(parent, name, newparent, newname, flags) {
            Ok(()) => {
                reply.ok();
                // Keep `..` right for directories that moved.
                if parent != newparent {
                    if let Ok(moved) = self.fs.lookup(newparent, newname) {
                        self.note_parent(&moved, newparent);
                    }
                    if flags.exchange {
                        if let Ok(other) = self.fs.lookup(parent, name) {
                            self.note_parent(&other, parent);
                        }
                    }
                }
            }
            Err(e) => reply.error(self.fail("rename", InodeId(parent.0), &e)),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let name = match check_name(newname) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        match self.fs.link(InodeId(ino.0), InodeId(newparent.0), name) {
            Ok(inode) => reply.entry(&TTL, &file_attr(inode.id, &inode.attr), Generation(0)),
            Err(e) => reply.error(self.fail("link", InodeId(ino.0), &e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        // Directories arrive as opendir: this is never one.
        if flags.0 & libc::O_DIRECTORY != 0 {
            return reply.error(Errno::ENOTDIR);
        }
        let ino = InodeId(ino.0);
        let opened = self.fs.open(ino).and_then(|()| self.fs.getattr(ino));
        match opened {
            Ok(inode) => reply.opened(
                FileHandle(0),
                open_flags(flags.0, inode.attr.size, self.page_cache_max),
            ),
            Err(e) => reply.error(self.fail("open", InodeId(ino.0), &e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.fs.read(InodeId(ino.0), offset, size) {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(self.fail("read", InodeId(ino.0), &e)),
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
        let ino = InodeId(ino.0);
        if req.uid() != 0 {
            // A write by anyone but root drops set-user-id/set-group-id.
            let cleared = self
                .fs
                .getattr(ino)
                .and_then(|inode| match kill_priv(inode.attr.perm) {
                    Some(perm) => {
                        let changes = SetAttr {
                            perm: Some(perm),
                            ..SetAttr::default()
                        };
                        self.fs.setattr(ino, &changes, None).map(|_| ())
                    }
                    None => Ok(()),
                });
            if let Err(e) = cleared {
                return reply.error(self.fail("write", InodeId(ino.0), &e));
            }
        }
        match self.fs.write(ino, offset, data) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(self.fail("write", InodeId(ino.0), &e)),
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
        self.reply_empty(
            "flush",
            InodeId(ino.0),
            reply,
            self.fs.flush(InodeId(ino.0)),
        )
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(
            "release",
            InodeId(ino.0),
            reply,
            self.fs.release(InodeId(ino.0)),
        )
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.reply_empty(
            "fsync",
            InodeId(ino.0),
            reply,
            self.fs.fsync(InodeId(ino.0)),
        )
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = InodeId(ino.0);
        match self.fs.getattr(ino) {
            Ok(inode) if inode.attr.kind != FileKind::Dir => return reply.error(Errno::ENOTDIR),
            Ok(_) => {}
            Err(e) => return reply.error(self.fail("opendir", InodeId(ino.0), &e)),
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

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
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
            if reply.add(INodeNo(e.ino.0), i as u64 + 1, file_type(e.kind), name) {
                break;
            }
            i += 1;
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(h) = self.dir_handle(fh) else {
            return reply.error(Errno::EBADF);
        };
        let mut l = h.listing.lock();
        if offset == 0 {
            self.rewind(&h, &mut l);
        }
        let mut i = offset as usize;
        let mut added = 0usize;
        loop {
            match self.load_upto(&h, &mut l, i) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) if added == 0 => return reply.error(self.fail("readdir", h.ino, &e)),
                Err(_) => break,
            }
            let e = &l.entries[i];
            // The kernel ignores the attributes of `.` and `..`; they get
            // the directory's own.
            let target = if i < 2 { h.ino } else { e.ino };
            let inode = match self.fs.getattr(target) {
                Ok(inode) => inode,
                // Gone since it was listed: skip it.
                Err(err) if err.errno() == libc::ENOENT => {
                    i += 1;
                    continue;
                }
                Err(err) if added == 0 => return reply.error(self.fail("readdir", target, &err)),
                Err(_) => break,
            };
            if i >= 2 {
                self.note_parent(&inode, h.ino);
            }
            let mut attr = file_attr(inode.id, &inode.attr);
            attr.ino = INodeNo(e.ino.0);
            let name = OsStr::from_bytes(&e.name);
            if reply.add(
                INodeNo(e.ino.0),
                i as u64 + 1,
                name,
                &TTL,
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

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // `fs` offers no narrower commit: entries become durable with
        // everything else.
        self.reply_empty("fsyncdir", InodeId::ROOT, reply, self.fs.sync_all())
    }

    /// The branches' real space: `df` shows what the default policy can
    /// still store (free space less the metadata reserve, divided by the
    /// policy's overhead), and blocks used as the store's bytes. Where a
    /// branch cannot tell (S3), the free figure is a large constant.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let measured = self.fs.stats().and_then(|s| Ok((s, self.fs.space()?)));
        match measured {
            Ok((s, space)) => {
                let block = u64::from(BLOCK_SIZE);
                let used = s.stored_bytes.div_ceil(block);
                let (blocks, free) = match space {
                    Some(sp) => {
                        let free = sp.available / block;
                        ((sp.total / block).max(used + free), free)
                    }
                    None => (used + FREE_BLOCKS, FREE_BLOCKS),
                };
                let files = s.files + s.dirs;
                reply.statfs(
                    blocks,
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
        if position != 0 {
            return reply.error(Errno::EINVAL);
        }
        let flags = match xattr_flags(flags) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        self.reply_empty(
            "setxattr",
            InodeId(ino.0),
            reply,
            self.fs
                .set_xattr(InodeId(ino.0), name.as_bytes(), value, flags, &caller(req)),
        )
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        match self.fs.get_xattr(InodeId(ino.0), name.as_bytes()) {
            Ok(value) => reply_xattr(reply, &value, size),
            Err(e) => reply.error(self.fail("getxattr", InodeId(ino.0), &e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        match self.fs.list_xattr(InodeId(ino.0)) {
            Ok(names) => reply_xattr(reply, &xattr_list(&names), size),
            Err(e) => reply.error(self.fail("listxattr", InodeId(ino.0), &e)),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.reply_empty(
            "removexattr",
            InodeId(ino.0),
            reply,
            self.fs.remove_xattr(InodeId(ino.0), name.as_bytes()),
        )
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // With default_permissions the kernel checks; only existence here.
        match self.fs.getattr(InodeId(ino.0)) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(self.fail("access", InodeId(ino.0), &e)),
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
        let name = match check_name(name) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        if flags & libc::O_DIRECTORY != 0 {
            return reply.error(Errno::EINVAL);
        }
        let parent = InodeId(parent.0);
        let new = Self::new_inode(req, FileKind::File, mode, 0, Content::Empty);
        let created = self
            .fs
            .create_posix(parent, name, new, (umask & 0o777) as u16)
            .and_then(|inode| self.fs.open(inode.id).map(|()| inode));
        match created {
            Ok(inode) => reply.created(
                &TTL,
                &file_attr(inode.id, &inode.attr),
                Generation(0),
                FileHandle(0),
                open_flags(flags, inode.attr.size, self.page_cache_max),
            ),
            Err(e) => reply.error(self.fail("create", InodeId(parent.0), &e)),
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
        // Only plain allocation, which for cairn means making the file long
        // enough (space is never reserved in a deduplicating store).
        if mode != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        let Some(end) = offset.checked_add(length).filter(|&e| e <= i64::MAX as u64) else {
            return reply.error(Errno::EFBIG);
        };
        let ino = InodeId(ino.0);
        let extended = self.fs.getattr(ino).and_then(|inode| {
            if end > inode.attr.size {
                self.fs
                    .setattr(ino, &SetAttr::default(), Some(end))
                    .map(|_| ())
            } else {
                Ok(())
            }
        });
        self.reply_empty("fallocate", InodeId(ino.0), reply, extended)
    }
}

/// Attributes for a negative lookup reply (only its inode number, 0,
/// matters to the kernel).
fn empty_attr() -> Attr {
    Attr {
        kind: FileKind::File,
        perm: 0,
        uid: 0,
        gid: 0,
        size: 0,
        nlink: 0,
        rdev: 0,
        atime: Timestamp::default(),
        mtime: Timestamp::default(),
        ctime: Timestamp::default(),
        crtime: Timestamp::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: FileKind, size: u64) -> Attr {
        Attr {
            kind,
            perm: 0o4755,
            uid: 1000,
            gid: 100,
            size,
            nlink: 3,
            rdev: 0x0801,
            atime: Timestamp { secs: 1, nanos: 2 },
            mtime: Timestamp {
                secs: 1_700_000_000,
                nanos: 999_999_999,
            },
            ctime: Timestamp {
                secs: -1,
                nanos: 500_000_000,
            },
            crtime: Timestamp::default(),
        }
    }

    #[test]
    fn attr_conversion() {
        let a = file_attr(InodeId(42), &attr(FileKind::File, 1025));
        assert_eq!(a.ino, INodeNo(42));
        assert_eq!(a.kind, FileType::RegularFile);
        assert_eq!(a.perm, 0o4755);
        assert_eq!((a.nlink, a.uid, a.gid, a.rdev), (3, 1000, 100, 0x0801));
        assert_eq!(a.size, 1025);
        assert_eq!(a.blocks, 3, "ceil(1025 / 512)");
        assert_eq!(a.blksize, 4096);
        assert_eq!(a.atime, UNIX_EPOCH + Duration::new(1, 2));
        assert_eq!(
            a.mtime,
            UNIX_EPOCH + Duration::new(1_700_000_000, 999_999_999)
        );
        assert_eq!(a.ctime, UNIX_EPOCH - Duration::from_millis(500));
        assert_eq!(file_attr(InodeId(1), &attr(FileKind::File, 0)).blocks, 0);
        assert_eq!(file_attr(InodeId(1), &attr(FileKind::File, 512)).blocks, 1);
        for (k, t) in [
            (FileKind::Dir, FileType::Directory),
            (FileKind::Symlink, FileType::Symlink),
            (FileKind::Fifo, FileType::NamedPipe),
            (FileKind::Socket, FileType::Socket),
            (FileKind::CharDevice, FileType::CharDevice),
            (FileKind::BlockDevice, FileType::BlockDevice),
        ] {
            assert_eq!(file_attr(InodeId(1), &attr(k, 0)).kind, t);
        }
    }

    #[test]
    fn timestamps_reach_the_kernel_and_come_back() {
        for (secs, nanos) in [
            (0, 0),
            (5, 7),
            (-1, 500_000_000),
            (-86_400, 0),
            (4_102_444_800, 123),
        ] {
            let t = Timestamp { secs, nanos };
            let sent = to_system_time(t);
            let since = |d: Duration| (d.as_secs() as i64, d.subsec_nanos());
            let exact = match sent.duration_since(UNIX_EPOCH) {
                Ok(d) => since(d),
                Err(e) => {
                    let (s, n) = since(e.duration());
                    if n == 0 {
                        (-s, 0)
                    } else {
                        (-s - 1, 1_000_000_000 - n)
                    }
                }
            };
            assert_eq!(exact, (secs, nanos), "to the kernel");
            // What fuser 0.18 makes of the same timespec in a setattr.
            let asked = if secs < 0 {
                UNIX_EPOCH - Duration::new(secs.unsigned_abs(), nanos)
            } else {
                UNIX_EPOCH + Duration::new(secs as u64, nanos)
            };
            assert_eq!(from_request_time(asked), t, "from a setattr");
        }
    }

    #[test]
    fn xattr_size_protocol() {
        assert_eq!(xattr_answer(10, 0), XattrAnswer::Size(10));
        assert_eq!(xattr_answer(0, 0), XattrAnswer::Size(0));
        assert_eq!(xattr_answer(10, 9), XattrAnswer::TooSmall);
        assert_eq!(xattr_answer(10, 10), XattrAnswer::Data);
        assert_eq!(xattr_answer(10, 4096), XattrAnswer::Data);
        assert_eq!(
            xattr_list(&[b"user.a".to_vec(), b"user.bc".to_vec()]),
            b"user.a\0user.bc\0"
        );
        assert_eq!(xattr_list(&[]), b"");
    }

    #[test]
    fn flag_mapping() {
        use fuser::RenameFlags as K;
        assert_eq!(rename_flags(K::empty()), Ok(meta::RenameFlags::default()));
        assert_eq!(
            rename_flags(K::RENAME_NOREPLACE),
            Ok(meta::RenameFlags {
                noreplace: true,
                exchange: false
            })
        );
        assert_eq!(
            rename_flags(K::RENAME_EXCHANGE),
            Ok(meta::RenameFlags {
                noreplace: false,
                exchange: true
            })
        );
        assert_eq!(rename_flags(K::RENAME_WHITEOUT), Err(Errno::EINVAL));
        assert_eq!(
            rename_flags(K::RENAME_NOREPLACE | K::RENAME_EXCHANGE),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            rename_flags(K::from_bits_retain(1 << 20)),
            Err(Errno::EINVAL)
        );

        assert_eq!(xattr_flags(0), Ok(XattrFlags::Either));
        assert_eq!(xattr_flags(libc::XATTR_CREATE), Ok(XattrFlags::Create));
        assert_eq!(xattr_flags(libc::XATTR_REPLACE), Ok(XattrFlags::Replace));
        assert_eq!(
            xattr_flags(libc::XATTR_CREATE | libc::XATTR_REPLACE),
            Err(Errno::EINVAL)
        );

        assert_eq!(mknod_kind(libc::S_IFREG | 0o644), Some(FileKind::File));
        assert_eq!(mknod_kind(libc::S_IFIFO | 0o644), Some(FileKind::Fifo));
        assert_eq!(mknod_kind(libc::S_IFSOCK), Some(FileKind::Socket));
        assert_eq!(mknod_kind(libc::S_IFCHR), Some(FileKind::CharDevice));
        assert_eq!(mknod_kind(libc::S_IFBLK), Some(FileKind::BlockDevice));
        assert_eq!(mknod_kind(libc::S_IFDIR), None);
    }

    #[test]
    fn kill_priv_on_write() {
        assert_eq!(kill_priv(0o4755), Some(0o0755));
        assert_eq!(
            kill_priv(0o2755),
            Some(0o0755),
            "setgid with group exec goes"
        );
        assert_eq!(kill_priv(0o2745), None, "setgid without group exec stays");
        assert_eq!(kill_priv(0o6775), Some(0o0775));
        assert_eq!(kill_priv(0o6745), Some(0o2745));
        assert_eq!(kill_priv(0o1777), None);
        assert_eq!(kill_priv(0o644), None);
    }

    #[test]
    fn long_names_refused() {
        let ok = OsStr::from_bytes(&[b'a'; NAME_MAX]);
        let long = OsStr::from_bytes(&[b'a'; NAME_MAX + 1]);
        assert!(check_name(ok).is_ok());
        assert_eq!(check_name(long), Err(Errno::ENAMETOOLONG));
    }

    #[test]
    fn mount_errors_name_the_mountpoint() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        repo::Repo::init(&root).unwrap();
        let fs = Arc::new(repo::Repo::open(&root).unwrap().open_fs(0, 0).unwrap());
        let opts = MountOptions::default();
        if check_dev_fuse().is_err() {
            let e = mount(fs, dir.path(), &opts).unwrap_err();
            assert!(e.to_string().starts_with("/dev/fuse is missing"), "{e}");
            return;
        }
        let missing = dir.path().join("missing");
        let e = mount(fs.clone(), &missing, &opts).unwrap_err();
        assert!(matches!(e, FuseError::Mountpoint { .. }), "{e:?}");
        assert!(e.to_string().contains(&*missing.to_string_lossy()), "{e}");

        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let e = mount(fs.clone(), &file, &opts).unwrap_err();
        assert!(matches!(e, FuseError::NotADirectory { .. }), "{e:?}");
        assert!(e.to_string().contains(&*file.to_string_lossy()), "{e}");

        let e = mount(fs.clone(), dir.path(), &opts).unwrap_err();
        assert!(matches!(e, FuseError::NotEmpty { .. }), "{e:?}");
        assert!(e.to_string().contains("--nonempty"), "{e}");

        let bad = MountOptions {
            fsname: "a,b".into(),
            nonempty: true,
            ..MountOptions::default()
        };
        let e = mount(fs, dir.path(), &bad).unwrap_err();
        assert!(matches!(e, FuseError::InvalidFsname { .. }), "{e:?}");
    }

    #[test]
    fn handles_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Mounted>();
        send_sync::<Unmounter>();
    }

    #[test]
    fn default_options() {
        let o = MountOptions::default();
        assert!(!o.allow_other);
        assert_eq!(o.fsname, "cairn");
        assert_eq!(o.threads, 4);
    }
}
