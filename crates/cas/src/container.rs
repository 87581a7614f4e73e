//! The container format.
//!
//! ```text
//! "CAIRNCT2"                       8-byte header ("CAIRNCT1": no region records)
//! per region:
//!   region record:                 "CRGN", stored region length u32,
//!                                  chunk count u32, then per chunk: id [32],
//!                                  offset in region u32, length u32 (40 bytes),
//!                                  checksum [8] (BLAKE3 of the record before it)
//!   stored region                  (see `region`)
//! footer:                          container id u64, chunk count u32,
//!                                  then per chunk: id [32], region offset u64,
//!                                  region length u32, offset in region u32,
//!                                  length u32 (52 bytes)
//! trailer: footer length u32, footer checksum [8] (BLAKE3, first 8 bytes),
//!          "CAIRNEND"
//! ```
//! All integers are little-endian. A container is built in memory and
//! written whole by a branch, so a file that exists is either sealed or
//! damaged; damage is detected here (magic, checksum, bounds) and reported by
//! name, never served.
//!
//! The footer is the fast path: one read at the end names every chunk.
//! The region records say the same region by region, so that a container
//! whose trailer or footer is damaged still gives up every chunk whose
//! region is intact ([`recover`]): each record is found by its magic and
//! trusted by its checksum, and each chunk then verifies itself against
//! its id. Index locations point at the stored region, past its record, so
//! reads never look at records.

use crate::id::{ChunkId, ContainerId};
use crate::le::{u32_at, u64_at};
use crate::protection::Protection;

pub const HEADER: &[u8; 8] = b"CAIRNCT2";
/// Containers written before regions carried records: read the same way,
/// recovered from their footer alone.
const HEADER_V1: &[u8; 8] = b"CAIRNCT1";
const RECORD_MAGIC: &[u8; 4] = b"CRGN";
const RECORD_FIXED: usize = 4 + 4 + 4;
const RECORD_ENTRY: usize = 32 + 4 + 4;
const CHECKSUM_LEN: usize = 8;
/// Footers tried by [`recover`] when the trailer cannot place the footer.
const MAX_FOOTER_CANDIDATES: usize = 4;
const TRAILER_MAGIC: &[u8; 8] = b"CAIRNEND";
pub const TRAILER_LEN: usize = 4 + 8 + 8;
const ENTRY_LEN: usize = 32 + 8 + 4 + 4 + 4;
const FOOTER_FIXED: usize = 8 + 4;
/// Why reading a fixed-size record cannot fail.
const FIXED: &str = "a record of its encoded length";

/// Where a chunk's bytes are: which region of which container, and where in
/// the decompressed region. One region read serves the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkLocation {
    pub container: ContainerId,
    pub region_offset: u64,
    pub region_len: u32,
    pub offset_in_region: u32,
    pub len: u32,
}

impl ChunkLocation {
    pub const ENCODED_LEN: usize = 28;

    pub fn encode(&self) -> [u8; 28] {
        let mut out = [0u8; 28];
        out[..8].copy_from_slice(&self.container.0.to_le_bytes());
        out[8..16].copy_from_slice(&self.region_offset.to_le_bytes());
        out[16..20].copy_from_slice(&self.region_len.to_le_bytes());
        out[20..24].copy_from_slice(&self.offset_in_region.to_le_bytes());
        out[24..28].copy_from_slice(&self.len.to_le_bytes());
        out
    }

    pub fn decode(b: &[u8; 28]) -> Self {
        ChunkLocation {
            container: ContainerId(u64_at(b, 0).expect(FIXED)),
            region_offset: u64_at(b, 8).expect(FIXED),
            region_len: u32_at(b, 16).expect(FIXED),
            offset_in_region: u32_at(b, 20).expect(FIXED),
            len: u32_at(b, 24).expect(FIXED),
        }
    }
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ContainerError {
    #[error("file is {0} bytes, too short to be a sealed container (truncated?)")]
    TooShort(u64),
    #[error("bad header magic (not a cairn container)")]
    BadHeader,
    #[error("bad trailer magic (truncated or not sealed)")]
    BadTrailer,
    #[error("footer length {0} does not fit in the file (truncated?)")]
    FooterLength(u32),
    #[error("footer checksum mismatch")]
    FooterChecksum,
    #[error("footer is malformed: {0}")]
    Malformed(String),
    #[error("footer names container {found}, expected {expected}")]
    WrongId {
        expected: ContainerId,
        found: ContainerId,
    },
}

/// A container being filled: regions are appended, then it is sealed.
pub struct ContainerBuilder {
    id: ContainerId,
    buf: Vec<u8>,
    entries: Vec<(ChunkId, ChunkLocation)>,
    raw_bytes: u64,
}

/// A sealed container: its bytes and the chunks it holds.
pub struct Sealed {
    pub id: ContainerId,
    pub bytes: Vec<u8>,
    pub entries: Vec<(ChunkId, ChunkLocation)>,
    pub raw_bytes: u64,
    /// Garbage collection copied these chunks forward: their index entries
    /// move here even though the chunks are indexed elsewhere already.
    pub relocated: bool,
    /// How the container is to be stored.
    pub protection: Protection,
}

impl ContainerBuilder {
    /// Starts a container in `buf` (cleared first; pass a recycled buffer to
    /// avoid faulting in fresh pages).
    pub fn new(id: ContainerId, mut buf: Vec<u8>) -> Self {
        buf.clear();
        buf.extend_from_slice(HEADER);
        ContainerBuilder {
            id,
            buf,
            entries: Vec::new(),
            raw_bytes: 0,
        }
    }

    pub fn id(&self) -> ContainerId {
        self.id
    }

    /// Bytes a region of `chunks` chunks adds besides its stored bytes.
    pub fn record_len(chunks: usize) -> usize {
        RECORD_FIXED + chunks * RECORD_ENTRY + CHECKSUM_LEN
    }

    /// Bytes the container would have if sealed now, without its footer.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends a region holding `chunks` (id, offset in the raw region,
    /// length), preceded by its record; `write` appends the stored region's
    /// bytes to the buffer.
    pub fn append_region(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>),
        chunks: &[(ChunkId, u32, u32)],
    ) {
        let record_start = self.buf.len();
        self.buf.extend_from_slice(RECORD_MAGIC);
        self.buf.extend_from_slice(&0u32.to_le_bytes());
        self.buf
            .extend_from_slice(&(chunks.len() as u32).to_le_bytes());
        for (id, offset_in_region, len) in chunks {
            self.buf.extend_from_slice(id.as_bytes());
            self.buf.extend_from_slice(&offset_in_region.to_le_bytes());
            self.buf.extend_from_slice(&len.to_le_bytes());
        }
        let sum_at = self.buf.len();
        self.buf.extend_from_slice(&[0; CHECKSUM_LEN]);
        let region_offset = self.buf.len() as u64;
        write(&mut self.buf);
        let region_len = (self.buf.len() as u64 - region_offset) as u32;
        self.buf[record_start + 4..record_start + 8].copy_from_slice(&region_len.to_le_bytes());
        let sum = checksum(&self.buf[record_start..sum_at]);
        self.buf[sum_at..sum_at + CHECKSUM_LEN].copy_from_slice(&sum);
        for &(id, offset_in_region, len) in chunks {
            self.raw_bytes += len as u64;
            let loc = ChunkLocation {
                container: self.id,
                region_offset,
                region_len,
                offset_in_region,
                len,
            };
            self.entries.push((id, loc));
        }
    }

    pub fn seal(mut self) -> Sealed {
        let footer_start = self.buf.len();
        self.buf.extend_from_slice(&self.id.0.to_le_bytes());
        self.buf
            .extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for (id, loc) in &self.entries {
            self.buf.extend_from_slice(id.as_bytes());
            self.buf.extend_from_slice(&loc.encode()[8..]);
        }
        let footer_len = (self.buf.len() - footer_start) as u32;
        let sum = checksum(&self.buf[footer_start..]);
        self.buf.extend_from_slice(&footer_len.to_le_bytes());
        self.buf.extend_from_slice(&sum);
        self.buf.extend_from_slice(TRAILER_MAGIC);
        Sealed {
            id: self.id,
            bytes: self.buf,
            entries: self.entries,
            raw_bytes: self.raw_bytes,
            relocated: false,
            protection: Protection::plain(),
        }
    }
}

fn checksum(bytes: &[u8]) -> [u8; 8] {
    blake3::hash(bytes).as_bytes()[..8].try_into().unwrap()
}

/// Where the footer is, read from the last [`TRAILER_LEN`] bytes of a
/// container of `size` bytes: (footer offset, footer length, checksum).
pub fn parse_trailer(size: u64, trailer: &[u8]) -> Result<(u64, u32, [u8; 8]), ContainerError> {
    if size < (HEADER.len() + FOOTER_FIXED + TRAILER_LEN) as u64 || trailer.len() != TRAILER_LEN {
        return Err(ContainerError::TooShort(size));
    }
    if &trailer[12..20] != TRAILER_MAGIC {
        return Err(ContainerError::BadTrailer);
    }
    let footer_len = u32_at(trailer, 0).ok_or(ContainerError::BadTrailer)?;
    let room = size - (HEADER.len() + TRAILER_LEN) as u64;
    if (footer_len as u64) > room || (footer_len as usize) < FOOTER_FIXED {
        return Err(ContainerError::FooterLength(footer_len));
    }
    let footer_offset = size - TRAILER_LEN as u64 - footer_len as u64;
    let sum = trailer
        .get(4..12)
        .and_then(|s| s.try_into().ok())
        .ok_or(ContainerError::BadTrailer)?;
    Ok((footer_offset, footer_len, sum))
}

/// Parses and checks a footer found at `footer_offset`; every location must
/// lie within the region area.
pub fn parse_footer(
    expected: ContainerId,
    footer_offset: u64,
    footer: &[u8],
    sum: [u8; 8],
) -> Result<Vec<(ChunkId, ChunkLocation)>, ContainerError> {
    if checksum(footer) != sum {
        return Err(ContainerError::FooterChecksum);
    }
    let short = || ContainerError::FooterLength(footer.len() as u32);
    let found = ContainerId(u64_at(footer, 0).ok_or_else(short)?);
    if found != expected {
        return Err(ContainerError::WrongId { expected, found });
    }
    let count = u32_at(footer, 8).ok_or_else(short)? as usize;
    let body = footer.get(FOOTER_FIXED..).ok_or_else(short)?;
    if body.len() != count * ENTRY_LEN {
        return Err(ContainerError::Malformed(format!(
            "{count} entries need {} bytes, footer has {}",
            count * ENTRY_LEN,
            body.len()
        )));
    }
    let mut entries = Vec::with_capacity(count);
    for e in body.chunks_exact(ENTRY_LEN) {
        let id = ChunkId::from_bytes(e[..32].try_into().unwrap());
        let mut loc = [0u8; 28];
        loc[..8].copy_from_slice(&expected.0.to_le_bytes());
        loc[8..].copy_from_slice(&e[32..]);
        let loc = ChunkLocation::decode(&loc);
        let region_end = loc.region_offset + loc.region_len as u64;
        if loc.region_offset < HEADER.len() as u64 || region_end > footer_offset {
            return Err(ContainerError::Malformed(format!(
                "chunk {id} points at region {}..{region_end}, outside the region area",
                loc.region_offset
            )));
        }
        if loc.len == 0 {
            return Err(ContainerError::Malformed(format!(
                "chunk {id} has length 0"
            )));
        }
        entries.push((id, loc));
    }
    Ok(entries)
}

/// Parses a whole container held in memory.
pub fn parse(
    expected: ContainerId,
    bytes: &[u8],
) -> Result<Vec<(ChunkId, ChunkLocation)>, ContainerError> {
    let size = bytes.len() as u64;
    if size < (HEADER.len() + FOOTER_FIXED + TRAILER_LEN) as u64 {
        return Err(ContainerError::TooShort(size));
    }
    if &bytes[..8] != HEADER && &bytes[..8] != HEADER_V1 {
        return Err(ContainerError::BadHeader);
    }
    let (off, len, sum) = parse_trailer(size, &bytes[bytes.len() - TRAILER_LEN..])?;
    let footer = &bytes[off as usize..off as usize + len as usize];
    parse_footer(expected, off, footer, sum)
}

/// Every chunk a damaged container still names, for a container whose
/// trailer or footer is unusable ([`parse`] failed): the entries of every
/// region record whose checksum holds, and of up to a few footers found by
/// their container id where the trailer no longer says where the footer
/// starts. Nothing here is verified against chunk ids: the caller must
/// verify each chunk before it trusts it. Never panics, whatever `bytes`
/// hold; the result is in location order, without repeats.
///
/// What cannot be recovered: a region whose record and the footer entry
/// for it are both damaged (its chunks are not named anywhere else), and
/// of a container written before region records ("CAIRNCT1"), every chunk
/// once its footer itself is damaged.
pub fn recover(expected: ContainerId, bytes: &[u8]) -> Vec<(ChunkId, ChunkLocation)> {
    let mut found = region_records(expected, bytes);
    found.extend(footers(expected, bytes));
    found.sort_by_key(|(id, loc)| (*loc, *id));
    found.dedup();
    found
}

/// The entries of every intact region record, found by walking from the
/// header and, past damage, by searching for the next record magic.
fn region_records(expected: ContainerId, bytes: &[u8]) -> Vec<(ChunkId, ChunkLocation)> {
    let mut out = Vec::new();
    let mut pos = HEADER.len();
    while let Some(at) = find(bytes, RECORD_MAGIC, pos) {
        match parse_record(expected, bytes, at) {
            Some((entries, end)) => {
                out.extend(entries);
                pos = end;
            }
            None => pos = at + 1,
        }
    }
    out
}

fn find(bytes: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let rest = bytes.get(from..)?;
    rest.windows(needle.len())
        .position(|w| w == needle)
        .map(|i| from + i)
}

/// The record at `at` if its checksum holds and its region and chunks lie
/// within the bytes: its entries, and where its region ends.
fn parse_record(
    expected: ContainerId,
    bytes: &[u8],
    at: usize,
) -> Option<(Vec<(ChunkId, ChunkLocation)>, usize)> {
    let region_len = u32_at(bytes, at + 4)?;
    let count = u32_at(bytes, at + 8)? as usize;
    let sum_at = (at + RECORD_FIXED).checked_add(count.checked_mul(RECORD_ENTRY)?)?;
    let sum = bytes.get(sum_at..sum_at.checked_add(CHECKSUM_LEN)?)?;
    if checksum(bytes.get(at..sum_at)?) != sum {
        return None;
    }
    let region_offset = sum_at + CHECKSUM_LEN;
    let region_end = region_offset.checked_add(region_len as usize)?;
    let stored = bytes.get(region_offset..region_end)?;
    let raw_len = crate::region::decoded_len(stored)? as u64;
    let mut entries = Vec::with_capacity(count);
    for e in bytes
        .get(at + RECORD_FIXED..sum_at)?
        .chunks_exact(RECORD_ENTRY)
    {
        let id = ChunkId::from_bytes(e[..32].try_into().ok()?);
        let offset_in_region = u32_at(e, 32)?;
        let len = u32_at(e, 36)?;
        if len == 0 || offset_in_region as u64 + len as u64 > raw_len {
            continue;
        }
        let loc = ChunkLocation {
            container: expected,
            region_offset: region_offset as u64,
            region_len,
            offset_in_region,
            len,
        };
        entries.push((id, loc));
    }
    Some((entries, region_end))
}

/// Entries of footers found by their container id, searching back from
/// the end: each must hold exactly as many entries as it says and place
/// every chunk inside the region area before it.
fn footers(expected: ContainerId, bytes: &[u8]) -> Vec<(ChunkId, ChunkLocation)> {
    let needle = expected.0.to_le_bytes();
    let mut out = Vec::new();
    let mut tried = 0;
    let mut end = bytes.len();
    while tried < MAX_FOOTER_CANDIDATES {
        let Some(at) = bytes
            .get(..end)
            .and_then(|b| b.windows(needle.len()).rposition(|w| w == needle))
        else {
            break;
        };
        end = at + needle.len() - 1;
        if at < HEADER.len() {
            break;
        }
        if let Some(entries) = footer_at(expected, bytes, at) {
            tried += 1;
            out.extend(entries);
        }
    }
    out
}

fn footer_at(
    expected: ContainerId,
    bytes: &[u8],
    at: usize,
) -> Option<Vec<(ChunkId, ChunkLocation)>> {
    let count = u32_at(bytes, at + 8)? as usize;
    if count == 0 {
        return None;
    }
    let body_start = at + FOOTER_FIXED;
    let body_end = body_start.checked_add(count.checked_mul(ENTRY_LEN)?)?;
    let body = bytes.get(body_start..body_end)?;
    let mut entries = Vec::with_capacity(count);
    for e in body.chunks_exact(ENTRY_LEN) {
        let id = ChunkId::from_bytes(e[..32].try_into().ok()?);
        let mut loc = [0u8; 28];
        loc[..8].copy_from_slice(&expected.0.to_le_bytes());
        loc[8..].copy_from_slice(&e[32..]);
        let loc = ChunkLocation::decode(&loc);
        let region_end = loc.region_offset.checked_add(loc.region_len as u64)?;
        if loc.region_offset < HEADER.len() as u64 || region_end > at as u64 || loc.len == 0 {
            return None;
        }
        entries.push((id, loc));
    }
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::{self, Compression};
    use crate::RepoKey;
    use proptest::prelude::*;

    fn build(id: ContainerId, regions: &[Vec<Vec<u8>>], key: &RepoKey) -> Sealed {
        let mut b = ContainerBuilder::new(id, Vec::new());
        for chunks in regions {
            let raw: Vec<u8> = chunks.concat();
            let mut meta = Vec::new();
            let mut off = 0u32;
            for c in chunks {
                meta.push((key.chunk_id(c), off, c.len() as u32));
                off += c.len() as u32;
            }
            let stored = region::encode(&raw, Compression::default());
            b.append_region(|buf| buf.extend_from_slice(&stored), &meta);
        }
        b.seal()
    }

    fn chunk_bytes(bytes: &[u8], loc: &ChunkLocation) -> Vec<u8> {
        let start = loc.region_offset as usize;
        let stored = &bytes[start..start + loc.region_len as usize];
        let raw = region::decode(bytes::Bytes::copy_from_slice(stored)).unwrap();
        raw[loc.offset_in_region as usize..][..loc.len as usize].to_vec()
    }

    fn chunks_strategy() -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
        let chunk = prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..3000),
            (any::<u8>(), 1usize..3000).prop_map(|(b, n)| vec![b; n]),
        ];
        proptest::collection::vec(proptest::collection::vec(chunk, 1..5), 0..6)
    }

    proptest! {
        #[test]
        fn round_trip(regions in chunks_strategy(), id in any::<u64>()) {
            let key = RepoKey::generate();
            let sealed = build(ContainerId(id), &regions, &key);
            let entries = parse(ContainerId(id), &sealed.bytes).unwrap();
            prop_assert_eq!(&entries, &sealed.entries);
            let all: Vec<&Vec<u8>> = regions.iter().flatten().collect();
            prop_assert_eq!(entries.len(), all.len());
            for ((cid, loc), data) in entries.iter().zip(all) {
                prop_assert_eq!(&chunk_bytes(&sealed.bytes, loc), data);
                prop_assert_eq!(*cid, key.chunk_id(data));
            }
        }

        #[test]
        fn any_truncation_is_detected(regions in chunks_strategy(), cut in any::<proptest::sample::Index>()) {
            let sealed = build(ContainerId(1), &regions, &RepoKey::generate());
            let at = cut.index(sealed.bytes.len());
            prop_assert!(parse(ContainerId(1), &sealed.bytes[..at]).is_err());
        }

        #[test]
        fn footer_damage_is_detected(regions in chunks_strategy(), pos in any::<proptest::sample::Index>(), bit in 0u8..8) {
            let mut sealed = build(ContainerId(1), &regions, &RepoKey::generate());
            let n = sealed.bytes.len();
            let footer_len = u32_at(&sealed.bytes, n - TRAILER_LEN).unwrap() as usize;
            let footer_start = n - TRAILER_LEN - footer_len;
            let at = footer_start + pos.index(n - footer_start);
            sealed.bytes[at] ^= 1 << bit;
            prop_assert!(parse(ContainerId(1), &sealed.bytes).is_err());
        }
    }

    fn footer_start(bytes: &[u8]) -> usize {
        let n = bytes.len();
        let len = u32_at(bytes, n - TRAILER_LEN).unwrap();
        n - TRAILER_LEN - len as usize
    }

    fn sorted(entries: &[(ChunkId, ChunkLocation)]) -> Vec<(ChunkId, ChunkLocation)> {
        let mut v = entries.to_vec();
        v.sort_by_key(|(id, loc)| (*loc, *id));
        v
    }

    /// Where each region's record starts and its region ends.
    fn region_spans(sealed: &Sealed) -> Vec<(u64, usize, usize)> {
        let mut spans: Vec<(u64, usize, usize)> = Vec::new();
        for (_, loc) in &sealed.entries {
            match spans.last_mut() {
                Some((off, count, _)) if *off == loc.region_offset => *count += 1,
                _ => spans.push((
                    loc.region_offset,
                    1,
                    (loc.region_offset + loc.region_len as u64) as usize,
                )),
            }
        }
        spans
            .into_iter()
            .map(|(off, count, end)| (off, off as usize - ContainerBuilder::record_len(count), end))
            .collect()
    }

    proptest! {
        #[test]
        fn recover_never_panics_on_garbage(bytes in proptest::collection::vec(any::<u8>(), 0..3000), id in any::<u64>()) {
            let _ = recover(ContainerId(id), &bytes);
            let mut with_magic = HEADER.to_vec();
            with_magic.extend_from_slice(&bytes);
            with_magic.extend_from_slice(RECORD_MAGIC);
            with_magic.extend_from_slice(&bytes);
            let _ = recover(ContainerId(id), &with_magic);
        }

        #[test]
        fn recover_never_panics_on_a_damaged_container(
            regions in chunks_strategy(),
            damage in proptest::collection::vec((any::<proptest::sample::Index>(), any::<u8>()), 1..16),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut bytes = build(ContainerId(3), &regions, &RepoKey::generate()).bytes;
            for (at, b) in damage {
                let i = at.index(bytes.len());
                bytes[i] = b;
            }
            bytes.truncate(cut.index(bytes.len() + 1));
            for e in recover(ContainerId(3), &bytes) {
                let (_, loc) = e;
                prop_assert!(loc.region_offset + loc.region_len as u64 <= bytes.len() as u64);
            }
        }

        /// Whatever happens to the footer and trailer (cut anywhere in
        /// them, overwritten, its length garbled), every chunk is found.
        #[test]
        fn a_destroyed_footer_loses_no_chunk(
            regions in chunks_strategy(),
            id in any::<u64>(),
            how in 0u8..3,
            at in any::<proptest::sample::Index>(),
            fill in any::<u8>(),
        ) {
            let sealed = build(ContainerId(id), &regions, &RepoKey::generate());
            let mut bytes = sealed.bytes.clone();
            let start = footer_start(&bytes);
            let n = bytes.len();
            match how {
                0 => bytes.truncate(start + at.index(n - start)),
                1 => bytes[start..].fill(fill),
                _ => {
                    let garbled = u32_at(&bytes, n - TRAILER_LEN).unwrap() ^ (1 + fill as u32);
                    bytes[n - TRAILER_LEN..n - TRAILER_LEN + 4].copy_from_slice(&garbled.to_le_bytes());
                }
            }
            prop_assert!(parse(ContainerId(id), &bytes).is_err() || how == 0 && bytes.len() == n);
            prop_assert_eq!(recover(ContainerId(id), &bytes), sorted(&sealed.entries));
        }

        /// Damage inside one region (its record or its bytes) with the
        /// footer gone costs only that region's chunks.
        #[test]
        fn damage_in_one_region_spares_the_others(
            regions in chunks_strategy(),
            pos in any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            let sealed = build(ContainerId(9), &regions, &RepoKey::generate());
            let start = footer_start(&sealed.bytes);
            let mut bytes = sealed.bytes[..start].to_vec();
            let at = HEADER.len() + pos.index(start - HEADER.len() + 1).min(start.saturating_sub(HEADER.len() + 1));
            if at < bytes.len() {
                bytes[at] ^= 1 << bit;
            }
            let got = recover(ContainerId(9), &bytes);
            for (first, end) in region_spans(&sealed).iter().map(|&(_, first, end)| (first, end)) {
                let hit = (first..end).contains(&at);
                for e in sealed.entries.iter().filter(|(_, l)| (first..end).contains(&(l.region_offset as usize))) {
                    prop_assert!(hit || got.contains(e), "intact region lost {:?}", e);
                }
            }
        }

        /// A container whose region records are unreadable too (as one
        /// written before records existed) is recovered from its footer
        /// when only the trailer is damaged.
        #[test]
        fn the_footer_alone_recovers_a_cut_trailer(
            regions in chunks_strategy(),
            id in any::<u64>(),
            cut in 1usize..=TRAILER_LEN,
        ) {
            let sealed = build(ContainerId(id), &regions, &RepoKey::generate());
            let mut bytes = sealed.bytes.clone();
            for (_, first, _) in region_spans(&sealed) {
                bytes[first] ^= 0xff;
            }
            bytes.truncate(bytes.len() - cut);
            prop_assert_eq!(recover(ContainerId(id), &bytes), sorted(&sealed.entries));
        }
    }

    #[test]
    fn wrong_id_and_header_are_named() {
        let sealed = build(
            ContainerId(7),
            &[vec![b"abc".to_vec()]],
            &RepoKey::generate(),
        );
        assert!(matches!(
            parse(ContainerId(8), &sealed.bytes),
            Err(ContainerError::WrongId { .. })
        ));
        let mut bad = sealed.bytes.clone();
        bad[0] = b'X';
        assert_eq!(parse(ContainerId(7), &bad), Err(ContainerError::BadHeader));
        assert_eq!(
            parse(ContainerId(7), &sealed.bytes[..10]),
            Err(ContainerError::TooShort(10))
        );
    }
}
