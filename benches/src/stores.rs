//! Stores opened exactly as production opens them, and the lifecycle over them.
//!
//! SQLite is a file in a temporary directory, in WAL mode with `synchronous=FULL` (the
//! [`Store`] default); PostgreSQL is a throwaway database on the server named by
//! `TETHER_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`, `synchronous_commit=on`
//! unless the server says otherwise).

use std::sync::Arc;
use std::time::Duration;

use tether_core::{BindingStore, Error, JsonObjectCodec, LeaseConfig, Namespace, NamespaceConfig};
use tether_harness_sdk::lifecycle::{Lifecycle, PrepareLease};
use tether_storage::testing::PgTestDatabase;
use tether_storage::{Store, StoreOptions};

/// The record type of the benchmark lifecycle.
pub type Record = serde_json::Map<String, serde_json::Value>;

/// Which database a store runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// SQLite file, WAL, `synchronous=FULL`.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Backend {
    /// `sqlite` or `postgres` (the suffix of the workload names).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// A store with what keeps its database alive.
#[derive(Debug)]
pub struct BenchStore {
    /// The store.
    pub store: Store,
    /// The backend.
    pub backend: Backend,
    dir: Option<tempfile::TempDir>,
    pg: Option<PgTestDatabase>,
}

/// The name of a SQLite store's file in its temporary directory.
const SQLITE_FILE: &str = "bench.db";

/// The namespace every benchmark uses.
pub fn namespace() -> Namespace {
    Namespace::new("bench-bindings").unwrap_or_else(|_| unreachable!("a valid namespace name"))
}

impl BenchStore {
    /// A fresh SQLite file store (WAL, `synchronous=FULL`) with `connections` pooled connections.
    pub async fn sqlite(connections: u32) -> Result<Self, Error> {
        let dir = tempfile::tempdir().map_err(|e| Error::other(format!("temp dir: {e}")))?;
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join(SQLITE_FILE).display()
        );
        let store = Store::open_with(StoreOptions::new(url).max_connections(connections)).await?;
        Self::ready(store, Backend::Sqlite, Some(dir), None).await
    }

    /// A fresh PostgreSQL database store, or `None` (after a notice on stderr) when no server
    /// answers.
    pub async fn postgres(label: &str, connections: u32) -> Result<Option<Self>, Error> {
        let Some(db) = PgTestDatabase::create(label).await else {
            return Ok(None);
        };
        let options = StoreOptions::new(db.url())
            .max_connections(connections)
            .connect_timeout(Duration::from_secs(30));
        let store = Store::open_with(options).await?;
        Self::ready(store, Backend::Postgres, None, Some(db))
            .await
            .map(Some)
    }

    /// Opens `backend`; `None` when it is PostgreSQL and no server answers.
    pub async fn open(
        backend: Backend,
        label: &str,
        connections: u32,
    ) -> Result<Option<Self>, Error> {
        match backend {
            Backend::Sqlite => Self::sqlite(connections).await.map(Some),
            Backend::Postgres => Self::postgres(label, connections).await,
        }
    }

    async fn ready(
        store: Store,
        backend: Backend,
        dir: Option<tempfile::TempDir>,
        pg: Option<PgTestDatabase>,
    ) -> Result<Self, Error> {
        store
            .register_namespace(NamespaceConfig::new(namespace()))
            .await?;
        Ok(Self {
            store,
            backend,
            dir,
            pg,
        })
    }

    /// The lifecycle over this store's namespace with `lease` timing; the lease policy keeps
    /// the current record (or starts an empty one).
    pub fn lifecycle(&self, lease: LeaseConfig) -> Result<Lifecycle<JsonObjectCodec>, Error> {
        self.lifecycle_with(lease, false)
    }

    /// [`BenchStore::lifecycle`], with heartbeats batched by the shared renewal driver when
    /// `batched` is set.
    pub fn lifecycle_with(
        &self,
        lease: LeaseConfig,
        batched: bool,
    ) -> Result<Lifecycle<JsonObjectCodec>, Error> {
        let keep: PrepareLease<Record> =
            Arc::new(|current: Option<&Record>, _| Some(current.cloned().unwrap_or_default()));
        Lifecycle::builder(
            Arc::new(self.store.clone()),
            namespace(),
            JsonObjectCodec,
            keep,
        )
        .lease_config(lease)
        .holder("bench")
        .batched_heartbeats(batched)
        .build()
    }

    /// The SQLite file behind the store (`None` on PostgreSQL).
    pub fn sqlite_file(&self) -> Option<std::path::PathBuf> {
        self.dir.as_ref().map(|dir| dir.path().join(SQLITE_FILE))
    }

    /// The URL of the PostgreSQL database behind the store (`None` on SQLite).
    pub fn database_url(&self) -> Option<&str> {
        self.pg.as_ref().map(PgTestDatabase::url)
    }

    /// Closes the pool and drops the database (PostgreSQL) or the directory (SQLite).
    pub async fn cleanup(self) {
        let Self { store, pg, dir, .. } = self;
        let _ = store.close().await;
        if let Some(pg) = pg {
            pg.cleanup().await;
        }
        drop(dir);
    }
}
