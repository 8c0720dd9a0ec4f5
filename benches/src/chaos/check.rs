//! The invariant checker: reads the write log, the drill's records and Tether's own tables, and
//! lists every violation.

use sea_orm::{ConnectionTrait, QueryResult};
use tether_core::{BindingStore, Error, QuarantineStore, SessionKey};
use tether_storage::Store;

use super::{
    KEYS, NEW_THREAD, agent, db_error, lease_key, lease_ns, old_thread, session_binding,
    session_ns, stmt, thread_harness, thread_ns,
};

fn get<T: sea_orm::TryGetable>(row: &QueryResult, column: &str) -> Result<T, Error> {
    row.try_get("", column).map_err(db_error)
}

async fn rows(store: &Store, sql: &str) -> Result<Vec<QueryResult>, Error> {
    store
        .connection()
        .query_all_raw(stmt(store, sql, Vec::new()))
        .await
        .map_err(db_error)
}

/// The number of rows in `table`.
pub(crate) async fn count(store: &Store, table: &str) -> Result<u64, Error> {
    let rows = rows(store, &format!("SELECT COUNT(*) AS n FROM {table}")).await?;
    let n: i64 = rows.first().map_or(Ok(0), |r| get(r, "n"))?;
    Ok(u64::try_from(n).unwrap_or(0))
}

/// How the workers' session operations ended: `kind/status count`, comma-separated.
pub(crate) async fn session_outcomes(store: &Store) -> Result<String, Error> {
    let mut out = Vec::new();
    for row in rows(
        store,
        "SELECT kind, status, COUNT(*) AS n FROM chaos_sessions GROUP BY kind, status ORDER BY kind, status",
    )
    .await?
    {
        let (kind, status, n): (String, String, i64) =
            (get(&row, "kind")?, get(&row, "status")?, get(&row, "n")?);
        out.push(format!("{kind}/{status} {n}"));
    }
    Ok(out.join(", "))
}

/// The number of operations the log records, and every violation found.
///
/// With `faults`, quarantined lease keys are left to [`check_faults`]: under resource faults
/// the lifecycle itself quarantines a key whose write's outcome it cannot know. A quarantined
/// thread-binding key is then accepted when it is a reset session's, the only writer of those.
pub(crate) async fn check(store: &Store, faults: bool) -> Result<(u64, Vec<String>), Error> {
    let mut violations = Vec::new();

    // 1. Never two writers in one lease epoch.
    for row in rows(
        store,
        "SELECT key, epoch, COUNT(DISTINCT writer) AS writers FROM chaos_log GROUP BY key, epoch HAVING COUNT(DISTINCT writer) > 1",
    )
    .await?
    {
        let (key, epoch): (String, i64) = (get(&row, "key")?, get(&row, "epoch")?);
        violations.push(format!("two writers in lease epoch {epoch} of {key}"));
    }

    // 1b. ... as the store recorded it: every lease epoch granted once, and every logged write
    //     made by the holder the store granted that epoch to.
    for row in rows(
        store,
        "SELECT key, epoch, COUNT(*) AS grants FROM lease_events WHERE namespace = 'chaos-leases' AND kind = 'acquired' GROUP BY key, epoch HAVING COUNT(*) > 1",
    )
    .await?
    {
        let (key, epoch): (String, i64) = (get(&row, "key")?, get(&row, "epoch")?);
        violations.push(format!("lease epoch {epoch} of {key} granted more than once"));
    }
    for row in rows(
        store,
        "SELECT l.key AS key, l.epoch AS epoch, l.writer AS writer, e.holder AS holder FROM chaos_log l \
         JOIN lease_events e ON e.namespace = 'chaos-leases' AND e.key = l.key AND e.epoch = l.epoch AND e.kind = 'acquired' \
         WHERE e.holder IS NULL OR e.holder <> l.writer",
    )
    .await?
    {
        let (key, epoch, writer): (String, i64, String) =
            (get(&row, "key")?, get(&row, "epoch")?, get(&row, "writer")?);
        let holder: Option<String> = get(&row, "holder")?;
        violations.push(format!(
            "{writer} wrote under lease epoch {epoch} of {key}, granted to {holder:?}"
        ));
    }

    // 2. Never a write accepted with a stale epoch: per key, accepted epochs never go back.
    let mut last: Option<(String, i64)> = None;
    for row in rows(store, "SELECT key, epoch FROM chaos_log ORDER BY key, id").await? {
        let (key, epoch): (String, i64) = (get(&row, "key")?, get(&row, "epoch")?);
        if let Some((k, e)) = &last
            && *k == key
            && epoch < *e
        {
            violations.push(format!("stale epoch {epoch} accepted after {e} on {key}"));
        }
        last = Some((key, epoch));
    }

    // 3. No binding lost: every contended key's row is there and decodes.
    for i in 0..KEYS {
        let key = lease_key(i);
        match store.lookup(&lease_ns(), &key).await? {
            Some(row) if serde_json::from_slice::<serde_json::Value>(&row.value).is_ok() => {}
            Some(_) => violations.push(format!("binding {key} no longer decodes")),
            None => violations.push(format!("binding {key} lost")),
        }
    }

    // 4. No half-applied deletion or reset, no resurrected deletion, unknown outcomes
    //    quarantined; a reset generation never continues its predecessor's thread.
    let threads = thread_harness(
        store,
        std::sync::Arc::new(tether_core::SystemClock),
        "chaos-checker",
    )?;
    // The thread-binding keys of the sessions the workers reset, those still being created
    // too (a reset session's first thread binding is written before it is recorded created).
    let mut reset_keys = std::collections::HashSet::new();
    for row in rows(
        store,
        "SELECT session_key FROM chaos_sessions WHERE kind = 'reset'",
    )
    .await?
    {
        reset_keys.insert(
            session_binding(&SessionKey::new(get::<String>(&row, "session_key")?)?).to_string(),
        );
    }
    for row in rows(
        store,
        "SELECT session_key, kind, status FROM chaos_sessions WHERE status <> 'creating'",
    )
    .await?
    {
        let (raw, kind, status): (String, String, String) = (
            get(&row, "session_key")?,
            get(&row, "kind")?,
            get(&row, "status")?,
        );
        let session = SessionKey::new(&raw)?;
        if kind == "reset" {
            check_reset(store, &threads, &session, &status, faults, &mut violations).await?;
            continue;
        }
        let entry = store.session(&session).await?;
        let binding = store
            .lookup(&session_ns(), &session_binding(&session))
            .await?
            .is_some();
        let generation = entry.as_ref().map(|e| e.session_id.as_str().to_owned());
        // Consistency whatever happened: the binding exists exactly while generation s-1 does.
        let consistent = match generation.as_deref() {
            Some("s-1") => binding,
            Some(_) | None => !binding,
        };
        if !consistent {
            violations.push(format!(
                "half-applied {kind} of {raw} ({status}): session {generation:?}, binding {binding}"
            ));
        }
        let expected = match status.as_str() {
            "deleted" => Some(generation.is_none()),
            "rewound" => Some(generation.as_deref() == Some("s-2")),
            "kept" => Some(generation.as_deref() == Some("s-1")),
            _ => None,
        };
        if expected == Some(false) {
            violations.push(format!(
                "{kind} of {raw} recorded {status} but the session is {generation:?}"
            ));
        }
        if status == "unknown"
            && store
                .quarantined(&session_ns(), &session_binding(&session))
                .await?
                .is_none()
        {
            violations.push(format!("unknown outcome of {raw} not quarantined"));
        }
    }

    // 5. Every quarantined key explained.
    let explained: Vec<String> = rows(store, "SELECT session_key FROM chaos_explained")
        .await?
        .iter()
        .map(|r| get::<String>(r, "session_key"))
        .collect::<Result<_, _>>()?;
    for row in rows(store, "SELECT namespace, key FROM quarantined_keys").await? {
        let (ns, key): (String, String) = (get(&row, "namespace")?, get(&row, "key")?);
        if faults && ns == lease_ns().as_str() {
            continue;
        }
        // Under resource faults the lifecycle also quarantines the thread binding of a reset
        // session when it cannot learn the outcome of the write that settles it. Only a
        // reset writes thread bindings, so such a key must be a reset session's.
        if faults && ns == thread_ns().as_str() && reset_keys.contains(&key) {
            continue;
        }
        let known = explained
            .iter()
            .filter_map(|s| SessionKey::new(s).ok())
            .any(|s| session_binding(&s).as_str() == key);
        if ns != session_ns().as_str() || !known {
            violations.push(format!("quarantined key {ns}/{key} has no explanation"));
        }
    }

    let ops = count(store, "chaos_log").await?
        + count(store, "chaos_rejects").await?
        + count(store, "chaos_sessions").await?;
    Ok((ops, violations))
}

/// A session a worker reset (`kind = 'reset'`): at generation `s-1` (the reset did not commit,
/// or the worker died before it) its first binding is intact; at `s-2` the row records a
/// reset and a turn of `s-2` — run here, as the next turn after a restart would (with
/// `faults`, judged from the row instead: the store may still refuse writes) — never gets
/// the old thread back, whether or not the harnesses were told (a worker killed after the
/// COMMIT, or a reset committed on purpose without the notification); after a notification
/// sent again once the new generation's turn bound its thread (`late`), that thread is bound.
async fn check_reset(
    store: &Store,
    threads: &tether_harness_sdk::hooks::ThreadBindingHarness,
    session: &SessionKey,
    status: &str,
    faults: bool,
    violations: &mut Vec<String>,
) -> Result<(), Error> {
    use tether_harness_sdk::backend::BindingIdentity;
    use tether_harness_sdk::generation::BindingAuthority;

    let Some(entry) = store.session(session).await? else {
        violations.push(format!("reset session {session} ({status}) lost"));
        return Ok(());
    };
    let generation = entry.session_id.clone();
    let identity = BindingIdentity::session(agent(), generation.clone(), Some(session.clone()));
    match generation.as_str() {
        "s-1" => {
            if matches!(status, "reset" | "unnotified" | "unknown" | "late") {
                violations.push(format!(
                    "reset of {session} recorded {status} but the session is at s-1"
                ));
            }
            let bound = threads.store().read(&identity).await?.map(|b| b.thread_id);
            if bound.as_deref() != Some(old_thread(session).as_str()) {
                violations.push(format!(
                    "the first generation of {session} ({status}) lost its binding: {bound:?}"
                ));
            }
        }
        "s-2" => {
            if status == "kept" {
                violations.push(format!(
                    "reset of {session} recorded kept but the session is at s-2"
                ));
            }
            if entry.previous_change != Some(tether_core::GenerationChange::Reset) {
                violations.push(format!(
                    "{session} was reset but its row records {:?}",
                    entry.previous_change
                ));
            }
            if status == "late" {
                // The turn of `s-2` bound its thread before the notification ran again.
                let bound = threads.store().read(&identity).await?.map(|b| b.thread_id);
                if bound != Some(format!("{NEW_THREAD}{session}")) {
                    violations.push(format!(
                        "a late reset notification took away the thread the new generation of {session} bound: {bound:?}"
                    ));
                }
            }
            let bound = if faults {
                // Under resource faults the store may still refuse writes after the drill:
                // judge from the row what the next turn finds. A binding the recorded
                // predecessor still owns is cleared by it (the row records a reset, checked
                // above); anything else is what the turn gets.
                threads.store().record(&identity).await?.and_then(|record| {
                    let predecessors = record.session_id.as_ref() != Some(&generation);
                    record
                        .binding()
                        .filter(|_| !predecessors)
                        .map(|b| b.thread_id.clone())
                })
            } else {
                // The next turn: it waits out a lease a killed worker still held.
                let caller = BindingAuthority::caller(tether_core::always_current());
                threads
                    .with_turn_lease(&identity, &caller, |_lease, _authority| async { Ok(()) })
                    .await?;
                threads.store().read(&identity).await?.map(|b| b.thread_id)
            };
            if bound
                .as_deref()
                .is_some_and(|thread| !thread.starts_with(NEW_THREAD))
            {
                violations.push(format!(
                    "the reset generation of {session} ({status}) continues thread {bound:?}"
                ));
            }
        }
        other => violations.push(format!(
            "reset session {session} ({status}) is at an unknown generation {other}"
        )),
    }
    Ok(())
}

/// What the ack logs of `cargo xtask faults` show beside the store.
pub(crate) struct Acked {
    /// Writes the workers were told are committed.
    pub(crate) acks: u64,
    /// Logged writes no worker was told about (their COMMIT's answer was lost): allowed.
    pub(crate) unacknowledged: u64,
    /// Lease keys the lifecycle quarantined (an outcome it could not know), with its reason.
    pub(crate) quarantined: Vec<String>,
    /// Lease intervals compared for overlap (`hold` … `held` pairs of the ack logs).
    pub(crate) intervals: u64,
    /// One line per COMMIT whose answer the drill dropped on the wire: what became of it.
    pub(crate) lost_commits: Vec<String>,
}

/// One lease a worker held, in real time: from its acquisition (`hold`) to the last instant it
/// still held it by its own clock (`begin` of its write, `held` at the end of its work).
struct Interval {
    key: String,
    epoch: i64,
    writer: String,
    from: u128,
    until: u128,
}

/// Never two holders at once: the intervals of different epochs of one key must not overlap
/// in real time (the ack logs' times are the system clock, shared by every process of the
/// drill, whatever clock a worker decides leases with).
fn overlaps(mut intervals: Vec<Interval>, violations: &mut Vec<String>) {
    intervals.sort_by(|a, b| (&a.key, a.from).cmp(&(&b.key, b.from)));
    let mut latest: Option<&Interval> = None;
    for interval in &intervals {
        if let Some(prev) = latest
            && prev.key == interval.key
            && prev.epoch != interval.epoch
            && interval.from < prev.until
        {
            violations.push(format!(
                "two holders of {} at once: {} held epoch {} until {} ms, {} held epoch {} from {} ms",
                interval.key, prev.writer, prev.epoch, prev.until, interval.writer, interval.epoch, interval.from
            ));
        }
        if latest.is_none_or(|prev| prev.key != interval.key || interval.until > prev.until) {
            latest = Some(interval);
        }
    }
}

/// The resource-fault checks: every acknowledged write (an `ack` line in any `*.acks` file of
/// `dir`) is in the write log; each key's fence is exactly the last logged write (fence and log
/// move in one transaction, so anything else is a half-applied write); on SQLite,
/// `PRAGMA integrity_check` answers `ok`.
pub(crate) async fn check_faults(
    store: &Store,
    dir: &std::path::Path,
    violations: &mut Vec<String>,
) -> Result<Acked, Error> {
    use std::collections::HashSet;

    let mut logged = HashSet::new();
    for row in rows(store, "SELECT key, epoch, writer, seq FROM chaos_log").await? {
        let entry: (String, i64, String, i64) = (
            get(&row, "key")?,
            get(&row, "epoch")?,
            get(&row, "writer")?,
            get(&row, "seq")?,
        );
        logged.insert(entry);
    }
    let mut acked = HashSet::new();
    let mut unknown_by = HashSet::new();
    // Per worker, its lines in order (for the lost COMMITs), and the lease intervals.
    let mut lines_of: std::collections::HashMap<String, Vec<Vec<String>>> =
        std::collections::HashMap::new();
    let mut intervals = Vec::new();
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::other(format!("cannot read {}: {e}", dir.display())))?;
    for entry in entries {
        let path = entry.map_err(|e| Error::other(e.to_string()))?.path();
        if path.extension().is_none_or(|e| e != "acks") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::other(format!("cannot read {}: {e}", path.display())))?;
        let worker = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // (key, epoch) -> (acquired, last instant still held), in real time.
        let mut holding: std::collections::HashMap<(String, i64), (u128, Option<u128>)> =
            std::collections::HashMap::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            lines_of
                .entry(worker.clone())
                .or_default()
                .push(fields.iter().map(|f| (*f).to_owned()).collect());
            if let ["fail", _, "unknown"] = fields[..] {
                unknown_by.insert(worker.clone());
            }
            if let [tag @ ("hold" | "begin" | "held"), at, key, epoch] = fields[..]
                && let (Ok(at), Ok(epoch)) = (at.parse::<u128>(), epoch.parse::<i64>())
            {
                if tag == "hold" {
                    holding.insert((key.to_owned(), epoch), (at, None));
                } else if let Some((_, until)) = holding.get_mut(&(key.to_owned(), epoch)) {
                    // The latest instant it still held the lease by its own clock.
                    *until = Some(until.map_or(at, |u: u128| u.max(at)));
                }
            }
            let ["ack", _, key, epoch, writer, seq] = fields[..] else {
                continue;
            };
            let (Ok(epoch), Ok(seq)) = (epoch.parse::<i64>(), seq.parse::<i64>()) else {
                violations.push(format!("unreadable ack line `{line}`"));
                continue;
            };
            let entry = (key.to_owned(), epoch, writer.to_owned(), seq);
            if !logged.contains(&entry) {
                violations.push(format!(
                    "acknowledged write lost: {writer} seq {seq} on {key} in epoch {epoch}"
                ));
            }
            acked.insert(entry);
        }
        for ((key, epoch), (from, until)) in holding {
            if let Some(until) = until {
                intervals.push(Interval {
                    key,
                    epoch,
                    writer: worker.clone(),
                    from,
                    until,
                });
            }
        }
    }

    for i in 0..KEYS {
        let key = lease_key(i);
        let fence = store
            .connection()
            .query_one_raw(stmt(
                store,
                "SELECT epoch, writer FROM chaos_fence WHERE key = ?",
                vec![key.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
        let Some(fence) = fence else {
            violations.push(format!("the fence of {key} is gone"));
            continue;
        };
        let fence: (i64, String) = (get(&fence, "epoch")?, get(&fence, "writer")?);
        let last = store
            .connection()
            .query_one_raw(stmt(
                store,
                "SELECT epoch, writer FROM chaos_log WHERE key = ? ORDER BY id DESC LIMIT 1",
                vec![key.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
        let last: (i64, String) = match last {
            Some(row) => (get(&row, "epoch")?, get(&row, "writer")?),
            None => (0, String::new()),
        };
        if fence != last {
            violations.push(format!(
                "half-applied write on {key}: fence at epoch {} by {:?}, last logged write epoch {} by {:?}",
                fence.0, fence.1, last.0, last.1
            ));
        }
    }

    if store.connection().get_database_backend() == sea_orm::DbBackend::Sqlite {
        let answers: Vec<String> = rows(store, "PRAGMA integrity_check")
            .await?
            .iter()
            .map(|r| get::<String>(r, "integrity_check"))
            .collect::<Result<_, _>>()?;
        if answers != ["ok"] {
            violations.push(format!("PRAGMA integrity_check: {}", answers.join("; ")));
        }
    }

    // A lease key the lifecycle quarantined: in custody of a worker that was told an outcome
    // was unknown (the lifecycle quarantines exactly such keys).
    let mut quarantined = Vec::new();
    for row in rows(
        store,
        "SELECT namespace, key, reason, custody FROM quarantined_keys",
    )
    .await?
    {
        let (ns, key, reason): (String, String, String) = (
            get(&row, "namespace")?,
            get(&row, "key")?,
            get(&row, "reason")?,
        );
        if ns != lease_ns().as_str() {
            continue;
        }
        let custody: Option<String> = get(&row, "custody")?;
        match custody {
            Some(worker) if unknown_by.contains(&worker) => {
                quarantined.push(format!("{key} (custody {worker}): {reason}"));
            }
            other => violations.push(format!(
                "lease key {key} quarantined (custody {other:?}) without an unknown outcome reported: {reason}"
            )),
        }
    }

    let compared = intervals.len() as u64;
    overlaps(intervals, violations);
    let lost_commits = lost_commits(dir, &lines_of, &logged, violations)?;

    let unacknowledged = logged.difference(&acked).count() as u64;
    Ok(Acked {
        acks: acked.len() as u64,
        unacknowledged,
        quarantined,
        intervals: compared,
        lost_commits,
    })
}

/// The COMMITs whose answer the drill dropped (file `lost-commits` of `dir`, lines `<unix ms>
/// <worker> <server's answer>`, the answer `COMMIT`, `ROLLBACK`, `error` or `none`): each one's
/// worker must have reported the fenced write's outcome unknown (an `unknown` line, then its
/// operation failed as `unknown`) before anything else, and seen the key quarantined; the write
/// must be in the log exactly when the server answered `COMMIT` (never half-applied: the
/// fence check above).
fn lost_commits(
    dir: &std::path::Path,
    lines_of: &std::collections::HashMap<String, Vec<Vec<String>>>,
    logged: &std::collections::HashSet<(String, i64, String, i64)>,
    violations: &mut Vec<String>,
) -> Result<Vec<String>, Error> {
    let path = dir.join("lost-commits");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::other(format!("cannot read {}: {e}", path.display()))),
    };
    let mut report = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [at, worker, answer] = fields[..] else {
            violations.push(format!("unreadable lost-COMMIT line `{line}`"));
            continue;
        };
        let Ok(at) = at.parse::<u128>() else {
            violations.push(format!("unreadable lost-COMMIT line `{line}`"));
            continue;
        };
        let lines = lines_of.get(worker).map_or(&[][..], Vec::as_slice);
        let time = |l: &Vec<String>| l.get(1).and_then(|t| t.parse::<u128>().ok());
        let after: Vec<&Vec<String>> = lines
            .iter()
            .filter(|l| time(l).is_some_and(|t| t >= at))
            .collect();
        // The first outcome after the injection, and the write whose COMMIT it was.
        let unknown = after.iter().find(|l| l[0] == "unknown");
        let first_outcome = after
            .iter()
            .find(|l| l[0] == "ok" || l[0] == "fail" || l[0] == "ack");
        let Some(unknown) = unknown else {
            violations.push(format!(
                "COMMIT of {worker} lost at {at} ms: no unknown outcome reported"
            ));
            continue;
        };
        match first_outcome {
            Some(l) if l[0] == "fail" && l.get(2).is_some_and(|c| c == "unknown") => {}
            other => violations.push(format!(
                "COMMIT of {worker} lost at {at} ms: its operation ended {:?}, not as an unknown outcome",
                other.map(|l| l.join(" "))
            )),
        }
        let (key, epoch, writer, seq) = (
            unknown[2].clone(),
            unknown[3].parse::<i64>().unwrap_or(-1),
            unknown[4].clone(),
            unknown[5].parse::<i64>().unwrap_or(-1),
        );
        let applied = logged.contains(&(key.clone(), epoch, writer, seq));
        match (answer, applied) {
            ("COMMIT", true) | ("ROLLBACK" | "error", false) | ("none", _) => {}
            (answer, applied) => violations.push(format!(
                "COMMIT of {worker} lost at {at} ms: the server answered {answer}, but the write of {key} epoch {epoch} seq {seq} is {}in the log",
                if applied { "" } else { "not " }
            )),
        }
        let quarantined = after
            .iter()
            .find(|l| l[0] == "quarantined" && l.get(2) == Some(&key))
            .and_then(|l| time(l));
        if quarantined.is_none() {
            violations.push(format!(
                "COMMIT of {worker} lost at {at} ms: {key} never seen quarantined"
            ));
        }
        report.push(format!(
            "{worker} at {at} ms: server answered {answer}; write of {key} epoch {epoch} seq {seq} {}; reported unknown; quarantined {}",
            if applied { "on disk" } else { "not on disk" },
            quarantined.map_or_else(|| "never".to_owned(), |q| format!("{} ms later", q - at))
        ));
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::{Interval, overlaps};

    fn lease(key: &str, epoch: i64, writer: &str, from: u128, until: u128) -> Interval {
        Interval {
            key: key.to_owned(),
            epoch,
            writer: writer.to_owned(),
            from,
            until,
        }
    }

    #[test]
    fn two_holders_of_one_key_at_once_are_found() {
        let mut violations = Vec::new();
        overlaps(
            vec![
                // Back to back: no violation; then a holder taken over while it still held.
                lease("k", 1, "a", 0, 100),
                lease("k", 2, "b", 100, 150),
                lease("k", 3, "c", 140, 200),
                // Another key's lease at the same time: no violation.
                lease("j", 1, "a", 0, 500),
            ],
            &mut violations,
        );
        assert_eq!(violations.len(), 1, "{violations:#?}");
        assert!(
            violations[0].contains("b held epoch 2 until 150 ms, c held epoch 3 from 140 ms"),
            "{violations:#?}"
        );
        // A holder that believed it held all along overlaps every later one.
        let mut violations = Vec::new();
        overlaps(
            vec![
                lease("k", 1, "a", 0, 1_000),
                lease("k", 2, "b", 100, 150),
                lease("k", 3, "c", 200, 300),
            ],
            &mut violations,
        );
        assert_eq!(violations.len(), 2, "{violations:#?}");
    }
}
