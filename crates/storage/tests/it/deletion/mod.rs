//! The host deletion and context-reset transaction: reference scenarios 57–66.

pub(crate) mod harness;
mod host_writes;
mod scenarios;
