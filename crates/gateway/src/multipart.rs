//! Multipart uploads: each upload is a hidden directory
//! `.cairn-put.upload.ID` in the bucket (never listed, never a key), its
//! parts files `00001` ... stored like any PUT (deduplicated like any
//! data). Completing copies the parts, in order, into a temporary file
//! renamed over the key, inside the file system (`Fs::copy_range`): the
//! first part is a recipe clone and each next one a splice (its chunks
//! listed after the others'), so no byte is read or stored again.

use meta::{FileKind, Inode, InodeId, XattrFlags};
use s3s::{S3Error, S3ErrorCode, S3Result};

use crate::error::{refused, s3_from_fs};
use crate::md5_hash::Md5;
use crate::names::{KeyPath, UPLOAD_PREFIX};
use crate::tree::{Attrs, Guard, Tree, PIECE};

/// The xattr of an upload's directory naming its key.
const KEY_XATTR: &[u8] = b"user.cairn.s3.upload-key";
/// Bytes one copy between a part and the object covers (the file
/// system's copy counts in 32 bits).
const COPY_STEP: u64 = 1 << 30;
/// Highest part number S3 allows.
pub const MAX_PART: i32 = 10_000;

pub fn dir_name(id: &str) -> String {
    format!("{UPLOAD_PREFIX}upload.{id}")
}

fn no_upload() -> S3Error {
    refused(S3ErrorCode::NoSuchUpload)
}

/// Starts an upload of `key`; its id.
pub fn create(tree: &Tree, bucket: &str, key: &str, attrs: &Attrs) -> S3Result<String> {
    let root = tree.bucket(bucket)?;
    let id = format!("{:032x}", rand::random::<u128>());
    let dir = tree.make_dirs(root, &[&dir_name(&id)])?;
    let fail = |e| s3_from_fs(e, S3ErrorCode::InternalError, key);
    tree.fs()
        .set_xattr(
            dir,
            KEY_XATTR,
            key.as_bytes(),
            XattrFlags::Either,
            &fs::Caller::root(),
        )
        .map_err(fail)?;
    tree.set_attrs(dir, attrs)?;
    Ok(id)
}

/// The directory of upload `id` of `key`.
pub fn find(tree: &Tree, bucket: &str, key: &str, id: &str) -> S3Result<InodeId> {
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(no_upload());
    }
    let root = tree.bucket(bucket)?;
    let dir = tree
        .fs()
        .lookup(root, dir_name(id).as_bytes())
        .map_err(|_| no_upload())?;
    let owner = tree
        .fs()
        .get_xattr(dir.id, KEY_XATTR)
        .map_err(|_| no_upload())?;
    if owner != key.as_bytes() {
        return Err(no_upload());
    }
    Ok(dir.id)
}

pub fn part_name(n: i32) -> S3Result<String> {
    if !(1..=MAX_PART).contains(&n) {
        return Err(S3Error::with_message(
            S3ErrorCode::InvalidArgument,
            "part numbers go from 1 to 10,000",
        ));
    }
    Ok(format!("{n:05}"))
}

/// Calls `each` on every entry of `dir`, read a page at a time (names
/// after the last one seen, so `each` may remove what it is given).
fn each_entry(
    tree: &Tree,
    dir: InodeId,
    fail: impl Fn(fs::FsError) -> S3Error,
    mut each: impl FnMut(meta::DirEntry) -> S3Result<()>,
) -> S3Result<()> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = tree
            .fs()
            .readdir(dir, after.as_deref(), 1024)
            .map_err(&fail)?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = Some(last.name.clone());
        for e in page {
            each(e)?;
        }
    }
}

/// The parts stored so far, in order: number and inode.
pub fn parts(tree: &Tree, dir: InodeId) -> S3Result<Vec<(i32, Inode)>> {
    let fail = |e| s3_from_fs(e, S3ErrorCode::InternalError, "an upload");
    let mut out = Vec::new();
    each_entry(tree, dir, fail, |e| {
        let n = std::str::from_utf8(&e.name)
            .ok()
            .and_then(|n| n.parse::<i32>().ok());
        if let (Some(n), FileKind::File) = (n, e.kind) {
            out.push((n, tree.fs().getattr(e.ino).map_err(fail)?));
        }
        Ok(())
    })?;
    out.sort_by_key(|(n, _)| *n);
    Ok(out)
}

/// Drops an upload and its parts.
pub fn abort(tree: &Tree, bucket: &str, dir: InodeId, id: &str) -> S3Result<()> {
    let fail = |e| s3_from_fs(e, S3ErrorCode::InternalError, "an upload");
    each_entry(tree, dir, fail, |e| {
        tree.fs().unlink(dir, &e.name).map_err(fail)
    })?;
    let root = tree.bucket(bucket)?;
    tree.rmdir(root, dir_name(id).as_bytes()).map_err(fail)?;
    tree.fs().sync_all().map_err(fail)
}

/// Joins the listed parts into the object `key`: checks each is stored
/// with the ETag the client has and that together they are at most
/// `max_object` bytes, streams them into a new file, and answers the
/// multipart ETag (the MD5 of the parts' MD5s, `-N`).
pub fn complete(
    tree: &Tree,
    bucket: &str,
    key: &KeyPath<'_>,
    (dir, id): (InodeId, &str),
    wanted: &[(i32, String)],
    max_object: u64,
) -> S3Result<String> {
    if wanted.is_empty() {
        return Err(refused(S3ErrorCode::MalformedXML));
    }
    if wanted.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(refused(S3ErrorCode::InvalidPartOrder));
    }
    let stored = parts(tree, dir)?;
    let mut chosen = Vec::with_capacity(wanted.len());
    let mut md5s = Md5::new();
    for (n, etag) in wanted {
        let Some((_, inode)) = stored.iter().find(|(m, _)| m == n) else {
            return Err(refused(S3ErrorCode::InvalidPart));
        };
        let md5 = tree.etag(inode)?;
        if md5 != etag.trim_matches('"') {
            return Err(refused(S3ErrorCode::InvalidPart));
        }
        md5s.update(&hex::decode(&md5).map_err(|_| refused(S3ErrorCode::InvalidPart))?);
        chosen.push(inode.clone());
    }
    let total: u64 = chosen.iter().map(|i: &Inode| i.attr.size).sum();
    if total > max_object {
        return Err(S3Error::with_message(
            S3ErrorCode::EntityTooLarge,
            format!(
                "the parts hold {total} bytes; this gateway takes objects of at most {max_object}"
            ),
        ));
    }
    let etag = format!("{}-{}", hex::encode(md5s.finalize()), wanted.len());
    let fail = |e| s3_from_fs(e, S3ErrorCode::InternalError, "an upload");
    let attrs = tree.attrs(dir)?;
    let up = tree.begin(bucket, key)?;
    let joined = (|| {
        let mut at = 0u64;
        for part in &chosen {
            // Inside the file system: the first part, copied whole onto
            // the empty new file, is a recipe clone, and each next one,
            // copied whole onto its end, a splice (no data read); a part
            // over COPY_STEP is read and written there, its chunks found
            // stored.
            let size = part.attr.size;
            let mut offset = 0;
            while offset < size {
                let n = tree
                    .fs()
                    .copy_range(
                        part.id,
                        offset,
                        up.ino,
                        at + offset,
                        (size - offset).min(COPY_STEP),
                        &fs::Caller::root(),
                    )
                    .map_err(fail)?;
                if n == 0 {
                    return Err(S3Error::with_message(
                        S3ErrorCode::InternalError,
                        "a part got shorter while the upload was completed",
                    ));
                }
                offset += n;
            }
            at += size;
        }
        tree.set_attrs(up.ino, &attrs)?;
        let name = key.parts.last().expect("a key has a name");
        tree.finish(&up, name, &etag, &Guard::None)
    })();
    if let Err(e) = joined {
        tree.abort(&up);
        return Err(e);
    }
    abort(tree, bucket, dir, id)?;
    Ok(etag)
}

/// Stores part `part` of upload `id` in `bucket` as a copy of object
/// `src`: the whole object as a clone (the recipe is shared, no data
/// read), or `range` of it read and written like a PUT (at most
/// `max_put` bytes). Its ETag (the MD5 of its bytes) and inode.
pub fn copy_part(
    tree: &Tree,
    (src_bucket, src): (&str, &KeyPath<'_>),
    (bucket, id, part): (&str, &str, &str),
    range: Option<s3s::dto::Range>,
    max_put: u64,
) -> S3Result<(String, Inode)> {
    let dir = dir_name(id);
    let dst = KeyPath {
        parts: vec![dir.as_str(), part],
        dir: false,
    };
    let from = tree.object(src_bucket, src)?;
    let Some(range) = range else {
        let inode = tree.copy(src_bucket, src, bucket, &dst, Some(&Attrs::default()))?;
        return Ok((tree.etag(&inode)?, inode));
    };
    let range = range
        .check(from.attr.size)
        .map_err(|_| refused(S3ErrorCode::InvalidRange))?;
    if range.end - range.start > max_put {
        return Err(refused(S3ErrorCode::EntityTooLarge));
    }
    let fail = |e| s3_from_fs(e, S3ErrorCode::InternalError, "a part copy");
    let up = tree.begin(bucket, &dst)?;
    let mut md5 = Md5::new();
    let copied = (|| {
        tree.open(from.id)?;
        let mut at = range.start;
        let mut stream = fs::Stream::new(range.end);
        let read = loop {
            if at >= range.end {
                break Ok(());
            }
            let len = (range.end - at).min(PIECE as u64) as u32;
            match tree.read(from.id, at, len, &mut stream) {
                Ok(b) if b.is_empty() => {
                    break Err(S3Error::with_message(
                        S3ErrorCode::InternalError,
                        "the source got shorter while it was copied",
                    ))
                }
                Ok(b) => {
                    md5.update(&b);
                    if let Err(e) = tree.write(&up, at - range.start, &b) {
                        break Err(e);
                    }
                    at += b.len() as u64;
                }
                Err(e) => break Err(fail(e)),
            }
        };
        tree.release(from.id);
        read?;
        let etag = hex::encode(md5.finalize());
        tree.finish(&up, part, &etag, &Guard::None)?;
        Ok(etag)
    })();
    match copied {
        Ok(etag) => Ok((etag, tree.getattr(up.ino).map_err(fail)?)),
        Err(e) => {
            tree.abort(&up);
            Err(e)
        }
    }
}

/// Every upload in progress in the bucket: key and id.
pub fn uploads(tree: &Tree, bucket: &str) -> S3Result<Vec<(String, String, Inode)>> {
    let root = tree.bucket(bucket)?;
    let fail = |e| s3_from_fs(e, S3ErrorCode::InternalError, bucket);
    let prefix = dir_name("");
    let mut out = Vec::new();
    each_entry(tree, root, fail, |e| {
        let Some(id) = std::str::from_utf8(&e.name)
            .ok()
            .and_then(|n| n.strip_prefix(prefix.as_str()))
        else {
            return Ok(());
        };
        let Ok(key) = tree.fs().get_xattr(e.ino, KEY_XATTR) else {
            return Ok(());
        };
        let inode = tree.fs().getattr(e.ino).map_err(fail)?;
        out.push((
            String::from_utf8_lossy(&key).into_owned(),
            id.to_string(),
            inode,
        ));
        Ok(())
    })?;
    out.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    Ok(out)
}
