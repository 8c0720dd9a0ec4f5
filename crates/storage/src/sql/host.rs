//! Host sessions, upstream links and transcripts on the SQL store.

use std::collections::HashMap;

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, QueryResult, Value};
use tether_core::{
    AgentId, AppendOutcome, Error, GenerationChange, HarnessId, HostErrorKind, HostSessionEntry,
    HostSessionRead, HostSessionStore, LifecycleRevision, SessionId, SessionKey, Timestamp,
    TranscriptAnchor,
};

use super::migration::PG_SEARCH_VECTOR;
use super::{End, Store, corrupt, db_error, to_i64};
use crate::transcript::{
    Cut, CutStatus, NewHostSession, NewTranscriptEntry, SessionExpectation, TranscriptEntry,
    TranscriptHit, TranscriptMetadata, TranscriptRole, encode_metadata,
};

const SESSION_COLUMNS: &str = "session_key, agent_id, session_id, previous_session_id, \
     lifecycle_revision, agent_harness_id, created_at, updated_at, previous_change, active_leaf";

/// A host session row with its active transcript leaf.
#[derive(Debug, Clone)]
pub(crate) struct SessionRow {
    pub(crate) entry: HostSessionEntry,
    pub(crate) active_leaf: Option<i64>,
}

fn decode_session(r: &QueryResult) -> Result<SessionRow, Error> {
    Ok(SessionRow {
        entry: decode_host_entry(r)?,
        active_leaf: r.try_get("", "active_leaf").map_err(db_error)?,
    })
}

/// Decodes the `host_sessions` columns of a row into an entry (shared with the admin reads).
pub(crate) fn decode_host_entry(r: &QueryResult) -> Result<HostSessionEntry, Error> {
    let get_s = |c: &str| r.try_get::<String>("", c).map_err(db_error);
    let get_os = |c: &str| r.try_get::<Option<String>>("", c).map_err(db_error);
    let get_i = |c: &str| r.try_get::<i64>("", c).map_err(db_error);
    host_entry_from_columns((
        get_s("session_key")?,
        get_s("agent_id")?,
        get_s("session_id")?,
        get_os("previous_session_id")?,
        get_i("lifecycle_revision")?,
        get_os("agent_harness_id")?,
        get_i("created_at")?,
        get_i("updated_at")?,
        get_os("previous_change")?,
    ))
}

/// The stored columns of a host session entry: `session_key`, `agent_id`, `session_id`,
/// `previous_session_id`, `lifecycle_revision`, `agent_harness_id`, `created_at`, `updated_at`,
/// `previous_change`.
pub(crate) type HostEntryColumns = (
    String,
    String,
    String,
    Option<String>,
    i64,
    Option<String>,
    i64,
    i64,
    Option<String>,
);

/// Validates stored host session columns into an entry, moving the strings into the ids: the
/// rule of every reader of `host_sessions` (a row here, a listed page in `admin_read.rs`): each
/// id checked once, by its own rule, the revision and the change by [`stored_revision`] and
/// [`stored_change`].
pub(crate) fn host_entry_from_columns(
    (key, agent, session, previous, revision, harness, created, updated, change): HostEntryColumns,
) -> Result<HostSessionEntry, Error> {
    let entry = HostSessionEntry::new(
        SessionKey::from_string(key)?,
        AgentId::from_string(agent)?,
        SessionId::from_string(session)?,
        Timestamp::from_millis(created),
    )
    .with_harness(harness.map(HarnessId::from_string).transpose()?)
    .with_lifecycle_revision(stored_revision(revision)?)
    .with_times(
        Timestamp::from_millis(created),
        Timestamp::from_millis(updated),
    );
    Ok(match previous {
        None => entry,
        Some(previous) => entry.with_predecessor(
            SessionId::from_string(previous)?,
            stored_change(change.as_deref())?,
        ),
    })
}

/// A stored lifecycle revision, refused when negative.
pub(crate) fn stored_revision(revision: i64) -> Result<LifecycleRevision, Error> {
    u64::try_from(revision)
        .map(LifecycleRevision::new)
        .map_err(|_| corrupt("lifecycle revision", revision))
}

/// How a stored predecessor's generation was replaced, from its recorded name.
///
/// A predecessor recorded before its change was (migration m0008) may have been a rotation, a
/// cut or a reset; every one was adopted then (a reset relied on its notification), so it reads
/// as a transfer, the behaviour it was written under.
pub(crate) fn stored_change(name: Option<&str>) -> Result<GenerationChange, Error> {
    match name {
        None => Ok(GenerationChange::Transfer),
        Some(name) => {
            GenerationChange::parse(name).ok_or_else(|| corrupt("generation change", name))
        }
    }
}

fn decode_entry(r: &QueryResult) -> Result<TranscriptEntry, Error> {
    let role: String = r.try_get("", "role").map_err(db_error)?;
    Ok(TranscriptEntry {
        anchor: TranscriptAnchor(r.try_get("", "id").map_err(db_error)?),
        session_key: SessionKey::new(r.try_get::<String>("", "session_key").map_err(db_error)?)?,
        parent: r
            .try_get::<Option<i64>>("", "parent_id")
            .map_err(db_error)?
            .map(TranscriptAnchor),
        role: role.parse().map_err(|e| corrupt("transcript role", e))?,
        content: r.try_get("", "content").map_err(db_error)?,
        idempotency_key: r.try_get("", "idempotency_key").map_err(db_error)?,
        metadata: r
            .try_get::<Option<String>>("", "metadata")
            .map_err(db_error)?
            .map(|text| decode_metadata(&text))
            .transpose()?,
        created_at: Timestamp::from_millis(r.try_get("", "created_at").map_err(db_error)?),
    })
}

const ENTRY_COLUMNS: &str =
    "id, session_key, parent_id, role, content, idempotency_key, metadata, created_at";

/// Reads a stored metadata text back (an object, as every write stores).
fn decode_metadata(text: &str) -> Result<TranscriptMetadata, Error> {
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(_) => Err(corrupt("transcript metadata", "not a JSON object")),
        Err(e) => Err(corrupt("transcript metadata", e)),
    }
}

/// The search terms of a free-text query: alphanumeric words, lower-cased.
fn search_terms(query: &str) -> Vec<String> {
    query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

impl Store {
    pub(crate) async fn session_row<C: ConnectionTrait>(
        &self,
        c: &C,
        key: &SessionKey,
    ) -> Result<Option<SessionRow>, Error> {
        let sql = format!("SELECT {SESSION_COLUMNS} FROM host_sessions WHERE session_key = $1");
        c.query_one_raw(self.stmt(&sql, vec![key.as_str().into()]))
            .await
            .map_err(db_error)?
            .as_ref()
            .map(decode_session)
            .transpose()
    }

    /// Creates a host session at lifecycle revision 1. Returns `false` when the key exists
    /// (nothing changed: the existing session, whatever its generation, stays as it is; a
    /// caller that discards the answer may go on with a session it did not create).
    pub async fn create_session(&self, new: NewHostSession) -> Result<bool, Error> {
        let tx = self.begin_write().await?;
        let result = self
            .create_session_in(&tx, &new)
            .await
            .map(|created| (created, End::Commit));
        self.finish(tx, result).await
    }

    async fn create_session_in(
        &self,
        tx: &DatabaseTransaction,
        new: &NewHostSession,
    ) -> Result<bool, Error> {
        let now = self.inner.clock.now();
        let affected = tx
            .execute_raw(self.stmt(
                "INSERT INTO host_sessions (session_key, agent_id, session_id, previous_session_id, \
                 previous_change, lifecycle_revision, agent_harness_id, active_leaf, created_at, \
                 updated_at) VALUES ($1, $2, $3, NULL, NULL, $4, $5, NULL, $6, $6) \
                 ON CONFLICT (session_key) DO NOTHING",
                vec![
                    new.session_key.as_str().into(),
                    new.agent_id.as_str().into(),
                    new.session_id.as_str().into(),
                    to_i64(LifecycleRevision::INITIAL.get()).into(),
                    Value::from(new.agent_harness_id.as_ref().map(|h| h.as_str().to_owned())),
                    now.as_millis().into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .rows_affected();
        Ok(affected == 1)
    }

    /// Reads the entry of `key`, if any.
    pub async fn session(&self, key: &SessionKey) -> Result<Option<HostSessionEntry>, Error> {
        Ok(self
            .session_row(&self.inner.db, key)
            .await?
            .map(|r| r.entry))
    }

    /// Moves `key` to generation `next` if its current generation is still `expected`: the
    /// predecessor is recorded as a [`GenerationChange::Transfer`] (a compaction: harnesses
    /// adopt its native binding) and the lifecycle revision bumped. `None` when the entry is
    /// gone or moved on. A reset goes through the host coordinator (`tether-host`'s
    /// `HostSessions::reset`), a cut through [`Store::cut_transcript`].
    pub async fn rotate_generation(
        &self,
        key: &SessionKey,
        expected: &SessionId,
        next: SessionId,
    ) -> Result<Option<HostSessionEntry>, Error> {
        let tx = self.begin_write().await?;
        let result = async {
            let Some(row) = self.session_row(&*tx, key).await? else {
                return Ok((None, End::Rollback));
            };
            if row.entry.session_id != *expected {
                return Ok((None, End::Rollback));
            }
            let rotated = self
                .rotate_in(
                    &tx,
                    &row.entry,
                    &next,
                    GenerationChange::Transfer,
                    row.active_leaf,
                )
                .await?;
            Ok((rotated, End::Commit))
        }
        .await;
        self.finish(tx, result).await
    }

    /// Rotates `current` to `next` by `change` and sets the active leaf, guarded on the
    /// generation and revision of `current`.
    pub(crate) async fn rotate_in(
        &self,
        tx: &DatabaseTransaction,
        current: &HostSessionEntry,
        next: &SessionId,
        change: GenerationChange,
        active_leaf: Option<i64>,
    ) -> Result<Option<HostSessionEntry>, Error> {
        let now = self.inner.clock.now();
        let revision = current.lifecycle_revision.next();
        let affected = tx
            .execute_raw(self.stmt(
                "UPDATE host_sessions SET previous_session_id = session_id, session_id = $1, \
                 lifecycle_revision = $2, active_leaf = $3, updated_at = $4, previous_change = $8 \
                 WHERE session_key = $5 AND session_id = $6 AND lifecycle_revision = $7",
                vec![
                    next.as_str().into(),
                    to_i64(revision.get()).into(),
                    Value::from(active_leaf),
                    now.as_millis().into(),
                    current.session_key.as_str().into(),
                    current.session_id.as_str().into(),
                    to_i64(current.lifecycle_revision.get()).into(),
                    change.as_str().into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .rows_affected();
        Ok((affected == 1).then(|| current.rotated(next.clone(), change, now)))
    }

    /// Deletes the session row (and its transcript) inside `tx`, guarded on its generation.
    pub(crate) async fn delete_session_in(
        &self,
        tx: &DatabaseTransaction,
        entry: &HostSessionEntry,
    ) -> Result<bool, Error> {
        tx.execute_raw(self.stmt(
            "DELETE FROM transcript_entries WHERE session_key = $1",
            vec![entry.session_key.as_str().into()],
        ))
        .await
        .map_err(db_error)?;
        let affected = tx
            .execute_raw(self.stmt(
                "DELETE FROM host_sessions WHERE session_key = $1 AND session_id = $2 AND lifecycle_revision = $3",
                vec![
                    entry.session_key.as_str().into(),
                    entry.session_id.as_str().into(),
                    to_i64(entry.lifecycle_revision.get()).into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .rows_affected();
        Ok(affected == 1)
    }

    /// Links `key` to an upstream (external harness) session. Returns `false` when a link
    /// already exists.
    pub async fn link_upstream(&self, key: &SessionKey, upstream: &str) -> Result<bool, Error> {
        let tx = self.begin_write().await?;
        let result = self
            .link_upstream_in(&*tx, key, upstream)
            .await
            .map(|linked| (linked, End::Commit));
        self.finish(tx, result).await
    }

    pub(crate) async fn link_upstream_in<C: ConnectionTrait>(
        &self,
        c: &C,
        key: &SessionKey,
        upstream: &str,
    ) -> Result<bool, Error> {
        let affected = c
            .execute_raw(self.stmt(
                "INSERT INTO upstream_links (session_key, upstream, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (session_key) DO NOTHING",
                vec![
                    key.as_str().into(),
                    upstream.into(),
                    self.inner.clock.now().as_millis().into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .rows_affected();
        Ok(affected == 1)
    }

    /// The upstream link of `key`, if any.
    pub async fn upstream_link(&self, key: &SessionKey) -> Result<Option<String>, Error> {
        self.upstream_link_in(&self.inner.db, key).await
    }

    pub(crate) async fn upstream_link_in<C: ConnectionTrait>(
        &self,
        c: &C,
        key: &SessionKey,
    ) -> Result<Option<String>, Error> {
        c.query_one_raw(self.stmt(
            "SELECT upstream FROM upstream_links WHERE session_key = $1",
            vec![key.as_str().into()],
        ))
        .await
        .map_err(db_error)?
        .map(|r| r.try_get::<String>("", "upstream").map_err(db_error))
        .transpose()
    }

    /// Removes the upstream link of `key` only if it still equals `expected`.
    pub async fn unlink_upstream(&self, key: &SessionKey, expected: &str) -> Result<bool, Error> {
        let tx = self.begin_write().await?;
        let result = async {
            let affected = tx
                .execute_raw(self.stmt(
                    "DELETE FROM upstream_links WHERE session_key = $1 AND upstream = $2",
                    vec![key.as_str().into(), expected.into()],
                ))
                .await
                .map_err(db_error)?
                .rows_affected();
            Ok((affected == 1, End::Commit))
        }
        .await;
        self.finish(tx, result).await
    }

    /// Appends to the session's transcript as a child of the active leaf, which then becomes
    /// the new entry. An idempotency-key hit appends nothing and returns the existing entry.
    pub async fn append_transcript(
        &self,
        key: &SessionKey,
        entry: NewTranscriptEntry,
    ) -> Result<AppendOutcome, Error> {
        self.append_transcript_expecting(key, entry, &SessionExpectation::default())
            .await
    }

    /// [`Store::append_transcript`] fenced by what the writer expects of the session: checked
    /// in the append's own transaction, so a session moved to another generation or revision
    /// in the meantime gets nothing appended ([`HostErrorKind::SessionChanged`]). An
    /// idempotency-key hit is checked after the fence: a moved session never confirms a row.
    pub async fn append_transcript_expecting(
        &self,
        key: &SessionKey,
        entry: NewTranscriptEntry,
        expect: &SessionExpectation,
    ) -> Result<AppendOutcome, Error> {
        entry.check()?;
        let tx = self.begin_write().await?;
        let result = async {
            let Some(session) = self.session_row(&*tx, key).await? else {
                return Err(Error::session_not_found(key));
            };
            if !expect.holds_for(&session.entry) {
                return Err(HostErrorKind::SessionChanged {
                    key: key.to_string(),
                }
                .into());
            }
            if let Some(idem) = &entry.idempotency_key {
                let found = tx
                    .query_one_raw(self.stmt(
                        "SELECT id FROM transcript_entries WHERE session_key = $1 AND idempotency_key = $2",
                        vec![key.as_str().into(), idem.as_str().into()],
                    ))
                    .await
                    .map_err(db_error)?;
                if let Some(row) = found {
                    let id: i64 = row.try_get("", "id").map_err(db_error)?;
                    return Ok((AppendOutcome {
                        appended: false,
                        anchor: TranscriptAnchor(id),
                    }, End::Rollback));
                }
            }
            let now = self.inner.clock.now();
            let id = self
                .insert_entry(&tx, key, session.active_leaf, &entry, now)
                .await?;
            if let Some(outcome) =
                crate::transcript::FinalizationOutcome::of_entry(entry.role, &entry.content)
            {
                // Counted in the transaction that records it: the metric is maintained at write
                // time and never decreases when the session is deleted later.
                self.bump_counter(&tx, outcome.counter()).await?;
            }
            tx.execute_raw(self.stmt(
                "UPDATE host_sessions SET active_leaf = $1, updated_at = $2 WHERE session_key = $3",
                vec![id.into(), now.as_millis().into(), key.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
            Ok((AppendOutcome {
            appended: true,
            anchor: TranscriptAnchor(id),
        }, End::Commit))
        }
        .await;
        self.finish(tx, result).await
    }

    async fn insert_entry(
        &self,
        tx: &DatabaseTransaction,
        key: &SessionKey,
        parent: Option<i64>,
        entry: &NewTranscriptEntry,
        now: Timestamp,
    ) -> Result<i64, Error> {
        let metadata = entry.metadata.as_ref().map(encode_metadata).transpose()?;
        let row = tx
            .query_one_raw(self.stmt(
                "INSERT INTO transcript_entries (session_key, parent_id, role, content, idempotency_key, metadata, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                vec![
                    key.as_str().into(),
                    Value::from(parent),
                    entry.role.as_str().into(),
                    entry.content.as_str().into(),
                    Value::from(entry.idempotency_key.clone()),
                    Value::from(metadata),
                    now.as_millis().into(),
                ],
            ))
            .await
            .map_err(db_error)?
            .ok_or_else(|| Error::other("transcript insert returned no id"))?;
        row.try_get("", "id").map_err(db_error)
    }

    async fn entries_in<C: ConnectionTrait>(
        &self,
        c: &C,
        key: &SessionKey,
    ) -> Result<HashMap<i64, TranscriptEntry>, Error> {
        let sql = format!("SELECT {ENTRY_COLUMNS} FROM transcript_entries WHERE session_key = $1");
        let rows = c
            .query_all_raw(self.stmt(&sql, vec![key.as_str().into()]))
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| decode_entry(r).map(|e| (e.anchor.0, e)))
            .collect()
    }

    /// The active path of the session's transcript, root first.
    pub async fn active_path(&self, key: &SessionKey) -> Result<Vec<TranscriptEntry>, Error> {
        let Some(session) = self.session_row(&self.inner.db, key).await? else {
            return Ok(Vec::new());
        };
        let entries = self.entries_in(&self.inner.db, key).await?;
        Ok(crate::transcript::path_to(&entries, session.active_leaf))
    }

    /// The active leaf of the session's transcript.
    pub async fn active_leaf(&self, key: &SessionKey) -> Result<Option<TranscriptAnchor>, Error> {
        Ok(self
            .session_row(&self.inner.db, key)
            .await?
            .and_then(|s| s.active_leaf.map(TranscriptAnchor)))
    }

    /// Validates `cut` against the session (inside `c`): the new active leaf, or the refusal.
    pub(crate) async fn plan_cut_in<C: ConnectionTrait>(
        &self,
        c: &C,
        session: &SessionRow,
        cut: &Cut,
    ) -> Result<Result<Option<i64>, CutStatus>, Error> {
        let entries = self.entries_in(c, &session.entry.session_key).await?;
        Ok(crate::transcript::plan_cut(
            &entries,
            session.active_leaf,
            cut,
        ))
    }

    /// Applies a transcript cut without any harness taking part (no native context to
    /// invalidate): moves the active leaf and rotates the session to `next`. A session that
    /// does not exist is [`HostErrorKind::SessionNotFound`]; a refused cut is its status.
    pub async fn cut_transcript(
        &self,
        key: &SessionKey,
        cut: &Cut,
        next: SessionId,
    ) -> Result<CutStatus, Error> {
        let tx = self.begin_write().await?;
        let result = async {
            let Some(session) = self.session_row(&*tx, key).await? else {
                return Err(Error::session_not_found(key));
            };
            let leaf = match self.plan_cut_in(&*tx, &session, cut).await? {
                Ok(leaf) => leaf,
                Err(status) => return Ok((status, End::Rollback)),
            };
            if self
                .rotate_in(&tx, &session.entry, &next, GenerationChange::Cut, leaf)
                .await?
                .is_none()
            {
                return Err(HostErrorKind::SessionChanged {
                    key: key.to_string(),
                }
                .into());
            }
            Ok((CutStatus::Created, End::Commit))
        }
        .await;
        self.finish(tx, result).await
    }

    /// Forks the session at a user message into a new session key: the new session gets a
    /// copy of the path up to (not including) that message. The source is not touched. A
    /// source that does not exist is [`HostErrorKind::SessionNotFound`]; a refused fork is its
    /// status.
    pub async fn fork_session(
        &self,
        source: &SessionKey,
        at: &TranscriptAnchor,
        new: NewHostSession,
    ) -> Result<CutStatus, Error> {
        let tx = self.begin_write().await?;
        let result = async {
            if self.session_row(&*tx, source).await?.is_none() {
                return Err(Error::session_not_found(source));
            }
            let entries = self.entries_in(&*tx, source).await?;
            let Some(target) = entries.get(&at.0) else {
                return Ok((CutStatus::MissingEntry, End::Rollback));
            };
            if target.role != TranscriptRole::User {
                return Ok((CutStatus::NotUserMessage, End::Rollback));
            }
            if !self.create_session_in(&tx, &new).await? {
                return Err(HostErrorKind::SessionExists {
                    key: new.session_key.to_string(),
                }
                .into());
            }
            let now = self.inner.clock.now();
            let mut parent = None;
            for entry in crate::transcript::path_to(&entries, target.parent.as_ref().map(|p| p.0)) {
                let copy = NewTranscriptEntry {
                    role: entry.role,
                    content: entry.content,
                    idempotency_key: entry.idempotency_key,
                    metadata: entry.metadata,
                };
                parent = Some(
                    self.insert_entry(&tx, &new.session_key, parent, &copy, now)
                        .await?,
                );
            }
            tx.execute_raw(self.stmt(
                "UPDATE host_sessions SET active_leaf = $1 WHERE session_key = $2",
                vec![Value::from(parent), new.session_key.as_str().into()],
            ))
            .await
            .map_err(db_error)?;
            Ok((CutStatus::Created, End::Commit))
        }
        .await;
        self.finish(tx, result).await
    }

    /// Full-text search over transcripts (every word must match; SQLite FTS5 or PostgreSQL
    /// `simple` text search), optionally within one session, in append order.
    pub async fn search_transcripts(
        &self,
        query: &str,
        session: Option<&SessionKey>,
        limit: usize,
    ) -> Result<Vec<TranscriptHit>, Error> {
        if query.contains('\0') {
            return Err(tether_core::TextError::Nul {
                field: "search query",
            }
            .into());
        }
        let terms = search_terms(query);
        if terms.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let (sql, needle) = match self.inner.backend {
            DbBackend::Postgres => (
                format!(
                    "SELECT e.id, e.session_key, e.role, e.content FROM transcript_entries e \
                     WHERE {PG_SEARCH_VECTOR} @@ plainto_tsquery('simple', $1) \
                     AND ($2 IS NULL OR e.session_key = $2) ORDER BY e.id LIMIT $3"
                ),
                terms.join(" "),
            ),
            _ => (
                "SELECT e.id, e.session_key, e.role, e.content FROM transcript_fts f \
                 JOIN transcript_entries e ON e.id = f.rowid \
                 WHERE transcript_fts MATCH $1 AND ($2 IS NULL OR e.session_key = $2) \
                 ORDER BY e.id LIMIT $3"
                    .to_owned(),
                terms
                    .iter()
                    .map(|t| format!("\"{t}\""))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        };
        let rows = self
            .inner
            .db
            .query_all_raw(self.stmt(
                &sql,
                vec![
                    needle.into(),
                    Value::from(session.map(|s| s.as_str().to_owned())),
                    to_i64(limit as u64).into(),
                ],
            ))
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| {
                let role: String = r.try_get("", "role").map_err(db_error)?;
                Ok(TranscriptHit {
                    session_key: SessionKey::new(
                        r.try_get::<String>("", "session_key").map_err(db_error)?,
                    )?,
                    anchor: TranscriptAnchor(r.try_get("", "id").map_err(db_error)?),
                    role: role.parse().map_err(|e| corrupt("transcript role", e))?,
                    content: r.try_get("", "content").map_err(db_error)?,
                })
            })
            .collect()
    }
}

#[async_trait]
impl HostSessionStore for Store {
    async fn read_session(&self, key: &SessionKey) -> HostSessionRead {
        match self.session(key).await {
            Ok(Some(entry)) => HostSessionRead::Current(entry),
            Ok(None) => HostSessionRead::Missing,
            Err(err) => HostSessionRead::Failed(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::search_terms;

    #[test]
    fn search_terms_are_lowercased_words() {
        assert_eq!(
            search_terms("Hello, wide-World!"),
            ["hello", "wide", "world"]
        );
        assert!(search_terms(" \"*\" ").is_empty());
    }
}
