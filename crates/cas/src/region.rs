//! Compression regions: the unit that is compressed and read back whole.
//!
//! A stored region is `[codec u8][raw length u32 LE][payload]`, so a region
//! read through the index needs nothing else to be decoded.

use std::cell::RefCell;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// How regions are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Compression {
    None,
    Zstd { level: i32 },
    Lz4,
}

impl Default for Compression {
    /// zstd level 2: on a /usr/lib tar with 1 MiB regions it stores 6% fewer
    /// bytes than level 1 for 9% more ingest time, and level 3 saves 4% more
    /// for another 23% (see docs/chunk-store.md).
    fn default() -> Self {
        Compression::Zstd { level: 2 }
    }
}

const RAW: u8 = 0;
const ZSTD: u8 = 1;
const LZ4: u8 = 2;
pub const HEADER_LEN: usize = 5;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegionError {
    #[error("region is {0} bytes, shorter than its header")]
    Short(usize),
    #[error("unknown region codec {0}")]
    UnknownCodec(u8),
    #[error("region does not decompress: {0}")]
    Decompress(String),
    #[error("region decompressed to {got} bytes, its header says {want}")]
    Length { got: usize, want: usize },
}

thread_local! {
    /// zstd contexts are costly to create; each worker thread keeps its own.
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn zstd_compress(raw: &[u8], level: i32) -> Option<Vec<u8>> {
    COMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.as_ref().map(|(l, _)| *l) != Some(level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level).ok()?));
        }
        let (_, c) = slot.as_mut()?;
        c.compress(raw).ok()
    })
}

fn zstd_decompress(payload: &[u8], want: usize) -> Result<Vec<u8>, RegionError> {
    DECOMPRESSOR.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                zstd::bulk::Decompressor::new()
                    .map_err(|e| RegionError::Decompress(e.to_string()))?,
            );
        }
        let d = slot.as_mut().expect("set above");
        d.decompress(payload, want)
            .map_err(|e| RegionError::Decompress(e.to_string()))
    })
}

/// A region after compression was tried: either a smaller payload, or the
/// verdict to store the raw bytes (which are then copied only once, straight
/// into the container).
pub enum Encoded {
    Raw {
        len: usize,
    },
    Compressed {
        codec: u8,
        raw_len: usize,
        payload: Vec<u8>,
    },
}

thread_local! {
    /// Scratch space to join a region's chunks for the compressor, reused so
    /// each region does not fault in fresh pages.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Regions at least this long are sampled before zstd is tried on them.
const SAMPLE_FROM: usize = 64 << 10;
/// The sample: this many slices of this many bytes, spread evenly.
const SAMPLE_SLICES: usize = 4;
const SAMPLE_SLICE: usize = 4 << 10;
/// Bits per byte of the sample's byte histogram above which zstd is not
/// tried. Random bytes measure about 7.99 on a 16 KiB sample; zstd level 2
/// saves under 1% on what measures above 7.9 (already compressed media,
/// encrypted data, random test data), and base64 or text measure 6 or less.
const ENTROPY_SKIP: f64 = 7.9;

/// Whether `raw` is worth giving to zstd: short regions always; longer
/// ones when a sample's order-0 entropy says there is something to gain.
/// Incompressible regions were a quarter of the daemon's CPU under random
/// writes of fresh data, each one compressed in full to be stored raw.
fn worth_compressing(raw: &[u8]) -> bool {
    if raw.len() < SAMPLE_FROM {
        return true;
    }
    let mut counts = [0u32; 256];
    let step = raw.len() / SAMPLE_SLICES;
    for i in 0..SAMPLE_SLICES {
        for &b in &raw[i * step..i * step + SAMPLE_SLICE] {
            counts[usize::from(b)] += 1;
        }
    }
    let n = (SAMPLE_SLICES * SAMPLE_SLICE) as f64;
    let entropy: f64 = counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum();
    entropy <= ENTROPY_SKIP
}

/// Compresses the concatenation of `parts`, keeping the result only when it
/// is smaller than the raw bytes; zstd is not tried on a long region whose
/// sample looks incompressible ([`worth_compressing`]).
pub fn compress(parts: &[&[u8]], compression: Compression) -> Encoded {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let attempt = |raw: &[u8]| match compression {
        Compression::None => None,
        Compression::Zstd { level } => worth_compressing(raw)
            .then(|| zstd_compress(raw, level))
            .flatten()
            .map(|c| (ZSTD, c)),
        Compression::Lz4 => Some((LZ4, lz4_flex::block::compress(raw))),
    };
    let compressed = match parts {
        _ if compression == Compression::None => None,
        [one] => attempt(one),
        _ => SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            scratch.clear();
            for p in parts {
                scratch.extend_from_slice(p);
            }
            attempt(&scratch)
        }),
    };
    match compressed {
        Some((codec, payload)) if payload.len() < len => Encoded::Compressed {
            codec,
            raw_len: len,
            payload,
        },
        _ => Encoded::Raw { len },
    }
}

impl Encoded {
    /// Bytes the stored region occupies.
    pub fn stored_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Encoded::Raw { len } => *len,
                Encoded::Compressed { payload, .. } => payload.len(),
            }
    }

    /// Appends the stored region to `out`; `parts` are the raw chunks the
    /// region was made from.
    pub fn write_to(&self, parts: &[&[u8]], out: &mut Vec<u8>) {
        match self {
            Encoded::Raw { len } => {
                out.push(RAW);
                out.extend_from_slice(&(*len as u32).to_le_bytes());
                for p in parts {
                    out.extend_from_slice(p);
                }
            }
            Encoded::Compressed {
                codec,
                raw_len,
                payload,
            } => {
                out.push(*codec);
                out.extend_from_slice(&(*raw_len as u32).to_le_bytes());
                out.extend_from_slice(payload);
            }
        }
    }
}

/// Encodes `raw` as one stored region.
pub fn encode(raw: &[u8], compression: Compression) -> Vec<u8> {
    let e = compress(&[raw], compression);
    let mut out = Vec::with_capacity(e.stored_len());
    e.write_to(&[raw], &mut out);
    out
}

/// Whether a stored region holds its bytes as they are: decoding it slices
/// `stored` rather than filling a buffer of its own.
pub fn is_raw(stored: &[u8]) -> bool {
    stored.first() == Some(&RAW)
}

/// The length of a stored region once decoded, as its header says.
pub fn decoded_len(stored: &[u8]) -> Option<usize> {
    Some(crate::le::u32_at(stored, 1)? as usize)
}

/// Decodes a stored region back to its raw bytes (a raw region is not copied).
pub fn decode(stored: Bytes) -> Result<Bytes, RegionError> {
    if stored.len() < HEADER_LEN {
        return Err(RegionError::Short(stored.len()));
    }
    let want = decoded_len(&stored).ok_or(RegionError::Short(stored.len()))?;
    let payload = &stored[HEADER_LEN..];
    let raw = match stored[0] {
        RAW => stored.slice(HEADER_LEN..),
        ZSTD => zstd_decompress(payload, want)?.into(),
        LZ4 => lz4_flex::block::decompress(payload, want)
            .map_err(|e| RegionError::Decompress(e.to_string()))?
            .into(),
        other => return Err(RegionError::UnknownCodec(other)),
    };
    if raw.len() != want {
        return Err(RegionError::Length {
            got: raw.len(),
            want,
        });
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [Compression; 4] = [
        Compression::None,
        Compression::Zstd { level: 1 },
        Compression::Zstd { level: 3 },
        Compression::Lz4,
    ];

    #[test]
    fn incompressible_is_stored_raw() {
        let raw: Vec<u8> = (0..100_000).map(|_| rand::random()).collect();
        for c in ALL {
            let stored = encode(&raw, c);
            assert_eq!(stored[0], RAW);
            assert_eq!(stored.len(), raw.len() + HEADER_LEN);
            assert_eq!(decode(stored.into()).unwrap(), raw);
        }
    }

    #[test]
    fn a_sample_decides_whether_zstd_is_tried() {
        let random: Vec<u8> = (0..SAMPLE_FROM * 4).map(|_| rand::random()).collect();
        assert!(!worth_compressing(&random));
        // Short regions are always tried.
        assert!(worth_compressing(&random[..SAMPLE_FROM - 1]));
        // Base64 of random bytes: 6 bits a byte, which LZ4 cannot shrink
        // and zstd's entropy coder can.
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let base64: Vec<u8> = random
            .iter()
            .map(|b| alphabet[usize::from(b % 64)])
            .collect();
        assert!(worth_compressing(&base64));
        let stored = encode(&base64, Compression::Zstd { level: 2 });
        assert_eq!(stored[0], ZSTD);
        assert!(stored.len() < base64.len() * 8 / 10);
        assert_eq!(decode(stored.into()).unwrap(), base64);
        // Random data with a run of zeros between the samples is stored
        // raw: the price of sampling, written down in the docs.
        let mut mixed = random.clone();
        let step = mixed.len() / SAMPLE_SLICES;
        mixed[step / 2..step / 2 + (16 << 10)].fill(0);
        let stored = encode(&mixed, Compression::Zstd { level: 2 });
        assert_eq!(stored[0], RAW);
        assert_eq!(decode(stored.into()).unwrap(), mixed);
    }

    #[test]
    fn compressible_shrinks() {
        let raw = b"cairn ".repeat(10_000);
        for c in [Compression::Zstd { level: 1 }, Compression::Lz4] {
            let stored = encode(&raw, c);
            assert!(stored.len() < raw.len() / 10);
            assert_eq!(decode(stored.into()).unwrap(), raw);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert_eq!(
            decode(Bytes::from_static(&[1, 2])),
            Err(RegionError::Short(2))
        );
        assert_eq!(
            decode(Bytes::from_static(&[9, 0, 0, 0, 0])),
            Err(RegionError::UnknownCodec(9))
        );
        let mut stored = encode(&b"abc".repeat(1000), Compression::Zstd { level: 1 });
        let n = stored.len();
        stored[n / 2] ^= 0xff;
        stored[n - 1] ^= 0xff;
        let decoded = decode(stored.into());
        assert!(decoded.is_err() || decoded.unwrap() != b"abc".repeat(1000));
    }

    proptest! {
        #[test]
        fn round_trip(raw in proptest::collection::vec(any::<u8>(), 0..5000), rep in 1usize..4) {
            let raw = raw.repeat(rep);
            for c in ALL {
                prop_assert_eq!(decode(encode(&raw, c).into()).unwrap(), raw.clone());
            }
        }
    }
}
