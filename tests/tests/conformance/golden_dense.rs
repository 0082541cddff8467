//! Golden fixtures for the dense layout: every value at every output position (the
//! defined fully-masked values included) and every output mask bit.
//! - `dense_reductions.json` (scripts/gen_fixtures.py): sum ... count, from torch.masked;
//! - `dense_stats.json` (scripts/gen_fixtures_stats.py): var, std, norm, logsumexp,
//!   median, quantile, the normalizations, nanmedian, nanquantile, from torch.masked
//!   and numpy (see the script for the few deliberate differences);
//! - `dense_half.json` (scripts/gen_fixtures_half.py): every op on f16 and bf16, from
//!   numpy in f64 rounded once to the half type;
//! - `dense_half_torch.json` (scripts/gen_fixtures_half_torch.py): the same inputs through
//!   torch.masked on f16/bf16 tensors, torch's value at every valid output position.

use masked::by_name::{apply_dense, OpRequest};
use masked::{with_dyn_vec, BitMask, Dims, Element, MaskedArray};
use masked_tests::{check_cases, compare, num, values};
use ndarray::{ArrayViewD, IxDyn};
use serde_json::Value;

fn load(name: &str) -> Vec<Value> {
    let path = format!("{}/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).expect("fixture file");
    let v: Value = serde_json::from_str(&text).expect("fixture json");
    v["cases"].as_array().expect("cases").clone()
}

fn run<T: Element>(xs: &[T], c: &Value) -> masked::by_name::Outcome {
    let shape: Vec<usize> = serde_json::from_value(c["shape"].clone()).unwrap();
    let view = ArrayViewD::from_shape(IxDyn(&shape), xs).unwrap();
    let a = match c["mask"].as_array() {
        None => MaskedArray::unmasked(view),
        Some(bits) => {
            let ms: Vec<usize> = serde_json::from_value(c["mask_shape"].clone()).unwrap();
            let m = BitMask::from_bools(&ms, bits.iter().map(|b| b.as_i64() == Some(1))).unwrap();
            MaskedArray::new(view, m).unwrap()
        }
    };
    let dims = match c["dim"].as_array() {
        None => Dims::All,
        Some(d) => Dims::Set(d.iter().map(|x| x.as_i64().unwrap() as isize).collect()),
    };
    let mut req = OpRequest::new(c["op"].as_str().unwrap())
        .unwrap()
        .dims(dims)
        .keepdim(c["keepdim"].as_bool().unwrap());
    if let Some(d) = c.get("dtype_arg").and_then(Value::as_str) {
        req = req.dtype(d.parse().unwrap());
    }
    let p = &c["params"];
    if !p.is_null() {
        if let Some(v) = p.get("correction") {
            req = req.correction(num(v));
        }
        if let Some(v) = p.get("ord") {
            req = req.ord(num(v));
        }
        if let Some(v) = p.get("eps") {
            req = req.eps(num(v));
        }
        if let Some(v) = p.get("q") {
            req = req.q(num(v));
        }
        if let Some(v) = p.get("interpolation") {
            req = req.interpolation(v.as_str().unwrap().parse().unwrap());
        }
        if let Some(v) = p.get("mode") {
            req = req.mode(v.as_str().unwrap().parse().unwrap());
        }
    }
    apply_dense(&a, &req).unwrap()
}

#[test]
fn dense_reductions_match_torch_masked() {
    check_all("dense_reductions.json", 5000, 1e-9);
}

#[test]
fn dense_statistics_and_normalizations_match_torch_and_numpy() {
    check_all("dense_stats.json", 8000, 1e-9);
}

/// f16 and bf16 (stored as halves, computed in f32, rounded once) against numpy in f64
/// rounded once to the half type: two half ulps (`compare`'s half tolerance).
#[test]
fn dense_half_dtypes_match_numpy_rounded_once() {
    check_all("dense_half.json", 3000, 0.0);
}

/// f16 and bf16 against torch.masked's own half-precision results (valid positions; the
/// script keeps the contract's value where torch rounds intermediates in half and differs
/// by more than two half ulps, and says how often).
#[test]
fn dense_half_dtypes_match_torch_masked() {
    check_all("dense_half_torch.json", 2000, 0.0);
}

fn check_all(file: &str, at_least: usize, rtol: f64) {
    let cases = load(file);
    assert!(cases.len() > at_least, "fixture set unexpectedly small");
    check_cases(&cases, |c| {
        let dtype = c["dtype"].as_str().unwrap();
        let out = with_dyn_vec!(values(dtype, c["x"].as_array().unwrap()), v => run(&v, c));
        let want_shape: Vec<usize> = serde_json::from_value(c["out_shape"].clone()).unwrap();
        let want = values(
            c["out_dtype"].as_str().unwrap(),
            c["expected"].as_array().unwrap(),
        );
        let want_mask: Vec<bool> = c["expected_mask"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_i64() == Some(1))
            .collect();
        let mut errs = Vec::new();
        if out.shape != want_shape {
            errs.push(format!("shape {:?} vs {:?}", out.shape, want_shape));
        } else {
            if let Err(e) = compare(&out.values, &want, rtol) {
                errs.push(format!("values {e}"));
            }
            if out.mask.to_vec() != want_mask {
                errs.push("output mask differs".to_string());
            }
        }
        if errs.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} {} shape {} mask {} dim {} keepdim {} params {}: {}",
            c["op"],
            dtype,
            c["shape"],
            c["mask_shape"],
            c["dim"],
            c["keepdim"],
            c["params"],
            errs.join("; ")
        ))
    });
}
