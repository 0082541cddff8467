//! Shared helpers of the conformance suite: fixture decoding and value comparison.

pub mod fuzz;
pub mod hostile;

use masked::by_name::{Outcome, SparseOutcome};
use masked::DynVec;
use proptest::prelude::{
    prop_assert, prop_assert_eq, prop_oneof, BoxedStrategy, Just, Strategy, TestCaseError,
};
use serde_json::Value;

/// Decodes one JSON number or the strings `nan`, `inf`, `-inf` as f64.
pub fn num(v: &Value) -> f64 {
    match v {
        Value::String(s) => match s.as_str() {
            "nan" => f64::NAN,
            "inf" => f64::INFINITY,
            "-inf" => f64::NEG_INFINITY,
            other => panic!("bad number string {other}"),
        },
        other => other.as_f64().expect("number"),
    }
}

/// Decodes a JSON integer as i64 (exactly, without going through f64).
pub fn int(v: &Value) -> i64 {
    v.as_i64().expect("integer")
}

/// Decodes a list of numbers into a [`DynVec`] of the named dtype.
pub fn values(dtype: &str, list: &[Value]) -> DynVec {
    match dtype {
        "f32" => DynVec::F32(list.iter().map(|v| num(v) as f32).collect()),
        "f64" => DynVec::F64(list.iter().map(num).collect()),
        "i32" => DynVec::I32(list.iter().map(|v| int(v) as i32).collect()),
        "i64" => DynVec::I64(list.iter().map(int).collect()),
        "f16" => DynVec::F16(list.iter().map(|v| half::f16::from_f64(num(v))).collect()),
        "bf16" => DynVec::BF16(list.iter().map(|v| half::bf16::from_f64(num(v))).collect()),
        other => panic!("bad dtype {other}"),
    }
}

/// Whether two floats agree: both NaN, equal (infinities included), or within the
/// relative tolerance `rtol` (with an absolute floor of `rtol` for values near zero).
pub fn close(a: f64, b: f64, rtol: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a == b {
        return true;
    }
    if a.is_infinite() || b.is_infinite() {
        return false;
    }
    (a - b).abs() <= rtol * a.abs().max(b.abs()).max(1.0)
}

/// The relative tolerance of two half ulps for the half dtypes (results computed in f32
/// and rounded once may still differ by an ulp where the order of addition differs).
pub fn half_rtol(v: &DynVec) -> Option<f64> {
    match v {
        DynVec::F16(_) => Some(2.0 * 2f64.powi(-10)),
        DynVec::BF16(_) => Some(2.0 * 2f64.powi(-7)),
        _ => None,
    }
}

/// Compares two value vectors of the same dtype; returns the first mismatch.
pub fn compare(got: &DynVec, want: &DynVec, rtol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {:?} vs {:?}", got.dtype(), want.dtype()));
    }
    if got.len() != want.len() {
        return Err(format!("length {} vs {}", got.len(), want.len()));
    }
    let mismatch = |i: usize, g: String, w: String| Err(format!("at {i}: got {g}, want {w}"));
    if let Some(r) = half_rtol(got) {
        for i in 0..got.len() {
            let (a, b) = (at(got, i), at(want, i));
            if !close(a, b, r.max(rtol)) {
                return mismatch(i, a.to_string(), b.to_string());
            }
        }
        return Ok(());
    }
    match (got, want) {
        (DynVec::F32(g), DynVec::F32(w)) => {
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                if !close(*a as f64, *b as f64, rtol.max(1e-5)) {
                    return mismatch(i, a.to_string(), b.to_string());
                }
            }
        }
        (DynVec::F64(g), DynVec::F64(w)) => {
            for (i, (a, b)) in g.iter().zip(w).enumerate() {
                if !close(*a, *b, rtol) {
                    return mismatch(i, a.to_string(), b.to_string());
                }
            }
        }
        (DynVec::I32(g), DynVec::I32(w)) => {
            if let Some(i) = g.iter().zip(w).position(|(a, b)| a != b) {
                return mismatch(i, g[i].to_string(), w[i].to_string());
            }
        }
        (DynVec::I64(g), DynVec::I64(w)) => {
            if let Some(i) = g.iter().zip(w).position(|(a, b)| a != b) {
                return mismatch(i, g[i].to_string(), w[i].to_string());
            }
        }
        _ => unreachable!("dtypes checked above"),
    }
    Ok(())
}

/// Element `i` of a value vector as f64.
pub fn at(v: &DynVec, i: usize) -> f64 {
    masked::with_dyn_vec!(v, x => masked::Element::to_f64(x[i]))
}

fn same_type(a: &DynVec, b: &DynVec) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// The sparse outcome of a sparse layout stores exactly the dense output mask, with the dense values.
pub fn agree(what: &str, d: &Outcome, s: &SparseOutcome) -> Result<(), TestCaseError> {
    prop_assert_eq!(&d.shape, &s.shape, "{}: shape", what);
    prop_assert!(same_type(&d.values, &s.values), "{}: dtype", what);
    let valid: Vec<usize> = (0..d.mask.len()).filter(|&i| d.mask.get(i)).collect();
    prop_assert_eq!(
        &valid,
        &s.indices,
        "{}: stored positions vs output mask",
        what
    );
    let rel = half_rtol(&d.values).unwrap_or(if matches!(d.values, DynVec::F32(_)) {
        1e-5
    } else {
        1e-9
    });
    for (k, &i) in valid.iter().enumerate() {
        let (x, y) = (at(&d.values, i), at(&s.values, k));
        prop_assert!(
            close(x, y, rel),
            "{}: at {}: dense {} vs sparse {}",
            what,
            i,
            x,
            y
        );
    }
    Ok(())
}

/// [`agree`] for an elementwise op, whose sparse result on a mask-free input stores
/// only the input's stored positions: every stored position is valid in the dense
/// result with the same value, and every valid dense position not stored holds 0 there
/// (the implicit zero of a zero-preserving op).
pub fn agree_elementwise(what: &str, d: &Outcome, s: &SparseOutcome) -> Result<(), TestCaseError> {
    prop_assert_eq!(&d.shape, &s.shape, "{}: shape", what);
    prop_assert!(same_type(&d.values, &s.values), "{}: dtype", what);
    let rel = half_rtol(&d.values).unwrap_or(1e-12);
    let mut k = 0;
    for i in 0..d.mask.len() {
        let x = at(&d.values, i);
        if k < s.indices.len() && s.indices[k] == i {
            prop_assert!(
                d.mask.get(i),
                "{}: stored position {} is not valid",
                what,
                i
            );
            let y = at(&s.values, k);
            prop_assert!(
                close(x, y, rel),
                "{}: at {}: dense {} vs sparse {}",
                what,
                i,
                x,
                y
            );
            k += 1;
        } else if d.mask.get(i) {
            prop_assert!(
                x == 0.0,
                "{}: valid position {} not stored but dense {}",
                what,
                i,
                x
            );
        }
    }
    prop_assert_eq!(
        k,
        s.indices.len(),
        "{}: stored positions out of order or range",
        what
    );
    Ok(())
}

/// Small exact values (halves with `specials`, plus 0, NaN and the infinities), for
/// inputs whose sums do not depend on the order of addition.
pub fn value(specials: bool) -> BoxedStrategy<f64> {
    if specials {
        prop_oneof![
            10 => (-8i32..8).prop_map(|v| v as f64 / 2.0),
            2 => Just(0.0),
            1 => Just(f64::NAN),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NEG_INFINITY),
        ]
        .boxed()
    } else {
        prop_oneof![5 => (-8i32..8).prop_map(|v| v as f64), 1 => Just(0.0)].boxed()
    }
}

/// The options every op of a conformance case runs with.
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    /// var/std correction.
    pub correction: f64,
    /// norm order.
    pub ord: f64,
    /// quantile q.
    pub q: f64,
    /// quantile interpolation.
    pub interpolation: masked::Interpolation,
    /// median mode.
    pub mode: masked::MedianMode,
    /// clamp bounds (at least one).
    pub clamp: (Option<f64>, Option<f64>),
    /// pow exponent.
    pub exponent: f64,
    /// nan_to_num replacements.
    pub nan_to_num: (f64, Option<f64>, Option<f64>),
}

/// Runs every op of the table on the sparse layout `sparse` and on the dense `oracle`,
/// for each (dims, keepdim) that `choices` gives for the op's kind, and checks that the
/// sparse output stores exactly the dense output mask with the dense values (or that
/// both fail with the same error). The one conformance loop of every sparse layout.
pub fn conform<T, L>(
    oracle: &masked::MaskedView<'_, T, ndarray::IxDyn>, sparse: &L,
    choices: impl Fn(masked::by_name::Kind) -> Vec<(masked::Dims, bool)>, o: &Opts,
) -> Result<(), TestCaseError>
where
    T: masked::Element,
    L: masked::by_name::ByNameSparse<T>,
{
    use masked::by_name::{apply_dense, apply_sparse, Op, OpRequest};
    for &spec in Op::ALL {
        for (dims, keepdim) in choices(spec.kind()) {
            let req = OpRequest::from_op(spec)
                .dims(dims.clone())
                .keepdim(keepdim)
                .correction(o.correction)
                .ord(o.ord)
                .q(o.q)
                .interpolation(o.interpolation)
                .mode(o.mode)
                .min(o.clamp.0)
                .max(o.clamp.1)
                .exponent(o.exponent)
                .nan(o.nan_to_num.0)
                .posinf(o.nan_to_num.1)
                .neginf(o.nan_to_num.2);
            let what = format!("{} dims {:?} keepdim {}", spec, dims, keepdim);
            let unary = spec.kind() == masked::by_name::Kind::Unary;
            match (apply_dense(oracle, &req), apply_sparse(sparse, &req)) {
                (Ok(d), Ok(s)) if unary => agree_elementwise(&what, &d, &s)?,
                // a mask-free sparse input refuses an op that does not keep 0 at 0 (its
                // result would store every position); the unit tests say which ops
                (Ok(_), Err(masked::MaskedError::Unsupported { .. })) if unary => {}
                (Ok(d), Ok(s)) => agree(&what, &d, &s)?,
                (Err(a), Err(b)) => prop_assert_eq!(a, b, "{}: errors", what),
                (d, s) => prop_assert!(
                    false,
                    "{}: dense {:?} vs sparse {:?}",
                    what,
                    d.err(),
                    s.err()
                ),
            }
        }
    }
    Ok(())
}

/// Each (dims, keepdim) pair of `dims`, keepdim both ways.
pub fn both_keepdims(dims: impl IntoIterator<Item = masked::Dims>) -> Vec<(masked::Dims, bool)> {
    dims.into_iter()
        .flat_map(|d| [(d.clone(), false), (d, true)])
        .collect()
}

/// A JSON array of non-negative integers.
pub fn usizes(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("non-negative integer") as usize)
        .collect()
}

/// Checks a sparse result against a fixture case: the shape `want_shape`, the stored
/// positions `expect_indices` (the output mask) and the values `expect_values` there.
pub fn check_fixture(out: &SparseOutcome, want_shape: &[usize], c: &Value) -> Result<(), String> {
    if out.shape != want_shape {
        return Err(format!("shape {:?}, want {want_shape:?}", out.shape));
    }
    if out.indices != usizes(&c["expect_indices"]) {
        return Err(format!(
            "stored positions {:?}, want {}",
            out.indices, c["expect_indices"]
        ));
    }
    let dtype = out.values.dtype().name();
    let want = values(dtype, c["expect_values"].as_array().expect("values"));
    compare(&out.values, &want, 1e-12)
}

/// Options for a conformance case: corrections 0, 1, 1.5; every kind of norm order;
/// q at the ends and inside; every interpolation and median mode.
pub fn opts() -> impl Strategy<Value = Opts> {
    use masked::{Interpolation, MedianMode};
    (
        prop_oneof![Just(0.0), Just(1.0), Just(1.5)],
        prop_oneof![
            Just(2.0),
            Just(1.0),
            Just(0.0),
            Just(3.0),
            Just(-1.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY)
        ],
        prop_oneof![Just(0.0), Just(0.3), Just(0.5), Just(1.0)],
        prop_oneof![
            Just(Interpolation::Linear),
            Just(Interpolation::Lower),
            Just(Interpolation::Higher),
            Just(Interpolation::Midpoint),
            Just(Interpolation::Nearest)
        ],
        prop_oneof![Just(MedianMode::Avg), Just(MedianMode::Lower)],
        prop_oneof![
            Just((Some(-0.5), Some(1.5))),
            Just((None, Some(0.5))),
            Just((Some(1.0), None)),
            Just((Some(2.0), Some(-1.0)))
        ],
        prop_oneof![Just(2.0), Just(3.0), Just(0.5), Just(-1.0), Just(0.0)],
        prop_oneof![Just((0.0, None, None)), Just((1.5, Some(7.0), Some(-7.0)))],
    )
        .prop_map(
            |(correction, ord, q, interpolation, mode, clamp, exponent, nan_to_num)| Opts {
                correction,
                ord,
                q,
                interpolation,
                mode,
                clamp,
                exponent,
                nan_to_num,
            },
        )
}

/// Runs `check` on every fixture case and fails listing the first 20 failing cases (by
/// number, with `check`'s message) and how many failed of how many.
pub fn check_cases(cases: &[Value], check: impl Fn(&Value) -> Result<(), String>) {
    let failures: Vec<String> = cases
        .iter()
        .enumerate()
        .filter_map(|(i, c)| check(c).err().map(|e| format!("case {i}: {e}")))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures[..failures.len().min(20)].join("\n")
    );
}

/// `|got - want|` in units in the last place of `want` (`bits` mantissa bits), with the
/// smallest normal's ulp as the floor; NaN = NaN, infinities exact, ±0 equal.
pub fn ulps(got: f64, want: f64, bits: i32, min_exp: i32) -> f64 {
    if got.is_nan() || want.is_nan() {
        return if got.is_nan() && want.is_nan() {
            0.0
        } else {
            f64::INFINITY
        };
    }
    if got == want {
        return 0.0;
    }
    if got.is_infinite() || want.is_infinite() {
        return f64::INFINITY;
    }
    let e = (want.abs().log2().floor() as i32).max(min_exp);
    (got - want).abs() / (2f64.powi(e) * 2f64.powi(-bits))
}
