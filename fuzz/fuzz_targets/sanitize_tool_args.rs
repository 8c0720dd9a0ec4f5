//! Fuzz target: `sanitize_tool_args` (see `checks/harness.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tether_fuzz::harness::check_sanitize_tool_args(data);
});
