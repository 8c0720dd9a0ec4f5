//! `/readyz` (database reachable and migrated) and `/metrics` (Prometheus text).

use std::fmt::Write as _;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use tether_storage::LeaseEventKind;

use crate::auth::ReadAccess;
use crate::dto::Ready;
use crate::error::{ApiError, MetricsErrors, ReadyErrors};
use crate::state::{AppState, Counters};

/// How long `/readyz` waits for the database before answering 503: a probe must get an
/// answer well within its own timeout, even while the database is stuck (a table lock, a
/// server that accepts connections and answers nothing).
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// Readiness: the database answers and its schema is migrated, within [`READY_TIMEOUT`].
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Ready to serve", body = Ready),
        ReadyErrors,
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Ready>, ApiError> {
    let unavailable = |e: String| ApiError::Unavailable(format!("not ready: {e}"));
    let check = async {
        state.probe().check().await.map_err(unavailable)?;
        let (sessions, _) = state.store()?.admin_counts().await.map_err(|e| {
            unavailable(format!(
                "the schema is not migrated or unreadable ({e}); run `tether migrate`"
            ))
        })?;
        Ok(Json(Ready {
            status: "ready".into(),
            sessions,
        }))
    };
    tokio::time::timeout(READY_TIMEOUT, check)
        .await
        .unwrap_or_else(|_| {
            Err(unavailable(format!(
                "the database did not answer within {} s (a lock held on its tables, or a stuck server)",
                READY_TIMEOUT.as_secs()
            )))
        })
}

/// Upper bounds of the renew-latency histogram, in microseconds (0.5 ms to 5 s).
const RENEW_LATENCY_BOUNDS: [u64; 13] = [
    500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000,
];

/// How long a `/metrics` scrape waits for the database's series. Past it, or when the database
/// fails, the scrape still answers 200 with this process's own series and
/// `tether_database_up 0`: an outage is exactly when an operator needs the process's counters.
pub const METRICS_DATABASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes one metric family: its help, its type and one sample per label set.
fn write_family(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(String, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

/// The Prometheus text of the service's metrics: the database's series (stored history and
/// counts) when the database answers within [`METRICS_DATABASE_TIMEOUT`], then this process's
/// own series, which never depend on the database. `tether_database_up` says whether the
/// database's series are in this scrape.
pub async fn render_metrics(state: &AppState) -> String {
    let mut out = String::new();
    let database = match state.store() {
        Ok(store) => {
            match tokio::time::timeout(METRICS_DATABASE_TIMEOUT, database_metrics(store)).await {
                Ok(Ok(text)) => Some(text),
                Ok(Err(error)) => {
                    tracing::warn!(%error, "metrics: the database's series are left out of this scrape");
                    None
                }
                Err(_) => {
                    tracing::warn!(
                        timeout_secs = METRICS_DATABASE_TIMEOUT.as_secs(),
                        "metrics: the database did not answer in time; its series are left out of this scrape"
                    );
                    None
                }
            }
        }
        Err(_) => None,
    };
    write_family(
        &mut out,
        "tether_database_up",
        "gauge",
        &format!(
            "1 when this scrape read the database's series, 0 when the database failed, did not \
             answer within {} s or is not configured (its series are then left out).",
            METRICS_DATABASE_TIMEOUT.as_secs()
        ),
        &[(String::new(), u64::from(database.is_some()))],
    );
    if let Some(text) = database {
        out.push_str(&text);
    }
    process_series(state, &mut out);
    out
}

/// The series read from the database: the lease history, the stored counts, finalizations and
/// the audit trail.
async fn database_metrics(store: &tether_storage::Store) -> Result<String, ApiError> {
    let counts = store.lease_event_counts().await?;
    let (sessions, quarantined) = store.admin_counts().await?;
    let namespaces = store.namespaces().await?;
    let latency = store
        .renew_latency_histogram(&RENEW_LATENCY_BOUNDS.map(Duration::from_micros))
        .await?;
    let finalizations = store.finalization_counts().await?;
    let audit = store.audit_counts().await?;
    let count = |kind: LeaseEventKind| {
        counts
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(0, |(_, n)| *n)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP tether_lease_renew_latency_seconds Time each stored lease renewal spent in the \
         store, from the start of its conditional write until the renewed lease was written \
         (commit excluded; stored history; batched renewals are not recorded).\n\
         # TYPE tether_lease_renew_latency_seconds histogram"
    );
    for (bound, n) in &latency.buckets {
        let _ = writeln!(
            out,
            "tether_lease_renew_latency_seconds_bucket{{le=\"{}\"}} {n}",
            bound.as_secs_f64()
        );
    }
    let _ = writeln!(
        out,
        "tether_lease_renew_latency_seconds_bucket{{le=\"+Inf\"}} {count}\n\
         tether_lease_renew_latency_seconds_sum {}\n\
         tether_lease_renew_latency_seconds_count {count}",
        latency.sum.as_secs_f64(),
        count = latency.count,
    );
    write_family(
        &mut out,
        "tether_lease_events_total",
        "counter",
        "Lease events in the stored history, by kind.",
        &LeaseEventKind::ALL
            .iter()
            .map(|k| (format!("{{kind=\"{}\"}}", k.as_str()), count(*k)))
            .collect::<Vec<_>>(),
    );
    for (name, help, kind) in [
        (
            "tether_lease_acquisitions_total",
            "Lease acquisitions (stored history).",
            LeaseEventKind::Acquired,
        ),
        (
            "tether_lease_renewals_total",
            "Lease renewals (stored history).",
            LeaseEventKind::Renewed,
        ),
        (
            "tether_lease_takeovers_total",
            "Leases taken over by another token (stored history).",
            LeaseEventKind::TakenOver,
        ),
        (
            "tether_fenced_writes_total",
            "Conditional writes refused because the row moved on: lease conflicts (stored history).",
            LeaseEventKind::Fenced,
        ),
        (
            "tether_lease_expirations_total",
            "Leases expired by the sweeper or force-expired by an operator (stored history).",
            LeaseEventKind::Expired,
        ),
    ] {
        write_family(
            &mut out,
            name,
            "counter",
            help,
            &[(String::new(), count(kind))],
        );
    }
    write_family(
        &mut out,
        "tether_sessions",
        "gauge",
        "Host sessions stored.",
        &[(String::new(), sessions)],
    );
    write_family(
        &mut out,
        "tether_quarantined_keys",
        "gauge",
        "Quarantined binding keys.",
        &[(String::new(), quarantined)],
    );
    write_family(
        &mut out,
        "tether_live_leases",
        "gauge",
        "Binding rows holding a live lease, by namespace.",
        &namespaces
            .iter()
            .map(|n| {
                (
                    format!("{{namespace=\"{}\"}}", escape_label(n.namespace.as_str())),
                    n.leased,
                )
            })
            .collect::<Vec<_>>(),
    );
    write_family(
        &mut out,
        "tether_finalizations_total",
        "counter",
        "Settled-turn finalization records, by outcome: `system` transcript entries starting \
         with `finalization:` that a host writes (counted when each is written; deleting a \
         session does not lower it). A host that writes no such record counts nothing here.",
        &[
            (
                "{outcome=\"succeeded\"}".to_owned(),
                finalizations.succeeded,
            ),
            (
                "{outcome=\"fell_back\"}".to_owned(),
                finalizations.fell_back,
            ),
        ],
    );
    write_family(
        &mut out,
        "tether_operator_actions_total",
        "counter",
        "Operator actions recorded in the audit trail (API and CLI), by action and outcome.",
        &audit
            .iter()
            .map(|(action, outcome, n)| {
                (
                    format!(
                        "{{action=\"{}\",outcome=\"{}\"}}",
                        escape_label(action),
                        outcome.as_str()
                    ),
                    *n,
                )
            })
            .collect::<Vec<_>>(),
    );
    Ok(out)
}

/// The series this process keeps itself: build, uptime, HTTP requests, the admin action
/// counters and the standard process metrics.
fn process_series(state: &AppState, out: &mut String) {
    write_family(
        out,
        "tether_build_info",
        "gauge",
        "The running build (always 1).",
        &[(format!("{{version=\"{}\"}}", env!("CARGO_PKG_VERSION")), 1)],
    );
    write_family(
        out,
        "tether_process_uptime_seconds",
        "gauge",
        "Seconds since this service started.",
        &[(String::new(), state.uptime_seconds())],
    );
    let routes = state.http_metrics().snapshot();
    write_family(
        out,
        "tether_http_requests_total",
        "counter",
        "HTTP requests served by this process, by method, route template and status.",
        &routes
            .iter()
            .flat_map(|((method, route), stats)| {
                stats.by_status.iter().map(move |(status, n)| {
                    (
                        format!(
                            "{{method=\"{}\",route=\"{}\",status=\"{status}\"}}",
                            escape_label(method),
                            escape_label(route)
                        ),
                        *n,
                    )
                })
            })
            .collect::<Vec<_>>(),
    );
    let _ = writeln!(
        out,
        "# HELP tether_http_request_duration_seconds Time to answer HTTP requests in this process, by method and route template.\n\
         # TYPE tether_http_request_duration_seconds histogram"
    );
    for ((method, route), stats) in &routes {
        let labels = format!(
            "method=\"{}\",route=\"{}\"",
            escape_label(method),
            escape_label(route)
        );
        for (bound, n) in crate::state::HTTP_LATENCY_BOUNDS.iter().zip(stats.buckets) {
            let _ = writeln!(
                out,
                "tether_http_request_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "tether_http_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {count}\n\
             tether_http_request_duration_seconds_sum{{{labels}}} {sum}\n\
             tether_http_request_duration_seconds_count{{{labels}}} {count}",
            count = stats.count,
            sum = stats.sum_seconds,
        );
    }
    let c = state.counters();
    for (name, help, counter) in [
        (
            "tether_admin_session_deletions_total",
            "Sessions deleted through this service.",
            &c.deletions,
        ),
        (
            "tether_admin_session_deletion_failures_total",
            "Deletions refused or rolled back in this service.",
            &c.deletion_failures,
        ),
        (
            "tether_admin_lease_force_expirations_total",
            "Leases force-expired through this service.",
            &c.force_expirations,
        ),
        (
            "tether_admin_quarantine_releases_total",
            "Quarantined keys released through this service.",
            &c.quarantine_releases,
        ),
    ] {
        write_family(
            out,
            name,
            "counter",
            help,
            &[(String::new(), Counters::get(counter))],
        );
    }
    for (name, kind, help, value) in process_metrics(state) {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
}

/// The clock ticks per second of `/proc/self/stat` times (`USER_HZ`, 100 on Linux builds for
/// every architecture Tether runs on).
#[cfg(target_os = "linux")]
const USER_HZ: f64 = 100.0;

/// The standard process metrics, read from `/proc/self` (Linux; elsewhere only the start
/// time): CPU seconds, resident and virtual memory, open and allowed file descriptors, and the
/// start time. A value that cannot be read is left out.
fn process_metrics(state: &AppState) -> Vec<(&'static str, &'static str, &'static str, f64)> {
    let mut out = vec![(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since the Unix epoch, in seconds.",
        state.started_unix_seconds(),
    )];
    #[cfg(target_os = "linux")]
    {
        // Fields after the command name (which may hold spaces) in `/proc/self/stat`:
        // utime is field 14, stime 15, vsize 23, rss 24 (pages) of the whole line.
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
            && let Some((_, rest)) = stat.rsplit_once(") ")
        {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
            if let (Some(utime), Some(stime)) = (field(14), field(15)) {
                out.push((
                    "process_cpu_seconds_total",
                    "counter",
                    "User and system CPU time spent, in seconds.",
                    (utime + stime) / USER_HZ,
                ));
            }
            if let Some(vsize) = field(23) {
                out.push((
                    "process_virtual_memory_bytes",
                    "gauge",
                    "Virtual memory size, in bytes.",
                    vsize,
                ));
            }
        }
        if let Ok(status) = std::fs::read_to_string("/proc/self/status")
            && let Some(kb) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        {
            out.push((
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size, in bytes.",
                kb * 1024.0,
            ));
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            #[allow(clippy::cast_precision_loss)]
            out.push((
                "process_open_fds",
                "gauge",
                "Open file descriptors.",
                fds.count() as f64,
            ));
        }
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits")
            && let Some(max) = limits
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse::<f64>().ok())
        {
            out.push((
                "process_max_fds",
                "gauge",
                "Most open file descriptors allowed (the soft limit).",
                max,
            ));
        }
    }
    out
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Metrics in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses(
        (status = 200, description = "Prometheus text exposition; while the database fails or does not answer within 5 s, this process's own series only, with `tether_database_up 0`", body = String, content_type = "text/plain"),
        MetricsErrors,
    )
)]
pub async fn metrics(_: ReadAccess, State(state): State<AppState>) -> impl IntoResponse {
    let text = render_metrics(&state).await;
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
}
