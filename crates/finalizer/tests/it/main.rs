//! The integration tests of `tether-finalizer` (one test binary per package).
