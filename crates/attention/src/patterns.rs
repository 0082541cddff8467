//! Generated attention patterns by name (what `masked attention --pattern` and `masked
//! bench --pattern` take): `causal`, `band:W`, `random:P`, `lengths[:L]`.

use layout_csr::Pattern;
use masked_core::{MaskedError, Result};

/// A pattern kind by name.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PatternSpec {
    /// Each query sees itself and every key before it.
    Causal,
    /// Each query sees itself and the `W − 1` keys before it (a sliding window).
    Band(usize),
    /// Each (query, key) pair valid with probability `P`, independently, plus the
    /// diagonal.
    Random(f64),
    /// Padding: the first `L` queries see the first `L` keys, the rest see none (one
    /// padded sequence). `None`: `L` drawn uniformly from `[n/2, n]` per pattern.
    Lengths(Option<usize>),
}

impl std::str::FromStr for PatternSpec {
    type Err = MaskedError;
    fn from_str(s: &str) -> Result<PatternSpec> {
        let bad = |reason: &'static str| MaskedError::InvalidArgument {
            name: "pattern",
            value: s.to_string(),
            reason,
        };
        let expected = "expected causal, band:W, random:P or lengths[:L]";
        match s.split_once(':') {
            None if s == "causal" => Ok(PatternSpec::Causal),
            None if s == "lengths" => Ok(PatternSpec::Lengths(None)),
            Some(("band", w)) => match w.parse::<usize>() {
                Ok(w) if w >= 1 => Ok(PatternSpec::Band(w)),
                _ => Err(bad("band:W takes a window W of at least 1")),
            },
            Some(("random", p)) => match p.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(PatternSpec::Random(p)),
                _ => Err(bad("random:P takes a probability P in [0, 1]")),
            },
            Some(("lengths", l)) => l
                .parse::<usize>()
                .map(|l| PatternSpec::Lengths(Some(l)))
                .map_err(|_| bad("lengths:L takes a length L")),
            _ => Err(bad(expected)),
        }
    }
}

/// A small seeded generator (xorshift64*), so patterns are reproducible without a
/// dependency.
struct Rng(u64);
impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        ((x >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

impl PatternSpec {
    /// The `n × m` pattern of this kind (`seed` for the random kinds).
    ///
    /// # Errors
    /// A length above `n` or `m`; a pattern too large to allocate.
    pub fn generate(self, n: usize, m: usize, seed: u64) -> Result<Pattern> {
        let mut rng = Rng::new(seed);
        match self {
            PatternSpec::Causal => Pattern::banded([n, m], n.max(1) - 1, 0),
            PatternSpec::Band(w) => Pattern::banded([n, m], w - 1, 0),
            PatternSpec::Lengths(l) => {
                let len = match l {
                    Some(l) => l,
                    None => {
                        let lo = n.min(m) / 2;
                        lo + ((rng.unit() * (n.min(m) - lo + 1) as f64) as usize).min(n.min(m) - lo)
                    }
                };
                if len > n || len > m {
                    return Err(MaskedError::LengthOutOfRange {
                        row: 0,
                        length: len,
                        max: n.min(m),
                    });
                }
                let mut lengths = masked_core::try_vec(n, || "a pattern's lengths".into())?;
                lengths.extend((0..n).map(|i| if i < len { len } else { 0 }));
                Pattern::from_lengths([n, m], &lengths)
            }
            PatternSpec::Random(p) => {
                // per row: geometric gaps between valid keys (O(nnz), not O(n·m)), and
                // the diagonal
                let mut indptr =
                    masked_core::try_vec(n.saturating_add(1), || "a pattern's row pointer".into())?;
                indptr.push(0);
                let expect = ((n as f64 * m as f64 * p) as usize).saturating_add(n);
                let mut indices: Vec<usize> =
                    masked_core::try_vec(expect.saturating_add(expect / 8), || {
                        "a pattern's indices".into()
                    })?;
                let ln_q = (1.0 - p).ln();
                for i in 0..n {
                    let mut j = 0usize;
                    let mut diag = i >= m;
                    loop {
                        if p <= 0.0 {
                            break;
                        }
                        let gap = if p >= 1.0 {
                            0.0
                        } else {
                            (rng.unit().ln() / ln_q).floor()
                        };
                        if gap >= (m - j) as f64 {
                            break;
                        }
                        j += gap as usize;
                        if !diag && i < j {
                            indices.push(i);
                            diag = true;
                        }
                        if j == i {
                            diag = true;
                        }
                        indices.push(j);
                        j += 1;
                        if j >= m {
                            break;
                        }
                    }
                    if !diag {
                        indices.push(i);
                    }
                    indptr.push(indices.len());
                }
                Pattern::try_from_parts((n, m), indptr, indices)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_patterns_have_their_shapes() {
        let c: PatternSpec = "causal".parse().unwrap();
        assert_eq!(c.generate(4, 4, 0).unwrap().nnz(), 10);
        let b: PatternSpec = "band:2".parse().unwrap();
        let p = b.generate(4, 4, 0).unwrap();
        assert_eq!(p.row(0), &[0]);
        assert_eq!(p.row(3), &[2, 3]);
        let l: PatternSpec = "lengths:3".parse().unwrap();
        let p = l.generate(4, 4, 0).unwrap();
        assert_eq!(p.row(2), &[0, 1, 2]);
        assert!(p.row(3).is_empty());
        for bad in ["band:0", "random:2", "lengths:x", "window", "random:-0.1"] {
            assert!(bad.parse::<PatternSpec>().is_err(), "{bad}");
        }
        assert!(PatternSpec::Lengths(Some(5)).generate(4, 4, 0).is_err());
    }

    #[test]
    fn random_patterns_hold_the_diagonal_and_about_p_of_the_pairs() {
        let n = 2000;
        let p = PatternSpec::Random(0.05).generate(n, n, 7).unwrap();
        for i in 0..n {
            assert!(p.row(i).contains(&i), "row {i} lacks its diagonal");
        }
        let expected = 0.05 * (n * n) as f64 + n as f64 * 0.95;
        let got = p.nnz() as f64;
        assert!(
            (got - expected).abs() < 0.02 * expected,
            "{got} vs {expected}"
        );
        assert_eq!(PatternSpec::Random(0.0).generate(5, 5, 0).unwrap().nnz(), 5);
        assert_eq!(
            PatternSpec::Random(1.0).generate(5, 6, 0).unwrap().nnz(),
            30
        );
        // a seed changes the pattern
        let q = PatternSpec::Random(0.05).generate(n, n, 8).unwrap();
        assert_ne!(p, q);
    }
}
