//! Serving the admin router on a TCP listener with the limits a public bind needs.
//!
//! `axum::serve` holds every accepted socket until its peer hangs up: a client that opens a
//! connection and never finishes its request headers keeps a task and a file descriptor
//! forever, before authentication, and a few thousand of them exhaust the process's
//! descriptors so that no route answers, `/readyz` included. [`serve`] closes that door:
//!
//! - **Header-read timeout** ([`ServeLimits::header_read_timeout`]): a connection must deliver
//!   complete request headers within this time of being accepted, and again within this time of
//!   its previous response (the same timer bounds an idle keep-alive connection), or it is
//!   closed.
//! - **A cap on connections** ([`ServeLimits::max_connections`], never more than the process's
//!   open-file limit less a reserve for the database pool and the log).
//! - **Load shedding before descriptors run out**: at the cap, the oldest connection that has no
//!   request in flight and is older than [`ServeLimits::eviction_grace`] is closed to make room
//!   (half-open and idle sockets go first, so a real request still gets through); when every
//!   connection is busy, the new one is answered `503` (`{"code":"unavailable",…}`) with
//!   `Retry-After` and closed.
//! - **Graceful shutdown**: when the shutdown future completes, the listener stops accepting,
//!   in-flight requests finish (up to [`ServeLimits::shutdown_grace`]), idle connections close.
//!
//! The service speaks HTTP/1.1 (browsers and `curl` use it over plain TCP; HTTP/2 protocol
//! detection would run without a timer and reopen the hole).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio::task::JoinSet;
use tower::ServiceExt as _;

/// Descriptors kept free for everything but client connections (database pool, log, files,
/// sockets being shed).
const DESCRIPTOR_RESERVE: u64 = 128;

/// At most this many refused connections are being answered `503` at once; past that a refused
/// connection is closed without an answer.
const MAX_SHEDDING: usize = 64;

/// The HTTP parser's own limit on header fields, above the service's
/// [`MAX_HEADER_COUNT`](crate::params::MAX_HEADER_COUNT), so the service answers a request with
/// too many fields itself, with a typed body (the parser's 431 has none).
const PARSER_MAX_HEADERS: usize = 2 * crate::params::MAX_HEADER_COUNT;

/// The HTTP parser's own limit on a request's head (request line and header fields), in bytes:
/// above the service's limits on both (its typed 414 and 431) together.
const PARSER_MAX_HEAD_BYTES: usize =
    4 * (crate::params::MAX_URI_BYTES + crate::params::MAX_HEADER_BYTES);

/// How long writing the `503` of a shed connection may take.
const SHED_WRITE_TIMEOUT: Duration = Duration::from_secs(1);

/// The connection limits of [`serve`] (module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeLimits {
    header_read_timeout: Duration,
    max_connections: usize,
    eviction_grace: Duration,
    shutdown_grace: Duration,
}

/// The longest header-read timeout [`ServeLimits::header_read_timeout`] takes: one day.
pub const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

impl Default for ServeLimits {
    /// Header-read timeout 15 s, at most 1,024 connections (fewer when the open-file limit is
    /// lower), eviction grace 1 s, shutdown grace 10 s.
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(15),
            max_connections: 1024,
            eviction_grace: Duration::from_secs(1),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl ServeLimits {
    /// How long a connection may take to deliver complete request headers, counted from its
    /// acceptance and again from each response (so it also bounds keep-alive idleness).
    /// Zero is raised to one millisecond, and anything above [`MAX_HEADER_READ_TIMEOUT`] is
    /// lowered to it (the HTTP server adds the timeout to the clock for every request).
    #[must_use]
    pub fn header_read_timeout(mut self, timeout: Duration) -> Self {
        self.header_read_timeout = timeout.clamp(Duration::from_millis(1), MAX_HEADER_READ_TIMEOUT);
        self
    }

    /// The most connections served at once (at least 1; the open-file limit may lower it, see
    /// [`ServeLimits::effective_max_connections`]).
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How old a connection with no request in flight must be before it may be closed to make
    /// room for a new one.
    #[must_use]
    pub fn eviction_grace(mut self, grace: Duration) -> Self {
        self.eviction_grace = grace;
        self
    }

    /// How long in-flight requests may run after shutdown was asked for.
    #[must_use]
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// The configured header-read timeout.
    pub fn header_read_timeout_value(&self) -> Duration {
        self.header_read_timeout
    }

    /// The cap in force: the configured maximum, lowered to the process's soft open-file limit
    /// less a reserve of 128 descriptors (where the limit can be read).
    pub fn effective_max_connections(&self) -> usize {
        match open_file_limit() {
            Some(limit) => {
                let room = usize::try_from(limit.saturating_sub(DESCRIPTOR_RESERVE).max(1))
                    .unwrap_or(usize::MAX);
                self.max_connections.min(room)
            }
            None => self.max_connections,
        }
    }
}

/// The soft limit on open files of this process, from `/proc/self/limits` (Linux); `None`
/// where it cannot be read or is unlimited.
fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_file_limit(&text)
}

fn parse_open_file_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// One accepted connection, as the admission decision sees it.
struct Tracked {
    opened: Instant,
    in_flight: Arc<AtomicUsize>,
    evict: Arc<Notify>,
}

#[derive(Default)]
struct Table {
    next: u64,
    conns: HashMap<u64, Tracked>,
}

/// What [`admit`] decided for a new connection.
enum Admission {
    Serve {
        id: u64,
        in_flight: Arc<AtomicUsize>,
        evict: Arc<Notify>,
    },
    Shed,
}

fn admit(table: &Mutex<Table>, cap: usize, grace: Duration) -> Admission {
    let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
    if table.conns.len() >= cap {
        let now = Instant::now();
        let victim = table
            .conns
            .iter()
            .filter(|(_, c)| {
                c.in_flight.load(Ordering::Acquire) == 0
                    && now.saturating_duration_since(c.opened) >= grace
            })
            .min_by_key(|(_, c)| c.opened)
            .map(|(id, _)| *id);
        match victim.and_then(|id| table.conns.remove(&id)) {
            Some(victim) => {
                tracing::debug!("connection cap reached: closing the oldest idle connection");
                victim.evict.notify_one();
            }
            None => return Admission::Shed,
        }
    }
    table.next += 1;
    let id = table.next;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let evict = Arc::new(Notify::new());
    table.conns.insert(
        id,
        Tracked {
            opened: Instant::now(),
            in_flight: Arc::clone(&in_flight),
            evict: Arc::clone(&evict),
        },
    );
    Admission::Serve {
        id,
        in_flight,
        evict,
    }
}

/// Counts a request in flight on its connection for as long as it lives.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn enter(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(counter))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The router as a hyper service that counts its requests in flight.
#[derive(Clone)]
struct CountingService {
    router: Router,
    in_flight: Arc<AtomicUsize>,
}

impl hyper::service::Service<Request<Incoming>> for CountingService {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let guard = InFlight::enter(&self.in_flight);
        let router = self.router.clone();
        Box::pin(async move {
            let response = router.oneshot(req).await;
            drop(guard);
            response
        })
    }
}

/// The body of the answer given to a connection refused at the cap (the typed error shape).
const SHED_BODY: &str =
    "{\"code\":\"unavailable\",\"message\":\"too many connections; retry in a moment\"}\n";

/// The whole answer given to a connection refused at the cap.
fn shed_response() -> String {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{SHED_BODY}",
        SHED_BODY.len()
    )
}

/// Answers a refused connection `503` and closes it. The request is read (and dropped) for a
/// moment after the answer, so the close is a clean FIN rather than a reset that could destroy
/// the answer before the client reads it.
async fn shed(mut stream: TcpStream) {
    use tokio::io::AsyncReadExt as _;
    let _ = tokio::time::timeout(SHED_WRITE_TIMEOUT, async {
        stream.write_all(shed_response().as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0_u8; 4096];
        let mut budget: usize = 64 * 1024;
        while budget > 0 {
            let n = stream.read(&mut sink).await?;
            if n == 0 {
                break;
            }
            budget = budget.saturating_sub(n);
        }
        Ok::<(), io::Error>(())
    })
    .await;
}

/// Serves `router` on `listener` with `limits` until `shutdown` completes, then drains
/// (module documentation). Errors only when the listener itself fails for good; a failed
/// `accept` (for example out of descriptors) is logged and retried after a pause.
#[tracing::instrument(level = "info", skip_all, fields(addr = ?listener.local_addr().ok()))]
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send,
) -> io::Result<()> {
    let cap = limits.effective_max_connections();
    tracing::info!(
        max_connections = cap,
        header_read_timeout_ms =
            u64::try_from(limits.header_read_timeout.as_millis()).unwrap_or(u64::MAX),
        "serving"
    );
    let table = Arc::new(Mutex::new(Table::default()));
    let shedding = Arc::new(Semaphore::new(MAX_SHEDDING));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        while tasks.try_join_next().is_some() {}
        let (stream, _peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors, or a connection reset before accept: pause, go on.
                    tracing::warn!(error = %e, "accept failed; retrying shortly");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        match admit(&table, cap, limits.eviction_grace) {
            Admission::Shed => {
                if let Ok(permit) = Arc::clone(&shedding).try_acquire_owned() {
                    tasks.spawn(async move {
                        shed(stream).await;
                        drop(permit);
                    });
                }
                // else: the stream is dropped (closed) at once.
            }
            Admission::Serve {
                id,
                in_flight,
                evict,
            } => {
                let service = CountingService {
                    router: router.clone(),
                    in_flight,
                };
                let table = Arc::clone(&table);
                let mut stop = stop_rx.clone();
                let header_timeout = limits.header_read_timeout;
                tasks.spawn(async move {
                    let mut builder = hyper::server::conn::http1::Builder::new();
                    builder
                        .timer(TokioTimer::new())
                        .header_read_timeout(header_timeout)
                        .max_headers(PARSER_MAX_HEADERS)
                        .max_header_size(PARSER_MAX_HEAD_BYTES)
                        .keep_alive(true);
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    tokio::pin!(conn);
                    let mut stopping = *stop.borrow();
                    if stopping {
                        conn.as_mut().graceful_shutdown();
                    }
                    loop {
                        tokio::select! {
                            result = conn.as_mut() => {
                                if let Err(e) = result {
                                    tracing::debug!(error = %e, "connection ended with an error");
                                }
                                break;
                            }
                            () = evict.notified() => break,
                            changed = stop.changed(), if !stopping => {
                                stopping = true;
                                if changed.is_ok() {
                                    conn.as_mut().graceful_shutdown();
                                }
                            }
                        }
                    }
                    table
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .conns
                        .remove(&id);
                });
            }
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(limits.shutdown_grace, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            left = tasks.len(),
            "shutdown grace over; closing the remaining connections"
        );
        tasks.shutdown().await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_file_limit_is_read_from_proc_limits() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max cpu time              unlimited            unlimited            seconds   \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(parse_open_file_limit(text), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_open_file_limit(unlimited), None);
        assert_eq!(parse_open_file_limit("nothing here"), None);
    }

    #[test]
    fn the_shed_answer_declares_its_exact_length() {
        let text = shed_response();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        let declared: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(declared, body.len());
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["code"], "unavailable");
    }

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_never_do() {
        let table = Mutex::new(Table::default());
        let first = match admit(&table, 2, Duration::ZERO) {
            Admission::Serve { id, .. } => id,
            Admission::Shed => panic!("room left"),
        };
        let Admission::Serve {
            in_flight: second_busy,
            ..
        } = admit(&table, 2, Duration::ZERO)
        else {
            panic!("room left")
        };
        second_busy.fetch_add(1, Ordering::AcqRel);
        // At the cap: the first (idle, oldest) is evicted.
        assert!(matches!(
            admit(&table, 2, Duration::ZERO),
            Admission::Serve { .. }
        ));
        assert!(!table.lock().unwrap().conns.contains_key(&first));
        // Now one busy and one idle but too young (grace 1 h): shed.
        assert!(matches!(
            admit(&table, 2, Duration::from_secs(3600)),
            Admission::Shed
        ));
    }
}
