//! Fuzz target: `delivery_facts` (see `checks/harness.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tether_fuzz::harness::check_delivery_facts(data);
});
