//! The integration tests of `tether-harness-sdk` (one test binary per package).

mod acpx;
mod backend;
mod fault_walk;
mod fuzz_twins;
mod generation;
mod hooks;
mod initialization;
mod lifecycle;
mod openclaw;
mod regressions;
mod reset;
mod results;
mod stack_safety;
