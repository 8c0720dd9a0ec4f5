//! Fuzz target: `admin_request_bodies` (see `checks/admin.rs`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tether_fuzz::admin::check_admin_request_bodies(data);
});
