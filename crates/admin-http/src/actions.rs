//! The operator actions (delete a session, force-expire a lease, release a quarantined key),
//! shared by the API routes and the CLI, each recorded in the audit trail.
//!
//! An action is recorded **before** it runs (outcome `started`; if that record cannot be
//! written the action is not taken) and completed with its outcome afterwards: `succeeded`,
//! `refused` (a typed refusal: missing target, live lease, conflict, bad input) or `failed`.

use tether_core::{BindingKey, LeaseEpoch, Namespace, QuarantineStore as _};
use tether_storage::{AuditOutcome, ForceExpireOutcome, NewAuditEntry, Store};

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

/// Runs `action` recorded in the audit trail as `name` on `target` by `actor` for `reason`.
async fn audited<F>(
    store: &Store,
    actor: &str,
    name: &str,
    target: String,
    reason: &str,
    action: F,
) -> Result<ActionResult, ApiError>
where
    F: std::future::Future<Output = Result<ActionResult, ApiError>>,
{
    let id = store
        .audit_begin(&NewAuditEntry {
            actor: actor.to_owned(),
            action: name.to_owned(),
            target: target.clone(),
            reason: reason.to_owned(),
        })
        .await
        .map_err(|e| match ApiError::from(e) {
            ApiError::BadRequest(m) => ApiError::BadRequest(m),
            other => ApiError::Unavailable(format!(
                "the action was not taken: its audit record could not be written ({other})"
            )),
        })?;
    let result = action.await;
    let (outcome, detail) = match &result {
        Ok(done) => (AuditOutcome::Succeeded, done.message.clone()),
        Err(
            e @ (ApiError::BadRequest(_)
            | ApiError::NotFound(_)
            | ApiError::LeaseHeld(_)
            | ApiError::Conflict(_)),
        ) => (AuditOutcome::Refused, format!("{}: {e}", e.code())),
        Err(e) => (AuditOutcome::Failed, format!("{}: {e}", e.code())),
    };
    tracing::info!(audit_id = id, actor, action = name, %target, outcome = outcome.as_str(), "operator action");
    if let Err(e) = store.audit_finish(id, outcome, &detail).await {
        // The action's own result stands; the record stays `started` and says so.
        tracing::warn!(audit_id = id, error = %e, "cannot complete the audit record");
    }
    result
}

/// Deletes the session `key` (the transactional path; refused under a live lease).
#[tracing::instrument(level = "info", skip(store, reason))]
pub async fn delete_session_action(
    store: &Store,
    actor: &str,
    key: &str,
    reason: &str,
) -> Result<ActionResult, ApiError> {
    audited(
        store,
        actor,
        DELETE_SESSION,
        key.to_owned(),
        reason,
        async {
            let entry = load_session(store, key).await?;
            if delete_session(store, &entry).await? {
                Ok(ActionResult {
                    outcome: "deleted".into(),
                    message: format!(
                        "session `{}` and its binding rows were deleted",
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
    audited(store, actor, EXPIRE_LEASE, format!("{ns}/{key}"), reason, async {
        match store
            .force_expire_lease(ns, key, expected_epoch.map(LeaseEpoch::new))
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
            ForceExpireOutcome::NoLease => Err(ApiError::Conflict(format!(
                "{ns}/{key} holds no live lease: nothing to expire"
            ))),
            ForceExpireOutcome::EpochMismatch { current } => Err(ApiError::Conflict(format!(
                "the lease on {ns}/{key} is now at epoch {}; reload it and confirm before expiring",
                current.get()
            ))),
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
    audited(
        store,
        actor,
        RELEASE_QUARANTINE,
        format!("{ns}/{key}"),
        reason,
        async {
            if store.release_quarantine(ns, key, reason).await? {
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
