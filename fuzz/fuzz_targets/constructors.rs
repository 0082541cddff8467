//! Fuzz target `constructors`: [`masked_tests::fuzz::constructors`] on the raw input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| masked_tests::fuzz::constructors(data));
