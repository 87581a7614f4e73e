//! The namespace as buckets and objects: blocking calls on [`fs::Fs`],
//! run on tokio's bounded blocking threads by [`crate::s3`]. A bucket is a
//! directory under the root, a key a path below it ([`crate::names`]).

use std::sync::{Arc, OnceLock};

use fs::{Caller, Fs, FsError};
use meta::{
    Content, ContentHints, FileKind, Inode, InodeId, NewInode, PathFound, RenameFlags, XattrFlags,
    Xattrs,
};
use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::commit::GroupCommit;
use crate::error::{refused, s3_from_fs};
use crate::md5_hash::Md5;
use crate::names::{KeyPath, UPLOAD_PREFIX};

/// Where the MD5 of a file's bytes is cached, with the content it was
/// computed for (see [`identity`]).
const ETAG_XATTR: &[u8] = b"user.cairn.etag";
/// An object's Content-Type, as an xattr.
const TYPE_XATTR: &str = "user.cairn.s3.content-type";
/// An object's user metadata `x-amz-meta-NAME`, as xattrs of this prefix.
const META_XATTR: &str = "user.cairn.s3.meta.";
/// Bytes one blocking read or write handles.
pub const PIECE: usize = 1 << 20;

/// An object's Content-Type and user metadata among its xattrs.
fn attrs_of(xattrs: &Xattrs) -> Attrs {
    let mut attrs = Attrs::default();
    for (name, v) in xattrs {
        let Ok(text) = std::str::from_utf8(name) else {
            continue;
        };
        let value = || String::from_utf8_lossy(v).into_owned();
        if text == TYPE_XATTR {
            attrs.content_type = Some(value());
        } else if let Some(k) = text.strip_prefix(META_XATTR) {
            attrs.meta.push((k.to_string(), value()));
        }
    }
    attrs
}

fn conflict(msg: &str) -> S3Error {
    let mut e = S3Error::with_message(S3ErrorCode::InvalidArgument, msg.to_string());
    e.set_status_code(http::StatusCode::CONFLICT);
    e
}

/// A new inode as the process that runs the gateway would create it.
fn new_inode(kind: FileKind, perm: u16) -> NewInode {
    // SAFETY: plain getters without preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    NewInode {
        kind,
        perm,
        uid,
        gid,
        rdev: 0,
        content: Content::Empty,
        xattrs: Vec::new(),
    }
}

/// What the cached ETag of a file stored in the chunk store was computed
/// for: its recipe, size and mtime. A change through the mount changes at
/// least one, so a stale ETag is never shown. Inline and empty files have
/// none: their MD5 comes from the inode's bytes ([`InlineEtags`]).
fn identity(inode: &Inode) -> Option<String> {
    match &inode.content {
        Content::Recipe(root) => Some(format!(
            "{} {} {}.{}",
            root.to_hex(),
            inode.attr.size,
            inode.attr.mtime.secs,
            inode.attr.mtime.nanos
        )),
        _ => None,
    }
}

/// A PUT in progress: a temporary file in the key's directory.
pub struct Upload {
    pub dir: InodeId,
    pub tmp: String,
    pub ino: InodeId,
    /// The directories this PUT made for its key (the one holding each,
    /// its name), outermost first: a PUT that fails removes them again.
    made: Vec<(InodeId, String)>,
}

/// What a conditional PUT asks of the key it replaces.
#[derive(Debug, Clone, Default)]
pub enum Guard {
    #[default]
    None,
    /// `If-None-Match: *`: the key must not exist (checked by the rename
    /// itself: it does not replace).
    Absent,
    /// `If-Match`: the key must hold an object of this ETag (checked just
    /// before the rename).
    ETag(String),
}

/// The answer to a PUT whose condition does not hold.
pub fn precondition_failed() -> S3Error {
    refused(S3ErrorCode::PreconditionFailed)
}

/// What an object carries besides its bytes.
#[derive(Debug, Default, Clone)]
pub struct Attrs {
    pub content_type: Option<String>,
    /// `x-amz-meta-*` names (without the prefix) and values.
    pub meta: Vec<(String, String)>,
}

/// An object a GET or HEAD found: its inode, ETag, attributes, and where
/// its chunks are when the path index said so.
pub struct FoundObject {
    pub inode: Inode,
    pub etag: String,
    pub attrs: Attrs,
    pub hints: Option<ContentHints>,
}

/// Told of each name the gateway changed (the directory, the name): a
/// mount on the same `Fs` drops its kernel's cached entry for it.
pub type NameChanged = Box<dyn Fn(InodeId, &[u8]) + Send + Sync>;

#[derive(Clone)]
pub struct Tree {
    fs: Arc<Fs>,
    changed: Arc<OnceLock<NameChanged>>,
    group: Arc<GroupCommit>,
    inline_etags: Arc<InlineEtags>,
}

/// Inline objects' ETags seen lately. Their MD5 is not kept with them (an
/// xattr write per small PUT would cost PUT/s), and computing it on every
/// GET and HEAD cost a tenth of a warm GET's CPU. Keyed by a BLAKE3 of the
/// bytes, which is several times cheaper than MD5 and names the content
/// itself, so an entry can never be stale.
struct InlineEtags(parking_lot::Mutex<lru::LruCache<[u8; 32], String>>);

/// Entries kept: about 100 bytes each.
const INLINE_ETAGS: usize = 16 << 10;

impl InlineEtags {
    fn etag(&self, bytes: &[u8]) -> String {
        let key = *blake3::hash(bytes).as_bytes();
        if let Some(md5) = self.0.lock().get(&key) {
            return md5.clone();
        }
        let md5 = hex::encode(Md5::digest(bytes));
        self.0.lock().put(key, md5.clone());
        md5
    }
}

impl Default for InlineEtags {
    fn default() -> Self {
        let cap = std::num::NonZeroUsize::new(INLINE_ETAGS).expect("a positive bound");
        InlineEtags(parking_lot::Mutex::new(lru::LruCache::new(cap)))
    }
}

impl Tree {
    pub fn new(fs: Arc<Fs>, changed: Arc<OnceLock<NameChanged>>) -> Tree {
        Tree {
            fs,
            changed,
            group: Arc::default(),
            inline_etags: Arc::default(),
        }
    }

    /// Tells the mount, if there is one, that `name` in `dir` changed.
    fn changed(&self, dir: InodeId, name: &[u8]) {
        if let Some(f) = self.changed.get() {
            f(dir, name);
        }
    }

    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    /// The directory of bucket `name`.
    pub fn bucket(&self, name: &str) -> S3Result<InodeId> {
        match self.fs.lookup(InodeId::ROOT, name.as_bytes()) {
            Ok(i) if i.attr.kind == FileKind::Dir => Ok(i.id),
            Ok(_) => Err(refused(S3ErrorCode::NoSuchBucket)),
            Err(e) => Err(s3_from_fs(e, S3ErrorCode::NoSuchBucket, name)),
        }
    }

    /// Every top-level directory whose name is a valid bucket name.
    pub fn buckets(&self) -> S3Result<Vec<(String, Inode)>> {
        let mut out = Vec::new();
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = self
                .fs
                .readdir(InodeId::ROOT, after.as_deref(), 1024)
                .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, "/"))?;
            let Some(last) = page.last() else { break };
            after = Some(last.name.clone());
            for entry in page {
                let Ok(name) = String::from_utf8(entry.name) else {
                    continue;
                };
                if entry.kind != FileKind::Dir || !s3s::path::check_bucket_name(&name) {
                    continue;
                }
                if let Ok(inode) = self.fs.getattr(entry.ino) {
                    out.push((name, inode));
                }
            }
        }
        Ok(out)
    }

    pub fn create_bucket(&self, name: &str) -> S3Result<()> {
        match self.fs.create(
            InodeId::ROOT,
            name.as_bytes(),
            new_inode(FileKind::Dir, 0o755),
        ) {
            Ok(_) => {
                self.changed(InodeId::ROOT, name.as_bytes());
                Ok(())
            }
            Err(e) if e.errno() == libc::EEXIST => {
                Err(refused(S3ErrorCode::BucketAlreadyOwnedByYou))
            }
            Err(e) => Err(s3_from_fs(e, S3ErrorCode::InternalError, name)),
        }?;
        self.fs
            .sync_all()
            .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, name))
    }

    pub fn delete_bucket(&self, name: &str) -> S3Result<()> {
        self.bucket(name)?;
        match self.fs.rmdir(InodeId::ROOT, name.as_bytes()) {
            Ok(()) => self.changed(InodeId::ROOT, name.as_bytes()),
            Err(e) if e.errno() == libc::ENOTEMPTY => {
                return Err(refused(S3ErrorCode::BucketNotEmpty))
            }
            Err(e) => return Err(s3_from_fs(e, S3ErrorCode::NoSuchBucket, name)),
        }
        self.fs
            .sync_all()
            .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, name))
    }

    /// The inode a key names: a file, or with a trailing `/` a directory.
    pub fn object(&self, bucket: &str, key: &KeyPath<'_>) -> S3Result<Inode> {
        self.object_by_path(bucket, key).map(|found| found.inode)
    }

    /// What GET and HEAD answer from: the object a key names, its ETag
    /// and its attributes. A file the path index finds brings its xattrs
    /// (the cached ETag, Content-Type, user metadata), so none is read
    /// apart, and a small file's chunk hints ([`fs::Fs::read_small`]).
    pub fn found(&self, bucket: &str, key: &KeyPath<'_>) -> S3Result<FoundObject> {
        let PathFound {
            inode,
            xattrs,
            hints,
        } = self.object_by_path(bucket, key)?;
        let xattrs = match xattrs {
            Some(x) => x,
            None => self.xattrs(inode.id)?,
        };
        let etag = if inode.attr.kind == FileKind::Dir {
            hex::encode(Md5::digest(&[]))
        } else {
            self.etag_with(&inode, Some(&xattrs))?
        };
        Ok(FoundObject {
            attrs: attrs_of(&xattrs),
            inode,
            etag,
            hints,
        })
    }

    /// [`Tree::object`], with the inode's xattrs and chunk hints when the
    /// path index carried them.
    fn object_by_path(&self, bucket: &str, key: &KeyPath<'_>) -> S3Result<PathFound> {
        if let Some(found) = crate::fast::object(&self.fs, bucket, key) {
            return Ok(found);
        }
        let mut at = self.bucket(bucket)?;
        let mut inode = None;
        for part in &key.parts {
            let found = self
                .fs
                .lookup(at, part.as_bytes())
                .map_err(|e| s3_from_fs(e, S3ErrorCode::NoSuchKey, part))?;
            at = found.id;
            inode = Some(found);
        }
        let inode = inode.ok_or_else(|| refused(S3ErrorCode::NoSuchKey))?;
        let wanted = if key.dir {
            FileKind::Dir
        } else {
            FileKind::File
        };
        if inode.attr.kind != wanted {
            return Err(refused(S3ErrorCode::NoSuchKey));
        }
        Ok(PathFound::walked(inode))
    }

    /// The directories of `parts`, below the bucket, made where missing. A
    /// file on the way is an S3 error (a key `a/b` when `a` is an object).
    pub fn make_dirs(&self, at: InodeId, parts: &[&str]) -> S3Result<InodeId> {
        self.make_dirs_noting(at, parts, &mut Vec::new())
    }

    /// [`Tree::make_dirs`], noting in `made` each directory it made (the
    /// one holding it, its name), outermost first.
    fn make_dirs_noting(
        &self,
        mut at: InodeId,
        parts: &[&str],
        made: &mut Vec<(InodeId, String)>,
    ) -> S3Result<InodeId> {
        for part in parts {
            at = match self.fs.lookup(at, part.as_bytes()) {
                Ok(i) if i.attr.kind == FileKind::Dir => i.id,
                Ok(_) => {
                    return Err(conflict(&format!(
                        "{part:?} is an object (a file), so no key can go below it"
                    )))
                }
                Err(e) if e.errno() == libc::ENOENT => {
                    match self
                        .fs
                        .create(at, part.as_bytes(), new_inode(FileKind::Dir, 0o755))
                    {
                        Ok(i) => {
                            self.changed(at, part.as_bytes());
                            made.push((at, part.to_string()));
                            i.id
                        }
                        // Made by another request meanwhile.
                        Err(e) if e.errno() == libc::EEXIST => {
                            self.fs
                                .lookup(at, part.as_bytes())
                                .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, part))?
                                .id
                        }
                        Err(e) => return Err(s3_from_fs(e, S3ErrorCode::InternalError, part)),
                    }
                }
                Err(e) => return Err(s3_from_fs(e, S3ErrorCode::InternalError, part)),
            };
        }
        Ok(at)
    }

    /// A directory marker (`key/`): the directory, made with its parents.
    pub fn put_dir(&self, bucket: &str, key: &KeyPath<'_>) -> S3Result<()> {
        let root = self.bucket(bucket)?;
        self.make_dirs(root, &key.parts)?;
        self.fs
            .sync_all()
            .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, bucket))
    }

    /// Starts a PUT: the key's directories, and an open temporary file
    /// beside where the object will be.
    pub fn begin(&self, bucket: &str, key: &KeyPath<'_>) -> S3Result<Upload> {
        let root = self.bucket(bucket)?;
        let (name, above) = key.parts.split_last().expect("a key has a name");
        let mut made = Vec::new();
        let started = self
            .make_dirs_noting(root, above, &mut made)
            .and_then(|dir| {
                if let Ok(i) = self.fs.lookup(dir, name.as_bytes()) {
                    if i.attr.kind == FileKind::Dir {
                        return Err(conflict(&format!(
                        "{name:?} is a directory holding other keys; it cannot be an object too"
                    )));
                    }
                }
                let tmp = format!("{UPLOAD_PREFIX}{:016x}", rand::random::<u64>());
                let inode = self
                    .fs
                    .create(dir, tmp.as_bytes(), new_inode(FileKind::File, 0o644))
                    .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, &tmp))?;
                if let Err(e) = self.fs.open(inode.id) {
                    let _ = self.fs.unlink(dir, tmp.as_bytes());
                    return Err(s3_from_fs(e, S3ErrorCode::InternalError, &tmp));
                }
                Ok((dir, tmp, inode.id))
            });
        match started {
            Ok((dir, tmp, ino)) => Ok(Upload {
                dir,
                tmp,
                ino,
                made,
            }),
            Err(e) => {
                self.remove_made(&made);
                Err(e)
            }
        }
    }

    /// Removes the directories a PUT made, innermost first, as long as
    /// they are empty (another PUT may have put a key in one meanwhile).
    fn remove_made(&self, made: &[(InodeId, String)]) {
        for (parent, name) in made.iter().rev() {
            if self.fs.rmdir(*parent, name.as_bytes()).is_err() {
                break;
            }
            self.changed(*parent, name.as_bytes());
        }
    }

    pub fn write(&self, up: &Upload, offset: u64, data: &[u8]) -> S3Result<()> {
        let mut done = 0;
        while done < data.len() {
            let n = self
                .fs
                .write(up.ino, offset + done as u64, &data[done..])
                .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, &up.tmp))?;
            done += n as usize;
        }
        Ok(())
    }

    /// Drops a PUT that did not complete: nothing of it stays.
    pub fn abort(&self, up: &Upload) {
        let _ = self.fs.release(up.ino);
        if let Err(e) = self.fs.unlink(up.dir, up.tmp.as_bytes()) {
            tracing::warn!(file = %up.tmp, error = %e, "cannot remove an aborted upload's temporary file");
        }
        self.remove_made(&up.made);
    }

    /// Checks `guard` against what `name` in `dir` holds now.
    fn check_guard(&self, dir: InodeId, name: &str, guard: &Guard) -> S3Result<()> {
        let Guard::ETag(want) = guard else {
            return Ok(());
        };
        let found = match self.fs.lookup(dir, name.as_bytes()) {
            Ok(i) if i.attr.kind == FileKind::File => i,
            Ok(_) => return Err(refused(S3ErrorCode::NoSuchKey)),
            Err(e) => return Err(s3_from_fs(e, S3ErrorCode::NoSuchKey, name)),
        };
        if self.etag(&found)? != *want {
            return Err(precondition_failed());
        }
        Ok(())
    }

    /// Completes a PUT whose body was whole and verified: the temporary
    /// file takes the key's name (if `guard` holds) and is made durable;
    /// its MD5 is cached.
    pub fn finish(&self, up: &Upload, name: &str, md5: &str, guard: &Guard) -> S3Result<()> {
        let fail = |e: FsError| s3_from_fs(e, S3ErrorCode::InternalError, name);
        self.fs.release(up.ino).map_err(fail)?;
        self.check_guard(up.dir, name, guard)?;
        let flags = RenameFlags {
            noreplace: matches!(guard, Guard::Absent),
            ..RenameFlags::default()
        };
        match self
            .fs
            .rename(up.dir, up.tmp.as_bytes(), up.dir, name.as_bytes(), flags)
        {
            Ok(()) => self.changed(up.dir, name.as_bytes()),
            Err(e) if e.errno() == libc::EEXIST => return Err(precondition_failed()),
            Err(e) if matches!(e.errno(), libc::EISDIR | libc::ENOTEMPTY | libc::ENOTDIR) => {
                return Err(conflict(&format!(
                    "{name:?} is a directory holding other keys; it cannot be an object too"
                )))
            }
            Err(e) => return Err(fail(e)),
        }
        // Released above, the file's content is recorded: a commit run for
        // PUTs finishing at the same time covers this one too.
        self.group.durable(|| self.fs.fsync(up.ino)).map_err(|e| {
            tracing::error!(object = %name, error = %e, "making a PUT durable failed");
            S3Error::with_message(S3ErrorCode::InternalError, e)
        })?;
        let inode = self.fs.getattr(up.ino).map_err(fail)?;
        self.cache_etag(&inode, md5);
        Ok(())
    }

    fn cache_etag(&self, inode: &Inode, md5: &str) {
        let Some(id) = identity(inode) else { return };
        let value = format!("{id} {md5}");
        if let Err(e) = self.fs.set_xattr(
            inode.id,
            ETAG_XATTR,
            value.as_bytes(),
            XattrFlags::Either,
            &Caller::root(),
        ) {
            tracing::warn!(inode = inode.id.0, error = %e, "cannot cache an object's ETag");
        }
    }

    /// The MD5 of a file's bytes (hex) if it is known without reading the
    /// file: an inline or empty file's, or one cached for its content now.
    pub fn known_etag(&self, inode: &Inode) -> Option<String> {
        self.known_etag_with(inode, None)
    }

    /// [`Tree::known_etag`], taking the cached one from `xattrs` (all the
    /// inode's) when given instead of reading it.
    fn known_etag_with(&self, inode: &Inode, xattrs: Option<&Xattrs>) -> Option<String> {
        match &inode.content {
            Content::Inline(bytes) if inode.attr.size == bytes.len() as u64 => {
                return Some(self.inline_etags.etag(bytes))
            }
            Content::Empty if inode.attr.size == 0 => return Some(hex::encode(Md5::digest(&[]))),
            _ => {}
        }
        let id = identity(inode)?;
        let v = match xattrs {
            Some(x) => x.iter().find(|(n, _)| n == ETAG_XATTR)?.1.clone(),
            None => self.fs.get_xattr(inode.id, ETAG_XATTR).ok()?,
        };
        let md5 = std::str::from_utf8(&v)
            .ok()?
            .strip_prefix(id.as_str())?
            .strip_prefix(' ')?;
        Some(md5.to_string())
    }

    /// The MD5 of a file's bytes (hex): [`Tree::known_etag`], else computed
    /// by reading the file (one written through the mount, on its first
    /// GET or HEAD) and cached.
    pub fn etag(&self, inode: &Inode) -> S3Result<String> {
        self.etag_with(inode, None)
    }

    /// [`Tree::etag`], with the inode's xattrs when they are known.
    fn etag_with(&self, inode: &Inode, xattrs: Option<&Xattrs>) -> S3Result<String> {
        if let Some(md5) = self.known_etag_with(inode, xattrs) {
            return Ok(md5);
        }
        let fail = |e: FsError| s3_from_fs(e, S3ErrorCode::InternalError, "an object");
        let mut hasher = Md5::new();
        self.fs.open(inode.id).map_err(fail)?;
        let mut offset = 0;
        let read = loop {
            match self.fs.read(inode.id, offset, PIECE as u32) {
                Ok(b) if b.is_empty() => break Ok(()),
                Ok(b) => {
                    hasher.update(&b);
                    offset += b.len() as u64;
                }
                Err(e) => break Err(fail(e)),
            }
        };
        let _ = self.fs.release(inode.id);
        read?;
        let md5 = hex::encode(hasher.finalize());
        self.cache_etag(inode, &md5);
        Ok(md5)
    }

    pub fn open(&self, ino: InodeId) -> S3Result<()> {
        self.fs
            .open(ino)
            .map_err(|e| s3_from_fs(e, S3ErrorCode::NoSuchKey, "an object"))
    }

    /// `len` bytes at `offset` of an object, the next piece of `stream`
    /// (a GET's range, a copy's source range): what follows in the stream
    /// is read ahead, whatever other streams read the object.
    pub fn read(
        &self,
        ino: InodeId,
        offset: u64,
        len: u32,
        stream: &mut fs::Stream,
    ) -> Result<Vec<u8>, FsError> {
        self.fs.read_stream(ino, offset, len, stream)
    }

    pub fn release(&self, ino: InodeId) {
        let _ = self.fs.release(ino);
    }

    /// Deletes an object; a missing one is not an error (S3's answer). A
    /// directory marker removes the directory only if it is empty. The
    /// directories above that are left empty are removed as well.
    pub fn delete(&self, bucket: &str, key: &KeyPath<'_>) -> S3Result<()> {
        let root = self.bucket(bucket)?;
        let (name, above) = key.parts.split_last().expect("a key has a name");
        let mut dir = root;
        // The directories on the way, each with the one holding it.
        let mut way = Vec::with_capacity(above.len());
        for part in above {
            match self.fs.lookup(dir, part.as_bytes()) {
                Ok(i) if i.attr.kind == FileKind::Dir => {
                    way.push((dir, *part));
                    dir = i.id;
                }
                Ok(_) => return Ok(()),
                Err(e) if e.errno() == libc::ENOENT => return Ok(()),
                Err(e) => return Err(s3_from_fs(e, S3ErrorCode::InternalError, part)),
            }
        }
        let found = match self.fs.lookup(dir, name.as_bytes()) {
            Ok(i) => i,
            Err(e) if e.errno() == libc::ENOENT => return Ok(()),
            Err(e) => return Err(s3_from_fs(e, S3ErrorCode::InternalError, name)),
        };
        let gone = match (found.attr.kind, key.dir) {
            (FileKind::Dir, true) => match self.fs.rmdir(dir, name.as_bytes()) {
                Err(e) if e.errno() == libc::ENOTEMPTY => Ok(()),
                other => other,
            },
            (FileKind::Dir, false) | (_, true) => return Ok(()),
            _ => self.fs.unlink(dir, name.as_bytes()),
        };
        gone.map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, name))?;
        self.changed(dir, name.as_bytes());
        // Directories left empty go too, up to the bucket: in S3 a
        // "folder" is only the keys below it.
        for (parent, part) in way.iter().rev() {
            if self.fs.rmdir(*parent, part.as_bytes()).is_err() {
                break;
            }
            self.changed(*parent, part.as_bytes());
        }
        self.fs
            .sync_all()
            .map_err(|e| s3_from_fs(e, S3ErrorCode::InternalError, name))
    }

    /// Removes the empty directory `name` of `parent` (an upload's).
    pub fn rmdir(&self, parent: InodeId, name: &[u8]) -> Result<(), FsError> {
        self.fs.rmdir(parent, name)?;
        self.changed(parent, name);
        Ok(())
    }

    pub fn readdir(
        &self,
        dir: InodeId,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<meta::DirEntry>, FsError> {
        self.fs.readdir(dir, after, limit)
    }

    pub fn getattr(&self, ino: InodeId) -> Result<Inode, FsError> {
        self.fs.getattr(ino)
    }

    /// Sets an object's Content-Type and user metadata, replacing what it
    /// had.
    pub fn set_attrs(&self, ino: InodeId, attrs: &Attrs) -> S3Result<()> {
        let fail = |e: FsError| s3_from_fs(e, S3ErrorCode::InternalError, "an object");
        for name in self.fs.list_xattr(ino).map_err(fail)? {
            if name.starts_with(META_XATTR.as_bytes()) || name == TYPE_XATTR.as_bytes() {
                self.fs.remove_xattr(ino, &name).map_err(fail)?;
            }
        }
        let set = |name: &[u8], value: &str| {
            self.fs
                .set_xattr(
                    ino,
                    name,
                    value.as_bytes(),
                    XattrFlags::Either,
                    &Caller::root(),
                )
                .map_err(fail)
        };
        if let Some(t) = &attrs.content_type {
            set(TYPE_XATTR.as_bytes(), t)?;
        }
        for (k, v) in &attrs.meta {
            set(
                format!("{META_XATTR}{}", k.to_ascii_lowercase()).as_bytes(),
                v,
            )?;
        }
        Ok(())
    }

    /// An object's Content-Type and user metadata.
    pub fn attrs(&self, ino: InodeId) -> S3Result<Attrs> {
        Ok(attrs_of(&self.xattrs(ino)?))
    }

    /// Every xattr of `ino`, in name order.
    fn xattrs(&self, ino: InodeId) -> S3Result<Xattrs> {
        let fail = |e: FsError| s3_from_fs(e, S3ErrorCode::InternalError, "an object");
        let mut out = Vec::new();
        for name in self.fs.list_xattr(ino).map_err(fail)? {
            let v = self.fs.get_xattr(ino, &name).map_err(fail)?;
            out.push((name, v));
        }
        Ok(out)
    }

    /// Copies object `src` to key `dst` as a clone (the recipe is shared,
    /// no data is copied), through a temporary name renamed over the key.
    /// With `attrs`, the copy gets those instead of the source's.
    pub fn copy(
        &self,
        src_bucket: &str,
        src: &KeyPath<'_>,
        dst_bucket: &str,
        dst: &KeyPath<'_>,
        attrs: Option<&Attrs>,
    ) -> S3Result<Inode> {
        let from = self.object(src_bucket, src)?;
        if from.attr.kind != FileKind::File {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "only an object (a file) can be copied",
            ));
        }
        let root = self.bucket(dst_bucket)?;
        let (name, above) = dst.parts.split_last().expect("a key has a name");
        let dir = self.make_dirs(root, above)?;
        let tmp = format!("{UPLOAD_PREFIX}{:016x}", rand::random::<u64>());
        let src_path = format!("{src_bucket}/{}", src.parts.join("/"));
        let mut tmp_path = format!("{dst_bucket}/");
        for p in above {
            tmp_path.push_str(p);
            tmp_path.push('/');
        }
        tmp_path.push_str(&tmp);
        let fail = |e: FsError| s3_from_fs(e, S3ErrorCode::InternalError, name);
        self.fs.clone_path(&src_path, &tmp_path).map_err(fail)?;
        let done = (|| {
            let copy = self.fs.lookup(dir, tmp.as_bytes()).map_err(fail)?;
            if let Some(a) = attrs {
                self.set_attrs(copy.id, a)?;
            }
            match self.fs.rename(
                dir,
                tmp.as_bytes(),
                dir,
                name.as_bytes(),
                RenameFlags::default(),
            ) {
                Ok(()) => self.changed(dir, name.as_bytes()),
                Err(e) if matches!(e.errno(), libc::EISDIR | libc::ENOTEMPTY | libc::ENOTDIR) => {
                    return Err(conflict(&format!(
                        "{name:?} is a directory holding other keys; it cannot be an object too"
                    )))
                }
                Err(e) => return Err(fail(e)),
            }
            self.fs.fsync(copy.id).map_err(fail)?;
            self.fs.getattr(copy.id).map_err(fail)
        })();
        if done.is_err() {
            let _ = self.fs.unlink(dir, tmp.as_bytes());
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inline_etag_is_the_md5_of_exactly_those_bytes() {
        let etags = InlineEtags::default();
        let a = b"some object".to_vec();
        let mut b = a.clone();
        b[3] ^= 1;
        for _ in 0..2 {
            assert_eq!(etags.etag(&a), hex::encode(Md5::digest(&a)));
            assert_eq!(etags.etag(&b), hex::encode(Md5::digest(&b)));
        }
        assert_eq!(etags.etag(b""), hex::encode(Md5::digest(&[])));
    }
}
