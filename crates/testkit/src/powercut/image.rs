//! The disks' contents: what survived the last flush, and the writes since,
//! which a power cut keeps or drops one by one.

use std::collections::HashMap;

/// The unit a disk writes whole: a power cut never tears one.
pub const BLOCK: usize = 4096;

/// One disk image.
#[derive(Default)]
pub struct Image {
    durable: HashMap<u64, Box<[u8]>>,
    /// Blocks written since the last flush, oldest first; the same block may
    /// appear more than once.
    pending: Vec<(u64, Box<[u8]>)>,
    /// Where in `pending` each block's newest content is.
    newest: HashMap<u64, usize>,
}

impl Image {
    fn block(&self, n: u64) -> Option<&[u8]> {
        match self.newest.get(&n) {
            Some(&i) => Some(&self.pending[i].1),
            None => self.durable.get(&n).map(|b| &b[..]),
        }
    }

    /// `len` bytes at `offset`, as a reader sees them (unwritten bytes are
    /// zero).
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut done = 0;
        while done < len {
            let at = offset + done as u64;
            let (n, within) = (at / BLOCK as u64, (at % BLOCK as u64) as usize);
            let take = (BLOCK - within).min(len - done);
            if let Some(b) = self.block(n) {
                out[done..done + take].copy_from_slice(&b[within..within + take]);
            }
            done += take;
        }
        out
    }

    /// Writes `data` at `offset`, not yet durable.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let (n, within) = (at / BLOCK as u64, (at % BLOCK as u64) as usize);
            let take = (BLOCK - within).min(data.len() - done);
            let mut b: Box<[u8]> = match self.block(n) {
                Some(old) => old.into(),
                None => vec![0u8; BLOCK].into(),
            };
            b[within..within + take].copy_from_slice(&data[done..done + take]);
            self.newest.insert(n, self.pending.len());
            self.pending.push((n, b));
            done += take;
        }
    }

    /// Makes every write so far durable.
    pub fn flush(&mut self) {
        for (n, b) in self.pending.drain(..) {
            self.durable.insert(n, b);
        }
        self.newest.clear();
    }

    /// The power goes: each write since the last flush reached the medium
    /// or did not, as `keep` says (in the order they were made), and the
    /// rest are gone. Returns (kept, dropped).
    pub fn cut(&mut self, mut keep: impl FnMut() -> bool) -> (usize, usize) {
        let (mut kept, mut dropped) = (0, 0);
        for (n, b) in self.pending.drain(..) {
            if keep() {
                self.durable.insert(n, b);
                kept += 1;
            } else {
                dropped += 1;
            }
        }
        self.newest.clear();
        (kept, dropped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_see_writes_and_a_cut_keeps_only_what_it_chose() {
        let mut img = Image::default();
        img.write(10, b"durable");
        img.flush();
        img.write(BLOCK as u64 - 2, b"spans");
        assert_eq!(img.read(10, 7), b"durable");
        assert_eq!(img.read(BLOCK as u64 - 2, 5), b"spans");
        let mut first = true;
        let (kept, dropped) = img.cut(|| std::mem::replace(&mut first, false));
        assert_eq!((kept, dropped), (1, 1));
        assert_eq!(img.read(BLOCK as u64 - 2, 5), b"sp\0\0\0");
        assert_eq!(img.read(10, 7), b"durable");
    }

    #[test]
    fn a_cut_dropping_everything_leaves_the_last_flush() {
        let mut img = Image::default();
        img.write(0, b"one");
        img.flush();
        img.write(0, b"two");
        img.write(1, b"X");
        img.cut(|| false);
        assert_eq!(img.read(0, 3), b"one");
    }
}
