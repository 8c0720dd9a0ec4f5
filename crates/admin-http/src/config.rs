//! Service configuration: database URL and bind address, with their defaults and checks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Default bind address (loopback only).
pub const DEFAULT_BIND: &str = "127.0.0.1:8765";

/// Default database: an embedded SQLite file under `./tether-data/`.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://tether-data/tether.db";

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The bind address does not parse.
    #[error("invalid bind address `{0}`: expected IP:PORT, for example 127.0.0.1:8765")]
    InvalidBind(String),
    /// A non-loopback address was asked for without any token configured.
    #[error(
        "refusing to bind {0} without a token: set TETHER_ADMIN_TOKEN (and optionally TETHER_READ_TOKEN) or bind to a loopback address"
    )]
    NonLoopbackWithoutToken(SocketAddr),
    /// The database URL is not one Tether understands.
    #[error(
        "unsupported database URL `{0}`: use sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB"
    )]
    UnsupportedDatabaseUrl(String),
}

/// What `tether serve` runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// The database URL.
    pub database_url: String,
    /// The address to listen on.
    pub bind: SocketAddr,
    /// Whether any bearer token is configured.
    pub has_token: bool,
}

impl ServeConfig {
    /// Checks and builds a configuration.
    pub fn new(database_url: &str, bind: &str, has_token: bool) -> Result<Self, ConfigError> {
        let bind: SocketAddr = bind
            .parse()
            .map_err(|_| ConfigError::InvalidBind(bind.to_owned()))?;
        if !bind.ip().is_loopback() && !has_token {
            return Err(ConfigError::NonLoopbackWithoutToken(bind));
        }
        if !(database_url.starts_with("sqlite:")
            || database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://"))
        {
            return Err(ConfigError::UnsupportedDatabaseUrl(database_url.to_owned()));
        }
        Ok(Self {
            database_url: database_url.to_owned(),
            bind,
            has_token,
        })
    }

    /// The SQLite file path of a `sqlite://` URL (without query), if it names a file.
    pub fn sqlite_file(&self) -> Option<PathBuf> {
        let rest = self.database_url.strip_prefix("sqlite://")?;
        let path = rest.split('?').next().unwrap_or(rest);
        (!path.is_empty() && path != ":memory:").then(|| Path::new(path).to_path_buf())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_the_default_and_public_binds_need_a_token() {
        let c = ServeConfig::new(DEFAULT_DATABASE_URL, DEFAULT_BIND, false).unwrap();
        assert!(c.bind.ip().is_loopback());
        assert_eq!(c.sqlite_file().unwrap(), Path::new("tether-data/tether.db"));
        assert!(matches!(
            ServeConfig::new(DEFAULT_DATABASE_URL, "0.0.0.0:8765", false),
            Err(ConfigError::NonLoopbackWithoutToken(_))
        ));
        assert!(ServeConfig::new(DEFAULT_DATABASE_URL, "0.0.0.0:8765", true).is_ok());
        assert!(matches!(
            ServeConfig::new("mysql://x", DEFAULT_BIND, false),
            Err(ConfigError::UnsupportedDatabaseUrl(_))
        ));
        assert!(matches!(
            ServeConfig::new(DEFAULT_DATABASE_URL, "nope", false),
            Err(ConfigError::InvalidBind(_))
        ));
    }
}
