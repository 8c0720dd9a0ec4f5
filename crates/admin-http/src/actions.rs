//! The operator actions (delete a session, force-expire a lease, release a quarantined key),
//! shared by the API routes and the CLI, each recorded in the audit trail.
//!
//! An action is recorded **before** it runs (outcome `started`; if that record cannot be
//! written the action is not taken) and completed with its outcome afterwards: `succeeded`,
//! `refused` (a typed refusal: missing target, live lease, conflict, bad input) or `failed`
//! (the detail's code says `outcome_unknown` when the action's COMMIT failed or its answer was
//! lost).
//!
//! The record, the action and the record's completion run in a task of their own: a caller
//! that stops waiting (an HTTP client that disconnects, a request dropped at shutdown) neither
//! cancels the action half-way nor leaves its record `started`.

use tether_core::{BindingKey, LeaseEpoch, Namespace, QuarantineStore as _};
use tether_storage::{AuditOutcome, ForceExpireOutcome, NewAuditEntry, Store};
use tracing::Instrument as _;

use crate::dto::ActionResult;
use crate::error::ApiError;
use crate::routes::sessions::{delete_session, load_session};

/// The actor recorded for actions taken by the `tether` command line on a database.
pub const CLI_ACTOR: &str = "cli";

/// Audit action name of a session deletion.
pub const DELETE_SESSION: &str = "delete_session";
/// Audit action name of a lease force-expiry.
pub const EXPIRE_LEASE: &str = "expire_lease";
/// Audit action name of a quarantine release.
pub const RELEASE_QUARANTINE: &str = "release_quarantine";

/// Runs `action` (given a handle of `store`) recorded in the audit trail as `name` on `target`
/// by `actor` for `reason`.
async fn audited<A, F>(
    store: &Store,
    actor: &str,
    name: &'static str,
    target: String,
    reason: &str,
    action: A,
) -> Result<ActionResult, ApiError>
where
    A: FnOnce(Store) -> F,
    F: std::future::Future<Output = Result<ActionResult, ApiError>> + Send + 'static,
{
    let entry = NewAuditEntry {
        actor: actor.to_owned(),
        action: name.to_owned(),
        target,
        reason: reason.to_owned(),
    };
    let action = action(store.clone());
    let store = store.clone();
    let run = tokio::spawn(
        async move {
            let id = store.audit_begin(&entry).await.map_err(not_taken)?;
            let result = action.await;
            finish(&store, id, &entry, &result).await;
            result
        }
        .in_current_span(),
    );
    run.await.unwrap_or_else(|e| {
        Err(ApiError::Internal(format!(
            "the action stopped unexpectedly ({e}); its audit record stays `started`"
        )))
    })
}

/// The error of an action whose audit record could not be written (so it was not taken).
fn not_taken(error: tether_core::Error) -> ApiError {
    match ApiError::from(error) {
        ApiError::BadRequest(m) => ApiError::BadRequest(m),
        other => ApiError::Unavailable(format!(
            "the action was not taken: its audit record could not be written ({other})"
        )),
    }
}

/// Completes the audit record `id` with the outcome of `result`.
async fn finish(
    store: &Store,
    id: u64,
    entry: &NewAuditEntry,
    result: &Result<ActionResult, ApiError>,
) {
    let (outcome, detail) = match result {
        Ok(done) => (AuditOutcome::Succeeded, done.message.clone()),
        // Every 4xx is a typed refusal: nothing was written.
        Err(e) if e.status().is_client_error() => {
            (AuditOutcome::Refused, format!("{}: {e}", e.code()))
        }
        Err(e) => (AuditOutcome::Failed, format!("{}: {e}", e.code())),
    };
    tracing::info!(
        audit_id = id,
        actor = entry.actor,
        action = entry.action,
        target = entry.target,
        operator_reason = entry.reason,
        outcome = outcome.as_str(),
        "operator action"
    );
    if let Err(e) = store.audit_finish(id, outcome, &detail).await {
        // The action's own result stands; the record stays `started` and says so.
        tracing::warn!(audit_id = id, error = %e, "cannot complete the audit record");
    }
}

/// Deletes the session `key` (the transactional path; refused under a live lease).
#[tracing::instrument(level = "info", skip(store, reason))]
pub async fn delete_session_action(
    store: &Store,
    actor: &str,
    key: &str,
    reason: &str,
) -> Result<ActionResult, ApiError> {
    let key = key.to_owned();
    let why = reason.to_owned();
    audited(
        store,
        actor,
        DELETE_SESSION,
        key.clone(),
        reason,
        |store| async move {
            let entry = load_session(&store, &key).await?;
            if let Some(threads) = delete_session(&store, &entry, &why).await? {
                let native = if threads.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; its {} Codex thread(s) are recorded for deletion by the Codex harness \
                         (its next reset or `retry_native_cleanup`)",
                        threads.len()
                    )
                };
                Ok(ActionResult {
                    outcome: "deleted".into(),
                    message: format!(
                        "session `{}` and its binding rows were deleted{native}",
                        entry.session_key
                    ),
                    previous_epoch: None,
                })
            } else {
                Err(ApiError::NotFound(format!(
                    "session `{}` was deleted meanwhile",
                    entry.session_key
                )))
            }
        },
    )
    .await
}

/// Force-expires the lease of `ns`/`key` (only the lease at `expected_epoch` when given).
#[tracing::instrument(level = "info", skip(store, reason))]
pub async fn expire_lease_action(
    store: &Store,
    actor: &str,
    ns: &Namespace,
    key: &BindingKey,
    expected_epoch: Option<u64>,
    reason: &str,
) -> Result<ActionResult, ApiError> {
    let (ns, key) = (ns.clone(), key.clone());
    audited(store, actor, EXPIRE_LEASE, format!("{ns}/{key}"), reason, |store| async move {
        match store
            .force_expire_lease(&ns, &key, expected_epoch.map(LeaseEpoch::new))
            .await?
        {
            ForceExpireOutcome::Expired {
                previous_epoch,
                previous_holder,
                ..
            } => Ok(ActionResult {
                outcome: "expired".into(),
                message: format!(
                    "lease epoch {} ({}) of {} on {ns}/{key} expired; its holder is fenced",
                    crate::dto::epoch_label(previous_epoch.get()),
                    previous_epoch.get(),
                    previous_holder.as_deref().unwrap_or("an unknown holder")
                ),
                previous_epoch: Some(previous_epoch.get()),
            }),
            ForceExpireOutcome::Missing => Err(ApiError::NotFound(format!(
                "no live binding row at {ns}/{key}"
            ))),
            ForceExpireOutcome::NoLease => Err(ApiError::NoLease(format!(
                "{ns}/{key} holds no live lease: nothing to expire"
            ))),
            ForceExpireOutcome::EpochMismatch { current } => Err(ApiError::EpochMismatch {
                current: current.get(),
                message: format!(
                    "the lease on {ns}/{key} is now at epoch {}; reload it and confirm before expiring",
                    current.get()
                ),
            }),
            _ => Err(ApiError::Conflict(format!(
                "{ns}/{key} changed while expiring its lease; reload and retry"
            ))),
        }
    })
    .await
}

/// Releases the quarantined key `ns`/`key`.
#[tracing::instrument(level = "info", skip(store, reason))]
pub async fn release_quarantine_action(
    store: &Store,
    actor: &str,
    ns: &Namespace,
    key: &BindingKey,
    reason: &str,
) -> Result<ActionResult, ApiError> {
    let (ns, key, why) = (ns.clone(), key.clone(), reason.to_owned());
    audited(
        store,
        actor,
        RELEASE_QUARANTINE,
        format!("{ns}/{key}"),
        reason,
        |store| async move {
            if store.release_quarantine(&ns, &key, &why).await? {
                Ok(ActionResult {
                    outcome: "released".into(),
                    message: format!("{ns}/{key} is released; harnesses may bind it again"),
                    previous_epoch: None,
                })
            } else {
                Err(ApiError::NotFound(format!("{ns}/{key} is not quarantined")))
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A caller that stops waiting (a disconnected client), whether while the record is being
    /// written or while the action runs, neither cancels the action nor leaves its audit
    /// record `started`.
    #[tokio::test]
    async fn an_action_outlives_a_caller_that_stops_waiting() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicUsize, Ordering};
        let store = Store::open("sqlite::memory:").await.unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        // Given up on at the first poll (before the record is written), then mid-action.
        for (target, patience) in [
            ("first", Duration::ZERO),
            ("second", Duration::from_millis(50)),
        ] {
            let ran = Arc::clone(&done);
            let action = async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(ActionResult {
                    outcome: "done".into(),
                    message: "the slow action finished".into(),
                    previous_epoch: None,
                })
            };
            let call = audited(
                &store,
                "tester",
                DELETE_SESSION,
                target.into(),
                "check",
                |_| action,
            );
            assert!(
                tokio::time::timeout(patience, call).await.is_err(),
                "the caller gave up first"
            );
        }
        let mut entries = Vec::new();
        for _ in 0..100 {
            entries = store.audit_page(None, 10).await.unwrap().entries;
            if entries.len() == 2 && entries.iter().all(|e| e.outcome != AuditOutcome::Started) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut outcomes: Vec<_> = entries
            .iter()
            .map(|e| (e.target.as_str(), e.outcome))
            .collect();
        outcomes.sort_unstable_by_key(|(target, _)| *target);
        assert_eq!(
            outcomes,
            [
                ("first", AuditOutcome::Succeeded),
                ("second", AuditOutcome::Succeeded)
            ]
        );
        assert_eq!(done.load(Ordering::SeqCst), 2);
    }
}
