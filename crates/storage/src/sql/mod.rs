//! The SQL store over sea-orm 2: SQLite (default) or PostgreSQL, chosen by URL.
//!
//! - `sqlite://path/to/file.db` (created when missing; `?mode=rwc` is accepted),
//!   `sqlite::memory:` (one private in-memory database per store);
//! - `postgres://user@host:port/db` (feature `postgres`).
//!
//! SQLite runs in WAL mode with `synchronous=FULL` unless [`StoreOptions::synchronous_normal`]
//! asks for `NORMAL`, a busy timeout, foreign keys on, and every writer starts with
//! `BEGIN IMMEDIATE`. On a database file the store's writes (writer transactions and lone
//! writes in autocommit) run on a connection of their own, the writer connection (see
//! [`Writer`]), and reads on the pool beside it; an in-memory database has one connection. On
//! PostgreSQL writers lock the row (`SELECT … FOR UPDATE`). Statement logging is off unless
//! [`StoreOptions::log_statements`] turns it on. Migrations run on open inside a transaction;
//! a database whose schema is newer than this binary is refused.
//!
//! Revisions and lease epochs: a new row lifetime (first write, or a write after the row was
//! deleted or swept) draws a base from a store-wide counter (a sequence on PostgreSQL) and
//! starts at `draw << 32`; later writes of that row count up from it (revision + 1, epoch + 1 per
//! acquisition, the last epoch kept after a release). So updates touch only their own row, and
//! a recreated row never reuses a revision or an epoch of an earlier lifetime.

mod actions;
mod admin_read;
mod binding;
mod clock;
mod commit;
mod group;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod held;
mod host;
mod host_tx;
mod maintenance;
mod observed;
mod placeholders;
mod quarantine;
mod renew;
mod row_tx;

pub use self::actions::ForceExpireOutcome;
pub use self::admin_read::{
    BindingRecord, ListedSession, NamespaceSummary, RenewLatencyHistogram, SessionFilter,
    SessionPage, session_binding_keys,
};
pub use self::binding::epoch_parts;
pub use self::clock::ServerClock;
#[cfg(feature = "test-support")]
pub use self::commit::CommitFault;
#[cfg(feature = "test-support")]
pub(crate) use self::commit::commit_failed;
pub(crate) use self::commit::for_key;
#[cfg(feature = "test-support")]
pub use self::group::GroupCommitHold;
pub use self::group::GroupCommitStats;
pub use self::host_tx::SqlHostTransaction;
pub use self::operator::{
    AuditEntry, AuditOutcome, AuditPage, FinalizationCounts, NewAuditEntry, QuarantineCursor,
};
pub use self::row_tx::SqlRowTransaction;
mod migration;
mod operator;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use sea_orm::{
    ConnectOptions, Database, DatabaseConnection, DbBackend, DbErr, Statement, TransactionTrait,
    Value,
};
use sea_orm_migration::MigratorTrait;
use tether_core::{Cause, Clock, Error, Namespace, NamespaceConfig, StoreErrorKind, SystemClock};

use self::migration::Migrator;

/// The PostgreSQL advisory lock a migration holds (`pg_advisory_xact_lock`): the bytes of
/// `"tethermg"`, a key no other user of the database is likely to pick.
const MIGRATION_LOCK: i64 = 0x7465_7468_6572_6d67;

/// How to open a [`Store`].
#[derive(Clone)]
pub struct StoreOptions {
    url: String,
    clock: Arc<dyn Clock>,
    synchronous_normal: bool,
    temp_store_memory: bool,
    log_statements: bool,
    max_connections: u32,
    busy_timeout: Duration,
    connect_timeout: Duration,
    existing_only: bool,
    group_commit: bool,
    /// Tests only: a SQLite file's writer connection opens this path (and none of the
    /// store's connection settings) instead of the store's file, so that it can fail to open
    /// after the readers' pool opened.
    #[cfg(test)]
    writer_path: Option<std::path::PathBuf>,
}

impl fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreOptions")
            .field("url", &redact_url(&self.url))
            .field("clock", &self.clock)
            .field("synchronous_normal", &self.synchronous_normal)
            .field("temp_store_memory", &self.temp_store_memory)
            .field("log_statements", &self.log_statements)
            .field("max_connections", &self.max_connections)
            .field("busy_timeout", &self.busy_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("existing_only", &self.existing_only)
            .field("group_commit", &self.group_commit)
            .finish()
    }
}

impl StoreOptions {
    /// Options for `url` with the defaults: system clock, `synchronous=FULL`, SQLite's
    /// temporary files in memory, no statement logging, 8 pooled connections (on a SQLite file
    /// the writer connection comes on top; 1 in all for `sqlite::memory:`), 5 s busy timeout,
    /// 10 s connect timeout.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            clock: Arc::new(SystemClock),
            synchronous_normal: false,
            temp_store_memory: true,
            log_statements: false,
            max_connections: 8,
            busy_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            existing_only: false,
            group_commit: true,
            #[cfg(test)]
            writer_path: None,
        }
    }

    /// Opens an existing, fully migrated database only: a missing SQLite file is not created
    /// and pending migrations are not run; either is refused with
    /// [`StoreErrorKind::Configuration`] saying what to do. For tools that only inspect or
    /// act on a database (a typo in a path must not create an empty one).
    #[must_use]
    pub fn existing_only(mut self, yes: bool) -> Self {
        self.existing_only = yes;
        self
    }

    /// The clock deciding expiry (tests use a fake clock; several hosts on PostgreSQL should
    /// use a server-time clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// SQLite only: `synchronous=NORMAL` (faster; may lose the last commits on power loss).
    #[must_use]
    pub fn synchronous_normal(mut self, yes: bool) -> Self {
        self.synchronous_normal = yes;
        self
    }

    /// SQLite only: where the store's connections keep SQLite's temporary files
    /// (`PRAGMA temp_store`); in memory by default.
    ///
    /// The one a busy store makes is the *statement journal*: the undo record of a statement
    /// that changes several rows inside a transaction (a group-commit batch's update and its
    /// lease events insert), kept so that a failed statement undoes only itself. SQLite keeps
    /// it in memory up to 64 KiB, then moves it to a file it creates, writes and deletes in
    /// the temporary directory: under concurrency, once per batch of acquisitions or releases
    /// (their lease events land on many pages of the event index). In memory, a statement
    /// that changes a large part of a table inside a transaction (a host's own bulk `UPDATE`
    /// in a host transaction, say) holds a copy of every page it changes until it ends; turn
    /// this off (`false`: SQLite's default, files) when such statements are larger than the
    /// memory to spare. A database file's migrations run on a connection of their own with
    /// SQLite's default (an in-memory database has one connection, and nothing on disk).
    #[must_use]
    pub fn temp_store_memory(mut self, yes: bool) -> Self {
        self.temp_store_memory = yes;
        self
    }

    /// Logs every SQL statement (debug level) when `true`.
    #[must_use]
    pub fn log_statements(mut self, yes: bool) -> Self {
        self.log_statements = yes;
        self
    }

    /// Largest connection pool (at least 1).
    ///
    /// On a SQLite database file this is the readers' pool: the store's writes run on a
    /// connection of their own beside it (the writer connection), so the store opens at most
    /// `n + 1` connections to the file, and `max_connections(1)` means one reader and the
    /// writer. An in-memory SQLite database always has exactly one connection, for everything.
    #[must_use]
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How long to wait for the server when connecting or taking a pooled connection.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Group commit of lifecycle writes (acquisitions, writes under a lease, renewals and
    /// releases, conditional registrations and deletions), on by default: concurrent writes
    /// share one transaction and one COMMIT, each with its own compare-and-swap and its own
    /// outcome, and no write is acknowledged before the COMMIT that carries it. A write alone
    /// writes as before (one owner pays nothing for it). Turn it off to give every write its
    /// own transaction. On a SQLite file a write alone then takes no write slot: when a writer
    /// transaction holds the writer connection, it waits for that connection at most the
    /// [`connect timeout`](Self::connect_timeout), where a transaction waits for the write slot
    /// at most the [`busy timeout`](Self::busy_timeout).
    #[must_use]
    pub fn group_commit(mut self, yes: bool) -> Self {
        self.group_commit = yes;
        self
    }

    /// SQLite busy timeout (also how long a writer waits for the store's write slot).
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }
}

/// How a writer transaction ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Commit the writes.
    Commit,
    /// Nothing to keep.
    Rollback,
}

/// The SQL binding store (cheap to clone: clones share the pool and namespace settings).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    db: DatabaseConnection,
    backend: DbBackend,
    clock: Arc<dyn Clock>,
    namespaces: RwLock<HashMap<Namespace, NamespaceConfig>>,
    url: String,
    group: group::GroupCommit,
    /// Whether lifecycle writes go through group commit.
    grouped: bool,
    /// PostgreSQL: the connection kept between lone statements ([`Store::query_one_alone`]).
    #[cfg(feature = "postgres")]
    held_postgres: held::HeldConnection<sea_orm::sqlx::Postgres>,
    /// A SQLite file's kept reader connection and writer connection; `None` for an in-memory
    /// SQLite database (whose one connection is the whole database and must stay free for
    /// everyone else) and on PostgreSQL.
    #[cfg(feature = "sqlite")]
    sqlite_file: Option<SqliteFile>,
    #[cfg(feature = "test-support")]
    commit_faults: commit::CommitFaults,
}

/// The connections of a SQLite file store beyond its readers' pool.
#[cfg(feature = "sqlite")]
struct SqliteFile {
    /// The readers' connection kept between lone reads ([`Store::query_one_alone`]).
    readers_held: held::HeldConnection<sea_orm::sqlx::Sqlite>,
    /// The connection every write of the store runs on.
    writer: Writer,
}

#[cfg(all(test, feature = "sqlite"))]
impl Inner {
    /// Tests: the kept connections of a SQLite file store (panics on any other store).
    fn file_connections(&self) -> &SqliteFile {
        self.sqlite_file.as_ref().expect("a SQLite file store")
    }
}

/// The writer connection of a SQLite file: a pool of exactly one connection, beside the
/// readers' pool, on which every writer transaction of the store begins
/// ([`Store::begin_in_slot`]) and every lone write in autocommit runs
/// ([`Store::execute_alone_sqlite`]).
///
/// Why: SQLite throws a connection's page cache away whenever another connection wrote to the
/// database since it last read. Writers of one store already take turns (the write slot, see
/// the `group` module), so one connection loses them no concurrency, and it finds the pages
/// of the previous write (the tables, the lease event index) still in its cache instead of
/// reading them again. Readers keep the pool and read beside the writer (WAL).
///
/// Architecture Invariant: the writer connection is taken only after the write slot (a
/// writer transaction) or without waiting for it (a lone write when group commit is off), and
/// nothing that holds it waits for the slot or for another writer transaction, so writers never
/// wait for each other in a circle. A lone write keeps it between lone writes like the readers'
/// kept connection (see the `held` module), but a transaction about to take it takes it back
/// at once instead of waiting for the linger.
#[cfg(feature = "sqlite")]
struct Writer {
    /// The pool of one connection (a broken connection is replaced by the pool).
    db: DatabaseConnection,
    /// The writer connection kept between lone writes.
    held: held::HeldConnection<sea_orm::sqlx::Sqlite>,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("url", &self.inner.url)
            .field("backend", &self.inner.backend)
            .finish_non_exhaustive()
    }
}

/// The URL with any password replaced, for logs and errors.
/// `url` with every password in it masked as `***`: the one in the user-info part
/// (`postgres://user:secret@host/db` → `postgres://user:***@host/db`) and any `password` or
/// `sslpassword` query parameter. Use it wherever a database URL is shown or logged.
///
/// ```
/// use tether_storage::redact_url;
/// assert_eq!(redact_url("postgres://u:pw@h/db"), "postgres://u:***@h/db");
/// assert_eq!(redact_url("postgres://h/db?user=u&password=pw"), "postgres://h/db?user=u&password=***");
/// assert_eq!(redact_url("sqlite://data/tether.db"), "sqlite://data/tether.db");
/// ```
pub fn redact_url(url: &str) -> String {
    let masked = mask_user_info(url);
    let (base, query) = match masked.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (masked.as_str(), None),
    };
    let mut out = base.to_owned();
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _))
                    if name.eq_ignore_ascii_case("password")
                        || name.eq_ignore_ascii_case("sslpassword") =>
                {
                    format!("{name}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

/// `url` with the password of its user-info part masked. The user-info ends at the last `@` of
/// the authority; when the authority has none but a `user:` comes first and an `@` follows
/// later, the password holds an unencoded `/`, `?` or `#` (not a valid URL, and still never
/// shown): everything up to the last `@` is masked.
fn mask_user_info(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let at = authority.rfind('@').or_else(|| {
        // `host:5432` is a host and a port, not a user and a password.
        let (_, after_colon) = authority.split_once(':')?;
        if after_colon.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        rest.rfind('@')
    });
    let Some(at) = at else {
        return url.to_owned();
    };
    let user_info = &rest[..at];
    let masked = match user_info.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => user_info.to_owned(),
    };
    format!("{}://{masked}{}", &url[..scheme_end], &rest[at..])
}

/// The file path of a `sqlite://PATH[?query]` or `sqlite:PATH` URL, if it names a file.
#[cfg(feature = "sqlite")]
fn sqlite_path(url: &str) -> Option<&str> {
    let rest = url.trim();
    let rest = rest
        .strip_prefix("sqlite://")
        .or_else(|| rest.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then_some(path)
}

fn configuration(message: impl Into<String>) -> Error {
    Error::store(StoreErrorKind::Configuration {
        message: message.into(),
    })
}

/// A database an operator must repair before it can be used (a schema missing what migrations
/// create, a corrupted counter): [`StoreErrorKind::Unusable`], without a driver error.
pub(crate) fn unusable(message: impl Into<String>) -> Error {
    Error::store(StoreErrorKind::Unusable {
        message: message.into(),
        cause: None,
    })
}

/// A count or limit as a SQL `BIGINT` (saturating: no stored count comes near it).
pub(crate) fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A duration as whole microseconds in a SQL `BIGINT` (saturating), as `latency_us` stores it.
pub(crate) fn micros(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// The error of a stored value that does not decode: what it is, and what to do.
pub(crate) fn corrupt(what: &str, detail: impl std::fmt::Display) -> Error {
    Error::other(format!(
        "stored {what} is corrupted ({detail}); back up the database and repair the row"
    ))
}

/// What a database error says about the database, read from its code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    /// Busy, locked, out of space or memory, shutting down, unreachable: retry later.
    Transient(&'static str),
    /// Read-only, corrupt, not a database: an operator must fix it.
    Unusable(&'static str),
    /// Anything else.
    Other,
}

/// The code of the error the database answered in `err` (SQLite's extended result code as a
/// number, PostgreSQL's SQLSTATE); `None` for an error the database did not answer.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn database_code(err: &DbErr) -> Option<std::borrow::Cow<'_, str>> {
    use sea_orm::RuntimeErr;
    let (DbErr::Exec(RuntimeErr::SqlxError(e))
    | DbErr::Query(RuntimeErr::SqlxError(e))
    | DbErr::Conn(RuntimeErr::SqlxError(e))) = err
    else {
        return None;
    };
    let sea_orm::sqlx::Error::Database(db) = &**e else {
        return None;
    };
    db.code()
}

/// Without a backend no database answers: there is no code to read.
#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
fn database_code(_: &DbErr) -> Option<std::borrow::Cow<'_, str>> {
    None
}

/// The code the database answered for the failed statement behind `error`: PostgreSQL's
/// SQLSTATE (`"23505"` for a unique violation), SQLite's extended result code as a number
/// (`"2067"` for a unique constraint, `"1555"` for a primary key). `None` when no database
/// answered: a refusal of Tether's own, a connection that failed, an unknown outcome without
/// the database's word.
///
/// A host's own statements in Tether's transaction
/// ([`SqlHostTransaction::execute`](crate::SqlHostTransaction::execute)) fail as a
/// [`StoreErrorKind::Backend`] (or `Unavailable` when the condition is transient) with the
/// driver's error as its cause; this reads that error's code, so the host can tell its own
/// constraint's violation from the rest.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use tether_storage::{HostBackend as _, Store, database_error_code};
///
/// let store = Store::open("sqlite::memory:").await?;
/// let tx = store.begin_host().await?;
/// tx.execute("CREATE TABLE host_items (id INTEGER PRIMARY KEY)", vec![]).await?;
/// tx.execute("INSERT INTO host_items (id) VALUES ($1)", vec![1.into()]).await?;
/// let again = tx.execute("INSERT INTO host_items (id) VALUES ($1)", vec![1.into()]).await;
/// assert_eq!(database_error_code(&again.unwrap_err()).as_deref(), Some("1555"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub fn database_error_code(error: &Error) -> Option<String> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = next {
        let cause = current.downcast_ref::<Cause>();
        if let Some(db) = cause
            .and_then(|c| c.downcast_ref::<DbErr>())
            .or_else(|| current.downcast_ref::<DbErr>())
        {
            return database_code(db).map(std::borrow::Cow::into_owned);
        }
        // A `Cause`'s own `source` skips the error it holds: step into that error.
        next = match cause {
            Some(c) => Some(c.get()),
            None => current.source(),
        };
    }
    None
}

/// Whether `err` is an error the database answered to a statement (it ran, or was refused,
/// and the database said so), as opposed to a statement whose answer never came.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn answered_statement(err: &DbErr) -> bool {
    use sea_orm::RuntimeErr;
    match err {
        DbErr::Exec(RuntimeErr::SqlxError(e)) | DbErr::Query(RuntimeErr::SqlxError(e)) => {
            matches!(&**e, sea_orm::sqlx::Error::Database(_))
        }
        _ => false,
    }
}

/// Without a backend no statement reaches a database.
#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
fn answered_statement(_: &DbErr) -> bool {
    false
}

/// Whether SQLite answered `err` with "busy" or "locked" (result codes 5 and 6, extended or
/// not).
fn sqlite_busy(err: &DbErr) -> bool {
    database_code(err)
        .and_then(|code| sqlite_primary_code(&code))
        .is_some_and(|code| matches!(code, 5 | 6))
}

/// The primary result code of a SQLite error code (the low byte of an extended code), or
/// `None` for a PostgreSQL SQLSTATE. SQLite answers its (extended) code as a number of at most
/// four digits (the largest is below 10,000); PostgreSQL a five-character SQLSTATE, which may
/// be all digits too (`28000`, `40001`, `53300`): the length tells them apart.
fn sqlite_primary_code(code: &str) -> Option<i64> {
    (code.len() < 5)
        .then(|| code.parse::<i64>().ok())
        .flatten()
        .map(|extended| extended & 0xff)
}

fn condition(err: &DbErr) -> Condition {
    database_code(err).map_or(Condition::Other, |code| condition_of_code(&code))
}

/// What the database's error code `code` says about the database (see [`condition`]).
fn condition_of_code(code: &str) -> Condition {
    if let Some(primary) = sqlite_primary_code(code) {
        return match primary {
            5 | 6 => Condition::Transient("the database is busy; retry"),
            7 => Condition::Transient("the database ran out of memory; retry"),
            10 => Condition::Transient("a disk I/O error occurred; check the disk and retry"),
            13 => Condition::Transient("the database or disk is full; free space and retry"),
            8 => Condition::Unusable(
                "the database file (or its folder) is read-only; make it writable for this user",
            ),
            11 | 26 => Condition::Unusable(
                "the file is corrupt or not a Tether database; restore it from a backup",
            ),
            14 => Condition::Unusable("the database file cannot be opened; check the path"),
            _ => Condition::Other,
        };
    }
    match code {
        c if c.starts_with("08") => {
            Condition::Transient("the connection to the database failed; retry")
        }
        c if c.starts_with("53") => Condition::Transient(
            "the database server is out of resources (disk, memory, connections); retry",
        ),
        "57P01" | "57P02" | "57P03" => {
            Condition::Transient("the database server is shutting down or starting; retry")
        }
        "40001" | "40P01" => {
            Condition::Transient("the transaction was cancelled by a conflict; retry")
        }
        "25006" => Condition::Unusable(
            "the database server is read-only (a standby?); connect to the primary",
        ),
        "42P01" => Condition::Unusable(
            "a table is missing (a database Tether never migrated, or dropped and made again under a running process): run `tether migrate`",
        ),
        "3D000" => Condition::Unusable(
            "the database does not exist; create it (createdb) or fix the database name in the URL",
        ),
        "28000" | "28P01" => Condition::Unusable(
            "the server refused this user or password; fix the credentials in the URL",
        ),
        c if c.starts_with("XX") => {
            Condition::Unusable("the database server reports corrupted data; check the server")
        }
        _ => Condition::Other,
    }
}

/// The text of a database error as an operator or host reads it. PostgreSQL's driver ends its
/// message with the line of the server's own C source that raised it (`… does not exist at
/// line 1392`), which reads as a line of the statement: it is replaced by the SQLSTATE, which
/// says what happened (`… does not exist (SQLSTATE 42P01)`).
fn driver_text(err: &DbErr) -> String {
    let text = err.to_string();
    let Some(code) = database_code(err).filter(|code| sqlite_primary_code(code).is_none()) else {
        return text;
    };
    let Some(at) = text.rfind(" at line ") else {
        return text;
    };
    let tail = &text[at + " at line ".len()..];
    let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return text;
    }
    format!("{} (SQLSTATE {code}){}", &text[..at], &tail[digits..])
}

/// The `n` column of a one-row `SELECT COUNT(*) AS n …` run on `conn` (0 when no row comes
/// back).
pub(crate) async fn count_rows<C: sea_orm::ConnectionTrait>(
    conn: &C,
    stmt: Statement,
) -> Result<u64, Error> {
    let row = conn.query_one_raw(stmt).await.map_err(db_error)?;
    let n: i64 = row
        .map(|r| r.try_get("", "n"))
        .transpose()
        .map_err(db_error)?
        .unwrap_or(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Maps a database error to the core error, keeping what the backend said: a connection
/// failure or a transient condition (busy, full, shutting down) is
/// [`StoreErrorKind::Unavailable`], a database that cannot be used as it is (read-only,
/// corrupt) is [`StoreErrorKind::Unusable`], anything else [`StoreErrorKind::Backend`].
///
/// For statements inside a writer transaction, which is rolled back on any error, none of
/// them saved anything. A single write statement in autocommit maps through
/// [`autocommit_error`] instead.
pub(crate) fn db_error(err: DbErr) -> Error {
    let condition = condition(&err);
    classified(err, condition)
}

/// The core error of `err`, whose code says `condition` about the database.
fn classified(err: DbErr, condition: Condition) -> Error {
    enum Kind {
        Unavailable,
        Unusable,
        Backend,
    }
    let text = driver_text(&err);
    let (kind, message) = match (condition, &err) {
        (Condition::Transient(hint), _) => (Kind::Unavailable, format!("{text}; {hint}")),
        (Condition::Unusable(hint), _) => (Kind::Unusable, format!("{text}; {hint}")),
        (Condition::Other, DbErr::Conn(_) | DbErr::ConnectionAcquire(_)) => (
            Kind::Unavailable,
            format!("{text}; check that the database is reachable and retry"),
        ),
        (Condition::Other, _) => (Kind::Backend, text),
    };
    // The driver's error stays reachable as the kind's source.
    let cause = Some(Cause::new(err));
    Error::store(match kind {
        Kind::Unavailable => StoreErrorKind::Unavailable { message, cause },
        Kind::Unusable => StoreErrorKind::Unusable { message, cause },
        Kind::Backend => StoreErrorKind::Backend { message, cause },
    })
}

/// A database error the caller made (a host's own statement), kept as
/// [`StoreErrorKind::Backend`] whatever its code says about the database: a host statement
/// naming a table the host never made (`42P01`) is the host's mistake, not an unmigrated
/// database.
pub(crate) fn host_statement_error(err: DbErr) -> Error {
    let condition = match condition(&err) {
        Condition::Unusable(_) if database_code(&err).as_deref() == Some("42P01") => {
            Condition::Other
        }
        other => other,
    };
    classified(err, condition)
}

/// Maps the error of one write statement run in autocommit (its own transaction): an answer
/// of the database (an error it returned) means the statement was not applied; no answer (the
/// connection failed while it ran) leaves its outcome unknown,
/// [`StoreErrorKind::CommitFailed`].
pub(crate) fn autocommit_error(err: DbErr) -> Error {
    let answered = match &err {
        // Refused before the statement was sent: no connection from the pool (a timeout, a
        // closed pool), or none could be opened (sea-orm reports a failed `acquire` that had
        // to connect, say to a database not accepting connections, as `DbErr::Conn`). Found
        // by `cargo xtask faults --only postgres`: refused connections quarantined lease keys
        // whose write was never sent.
        DbErr::ConnectionAcquire(_) | DbErr::Conn(_) => true,
        other => answered_statement(other),
    };
    if answered {
        db_error(err)
    } else {
        commit::commit_failed_by(err)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sqlite { memory: bool },
    Postgres,
}

fn classify(url: &str) -> Result<Kind, Error> {
    let trimmed = url.trim();
    if trimmed == "sqlite::memory:" || trimmed.starts_with("sqlite::memory:?") {
        return Ok(Kind::Sqlite { memory: true });
    }
    if let Some(path) = trimmed.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() {
            return Err(configuration(format!(
                "`{trimmed}` names no database file; use sqlite://path/to/tether.db or sqlite::memory:"
            )));
        }
        return Ok(Kind::Sqlite {
            memory: path == ":memory:",
        });
    }
    if trimmed.starts_with("postgres://") || trimmed.starts_with("postgresql://") {
        return Ok(Kind::Postgres);
    }
    Err(configuration(format!(
        "unsupported store URL `{}`; use sqlite://path/to/tether.db, sqlite::memory: or postgres://user@host/db",
        redact_url(trimmed)
    )))
}

/// A SQLite writer transaction: `BEGIN IMMEDIATE`, which takes the database's write lock at
/// once (waiting up to the busy timeout) instead of at the first write.
fn sqlite_immediate() -> sea_orm::TransactionOptions {
    sea_orm::TransactionOptions {
        isolation_level: None,
        access_mode: None,
        sqlite_transaction_mode: Some(sea_orm::SqliteTransactionMode::Immediate),
    }
}

/// Applies the pending migrations to a SQLite database on `db`, whose connection has foreign
/// keys off (see [`Store::run_migrations`]), in one `BEGIN IMMEDIATE` transaction that commits
/// only when `PRAGMA foreign_key_check` finds every reference intact.
async fn migrate_sqlite(db: &DatabaseConnection) -> Result<(), Error> {
    let tx = db
        .begin_with_options(sqlite_immediate())
        .await
        .map_err(db_error)?;
    Migrator::up(&tx, None).await.map_err(migration_error)?;
    migration::check_foreign_keys(&tx)
        .await
        .map_err(migration_error)?;
    tx.commit().await.map_err(db_error)
}

/// A failed migration: one that refused the database as it is (a broken reference, a column
/// added by hand; `DbErr::Migration`) is [`StoreErrorKind::Unusable`], with what to repair;
/// anything else is read as any database error.
fn migration_error(error: DbErr) -> Error {
    match error {
        DbErr::Migration(message) => unusable(message),
        other => db_error(other),
    }
}

/// Connects with `connect`, waiting out a SQLite "busy" answer for up to the busy timeout:
/// SQLite answers it at once, without waiting, when switching a new file to WAL would
/// deadlock with another process creating it (it holds the write lock for its migration).
/// `shown_url` is the URL as errors show it (redacted).
async fn connect_retrying(
    connect: &ConnectOptions,
    sqlite: bool,
    busy_timeout: Duration,
    shown_url: &str,
) -> Result<DatabaseConnection, Error> {
    let started = std::time::Instant::now();
    loop {
        match Database::connect(connect.clone()).await {
            Ok(db) => return Ok(db),
            Err(e) if sqlite && sqlite_busy(&e) && started.elapsed() < busy_timeout => {
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            Err(e @ (DbErr::Conn(_) | DbErr::ConnectionAcquire(_))) => return Err(db_error(e)),
            Err(other) => return Err(configuration(format!("cannot open {shown_url}: {other}"))),
        }
    }
}

/// How a SQLite file's migrations open their own connection (see [`Store::run_migrations`]).
#[derive(Debug, Clone)]
struct MigrationConnect {
    /// The store's connect options with foreign keys off and one connection.
    connect: ConnectOptions,
    /// The store's busy timeout.
    busy_timeout: Duration,
}

impl Store {
    /// Opens the store at `url` with default options and runs pending migrations. Processes
    /// opening one new database at once take turns at the migration (a lock in the database):
    /// the first migrates it, the others find nothing pending.
    pub async fn open(url: &str) -> Result<Self, Error> {
        Self::open_with(StoreOptions::new(url)).await
    }

    /// Opens the store with `options` and runs pending migrations.
    ///
    /// A build without the backend the URL names (the `sqlite` and `postgres` features) refuses
    /// it with a configuration error that names the feature.
    #[tracing::instrument(level = "info", skip(options), fields(url = %redact_url(&options.url)))]
    // Without any backend feature every URL is refused before the pool is built.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(unreachable_code, unused_mut, unused_variables)
    )]
    pub async fn open_with(options: StoreOptions) -> Result<Self, Error> {
        let kind = classify(&options.url)?;
        // SQLite files only: how the migrations' own connection is opened.
        #[cfg_attr(not(feature = "sqlite"), allow(unused_mut))]
        let mut migration_connect: Option<MigrationConnect> = None;
        // SQLite files only: how the writer connection is opened.
        #[cfg_attr(not(feature = "sqlite"), allow(unused_mut))]
        let mut writer_connect: Option<ConnectOptions> = None;
        let mut connect = ConnectOptions::new(options.url.trim().to_owned());
        connect
            .sqlx_logging(options.log_statements)
            .connect_timeout(options.connect_timeout)
            .acquire_timeout(options.connect_timeout);
        match kind {
            Kind::Sqlite { memory } => {
                #[cfg(feature = "sqlite")]
                {
                    use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
                    let synchronous = if options.synchronous_normal {
                        SqliteSynchronous::Normal
                    } else {
                        SqliteSynchronous::Full
                    };
                    let busy = options.busy_timeout;
                    let temp_store_memory = options.temp_store_memory;
                    let create = !options.existing_only;
                    if let Some(path) = sqlite_path(&options.url).filter(|_| !create && !memory)
                        && !std::path::Path::new(path).is_file()
                    {
                        return Err(configuration(format!(
                            "no database file at {path}: check the path, or create the database with `tether migrate`"
                        )));
                    }
                    let settings = move |o: sea_orm::sqlx::sqlite::SqliteConnectOptions| {
                        let o = o
                            .create_if_missing(create)
                            .busy_timeout(busy)
                            .synchronous(synchronous);
                        if memory {
                            o
                        } else {
                            o.journal_mode(SqliteJournalMode::Wal)
                        }
                    };
                    if !memory {
                        // The migrations run on a connection of their own with foreign keys
                        // off (see `Store::run_migrations`), opened the same way.
                        let mut own = connect.clone();
                        own.max_connections(1)
                            .min_connections(0)
                            .map_sqlx_sqlite_opts(move |o| settings(o).foreign_keys(false));
                        migration_connect = Some(MigrationConnect {
                            connect: own,
                            busy_timeout: busy,
                        });
                    }
                    connect.map_sqlx_sqlite_opts(move |o| {
                        let o = settings(o).foreign_keys(true);
                        // The migrations' connection keeps SQLite's default (files): a
                        // migration may rewrite whole tables (see `temp_store_memory`).
                        if temp_store_memory {
                            o.pragma("temp_store", "memory")
                        } else {
                            o
                        }
                    });
                    // A SQLite connection is a handle on a local file, with no peer that could
                    // have hung up: testing it before each use would only cost a round trip
                    // through its worker thread per statement.
                    connect.test_before_acquire(false);
                    // A connection left inside a transaction (a failed COMMIT whose ROLLBACK
                    // failed too) is closed on release, never reused.
                    connect.map_sqlx_sqlite_pool_opts(|pool| {
                        pool.after_release(|conn, _| commit::release_check(conn))
                    });
                    if memory {
                        // Each connection of an in-memory SQLite database is its own database:
                        // keep exactly one, forever.
                        connect
                            .max_connections(1)
                            .min_connections(1)
                            .idle_timeout(None::<Duration>)
                            .max_lifetime(None::<Duration>);
                    } else {
                        // The writer connection: opened as the pooled ones (the same pragmas,
                        // the same release check), one of it, kept open for as long as the
                        // store (its page cache is the point); a connection that broke is
                        // closed by the pool and the next write opens another.
                        let mut own = connect.clone();
                        own.max_connections(1)
                            .min_connections(0)
                            .idle_timeout(None::<Duration>)
                            .max_lifetime(None::<Duration>);
                        #[cfg(test)]
                        if let Some(path) = options.writer_path.clone() {
                            own.map_sqlx_sqlite_opts(move |o| o.filename(&path));
                        }
                        writer_connect = Some(own);
                        connect.max_connections(options.max_connections);
                    }
                }
                #[cfg(not(feature = "sqlite"))]
                {
                    let _ = memory;
                    return Err(configuration(
                        "this build has no SQLite support; enable the `sqlite` feature of tether-storage",
                    ));
                }
            }
            Kind::Postgres => {
                #[cfg(not(feature = "postgres"))]
                return Err(configuration(
                    "this build has no PostgreSQL support; enable the `postgres` feature of tether-storage",
                ));
                #[cfg(feature = "postgres")]
                connect
                    .max_connections(options.max_connections)
                    .map_sqlx_postgres_pool_opts(|pool| {
                        pool.after_release(|conn, _| commit::release_check(conn))
                    });
            }
        }
        let shown_url = redact_url(&options.url);
        let db = connect_retrying(
            &connect,
            matches!(kind, Kind::Sqlite { .. }),
            options.busy_timeout,
            &shown_url,
        )
        .await?;
        let backend = db.get_database_backend();
        #[cfg(feature = "sqlite")]
        let sqlite_file = match writer_connect {
            Some(own) => match connect_retrying(&own, true, options.busy_timeout, &shown_url).await
            {
                Ok(writer) => Some(SqliteFile {
                    readers_held: held::HeldConnection::default(),
                    writer: Writer {
                        db: writer,
                        held: held::HeldConnection::default(),
                    },
                }),
                Err(error) => {
                    // The readers' pool is closed before the error returns: nothing of a store
                    // that failed to open keeps the file open.
                    if let Err(closing) = db.close_by_ref().await {
                        tracing::warn!(error = %closing, "closing the readers' pool failed");
                    }
                    return Err(error);
                }
            },
            None => None,
        };
        #[cfg(not(feature = "sqlite"))]
        let _ = writer_connect;
        let store = Self {
            inner: Arc::new(Inner {
                db,
                backend,
                clock: options.clock,
                namespaces: RwLock::new(HashMap::new()),
                url: shown_url,
                group: group::GroupCommit::new(
                    matches!(kind, Kind::Sqlite { .. }),
                    options.busy_timeout,
                ),
                grouped: options.group_commit,
                #[cfg(feature = "postgres")]
                held_postgres: held::HeldConnection::default(),
                #[cfg(feature = "sqlite")]
                sqlite_file,
                #[cfg(feature = "test-support")]
                commit_faults: commit::CommitFaults::default(),
            }),
        };
        store
            .migrate(!options.existing_only, migration_connect.as_ref())
            .await?;
        Ok(store)
    }

    /// Checks the schema's version and, when `run` is set, applies pending migrations; without
    /// `run` a pending migration is refused.
    ///
    /// The applied versions are read first without touching the schema, so opening an
    /// up-to-date database runs no DDL (on PostgreSQL the migrator's `CREATE TABLE IF NOT
    /// EXISTS` would otherwise log a server notice per check at every start); the migrator
    /// runs only on a new database or when a migration is pending.
    async fn migrate(&self, run: bool, own: Option<&MigrationConnect>) -> Result<(), Error> {
        let db = &self.inner.db;
        let known: Vec<String> = Migrator::migrations()
            .iter()
            .map(|m| m.name().to_owned())
            .collect();
        // Read the migration table without creating it (the migrator's own read would).
        let read = sea_orm::ConnectionTrait::query_all_raw(
            db,
            Statement::from_string(self.inner.backend, "SELECT version FROM seaql_migrations"),
        )
        .await;
        let applied: Vec<String> = match read {
            Ok(rows) => rows
                .iter()
                .map(|row| row.try_get::<String>("", "version"))
                .collect::<Result<_, _>>()
                .map_err(db_error)?,
            Err(e) => {
                // PostgreSQL names the missing table (`42P01`, which elsewhere means an unusable
                // database); SQLite's "no such table" is a generic error: both mean a database
                // Tether never migrated.
                let missing_table = database_code(&e).as_deref() == Some("42P01");
                let err = db_error(e);
                if !missing_table
                    && matches!(
                        &err,
                        Error::Store {
                            kind: StoreErrorKind::Unavailable { .. }
                                | StoreErrorKind::Unusable { .. }
                        }
                    )
                {
                    return Err(err);
                }
                // No migration table: a database Tether never migrated.
                if run {
                    return self.run_migrations(own).await;
                }
                return Err(configuration(format!(
                    "the database at {} has no Tether schema: check the URL, or create the schema with `tether migrate`",
                    self.inner.url
                )));
            }
        };
        if let Some(unknown) = applied
            .iter()
            .filter(|&v| !known.contains(v))
            .cloned()
            .max()
        {
            return Err(Error::store(StoreErrorKind::SchemaTooNew {
                found: unknown,
                supported: migration::newest_known(),
            }));
        }
        let pending = known.iter().filter(|k| !applied.contains(k)).count();
        if pending == 0 {
            return Ok(());
        }
        if !run {
            return Err(configuration(format!(
                "the database at {} is missing {pending} of {} schema migrations (a new or older database): run `tether migrate` first",
                self.inner.url,
                known.len()
            )));
        }
        self.run_migrations(own).await
    }

    /// Applies the pending migrations in one transaction that holds the database's migration
    /// lock, so processes opening the same new (or older) database at once take turns instead
    /// of racing to create the same tables: the first migrates, the others then find nothing
    /// pending. On PostgreSQL the lock is a transaction-level advisory lock
    /// ([`MIGRATION_LOCK`]), on SQLite the write lock of `BEGIN IMMEDIATE` (waited for up to
    /// the busy timeout). The migrations run inside that transaction (each in a savepoint),
    /// so a failure leaves the schema as it was.
    ///
    /// On SQLite the migrating connection has foreign keys off, as SQLite's way of changing a
    /// table's definition requires (a migration rebuilds a table that others reference, and
    /// dropping the old one would otherwise delete the referencing rows); SQLite turns them
    /// off only outside a transaction, on one connection. A file is migrated on a connection
    /// of its own (`own`), closed afterwards; an in-memory database has only the store's one
    /// connection, which gets its foreign keys back after the migration, failed or not.
    /// Before the COMMIT, `PRAGMA foreign_key_check` confirms that every reference still
    /// holds; a violation fails the migration.
    async fn run_migrations(&self, own: Option<&MigrationConnect>) -> Result<(), Error> {
        let db = &self.inner.db;
        match self.inner.backend {
            DbBackend::Sqlite => match own {
                Some(MigrationConnect {
                    connect,
                    busy_timeout,
                }) => {
                    let own =
                        connect_retrying(connect, true, *busy_timeout, &self.inner.url).await?;
                    let migrated = migrate_sqlite(&own).await;
                    if let Err(error) = own.close().await {
                        tracing::warn!(error = %error, "closing the migration connection failed");
                    }
                    migrated
                }
                None => {
                    sea_orm::ConnectionTrait::execute_unprepared(db, "PRAGMA foreign_keys = OFF")
                        .await
                        .map_err(db_error)?;
                    let migrated = migrate_sqlite(db).await;
                    // A migration that failed half-way may have left the legacy rename on.
                    let restored = sea_orm::ConnectionTrait::execute_unprepared(
                        db,
                        "PRAGMA foreign_keys = ON; PRAGMA legacy_alter_table = OFF",
                    )
                    .await
                    .map_err(db_error);
                    migrated.and(restored.map(drop))
                }
            },
            _ => {
                let tx = db.begin().await.map_err(db_error)?;
                sea_orm::ConnectionTrait::execute_raw(
                    &tx,
                    Statement::from_string(
                        self.inner.backend,
                        format!("SELECT pg_advisory_xact_lock({MIGRATION_LOCK})"),
                    ),
                )
                .await
                .map_err(db_error)?;
                Migrator::up(&tx, None).await.map_err(migration_error)?;
                tx.commit().await.map_err(db_error)
            }
        }
    }

    /// The database backend in use.
    pub fn backend(&self) -> DbBackend {
        self.inner.backend
    }

    /// The clock deciding expiry.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// The underlying sea-orm connection (for the host's own tables in the same database).
    pub fn connection(&self) -> &DatabaseConnection {
        &self.inner.db
    }

    /// Closes the pool (and a SQLite file's writer connection).
    pub async fn close(self) -> Result<(), Error> {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => {
                // The pool waits for every connection to come back, the kept one too.
                #[cfg(feature = "postgres")]
                inner.held_postgres.release();
                #[cfg(feature = "sqlite")]
                let writer_closed = match &inner.sqlite_file {
                    Some(file) => {
                        file.readers_held.release();
                        file.writer.held.release();
                        file.writer.db.close_by_ref().await.map_err(db_error)
                    }
                    None => Ok(()),
                };
                #[cfg(not(feature = "sqlite"))]
                let writer_closed = Ok(());
                let closed = inner.db.close().await.map_err(db_error);
                writer_closed.and(closed)
            }
            Err(_) => Ok(()),
        }
    }

    /// Whether `ns` is registered with this store (namespace settings live in each store
    /// handle's memory: every process registers the namespaces it uses).
    pub fn has_namespace(&self, ns: &Namespace) -> bool {
        self.inner
            .namespaces
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(ns)
    }

    pub(crate) fn config(&self, ns: &Namespace) -> Result<NamespaceConfig, Error> {
        self.inner
            .namespaces
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(ns)
            .cloned()
            .ok_or_else(|| {
                Error::store(StoreErrorKind::UnknownNamespace {
                    namespace: ns.to_string(),
                })
            })
    }

    /// Runs one statement outside any transaction and returns its first row: on the
    /// connection kept between such statements (PostgreSQL, a SQLite file; see the `held`
    /// module), else on the pool.
    pub(crate) async fn query_one_alone(
        &self,
        stmt: Statement,
    ) -> Result<Option<sea_orm::QueryResult>, DbErr> {
        #[cfg(feature = "postgres")]
        if self.inner.backend == DbBackend::Postgres {
            let pool = self.inner.db.get_postgres_connection_pool();
            return self.inner.held_postgres.query_one(pool, stmt).await;
        }
        #[cfg(feature = "sqlite")]
        if let Some(file) = &self.inner.sqlite_file {
            let pool = self.inner.db.get_sqlite_connection_pool();
            return file.readers_held.query_one(pool, stmt).await;
        }
        sea_orm::ConnectionTrait::query_one_raw(&self.inner.db, stmt).await
    }

    /// PostgreSQL: runs one statement outside any transaction on the connection kept between
    /// such statements (see the `held` module) and returns every row it answered, once the
    /// server ended the statement's transaction.
    #[cfg(feature = "postgres")]
    pub(crate) async fn query_all_alone(
        &self,
        stmt: Statement,
    ) -> Result<Vec<sea_orm::QueryResult>, DbErr> {
        let pool = self.inner.db.get_postgres_connection_pool();
        self.inner.held_postgres.query_all(pool, stmt).await
    }

    /// SQLite: runs one write statement outside any transaction and returns how many rows it
    /// changed: on a file, on the writer connection ([`Writer`]), kept between such statements
    /// (see the `held` module); in memory, on the pool's one connection.
    pub(crate) async fn execute_alone_sqlite(&self, stmt: Statement) -> Result<u64, DbErr> {
        #[cfg(feature = "sqlite")]
        if let Some(SqliteFile { writer, .. }) = &self.inner.sqlite_file {
            let pool = writer.db.get_sqlite_connection_pool();
            return writer
                .held
                .execute(pool, stmt)
                .await
                .map(|done| done.rows_affected());
        }
        // An in-memory database (no writer connection): its one connection, kept by no one.
        sea_orm::ConnectionTrait::execute_raw(&self.inner.db, stmt)
            .await
            .map(|done| done.rows_affected())
    }

    /// A statement with `$n` placeholders, rewritten for the backend (for SQLite: anonymous
    /// placeholders, see the `placeholders` module).
    pub(crate) fn stmt(&self, sql: &str, values: Vec<Value>) -> Statement {
        let (sql, values) = match self.inner.backend {
            DbBackend::Postgres => (sql.to_owned(), values),
            _ => placeholders::sqlite(sql, values),
        };
        Statement::from_sql_and_values(self.inner.backend, sql, values)
    }

    /// A statement already written in the backend's own placeholders (`$n` on PostgreSQL,
    /// anonymous `?` in the order of `values` on SQLite; see [`placeholders::push_param`]).
    pub(crate) fn native_stmt(&self, sql: &str, values: Vec<Value>) -> Statement {
        Statement::from_sql_and_values(self.inner.backend, sql, values)
    }

    /// Starts a writer transaction: on SQLite it first takes the store's write slot (writers
    /// of one process queue in order; see the `group` module), then `BEGIN IMMEDIATE`.
    pub(crate) async fn begin_write(&self) -> Result<group::WriteTx, Error> {
        let slot = self.inner.group.slot().await?;
        self.begin_in_slot(slot).await
    }

    /// Starts a writer transaction in the write slot already taken (`slot`, `None` when the
    /// store has none): on a SQLite file on the writer connection ([`Writer`]), taken back at
    /// once when a lone write keeps it; elsewhere on the pool.
    pub(crate) async fn begin_in_slot(
        &self,
        slot: Option<tokio::sync::OwnedMutexGuard<()>>,
    ) -> Result<group::WriteTx, Error> {
        let tx = match self.inner.backend {
            DbBackend::Sqlite => {
                #[cfg(feature = "sqlite")]
                let (db, _held_off) = match &self.inner.sqlite_file {
                    Some(SqliteFile { writer, .. }) => (&writer.db, Some(writer.held.hold_off())),
                    None => (&self.inner.db, None),
                };
                #[cfg(not(feature = "sqlite"))]
                let db = &self.inner.db;
                db.begin_with_options(sqlite_immediate())
                    .await
                    .map_err(db_error)?
            }
            _ => self.inner.db.begin().await.map_err(db_error)?,
        };
        Ok(group::WriteTx::new(tx, slot))
    }

    /// Whether lifecycle writes of this store go through group commit.
    pub(crate) fn grouped(&self) -> bool {
        self.inner.grouped
    }

    /// Runs `tick` every `interval` (at least one millisecond) on a task until its handle is
    /// aborted or the store is gone: between ticks the task holds no handle of the store, so it
    /// never keeps the pool open and [`Store::close`] still closes it. `what` names the task
    /// in the log.
    pub(crate) fn spawn_periodic<F, Fut>(
        &self,
        interval: Duration,
        what: &'static str,
        mut tick: F,
    ) -> tokio::task::JoinHandle<()>
    where
        F: FnMut(Store) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let store = Arc::downgrade(&self.inner);
        let interval = interval.max(Duration::from_millis(1));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(inner) = store.upgrade() else {
                    tracing::debug!(task = what, "store dropped; the task stops");
                    return;
                };
                tick(Store { inner }).await;
            }
        })
    }

    /// Deletes expired rows in batches of `batch` every `interval` (at least one millisecond)
    /// until the returned handle is aborted or the store is gone (the task never keeps the
    /// store open: [`Store::close`] still closes it). Errors are logged and retried at the next
    /// tick.
    pub fn spawn_sweeper(&self, interval: Duration, batch: usize) -> tokio::task::JoinHandle<()> {
        self.spawn_periodic(interval, "sweeper", move |store| async move {
            match crate::StoreAdmin::sweep_expired(&store, batch).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(swept = n, "expired binding rows swept"),
                Err(err) => tracing::warn!(error = %err, "binding sweep failed"),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_of_digits_only_are_not_read_as_sqlite_codes() {
        let transient = |code| matches!(condition_of_code(code), Condition::Transient(_));
        let unusable = |code| matches!(condition_of_code(code), Condition::Unusable(_));
        // PostgreSQL SQLSTATEs, some of them all digits.
        assert!(transient("40001"), "serialization failure");
        assert!(transient("53300"), "too many connections");
        assert!(transient("08006"), "connection failure");
        assert!(transient("57P01"), "admin shutdown");
        assert!(unusable("28000") && unusable("28P01") && unusable("3D000"));
        assert!(unusable("42P01"), "undefined table");
        assert!(matches!(condition_of_code("23505"), Condition::Other));
        // SQLite extended result codes.
        assert!(transient("5") && transient("517"), "busy, busy snapshot");
        assert!(
            unusable("8") && unusable("1032"),
            "read-only, read-only db moved"
        );
        assert!(matches!(condition_of_code("2067"), Condition::Other));
    }

    #[test]
    fn a_database_error_keeps_the_driver_error_as_its_source() {
        let err = db_error(DbErr::Custom("disk I/O error".into()));
        assert!(matches!(
            &err,
            Error::Store {
                kind: StoreErrorKind::Backend { .. }
            }
        ));
        let source = std::error::Error::source(&err).expect("the kind's cause is the source");
        let cause = source
            .downcast_ref::<tether_core::Cause>()
            .expect("a Cause");
        assert!(cause.get().downcast_ref::<DbErr>().is_some(), "{cause:?}");
        assert!(err.to_string().contains("disk I/O error"), "{err}");
        // Still Clone and Eq: a sticky failure is compared and reported again.
        assert_eq!(err.clone().to_string(), err.to_string());
    }

    #[test]
    fn urls_are_classified_and_bad_ones_refused() {
        assert_eq!(
            classify("sqlite::memory:").unwrap(),
            Kind::Sqlite { memory: true }
        );
        assert_eq!(
            classify("sqlite://data/tether.db?mode=rwc").unwrap(),
            Kind::Sqlite { memory: false }
        );
        assert_eq!(classify("postgres://u@h/db").unwrap(), Kind::Postgres);
        let err = classify("mysql://u:secret@h/db").unwrap_err();
        assert!(matches!(
            err,
            Error::Store {
                kind: StoreErrorKind::Configuration { .. }
            }
        ));
        assert!(!err.to_string().contains("secret"), "{err}");
        assert!(err.to_string().contains("sqlite://"));
        assert!(classify("sqlite://").is_err());
    }

    #[test]
    fn an_autocommit_write_refused_before_it_was_sent_is_not_an_unknown_outcome() {
        use sea_orm::RuntimeErr;
        use std::sync::Arc;
        let sqlx = |e: sea_orm::sqlx::Error| RuntimeErr::SqlxError(Arc::new(e));
        // No connection could be opened (the server refused it): nothing was sent.
        let refused = autocommit_error(DbErr::Conn(sqlx(sea_orm::sqlx::Error::Io(
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused"),
        ))));
        assert!(!refused.is_outcome_unknown(), "{refused:?}");
        assert!(refused.is_retryable(), "{refused:?}");
        let timeout = autocommit_error(DbErr::ConnectionAcquire(
            sea_orm::error::ConnAcquireErr::Timeout,
        ));
        assert!(!timeout.is_outcome_unknown(), "{timeout:?}");
        // The connection failed while the statement ran: the outcome is unknown.
        let broken = autocommit_error(DbErr::Exec(sqlx(sea_orm::sqlx::Error::Io(
            std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset"),
        ))));
        assert!(broken.is_outcome_unknown(), "{broken:?}");
        // The driver's error stays reachable as the source of the unknown outcome.
        let source = std::error::Error::source(&broken).expect("the driver's error is kept");
        let cause = source
            .downcast_ref::<tether_core::Cause>()
            .expect("the source is the kept cause");
        assert!(cause.get().downcast_ref::<DbErr>().is_some(), "{cause:?}");
    }

    /// How many descriptors of this process are open on files under `dir`.
    #[cfg(all(feature = "sqlite", target_os = "linux"))]
    fn descriptors_open_under(dir: &std::path::Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .expect("/proc/self/fd lists this process's descriptors")
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir))
            .count()
    }

    #[cfg(all(feature = "sqlite", target_os = "linux"))]
    #[tokio::test]
    async fn a_sqlite_file_whose_writer_connection_fails_to_open_is_left_closed() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("store.db").display()
        );
        // An open store holds the file (its readers' pool and its writer connection); closed,
        // it holds nothing.
        let store = Store::open_with(StoreOptions::new(&url)).await.unwrap();
        assert!(descriptors_open_under(dir.path()) >= 2);
        store.close().await.unwrap();
        assert_eq!(descriptors_open_under(dir.path()), 0);
        // The readers' pool opens the file; the writer connection then fails to open. Left
        // to itself, a dropped pool lets its connections go on their worker threads a little
        // later, so a store that did not close it would often, not always, still hold the file
        // here: the open is tried a few times.
        for _ in 0..8 {
            let mut options = StoreOptions::new(&url);
            options.writer_path = Some(dir.path().join("missing-directory").join("store.db"));
            let err = Store::open_with(options)
                .await
                .expect_err("the writer connection cannot open a file in a missing directory");
            assert!(
                matches!(
                    err,
                    Error::Store {
                        kind: StoreErrorKind::Unusable { .. }
                    }
                ),
                "{err:?}"
            );
            assert!(
                err.to_string().contains("unable to open database file"),
                "{err}"
            );
            assert_eq!(
                descriptors_open_under(dir.path()),
                0,
                "the readers' pool is closed before the error returns"
            );
        }
    }

    /// `text` as a SQLite statement without values.
    #[cfg(feature = "sqlite")]
    fn sqlite_sql(text: &str) -> Statement {
        Statement::from_string(DbBackend::Sqlite, text)
    }

    /// A store on a new SQLite file in `dir` with `max` pooled connections.
    #[cfg(feature = "sqlite")]
    async fn file_store(dir: &tempfile::TempDir, max: u32) -> Store {
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display());
        Store::open_with(StoreOptions::new(&url).max_connections(max))
            .await
            .expect("open")
    }

    /// A temporary table is seen only by the connection that made it: one made on the writer
    /// connection marks it. Lone writes and writer transactions see it (they run there); the
    /// readers' lone reads do not.
    #[cfg(feature = "sqlite")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_a_file_store_writes_on_its_writer_connection_and_reads_beside_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = file_store(&dir, 4).await;
        let writer = &store.inner.file_connections().writer;
        sea_orm::ConnectionTrait::execute_raw(
            &writer.db,
            sqlite_sql("CREATE TEMP TABLE marker (n INTEGER)"),
        )
        .await
        .expect("marker");
        for n in 0..3 {
            // A lone write in autocommit, then a writer transaction right after it (the lone
            // write keeps the connection; the transaction takes it back).
            let changed = store
                .execute_alone_sqlite(sqlite_sql(&format!("INSERT INTO temp.marker VALUES ({n})")))
                .await
                .expect("a lone write runs on the writer connection");
            assert_eq!(changed, 1);
            let tx = store.begin_write().await.expect("begin");
            sea_orm::ConnectionTrait::execute_raw(
                &*tx,
                sqlite_sql(&format!("INSERT INTO temp.marker VALUES ({})", n + 100)),
            )
            .await
            .expect("a writer transaction runs on the writer connection");
            assert!(
                writer.held.lock_for_test().is_none(),
                "taken back from the lone write"
            );
            store.commit(tx).await.expect("commit");
        }
        let count = sea_orm::ConnectionTrait::query_one_raw(
            &writer.db,
            sqlite_sql("SELECT count(*) AS c FROM temp.marker"),
        )
        .await
        .expect("count")
        .expect("a row");
        assert_eq!(count.try_get::<i64>("", "c").expect("c"), 6);
        // The readers' lone reads run on the pool: the marker is not there.
        let read = store
            .query_one_alone(sqlite_sql("SELECT count(*) AS c FROM temp.marker"))
            .await;
        assert!(read.is_err(), "{read:?}");
        // The writer connection is opened as the pooled ones.
        for (pragma, expected) in [
            ("journal_mode", "wal"),
            ("synchronous", "2"),
            ("foreign_keys", "1"),
            ("temp_store", "2"),
        ] {
            let row = sea_orm::ConnectionTrait::query_one_raw(
                &writer.db,
                sqlite_sql(&format!("PRAGMA {pragma}")),
            )
            .await
            .expect("pragma")
            .expect("a row");
            let got = row
                .try_get_by_index::<i64>(0)
                .map(|n| n.to_string())
                .or_else(|_| row.try_get_by_index::<String>(0))
                .expect("value");
            assert_eq!(got, expected, "PRAGMA {pragma}");
        }
        // `Store::close` closes it.
        let writer_db = writer.db.clone();
        store.close().await.expect("close");
        assert!(writer_db.get_sqlite_connection_pool().is_closed());
    }

    /// The writer connection's own commits do not change what it sees of the database
    /// (`PRAGMA data_version` counts commits of *other* connections, the ones that make SQLite
    /// throw its page cache away): every write of the store, in autocommit or in a
    /// transaction, leaves it as it was.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_no_other_connection_writes_between_the_store_s_writes() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = file_store(&dir, 2).await;
        let writer = &store.inner.file_connections().writer;
        let version = || async {
            sea_orm::ConnectionTrait::query_one_raw(&writer.db, sqlite_sql("PRAGMA data_version"))
                .await
                .expect("data_version")
                .expect("a row")
                .try_get_by_index::<i64>(0)
                .expect("a number")
        };
        store
            .execute_alone_sqlite(sqlite_sql("CREATE TABLE probe (n INTEGER)"))
            .await
            .expect("create");
        let before = version().await;
        for n in 0..5 {
            store
                .execute_alone_sqlite(sqlite_sql(&format!("INSERT INTO probe VALUES ({n})")))
                .await
                .expect("insert");
            let tx = store.begin_write().await.expect("begin");
            sea_orm::ConnectionTrait::execute_raw(&*tx, sqlite_sql("UPDATE probe SET n = n + 1"))
                .await
                .expect("update");
            store.commit(tx).await.expect("commit");
        }
        assert_eq!(
            version().await,
            before,
            "every write ran on the writer connection"
        );
        // A write from the readers' pool is another connection's: the writer sees it.
        sea_orm::ConnectionTrait::execute_raw(
            &store.inner.db,
            sqlite_sql("INSERT INTO probe VALUES (99)"),
        )
        .await
        .expect("insert from the pool");
        assert_ne!(version().await, before);
        store.close().await.expect("close");
    }

    /// An in-memory database has one connection for everything: no writer connection, and
    /// writes and reads run on that connection.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_an_in_memory_store_has_no_writer_connection() {
        let store = Store::open("sqlite::memory:").await.expect("open");
        assert!(store.inner.sqlite_file.is_none());
        assert_eq!(
            store
                .inner
                .db
                .get_sqlite_connection_pool()
                .options()
                .get_max_connections(),
            1
        );
        store
            .execute_alone_sqlite(sqlite_sql("CREATE TEMP TABLE marker (n INTEGER)"))
            .await
            .expect("create");
        let tx = store.begin_write().await.expect("begin");
        sea_orm::ConnectionTrait::execute_raw(&*tx, sqlite_sql("INSERT INTO marker VALUES (1)"))
            .await
            .expect("the one connection");
        store.commit(tx).await.expect("commit");
        let row = store
            .query_one_alone(sqlite_sql("SELECT count(*) AS c FROM marker"))
            .await
            .expect("read")
            .expect("a row");
        assert_eq!(row.try_get::<i64>("", "c").expect("c"), 1);
        store.close().await.expect("close");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact_url("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite::memory:"), "sqlite::memory:");
        assert_eq!(
            redact_url("postgres://u:p@ss@h:5432/db?sslmode=require&Password=x"),
            "postgres://u:***@h:5432/db?sslmode=require&Password=***"
        );
        assert_eq!(redact_url("postgres://u:pw@h"), "postgres://u:***@h");
        assert_eq!(redact_url("postgres://h/db?a=1"), "postgres://h/db?a=1");
        // A password with an unencoded `/`, `?` or `#` (an invalid URL a user may still type)
        // is masked all the same.
        for (url, shown) in [
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            ("postgres://u:pa?ss@h:5432/db", "postgres://u:***@h:5432/db"),
            (
                "postgres://u:pa#ss@h/db?sslmode=require",
                "postgres://u:***@h/db?sslmode=require",
            ),
        ] {
            assert_eq!(redact_url(url), shown);
        }
        // An `@` after a host and port is not user-info.
        assert_eq!(
            redact_url("postgres://h:5432/db?application_name=a@b"),
            "postgres://h:5432/db?application_name=a@b"
        );
        assert_eq!(
            redact_url("postgres://u:pw@h:5432/db?application_name=a@b"),
            "postgres://u:***@h:5432/db?application_name=a@b"
        );
    }
}
