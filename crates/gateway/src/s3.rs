//! The S3 operations, as s3s's [`S3`] trait: each one checks its names,
//! then does its file-system work on tokio's bounded blocking threads
//! ([`Tree`]); bodies move in pieces of [`PIECE`] bytes.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use meta::{FileKind, Inode};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};

use crate::checksum::Declared;
use crate::error::{refused, s3_from_join};
use crate::keys::Keyring;
use crate::list::{self, Item, Query};
use crate::md5_hash::Md5;
use crate::multipart;
use crate::names::{self, KeyPath};
use crate::pieces::Pieces;
use crate::server::Limits;
use crate::tree::{precondition_failed, Attrs, FoundObject, Guard, Tree, Upload, PIECE};

/// What `EncodingType=url` leaves as it is (boto3 asks for it on every
/// listing and decodes with `unquote_plus`, so `+` must be encoded).
const URL_KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');
/// Keys one listing returns at most (S3's limit).
const MAX_KEYS: i32 = 1000;

pub struct Gateway {
    tree: Tree,
    keys: Arc<Keyring>,
    limits: Limits,
}

impl Gateway {
    pub fn new(tree: Tree, keys: Arc<Keyring>, limits: Limits) -> Gateway {
        Gateway { tree, keys, limits }
    }
}

/// The S3 error for a body that failed while it streamed in. s3s's
/// stream errors are not public types: their text names what failed.
fn body_error(e: &dyn std::fmt::Display) -> S3Error {
    let text = e.to_string();
    if text.contains("Sha256Mismatch") {
        // S3's code; s3s has no variant for it.
        let mut e = S3Error::with_message(
            S3ErrorCode::Custom("XAmzContentSHA256Mismatch".into()),
            "the body does not match its x-amz-content-sha256",
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        return e;
    }
    let code = if text.contains("SignatureMismatch") {
        S3ErrorCode::SignatureDoesNotMatch
    } else {
        S3ErrorCode::IncompleteBody
    };
    S3Error::with_message(code, text)
}

fn too_large(limit: u64) -> S3Error {
    S3Error::with_message(
        S3ErrorCode::EntityTooLarge,
        format!("the body is larger than this gateway takes ({limit} bytes)"),
    )
}

/// The `range` of a small chunked object read whole by where its chunks
/// are ([`fs::Fs::read_small`]); `None` to read it as any other (a file
/// being written, a larger one, any failure: that read gives the error).
fn small_body(
    t: &Tree,
    inode: &Inode,
    hints: Option<&meta::ContentHints>,
    range: std::ops::Range<u64>,
) -> Option<Bytes> {
    match t.fs().read_small(inode, hints) {
        Ok(Some(bytes)) if bytes.len() as u64 == inode.attr.size => Some(Bytes::copy_from_slice(
            &bytes[range.start as usize..range.end as usize],
        )),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(inode = inode.id.0, error = %e, "reading a small object by its chunk hints failed; reading it as usual");
            None
        }
    }
}

/// Runs `f` on a blocking thread with a handle on the tree.
async fn blocking<T: Send + 'static>(
    tree: &Tree,
    f: impl FnOnce(&Tree) -> S3Result<T> + Send + 'static,
) -> S3Result<T> {
    let tree = tree.clone();
    tokio::task::spawn_blocking(move || f(&tree))
        .await
        .map_err(s3_from_join)?
}

/// The result of a file-system call started with `spawn_blocking`.
async fn joined<T>(h: tokio::task::JoinHandle<S3Result<T>>) -> S3Result<T> {
    h.await.map_err(s3_from_join)?
}

fn check_bucket(name: &str) -> S3Result<()> {
    if s3s::path::check_bucket_name(name) {
        Ok(())
    } else {
        Err(refused(S3ErrorCode::InvalidBucketName))
    }
}

/// A key's parts, owned, to move onto a blocking thread.
fn owned_key(key: &str) -> S3Result<(Vec<String>, bool)> {
    let k = names::split(key)?;
    Ok((k.parts.iter().map(|p| p.to_string()).collect(), k.dir))
}

fn key_path(parts: &[String], dir: bool) -> KeyPath<'_> {
    KeyPath {
        parts: parts.iter().map(String::as_str).collect(),
        dir,
    }
}

fn modified(inode: &Inode) -> Timestamp {
    let t = inode.attr.mtime;
    let d = std::time::Duration::new(t.secs.max(0) as u64, t.nanos);
    Timestamp::from(std::time::UNIX_EPOCH + d)
}

fn encode(s: &str, url: bool) -> String {
    if url {
        utf8_percent_encode(s, URL_KEEP).to_string()
    } else {
        s.to_string()
    }
}

/// The conditional headers of a GET or HEAD.
struct Conditions {
    if_match: Option<ETagCondition>,
    if_none_match: Option<ETagCondition>,
    if_modified_since: Option<Timestamp>,
    if_unmodified_since: Option<Timestamp>,
}

fn matches(cond: &ETagCondition, etag: &str) -> bool {
    match cond {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag,
    }
}

fn unix_secs(t: Timestamp) -> i64 {
    time::OffsetDateTime::from(t).unix_timestamp()
}

impl Conditions {
    /// RFC 9110's order: If-Match, else If-Unmodified-Since (412); then
    /// If-None-Match, else If-Modified-Since (304). HTTP dates have whole
    /// seconds, so the object's mtime is compared in whole seconds.
    fn check(self, found: &FoundObject) -> S3Result<()> {
        let mtime = found.inode.attr.mtime.secs;
        let failed = match (&self.if_match, self.if_unmodified_since) {
            (Some(c), _) => !matches(c, &found.etag),
            (None, Some(t)) => mtime > unix_secs(t),
            (None, None) => false,
        };
        if failed {
            return Err(refused(S3ErrorCode::PreconditionFailed));
        }
        let unchanged = match (&self.if_none_match, self.if_modified_since) {
            (Some(c), _) => matches(c, &found.etag),
            (None, Some(t)) => mtime <= unix_secs(t),
            (None, None) => false,
        };
        if unchanged {
            return Err(refused(S3ErrorCode::NotModified));
        }
        Ok(())
    }
}

impl Gateway {
    async fn find(&self, bucket: &str, key: &str) -> S3Result<FoundObject> {
        let (parts, dir) = owned_key(key)?;
        let bucket = bucket.to_string();
        blocking(&self.tree, move |t| {
            t.found(&bucket, &key_path(&parts, dir))
        })
        .await
    }

    /// The condition of a conditional PUT, checked once now (so a PUT
    /// that cannot succeed is refused before its body is read) and again
    /// when the object takes the key.
    async fn guard(
        &self,
        bucket: &str,
        key: &str,
        if_match: Option<ETagCondition>,
        if_none_match: Option<ETagCondition>,
    ) -> S3Result<Guard> {
        let guard = match (if_match, if_none_match) {
            (None, None) => return Ok(Guard::None),
            (None, Some(ETagCondition::Any)) => Guard::Absent,
            (Some(ETagCondition::ETag(e)), None) => Guard::ETag(e.value().to_string()),
            _ => {
                return Err(S3Error::with_message(
                    S3ErrorCode::NotImplemented,
                    "a PUT takes If-None-Match: * or If-Match: ETAG, one of them",
                ))
            }
        };
        let found = match self.find(bucket, key).await {
            Ok(f) => Some(f),
            Err(e) if *e.code() == S3ErrorCode::NoSuchKey => None,
            Err(e) => return Err(e),
        };
        match (&guard, found) {
            (Guard::Absent, Some(_)) => Err(precondition_failed()),
            (Guard::ETag(_), None) => Err(refused(S3ErrorCode::NoSuchKey)),
            (Guard::ETag(want), Some(f)) if f.etag != *want => Err(precondition_failed()),
            _ => Ok(guard),
        }
    }

    /// Whether `req`'s key may see bucket `name` (keys can be limited to
    /// some buckets).
    fn may_see(&self, creds: Option<&s3s::auth::Credentials>, name: &str) -> bool {
        creds
            .and_then(|c| self.keys.grant(&c.access_key))
            .is_some_and(|g| g.buckets.is_empty() || g.buckets.iter().any(|b| b == name))
    }

    /// Stores `body` at `parts` of `bucket`, all or nothing; its MD5.
    async fn write_body(
        &self,
        bucket: String,
        parts: Vec<String>,
        body: Incoming,
        attrs: Attrs,
        guard: Guard,
    ) -> S3Result<String> {
        let Incoming {
            blob: mut body,
            length,
            content_md5,
            mut declared,
        } = body;
        // Refused before a byte is read, or a directory made.
        let max = self.limits.max_put;
        if length.is_some_and(|l| l as u64 > max) {
            return Err(too_large(max));
        }
        let up = blocking(&self.tree, {
            let (bucket, parts) = (bucket.clone(), parts.clone());
            move |t| t.begin(&bucket, &key_path(&parts, false))
        })
        .await?;
        let up = Arc::new(up);
        let pending = Pending {
            tree: self.tree.clone(),
            up: Some(up.clone()),
        };
        // Each piece is hashed and written on blocking threads, one hash
        // and one write in flight at a time (each chain in order), while
        // the next piece is received: the network, MD5 (a third of a large
        // PUT's time) and the file system overlap.
        let mut sink = Sink {
            tree: self.tree.clone(),
            up: up.clone(),
            md5: Some(Md5::new()),
            offset: 0,
            hashing: None,
            writing: None,
        };
        let mut pieces = Pieces::new();
        let mut taken = 0u64;
        let streamed: S3Result<()> = async {
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| body_error(&e))?;
                // A body without a length is counted as it comes.
                taken += chunk.len() as u64;
                if taken > max {
                    return Err(too_large(max));
                }
                declared.update(&chunk);
                let mut rest = &chunk[..];
                while !rest.is_empty() {
                    if let Some(piece) = pieces.fill(&mut rest) {
                        sink.send(piece).await?;
                    }
                }
            }
            match pieces.last() {
                Some(piece) => sink.send(piece).await,
                None => Ok(()),
            }
        }
        .await;
        let (md5, offset, stored) = sink.end().await;
        let received = streamed.and(stored);
        let md5 = md5.finalize();
        let verdict = received.and_then(|()| declared.verify()).and_then(|()| {
            if length.is_some_and(|l| l != offset as i64) {
                return Err(S3Error::with_message(
                    S3ErrorCode::IncompleteBody,
                    "the body is not as long as Content-Length says",
                ));
            }
            if let Some(want) = content_md5 {
                let got = base64::engine::general_purpose::STANDARD.encode(md5);
                if got != want.trim() {
                    return Err(refused(S3ErrorCode::BadDigest));
                }
            }
            Ok(())
        });
        let name = parts.last().expect("a key has a name").clone();
        let etag = hex::encode(md5);
        verdict?;
        let etag2 = etag.clone();
        let up2 = up.clone();
        blocking(&self.tree, move |t| {
            t.set_attrs(up2.ino, &attrs)?;
            t.finish(&up2, &name, &etag2, &guard)
        })
        .await?;
        pending.done();
        Ok(etag)
    }
}

/// Where a PUT's pieces go: each hashed and written on a blocking thread,
/// one hash and one write in flight, in order.
struct Sink {
    tree: Tree,
    up: Arc<Upload>,
    /// The MD5 so far; away while a piece is hashed.
    md5: Option<Md5>,
    /// Bytes sent to be written so far.
    offset: u64,
    hashing: Option<tokio::task::JoinHandle<Md5>>,
    writing: Option<tokio::task::JoinHandle<S3Result<()>>>,
}

impl Sink {
    /// Starts hashing and writing `piece` once the piece before it is
    /// hashed and written.
    async fn send(&mut self, piece: Bytes) -> S3Result<()> {
        if let Some(previous) = self.hashing.take() {
            self.md5 = Some(previous.await.map_err(s3_from_join)?);
        }
        let mut hash = self.md5.take().expect("back from the last hash");
        let data = piece.clone();
        self.hashing = Some(tokio::task::spawn_blocking(move || {
            hash.update(&data);
            hash
        }));
        if let Some(previous) = self.writing.take() {
            joined(previous).await?;
        }
        let (tree, up, at) = (self.tree.clone(), self.up.clone(), self.offset);
        self.offset += piece.len() as u64;
        self.writing = Some(tokio::task::spawn_blocking(move || {
            tree.write(&up, at, &piece)
        }));
        Ok(())
    }

    /// Waits for the hash and the write in flight (the write ends before
    /// anything else touches the file, whether the body arrived whole or
    /// not): the MD5 of the bytes sent, their count, and whether every
    /// write succeeded.
    async fn end(mut self) -> (Md5, u64, S3Result<()>) {
        let mut result = match self.writing.take() {
            Some(w) => joined(w).await,
            None => Ok(()),
        };
        if let Some(h) = self.hashing.take() {
            match h.await {
                Ok(hash) => self.md5 = Some(hash),
                Err(e) => result = result.and(Err(s3_from_join(e))),
            }
        }
        (self.md5.unwrap_or_default(), self.offset, result)
    }
}

/// A request body with what it must be checked against.
struct Incoming {
    blob: StreamingBlob,
    length: Option<i64>,
    content_md5: Option<String>,
    declared: Declared,
}

/// A PUT's temporary file until the PUT completes: dropped before (an
/// error, or the request's future dropped when the client went away), it
/// removes the file on a blocking thread.
struct Pending {
    tree: Tree,
    up: Option<Arc<Upload>>,
}

impl Pending {
    fn done(mut self) {
        self.up = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        let Some(up) = self.up.take() else { return };
        let tree = self.tree.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(move || tree.abort(&up));
            }
            Err(_) => tree.abort(&up),
        }
    }
}

fn wants_url(e: Option<&EncodingType>) -> bool {
    e.is_some_and(|e| e.as_str() == EncodingType::URL)
}

/// One page of a listing, as S3 shows it.
struct Page {
    contents: Vec<Object>,
    prefixes: Vec<CommonPrefix>,
    max: i32,
    /// The last name shown, if the listing goes on after it.
    last: Option<String>,
}

impl Gateway {
    async fn page(
        &self,
        bucket: &str,
        prefix: String,
        delimiter: Option<String>,
        start: Option<String>,
        max_keys: Option<i32>,
        url: bool,
    ) -> S3Result<Page> {
        let max = max_keys.unwrap_or(MAX_KEYS).clamp(0, MAX_KEYS);
        let bucket = bucket.to_string();
        let (listing, etags) = blocking(&self.tree, move |t| {
            let root = t.bucket(&bucket)?;
            let q = Query {
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                start: start.as_deref(),
                max: max as usize,
            };
            let listing = list::list(t, root, &q)?;
            // ETags cost a read of any file the gateway has not seen:
            // a listing shows only those known without one.
            let etags: Vec<Option<String>> = listing
                .items
                .iter()
                .map(|i| match i {
                    Item::Key { inode, .. } if inode.attr.kind == FileKind::File => {
                        t.known_etag(inode)
                    }
                    Item::Key { .. } => Some(hex::encode(Md5::digest(&[]))),
                    Item::Prefix(_) => None,
                })
                .collect();
            Ok((listing, etags))
        })
        .await?;
        let last = listing
            .truncated
            .then(|| listing.items.last().map(|i| i.name().to_string()))
            .flatten();
        let mut contents = Vec::new();
        let mut prefixes = Vec::new();
        for (item, etag) in listing.items.into_iter().zip(etags) {
            match item {
                Item::Key { key, inode } => contents.push(Object {
                    key: Some(encode(&key, url)),
                    size: Some(if inode.attr.kind == FileKind::Dir {
                        0
                    } else {
                        inode.attr.size as i64
                    }),
                    last_modified: Some(modified(&inode)),
                    e_tag: etag.map(ETag::Strong),
                    storage_class: Some(ObjectStorageClass::from_static(
                        ObjectStorageClass::STANDARD,
                    )),
                    ..Default::default()
                }),
                Item::Prefix(p) => prefixes.push(CommonPrefix {
                    prefix: Some(encode(&p, url)),
                }),
            }
        }
        Ok(Page {
            contents,
            prefixes,
            max,
            last,
        })
    }
}

/// A body read from an open file in pieces, each on a blocking thread;
/// the file is released when the body ends or the client goes away.
struct Reader {
    tree: Tree,
    ino: meta::InodeId,
    /// How far the body's range has been read ahead (its pieces are read
    /// on blocking threads, a few at once).
    stream: parking_lot::Mutex<fs::Stream>,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.tree.release(self.ino);
    }
}

/// Pieces of a GET's body being read at once: the next piece is read (its
/// chunks fetched, verified and assembled on a blocking thread) while the
/// one before it goes out on the socket, so a large GET takes about the
/// longer of the two, not their sum.
const READS_AHEAD: usize = 2;

fn body(tree: Tree, ino: meta::InodeId, start: u64, end: u64) -> StreamingBlob {
    let reader = Arc::new(Reader {
        tree,
        ino,
        stream: parking_lot::Mutex::new(fs::Stream::new(end)),
    });
    let pieces = (start..end).step_by(PIECE).map(move |at| {
        let reader = reader.clone();
        let len = (end - at).min(PIECE as u64) as u32;
        async move {
            let got = tokio::task::spawn_blocking(move || {
                reader
                    .tree
                    .read(reader.ino, at, len, &mut reader.stream.lock())
            })
                .await
                .map_err(std::io::Error::other)
                .and_then(|r| r.map_err(std::io::Error::other));
            match got {
                // A read ends short only at the end of the file.
                Ok(b) if b.len() < len as usize => Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the object got shorter while it was read",
                )),
                Ok(b) => Ok(Bytes::from(b)),
                Err(e) => {
                    tracing::error!(inode = ino.0, error = %e, "reading an object for a GET failed");
                    Err(e)
                }
            }
        }
    });
    // The body ends at its first error.
    let stream = futures_util::stream::iter(pieces)
        .buffered(READS_AHEAD)
        .scan(false, |failed, piece| {
            let out = (!*failed).then(|| {
                *failed = piece.is_err();
                piece
            });
            std::future::ready(out)
        });
    StreamingBlob::wrap(sync_wrapper::SyncStream::new(stream))
}

/// The checksums a PutObject or UploadPart input declares (the two s3s
/// input types carry the same fields under the same names).
macro_rules! declared {
    ($input:ident, $req:ident) => {
        Declared::new(
            Checksum {
                checksum_crc32: $input.checksum_crc32.clone(),
                checksum_crc32c: $input.checksum_crc32c.clone(),
                checksum_sha1: $input.checksum_sha1.clone(),
                checksum_sha256: $input.checksum_sha256.clone(),
                checksum_crc64nvme: $input.checksum_crc64nvme.clone(),
                ..Default::default()
            },
            $input.checksum_algorithm.as_ref(),
            &$req.headers,
            $req.trailing_headers,
        )
    };
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let all = blocking(&self.tree, |t| t.buckets()).await?;
        let buckets = all
            .into_iter()
            .filter(|(name, _)| self.may_see(req.credentials.as_ref(), name))
            .map(|(name, inode)| Bucket {
                creation_date: Some(modified(&inode)),
                name: Some(name),
                bucket_region: None,
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let name = req.input.bucket;
        check_bucket(&name)?;
        let location = format!("/{name}");
        blocking(&self.tree, move |t| t.create_bucket(&name)).await?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(location),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let name = req.input.bucket;
        blocking(&self.tree, move |t| t.delete_bucket(&name)).await?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let name = req.input.bucket;
        blocking(&self.tree, move |t| t.bucket(&name)).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let name = req.input.bucket;
        blocking(&self.tree, move |t| t.bucket(&name)).await?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        let declared = declared!(input, req);
        let (parts, dir) = owned_key(&input.key)?;
        let bucket = input.bucket;
        if dir {
            if input.content_length.is_some_and(|l| l > 0) {
                return Err(S3Error::with_message(
                    S3ErrorCode::InvalidArgument,
                    "a key ending in / is a directory: it holds no bytes",
                ));
            }
            blocking(&self.tree, move |t| {
                t.put_dir(&bucket, &key_path(&parts, true))
            })
            .await?;
            return Ok(S3Response::new(PutObjectOutput {
                e_tag: Some(ETag::Strong(hex::encode(Md5::digest(&[])))),
                ..Default::default()
            }));
        }
        let body = input.body.unwrap_or_else(|| {
            StreamingBlob::wrap(futures_util::stream::empty::<Result<Bytes, std::io::Error>>())
        });
        let attrs = Attrs {
            content_type: input.content_type,
            meta: input.metadata.unwrap_or_default().into_iter().collect(),
        };
        let guard = self
            .guard(&bucket, &input.key, input.if_match, input.if_none_match)
            .await?;
        let etag = self
            .write_body(
                bucket,
                parts,
                Incoming {
                    blob: body,
                    length: input.content_length,
                    content_md5: input.content_md5,
                    declared,
                },
                attrs,
                guard,
            )
            .await?;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let found = self.find(&input.bucket, &input.key).await?;
        Conditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        }
        .check(&found)?;
        Ok(S3Response::new(HeadObjectOutput {
            content_length: Some(found.inode.attr.size as i64),
            last_modified: Some(modified(&found.inode)),
            e_tag: Some(ETag::Strong(found.etag)),
            content_type: found.attrs.content_type,
            metadata: Some(found.attrs.meta.into_iter().collect()),
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let mut found = self.find(&input.bucket, &input.key).await?;
        Conditions {
            if_match: input.if_match,
            if_none_match: input.if_none_match,
            if_modified_since: input.if_modified_since,
            if_unmodified_since: input.if_unmodified_since,
        }
        .check(&found)?;
        let size = if found.inode.attr.kind == FileKind::Dir {
            0
        } else {
            found.inode.attr.size
        };
        let (range, content_range) = match input.range {
            None => (0..size, None),
            Some(r) => {
                let range = r
                    .check(size)
                    .map_err(|_| refused(S3ErrorCode::InvalidRange))?;
                let header = format!("bytes {}-{}/{size}", range.start, range.end - 1);
                (range, Some(header))
            }
        };
        let ino = found.inode.id;
        // A small file's bytes came with its record: no second read. A
        // small chunked one's are read where its entry says its chunks are.
        let mut settled = self
            .tree
            .fs()
            .settled_inline(&found.inode)
            .map(|b| Bytes::copy_from_slice(&b[range.start as usize..range.end as usize]));
        if settled.is_none()
            && matches!(found.inode.content, meta::Content::Recipe(_))
            && found.inode.attr.size <= meta::MAX_HINTED_SIZE
        {
            let (inode, hints) = (found.inode.clone(), found.hints.take());
            let r = range.clone();
            settled = blocking(&self.tree, move |t| {
                Ok(small_body(t, &inode, hints.as_ref(), r))
            })
            .await?;
        }
        let blob = if let Some(bytes) = settled {
            StreamingBlob::wrap(futures_util::stream::once(async move {
                Ok::<_, std::io::Error>(bytes)
            }))
        } else if range.end > range.start {
            blocking(&self.tree, move |t| t.open(ino)).await?;
            body(self.tree.clone(), ino, range.start, range.end)
        } else {
            StreamingBlob::wrap(futures_util::stream::empty::<Result<Bytes, std::io::Error>>())
        };
        Ok(S3Response::new(GetObjectOutput {
            body: Some(blob),
            content_length: Some((range.end - range.start) as i64),
            content_range,
            last_modified: Some(modified(&found.inode)),
            e_tag: Some(ETag::Strong(found.etag)),
            content_type: found.attrs.content_type,
            metadata: Some(found.attrs.meta.into_iter().collect()),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let (parts, dir) = owned_key(&req.input.key)?;
        let bucket = req.input.bucket;
        blocking(&self.tree, move |t| {
            t.delete(&bucket, &key_path(&parts, dir))
        })
        .await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let url = wants_url(input.encoding_type.as_ref());
        let token = match &input.continuation_token {
            Some(t) => Some(
                hex::decode(t)
                    .ok()
                    .and_then(|b| String::from_utf8(b).ok())
                    .ok_or_else(|| {
                        S3Error::with_message(
                            S3ErrorCode::InvalidArgument,
                            "the continuation token is not one this gateway gave",
                        )
                    })?,
            ),
            None => None,
        };
        let start = match (token, input.start_after.clone()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        let page = self
            .page(
                &input.bucket,
                input.prefix.clone().unwrap_or_default(),
                input.delimiter.clone(),
                start,
                input.max_keys,
                url,
            )
            .await?;
        let next = page.last.as_deref().map(hex::encode);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: Some(encode(input.prefix.as_deref().unwrap_or(""), url)),
            delimiter: input.delimiter.map(|d| encode(&d, url)),
            start_after: input.start_after.map(|s| encode(&s, url)),
            encoding_type: input.encoding_type,
            max_keys: Some(page.max),
            key_count: Some((page.contents.len() + page.prefixes.len()) as i32),
            continuation_token: input.continuation_token,
            is_truncated: Some(next.is_some()),
            next_continuation_token: next,
            contents: Some(page.contents),
            common_prefixes: Some(page.prefixes),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let input = req.input;
        let url = wants_url(input.encoding_type.as_ref());
        let page = self
            .page(
                &input.bucket,
                input.prefix.clone().unwrap_or_default(),
                input.delimiter.clone(),
                input.marker.clone(),
                input.max_keys,
                url,
            )
            .await?;
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: Some(encode(input.prefix.as_deref().unwrap_or(""), url)),
            delimiter: input.delimiter.map(|d| encode(&d, url)),
            marker: Some(encode(input.marker.as_deref().unwrap_or(""), url)),
            encoding_type: input.encoding_type,
            max_keys: Some(page.max),
            is_truncated: Some(page.last.is_some()),
            next_marker: page.last.map(|l| encode(&l, url)),
            contents: Some(page.contents),
            common_prefixes: Some(page.prefixes),
            ..Default::default()
        }))
    }

    /// Buckets are not versioned: each key has one version, "null".
    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        let input = req.input;
        let url = wants_url(input.encoding_type.as_ref());
        let page = self
            .page(
                &input.bucket,
                input.prefix.clone().unwrap_or_default(),
                input.delimiter.clone(),
                input.key_marker.clone(),
                input.max_keys,
                url,
            )
            .await?;
        let versions = page
            .contents
            .into_iter()
            .map(|o| ObjectVersion {
                e_tag: o.e_tag,
                is_latest: Some(true),
                key: o.key,
                last_modified: o.last_modified,
                size: o.size,
                storage_class: Some(ObjectVersionStorageClass::from_static(
                    ObjectVersionStorageClass::STANDARD,
                )),
                version_id: Some("null".to_string()),
                ..Default::default()
            })
            .collect();
        let truncated = page.last.is_some();
        Ok(S3Response::new(ListObjectVersionsOutput {
            name: Some(input.bucket),
            prefix: Some(encode(input.prefix.as_deref().unwrap_or(""), url)),
            delimiter: input.delimiter.map(|d| encode(&d, url)),
            key_marker: Some(encode(input.key_marker.as_deref().unwrap_or(""), url)),
            version_id_marker: input.version_id_marker,
            encoding_type: input.encoding_type,
            max_keys: Some(page.max),
            is_truncated: Some(truncated),
            next_key_marker: page.last.map(|l| encode(&l, url)),
            next_version_id_marker: truncated.then(|| "null".to_string()),
            versions: Some(versions),
            common_prefixes: Some(page.prefixes),
            ..Default::default()
        }))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let input = req.input;
        let quiet = input.delete.quiet.unwrap_or(false);
        let keys: Vec<String> = input.delete.objects.into_iter().map(|o| o.key).collect();
        if keys.len() > MAX_KEYS as usize {
            return Err(S3Error::with_message(
                S3ErrorCode::MalformedXML,
                "DeleteObjects takes at most 1,000 keys",
            ));
        }
        let bucket = input.bucket;
        let results = blocking(&self.tree, move |t| {
            t.bucket(&bucket)?;
            Ok(keys
                .into_iter()
                .map(|key| {
                    let r = names::split(&key).and_then(|k| t.delete(&bucket, &k));
                    (key, r)
                })
                .collect::<Vec<_>>())
        })
        .await?;
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for (key, r) in results {
            match r {
                Ok(()) if !quiet => deleted.push(DeletedObject {
                    key: Some(key),
                    ..Default::default()
                }),
                Ok(()) => {}
                Err(e) => errors.push(Error {
                    code: Some(e.code().as_str().to_string()),
                    key: Some(key),
                    message: e.message().map(str::to_string),
                    version_id: None,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: Some(errors),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let input = req.input;
        let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = input.copy_source
        else {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                "copies from access points are not supported",
            ));
        };
        let (src_parts, src_dir) = owned_key(&src_key)?;
        let (dst_parts, dst_dir) = owned_key(&input.key)?;
        if src_dir || dst_dir {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "a directory marker cannot be copied",
            ));
        }
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let attrs = replace.then(|| Attrs {
            content_type: input.content_type,
            meta: input.metadata.unwrap_or_default().into_iter().collect(),
        });
        let bucket = input.bucket;
        let (inode, etag) = blocking(&self.tree, move |t| {
            let inode = t.copy(
                &src_bucket,
                &key_path(&src_parts, false),
                &bucket,
                &key_path(&dst_parts, false),
                attrs.as_ref(),
            )?;
            let etag = t.etag(&inode)?;
            Ok((inode, etag))
        })
        .await?;
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(ETag::Strong(etag)),
                last_modified: Some(modified(&inode)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        let (_, dir) = owned_key(&input.key)?;
        if dir {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "a key ending in / is a directory: it holds no bytes",
            ));
        }
        let attrs = Attrs {
            content_type: input.content_type,
            meta: input.metadata.unwrap_or_default().into_iter().collect(),
        };
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let id = blocking(&self.tree, move |t| {
            multipart::create(t, &bucket, &key, &attrs)
        })
        .await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let input = req.input;
        let declared = declared!(input, req);
        let part = multipart::part_name(input.part_number)?;
        let (bucket, key, id) = (input.bucket.clone(), input.key.clone(), input.upload_id);
        let dir = blocking(&self.tree, move |t| {
            multipart::find(t, &bucket, &key, &id)?;
            Ok(multipart::dir_name(&id))
        })
        .await?;
        let body = input.body.unwrap_or_else(|| {
            StreamingBlob::wrap(futures_util::stream::empty::<Result<Bytes, std::io::Error>>())
        });
        let etag = self
            .write_body(
                input.bucket,
                vec![dir, part],
                Incoming {
                    blob: body,
                    length: input.content_length,
                    content_md5: input.content_md5,
                    declared,
                },
                Attrs::default(),
                Guard::None,
            )
            .await?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    /// A whole source is cloned into the part (no data copied); a range
    /// is read and written (its chunks are found stored: only the part's
    /// recipe is new).
    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let input = req.input;
        let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = input.copy_source
        else {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                "copies from access points are not supported",
            ));
        };
        if input.copy_source_if_match.is_some()
            || input.copy_source_if_none_match.is_some()
            || input.copy_source_if_modified_since.is_some()
            || input.copy_source_if_unmodified_since.is_some()
        {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                "UploadPartCopy takes no x-amz-copy-source-if-* conditions here",
            ));
        }
        let range = match &input.copy_source_range {
            Some(r) => Some(Range::parse(r).map_err(|_| refused(S3ErrorCode::InvalidArgument))?),
            None => None,
        };
        let (src_parts, src_dir) = owned_key(&src_key)?;
        if src_dir {
            return Err(S3Error::with_message(
                S3ErrorCode::InvalidArgument,
                "a directory marker cannot be copied",
            ));
        }
        let part = multipart::part_name(input.part_number)?;
        let max = self.limits.max_put;
        let (bucket, key, id) = (input.bucket, input.key, input.upload_id);
        let (etag, inode) = blocking(&self.tree, move |t| {
            multipart::find(t, &bucket, &key, &id)?;
            let src = key_path(&src_parts, false);
            multipart::copy_part(t, (&src_bucket, &src), (&bucket, &id, &part), range, max)
        })
        .await?;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(ETag::Strong(etag)),
                last_modified: Some(modified(&inode)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let (parts, dir) = owned_key(&input.key)?;
        let wanted: Vec<(i32, String)> = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default()
            .into_iter()
            .map(|p| {
                (
                    p.part_number.unwrap_or(0),
                    p.e_tag.map(|e| e.value().to_string()).unwrap_or_default(),
                )
            })
            .collect();
        let (bucket, key, id) = (input.bucket.clone(), input.key.clone(), input.upload_id);
        let max = self.limits.max_object;
        let etag = blocking(&self.tree, move |t| {
            let updir = multipart::find(t, &bucket, &key, &id)?;
            let key = key_path(&parts, dir);
            multipart::complete(t, &bucket, &key, (updir, &id), &wanted, max)
        })
        .await?;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(ETag::Strong(etag)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        blocking(&self.tree, move |t| {
            let dir = multipart::find(t, &input.bucket, &input.key, &input.upload_id)?;
            multipart::abort(t, &input.bucket, dir, &input.upload_id)
        })
        .await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let input = req.input;
        let (bucket, key, id) = (
            input.bucket.clone(),
            input.key.clone(),
            input.upload_id.clone(),
        );
        let after = input.part_number_marker.unwrap_or(0);
        let max = input.max_parts.unwrap_or(MAX_KEYS).clamp(1, MAX_KEYS) as usize;
        let (parts, more) = blocking(&self.tree, move |t| {
            let dir = multipart::find(t, &bucket, &key, &id)?;
            let all: Vec<_> = multipart::parts(t, dir)?
                .into_iter()
                .filter(|(n, _)| *n > after)
                .collect();
            let more = all.len() > max;
            let mut out = Vec::new();
            for (n, inode) in all.into_iter().take(max) {
                out.push(Part {
                    part_number: Some(n),
                    size: Some(inode.attr.size as i64),
                    last_modified: Some(modified(&inode)),
                    e_tag: Some(ETag::Strong(t.etag(&inode)?)),
                    ..Default::default()
                });
            }
            Ok((out, more))
        })
        .await?;
        let next = more
            .then(|| parts.last().and_then(|p| p.part_number))
            .flatten();
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            is_truncated: Some(next.is_some()),
            next_part_number_marker: next,
            max_parts: Some(max as i32),
            parts: Some(parts),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let input = req.input;
        let bucket = input.bucket.clone();
        let prefix = input.prefix.clone().unwrap_or_default();
        let uploads = blocking(&self.tree, move |t| multipart::uploads(t, &bucket)).await?;
        let uploads = uploads
            .into_iter()
            .filter(|(key, _, _)| key.starts_with(&prefix))
            .take(MAX_KEYS as usize)
            .map(|(key, id, inode)| MultipartUpload {
                key: Some(key),
                upload_id: Some(id),
                initiated: Some(modified(&inode)),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(input.bucket),
            prefix: input.prefix,
            is_truncated: Some(false),
            uploads: Some(uploads),
            ..Default::default()
        }))
    }
}
