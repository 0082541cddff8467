//! Fuzz target `serde`: [`masked_tests::fuzz::serde`] on the raw input.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| masked_tests::fuzz::serde(data));
