//! The integration tests of `tether-example-harness` (one test binary per package).

mod processes;
mod scenario;
