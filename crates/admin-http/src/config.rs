//! Service configuration: database URL and bind address, with their defaults and checks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tether_storage::redact_url;

use crate::auth::Tokens;

/// Default bind address (loopback only).
pub const DEFAULT_BIND: &str = "127.0.0.1:8765";

/// Default database: an embedded SQLite file under `./tether-data/`.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://tether-data/tether.db";

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The bind address does not parse or its host name does not resolve.
    #[error(
        "invalid bind address `{0}`: expected IP:PORT or HOST:PORT that resolves, for example 127.0.0.1:8765 or localhost:8765"
    )]
    InvalidBind(String),
    /// A non-loopback address was asked for without any token configured.
    #[error(
        "refusing to bind {0} without a token: set TETHER_ADMIN_TOKEN (and optionally TETHER_READ_TOKEN) or bind to a loopback address"
    )]
    NonLoopbackWithoutToken(SocketAddr),
    /// The database URL is not one Tether understands (the value kept here has its password
    /// masked).
    #[error(
        "unsupported database URL `{0}`: use sqlite://PATH, sqlite::memory: or postgres://USER@HOST/DB"
    )]
    UnsupportedDatabaseUrl(String),
    /// A token variable is set but blank (or not valid UTF-8): a blank token would leave the
    /// service open while looking protected.
    #[error(
        "{0} is set but blank: set it to a secret token, or unset it (a non-loopback bind needs a token)"
    )]
    BlankToken(&'static str),
    /// A named-token list (`TETHER_ADMIN_TOKENS`, `TETHER_READ_TOKENS`) is malformed; the
    /// reason never contains a secret.
    #[error("{variable} is invalid: {reason}; expected `name:secret,name:secret`")]
    InvalidTokenList {
        /// The variable.
        variable: &'static str,
        /// What is wrong (never the secret).
        reason: String,
    },
}

/// What `tether serve` runs with. Its `Debug` shows the database URL with any password masked.
#[derive(Clone, PartialEq, Eq)]
pub struct ServeConfig {
    /// The database URL.
    pub database_url: String,
    /// The address to listen on.
    pub bind: SocketAddr,
    /// Whether any bearer token is configured.
    pub has_token: bool,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field(
                "database_url",
                &tether_storage::redact_url(&self.database_url),
            )
            .field("bind", &self.bind)
            .field("has_token", &self.has_token)
            .finish()
    }
}

/// The addresses of `bind` (`IP:PORT` as is, `HOST:PORT` resolved); at least one.
fn resolve_bind(bind: &str) -> Result<Vec<SocketAddr>, ConfigError> {
    use std::net::ToSocketAddrs as _;
    let invalid = || ConfigError::InvalidBind(bind.to_owned());
    if let Ok(addr) = bind.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    let addresses: Vec<SocketAddr> = bind.to_socket_addrs().map_err(|_| invalid())?.collect();
    if addresses.is_empty() {
        return Err(invalid());
    }
    Ok(addresses)
}

impl ServeConfig {
    /// Checks and builds a configuration. `bind` is `IP:PORT` or `HOST:PORT`; a host name is
    /// resolved and the service listens on its first address. Without a token in `tokens`,
    /// **every** resolved address must be loopback (a name that also resolves to a public
    /// address is refused, whichever address comes first).
    pub fn new(database_url: &str, bind: &str, tokens: &Tokens) -> Result<Self, ConfigError> {
        let has_token = tokens.any();
        let addresses = resolve_bind(bind)?;
        if !has_token && let Some(public) = addresses.iter().find(|a| !a.ip().is_loopback()) {
            return Err(ConfigError::NonLoopbackWithoutToken(*public));
        }
        let bind = addresses[0];
        if !(database_url.starts_with("sqlite:")
            || database_url.starts_with("postgres://")
            || database_url.starts_with("postgresql://"))
        {
            return Err(ConfigError::UnsupportedDatabaseUrl(redact_url(
                database_url,
            )));
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
        let none = Tokens::default();
        let some = Tokens::new(None, Some("a".into())).unwrap();
        let c = ServeConfig::new(DEFAULT_DATABASE_URL, DEFAULT_BIND, &none).unwrap();
        assert!(c.bind.ip().is_loopback());
        assert_eq!(c.sqlite_file().unwrap(), Path::new("tether-data/tether.db"));
        assert!(matches!(
            ServeConfig::new(DEFAULT_DATABASE_URL, "0.0.0.0:8765", &none),
            Err(ConfigError::NonLoopbackWithoutToken(_))
        ));
        assert!(ServeConfig::new(DEFAULT_DATABASE_URL, "0.0.0.0:8765", &some).is_ok());
        assert!(matches!(
            ServeConfig::new("mysql://x", DEFAULT_BIND, &none),
            Err(ConfigError::UnsupportedDatabaseUrl(_))
        ));
        assert!(matches!(
            ServeConfig::new(DEFAULT_DATABASE_URL, "nope", &none),
            Err(ConfigError::InvalidBind(_))
        ));
    }

    #[test]
    fn a_host_name_bind_resolves_and_every_address_must_be_loopback_without_a_token() {
        let none = Tokens::default();
        let c = ServeConfig::new(DEFAULT_DATABASE_URL, "localhost:8765", &none).unwrap();
        assert!(c.bind.ip().is_loopback(), "{c:?}");
        assert_eq!(c.bind.port(), 8765);
        assert!(matches!(
            ServeConfig::new(DEFAULT_DATABASE_URL, "localhost", &none),
            Err(ConfigError::InvalidBind(_))
        ));
        assert!(matches!(
            ServeConfig::new(DEFAULT_DATABASE_URL, "no-such-host.invalid:8765", &none),
            Err(ConfigError::InvalidBind(_))
        ));
        assert!(matches!(
            ServeConfig::new(DEFAULT_DATABASE_URL, "[::]:8765", &none),
            Err(ConfigError::NonLoopbackWithoutToken(_))
        ));
    }

    #[test]
    fn a_config_never_shows_its_database_password() {
        let c = ServeConfig::new(
            "postgres://tether:hunter2@127.0.0.1/tether",
            DEFAULT_BIND,
            &Tokens::default(),
        )
        .unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("postgres://tether:***@127.0.0.1/tether"),
            "{shown}"
        );
    }

    #[test]
    fn a_refused_database_url_never_shows_its_password() {
        let err = ServeConfig::new("mysql://u:hunter2@db/x", DEFAULT_BIND, &Tokens::default())
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert!(err.contains("mysql://u:***@db/x"), "{err}");
    }
}
