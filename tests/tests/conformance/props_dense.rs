//! Properties of the dense layout against a naive reference that gathers each lane's
//! valid values in order and reduces them with plain Rust:
//! - every masked op equals the op over the gathered valid values;
//! - no mask equals the unmasked op, and an all-true mask equals no mask (bit for bit);
//! - non-contiguous views give the same result as contiguous copies;
//! - the result does not depend on the number of threads;
//! - merging the fold states of two halves of a lane equals one pass.

use masked::ops::{AMax, ArgMax, ArgMin, Mean, Sum};
use masked::{BitMask, Dims, Element, Fold, MaskedArray, MaskedArrayD, MaskedOps, MaskedView};
use ndarray::{ArrayD, IxDyn};
use proptest::prelude::*;

/// A random case: shape, values, optional mask (full shape), dims, keepdim.
#[derive(Debug, Clone)]
struct Case {
    shape: Vec<usize>,
    xs: Vec<f64>,
    mask: Option<Vec<bool>>,
    dims: Vec<usize>,
    all_dims: bool,
    keepdim: bool,
}

/// Shapes of rank 0 to 4 whose sizes include 0 (empty lanes), 1 (unit dims) and > 64
/// (several mask words per lane).
fn any_shape() -> BoxedStrategy<Vec<usize>> {
    let dim = prop_oneof![3 => 0usize..6, 1 => Just(0usize), 1 => 60usize..140];
    prop::collection::vec(dim, 0..5)
        .prop_filter("not too big", |s| s.iter().product::<usize>() <= 20_000)
        .boxed()
}

/// Shapes of rank 2 to 4 with every size in 2..7 (a transpose changes the strides).
fn strided_shape() -> BoxedStrategy<Vec<usize>> {
    prop::collection::vec(2usize..7, 2..5).boxed()
}

fn case(float_specials: bool) -> impl Strategy<Value = Case> {
    case_of(any_shape(), float_specials)
}

fn case_of(shapes: BoxedStrategy<Vec<usize>>, float_specials: bool) -> impl Strategy<Value = Case> {
    shapes
        .prop_flat_map(move |shape| {
            let n: usize = shape.iter().product();
            let nd = shape.len();
            let val = if float_specials {
                prop_oneof![
                    8 => (-20i32..20).prop_map(|v| v as f64 / 4.0),
                    1 => Just(f64::NAN),
                    1 => Just(f64::INFINITY),
                    1 => Just(f64::NEG_INFINITY),
                ]
                .boxed()
            } else {
                (-20i32..20).prop_map(|v| v as f64).boxed()
            };
            (
                Just(shape),
                prop::collection::vec(val, n),
                prop::option::of(prop::collection::vec(prop::bool::weighted(0.6), n)),
                prop::collection::vec(any::<bool>(), nd),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|(shape, xs, mask, pick, all_dims, keepdim)| Case {
            dims: (0..shape.len()).filter(|&d| pick[d]).collect(),
            shape,
            xs,
            mask,
            all_dims,
            keepdim,
        })
}

impl Case {
    fn dims(&self) -> Dims {
        if self.all_dims || self.dims.is_empty() {
            Dims::All
        } else {
            Dims::Set(self.dims.iter().map(|&d| d as isize).collect())
        }
    }
    fn reduced(&self) -> Vec<bool> {
        let mut r = vec![self.all_dims || self.dims.is_empty(); self.shape.len()];
        for &d in &self.dims {
            r[d] = true;
        }
        r
    }
    fn array<T: Copy>(&self, conv: impl Fn(f64) -> T) -> ArrayD<T> {
        ArrayD::from_shape_vec(
            IxDyn(&self.shape),
            self.xs.iter().map(|&v| conv(v)).collect(),
        )
        .unwrap()
    }
    /// The array `x` (of this case's shape) under this case's mask, or unmasked.
    fn masked<'a, T: Element>(&self, x: &'a ArrayD<T>) -> MaskedView<'a, T, IxDyn> {
        match self.bitmask() {
            Some(m) => MaskedArray::new(x.view(), m).unwrap(),
            None => MaskedArray::unmasked(x.view()),
        }
    }
    fn bitmask(&self) -> Option<BitMask> {
        self.mask
            .as_ref()
            .map(|m| BitMask::from_bools(&self.shape, m.iter().copied()).unwrap())
    }
    /// The valid values of every lane, in lane order, with their lane index; and the
    /// output shape.
    fn lanes(&self) -> (Vec<Vec<(f64, i64)>>, Vec<usize>) {
        let red = self.reduced();
        let nd = self.shape.len();
        let kept: Vec<usize> = (0..nd).filter(|&d| !red[d]).collect();
        let rdims: Vec<usize> = (0..nd).filter(|&d| red[d]).collect();
        let n_out: usize = kept.iter().map(|&d| self.shape[d]).product();
        let mut lanes = vec![Vec::new(); n_out];
        let n: usize = self.shape.iter().product();
        let mut idx = vec![0usize; nd];
        for flat in 0..n {
            if self.mask.as_ref().is_none_or(|m| m[flat]) {
                let o = kept.iter().fold(0, |acc, &d| acc * self.shape[d] + idx[d]);
                let l = rdims.iter().fold(0, |acc, &d| acc * self.shape[d] + idx[d]);
                lanes[o].push((self.xs[flat], l as i64));
            }
            for d in (0..nd).rev() {
                idx[d] += 1;
                if idx[d] < self.shape[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        let out_shape = (0..nd)
            .filter_map(|d| {
                if !red[d] {
                    Some(self.shape[d])
                } else if self.keepdim {
                    Some(1)
                } else {
                    None
                }
            })
            .collect();
        (lanes, out_shape)
    }
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= 1e-9 * a.abs().max(1.0)
}

fn check<O: masked::Element>(
    got: &MaskedArrayD<O>, want: &[f64], want_mask: &[bool], shape: &[usize],
    to_f64: impl Fn(O) -> f64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(got.shape(), shape);
    let g: Vec<f64> = got.values().iter().map(|&v| to_f64(v)).collect();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        prop_assert!(same(*a, *b), "at {}: got {} want {}", i, a, b);
    }
    prop_assert_eq!(got.mask_vec(), want_mask.to_vec());
    Ok(())
}

fn nan_max(v: &[(f64, i64)]) -> f64 {
    v.iter().fold(f64::NEG_INFINITY, |m, &(x, _)| {
        if x.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(x)
        }
    })
}

fn first_arg(v: &[(f64, i64)], better: impl Fn(f64, f64) -> bool) -> i64 {
    if let Some(&(_, i)) = v.iter().find(|(x, _)| x.is_nan()) {
        return i;
    }
    let mut best: Option<(f64, i64)> = None;
    for &(x, i) in v {
        if best.is_none_or(|(b, _)| better(x, b)) {
            best = Some((x, i));
        }
    }
    best.map_or(0, |b| b.1)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn masked_ops_equal_ops_over_gathered_valid_values(c in case(true)) {
        let x = c.array(|v| v);
        let a = c.masked(&x);
        let (lanes, shape) = c.lanes();
        let any: Vec<bool> = lanes.iter().map(|l| !l.is_empty()).collect();
        let d = c.dims();
        let sum: Vec<f64> = lanes.iter().map(|l| l.iter().map(|p| p.0).sum()).collect();
        check(&a.sum(d.clone(), c.keepdim).unwrap(), &sum, &any, &shape, |v| v)?;
        let prod: Vec<f64> = lanes.iter().map(|l| l.iter().map(|p| p.0).product()).collect();
        check(&a.prod(d.clone(), c.keepdim).unwrap(), &prod, &any, &shape, |v| v)?;
        let amax: Vec<f64> = lanes.iter().map(|l| nan_max(l)).collect();
        check(&a.amax(d.clone(), c.keepdim).unwrap(), &amax, &any, &shape, |v| v)?;
        // ptp: amax - amin of the valid values (NaN propagates), 0 for an empty lane
        let ptp: Vec<f64> = lanes.iter().map(|l| {
            let neg: Vec<(f64, i64)> = l.iter().map(|&(x, i)| (-x, i)).collect();
            if l.is_empty() { 0.0 } else { nan_max(l) + nan_max(&neg) }
        }).collect();
        check(&a.ptp(d.clone(), c.keepdim).unwrap(), &ptp, &any, &shape, |v| v)?;
        let mean: Vec<f64> = lanes.iter().map(|l| l.iter().map(|p| p.0).sum::<f64>() / l.len() as f64).collect();
        check(&a.mean(d.clone(), c.keepdim).unwrap(), &mean, &any, &shape, |v| v)?;
        let count: Vec<f64> = lanes.iter().map(|l| l.len() as f64).collect();
        check(&a.count(d.clone(), c.keepdim).unwrap(), &count, &vec![true; any.len()], &shape, |v| v as f64)?;
        if d.given_len().is_none_or(|n| n == 1) {
            let am: Vec<f64> = lanes.iter().map(|l| first_arg(l, |x, b| x > b) as f64).collect();
            check(&a.argmax(d.clone(), c.keepdim).unwrap(), &am, &any, &shape, |v| v as f64)?;
            let an: Vec<f64> = lanes.iter().map(|l| first_arg(l, |x, b| x < b) as f64).collect();
            check(&a.argmin(d.clone(), c.keepdim).unwrap(), &an, &any, &shape, |v| v as f64)?;
        }
    }

    #[test]
    fn integer_ops_are_exact(c in case(false)) {
        let x = c.array(|v| v as i32);
        let a = c.masked(&x);
        let (lanes, shape) = c.lanes();
        let any: Vec<bool> = lanes.iter().map(|l| !l.is_empty()).collect();
        let d = c.dims();
        let sum: Vec<f64> = lanes.iter().map(|l| l.iter().map(|p| p.0 as i64).sum::<i64>() as f64).collect();
        check(&a.sum(d.clone(), c.keepdim).unwrap(), &sum, &any, &shape, |v| v as f64)?;
        let amin: Vec<f64> = lanes.iter().map(|l| l.iter().map(|p| p.0 as i32).min().unwrap_or(i32::MAX) as f64).collect();
        check(&a.amin(d.clone(), c.keepdim).unwrap(), &amin, &any, &shape, |v| v as f64)?;
        let ptp: Vec<f64> = lanes.iter().map(|l| {
            let v = l.iter().map(|p| p.0 as i64);
            v.clone().max().unwrap_or(0) as f64 - v.min().unwrap_or(0) as f64
        }).collect();
        check(&a.ptp(d.clone(), c.keepdim).unwrap(), &ptp, &any, &shape, |v| v as f64)?;
        let prod: Vec<f64> = lanes.iter().map(|l| l.iter().fold(1i64, |p, v| p.wrapping_mul(v.0 as i64)) as f64).collect();
        check(&a.prod(d.clone(), c.keepdim).unwrap(), &prod, &any, &shape, |v| v as f64)?;
    }

    #[test]
    fn no_mask_equals_plain_op_and_all_true_mask_equals_no_mask(c in case(false)) {
        let x = c.array(|v| v);
        let plain = MaskedArray::unmasked(x.view());
        let ones = MaskedArray::new(x.view(), BitMask::filled(&c.shape, true).unwrap()).unwrap();
        let d = c.dims();
        let s0 = plain.sum(d.clone(), c.keepdim).unwrap();
        let s1 = ones.sum(d.clone(), c.keepdim).unwrap();
        prop_assert_eq!(s0.values(), s1.values());
        prop_assert_eq!(s0.mask_vec(), s1.mask_vec());
        let m0 = plain.amax(d.clone(), c.keepdim).unwrap();
        let m1 = ones.amax(d.clone(), c.keepdim).unwrap();
        prop_assert_eq!(m0.values(), m1.values());
        // the plain ndarray op, where ndarray has one (sum over each reduced axis)
        let red = c.reduced();
        let mut want = x.clone();
        for ax in (0..c.shape.len()).rev().filter(|&ax| red[ax]) {
            want = want.sum_axis(ndarray::Axis(ax));
        }
        let got: Vec<f64> = s0.values().iter().copied().collect();
        let w: Vec<f64> = want.iter().copied().collect();
        prop_assert_eq!(got, w);
    }

    #[test]
    fn non_contiguous_views_equal_contiguous_copies(c in case_of(strided_shape(), true)) {
        // reverse the axes twice through a transposed owned copy: a view with
        // non-standard strides holding the same logical array
        let x = c.array(|v| v);
        let t = x.t().as_standard_layout().into_owned();
        let back = t.t();
        prop_assert!(!back.is_standard_layout());
        let (a, b) = match c.bitmask() {
            Some(m) => (MaskedArray::new(x.view(), m.clone()).unwrap(), MaskedArray::new(back, m).unwrap()),
            None => (MaskedArray::unmasked(x.view()), MaskedArray::unmasked(back)),
        };
        let (d, k) = (c.dims(), c.keepdim);
        // folds and lane statistics, bit for bit (a 2-D view is F-ordered: its lane
        // statistics read its memory as it lies, with its mask's bits transposed)
        let pairs = [
            (a.mean(d.clone(), k).unwrap(), b.mean(d.clone(), k).unwrap()),
            (a.sum(d.clone(), k).unwrap(), b.sum(d.clone(), k).unwrap()),
            (a.amax(d.clone(), k).unwrap(), b.amax(d.clone(), k).unwrap()),
            (a.var(d.clone(), k, 1.0).unwrap(), b.var(d.clone(), k, 1.0).unwrap()),
            (a.median(d.clone(), k, masked::MedianMode::Avg).unwrap(), b.median(d.clone(), k, masked::MedianMode::Avg).unwrap()),
            (a.logsumexp(d.clone(), k).unwrap(), b.logsumexp(d, k).unwrap()),
        ];
        for (i, (ra, rb)) in pairs.iter().enumerate() {
            prop_assert_eq!(ra.shape(), rb.shape(), "op {}", i);
            prop_assert_eq!(ra.mask_vec(), rb.mask_vec(), "op {}", i);
            for (p, q) in ra.values().iter().zip(rb.values()) {
                prop_assert!(same(*p, *q), "op {}: {} vs {}", i, p, q);
            }
        }
    }

    #[test]
    fn merging_states_of_two_parts_equals_one_pass(
        xs in prop::collection::vec(-1000i64..1000, 0..600),
        valid in prop::collection::vec(prop::bool::weighted(0.5), 600),
        cut in 0usize..600,
    ) {
        let cut = cut.min(xs.len());
        let words: Vec<u64> = valid.chunks(64).map(|c| c.iter().enumerate().fold(0u64, |w, (k, &v)| w | ((v as u64) << k))).collect();
        let bits = masked::Bits::new(&words, 0);
        fn both<F: Fold<i64>>(f: &F, xs: &[i64], bits: masked::Bits<'_>, cut: usize) -> (F::State, F::State) {
            let whole = f.fold_slice(xs, Some(bits));
            let mut a = f.identity();
            f.push_run(&mut a, &xs[..cut], Some(bits), 0);
            let mut b = f.identity();
            f.push_run(&mut b, &xs[cut..], Some(bits.offset(cut)), cut as i64);
            f.merge(&mut a, b);
            // and through serde, as partial results from another machine would travel
            let a: F::State = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
            (a, whole)
        }
        let (m, w) = both(&Sum, &xs, bits, cut);
        prop_assert_eq!(m, w);
        let (m, w) = both(&Mean, &xs, bits, cut);
        prop_assert_eq!(m, w);
        let (m, w) = both(&AMax, &xs, bits, cut);
        prop_assert_eq!(m, w);
        let (m, w) = both(&ArgMax, &xs, bits, cut);
        prop_assert_eq!(m, w);
        let (m, w) = both(&ArgMin, &xs, bits, cut);
        prop_assert_eq!(m, w);
    }
}

#[test]
fn results_do_not_depend_on_thread_count() {
    // one long lane (split into parallel chunks) and many short ones
    let n = 1 << 19;
    let x: Vec<f32> = (0..n)
        .map(|i| ((i * 7919) % 1013) as f32 * 0.37 - 150.0)
        .collect();
    let m = BitMask::from_bools([n], (0..n).map(|i| i % 3 != 0)).unwrap();
    let x1 = ndarray::ArrayView1::from(&x[..]);
    let a = MaskedArray::new(x1, m).unwrap();
    let x2 = ndarray::ArrayView2::from_shape((512, 1024), &x[..]).unwrap();
    let b = MaskedArray::unmasked(x2);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            (
                a.sum(Dims::All, false).unwrap().values().clone(),
                a.mean(Dims::All, false).unwrap().values().clone(),
                b.sum(0, false).unwrap().values().clone(),
                b.sum(1, false).unwrap().values().clone(),
            )
        })
    };
    let one = run(1);
    for t in [2, 3, 8] {
        assert_eq!(run(t), one, "{t} threads");
    }
}

#[test]
fn column_sweep_ties_and_nans_across_row_blocks() {
    // 600 rows span three blocks of the column sweep; column 0 is constant (tie: row 0
    // wins), column 1 has NaN at rows 500 and 300 (the first NaN wins), column 2 has its
    // maximum twice, at rows 270 and 580, and row 270 masked out (row 580 wins)
    let (r, c) = (600usize, 3usize);
    let mut x = ndarray::Array2::<f64>::zeros((r, c));
    x[[500, 1]] = f64::NAN;
    x[[300, 1]] = f64::NAN;
    x[[270, 2]] = 9.0;
    x[[580, 2]] = 9.0;
    let mut m = ndarray::Array2::from_elem((r, c), true);
    m[[270, 2]] = false;
    let a = MaskedArray::from_bool_mask(x.view(), m.view()).unwrap();
    let am = a.argmax(0, false).unwrap();
    assert_eq!(am.values().as_slice().unwrap(), &[0, 300, 580]);
    let an = a.argmin(0, false).unwrap();
    assert_eq!(an.values().as_slice().unwrap(), &[0, 300, 0]);
}

mod stats {
    use super::*;
    use masked::stats::{Moments, Var};
    use masked::{Interpolation, MedianMode};

    fn bits_eq(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(p, q)| same(*p, *q))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// nan-op == op with the mask `!is_nan` ANDed in, built by hand.
        #[test]
        fn nan_ops_equal_ops_with_a_not_nan_mask(c in case(true)) {
            let x = c.array(|v| v);
            let a = c.masked(&x);
            let mut hand = c.clone();
            let valid: Vec<bool> = (0..c.xs.len())
                .map(|i| c.mask.as_ref().is_none_or(|m| m[i]) && !c.xs[i].is_nan())
                .collect();
            hand.mask = Some(valid);
            let b = hand.masked(&x);
            let d = c.dims();
            let k = c.keepdim;
            let pairs: Vec<(Vec<f64>, Vec<f64>)> = vec![
                (a.nansum(d.clone(), k).unwrap().values().iter().copied().collect(), b.sum(d.clone(), k).unwrap().values().iter().copied().collect()),
                (a.nanmean(d.clone(), k).unwrap().values().iter().copied().collect(), b.mean(d.clone(), k).unwrap().values().iter().copied().collect()),
                (a.nanvar(d.clone(), k, 1.0).unwrap().values().iter().copied().collect(), b.var(d.clone(), k, 1.0).unwrap().values().iter().copied().collect()),
                (a.nanmax(d.clone(), k).unwrap().values().iter().copied().collect(), b.amax(d.clone(), k).unwrap().values().iter().copied().collect()),
                (a.nanmedian(d.clone(), k, MedianMode::Avg).unwrap().values().iter().copied().collect(), b.median(d.clone(), k, MedianMode::Avg).unwrap().values().iter().copied().collect()),
                (a.nanquantile(d.clone(), k, 0.3, Interpolation::Nearest).unwrap().values().iter().copied().collect(), b.quantile(d.clone(), k, 0.3, Interpolation::Nearest).unwrap().values().iter().copied().collect()),
            ];
            for (i, (p, q)) in pairs.iter().enumerate() {
                prop_assert!(bits_eq(p, q), "pair {}: {:?} vs {:?}", i, p, q);
            }
            prop_assert_eq!(a.nanmin(d.clone(), k).unwrap().mask_vec(), b.amin(d, k).unwrap().mask_vec());
        }

        /// median == the middle of the sorted valid values; quantile 0 / 1 == min / max.
        #[test]
        fn median_is_the_middle_of_the_sorted_valid_values(c in case(false)) {
            let x = c.array(|v| v);
            let a = c.masked(&x);
            let (lanes, _) = c.lanes();
            let d = c.dims();
            let avg = a.median(d.clone(), false, MedianMode::Avg).unwrap();
            let low = a.median(d.clone(), false, MedianMode::Lower).unwrap();
            let q0 = a.quantile(d.clone(), false, 0.0, Interpolation::Linear).unwrap();
            let q1 = a.quantile(d, false, 1.0, Interpolation::Linear).unwrap();
            for (i, l) in lanes.iter().enumerate() {
                let mut v: Vec<f64> = l.iter().map(|p| p.0).collect();
                v.sort_by(f64::total_cmp);
                let n = v.len();
                let (wa, wl, w0, w1) = if n == 0 {
                    (f64::NAN, f64::NAN, f64::NAN, f64::NAN)
                } else if n % 2 == 1 {
                    (v[n / 2], v[n / 2], v[0], v[n - 1])
                } else {
                    ((v[n / 2 - 1] + v[n / 2]) / 2.0, v[n / 2 - 1], v[0], v[n - 1])
                };
                prop_assert!(same(avg.values().as_slice().unwrap()[i], wa));
                prop_assert!(same(low.values().as_slice().unwrap()[i], wl));
                prop_assert!(same(q0.values().as_slice().unwrap()[i], w0));
                prop_assert!(same(q1.values().as_slice().unwrap()[i], w1));
            }
        }

        /// softmax over the valid elements of a lane sums to 1 (0 outside); log_softmax is
        /// its log; cumsum's last element is the masked sum.
        #[test]
        fn softmax_lanes_sum_to_one(c in case_of(strided_shape(), false), pick in 0usize..4) {
            let x = c.array(|v| v);
            let a = c.masked(&x);
            let dim = (pick % c.shape.len()) as isize;
            let sm = a.softmax(dim).unwrap();
            let ls = a.log_softmax(dim).unwrap();
            let s = sm.values().sum_axis(ndarray::Axis(dim as usize));
            let m = a.count(dim, false).unwrap();
            for (tot, cnt) in s.iter().zip(m.values()) {
                let want = if *cnt > 0 { 1.0 } else { 0.0 };
                prop_assert!((tot - want).abs() < 1e-12, "{} vs {}", tot, want);
            }
            for ((p, l), ok) in sm.values().iter().zip(ls.values()).zip(a.mask_vec()) {
                if ok {
                    prop_assert!((p.ln() - l).abs() < 1e-12);
                } else {
                    prop_assert!(*p == 0.0 && *l == f64::NEG_INFINITY);
                }
            }
            let cs = a.cumsum(dim).unwrap();
            let last = cs.values().index_axis(ndarray::Axis(dim as usize), c.shape[dim as usize] - 1).to_owned();
            let sum = a.sum(dim, false).unwrap();
            prop_assert_eq!(last.iter().copied().collect::<Vec<f64>>(), sum.values().iter().copied().collect::<Vec<f64>>());
        }

        /// The var state of two halves, merged, equals the var of the whole.
        #[test]
        fn merged_var_of_halves_equals_var_of_whole(
            xs in prop::collection::vec(-1e3f64..1e3, 0..3000),
            cut in 0usize..3000,
        ) {
            let cut = cut.min(xs.len());
            let f = Var { correction: 1.0 };
            let whole: Moments = Fold::<f64>::fold_slice(&f, &xs, None);
            let mut a: Moments = Fold::<f64>::fold_slice(&f, &xs[..cut], None);
            let b: Moments = Fold::<f64>::fold_slice(&f, &xs[cut..], None);
            Fold::<f64>::merge(&f, &mut a, b);
            prop_assert_eq!(a.n, whole.n);
            let (va, vw) = (a.var(1.0), whole.var(1.0));
            prop_assert!(same(va, vw) || ((va - vw) / vw).abs() < 1e-10, "{} vs {}", va, vw);
            // and against a plain two-pass reference
            if xs.len() > 1 {
                let mean = xs.iter().sum::<f64>() / xs.len() as f64;
                let r = xs.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / (xs.len() - 1) as f64;
                prop_assert!(((vw - r) / r.max(1e-300)).abs() < 1e-9, "{} vs {}", vw, r);
            }
        }
    }
}

mod median_index {
    use super::*;
    use masked::MedianMode;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

        /// The index points at the first valid element holding the lower median; -1 for
        /// an empty lane; nanmedian ignores NaN, median reports the first valid NaN.
        #[test]
        fn median_index_points_at_the_first_lower_median(c in case(true), pick in 0usize..4) {
            prop_assume!(!c.shape.is_empty());
            let dim = pick % c.shape.len();
            let x = c.array(|v| v);
            let a = c.masked(&x);
            let one = Case { dims: vec![dim], all_dims: false, keepdim: false, ..c.clone() };
            let (lanes, _) = one.lanes();
            let (v, i) = a.nanmedian_with_index(dim as isize, false).unwrap();
            let (pv, pi) = a.median_with_index(dim as isize, false).unwrap();
            let low = a.nanmedian(dim as isize, false, MedianMode::Lower).unwrap();
            for (k, l) in lanes.iter().enumerate() {
                let nonnan: Vec<(f64, i64)> = l.iter().copied().filter(|p| !p.0.is_nan()).collect();
                let (vk, ik) = (v.values().as_slice().unwrap()[k], i.values().as_slice().unwrap()[k]);
                prop_assert!(same(vk, low.values().as_slice().unwrap()[k]));
                if nonnan.is_empty() {
                    prop_assert_eq!(ik, -1);
                    prop_assert!(vk.is_nan());
                } else {
                    let first = nonnan.iter().find(|p| p.0 == vk).map(|p| p.1);
                    prop_assert_eq!(Some(ik), first);
                }
                let (pvk, pik) = (pv.values().as_slice().unwrap()[k], pi.values().as_slice().unwrap()[k]);
                match l.iter().find(|p| p.0.is_nan()) {
                    Some(p) => {
                        prop_assert!(pvk.is_nan());
                        prop_assert_eq!(pik, p.1);
                    }
                    None if l.is_empty() => prop_assert_eq!(pik, -1),
                    None => prop_assert_eq!(Some(pik), l.iter().find(|p| p.0 == pvk).map(|p| p.1)),
                }
            }
        }
    }

    #[test]
    fn nanmedian_with_index_hand_checked() {
        // torch.nanmedian(torch.tensor([[3., nan, 1., 2., 2.], [nan, nan, nan, nan, nan]]), 1)
        // -> values [2., nan], indices [3, 2] (torch 2.15: an arbitrary index for the
        // all-NaN row); ours gives -1 there by contract, and an invalid output position
        let n = f64::NAN;
        let x = ndarray::array![[3.0f64, n, 1.0, 2.0, 2.0], [n, n, n, n, n]];
        let a = MaskedArray::unmasked(x.view());
        let (v, i): (MaskedArrayD<f64>, MaskedArrayD<i64>) =
            a.nanmedian_with_index(1, true).unwrap();
        assert_eq!(v.shape(), &[2, 1]);
        assert_eq!(v.values()[[0, 0]], 2.0);
        assert!(v.values()[[1, 0]].is_nan());
        assert_eq!(i.values().as_slice().unwrap(), &[3, -1]);
        assert_eq!(i.mask_vec(), vec![true, false]);
    }
}
