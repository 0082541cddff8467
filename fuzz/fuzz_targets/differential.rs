//! Fuzz target `differential`: [`masked_tests::fuzz::differential`] on the raw input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| masked_tests::fuzz::differential(data));
