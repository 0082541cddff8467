//! Golden values from torch (scripts/gen_fixtures_attention.py): attention's output and
//! its gradients for Q, K, V and the bias, computed by torch densely with autograd, on
//! patterns with an empty query row, broadcast batch and head dims, f64 and f32.

mod common;

use common::close;
use masked_attention::{attention, attention_vjp, AttentionPlan, Options, Pattern};
use ndarray::{ArrayD, IxDyn};
use serde_json::Value;

fn nums(v: &Value) -> Vec<f64> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

fn ints(v: &Value) -> Vec<usize> {
    v.as_array()
        .expect("an array")
        .iter()
        .map(|x| x.as_u64().expect("an index") as usize)
        .collect()
}

fn run<T>(c: &Value, tol: f64, to: fn(f64) -> T, back: fn(T) -> f64)
where
    T: masked_attention::AttnFloat,
{
    let name = c["name"].as_str().unwrap();
    let shape = ints(&c["shape"]);
    let pattern = Pattern::try_from_parts(
        (shape[0], shape[1]),
        ints(&c["indptr"]),
        ints(&c["indices"]),
    )
    .expect("a valid pattern");
    let plan = AttentionPlan::new(pattern);
    let arr = |key: &str, shape_key: &str| {
        ArrayD::from_shape_vec(
            IxDyn(&ints(&c[shape_key])),
            nums(&c[key]).into_iter().map(to).collect(),
        )
        .expect("the shape")
    };
    let (q, k, v) = (
        arr("q", "q_shape"),
        arr("k", "k_shape"),
        arr("v", "v_shape"),
    );
    let g = arr("grad", "out_shape");
    let bias: Option<Vec<T>> = c["bias"]
        .as_array()
        .map(|_| nums(&c["bias"]).into_iter().map(to).collect());
    let opts = Options {
        scale: c["scale"].as_f64(),
        bias: bias.as_deref(),
    };
    let o = attention(q.view(), k.view(), v.view(), &plan, &opts).unwrap();
    assert_eq!(o.shape(), ints(&c["out_shape"]).as_slice(), "{name}");
    let f = |x: &ArrayD<T>| x.iter().map(|&e| back(e)).collect::<Vec<f64>>();
    close(&f(&o), &nums(&c["out"]), tol, &format!("{name}: out"));
    let gr = attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).unwrap();
    close(&f(&gr.dq), &nums(&c["dq"]), tol, &format!("{name}: dq"));
    close(&f(&gr.dk), &nums(&c["dk"]), tol, &format!("{name}: dk"));
    close(&f(&gr.dv), &nums(&c["dv"]), tol, &format!("{name}: dv"));
    match (gr.dbias, c["dbias"].as_array()) {
        (Some(db), Some(_)) => close(
            &db.into_iter().map(back).collect::<Vec<_>>(),
            &nums(&c["dbias"]),
            tol,
            &format!("{name}: dbias"),
        ),
        (None, None) => {}
        _ => panic!("{name}: a bias gradient exactly where there is a bias"),
    }
}

#[test]
fn attention_and_gradients_equal_torch() {
    let text = include_str!("fixtures/attention_torch.json");
    let fx: Value = serde_json::from_str(text).expect("the fixture parses");
    let cases = fx["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 6);
    for c in cases {
        match c["dtype"].as_str() {
            Some("f64") => run::<f64>(c, 1e-12, |x| x, |x| x),
            Some("f32") => run::<f32>(c, 2e-5, |x| x as f32, |x| x as f64),
            other => panic!("dtype {other:?}"),
        }
    }
}
