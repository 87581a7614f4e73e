//! Containers a full branch refused: kept, readable, and written again.
//!
//! A sealed container is a promise: a file was closed, and its recipe
//! already names the container's chunks. When a branch has no room for it,
//! dropping it would turn that file into EIO at the next read, and a commit
//! that went on would make the dangling recipe durable. So the I/O thread
//! *parks* it instead: the container stays in memory (holding its permit
//! from the store's memory budget), its chunks are served from the
//! `unsealed` map, [`crate::Durable::wait`] answers
//! [`CasError::NoSpace`] for it rather than blocking, and the I/O thread
//! tries it again every [`RETRY_EVERY`] and whenever new containers come,
//! until a branch takes it. While anything is parked, the file system
//! refuses new writes with ENOSPC and puts back every record that reaches a
//! parked chunk ([`crate::Store::parked_chunks`]) before it makes metadata
//! durable (see `fs`'s `waiting`), so nothing durable ever points at one.

use std::time::Duration;

use bytes::Bytes;

use crate::container::Sealed;
use crate::region;
use crate::store::Shared;
use crate::CasError;

/// How often parked containers are tried again when nothing else comes.
pub(crate) const RETRY_EVERY: Duration = Duration::from_secs(2);

/// Makes a refused container's chunks readable from memory and marks it
/// parked. Called with the inflight lock held by the caller's sequence:
/// chunks enter `unsealed` before they leave `pending`, so a reader always
/// finds them in one or the other.
pub(crate) fn park(shared: &Shared, sealed: &Sealed) {
    let chunks = decode_chunks(sealed);
    shared.unsealed.lock().extend(chunks);
}

/// Forgets the in-memory copies of a parked container's chunks once it is
/// durable and indexed (or has failed for good).
pub(crate) fn unpark(shared: &Shared, sealed: &Sealed) {
    let mut unsealed = shared.unsealed.lock();
    for (id, _) in &sealed.entries {
        unsealed.remove(id);
    }
}

/// Every chunk of a sealed container, decoded from its bytes. A region
/// that does not decode (it was built in this process, so it always does)
/// leaves its chunks out: reading them then fails, never returns wrong
/// bytes.
fn decode_chunks(sealed: &Sealed) -> Vec<(crate::ChunkId, Bytes)> {
    let mut out = Vec::with_capacity(sealed.entries.len());
    let mut current: Option<(u64, Bytes)> = None;
    for (id, loc) in &sealed.entries {
        let fresh = !matches!(&current, Some((at, _)) if *at == loc.region_offset);
        if fresh {
            let start = loc.region_offset as usize;
            let end = start + loc.region_len as usize;
            let Some(stored) = sealed.bytes.get(start..end) else {
                continue;
            };
            match region::decode(Bytes::copy_from_slice(stored)) {
                Ok(raw) => current = Some((loc.region_offset, raw)),
                Err(_) => {
                    current = None;
                    continue;
                }
            }
        }
        let Some((_, raw)) = &current else { continue };
        let start = loc.offset_in_region as usize;
        let end = start + loc.len as usize;
        if end <= raw.len() {
            out.push((*id, raw.slice(start..end)));
        }
    }
    out
}

/// The error a flush waiting on a parked container gets.
pub(crate) fn no_space(container: crate::ContainerId, reason: &str) -> CasError {
    CasError::NoSpace {
        container,
        reason: reason.to_string(),
    }
}
