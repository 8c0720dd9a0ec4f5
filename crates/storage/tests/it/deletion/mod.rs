//! The host deletion and context-reset transaction: scenarios 57–66 (the contract:
//! `docs/deletion-and-reset.md`).

pub(crate) mod harness;
mod host_writes;
mod scenarios;
