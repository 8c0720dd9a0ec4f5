//! Schema migrations (sea-orm-migration), run on open inside a transaction on both backends.

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};
use sea_orm_migration::{MigrationName, MigrationTrait, MigratorTrait, SchemaManager};

/// The PostgreSQL search vector of a transcript entry: lower-cased alphanumeric words, the
/// same tokens as SQLite's FTS5 `unicode61` tokenizer (without diacritic folding), so both
/// backends return the same hits.
pub(crate) const PG_SEARCH_VECTOR: &str =
    "to_tsvector('simple', regexp_replace(content, '[^[:alnum:]]+', ' ', 'g'))";

/// The migrations of this binary, oldest first.
#[derive(Debug)]
pub(crate) struct Migrator;

#[async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(BindingRecords),
            Box::new(HostSessions),
            Box::new(LeaseEventLatency),
            Box::new(RenewalHotUpdates),
            Box::new(FinalizationCounters),
            Box::new(OperatorAudit),
            Box::new(TranscriptMetadata),
            Box::new(GenerationChanges),
            Box::new(HostSessionsByKey),
        ]
    }
}

/// The name of the newest migration this binary knows.
pub(crate) fn newest_known() -> String {
    Migrator::migrations()
        .last()
        .map(|m| m.name().to_owned())
        .unwrap_or_default()
}

fn blob(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "BYTEA",
        _ => "BLOB",
    }
}

/// Keys compare bytewise on both backends (PostgreSQL's default collation may not).
fn key_text(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "TEXT COLLATE \"C\"",
        _ => "TEXT",
    }
}

fn serial_id(backend: DbBackend) -> &'static str {
    match backend {
        DbBackend::Postgres => "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        _ => "INTEGER PRIMARY KEY AUTOINCREMENT",
    }
}

async fn run_all(manager: &SchemaManager<'_>, statements: &[String]) -> Result<(), DbErr> {
    let conn = manager.get_connection();
    for sql in statements {
        conn.execute_unprepared(sql).await?;
    }
    Ok(())
}

/// Binding records, the epoch and revision counters, the lease history and quarantined keys.
struct BindingRecords;

impl MigrationName for BindingRecords {
    fn name(&self) -> &str {
        "m0001_binding_records"
    }
}

#[async_trait]
impl MigrationTrait for BindingRecords {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let blob = blob(backend);
        let id = serial_id(backend);
        let text = key_text(backend);
        run_all(
            manager,
            &[
                format!(
                    "CREATE TABLE binding_records (
                        namespace {text} NOT NULL,
                        key {text} NOT NULL,
                        value {blob} NOT NULL,
                        revision BIGINT NOT NULL,
                        lease_token TEXT,
                        lease_epoch BIGINT,
                        lease_expires_at BIGINT,
                        lease_acquired_at BIGINT,
                        lease_renewed_at BIGINT,
                        holder TEXT,
                        created_at BIGINT NOT NULL,
                        expires_at BIGINT,
                        PRIMARY KEY (namespace, key)
                    )"
                ),
                "CREATE INDEX binding_records_expires_at ON binding_records (expires_at) WHERE expires_at IS NOT NULL".into(),
                "CREATE INDEX binding_records_lease_expires_at ON binding_records (lease_expires_at) WHERE lease_expires_at IS NOT NULL".into(),
                // One draw per row creation; revisions and epochs of the row's lifetime count up
                // from `draw << 32`, so a recreated row never reuses a revision or an epoch.
                "CREATE TABLE tether_counters (name TEXT PRIMARY KEY, value BIGINT NOT NULL)".into(),
                "INSERT INTO tether_counters (name, value) VALUES ('row_base', 0)".into(),
                format!(
                    "CREATE TABLE lease_events (
                        id {id},
                        namespace TEXT NOT NULL,
                        key TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        epoch BIGINT,
                        token_prefix TEXT,
                        other_token_prefix TEXT,
                        holder TEXT,
                        at BIGINT NOT NULL
                    )"
                ),
                "CREATE INDEX lease_events_key ON lease_events (namespace, key, id)".into(),
                "CREATE INDEX lease_events_at ON lease_events (at)".into(),
                "CREATE TABLE quarantined_keys (
                    namespace TEXT NOT NULL,
                    key TEXT NOT NULL,
                    reason TEXT NOT NULL,
                    custody TEXT,
                    quarantined_at BIGINT NOT NULL,
                    PRIMARY KEY (namespace, key)
                )"
                .into(),
            ],
        )
        .await?;
        if backend == DbBackend::Postgres {
            // PostgreSQL draws row bases from a sequence: no lock shared by all writers.
            run_all(
                manager,
                &["CREATE SEQUENCE tether_row_base START WITH 1".into()],
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            run_all(manager, &["DROP SEQUENCE tether_row_base".into()]).await?;
        }
        run_all(
            manager,
            &[
                "DROP TABLE quarantined_keys".into(),
                "DROP TABLE lease_events".into(),
                "DROP TABLE tether_counters".into(),
                "DROP TABLE binding_records".into(),
            ],
        )
        .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// Host sessions, transcripts (a tree per session, with full-text search) and upstream links.
struct HostSessions;

impl MigrationName for HostSessions {
    fn name(&self) -> &str {
        "m0002_host_sessions"
    }
}

#[async_trait]
impl MigrationTrait for HostSessions {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let id = serial_id(backend);
        let text = key_text(backend);
        let mut statements = vec![
            format!(
                "CREATE TABLE host_sessions (
                    session_key {text} PRIMARY KEY,
                    agent_id TEXT NOT NULL,
                    session_id TEXT NOT NULL,
                    previous_session_id TEXT,
                    lifecycle_revision BIGINT NOT NULL,
                    agent_harness_id TEXT,
                    active_leaf BIGINT,
                    created_at BIGINT NOT NULL,
                    updated_at BIGINT NOT NULL
                )"
            ),
            format!(
                "CREATE TABLE transcript_entries (
                    id {id},
                    session_key {text} NOT NULL REFERENCES host_sessions (session_key) ON DELETE CASCADE,
                    parent_id BIGINT,
                    role TEXT NOT NULL,
                    content TEXT NOT NULL,
                    idempotency_key TEXT,
                    created_at BIGINT NOT NULL
                )"
            ),
            "CREATE UNIQUE INDEX transcript_entries_idempotency ON transcript_entries (session_key, idempotency_key)".into(),
            "CREATE INDEX transcript_entries_parent ON transcript_entries (session_key, parent_id)".into(),
            format!(
                "CREATE TABLE upstream_links (
                    session_key {text} PRIMARY KEY,
                    upstream TEXT NOT NULL,
                    created_at BIGINT NOT NULL
                )"
            ),
        ];
        match backend {
            DbBackend::Postgres => statements.push(
                format!("CREATE INDEX transcript_entries_fts ON transcript_entries USING GIN ({PG_SEARCH_VECTOR})"),
            ),
            _ => statements.extend([
                "CREATE VIRTUAL TABLE transcript_fts USING fts5(content, content='transcript_entries', content_rowid='id', tokenize='unicode61 remove_diacritics 0')".into(),
                "CREATE TRIGGER transcript_entries_fts_insert AFTER INSERT ON transcript_entries BEGIN \
                    INSERT INTO transcript_fts (rowid, content) VALUES (new.id, new.content); END".into(),
                "CREATE TRIGGER transcript_entries_fts_delete AFTER DELETE ON transcript_entries BEGIN \
                    INSERT INTO transcript_fts (transcript_fts, rowid, content) VALUES ('delete', old.id, old.content); END".into(),
            ]),
        }
        run_all(manager, &statements).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut statements: Vec<String> = Vec::new();
        if manager.get_database_backend() != DbBackend::Postgres {
            statements.push("DROP TABLE transcript_fts".into());
        }
        statements.extend([
            "DROP TABLE upstream_links".into(),
            "DROP TABLE transcript_entries".into(),
            "DROP TABLE host_sessions".into(),
        ]);
        run_all(manager, &statements).await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// How long each renewal spent in the store, recorded on its `renewed` lease event (microseconds;
/// `NULL` on other kinds and on events written before this migration).
struct LeaseEventLatency;

impl MigrationName for LeaseEventLatency {
    fn name(&self) -> &str {
        "m0003_lease_event_latency"
    }
}

#[async_trait]
impl MigrationTrait for LeaseEventLatency {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(
            manager,
            &["ALTER TABLE lease_events ADD COLUMN latency_us BIGINT".into()],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(
            manager,
            &["ALTER TABLE lease_events DROP COLUMN latency_us".into()],
        )
        .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// Renewals as in-place updates: every renewal moves `lease_expires_at`, and while that column
/// was indexed PostgreSQL could never update a renewed row in place (a HOT update) and had to
/// write a new index entry each time. No query looks rows up by lease expiry (sweeping goes by
/// the row expiry, `binding_records_expires_at`), so the index goes; PostgreSQL also leaves room
/// in each page for in-place updates (fill factor 70, for pages written from now on).
struct RenewalHotUpdates;

impl MigrationName for RenewalHotUpdates {
    fn name(&self) -> &str {
        "m0004_renewal_hot_updates"
    }
}

#[async_trait]
impl MigrationTrait for RenewalHotUpdates {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut statements = vec!["DROP INDEX binding_records_lease_expires_at".to_owned()];
        if manager.get_database_backend() == DbBackend::Postgres {
            statements.push("ALTER TABLE binding_records SET (fillfactor = 70)".into());
        }
        run_all(manager, &statements).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut statements = vec![
            "CREATE INDEX binding_records_lease_expires_at ON binding_records (lease_expires_at) \
             WHERE lease_expires_at IS NOT NULL"
                .to_owned(),
        ];
        if manager.get_database_backend() == DbBackend::Postgres {
            statements.push("ALTER TABLE binding_records RESET (fillfactor)".into());
        }
        run_all(manager, &statements).await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// Finalization outcomes counted when their transcript record is appended (two rows of
/// `tether_counters`), so the metric never decreases when a session is deleted and no scrape
/// reads transcripts. The counters start from the records already stored.
struct FinalizationCounters;

impl MigrationName for FinalizationCounters {
    fn name(&self) -> &str {
        "m0005_finalization_counters"
    }
}

#[async_trait]
impl MigrationTrait for FinalizationCounters {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // `substr`, not `LIKE`: SQLite's `LIKE` ignores ASCII case, PostgreSQL's does not.
        let record = "role = 'system' AND substr(content, 1, 13) = 'finalization:'";
        let succeeded = "substr(content, 1, 23) = 'finalization: succeeded'";
        run_all(
            manager,
            &[
                format!(
                    "INSERT INTO tether_counters (name, value) SELECT 'finalizations_succeeded', \
                     COUNT(*) FROM transcript_entries WHERE {record} AND {succeeded}"
                ),
                format!(
                    "INSERT INTO tether_counters (name, value) SELECT 'finalizations_fell_back', \
                     COUNT(*) FROM transcript_entries WHERE {record} AND NOT ({succeeded})"
                ),
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(
            manager,
            &["DELETE FROM tether_counters WHERE name IN ('finalizations_succeeded', 'finalizations_fell_back')".into()],
        )
        .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// The operators' audit trail: one row per action taken through the API or the CLI, written
/// before the action runs (outcome `started`) and completed with its outcome afterwards, so no
/// action goes unrecorded even when the process dies half-way.
struct OperatorAudit;

impl MigrationName for OperatorAudit {
    fn name(&self) -> &str {
        "m0006_operator_audit"
    }
}

#[async_trait]
impl MigrationTrait for OperatorAudit {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let id = serial_id(manager.get_database_backend());
        run_all(
            manager,
            &[
                format!(
                    "CREATE TABLE operator_audit (
                        id {id},
                        at BIGINT NOT NULL,
                        actor TEXT NOT NULL,
                        action TEXT NOT NULL,
                        target TEXT NOT NULL,
                        reason TEXT NOT NULL,
                        outcome TEXT NOT NULL,
                        detail TEXT,
                        finished_at BIGINT
                    )"
                ),
                "CREATE INDEX operator_audit_outcome ON operator_audit (action, outcome)".into(),
            ],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(manager, &["DROP TABLE operator_audit".into()]).await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// Metadata on transcript entries: a nullable JSON text column, so every entry written before
/// it reads back with no metadata.
struct TranscriptMetadata;

impl MigrationName for TranscriptMetadata {
    fn name(&self) -> &str {
        "m0007_transcript_metadata"
    }
}

#[async_trait]
impl MigrationTrait for TranscriptMetadata {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(
            manager,
            &["ALTER TABLE transcript_entries ADD COLUMN metadata TEXT".into()],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(
            manager,
            &["ALTER TABLE transcript_entries DROP COLUMN metadata".into()],
        )
        .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// How each generation replaced its predecessor (`transfer`, `cut`, `reset`): a nullable
/// column, so a row rotated before it reads as a transfer, as it was then treated.
struct GenerationChanges;

impl MigrationName for GenerationChanges {
    fn name(&self) -> &str {
        "m0008_generation_changes"
    }
}

#[async_trait]
impl MigrationTrait for GenerationChanges {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(
            manager,
            &["ALTER TABLE host_sessions ADD COLUMN previous_change TEXT".into()],
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_all(
            manager,
            &["ALTER TABLE host_sessions DROP COLUMN previous_change".into()],
        )
        .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

/// The host session table stored in its key's order (SQLite's `WITHOUT ROWID`): the session
/// list reads a page of consecutive keys from one b-tree instead of seeking every listed row
/// in the table from the key index, and a session's update descends one b-tree instead of
/// two. PostgreSQL has no such table form (its tables are heaps apart from their indexes), so
/// this migration changes nothing there.
///
/// SQLite changes a table's form only by building a new table, copying the rows, dropping the
/// old one and renaming the new one into its place. Tables that reference `host_sessions` by
/// name (the transcript, and a host's own) keep referencing it, but only with foreign keys
/// off: with them on, dropping the old table would first delete every referencing row (`ON
/// DELETE CASCADE`). So the migration refuses to run on a connection with foreign keys on
/// (`Store::open` and `tether migrate` migrate on one with them off, and check every reference
/// before the COMMIT). The indexes and triggers defined on the old table, a host's included,
/// are made again on the new one; views and other tables' triggers that name it (a host's)
/// name the new table. A column added to the table by hand would be lost, and a row without
/// a key (which only the old form accepts) cannot be copied: in either case the migration
/// refuses, saying what to change.
struct HostSessionsByKey;

impl MigrationName for HostSessionsByKey {
    fn name(&self) -> &str {
        "m0009_host_sessions_by_key"
    }
}

/// The columns of `host_sessions` as of [`HostSessionsByKey`], in their order.
const HOST_SESSION_COLUMNS: &str = "session_key, agent_id, session_id, previous_session_id, \
     lifecycle_revision, agent_harness_id, active_leaf, created_at, updated_at, previous_change";

/// Rebuilds `host_sessions` on SQLite, `WITHOUT ROWID` when `by_key` (else as a rowid table, the
/// form before [`HostSessionsByKey`]), keeping its rows, indexes and triggers.
async fn rebuild_host_sessions(manager: &SchemaManager<'_>, by_key: bool) -> Result<(), DbErr> {
    let conn = manager.get_connection();
    let backend = manager.get_database_backend();
    let foreign_keys: i64 = conn
        .query_one_raw(Statement::from_string(backend, "PRAGMA foreign_keys"))
        .await?
        .map(|row| row.try_get("", "foreign_keys"))
        .transpose()?
        .unwrap_or(0);
    if foreign_keys != 0 {
        return Err(DbErr::Migration(
            "m0009_host_sessions_by_key rebuilds host_sessions and needs foreign keys off on its \
             connection (with them on, dropping the old table would delete the transcript rows \
             that reference it): migrate with `tether migrate` or by opening the store, which \
             turn them off for the migration"
                .into(),
        ));
    }
    // A column the table did not get from Tether (added by hand) would not survive the copy.
    let mut foreign_columns = Vec::new();
    for row in conn
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT name FROM pragma_table_info('host_sessions') ORDER BY cid",
        ))
        .await?
    {
        let name: String = row.try_get("", "name")?;
        if !HOST_SESSION_COLUMNS
            .split(", ")
            .any(|known| known.trim() == name)
        {
            foreign_columns.push(name);
        }
    }
    if !foreign_columns.is_empty() {
        return Err(DbErr::Migration(format!(
            "m0009_host_sessions_by_key rebuilds host_sessions, which has columns Tether did not \
             create ({}): their values would not be kept; move them to a table of your own and \
             migrate again",
            foreign_columns.join(", ")
        )));
    }
    // A rowid table accepts NULL in a text primary key (an old SQLite quirk); the table stored
    // by key does not. Tether never writes such a row, and no reference can name it.
    let keyless: i64 = conn
        .query_one_raw(Statement::from_string(
            backend,
            "SELECT COUNT(*) AS n FROM host_sessions WHERE session_key IS NULL",
        ))
        .await?
        .map(|row| row.try_get("", "n"))
        .transpose()?
        .unwrap_or(0);
    if keyless > 0 {
        return Err(DbErr::Migration(format!(
            "m0009_host_sessions_by_key rebuilds host_sessions, which has {keyless} row(s) \
             without a session_key (Tether never writes one, and the rebuilt table cannot hold \
             one): remove them (`DELETE FROM host_sessions WHERE session_key IS NULL`) and \
             migrate again"
        )));
    }
    // What the old table carries besides its rows (SQLite's automatic key index has no SQL).
    let mut attached = Vec::new();
    for row in conn
        .query_all_raw(Statement::from_string(
            backend,
            "SELECT sql FROM sqlite_schema WHERE tbl_name = 'host_sessions' \
             AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name",
        ))
        .await?
    {
        attached.push(row.try_get::<String>("", "sql")?);
    }
    let form = if by_key { " WITHOUT ROWID" } else { "" };
    let mut statements = vec![
        format!(
            "CREATE TABLE host_sessions_rebuilt (
                session_key TEXT PRIMARY KEY,
                agent_id TEXT NOT NULL,
                session_id TEXT NOT NULL,
                previous_session_id TEXT,
                lifecycle_revision BIGINT NOT NULL,
                agent_harness_id TEXT,
                active_leaf BIGINT,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                previous_change TEXT
            ){form}"
        ),
        format!(
            "INSERT INTO host_sessions_rebuilt ({HOST_SESSION_COLUMNS}) \
             SELECT {HOST_SESSION_COLUMNS} FROM host_sessions"
        ),
        "DROP TABLE host_sessions".into(),
        // The legacy rename changes only the renamed table's own definition: views and
        // triggers elsewhere that name `host_sessions` (a host's) are not parsed again while
        // that name is missing, and name the new table once it is there.
        "PRAGMA legacy_alter_table = ON".into(),
        "ALTER TABLE host_sessions_rebuilt RENAME TO host_sessions".into(),
        "PRAGMA legacy_alter_table = OFF".into(),
    ];
    statements.extend(attached);
    run_all(manager, &statements).await
}

/// Fails when `PRAGMA foreign_key_check` finds a reference that does not hold (SQLite: the
/// migrations run with foreign keys off, and this runs before their COMMIT).
pub(crate) async fn check_foreign_keys<C: ConnectionTrait>(conn: &C) -> Result<(), DbErr> {
    let broken = conn
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "PRAGMA foreign_key_check",
        ))
        .await?;
    match broken.first() {
        None => Ok(()),
        Some(row) => {
            let table: String = row.try_get("", "table").unwrap_or_default();
            let parent: String = row.try_get("", "parent").unwrap_or_default();
            Err(DbErr::Migration(format!(
                "{} row(s) reference a row that does not exist (the first in {table}, \
                 referencing {parent}): the migration is refused and nothing was changed; repair \
                 or remove those rows (`PRAGMA foreign_key_check` lists them) and migrate again",
                broken.len()
            )))
        }
    }
}

#[async_trait]
impl MigrationTrait for HostSessionsByKey {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            return Ok(());
        }
        rebuild_host_sessions(manager, true).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DbBackend::Postgres {
            return Ok(());
        }
        rebuild_host_sessions(manager, false).await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

#[cfg(test)]
mod tests {
    use sea_orm_migration::MigratorTrait;

    use super::Migrator;
    use crate::{Store, StoreOptions};

    /// Turns the foreign keys of a SQLite store of one connection off or on (a migration that
    /// rebuilds a table needs them off, as `Store::open` has them when it migrates).
    async fn sqlite_foreign_keys(store: &Store, on: bool) {
        use sea_orm::ConnectionTrait as _;
        if store.backend() == sea_orm::DbBackend::Sqlite {
            let pragma = if on { "ON" } else { "OFF" };
            store
                .connection()
                .execute_unprepared(&format!("PRAGMA foreign_keys = {pragma}"))
                .await
                .unwrap();
        }
    }

    /// The `column` of the one row `sql` answers on a SQLite connection.
    async fn sqlite_one<T: sea_orm::TryGetable>(
        conn: &impl sea_orm::ConnectionTrait,
        sql: &str,
        column: &str,
    ) -> T {
        let stmt = sea_orm::Statement::from_string(sea_orm::DbBackend::Sqlite, sql.to_owned());
        let row = conn.query_one_raw(stmt).await.unwrap();
        row.unwrap().try_get("", column).unwrap()
    }

    /// Whether a SQLite database's session table is stored in key order.
    async fn sessions_by_key(conn: &impl sea_orm::ConnectionTrait) -> bool {
        let sql = "SELECT sql FROM sqlite_schema WHERE name = 'host_sessions'";
        let table: String = sqlite_one(conn, sql, "sql").await;
        table.ends_with("WITHOUT ROWID")
    }

    /// Every migration rolls back and re-applies cleanly on a migrated store.
    async fn down_and_up(store: &Store) {
        sqlite_foreign_keys(store, false).await;
        let conn = store.connection();
        let applied = Migrator::get_applied_migrations(conn).await.unwrap();
        assert_eq!(applied.len(), Migrator::migrations().len());
        Migrator::down(conn, None).await.unwrap();
        assert!(
            Migrator::get_applied_migrations(conn)
                .await
                .unwrap()
                .is_empty()
        );
        Migrator::up(conn, None).await.unwrap();
        assert_eq!(
            Migrator::get_applied_migrations(conn).await.unwrap().len(),
            Migrator::migrations().len()
        );
        sqlite_foreign_keys(store, true).await;
    }

    /// An in-memory store is migrated on its one connection, whose foreign keys (off for the
    /// migrations) and rename mode are restored afterwards.
    #[tokio::test]
    async fn sqlite_an_in_memory_store_gets_its_foreign_keys_back_after_migrating() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let conn = store.connection();
        let foreign_keys: i64 = sqlite_one(conn, "PRAGMA foreign_keys", "foreign_keys").await;
        let legacy: i64 = sqlite_one(conn, "PRAGMA legacy_alter_table", "legacy_alter_table").await;
        assert_eq!((foreign_keys, legacy), (1, 0));
        assert!(sessions_by_key(conn).await);
    }

    #[tokio::test]
    async fn sqlite_migrations_roll_back_and_reapply() {
        let store = Store::open_with(StoreOptions::new("sqlite::memory:"))
            .await
            .unwrap();
        down_and_up(&store).await;
    }

    /// Rows written before the three newest migrations stay readable: a transcript entry
    /// written before the metadata column reads back with no metadata (new entries beside it
    /// keep theirs), and a predecessor recorded before the generation-change column reads as
    /// a transfer, the behaviour it was written under. The store has one connection (its
    /// foreign keys are turned off for the migrations here).
    async fn rows_before_the_newest_columns_stay_readable(store: &Store) {
        use sea_orm::ConnectionTrait as _;
        use tether_core::SessionKey;

        use crate::{NewTranscriptEntry, TranscriptRole};

        sqlite_foreign_keys(store, false).await;
        let conn = store.connection();
        Migrator::down(conn, Some(3)).await.unwrap();
        for sql in [
            "INSERT INTO host_sessions (session_key, agent_id, session_id, previous_session_id, \
             lifecycle_revision, created_at, updated_at) \
             VALUES ('agent:main:old', 'main', 's-1', 's-0', 2, 0, 0)",
            "INSERT INTO transcript_entries (session_key, parent_id, role, content, \
             idempotency_key, created_at) VALUES ('agent:main:old', NULL, 'user', 'written before', 'old-1', 0)",
        ] {
            conn.execute_unprepared(sql).await.unwrap();
        }
        let leaf: i64 = conn
            .query_one_raw(sea_orm::Statement::from_string(
                store.backend(),
                "SELECT MAX(id) AS id FROM transcript_entries",
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get("", "id")
            .unwrap();
        conn.execute_unprepared(&format!(
            "UPDATE host_sessions SET active_leaf = {leaf} WHERE session_key = 'agent:main:old'"
        ))
        .await
        .unwrap();
        Migrator::up(conn, None).await.unwrap();
        sqlite_foreign_keys(store, true).await;

        let key = SessionKey::new("agent:main:old").unwrap();
        let entry = store.session(&key).await.unwrap().unwrap();
        assert_eq!(entry.previous_session_id.unwrap().as_str(), "s-0");
        assert_eq!(
            entry.previous_change,
            Some(tether_core::GenerationChange::Transfer)
        );
        let mut metadata = serde_json::Map::new();
        metadata.insert("display".into(), serde_json::Value::Bool(false));
        store
            .append_transcript(
                &key,
                NewTranscriptEntry::new(TranscriptRole::User, "written after")
                    .with_metadata(metadata.clone()),
            )
            .await
            .unwrap();
        let path = store.active_path(&key).await.unwrap();
        assert_eq!(path.len(), 2);
        assert_eq!(path[0].content, "written before");
        assert_eq!(path[0].idempotency_key.as_deref(), Some("old-1"));
        assert_eq!(path[0].metadata, None);
        assert_eq!(path[1].metadata, Some(metadata));
    }

    #[tokio::test]
    async fn sqlite_rows_written_before_the_newest_columns_stay_readable() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("old.db").display());
        let store = Store::open_with(StoreOptions::new(url).max_connections(1))
            .await
            .unwrap();
        rows_before_the_newest_columns_stay_readable(&store).await;
    }

    /// One connection to the SQLite database at `url` (created if missing), with foreign keys
    /// `on` or off.
    async fn sqlite_connection(url: &str, on: bool) -> sea_orm::DatabaseConnection {
        let mut connect = sea_orm::ConnectOptions::new(url.to_owned());
        connect
            .max_connections(1)
            .map_sqlx_sqlite_opts(move |o| o.create_if_missing(true).foreign_keys(on));
        sea_orm::Database::connect(connect).await.unwrap()
    }

    /// [`sqlite_connection`] to a database migrated up to m0008 (before the session table was
    /// stored by key).
    async fn sqlite_database_at_m0008(url: &str, on: bool) -> sea_orm::DatabaseConnection {
        let db = sqlite_connection(url, on).await;
        Migrator::up(&db, Some(8)).await.unwrap();
        db
    }

    /// Opens (`Store::open`) an older database (migrated up to m0008, then `statements` run
    /// with foreign keys off) whose upgrade must be refused, and checks that the error is typed
    /// as a database an operator must repair, that its text says each of `says`, and that the
    /// database is as it was (the session table not rebuilt, m0009 not recorded).
    async fn assert_upgrade_refused(statements: &[&str], says: &[&str]) {
        use sea_orm::ConnectionTrait as _;

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("refused.db").display());
        let older = sqlite_database_at_m0008(&url, false).await;
        for sql in statements {
            older.execute_unprepared(sql).await.unwrap();
        }
        older.close().await.unwrap();

        let error = Store::open(&url).await.unwrap_err();
        assert!(
            matches!(
                &error,
                tether_core::Error::Store {
                    kind: tether_core::StoreErrorKind::Unusable { .. }
                }
            ),
            "{error:?}"
        );
        let error = error.to_string();
        let older = sqlite_connection(&url, false).await;
        assert!(!sessions_by_key(&older).await, "{error}");
        let applied = Migrator::get_applied_migrations(&older).await.unwrap();
        assert_eq!(applied.len(), 8, "m0009 was not recorded: {error}");
        for text in says {
            assert!(error.contains(text), "{text:?} not in: {error}");
        }
    }

    /// A reference that does not hold, left by a writer that ran with foreign keys off, fails
    /// the migrations (which run with them off) before their COMMIT: the store does not open,
    /// says what to repair, and the database is as it was.
    #[tokio::test]
    async fn sqlite_a_broken_reference_refuses_the_migration_and_changes_nothing() {
        assert_upgrade_refused(
            &[
                "INSERT INTO transcript_entries (session_key, role, content, created_at) \
               VALUES ('agent:main:gone', 'user', 'an orphan', 0)",
            ],
            &["reference a row that does not exist", "transcript_entries"],
        )
        .await;
    }

    /// A session row without a key (which a rowid table accepts and Tether never writes) cannot
    /// be copied into the table stored by key: the migration refuses, saying how many and how
    /// to remove them, and the database is as it was.
    #[tokio::test]
    async fn sqlite_a_session_row_without_a_key_refuses_the_rebuild() {
        assert_upgrade_refused(
            &[
                "INSERT INTO host_sessions (session_key, agent_id, session_id, lifecycle_revision, \
               created_at, updated_at) VALUES (NULL, 'main', 's-1', 0, 0, 0), \
               (NULL, 'main', 's-2', 0, 0, 0)",
            ],
            &[
                "2 row(s) without a session_key",
                "DELETE FROM host_sessions WHERE session_key IS NULL",
            ],
        )
        .await;
    }

    /// A column added to the session table by hand would be lost by the rebuild: the
    /// migration refuses, naming it, and the database is as it was.
    #[tokio::test]
    async fn sqlite_a_column_added_by_hand_refuses_the_rebuild() {
        assert_upgrade_refused(
            &["ALTER TABLE host_sessions ADD COLUMN host_flag TEXT"],
            &["(host_flag)"],
        )
        .await;
    }

    /// Several stores opening one older database at once take turns at the rebuild (each on
    /// its own migration connection, behind the database's write lock): every open succeeds,
    /// and the table is rebuilt once, with its rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite_concurrent_opens_of_an_older_database_rebuild_it_once() {
        use sea_orm::ConnectionTrait as _;

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("shared.db").display());
        let older = sqlite_database_at_m0008(&url, true).await;
        older
            .execute_unprepared(
                "INSERT INTO host_sessions (session_key, agent_id, session_id, \
                 lifecycle_revision, created_at, updated_at) \
                 VALUES ('agent:main:a', 'main', 's-a', 1, 0, 0)",
            )
            .await
            .unwrap();
        older.close().await.unwrap();

        let opens: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { Store::open(&url).await })
            })
            .collect();
        for open in opens {
            let store = open.await.unwrap().unwrap();
            let conn = store.connection();
            assert!(sessions_by_key(conn).await);
            let sql = "SELECT COUNT(*) AS n FROM host_sessions";
            assert_eq!(sqlite_one::<i64>(conn, sql, "n").await, 1);
            let sql = "SELECT COUNT(*) AS n FROM seaql_migrations \
                 WHERE version = 'm0009_host_sessions_by_key'";
            assert_eq!(sqlite_one::<i64>(conn, sql, "n").await, 1);
            store.close().await.unwrap();
        }
    }

    /// An older SQLite database (migrated up to m0008) with sessions, transcript rows, and a
    /// host's own table, view, and index and trigger on the session table: a migration run on a
    /// connection with foreign keys on refuses and changes nothing; opening the store rebuilds
    /// the session table in key order with every row, keeps the host's index and trigger, and
    /// the references (the transcript's and the host's) still cascade from the new table.
    #[tokio::test]
    async fn sqlite_an_older_database_keeps_its_rows_and_references_when_its_sessions_are_rebuilt()
    {
        use sea_orm::ConnectionTrait as _;

        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("older.db").display());
        let older = sqlite_database_at_m0008(&url, true).await;
        for sql in [
            "INSERT INTO host_sessions (session_key, agent_id, session_id, lifecycle_revision, \
             created_at, updated_at) VALUES ('agent:main:b', 'main', 's-b', 1, 0, 0), \
             ('agent:main:a', 'main', 's-a', 1, 0, 0)",
            "INSERT INTO transcript_entries (session_key, role, content, created_at) \
             VALUES ('agent:main:a', 'user', 'hello a', 0), ('agent:main:b', 'user', 'hello b', 0)",
            "CREATE TABLE host_notes (session_key TEXT NOT NULL \
             REFERENCES host_sessions (session_key) ON DELETE CASCADE, note TEXT NOT NULL)",
            "INSERT INTO host_notes VALUES ('agent:main:a', 'a note'), ('agent:main:b', 'b note')",
            "CREATE INDEX host_sessions_by_agent ON host_sessions (agent_id)",
            "CREATE VIEW host_session_notes AS SELECT s.session_key, n.note \
             FROM host_sessions AS s JOIN host_notes AS n USING (session_key)",
            "CREATE TRIGGER host_sessions_harness AFTER UPDATE OF agent_harness_id ON host_sessions \
             BEGIN INSERT INTO host_notes VALUES (new.session_key, 'harness changed'); END",
        ] {
            older.execute_unprepared(sql).await.unwrap();
        }
        let error = Migrator::up(&older, None).await.unwrap_err();
        assert!(error.to_string().contains("foreign keys off"), "{error}");
        let kept: i64 =
            sqlite_one(&older, "SELECT COUNT(*) AS n FROM transcript_entries", "n").await;
        assert_eq!(kept, 2, "the refused migration deleted nothing");
        older.close().await.unwrap();

        let store = Store::open(&url).await.unwrap();
        let conn = store.connection();
        assert!(sessions_by_key(conn).await);
        for name in ["host_sessions_by_agent", "host_sessions_harness"] {
            let sql = format!(
                "SELECT COUNT(*) AS n FROM sqlite_schema WHERE name = '{name}' AND tbl_name = 'host_sessions'"
            );
            let n: i64 = sqlite_one(conn, &sql, "n").await;
            assert_eq!(n, 1, "{name} is on the rebuilt table");
        }
        let on: i64 = sqlite_one(conn, "PRAGMA foreign_keys", "foreign_keys").await;
        assert_eq!(on, 1, "the store's connections keep their foreign keys");
        let page = store
            .list_sessions(&crate::SessionFilter {
                limit: 10,
                ..Default::default()
            })
            .await
            .unwrap();
        let keys: Vec<&str> = page
            .sessions
            .iter()
            .map(|e| e.session_key.as_str())
            .collect();
        assert_eq!(keys, ["agent:main:a", "agent:main:b"]);

        conn.execute_unprepared(
            "UPDATE host_sessions SET agent_harness_id = 'codex' WHERE session_key = 'agent:main:b'",
        )
        .await
        .unwrap();
        conn.execute_unprepared("DELETE FROM host_sessions WHERE session_key = 'agent:main:a'")
            .await
            .unwrap();
        for (sql, want) in [
            ("SELECT COUNT(*) AS n FROM host_sessions", 1),
            ("SELECT COUNT(*) AS n FROM transcript_entries", 1),
            (
                "SELECT COUNT(*) AS n FROM transcript_entries WHERE session_key = 'agent:main:b'",
                1,
            ),
            ("SELECT COUNT(*) AS n FROM host_notes", 2),
            (
                "SELECT COUNT(*) AS n FROM host_notes WHERE note = 'harness changed'",
                1,
            ),
            (
                "SELECT COUNT(*) AS n FROM host_notes WHERE session_key = 'agent:main:a'",
                0,
            ),
            ("SELECT COUNT(*) AS n FROM host_session_notes", 2),
        ] {
            let n: i64 = sqlite_one(conn, sql, "n").await;
            assert_eq!(n, want, "{sql}");
        }
    }

    #[tokio::test]
    async fn postgres_rows_written_before_the_newest_columns_stay_readable() {
        let Some(db) = crate::testing::PgTestDatabase::create("metadata_migration").await else {
            return;
        };
        let store = Store::open_with(StoreOptions::new(db.url())).await.unwrap();
        rows_before_the_newest_columns_stay_readable(&store).await;
        let _ = store.close().await;
        db.cleanup().await;
    }

    #[tokio::test]
    async fn postgres_migrations_roll_back_and_reapply() {
        let Some(db) = crate::testing::PgTestDatabase::create("migrations").await else {
            return;
        };
        let store = Store::open_with(StoreOptions::new(db.url())).await.unwrap();
        down_and_up(&store).await;
        let _ = store.close().await;
        db.cleanup().await;
    }
}
