//! Golden fixtures for the COO layout from torch.masked on sparse COO tensors
//! (`coo_torch.json`, scripts/gen_fixtures_coo.py): sum, prod, amax, amin over every
//! set of dims of tensors of rank 1 to 4, keepdim both ways, with mask = input pattern,
//! a separate mask (positions the input does not store, explicit `false` entries) and
//! no mask. The entries are given unsorted. Each case checks the output shape, the
//! stored output positions (the output mask) and the values there.

use masked::by_name::{apply_sparse, OpRequest};
use masked::{CooMask, CooPattern, Dims, Element, MaskedCoo};
use masked_tests::{check_cases, check_fixture, int, num, usizes};
use serde_json::Value;

fn coords(v: &Value) -> Vec<Vec<usize>> {
    v.as_array().unwrap().iter().map(usizes).collect()
}

fn tensor<T: Element>(t: &Value, data: Vec<T>) -> MaskedCoo<T> {
    let shape = usizes(&t["shape"]);
    let mask = match t["mask"].as_object() {
        None => CooMask::All,
        Some(mk) if mk["kind"] == "pattern" => CooMask::Stored,
        Some(mk) => {
            let c = coords(&mk["coords"]);
            let keep: Vec<bool> = mk["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b.as_bool().unwrap())
                .collect();
            let kept: Vec<Vec<usize>> = c
                .iter()
                .map(|dim| {
                    dim.iter()
                        .zip(&keep)
                        .filter(|p| *p.1)
                        .map(|p| *p.0)
                        .collect()
                })
                .collect();
            CooMask::Pattern(CooPattern::from_coords(&shape, &kept).unwrap())
        }
    };
    MaskedCoo::try_new(&shape, &coords(&t["coords"]), data, mask).unwrap()
}

fn run<T: Element>(a: &MaskedCoo<T>, c: &Value) -> Result<(), String> {
    let dims: Vec<isize> = usizes(&c["dims"]).into_iter().map(|d| d as isize).collect();
    let req = OpRequest::new(c["op"].as_str().unwrap())
        .unwrap()
        .dims(Dims::Set(dims))
        .keepdim(c["keepdim"].as_bool().unwrap());
    let out = apply_sparse(a, &req).map_err(|e| e.to_string())?;
    check_fixture(&out, &usizes(&c["out_shape"]), c)
}

#[test]
fn coo_matches_torch_masked() {
    let path = format!("{}/fixtures/coo_torch.json", env!("CARGO_MANIFEST_DIR"));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tensors = v["tensors"].as_array().unwrap();
    let cases = v["cases"].as_array().unwrap();
    assert!(cases.len() > 5000, "fixture too small: {}", cases.len());
    check_cases(cases, |c| {
        let t = &tensors[c["tensor"].as_u64().unwrap() as usize];
        let data = t["data"].as_array().unwrap();
        let r = match t["dtype"].as_str().unwrap() {
            "float64" => run(&tensor(t, data.iter().map(num).collect::<Vec<f64>>()), c),
            "float32" => run(
                &tensor(t, data.iter().map(|x| num(x) as f32).collect::<Vec<f32>>()),
                c,
            ),
            "int64" => run(&tensor(t, data.iter().map(int).collect::<Vec<i64>>()), c),
            d => Err(format!("dtype {d}")),
        };
        r.map_err(|e| {
            format!(
                "{} {} dims {} keepdim {} mask {}: {e}",
                c["op"],
                t["dtype"],
                c["dims"],
                c["keepdim"],
                t["mask"].get("kind").unwrap_or(&Value::Null)
            )
        })
    });
}
