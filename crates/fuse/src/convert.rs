//! Conversions between the kernel's terms and cairn's: inode numbers,
//! attributes, times, flags, names, xattr replies and open flags.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fs::Caller;
use fuser::{Errno, FileAttr, FileType, FopenFlags, INodeNo, ReplyXattr, Request, TimeOrNow};
use meta::{Attr, FileKind, InodeId, Timestamp, XattrFlags, NAME_MAX};

/// The engine's inode for the kernel's number: the same number (the root
/// is 1 on both sides).
pub(crate) fn id(ino: INodeNo) -> InodeId {
    InodeId(ino.0)
}

/// The kernel's number for the engine's inode.
pub(crate) fn ino(id: InodeId) -> INodeNo {
    INodeNo(id.0)
}

/// The block size reported by `stat` and `statfs`.
pub(crate) const BLOCK_SIZE: u32 = 4096;

pub(crate) fn file_type(kind: FileKind) -> FileType {
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
pub(crate) fn mknod_kind(mode: u32) -> Option<FileKind> {
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

pub(crate) fn time_or_now(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::Now => Timestamp::now(),
        TimeOrNow::SpecificTime(t) => from_request_time(t),
    }
}

/// The kernel's view of an inode's attributes.
pub(crate) fn file_attr(ino: InodeId, a: &Attr) -> FileAttr {
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

/// `renameat2` flags to the engine's; `RENAME_WHITEOUT` (overlayfs only),
/// unknown bits and contradictory combinations are `EINVAL`.
pub(crate) fn rename_flags(flags: fuser::RenameFlags) -> Result<meta::RenameFlags, Errno> {
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
pub(crate) fn xattr_flags(flags: i32) -> Result<XattrFlags, Errno> {
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

pub(crate) fn reply_xattr(reply: ReplyXattr, value: &[u8], size: u32) {
    match xattr_answer(value.len(), size) {
        XattrAnswer::Size(n) => reply.size(n),
        XattrAnswer::Data => reply.data(value),
        XattrAnswer::TooSmall => reply.error(Errno::ERANGE),
    }
}

/// `listxattr`'s format: each name followed by a NUL.
pub(crate) fn xattr_list(names: &[Vec<u8>]) -> Vec<u8> {
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
pub(crate) fn caller(req: &Request) -> Caller {
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

/// The caller of a write or truncate, for the set-id bits it clears:
/// only whether it is root counts there, so no groups are read.
pub(crate) fn writer(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        groups: vec![req.gid()],
    }
}

pub(crate) fn check_name(name: &OsStr) -> Result<&[u8], Errno> {
    let b = name.as_bytes();
    if b.len() > NAME_MAX {
        Err(Errno::ENAMETOOLONG)
    } else {
        Ok(b)
    }
}

/// Attributes for a negative lookup reply (only its inode number, 0,
/// matters to the kernel).
pub(crate) fn empty_attr() -> Attr {
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

/// How the kernel caches an opened file.
///
/// `fs` is the only writer, through this kernel, so the page cache stays
/// valid across opens (`KEEP_CACHE`), and a read-only handle, with nothing
/// to flush, closes without a round trip (`NOFLUSH`).
///
/// A write-only handle, and a read-only one of a file over
/// `page_cache_max` that is not read in place (`random_access`, asked only
/// then: a VM image or a database keeps the cache its small random reads
/// live on), bypass the page cache (`DIRECT_IO`): the kernel passes
/// the caller's own buffer to the daemon instead of copying it into page
/// cache pages first. That copy cost a writer two thirds of its CPU (most of
/// it allocating fresh pages), and streaming a big file through the cache
/// also evicts what smaller files keep there. Such a handle never reads
/// back what it wrote, and the daemon keeps its own chunk cache. The kernel
/// drops cached pages a direct write overlaps, so handles of either kind
/// stay coherent, and `DIRECT_IO_ALLOW_MMAP` (asked for at init) keeps
/// shared mappings working. A read-write handle (a database, a VM image)
/// keeps the page cache for its small random reads.
pub(crate) fn open_flags(
    flags: i32,
    size: u64,
    page_cache_max: u64,
    random_access: impl FnOnce() -> bool,
) -> FopenFlags {
    let mut open = FopenFlags::FOPEN_KEEP_CACHE;
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => open |= FopenFlags::FOPEN_DIRECT_IO,
        libc::O_RDONLY => {
            open |= FopenFlags::FOPEN_NOFLUSH;
            if size > page_cache_max && !random_access() {
                open |= FopenFlags::FOPEN_DIRECT_IO;
            }
        }
        _ => {}
    }
    open
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
    fn long_names_refused() {
        let ok = OsStr::from_bytes(&[b'a'; NAME_MAX]);
        let long = OsStr::from_bytes(&[b'a'; NAME_MAX + 1]);
        assert!(check_name(ok).is_ok());
        assert_eq!(check_name(long), Err(Errno::ENAMETOOLONG));
    }
}
