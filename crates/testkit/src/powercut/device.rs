//! The disk images as files of a FUSE file system, so a loop device can
//! stand on each: a write lands in the image, `fsync` (which a loop device
//! sends for every flush its file system asks for) makes the image's
//! writes durable, and after a cut every write and flush is dropped.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite,
    Request, WriteFlags,
};
use parking_lot::Mutex;

use super::image::Image;

/// Every disk of one machine: one lock, so a cut is one instant for all.
pub struct Power {
    pub images: Vec<Image>,
    pub on: bool,
}

pub struct Device {
    pub power: Arc<Mutex<Power>>,
    pub size: u64,
    pub count: usize,
}

const ROOT: u64 = 1;
const TTL: Duration = Duration::from_secs(3600);

/// The file name of image `i`.
pub fn image_name(i: usize) -> String {
    format!("disk{i}.img")
}

impl Device {
    /// Image index of an inode (images are inodes 2..).
    fn image(&self, ino: INodeNo) -> Option<usize> {
        let i = ino.0.checked_sub(ROOT + 1)? as usize;
        (i < self.count).then_some(i)
    }

    fn attr(&self, ino: u64) -> FileAttr {
        let dir = ino == ROOT;
        FileAttr {
            ino: INodeNo(ino),
            size: if dir { 0 } else { self.size },
            blocks: if dir { 0 } else { self.size / 512 },
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind: if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: if dir { 0o755 } else { 0o600 },
            nlink: if dir { 2 } else { 1 },
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for Device {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let found = (0..self.count).find(|&i| OsStr::new(&image_name(i)) == name);
        match found {
            Some(i) if parent.0 == ROOT => {
                reply.entry(&TTL, &self.attr(ROOT + 1 + i as u64), Generation(0))
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        if ino.0 == ROOT || self.image(ino).is_some() {
            reply.attr(&TTL, &self.attr(ino.0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.image(ino) {
            Some(_) => reply.opened(FileHandle(0), FopenFlags::empty()),
            None => reply.error(Errno::EISDIR),
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
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(i) = self.image(ino) else {
            return reply.error(Errno::EISDIR);
        };
        let len = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        reply.data(&self.power.lock().images[i].read(offset, len));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let Some(i) = self.image(ino) else {
            return reply.error(Errno::EISDIR);
        };
        if offset.saturating_add(data.len() as u64) > self.size {
            return reply.error(Errno::ENOSPC);
        }
        let mut power = self.power.lock();
        if power.on {
            power.images[i].write(offset, data);
        }
        reply.written(data.len() as u32);
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let Some(i) = self.image(ino) else {
            return reply.ok();
        };
        let mut power = self.power.lock();
        if power.on {
            power.images[i].flush();
        }
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        for i in offset as usize..self.count {
            let name = image_name(i);
            if reply.add(
                INodeNo(ROOT + 1 + i as u64),
                i as u64 + 1,
                FileType::RegularFile,
                &name,
            ) {
                break;
            }
        }
        reply.ok();
    }
}
