//! The example host's tour: one pass over what a host gateway does with Tether, on the
//! database it is given (`example-host tour`). Each step reports what it observed as a
//! [`Fact`]; the integration tests run it on SQLite and on PostgreSQL and check the facts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_core::{AgentId, Error, LeaseConfig, SessionId, SessionKey};
use tether_harness_sdk::backend::{ThreadBinding, WriteOptions};
use tether_host::Host;
use tether_storage::sea_orm::{ConnectionTrait as _, DbBackend, Statement};
use tether_storage::{ForceExpireOutcome, TranscriptRole};

use crate::harness::{CWD, ExampleHarness, FALLBACK_TEXT, Finalization};
use crate::runtime::SimulatedRuntime;

/// One observation of the tour: a name and what was seen (`name=value` on the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// What was observed (`turn1.announced`, `deletion.deleted`, …).
    pub name: String,
    /// The value seen.
    pub value: String,
}

/// The lease timing of the tour's harness: short, so heartbeats and a lost lease show within
/// seconds.
pub const TOUR_LEASE: Duration = Duration::from_secs(2);

/// What counts as failing fast: far below the 70 s a refused call would otherwise wait.
const FAST: Duration = Duration::from_secs(5);

/// The host's own table, deleted together with the sessions it belongs to.
pub const HOST_TABLE: &str = "example_chat_threads";

/// Facts of one tour, in order.
#[derive(Debug, Default)]
struct Facts(Vec<Fact>);

impl Facts {
    fn add(&mut self, name: &str, value: impl ToString) {
        let value = value.to_string();
        tracing::info!(fact = name, value = %value, "tour");
        self.0.push(Fact {
            name: name.to_owned(),
            value,
        });
    }
}

/// Runs the tour on `host` under session keys prefixed with `prefix` (so several tours can
/// share a database), returning what it observed.
pub async fn run(host: &Host, prefix: &str) -> Result<Vec<Fact>, Error> {
    let mut facts = Facts::default();
    facts.add(
        "backend",
        match host.store().backend() {
            DbBackend::Postgres => "postgres",
            _ => "sqlite",
        },
    );
    facts.add("server_clock", host.server_clock().is_some());
    create_host_table(host).await?;

    let runtime = Arc::new(SimulatedRuntime::new());
    let harness = ExampleHarness::on_host(
        host,
        runtime,
        Some(LeaseConfig::with_lease_duration(TOUR_LEASE)),
    )
    .await?;
    let key = SessionKey::new(format!("{prefix}:direct:alice"))?;
    // The tour ends by deleting its session: a session already under this key (another tour's,
    // `tether demo`'s alice) is someone else's, never taken over.
    if host.store().session(&key).await?.is_some() {
        return Err(tether_core::HostErrorKind::SessionExists {
            key: format!("{key} (run the tour under another --prefix)"),
        }
        .into());
    }
    harness
        .start_session(&key, &AgentId::new("main")?, &SessionId::new("gen-1")?)
        .await?;
    insert_host_row(host, &key, "alice's chat").await?;

    // Turns under the session's lease: typed user-turn metadata mirrored, tool outcomes
    // accumulated, tool turns finalized.
    let first = harness.run_turn(&key, 1, "hello").await?;
    facts.add("turn1.started_thread", first.started_thread);
    facts.add("turn1.announced", first.user_turn_announced);
    facts.add(
        "turn1.sender_is_owner",
        first
            .sender_is_owner
            .map_or("none".to_owned(), |o| o.to_string()),
    );
    let replay = harness.run_turn(&key, 1, "hello").await?;
    facts.add("turn1.replay_announced", replay.user_turn_announced);
    facts.add(
        "turn1.epochs_increase",
        replay.lease_epoch > first.lease_epoch,
    );

    let second = harness.run_turn(&key, 2, "run cargo test").await?;
    facts.add(
        "turn2.finalization",
        finalization_name(&second.finalization),
    );
    facts.add("turn2.reply", &second.reply);
    let third = harness
        .run_turn(&key, 3, "run deploy fail --garbled")
        .await?;
    facts.add(
        "turn3.tool",
        third.tool.as_ref().map_or("none", |t| t.outcome.as_str()),
    );
    facts.add(
        "turn3.last_tool_error",
        third
            .last_tool_error
            .as_ref()
            .map_or("none", |e| e.tool_name.as_str()),
    );
    facts.add("turn3.finalization", finalization_name(&third.finalization));
    let path = host.store().active_path(&key).await?;
    let fallback_rows = path
        .iter()
        .filter(|e| {
            e.role == TranscriptRole::Assistant
                && e.content == FALLBACK_TEXT
                && e.idempotency_key
                    .as_deref()
                    .is_some_and(|k| k.ends_with(":settled-finalization-fallback"))
        })
        .count();
    facts.add("turn3.fallback_rows", fallback_rows);

    portable_lease(host, &harness, &key, &mut facts).await?;
    transactional_deletion(host, &harness, &key, &mut facts).await?;
    Ok(facts.0)
}

fn finalization_name(finalization: &Option<Finalization>) -> &'static str {
    match finalization {
        None => "none",
        Some(Finalization::Succeeded) => "succeeded",
        Some(Finalization::FellBack { .. }) => "fell-back",
    }
}

/// The lease handle: a write from a spawned task under the caller's lease, the typed refusal
/// of a spawned write outside it, `try_with_lease` against a live lease of another worker,
/// and `lost()` completing when an operator expires the lease.
async fn portable_lease(
    host: &Host,
    harness: &ExampleHarness,
    key: &SessionKey,
    facts: &mut Facts,
) -> Result<(), Error> {
    let entry = harness.entry(key).await?;
    let identity = ExampleHarness::identity(&entry);
    let bindings = harness.bindings().clone();
    let thread = bindings
        .read(&identity)
        .await?
        .map(|b| b.thread_id)
        .ok_or_else(|| Error::other("the session has no bound thread"))?;

    let (scoped, unscoped) = bindings
        .with_lease(&identity, false, None, |guard| {
            let (bindings, identity, thread) = (bindings.clone(), identity.clone(), thread.clone());
            async move {
                let write = |bindings: tether_harness_sdk::backend::ThreadBindingStore| {
                    let (identity, thread) = (identity.clone(), thread.clone());
                    async move {
                        // Run outside the lease scope, this refuses instead of waiting for
                        // our own lease (in the scope it writes under the lease).
                        let options = WriteOptions::default().failing_if_held_here();
                        bindings
                            .set(&identity, ThreadBinding::new(thread, CWD), options)
                            .await
                    }
                };
                // Under the guard, from another task: the write is made under this lease.
                let scoped = tokio::spawn(guard.in_scope(write(bindings.clone())))
                    .await
                    .map_err(|e| Error::other(format!("spawned write panicked: {e}")))?;
                // Without the guard: refused at once instead of waiting behind our own lease.
                let started = Instant::now();
                let unscoped = tokio::spawn(write(bindings.clone()))
                    .await
                    .map_err(|e| Error::other(format!("spawned write panicked: {e}")))?;
                let quick = started.elapsed() < FAST;
                Ok((scoped, (unscoped, quick)))
            }
        })
        .await?;
    facts.add("lease.spawned_write_in_scope", scoped.is_ok());
    facts.add(
        "lease.spawned_write_outside_scope",
        match &unscoped.0 {
            Err(Error::HeldOutsideScope { .. }) => "held-outside-scope".to_owned(),
            Err(other) => format!("other-error: {other:?}"),
            Ok(_) => "written".to_owned(),
        },
    );
    facts.add("lease.outside_scope_refused_quickly", unscoped.1);

    // Another worker crashed while holding the lease: try_with_lease fails fast and typed.
    harness
        .simulate_stuck_lease(key, "example-worker-2 (crashed)", Duration::from_secs(600))
        .await?;
    let started = Instant::now();
    let busy = bindings
        .try_with_lease(&identity, false, None, |_| async { Ok(()) })
        .await;
    facts.add("lease.try_busy", busy.as_ref().is_err_and(Error::is_busy));
    facts.add(
        "lease.try_retryable",
        busy.as_ref().is_err_and(Error::is_retryable),
    );
    facts.add("lease.try_fast", started.elapsed() < FAST);
    let ns = bindings.namespace().clone();
    let expired = host
        .store()
        .force_expire_lease(&ns, identity.key(), None)
        .await?;
    facts.add(
        "lease.operator_expired_stuck",
        matches!(expired, ForceExpireOutcome::Expired { .. }),
    );

    // Held by us, expired by an operator: `lost()` completes; the work selected against it
    // stops with the typed error.
    let store = host.store().clone();
    let lost = bindings
        .with_lease(&identity, false, None, |guard| {
            let (store, ns, key) = (store.clone(), ns.clone(), identity.key().clone());
            async move {
                let operator = async {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    store
                        .force_expire_lease(&ns, &key, Some(guard.epoch()))
                        .await
                };
                let started = Instant::now();
                let work = async {
                    operator.await?;
                    // The turn's work: far longer than the lease; heartbeats would keep it.
                    tokio::time::sleep(TOUR_LEASE * 10).await;
                    Ok::<_, Error>(())
                };
                tokio::select! {
                    done = work => done.map(|()| started.elapsed()),
                    lost = guard.lost() => Err(lost),
                }
            }
        })
        .await;
    facts.add(
        "lease.lost",
        match &lost {
            Err(Error::LostLease { .. }) => "lost-lease".to_owned(),
            Err(other) => format!("other-error: {other:?}"),
            Ok(_) => "not-lost".to_owned(),
        },
    );
    Ok(())
}

/// Deletion inside the host's own transaction: a failing host write keeps everything; a
/// working one removes the session, its transcript, its native binding and the host's row.
async fn transactional_deletion(
    host: &Host,
    harness: &ExampleHarness,
    key: &SessionKey,
    facts: &mut Facts,
) -> Result<(), Error> {
    let entry = harness.entry(key).await?;
    let threads = harness.bound_threads(std::slice::from_ref(key)).await?;
    let refused = delete_with_host_rows(host, key, "example_no_such_table").await;
    facts.add("deletion.failing_host_write_refused", refused.is_err());
    facts.add(
        "deletion.kept_after_refusal",
        host.store().session(key).await?.is_some()
            && host_rows(host, key).await? == 1
            && harness
                .bindings()
                .read(&ExampleHarness::identity(&entry))
                .await?
                .is_some(),
    );
    let deleted = delete_with_host_rows(host, key, HOST_TABLE).await?;
    for thread in threads {
        harness.runtime().close_thread(&thread);
    }
    facts.add("deletion.deleted", deleted.len());
    facts.add("deletion.host_rows_left", host_rows(host, key).await?);
    facts.add(
        "deletion.binding_left",
        harness
            .bindings()
            .read(&ExampleHarness::identity(&entry))
            .await?
            .is_some(),
    );
    facts.add(
        "deletion.transcript_left",
        host.store().active_path(key).await.map_or(0, |p| p.len()),
    );
    Ok(())
}

/// Deletes `key`'s session through [`Host::sessions`], removing the host's own row from
/// `table` in the same transaction.
async fn delete_with_host_rows(
    host: &Host,
    key: &SessionKey,
    table: &'static str,
) -> Result<Vec<SessionKey>, Error> {
    host.sessions()
        .delete_sessions_with(std::slice::from_ref(key), move |tx, deleted| {
            Box::pin(async move {
                for entry in deleted {
                    let sql = format!("DELETE FROM {table} WHERE session_key = $1");
                    tx.execute(&sql, vec![entry.session_key.as_str().into()])
                        .await?;
                }
                Ok(())
            })
        })
        .await
}

/// A statement on the host's own table, with `?` placeholders on SQLite and `$n` on PostgreSQL.
fn statement(
    host: &Host,
    sqlite: &str,
    postgres: &str,
    values: Vec<tether_storage::sea_orm::Value>,
) -> Statement {
    let backend = host.store().backend();
    let sql = match backend {
        DbBackend::Postgres => postgres,
        _ => sqlite,
    };
    Statement::from_sql_and_values(backend, sql, values)
}

fn db_error(e: tether_storage::sea_orm::DbErr) -> Error {
    Error::other(format!("host table: {e}"))
}

async fn create_host_table(host: &Host) -> Result<(), Error> {
    host.store()
        .connection()
        .execute_unprepared(&format!(
            "CREATE TABLE IF NOT EXISTS {HOST_TABLE} (session_key TEXT PRIMARY KEY, title TEXT NOT NULL)"
        ))
        .await
        .map(|_| ())
        .map_err(db_error)
}

async fn insert_host_row(host: &Host, key: &SessionKey, title: &str) -> Result<(), Error> {
    let stmt = statement(
        host,
        &format!("INSERT INTO {HOST_TABLE} (session_key, title) VALUES (?, ?)"),
        &format!("INSERT INTO {HOST_TABLE} (session_key, title) VALUES ($1, $2)"),
        vec![key.as_str().into(), title.into()],
    );
    host.store()
        .connection()
        .execute_raw(stmt)
        .await
        .map(|_| ())
        .map_err(db_error)
}

async fn host_rows(host: &Host, key: &SessionKey) -> Result<i64, Error> {
    let row = host
        .store()
        .connection()
        .query_one_raw(statement(
            host,
            &format!("SELECT COUNT(*) AS n FROM {HOST_TABLE} WHERE session_key = ?"),
            &format!("SELECT COUNT(*) AS n FROM {HOST_TABLE} WHERE session_key = $1"),
            vec![key.as_str().into()],
        ))
        .await
        .map_err(db_error)?
        .ok_or_else(|| Error::other("COUNT returned no row"))?;
    row.try_get::<i64>("", "n").map_err(db_error)
}
