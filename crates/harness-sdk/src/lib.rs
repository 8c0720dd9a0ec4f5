//! # tether-harness-sdk
//!
//! What a harness author builds on, over the `tether-core` contracts:
//!
//! - [`lifecycle`]: the native-session binding lifecycle — exact-token leases with heartbeats
//!   and monotonic fencing epochs, `transact`, `with_lease`, lease assertions, blocked keys,
//!   mutation fences, and transactional deletion with `commit` / `rollback` and settlement
//!   (the contract: `docs/lifecycle.md`);
//! - [`generation`]: generation authority — tri-state capture of the host generation, lineage
//!   re-checked after every await, `resolve_binding`, `reclaim_generation` (`docs/generation.md`);
//! - [`backend`] and [`hooks`]: the thread-binding backend (set / patch / clear pinned
//!   to the native thread, adopt, reset vs retire vs delete, fences, reclaim, supervision scope)
//!   and a ready [`AgentHarness`](tether_core::AgentHarness) building block with deletion and
//!   context-reset hooks (`docs/harness-backend.md`, `docs/deletion-and-reset.md`);
//! - [`initialization`]: the initialization owner; [`reset`]: reset fan-out with
//!   once-per-process failure logging; [`acpx`]: the ACPX state directory (the contracts:
//!   `docs/harness-backend.md` and `docs/deletion-and-reset.md`, "Reset fan-out");
//! - [`results`]: tool and media result helpers — transcript mirroring, display metadata,
//!   delivery facts, sanitizing, spawn receipts, host-owned media, and the terminal-outcome
//!   accumulator (the contract: `docs/tool-results.md`).
//!
//! This crate depends on `tether-core` only; a host wires a store (for example
//! `tether-storage`'s `MemoryStore` or SQL `Store`) into it.
//!
//! ```
//! use serde_json::json;
//! use tether_harness_sdk::results::sanitize::sanitize_tool_args;
//!
//! let raw = json!({"command": "deploy", "api_key": "sk-live-123", "nested": {"token": "t"}});
//! let shown = sanitize_tool_args(&raw);
//! assert_eq!(shown["command"], "deploy");
//! assert_ne!(shown["api_key"], "sk-live-123", "secrets never reach diagnostics");
//! assert_eq!(raw["api_key"], "sk-live-123", "the input is not mutated");
//! ```

pub mod acpx;
pub mod backend;
pub mod generation;
pub mod hooks;
pub mod initialization;
pub mod lifecycle;
pub mod prelude;
pub mod reset;
pub mod results;
