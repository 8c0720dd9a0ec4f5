//! `admin_sessions_latency`: p50 and p99 latency of the admin API's `GET /v1/sessions?limit=100`
//! with 100,000 host sessions stored, from 32 concurrent clients over loopback (target: p99 ≤
//! 10 ms).
//!
//! A fresh SQLite file store (WAL, `synchronous=FULL`, as production opens it) is seeded with
//! `--sessions` host sessions in one set-based statement, the real admin router
//! (`tether_admin_http::app`) is served on `127.0.0.1:0`, and `--clients` tasks, each on its own
//! keep-alive HTTP/1.1 connection, first send `--warm-up W` requests each, all at once and not
//! counted (each client's connection is accepted, the store's pool opens its connections and the
//! page's pages come into SQLite's cache: a steady service, not one that just started), then,
//! once every client is through its warm-up, `--requests` requests in total (split evenly) one
//! after another. The latency is from writing the request until the whole response body is read.
//! The run stops by itself: after the fixed number of requests, or when `--budget-secs` runs out
//! (the requests not sent by then are reported in a note and not counted).
//!
//! Options: `--sessions N` (100000), `--clients C` (32), `--requests R` (3200, that is 32 × 100),
//! `--warm-up W` (5 per client), `--limit L` (100), `--connections P` (8, the store's pool size),
//! `--budget-secs B` (300).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, Statement, TransactionTrait};
use tether_admin_http::auth::Tokens;
use tether_admin_http::database::Database;
use tether_admin_http::{AppState, app};
use tether_benches::cli::{Args, run_harness};
use tether_benches::report::{ResultLine, emit, note};
use tether_benches::stats::{Latencies, millis};
use tether_benches::stores::BenchStore;
use tether_storage::Store;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

const NAME: &str = "admin_sessions_latency";

struct Settings {
    sessions: u64,
    clients: u64,
    requests: u64,
    /// Uncounted requests per client before the measured ones.
    warm_up: u64,
    limit: u64,
    connections: u32,
    budget: Duration,
}

fn settings(args: &Args) -> Result<Settings, String> {
    let s = Settings {
        sessions: args.value("--sessions", 100_000u64)?,
        clients: args.value("--clients", 32u64)?,
        requests: args.value("--requests", 3_200u64)?,
        warm_up: args.value("--warm-up", 5u64)?,
        limit: args.value("--limit", 100u64)?,
        connections: args.value("--connections", 8u32)?,
        budget: Duration::from_secs(args.value("--budget-secs", 300u64)?),
    };
    if s.clients == 0 || s.requests == 0 || s.limit == 0 {
        return Err("--clients, --requests and --limit must be at least 1".into());
    }
    Ok(s)
}

/// Inserts `n` host sessions in one transaction with a recursive CTE (SQLite).
async fn seed_sessions(store: &Store, n: u64) -> Result<(), String> {
    let sql = "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i + 1 < ?) \
         INSERT INTO host_sessions (session_key, agent_id, session_id, previous_session_id, \
         lifecycle_revision, agent_harness_id, active_leaf, created_at, updated_at) \
         SELECT 'agent:bench-' || (i % 8) || ':session-' || printf('%08d', i), \
         'bench-' || (i % 8), 'sid-' || printf('%08d', i), NULL, 1, \
         CASE WHEN i % 2 = 0 THEN 'bench-harness' ELSE NULL END, NULL, i, i FROM s";
    let count = i64::try_from(n).unwrap_or(i64::MAX);
    let conn = store.connection();
    let stmt = Statement::from_sql_and_values(store.backend(), sql, vec![count.into()]);
    let tx = conn.begin().await.map_err(|e| e.to_string())?;
    tx.execute_raw(stmt).await.map_err(|e| e.to_string())?;
    tx.commit().await.map_err(|e| e.to_string())?;
    conn.execute_unprepared("ANALYZE")
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// One keep-alive HTTP/1.1 connection speaking just enough of the protocol for this harness.
struct Client {
    stream: BufReader<TcpStream>,
    request: Vec<u8>,
    body: Vec<u8>,
}

impl Client {
    async fn connect(addr: std::net::SocketAddr, path: &str) -> Result<Self, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let request =
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n")
                .into_bytes();
        Ok(Self {
            stream: BufReader::new(stream),
            request,
            body: Vec::new(),
        })
    }

    /// Sends the request and reads the whole response; the body stays in `self.body`.
    async fn get(&mut self) -> Result<(), String> {
        self.stream
            .get_mut()
            .write_all(&self.request)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut line = String::new();
        self.read_line(&mut line).await?;
        let status = line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        let mut length: Option<usize> = None;
        loop {
            line.clear();
            self.read_line(&mut line).await?;
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().ok();
                } else if name.eq_ignore_ascii_case("transfer-encoding") {
                    return Err(format!("unexpected transfer-encoding `{}`", value.trim()));
                }
            }
        }
        let length = length.ok_or("response without content-length")?;
        self.body.resize(length, 0);
        self.stream
            .read_exact(&mut self.body)
            .await
            .map_err(|e| format!("read body: {e}"))?;
        if status != "200" {
            return Err(format!(
                "status {status}: {}",
                String::from_utf8_lossy(&self.body)
            ));
        }
        Ok(())
    }

    async fn read_line(&mut self, line: &mut String) -> Result<(), String> {
        let n = self
            .stream
            .read_line(line)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed by the server".into());
        }
        Ok(())
    }
}

/// Checks that a response is a page of `expected` sessions, with a next cursor when `more`.
fn check_page(body: &[u8], expected: u64, more: bool) -> Result<(), String> {
    let page: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("response is not JSON: {e}"))?;
    let n = page
        .get("sessions")
        .and_then(serde_json::Value::as_array)
        .map_or(0, Vec::len);
    let has_cursor = page.get("next_cursor").is_some_and(|c| !c.is_null());
    if n as u64 != expected || has_cursor != more {
        return Err(format!(
            "expected a page of {expected} sessions (next cursor: {more}), got {n} (next cursor: {has_cursor})"
        ));
    }
    Ok(())
}

async fn run(s: Settings) -> Result<(), String> {
    let bench = BenchStore::sqlite(s.connections)
        .await
        .map_err(|e| e.to_string())?;
    let seeded = Instant::now();
    seed_sessions(&bench.store, s.sessions).await?;
    note(
        NAME,
        &format!(
            "sqlite: seeded {} host sessions in {:.1} s",
            s.sessions,
            seeded.elapsed().as_secs_f64()
        ),
    );
    let state =
        AppState::from_database(Database::from_store(bench.store.clone()), Tokens::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("bind: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let server = tokio::spawn(async move { axum::serve(listener, app(state)).await });
    let path = format!("/v1/sessions?limit={}", s.limit);

    // One checked request first: the page is real.
    let mut probe = Client::connect(addr, &path).await?;
    probe.get().await?;
    check_page(&probe.body, s.limit.min(s.sessions), s.sessions > s.limit)?;
    drop(probe);

    let deadline = Instant::now() + s.budget;
    let gate = Arc::new(Barrier::new(
        usize::try_from(s.clients).unwrap_or(usize::MAX),
    ));
    let mut tasks = Vec::new();
    for c in 0..s.clients {
        let share = s.requests / s.clients + u64::from(c < s.requests % s.clients);
        let (path, gate, warm_up) = (path.clone(), gate.clone(), s.warm_up);
        tasks.push(tokio::spawn(async move {
            let warmed = async {
                let mut client = Client::connect(addr, &path).await?;
                for _ in 0..warm_up {
                    client.get().await?;
                }
                Ok::<_, String>(client)
            }
            .await;
            // Every client passes the gate, a failed one too, so that the others start.
            gate.wait().await;
            let mut client = warmed?;
            let began = Instant::now();
            let mut latencies = Latencies::default();
            for _ in 0..share {
                let remaining = deadline.saturating_duration_since(Instant::now());
                if remaining.is_zero() {
                    break;
                }
                let start = Instant::now();
                match tokio::time::timeout(remaining, client.get()).await {
                    Ok(result) => result?,
                    Err(_) => break,
                }
                latencies.push(start.elapsed());
            }
            Ok::<_, String>((latencies, began, Instant::now()))
        }));
    }
    let mut all = Latencies::default();
    let mut failures = Vec::new();
    let mut measured: Option<(Instant, Instant)> = None;
    for task in tasks {
        match task.await {
            Ok(Ok((l, began, ended))) => {
                all.extend(&l);
                measured =
                    Some(measured.map_or((began, ended), |(b, e)| (b.min(began), e.max(ended))));
            }
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(e.to_string()),
        }
    }
    let elapsed = measured.map_or(Duration::ZERO, |(began, ended)| ended - began);
    server.abort();
    bench.cleanup().await;
    if let Some(first) = failures.first() {
        return Err(format!(
            "{} of {} clients failed; first: {first}",
            failures.len(),
            s.clients
        ));
    }
    if all.is_empty() {
        return Err("no request completed within the budget".into());
    }
    let done = all.len();
    let (p50, p99) = (all.percentile(50.0), all.percentile(99.0));
    note(
        NAME,
        &format!(
            "sqlite: {done} of {} requests `GET {path}` from {} clients in {:.1} s ({:.0}/s), after {} uncounted warm-up requests per client; p50 {:.3} ms p99 {:.3} ms",
            s.requests,
            s.clients,
            elapsed.as_secs_f64(),
            done as f64 / elapsed.as_secs_f64().max(1e-9),
            s.warm_up,
            millis(p50),
            millis(p99)
        ),
    );
    if (done as u64) < s.requests {
        note(
            NAME,
            &format!(
                "budget of {} s ran out: {} requests not sent",
                s.budget.as_secs(),
                s.requests - done as u64
            ),
        );
    }
    emit(&ResultLine::new(NAME, millis(p99), None, "ms"));
    Ok(())
}

fn main() -> ExitCode {
    run_harness(NAME, settings(&Args::from_env()).map(run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_checked_for_size_and_cursor() {
        let full = br#"{"sessions":[{},{}],"next_cursor":"abc"}"#;
        assert!(check_page(full, 2, true).is_ok());
        assert!(check_page(full, 2, false).is_err());
        assert!(check_page(full, 3, true).is_err());
        let last = br#"{"sessions":[{}],"next_cursor":null}"#;
        assert!(check_page(last, 1, false).is_ok());
        assert!(check_page(b"not json", 1, false).is_err());
    }

    #[test]
    fn settings_refuse_zero_clients() {
        assert!(settings(&Args::new(["--clients", "0"].map(String::from))).is_err());
        let s = settings(&Args::default()).unwrap();
        assert_eq!(
            (s.sessions, s.clients, s.requests, s.warm_up, s.limit),
            (100_000, 32, 3_200, 5, 100)
        );
    }
}
