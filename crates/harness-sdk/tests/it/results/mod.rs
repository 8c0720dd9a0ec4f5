//! Tool-result vectors (vectors 1–135, `tool_results_NNN`) and property tests.

mod delivery;
mod display;
mod errors;
mod fidelity;
mod media;
mod mirror;
mod mirror_metadata;
mod properties;
mod recorder_paths;
mod redaction;
mod sanitize;
mod sanitize_corpus;
mod sanitize_differential;
mod spawn;
mod terminal;
