//! The shard blob format.
//!
//! A shard blob is a header followed by the shard's payload cut into
//! blocks, each block preceded by its digest. All integers are little-endian.
//!
//! ```text
//! offset size  header
//!      0    4  magic "CRSH"
//!      4    1  format version (1)
//!      5    1  log2 of the block size (16: 64 KiB blocks)
//!      6    1  length P of the policy text
//!      7    1  zero
//!      8    2  shard index: data shards 0..K, then redundant shards K..K+M
//!     10    2  K, data shards (1 for copies)
//!     12    2  M, redundant shards (copies - 1 for copies)
//!     14    2  zero
//!     16    8  container length in bytes
//!     24    8  shard payload length S in bytes
//!     32   16  payload digest: BLAKE3 of all block digests, truncated
//!     48    8  key tag: BLAKE3 of the container's key, truncated
//!     56    P  policy text, e.g. "rs:4+2" or "parity:4@fast"
//!   56+P    8  header checksum: BLAKE3 of the header bytes before it, truncated
//!
//! body, once per block b in 0..ceil(S / block size):
//!          16  block digest: BLAKE3 of (shard context, b, block bytes), truncated
//!          ..  block bytes: a full block, or what is left of S for the last one
//! ```
//!
//! Why digests sit between blocks: a range read fetches just the blocks it
//! covers, digests included, in one contiguous read and verifies them
//! without the header. The shard context mixed into each block digest (key
//! tag, shard position, K, M, both lengths) makes a block verify only at the
//! place it was written for, so a stale or misplaced blob never passes.
//!
//! Data shard i of a coded container holds container bytes `[i*S, (i+1)*S)`,
//! zero-padded to S. S is rounded up to an even number of at least 2
//! because the Reed-Solomon coder works on 16-bit symbols.

use std::ops::Range;

use crate::policy::{Coding, Policy};

const MAGIC: &[u8; 4] = b"CRSH";
const VERSION: u8 = 1;
const BLOCK_SHIFT: u8 = 16;
/// Payload bytes per verified block.
pub const BLOCK: u64 = 1 << BLOCK_SHIFT;
const DIGEST: usize = 16;
const FIXED: usize = 56;
const CHECKSUM: usize = 8;
/// The longest header a shard can have (a 255-byte policy text).
pub const MAX_HEADER: usize = FIXED + 255 + CHECKSUM;

/// Why a shard blob was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Corrupt(pub String);

/// The truncated BLAKE3 of a container key, stored in every shard so a
/// shard copied under another container's name is rejected.
pub fn key_tag(key: &str) -> [u8; 8] {
    truncate(blake3::hash(key.as_bytes()))
}

fn truncate<const N: usize>(hash: blake3::Hash) -> [u8; N] {
    hash.as_bytes()[..N].try_into().expect("N <= 32")
}

/// Everything shards of one container have in common.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub policy: Policy,
    pub container_len: u64,
    /// S, the payload bytes of every shard.
    pub shard_len: u64,
    pub key_tag: [u8; 8],
    /// Kept, as every read's offsets start from it.
    header_len: u64,
}

impl Layout {
    pub fn new(policy: Policy, key: &str, container_len: u64) -> Layout {
        let shard_len = match policy.coding() {
            Coding::Copies => container_len,
            Coding::Xor | Coding::ReedSolomon => {
                let per_shard = container_len.div_ceil(u64::from(policy.data_shards()));
                (per_shard + per_shard % 2).max(2)
            }
        };
        Layout {
            header_len: (FIXED + policy.to_string().len() + CHECKSUM) as u64,
            policy,
            container_len,
            shard_len,
            key_tag: key_tag(key),
        }
    }

    pub fn k(&self) -> u16 {
        self.policy.data_shards()
    }

    pub fn shards(&self) -> u16 {
        self.policy.shard_count()
    }

    pub fn header_len(&self) -> u64 {
        self.header_len
    }

    pub fn blocks(&self) -> u64 {
        self.shard_len.div_ceil(BLOCK)
    }

    pub fn blob_len(&self) -> u64 {
        self.header_len() + self.shard_len + self.blocks() * DIGEST as u64
    }

    /// Payload bytes covered by `blocks`.
    pub fn payload_span(&self, blocks: &Range<u64>) -> Range<u64> {
        blocks.start * BLOCK..(blocks.end * BLOCK).min(self.shard_len)
    }

    /// The blocks holding payload bytes `span`.
    pub fn blocks_for(&self, span: &Range<u64>) -> Range<u64> {
        span.start / BLOCK..span.end.div_ceil(BLOCK)
    }

    /// Where `blocks` sit in the blob, digests included: (offset, length).
    pub fn blob_span(&self, blocks: &Range<u64>) -> (u64, usize) {
        let payload = self.payload_span(blocks);
        let offset = self.header_len() + blocks.start * (BLOCK + DIGEST as u64);
        let len = payload.end - payload.start + (blocks.end - blocks.start) * DIGEST as u64;
        (offset, len as usize)
    }

    /// Copies are interchangeable, so they share one digest context and a
    /// copy's body is the same bytes whichever index it is stored under.
    fn digest_index(&self, index: u16) -> u16 {
        match self.policy.coding() {
            Coding::Copies => 0,
            Coding::Xor | Coding::ReedSolomon => index,
        }
    }

    fn context(&self, index: u16) -> [u8; 32] {
        let mut ctx = [0u8; 32];
        ctx[..8].copy_from_slice(&self.key_tag);
        ctx[8..10].copy_from_slice(&self.digest_index(index).to_le_bytes());
        ctx[10..12].copy_from_slice(&self.k().to_le_bytes());
        ctx[12..14].copy_from_slice(&(self.shards() - self.k()).to_le_bytes());
        ctx[16..24].copy_from_slice(&self.container_len.to_le_bytes());
        ctx[24..32].copy_from_slice(&self.shard_len.to_le_bytes());
        ctx
    }
}

fn block_digest(ctx: &[u8; 32], block: u64, data: &[u8]) -> [u8; DIGEST] {
    let mut h = blake3::Hasher::new();
    h.update(ctx);
    h.update(&block.to_le_bytes());
    h.update(data);
    truncate(h.finalize())
}

/// Builds shard `index`'s blob from its payload, which may be shorter than
/// S: the rest is zero padding, written without copying the payload twice.
pub fn encode(layout: &Layout, index: u16, payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() as u64 <= layout.shard_len);
    let header_len = layout.header_len() as usize;
    let mut blob = Vec::with_capacity(layout.blob_len() as usize);
    blob.resize(header_len, 0);
    let ctx = layout.context(index);
    let mut root = blake3::Hasher::new();
    let mut padded = Vec::new();
    for b in 0..layout.blocks() {
        let span = layout.payload_span(&(b..b + 1));
        let (start, end) = (span.start as usize, span.end as usize);
        let data = if end <= payload.len() {
            &payload[start..end]
        } else {
            padded.clear();
            padded.extend_from_slice(&payload[start.min(payload.len())..]);
            padded.resize(end - start, 0);
            &padded[..]
        };
        let digest = block_digest(&ctx, b, data);
        root.update(&digest);
        blob.extend_from_slice(&digest);
        blob.extend_from_slice(data);
    }
    write_header(
        layout,
        index,
        &truncate(root.finalize()),
        &mut blob[..header_len],
    );
    blob
}

/// Re-labels a copy's blob as copy `index`: copies differ only in the
/// header, so a mirror hashes its container once.
pub fn relabel(layout: &Layout, blob: &mut [u8], index: u16) {
    let header_len = layout.header_len() as usize;
    let root: [u8; DIGEST] = blob[32..48].try_into().expect("16 bytes");
    write_header(layout, index, &root, &mut blob[..header_len]);
}

fn write_header(layout: &Layout, index: u16, root: &[u8; DIGEST], out: &mut [u8]) {
    let policy = layout.policy.to_string();
    out[..4].copy_from_slice(MAGIC);
    out[4] = VERSION;
    out[5] = BLOCK_SHIFT;
    out[6] = u8::try_from(policy.len()).expect("policy text fits a header");
    out[7] = 0;
    out[8..10].copy_from_slice(&index.to_le_bytes());
    out[10..12].copy_from_slice(&layout.k().to_le_bytes());
    out[12..14].copy_from_slice(&(layout.shards() - layout.k()).to_le_bytes());
    out[14..16].fill(0);
    out[16..24].copy_from_slice(&layout.container_len.to_le_bytes());
    out[24..32].copy_from_slice(&layout.shard_len.to_le_bytes());
    out[32..48].copy_from_slice(root);
    out[48..56].copy_from_slice(&layout.key_tag);
    let end = FIXED + policy.len();
    out[FIXED..end].copy_from_slice(policy.as_bytes());
    let sum: [u8; CHECKSUM] = truncate(blake3::hash(&out[..end]));
    out[end..end + CHECKSUM].copy_from_slice(&sum);
}

/// A parsed, checksum-verified shard header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub layout: Layout,
    pub index: u16,
    payload_digest: [u8; DIGEST],
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parses the header at the start of `bytes` (which may hold more).
pub fn decode_header(bytes: &[u8]) -> Result<Header, Corrupt> {
    let bad = |why: String| Err(Corrupt(why));
    if bytes.len() < FIXED + CHECKSUM {
        return bad(format!(
            "{} bytes is too short for a shard header",
            bytes.len()
        ));
    }
    if &bytes[..4] != MAGIC {
        return bad("not a shard: bad magic".into());
    }
    if bytes[4] != VERSION {
        return bad(format!("unsupported shard format version {}", bytes[4]));
    }
    let end = FIXED + usize::from(bytes[6]);
    if bytes.len() < end + CHECKSUM {
        return bad("header is truncated".into());
    }
    let sum: [u8; CHECKSUM] = truncate(blake3::hash(&bytes[..end]));
    if bytes[end..end + CHECKSUM] != sum {
        return bad("header checksum mismatch".into());
    }
    if bytes[5] != BLOCK_SHIFT {
        return bad(format!("unsupported block size 2^{}", bytes[5]));
    }
    let text = std::str::from_utf8(&bytes[FIXED..end])
        .map_err(|_| Corrupt("policy text is not UTF-8".into()))?;
    let policy: Policy = text.parse().map_err(|e| Corrupt(format!("{e}")))?;
    let (index, k, m) = (u16_at(bytes, 8), u16_at(bytes, 10), u16_at(bytes, 12));
    let shard_len = u64_at(bytes, 24);
    let mut layout = Layout::new(policy, "", u64_at(bytes, 16));
    layout.key_tag = bytes[48..56].try_into().expect("8 bytes");
    if (k, m) != (layout.k(), layout.shards() - layout.k())
        || shard_len != layout.shard_len
        || index >= layout.shards()
    {
        return bad(format!(
            "header's geometry (shard {index}, K={k}, M={m}, S={shard_len}) does not fit {} over {} bytes",
            layout.policy, layout.container_len
        ));
    }
    Ok(Header {
        layout,
        index,
        payload_digest: bytes[32..48].try_into().expect("16 bytes"),
    })
}

/// Verifies a whole shard blob against the layout the caller expects and
/// returns its payload, compacted in place (no second buffer).
pub fn decode(layout: &Layout, index: u16, mut blob: Vec<u8>) -> Result<Vec<u8>, Corrupt> {
    if blob.len() as u64 != layout.blob_len() {
        return Err(Corrupt(format!(
            "blob is {} bytes, a shard of this container is {}",
            blob.len(),
            layout.blob_len()
        )));
    }
    let header = decode_header(&blob)?;
    if header.layout != *layout || header.index != index {
        return Err(Corrupt(format!(
            "header describes shard {} of {} over {} bytes, expected shard {index} of {} over {}",
            header.index,
            header.layout.policy,
            header.layout.container_len,
            layout.policy,
            layout.container_len
        )));
    }
    let start = layout.header_len() as usize;
    let mut root = blake3::Hasher::new();
    let payload_len = verify_blocks_in_place(layout, index, 0, &mut blob, start, &mut root)?;
    if truncate::<DIGEST>(root.finalize()) != header.payload_digest {
        return Err(Corrupt("payload digest mismatch".into()));
    }
    blob.truncate(payload_len);
    Ok(blob)
}

/// Verifies the bytes of `blocks` as read from the blob (digests included)
/// and returns their payload bytes.
pub fn decode_blocks(
    layout: &Layout,
    index: u16,
    blocks: &Range<u64>,
    mut bytes: Vec<u8>,
) -> Result<Vec<u8>, Corrupt> {
    let (_, want) = layout.blob_span(blocks);
    if bytes.len() != want {
        return Err(Corrupt(format!(
            "read {} bytes of blocks, wanted {want}",
            bytes.len()
        )));
    }
    let mut root = blake3::Hasher::new();
    let len = verify_blocks_in_place(layout, index, blocks.start, &mut bytes, 0, &mut root)?;
    bytes.truncate(len);
    Ok(bytes)
}

/// A shard's payload over some blocks, checked block by block: blocks that
/// failed their digest, or were not there to read, are listed in `bad` and
/// their bytes must not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The payload bytes of every block asked for (zeros where none were read).
    pub payload: Vec<u8>,
    /// Block numbers that did not verify, ascending.
    pub bad: Vec<u64>,
}

/// Like [`decode_blocks`], but a bad block does not spoil the others: each
/// block of `blocks` is verified on its own, so good blocks of a damaged
/// shard can still be used. Bytes missing at the end count as bad blocks.
pub fn check_blocks(layout: &Layout, index: u16, blocks: &Range<u64>, bytes: Vec<u8>) -> Checked {
    check_from(layout, index, blocks, bytes, 0)
}

/// [`check_blocks`] over `bytes` from `at` on, compacting the payload to
/// the front of `bytes` in place.
fn check_from(
    layout: &Layout,
    index: u16,
    blocks: &Range<u64>,
    mut bytes: Vec<u8>,
    mut at: usize,
) -> Checked {
    let ctx = layout.context(index);
    let payload = layout.payload_span(blocks);
    let mut bad = Vec::new();
    let mut out = 0;
    for b in blocks.clone() {
        let span = layout.payload_span(&(b..b + 1));
        let n = (span.end - span.start) as usize;
        let end = at + DIGEST + n;
        if end <= bytes.len() {
            if block_digest(&ctx, b, &bytes[at + DIGEST..end]) != bytes[at..at + DIGEST] {
                bad.push(b);
            }
            bytes.copy_within(at + DIGEST..end, out);
        } else {
            bad.push(b);
        }
        out += n;
        at = end;
    }
    bytes.resize((payload.end - payload.start) as usize, 0);
    Checked {
        payload: bytes,
        bad,
    }
}

/// Checks a whole shard blob block by block (see [`check_blocks`]) and its
/// header: the header's problem, if any, is returned beside the blocks, as
/// blocks verify against the layout the caller expects without it.
pub fn check_blob(layout: &Layout, index: u16, blob: Vec<u8>) -> (Checked, Option<Corrupt>) {
    let header = match decode_header(&blob) {
        Err(bad) => Some(bad),
        Ok(h) if h.layout != *layout || h.index != index => Some(Corrupt(format!(
            "header describes shard {} of {} over {} bytes, expected shard {index} of {} over {}",
            h.index, h.layout.policy, h.layout.container_len, layout.policy, layout.container_len
        ))),
        Ok(_) if blob.len() as u64 != layout.blob_len() => Some(Corrupt(format!(
            "blob is {} bytes, a shard of this container is {}",
            blob.len(),
            layout.blob_len()
        ))),
        Ok(_) => None,
    };
    let start = (layout.header_len() as usize).min(blob.len());
    (
        check_from(layout, index, &(0..layout.blocks()), blob, start),
        header,
    )
}

/// Checks each block from `first` on, starting at byte `at` of `buf`, and
/// moves its payload down to the front of `buf`. Returns the payload length.
fn verify_blocks_in_place(
    layout: &Layout,
    index: u16,
    first: u64,
    buf: &mut [u8],
    mut at: usize,
    root: &mut blake3::Hasher,
) -> Result<usize, Corrupt> {
    let ctx = layout.context(index);
    let mut out = 0;
    let mut b = first;
    while at < buf.len() {
        let span = layout.payload_span(&(b..b + 1));
        let n = (span.end - span.start) as usize;
        let digest = &buf[at..at + DIGEST];
        let data = &buf[at + DIGEST..at + DIGEST + n];
        if block_digest(&ctx, b, data) != digest {
            return Err(Corrupt(format!("block {b} fails its checksum")));
        }
        root.update(digest);
        buf.copy_within(at + DIGEST..at + DIGEST + n, out);
        out += n;
        at += DIGEST + n;
        b += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn layout(policy: &str, len: u64) -> Layout {
        Layout::new(
            policy.parse().unwrap(),
            "containers/00000/0000000000000001",
            len,
        )
    }

    fn payload(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn shard_length_is_even_and_covers_the_container() {
        assert_eq!(layout("mirror:2", 7).shard_len, 7);
        assert_eq!(layout("rs:4+2", 0).shard_len, 2);
        assert_eq!(layout("rs:4+2", 9).shard_len, 4);
        assert_eq!(layout("parity:3", 9).shard_len, 4);
        assert_eq!(layout("rs:2+1", 8).shard_len, 4);
    }

    #[test]
    fn short_payload_is_zero_padded() {
        let l = layout("rs:2+1", 9);
        let blob = encode(&l, 1, &[1]);
        assert_eq!(decode(&l, 1, blob).unwrap(), vec![1, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn wrong_place_or_version_is_rejected() {
        let l = layout("rs:4+2", 300_000);
        let data = payload(l.shard_len as usize, 1);
        let blob = encode(&l, 2, &data);
        let err = decode(&l, 3, blob.clone()).unwrap_err();
        assert!(err.0.contains("expected shard 3"), "{err}");
        let other = Layout::new(l.policy.clone(), "containers/other", l.container_len);
        assert!(decode(&other, 2, blob.clone()).is_err());
        let mut v2 = blob.clone();
        v2[4] = 2;
        assert!(decode_header(&v2).unwrap_err().0.contains("version 2"));
        let mut flipped = blob.clone();
        flipped[20] ^= 1;
        assert!(decode_header(&flipped).unwrap_err().0.contains("checksum"));
        let mut short = blob.clone();
        short.pop();
        assert!(decode(&l, 2, short).unwrap_err().0.contains("bytes"));
        // A block moved to another shard's position fails its digest.
        let (off, len) = l.blob_span(&(1..2));
        let moved = blob[off as usize..off as usize + len].to_vec();
        assert!(decode_blocks(&l, 2, &(0..1), moved.clone()).is_err());
        assert!(decode_blocks(&l, 3, &(1..2), moved.clone()).is_err());
        assert_eq!(
            decode_blocks(&l, 2, &(1..2), moved).unwrap(),
            data[BLOCK as usize..]
        );
    }

    #[test]
    fn a_bad_block_spoils_only_itself() {
        let l = layout("rs:2+1", 600_000);
        let data = payload(l.shard_len as usize, 4);
        let mut blob = encode(&l, 1, &data);
        let (off, _) = l.blob_span(&(2..3));
        blob[off as usize + 40] ^= 1;
        let (checked, header) = check_blob(&l, 1, blob.clone());
        assert_eq!(header, None);
        assert_eq!(checked.bad, vec![2]);
        let good = |c: &Checked, b: u64| {
            let span = l.payload_span(&(b..b + 1));
            c.payload[span.start as usize..span.end as usize]
                == data[span.start as usize..span.end as usize]
        };
        assert!((0..l.blocks())
            .filter(|&b| b != 2)
            .all(|b| good(&checked, b)));
        // A range read sees the same; a blob cut short loses its tail only.
        let (off, len) = l.blob_span(&(1..4));
        let part = blob[off as usize..off as usize + len].to_vec();
        assert_eq!(check_blocks(&l, 1, &(1..4), part).bad, vec![2]);
        let mut short = blob.clone();
        let (o, n) = l.blob_span(&(0..2));
        short.truncate(o as usize + n + 10);
        let (checked, header) = check_blob(&l, 1, short);
        assert!(header.unwrap().0.contains("bytes"));
        assert_eq!(checked.bad, (2..l.blocks()).collect::<Vec<_>>());
        assert!(good(&checked, 0) && good(&checked, 1));
        // A bad header leaves good blocks usable; no header, no blocks.
        blob[20] ^= 1;
        let (checked, header) = check_blob(&l, 1, blob);
        assert!(header.unwrap().0.contains("checksum"));
        assert_eq!(checked.bad, vec![2]);
        let (checked, _) = check_blob(&l, 1, vec![0; 10]);
        assert_eq!(checked.bad.len() as u64, l.blocks());
    }

    #[test]
    fn copies_share_a_body() {
        let l = layout("mirror:3", 100_000);
        let data = payload(100_000, 9);
        let mut blob = encode(&l, 0, &data);
        relabel(&l, &mut blob, 2);
        assert_eq!(blob, encode(&l, 2, &data));
        assert_eq!(decode(&l, 2, blob).unwrap(), data);
    }

    fn policies() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("single".to_string()),
            (2u16..5).prop_map(|n| format!("mirror:{n}")),
            (2u16..5).prop_map(|w| format!("stripe:{w}")),
            (1u16..6).prop_map(|k| format!("parity:{k}")),
            (1u16..4).prop_map(|k| format!("parity:{k}@fast")),
            (1u16..6, 1u16..4).prop_map(|(k, m)| format!("rs:{k}+{m}")),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn round_trip(policy in policies(), len in 0u64..300_000, seed: u8, index_pick: u16) {
            let l = layout(&policy, len);
            let index = index_pick % l.shards();
            let data = payload(l.shard_len as usize, seed);
            let blob = encode(&l, index, &data);
            prop_assert_eq!(blob.len() as u64, l.blob_len());
            let header = decode_header(&blob).unwrap();
            prop_assert_eq!(&header.layout, &l);
            prop_assert_eq!(header.index, index);
            prop_assert_eq!(decode(&l, index, blob.clone()).unwrap(), data.clone());
            for first in 0..l.blocks() {
                for end in first + 1..=l.blocks() {
                    let (off, n) = l.blob_span(&(first..end));
                    let bytes = blob[off as usize..off as usize + n].to_vec();
                    let span = l.payload_span(&(first..end));
                    prop_assert_eq!(
                        decode_blocks(&l, index, &(first..end), bytes).unwrap(),
                        &data[span.start as usize..span.end as usize]
                    );
                }
            }
        }

        #[test]
        fn any_flipped_byte_is_caught(policy in policies(), len in 0u64..200_000, at: usize, bit in 0u8..8) {
            let l = layout(&policy, len);
            let data = payload(l.shard_len as usize, 3);
            let mut blob = encode(&l, 0, &data);
            let at = at % blob.len();
            blob[at] ^= 1 << bit;
            prop_assert!(decode(&l, 0, blob).is_err());
        }

        #[test]
        fn garbage_is_never_a_header(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            prop_assert!(decode_header(&bytes).is_err());
        }
    }
}
