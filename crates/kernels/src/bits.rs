//! [`Bits`]: a borrowed run of validity bits that the kernels read 64 at a time.
//!
//! Bits are least-significant-bit first in `u64` words: element `i` of a run is bit
//! `i % 64` of word `i / 64` (counted from the run's start), so a 64-element chunk of
//! values meets its validity as one word, which is what a vector mask register wants.

/// A borrowed run of validity bits: bit `i` of the run is bit `start + i` of `words`.
#[derive(Debug, Clone, Copy)]
pub struct Bits<'a> {
    words: &'a [u64],
    start: usize,
}

impl<'a> Bits<'a> {
    /// The run that starts at bit `start` of `words`.
    #[inline]
    pub fn new(words: &'a [u64], start: usize) -> Self {
        Bits { words, start }
    }

    /// The same words, starting `offset` bits later.
    #[inline]
    pub fn offset(self, offset: usize) -> Self {
        Bits {
            words: self.words,
            start: self.start + offset,
        }
    }

    /// Bit `i` of the run. Bits past the end of the words read as 0.
    #[inline(always)]
    pub fn get(&self, i: usize) -> bool {
        let p = self.start + i;
        self.words
            .get(p / 64)
            .is_some_and(|w| (w >> (p % 64)) & 1 == 1)
    }

    /// The 64 bits `i .. i + 64` of the run as one word (bit `k` = element `i + k`).
    /// Bits past the end of the words read as 0.
    #[inline(always)]
    pub fn word_at(&self, i: usize) -> u64 {
        let p = self.start + i;
        let (w, s) = (p / 64, p % 64);
        let lo = self.words.get(w).copied().unwrap_or(0) >> s;
        if s == 0 {
            lo
        } else {
            lo | (self.words.get(w + 1).copied().unwrap_or(0) << (64 - s))
        }
    }

    /// Whether any of the first `len` bits of the run is set.
    pub fn any(&self, len: usize) -> bool {
        let mut i = 0;
        while i + 64 <= len {
            if self.word_at(i) != 0 {
                return true;
            }
            i += 64;
        }
        i < len && self.word_at(i) & ((1u64 << (len - i)) - 1) != 0
    }

    /// Number of set bits among the first `len` bits of the run.
    pub fn count_ones(&self, len: usize) -> usize {
        let mut n = 0usize;
        let mut i = 0;
        while i + 64 <= len {
            n += self.word_at(i).count_ones() as usize;
            i += 64;
        }
        if i < len {
            let rem = len - i;
            n += (self.word_at(i) & ((1u64 << rem) - 1)).count_ones() as usize;
        }
        n
    }
}
