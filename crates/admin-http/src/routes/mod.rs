//! Route handlers, one module per area.

pub mod health;
