//! A page-aligned buffer for `O_DIRECT` writes, which must start at an
//! aligned address and cover whole blocks.

use std::alloc::{self, Layout};

pub const ALIGN: usize = 4096;

pub struct AlignedBuf {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: the buffer owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub const fn new() -> Self {
        AlignedBuf {
            ptr: std::ptr::null_mut(),
            cap: 0,
        }
    }

    /// Copies `data` in and zero-pads it to a whole number of blocks; returns
    /// the padded bytes.
    pub fn fill(&mut self, data: &[u8]) -> &[u8] {
        let padded = data.len().div_ceil(ALIGN).max(1) * ALIGN;
        if padded > self.cap {
            self.release();
            let layout = Layout::from_size_align(padded, ALIGN).expect("valid layout");
            // SAFETY: the layout has a non-zero size.
            let ptr = unsafe { alloc::alloc(layout) };
            if ptr.is_null() {
                alloc::handle_alloc_error(layout);
            }
            self.ptr = ptr;
            self.cap = padded;
        }
        // SAFETY: `ptr` is valid for `cap >= padded` bytes and does not
        // overlap `data`, which the caller owns.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, data.len());
            std::ptr::write_bytes(self.ptr.add(data.len()), 0, padded - data.len());
            std::slice::from_raw_parts(self.ptr, padded)
        }
    }

    fn release(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: allocated in `fill` with exactly this layout.
            unsafe {
                alloc::dealloc(self.ptr, Layout::from_size_align_unchecked(self.cap, ALIGN));
            }
            self.ptr = std::ptr::null_mut();
            self.cap = 0;
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pads_and_aligns() {
        let mut b = AlignedBuf::new();
        let out = b.fill(b"abc");
        assert_eq!(out.len(), ALIGN);
        assert_eq!(out.as_ptr() as usize % ALIGN, 0);
        assert_eq!(&out[..3], b"abc");
        assert!(out[3..].iter().all(|&x| x == 0));
        let big = vec![7u8; 3 * ALIGN + 1];
        let out = b.fill(&big);
        assert_eq!(out.len(), 4 * ALIGN);
        assert_eq!(&out[..big.len()], &big[..]);
    }
}
