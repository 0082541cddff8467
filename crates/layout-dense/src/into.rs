//! Results written into a caller's buffer: [`WriteInto`] runs any op of the registry
//! (`apply_to`) on a dense array and writes its values into one output slice of the
//! result's dtype, so a repeated call (a training step, a Python `out=`) faults no fresh
//! pages and copies nothing. Normalizations and elementwise ops write in the kernel
//! itself; a reduction's small result is computed, then copied in.

use crate::array::{MaskedArray, MaskedView};
use crate::kernels;
use masked_core::{
    BitMask, ByDType, Dims, Element, Fold, LaneMap, LaneStat, MaskedReduce, Result, SliceMutOf,
};
use ndarray::{Data, Dimension};
use std::cell::RefCell;

/// A dense array whose op results go into `out`, a caller's buffer of the result's dtype
/// and size (row-major). Its results are the output masks ([`BitMask`]); the values are
/// in the buffer. Run an op on it by name (`masked::registry::apply_to`) or by method
/// (`MaskedOps`).
///
/// ```
/// use masked::prelude::*;
/// use masked::{dense::WriteInto, element::ByDType};
/// use ndarray::array;
/// let x = MaskedArray::from_bool_mask(array![[0.0f64, 0.0, 7.0]], array![[true, true, false]])?;
/// let mut buf = [f64::NAN; 3];
/// let out = std::cell::RefCell::new(ByDType::F64(&mut buf[..]));
/// let mask = WriteInto::new(&x, &out).softmax(1)?;
/// assert_eq!(buf, [0.5, 0.5, 0.0]);
/// assert_eq!(mask.count_ones(), 2);
/// # Ok::<(), MaskedError>(())
/// ```
pub struct WriteInto<'x, 'r, 'o, T, D: Dimension> {
    x: MaskedView<'x, T, D>,
    out: &'r RefCell<ByDType<SliceMutOf<'o>>>,
}

impl<'x, 'r, 'o, T: Element, D: Dimension> WriteInto<'x, 'r, 'o, T, D> {
    /// `x`'s results written into `out`.
    pub fn new<S: Data<Elem = T>>(
        x: &'x MaskedArray<S, D>, out: &'r RefCell<ByDType<SliceMutOf<'o>>>,
    ) -> Self {
        WriteInto { x: x.view(), out }
    }

    /// The output buffer as `O` values of exactly `n` slots, or the error naming the
    /// mismatch.
    fn with_out<O: Element, R>(&self, n: usize, f: impl FnOnce(&mut [O]) -> R) -> Result<R> {
        masked_core::with_slots(self.out, n, f)
    }

    /// A reduction's result copied into the buffer; its mask returned.
    fn reduced<O: Element>(&self, r: crate::MaskedArrayD<O>) -> Result<BitMask> {
        let v = r.row_major();
        self.with_out(v.len(), |o: &mut [O]| o.copy_from_slice(&v))?;
        match r.mask() {
            Some(m) => Ok(m.clone()),
            None => BitMask::filled(r.shape(), true),
        }
    }
}

impl<'x, 'r, 'o, T: Element, D: Dimension> MaskedReduce<T> for WriteInto<'x, 'r, 'o, T, D> {
    masked_core::reduce_types!(<O> BitMask, BitMask, <'b> WriteInto<'b, 'r, 'o, T, D>);

    fn without_nans(&self) -> Result<WriteInto<'_, 'r, 'o, T, D>> {
        Ok(WriteInto {
            x: self.x.and_not_nan(),
            out: self.out,
        })
    }

    fn fold_lanes<F: Fold<T>>(&self, op: &F, dims: &Dims, keepdim: bool) -> Result<BitMask> {
        self.reduced(self.x.fold_lanes(op, dims, keepdim)?)
    }

    fn stat_lanes<St: LaneStat<T>>(
        &self, stat: &St, dims: &Dims, keepdim: bool,
    ) -> Result<BitMask> {
        self.reduced(self.x.stat_lanes(stat, dims, keepdim)?)
    }

    /// Written by the map kernel itself, every slot (masked-out ones as the op's fill).
    fn map_lanes<M: LaneMap<T>>(&self, map: &M, dim: isize) -> Result<BitMask> {
        let a = &self.x;
        let shape = a.shape().to_vec();
        let d = masked_core::wrap_dim(dim, shape.len())?;
        let xs = a.row_major();
        let bits = a.mask().map(BitMask::bits);
        let n = xs.len();
        self.with_out(n, |o: &mut [M::Output]| {
            kernels::map_all_into(map, &xs, bits, &shape, d, o)
        })?;
        match a.mask() {
            Some(m) => Ok(m.clone()),
            None => BitMask::filled(&shape[..], true),
        }
    }
}

/// The `Sink` of an op run by name on a [`WriteInto`]: the result's
/// output mask (its values are in the buffer).
#[derive(Debug, Clone, Copy, Default)]
pub struct OutMask;

impl<'x, 'r, 'o, T: Element, D: Dimension> masked_core::Sink<T, WriteInto<'x, 'r, 'o, T, D>>
    for OutMask
{
    type Out = BitMask;
    fn reduced<O: Element>(&self, r: BitMask) -> BitMask {
        r
    }
    fn mapped<O: Element>(&self, m: BitMask) -> BitMask {
        m
    }
}
