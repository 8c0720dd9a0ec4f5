//! Opening the database behind the service: creates the SQLite file's folder, opens the
//! store (which runs pending migrations) and answers health checks.

use async_trait::async_trait;
use tether_storage::Store;

use crate::config::ServeConfig;
use crate::state::HealthProbe;

/// The opened database.
#[derive(Debug, Clone)]
pub struct Database {
    store: Store,
    backend: &'static str,
}

impl Database {
    /// Wraps an already opened (and migrated) store.
    pub fn from_store(store: Store) -> Self {
        // The backend enum is sea-orm's; its name is all this crate needs.
        let backend = if format!("{:?}", store.backend()).contains("Postgres") {
            "postgres"
        } else {
            "sqlite"
        };
        Self { store, backend }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }
}

/// Opens (creating and migrating) the configured database.
pub async fn open_database(config: &ServeConfig) -> Result<Database, tether_core::Error> {
    let file = config.sqlite_file();
    if let Some(dir) = file
        .as_deref()
        .and_then(std::path::Path::parent)
        .filter(|d| !d.as_os_str().is_empty())
    {
        std::fs::create_dir_all(dir).map_err(|e| {
            tether_core::Error::store(tether_core::StoreErrorKind::Configuration {
                message: format!(
                    "cannot create the database folder {}: {e}; check its permissions or pass --database-url",
                    dir.display()
                ),
            })
        })?;
    }
    let backend = if config.database_url.starts_with("sqlite:") {
        "sqlite"
    } else {
        "postgres"
    };
    let store = Store::open(&config.database_url).await?;
    tracing::info!(backend, "database opened and migrated");
    Ok(Database { store, backend })
}

#[async_trait]
impl HealthProbe for Database {
    async fn check(&self) -> Result<(), String> {
        self.store
            .connection()
            .ping()
            .await
            .map_err(|e| e.to_string())
    }

    fn backend(&self) -> &'static str {
        self.backend
    }
}
