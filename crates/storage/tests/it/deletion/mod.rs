//! The host deletion and context-reset transaction: reference scenarios 57–66.

mod harness;
mod scenarios;
