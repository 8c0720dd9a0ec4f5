//! Route handlers, one module per area.

pub mod audit;
pub mod bindings;
pub mod dashboard;
pub mod health;
pub mod ops;
pub mod quarantine;
pub mod sessions;
pub mod ui;
