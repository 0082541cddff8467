//! Fuzz target `mtx`: [`masked_tests::fuzz::mtx_reader`] on the raw input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| masked_tests::fuzz::mtx_reader(data));
