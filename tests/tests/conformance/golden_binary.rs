//! Golden fixtures of the binary elementwise ops (`binary.json`,
//! scripts/gen_fixtures_binary.py: torch in float64 rounded once, the rules checked
//! against MaskedTensor and numpy.ma by the script): every op on f32, f64, f16, i32, i64
//! and promoted pairs, broadcasting, scalars on either side, both mask rules, NaN and
//! infinities at valid positions and NaN under the masks. Checked on the dense layout:
//! the output dtype, the output mask, 0 / false at every invalid position, each valid
//! value within the contract's accuracy, and the errors the contract asks for. The same
//! cases of one 2-D shape run on CSR and COO too (the operands stored at their masks):
//! the sparse result stores exactly the dense output mask with the dense values.

use masked::by_name::{
    apply_binary, apply_binary_sparse, cast_values, promote, promote_scalar, BinOp, ZipOutcome,
};
use masked::{
    with_dtype, with_dyn_vec, BitMask, DynVec, Element, MaskRule, MaskedArray, MaskedCoo,
    MaskedCsr, MaskedError, Op, Scalar, Splat, Values,
};
use masked_tests::{at, check_cases, ulps, values};
use ndarray::{ArrayViewD, IxDyn};
use serde_json::Value;
use sprs::CsMat;

struct Operand {
    shape: Vec<usize>,
    values: DynVec,
    mask: Option<Vec<bool>>,
}

fn operand(v: &Value) -> Operand {
    Operand {
        shape: serde_json::from_value(v["shape"].clone()).unwrap(),
        values: values(
            v["dtype"].as_str().unwrap(),
            v["values"].as_array().unwrap(),
        ),
        mask: v["mask"]
            .as_array()
            .map(|m| m.iter().map(|b| b == 1).collect()),
    }
}

fn dense<'v, T: Element>(o: &Operand, v: &'v [T]) -> MaskedArray<ndarray::ViewRepr<&'v T>, IxDyn> {
    let view = ArrayViewD::from_shape(IxDyn(&o.shape), v).unwrap();
    match &o.mask {
        Some(m) => MaskedArray::new(
            view,
            BitMask::from_bools(&o.shape, m.iter().copied()).unwrap(),
        )
        .unwrap(),
        None => MaskedArray::unmasked(view),
    }
}

fn typed<T: Element>(v: &DynVec) -> Vec<T> {
    with_dyn_vec!(v, v => v.iter().map(|x| T::from_scalar(x.to_scalar()).unwrap()).collect())
}

/// The case's scalar, if it has one.
fn scalar(c: &Value) -> Option<Scalar> {
    c.get("scalar").map(|s| {
        if c["scalar_is_int"] == true {
            Scalar::Int(s.as_i64().unwrap())
        } else {
            Scalar::Float(masked_tests::num(s))
        }
    })
}

fn run_dense<T: Element>(
    a: &Operand, b: Option<&Operand>, s: Option<Scalar>, op: BinOp, rule: MaskRule, first: bool,
) -> Result<ZipOutcome, MaskedError> {
    let av = typed::<T>(&a.values);
    let x = dense(a, &av);
    match (b, s) {
        (Some(b), _) => {
            let bv = typed::<T>(&b.values);
            apply_binary(&x, &dense(b, &bv), op, rule, false)
        }
        (None, Some(s)) => apply_binary(&x, &Splat(T::from_scalar(s).unwrap()), op, rule, first),
        _ => unreachable!(),
    }
}

/// The sparse entries of a 2-D operand: its valid positions (all, without a mask).
fn entries(o: &Operand) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let (r, c) = (o.shape[0], o.shape[1]);
    let mut indptr = vec![0];
    let (mut cols, mut flat) = (vec![], vec![]);
    for i in 0..r {
        for j in 0..c {
            if o.mask.as_ref().is_none_or(|m| m[i * c + j]) {
                cols.push(j);
                flat.push(i * c + j);
            }
        }
        indptr.push(cols.len());
    }
    (indptr, cols, flat)
}

/// The case on CSR and COO: `a` sparse at its mask; `b` sparse at its mask when it has
/// one, else dense (sparse ⊙ dense); the result must store exactly `want`'s mask.
fn run_sparse<T: Element>(
    a: &Operand, b: Option<&Operand>, s: Option<Scalar>, op: BinOp, rule: MaskRule, first: bool,
    want: &ZipOutcome,
) -> Result<(), String> {
    let (ptr, cols, flat) = entries(a);
    let av = typed::<T>(&a.values);
    let vals: Vec<T> = flat.iter().map(|&f| av[f]).collect();
    let shape = (a.shape[0], a.shape[1]);
    let m = CsMat::new(shape, ptr, cols, vals.clone());
    let csr = MaskedCsr::from_pattern(m.view()).unwrap();
    let coords: Vec<Vec<usize>> = masked::sparse::unravel(&a.shape, &flat);
    let coo = MaskedCoo::from_pattern(&a.shape, &coords, vals).unwrap();
    let (c, o) = match (b, s) {
        (None, Some(s)) => {
            let s = Splat(T::from_scalar(s).unwrap());
            (
                apply_binary_sparse(&csr, &s, op, rule, first),
                apply_binary(&coo, &s, op, rule, first),
            )
        }
        (Some(b), _) if b.mask.is_some() && b.shape == a.shape => {
            let (ptr, cols, flat) = entries(b);
            let bv = typed::<T>(&b.values);
            let vals: Vec<T> = flat.iter().map(|&f| bv[f]).collect();
            let mb = CsMat::new(shape, ptr, cols, vals.clone());
            let coords = masked::sparse::unravel(&b.shape, &flat);
            let coob = MaskedCoo::from_pattern(&b.shape, &coords, vals).unwrap();
            (
                apply_binary_sparse(
                    &csr,
                    &MaskedCsr::from_pattern(mb.view()).unwrap(),
                    op,
                    rule,
                    false,
                ),
                apply_binary(&coo, &coob, op, rule, false),
            )
        }
        (Some(b), _) => {
            let bv = typed::<T>(&b.values);
            let d = dense(b, &bv);
            (
                apply_binary_sparse(&csr, &d, op, rule, false),
                apply_binary(&coo, &d, op, rule, false),
            )
        }
        _ => unreachable!(),
    };
    for (name, got) in [("csr", c), ("coo", o)] {
        let got = got.map_err(|e| format!("{name}: {e}"))?;
        let valid: Vec<usize> = (0..want.mask.len()).filter(|&i| want.mask.get(i)).collect();
        if got.indices != valid {
            return Err(format!("{name}: stored {:?}, want {valid:?}", got.indices));
        }
        let same = match (&got.values, &want.values) {
            (Values::Bool(g), Values::Bool(w)) => valid.iter().zip(g).all(|(&i, &g)| w[i] == g),
            (Values::Num(g), Values::Num(w)) => valid.iter().enumerate().all(|(k, &i)| {
                let (x, y) = (at(g, k), at(w, i));
                x == y || (x.is_nan() && y.is_nan())
            }),
            _ => false,
        };
        if !same {
            return Err(format!("{name}: values differ from dense"));
        }
    }
    Ok(())
}

#[test]
fn binary_ops_match_torch_and_the_peers_rules() {
    let text = std::fs::read_to_string(format!(
        "{}/fixtures/binary.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() > 600, "fixture set unexpectedly small");
    check_cases(cases, |c| {
        let name = c["op"].as_str().unwrap();
        let op = name.parse::<Op>().unwrap().binary().unwrap();
        let rule: MaskRule = c["rule"].as_str().unwrap().parse().unwrap();
        let a = operand(&c["a"]);
        let b = c.get("b").map(operand);
        let s = scalar(c);
        let first = c["scalar_first"] == true;
        let what = format!(
            "{name} {} {:?} {:?}",
            c["rule"],
            c["a"]["dtype"],
            c.get("b").map(|b| &b["dtype"])
        );
        let dt = match (&b, s) {
            (Some(b), _) => promote(a.values.dtype(), b.values.dtype()),
            (None, Some(s)) => promote_scalar(a.values.dtype(), s),
            _ => unreachable!(),
        };
        let a = Operand {
            values: cast_values(&a.values, dt).unwrap(),
            ..a
        };
        let b = b.map(|b| Operand {
            values: cast_values(&b.values, dt).unwrap(),
            ..b
        });
        let out = with_dtype!(dt, T => run_dense::<T>(&a, b.as_ref(), s, op, rule, first));
        if let Some(e) = c.get("error") {
            return match (e.as_str().unwrap(), &out) {
                ("mask", Err(MaskedError::MaskMismatch { .. }))
                | ("domain", Err(MaskedError::IntegerDomain { .. }))
                | ("shape", Err(MaskedError::ShapeMismatch { .. })) => Ok(()),
                _ => Err(format!("{what}: expected a {e} error, got {out:?}")),
            };
        }
        let out = out.map_err(|e| format!("{what}: {e}"))?;
        let want_dt = c["out_dtype"].as_str().unwrap();
        let mask: Vec<bool> = c["expected_mask"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b == 1)
            .collect();
        if out.mask.to_vec() != mask {
            return Err(format!("{what}: output mask differs"));
        }
        match &out.values {
            Values::Bool(g) => {
                if want_dt != "bool" {
                    return Err(format!("{what}: bool output, want {want_dt}"));
                }
                let w: Vec<bool> = c["expected"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| b == 1)
                    .collect();
                if g != &w {
                    return Err(format!("{what}: got {g:?} want {w:?}"));
                }
            }
            Values::Num(g) => {
                if g.dtype().name() != want_dt {
                    return Err(format!("{what}: dtype {} want {want_dt}", g.dtype().name()));
                }
                let w = values(want_dt, c["expected"].as_array().unwrap());
                let (bits, min_exp, tol) = match g {
                    DynVec::F32(_) => (23, -126, 4.0),
                    DynVec::F64(_) => (52, -1022, 4.0),
                    DynVec::F16(_) => (10, -14, 1.0),
                    _ => (0, 0, 0.0),
                };
                for (i, &valid) in mask.iter().enumerate() {
                    let (x, y) = (at(g, i), at(&w, i));
                    let bad = if bits == 0 {
                        x != y
                    } else {
                        ulps(x, y, bits, min_exp) > tol
                    };
                    if bad || (!valid && x != 0.0) {
                        return Err(format!("{what}: at {i}: got {x}, want {y}"));
                    }
                }
            }
        }
        if a.shape.len() == 2
            && b.as_ref()
                .is_none_or(|b| b.shape == a.shape || b.mask.is_none())
        {
            with_dtype!(dt, T => run_sparse::<T>(&a, b.as_ref(), s, op, rule, first, &out))
                .map_err(|e| format!("{what}: {e}"))?;
        }
        Ok(())
    });
}
