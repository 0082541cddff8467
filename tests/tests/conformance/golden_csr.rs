//! Golden fixtures for the CSR layout from torch.masked on sparse CSR tensors
//! (`csr_torch.json`, scripts/gen_fixtures_csr.py): sum, prod, amax, amin, mean with
//! keepdim=True along dim 1, dim 0 and both, with mask = input pattern, a separate mask
//! (positions the input does not store, explicit `false` entries) and no mask. Each case
//! checks the stored output positions (the output mask) and the values there.

use masked::by_name::{apply_sparse, OpRequest};
use masked::{Dims, Element, MaskedCsr, Pattern};
use masked_tests::{check_cases, check_fixture, int, num, usizes};
use serde_json::Value;
use sprs::CsMat;

fn run<T: Element>(c: &Value, data: Vec<T>) -> Result<(), String> {
    let shape = usizes(&c["shape"]);
    let shape = (shape[0], shape[1]);
    let m = CsMat::try_new(shape, usizes(&c["indptr"]), usizes(&c["indices"]), data)
        .map_err(|e| format!("fixture matrix: {e:?}"))?;
    let a = match c["mask"].as_object() {
        None => MaskedCsr::unmasked(m.view()),
        Some(mk) if mk["kind"] == "pattern" => MaskedCsr::from_pattern(m.view()),
        Some(mk) => {
            let bools: Vec<bool> = mk["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_bool().unwrap())
                .collect();
            let mm = CsMat::try_new(shape, usizes(&mk["indptr"]), usizes(&mk["indices"]), bools)
                .map_err(|e| format!("fixture mask: {e:?}"))?;
            let p = Pattern::from_predicate(&mm.view(), |&b| b).unwrap();
            MaskedCsr::with_mask(m.view(), p)
        }
    }
    .unwrap();
    let dims: Vec<isize> = usizes(&c["dims"]).into_iter().map(|d| d as isize).collect();
    let req = OpRequest::new(c["op"].as_str().unwrap())
        .unwrap()
        .dims(Dims::Set(dims))
        .keepdim(true);
    let out = apply_sparse(&a, &req).map_err(|e| e.to_string())?;
    let want_shape: Vec<usize> = (0..2)
        .map(|d| {
            if usizes(&c["dims"]).contains(&d) {
                1
            } else {
                [shape.0, shape.1][d]
            }
        })
        .collect();
    check_fixture(&out, &want_shape, c)
}

#[test]
fn csr_matches_torch_masked() {
    let path = format!("{}/fixtures/csr_torch.json", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() > 1000, "fixture too small: {}", cases.len());
    check_cases(cases, |c| {
        let data = c["data"].as_array().unwrap();
        let r = match c["dtype"].as_str().unwrap() {
            "float64" => run(c, data.iter().map(num).collect::<Vec<f64>>()),
            "float32" => run(c, data.iter().map(|x| num(x) as f32).collect::<Vec<f32>>()),
            "int64" => run(c, data.iter().map(int).collect::<Vec<i64>>()),
            d => Err(format!("dtype {d}")),
        };
        r.map_err(|e| {
            format!(
                "{} {} dims {} mask {}: {e}",
                c["op"],
                c["dtype"],
                c["dims"],
                c["mask"].get("kind").unwrap_or(&Value::Null)
            )
        })
    });
}
