//! `cast`: values converted between dtypes, the mask and (sparse) the structure kept.
//!
//! Written once as a [`LaneMap`](crate::LaneMap), so every layout runs it through its `map_lanes` kernel:
//! dense writes a new array (0 at invalid positions), sparse layouts compute new values
//! on their index structure. A conversion the target type cannot hold (NaN, an infinity
//! or an out-of-range value into an integer type, an `i64` outside `i32`) at a valid
//! position is an error naming the value; at an invalid position it is no error.

use crate::element::{DType, Element, Scalar};
use crate::error::{MaskedError, Result};
use masked_kernels::run::{first_match, map_run};
use masked_kernels::Bits;
use std::marker::PhantomData;
use std::sync::Mutex;

/// The lane map of a cast from `T` to `D`. Holds the first value that failed, which
/// [`Cast::finish`] turns into an error.
#[derive(Debug, Default)]
pub struct Cast<D> {
    failed: Mutex<Option<Scalar>>,
    to: PhantomData<fn() -> D>,
}

impl<D: Element> Cast<D> {
    /// A cast into `D`.
    pub fn new() -> Self {
        Cast {
            failed: Mutex::new(None),
            to: PhantomData,
        }
    }

    /// Whether a cast from `from` into `D` can fail (into an integer type, from a float
    /// or a wider integer).
    pub fn can_fail(from: DType) -> bool {
        !D::DTYPE.is_float() && (from.is_float() || from.size() > D::DTYPE.size())
    }

    /// `Ok` when every valid value converted.
    ///
    /// # Errors
    /// [`MaskedError::CastOutOfRange`] with the first failing value found.
    pub fn finish(&self, from: DType) -> Result<()> {
        let failed = *self.failed.lock().unwrap_or_else(|e| e.into_inner());
        match failed {
            None => Ok(()),
            Some(v) => Err(MaskedError::CastOutOfRange {
                from,
                to: D::DTYPE,
                value: v.to_string(),
            }),
        }
    }
}

impl<D: Element> Cast<D> {
    /// Casts the lane `xs` into `out` (0 where masked out), keeping the first valid
    /// value `D` cannot hold: the body of its [`LaneMap`](crate::LaneMap) impl.
    pub fn map_lane<T: Element>(&self, xs: &[T], bits: Option<Bits<'_>>, out: &mut [D]) {
        // 0 where masked out, and where the value does not fit (found below)
        #[inline(always)]
        fn cast<T: Element, D: Element>(x: T, valid: bool) -> D {
            match D::from_scalar(x.to_scalar()) {
                Some(d) if valid => d,
                _ => D::ZERO,
            }
        }
        map_run(xs, bits, out, cast::<T, D>);
        if Self::can_fail(T::DTYPE) {
            let bad = first_match(
                xs,
                bits,
                #[inline(always)]
                |x: T| D::from_scalar(x.to_scalar()).is_none(),
            );
            if let Some(k) = bad {
                let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                f.get_or_insert(xs[k].to_scalar());
            }
        }
    }
}
