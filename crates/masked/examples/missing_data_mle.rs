//! Maximum likelihood and MAP estimation with missing data, by gradient ascent through
//! the engine's masked sums, elementwise ops and VJPs.
//!
//! Each row of a padded matrix holds the observed values of one Gaussian (the padding is
//! masked out). Per row we fit the mean `mu` and the log-variance `s` jointly by
//! maximising the masked log-likelihood
//!
//! ```text
//! l(mu, s) = sum over valid x of [ -s/2 - (x - mu)^2 e^(-s) / 2 ]
//! ```
//!
//! and check the fit against the closed forms: the masked mean and the masked variance
//! with correction 0. Then the MAP estimate of the mean with a known variance 1 and a
//! prior N(0, 4), against its closed form `tau^2 sum(x) / (n tau^2 + sigma^2)`.
//!
//! Rows with no valid entry give an invalid estimate (MAP: the prior mean); a row with
//! one entry has no variance MLE (the likelihood grows without bound as the variance
//! shrinks): its variance is invalid and never updated, and nothing produces a NaN.
//!
//!     cargo run --release -p masked --example missing_data_mle

use masked::by_name::OpRequest;
use masked::prelude::*;
use ndarray::{array, Array2, ArrayD, IxDyn};

/// The estimates of every row, with which ones exist.
#[derive(Debug, Clone)]
pub struct Fit {
    /// MLE of each row's mean (0 where there is none).
    pub mu: Vec<f64>,
    /// MLE of each row's variance `e^s` (0 where there is none).
    pub var: Vec<f64>,
    /// Whether the row has a mean MLE (at least one valid entry).
    pub mu_valid: Vec<bool>,
    /// Whether the row has a variance MLE (at least two valid entries).
    pub var_valid: Vec<bool>,
    /// MAP estimate of each row's mean, variance 1, prior N(0, 4) (every row).
    pub map_mu: Vec<f64>,
}

/// Prior variance of the mean, and the known variance of the MAP model.
pub const TAU2: f64 = 4.0;
/// The known variance of the MAP model.
pub const SIGMA2: f64 = 1.0;

/// A per-row vector as a plain `[rows]` array (the upstream gradient of a sum over dim 1).
fn per_row(v: impl Iterator<Item = f64>, rows: usize) -> MaskedArrayD<f64> {
    MaskedArray::unmasked(ArrayD::from_shape_vec(IxDyn(&[rows]), v.collect()).expect("rows"))
}

/// `sum_valid (x - mu)` per row and `sum_valid (x - mu)^2` per row, with the first as the
/// engine's VJP: `z = x - mu`, `q = sum(z^2)`, and `dq/dmu = -sum(2 z)` through the VJPs of
/// sum and square (`weight` scales the upstream gradient of `q`).
fn grad_mu(
    a: &MaskedArray<ndarray::ViewRepr<&f64>, ndarray::Ix2>, mu: &[f64], weight: &[f64],
) -> masked::Result<(Vec<f64>, Vec<f64>)> {
    let rows = mu.len();
    // mu as a plain [rows, 1] column: it broadcasts along each row and takes x's mask
    let col = MaskedArray::unmasked(Array2::from_shape_vec((rows, 1), mu.to_vec()).expect("col"));
    let z = a.sub(&col, MaskRule::Strict)?;
    let sq = z.square()?;
    let q = sq.sum(1, false)?;
    // the gradient of sum_rows weight_r q_r with respect to z, by VJPs
    let g_q = per_row(weight.iter().copied(), rows);
    let g_sq = sq.vjp_reduce(&OpRequest::new("sum")?.dims(1), &g_q)?;
    let g_z = z.vjp_map(&OpRequest::new("square")?, &g_sq)?;
    // z = x - mu: the gradient with respect to mu is minus the sum over the row
    let d = g_z.sum(1, false)?;
    let d_mu = d.values().iter().map(|v| -v).collect();
    Ok((d_mu, q.values().iter().copied().collect()))
}

/// Fits every row by `steps` of gradient ascent (Fisher-scaled, so the step does not
/// depend on the data's scale).
pub fn fit(x: &Array2<f64>, valid: &Array2<bool>, steps: usize) -> masked::Result<Fit> {
    let a = MaskedArray::from_bool_mask(x.view(), valid.view())?;
    let rows = x.nrows();
    let n: Vec<f64> = a
        .count(1, false)?
        .values()
        .iter()
        .map(|&c| c as f64)
        .collect();
    let (mut mu, mut s) = (vec![0.0f64; rows], vec![0.0f64; rows]);
    let mut map_mu = vec![0.0; rows];
    let lr = 0.5;
    for _ in 0..steps {
        // MLE: l = -n s / 2 - e^(-s) q / 2, so dl/dmu = -e^(-s) / 2 * dq/dmu
        let w: Vec<f64> = s.iter().map(|s| -0.5 * (-s).exp()).collect();
        let (d_mu, q) = grad_mu(&a, &mu, &w)?;
        for r in 0..rows {
            if n[r] == 0.0 {
                continue; // no valid entry: nothing to fit
            }
            // Fisher scaling: e^s / n for mu, 2 / n for s
            mu[r] += lr * d_mu[r] * s[r].exp() / n[r];
            if n[r] >= 2.0 {
                let d_s = -0.5 * n[r] + 0.5 * (-s[r]).exp() * q[r];
                s[r] += lr * d_s * 2.0 / n[r];
            }
        }
        // MAP: log posterior -q / (2 sigma^2) - mu^2 / (2 tau^2)
        let w = vec![-0.5 / SIGMA2; rows];
        let (d_lik, _) = grad_mu(&a, &map_mu, &w)?;
        for r in 0..rows {
            let d = d_lik[r] - map_mu[r] / TAU2;
            map_mu[r] += lr * d / (n[r] / SIGMA2 + 1.0 / TAU2);
        }
    }
    let mu_valid: Vec<bool> = n.iter().map(|&c| c >= 1.0).collect();
    let var_valid: Vec<bool> = n.iter().map(|&c| c >= 2.0).collect();
    let var = s
        .iter()
        .zip(&var_valid)
        .map(|(s, &ok)| if ok { s.exp() } else { 0.0 })
        .collect();
    let mu = mu
        .iter()
        .zip(&mu_valid)
        .map(|(&m, &ok)| if ok { m } else { 0.0 })
        .collect();
    Ok(Fit {
        mu,
        var,
        mu_valid,
        var_valid,
        map_mu,
    })
}

/// The padded batch of the example: rows of 5, 3, 1 and 0 observations.
pub fn batch() -> (Array2<f64>, Array2<bool>) {
    let x = array![
        [2.1, 3.9, 3.0, 2.6, 4.4],
        [-1.0, 0.5, 2.0, 9.9, 9.9],
        [7.0, 0.0, 0.0, 0.0, 0.0],
        [f64::NAN, f64::NAN, 0.0, 0.0, 0.0],
    ];
    let valid = array![
        [true, true, true, true, true],
        [true, true, true, false, false],
        [true, false, false, false, false],
        [false, false, false, false, false],
    ];
    (x, valid)
}

fn main() -> masked::Result<()> {
    let (x, valid) = batch();
    let f = fit(&x, &valid, 200)?;
    let a = MaskedArray::from_bool_mask(x.view(), valid.view())?;
    let mean = a.mean(1, false)?;
    let var0 = a.var(1, false, 0.0)?;
    let sum = a.sum(1, false)?;
    let n = a.count(1, false)?;
    println!("row  n   mu (fit / mean)        var (fit / var c=0)     MAP mu (fit / closed form)");
    for r in 0..x.nrows() {
        let closed = TAU2 * sum.values()[[r]] / (n.values()[[r]] as f64 * TAU2 + SIGMA2);
        let show = |ok: bool, fit: f64, want: f64| {
            if ok {
                format!("{fit:9.6} / {want:9.6}")
            } else {
                "   invalid           ".to_string()
            }
        };
        println!(
            "{r:>3} {:>2}   {}   {}   {:9.6} / {closed:9.6}",
            n.values()[[r]],
            show(f.mu_valid[r], f.mu[r], mean.values()[[r]]),
            show(f.var_valid[r], f.var[r], var0.values()[[r]]),
            f.map_mu[r],
        );
    }
    Ok(())
}
