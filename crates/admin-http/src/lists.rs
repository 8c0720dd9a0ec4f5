//! The filtered, cursor-paged lists shared by the API and the dashboard: sessions (search by
//! key), binding rows (by namespace, holder, search), lease events (by namespace, key, kind,
//! holder), quarantined keys (search) and the audit trail (by actor, action, outcome); and the
//! naming of the host session a binding key belongs to.
//!
//! The store pages each list by a keyset cursor. A filter the store does not evaluate is
//! applied here while the store's pages are read in order; one request examines at most
//! [`SCAN_BUDGET`] rows, and when it stops there its cursor continues after the last row it
//! examined, so a page may hold fewer rows than asked and still have a successor.

use std::collections::{HashMap, HashSet};

use tether_core::{BindingKey, BindingKeyKind, HostSessionEntry, Namespace, QuarantineEntry};
use tether_storage::{
    AuditEntry, BindingRecord, LeaseEvent, QuarantineCursor, SessionFilter, Store,
    session_binding_keys,
};

use crate::error::ApiError;

/// Most rows one filtered request examines before it answers with what it found and a cursor.
pub(crate) const SCAN_BUDGET: usize = 5_000;

/// Most host sessions read to name the sessions of one page of binding keys.
pub(crate) const NAMING_BUDGET: usize = 20_000;

/// Rows read from the store per step of a filtered scan.
const STEP: usize = 200;

/// Whether `haystack` contains `needle`, ignoring ASCII case.
pub(crate) fn contains_folded(haystack: &str, needle: &str) -> bool {
    haystack
        .to_ascii_lowercase()
        .contains(&needle.to_ascii_lowercase())
}

/// A search text: `None` when absent or blank.
pub(crate) fn search_text(raw: Option<&str>) -> Option<&str> {
    raw.map(str::trim).filter(|q| !q.is_empty())
}

/// The host session each binding key of a page belongs to, where the store knows it: a
/// physical key names the session whose current or previous generation it is, a stable key the
/// session whose key hashes to it. Conversation keys name no session.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionNames(HashMap<String, String>);

impl SessionNames {
    /// Names the sessions of `keys`, reading at most [`NAMING_BUDGET`] host sessions.
    pub(crate) async fn resolve<'a>(
        store: &Store,
        keys: impl IntoIterator<Item = &'a BindingKey>,
    ) -> Result<Self, ApiError> {
        let mut wanted: HashSet<&str> = keys
            .into_iter()
            .filter(|k| matches!(k.kind(), BindingKeyKind::Physical | BindingKeyKind::Stable))
            .map(BindingKey::as_str)
            .collect();
        let mut names = HashMap::new();
        let mut after = None;
        let mut read = 0;
        while !wanted.is_empty() && read < NAMING_BUDGET {
            let page = store
                .list_sessions(&SessionFilter {
                    after: after.take(),
                    limit: 500,
                    ..SessionFilter::default()
                })
                .await?;
            read += page.sessions.len();
            for entry in &page.sessions {
                let previous = entry
                    .previous_session_id
                    .as_ref()
                    .map(|p| BindingKey::physical(&entry.agent_id, p));
                for key in session_binding_keys(entry).iter().chain(previous.as_ref()) {
                    if wanted.remove(key.as_str()) {
                        names.insert(key.to_string(), entry.session_key.to_string());
                    }
                }
            }
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        Ok(Self(names))
    }

    /// The session key `key` belongs to, if known.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.0.get(key).cloned()
    }
}

/// Reads a keyset-paged list in order, keeping the rows `keep` accepts, until `limit` rows are
/// kept, the list ends or [`SCAN_BUDGET`] rows were examined. `fetch(cursor, n)` reads the next
/// `n` rows after `cursor` (the first rows with `None`) and says where the next read starts
/// (`None` at the end); `position(row)` is the cursor that continues after `row`.
async fn scan<T, C, F, Fut>(
    first: Option<C>,
    limit: usize,
    mut fetch: F,
    position: impl Fn(&T) -> C,
    keep: impl Fn(&T) -> bool,
) -> Result<(Vec<T>, Option<C>), ApiError>
where
    C: Clone,
    F: FnMut(Option<C>, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<C>), ApiError>>,
{
    let mut out = Vec::new();
    let mut cursor = first;
    let mut examined = 0;
    loop {
        let (rows, next) = fetch(cursor.clone(), STEP).await?;
        let more = next.is_some();
        for row in rows {
            examined += 1;
            let here = position(&row);
            if keep(&row) {
                if out.len() == limit {
                    // One more match exists: the page is full and has a successor.
                    let last = out.last().map(&position);
                    return Ok((out, last));
                }
                out.push(row);
            }
            cursor = Some(here);
        }
        if !more {
            return Ok((out, None));
        }
        if examined >= SCAN_BUDGET {
            return Ok((out, cursor));
        }
        cursor = next.or(cursor);
    }
}

/// One page of host sessions: the store's filters, and `q` (a part of the session key, any
/// case) applied here.
pub(crate) async fn sessions(
    store: &Store,
    filter: SessionFilter,
    q: Option<&str>,
) -> Result<(Vec<HostSessionEntry>, Option<String>), ApiError> {
    let Some(q) = search_text(q) else {
        let page = store.list_sessions(&filter).await?;
        return Ok((page.sessions, page.next.map(|k| k.to_string())));
    };
    let (rows, next) = scan(
        filter.after.clone(),
        filter.limit,
        |after, n| {
            let filter = SessionFilter {
                after,
                limit: n,
                ..filter.clone()
            };
            async move {
                let page = store.list_sessions(&filter).await?;
                Ok((page.sessions, page.next))
            }
        },
        |e: &HostSessionEntry| e.session_key.clone(),
        |e| contains_folded(e.session_key.as_str(), q),
    )
    .await?;
    Ok((rows, next.map(|k| k.to_string())))
}

/// Which binding rows to list.
#[derive(Debug, Clone, Default)]
pub(crate) struct BindingQuery {
    /// Only this namespace.
    pub(crate) namespace: Option<Namespace>,
    /// Only rows with a live lease.
    pub(crate) leased_only: bool,
    /// Only rows whose lease is held by exactly this holder.
    pub(crate) holder: Option<String>,
    /// Only rows whose namespace, key or holder contains this text (any case).
    pub(crate) q: Option<String>,
    /// Continue after this row.
    pub(crate) after: Option<(Namespace, BindingKey)>,
    /// Page size.
    pub(crate) limit: usize,
}

/// One page of binding rows in (namespace, key) order; the cursor continues after the row it
/// names.
pub(crate) async fn bindings(
    store: &Store,
    query: &BindingQuery,
) -> Result<(Vec<BindingRecord>, Option<(Namespace, BindingKey)>), ApiError> {
    let holder = query.holder.as_deref().filter(|h| !h.is_empty());
    let q = search_text(query.q.as_deref());
    let position = |r: &BindingRecord| (r.namespace.clone(), r.key.clone());
    let fetch = |after: Option<(Namespace, BindingKey)>, n: usize| async move {
        let rows = store
            .list_bindings(
                query.namespace.as_ref(),
                query.leased_only,
                after.as_ref().map(|(n, k)| (n, k)),
                n + 1,
            )
            .await?;
        let next = (rows.len() > n).then(|| position(&rows[n - 1]));
        let mut rows = rows;
        rows.truncate(n);
        Ok((rows, next))
    };
    if holder.is_none() && q.is_none() {
        let (rows, next) = fetch(query.after.clone(), query.limit).await?;
        return Ok((rows, next));
    }
    scan(query.after.clone(), query.limit, fetch, position, |r| {
        let held_by = r.row.lease.as_ref().and_then(|l| l.holder.as_deref());
        holder.is_none_or(|h| held_by == Some(h))
            && q.is_none_or(|q| {
                contains_folded(r.namespace.as_str(), q)
                    || contains_folded(r.key.as_str(), q)
                    || held_by.is_some_and(|h| contains_folded(h, q))
            })
    })
    .await
}

/// Which lease events to list.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventQuery {
    /// Only events of this namespace.
    pub(crate) namespace: Option<Namespace>,
    /// Only events of this key.
    pub(crate) key: Option<BindingKey>,
    /// Only events of this kind (`acquired`, `renewed`, …).
    pub(crate) kind: Option<tether_storage::LeaseEventKind>,
    /// Only events naming exactly this holder.
    pub(crate) holder: Option<String>,
    /// Continue before this sequence number (newest first).
    pub(crate) before: Option<u64>,
    /// Page size.
    pub(crate) limit: usize,
}

/// One page of lease events, newest first; the cursor is the sequence number to continue
/// before.
pub(crate) async fn events(
    store: &Store,
    query: &EventQuery,
) -> Result<(Vec<LeaseEvent>, Option<u64>), ApiError> {
    let fetch = |before: Option<u64>, n: usize| async move {
        Ok(store.lease_events_page(before, n).await?)
    };
    let filtered = query.namespace.is_some()
        || query.key.is_some()
        || query.kind.is_some()
        || query.holder.as_deref().is_some_and(|h| !h.is_empty());
    if !filtered {
        return fetch(query.before, query.limit).await;
    }
    let holder = query.holder.as_deref().filter(|h| !h.is_empty());
    scan(
        query.before,
        query.limit,
        fetch,
        |e: &LeaseEvent| e.seq,
        |e| {
            query.namespace.as_ref().is_none_or(|n| *n == e.namespace)
                && query.key.as_ref().is_none_or(|k| *k == e.key)
                && query.kind.is_none_or(|k| k == e.kind)
                && holder.is_none_or(|h| e.holder.as_deref() == Some(h))
        },
    )
    .await
}

/// One page of quarantined keys, oldest first, with `q` (a part of the namespace, key or
/// reason, any case) applied here.
pub(crate) async fn quarantine(
    store: &Store,
    after: Option<QuarantineCursor>,
    limit: usize,
    q: Option<&str>,
) -> Result<(Vec<QuarantineEntry>, Option<QuarantineCursor>), ApiError> {
    let fetch = |after: Option<QuarantineCursor>, n: usize| async move {
        Ok(store.quarantine_page(after.as_ref(), n).await?)
    };
    let Some(q) = search_text(q) else {
        return fetch(after, limit).await;
    };
    scan(
        after,
        limit,
        fetch,
        |e: &QuarantineEntry| QuarantineCursor {
            quarantined_at: e.quarantined_at,
            namespace: e.namespace.clone(),
            key: e.key.clone(),
        },
        |e| {
            contains_folded(e.namespace.as_str(), q)
                || contains_folded(e.key.as_str(), q)
                || contains_folded(&e.reason, q)
        },
    )
    .await
}

/// Which audit entries to list.
#[derive(Debug, Clone, Default)]
pub(crate) struct AuditQuery {
    /// Only actions by exactly this actor.
    pub(crate) actor: Option<String>,
    /// Only this action (`delete_session`, `expire_lease`, `release_quarantine`).
    pub(crate) action: Option<String>,
    /// Only this outcome (`succeeded`, `refused`, `failed`, `started`).
    pub(crate) outcome: Option<String>,
    /// Continue before this entry id (newest first).
    pub(crate) before: Option<u64>,
    /// Page size.
    pub(crate) limit: usize,
}

/// One page of the audit trail, newest first; the cursor is the entry id to continue before.
pub(crate) async fn audit(
    store: &Store,
    query: &AuditQuery,
) -> Result<(Vec<AuditEntry>, Option<u64>), ApiError> {
    let fetch = |before: Option<u64>, n: usize| async move {
        let page = store.audit_page(before, n).await?;
        Ok((page.entries, page.next))
    };
    let pick = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    let (actor, action, outcome) = (
        pick(&query.actor),
        pick(&query.action),
        pick(&query.outcome),
    );
    if actor.is_none() && action.is_none() && outcome.is_none() {
        return fetch(query.before, query.limit).await;
    }
    scan(
        query.before,
        query.limit,
        fetch,
        |e: &AuditEntry| e.id,
        |e| {
            actor.as_deref().is_none_or(|a| e.actor == a)
                && action.as_deref().is_none_or(|a| e.action == a)
                && outcome.as_deref().is_none_or(|o| e.outcome.as_str() == o)
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::{SCAN_BUDGET, scan};
    use crate::error::ApiError;

    /// A keyset-paged list of the numbers `0..n`: rows after `cursor`, `step` at a time.
    async fn numbers(
        n: u32,
        cursor: Option<u32>,
        step: usize,
    ) -> Result<(Vec<u32>, Option<u32>), ApiError> {
        let start = cursor.map_or(0, |c| c + 1);
        let rows: Vec<u32> = (start..n).take(step).collect();
        let next = rows.last().copied().filter(|last| last + 1 < n);
        Ok((rows, next))
    }

    /// Every page of the numbers `keep` accepts among `0..n`, following the cursors.
    async fn pages(n: u32, keep: impl Fn(&u32) -> bool + Copy, limit: usize) -> Vec<Vec<u32>> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let (rows, next) = scan(
                cursor,
                limit,
                |c, step| numbers(n, c, step),
                |r: &u32| *r,
                keep,
            )
            .await
            .unwrap();
            out.push(rows);
            match next {
                Some(next) => cursor = Some(next),
                None => return out,
            }
        }
    }

    #[tokio::test]
    async fn filtered_scans_page_every_match_once_within_the_budget() {
        // Dense matches: full pages, the cursor after the last row kept.
        let dense = pages(1_000, |r| r % 3 == 0, 50).await;
        assert!(dense[..dense.len() - 1].iter().all(|p| p.len() == 50));
        let all: Vec<u32> = dense.concat();
        assert_eq!(all, (0..1_000).filter(|r| r % 3 == 0).collect::<Vec<_>>());

        // Sparse matches: a request stops after the budget with a short page and a cursor.
        let n = u32::try_from(SCAN_BUDGET * 3).unwrap();
        let sparse = pages(n, |r| r % 4_000 == 0, 10).await;
        // (Without the budget one request would hold all four matches: the limit is 10.)
        assert!(sparse.len() >= 3, "{sparse:?}");
        assert!(sparse.iter().all(|p| p.len() < 4), "{sparse:?}");
        assert_eq!(
            sparse.concat(),
            (0..n).filter(|r| r % 4_000 == 0).collect::<Vec<_>>()
        );

        // No match at all: every page empty, and the last one ends the list.
        let none = pages(n, |_| false, 10).await;
        assert!(none.iter().all(Vec::is_empty));
        assert!(none.len() >= 3);
    }
}
