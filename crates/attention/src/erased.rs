//! The dtype-erased boundary of attention: operands whose float type is known at run time
//! ([`FloatView`], [`FloatArray`]), dispatched here once over the four float types, so
//! the CLI and the Python extension call non-generic functions.
//!
//! ```
//! use masked::attention::erased::{self, FloatArray};
//! use masked::attention::{AttentionPlan, Pattern};
//! use masked::DynVec;
//!
//! let plan = AttentionPlan::new(Pattern::causal(2)?);
//! let x = FloatArray::from_dyn(vec![2, 1], DynVec::F64(vec![1.0, 2.0]))?;
//! let o = erased::attention(&x.view(), &x.view(), &x.view(), &plan, None, None)?;
//! // row 0 sees key 0 only; row 1 weighs keys 0 and 1 by e^2 and e^4
//! let FloatArray::F64(o) = o else { unreachable!() };
//! let w = 1.0 / (1.0 + (2.0f64).exp());
//! assert!((o[[1, 0]] - (w * 1.0 + (1.0 - w) * 2.0)).abs() < 1e-12);
//! # Ok::<(), masked::MaskedError>(())
//! ```

use crate::{AttentionPlan, Options};
use half::{bf16, f16};
use masked_core::{DType, DynVec, MaskedError, Result};
use ndarray::{ArrayD, ArrayViewD, IxDyn};

macro_rules! float_enums {
    ($($var:ident => $t:ty),*) => {
        /// A borrowed dense operand of any float dtype.
        #[derive(Debug, Clone)]
        pub enum FloatView<'a> {
            $(#[doc = concat!("`", stringify!($t), "` values.")] $var(ArrayViewD<'a, $t>),)*
        }

        /// An owned dense array of any float dtype.
        #[derive(Debug, Clone, PartialEq)]
        pub enum FloatArray {
            $(#[doc = concat!("`", stringify!($t), "` values.")] $var(ArrayD<$t>),)*
        }

        impl FloatView<'_> {
            /// The dtype.
            pub fn dtype(&self) -> DType {
                match self { $(FloatView::$var(_) => DType::$var,)* }
            }
            /// The shape.
            pub fn shape(&self) -> &[usize] {
                match self { $(FloatView::$var(x) => x.shape(),)* }
            }
        }

        impl FloatArray {
            /// The dtype.
            pub fn dtype(&self) -> DType {
                match self { $(FloatArray::$var(_) => DType::$var,)* }
            }
            /// The shape.
            pub fn shape(&self) -> &[usize] {
                match self { $(FloatArray::$var(x) => x.shape(),)* }
            }
            /// Borrowed.
            pub fn view(&self) -> FloatView<'_> {
                match self { $(FloatArray::$var(x) => FloatView::$var(x.view()),)* }
            }
            /// An array from a shape and row-major values of a float dtype.
            ///
            /// # Errors
            /// Integer values ([`MaskedError::Unsupported`]); a value count that is not
            /// the shape's.
            pub fn from_dyn(shape: Vec<usize>, values: DynVec) -> Result<FloatArray> {
                let n: usize = shape.iter().product();
                let got = values.len();
                let wrong = || MaskedError::ValueCount { expected: n, got };
                match values {
                    $(DynVec::$var(v) => ArrayD::from_shape_vec(IxDyn(&shape), v)
                        .map(FloatArray::$var)
                        .map_err(|_| wrong()),)*
                    other => Err(not_float(other.dtype())),
                }
            }
            /// The shape and the row-major values.
            pub fn into_dyn(self) -> (Vec<usize>, DynVec) {
                match self {
                    $(FloatArray::$var(x) => {
                        let shape = x.shape().to_vec();
                        // an owned row-major array's buffer as it is; others copied in order
                        let n = x.len();
                        let v = if x.is_standard_layout() {
                            match x.into_raw_vec_and_offset() {
                                (v, Some(0)) if v.len() == n => v,
                                (v, Some(o)) => v[o..o + n].to_vec(),
                                (_, None) => Vec::new(),
                            }
                        } else {
                            x.iter().copied().collect()
                        };
                        (shape, DynVec::$var(v))
                    })*
                }
            }
        }

    };
}

float_enums!(F32 => f32, F64 => f64, F16 => f16, BF16 => bf16);

/// Runs `$body` with `$x..` bound to the typed views of the operands, which must share a
/// float dtype, and `$T` to that type.
macro_rules! same_float {
    ($first:expr, [$($x:ident),*], $T:ident => $body:expr) => {
        same_float!(@arms $first, [$($x),*], $T => $body; F32 f32, F64 f64, F16 f16, BF16 bf16)
    };
    (@arms $first:expr, $xs:tt, $T:ident => $body:expr; $($var:ident $t:ty),*) => {
        match $first {
            $(FloatView::$var(_) => {
                type $T = $t;
                same_float!(@bind $T, $var, $xs);
                $body
            })*
        }
    };
    (@bind $T:ident, $var:ident, [$($x:ident),*]) => {
        $(let $x = match $x {
            FloatView::$var(x) => x.view(),
            other => return Err(dtype_mismatch(<$T as crate::AttnFloat>::DTYPE, other.dtype())),
        };)*
    };
}

fn not_float(d: DType) -> MaskedError {
    MaskedError::Unsupported {
        op: "attention",
        context: format!("for {d} values (f32, f64, f16 or bf16)"),
    }
}

fn dtype_mismatch(a: DType, b: DType) -> MaskedError {
    MaskedError::InvalidArgument {
        name: "dtype",
        value: format!("{a} and {b}"),
        reason: "the operands must share one float dtype",
    }
}

/// A bias (or values on a pattern) in the operands' dtype, as a flat slice (borrowed
/// where it is contiguous).
fn typed_values<'a, T: crate::AttnFloat>(
    v: Option<&FloatView<'a>>,
) -> Result<Option<std::borrow::Cow<'a, [T]>>> {
    let Some(v) = v else { return Ok(None) };
    let x = T::unwrap(v).ok_or_else(|| dtype_mismatch(T::DTYPE, v.dtype()))?;
    Ok(Some(match x.to_slice() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(x.iter().copied().collect()),
    }))
}

/// The attention gradients of [`attention_vjp`].
#[derive(Debug, Clone, PartialEq)]
pub struct Grads {
    /// For the queries.
    pub dq: FloatArray,
    /// For the keys.
    pub dk: FloatArray,
    /// For the values.
    pub dv: FloatArray,
    /// For the bias (flat, one per stored position), where one was given.
    pub dbias: Option<FloatArray>,
}

/// [`crate::attention`] on run-time dtypes; `bias` any shape holding one value per
/// stored position of the plan.
///
/// # Errors
/// As [`crate::attention`]; integer operands or operands of different dtypes.
pub fn attention(
    q: &FloatView<'_>, k: &FloatView<'_>, v: &FloatView<'_>, plan: &AttentionPlan,
    scale: Option<f64>, bias: Option<&FloatView<'_>>,
) -> Result<FloatArray> {
    same_float!(q, [q, k, v], T => {
        let bias = typed_values::<T>(bias)?;
        let opts = Options { scale, bias: bias.as_deref() };
        crate::attention(q, k, v, plan, &opts).map(wrap)
    })
}

/// [`crate::attention_vjp`] on run-time dtypes.
///
/// # Errors
/// As [`attention`]; a gradient not of the output's shape.
pub fn attention_vjp(
    q: &FloatView<'_>, k: &FloatView<'_>, v: &FloatView<'_>, plan: &AttentionPlan,
    scale: Option<f64>, bias: Option<&FloatView<'_>>, grad: &FloatView<'_>,
) -> Result<Grads> {
    same_float!(q, [q, k, v, grad], T => {
        let bias = typed_values::<T>(bias)?;
        let opts = Options { scale, bias: bias.as_deref() };
        let g = crate::attention_vjp(q, k, v, plan, &opts, grad)?;
        Ok(Grads {
            dq: wrap(g.dq),
            dk: wrap(g.dk),
            dv: wrap(g.dv),
            dbias: g.dbias.map(|b| wrap(ArrayD::from_shape_vec(IxDyn(&[b.len()]), b).expect("1-D"))),
        })
    })
}

/// [`crate::sddmm`] on run-time dtypes.
///
/// # Errors
/// As [`crate::sddmm`]; operands of different dtypes.
pub fn sddmm(
    a: &FloatView<'_>, b: &FloatView<'_>, plan: &AttentionPlan, scale: f64,
) -> Result<FloatArray> {
    same_float!(a, [a, b], T => crate::sddmm::<T>(a, b, plan, scale).map(wrap))
}

/// [`crate::spmm`] on run-time dtypes.
///
/// # Errors
/// As [`crate::spmm`]; operands of different dtypes.
pub fn spmm(values: &FloatView<'_>, plan: &AttentionPlan, x: &FloatView<'_>) -> Result<FloatArray> {
    same_float!(x, [values, x], T => crate::spmm::<T>(values, plan, x).map(wrap))
}

/// [`crate::sddmm_vjp`] on run-time dtypes: the gradients for `a` and `b`.
///
/// # Errors
/// As [`crate::sddmm_vjp`]; operands of different dtypes.
pub fn sddmm_vjp(
    a: &FloatView<'_>, b: &FloatView<'_>, plan: &AttentionPlan, scale: f64, grad: &FloatView<'_>,
) -> Result<(FloatArray, FloatArray)> {
    same_float!(a, [a, b, grad], T => {
        let (da, db) = crate::sddmm_vjp::<T>(a, b, plan, scale, grad)?;
        Ok((wrap(da), wrap(db)))
    })
}

/// [`crate::spmm_vjp`] on run-time dtypes: the gradients for the values and `x`.
///
/// # Errors
/// As [`crate::spmm_vjp`]; operands of different dtypes.
pub fn spmm_vjp(
    values: &FloatView<'_>, plan: &AttentionPlan, x: &FloatView<'_>, grad: &FloatView<'_>,
) -> Result<(FloatArray, FloatArray)> {
    same_float!(x, [values, x, grad], T => {
        let (dv, dx) = crate::spmm_vjp::<T>(values, plan, x, grad)?;
        Ok((wrap(dv), wrap(dx)))
    })
}

/// A typed array as a [`FloatArray`] (no copy).
fn wrap<T: crate::AttnFloat>(x: ArrayD<T>) -> FloatArray {
    T::wrap(x)
}
