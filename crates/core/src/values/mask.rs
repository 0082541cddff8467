//! Bit-packed masks: [`BitMask`] (owned, with a shape) and [`Bits`] (a borrowed run of bits
//! that the lane kernels read 64 at a time; defined in the kernels crate).
//!
//! Bits are stored least-significant-bit first in `u64` words (`bitvec`'s
//! `BitVec<u64, Lsb0>`), element `i` of the row-major order at bit `i % 64` of word
//! `i / 64`. A 64-element chunk of values therefore meets its validity as one word,
//! which is what a vector mask register wants.

use crate::dims::ShapeLike;
use crate::error::{MaskedError, Result};
use bitvec::prelude::{BitVec, Lsb0};
pub use masked_kernels::Bits;
use ndarray::ArrayViewD;
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::sync::Arc;

/// An owned bit mask with a shape: `true` marks a valid element.
///
/// ```
/// use masked::BitMask;
/// let m = BitMask::from_bools(&[2, 3], [true, false, true, false, false, false]).unwrap();
/// assert_eq!(m.count_ones(), 2);
/// assert!(m.get(2) && !m.get(1));
/// // broadcast a per-row mask of shape [2, 1] to [2, 3]
/// let rows = BitMask::from_bools(&[2, 1], [true, false]).unwrap();
/// let full = rows.broadcast_to(&[2, 3]).unwrap();
/// assert_eq!(full.to_vec(), vec![true, true, true, false, false, false]);
/// ```
///
/// Serialised (serde) as `{"shape": [...], "words": [...]}`: the packed words of the
/// layout above, readable outside Rust (numpy: `np.unpackbits(np.array(words,
/// dtype="<u8").view(np.uint8), bitorder="little")[:n]`). Deserialising re-validates:
/// a shape whose size overflows or words too few for it are an error, and the unused
/// high bits are cleared.
#[derive(PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "MaskRepr", into = "MaskRepr")]
pub struct BitMask {
    shape: Vec<usize>,
    /// Shared between clones, copied on the first write to a shared one
    /// ([`BitMask::set`]): a clone (a view made over a mask the caller keeps, every
    /// engine call on a Python array's mask, a unary op's output mask) costs no copy.
    bits: Arc<BitVec<u64, Lsb0>>,
}

/// A copy of the bits (a `memcpy` of the words, in parallel chunks when large):
/// `bitvec`'s own `Clone` goes element by element through its domain iterator, about
/// 4 ns a word (milliseconds at 16M elements).
fn copy_bits(bits: &BitVec<u64, Lsb0>) -> BitVec<u64, Lsb0> {
    let mut copy =
        BitVec::<u64, Lsb0>::from_vec(masked_kernels::par::copy_vec(bits.as_raw_slice()));
    copy.truncate(bits.len());
    copy
}

/// The bits shared, not copied (see the `bits` field).
impl Clone for BitMask {
    fn clone(&self) -> Self {
        BitMask {
            shape: self.shape.clone(),
            bits: Arc::clone(&self.bits),
        }
    }
}

/// `BitMask { shape: [2, 3], valid: 3, bits: "101001" }`: the bits in row-major order
/// (`1` = valid), no storage details.
impl std::fmt::Debug for BitMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bits: String = self
            .bits
            .iter()
            .map(|b| if *b { '1' } else { '0' })
            .collect();
        f.debug_struct("BitMask")
            .field("shape", &self.shape)
            .field("valid", &self.count_ones())
            .field("bits", &bits)
            .finish()
    }
}

/// The portable serialised form of a [`BitMask`].
#[derive(Serialize, Deserialize)]
struct MaskRepr {
    shape: Vec<usize>,
    words: Vec<u64>,
}

impl TryFrom<MaskRepr> for BitMask {
    type Error = MaskedError;
    fn try_from(r: MaskRepr) -> Result<Self> {
        BitMask::from_words(&r.shape, r.words)
    }
}

impl From<BitMask> for MaskRepr {
    fn from(m: BitMask) -> Self {
        let words = m.words().to_vec();
        MaskRepr {
            shape: m.shape,
            words,
        }
    }
}

/// The element count of `shape`, or an error when it overflows `usize` or passes the
/// most bits a mask can address (`usize::MAX / 8`).
///
/// As numpy does, the product of the non-zero sizes must fit as well: `[0, 2^63, 4]`
/// holds no element, but its strides would overflow.
pub(crate) fn element_count(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .filter(|&&d| d != 0)
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= usize::MAX >> 3)
        .map(|n| if shape.contains(&0) { 0 } else { n })
        .ok_or_else(|| MaskedError::InvalidData(format!("shape {shape:?}: size overflows")))
}

/// Anything a mask can be made from as an array of bools: an `ndarray` bool array of any
/// rank, owned, a view or a reference. Every layout's `from_array` and the dense
/// `from_bool_mask` take one.
pub trait BoolArray {
    /// The bools as a view (row-major iteration order is the mask's order).
    fn bool_view(&self) -> ArrayViewD<'_, bool>;
}

impl<S: ndarray::Data<Elem = bool>, D: ndarray::Dimension> BoolArray for ndarray::ArrayBase<S, D> {
    fn bool_view(&self) -> ArrayViewD<'_, bool> {
        self.view().into_dyn()
    }
}

impl<A: BoolArray + ?Sized> BoolArray for &A {
    fn bool_view(&self) -> ArrayViewD<'_, bool> {
        (**self).bool_view()
    }
}

/// Checks a padding mask's lengths against its shape `[batch, len, ...]`.
///
/// # Errors
/// [`MaskedError::InvalidArgument`] for a rank below 2 or a lengths array not of the
/// batch size, [`MaskedError::LengthOutOfRange`] for a length above `len`.
pub fn check_lengths(shape: &[usize], lengths: &[usize]) -> Result<()> {
    if shape.len() < 2 || lengths.len() != shape[0] {
        return Err(MaskedError::InvalidArgument {
            name: "lengths",
            value: format!("{} lengths for shape {shape:?}", lengths.len()),
            reason: "expected a shape [batch, len, ...] with one length per batch row",
        });
    }
    if let Some((row, &length)) = lengths.iter().enumerate().find(|&(_, &l)| l > shape[1]) {
        return Err(MaskedError::LengthOutOfRange {
            row,
            length,
            max: shape[1],
        });
    }
    Ok(())
}

impl BitMask {
    /// A mask of `shape` with every element set to `value`.
    ///
    /// # Errors
    /// [`MaskedError::InvalidData`] when the shape's size overflows;
    /// [`MaskedError::TooLarge`] when memory cannot hold the mask.
    pub fn filled(shape: impl ShapeLike, value: bool) -> Result<Self> {
        let shape = shape.to_shape();
        let n = element_count(&shape)?;
        let words = n.div_ceil(64);
        let mut w = crate::try_vec(words, || format!("a mask of shape {shape:?}"))?;
        w.resize(words, if value { u64::MAX } else { 0 });
        Self::from_words(&shape, w)
    }

    /// A mask of `shape` valid everywhere.
    ///
    /// # Errors
    /// As [`BitMask::filled`].
    pub fn full(shape: impl ShapeLike) -> Result<Self> {
        Self::filled(shape, true)
    }

    /// A padding mask of shape `[batch, len, ...]`: batch row `r` is valid at positions
    /// `0..lengths[r]` along dim 1, over every trailing dim. Give `[batch, len, 1]` for a
    /// mask that broadcasts over the features of `[batch, len, features]` data.
    ///
    /// # Errors
    /// As [`check_lengths`]: [`MaskedError::LengthOutOfRange`] naming the sequence whose
    /// length passes `len`.
    ///
    /// ```
    /// use masked::BitMask;
    /// let m = BitMask::from_lengths([2, 3], &[2, 0]).unwrap();
    /// assert_eq!(m.to_vec(), vec![true, true, false, false, false, false]);
    /// let e = BitMask::from_lengths([2, 3], &[1, 9]).unwrap_err();
    /// assert_eq!(e.to_string(), "length 9 of sequence 1 is above the padded length 3");
    /// ```
    pub fn from_lengths(shape: impl ShapeLike, lengths: &[usize]) -> Result<Self> {
        let shape = shape.to_shape();
        check_lengths(&shape, lengths)?;
        let inner = element_count(&shape[2..])?;
        let len = shape[1];
        element_count(&shape)?;
        Self::from_bools(
            &shape,
            lengths
                .iter()
                .flat_map(|&l| (0..len * inner).map(move |k| k < l * inner)),
        )
    }

    /// A banded mask of `shape` (rows, cols): row `i` is valid at columns
    /// `i - lower ..= i + upper` (clipped). `banded([n, n], n, 0)` is causal.
    ///
    /// # Errors
    /// [`MaskedError::InvalidArgument`] for a shape that is not 2-D; a size that overflows.
    ///
    /// ```
    /// use masked::BitMask;
    /// let m = BitMask::banded([2, 4], 0, 1).unwrap();
    /// assert_eq!(m.to_vec(), [true, true, false, false, false, true, true, false]);
    /// ```
    pub fn banded(shape: impl ShapeLike, lower: usize, upper: usize) -> Result<Self> {
        let (r, c) = shape.to_shape2()?;
        let mut m = Self::filled([r, c], false)?;
        // rows from c + lower on are empty, and every row of a 0-column shape: no work for
        // them (a [2^61, 0] shape holds nothing)
        let rows = if c == 0 {
            0
        } else {
            r.min(c.saturating_add(lower))
        };
        // a fresh mask, not shared: written in place, a row's run at a time
        let bits = Arc::make_mut(&mut m.bits);
        for i in 0..rows {
            let lo = i.saturating_sub(lower).min(c);
            let hi = i.saturating_add(upper).saturating_add(1).min(c);
            bits[i * c + lo..i * c + hi.max(lo)].fill(true);
        }
        Ok(m)
    }

    /// A causal (lower-triangular, diagonal included) attention mask of `n` x `n`.
    ///
    /// # Errors
    /// A size that overflows.
    pub fn causal(n: usize) -> Result<Self> {
        Self::banded([n, n], n, 0)
    }

    /// A mask of `shape` valid exactly at the given coordinates (one index array per dim,
    /// equal lengths), in any order.
    ///
    /// # Errors
    /// [`MaskedError::IndexOutOfRange`] or [`MaskedError::DuplicateIndex`] naming the
    /// entry; [`MaskedError::InvalidData`] for ragged coordinate vectors.
    pub fn from_coords<C: AsRef<[usize]>>(shape: impl ShapeLike, coords: &[C]) -> Result<Self> {
        let shape = shape.to_shape();
        if coords.len() != shape.len() {
            return Err(MaskedError::InvalidData(format!(
                "{} coordinate arrays for a {}-d shape",
                coords.len(),
                shape.len()
            )));
        }
        let nnz = coords.first().map_or(0, |c| c.as_ref().len());
        if let Some(d) = coords.iter().position(|c| c.as_ref().len() != nnz) {
            return Err(MaskedError::InvalidData(format!(
                "coordinate array {d} has {} entries, expected {nnz} (as array 0)",
                coords[d].as_ref().len()
            )));
        }
        let mut m = Self::filled(&shape, false)?;
        let mut first = std::collections::HashMap::new();
        for e in 0..nnz {
            let mut flat = 0usize;
            for (d, (c, &size)) in coords.iter().zip(&shape).enumerate() {
                let i = c.as_ref()[e];
                if i >= size {
                    return Err(MaskedError::IndexOutOfRange {
                        entry: e,
                        dim: d,
                        index: i64::try_from(i).unwrap_or(i64::MAX),
                        size,
                    });
                }
                flat = flat * size + i;
            }
            if m.get(flat) {
                return Err(MaskedError::DuplicateIndex {
                    coords: coords.iter().map(|c| c.as_ref()[e]).collect(),
                    first: first[&flat],
                    second: e,
                });
            }
            first.insert(flat, e);
            m.set(flat, true);
        }
        Ok(m)
    }

    /// A mask of `shape` from its elements in row-major order: any iterable of `bool`
    /// or `&bool` (an array, a slice, a `Vec`, an iterator).
    ///
    /// # Errors
    /// [`MaskedError::MaskLength`] when there is not exactly one value per element.
    pub fn from_bools<B: Borrow<bool>>(
        shape: impl ShapeLike, values: impl IntoIterator<Item = B>,
    ) -> Result<Self> {
        let shape = shape.to_shape();
        // at most one value past the count: an endless iterator is a length error
        let n = element_count(&shape)?;
        let bits: BitVec<u64, Lsb0> = values
            .into_iter()
            .take(n.saturating_add(1))
            .map(|b| *b.borrow())
            .collect();
        Self::from_bitvec(&shape, bits)
    }

    /// A mask from an `ndarray` bool array (owned, a view or a reference), of its shape.
    ///
    /// # Errors
    /// A size that overflows.
    ///
    /// ```
    /// use masked::BitMask;
    /// let m = BitMask::from_array(ndarray::array![[true, false], [false, true]]).unwrap();
    /// assert_eq!((m.shape(), m.count_ones()), (&[2, 2][..], 2));
    /// ```
    pub fn from_array(mask: impl BoolArray) -> Result<Self> {
        let v = mask.bool_view();
        let shape = v.shape().to_vec();
        if let (2, Some(m), None) = (v.ndim(), v.t().as_slice(), v.as_slice()) {
            // F order (numpy's `x.T`, pandas' `isna()`): its memory packed as it lies,
            // then the bits transposed 64 x 64 at a time
            let words = masked_kernels::bits::pack_bools_transposed(m, shape[1], shape[0]);
            return Self::from_words(&shape, words);
        }
        // row-major memory packed 64 at a time (a strided or broadcast view gathered first)
        Self::from_words(
            &shape,
            masked_kernels::bits::pack_bools(&crate::gather::row_major_values(&v)),
        )
    }

    /// A mask of `shape` from a bit vector in row-major order.
    ///
    /// # Errors
    /// [`MaskedError::MaskLength`] when the length does not match the shape.
    pub fn from_bitvec(shape: &[usize], bits: BitVec<u64, Lsb0>) -> Result<Self> {
        let n = element_count(shape)?;
        if bits.len() != n {
            return Err(MaskedError::MaskLength {
                shape: shape.to_vec(),
                expected: n,
                got: bits.len(),
            });
        }
        Ok(BitMask {
            shape: shape.to_vec(),
            bits: Arc::new(bits),
        })
    }

    /// A mask of `shape` from packed words (bit `i` = bit `i % 64` of word `i / 64`).
    /// Bits past the element count are ignored.
    ///
    /// # Errors
    /// [`MaskedError::MaskLength`] when there are too few words.
    pub fn from_words(shape: &[usize], mut words: Vec<u64>) -> Result<Self> {
        let n = element_count(shape)?;
        if words.len() < n.div_ceil(64) {
            return Err(MaskedError::MaskLength {
                shape: shape.to_vec(),
                expected: n,
                got: words.len().saturating_mul(64),
            });
        }
        // only the words the elements need, their unused high bits cleared (the kernels
        // read whole words)
        words.truncate(n.div_ceil(64));
        if let (Some(w), r @ 1..) = (words.last_mut(), n % 64) {
            *w &= (1u64 << r) - 1;
        }
        let mut bits = BitVec::<u64, Lsb0>::from_vec(words);
        bits.truncate(n);
        Ok(BitMask {
            shape: shape.to_vec(),
            bits: Arc::new(bits),
        })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.bits.len()
    }
    /// Whether the mask has no elements.
    pub fn is_empty(&self) -> bool {
        self.bits.is_empty()
    }
    /// Element `i` in row-major order.
    pub fn get(&self, i: usize) -> bool {
        self.bits[i]
    }
    /// Sets element `i` (copying the bits first where a clone shares them).
    pub fn set(&mut self, i: usize, v: bool) {
        if Arc::get_mut(&mut self.bits).is_none() {
            self.bits = Arc::new(copy_bits(&self.bits));
        }
        // unshared now: no copy here
        Arc::make_mut(&mut self.bits).set(i, v);
    }
    /// Number of valid elements.
    pub fn count_ones(&self) -> usize {
        self.bits.count_ones()
    }
    /// Whether every element is valid.
    pub fn all(&self) -> bool {
        self.bits.all()
    }
    /// The packed words (the last one may hold unused high bits, always 0 here).
    pub fn words(&self) -> &[u64] {
        self.bits.as_raw_slice()
    }
    /// A [`Bits`] run over the whole mask.
    pub fn bits(&self) -> Bits<'_> {
        Bits::new(self.words(), 0)
    }
    /// The elements in row-major order.
    pub fn to_vec(&self) -> Vec<bool> {
        masked_kernels::bits::unpack_bools(self.words(), self.bits.len())
    }
    /// The elements in row-major order written into a caller's `out`.
    ///
    /// # Errors
    /// [`MaskedError::MaskLength`] when `out` does not hold one slot per element.
    pub fn write_bools(&self, out: &mut [bool]) -> Result<()> {
        if out.len() != self.bits.len() {
            return Err(MaskedError::MaskLength {
                shape: self.shape().to_vec(),
                expected: self.bits.len(),
                got: out.len(),
            });
        }
        masked_kernels::bits::unpack_bools_into(self.words(), out);
        Ok(())
    }
    /// The underlying bit vector.
    pub fn as_bitvec(&self) -> &BitVec<u64, Lsb0> {
        &self.bits
    }
    /// The same bits under another shape of the same size.
    ///
    /// # Errors
    /// [`MaskedError::MaskLength`] when the sizes differ.
    pub fn reshape(self, shape: impl ShapeLike) -> Result<Self> {
        let bits = Arc::try_unwrap(self.bits).unwrap_or_else(|shared| copy_bits(&shared));
        Self::from_bitvec(&shape.to_shape(), bits)
    }

    /// Broadcasts this mask to `shape` by NumPy rules (dims aligned from the right; a
    /// dim of size 1 stretches; missing leading dims stretch).
    ///
    /// # Errors
    /// [`MaskedError::MaskRank`] when the mask has more dims than `shape`, and
    /// [`MaskedError::MaskNotBroadcastable`] when a dim neither matches nor is 1.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Self> {
        if self.shape == shape {
            return Ok(self.clone());
        }
        let (mn, n) = (self.shape.len(), shape.len());
        if mn > n {
            return Err(MaskedError::MaskRank {
                mask_ndim: mn,
                input_ndim: n,
            });
        }
        element_count(shape)?;
        // source stride of each target dim (0 where the mask stretches)
        let mut src_strides = vec![0usize; n];
        let mut stride = 1usize;
        for k in 0..mn {
            let (md, td) = (mn - 1 - k, n - 1 - k);
            let (ms, ts) = (self.shape[md], shape[td]);
            if ms == ts {
                src_strides[td] = if ms == 1 { 0 } else { stride };
            } else if ms == 1 {
                src_strides[td] = 0;
            } else {
                return Err(MaskedError::MaskNotBroadcastable {
                    mask: self.shape.clone(),
                    input: shape.to_vec(),
                });
            }
            stride *= ms;
        }
        let total: usize = shape.iter().product();
        let mut words =
            crate::try_vec::<u64>(total.div_ceil(64), || format!("a mask of shape {shape:?}"))?;
        words.resize(total.div_ceil(64), 0);
        let mut bits = BitVec::<u64, Lsb0>::from_vec(words);
        bits.truncate(total);
        if total > 0 {
            let inner = shape[n - 1];
            let inner_stride = src_strides[n - 1];
            let mut idx = vec![0usize; n];
            let rows = total / inner.max(1);
            let mut at = 0usize;
            for _ in 0..rows {
                let base: usize = (0..n - 1).map(|d| idx[d] * src_strides[d]).sum();
                // each output row is a run of the mask (its last dim kept: a word-level
                // copy) or one bit repeated (its last dim stretched: a fill)
                let run = &mut bits[at..at + inner];
                if inner_stride == 0 {
                    run.fill(self.bits[base]);
                } else {
                    run.copy_from_bitslice(&self.bits[base..base + inner]);
                }
                at += inner;
                // advance the odometer over the outer dims
                for d in (0..n - 1).rev() {
                    idx[d] += 1;
                    if idx[d] < shape[d] {
                        break;
                    }
                    idx[d] = 0;
                }
            }
        }
        Self::from_bitvec(shape, bits)
    }

    /// Valid where both are: the two masks broadcast to one shape (NumPy rules), as `&a & &b`.
    ///
    /// # Errors
    /// [`MaskedError::MaskNotBroadcastable`] when the shapes do not broadcast.
    pub fn and(&self, other: &BitMask) -> Result<BitMask> {
        self.logic(other, MaskLogic::And)
    }

    /// Valid where either is (broadcasting), as `&a | &b`.
    ///
    /// # Errors
    /// As [`BitMask::and`].
    pub fn or(&self, other: &BitMask) -> Result<BitMask> {
        self.logic(other, MaskLogic::Or)
    }

    /// Valid where exactly one is (broadcasting), as `&a ^ &b`.
    ///
    /// # Errors
    /// As [`BitMask::and`].
    pub fn xor(&self, other: &BitMask) -> Result<BitMask> {
        self.logic(other, MaskLogic::Xor)
    }

    /// Valid where this one is and `other` is not (broadcasting), as `&a & &!&b`.
    ///
    /// # Errors
    /// As [`BitMask::and`].
    pub fn and_not(&self, other: &BitMask) -> Result<BitMask> {
        self.logic(other, MaskLogic::AndNot)
    }
}

/// A logical op on two masks (mask algebra): on dense masks bit by bit, on sparse
/// patterns as a merge of their sorted positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MaskLogic {
    /// Valid in both (intersection).
    And,
    /// Valid in either (union).
    Or,
    /// Valid in exactly one (symmetric difference).
    Xor,
    /// Valid in the first and not in the second (difference).
    AndNot,
}

impl MaskLogic {
    /// The op on one word (or one bit) of each mask.
    #[inline(always)]
    pub fn word(self, a: u64, b: u64) -> u64 {
        match self {
            MaskLogic::And => a & b,
            MaskLogic::Or => a | b,
            MaskLogic::Xor => a ^ b,
            MaskLogic::AndNot => a & !b,
        }
    }

    /// The op on one position: whether the result holds it, given which sides do.
    #[inline(always)]
    pub fn keeps(self, a: bool, b: bool) -> bool {
        self.word(u64::from(a), u64::from(b)) == 1
    }
}

/// The first of `n` entries whose validity differs between two runs of validity bits
/// (bit `k % 64` of word `k / 64` for entry `k`; `None`: every entry valid), or `None`
/// where they agree: the strict mask rule on a shared structure, a word at a time.
///
/// # Panics
/// When a run has fewer than `n.div_ceil(64)` words.
pub fn first_difference(a: Option<&[u64]>, b: Option<&[u64]>, n: usize) -> Option<usize> {
    if a.is_none() && b.is_none() {
        return None;
    }
    let word = |x: Option<&[u64]>, w: usize| x.map_or(u64::MAX, |x| x[w]);
    (0..n.div_ceil(64)).find_map(|w| {
        let mut d = word(a, w) ^ word(b, w);
        if (w + 1) * 64 > n {
            d &= (1u64 << (n % 64)) - 1;
        }
        (d != 0).then(|| w * 64 + d.trailing_zeros() as usize)
    })
}

/// The positions of `logic(a, b)` for two strictly increasing position lists (a sparse
/// pattern's row, or its flat positions), appended to `out` in order: one merge pass.
pub fn merge_positions<I: Copy + Ord>(a: &[I], b: &[I], logic: MaskLogic, out: &mut Vec<I>) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let (p, ina, inb) = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => (x, true, true),
            (Some(&x), Some(&y)) if x < y => (x, true, false),
            (Some(_), Some(&y)) => (y, false, true),
            (Some(&x), None) => (x, true, false),
            (None, Some(&y)) => (y, false, true),
            (None, None) => unreachable!(),
        };
        i += usize::from(ina);
        j += usize::from(inb);
        if logic.keeps(ina, inb) {
            out.push(p);
        }
    }
}

impl BitMask {
    /// `logic(self, other)`, the two masks broadcast to one shape (NumPy rules).
    ///
    /// # Errors
    /// [`MaskedError::MaskNotBroadcastable`] when the shapes do not broadcast.
    pub fn logic(&self, other: &BitMask, logic: MaskLogic) -> Result<BitMask> {
        let shape = crate::dims::broadcast_shapes("mask logic", &self.shape, &other.shape)
            .map_err(|_| MaskedError::MaskNotBroadcastable {
                mask: other.shape.clone(),
                input: self.shape.clone(),
            })?;
        let x = self.broadcast_to(&shape)?;
        let y = other.broadcast_to(&shape)?;
        let words = x
            .words()
            .iter()
            .zip(y.words())
            .map(|(&a, &b)| logic.word(a, b))
            .collect();
        Self::from_words(&shape, words)
    }

    /// The complement: valid where this mask is not.
    pub fn not(&self) -> BitMask {
        let words = self.words().iter().map(|w| !w).collect();
        Self::from_words(&self.shape, words).expect("a word per 64 elements")
    }
}

/// Implements `&a OP &b` for a mask type through its `logic` method. The result is a
/// `Result`: shapes that do not match (or, for dense masks, do not broadcast) are an
/// error, never a panic.
#[macro_export]
#[doc(hidden)]
macro_rules! mask_operators {
    ($t:ty $(, $($g:tt)*)?) => {
        $crate::mask_operators!(@one $t, BitAnd, bitand, And $(, $($g)*)?);
        $crate::mask_operators!(@one $t, BitOr, bitor, Or $(, $($g)*)?);
        $crate::mask_operators!(@one $t, BitXor, bitxor, Xor $(, $($g)*)?);
    };
    (@one $t:ty, $tr:ident, $f:ident, $l:ident $(, $($g:tt)*)?) => {
        impl<$($($g)*)?> std::ops::$tr<&$t> for &$t {
            type Output = $crate::Result<$t>;
            fn $f(self, rhs: &$t) -> $crate::Result<$t> {
                self.logic(rhs, $crate::MaskLogic::$l)
            }
        }
    };
}

mask_operators!(BitMask);

/// `!&mask`: the complement.
impl std::ops::Not for &BitMask {
    type Output = BitMask;
    fn not(self) -> BitMask {
        BitMask::not(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f_ordered_bools_pack_as_their_row_major_copy() {
        for (r, c) in [(1, 70), (70, 1), (3, 5), (130, 67), (64, 128)] {
            let b = ndarray::Array2::from_shape_fn((c, r), |(i, j)| (i * 7 + j * 3) % 5 < 2);
            let f = b.t(); // r x c, F order
            let copy = f.as_standard_layout().into_owned();
            let want = BitMask::from_array(copy.view()).unwrap();
            let got = BitMask::from_array(f).unwrap();
            assert_eq!(
                (got.shape(), got.words()),
                (want.shape(), want.words()),
                "{r} x {c}"
            );
            // a strided F view (not contiguous either way) takes the gathering path
            let s = b.slice(ndarray::s![..;2, ..]);
            let want = BitMask::from_array(s.t().as_standard_layout().view()).unwrap();
            assert_eq!(BitMask::from_array(s.t()).unwrap().words(), want.words());
        }
    }

    #[test]
    fn clones_share_the_bits_until_one_is_written() {
        let v = [true, false, true, false, false, true];
        let mut a = BitMask::from_bools([2, 3], v).unwrap();
        let b = a.clone();
        assert_eq!(a.words().as_ptr(), b.words().as_ptr());
        a.set(1, true);
        assert_ne!(a.words().as_ptr(), b.words().as_ptr());
        assert_eq!(b.to_vec(), v);
        assert_eq!(a.to_vec(), [true, true, true, false, false, true]);
        // an unshared mask is written in place
        let p = a.words().as_ptr();
        a.set(0, false);
        assert_eq!((a.words().as_ptr(), a.get(0)), (p, false));
        // a reshape of a shared mask leaves the other's bits alone
        let c = b.clone().reshape([3, 2]).unwrap();
        assert_eq!((c.shape(), c.to_vec()), (&[3, 2][..], v.to_vec()));
        assert_eq!(b.shape(), &[2, 3]);
    }

    #[test]
    fn first_difference_finds_the_first_differing_entry() {
        let a = [0b1011u64, u64::MAX, 0];
        let mut b = a;
        assert_eq!(first_difference(Some(&a), Some(&b), 130), None);
        assert_eq!(first_difference(None, None, 130), None);
        // entry 2 is invalid in `a`: it differs from all-valid there
        assert_eq!(first_difference(Some(&a), None, 130), Some(2));
        b[1] &= !(1 << 5);
        assert_eq!(first_difference(Some(&a), Some(&b), 130), Some(69));
        // bits past `n` do not count
        let c = [u64::MAX, u64::MAX, 0b11];
        assert_eq!(first_difference(Some(&c), None, 130), None);
        assert_eq!(first_difference(Some(&c), None, 131), Some(130));
    }

    #[test]
    fn word_at_unaligned() {
        let words = [0xF0F0_F0F0_F0F0_F0F0u64, 0x0000_0000_0000_0001];
        let b = Bits::new(&words, 4);
        assert_eq!(b.word_at(0), 0x1F0F_0F0F_0F0F_0F0F);
        assert!(b.get(0) && !b.get(4));
        assert_eq!(b.offset(60).word_at(0), 1);
        assert_eq!(b.count_ones(64), 33);
        assert_eq!(b.count_ones(3), 3);
        assert!(b.any(1) && !b.offset(4).any(4) && b.offset(4).any(5));
    }

    #[test]
    fn broadcasts_equal_the_bit_by_bit_rule() {
        // runs copied at every bit offset (inner 37, 64, 70) and stretched runs, against
        // each output bit read from its source position
        for (mshape, tshape) in [
            (vec![3, 1, 37], vec![3, 5, 37]),
            (vec![1, 64], vec![3, 64]),
            (vec![2, 1, 70], vec![2, 3, 70]),
            (vec![4, 1], vec![4, 9]),
            (vec![70], vec![2, 3, 70]),
            (vec![2, 3, 1], vec![2, 3, 5]),
        ] {
            let m: usize = mshape.iter().product();
            // scrambled bits: the top bit of a multiplicative hash of the position
            let bools: Vec<bool> = (0..m as u64)
                .map(|k| (k + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 63 == 1)
                .collect();
            let mask = BitMask::from_bools(&mshape[..], bools.iter().copied()).unwrap();
            let out = mask.broadcast_to(&tshape).unwrap();
            let t: usize = tshape.iter().product();
            let off = tshape.len() - mshape.len();
            for k in 0..t {
                // the target coordinate, then the source's (0 where the mask has 1)
                let mut rem = k;
                let mut coord = vec![0; tshape.len()];
                for d in (0..tshape.len()).rev() {
                    coord[d] = rem % tshape[d];
                    rem /= tshape[d];
                }
                let mut src = 0;
                for (d, &ms) in mshape.iter().enumerate() {
                    src = src * ms + if ms == 1 { 0 } else { coord[d + off] };
                }
                assert_eq!(out.get(k), bools[src], "{mshape:?} -> {tshape:?} at {k}");
            }
        }
    }

    #[test]
    fn broadcast_shapes() {
        let m = BitMask::from_bools([3], [true, false, true]).unwrap();
        let b = m.broadcast_to(&[2, 3]).unwrap();
        assert_eq!(b.to_vec(), [true, false, true, true, false, true]);
        let m = BitMask::from_bools([1, 2, 1], [true, false]).unwrap();
        let b = m.broadcast_to(&[2, 2, 2]).unwrap();
        assert_eq!(
            b.to_vec(),
            [true, true, false, false, true, true, false, false]
        );
        assert!(matches!(
            m.broadcast_to(&[2, 3, 1]),
            Err(MaskedError::MaskNotBroadcastable { .. })
        ));
        assert!(matches!(
            m.broadcast_to(&[2, 1]),
            Err(MaskedError::MaskRank { .. })
        ));
        let s = BitMask::from_bools([], [false]).unwrap();
        assert_eq!(s.broadcast_to(&[2, 2]).unwrap().count_ones(), 0);
        let e = BitMask::from_bools([1], [true]).unwrap();
        assert_eq!(e.broadcast_to(&[0, 3]).unwrap().len(), 0);
    }

    #[test]
    fn mask_constructors() {
        assert_eq!(
            BitMask::causal(3).unwrap().to_vec(),
            vec![true, false, false, true, true, false, true, true, true]
        );
        assert_eq!(
            BitMask::banded((2, 4), 0, 1).unwrap().to_vec(),
            vec![true, true, false, false, false, true, true, false]
        );
        let m = BitMask::from_coords([2, 3], &[vec![1, 0], vec![2, 0]]).unwrap();
        assert_eq!(m.to_vec(), vec![true, false, false, false, false, true]);
        assert!(matches!(
            BitMask::from_coords([2, 3], &[vec![1, 1], vec![2, 2]]),
            Err(MaskedError::DuplicateIndex {
                first: 0,
                second: 1,
                ..
            })
        ));
        assert!(matches!(
            BitMask::from_coords([2, 3], &[vec![2], vec![0]]),
            Err(MaskedError::IndexOutOfRange {
                entry: 0,
                dim: 0,
                ..
            })
        ));
        assert!(BitMask::from_coords([2, 3], &[vec![0]]).is_err());
        assert!(matches!(
            BitMask::from_lengths([2, 2], &[1, 3]),
            Err(MaskedError::LengthOutOfRange {
                row: 1,
                length: 3,
                max: 2
            })
        ));
        // trailing dims: a [batch, len, 1] mask broadcasts over features
        let m = BitMask::from_lengths([2, 3, 1], &[1, 2]).unwrap();
        assert_eq!(m.shape(), &[2, 3, 1]);
        assert_eq!(m.to_vec(), [true, false, false, true, true, false]);
        let m = BitMask::from_lengths([1, 2, 2], &[1]).unwrap();
        assert_eq!(m.to_vec(), [true, true, false, false]);
        assert!(BitMask::from_lengths([2], &[1, 1]).is_err());
        assert!(BitMask::banded([2, 2, 2], 0, 0).is_err());
    }

    #[test]
    fn serde_round_trip() {
        let m = BitMask::from_bools([2, 2], [true, false, false, true]).unwrap();
        let s = serde_json::to_string(&m).unwrap();
        let back: BitMask = serde_json::from_str(&s).unwrap();
        assert_eq!(m, back);
    }
}
