//! Operator reads on the SQL store, for the admin service (the writes are in `actions.rs`).
//!
//! These queries read binding rows **without requiring the namespace to be registered** in this
//! process: the admin process does not run the harnesses that registered them, so it reads
//! `binding_records` directly by namespace and key.

use std::borrow::Cow;

use sea_orm::{ConnectionTrait, DbBackend, QueryResult, Value};
use serde::Deserialize;
use tether_core::{
    AgentId, BindingKey, Error, GenerationChange, HarnessId, HostSessionEntry, Lease, LeaseEpoch,
    LeaseToken, LifecycleRevision, Namespace, Revision, SessionId, SessionKey, StoredRow,
    Timestamp,
};

use super::host::{stored_change, stored_revision};
use super::{Store, corrupt, count_rows, db_error, micros, to_i64};
use crate::events::{LeaseEvent, LeaseEventKind};
use crate::plan;

/// Which host sessions to list, and from where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFilter {
    /// Only sessions of this agent.
    pub agent: Option<AgentId>,
    /// Only sessions driven by this harness.
    pub harness: Option<HarnessId>,
    /// Only sessions whose binding rows hold (`true`) or do not hold (`false`) a live lease.
    pub has_lease: Option<bool>,
    /// Only sessions with (`true`) or without (`false`) a quarantined binding key.
    pub quarantined: Option<bool>,
    /// Keyset cursor: only sessions whose key sorts after this one.
    pub after: Option<SessionKey>,
    /// At most this many sessions.
    pub limit: usize,
}

impl SessionFilter {
    /// Whether the database evaluates the whole filter: no condition needs a read per session
    /// (`has_lease` and `quarantined` do), so one statement answers a page (and
    /// [`Store::with_listed_sessions`] decodes it in place).
    pub fn is_range(&self) -> bool {
        self.has_lease.is_none() && self.quarantined.is_none()
    }
}

/// One host session of a listed page, as stored, its text borrowed from the page where the page
/// holds it unescaped, and checked by the rules a [`HostSessionEntry`] is built with (the ids'
/// text rule, a revision that is not negative, a known generation change).
///
/// [`Store::with_listed_sessions`] hands these out so that a reader which only writes the
/// sessions out (the admin API's list) copies no string; [`ListedSession::into_entry`] makes
/// the owned entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSession<'a> {
    session_key: Cow<'a, str>,
    agent_id: Cow<'a, str>,
    session_id: Cow<'a, str>,
    previous: Option<(Cow<'a, str>, GenerationChange)>,
    lifecycle_revision: LifecycleRevision,
    agent_harness_id: Option<Cow<'a, str>>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl From<HostSessionEntry> for ListedSession<'static> {
    /// The listed form of an entry (its strings moved, not copied).
    fn from(entry: HostSessionEntry) -> Self {
        Self {
            session_key: entry.session_key.into_string().into(),
            agent_id: entry.agent_id.into_string().into(),
            session_id: entry.session_id.into_string().into(),
            previous: entry.previous_session_id.map(|id| {
                (
                    id.into_string().into(),
                    entry.previous_change.unwrap_or(GenerationChange::Transfer),
                )
            }),
            lifecycle_revision: entry.lifecycle_revision,
            agent_harness_id: entry.agent_harness_id.map(|h| h.into_string().into()),
            created_at: entry.created_at,
            updated_at: entry.updated_at,
        }
    }
}

/// The stored cells of one host session, in [`SESSION_COLUMNS`] order: the shape of one
/// element of a listed page's JSON.
#[derive(Debug, Deserialize)]
struct SessionCells<'a>(
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Option<Cow<'a, str>>,
    i64,
    #[serde(borrow)] Option<Cow<'a, str>>,
    i64,
    i64,
    #[serde(borrow)] Option<Cow<'a, str>>,
);

impl<'a> ListedSession<'a> {
    /// Checks stored cells by the rule every reader of `host_sessions` applies (the ids' own
    /// rules without building them, the revision and the change as a row's are read).
    fn from_cells(
        SessionCells(key, agent, session, previous, revision, harness, created, updated, change): SessionCells<'a>,
    ) -> Result<Self, Error> {
        SessionKey::check(&key)?;
        AgentId::check(&agent)?;
        SessionId::check(&session)?;
        if let Some(harness) = &harness {
            HarnessId::check(harness)?;
        }
        let revision = stored_revision(revision)?;
        let previous = match previous {
            None => None,
            Some(previous) => {
                SessionId::check(&previous)?;
                Some((previous, stored_change(change.as_deref())?))
            }
        };
        Ok(Self {
            session_key: key,
            agent_id: agent,
            session_id: session,
            previous,
            lifecycle_revision: revision,
            agent_harness_id: harness,
            created_at: Timestamp::from_millis(created),
            updated_at: Timestamp::from_millis(updated),
        })
    }

    /// The logical session key.
    pub fn session_key(&self) -> &str {
        &self.session_key
    }

    /// The owning agent.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// The current physical generation.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The generation the current one replaced, if any.
    pub fn previous_session_id(&self) -> Option<&str> {
        self.previous.as_ref().map(|(id, _)| id.as_ref())
    }

    /// How the current generation replaced the previous one (present exactly when
    /// [`ListedSession::previous_session_id`] is).
    pub fn previous_change(&self) -> Option<GenerationChange> {
        self.previous.as_ref().map(|&(_, change)| change)
    }

    /// The lifecycle revision.
    pub fn lifecycle_revision(&self) -> LifecycleRevision {
        self.lifecycle_revision
    }

    /// The harness driving the session, if selected.
    pub fn agent_harness_id(&self) -> Option<&str> {
        self.agent_harness_id.as_deref()
    }

    /// Creation time.
    pub fn created_at(&self) -> Timestamp {
        self.created_at
    }

    /// Last update time.
    pub fn updated_at(&self) -> Timestamp {
        self.updated_at
    }

    /// The owned entry (its strings moved when they are owned already, else copied).
    pub fn into_entry(self) -> Result<HostSessionEntry, Error> {
        let entry = HostSessionEntry::new(
            SessionKey::from_string(self.session_key.into_owned())?,
            AgentId::from_string(self.agent_id.into_owned())?,
            SessionId::from_string(self.session_id.into_owned())?,
            self.created_at,
        )
        .with_harness(
            self.agent_harness_id
                .map(|h| HarnessId::from_string(h.into_owned()))
                .transpose()?,
        )
        .with_lifecycle_revision(self.lifecycle_revision)
        .with_times(self.created_at, self.updated_at);
        Ok(match self.previous {
            None => entry,
            Some((previous, change)) => {
                entry.with_predecessor(SessionId::from_string(previous.into_owned())?, change)
            }
        })
    }
}

/// The most sessions one statement of a session list reads (a longer list reads several).
const MAX_BATCH: usize = 500;

/// One page of host sessions in session-key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPage {
    /// The sessions.
    pub sessions: Vec<HostSessionEntry>,
    /// The cursor of the next page, when there is one.
    pub next: Option<SessionKey>,
}

/// The renewal latencies recorded on stored `renewed` lease events
/// ([`LeaseEvent::latency`]), as a cumulative histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewLatencyHistogram {
    /// For each requested upper bound, how many renewals took at most that long.
    pub buckets: Vec<(std::time::Duration, u64)>,
    /// How many renewals carry a latency.
    pub count: u64,
    /// Their total latency.
    pub sum: std::time::Duration,
}

/// A binding row as stored, read for operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingRecord {
    /// The namespace.
    pub namespace: Namespace,
    /// The key.
    pub key: BindingKey,
    /// The row (its lease may have expired: compare `lease.expires_at` with the clock).
    pub row: StoredRow,
    /// The largest lease epoch handed out on this row (kept after a release).
    pub epoch_floor: u64,
}

impl BindingRecord {
    /// The lease when it is still live at `now`.
    pub fn live_lease(&self, now: Timestamp) -> Option<&Lease> {
        self.row.lease.as_ref().filter(|l| l.expires_at > now)
    }
}

/// A namespace known to the database, with its row counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceSummary {
    /// The namespace.
    pub namespace: Namespace,
    /// Live binding rows.
    pub rows: u64,
    /// Live binding rows carrying a live lease.
    pub leased: u64,
}

pub(super) const RECORD_COLUMNS: &str = "namespace, key, value, revision, lease_token, lease_epoch, \
     lease_expires_at, lease_acquired_at, lease_renewed_at, holder, created_at, expires_at";

pub(super) fn decode_record(r: &QueryResult) -> Result<BindingRecord, Error> {
    let ns: String = r.try_get("", "namespace").map_err(db_error)?;
    let key: String = r.try_get("", "key").map_err(db_error)?;
    let namespace = Namespace::new(ns)?;
    let key = BindingKey::parse(&key)?;
    let get_opt = |c: &str| r.try_get::<Option<i64>>("", c).map_err(db_error);
    let token: Option<String> = r.try_get("", "lease_token").map_err(db_error)?;
    let epoch_col = get_opt("lease_epoch")?;
    let lease = match token {
        None => None,
        Some(token) => {
            let (Some(epoch), Some(expires), Some(acquired), Some(renewed)) = (
                epoch_col,
                get_opt("lease_expires_at")?,
                get_opt("lease_acquired_at")?,
                get_opt("lease_renewed_at")?,
            ) else {
                return Err(corrupt("lease", &key));
            };
            Some(Lease {
                token: LeaseToken::new(token).map_err(|e| corrupt("lease token", e))?,
                epoch: LeaseEpoch::new(
                    u64::try_from(epoch).map_err(|_| corrupt("lease epoch", epoch))?,
                ),
                expires_at: Timestamp::from_millis(expires),
                acquired_at: Timestamp::from_millis(acquired),
                renewed_at: Timestamp::from_millis(renewed),
                holder: r.try_get("", "holder").map_err(db_error)?,
            })
        }
    };
    let revision: i64 = r.try_get("", "revision").map_err(db_error)?;
    Ok(BindingRecord {
        row: StoredRow {
            value: r.try_get("", "value").map_err(db_error)?,
            lease,
            revision: Revision::new(
                u64::try_from(revision).map_err(|_| corrupt("revision", revision))?,
            ),
            created_at: Timestamp::from_millis(r.try_get("", "created_at").map_err(db_error)?),
            expires_at: get_opt("expires_at")?.map(Timestamp::from_millis),
        },
        epoch_floor: epoch_col.and_then(|e| u64::try_from(e).ok()).unwrap_or(0),
        namespace,
        key,
    })
}

/// A statement reading `lease_events` rows as [`decode_event`] decodes them, `$tail` (the
/// conditions and order) after its `FROM`: the one list of the columns an event is read with.
macro_rules! select_lease_events {
    ($tail:literal) => {
        concat!(
            "SELECT id, namespace, key, kind, epoch, token_prefix, other_token_prefix, holder, \
             at, latency_us FROM lease_events ",
            $tail
        )
    };
}
pub(crate) use select_lease_events;

/// One key's lease events after an event id, oldest first ([`StoreAdmin::lease_events`] for
/// a key): a range of the `lease_events_key` index, `(namespace, key, id)`. A statement of the
/// general form, with `($1 IS NULL OR namespace = $1)`, cannot use that index and reads the
/// whole event log to find one key's events.
///
/// [`StoreAdmin::lease_events`]: crate::StoreAdmin::lease_events
pub(crate) const KEY_EVENTS_AFTER: &str =
    select_lease_events!("WHERE namespace = $1 AND key = $2 AND id > $3 ORDER BY id LIMIT $4");

/// One key's newest lease events, newest first ([`Store::recent_lease_events`] for a key): the
/// `lease_events_key` index read backwards from the key's end.
const KEY_EVENTS_NEWEST: &str =
    select_lease_events!("WHERE namespace = $1 AND key = $2 ORDER BY id DESC LIMIT $3");

/// The newest lease events of every key, newest first.
const EVENTS_NEWEST: &str = select_lease_events!("ORDER BY id DESC LIMIT $1");

/// Decodes a `lease_events` row (shared with [`StoreAdmin::lease_events`](crate::StoreAdmin)).
pub(crate) fn decode_event(r: &QueryResult) -> Result<LeaseEvent, Error> {
    let ns: String = r.try_get("", "namespace").map_err(db_error)?;
    let key: String = r.try_get("", "key").map_err(db_error)?;
    let kind: String = r.try_get("", "kind").map_err(db_error)?;
    let id: i64 = r.try_get("", "id").map_err(db_error)?;
    let epoch: Option<i64> = r.try_get("", "epoch").map_err(db_error)?;
    Ok(LeaseEvent {
        seq: u64::try_from(id).unwrap_or(0),
        namespace: Namespace::new(ns)?,
        key: BindingKey::parse(&key)?,
        kind: kind.parse().map_err(Error::other)?,
        epoch: epoch
            .and_then(|e| u64::try_from(e).ok())
            .map(LeaseEpoch::new),
        token_prefix: r.try_get("", "token_prefix").map_err(db_error)?,
        other_token_prefix: r.try_get("", "other_token_prefix").map_err(db_error)?,
        holder: r.try_get("", "holder").map_err(db_error)?,
        at: Timestamp::from_millis(r.try_get("", "at").map_err(db_error)?),
        latency: r
            .try_get::<Option<i64>>("", "latency_us")
            .map_err(db_error)?
            .and_then(|us| u64::try_from(us).ok())
            .map(std::time::Duration::from_micros),
    })
}

/// The binding keys a host session's native binding can live under: the physical key of its
/// current generation and the stable key of its session key.
pub fn session_binding_keys(entry: &HostSessionEntry) -> [BindingKey; 2] {
    [
        BindingKey::physical(&entry.agent_id, &entry.session_id),
        BindingKey::stable(&entry.agent_id, &entry.session_key),
    ]
}

/// The columns of a host session entry, in [`HostEntryColumns`] order.
const SESSION_COLUMNS: &str = "session_key, agent_id, session_id, previous_session_id, \
     lifecycle_revision, agent_harness_id, created_at, updated_at, previous_change";

/// The SQL and values of one batch of [`Store::list_sessions`].
///
/// - Only the conditions of the filters that are set, so that a cursor is an index range rather
///   than a scan from the first key (`$1 IS NULL OR session_key > $1` cannot use the index).
/// - On SQLite the table is stored in key order (`WITHOUT ROWID`, migration m0009): a batch is
///   one range of one b-tree, with no seek per row from a key index into the table.
/// - The batch size is a literal: the bundled SQLite (3.51) re-prepares a statement on every
///   execution when its `LIMIT` is a bound parameter, since the value may change the plan.
/// - The batch comes back as **one row** holding a JSON array of `[session_key, agent_id,
///   session_id, previous_session_id, lifecycle_revision, agent_harness_id, created_at,
///   updated_at, previous_change]` arrays in session-key order, decoded by [`decode_session_batch`]. Reading one
///   row per session cost more than the rest of the request: the SQLite driver copies every
///   column value, sends every row to the async side through a channel, and each column is then
///   looked up by name and decoded on its own.
fn list_sessions_query(
    backend: DbBackend,
    filter: &SessionFilter,
    after: Option<&SessionKey>,
    batch: usize,
) -> (String, Vec<Value>) {
    let mut conditions = Vec::new();
    let mut values = Vec::new();
    let mut condition = |column: &str, op: &str, value: &str| {
        values.push(Value::from(value.to_owned()));
        conditions.push(format!("{column} {op} ${}", values.len()));
    };
    if let Some(key) = after {
        condition("session_key", ">", key.as_str());
    }
    if let Some(agent) = &filter.agent {
        condition("agent_id", "=", agent.as_str());
    }
    if let Some(harness) = &filter.harness {
        condition("agent_harness_id", "=", harness.as_str());
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    // SQLite aggregates the rows in the order the ordered subquery yields them (an `ORDER BY`
    // inside the aggregate would sort them again through a temporary b-tree);
    // `decode_session_batch` checks the order all the same.
    let page = match backend {
        DbBackend::Postgres => {
            format!("json_agg(json_build_array({SESSION_COLUMNS}) ORDER BY session_key)::text")
        }
        _ => format!("json_group_array(json_array({SESSION_COLUMNS}))"),
    };
    let sql = format!(
        "SELECT {page} AS page FROM (SELECT {SESSION_COLUMNS} FROM host_sessions{filter} \
         ORDER BY session_key LIMIT {batch}) AS batch"
    );
    (sql, values)
}

/// Decodes the JSON page of [`list_sessions_query`] (`None`: PostgreSQL's aggregate of no rows)
/// into checked sessions borrowing from `page`, in session-key order: keys compare as bytes on
/// both backends (SQLite's `BINARY` collation, PostgreSQL's `COLLATE "C"` key columns), as Rust
/// strings do.
fn decode_session_batch(page: Option<&str>) -> Result<Vec<ListedSession<'_>>, Error> {
    let Some(page) = page else {
        return Ok(Vec::new());
    };
    let cells: Vec<SessionCells<'_>> =
        serde_json::from_str(page).map_err(|e| corrupt("host session", e))?;
    let mut sessions = cells
        .into_iter()
        .map(ListedSession::from_cells)
        .collect::<Result<Vec<_>, Error>>()?;
    if !sessions.is_sorted_by(|a, b| a.session_key < b.session_key) {
        sessions.sort_by(|a, b| a.session_key.cmp(&b.session_key));
    }
    Ok(sessions)
}

impl Store {
    /// Host sessions in session-key order, filtered and paged by `filter` (keyset cursor).
    pub async fn list_sessions(&self, filter: &SessionFilter) -> Result<SessionPage, Error> {
        let limit = filter.limit;
        let mut out = Vec::new();
        let mut after = filter.after.clone();
        let batch = limit.clamp(16, MAX_BATCH) + 1;
        let needs_rows = !filter.is_range();
        'scan: loop {
            let page = self.session_page(filter, after.as_ref(), batch).await?;
            let sessions = decode_session_batch(page.as_deref())?;
            let exhausted = sessions.len() < batch;
            for session in sessions {
                let entry = session.into_entry()?;
                after = Some(entry.session_key.clone());
                if needs_rows && !self.session_matches(&entry, filter).await? {
                    continue;
                }
                if out.len() == limit {
                    // One more match exists: the page is full and has a successor.
                    let next = out.last().map(|e: &HostSessionEntry| e.session_key.clone());
                    return Ok(SessionPage {
                        sessions: out,
                        next,
                    });
                }
                out.push(entry);
            }
            if exhausted {
                break 'scan;
            }
        }
        Ok(SessionPage {
            sessions: out,
            next: None,
        })
    }

    /// [`Store::list_sessions`] handing `read` the page's sessions borrowed from the stored
    /// text instead of owned entries, with the key the next page starts after (when there is
    /// one), and answering what `read` answers: a reader that only writes the sessions out (the
    /// admin API's list) copies no string.
    ///
    /// A filter the database evaluates whole ([`SessionFilter::is_range`]) of at most 500
    /// sessions (what one statement of a list reads) is one statement, its page decoded in
    /// place. Any other filter is read as [`Store::list_sessions`] reads it and its entries
    /// handed over as listed sessions: the same sessions and cursor either way.
    pub async fn with_listed_sessions<R>(
        &self,
        filter: &SessionFilter,
        read: impl FnOnce(&[ListedSession<'_>], Option<&str>) -> R,
    ) -> Result<R, Error> {
        let limit = filter.limit;
        if !filter.is_range() || limit > MAX_BATCH {
            let page = self.list_sessions(filter).await?;
            let sessions: Vec<ListedSession<'static>> =
                page.sessions.into_iter().map(ListedSession::from).collect();
            return Ok(read(&sessions, page.next.as_ref().map(SessionKey::as_str)));
        }
        let page = self
            .session_page(filter, filter.after.as_ref(), limit + 1)
            .await?;
        let mut sessions = decode_session_batch(page.as_deref())?;
        // A session beyond the limit only says that the page has a successor.
        let more = sessions.len() > limit;
        sessions.truncate(limit);
        let next = sessions
            .last()
            .filter(|_| more)
            .map(ListedSession::session_key);
        Ok(read(&sessions, next))
    }

    /// The JSON page of at most `batch` sessions after `after` ([`list_sessions_query`]);
    /// `None` for PostgreSQL's aggregate of no rows.
    async fn session_page(
        &self,
        filter: &SessionFilter,
        after: Option<&SessionKey>,
        batch: usize,
    ) -> Result<Option<String>, Error> {
        let (sql, values) = list_sessions_query(self.inner.backend, filter, after, batch);
        let row = self
            .inner
            .db
            .query_one_raw(self.stmt(&sql, values))
            .await
            .map_err(db_error)?;
        Ok(row
            .map(|r| r.try_get("", "page"))
            .transpose()
            .map_err(db_error)?
            .flatten())
    }

    async fn session_matches(
        &self,
        entry: &HostSessionEntry,
        filter: &SessionFilter,
    ) -> Result<bool, Error> {
        if let Some(want) = filter.has_lease {
            let now = self.inner.clock.now();
            let leased = self
                .session_bindings(entry)
                .await?
                .iter()
                .any(|b| b.live_lease(now).is_some());
            if leased != want {
                return Ok(false);
            }
        }
        if let Some(want) = filter.quarantined
            && self.session_quarantined(entry).await? != want
        {
            return Ok(false);
        }
        Ok(true)
    }

    async fn session_quarantined(&self, entry: &HostSessionEntry) -> Result<bool, Error> {
        let [physical, stable] = session_binding_keys(entry);
        let n = count_rows(
            &self.inner.db,
            self.stmt(
                "SELECT COUNT(*) AS n FROM quarantined_keys WHERE key = $1 OR key = $2",
                vec![physical.as_str().into(), stable.as_str().into()],
            ),
        )
        .await?;
        Ok(n > 0)
    }

    /// The live binding rows of a host session, in every namespace: its physical key
    /// `session:<agent>:<session id>` and its stable key (see [`session_binding_keys`]).
    pub async fn session_bindings(
        &self,
        entry: &HostSessionEntry,
    ) -> Result<Vec<BindingRecord>, Error> {
        let [physical, stable] = session_binding_keys(entry);
        let now = self.inner.clock.now();
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM binding_records WHERE (key = $1 OR key = $2) \
             AND (expires_at IS NULL OR expires_at > $3) ORDER BY namespace, key"
        );
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                &sql,
                vec![
                    physical.as_str().into(),
                    stable.as_str().into(),
                    now.as_millis().into(),
                ],
            ))
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_record).collect()
    }

    /// The live binding row at `ns`/`key`, whether or not `ns` is registered in this process.
    pub async fn binding_record(
        &self,
        ns: &Namespace,
        key: &BindingKey,
    ) -> Result<Option<BindingRecord>, Error> {
        let now = self.inner.clock.now();
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM binding_records WHERE namespace = $1 AND key = $2"
        );
        let row = self
            .inner
            .db
            .query_one_raw(self.stmt(&sql, vec![ns.as_str().into(), key.as_str().into()]))
            .await
            .map_err(db_error)?;
        Ok(row
            .as_ref()
            .map(decode_record)
            .transpose()?
            .filter(|r| plan::row_is_live(&r.row, now)))
    }

    /// Live binding rows in (namespace, key) order after the keyset cursor `after`, optionally
    /// within one namespace and only those carrying a live lease.
    pub async fn list_bindings(
        &self,
        ns: Option<&Namespace>,
        leased_only: bool,
        after: Option<(&Namespace, &BindingKey)>,
        limit: usize,
    ) -> Result<Vec<BindingRecord>, Error> {
        let now = self.inner.clock.now();
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM binding_records \
             WHERE (expires_at IS NULL OR expires_at > $1) AND ($2 IS NULL OR namespace = $2) \
             AND ($3 = 0 OR (lease_token IS NOT NULL AND lease_expires_at > $1)) \
             AND ($4 IS NULL OR namespace > $4 OR (namespace = $4 AND key > $5)) \
             ORDER BY namespace, key LIMIT $6"
        );
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                &sql,
                vec![
                    now.as_millis().into(),
                    Value::from(ns.map(|n| n.as_str().to_owned())),
                    i64::from(leased_only).into(),
                    Value::from(after.map(|(n, _)| n.as_str().to_owned())),
                    Value::from(after.map(|(_, k)| k.as_str().to_owned())),
                    to_i64(limit as u64).into(),
                ],
            ))
            .await
            .map_err(db_error)?;
        rows.iter().map(decode_record).collect()
    }

    /// The namespaces with live binding rows, with their row and lease counts.
    pub async fn namespaces(&self) -> Result<Vec<NamespaceSummary>, Error> {
        let now = self.inner.clock.now();
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                "SELECT namespace, COUNT(*) AS n_rows, \
                 SUM(CASE WHEN lease_token IS NOT NULL AND lease_expires_at > $1 THEN 1 ELSE 0 END) AS n_leased \
                 FROM binding_records WHERE expires_at IS NULL OR expires_at > $1 \
                 GROUP BY namespace ORDER BY namespace",
                vec![now.as_millis().into()],
            ))
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| {
                let ns: String = r.try_get("", "namespace").map_err(db_error)?;
                let rows: i64 = r.try_get("", "n_rows").map_err(db_error)?;
                let leased: Option<i64> = r.try_get("", "n_leased").map_err(db_error)?;
                Ok(NamespaceSummary {
                    namespace: Namespace::new(ns)?,
                    rows: u64::try_from(rows).unwrap_or(0),
                    leased: leased.and_then(|l| u64::try_from(l).ok()).unwrap_or(0),
                })
            })
            .collect()
    }

    /// The newest `limit` lease events, optionally of one key, newest first.
    pub async fn recent_lease_events(
        &self,
        key: Option<(&Namespace, &BindingKey)>,
        limit: usize,
    ) -> Result<Vec<LeaseEvent>, Error> {
        let limit = Value::from(to_i64(limit as u64));
        let stmt = match key {
            Some((ns, key)) => self.stmt(
                KEY_EVENTS_NEWEST,
                vec![ns.as_str().into(), key.as_str().into(), limit],
            ),
            None => self.stmt(EVENTS_NEWEST, vec![limit]),
        };
        let rows = self.inner.db.query_all_raw(stmt).await.map_err(db_error)?;
        rows.iter().map(decode_event).collect()
    }

    /// How many lease events of each kind the history holds (kinds with none are included).
    pub async fn lease_event_counts(&self) -> Result<Vec<(LeaseEventKind, u64)>, Error> {
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                "SELECT kind, COUNT(*) AS n FROM lease_events GROUP BY kind",
                vec![],
            ))
            .await
            .map_err(db_error)?;
        let mut counts: Vec<(LeaseEventKind, u64)> =
            LeaseEventKind::ALL.iter().map(|k| (*k, 0)).collect();
        for r in &rows {
            let kind: String = r.try_get("", "kind").map_err(db_error)?;
            let n: i64 = r.try_get("", "n").map_err(db_error)?;
            if let Ok(kind) = kind.parse::<LeaseEventKind>()
                && let Some(slot) = counts.iter_mut().find(|(k, _)| *k == kind)
            {
                slot.1 = u64::try_from(n).unwrap_or(0);
            }
        }
        Ok(counts)
    }

    /// The cumulative histogram of the renewal latencies in the stored history, with one bucket
    /// per upper bound in `bounds` (in the order given). Events without a latency (other kinds,
    /// events written before the latency was recorded) are not counted.
    pub async fn renew_latency_histogram(
        &self,
        bounds: &[std::time::Duration],
    ) -> Result<RenewLatencyHistogram, Error> {
        // PostgreSQL sums a BIGINT as NUMERIC: every aggregate is cast back to BIGINT. An
        // aggregate without GROUP BY answers exactly one row (sums are NULL over no rows).
        let mut sql =
            String::from("SELECT COUNT(latency_us) AS n, CAST(SUM(latency_us) AS BIGINT) AS total");
        let mut values: Vec<Value> = Vec::with_capacity(bounds.len());
        for (i, bound) in bounds.iter().enumerate() {
            sql.push_str(&format!(
                ", CAST(SUM(CASE WHEN latency_us <= ${} THEN 1 ELSE 0 END) AS BIGINT) AS b{i}",
                i + 1
            ));
            values.push(micros(*bound).into());
        }
        sql.push_str(" FROM lease_events WHERE kind = 'renewed' AND latency_us IS NOT NULL");
        let row = self
            .inner
            .db
            .query_one_raw(self.stmt(&sql, values))
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::other("the renew-latency aggregate returned no row"))?;
        let count = |column: &str| -> Result<u64, Error> {
            let n: Option<i64> = row.try_get("", column).map_err(db_error)?;
            Ok(n.and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
        };
        let buckets = bounds
            .iter()
            .enumerate()
            .map(|(i, bound)| Ok((*bound, count(&format!("b{i}"))?)))
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(RenewLatencyHistogram {
            buckets,
            count: count("n")?,
            sum: std::time::Duration::from_micros(count("total")?),
        })
    }

    /// Number of host sessions and of quarantined keys.
    pub async fn admin_counts(&self) -> Result<(u64, u64), Error> {
        let row = self
            .inner
            .db
            .query_one_raw(self.stmt(
                "SELECT (SELECT COUNT(*) FROM host_sessions) AS sessions, \
                 (SELECT COUNT(*) FROM quarantined_keys) AS quarantined",
                vec![],
            ))
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::other("count query returned no row"))?;
        let sessions: i64 = row.try_get("", "sessions").map_err(db_error)?;
        let quarantined: i64 = row.try_get("", "quarantined").map_err(db_error)?;
        Ok((
            u64::try_from(sessions).unwrap_or(0),
            u64::try_from(quarantined).unwrap_or(0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use tether_core::{GenerationChange, LifecycleRevision, SessionId};

    use super::*;

    /// SQLite's plan of one key's event reads: the key's range of the event index, never a
    /// scan of the whole log (which the general statements, with `($1 IS NULL OR …)`, are).
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn one_keys_events_are_read_from_the_event_index() {
        let store = Store::open("sqlite::memory:").await.unwrap();
        let plan = |sql: &str, values: Vec<Value>| {
            let store = store.clone();
            let stmt = store.stmt(&format!("EXPLAIN QUERY PLAN {sql}"), values);
            async move {
                let rows = store.inner.db.query_all_raw(stmt).await.unwrap();
                rows.iter()
                    .map(|r| r.try_get::<String>("", "detail").unwrap())
                    .collect::<Vec<_>>()
                    .join("; ")
            }
        };
        let (ns, key) = (Value::from("ns"), Value::from("session:main:k"));
        for (sql, values) in [
            (
                KEY_EVENTS_AFTER,
                vec![ns.clone(), key.clone(), 0_i64.into(), 10_i64.into()],
            ),
            (
                KEY_EVENTS_NEWEST,
                vec![ns.clone(), key.clone(), 10_i64.into()],
            ),
        ] {
            let plan = plan(sql, values).await;
            assert!(
                plan.contains("USING COVERING INDEX lease_events_key")
                    || plan.contains("USING INDEX lease_events_key"),
                "{plan}"
            );
            assert!(!plan.contains("SCAN"), "{plan}");
        }
    }

    #[test]
    fn session_batches_decode_in_key_order_with_escapes_and_nulls() {
        let page = r#"[["b\"q","main","g2","g1",3,null,10,20,"reset"],["a","main","g1",null,1,"codex",5,6,null]]"#;
        let entries = decode_session_batch(Some(page)).unwrap();
        let keys: Vec<_> = entries.iter().map(ListedSession::session_key).collect();
        assert_eq!(keys, ["a", "b\"q"]);
        // An escaped text is unescaped into its own string; the others borrow from the page.
        assert!(matches!(entries[1].session_key, Cow::Owned(_)));
        assert!(matches!(entries[0].session_key, Cow::Borrowed(_)));
        assert_eq!(entries[1].previous_session_id(), Some("g1"));
        assert_eq!(entries[1].previous_change(), Some(GenerationChange::Reset));
        assert_eq!(entries[0].previous_change(), None);
        assert_eq!(entries[1].lifecycle_revision(), LifecycleRevision::new(3));
        assert_eq!(entries[0].agent_harness_id(), Some("codex"));
        assert_eq!(entries[0].updated_at(), Timestamp::from_millis(6));
        let entry = entries[1].clone().into_entry().unwrap();
        assert_eq!(entry.session_key.as_str(), "b\"q");
        assert_eq!(
            entry.previous_session_id,
            Some(SessionId::new("g1").unwrap())
        );
        assert!(decode_session_batch(None).unwrap().is_empty());
        assert!(decode_session_batch(Some("[]")).unwrap().is_empty());
    }

    #[test]
    fn corrupt_session_batches_are_refused() {
        for page in [
            r#"[["a","main","g1",null,-1,null,0,0,null]]"#,
            r#"[["  ","main","g1",null,1,null,0,0,null]]"#,
            r#"[["a","main","g1",null,"1",null,0,0,null]]"#,
            r#"[["a","main","g1","g0",1,null,0,0,"rotation"]]"#,
            r#"[["a","main","g1","g0",1,"bad\u0001",0,0,null]]"#,
            r#"[["a","main","g1",null,1,null,0,0]]"#,
            "not json",
        ] {
            assert!(decode_session_batch(Some(page)).is_err(), "{page}");
        }
    }

    #[test]
    fn batch_queries_bind_only_the_filters_that_are_set() {
        let (sql, values) =
            list_sessions_query(DbBackend::Sqlite, &SessionFilter::default(), None, 101);
        assert!(values.is_empty());
        assert!(!sql.contains("WHERE") && sql.contains("LIMIT 101"), "{sql}");
        let filter = SessionFilter {
            harness: Some(HarnessId::new("codex").unwrap()),
            ..SessionFilter::default()
        };
        let after = SessionKey::new("s1").unwrap();
        let (sql, values) = list_sessions_query(DbBackend::Postgres, &filter, Some(&after), 17);
        assert_eq!(values.len(), 2);
        assert!(
            sql.contains("WHERE session_key > $1 AND agent_harness_id = $2")
                && sql.contains("json_agg"),
            "{sql}"
        );
    }
}
