//! The FUSE adapter: cairn's file system as a kernel mount.
//!
//! **Owns:** translation only: kernel FUSE requests (through `fuser`)
//! become [`fs::Fs`] calls and their errors errno values
//! ([`fs::FsError::errno`]) (`ops`); attributes, times, flags and inode
//! numbers are converted in one place (`convert`); the per-`opendir`
//! directory listings keep `readdir` offsets stable (`dir`); the mount,
//! its worker threads and its unmount ([`mount`], [`Mounted`]), what is
//! mounted where ([`mount_state`]) and which directories can take a mount
//! ([`check_mountpoint`]) are the session's (`session`), as is reading
//! the kernel's mount table for every cairn mount ([`cairn_mounts`], which
//! `cairn doctor` uses to find mounts left dead by a crash). With
//! [`FuseMetrics`] given, each request's latency and the bytes moved are
//! counted for `/metrics` (`metrics`). The page cache is the kernel's, so
//! pushing a random reader's neighbours into it (`FUSE_NOTIFY_STORE`) is
//! this crate's too (`push`): `fs` says what it decoded around a read, and
//! which of those bytes its DRAM cache holds.
//!
//! **Never:** stores, chunks, caches or commits data, and never touches the
//! metadata engine directly: every operation goes through [`fs::Fs`], which
//! owns the ordering of data before metadata. It applies no POSIX rule of
//! its own: the kernel checks permissions (the mount uses
//! `default_permissions` and POSIX ACLs, `FUSE_POSIX_ACL`), and the rules
//! the kernel leaves to the file system (the umask, inherited and chmod-ed
//! ACLs, a set-group-id directory's group, the set-id bits a write or
//! truncate clears, `fallocate`, `copy_file_range`'s clones, a directory's
//! `..`) are `fs`'s. It keeps
//! no state about inodes but open directory listings, the session, and
//! which inodes are open for writing (what a store must never race).
//!
//! **Invariants:**
//! - With the writeback cache asked for (`MountOptions::writeback_cache`)
//!   the kernel writes a file's dirty pages back before it sends a flush,
//!   fsync, setattr, fallocate or copy for it, so `fs` sees every write
//!   before the operation that depends on it.
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
//!   both sides; converted only by `convert::id` and `convert::ino`), and
//!   never reused, so the generation is always 0.
//! - A mount never goes on top of a live cairn mount, and the unmount of
//!   one never takes down a mount beneath it: a mount point is unmounted at
//!   most once, while this session's mount is still the one on top.
//! - When the session ends (unmount from inside or outside) every open
//!   file's content is recorded and made durable ([`fs::Fs::sync_all`])
//!   before [`Mounted::unmount`] or [`Mounted::wait`] return.
//! - A read-only mount ([`MountOptions::read_only`]) is mounted `ro`: the
//!   kernel refuses every change with `EROFS` before `fs` sees it, and an
//!   `open` for writing that got past it is refused here too.
//! - Bytes are stored into the page cache only for an inode no handle has
//!   open for writing and whose size is not being changed, checked under
//!   the lock an open for writing takes, and only after the read that
//!   brought them was answered (so a store never waits for a page locked
//!   by a read waiting for the daemon).
//! - On a close-to-open mount ([`MountOptions::close_to_open`], other
//!   clients share the file system) the kernel caches no attribute or
//!   entry, uses no writeback cache, and keeps a file's cached pages at
//!   an open only when its size and times are those of its last open here.
//! - Locks are `parking_lot`'s, which do not poison: a panic under a lock
//!   does not spread to later callers (`docs/engineering.md`).

mod convert;
mod dir;
mod metrics;
mod ops;
mod push;
mod session;

pub use metrics::FuseMetrics;
pub use session::{
    cairn_mounts, check_fuse_available, check_mountpoint, detach, fsname_for, fusermount_bin,
    mount, mount_state, FuseError, Invalidator, MountEntry, MountOptions, MountState, Mounted,
    Unmounter,
};
