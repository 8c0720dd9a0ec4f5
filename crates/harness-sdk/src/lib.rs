//! # tether-harness-sdk
//!
//! What a harness author builds on: the native-session binding lifecycle (exact-token leases,
//! heartbeats, fences, transactional deletion), and the tool and media result helpers
//! (transcript mirroring, display metadata, delivery facts, sanitizing, spawn receipts,
//! host-owned media, the terminal-outcome accumulator).
//!
//! This crate depends on `tether-core` only; a host wires a store (for example
//! `tether-storage`) into it.

pub mod acpx;
pub mod backend;
pub mod generation;
pub mod hooks;
pub mod initialization;
pub mod lifecycle;
pub mod reset;
pub mod results;
