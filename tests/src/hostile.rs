//! Hostile inputs for every public constructor and for the by-name dispatcher, written
//! once: the no-panic property tests (`conformance/no_panic.rs`, proptest) and the fuzz
//! targets (`fuzz/fuzz_targets/`, libFuzzer) build the same case types and call the
//! same functions, so both feed every entry point.
//!
//! Each function returns normally when every call gave `Ok` or a typed `Err`; a panic
//! is the failure (proptest and libFuzzer both catch it). Where two constructors accept
//! the same input they must agree, which [`run_constructors`] checks as well.

use masked::by_name::{apply, Op, OpRequest};
use masked::{
    BitMask, CooMask, CooPattern, DType, Dims, MaskedArray, MaskedCoo, MaskedCsr, Pattern,
    SparseArray,
};
use ndarray::ArrayD;

/// A dim size from one byte: mostly small (0 to 5), sometimes one of the sizes whose
/// element count passes what any layout can address (`usize::MAX`, `2^62`, `2^61 + 1`),
/// so a shape either holds few elements or must be refused; a size between the two
/// would be a legitimate request for terabytes, which is the caller's to make.
pub fn dim_from(code: u8) -> usize {
    match code % 16 {
        13 => usize::MAX,
        14 => 1 << 62,
        15 => (1 << 61) + 1,
        c => (c % 6) as usize,
    }
}

/// An index from one byte: mostly in range of small shapes, sometimes far out of it.
pub fn index_from(code: u8) -> usize {
    match code % 16 {
        14 => usize::MAX,
        15 => 1 << 40,
        c => (c % 7) as usize,
    }
}

/// The arguments fed to every constructor of masks, patterns and masked containers.
#[derive(Debug, Clone, Default)]
pub struct ConstructorCase {
    /// The shape (any rank; sizes from [`dim_from`]).
    pub shape: Vec<usize>,
    /// A second shape, for reshape, broadcasting and mismatched operands.
    pub other_shape: Vec<usize>,
    /// Coordinates, one vector per dim (possibly ragged, out of range, duplicated).
    pub coords: Vec<Vec<usize>>,
    /// Flat positions.
    pub flat: Vec<usize>,
    /// Padding lengths.
    pub lengths: Vec<usize>,
    /// Band widths (lower, upper).
    pub band: (usize, usize),
    /// A causal mask's size.
    pub n: usize,
    /// Bools (a mask's elements; any count).
    pub bools: Vec<bool>,
    /// A CSR row pointer.
    pub indptr: Vec<usize>,
    /// CSR column indices.
    pub indices: Vec<usize>,
    /// A bit mask's words.
    pub words: Vec<u64>,
    /// Values (any count).
    pub values: Vec<f64>,
}

fn two(shape: &[usize]) -> (usize, usize) {
    (
        shape.first().copied().unwrap_or(0),
        shape.get(1).copied().unwrap_or(0),
    )
}

/// Calls every public constructor of [`BitMask`], [`Pattern`], [`CooPattern`],
/// [`MaskedCoo`], [`MaskedArray`], [`MaskedCsr`] and [`SparseArray`] (and the mask
/// operators) on the case, and checks that constructors given the same positions agree
/// on their count.
pub fn run_constructors(c: &ConstructorCase) {
    let shape = &c.shape[..];
    let other = &c.other_shape[..];
    let (lo, up) = c.band;

    // bit masks
    let filled = BitMask::filled(shape, true);
    let _ = BitMask::full(shape);
    let _ = BitMask::from_lengths(shape, &c.lengths);
    let _ = BitMask::banded(shape, lo, up);
    let _ = BitMask::causal(c.n);
    let bm_coords = BitMask::from_coords(shape, &c.coords);
    let bm_bools = BitMask::from_bools(shape, c.bools.iter());
    let _ = BitMask::from_words(shape, c.words.clone());
    if let Ok(m) = &bm_bools {
        let _ = m.clone().reshape(other);
        let _ = m.broadcast_to(other);
        if let Ok(o) = BitMask::from_bools(other, c.bools.iter().rev()) {
            let _ = m.and(&o);
            let _ = m.or(&o);
            let _ = m.xor(&o);
            let _ = m.and_not(&o);
            let _ = m & &o;
            let _ = !m;
        }
    }
    if let Ok(m) = &filled {
        assert_eq!(m.count_ones(), m.len(), "BitMask::filled(true) counts");
    }

    // CSR patterns
    let (r, cols) = two(shape);
    let csr_coords = Pattern::from_coords(shape, &c.coords);
    let csr_bools = Pattern::from_bools(shape, c.bools.iter());
    let _ = Pattern::from_lengths(shape, &c.lengths);
    let _ = Pattern::causal(c.n);
    let _ = Pattern::banded(shape, lo, up);
    let _ = Pattern::full(shape);
    if let (Ok(a), Ok(b)) = (&csr_coords, &csr_bools) {
        let _ = a & b;
        let _ = a | b;
        let _ = a ^ b;
    }

    // attention: generated patterns, plans, and attention on the case's shapes (mismatched
    // or huge ones are errors, never a panic)
    {
        use masked::attention::patterns::PatternSpec;
        use masked::attention::{attention, attention_vjp, AttentionPlan, Options};
        for spec in [
            PatternSpec::Causal,
            PatternSpec::Band(lo.max(1)),
            PatternSpec::Random(0.3),
            PatternSpec::Lengths(Some(c.n)),
            PatternSpec::Lengths(None),
        ] {
            // sizes a test can walk (a generated pattern visits every row)
            if r <= 64 && cols <= 64 {
                let _ = spec.generate(r, cols, c.n as u64);
            } else {
                let _ = spec.generate(r, 0, 0).err();
            }
        }
        if let Ok(p) = &csr_bools {
            let plan = AttentionPlan::new(p.clone());
            let _ = AttentionPlan::per_batch(vec![p.clone(), p.clone()]);
            let _ = plan.prepare_backward();
            if let (Ok(q), Ok(k)) = (
                ArrayD::from_shape_vec(shape, c.values.clone()),
                ArrayD::from_shape_vec(other, c.values.clone()),
            ) {
                let o = Options::default();
                let _ = attention(q.view(), k.view(), k.view(), &plan, &o);
                let _ = attention_vjp(q.view(), k.view(), k.view(), &plan, &o, q.view());
                let _ = attention(q.view(), q.view(), q.view(), &plan, &o);
                let _ = attention_vjp(q.view(), q.view(), q.view(), &plan, &o, q.view());
            }
        }
    }

    // COO patterns
    let coo_coords = CooPattern::from_coords(shape, &c.coords);
    let _ = CooPattern::from_flat(shape, &c.flat);
    let coo_bools = CooPattern::from_bools(shape, c.bools.iter());
    let _ = CooPattern::from_lengths(shape, &c.lengths);
    let _ = CooPattern::banded(shape, lo, up);
    let _ = CooPattern::causal(c.n);
    let _ = CooPattern::full(shape);
    if let (Ok(a), Ok(b)) = (&coo_coords, &coo_bools) {
        let _ = a & b;
        let _ = a | b;
        let _ = a ^ b;
    }

    // the same positions, three ways: the same count where all three accept them
    if let (Ok(m), Ok(p), Ok(q)) = (&bm_bools, &csr_bools, &coo_bools) {
        assert_eq!(m.count_ones(), p.nnz(), "from_bools: BitMask vs CSR");
        assert_eq!(m.count_ones(), q.nnz(), "from_bools: BitMask vs COO");
    }
    if let (Ok(p), Ok(q)) = (&csr_coords, &coo_coords) {
        assert_eq!(p.nnz(), q.nnz(), "from_coords: CSR vs COO");
    }
    if let (Ok(m), Ok(q)) = (&bm_coords, &coo_coords) {
        assert_eq!(m.count_ones(), q.nnz(), "from_coords: BitMask vs COO");
    }

    // masked containers
    for mask in [CooMask::Stored, CooMask::All] {
        let _ = MaskedCoo::try_new(shape, &c.coords, c.values.clone(), mask);
    }
    let _ = MaskedCoo::from_pattern(shape, &c.coords, c.values.clone());
    let _ = MaskedCoo::unmasked(shape, &c.coords, c.values.clone());
    if let Ok(p) = &coo_bools {
        let _ = MaskedCoo::with_mask(shape, &c.coords, c.values.clone(), p.clone());
        if let Ok(q) = CooPattern::from_flat(shape, &c.flat) {
            let _ = MaskedCoo::from_parts(q, c.values.clone(), CooMask::Pattern(p.clone()));
        }
    }
    let _ = SparseArray::new(shape.to_vec(), c.flat.clone(), c.values.clone());
    if let Ok(data) = ArrayD::from_shape_vec(shape, c.values.clone())
        && let Ok(m) = BitMask::from_bools(other, c.bools.iter())
    {
        let _ = MaskedArray::new(data.view(), m);
    }
    // a CsMat from parts our own pattern check accepted (sprs 0.11's own
    // `CsMat::try_new` overflows on a row pointer near usize::MAX: not fed hostile parts)
    let parts = Pattern::try_from_parts((r, cols), c.indptr.clone(), c.indices.clone());
    if let Some(mat) = parts.ok().filter(|p| p.nnz() == c.values.len()).map(|p| {
        sprs::CsMat::new(
            (r, cols),
            p.indptr().to_vec(),
            p.indices().to_vec(),
            c.values.clone(),
        )
    }) {
        let _ = MaskedCsr::from_pattern(mat.view());
        let _ = MaskedCsr::unmasked(mat.view());
        if let Ok(p) = &csr_bools {
            let _ = MaskedCsr::with_mask(mat.view(), p.clone());
        }
    }
}

/// Option texts a request may be given: valid, out of range and unparsable.
pub const TEXTS: &[&str] = &[
    "0", "1", "-1", "2", "0.5", "-0.5", "1.5", "nan", "inf", "-inf", "1e308", "abc", "", "linear",
    "lower", "higher", "midpoint", "nearest", "true", "false", "fro", "3",
];

const SPECIALS: &[f64] = &[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.0, -0.0, 1e308];

/// One by-name request on one input: what [`run_request`] runs on every layout.
#[derive(Debug, Clone, Default)]
pub struct RequestCase {
    /// The input's shape (small: it is materialised).
    pub shape: Vec<usize>,
    /// Seed of the values (NaN and infinities included) and the mask.
    pub seed: u64,
    /// Index into [`Op::ALL`] (wrapped).
    pub op: usize,
    /// The dims, or all dims; out of range and repeated dims included.
    pub dims: Option<Vec<isize>>,
    /// keepdim.
    pub keepdim: bool,
    /// (index into the op's options, index into [`TEXTS`]) pairs, wrapped.
    pub options: Vec<(usize, usize)>,
    /// Index into f32, f64, i64, f16 for the request's dtype.
    pub dtype: Option<usize>,
}

/// Values and validity of `n` elements from `seed`.
fn data(n: usize, seed: u64) -> (Vec<f64>, Vec<bool>) {
    let mut s = seed | 1;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let v = (0..n)
        .map(|_| match next() % 8 {
            0 => SPECIALS[(next() % SPECIALS.len() as u64) as usize],
            _ => (next() % 200) as f64 / 10.0 - 10.0,
        })
        .collect();
    let m = (0..n).map(|_| next() % 3 != 0).collect();
    (v, m)
}

/// Runs the request on dense, on COO (masked by its stored pattern and mask-free) and,
/// for 2-d shapes, on CSR (the same two ways). Every call must return `Ok` or a typed
/// `Err`. Shapes of more than 4096 elements are skipped (the input is materialised).
pub fn run_request(c: &RequestCase) {
    let n = c
        .shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .unwrap_or(usize::MAX);
    if n > 4096 || Op::ALL.is_empty() {
        return;
    }
    let shape = &c.shape;
    let op = Op::ALL[c.op % Op::ALL.len()];
    let mut req = OpRequest::from_op(op).keepdim(c.keepdim);
    req = match &c.dims {
        Some(d) => req.dims(Dims::Set(d.clone())),
        None => req.dims(Dims::All),
    };
    for &(o, t) in &c.options {
        let names = op.options();
        if !names.is_empty() {
            let _ = req.set_option(names[o % names.len()], TEXTS[t % TEXTS.len()]);
        }
    }
    if let Some(d) = c.dtype {
        req = req.dtype([DType::F32, DType::F64, DType::I64, DType::F16][d % 4]);
    }
    let (v, m) = data(n, c.seed);
    let values = ArrayD::from_shape_vec(shape.clone(), v.clone()).expect("n elements");
    let mask = BitMask::from_bools(shape, m.iter()).expect("n bools");
    let dense = MaskedArray::new(values.view(), mask).expect("mask of the shape");
    let _ = apply(&dense, &req);
    // the valid positions as the stored entries
    let idx: Vec<usize> = (0..n).filter(|&i| m[i]).collect();
    let coords: Vec<Vec<usize>> = (0..shape.len())
        .map(|d| {
            let inner: usize = shape[d + 1..].iter().product();
            idx.iter()
                .map(|&i| (i / inner.max(1)) % shape[d].max(1))
                .collect()
        })
        .collect();
    let vals: Vec<f64> = idx.iter().map(|&i| v[i]).collect();
    for mask in [CooMask::Stored, CooMask::All] {
        let coo = MaskedCoo::try_new(shape, &coords, vals.clone(), mask).expect("valid COO");
        let _ = apply(&coo, &req);
    }
    if let [r, cols] = shape[..] {
        let p = Pattern::from_coords((r, cols), &coords).expect("valid coordinates");
        let mat = sprs::CsMat::new(
            (r, cols),
            p.indptr().to_vec(),
            p.indices().to_vec(),
            vals.clone(),
        );
        let csr = MaskedCsr::from_pattern(mat.view()).expect("valid CSR");
        let _ = apply(&csr, &req);
        let free = MaskedCsr::unmasked(mat.view()).expect("valid CSR");
        let _ = apply(&free, &req);
    }
}
