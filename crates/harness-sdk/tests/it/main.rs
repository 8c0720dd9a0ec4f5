//! The integration tests of `tether-harness-sdk` (one test binary per package).

mod lifecycle;
mod results;
