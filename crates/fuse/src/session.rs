//! The mount's life: checking a mount point, mounting with the kernel's
//! options, the session's worker threads, and unmounting (from inside or
//! outside) with the data made durable first.

use parking_lot::{Condvar, Mutex};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use fs::{Fs, FsError};
use fuser::{BackgroundSession, MountOption, SessionACL};

use crate::metrics::FuseMetrics;
use crate::ops::CairnFs;

/// The kernel's read-ahead for the mount, in KiB: one largest read request.
/// A FUSE mount starts at 128 KiB (and `max_readahead` at init can only
/// lower it), so a sequential reader cost a round trip per 128 KiB.
const KERNEL_READAHEAD_KB: u32 = 1024;

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
    /// Ask the kernel for its writeback cache (`FUSE_WRITEBACK_CACHE`):
    /// writes to a cached handle land in the page cache and reach the
    /// daemon merged, at writeback, fsync or close.
    pub writeback_cache: bool,
    /// With the writeback cache: bytes of written pages the kernel may hold
    /// for the mount before it throttles writers (`max_bytes` of its bdi,
    /// Linux 6.2+; only root may set it). FUSE's default, about 1% of the
    /// kernel's dirty limit, holds a few tens of MiB: a random writer over
    /// a larger file then waits on writeback page by page, one FUSE write
    /// each, where with room the kernel writes back runs of neighbouring
    /// pages in large writes. 0 keeps the default; at most an eighth of the
    /// machine's memory is given. Written pages are not the daemon's
    /// memory; fsync and close still write through.
    pub kernel_dirty: u64,
    /// Mount on a directory that is not empty or is itself a mount point
    /// (never on a live cairn mount: see [`check_mountpoint`]).
    pub nonempty: bool,
    /// Where request latencies and bytes are counted, for `/metrics`
    /// (none kept without).
    pub metrics: Option<Arc<FuseMetrics>>,
    /// Mount read-only (`ro`): the kernel answers every write, create,
    /// rename, removal or attribute change with `EROFS`, so nothing
    /// reaches `fs` that could change the repository.
    pub read_only: bool,
    /// Other clients share the file system (a metadata engine in etcd):
    /// attributes and entries are not cached by the kernel (TTL 0), an
    /// open drops the file's cached pages when its size or times changed
    /// since its last open here, and the writeback cache is not used (the
    /// kernel would trust its own size over the other clients'). See
    /// `docs/cluster.md`.
    pub close_to_open: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            fsname: "cairn".into(),
            threads: 4,
            page_cache_max: 16 << 20,
            writeback_cache: true,
            kernel_dirty: 0,
            nonempty: false,
            metrics: None,
            read_only: false,
            close_to_open: false,
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

/// The FUSE mount helper (`fusermount3`), found the way fuser finds it;
/// `None` when it is not installed.
pub fn fusermount_bin() -> Option<PathBuf> {
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

/// What a cairn mount's source starts with when it names its repository.
const SOURCE_PREFIX: &str = "cairn:";

/// The source a mount of the repository at `repo` shows in /proc/mounts
/// and `df`: `cairn:REPO`, so that `cairn umount` and an operator can tell
/// which repository a mount serves; plain `cairn` for a path that mount
/// options cannot carry (a comma, a backslash or white space in it).
pub fn fsname_for(repo: &Path) -> String {
    let path = repo.to_string_lossy();
    if path.contains([',', '\\']) || path.contains(char::is_whitespace) {
        "cairn".into()
    } else {
        format!("{SOURCE_PREFIX}{path}")
    }
}

impl MountEntry {
    /// A cairn mount: its type is `fuse.cairn` (`fuse` when root mounted
    /// it directly, then known by its source, [`fsname_for`]).
    pub fn is_cairn(&self) -> bool {
        self.fstype == "fuse.cairn"
            || (self.fstype == "fuse"
                && (self.source == "cairn" || self.source.starts_with(SOURCE_PREFIX)))
    }

    /// The repository a cairn mount serves, when its source names it.
    pub fn repository(&self) -> Option<PathBuf> {
        self.source
            .strip_prefix(SOURCE_PREFIX)
            .filter(|p| p.starts_with('/'))
            .map(PathBuf::from)
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

/// One line of the kernel's mount table: (id, parent id, device as
/// `major:minor`, mount point, entry).
type TableLine<'a> = (&'a str, &'a str, &'a str, PathBuf, MountEntry);

/// Every mount of `/proc/self/mountinfo` (its text in `table`).
fn mount_table(table: &str) -> Vec<TableLine<'_>> {
    table
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut left = left.split(' ');
            let (id, parent, device) = (left.next()?, left.next()?, left.next()?);
            let point = PathBuf::from(unescape_mountinfo(left.nth(1)?));
            let mut right = right.split(' ');
            let fstype = right.next()?.to_string();
            let source = unescape_mountinfo(right.next()?);
            Some((id, parent, device, point, MountEntry { fstype, source }))
        })
        .collect()
}

/// Every directory where a cairn file system is the topmost mount, live
/// or dead (its daemon gone), in the kernel table's order.
pub fn cairn_mounts() -> io::Result<Vec<(PathBuf, MountState)>> {
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    let mut points: Vec<PathBuf> = Vec::new();
    for (_, _, _, point, entry) in mount_table(&table) {
        if entry.is_cairn() && !points.contains(&point) {
            points.push(point);
        }
    }
    let mut out = Vec::with_capacity(points.len());
    for point in points {
        match mount_state(&point)? {
            MountState::NotMounted => {}
            MountState::Live(e) | MountState::Dead(e) if !e.is_cairn() => {}
            state => out.push((point, state)),
        }
    }
    Ok(out)
}

/// What is mounted at `dir` (the topmost mount when several are stacked).
pub fn mount_state(dir: &Path) -> io::Result<MountState> {
    let target = absolute_path(dir)?;
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    let Some((_, entry)) = top_mount(&table, &target) else {
        return Ok(MountState::NotMounted);
    };
    Ok(match std::fs::metadata(&target) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => MountState::Dead(entry),
        _ => MountState::Live(entry),
    })
}

/// The device (`major:minor`) of the topmost mount at `dir`, read from the
/// mount table without touching `dir`: a FUSE mount whose daemon has not
/// started answering would block a `stat` of it.
fn mount_device(dir: &Path) -> io::Result<String> {
    let target = absolute_path(dir)?;
    let table = std::fs::read_to_string("/proc/self/mountinfo")?;
    top_mount(&table, &target)
        .map(|(device, _)| device.to_string())
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("{}: not in the mount table", target.display()),
            )
        })
}

/// The device and entry of the topmost mount at `target` in `table`.
fn top_mount<'a>(table: &'a str, target: &Path) -> Option<(&'a str, MountEntry)> {
    let here: Vec<TableLine<'a>> = mount_table(table)
        .into_iter()
        .filter(|(_, _, _, point, _)| point == target)
        .collect();
    // Stacked mounts: the top one is no other's parent (the table's order
    // does not say, as propagation can tuck a mount beneath another).
    here.iter()
        .find(|(id, ..)| !here.iter().any(|(_, parent, ..)| parent == id))
        .map(|(_, _, device, _, e)| (*device, e.clone()))
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
    if opts.read_only {
        config.mount_options.push(MountOption::RO);
    }
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
    let filesystem = CairnFs::new(fs, shared.clone(), opts);
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
    // The kernel's knobs are set before the daemon answers, so that no
    // program sees the mount with the defaults.
    raise_kernel_readahead(&path);
    if opts.writeback_cache && !opts.close_to_open && !opts.read_only && opts.kernel_dirty > 0 {
        set_kernel_dirty(&path, opts.kernel_dirty);
    }
    shared.pushes.set_notifier(session.notifier());
    let session = session.spawn().map_err(mount_error)?;
    Ok(Mounted {
        mountpoint: path,
        session: Some(session),
        shared,
    })
}

/// Sets `max_bytes` of the mount's bdi (see [`MountOptions::kernel_dirty`]).
/// Anyone but root, or a kernel without the knob, keeps the default: slower
/// random writes, nothing else.
fn set_kernel_dirty(mountpoint: &Path, bytes: u64) {
    // Never more than an eighth of the machine's memory: the pages wait
    // for this daemon, which needs memory of its own to write them back.
    // SAFETY: plain getters.
    let memory = unsafe {
        libc::sysconf(libc::_SC_PHYS_PAGES) as u64 * libc::sysconf(libc::_SC_PAGESIZE) as u64
    };
    let bytes = if memory > 0 {
        bytes.min(memory / 8)
    } else {
        bytes
    };
    match set_bdi(mountpoint, "max_bytes", bytes) {
        Ok(()) => tracing::debug!(bytes, "raised the kernel's dirty limit for the mount"),
        Err(e) => {
            tracing::info!(error = %e, "kept the kernel's dirty limit for the mount (random writes wait on writeback sooner)")
        }
    }
}

/// Sets the read-ahead of the mount's backing device (`read_ahead_kb` of its
/// bdi in sysfs). Only root may; for anyone else the mount keeps the
/// kernel's default, which is slower for large reads but correct.
fn raise_kernel_readahead(mountpoint: &Path) {
    let _ = set_bdi(mountpoint, "read_ahead_kb", u64::from(KERNEL_READAHEAD_KB));
}

/// Writes `value` to the sysfs knob `name` of the mount's bdi.
fn set_bdi(mountpoint: &Path, name: &str, value: u64) -> io::Result<()> {
    let knob = format!("/sys/class/bdi/{}/{name}", mount_device(mountpoint)?);
    std::fs::write(&knob, value.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("{knob}: {e}")))
}

/// Tells the kernel that a name changed without the mount seeing it, so
/// its next lookup asks the daemon instead of using a cached entry (which
/// would show a replaced or removed file for the entry's cache time).
#[derive(Clone)]
pub struct Invalidator(Arc<fuser::Notifier>);

impl Invalidator {
    /// Drops the kernel's entry for `name` in directory `parent`, if it has
    /// one (no entry, or a mount gone, is not an error).
    pub fn entry(&self, parent: meta::InodeId, name: &[u8]) {
        let _ = self.0.inval_entry(
            crate::convert::ino(parent),
            std::ffi::OsStr::from_bytes(name),
        );
    }
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

    /// A handle telling the kernel to forget a name it cached, for a
    /// change made beside the mount (by the S3 gateway on the same `Fs`);
    /// `None` once unmounted.
    pub fn invalidator(&self) -> Option<Invalidator> {
        self.session
            .as_ref()
            .map(|s| Invalidator(Arc::new(s.notifier())))
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
/// session ended, how making the data durable at its end went, and the
/// page-cache pushes with the session's notifier.
#[derive(Default, Debug)]
pub(crate) struct Shared {
    pub(crate) state: Mutex<SessionState>,
    pub(crate) ended: Condvar,
    pub(crate) pushes: crate::push::Pushes,
}

#[derive(Default, Debug)]
pub(crate) struct SessionState {
    pub(crate) ended: bool,
    pub(crate) sync_error: Option<FsError>,
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_mount_source_names_its_repository() {
        let name = fsname_for(Path::new("/srv/a repo"));
        assert_eq!(name, "cairn");
        let name = fsname_for(Path::new("/srv/a,b"));
        assert_eq!(name, "cairn");
        let name = fsname_for(Path::new("/srv/repo"));
        let entry = |fstype: &str, source: &str| MountEntry {
            fstype: fstype.into(),
            source: source.into(),
        };
        let mounted = entry("fuse", &name);
        assert!(mounted.is_cairn());
        assert_eq!(mounted.repository(), Some(PathBuf::from("/srv/repo")));
        assert!(entry("fuse", "cairn").is_cairn());
        assert_eq!(entry("fuse.cairn", "cairn").repository(), None);
        assert!(!entry("fuse", "sshfs").is_cairn());
        assert_eq!(entry("fuse.sshfs", "cairn:relative").repository(), None);
    }

    #[test]
    fn default_options() {
        let o = MountOptions::default();
        assert!(!o.allow_other);
        assert_eq!(o.fsname, "cairn");
        assert_eq!(o.threads, 4);
    }
}
