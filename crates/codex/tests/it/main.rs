//! `tether-codex` integration tests: the harness against the real `codex app-server` (pinned
//! version, installed by `cargo xtask codex-install`) and a scripted loopback model server.

mod binary;
mod e2e;
mod finalize;
mod host;
mod lifecycle;
mod model;
mod schema;
