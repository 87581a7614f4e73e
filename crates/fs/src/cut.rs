//! Content-defined chunking of bytes held in several pieces.
//!
//! A stream of appends leaves a file's dirty bytes in runs of about a MiB
//! each. Joining them into one buffer before chunking cost a copy of every
//! byte (and the page faults of a fresh buffer); here each chunk that lies
//! within one run is a slice of it, and only a chunk that spans two runs is
//! copied. A fixed-mode file's region is cut at absolute block boundaries
//! the same way ([`cut_fixed`]).

use bytes::Bytes;
use chunking::{decided_cuts, first_cut, ChunkerParams};

use crate::chunkmode::BlockSize;

/// The chunks of the concatenation of `segments`, cut exactly as
/// [`chunking::cut_points`] cuts the concatenation. Each byte is scanned
/// for a cut once, plus at most one chunk's worth where a chunk spans two
/// segments (cutting each segment to its end and re-cutting the tail cost
/// 45% more chunking than `cairn put` did).
///
/// A cut depends only on the `max` bytes after the chunk's start (or on all
/// that is left, when less): a chunk starting at least `max` bytes before
/// its segment's end is cut within the segment; one starting closer is cut
/// from a copy of the next `max` bytes of the stream.
pub fn cut_segments(segments: &[Bytes], params: ChunkerParams) -> Vec<Bytes> {
    let max = params.max_chunk();
    let mut chunks = Vec::new();
    let (mut i, mut pos) = (0, 0);
    while i < segments.len() {
        let seg = &segments[i];
        if pos >= seg.len() {
            i += 1;
            pos = 0;
            continue;
        }
        let last = i + 1 == segments.len();
        let rest = &seg[pos..];
        if last || rest.len() >= max {
            let mut start = 0;
            for end in decided_cuts(rest, params, last) {
                chunks.push(seg.slice(pos + start..pos + end));
                start = end;
            }
            pos += start;
            if last {
                break;
            }
            continue;
        }
        // Fewer than `max` bytes left in this segment: the next chunk may
        // span segments.
        let mut window = Vec::with_capacity(max);
        window.extend_from_slice(rest);
        for next in &segments[i + 1..] {
            if window.len() >= max {
                break;
            }
            let take = (max - window.len()).min(next.len());
            window.extend_from_slice(&next[..take]);
        }
        let first = first_cut(&window, params);
        window.truncate(first);
        chunks.push(Bytes::from(window));
        // Step over the chunk's bytes, across segments.
        let mut left = first;
        while left > 0 {
            let here = segments[i].len() - pos;
            if left < here {
                pos += left;
                left = 0;
            } else {
                left -= here;
                i += 1;
                pos = 0;
            }
        }
    }
    chunks
}

/// The chunks of the concatenation of `segments`, which starts at file
/// offset `start`, cut at every multiple of `block` (counted from offset 0,
/// not from `start`): the first and last chunk may be shorter. A chunk
/// within one segment is a slice of it; one spanning segments is a copy.
pub fn cut_fixed(segments: &[Bytes], start: u64, block: BlockSize) -> Vec<Bytes> {
    let mut chunks = Vec::new();
    let mut at = start;
    let mut spanning: Vec<u8> = Vec::new();
    for seg in segments {
        let mut pos = 0;
        while pos < seg.len() {
            let boundary = block.floor(at) + block.get();
            let take = ((boundary - at) as usize).min(seg.len() - pos);
            let ends = at + take as u64 == boundary;
            if spanning.is_empty() && ends {
                chunks.push(seg.slice(pos..pos + take));
            } else {
                // A block split between segments, or the region's partial
                // last block (a short copy).
                spanning.extend_from_slice(&seg[pos..pos + take]);
                if ends {
                    chunks.push(Bytes::from(std::mem::take(&mut spanning)));
                }
            }
            pos += take;
            at += take as u64;
        }
    }
    if !spanning.is_empty() {
        chunks.push(Bytes::from(spanning));
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;
    use chunking::cut_points;
    use proptest::prelude::*;

    const SMALL: ChunkerParams = ChunkerParams::ContentDefined {
        min: 256,
        avg: 1024,
        max: 4096,
    };

    fn whole(data: &[u8], params: ChunkerParams) -> Vec<Vec<u8>> {
        let mut start = 0;
        cut_points(data, params)
            .into_iter()
            .map(|end| {
                let c = data[start..end].to_vec();
                start = end;
                c
            })
            .collect()
    }

    proptest! {
        #[test]
        fn cuts_like_the_concatenation(
            data in proptest::collection::vec(any::<u8>(), 0..60_000),
            splits in proptest::collection::vec(0usize..60_000, 0..12),
            fixed in any::<bool>(),
        ) {
            let params = if fixed { ChunkerParams::Fixed { size: 3000 } } else { SMALL };
            let mut at: Vec<usize> = splits.into_iter().map(|s| s.min(data.len())).collect();
            at.push(0);
            at.push(data.len());
            at.sort();
            let buf = Bytes::from(data.clone());
            let segments: Vec<Bytes> = at.windows(2).map(|w| buf.slice(w[0]..w[1])).collect();
            let got: Vec<Vec<u8>> = cut_segments(&segments, params)
                .into_iter()
                .map(|c| c.to_vec())
                .collect();
            prop_assert_eq!(got, whole(&data, params));
        }

        #[test]
        fn fixed_cuts_fall_on_absolute_block_boundaries(
            data in proptest::collection::vec(any::<u8>(), 0..40_000),
            splits in proptest::collection::vec(0usize..40_000, 0..12),
            start in 0u64..20_000,
        ) {
            let block = BlockSize::new(4096).unwrap();
            let mut at: Vec<usize> = splits.into_iter().map(|s| s.min(data.len())).collect();
            at.push(0);
            at.push(data.len());
            at.sort();
            let buf = Bytes::from(data.clone());
            let segments: Vec<Bytes> = at.windows(2).map(|w| buf.slice(w[0]..w[1])).collect();
            let chunks = cut_fixed(&segments, start, block);
            let joined: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            prop_assert_eq!(&joined, &data);
            let mut off = start;
            for (i, c) in chunks.iter().enumerate() {
                prop_assert!(!c.is_empty());
                off += c.len() as u64;
                if i + 1 < chunks.len() {
                    prop_assert_eq!(off % 4096, 0, "cut off a block boundary");
                }
                prop_assert!(c.len() as u64 <= 4096);
            }
        }
    }
}
