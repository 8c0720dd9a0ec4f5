//! The operator commands' client of a running admin service (`--server URL`): one HTTP/1.1
//! request per call over a plain TCP connection, with the bearer token from `TETHER_TOKEN`.
//! Typed API errors become the command's exit codes (see [`CommandError`]).

use axum::body::Bytes;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use tether_admin_http::ErrorBody;

use crate::commands::{CommandError, EXIT_UNAVAILABLE, EXIT_USAGE, exit_code_of};

/// The variable holding the token the commands send to `--server`.
pub(crate) const TOKEN_VAR: &str = "TETHER_TOKEN";

/// A running admin service.
#[derive(Clone)]
pub(crate) struct ApiClient {
    /// `host:port`, for the connection and the `Host` header.
    authority: String,
    /// The path prefix of the service (empty at the root).
    prefix: String,
    token: Option<String>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("authority", &self.authority)
            .field("prefix", &self.prefix)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

fn usage(message: String) -> CommandError {
    CommandError {
        message,
        code: EXIT_USAGE,
    }
}

impl ApiClient {
    /// The service at `url` (`http://HOST:PORT[/prefix]`), with `token` (from
    /// [`TOKEN_VAR`]) sent as a bearer token when given. A blank token is refused.
    pub(crate) fn new(url: &str, token: Option<String>) -> Result<Self, CommandError> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(usage(format!(
                "invalid --server `{}`: expected http://HOST:PORT (for TLS, run the command \
                 where the service's plain port is reachable, for example through an SSH tunnel)",
                without_credentials(url)
            )));
        };
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        // An `@` anywhere means credentials in the URL (a password may hold a `/`).
        if authority.is_empty() || rest.contains('@') {
            // Never repeat credentials written into the URL.
            return Err(usage(format!(
                "invalid --server `{}`: expected http://HOST:PORT (credentials go in {TOKEN_VAR})",
                without_credentials(url)
            )));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        if token.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err(usage(format!("{TOKEN_VAR} is set but blank")));
        }
        let prefix = path.trim_end_matches('/');
        if let Some(base) = prefix
            .strip_suffix("v1")
            .filter(|base| base.is_empty() || base.ends_with('/'))
        {
            // The commands add `/v1` themselves: this would ask for `/v1/v1/…`.
            let base = base.trim_end_matches('/');
            let base = if base.is_empty() {
                String::new()
            } else {
                format!("/{base}")
            };
            return Err(usage(format!(
                "invalid --server `{}`: give the service's base URL without `/v1` (the commands add it): http://{authority}{base}",
                without_credentials(url)
            )));
        }
        Ok(Self {
            authority,
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("/{prefix}")
            },
            token: token.map(|t| t.trim().to_owned()),
        })
    }

    /// `GET path` (with its query), decoded as `T`.
    pub(crate) async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CommandError> {
        self.call(Method::GET, path, None).await
    }

    /// `method path` with a JSON `body`, decoded as `T`.
    pub(crate) async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<T, CommandError> {
        self.call(method, path, Some(body.to_string())).await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<String>,
    ) -> Result<T, CommandError> {
        let unreachable = |e: &dyn std::fmt::Display| CommandError {
            message: format!(
                "the service at http://{} did not answer ({e}); check --server (or TETHER_SERVER) \
                 and that `tether serve` runs there, then retry",
                self.authority
            ),
            code: EXIT_UNAVAILABLE,
        };
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .map_err(|e| unreachable(&e))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(&e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "admin service connection ended");
            }
        });
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.prefix))
            .header(header::HOST, &self.authority)
            .header(header::ACCEPT, "application/json");
        if let Some(token) = &self.token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| usage(format!("cannot build the request: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(&e))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(&e))?
            .to_bytes();
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                CommandError::failure(format!("the service answered unreadable JSON: {e}"))
            });
        }
        Err(api_error(status, &bytes))
    }
}

/// The command error of an API error answer: its message, and the exit code of its stable code.
fn api_error(status: StatusCode, bytes: &[u8]) -> CommandError {
    let Ok(body) = serde_json::from_slice::<ErrorBody>(bytes) else {
        return CommandError::failure(format!(
            "the service answered {status}: {}",
            String::from_utf8_lossy(bytes)
                .chars()
                .take(300)
                .collect::<String>()
        ));
    };
    let code = exit_code_of(&body.code);
    let hint = match body.code.as_str() {
        "unauthorized" | "forbidden" => {
            format!(" (the commands send the token in {TOKEN_VAR}; actions need an admin token)")
        }
        _ => String::new(),
    };
    CommandError {
        message: format!(
            "{}: {}{hint}",
            body.code,
            crate::commands::in_cli_terms(&body.message)
        ),
        code,
    }
}

/// `url` with whatever stands before an `@` in its authority (a user name, a password or a
/// token) replaced by `***`, for error messages.
fn without_credentials(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    // The last `@` of the authority, or of the whole text when a password holds `/`, `?` or `#`.
    let at = rest[..authority_end].rfind('@').or_else(|| rest.rfind('@'));
    match at {
        Some(at) if scheme.is_empty() => format!("***{}", &rest[at..]),
        Some(at) => format!("{scheme}://***{}", &rest[at..]),
        None => url.to_owned(),
    }
}

/// Percent-encodes a path segment or query value.
pub(crate) fn encode(raw: &str) -> String {
    tether_admin_http::routes::dashboard::encode_query(raw)
}

/// A query string of the set `params` (`?a=1&b=2`, or empty).
pub(crate) fn query(params: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = params
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", encode(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}
