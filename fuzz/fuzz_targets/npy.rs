//! Fuzz target `npy`: [`masked_tests::fuzz::npy_reader`] on the raw input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| masked_tests::fuzz::npy_reader(data));
