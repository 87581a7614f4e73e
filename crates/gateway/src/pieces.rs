//! A PUT's body cut into pieces of exactly [`PIECE`] bytes (the last one
//! shorter), whatever sizes its chunks arrive in: each piece is hashed and
//! written on blocking threads while the next one is received. A piece
//! never exceeds [`PIECE`], so its buffer is never reallocated while it
//! fills, and the file system's dirty run holding its bytes is one block of
//! exactly that size.
//!
//! Pieces are received into two buffers in turn: a buffer is filled again
//! two pieces later, when the caller is done with the piece it held, and
//! its memory is then taken back whole (fresh memory for every piece cost
//! as much CPU in page faults as the copy into it). Were the caller still
//! holding that piece, the buffer would only be fresh memory.

use bytes::{Bytes, BytesMut};

use crate::tree::PIECE;

pub struct Pieces {
    bufs: [BytesMut; 2],
    filling: usize,
}

impl Pieces {
    pub fn new() -> Pieces {
        Pieces {
            bufs: [BytesMut::new(), BytesMut::new()],
            filling: 0,
        }
    }

    /// Copies the front of `chunk` into the piece being filled and moves
    /// `chunk` past it; the piece, once it holds [`PIECE`] bytes.
    pub fn fill(&mut self, chunk: &mut &[u8]) -> Option<Bytes> {
        let buf = &mut self.bufs[self.filling];
        // The whole piece's room at once: its old memory when the piece
        // sent from it is gone, and never a reallocation while it fills.
        buf.reserve(PIECE - buf.len());
        let n = (PIECE - buf.len()).min(chunk.len());
        buf.extend_from_slice(&chunk[..n]);
        *chunk = &chunk[n..];
        if buf.len() < PIECE {
            return None;
        }
        let piece = buf.split().freeze();
        self.filling = 1 - self.filling;
        Some(piece)
    }

    /// The last piece: the bytes after the last whole one, if any.
    pub fn last(&mut self) -> Option<Bytes> {
        let buf = &mut self.bufs[self.filling];
        (!buf.is_empty()).then(|| buf.split().freeze())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every piece of `body` sent in chunks of `sizes` (cycled).
    fn cut(body: &[u8], sizes: &[usize]) -> Vec<Bytes> {
        let mut pieces = Pieces::new();
        let mut out = Vec::new();
        let mut at = 0;
        for size in sizes.iter().cycle() {
            if at == body.len() {
                break;
            }
            let end = (at + size).min(body.len());
            let mut chunk = &body[at..end];
            while !chunk.is_empty() {
                out.extend(pieces.fill(&mut chunk));
            }
            at = end;
        }
        out.extend(pieces.last());
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Whatever the chunks, the pieces are the body's bytes in order,
        /// each exactly PIECE long but the last, which is not empty.
        #[test]
        fn pieces_are_the_body_cut_at_every_piece_boundary(
            len in prop_oneof![
                0..3 * PIECE + 100,
                Just(PIECE),
                Just(2 * PIECE),
                (1..4usize).prop_map(|k| k * PIECE - 1),
                (1..4usize).prop_map(|k| k * PIECE + 1),
            ],
            sizes in prop::collection::vec(
                prop_oneof![1..70usize, 1..PIECE + 2, Just(PIECE), 2 * PIECE - 1..2 * PIECE + 2],
                1..6,
            ),
            seed in any::<u8>(),
        ) {
            let body: Vec<u8> = (0..len)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(u32::from(seed % 32)) as u8)
                .collect();
            let pieces = cut(&body, &sizes);
            prop_assert_eq!(pieces.concat(), body);
            if let Some((last, whole)) = pieces.split_last() {
                prop_assert!(whole.iter().all(|p| p.len() == PIECE));
                prop_assert!(!last.is_empty() && last.len() <= PIECE);
            }
            prop_assert_eq!(pieces.len(), len.div_ceil(PIECE));
        }
    }

    #[test]
    fn a_buffer_is_reused_once_its_piece_is_dropped() {
        let mut pieces = Pieces::new();
        let body = vec![7u8; PIECE];
        let mut chunk = &body[..];
        let first = pieces.fill(&mut chunk).expect("a whole piece");
        let at = first.as_ptr();
        drop(first);
        let mut chunk = &body[..];
        drop(pieces.fill(&mut chunk).expect("a whole piece"));
        // The third piece goes where the first one was.
        let mut chunk = &body[..];
        let third = pieces.fill(&mut chunk).expect("a whole piece");
        assert_eq!(third.as_ptr(), at);
    }
}
