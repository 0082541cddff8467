//! Times attention, SDDMM, SpMM and their VJPs on generated data (f32):
//! `cargo run --release -p masked-attention --example attention_timing -- N D band:W|random:P|causal [REPEAT] [auto|rows|slices[:W]]`.
//! `masked bench --op attention,...` is the full benchmark; this is the crate-level loop.

use masked_attention::{
    attention, attention_vjp, sddmm, sddmm_vjp, spmm, spmm_vjp, AttentionPlan, Options, Pattern,
    Traversal,
};
use ndarray::{ArrayD, IxDyn};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(16384, |s| s.parse().expect("N"));
    let d: usize = args.get(2).map_or(64, |s| s.parse().expect("D"));
    let pat = args.get(3).map_or("band:256", String::as_str);
    let repeat: usize = args.get(4).map_or(5, |s| s.parse().expect("REPEAT"));
    let mut state = 0x9E3779B97F4A7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let pattern = match pat.split_once(':') {
        Some(("band", w)) => Pattern::banded([n, n], w.parse::<usize>().expect("W") - 1, 0),
        Some(("random", p)) => {
            let p: f64 = p.parse().expect("P");
            let mut coords: [Vec<usize>; 2] = [vec![], vec![]];
            for i in 0..n {
                for j in 0..n {
                    if i == j || next() < p {
                        coords[0].push(i);
                        coords[1].push(j);
                    }
                }
            }
            Pattern::from_coords([n, n], &coords)
        }
        _ => Pattern::causal(n),
    }
    .expect("pattern");
    let nnz = pattern.nnz();
    let traversal = match args.get(5).map(String::as_str) {
        None | Some("auto") => Traversal::Auto,
        Some("rows") => Traversal::Rows,
        Some(t) => Traversal::KeySlices(
            t.strip_prefix("slices")
                .and_then(|w| w.strip_prefix(':'))
                .map_or(0, |w| w.parse().expect("W")),
        ),
    };
    let plan = AttentionPlan::new(pattern).with_traversal(traversal);
    let mut arr = |s: &[usize]| {
        ArrayD::from_shape_vec(
            IxDyn(s),
            (0..s.iter().product())
                .map(|_| next() as f32 - 0.5)
                .collect(),
        )
        .expect("shape")
    };
    let (q, k, v, g) = (arr(&[n, d]), arr(&[n, d]), arr(&[n, d]), arr(&[n, d]));
    let opts = Options::default();
    let time = |name: &str, flops: f64, f: &mut dyn FnMut()| {
        f();
        let mut ts: Vec<f64> = (0..repeat)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect();
        ts.sort_by(f64::total_cmp);
        let med = ts[ts.len() / 2];
        println!(
            "{name:<14} n={n} d={d} {pat} nnz={nnz}: {:8.2} ms  {:6.2} GFLOP/s  (min {:.2} ms)",
            med * 1e3,
            flops / med / 1e9,
            ts[0] * 1e3
        );
    };
    let f = (nnz * d) as f64;
    time("attention", 4.0 * f, &mut || {
        attention(q.view(), k.view(), v.view(), &plan, &opts).expect("attention");
    });
    time("attention-vjp", 8.0 * f, &mut || {
        attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).expect("vjp");
    });
    time("fwd+bwd", 12.0 * f, &mut || {
        attention(q.view(), k.view(), v.view(), &plan, &opts).expect("attention");
        attention_vjp(q.view(), k.view(), v.view(), &plan, &opts, g.view()).expect("vjp");
    });
    let s = sddmm(q.view(), k.view(), &plan, 0.125).expect("sddmm");
    time("sddmm", 2.0 * f, &mut || {
        sddmm(q.view(), k.view(), &plan, 0.125).expect("sddmm");
    });
    time("spmm", 2.0 * f, &mut || {
        spmm(s.view(), &plan, v.view()).expect("spmm");
    });
    time("sddmm-vjp", 4.0 * f, &mut || {
        sddmm_vjp(q.view(), k.view(), &plan, 0.125, s.view()).expect("sddmm_vjp");
    });
    time("spmm-vjp", 4.0 * f, &mut || {
        spmm_vjp(s.view(), &plan, v.view(), g.view()).expect("spmm_vjp");
    });
}
