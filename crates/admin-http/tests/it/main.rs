//! The integration tests of `tether-admin-http` (one test binary per package).

mod api;
mod chat;
mod cli;
mod console;
mod demo_codex;
mod hardening;
mod operator_ui;
mod robustness;
mod serve;
mod support;
