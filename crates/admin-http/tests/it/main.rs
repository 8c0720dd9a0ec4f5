//! The integration tests of `tether-admin-http` (one test binary per package).

mod serve;
