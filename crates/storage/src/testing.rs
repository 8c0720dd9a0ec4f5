//! Test support (feature `test-support`): a throwaway PostgreSQL database.
//!
//! [`PgTestDatabase::create`] makes a uniquely named database on the server named by
//! `TETHER_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`). When the server cannot be
//! reached it prints a notice and returns `None` so the caller can skip, unless
//! `TETHER_REQUIRE_PG=1`, in which case it panics. The database is dropped by
//! [`PgTestDatabase::cleanup`], or on drop.
//!
//! ```no_run
//! # async fn demo() {
//! use tether_storage::testing::PgTestDatabase;
//! let Some(db) = PgTestDatabase::create("my_crate").await else { return };
//! let url = db.url().to_owned(); // postgres://…/tether_my_crate_<random>
//! // … open a store on `url` …
//! db.cleanup().await;
//! # }
//! ```
#![allow(clippy::print_stderr)]

use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database};

/// The server used when `TETHER_PG_URL` is not set.
pub const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The server URL for tests: `TETHER_PG_URL`, else [`DEFAULT_PG_URL`].
pub fn pg_server_url() -> String {
    std::env::var("TETHER_PG_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_PG_URL.to_owned())
}

/// Whether `TETHER_REQUIRE_PG=1` turns an unreachable server into a failure.
pub fn pg_required() -> bool {
    std::env::var("TETHER_REQUIRE_PG").is_ok_and(|v| v.trim() == "1")
}

/// `url` with its database name replaced by `database` (query string kept).
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let base = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{database}?{q}"),
        None => format!("{base}/{database}"),
    }
}

fn options(url: &str) -> ConnectOptions {
    let mut opts = ConnectOptions::new(url.to_owned());
    opts.max_connections(1)
        .connect_timeout(Duration::from_secs(3))
        .acquire_timeout(Duration::from_secs(5))
        .sqlx_logging(false);
    opts
}

/// A uniquely named PostgreSQL database that lives as long as the value.
#[derive(Debug)]
pub struct PgTestDatabase {
    server_url: String,
    name: String,
    url: String,
    dropped: bool,
}

impl PgTestDatabase {
    /// Creates `tether_<label>_<random>` on the test server, or returns `None` (after printing a
    /// notice) when the server is unreachable. Panics instead when `TETHER_REQUIRE_PG=1`.
    pub async fn create(label: &str) -> Option<Self> {
        let server_url = pg_server_url();
        let label: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(24)
            .collect();
        let name = format!("tether_{label}_{}", uuid::Uuid::new_v4().simple());
        let created = async {
            let admin = Database::connect(options(&server_url)).await?;
            admin
                .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
                .await?;
            admin.close().await?;
            Ok::<(), sea_orm::DbErr>(())
        }
        .await;
        match created {
            Ok(()) => {
                let url = with_database(&server_url, &name);
                Some(Self {
                    server_url,
                    name,
                    url,
                    dropped: false,
                })
            }
            Err(err) if pg_required() => {
                panic!("TETHER_REQUIRE_PG=1 but PostgreSQL at {server_url} is unusable: {err}")
            }
            Err(err) => {
                eprintln!(
                    "notice: skipping PostgreSQL tests: {server_url} is unusable ({err}); set TETHER_PG_URL, or TETHER_REQUIRE_PG=1 to fail instead"
                );
                None
            }
        }
    }

    /// The URL of the fresh database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Drops the database now.
    pub async fn cleanup(mut self) {
        drop_database(&self.server_url, &self.name).await;
        self.dropped = true;
    }
}

async fn drop_database(server_url: &str, name: &str) {
    let result = async {
        let admin = Database::connect(options(server_url)).await?;
        admin
            .execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
            .await?;
        admin.close().await
    }
    .await;
    if let Err(err) = result {
        eprintln!("notice: could not drop test database {name}: {err}");
    }
}

impl Drop for PgTestDatabase {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        let server_url = self.server_url.clone();
        let name = self.name.clone();
        // Drop may run inside a runtime: use a separate thread with its own runtime.
        let joined =
            std::thread::spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(drop_database(&server_url, &name)),
                    Err(err) => eprintln!("notice: could not drop test database {name}: {err}"),
                }
            })
            .join();
        if joined.is_err() {
            eprintln!("notice: dropping test database {} panicked", self.name);
        }
    }
}

/// Moves `key` to generation `next` by a reset committed in a host transaction of `store`,
/// telling no harness: what a host that crashed between a reset's COMMIT and its notification
/// leaves behind. `None` (nothing committed) when the session is absent or moved on while the
/// transaction ran.
pub async fn commit_unnotified_reset(
    store: &crate::Store,
    key: &tether_core::SessionKey,
    next: &tether_core::SessionId,
) -> Result<Option<tether_core::HostSessionEntry>, tether_core::Error> {
    use crate::{HostBackend as _, HostTransaction as _};

    let Some(entry) = store.host_session(key).await? else {
        return Ok(None);
    };
    let tx = store.begin_host().await?;
    match tx
        .rotate_session(&entry, next, tether_core::GenerationChange::Reset)
        .await
    {
        Ok(Some(rotated)) => tx.commit().await.map(|()| Some(rotated)),
        Ok(None) => tx.rollback().await.map(|()| None),
        Err(error) => {
            let _ = tx.rollback().await;
            Err(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_name_is_replaced_and_query_kept() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/test?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h:5432", "x"),
            "postgres://h:5432/x"
        );
    }
}
