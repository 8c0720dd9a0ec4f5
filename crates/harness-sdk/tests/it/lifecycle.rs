//! Lifecycle scenarios.
