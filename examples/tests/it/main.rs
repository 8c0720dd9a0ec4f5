//! The integration tests of `tether-example-harness` (one test binary per package).

mod codex_gateway;
mod processes;
mod scenario;
