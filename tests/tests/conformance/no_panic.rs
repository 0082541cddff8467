//! No panic on bad input. Two properties over the shared hostile cases of
//! `masked_tests::hostile` (the fuzz targets run the same functions):
//! - every op of the registry, by name, with arbitrary shapes (empty dims included),
//!   masks, values (NaN, infinities), dims (out of range, repeated, negative), keepdim,
//!   dtypes and option values (out of range, unparsable), on every layout;
//! - every public constructor of masks, patterns and masked containers, with arbitrary
//!   shapes (sizes that overflow included), coordinates, flat positions, lengths, bands,
//!   bools, row pointers, words and values, and the mask operators.
//!
//! Every call must return `Ok` or a typed `Err`; proptest reports a panic as a failure.

use masked_tests::hostile::{
    dim_from, index_from, run_constructors, run_request, ConstructorCase, RequestCase,
};
use proptest::prelude::*;

fn dims() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(any::<u8>().prop_map(dim_from), 0..4)
}

fn indices(max: usize) -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(any::<u8>().prop_map(index_from), 0..max)
}

fn constructor_case() -> impl Strategy<Value = ConstructorCase> {
    (
        (dims(), dims()),
        (
            proptest::collection::vec(indices(12), 0..4),
            indices(12),
            indices(5),
        ),
        (
            any::<(u8, u8)>().prop_map(|(a, b)| (index_from(a), index_from(b))),
            any::<u8>().prop_map(dim_from),
        ),
        proptest::collection::vec(any::<bool>(), 0..40),
        (indices(7), indices(12)),
        proptest::collection::vec(any::<u64>(), 0..3),
        proptest::collection::vec(-4.0f64..4.0, 0..16),
    )
        .prop_map(
            |(
                (shape, other_shape),
                (coords, flat, lengths),
                (band, n),
                bools,
                (indptr, indices),
                words,
                values,
            )| ConstructorCase {
                shape,
                other_shape,
                coords,
                flat,
                lengths,
                band,
                n,
                bools,
                indptr,
                indices,
                words,
                values,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn no_op_panics_on_any_request(
        shape in proptest::collection::vec(0usize..4, 0..4),
        seed in any::<u64>(),
        op in any::<usize>(),
        dims in proptest::option::of(proptest::collection::vec(-5isize..5, 0..3)),
        keepdim in any::<bool>(),
        options in proptest::collection::vec((any::<usize>(), any::<usize>()), 0..3),
        dtype in proptest::option::of(0usize..4),
    ) {
        run_request(&RequestCase { shape, seed, op, dims, keepdim, options, dtype });
    }

    #[test]
    fn no_constructor_panics_on_any_input(case in constructor_case()) {
        run_constructors(&case);
    }
}

/// The cases that panicked before their fix, kept as plain tests.
#[test]
fn constructors_refuse_overflowing_requests() {
    // lengths near usize::MAX in a COO padding mask (an add overflowed)
    run_constructors(&ConstructorCase {
        shape: vec![2, usize::MAX],
        lengths: vec![usize::MAX, usize::MAX],
        ..ConstructorCase::default()
    });
    // a mask of 2^62 elements: refused by its size, not attempted
    assert!(masked::BitMask::filled([1usize << 62], true).is_err());
    assert!(masked::CooPattern::full([1usize << 62, 2]).is_err());
    assert!(masked::Pattern::full([usize::MAX, 1]).is_err());
}
