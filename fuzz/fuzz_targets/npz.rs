//! Fuzz target `npz`: [`masked_tests::fuzz::npz_reader`] on the raw input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| masked_tests::fuzz::npz_reader(data));
