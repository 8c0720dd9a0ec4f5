//! The integration tests of `tether-admin-http` (one test binary per package).

mod api;
mod cli;
mod serve;
mod support;
