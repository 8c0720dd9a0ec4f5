//! Tool-result vectors (reference `tool-results.md`, vectors 1–135) and property tests.

mod display;
mod mirror;
