//! The integration tests of `tether-storage` (one test binary per package).

mod admin_read;
mod commit_faults;
mod conformance;
pub(crate) mod deletion;
mod disk_full;
mod fault_walk;
mod group_commit;
mod memory_hooks;
mod memory_transaction;
mod sql_store;
mod support;
