//! Mask algebra on the dense layout: masks from predicates, `masked_where`, mask logic
//! into an array's mask, `where`, `fill` and `compress`.

use crate::array::{MaskedArray, MaskedArrayD, MaskedView};
use masked_core::binary::{broadcast_shapes, PredZip, Predicate};
use masked_core::gather::row_major_values;
use masked_core::{BitMask, Bits, Element, MaskLogic, MaskedError, Result};
use masked_kernels::pack::compress_into;
use masked_kernels::par;
use masked_kernels::run::{map_run, zip_run};
use ndarray::{ArrayD, Data, Dimension, IxDyn};
use std::borrow::Cow;

/// The elements of one parallel task of `filled`, `compress` and `where`: whole mask
/// words.
const CHUNK: usize = 1 << 16;

/// The elements a task of `compress` and `where` stages in a scratch run at a time (in
/// cache).
const BLOCK: usize = 4096;

impl<T: Element, S: Data<Elem = T>, D: Dimension> MaskedArray<S, D> {
    /// The mask of a predicate: true where `p` holds and the element is valid
    /// (`isnan`, `isfinite`, a comparison with a value, ...).
    pub fn predicate(&self, p: Predicate) -> BitMask {
        let mut out = vec![false; self.values().len()];
        let (shape, _) = self
            .zip_scalar_into(T::ZERO, &PredZip(p), &mut out)
            .expect("a predicate cannot fail and the buffer has the array's length");
        BitMask::from_bools(&shape, out).expect("one bool per element")
    }

    /// This array with its mask combined with `other` by `logic` (broadcast to the
    /// array's shape): `And` restricts it, `Or` widens it, `AndNot` removes `other`'s
    /// positions (numpy.ma's `masked_where(p, x)` is `x.mask_logic(p, AndNot)`).
    ///
    /// # Errors
    /// [`MaskedError::MaskNotBroadcastable`] when `other` does not broadcast to the
    /// array's shape.
    pub fn mask_logic(&self, other: &BitMask, logic: MaskLogic) -> Result<MaskedView<'_, T, D>> {
        let own = self
            .mask()
            .cloned()
            .map_or_else(|| BitMask::filled(self.shape(), true), Ok)?;
        let other = other.broadcast_to(self.shape())?;
        MaskedArray::new(self.values().view(), own.logic(&other, logic)?)
    }

    /// numpy.ma's `masked_where(p, x)`: this array with the positions where `p` holds
    /// masked out (mask `mask(x) and not p`).
    pub fn masked_where(&self, p: Predicate) -> MaskedView<'_, T, D> {
        let drop = self.predicate(p);
        self.mask_logic(&drop, MaskLogic::AndNot)
            .expect("a predicate mask has the array's shape")
    }

    /// A plain array with every invalid position set to `value` (MaskedTensor's
    /// `to_tensor`, numpy.ma's `filled`).
    pub fn filled(&self, value: T) -> ndarray::Array<T, D> {
        let xs = self.row_major();
        let bits = self.mask().map(BitMask::bits);
        // onto huge pages, in parallel chunks of whole mask words, vectorised
        let mut out = masked_kernels::fresh_vec::<T>(xs.len());
        par::chunks_mut(&mut out, CHUNK, |c, o| {
            let lo = c * CHUNK;
            let run = &xs[lo..lo + o.len()];
            map_run(run, bits.map(|b| b.offset(lo)), o, move |x: T, ok| {
                if ok {
                    x
                } else {
                    value
                }
            });
        });
        ndarray::Array::from_shape_vec(self.values().raw_dim(), out)
            .expect("one value per element, in row-major order")
    }

    /// The valid values in row-major order (numpy.ma's `compressed`, `masked_select`).
    pub fn compress(&self) -> Vec<T> {
        let xs = self.row_major();
        let Some(m) = self.mask() else {
            return xs.into_owned();
        };
        let (bits, n) = (m.bits(), xs.len());
        // each chunk's count, then each packs into its own part of the output, a
        // cache-sized block at a time through a scratch run (the kernel may write past
        // its count)
        let counts = par::map(n.div_ceil(CHUNK), |c| {
            bits.offset(c * CHUNK).count_ones(CHUNK.min(n - c * CHUNK))
        });
        let mut bounds = Vec::with_capacity(counts.len() + 1);
        bounds.push(0);
        for k in counts {
            bounds.push(bounds[bounds.len() - 1] + k);
        }
        let mut out = masked_kernels::fresh_vec::<T>(bounds[bounds.len() - 1]);
        par::parts_mut(&mut out, &bounds, |c, o| {
            let (lo, hi) = (c * CHUNK, (c * CHUNK + CHUNK).min(n));
            let mut scratch = Vec::with_capacity(BLOCK);
            let mut at = 0;
            for b0 in (lo..hi).step_by(BLOCK) {
                scratch.clear();
                let b1 = (b0 + BLOCK).min(hi);
                compress_into(&xs[b0..b1], Some(bits.offset(b0)), &mut scratch);
                o[at..at + scratch.len()].copy_from_slice(&scratch);
                at += scratch.len();
            }
        });
        out
    }
}

/// `where(cond, a, b)`: at each position of the broadcast shape, the value and validity
/// of `a` where `cond` is true and of `b` where it is false; `cond_valid` (a masked
/// condition) makes the output invalid where the condition is. A scalar operand is a
/// 0-d array (valid everywhere). Invalid output positions hold 0.
///
/// # Errors
/// [`MaskedError::ShapeMismatch`] when the shapes do not broadcast.
pub fn select<T: Element, S1, D1, S2, D2>(
    cond: &BitMask, cond_valid: Option<&BitMask>, a: &MaskedArray<S1, D1>, b: &MaskedArray<S2, D2>,
) -> Result<MaskedArrayD<T>>
where
    S1: Data<Elem = T>,
    D1: Dimension,
    S2: Data<Elem = T>,
    D2: Dimension,
{
    let mut shape = broadcast_shapes("where", cond.shape(), a.shape())?;
    shape = broadcast_shapes("where", &shape, b.shape())?;
    if let Some(cv) = cond_valid {
        shape = broadcast_shapes("where", &shape, cv.shape())?;
    }
    let c = cond.broadcast_to(&shape)?;
    let cv = cond_valid.map(|m| m.broadcast_to(&shape)).transpose()?;
    let (av, am) = widen_array(a, &shape)?;
    let (bv, bm) = widen_array(b, &shape)?;
    let n: usize = shape.iter().product();
    // the validity a word at a time: the picked operand's, and the condition's own
    let words: Vec<u64> = (0..n.div_ceil(64))
        .map(|w| {
            let (cw, aw, bw) = (c.words()[w], am.words()[w], bm.words()[w]);
            ((cw & aw) | (!cw & bw)) & cv.as_ref().map_or(!0, |m| m.words()[w])
        })
        .collect();
    // the picked values, then 0 where invalid: in parallel chunks of whole words, a
    // cache-sized block at a time through a scratch run (both passes vectorised)
    let mut values = masked_kernels::fresh_vec::<T>(n);
    let ok = Bits::new(&words, 0);
    par::chunks_mut(&mut values, CHUNK, |i, o| {
        let mut picked = vec![T::ZERO; BLOCK.min(o.len())];
        for (j, ob) in o.chunks_mut(BLOCK).enumerate() {
            let lo = i * CHUNK + j * BLOCK;
            let (r, p) = (lo..lo + ob.len(), &mut picked[..ob.len()]);
            zip_run(
                &av[r.clone()],
                &bv[r],
                Some(c.bits().offset(lo)),
                p,
                |x: T, y: T, pick| {
                    if pick {
                        x
                    } else {
                        y
                    }
                },
            );
            map_run(
                p,
                Some(ok.offset(lo)),
                ob,
                |x: T, valid| {
                    if valid {
                        x
                    } else {
                        T::ZERO
                    }
                },
            );
        }
    });
    let data = ArrayD::from_shape_vec(IxDyn(&shape), values)
        .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
    MaskedArray::new(data, BitMask::from_words(&shape, words)?)
}

/// An operand's values and mask broadcast to `shape`, in row-major order (borrowed
/// where the operand already is so).
fn widen_array<'x, T: Element, S: Data<Elem = T>, D: Dimension>(
    x: &'x MaskedArray<S, D>, shape: &[usize],
) -> Result<(Cow<'x, [T]>, BitMask)> {
    let m = x
        .mask()
        .cloned()
        .map_or_else(|| BitMask::filled(x.shape(), true), Ok)?;
    let m = m.broadcast_to(shape)?;
    if x.shape() == shape {
        return Ok((row_major_values(x.values()), m));
    }
    let wide = x.values().view().into_dyn();
    let wide = wide
        .broadcast(IxDyn(shape))
        .ok_or_else(|| MaskedError::ShapeMismatch {
            what: "where: an operand does not broadcast".into(),
            left: shape.to_vec(),
            right: x.shape().to_vec(),
        })?;
    Ok((Cow::Owned(row_major_values(&wide).into_owned()), m))
}
