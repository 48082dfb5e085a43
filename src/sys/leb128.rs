//! Small numbers in few bytes (unsigned LEB128: seven bits a byte, low bits first, the top bit
//! set on every byte but the last): the stack table's frames ([`crate::engine::tables`]) and a
//! report's location lists (`report/model/table.rs`) are lists of small numbers, one or two
//! bytes each instead of four or eight. (pprof's writer has its own 64-bit varints, written
//! into a message being built.)
//!
//! Neither function allocates beyond what `out` grows by, locks or blocks.

use allocator_api2::alloc::Allocator;
use allocator_api2::vec::Vec;

/// The most bytes one `u32` takes.
pub(crate) const MAX_BYTES: usize = 5;

/// Appends `v` to `out`.
#[inline]
pub(crate) fn push<A: Allocator>(out: &mut Vec<u8, A>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The numbers coded in a run of bytes, in order (a number cut off at the end is dropped).
#[derive(Debug, Clone)]
pub(crate) struct Numbers<'a>(std::slice::Iter<'a, u8>);

impl<'a> Numbers<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self(bytes.iter())
    }
}

impl Iterator for Numbers<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        let mut v = 0u32;
        let mut shift = 0u32;
        loop {
            let b = *self.0.next()?;
            v |= u32::from(b & 0x7f) << (shift & 31);
            shift += 7;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_come_back_as_they_went_in_in_their_sizes() {
        let values = [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, u32::MAX];
        let mut out: Vec<u8> = Vec::new();
        for (i, &v) in values.iter().enumerate() {
            let before = out.len();
            push(&mut out, v);
            assert_eq!(out.len() - before, [1, 1, 1, 2, 2, 3, 3, 4, 5][i], "{v}");
        }
        assert!(Numbers::new(&out).eq(values.iter().copied()));
        assert_eq!(Numbers::new(&out[..out.len() - 1]).count(), values.len() - 1, "cut off");
    }
}
