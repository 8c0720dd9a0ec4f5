//! Two host processes contending for one session (`example-host hold` and
//! `example-host contend`, each a process of its own on the same database).
//!
//! - [`hold`] takes the session's lease, writes the binding under it, and keeps the lease with
//!   heartbeats until it is told to release it or a time limit passes, selecting its wait
//!   against [`LeaseGuard::lost`]; it reports the lease epoch, each expiry a heartbeat wrote,
//!   and the release, or that the lease was lost.
//! - [`contend`] first tries without waiting (`try_with_lease`: the typed busy error while the
//!   other process holds the lease), then waits within a budget, gets the lease once the holder
//!   released it, and writes the binding under it.
//!
//! Every event goes to `report` as it happens, so a watching process can see the order.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_core::{AgentId, Error, LeaseConfig, SessionId, SessionKey};
use tether_harness_sdk::backend::{ThreadBinding, WriteOptions};
use tether_harness_sdk::lifecycle::LeaseGuard;
use tether_host::Host;

use crate::harness::{CWD, ExampleHarness};
use crate::runtime::SimulatedRuntime;

/// What the contending processes agree on: the session and the lease timing.
#[derive(Debug, Clone)]
pub struct Contended {
    /// The session both processes want.
    pub key: SessionKey,
    /// The lease lifetime (heartbeats renew it every third).
    pub lease: Duration,
}

impl Contended {
    fn lease_config(&self, wait: Duration) -> LeaseConfig {
        LeaseConfig {
            wait_budget: wait,
            retry_interval: Duration::from_millis(100),
            ..LeaseConfig::with_lease_duration(self.lease)
        }
    }

    /// The harness and the session (created when it does not exist yet).
    async fn harness(
        &self,
        host: &Host,
        wait: Duration,
    ) -> Result<(ExampleHarness, tether_harness_sdk::backend::BindingIdentity), Error> {
        let harness = ExampleHarness::on_host(
            host,
            Arc::new(SimulatedRuntime::new()),
            Some(self.lease_config(wait)),
        )
        .await?;
        let entry = harness
            .start_session(&self.key, &AgentId::new("main")?, &SessionId::new("gen-1")?)
            .await?;
        Ok((harness, ExampleHarness::identity(&entry)))
    }
}

/// One reported event: a name and a value.
pub type Report<'a> = &'a (dyn Fn(&str, String) + Sync);

/// Writes this process's thread binding under `guard` (fenced by its lease).
async fn write_binding(
    harness: &ExampleHarness,
    identity: &tether_harness_sdk::backend::BindingIdentity,
    guard: &LeaseGuard,
    holder: &str,
) -> Result<(), Error> {
    let binding = ThreadBinding::new(format!("thread-of-{holder}"), CWD);
    harness
        .bindings()
        .set(identity, binding, WriteOptions::default())
        .await?;
    guard.verify_fence().await.map(|_| ())
}

/// Holds the session's lease until `release` completes or `hold_for` passed (heartbeats keep
/// it), unless it is lost first. Reports `held` (the epoch) and `expires_at`, `renewed` (the
/// new expiry) after each heartbeat, then `renewed_until` and `released`; or `lost` and the
/// error.
pub async fn hold(
    host: &Host,
    contended: &Contended,
    hold_for: Duration,
    release: impl std::future::Future<Output = ()> + Send,
    report: Report<'_>,
) -> Result<(), Error> {
    let (harness, identity) = contended.harness(host, Duration::from_secs(5)).await?;
    let holder = host.holder().to_owned();
    let result = harness
        .bindings()
        .with_lease(&identity, false, None, |guard| {
            let (harness, identity, holder) = (&harness, &identity, holder.clone());
            async move {
                write_binding(harness, identity, &guard, &holder).await?;
                report("held", guard.epoch().get().to_string());
                let mut expires_at = guard.expires_at();
                report("expires_at", expires_at.as_millis().to_string());
                let deadline = tokio::time::sleep(hold_for);
                tokio::pin!(deadline, release);
                loop {
                    tokio::select! {
                        () = &mut deadline => break Ok(guard.expires_at()),
                        () = &mut release => break Ok(guard.expires_at()),
                        lost = guard.lost() => break Err(lost),
                        () = tokio::time::sleep(Duration::from_millis(50)) => {
                            if guard.expires_at() != expires_at {
                                expires_at = guard.expires_at();
                                report("renewed", expires_at.as_millis().to_string());
                            }
                        }
                    }
                }
            }
        })
        .await;
    match result {
        Ok(renewed_until) => {
            report("renewed_until", renewed_until.as_millis().to_string());
            report("released", "true".to_owned());
            Ok(())
        }
        Err(error) => {
            report(
                "lost",
                match &error {
                    Error::LostLease { .. } => "lost-lease".to_owned(),
                    other => format!("other: {other}"),
                },
            );
            Err(error)
        }
    }
}

/// Tries the session's lease without waiting, then waits for it up to `wait`. Reports `try`
/// (`busy` or `acquired`), `try_busy`, `try_ms`, then `acquired` (the epoch) and `wait_ms`.
pub async fn contend(
    host: &Host,
    contended: &Contended,
    wait: Duration,
    report: Report<'_>,
) -> Result<(), Error> {
    let (harness, identity) = contended.harness(host, wait).await?;
    let holder = host.holder().to_owned();
    let started = Instant::now();
    let tried = harness
        .bindings()
        .try_with_lease(
            &identity,
            false,
            None,
            |guard| async move { Ok(guard.epoch()) },
        )
        .await;
    report("try_ms", started.elapsed().as_millis().to_string());
    match tried {
        Ok(epoch) => {
            report("try", "acquired".to_owned());
            report("acquired", epoch.get().to_string());
            return Ok(());
        }
        Err(error) if error.is_busy() => {
            report("try", "busy".to_owned());
            report("try_busy", error.is_busy().to_string());
        }
        Err(error) => return Err(error),
    }
    let started = Instant::now();
    let epoch = harness
        .bindings()
        .with_lease(&identity, false, None, |guard| {
            let (harness, identity, holder) = (&harness, &identity, holder.clone());
            async move {
                write_binding(harness, identity, &guard, &holder).await?;
                Ok(guard.epoch())
            }
        })
        .await?;
    report("wait_ms", started.elapsed().as_millis().to_string());
    report("acquired", epoch.get().to_string());
    Ok(())
}
