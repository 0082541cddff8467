//! The one error type of the engine.

use thiserror::Error;

/// Result alias used throughout the engine.
pub type Result<T, E = MaskedError> = std::result::Result<T, E>;

/// Everything that can be wrong with a call: bad dims, bad masks, bad option values,
/// malformed data. Every variant names the offending value so that the first line of its
/// `Display` is a complete message.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum MaskedError {
    /// A dim index outside `[-ndim, ndim)` (a 0-d input accepts 0 and -1).
    #[error("dim {dim} is out of range for a {ndim}-d input (expected a value in [{lo}, {hi}])")]
    DimOutOfRange {
        /// The dim as given.
        dim: isize,
        /// Rank of the input.
        ndim: usize,
        /// Lowest accepted value.
        lo: isize,
        /// Highest accepted value.
        hi: isize,
    },
    /// The same dim named twice (after wrapping negative indices).
    #[error("dim {dim} appears more than once in the list of dims")]
    DuplicateDim {
        /// The canonical (non-negative) dim that repeats.
        dim: usize,
    },
    /// An op that takes exactly one dim (or at most one) got another number of them.
    #[error("{op} takes {expected}, got {got} dims")]
    DimCount {
        /// The op.
        op: &'static str,
        /// What it accepts, in words.
        expected: &'static str,
        /// How many were given (0 for none).
        got: usize,
    },
    /// A mask whose shape does not broadcast to the input shape.
    #[error(
        "mask of shape {mask:?} does not broadcast to input shape {input:?}{}",
        leading_dims_hint(mask, input)
    )]
    MaskNotBroadcastable {
        /// Mask shape.
        mask: Vec<usize>,
        /// Input shape.
        input: Vec<usize>,
    },
    /// A mask with more dims than the input.
    #[error("mask has {mask_ndim} dims but the input has only {input_ndim}")]
    MaskRank {
        /// Mask rank.
        mask_ndim: usize,
        /// Input rank.
        input_ndim: usize,
    },
    /// Two shapes that must be equal are not.
    #[error("shape mismatch: {what}: {left:?} vs {right:?}")]
    ShapeMismatch {
        /// What was being compared.
        what: String,
        /// First shape.
        left: Vec<usize>,
        /// Second shape.
        right: Vec<usize>,
    },
    /// A bit buffer of the wrong length for its shape.
    #[error("bit mask holds {got} bits but its shape {shape:?} needs {expected}")]
    MaskLength {
        /// Shape declared.
        shape: Vec<usize>,
        /// Bits needed.
        expected: usize,
        /// Bits given.
        got: usize,
    },
    /// An option value outside its domain (q outside [0, 1], negative eps or correction, ...).
    #[error("invalid value for {name}: {value} ({reason})")]
    InvalidArgument {
        /// The option.
        name: &'static str,
        /// The value as text.
        value: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// A sparse index outside the shape.
    #[error("index {index} of entry {entry} is out of range for dim {dim} of size {size}")]
    IndexOutOfRange {
        /// Entry number (0-based) in the order given.
        entry: usize,
        /// The dim the index is along.
        dim: usize,
        /// The index as given.
        index: i64,
        /// The dim's size.
        size: usize,
    },
    /// A sequence length above the padded length (a padding mask from lengths).
    #[error("length {length} of sequence {row} is above the padded length {max}")]
    LengthOutOfRange {
        /// The sequence (row of the batch).
        row: usize,
        /// Its length as given.
        length: usize,
        /// The padded length (the mask's dim 1).
        max: usize,
    },
    /// Too few or too many values for a sparse pattern.
    #[error("{got} values for {expected} stored positions")]
    ValueCount {
        /// The positions the pattern (coordinates) holds.
        expected: usize,
        /// The values given.
        got: usize,
    },
    /// The same sparse position given twice.
    #[error("duplicate entry at position {coords:?} (entries {first} and {second})")]
    DuplicateIndex {
        /// The repeated position.
        coords: Vec<usize>,
        /// Entry number (0-based) of its first occurrence in the order given.
        first: usize,
        /// Entry number of the second occurrence.
        second: usize,
    },
    /// Data that violates a structural invariant (a sparse pattern, a file...).
    #[error("invalid data: {0}")]
    InvalidData(String),
    /// An op name that the engine does not know.
    #[error("unknown op '{name}' (expected one of: {known})")]
    UnknownOp {
        /// The name given.
        name: String,
        /// The op names of the registry, space separated.
        known: String,
    },
    /// A valid value that the target dtype of a cast cannot hold.
    #[error("cannot cast the valid value {value} from {from} to {to} (NaN, an infinity or out of the target's range)")]
    CastOutOfRange {
        /// The source dtype.
        from: crate::element::DType,
        /// The target dtype.
        to: crate::element::DType,
        /// The first such value found.
        value: String,
    },
    /// The strict mask rule of a binary op: the operands' masks differ.
    #[error("{op}: the operands' masks differ at position {position:?} (valid in the {} operand only); the strict rule needs equal masks: use the `and` rule (--masks and) to intersect them", if *left_valid { "left" } else { "right" })]
    MaskMismatch {
        /// The op.
        op: &'static str,
        /// The first differing position (coordinates in the output shape).
        position: Vec<usize>,
        /// Whether the left operand is the valid one there.
        left_valid: bool,
    },
    /// An integer op undefined at a valid position (division by zero, a negative power).
    #[error("{op}: {reason} at position {position:?}")]
    IntegerDomain {
        /// The op.
        op: &'static str,
        /// What is undefined, in words.
        reason: &'static str,
        /// The position (coordinates in the output shape).
        position: Vec<usize>,
    },
    /// An op that this layout or dtype does not provide.
    #[error("{op} is not supported {context}")]
    Unsupported {
        /// The op.
        op: &'static str,
        /// Where (layout or dtype), in words.
        context: String,
    },
    /// A gradient asked of an op that has none (argmax, argmin, count, comparisons) or
    /// of integer or bool input.
    #[error("{op} is not differentiable: {reason}")]
    NotDifferentiable {
        /// The op.
        op: &'static str,
        /// Why, in words.
        reason: &'static str,
    },
    /// An allocation the input asks for that memory cannot hold, refused before it is
    /// made (a reservation that failed), never an abort.
    #[error("{what} needs {bytes} bytes: too large to allocate")]
    TooLarge {
        /// What would have been allocated.
        what: String,
        /// Its size in bytes.
        bytes: u128,
    },
}

/// An empty vector with room for `n` items, reserved fallibly: memory that cannot be
/// had is [`MaskedError::TooLarge`] naming `what()`, never an abort. Every allocation
/// whose size a caller's shape decides goes through here.
///
/// ```
/// let v: Vec<u64> = masked::core::try_vec(4, || "four words".into()).unwrap();
/// assert!(v.capacity() >= 4);
/// let e = masked::core::try_vec::<u64>(1 << 60, || "a mask".into()).unwrap_err();
/// assert_eq!(e.to_string(), "a mask needs 9223372036854775808 bytes: too large to allocate");
/// ```
pub fn try_vec<T>(n: usize, what: impl FnOnce() -> String) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| MaskedError::TooLarge {
        what: what(),
        bytes: n as u128 * std::mem::size_of::<T>() as u128,
    })?;
    Ok(v)
}

/// The fix for the commonest broadcasting mistake: a mask over some of the input's dims
/// (a `[batch, len]` padding mask on `[batch, len, features]` data) that NumPy rules,
/// aligning dims from the right, do not place where it was meant. Names every reshape
/// (unit dims inserted) that lays the mask over an ordered choice of the input's dims,
/// with those dims: for `[3, 5]` on attention scores `[3, 5, 5]` both `[3, 5, 1]`
/// (dims 0, 1: batch and query) and `[3, 1, 5]` (dims 0, 2: batch and key, the key
/// padding attention needs).
fn leading_dims_hint(mask: &[usize], input: &[usize]) -> String {
    const MAX: usize = 4;
    if mask.is_empty() || mask.len() >= input.len() || input.len() > 16 {
        return String::new();
    }
    // ordered placements of the mask's dims among the input's, each dim equal or 1
    fn place(
        mask: &[usize], input: &[usize], from: usize, at: &mut Vec<usize>,
        out: &mut Vec<Vec<usize>>,
    ) {
        if out.len() == MAX {
            return;
        }
        let k = at.len();
        if k == mask.len() {
            out.push(at.clone());
            return;
        }
        // leave room for the mask's remaining dims
        for p in from..=input.len() - (mask.len() - k) {
            if mask[k] == input[p] || mask[k] == 1 {
                at.push(p);
                place(mask, input, p + 1, at, out);
                at.pop();
            }
        }
    }
    let mut found = Vec::new();
    place(mask, input, 0, &mut Vec::new(), &mut found);
    // the right-aligned placement is the one that failed
    let right: Vec<usize> = (input.len() - mask.len()..input.len()).collect();
    found.retain(|p| *p != right);
    if found.is_empty() {
        return String::new();
    }
    let fixes: Vec<String> = found
        .iter()
        .map(|p| {
            let mut shape = vec![1; input.len()];
            for (&d, &at) in mask.iter().zip(p) {
                shape[at] = d;
            }
            let dims: Vec<String> = p.iter().map(|d| d.to_string()).collect();
            format!(
                "{shape:?} to lay it over the input's dims {}",
                dims.join(", ")
            )
        })
        .collect();
    format!(
        " (dims align from the right; reshape it to {}{})",
        fixes.join(", or to "),
        if found.len() == MAX { ", ..." } else { "" }
    )
}

impl MaskedError {
    /// The error of an elementwise op that does not keep 0 at 0 on a sparse input without
    /// a mask: its result would store every position, which the engine never does.
    pub fn densifying(op: &'static str) -> Self {
        MaskedError::Unsupported {
            op,
            context: "on a sparse input without a mask: it does not keep 0 at 0, so the \
                      result would store every position (give a mask, or use the stored \
                      pattern as the mask)"
                .into(),
        }
    }
}

impl MaskedError {
    /// `x` itself where it is a number (an infinity included); for NaN, an
    /// [`MaskedError::InvalidArgument`] naming the option `name` and saying `reason`.
    pub(crate) fn not_nan(name: &'static str, x: f64, reason: &'static str) -> Result<f64> {
        if x.is_nan() {
            return Err(MaskedError::InvalidArgument {
                name,
                value: x.to_string(),
                reason,
            });
        }
        Ok(x)
    }
}

/// `"a, b or c"` out of the literals `"a", "b", "c"`, at compile time.
macro_rules! one_of {
    ($a:literal) => { $a };
    ($a:literal, $b:literal) => { concat!($a, " or ", $b) };
    ($a:literal, $($rest:literal),+) => { concat!($a, ", ", $crate::error::one_of!($($rest),+)) };
}
pub(crate) use one_of;

/// A fieldless enum chosen by name (an option's or a flag's value), from one table of
/// `"name" => Variant`: `name()` and `FromStr`, whose error
/// ([`MaskedError::InvalidArgument`] naming the option `$option`) lists the names.
macro_rules! named_choices {
    ($ty:ident, $option:literal: $($name:literal => $var:ident),+ $(,)?) => {
        impl $ty {
            /// This value's name, as `FromStr` reads it.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$var => $name,)+
                }
            }
        }

        impl std::str::FromStr for $ty {
            type Err = $crate::MaskedError;
            fn from_str(s: &str) -> $crate::Result<Self> {
                match s {
                    $($name => Ok($ty::$var),)+
                    _ => Err($crate::MaskedError::InvalidArgument {
                        name: $option,
                        value: s.to_string(),
                        reason: concat!("expected ", $crate::error::one_of!($($name),+)),
                    }),
                }
            }
        }
    };
}
pub(crate) use named_choices;

#[cfg(test)]
mod tests {
    use crate::{Interpolation, MaskRule, MedianMode};

    #[test]
    fn named_choices_read_their_names_and_list_them_when_wrong() {
        for r in [MaskRule::Strict, MaskRule::And] {
            assert_eq!(r.name().parse::<MaskRule>().unwrap(), r);
        }
        assert_eq!("lower".parse::<MedianMode>().unwrap(), MedianMode::Lower);
        assert_eq!(Interpolation::Midpoint.name(), "midpoint");
        assert_eq!(
            "or".parse::<MaskRule>().unwrap_err().to_string(),
            "invalid value for masks: or (expected strict or and)"
        );
        assert_eq!(
            "mid".parse::<Interpolation>().unwrap_err().to_string(),
            "invalid value for interpolation: mid (expected linear, lower, higher, midpoint \
             or nearest)"
        );
    }

    #[test]
    fn not_nan_passes_numbers_and_infinities_and_names_a_nan() {
        assert_eq!(
            super::MaskedError::not_nan("ord", f64::INFINITY, "r").unwrap(),
            f64::INFINITY
        );
        let e = super::MaskedError::not_nan("ord", f64::NAN, "must be a number").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid value for ord: NaN (must be a number)"
        );
    }
}
