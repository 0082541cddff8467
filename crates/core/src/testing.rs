//! What the layouts' unit tests share (not part of the API): the lane maps whose tiled,
//! column and scattered forms are checked against the map run on each lane alone, with
//! their tolerances, and the closeness rule of those checks. One list, so that a lane map
//! added here is checked in every form.

use crate::element::Element;
use crate::lane::{LaneMap, Normalize, Softmax, SoftmaxKind};

/// `got` within `tol` relative and `abs` absolute of a finite `want`, or equal to it
/// (infinities), or both NaN.
pub fn close(got: f64, want: f64, (tol, abs): (f64, f64)) -> bool {
    got == want
        || (got.is_nan() && want.is_nan())
        || (want.is_finite() && (got - want).abs() <= tol * want.abs() + abs)
}

/// Asserts [`close`] at every slot of `got` and `want`, naming the map, the dtype, the
/// slot and `what` (the case) where they differ.
pub fn assert_all_close<T: Element, M: LaneMap<T>>(
    map: &M, got: &[M::Output], want: &[M::Output], tol: (f64, f64), what: impl Fn(usize) -> String,
) {
    assert_eq!(
        got.len(),
        want.len(),
        "{} {}: lengths",
        map.name(),
        T::DTYPE
    );
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        let at = || what(k);
        assert!(
            close(g.to_f64(), w.to_f64(), tol),
            "{} {} {} at {k}: {g:?} vs {w:?}",
            map.name(),
            T::DTYPE,
            at()
        );
    }
}

/// Values and validity for the checks along lanes, given each element's lane and its
/// place in the lane (in storage order): NaN, +inf and -inf at the 8th element of lanes 1,
/// 2 and 4, lane 5 all 0 (a norm below normalize's eps), values with ties elsewhere;
/// valid at random, and every lane 3 (mod 7) masked out in full.
pub fn lane_inputs<T>(
    at: impl IntoIterator<Item = (usize, usize)>, of: fn(f64) -> T,
) -> (Vec<T>, Vec<bool>) {
    at.into_iter()
        .enumerate()
        .map(|(k, (lane, place))| {
            let x = match (lane, place) {
                (1, 7) => f64::NAN,
                (2, 7) => f64::INFINITY,
                (4, 7) => f64::NEG_INFINITY,
                (5, _) => 0.0,
                _ => ((k * 7919) % 101) as f64 / 9.0 - 5.0,
            };
            let valid = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 62 != 0 && lane % 7 != 3;
            (of(x), valid)
        })
        .unzip()
}

/// A check of one lane map in one dtype (`of` makes the dtype's values): generic over
/// both, hence a trait and not a closure.
pub trait MapCheck {
    /// Checks `map` on values made by `of`, within `tol` (relative, absolute).
    fn check<T: Element, M: LaneMap<T>>(&mut self, map: &M, of: fn(f64) -> T, tol: (f64, f64));
}

/// Runs `c` on the softmax family (f64, f32, f16) and the 2-norm normalize (f64, f32),
/// each within the tolerance of sums run in another order (f16: computed in f32, also
/// within its smallest subnormal).
pub fn lane_maps(c: &mut impl MapCheck) {
    for kind in [
        SoftmaxKind::Softmax,
        SoftmaxKind::LogSoftmax,
        SoftmaxKind::Softmin,
    ] {
        let m = Softmax { kind };
        c.check::<f64, _>(&m, |v| v, (1e-13, 0.0));
        c.check::<f32, _>(&m, |v| v as f32, (1e-5, 0.0));
        c.check::<half::f16, _>(&m, half::f16::from_f64, (1e-3, 2f64.powi(-24)));
    }
    let m = Normalize::new(2.0, 1e-12).expect("a valid norm order and eps");
    c.check::<f64, _>(&m, |v| v, (1e-13, 0.0));
    c.check::<f32, _>(&m, |v| v as f32, (1e-5, 0.0));
}
