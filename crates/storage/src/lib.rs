//! # tether-storage
//!
//! The SQL store of Tether (sea-orm 2; SQLite by default, PostgreSQL for several hosts) and an
//! in-memory store implementing the same `tether-core` traits.
