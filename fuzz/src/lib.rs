//! The checks behind Tether's fuzz targets, shared with their proptest twins in the workspace
//! (which compile the same `checks/*.rs` files).

#[path = "../checks/harness.rs"]
pub mod harness;

#[path = "../checks/finalizer.rs"]
pub mod finalizer;

#[path = "../checks/admin.rs"]
pub mod admin;
