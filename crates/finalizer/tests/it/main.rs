//! The integration tests of `tether-finalizer` (one test binary per package).
//!
//! Scenario tests are named `finalization_sNNN_<slug>` after the reference scenario they
//! translate (scenarios S1–S104, see `docs/finalization.md`).

mod bounded;
mod capture;
mod codex;
mod engine;
mod fuzz_twins;
mod gate;
mod hardening;
mod harness;
mod incomplete;
mod openclaw;
mod orchestration;
mod projection;
mod support;
mod validator;
