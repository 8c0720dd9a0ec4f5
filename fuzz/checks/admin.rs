//! Checks shared by the admin request-body fuzz target (`fuzz/fuzz_targets/`) and its twin
//! (`crates/admin-http/tests/it/robustness.rs`): the request DTOs of the admin service take
//! arbitrary bytes without panicking, and an accepted body survives its own serialization.

use serde::Serialize;
use serde::de::DeserializeOwned;
use tether_admin_http::dto::{ExpireLeaseBody, ReasonBody};

fn round_trip<T: Serialize + DeserializeOwned>(data: &[u8]) {
    if let Ok(body) = serde_json::from_slice::<T>(data) {
        let json = serde_json::to_value(&body).expect("a decoded body serializes");
        let again: T = serde_json::from_value(json.clone()).expect("a serialized body decodes");
        assert_eq!(serde_json::to_value(&again).expect("serializes"), json);
    }
}

/// Every admin request body type.
pub fn check_admin_request_bodies(data: &[u8]) {
    round_trip::<ReasonBody>(data);
    round_trip::<ExpireLeaseBody>(data);
}
