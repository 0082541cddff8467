//! Runs the worked example `crates/masked/examples/missing_data_mle.rs` (maximum
//! likelihood and MAP with missing data, by gradient ascent through the engine's VJPs)
//! and checks its fits against the closed forms the engine computes directly.

#[allow(dead_code)]
#[path = "../../../crates/masked/examples/missing_data_mle.rs"]
mod example;

use masked::prelude::*;

#[test]
fn the_mle_example_fits_the_closed_forms_without_nan() {
    let (x, valid) = example::batch();
    let f = example::fit(&x, &valid, 200).unwrap();
    let a = MaskedArray::from_bool_mask(x.view(), valid.view()).unwrap();
    let mean = a.mean(1, false).unwrap();
    let var0 = a.var(1, false, 0.0).unwrap();
    let sum = a.sum(1, false).unwrap();
    let n = a.count(1, false).unwrap();
    // rows of 5, 3, 1 and 0 observations
    assert_eq!(f.mu_valid, [true, true, true, false]);
    assert_eq!(f.var_valid, [true, true, false, false]);
    for r in 0..4 {
        assert!(f.mu[r].is_finite() && f.var[r].is_finite() && f.map_mu[r].is_finite());
        if f.mu_valid[r] {
            assert!(
                (f.mu[r] - mean.values()[[r]]).abs() < 1e-9,
                "row {r}: {} vs {}",
                f.mu[r],
                mean.values()[[r]]
            );
        }
        if f.var_valid[r] {
            assert!(
                (f.var[r] - var0.values()[[r]]).abs() < 1e-9,
                "row {r}: {} vs {}",
                f.var[r],
                var0.values()[[r]]
            );
        }
        let closed = example::TAU2 * sum.values()[[r]]
            / (n.values()[[r]] as f64 * example::TAU2 + example::SIGMA2);
        assert!(
            (f.map_mu[r] - closed).abs() < 1e-9,
            "row {r}: MAP {} vs {closed}",
            f.map_mu[r]
        );
    }
    // hand-checked: row 1 holds -1, 0.5, 2: mean 0.5, variance (2.25 + 0 + 2.25) / 3 = 1.5;
    // MAP 4 * 1.5 / (3 * 4 + 1); the empty row's MAP is the prior mean 0
    assert!((f.mu[1] - 0.5).abs() < 1e-9 && (f.var[1] - 1.5).abs() < 1e-9);
    assert!((f.map_mu[1] - 6.0 / 13.0).abs() < 1e-9);
    assert_eq!(f.map_mu[3], 0.0);
}
