//! Lifecycle scenarios 1–31 (the contract: `docs/lifecycle.md`; numbering: `docs/README.md`) and
//! the lifecycle's own properties, on the fake clock and the in-memory store.

mod deletion;
mod host;
mod leases;
mod portable;
mod properties;
mod sql;
mod support;
