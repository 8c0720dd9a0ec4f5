//! The integration tests of `tether-storage` (one test binary per package).
