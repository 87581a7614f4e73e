//! `copy_file_range(2)` between files of the mount, without the data
//! passing through the kernel: a whole file copied onto an empty one is a
//! recipe clone, the mechanism `history`'s `clone_path` uses (the copy
//! points at the source's recorded recipe; no chunk is read or stored); a
//! whole file copied onto the end of one whose bytes are all in recorded
//! chunks is a splice (its chunks listed after the others, none read or
//! stored: how the gateway joins a multipart upload's parts); any other
//! range is read and written inside the daemon. Both files stay
//! independent: a recipe is immutable, and a write to either builds a new
//! one for that file alone.

use meta::{Content, FileKind, Inode, InodeId};

use crate::file::FileState;
use crate::snapview::is_virtual;
use crate::{now, writable, Caller, Fs, FsError, Result};

/// Bytes a copy through the daemon reads and writes per step.
const STEP: u64 = 1 << 20;
/// The most one FUSE `copy_file_range` asks for: its reply counts in 32
/// bits, so the kernel splits a longer copy into requests of at most this.
const REQUEST_MAX: u64 = u32::MAX as u64 & !4095;

impl Fs {
    /// Copies `len` bytes of `src` at `src_off` to `dst` at `dst_off`, as
    /// `caller` writes; returns how many were copied (fewer at the end of
    /// `src`). Clones the recipe when the copy is the whole of `src` onto
    /// an empty `dst`; a later request of the same copy, over bytes the
    /// clone already made equal, copies nothing again.
    pub fn copy_range(
        &self,
        src: InodeId,
        src_off: u64,
        dst: InodeId,
        dst_off: u64,
        len: u64,
        caller: &Caller,
    ) -> Result<u64> {
        writable(dst)?;
        if len == 0 {
            return Ok(0);
        }
        if !is_virtual(src) && src != dst {
            // Recorded first: the clone must carry the latest writes.
            self.flush(src)?;
            let from = self.inner.meta.get(src)?;
            if from.attr.kind != FileKind::File {
                return Err(FsError::NotFile);
            }
            let rest = from.attr.size.saturating_sub(src_off);
            if src_off == dst_off && self.holds_the_same(dst, &from)? {
                return Ok(len.min(rest));
            }
            let whole = len >= from.attr.size.min(REQUEST_MAX);
            if src_off == 0 && dst_off == 0 && whole && self.clone_into(dst, &from, caller)? {
                return Ok(len.min(rest));
            }
            if src_off == 0
                && len >= from.attr.size
                && self.splice_onto(dst, dst_off, &from, caller)?
            {
                return Ok(from.attr.size);
            }
        }
        self.copy_through(src, src_off, dst, dst_off, len, caller)
    }

    /// Whether `dst` holds, as recorded, the very content of `from` (a
    /// clone made by an earlier request of the same copy).
    fn holds_the_same(&self, dst: InodeId, from: &Inode) -> Result<bool> {
        if matches!(from.content, Content::Empty) {
            return Ok(false);
        }
        self.flush(dst)?;
        let to = self.inner.meta.get(dst)?;
        Ok(to.content == from.content && to.attr.size == from.attr.size)
    }

    /// Makes an empty `dst` a clone of `from`'s recorded content; `false`
    /// (nothing done) if `dst` is not empty.
    fn clone_into(&self, dst: InodeId, from: &Inode, caller: &Caller) -> Result<bool> {
        let inner = &self.inner;
        let extents = inner.extents_of(&from.content)?;
        let state = inner.state(dst)?;
        let recording = inner.recording.read();
        let mut f = inner.lock_settled(&state);
        let result = if f.size != 0 {
            Ok(false)
        } else {
            inner.kill_priv_for(dst, caller).and_then(|()| {
                let before = f.held();
                let size = from.attr.size;
                let fresh = FileState::new(dst, size, from.content.clone(), extents);
                f.extents = fresh.extents;
                f.touched.everything();
                f.dirty = fresh.dirty;
                f.dirty_bytes = fresh.dirty_bytes;
                f.size = size;
                f.content = from.content.clone();
                inner.account(before, f.held());
                let set = inner
                    .meta
                    .set_content(dst, from.content.clone(), size, now());
                // Unrecorded, it is recorded again by the next flush.
                f.recorded();
                f.changed = set.is_err();
                set.map(|_| true).map_err(Into::into)
            })
        };
        drop(f);
        drop(recording);
        inner.release_state(dst, state);
        if let (Ok(true), Content::Recipe(root)) = (&result, &from.content) {
            inner.protect_shared(dst, from.attr.size, *root);
        }
        result
    }

    /// Appends `from`'s recorded chunks to `dst` at `at`, its end: the
    /// recipe `dst` records next lists them after its own, no byte read or
    /// stored. Only where `dst`'s bytes are all in chunks ending at `at`
    /// (no dirty bytes, not inline, not cut in fixed-size blocks, whose
    /// chunks must stay aligned) and `from` is held in a recipe; `false`
    /// (nothing done) otherwise.
    fn splice_onto(&self, dst: InodeId, at: u64, from: &Inode, caller: &Caller) -> Result<bool> {
        if at == 0 || !matches!(from.content, Content::Recipe(_)) {
            return Ok(false);
        }
        let inner = &self.inner;
        let extents = inner.extents_of(&from.content)?;
        let state = inner.state(dst)?;
        let recording = inner.recording.read();
        let mut f = inner.lock_settled(&state);
        let result = inner.know_chunking(&mut f).and_then(|()| {
            let whole_chunks = f.size == at
                && f.dirty_bytes == 0
                && f.extents_end() == at
                && matches!(f.content, Content::Recipe(_))
                && f.chunking.block().is_none();
            if !whole_chunks {
                return Ok(false);
            }
            inner.kill_priv_for(dst, caller)?;
            f.extents
                .extend(extents.into_iter().map(|e| recipe::Extent {
                    offset: e.offset + at,
                    ..e
                }));
            f.size = at + from.attr.size;
            f.modified(now());
            Ok(true)
        });
        drop(f);
        drop(recording);
        inner.release_state(dst, state);
        if let (Ok(true), Content::Recipe(root)) = (&result, &from.content) {
            // The spliced chunks are the source's; its recipe stands for them.
            inner.protect_shared(dst, at + from.attr.size, *root);
        }
        result
    }

    /// The copy as a read and a write per step, inside the daemon.
    fn copy_through(
        &self,
        src: InodeId,
        src_off: u64,
        dst: InodeId,
        dst_off: u64,
        len: u64,
        caller: &Caller,
    ) -> Result<u64> {
        let mut done = 0;
        while done < len {
            let step = (len - done).min(STEP) as u32;
            let data = self.read(src, src_off + done, step)?;
            if data.is_empty() {
                break;
            }
            self.write_as(dst, dst_off + done, &data, caller)?;
            done += data.len() as u64;
        }
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use meta::{FileKind, NewInode};

    use crate::testing::fs_in;
    use crate::{Caller, Fs};

    fn file(fs: &Fs, name: &[u8]) -> meta::InodeId {
        let new = NewInode {
            kind: FileKind::File,
            perm: 0o644,
            uid: 0,
            gid: 0,
            rdev: 0,
            content: meta::Content::Empty,
            xattrs: Vec::new(),
        };
        let ino = fs.create(meta::InodeId::ROOT, name, new).unwrap().id;
        fs.open(ino).unwrap();
        ino
    }

    fn data(n: usize) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn a_whole_file_clone_stores_nothing_and_stays_independent() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let a = file(&fs, b"a");
        let b = file(&fs, b"b");
        let want = data(3 << 20);
        fs.write(a, 0, &want).unwrap();
        fs.fsync(a).unwrap();
        let stored = fs.stats().unwrap().stored_bytes;
        let n = fs
            .copy_range(a, 0, b, 0, want.len() as u64, &Caller::root())
            .unwrap();
        assert_eq!(n, want.len() as u64);
        fs.fsync(b).unwrap();
        assert_eq!(
            fs.stats().unwrap().stored_bytes,
            stored,
            "a clone stores no chunk"
        );
        assert!(fs.read(b, 0, want.len() as u32).unwrap() == want);
        // The same copy asked again (a later request) copies nothing.
        let again = fs
            .copy_range(a, 1 << 20, b, 1 << 20, 1 << 30, &Caller::root())
            .unwrap();
        assert_eq!(again, 2 << 20);
        fs.write(b, 100, b"only b").unwrap();
        fs.write(a, 200, b"only a").unwrap();
        let (ra, rb) = (fs.read(a, 0, 300).unwrap(), fs.read(b, 0, 300).unwrap());
        assert_eq!(&ra[100..106], &want[100..106]);
        assert_eq!(&rb[100..106], b"only b");
        assert_eq!(&rb[200..206], &want[200..206]);
        assert_eq!(&ra[200..206], b"only a");
    }

    #[test]
    fn whole_files_copied_end_to_end_are_spliced_and_store_only_a_recipe() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let (a, b, c) = (file(&fs, b"a"), file(&fs, b"b"), file(&fs, b"c"));
        let first = data(3 << 20);
        let second: Vec<u8> = data((2 << 20) + 12_345).into_iter().rev().collect();
        fs.write(a, 0, &first).unwrap();
        fs.write(b, 0, &second).unwrap();
        fs.fsync(a).unwrap();
        fs.fsync(b).unwrap();
        let stored = fs.stats().unwrap().stored_bytes;
        let root = &Caller::root();
        let n = fs.copy_range(a, 0, c, 0, 1 << 30, root).unwrap();
        assert_eq!(n, first.len() as u64);
        let at = first.len() as u64;
        let n = fs.copy_range(b, 0, c, at, 1 << 30, root).unwrap();
        assert_eq!(n, second.len() as u64);
        let held = fs
            .inner
            .dirty_total
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(held, 0, "a splice reads and writes no byte");
        fs.fsync(c).unwrap();
        let added = fs.stats().unwrap().stored_bytes - stored;
        assert!(
            added < 64 << 10,
            "a splice stores its recipe only, not the {} bytes: {added}",
            second.len()
        );
        // The copy's chunks are the two files' own, end to end (no chunk
        // cut anew across where they meet).
        let chunks = |ino| {
            let content = fs.getattr(ino).unwrap().content;
            let extents = fs.inner.extents_of(&content).unwrap();
            extents.into_iter().map(|e| e.chunk).collect::<Vec<_>>()
        };
        assert_eq!(chunks(c), [chunks(a), chunks(b)].concat());
        let want = [first.as_slice(), second.as_slice()].concat();
        assert_eq!(fs.getattr(c).unwrap().attr.size, want.len() as u64);
        assert!(fs.read(c, 0, want.len() as u32).unwrap() == want);
        // Recorded: the file reads the same once nobody holds it open.
        fs.release(c).unwrap();
        fs.open(c).unwrap();
        assert!(fs.read(c, 0, want.len() as u32).unwrap() == want);
        // Independent: a write to the copy leaves the source as it was.
        fs.write(c, at + 10, b"only c").unwrap();
        assert_eq!(&fs.read(b, 10, 6).unwrap()[..], &second[10..16]);
        assert_eq!(&fs.read(c, at + 10, 6).unwrap()[..], b"only c");
    }

    #[test]
    fn a_whole_file_copied_after_unrecorded_bytes_is_copied_through() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let (a, c) = (file(&fs, b"a"), file(&fs, b"c"));
        let src = data((1 << 20) + 7);
        fs.write(a, 0, &src).unwrap();
        fs.fsync(a).unwrap();
        fs.write(c, 0, b"not yet in chunks").unwrap();
        let n = fs
            .copy_range(a, 0, c, 17, 1 << 30, &Caller::root())
            .unwrap();
        assert_eq!(n, src.len() as u64);
        let got = fs.read(c, 0, 17 + src.len() as u32).unwrap();
        assert_eq!(&got[..17], b"not yet in chunks");
        assert!(got[17..] == src[..]);
    }

    #[test]
    fn a_range_is_copied_through_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_in(dir.path());
        let a = file(&fs, b"a");
        let b = file(&fs, b"b");
        let want = data(3 << 20);
        fs.write(a, 0, &want).unwrap();
        fs.write(b, 0, b"head").unwrap();
        let n = fs
            .copy_range(a, 1000, b, 2, 2 << 20, &Caller::root())
            .unwrap();
        assert_eq!(n, 2 << 20);
        let got = fs.read(b, 0, (2 << 20) + 2).unwrap();
        assert_eq!(&got[..2], b"he");
        assert!(got[2..] == want[1000..1000 + (2 << 20)]);
        // Past the end of the source only what is there is copied.
        let tail = fs
            .copy_range(a, (3 << 20) - 10, b, 0, 100, &Caller::root())
            .unwrap();
        assert_eq!(tail, 10);
    }
}
