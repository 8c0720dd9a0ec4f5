//! Lifecycle scenarios (reference `native-session-lifecycle.md` §3, scenarios 1–31) and the
//! lifecycle's own properties, on the fake clock and the in-memory store.

mod deletion;
mod host;
mod leases;
mod portable;
mod properties;
mod sql;
mod support;
