//! Helpers shared by the attention crate's test files.

/// Asserts `got` within `tol` of `want` element by element, relative to `1 + |want|`,
/// naming `what` and the first index that is not.
pub fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}
