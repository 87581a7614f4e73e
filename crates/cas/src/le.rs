//! Little-endian integers at an offset of a byte slice: the one reader
//! behind this crate's byte layouts (containers, regions, index rows).
//! `None` when the slice is too short, so damaged bytes are an error to
//! report, never a panic.

pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_fits_and_refuses_what_does_not() {
        let b = [1u8, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(u32_at(&b, 0), Some(0x0403_0201));
        assert_eq!(u64_at(&b, 1), Some(0x0908_0706_0504_0302));
        assert_eq!(u32_at(&b, 6), None);
        assert_eq!(u64_at(&b, 2), None);
        assert_eq!(u32_at(&b, usize::MAX), None);
    }
}
