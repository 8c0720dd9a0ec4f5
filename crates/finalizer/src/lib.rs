//! # tether-finalizer
//!
//! Settled-turn finalization: one final visible answer after a tool-only turn, through a
//! capability-free replay that cannot repeat or extend the completed work, with a host fallback.
