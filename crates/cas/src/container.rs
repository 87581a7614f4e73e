//! The container format.
//!
//! ```text
//! "CAIRNCT1"                       8-byte header
//! region 0 | region 1 | ...        stored regions (see `region`)
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

use crate::id::{ChunkId, ContainerId};
use crate::protection::Protection;

pub const HEADER: &[u8; 8] = b"CAIRNCT1";
const TRAILER_MAGIC: &[u8; 8] = b"CAIRNEND";
pub const TRAILER_LEN: usize = 4 + 8 + 8;
const ENTRY_LEN: usize = 32 + 8 + 4 + 4 + 4;
const FOOTER_FIXED: usize = 8 + 4;

/// Where a chunk's bytes are: which region of which container, and where in
/// the decompressed region. One region read serves the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
            container: ContainerId(u64::from_le_bytes(b[..8].try_into().unwrap())),
            region_offset: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            region_len: u32::from_le_bytes(b[16..20].try_into().unwrap()),
            offset_in_region: u32::from_le_bytes(b[20..24].try_into().unwrap()),
            len: u32::from_le_bytes(b[24..28].try_into().unwrap()),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
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

    /// Bytes the container would have if sealed now, without its footer.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends a region holding `chunks` (id, offset in the raw region,
    /// length); `write` appends the stored region's bytes to the buffer.
    pub fn append_region(
        &mut self,
        write: impl FnOnce(&mut Vec<u8>),
        chunks: &[(ChunkId, u32, u32)],
    ) {
        let region_offset = self.buf.len() as u64;
        write(&mut self.buf);
        let region_len = (self.buf.len() as u64 - region_offset) as u32;
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
    let footer_len = u32::from_le_bytes(trailer[..4].try_into().unwrap());
    let room = size - (HEADER.len() + TRAILER_LEN) as u64;
    if (footer_len as u64) > room || (footer_len as usize) < FOOTER_FIXED {
        return Err(ContainerError::FooterLength(footer_len));
    }
    let footer_offset = size - TRAILER_LEN as u64 - footer_len as u64;
    Ok((
        footer_offset,
        footer_len,
        trailer[4..12].try_into().unwrap(),
    ))
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
    let found = ContainerId(u64::from_le_bytes(footer[..8].try_into().unwrap()));
    if found != expected {
        return Err(ContainerError::WrongId { expected, found });
    }
    let count = u32::from_le_bytes(footer[8..12].try_into().unwrap()) as usize;
    let body = &footer[FOOTER_FIXED..];
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
    if &bytes[..8] != HEADER {
        return Err(ContainerError::BadHeader);
    }
    let (off, len, sum) = parse_trailer(size, &bytes[bytes.len() - TRAILER_LEN..])?;
    let footer = &bytes[off as usize..off as usize + len as usize];
    parse_footer(expected, off, footer, sum)
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
            let footer_len = u32::from_le_bytes(sealed.bytes[n - TRAILER_LEN..n - TRAILER_LEN + 4].try_into().unwrap()) as usize;
            let footer_start = n - TRAILER_LEN - footer_len;
            let at = footer_start + pos.index(n - footer_start);
            sealed.bytes[at] ^= 1 << bit;
            prop_assert!(parse(ContainerId(1), &sealed.bytes).is_err());
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
