//! Golden fixtures of the unary elementwise ops (`unary.json`, scripts/gen_fixtures_unary.py:
//! torch's MaskedTensor, or the plain torch op where MaskedTensor lacks it, in float64
//! rounded once): every op on f32, f64, f16, i32 and i64 with NaN, infinities, signed
//! zeros and domain edges at valid positions and NaN / inf under the mask. Checked: the
//! output dtype, the output mask (the input's), 0 at every invalid position, and each
//! valid value within the contract's accuracy: 4 ulp for f32 and f64, one half ulp for
//! f16, exact for integers (wrapping as torch).

use masked::by_name::{apply_dense, OpRequest};
use masked::{with_dyn_vec, BitMask, DynVec, Element, MaskedArray};
use masked_tests::{at, check_cases, ulps, values};
use ndarray::{ArrayViewD, IxDyn};
use serde_json::Value;

fn run<T: Element>(xs: &[T], c: &Value) -> Result<masked::by_name::Outcome, masked::MaskedError> {
    let shape: Vec<usize> = serde_json::from_value(c["shape"].clone()).unwrap();
    let view = ArrayViewD::from_shape(IxDyn(&shape), xs).unwrap();
    let bits = c["mask"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_i64() == Some(1));
    let a = MaskedArray::new(view, BitMask::from_bools(&shape, bits).unwrap()).unwrap();
    let mut req = OpRequest::new(c["op"].as_str().unwrap())?;
    if let Some(p) = c["params"].as_object() {
        for (k, v) in p {
            req.set_option(k, &v.to_string())?;
        }
    }
    apply_dense(&a.view(), &req)
}

#[test]
fn unary_ops_match_torch_in_f64_rounded_once() {
    let text = std::fs::read_to_string(format!(
        "{}/fixtures/unary.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() > 700, "fixture set unexpectedly small");
    check_cases(cases, |c| {
        let dtype = c["dtype"].as_str().unwrap();
        let what = format!("{} {} {} {}", c["op"], dtype, c["shape"], c["params"]);
        let out = with_dyn_vec!(values(dtype, c["x"].as_array().unwrap()), v => run(&v, c));
        if c.get("error").is_some() {
            return match out {
                Err(masked::MaskedError::InvalidArgument { .. }) => Ok(()),
                other => Err(format!("{what}: expected an error, got {other:?}")),
            };
        }
        let out = out.map_err(|e| format!("{what}: {e}"))?;
        let want_dtype = c["out_dtype"].as_str().unwrap();
        if out.values.dtype().name() != want_dtype {
            return Err(format!(
                "{what}: dtype {} want {want_dtype}",
                out.values.dtype().name()
            ));
        }
        let mask: Vec<bool> = c["expected_mask"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b == 1)
            .collect();
        if out.mask.to_vec() != mask {
            return Err(format!("{what}: output mask differs"));
        }
        let want = values(want_dtype, c["expected"].as_array().unwrap());
        let (bits, min_exp, tol) = match out.values {
            DynVec::F32(_) => (23, -126, 4.0),
            DynVec::F64(_) => (52, -1022, 4.0),
            DynVec::F16(_) => (10, -14, 1.0),
            _ => (0, 0, 0.0),
        };
        for (i, &valid) in mask.iter().enumerate() {
            let (g, w) = (at(&out.values, i), at(&want, i));
            let bad = if bits == 0 {
                g != w
            } else {
                ulps(g, w, bits, min_exp) > tol
            };
            if bad || (!valid && g != 0.0) {
                return Err(format!("{what}: at {i}: got {g}, want {w}"));
            }
        }
        Ok(())
    });
}
