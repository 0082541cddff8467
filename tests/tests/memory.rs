//! Memory ceilings: a counting allocator measures the peak extra memory of each sparse
//! op on a 10^6 x 10^6 input with 10^6 stored entries, whose dense form would take
//! 8 TB. Every op must stay O(nnz + output): a densifying regression fails here.
//! One test (the counter is global to this binary), its own binary (a global
//! allocator).

use masked::binary::{KeepBin, KeepZip};
use masked::by_name::{apply, OpRequest};
use masked::{CooMask, Dims, MaskRule, MaskedCoo, MaskedCsr, PatternI, ZipKernels};
use sprs::CsMat;
// the CLI's counting allocator (the one `masked bench` reports peaks with), shared
#[path = "../../crates/cli/src/alloc.rs"]
mod alloc;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// The most bytes `f` had allocated at once above what was live before it.
fn peak_of<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let mut out = None;
    let peak = alloc::measure_peak(|| {
        out = Some(f());
        Ok::<(), ()>(())
    })
    .unwrap_or(0);
    (out.expect("ran"), peak)
}

const N: usize = 1_000_000;
const NNZ: usize = 1_000_000;

#[test]
fn sparse_ops_stay_within_o_nnz_on_a_terabyte_shape() {
    // NNZ distinct positions spread over every row and column
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut pos: Vec<(usize, usize)> = (0..NNZ)
        .map(|_| ((next() % N as u64) as usize, (next() % N as u64) as usize))
        .collect();
    pos.sort_unstable();
    pos.dedup();
    let (rows, cols): (Vec<usize>, Vec<usize>) = pos.iter().copied().unzip();
    let nnz = rows.len();
    let vals: Vec<f64> = (0..nnz).map(|k| (k % 97) as f64 - 48.0).collect();
    // the budget: a few dozen bytes per stored entry and per row, far below the
    // 8 * 10^12 bytes of the dense form
    let budget = 96 * nnz + 16 * N;

    let coo = MaskedCoo::try_new(
        [N, N],
        &[rows.clone(), cols.clone()],
        vals.clone(),
        CooMask::Stored,
    )
    .unwrap();
    let pattern = PatternI::<usize>::from_coords((N, N), &[rows.to_vec(), cols.to_vec()]).unwrap();
    let m = CsMat::new(
        (N, N),
        pattern.indptr().to_vec(),
        pattern.indices().to_vec(),
        vals,
    );
    let csr = MaskedCsr::from_pattern(m.view()).unwrap();

    let mut reqs = Vec::new();
    for name in ["sum", "amax", "mean", "var", "median", "logsumexp", "count"] {
        for dims in [Dims::from(0isize), Dims::from(1isize), Dims::All] {
            reqs.push(OpRequest::new(name).unwrap().dims(dims));
        }
    }
    for name in ["softmax", "log_softmax", "cumsum", "abs", "exp"] {
        let r = OpRequest::new(name).unwrap();
        // normalizations run along dim 1; the elementwise ops take no dims
        reqs.push(match name {
            "abs" | "exp" => r,
            _ => r.dims(1isize),
        });
    }
    for req in &reqs {
        let (r, peak) = peak_of(|| apply(&coo, req));
        let out = r.unwrap_or_else(|e| panic!("coo {req:?}: {e}"));
        // at most one output per stored entry, or per lane for `count` (valid
        // everywhere: an empty lane counts 0)
        assert!(out.values().len() <= nnz.max(N), "coo {req:?}");
        assert!(
            peak <= budget,
            "coo {req:?}: peak {peak} bytes over {budget}"
        );
        let (r, peak2) = peak_of(|| apply(&csr, req));
        r.unwrap_or_else(|e| panic!("csr {req:?}: {e}"));
        // the figures, for the docs (`cargo test --test memory -- --nocapture`)
        eprintln!(
            "{} {:?}: peak coo {:.1} MB, csr {:.1} MB",
            req.op.name(),
            req.dims,
            peak as f64 / 1e6,
            peak2 as f64 / 1e6
        );
        let peak = peak2;
        assert!(
            peak <= budget,
            "csr {req:?}: peak {peak} bytes over {budget}"
        );
    }
    // binary ops: the same structure (values only) and a merge with a shifted pattern
    let mul = KeepZip(KeepBin::Mul);
    let (r, peak) = peak_of(|| csr.zip_elements(&csr, &mul, MaskRule::Strict));
    assert_eq!(r.unwrap().nnz(), nnz);
    assert!(peak <= budget, "csr mul: peak {peak} bytes over {budget}");
    let (r, peak) = peak_of(|| coo.zip_elements(&coo, &mul, MaskRule::And));
    assert_eq!(r.unwrap().values().len(), nnz);
    assert!(peak <= budget, "coo mul: peak {peak} bytes over {budget}");
}
