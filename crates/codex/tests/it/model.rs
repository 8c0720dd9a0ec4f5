//! The crate's scripted model server (`tether_codex::scripted`), started or the test fails.

use std::ops::Deref;
use std::time::Duration;

pub(crate) use tether_codex::scripted::{Step, mentions, tool_names};

/// A running scripted model server.
#[derive(Debug, Clone)]
pub(crate) struct ModelServer(tether_codex::scripted::ModelServer);

impl ModelServer {
    /// Starts the server on `127.0.0.1:0` with `script`.
    pub(crate) async fn start(script: Vec<Step>) -> Self {
        Self(
            tether_codex::scripted::ModelServer::start(script)
                .await
                .expect("the scripted model server starts on loopback"),
        )
    }

    /// Waits until `n` requests arrived (at most 30 s).
    pub(crate) async fn wait_for_requests(&self, n: usize) {
        assert!(
            self.0.wait_for_requests(n, Duration::from_secs(30)).await,
            "the model server never received {n} requests"
        );
    }
}

impl Deref for ModelServer {
    type Target = tether_codex::scripted::ModelServer;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}
