//! Shared helpers of the conformance suite: fixture decoding and value comparison.

use masked::DynVec;
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

/// Compares two value vectors of the same dtype; returns the first mismatch.
pub fn compare(got: &DynVec, want: &DynVec, rtol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {:?} vs {:?}", got.dtype(), want.dtype()));
    }
    if got.len() != want.len() {
        return Err(format!("length {} vs {}", got.len(), want.len()));
    }
    let mismatch = |i: usize, g: String, w: String| Err(format!("at {i}: got {g}, want {w}"));
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
