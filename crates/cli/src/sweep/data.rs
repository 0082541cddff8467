//! The sweep's data: one logical masked matrix (stored entries, their values and a mask),
//! built in every layout from the same positions and values, so each layout computes the
//! same work.

use crate::error::CliError;
use masked::{BitMask, CooMask, CooPattern, Element, MaskedCoo, PatternI};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use sprs::CsMatI;

/// Where the mask's valid positions come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structure {
    /// The stored entries themselves (a graph's edges, a recommender's interactions).
    Pattern,
    /// Each element valid with probability `p`, independent of what is stored.
    Random,
    /// Padding: row `r` valid in its first `len_r` columns, lengths uniform with mean
    /// `p * C`.
    Lengths,
    /// Causal attention: column `c` valid in row `r` when `c <= r * C / R` (density
    /// about 0.5, whatever `p`).
    Causal,
    /// A band (sliding-window attention): `|c - r * C / R| <= w` with `w = p * C / 2`.
    Banded,
}

impl Structure {
    /// Every structure, in the order of the docs.
    pub const ALL: [Structure; 5] = [
        Structure::Pattern,
        Structure::Random,
        Structure::Lengths,
        Structure::Causal,
        Structure::Banded,
    ];

    /// The name on the command line and in the results.
    pub fn name(self) -> &'static str {
        match self {
            Structure::Pattern => "pattern",
            Structure::Random => "random",
            Structure::Lengths => "lengths",
            Structure::Causal => "causal",
            Structure::Banded => "banded",
        }
    }

    /// Whether a mask density `p` shapes this structure (pattern and causal have their
    /// own density).
    pub fn takes_density(self) -> bool {
        matches!(
            self,
            Structure::Random | Structure::Lengths | Structure::Banded
        )
    }
}

impl std::str::FromStr for Structure {
    type Err = CliError;
    fn from_str(s: &str) -> Result<Self, CliError> {
        Structure::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                CliError::Usage(format!(
                    "unknown mask structure '{s}': expected pattern, random, lengths, causal or banded"
                ))
            })
    }
}

/// The CSR layout of a point: the stored matrix (`u32` column indices) and the mask as a
/// separate pattern, `None` when it is the stored pattern.
pub type CsrParts<T> = (CsMatI<T, u32, usize>, Option<PatternI<u32>>);

/// A masked `R x C` matrix as positions and values, the source of every layout.
#[derive(Debug, Clone)]
pub struct Logical<T> {
    /// `[R, C]`.
    pub shape: [usize; 2],
    /// Flat row-major positions of the stored entries, increasing.
    pub stored: Vec<usize>,
    /// One value per stored entry (standard normal; never exactly zero in practice).
    pub values: Vec<T>,
    /// Flat positions of the valid elements, increasing; `None` when they are the stored
    /// entries ([`Structure::Pattern`]).
    pub mask: Option<Vec<usize>>,
}

/// Sorted positions below `n`, each kept with probability `p`: a Bernoulli process drawn
/// by geometric gaps, so the work is O(kept) and not O(n).
pub fn bernoulli_positions(rng: &mut SmallRng, n: usize, p: f64) -> Vec<usize> {
    if p <= 0.0 || n == 0 {
        return Vec::new();
    }
    if p >= 1.0 {
        return (0..n).collect();
    }
    let mut out = Vec::with_capacity(((n as f64 * p) * 1.01) as usize + 16);
    let log_q = (-p).ln_1p(); // ln(1 - p) < 0
    let mut pos = 0f64;
    let end = n as f64;
    loop {
        let u: f64 = rng.random(); // [0, 1)
        pos += ((-u).ln_1p() / log_q).floor(); // geometric gap: failures before a keep
        if pos >= end {
            return out;
        }
        out.push(pos as usize);
        pos += 1.0;
    }
}

/// The valid positions of a structured mask, row by row.
fn structured(shape: [usize; 2], s: Structure, p: f64, rng: &mut SmallRng) -> Vec<usize> {
    let [r, c] = shape;
    let mut out = Vec::new();
    for row in 0..r {
        // the diagonal column of this row (square: `row`)
        let diag = if r <= 1 { 0 } else { row * (c - 1) / (r - 1) };
        let (lo, hi) = match s {
            Structure::Lengths => {
                // uniform on [max(0, 2p - 1), min(1, 2p)]: mean p
                let (a, b) = ((2.0 * p - 1.0).max(0.0), (2.0 * p).min(1.0));
                let len = ((a + (b - a) * rng.random::<f64>()) * c as f64).round() as usize;
                (0, len.min(c))
            }
            Structure::Causal => (0, (diag + 1).min(c)),
            Structure::Banded => {
                let w = (p * c as f64 / 2.0).round() as usize;
                (diag.saturating_sub(w), (diag + w + 1).min(c))
            }
            Structure::Pattern | Structure::Random => unreachable!("not row-structured"),
        };
        out.extend((lo..hi).map(|col| row * c + col));
    }
    out
}

/// A standard normal value as `T` (integers: x 100, rounded, as the bench draws them).
fn normal<T: Element>(rng: &mut SmallRng) -> T {
    let x: f64 = rng.sample(rand_distr::StandardNormal);
    if T::DTYPE.is_float() {
        T::from_f64_lossy(x)
    } else {
        T::from_f64_lossy((x * 100.0).round())
    }
}

impl<T: Element> Logical<T> {
    /// Draws the stored entries (density `d`, uniformly placed, standard normal values)
    /// and the mask (`structure`, with density `p` where it takes one), seeded.
    pub fn generate(shape: [usize; 2], d: f64, structure: Structure, p: f64, seed: u64) -> Self {
        let n = shape[0] * shape[1];
        let mut rng = SmallRng::seed_from_u64(seed);
        let stored = bernoulli_positions(&mut rng, n, d);
        let values = (0..stored.len()).map(|_| normal(&mut rng)).collect();
        // the mask draws from its own stream: the stored entries of a point do not depend
        // on the structure of its mask
        let mut mrng = SmallRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15);
        let mask = match structure {
            Structure::Pattern => None,
            Structure::Random => Some(bernoulli_positions(&mut mrng, n, p)),
            s => Some(structured(shape, s, p, &mut mrng)),
        };
        Logical {
            shape,
            stored,
            values,
            mask,
        }
    }

    /// Elements of the matrix.
    pub fn elements(&self) -> usize {
        self.shape[0] * self.shape[1]
    }

    /// The valid positions.
    pub fn valid(&self) -> &[usize] {
        self.mask.as_deref().unwrap_or(&self.stored)
    }

    /// The dense layout: zeros where nothing is stored, and the mask as bits.
    pub fn dense(&self) -> Result<(Vec<T>, BitMask), CliError> {
        let mut values = vec![T::default(); self.elements()];
        for (&f, &v) in self.stored.iter().zip(&self.values) {
            values[f] = v;
        }
        let mut words = vec![0u64; self.elements().div_ceil(64)];
        for &f in self.valid() {
            words[f / 64] |= 1 << (f % 64);
        }
        Ok((values, BitMask::from_words(&self.shape, words)?))
    }

    /// CSR row pointer and `u32` column indices of sorted flat positions.
    fn csr_parts(&self, flat: &[usize]) -> (Vec<usize>, Vec<u32>) {
        let [r, c] = self.shape;
        let mut indptr = vec![0usize; r + 1];
        let mut indices = Vec::with_capacity(flat.len());
        for &f in flat {
            indptr[f / c + 1] += 1;
            indices.push((f % c) as u32);
        }
        for i in 0..r {
            indptr[i + 1] += indptr[i];
        }
        (indptr, indices)
    }

    /// The CSR layout: the stored entries, and the mask as a separate [`Pattern`](masked::Pattern) unless it
    /// is the stored pattern.
    pub fn csr(&self) -> Result<CsrParts<T>, CliError> {
        if u32::try_from(self.shape[1]).is_err() {
            return Err(CliError::Usage(format!(
                "{} columns exceed the sweep's u32 column indices",
                self.shape[1]
            )));
        }
        let (indptr, indices) = self.csr_parts(&self.stored);
        let mat = CsMatI::try_new(
            (self.shape[0], self.shape[1]),
            indptr,
            indices,
            self.values.clone(),
        )
        .map_err(|(_, _, _, e)| CliError::Usage(format!("generated matrix: {e}")))?;
        let mask = match &self.mask {
            None => None,
            Some(m) => {
                let (p, i) = self.csr_parts(m);
                Some(PatternI::try_from_parts(
                    (self.shape[0], self.shape[1]),
                    p,
                    i,
                )?)
            }
        };
        Ok((mat, mask))
    }

    /// The COO layout: the stored entries, the mask their pattern or a separate one.
    pub fn coo(&self) -> Result<MaskedCoo<T>, CliError> {
        let pattern = CooPattern::from_flat(self.shape, &self.stored)?;
        let mask = match &self.mask {
            None => CooMask::Stored,
            Some(m) => CooMask::Pattern(CooPattern::from_flat(self.shape, m)?),
        };
        Ok(MaskedCoo::from_parts(pattern, self.values.clone(), mask)?)
    }

    /// Bytes an ideal kernel reads on `layout` (`dense`, `csr`, `coo`), at the index
    /// widths the sweep uses: dense values and one mask bit per element; CSR values,
    /// `u32` column indices and `usize` row pointers (twice with a separate mask
    /// pattern); COO values and two `usize` coordinates per entry (and per mask entry).
    pub fn ideal_bytes(&self, layout: &str) -> f64 {
        let t = std::mem::size_of::<T>() as f64;
        let (n, nnz, rows) = (
            self.elements() as f64,
            self.stored.len() as f64,
            self.shape[0] as f64 + 1.0,
        );
        let m = self.mask.as_ref().map_or(0.0, |m| m.len() as f64);
        let separate = f64::from(u8::from(self.mask.is_some()));
        match layout {
            "dense" => n * t + (n / 8.0).ceil(),
            "csr" => nnz * (t + 4.0) + rows * 8.0 + separate * (m * 4.0 + rows * 8.0),
            "coo" => nnz * (t + 16.0) + m * 16.0,
            _ => 0.0,
        }
    }

    /// Bytes the sweep holds for this point in every layout at once (the positions, the
    /// dense array and mask, CSR and COO), for the memory ceiling.
    pub fn estimate_bytes(shape: [usize; 2], d: f64, p: f64) -> u128 {
        let n = shape[0] as u128 * shape[1] as u128;
        let t = std::mem::size_of::<T>() as u128;
        let nnz = (n as f64 * d.clamp(0.0, 1.0) * 1.01) as u128 + 16;
        let m = (n as f64 * p.clamp(0.0, 1.0) * 1.01) as u128 + 16;
        n * t + n / 8 + nnz * (8 + 2 * t + 4 + 16) + m * (8 + 4 + 16) + shape[0] as u128 * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bernoulli_positions_have_the_asked_density_and_are_sorted() {
        let mut rng = SmallRng::seed_from_u64(7);
        for &p in &[1e-4, 1e-2, 0.3, 0.9] {
            let n = 2_000_000;
            let v = bernoulli_positions(&mut rng, n, p);
            assert!(v.windows(2).all(|w| w[0] < w[1]));
            assert!(v.last().is_none_or(|&l| l < n));
            let expect = n as f64 * p;
            let sd = (n as f64 * p * (1.0 - p)).sqrt();
            assert!(
                (v.len() as f64 - expect).abs() < 5.0 * sd + 1.0,
                "p {p}: {} kept, expected {expect}",
                v.len()
            );
        }
        assert_eq!(
            bernoulli_positions(&mut rng, 10, 1.0),
            (0..10).collect::<Vec<_>>()
        );
        assert!(bernoulli_positions(&mut rng, 10, 0.0).is_empty());
    }

    #[test]
    fn structures_have_their_density() {
        let shape = [400, 400];
        let mut rng = SmallRng::seed_from_u64(1);
        let causal = structured(shape, Structure::Causal, 0.0, &mut rng);
        assert_eq!(causal.len(), 400 * 401 / 2);
        assert!(causal.contains(&(3 * 400 + 3)) && !causal.contains(&(3 * 400 + 4)));
        let band = structured(shape, Structure::Banded, 0.05, &mut rng);
        // w = 10: 21 per row, fewer at the edges
        assert_eq!(band.len(), 400 * 21 - 2 * (10 * 11 / 2));
        let len = structured(shape, Structure::Lengths, 0.25, &mut rng);
        let frac = len.len() as f64 / 160_000.0;
        assert!((frac - 0.25).abs() < 0.03, "lengths density {frac}");
        // every row's valid columns are a prefix
        for row in 0..400 {
            let cols: Vec<usize> = len
                .iter()
                .filter(|&&f| f / 400 == row)
                .map(|&f| f % 400)
                .collect();
            assert_eq!(cols, (0..cols.len()).collect::<Vec<_>>());
        }
    }
}
