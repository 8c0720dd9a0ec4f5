//! The operator commands of the `tether` binary: `demo`, `sessions list|show|delete`,
//! `leases list|expire`, `quarantine list|release`. They mirror the admin API (same queries,
//! same deletion path, same sanitizing) on a database URL, print text or JSON, and fail with
//! an exit code and a message that says what to do.

use std::process::ExitCode;
use std::time::Duration;

use axum::http::Method;
use indicatif::{ProgressBar, ProgressStyle};
use tether_core::{BindingKey, Namespace};
use tether_storage::{Store, StoreOptions, redact_url};

use tether_admin_http::ApiError;
use tether_admin_http::ServeConfig;
use tether_admin_http::actions::CLI_ACTOR;
use tether_admin_http::database::open_database;
use tether_admin_http::dto::{
    ActionResult, AuditPageBody, BindingBody, BindingPageBody, QuarantinePageBody, SessionDetail,
    SessionPageBody,
};
use tether_admin_http::params::MAX_PAGE_SIZE;
use tether_admin_http::routes::audit::AuditQuery;
use tether_admin_http::routes::bindings::{LeaseQuery, binding_page};
use tether_admin_http::routes::quarantine::QuarantineQuery;
use tether_admin_http::routes::sessions::{
    SessionQuery, load_session, session_detail, session_page,
};

use crate::client::{self, ApiClient};

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

    /// The stable name of the exit code's class, as a script matches it.
    pub(crate) fn kind(&self) -> &'static str {
        match self.code {
            EXIT_USAGE => "usage",
            EXIT_NOT_FOUND => "not_found",
            EXIT_CONFLICT => "conflict",
            EXIT_UNAVAILABLE => "unavailable",
            EXIT_UNUSABLE => "unusable",
            _ => "failure",
        }
    }

    /// The error as a command run with `--output json` prints it on stdout (its text also goes
    /// to stderr): `{"error": {"code": "not_found", "exit_code": 3, "message": "…"}}`.
    pub(crate) fn to_json(&self) -> String {
        serde_json::json!({
            "error": {
                "code": self.kind(),
                "exit_code": self.code,
                "message": self.message,
            }
        })
        .to_string()
    }
}

/// The exit code of an API error's stable code, the same whether a command ran on the
/// database or through a server.
pub(crate) fn exit_code_of(api_code: &str) -> u8 {
    match api_code {
        "bad_request"
        | "page_size_too_large"
        | "payload_too_large"
        | "uri_too_long"
        | "headers_too_large"
        | "unauthorized"
        | "forbidden" => EXIT_USAGE,
        "not_found" => EXIT_NOT_FOUND,
        "lease_held" | "conflict" | "epoch_mismatch" | "no_lease" => EXIT_CONFLICT,
        "unavailable" => EXIT_UNAVAILABLE,
        _ => EXIT_FAILURE,
    }
}

impl From<ApiError> for CommandError {
    fn from(err: ApiError) -> Self {
        Self {
            code: exit_code_of(err.code()),
            message: in_cli_terms(&err.to_string()),
        }
    }
}

/// An API message as an operator at the command line reads it: a hint that names an API
/// request names the command that does the same.
pub(crate) fn in_cli_terms(message: &str) -> String {
    message.replace(
        tether_admin_http::routes::sessions::LIST_SESSIONS_HINT,
        "list sessions with `tether sessions list`",
    )
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
/// a database that cannot be used as it is (6), one that did not answer (5), or any other
/// failure the database reported (1).
pub(crate) fn open_error(err: tether_core::Error) -> CommandError {
    {
        use tether_core::{Error, StoreErrorKind};
        let code = match &err {
            Error::Store {
                kind: StoreErrorKind::Configuration { .. },
            } => EXIT_USAGE,
            Error::Store {
                kind: StoreErrorKind::Unusable { .. } | StoreErrorKind::SchemaTooNew { .. },
            } => EXIT_UNUSABLE,
            Error::Store {
                kind: StoreErrorKind::Unavailable { .. },
            } => EXIT_UNAVAILABLE,
            _ => EXIT_FAILURE,
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
    // The demo's sessions, leases and stuck lease are made for an empty database: on one that
    // holds sessions (an earlier demo's) it would wait behind its own stuck lease, then fail.
    let (sessions, _) = store.admin_counts().await?;
    if sessions > 0 {
        return Err(CommandError {
            message: format!(
                "the demo populates an empty database, and {} already holds {sessions} session(s): pass another --database-url (e.g. sqlite://demo.db)",
                redact_url(database_url)
            ),
            code: EXIT_USAGE,
        });
    }
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
    // The ops sessions' second turns script a finalization answer outside the contract: their
    // fallbacks (and the warnings logged for them) are the demo's, not a fault.
    let scripted = if summary.finalizations.1 > 0 {
        " (scripted: the ops sessions' models answer outside the contract, the host's fallback answers)"
    } else {
        ""
    };
    say(&format!(
        "demo: {} sessions, {} turns, finalizations {} succeeded / {} fell back{scripted}; context reset: {}; deleted: {}; stuck lease: {}; quarantined: {}",
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

/// Where an operator command acts: a database directly, or a running admin service.
#[derive(Debug, Clone)]
pub(crate) enum Backend {
    /// The database at this URL (existing and migrated); actions are recorded as `cli`.
    Database(String),
    /// A running service (`--server`); actions are recorded under the token's name.
    Server(ApiClient),
}

impl Backend {
    async fn store(url: &str) -> Result<Store, CommandError> {
        open_store(url, Open::ExistingOnly).await
    }
}

fn bad(field: &str, e: impl std::fmt::Display) -> CommandError {
    CommandError {
        message: format!("invalid {field}: {e}"),
        code: EXIT_USAGE,
    }
}

/// The page size of a list command: 1 to [`MAX_PAGE_SIZE`], else bad input (exit 2).
fn limit(limit: usize) -> Result<usize, CommandError> {
    if limit == 0 || limit > MAX_PAGE_SIZE {
        return Err(bad(
            "--limit",
            format!("it must be between 1 and {MAX_PAGE_SIZE}; follow the printed cursor for more"),
        ));
    }
    Ok(limit)
}

/// Prints the cursor line of a page.
fn more(next: Option<&str>) {
    if let Some(next) = next {
        say(&format!("more: --cursor {next}"));
    }
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
    /// Only sessions whose key contains this text.
    pub(crate) search: Option<String>,
    /// Page size.
    pub(crate) limit: usize,
    /// The cursor printed by the previous page.
    pub(crate) cursor: Option<String>,
    /// Print JSON.
    pub(crate) json: bool,
}

/// `tether sessions list`.
pub(crate) async fn sessions_list(backend: &Backend, args: ListArgs) -> Result<(), CommandError> {
    let query = SessionQuery {
        agent: args.agent,
        harness: args.harness,
        has_lease: args.has_lease,
        quarantined: args.quarantined,
        q: args.search,
        cursor: args.cursor,
        limit: Some(limit(args.limit)?),
    };
    let page: SessionPageBody = match backend {
        Backend::Database(url) => session_page(&Backend::store(url).await?, &query).await?,
        Backend::Server(api) => {
            api.get(&format!(
                "/v1/sessions{}",
                client::query(&[
                    ("agent", query.agent.clone()),
                    ("harness", query.harness.clone()),
                    ("has_lease", query.has_lease.map(|b| b.to_string())),
                    ("quarantined", query.quarantined.map(|b| b.to_string())),
                    ("q", query.q.clone()),
                    ("cursor", query.cursor.clone()),
                    ("limit", query.limit.map(|l| l.to_string())),
                ])
            ))
            .await?
        }
    };
    if args.json {
        return json(&page);
    }
    if page.sessions.is_empty() {
        say("no sessions match (populate a database with `tether demo`)");
    }
    for s in &page.sessions {
        say(&format!(
            "{}  agent={}  generation={}  revision={}  harness={}",
            s.session_key,
            s.agent_id,
            s.session_id,
            s.lifecycle_revision,
            s.agent_harness_id.as_deref().unwrap_or("-")
        ));
    }
    more(page.next_cursor.as_deref());
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
    backend: &Backend,
    key: &str,
    as_json: bool,
) -> Result<(), CommandError> {
    let d: SessionDetail = match backend {
        Backend::Database(url) => {
            let store = Backend::store(url).await?;
            let entry = load_session(&store, key).await?;
            session_detail(&store, &entry).await?
        }
        Backend::Server(api) => {
            api.get(&format!("/v1/sessions/{}", client::encode(key)))
                .await?
        }
    };
    if as_json {
        return json(&d);
    }
    say(&format!("session     {}", d.session.session_key));
    say(&format!("agent       {}", d.session.agent_id));
    let previous = match (&d.lineage.previous_session_id, d.lineage.previous_change) {
        (Some(id), Some(change)) => format!("{id} by {}", change.as_str()),
        (Some(id), None) => id.clone(),
        (None, _) => "-".to_owned(),
    };
    say(&format!(
        "generation  {} (revision {}, previous {previous})",
        d.lineage.session_id, d.lineage.lifecycle_revision,
    ));
    say(&format!(
        "harness     {}",
        d.session.agent_harness_id.as_deref().unwrap_or("-")
    ));
    for b in &d.bindings {
        say(&format!(
            "binding     {}  {}{}  {}",
            b.namespace,
            b.key,
            native_text(b),
            lease_text(b)
        ));
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

/// The native runtime's id of a binding's thread (` native=…`), when the row names one.
fn native_text(b: &BindingBody) -> String {
    b.native_id
        .as_deref()
        .map_or_else(String::new, |id| format!("  native={id}"))
}

/// A binding's lease in one line.
fn lease_text(b: &BindingBody) -> String {
    b.lease.as_ref().map_or_else(
        || "no lease".to_owned(),
        |l| {
            format!(
                "epoch={} ({}) holder={} {}",
                l.epoch_label,
                l.epoch,
                l.holder.as_deref().unwrap_or("-"),
                if l.live {
                    format!("expires_in={}s", l.expires_in_ms / 1000)
                } else {
                    "expired".into()
                }
            )
        },
    )
}

/// Prints what an action did.
fn done(result: &ActionResult, as_json: bool) -> Result<(), CommandError> {
    if as_json {
        return json(result);
    }
    say(&result.message);
    Ok(())
}

/// `tether sessions delete KEY --reason WHY` (the transactional deletion path; refused under a
/// live lease; recorded in the audit trail: as `cli` on a database, under the token's name
/// through a service).
pub(crate) async fn sessions_delete(
    backend: &Backend,
    key: &str,
    reason: &str,
    as_json: bool,
) -> Result<(), CommandError> {
    let why = tether_admin_http::params::reason(reason)?;
    let result = match backend {
        Backend::Database(url) => {
            let store = Backend::store(url).await?;
            tether_admin_http::actions::delete_session_action(&store, CLI_ACTOR, key, &why).await?
        }
        Backend::Server(api) => {
            api.send(
                Method::DELETE,
                &format!("/v1/sessions/{}", client::encode(key)),
                &serde_json::json!({ "reason": why }),
            )
            .await?
        }
    };
    done(&result, as_json)
}

/// Filters of `tether leases list`.
#[derive(Debug, Clone, Default)]
pub(crate) struct LeaseListArgs {
    /// Only this namespace.
    pub(crate) namespace: Option<String>,
    /// Every live binding row, leased or not.
    pub(crate) all: bool,
    /// Only rows held by exactly this holder.
    pub(crate) holder: Option<String>,
    /// Only rows whose namespace, key or holder contains this text.
    pub(crate) search: Option<String>,
    /// Page size.
    pub(crate) limit: usize,
    /// The cursor printed by the previous page.
    pub(crate) cursor: Option<String>,
    /// Print JSON.
    pub(crate) json: bool,
}

/// `tether leases list`.
pub(crate) async fn leases_list(
    backend: &Backend,
    args: LeaseListArgs,
) -> Result<(), CommandError> {
    let query = LeaseQuery {
        namespace: args.namespace,
        leased: Some(!args.all),
        holder: args.holder,
        q: args.search,
        cursor: args.cursor,
        limit: Some(limit(args.limit)?),
    };
    let page: BindingPageBody = match backend {
        Backend::Database(url) => binding_page(&Backend::store(url).await?, &query).await?,
        Backend::Server(api) => {
            api.get(&format!(
                "/v1/leases{}",
                client::query(&[
                    ("namespace", query.namespace.clone()),
                    ("leased", query.leased.map(|b| b.to_string())),
                    ("holder", query.holder.clone()),
                    ("q", query.q.clone()),
                    ("cursor", query.cursor.clone()),
                    ("limit", query.limit.map(|l| l.to_string())),
                ])
            ))
            .await?
        }
    };
    if args.json {
        return json(&page);
    }
    if page.bindings.is_empty() {
        say(if args.all {
            "no binding rows match"
        } else {
            "no live leases match (use --all to list every binding row)"
        });
    }
    for b in &page.bindings {
        say(&format!(
            "{}  {}  session={}{}  {}",
            b.namespace,
            b.key,
            b.session_key.as_deref().unwrap_or("-"),
            native_text(b),
            lease_text(b)
        ));
    }
    more(page.next_cursor.as_deref());
    Ok(())
}

/// `tether leases expire` (recorded in the audit trail).
pub(crate) async fn leases_expire(
    backend: &Backend,
    namespace: &str,
    key: &str,
    reason: &str,
    epoch: Option<u64>,
    as_json: bool,
) -> Result<(), CommandError> {
    let why = tether_admin_http::params::reason(reason)?;
    let ns = Namespace::new(namespace).map_err(|e| bad("--namespace", e))?;
    let key = BindingKey::parse(key).map_err(|e| bad("--key", e))?;
    let result = match backend {
        Backend::Database(url) => {
            let store = Backend::store(url).await?;
            tether_admin_http::actions::expire_lease_action(
                &store, CLI_ACTOR, &ns, &key, epoch, &why,
            )
            .await?
        }
        Backend::Server(api) => {
            api.send(
                Method::POST,
                &format!(
                    "/v1/namespaces/{}/bindings/{}/expire-lease",
                    client::encode(ns.as_str()),
                    client::encode(key.as_str())
                ),
                &serde_json::json!({ "reason": why, "expected_epoch": epoch }),
            )
            .await?
        }
    };
    done(&result, as_json)
}

/// `tether quarantine list`.
pub(crate) async fn quarantine_list(
    backend: &Backend,
    search: Option<String>,
    page_size: usize,
    cursor: Option<String>,
    as_json: bool,
) -> Result<(), CommandError> {
    let query = QuarantineQuery {
        q: search,
        limit: Some(limit(page_size)?),
        cursor,
    };
    let page: QuarantinePageBody = match backend {
        Backend::Database(url) => {
            tether_admin_http::routes::quarantine::quarantine_list(
                &Backend::store(url).await?,
                &query,
            )
            .await?
        }
        Backend::Server(api) => {
            api.get(&format!(
                "/v1/quarantine{}",
                client::query(&[
                    ("q", query.q.clone()),
                    ("cursor", query.cursor.clone()),
                    ("limit", query.limit.map(|l| l.to_string())),
                ])
            ))
            .await?
        }
    };
    if as_json {
        return json(&page);
    }
    if page.quarantine.is_empty() {
        say("no quarantined keys");
    }
    for q in &page.quarantine {
        say(&format!(
            "{}  {}  session={}  reason: {}",
            q.namespace,
            q.key,
            q.session_key.as_deref().unwrap_or("-"),
            q.reason
        ));
    }
    more(page.next_cursor.as_deref());
    Ok(())
}

/// `tether quarantine release` (recorded in the audit trail).
pub(crate) async fn quarantine_release(
    backend: &Backend,
    namespace: &str,
    key: &str,
    reason: &str,
    as_json: bool,
) -> Result<(), CommandError> {
    let why = tether_admin_http::params::reason(reason)?;
    let ns = Namespace::new(namespace).map_err(|e| bad("--namespace", e))?;
    let key = BindingKey::parse(key).map_err(|e| bad("--key", e))?;
    let result = match backend {
        Backend::Database(url) => {
            let store = Backend::store(url).await?;
            tether_admin_http::actions::release_quarantine_action(
                &store, CLI_ACTOR, &ns, &key, &why,
            )
            .await?
        }
        Backend::Server(api) => {
            api.send(
                Method::POST,
                &format!(
                    "/v1/quarantine/{}/{}/release",
                    client::encode(ns.as_str()),
                    client::encode(key.as_str())
                ),
                &serde_json::json!({ "reason": why }),
            )
            .await?
        }
    };
    done(&result, as_json)
}

/// Filters of `tether audit list`.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuditListArgs {
    /// Only this actor.
    pub(crate) actor: Option<String>,
    /// Only this action.
    pub(crate) action: Option<String>,
    /// Only this outcome.
    pub(crate) outcome: Option<String>,
    /// Page size.
    pub(crate) limit: usize,
    /// The cursor printed by the previous page.
    pub(crate) cursor: Option<String>,
    /// Print JSON.
    pub(crate) json: bool,
}

/// `tether audit list`: the operators' audit trail, newest first.
pub(crate) async fn audit_list(backend: &Backend, args: AuditListArgs) -> Result<(), CommandError> {
    let query = AuditQuery {
        actor: args.actor,
        action: args.action,
        outcome: args.outcome,
        limit: Some(limit(args.limit)?),
        cursor: args.cursor,
    };
    let page: AuditPageBody = match backend {
        Backend::Database(url) => {
            tether_admin_http::routes::audit::audit_list(&Backend::store(url).await?, &query)
                .await?
        }
        Backend::Server(api) => {
            api.get(&format!(
                "/v1/audit{}",
                client::query(&[
                    ("actor", query.actor.clone()),
                    ("action", query.action.clone()),
                    ("outcome", query.outcome.clone()),
                    ("cursor", query.cursor.clone()),
                    ("limit", query.limit.map(|l| l.to_string())),
                ])
            ))
            .await?
        }
    };
    if args.json {
        return json(&page);
    }
    if page.entries.is_empty() {
        say("no recorded actions match");
    }
    for e in &page.entries {
        say(&format!(
            "{}  {}  {}  {}  {}  {}  reason: {}",
            e.id,
            tether_core::Timestamp::from_millis(e.at_ms),
            e.actor,
            e.action,
            e.target,
            e.outcome,
            e.reason
        ));
    }
    more(page.next_cursor.as_deref());
    Ok(())
}
