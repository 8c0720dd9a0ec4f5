//! Fuzz target: `infer_tool_meta_from_args` (see `checks/harness.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tether_fuzz::harness::check_infer_tool_meta_from_args(data);
});
