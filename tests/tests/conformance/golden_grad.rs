//! Golden fixtures of the VJPs (`grad.json`, scripts/gen_fixtures_grad.py): torch autograd
//! over torch.masked in float64, on inputs with a fully masked lane, a lane with one valid
//! element, an amax tie and NaN / inf under the mask, with an upstream gradient holding
//! NaN at the invalid outputs. Where torch's gradient is NaN against the contract (var and
//! std on a fully masked or one-element lane, plain functions under the mask) the fixture
//! holds the contract's value and says so; every other value is torch's. Checked on the
//! dense layout and, with the mask as the stored pattern, on COO (every rank) and CSR
//! (rank 2): each gradient within 1e-12 relative of the fixture.

use masked::by_name::{Kind, OpRequest};
use masked::{BitMask, MaskedArray, MaskedCoo, MaskedCsr, MaskedOps, SparseArray};
use masked_tests::{check_cases, num};
use ndarray::{ArrayD, IxDyn};
use serde_json::Value;

fn request(c: &Value) -> OpRequest {
    let mut req = OpRequest::new(c["op"].as_str().unwrap()).unwrap();
    if let Some(d) = c["dims"].as_array() {
        let dims: Vec<isize> = d.iter().map(|v| v.as_i64().unwrap() as isize).collect();
        req = req.dims(dims).keepdim(c["keepdim"].as_bool().unwrap());
    }
    for (k, v) in c["options"].as_object().unwrap() {
        let text = v.as_str().map_or_else(|| v.to_string(), str::to_string);
        req.set_option(k, &text).unwrap();
    }
    req
}

fn close(got: f64, want: f64) -> bool {
    (got.is_nan() && want.is_nan())
        || got == want
        || (got - want).abs() <= 1e-12 * (1.0 + want.abs())
}

/// The sparse gradient (row-major positions, values) against the fixture at the valid
/// positions, which it must store exactly.
fn check_sparse(
    what: &str, flat: &[usize], vals: &[f64], mask: &[bool], want: &[f64],
) -> Result<(), String> {
    let valid: Vec<usize> = (0..mask.len()).filter(|&i| mask[i]).collect();
    if flat != valid.as_slice() {
        return Err(format!("{what}: stores {flat:?}, valid {valid:?}"));
    }
    for (&p, &v) in flat.iter().zip(vals) {
        if !close(v, want[p]) {
            return Err(format!("{what} at {p}: {v} vs {}", want[p]));
        }
    }
    Ok(())
}

fn check(c: &Value) -> Result<(), String> {
    let shape: Vec<usize> = serde_json::from_value(c["shape"].clone()).unwrap();
    let f = |k: &str| {
        c[k].as_array()
            .unwrap()
            .iter()
            .map(num)
            .collect::<Vec<f64>>()
    };
    let (x, g, want) = (f("x"), f("g"), f("grad"));
    let mask: Vec<bool> = c["mask"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_bool().unwrap())
        .collect();
    let g_shape: Vec<usize> = serde_json::from_value(c["g_shape"].clone()).unwrap();
    let req = request(c);
    let kind = req.op.kind();
    let what = format!("{} {:?} keepdim {}", req.op, req.dims, req.keepdim);
    // dense
    let xa = ArrayD::from_shape_vec(IxDyn(&shape), x.clone()).unwrap();
    let bits = BitMask::from_bools(&shape, mask.iter().copied()).unwrap();
    let a = MaskedArray::new(xa, bits.clone()).unwrap();
    let ga = ArrayD::from_shape_vec(IxDyn(&g_shape), g.clone()).unwrap();
    let map = matches!(kind, Kind::Normalize | Kind::Unary);
    let dx = if map {
        a.vjp_map(&req, &MaskedArray::new(ga, bits).unwrap())
    } else {
        a.vjp_reduce(&req, &MaskedArray::unmasked(ga))
    }
    .map_err(|e| format!("{what}: {e}"))?;
    for (i, (&got, &w)) in dx.values().iter().zip(&want).enumerate() {
        if !close(got, w) {
            return Err(format!("dense {what} at {i}: {got} vs {w}"));
        }
    }
    // sparse, the mask as the stored pattern: the valid values stored
    let flat: Vec<usize> = (0..x.len()).filter(|&i| mask[i]).collect();
    let coords = masked::sparse::unravel(&shape, &flat);
    let vals: Vec<f64> = flat.iter().map(|&i| x[i]).collect();
    let coo = MaskedCoo::from_pattern(&shape, &coords, vals.clone()).unwrap();
    // the upstream at the valid outputs (NaN marks the others)
    let g_ids: Vec<usize> = (0..g.len()).filter(|&i| !g[i].is_nan()).collect();
    let g_vals: Vec<f64> = g_ids.iter().map(|&i| g[i]).collect();
    let gs = SparseArray::new(g_shape.clone(), g_ids, g_vals).unwrap();
    let r = if map {
        coo.vjp_map(&req, &gs.clone().into())
    } else {
        coo.vjp_reduce(&req, &gs)
    }
    .map_err(|e| format!("coo {what}: {e}"))?;
    check_sparse(
        &format!("coo {what}"),
        &r.pattern().flat(),
        r.values(),
        &mask,
        &want,
    )?;
    if shape.len() == 2 {
        let m = sprs::CsMat::new(
            (shape[0], shape[1]),
            (0..=shape[0])
                .map(|r| flat.iter().filter(|&&p| p < r * shape[1]).count())
                .collect(),
            coords[1].clone(),
            vals,
        );
        let csr = MaskedCsr::from_pattern(m.view()).unwrap();
        let r = if map {
            let mut gm = csr.softmax(req.one_dim().unwrap_or(-1)).unwrap();
            gm.data_mut().copy_from_slice(gs.values());
            csr.vjp_map(&req, &gm)
        } else {
            csr.vjp_reduce(&req, &gs)
        }
        .map_err(|e| format!("csr {what}: {e}"))?;
        let rf: Vec<usize> = r.iter().map(|(_, (i, j))| i * shape[1] + j).collect();
        check_sparse(&format!("csr {what}"), &rf, r.data(), &mask, &want)?;
    }
    Ok(())
}

#[test]
fn vjps_match_torch_autograd_over_torch_masked() {
    let text =
        std::fs::read_to_string(format!("{}/fixtures/grad.json", env!("CARGO_MANIFEST_DIR")))
            .unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() > 200, "{} cases", cases.len());
    check_cases(cases, check);
}
