//! Fuzz target `by_name`: [`masked_tests::fuzz::by_name`] on the raw input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| masked_tests::fuzz::by_name(data));
