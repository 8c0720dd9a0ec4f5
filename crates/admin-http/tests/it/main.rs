//! The integration tests of `tether-admin-http` (one test binary per package).

mod api;
mod cli;
mod robustness;
mod serve;
mod support;
