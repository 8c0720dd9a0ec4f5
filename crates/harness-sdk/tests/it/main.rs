//! The integration tests of `tether-harness-sdk` (one test binary per package).

mod acpx;
mod generation;
mod initialization;
mod lifecycle;
mod reset;
mod results;
