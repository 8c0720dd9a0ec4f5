//! Tool-result vectors (reference `tool-results.md`, vectors 1–135) and property tests.

mod delivery;
mod display;
mod fidelity;
mod media;
mod mirror;
mod properties;
mod redaction;
mod sanitize;
mod spawn;
mod terminal;
