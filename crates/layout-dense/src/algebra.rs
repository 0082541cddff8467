//! Mask algebra on the dense layout: masks from predicates, `masked_where`, mask logic
//! into an array's mask, `where`, `fill` and `compress`.

use crate::array::{MaskedArray, MaskedArrayD, MaskedView};
use masked_core::binary::{broadcast_shapes, PredZip, Predicate};
use masked_core::{BitMask, Element, MaskLogic, MaskedError, Result};
use ndarray::{ArrayD, Data, Dimension, IxDyn};

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
        let mut out = self.values().to_owned();
        if let Some(m) = self.mask() {
            for (o, v) in out.iter_mut().zip(m.as_bitvec().iter().by_vals()) {
                if !v {
                    *o = value;
                }
            }
        }
        out
    }

    /// The valid values in row-major order (numpy.ma's `compressed`, `masked_select`).
    pub fn compress(&self) -> Vec<T> {
        match self.mask() {
            None => masked_core::gather::row_major_values(self.values()).into_owned(),
            Some(m) => masked_core::gather::row_major_values(self.values())
                .iter()
                .zip(m.as_bitvec().iter().by_vals())
                .filter_map(|(&x, v)| v.then_some(x))
                .collect(),
        }
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
    cond: &BitMask,
    cond_valid: Option<&BitMask>,
    a: &MaskedArray<S1, D1>,
    b: &MaskedArray<S2, D2>,
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
    let mut values = Vec::with_capacity(n);
    let mut valid = Vec::with_capacity(n);
    for (i, (&x, &y)) in av.iter().zip(bv.iter()).enumerate() {
        let pick_a = c.get(i);
        let ok = cv.as_ref().is_none_or(|m| m.get(i)) && if pick_a { am.get(i) } else { bm.get(i) };
        values.push(if ok {
            if pick_a {
                x
            } else {
                y
            }
        } else {
            T::ZERO
        });
        valid.push(ok);
    }
    let data = ArrayD::from_shape_vec(IxDyn(&shape), values)
        .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
    MaskedArray::new(data, BitMask::from_bools(&shape, valid)?)
}

/// An operand's values and mask broadcast to `shape` (row-major copies).
fn widen_array<T: Element, S: Data<Elem = T>, D: Dimension>(
    x: &MaskedArray<S, D>,
    shape: &[usize],
) -> Result<(ArrayD<T>, BitMask)> {
    let wide = x.values().view().into_dyn();
    let wide = wide
        .broadcast(IxDyn(shape))
        .ok_or_else(|| MaskedError::ShapeMismatch {
            what: "where: an operand does not broadcast".into(),
            left: shape.to_vec(),
            right: x.shape().to_vec(),
        })?;
    let v = ArrayD::from_shape_vec(
        IxDyn(shape),
        masked_core::gather::row_major_values(&wide).into_owned(),
    )
    .map_err(|e| MaskedError::InvalidData(e.to_string()))?;
    let m = x
        .mask()
        .cloned()
        .map_or_else(|| BitMask::filled(x.shape(), true), Ok)?;
    Ok((v, m.broadcast_to(shape)?))
}
