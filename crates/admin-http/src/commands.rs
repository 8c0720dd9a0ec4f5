//! The operator commands of the `tether` binary: `demo`, `sessions list|show|delete`,
//! `leases list|expire`, `quarantine list|release`. They mirror the admin API (same queries,
//! same deletion path, same sanitizing) on a database URL, print text or JSON, and fail with
//! an exit code and a message that says what to do.

use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use tether_core::{AgentId, BindingKey, HarnessId, Namespace};
use tether_storage::{SessionFilter, Store, StoreAdmin as _, StoreOptions, redact_url};

use tether_admin_http::actions::CLI_ACTOR;
use tether_admin_http::config::ServeConfig;
use tether_admin_http::database::open_database;
use tether_admin_http::dto::{BindingBody, QuarantineBody, SessionSummary};
use tether_admin_http::error::ApiError;
use tether_admin_http::params::{MAX_PAGE_SIZE, decode_cursor, encode_cursor};
use tether_admin_http::routes::sessions::{load_session, session_detail};

/// A failed command: what to tell the operator and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CommandError {
    /// The message (says what to do).
    pub(crate) message: String,
    /// The exit code.
    pub(crate) code: u8,
}

/// Exit code: generic failure (bad input, database error).
pub(crate) const EXIT_FAILURE: u8 = 1;
/// Exit code: the session, binding or key does not exist.
pub(crate) const EXIT_NOT_FOUND: u8 = 3;
/// Exit code: a live lease or a concurrent change blocks the action.
pub(crate) const EXIT_CONFLICT: u8 = 4;
/// Exit code: the database is unreachable.
pub(crate) const EXIT_UNAVAILABLE: u8 = 5;

impl CommandError {
    /// A generic failure.
    pub(crate) fn failure(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: EXIT_FAILURE,
        }
    }

    /// The process exit code.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

impl From<ApiError> for CommandError {
    fn from(err: ApiError) -> Self {
        let code = match &err {
            ApiError::BadRequest(_) | ApiError::PageSizeTooLarge { .. } => EXIT_USAGE,
            ApiError::NotFound(_) => EXIT_NOT_FOUND,
            ApiError::LeaseHeld(_) | ApiError::Conflict(_) => EXIT_CONFLICT,
            ApiError::Unavailable(_) => EXIT_UNAVAILABLE,
            _ => EXIT_FAILURE,
        };
        Self {
            message: err.to_string(),
            code,
        }
    }
}

impl From<tether_core::Error> for CommandError {
    fn from(err: tether_core::Error) -> Self {
        ApiError::from(err).into()
    }
}

impl From<String> for CommandError {
    fn from(message: String) -> Self {
        Self::failure(message)
    }
}

/// What a command prints (a closed pipe, as in `tether … | head`, ends output quietly).
fn say(line: &str) {
    crate::cli::say(line);
}

fn json<T: serde::Serialize>(value: &T) -> Result<(), CommandError> {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| CommandError::failure(format!("cannot render JSON: {e}")))?;
    say(&text);
    Ok(())
}

fn spinner(message: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Exit code: a bad configuration or usage (blank token, unsupported URL, no database there).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit code: the database cannot be used as it is (read-only, corrupt, not a database):
/// retrying does not help until an operator fixes it.
pub(crate) const EXIT_UNUSABLE: u8 = 6;

/// How a command opens its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Open {
    /// Create the database (SQLite file and folder) when missing, and migrate it: `migrate`,
    /// `demo`.
    CreateAndMigrate,
    /// Open an existing, migrated database only: every other command (a typo in a path must
    /// not create an empty database and report "no sessions").
    ExistingOnly,
}

/// A failed open, classified for the exit code: a configuration the operator must change (2),
/// a database that cannot be used as it is (6), or one that did not answer (5).
fn open_error(err: tether_core::Error) -> CommandError {
    {
        use tether_core::{Error, StoreErrorKind};
        let code = match &err {
            Error::Store {
                kind: StoreErrorKind::Configuration { .. },
            } => EXIT_USAGE,
            Error::Store {
                kind: StoreErrorKind::Unusable { .. } | StoreErrorKind::SchemaTooNew { .. },
            } => EXIT_UNUSABLE,
            _ => EXIT_UNAVAILABLE,
        };
        let hint = match code {
            EXIT_UNAVAILABLE => {
                "; the database did not answer: check --database-url (or TETHER_DATABASE_URL) and that the server runs, then retry"
            }
            _ => "",
        };
        CommandError {
            message: format!("{err}{hint}"),
            code,
        }
    }
}

/// Opens the database behind a spinner: created and migrated, or existing only (see [`Open`]).
pub(crate) async fn open_store(database_url: &str, how: Open) -> Result<Store, CommandError> {
    let shown = redact_url(database_url);
    let config = ServeConfig::new(
        database_url,
        tether_admin_http::DEFAULT_BIND,
        &tether_admin_http::auth::Tokens::default(),
    )
    .map_err(|e| CommandError {
        message: e.to_string(),
        code: EXIT_USAGE,
    })?;
    match how {
        Open::CreateAndMigrate => {
            let bar = spinner(&format!("opening and migrating {shown}"));
            let result = open_database(&config).await;
            bar.finish_and_clear();
            Ok(result.map_err(open_error)?.store().clone())
        }
        Open::ExistingOnly => {
            let bar = spinner(&format!("opening {shown}"));
            let result =
                Store::open_with(StoreOptions::new(database_url).existing_only(true)).await;
            bar.finish_and_clear();
            result.map_err(open_error)
        }
    }
}

/// `tether migrate`: creates or upgrades the schema.
pub(crate) async fn migrate(database_url: &str) -> Result<(), CommandError> {
    open_store(database_url, Open::CreateAndMigrate).await?;
    say(&format!(
        "database {} is migrated",
        redact_url(database_url)
    ));
    Ok(())
}

/// `tether demo`: drives the example harness through the real APIs to populate the database.
pub(crate) async fn demo(database_url: &str) -> Result<(), CommandError> {
    let store = open_store(database_url, Open::CreateAndMigrate).await?;
    let bar = demo_progress(tether_example_harness::demo::STEPS);
    let summary = tether_example_harness::demo::populate(store, &|step: &str| {
        bar.set_message(step.to_owned());
        bar.inc(1);
    })
    .await;
    bar.finish_and_clear();
    let summary = summary.map_err(|e| {
        CommandError::failure(format!(
            "the demo failed: {e}; run it on a fresh database (e.g. --database-url sqlite://demo.db)"
        ))
    })?;
    say(&format!(
        "demo: {} sessions, {} turns, finalizations {} succeeded / {} fell back; context reset: {}; deleted: {}; stuck lease: {}; quarantined: {}",
        summary.sessions,
        summary.turns,
        summary.finalizations.0,
        summary.finalizations.1,
        summary.reset.as_deref().unwrap_or("-"),
        summary.deleted.as_deref().unwrap_or("-"),
        summary.stuck.as_deref().unwrap_or("-"),
        summary.quarantined.as_deref().unwrap_or("-"),
    ));
    say(&format!(
        "next: tether serve --database-url {}   (then open http://{}/)",
        redact_url(database_url),
        tether_admin_http::DEFAULT_BIND
    ));
    Ok(())
}

/// The progress bar of a demo of `steps` steps.
fn demo_progress(steps: u64) -> ProgressBar {
    let bar = ProgressBar::new(steps);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {wide_msg}") {
        bar.set_style(style);
    }
    bar
}

/// `tether demo --codex`: drives the real Codex app-server with the scripted model server to
/// populate the database (see [`crate::codex_demo`]). Fails before touching the database when
/// no Codex binary is found.
pub(crate) async fn demo_codex(database_url: &str) -> Result<(), CommandError> {
    let here = std::env::current_dir()
        .map_err(|e| CommandError::failure(format!("no current directory: {e}")))?;
    let codex = crate::codex_demo::find_codex(&here).map_err(|e| CommandError {
        message: e.to_string(),
        code: EXIT_USAGE,
    })?;
    let store = open_store(database_url, Open::CreateAndMigrate).await?;
    let bar = demo_progress(crate::codex_demo::STEPS);
    let summary = crate::codex_demo::populate(store, &codex, &|step: &str| {
        bar.set_message(step.to_owned());
        bar.inc(1);
    })
    .await;
    bar.finish_and_clear();
    let summary = summary.map_err(|e| {
        CommandError::failure(format!(
            "the Codex demo failed: {e}; run it on a fresh database (e.g. --database-url sqlite://demo.db)"
        ))
    })?;
    say(&format!(
        "demo --codex: {} sessions, {} Codex turns; finalized tool-only turn: {:?}; reset: thread {} -> {}; context reset: thread {} -> fork {}; deleted: {}",
        summary.sessions,
        summary.turns,
        summary.finalized,
        summary.reset.0,
        summary.reset.1,
        summary.context_reset.0,
        summary.context_reset.1,
        summary.deleted,
    ));
    say(&format!(
        "next: tether serve --database-url {}   (then open http://{}/)",
        redact_url(database_url),
        tether_admin_http::DEFAULT_BIND
    ));
    Ok(())
}

/// Filters of `tether sessions list`.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListArgs {
    /// Only this agent.
    pub(crate) agent: Option<String>,
    /// Only this harness.
    pub(crate) harness: Option<String>,
    /// Only sessions with (or without) a live lease.
    pub(crate) has_lease: Option<bool>,
    /// Only sessions with (or without) a quarantined key.
    pub(crate) quarantined: Option<bool>,
    /// Page size.
    pub(crate) limit: usize,
    /// The cursor printed by the previous page.
    pub(crate) cursor: Option<String>,
    /// Print JSON.
    pub(crate) json: bool,
}

fn bad(field: &str, e: impl std::fmt::Display) -> CommandError {
    CommandError {
        message: format!("invalid {field}: {e}"),
        code: EXIT_USAGE,
    }
}

/// `tether sessions list`.
pub(crate) async fn sessions_list(database_url: &str, args: ListArgs) -> Result<(), CommandError> {
    if args.limit == 0 || args.limit > MAX_PAGE_SIZE {
        return Err(bad(
            "--limit",
            format!("it must be between 1 and {MAX_PAGE_SIZE}; follow the printed cursor for more"),
        ));
    }
    let store = open_store(database_url, Open::ExistingOnly).await?;
    let after = match &args.cursor {
        Some(c) => Some(
            tether_core::SessionKey::new(&decode_cursor(c, 1)?[0])
                .map_err(|e| bad("--cursor", e))?,
        ),
        None => None,
    };
    let page = store
        .list_sessions(&SessionFilter {
            agent: args
                .agent
                .as_deref()
                .map(AgentId::new)
                .transpose()
                .map_err(|e| bad("--agent", e))?,
            harness: args
                .harness
                .as_deref()
                .map(HarnessId::new)
                .transpose()
                .map_err(|e| bad("--harness", e))?,
            has_lease: args.has_lease,
            quarantined: args.quarantined,
            after,
            limit: args.limit,
        })
        .await?;
    let sessions: Vec<SessionSummary> = page.sessions.iter().map(SessionSummary::from).collect();
    let next = page.next.map(|k| encode_cursor(&[k.as_str()]));
    if args.json {
        return json(&tether_admin_http::dto::SessionPageBody {
            sessions,
            next_cursor: next,
        });
    }
    if sessions.is_empty() {
        say("no sessions match (populate a database with `tether demo`)");
    }
    for s in &sessions {
        say(&format!(
            "{}  agent={}  generation={}  revision={}  harness={}",
            s.session_key,
            s.agent_id,
            s.session_id,
            s.lifecycle_revision,
            s.agent_harness_id.as_deref().unwrap_or("-")
        ));
    }
    if let Some(next) = next {
        say(&format!("more: --cursor {next}"));
    }
    Ok(())
}

/// Asks the operator to confirm `what` on the terminal unless `yes`; without a terminal (a
/// script) the command is refused with exit 2 unless `--yes` is given.
#[allow(clippy::print_stderr)]
pub(crate) fn confirm(yes: bool, what: &str) -> Result<(), CommandError> {
    use std::io::{BufRead as _, IsTerminal as _, Write as _};
    if yes {
        return Ok(());
    }
    let usage = |message: String| CommandError {
        message,
        code: EXIT_USAGE,
    };
    if !std::io::stdin().is_terminal() {
        return Err(usage(format!(
            "refusing to {what} without confirmation: stdin is not a terminal; pass --yes"
        )));
    }
    eprint!("tether: {what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| usage(format!("cannot read the confirmation: {e}")))?;
    if matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
        Ok(())
    } else {
        Err(CommandError::failure("not confirmed; nothing was changed"))
    }
}

/// `tether sessions show KEY`: a human summary, or the whole detail as JSON (sanitized, like
/// `GET /v1/sessions/{key}`).
pub(crate) async fn sessions_show(
    database_url: &str,
    key: &str,
    as_json: bool,
) -> Result<(), CommandError> {
    let store = open_store(database_url, Open::ExistingOnly).await?;
    let entry = load_session(&store, key).await?;
    let d = session_detail(&store, &entry).await?;
    if as_json {
        return json(&d);
    }
    say(&format!("session     {}", d.session.session_key));
    say(&format!("agent       {}", d.session.agent_id));
    say(&format!(
        "generation  {} (revision {}, previous {})",
        d.lineage.session_id,
        d.lineage.lifecycle_revision,
        d.lineage.previous_session_id.as_deref().unwrap_or("-")
    ));
    say(&format!(
        "harness     {}",
        d.session.agent_harness_id.as_deref().unwrap_or("-")
    ));
    for b in &d.bindings {
        let lease = b.lease.as_ref().map_or_else(
            || "no lease".to_owned(),
            |l| {
                format!(
                    "epoch={} holder={} {}",
                    l.epoch_label,
                    l.holder.as_deref().unwrap_or("-"),
                    if l.live {
                        format!("expires_in={}s", l.expires_in_ms / 1000)
                    } else {
                        "expired".into()
                    }
                )
            },
        );
        say(&format!("binding     {}  {}  {lease}", b.namespace, b.key));
    }
    for q in &d.quarantine {
        say(&format!("quarantined {}  reason: {}", q.key, q.reason));
    }
    for f in &d.finalizations {
        say(&format!("finalized   {}", f.content));
    }
    say(&format!(
        "transcript  {} recent entries, {} tool outcomes, {} lease events (--output json for all)",
        d.transcript_tail.len(),
        d.tool_outcomes.len(),
        d.lease_events.len()
    ));
    Ok(())
}

/// `tether sessions delete KEY --reason WHY` (the transactional deletion path; refused under a
/// live lease; recorded in the audit trail with actor `cli`).
pub(crate) async fn sessions_delete(
    database_url: &str,
    key: &str,
    reason: &str,
) -> Result<(), CommandError> {
    let why = tether_admin_http::params::reason(reason)?;
    let store = open_store(database_url, Open::ExistingOnly).await?;
    let done =
        tether_admin_http::actions::delete_session_action(&store, CLI_ACTOR, key, &why).await?;
    say(&done.message);
    Ok(())
}

/// `tether leases list`.
pub(crate) async fn leases_list(
    database_url: &str,
    namespace: Option<&str>,
    all: bool,
    limit: usize,
    as_json: bool,
) -> Result<(), CommandError> {
    let store = open_store(database_url, Open::ExistingOnly).await?;
    let ns = namespace
        .map(Namespace::new)
        .transpose()
        .map_err(|e| bad("--namespace", e))?;
    let limit = limit.clamp(1, MAX_PAGE_SIZE);
    let rows = store.list_bindings(ns.as_ref(), !all, None, limit).await?;
    let now = store.clock().now();
    let bodies: Vec<BindingBody> = rows.iter().map(|r| BindingBody::new(r, now)).collect();
    if as_json {
        return json(&bodies);
    }
    if bodies.is_empty() {
        say(if all {
            "no binding rows"
        } else {
            "no live leases (use --all to list every binding row)"
        });
    }
    for b in &bodies {
        let lease = b.lease.as_ref().map_or_else(
            || "no lease".to_owned(),
            |l| {
                format!(
                    "epoch={} ({}) holder={} expires_in={}s",
                    l.epoch_label,
                    l.epoch,
                    l.holder.as_deref().unwrap_or("-"),
                    l.expires_in_ms / 1000
                )
            },
        );
        say(&format!("{}  {}  {lease}", b.namespace, b.key));
    }
    Ok(())
}

/// `tether leases expire` (recorded in the audit trail with actor `cli`).
pub(crate) async fn leases_expire(
    database_url: &str,
    namespace: &str,
    key: &str,
    reason: &str,
    epoch: Option<u64>,
) -> Result<(), CommandError> {
    let why = tether_admin_http::params::reason(reason)?;
    let ns = Namespace::new(namespace).map_err(|e| bad("--namespace", e))?;
    let key = BindingKey::parse(key).map_err(|e| bad("--key", e))?;
    let store = open_store(database_url, Open::ExistingOnly).await?;
    let done =
        tether_admin_http::actions::expire_lease_action(&store, CLI_ACTOR, &ns, &key, epoch, &why)
            .await?;
    say(&done.message);
    Ok(())
}

/// `tether quarantine list`.
pub(crate) async fn quarantine_list(database_url: &str, as_json: bool) -> Result<(), CommandError> {
    let store = open_store(database_url, Open::ExistingOnly).await?;
    let keys: Vec<QuarantineBody> = store
        .quarantined_keys(MAX_PAGE_SIZE)
        .await?
        .iter()
        .map(QuarantineBody::from)
        .collect();
    if as_json {
        return json(&keys);
    }
    if keys.is_empty() {
        say("no quarantined keys");
    }
    for q in &keys {
        say(&format!("{}  {}  reason: {}", q.namespace, q.key, q.reason));
    }
    Ok(())
}

/// `tether quarantine release` (recorded in the audit trail with actor `cli`).
pub(crate) async fn quarantine_release(
    database_url: &str,
    namespace: &str,
    key: &str,
    reason: &str,
) -> Result<(), CommandError> {
    let why = tether_admin_http::params::reason(reason)?;
    let ns = Namespace::new(namespace).map_err(|e| bad("--namespace", e))?;
    let key = BindingKey::parse(key).map_err(|e| bad("--key", e))?;
    let store = open_store(database_url, Open::ExistingOnly).await?;
    let done =
        tether_admin_http::actions::release_quarantine_action(&store, CLI_ACTOR, &ns, &key, &why)
            .await?;
    say(&done.message);
    Ok(())
}
