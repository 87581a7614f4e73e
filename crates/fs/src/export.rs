//! Writing a stored tree (a snapshot's or a version's) out to a directory
//! of the host: `cairn restore --out DIR`, for bringing files back to a
//! machine without a mount, or to look at an old version with ordinary
//! tools.
//!
//! Files are written whole, with their mode and times (and their owner
//! when the writer is root); hard links inside the tree stay links. The
//! extended attributes (ACLs, cairn's policies) stay in the file system:
//! a host directory may not take them. Like every walk of a tree, this
//! keeps the directories on its way down on the heap.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{OpenOptions, Permissions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use meta::{Attr, FileKind, InodeId, Timestamp};

use crate::history::CopyReport;
use crate::problem::{Damage, Existing};
use crate::tree::{self, TreeContent, TreeEntry};
use crate::{Fs, FsError, Result};

/// A directory being written: where, its stored attributes (its mode and
/// times, set once its entries are in; none for `out` itself, which keeps
/// its own), and its entries not written yet.
struct OutDir {
    path: PathBuf,
    attr: Option<Attr>,
    left: std::vec::IntoIter<TreeEntry>,
}

fn host(path: &Path) -> impl FnOnce(std::io::Error) -> FsError + '_ {
    move |source| FsError::Host {
        path: path.to_owned(),
        source,
    }
}

impl Fs {
    /// Writes `path` of snapshot or version `name` (as [`Fs::restore`]
    /// takes them) into the host directory `out`, under its own name; the
    /// top level of `/` goes straight into `out`. With `overwrite`,
    /// existing files there are replaced and directories merged; otherwise
    /// an existing name is an error ([`Existing::Restored`]).
    pub fn export(
        &self,
        name: &str,
        path: &str,
        out: &Path,
        overwrite: bool,
    ) -> Result<CopyReport> {
        let entry = self.stored_entry(name, path)?;
        let into = std::fs::metadata(out).map_err(host(out))?;
        if !into.is_dir() {
            return Err(FsError::Host {
                path: out.to_owned(),
                source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        let mut w = Writer {
            fs: self,
            overwrite,
            links: HashMap::new(),
            report: CopyReport::default(),
            // SAFETY: a plain getter without preconditions.
            as_root: unsafe { libc::geteuid() } == 0,
        };
        let mut stack: Vec<OutDir> = Vec::new();
        match (&entry.content, crate::history::components(path).is_empty()) {
            // The root: its entries go into `out`, which keeps its own mode.
            (TreeContent::Dir(listing), true) => stack.push(OutDir {
                path: out.to_owned(),
                attr: None,
                left: tree::read_listing(&self.inner.store, listing)?.into_iter(),
            }),
            _ => {
                if let Some(dir) = w.place(out, entry)? {
                    stack.push(dir);
                }
            }
        }
        while let Some(top) = stack.last_mut() {
            match top.left.next() {
                Some(child) => {
                    let parent = top.path.clone();
                    if let Some(dir) = w.place(&parent, child)? {
                        stack.push(dir);
                    }
                }
                None => {
                    let done = stack.pop().expect("the top");
                    if let Some(attr) = &done.attr {
                        w.finish(&done.path, attr)?;
                    }
                }
            }
        }
        Ok(w.report)
    }
}

/// The state of one export.
struct Writer<'a> {
    fs: &'a Fs,
    overwrite: bool,
    /// Stored inode -> the host path written for it, so hard links stay
    /// links.
    links: HashMap<InodeId, PathBuf>,
    report: CopyReport,
    /// Whether owners can be given (only root may).
    as_root: bool,
}

impl Writer<'_> {
    /// Writes `entry` into the host directory `parent`: a file or link
    /// whole, a directory itself only, returned for the caller to fill.
    fn place(&mut self, parent: &Path, entry: TreeEntry) -> Result<Option<OutDir>> {
        let name = OsStr::from_bytes(&entry.name);
        // A damaged listing must not reach outside `parent`.
        if entry.name.is_empty() || name == "." || name == ".." || entry.name.contains(&b'/') {
            return Err(FsError::Malformed {
                what: "a directory listing",
                damage: Damage::BadEntryName,
            });
        }
        let path = parent.join(name);
        let a = entry.attr;
        let is_dir = a.kind == FileKind::Dir;
        if let Ok(cur) = std::fs::symlink_metadata(&path) {
            match (self.overwrite, cur.is_dir(), is_dir) {
                (true, true, true) => {}
                (true, false, false) => std::fs::remove_file(&path).map_err(host(&path))?,
                _ => {
                    return Err(FsError::Exists {
                        name: path.display().to_string(),
                        holder: Existing::Restored,
                    })
                }
            }
        }
        if !is_dir {
            if let Some(first) = self.links.get(&entry.ino) {
                std::fs::hard_link(first, &path).map_err(host(&path))?;
                return Ok(None);
            }
        }
        match a.kind {
            FileKind::Dir => {
                if let Err(e) = std::fs::create_dir(&path) {
                    // Merged into (overwrite): it was checked to be one.
                    if e.kind() != std::io::ErrorKind::AlreadyExists {
                        return Err(host(&path)(e));
                    }
                }
                let TreeContent::Dir(listing) = &entry.content else {
                    return Err(FsError::Malformed {
                        what: "a directory listing",
                        damage: Damage::KindContentDisagree,
                    });
                };
                let left = tree::read_listing(&self.fs.inner.store, listing)?.into_iter();
                self.report.dirs += 1;
                return Ok(Some(OutDir {
                    path,
                    attr: Some(a),
                    left,
                }));
            }
            FileKind::File => {
                let mut f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)
                    .map_err(host(&path))?;
                self.write_content(&entry.content, &mut f, &path)?;
                // Past the recorded bytes (a file grown by truncate): zeros.
                f.set_len(a.size).map_err(host(&path))?;
            }
            FileKind::Symlink => {
                let mut target = Vec::new();
                self.write_content(&entry.content, &mut target, &path)?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&target), &path)
                    .map_err(host(&path))?;
            }
            FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice => {
                let kind = match a.kind {
                    FileKind::Fifo => libc::S_IFIFO,
                    FileKind::Socket => libc::S_IFSOCK,
                    FileKind::CharDevice => libc::S_IFCHR,
                    _ => libc::S_IFBLK,
                };
                let c = std::ffi::CString::new(path.as_os_str().as_bytes())
                    .map_err(|e| host(&path)(e.into()))?;
                // SAFETY: `c` is a valid NUL-terminated path for the call.
                let r = unsafe { libc::mknod(c.as_ptr(), kind | 0o600, libc::dev_t::from(a.rdev)) };
                if r != 0 {
                    return Err(host(&path)(std::io::Error::last_os_error()));
                }
            }
        }
        // Counted as a restore inside the file system counts them.
        self.report.files += 1;
        self.report.bytes += a.size;
        self.links.insert(entry.ino, path.clone());
        self.finish(&path, &a)?;
        Ok(None)
    }

    /// A file's or link target's stored bytes, written to `out`.
    fn write_content(&self, content: &TreeContent, out: &mut dyn Write, path: &Path) -> Result<()> {
        match content {
            TreeContent::Empty | TreeContent::Dir(_) => Ok(()),
            TreeContent::Inline(b) => out.write_all(b).map_err(host(path)),
            TreeContent::Recipe(id) => {
                recipe::Recipe::open(&self.fs.inner.store, *id)?.write_to(out, &|_| {})?;
                Ok(())
            }
        }
    }

    /// Gives what was written at `path` its stored owner (as root), mode
    /// and times. A directory's are given last, after its entries: its
    /// mode may forbid writing them, and writing them changes its times.
    fn finish(&self, path: &Path, a: &Attr) -> Result<()> {
        if self.as_root {
            std::os::unix::fs::lchown(path, Some(a.uid), Some(a.gid)).map_err(host(path))?;
        }
        // A symlink has no mode of its own (chmod would follow it).
        if a.kind != FileKind::Symlink {
            let perm = Permissions::from_mode(u32::from(a.perm));
            std::fs::set_permissions(path, perm).map_err(host(path))?;
        }
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| host(path)(e.into()))?;
        let ts = |t: Timestamp| libc::timespec {
            tv_sec: t.secs,
            tv_nsec: i64::from(t.nanos),
        };
        let times = [ts(a.atime), ts(a.mtime)];
        // By path, not following a symlink: the owner may set times
        // whatever the mode says.
        // SAFETY: `c` is a valid NUL-terminated path and `times` two
        // timespecs, as utimensat reads them.
        let r = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r != 0 {
            return Err(host(path)(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}
