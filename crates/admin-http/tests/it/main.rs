//! The integration tests of `tether-admin-http` (one test binary per package).

mod api;
mod serve;
mod support;
