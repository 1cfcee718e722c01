#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cats_sma::fuzzing::record_read(data));
