//! The demo scenario `tether demo` runs: several sessions driven through the example harness
//! with the real APIs, a context reset, a deletion, a stuck lease and a quarantined key.

use std::sync::Arc;
use std::time::Duration;

use tether_core::{
    AgentId, BindingId, BindingKey, Error, Namespace, QuarantineEntry, QuarantineStore as _,
    SessionId, SessionKey,
};
use tether_storage::Store;

use crate::harness::{ExampleHarness, NAMESPACE};
use crate::runtime::SimulatedRuntime;

/// The sessions the demo creates: (session key, agent).
pub const SESSIONS: [(&str, &str); 5] = [
    ("agent:main:direct:alice", "main"),
    ("agent:main:direct:bob", "main"),
    ("agent:main:group:release", "main"),
    ("agent:ops:cron:nightly", "ops"),
    ("agent:ops:direct:carol", "ops"),
];

/// The user messages of each session's turns.
pub const TURNS: [&str; 3] = [
    "please look at the deploy checklist",
    "run cargo test --workspace",
    "summarize what changed",
];

/// How many progress steps [`populate`] reports.
pub const STEPS: u64 = (SESSIONS.len() * TURNS.len()) as u64 + 4;

/// What the demo left in the database.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DemoSummary {
    /// Sessions created.
    pub sessions: usize,
    /// Turns run.
    pub turns: usize,
    /// Session whose context was reset.
    pub reset: Option<String>,
    /// Session deleted.
    pub deleted: Option<String>,
    /// Settled tool turns finalized (succeeded, fell back).
    pub finalizations: (usize, usize),
    /// Session left with a stuck lease.
    pub stuck: Option<String>,
    /// Quarantined key.
    pub quarantined: Option<String>,
}

/// Runs the demo on `store`, calling `step` with a description after each step.
pub async fn populate(store: Store, step: &(dyn Fn(&str) + Sync)) -> Result<DemoSummary, Error> {
    let runtime = Arc::new(SimulatedRuntime::new());
    let harness = ExampleHarness::new(store.clone(), runtime, "example-worker-1").await?;
    let mut summary = DemoSummary::default();
    for (i, (key, agent)) in SESSIONS.iter().enumerate() {
        let key = SessionKey::new(key)?;
        harness
            .start_session(
                &key,
                &AgentId::new(agent)?,
                &SessionId::new(format!("gen-{}-1", i + 1))?,
            )
            .await?;
        summary.sessions += 1;
        for (turn, text) in TURNS.iter().enumerate() {
            let text = if *agent == "ops" && turn == 1 {
                "run deploy --dry-run fail-fast --garbled-output"
            } else {
                text
            };
            let report = harness.run_turn(&key, turn as u64 + 1, text).await?;
            summary.turns += 1;
            match report.finalization {
                Some(crate::Finalization::Succeeded) => summary.finalizations.0 += 1,
                Some(_) => summary.finalizations.1 += 1,
                None => {}
            }
            step(&format!(
                "{key}: turn {} on {} (lease epoch {})",
                turn + 1,
                report.thread_id,
                report.lease_epoch
            ));
        }
    }

    let bob = SessionKey::new(SESSIONS[1].0)?;
    harness
        .reset_context(&bob, SessionId::new("gen-2-2")?)
        .await?;
    harness
        .run_turn(&bob, 10, "start over from scratch")
        .await?;
    summary.reset = Some(bob.to_string());
    step(&format!("{bob}: context reset to a new generation"));

    let carol = SessionKey::new(SESSIONS[4].0)?;
    harness
        .delete_sessions(std::slice::from_ref(&carol))
        .await?;
    summary.deleted = Some(carol.to_string());
    step(&format!("{carol}: deleted with its binding"));

    let release = SessionKey::new(SESSIONS[2].0)?;
    harness
        .simulate_stuck_lease(
            &release,
            "example-worker-2 (crashed)",
            Duration::from_secs(15 * 60),
        )
        .await?;
    summary.stuck = Some(release.to_string());
    step(&format!("{release}: a crashed worker holds its lease"));

    let legacy = BindingKey::conversation(&BindingId::new("legacy-42")?);
    store
        .quarantine(QuarantineEntry {
            namespace: Namespace::new(NAMESPACE)?,
            key: legacy.clone(),
            reason: "undecodable binding record (version 0)".into(),
            custody: Some("example-worker-1".into()),
            quarantined_at: store.clock().now(),
        })
        .await?;
    summary.quarantined = Some(legacy.to_string());
    step(&format!("{legacy}: quarantined"));
    Ok(summary)
}
