//! Fuzz target: `finalization_result` (see `checks/finalizer.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tether_fuzz::finalizer::check_finalization_result(data);
});
