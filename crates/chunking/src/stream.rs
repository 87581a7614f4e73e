use std::io::{self, Read};

use bytes::Bytes;
use fastcdc::v2020::{FastCDC, Normalization};

use crate::ChunkerParams;

/// Consecutive chunks of a stream, cut from one read buffer. The chunks share
/// that buffer (`Bytes` slices), so cutting copies no data.
#[derive(Debug)]
pub struct Batch {
    /// Stream offset of the first chunk.
    pub offset: u64,
    pub chunks: Vec<Bytes>,
}

impl Batch {
    pub fn len_bytes(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

/// Cuts a `Read` into chunks, one read buffer (a [`Batch`]) at a time.
pub struct Chunker<R> {
    source: R,
    params: ChunkerParams,
    read_size: usize,
    /// Bytes read but not yet cut (always fewer than `max` after a batch).
    carry: Vec<u8>,
    offset: u64,
    eof: bool,
}

impl<R: Read> Chunker<R> {
    /// `read_size` is how many bytes one batch aims to cover; it is raised to
    /// twice the maximum chunk size if smaller.
    pub fn new(source: R, params: ChunkerParams, read_size: usize) -> Self {
        let read_size = read_size.max(2 * params.max_chunk());
        Chunker {
            source,
            params,
            read_size,
            carry: Vec::new(),
            offset: 0,
            eof: false,
        }
    }

    /// The next batch of chunks, or `None` at end of stream.
    pub fn next_batch(&mut self) -> io::Result<Option<Batch>> {
        loop {
            if self.eof && self.carry.is_empty() {
                return Ok(None);
            }
            let mut buf = Vec::with_capacity(self.read_size.max(self.carry.len()));
            buf.append(&mut self.carry);
            while !self.eof && buf.len() < self.read_size {
                // read_to_end fills spare capacity without zeroing it first.
                let want = (self.read_size - buf.len()) as u64;
                match (&mut self.source).take(want).read_to_end(&mut buf) {
                    Ok(0) => self.eof = true,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        self.carry = buf;
                        return Err(e);
                    }
                }
            }
            let data = Bytes::from(buf);
            let cuts = self.cut_points(&data);
            let consumed = cuts.last().copied().unwrap_or(0);
            self.carry = data[consumed..].to_vec();
            if cuts.is_empty() {
                continue;
            }
            let mut chunks = Vec::with_capacity(cuts.len());
            let mut start = 0;
            for end in cuts {
                chunks.push(data.slice(start..end));
                start = end;
            }
            let batch = Batch {
                offset: self.offset,
                chunks,
            };
            self.offset += consumed as u64;
            return Ok(Some(batch));
        }
    }

    fn cut_points(&self, data: &[u8]) -> Vec<usize> {
        decided_cuts(data, self.params, self.eof)
    }
}

/// The chunker over `data`, or `None` for fixed-size chunks.
fn content_defined(data: &[u8], params: ChunkerParams) -> Option<FastCDC<'_>> {
    match params {
        ChunkerParams::ContentDefined { min, avg, max } => Some(FastCDC::with_level(
            data,
            min as usize,
            avg as usize,
            max as usize,
            Normalization::Level1,
        )),
        ChunkerParams::Fixed { .. } => None,
    }
}

/// Ends of the chunks of a stream that `data`, the stream from a chunk start
/// on, decides. With `at_end` the stream ends with `data` and every byte is
/// cut; otherwise a cut needs `max` bytes of lookahead from its chunk start
/// (so that it matches the cut of the whole stream), and cutting stops with
/// fewer than `max` bytes left.
pub fn decided_cuts(data: &[u8], params: ChunkerParams, at_end: bool) -> Vec<usize> {
    let max = params.max_chunk();
    let cdc = content_defined(data, params);
    let mut cuts = Vec::new();
    let mut pos = 0;
    while pos < data.len() {
        let remaining = data.len() - pos;
        if !at_end && remaining < max {
            break;
        }
        let end = match &cdc {
            Some(cdc) => cdc.cut(pos, remaining).1,
            None => pos + remaining.min(max),
        };
        cuts.push(end);
        pos = end;
    }
    cuts
}

/// The chunk ends of `data` taken as a whole stream: what [`Chunker`] would
/// cut, without reading or copying anything.
pub fn cut_points(data: &[u8], params: ChunkerParams) -> Vec<usize> {
    decided_cuts(data, params, true)
}

/// The end of the first chunk of `data` taken as a whole stream (the first
/// of [`cut_points`]), without cutting the rest. `data` must not be empty.
pub fn first_cut(data: &[u8], params: ChunkerParams) -> usize {
    match content_defined(data, params) {
        Some(cdc) => cdc.cut(0, data.len()).1,
        None => data.len().min(params.max_chunk()),
    }
}

impl<R: Read> Iterator for Chunker<R> {
    type Item = io::Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Deterministic pseudo-random bytes (xorshift64*), so golden cut points
    /// do not depend on any RNG crate's version.
    fn pseudo_random(len: usize, mut seed: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            out.extend_from_slice(&seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
        }
        out.truncate(len);
        out
    }

    fn lengths(data: &[u8], params: ChunkerParams, read_size: usize) -> Vec<usize> {
        Chunker::new(data, params, read_size)
            .flat_map(|b| b.unwrap().chunks)
            .map(|c| c.len())
            .collect()
    }

    /// Pins the cut points of the default parameters on a fixed input. If
    /// this fails, chunk ids of existing repositories would change: that is a
    /// format break, not a test to update casually.
    #[test]
    fn golden_cut_points_default() {
        let data = pseudo_random(1 << 20, 0x00c0_ffee);
        let got = lengths(&data, ChunkerParams::default(), 0);
        assert_eq!(got.iter().sum::<usize>(), 1 << 20);
        assert_eq!(got, GOLDEN_DEFAULT);
    }

    #[test]
    fn golden_cut_points_small() {
        let data = pseudo_random(64 * 1024, 7);
        let p = ChunkerParams::ContentDefined {
            min: 1024,
            avg: 4096,
            max: 16384,
        };
        assert_eq!(lengths(&data, p, 0), GOLDEN_SMALL);
    }

    const GOLDEN_DEFAULT: &[usize] = &[
        125822, 130256, 148416, 82703, 85055, 43365, 77988, 78062, 70008, 53125, 54873, 71324,
        27579,
    ];
    const GOLDEN_SMALL: &[usize] = &[
        1948, 9535, 3560, 7197, 3555, 5382, 4242, 5910, 2710, 1773, 6395, 6013, 7316,
    ];

    #[test]
    fn cut_points_of_a_buffer_match_the_stream() {
        let data = pseudo_random(700_000, 5);
        let ends = cut_points(&data, ChunkerParams::default());
        let mut end = 0;
        let streamed: Vec<usize> = lengths(&data, ChunkerParams::default(), 0)
            .into_iter()
            .map(|l| {
                end += l;
                end
            })
            .collect();
        assert_eq!(ends, streamed);
    }

    #[test]
    fn fixed_mode_cuts_every_size() {
        let data = pseudo_random(10_000, 1);
        let got = lengths(&data, ChunkerParams::Fixed { size: 4096 }, 0);
        assert_eq!(got, vec![4096, 4096, 1808]);
    }

    #[test]
    fn empty_stream_has_no_chunks() {
        assert!(lengths(&[], ChunkerParams::default(), 0).is_empty());
    }

    #[test]
    fn insert_moves_few_cut_points() {
        let data = pseudo_random(4 << 20, 99);
        let mut edited = data.clone();
        edited.splice(2_000_000..2_000_000, b"inserted bytes".iter().copied());
        let a = lengths(&data, ChunkerParams::default(), 0);
        let b = lengths(&edited, ChunkerParams::default(), 0);
        let common_prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
        let common_suffix = a
            .iter()
            .rev()
            .zip(b.iter().rev())
            .take_while(|(x, y)| x == y)
            .count();
        assert!(
            a.len() - common_prefix - common_suffix <= 3,
            "{a:?} vs {b:?}"
        );
    }

    /// A reader that returns at most `step` bytes per call.
    struct Trickle<'a> {
        data: &'a [u8],
        step: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    proptest! {
        #[test]
        fn streaming_matches_whole_input(
            len in 0usize..300_000,
            seed in any::<u64>(),
            step in 1usize..70_000,
            read_size in 0usize..100_000,
        ) {
            let data = pseudo_random(len, seed | 1);
            let p = ChunkerParams::ContentDefined { min: 2048, avg: 8192, max: 32768 };
            let whole = lengths(&data, p, 2 * len + 1);
            let mut streamed = Vec::new();
            let mut offset = 0u64;
            for batch in Chunker::new(Trickle { data: &data, step }, p, read_size) {
                let batch = batch.unwrap();
                prop_assert_eq!(batch.offset, offset);
                offset += batch.len_bytes() as u64;
                streamed.extend(batch.chunks.iter().map(|c| c.len()));
            }
            prop_assert_eq!(&streamed, &whole);
            prop_assert_eq!(whole.iter().sum::<usize>(), len);
            for (i, &l) in whole.iter().enumerate() {
                prop_assert!(l > 0 && l <= 32768);
                prop_assert!(l >= 2048 || i + 1 == whole.len());
            }
        }

        #[test]
        fn partial_cuts_are_a_prefix_of_the_whole(
            len in 1usize..200_000,
            seed in any::<u64>(),
            fixed in any::<bool>(),
        ) {
            let data = pseudo_random(len, seed | 1);
            let p = if fixed {
                ChunkerParams::Fixed { size: 5000 }
            } else {
                ChunkerParams::ContentDefined { min: 2048, avg: 8192, max: 32768 }
            };
            let whole = cut_points(&data, p);
            prop_assert_eq!(first_cut(&data, p), whole[0]);
            let decided = decided_cuts(&data, p, false);
            prop_assert_eq!(&whole[..decided.len()], &decided[..]);
            // Everything up to `max` bytes before the end is decided.
            let done = decided.last().copied().unwrap_or(0);
            prop_assert!(len - done < p.max_chunk());
        }
    }
}
