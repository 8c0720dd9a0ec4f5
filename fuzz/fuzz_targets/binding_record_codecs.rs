//! Fuzz target: `binding_record_codecs` (see `checks/harness.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tether_fuzz::harness::check_binding_record_codecs(data);
});
