//! Fuzz target: `sanitize_tool_args`, and no planted secret of the redaction table survives
//! (see `checks/harness.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tether_fuzz::harness::check_sanitize_tool_args(data);
    tether_fuzz::harness::check_planted_secrets(data);
});
