use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::aligned::AlignedBuf;
use crate::{BlobKey, Branch, BranchError, Result, Space};

/// Blobs as files under a directory. A blob is written to `.partial/`, synced,
/// moved into place and its directory synced, so a crash leaves either the
/// whole blob or a leftover in `.partial/`, which [`LocalDir::open`] discards.
///
/// A put that would leave less than [`reserve`] free on the disk is refused
/// with [`BranchError::NoSpace`] before anything is written: the metadata
/// engines usually share the disk, and a metadata engine that hits ENOSPC
/// mid-commit cannot commit again until it is reopened, while a refused
/// container is only retried later. The reserve keeps the namespace
/// writable (rm, truncate, and the commit that makes them durable) on a
/// disk that data filled.
pub struct LocalDir {
    name: String,
    root: PathBuf,
    seq: AtomicU64,
    /// Open read handles: re-opening a container file for every region read
    /// would cost a path walk each time.
    handles: Mutex<HashMap<BlobKey, Arc<File>>>,
    bounce: Mutex<AlignedBuf>,
}

const PARTIAL: &str = ".partial";

/// Bytes kept free on a branch's disk for metadata: 1/32 of its size, at
/// least 2 MiB and at most 256 MiB.
pub fn reserve(total: u64) -> u64 {
    (total / 32).clamp(2 << 20, 256 << 20)
}
const MAX_HANDLES: usize = 512;

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BranchError + 'a {
    move |source| BranchError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

impl LocalDir {
    /// Opens (creating if needed) the branch rooted at `root`, discarding any
    /// blob a crash left half-written. Returns the branch and how many partial
    /// blobs were discarded.
    pub fn open(name: impl Into<String>, root: impl Into<PathBuf>) -> Result<(Self, usize)> {
        let root = root.into();
        let partial = root.join(PARTIAL);
        fs::create_dir_all(&partial).map_err(io_err("create directory", &partial))?;
        let mut discarded = 0;
        for entry in fs::read_dir(&partial).map_err(io_err("list", &partial))? {
            let path = entry.map_err(io_err("list", &partial))?.path();
            fs::remove_file(&path).map_err(io_err("remove partial blob", &path))?;
            discarded += 1;
        }
        let branch = LocalDir {
            name: name.into(),
            root,
            seq: AtomicU64::new(0),
            handles: Mutex::new(HashMap::new()),
            bounce: Mutex::new(AlignedBuf::new()),
        };
        Ok((branch, discarded))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads one blob of the branch rooted at `root` without opening it:
    /// nothing is created or discarded, so a caller can look before it
    /// decides to use the directory. `None` when the blob (or the
    /// directory) does not exist.
    pub fn peek(root: &Path, key: &BlobKey) -> Result<Option<Vec<u8>>> {
        let path = root.join(key.as_str());
        match fs::read(&path) {
            Ok(data) => Ok(Some(data)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err("read", &path)(e)),
        }
    }

    /// The disk's size and free bytes (for an unprivileged user), from
    /// statvfs.
    fn disk(&self) -> Result<(u64, u64)> {
        let c = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes())
            .map_err(|e| io_err("statvfs", &self.root)(io::Error::other(e)))?;
        let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
        // SAFETY: a NUL-terminated path and a buffer statvfs fills on success.
        let rc = unsafe { libc::statvfs(c.as_ptr(), st.as_mut_ptr()) };
        if rc != 0 {
            return Err(io_err("statvfs", &self.root)(io::Error::last_os_error()));
        }
        // SAFETY: statvfs returned 0, so it initialised the buffer.
        let st = unsafe { st.assume_init() };
        // statvfs's field types differ by target (32 bits on some): the
        // casts are no-ops only here.
        #[allow(clippy::unnecessary_cast)]
        let (unit, blocks, avail) = (st.f_frsize as u64, st.f_blocks as u64, st.f_bavail as u64);
        Ok((blocks * unit, avail * unit))
    }

    /// Stages each blob that fits above the reserve, in order; the others
    /// are refused without a byte written.
    fn stage_within_room(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<(PathBuf, File)>> {
        let (total, free) = match self.disk() {
            Ok(d) => d,
            Err(e) => {
                let msg = e.to_string();
                return blobs
                    .iter()
                    .map(|_| Err(io_err("statvfs", &self.root)(io::Error::other(msg.clone()))))
                    .collect();
            }
        };
        let reserve = reserve(total);
        let mut room = free.saturating_sub(reserve);
        blobs
            .iter()
            .map(|(key, data)| {
                let wanted = data.len() as u64;
                if wanted > room {
                    return Err(BranchError::NoSpace {
                        branch: self.name.clone(),
                        wanted,
                        free,
                        reserve,
                    });
                }
                room -= wanted;
                self.stage(key, data)
            })
            .collect()
    }

    fn path(&self, key: &BlobKey) -> PathBuf {
        self.root.join(key.as_str())
    }

    fn handle(&self, key: &BlobKey) -> Result<Arc<File>> {
        if let Some(f) = self.handles.lock().get(key) {
            return Ok(f.clone());
        }
        let path = self.path(key);
        let file = File::open(&path).map_err(|e| self.not_found_or(key, "open", &path, e))?;
        let file = Arc::new(file);
        let mut handles = self.handles.lock();
        if handles.len() >= MAX_HANDLES {
            handles.clear();
        }
        handles.insert(key.clone(), file.clone());
        Ok(file)
    }

    fn not_found_or(
        &self,
        key: &BlobKey,
        op: &'static str,
        path: &Path,
        e: io::Error,
    ) -> BranchError {
        if e.kind() == io::ErrorKind::NotFound {
            BranchError::NotFound {
                branch: self.name.clone(),
                key: key.clone(),
            }
        } else {
            io_err(op, path)(e)
        }
    }
}

impl LocalDir {
    /// Writes a blob to `.partial/` and starts its write-back.
    fn stage(&self, key: &BlobKey, data: &[u8]) -> Result<(PathBuf, File)> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self.root.join(PARTIAL).join(format!(
            "{}-{}-{seq}",
            key.as_str().replace('/', "_"),
            std::process::id()
        ));
        let staged = self
            .stage_direct(&tmp, data)
            .and_then(|direct| match direct {
                Some(f) => Ok(f),
                None => self.stage_buffered(&tmp, data),
            });
        match staged {
            Ok(f) => Ok((tmp, f)),
            Err(e) => {
                // A blob cut short by a full disk must not keep its space.
                let _ = fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    fn stage_buffered(&self, tmp: &Path, data: &[u8]) -> Result<File> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(io_err("create", tmp))?;
        f.write_all(data).map_err(io_err("write", tmp))?;
        // SAFETY: a plain syscall on a descriptor we own; it only starts
        // write-back, durability still comes from sync_data.
        unsafe { libc::sync_file_range(f.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE) };
        Ok(f)
    }

    /// Writes with `O_DIRECT`, so a blob written once is not also copied
    /// into the page cache (on these virtual machines that copy into fresh
    /// guest pages costs more than the disk write). Returns `None` where the
    /// file system refuses `O_DIRECT` (tmpfs), for a buffered write instead.
    fn stage_direct(&self, tmp: &Path, data: &[u8]) -> Result<Option<File>> {
        let opened = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_DIRECT)
            .open(tmp);
        let mut f = match opened {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                let _ = fs::remove_file(tmp);
                return Ok(None);
            }
            Err(e) => return Err(io_err("create", tmp)(e)),
        };
        let mut bounce = self.bounce.lock();
        let padded = bounce.fill(data);
        f.write_all(padded).map_err(io_err("write", tmp))?;
        if padded.len() != data.len() {
            f.set_len(data.len() as u64)
                .map_err(io_err("truncate", tmp))?;
        }
        Ok(Some(f))
    }

    /// Moves a synced partial blob into place without ever replacing an
    /// existing blob: `renameat2(RENAME_NOREPLACE)`, or where the file
    /// system lacks it, a hard link (the partial file is then removed).
    /// Renaming matters for speed: every unlink leaves a recently deleted
    /// inode that ext4's allocator then checks on each later create, which
    /// cost a quarter of the CPU of a Reed-Solomon store (one file per
    /// shard).
    fn place(&self, key: &BlobKey, tmp: &Path) -> Result<()> {
        let dest = self.path(key);
        let dir = dest.parent().expect("a blob path has a parent");
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(io_err("create directory", dir))?;
            sync_dir(dir.parent().unwrap_or(&self.root))?;
        }
        let placed = match rename_noreplace(tmp, &dest) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS)) => {
                let linked = fs::hard_link(tmp, &dest);
                let _ = fs::remove_file(tmp);
                linked
            }
            other => other,
        };
        match placed {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(BranchError::Exists {
                branch: self.name.clone(),
                key: key.clone(),
            }),
            Err(e) => Err(io_err("move into place", &dest)(e)),
        }
    }
}

fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: both paths are NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("sync directory", dir))
}

impl Branch for LocalDir {
    fn name(&self) -> &str {
        &self.name
    }

    fn put(&self, key: &BlobKey, data: &[u8]) -> Result<()> {
        self.put_many(&[(key.clone(), data)])
            .pop()
            .expect("one result per blob")
    }

    /// Writes every blob before waiting for any: write-back of all of them
    /// starts at once, and each directory is synced once for the batch, so a
    /// batch costs about one device flush instead of two per blob.
    fn put_many(&self, blobs: &[(BlobKey, &[u8])]) -> Vec<Result<()>> {
        let staged = self.stage_within_room(blobs);
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut results: Vec<Result<()>> = staged
            .into_iter()
            .zip(blobs)
            .map(|(staged, (key, _))| {
                let (tmp, f) = staged?;
                let synced = f.sync_data().map_err(io_err("sync", &tmp));
                drop(f);
                let placed = synced.and_then(|()| self.place(key, &tmp));
                if placed.is_err() {
                    let _ = fs::remove_file(&tmp);
                }
                placed?;
                let dir = self
                    .path(key)
                    .parent()
                    .expect("a blob path has a parent")
                    .to_path_buf();
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
                Ok(())
            })
            .collect();
        for dir in dirs {
            if let Err(e) = sync_dir(&dir) {
                let msg = e.to_string();
                for (r, (key, _)) in results.iter_mut().zip(blobs) {
                    if r.is_ok() && self.path(key).parent() == Some(dir.as_path()) {
                        *r = Err(BranchError::Io {
                            op: "sync directory",
                            path: dir.clone(),
                            source: io::Error::other(msg.clone()),
                        });
                    }
                }
            }
        }
        results
    }

    fn get(&self, key: &BlobKey) -> Result<Vec<u8>> {
        let path = self.path(key);
        fs::read(&path).map_err(|e| self.not_found_or(key, "read", &path, e))
    }

    fn read_range(&self, key: &BlobKey, offset: u64, len: usize) -> Result<Vec<u8>> {
        let file = self.handle(key)?;
        // Read into spare capacity: zero-filling the buffer first cost a
        // pass over every byte read (4% of a cold read's samples).
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        while buf.len() < len {
            let done = buf.len();
            let spare = buf.spare_capacity_mut();
            // SAFETY: pread writes at most `spare.len()` bytes into the
            // vector's spare capacity, and only what it reports written is
            // counted as initialised below.
            let n = unsafe {
                libc::pread(
                    file.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    spare.len(),
                    (offset + done as u64) as libc::off_t,
                )
            };
            match n {
                0 => {
                    return Err(BranchError::Truncated {
                        branch: self.name.clone(),
                        key: key.clone(),
                        offset,
                        wanted: len,
                        size: self.size(key)?,
                    })
                }
                // SAFETY: the kernel initialised `n` more bytes.
                n if n > 0 => unsafe { buf.set_len(done + n as usize) },
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(io_err("read", &self.path(key))(e));
                    }
                }
            }
        }
        Ok(buf)
    }

    fn prefetch(&self, key: &BlobKey, offset: u64, len: u64) {
        if let Ok(f) = self.handle(key) {
            // SAFETY: an advisory syscall on a descriptor we hold open.
            unsafe {
                libc::posix_fadvise(
                    f.as_raw_fd(),
                    offset as i64,
                    len as i64,
                    libc::POSIX_FADV_WILLNEED,
                )
            };
        }
    }

    fn size(&self, key: &BlobKey) -> Result<u64> {
        let path = self.path(key);
        fs::metadata(&path)
            .map(|m| m.len())
            .map_err(|e| self.not_found_or(key, "stat", &path, e))
    }

    fn list(&self, prefix: &str) -> Result<Vec<BlobKey>> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).map_err(io_err("list", &dir))? {
                let entry = entry.map_err(io_err("list", &dir))?;
                let path = entry.path();
                let rel = path.strip_prefix(&self.root).expect("under root");
                let Some(rel) = rel.to_str() else { continue };
                if rel.starts_with('.') {
                    continue;
                }
                let is_dir = entry.file_type().map_err(io_err("stat", &path))?.is_dir();
                if is_dir {
                    if prefix.starts_with(rel) || rel.starts_with(prefix) || prefix.is_empty() {
                        stack.push(path);
                    }
                } else if rel.starts_with(prefix) {
                    if let Ok(key) = BlobKey::new(rel) {
                        out.push(key);
                    }
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn space(&self) -> Result<Option<Space>> {
        let (total, free) = self.disk()?;
        Ok(Some(Space {
            total,
            available: free.saturating_sub(reserve(total)),
        }))
    }

    fn delete(&self, key: &BlobKey) -> Result<()> {
        self.handles.lock().remove(key);
        let path = self.path(key);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err("remove", &path)(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> BlobKey {
        BlobKey::new(s).unwrap()
    }

    #[test]
    fn put_get_range_list_delete() {
        let dir = tempfile::tempdir().unwrap();
        let (b, _) = LocalDir::open("local", dir.path()).unwrap();
        b.put(&key("c/01/a"), b"hello world").unwrap();
        b.put(&key("c/02/b"), b"xyz").unwrap();
        b.put(&key("other"), b"1").unwrap();
        assert_eq!(b.get(&key("c/01/a")).unwrap(), b"hello world");
        assert_eq!(b.read_range(&key("c/01/a"), 6, 5).unwrap(), b"world");
        assert_eq!(b.size(&key("c/02/b")).unwrap(), 3);
        assert_eq!(b.list("c/").unwrap(), vec![key("c/01/a"), key("c/02/b")]);
        assert_eq!(b.list("").unwrap().len(), 3);
        b.delete(&key("c/01/a")).unwrap();
        b.delete(&key("c/01/a")).unwrap();
        assert!(matches!(
            b.get(&key("c/01/a")),
            Err(BranchError::NotFound { .. })
        ));
        assert!(matches!(
            b.read_range(&key("c/01/a"), 0, 1),
            Err(BranchError::NotFound { .. })
        ));
    }

    /// tmpfs refuses O_DIRECT; blobs are then written through the page cache.
    #[test]
    fn works_where_direct_io_is_refused() {
        let shm = Path::new("/dev/shm");
        assert!(shm.is_dir(), "this test needs a tmpfs at /dev/shm");
        let dir = tempfile::tempdir_in(shm).unwrap();
        let (b, _) = LocalDir::open("shm", dir.path()).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        b.put(&key("a/b"), &data).unwrap();
        assert_eq!(b.get(&key("a/b")).unwrap(), data);
    }

    #[test]
    fn odd_sizes_round_trip_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let (b, _) = LocalDir::open("local", dir.path()).unwrap();
        for len in [0usize, 1, 4095, 4096, 4097, 1 << 20, (1 << 20) + 3] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let k = key(&format!("sizes/{len}"));
            b.put(&k, &data).unwrap();
            assert_eq!(b.size(&k).unwrap(), len as u64);
            assert_eq!(b.get(&k).unwrap(), data);
        }
    }

    #[test]
    fn put_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let (b, _) = LocalDir::open("local", dir.path()).unwrap();
        b.put(&key("k"), b"first").unwrap();
        assert!(matches!(
            b.put(&key("k"), b"second"),
            Err(BranchError::Exists { .. })
        ));
        assert_eq!(b.get(&key("k")).unwrap(), b"first");
        assert_eq!(fs::read_dir(dir.path().join(PARTIAL)).unwrap().count(), 0);
    }

    #[test]
    fn short_read_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (b, _) = LocalDir::open("local", dir.path()).unwrap();
        b.put(&key("x"), b"0123456789").unwrap();
        let err = b.read_range(&key("x"), 8, 4).unwrap_err();
        assert!(
            matches!(err, BranchError::Truncated { size: 10, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("truncated"));
    }

    #[test]
    fn partial_blobs_are_discarded_on_open() {
        let dir = tempfile::tempdir().unwrap();
        let (b, _) = LocalDir::open("local", dir.path()).unwrap();
        b.put(&key("kept"), b"whole").unwrap();
        fs::write(dir.path().join(PARTIAL).join("kept2-1-0"), b"half").unwrap();
        drop(b);
        let (b, discarded) = LocalDir::open("local", dir.path()).unwrap();
        assert_eq!(discarded, 1);
        assert_eq!(b.list("").unwrap(), vec![key("kept")]);
    }
}
