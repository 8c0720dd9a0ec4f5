//! Batched lease renewal on the SQL store: many heartbeats in one transaction (see
//! `docs/lifecycle.md`, "Batched heartbeats").
//!
//! PostgreSQL renews a whole batch with one statement whatever its size: `UPDATE … FROM
//! unnest(keys, tokens[, expiries]) WITH ORDINALITY … RETURNING` the renewed positions,
//! aggregated into one row. The lists travel as text parameters split on the server
//! (`string_to_array`), not as thousands of placeholders or per-element values: one statement
//! text (prepared once per connection), a few allocations per batch on the client instead of
//! several per lease, one result row instead of one per lease. A batch whose renewals share
//! one expiry (the lifecycle's batches do) sends it once instead of a list, and its pairs as
//! given, without looking for repeats on the client (a repeated pair renews one row once;
//! its answers are completed from the positions returned). The join probes
//! the primary key (an index nested loop). One statement is one transaction (autocommit).
//!
//! SQLite keeps `UPDATE … WHERE namespace = ? AND key IN (…) AND (key, lease_token) IN
//! (VALUES …) RETURNING key, lease_token` per 1,000 leases inside one `BEGIN IMMEDIATE`
//! transaction; a renewal is answered `true` when its exact (key, token) pair came back.
//!
//! A renewal only moves `lease_expires_at`, `lease_renewed_at` and the revision of a row whose
//! live lease is held by exactly the given token; value, epoch, holder and row expiry stay.
//! Batched renewals do not append a `renewed` lease event per lease: 100,000 leases renewing
//! every few seconds would add that many history rows each time. Acquisitions, takeovers,
//! releases, expiries and fenced writes are recorded as before.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, Value};
use tether_core::{Error, LeaseRenewal, Namespace, Timestamp};

use super::{End, Store, db_error};

/// SQLite renewals per statement: 3 bound values each, far below SQLite's limit.
const CHUNK: usize = 1000;

/// Separates the keys (and the tokens) of a PostgreSQL batch in one text parameter. Keys and
/// tokens never contain control characters (both are validated on construction); a batch
/// with one anyway is refused rather than split wrongly.
const SEPARATOR: char = '\n';

/// The PostgreSQL renewal: `$1` now (renewal time and liveness bound), `$2` namespace, `$3`
/// keys, `$4` tokens (both [`SEPARATOR`]-separated), `$5` new expiries (comma-separated
/// milliseconds), position `i` of each list belonging together. Answers one row: how many
/// leases were renewed (`renewed`) and the 1-based positions renewed, comma-separated
/// (`positions`, `NULL` when none; text rather than an array, so that decoding needs no array
/// support in the driver build). The `key` column is `COLLATE "C"`, which wins over the
/// default collation of the split text, so the join probes the primary key.
const PG_RENEW: &str = "WITH renewed AS (UPDATE binding_records AS b \
     SET lease_expires_at = v.expires_at, lease_renewed_at = $1, revision = b.revision + 1 \
     FROM unnest(string_to_array($3, E'\\n'), string_to_array($4, E'\\n'), \
     string_to_array($5, ',')::bigint[]) WITH ORDINALITY AS v(key, token, expires_at, i) \
     WHERE b.namespace = $2 AND b.key = v.key AND b.lease_token = v.token \
     AND b.lease_expires_at > $1 AND (b.expires_at IS NULL OR b.expires_at > $1) \
     RETURNING v.i) \
     SELECT count(*) AS renewed, string_agg(i::text, ',') AS positions FROM renewed";

/// [`PG_RENEW`] for a batch whose renewals share one expiry: `$5` is that expiry (milliseconds)
/// instead of a list.
const PG_RENEW_AT: &str = "WITH renewed AS (UPDATE binding_records AS b \
     SET lease_expires_at = $5, lease_renewed_at = $1, revision = b.revision + 1 \
     FROM unnest(string_to_array($3, E'\\n'), string_to_array($4, E'\\n')) \
     WITH ORDINALITY AS v(key, token, i) \
     WHERE b.namespace = $2 AND b.key = v.key AND b.lease_token = v.token \
     AND b.lease_expires_at > $1 AND (b.expires_at IS NULL OR b.expires_at > $1) \
     RETURNING v.i) \
     SELECT count(*) AS renewed, string_agg(i::text, ',') AS positions FROM renewed";

/// The hasher of the in-batch index of `(key, token)` pairs: a multiply-rotate hash over
/// eight bytes at a time (the std SipHash costs more than the rest of a pair's encoding). Not
/// resistant to chosen collisions, which only this process's own owners could choose.
#[derive(Default)]
struct PairHasher(u64);

impl PairHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for PairHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        // The length keeps `"ab" + "c"` and `"a" + "bc"` apart.
        self.add(u64::from_le_bytes(word) ^ ((bytes.len() as u64) << 56));
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The 0-based positions in `text`, the `positions` answer of [`PG_RENEW`] (1-based,
/// comma-separated; empty for none), each checked to be below `len`. Allocation-free.
fn renewed_positions(text: &str, len: usize) -> impl Iterator<Item = Result<usize, Error>> + '_ {
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(move |position| {
            position
                .parse::<usize>()
                .ok()
                .and_then(|p| p.checked_sub(1))
                .filter(|i| *i < len)
                .ok_or_else(|| {
                    Error::other(format!("the lease renewal returned position {position:?}"))
                })
        })
}

impl Store {
    /// [`BindingStore::renew_leases`](tether_core::BindingStore::renew_leases) in one writer
    /// transaction.
    pub(crate) async fn renew_leases_batched(
        &self,
        ns: &Namespace,
        renewals: &[LeaseRenewal],
        now: Timestamp,
    ) -> Result<Vec<bool>, Error> {
        self.config(ns)?;
        if renewals.is_empty() {
            return Ok(Vec::new());
        }
        if self.backend() == DbBackend::Postgres {
            return self.renew_postgres(ns, renewals, now).await;
        }
        let tx = self.begin_write().await?;
        let result = self.renew_in(&tx, ns, renewals, now).await;
        let renewed = self.finish(tx, result.map(|r| (r, End::Commit))).await?;
        // A row is keyed by its key within the namespace and holds one lease token: a renewal
        // was applied exactly when its key's row came back with its token.
        Ok(renewals
            .iter()
            .map(|r| {
                renewed
                    .get(r.key.as_str())
                    .is_some_and(|token| token == r.token.as_str())
            })
            .collect())
    }

    /// One `UPDATE … FROM unnest(…)` statement. A `(key, token)` pair given twice is renewed
    /// once, to the later of its expiries (what SQLite's statements in expiry order leave),
    /// and both answers are that renewal's.
    ///
    /// A batch whose renewals share one expiry (the lifecycle's) is sent as given, without
    /// looking for repeated pairs: PostgreSQL updates a row at most once per statement, so a
    /// repeated pair is renewed once and only one of its positions comes back; the others are
    /// answered from it afterwards ([`answer_repeats`]), which costs something only when a
    /// batch was not renewed whole.
    async fn renew_postgres(
        &self,
        ns: &Namespace,
        renewals: &[LeaseRenewal],
        now: Timestamp,
    ) -> Result<Vec<bool>, Error> {
        let batch = PgBatch::encode(renewals)?;
        let as_given = batch.as_given();
        let mut values: Vec<Value> = Vec::with_capacity(5);
        values.push(now.as_millis().into());
        values.push(ns.as_str().into());
        values.push(batch.keys.into());
        values.push(batch.tokens.into());
        let sql = match batch.expiries {
            PgExpiries::One(at) => {
                values.push(at.into());
                PG_RENEW_AT
            }
            PgExpiries::Each(list) => {
                values.push(list.into());
                PG_RENEW
            }
        };
        let row = self
            .connection()
            .query_one_raw(self.stmt(sql, values))
            .await
            .map_err(super::autocommit_error)?
            .ok_or_else(|| Error::other("the lease renewal returned no row"))?;
        let count: i64 = row.try_get("", "renewed").map_err(db_error)?;
        let renewed = if usize::try_from(count).ok() == Some(batch.pairs) {
            // Each position matches at most one row (rows are keyed by namespace and key) and
            // each row is updated, so returned, at most once: the positions returned are
            // distinct, and as many as were sent are all of them.
            vec![true; batch.pairs]
        } else {
            let positions: Option<String> = row.try_get("", "positions").map_err(db_error)?;
            let mut renewed = vec![false; batch.pairs];
            for i in renewed_positions(positions.as_deref().unwrap_or(""), batch.pairs) {
                renewed[i?] = true;
            }
            if as_given {
                answer_repeats(renewals, &mut renewed);
            }
            renewed
        };
        Ok(match batch.slot {
            None => renewed,
            Some(slot) => slot.into_iter().map(|i| renewed[i]).collect(),
        })
    }

    async fn renew_in(
        &self,
        tx: &DatabaseTransaction,
        ns: &Namespace,
        renewals: &[LeaseRenewal],
        now: Timestamp,
    ) -> Result<HashMap<String, String>, Error> {
        // Renewals of one tick share their expiry: one statement per expiry and chunk.
        let mut by_expiry: BTreeMap<Timestamp, Vec<&LeaseRenewal>> = BTreeMap::new();
        for r in renewals {
            by_expiry.entry(r.expires_at).or_default().push(r);
        }
        // Each renewed row's key and lease token.
        let mut renewed = HashMap::with_capacity(renewals.len());
        for (expires_at, group) in by_expiry {
            for chunk in group.chunks(CHUNK) {
                let rows = tx
                    .query_all_raw(self.renew_statement(ns, chunk, expires_at, now))
                    .await
                    .map_err(db_error)?;
                for row in rows {
                    let key: String = row.try_get("", "key").map_err(db_error)?;
                    let token: String = row.try_get("", "lease_token").map_err(db_error)?;
                    renewed.insert(key, token);
                }
            }
        }
        Ok(renewed)
    }

    /// `UPDATE … WHERE namespace = ? AND key IN (…) AND (key, lease_token) IN (VALUES …)`: the
    /// key list lets both engines probe the primary key; the row-value list pairs each key with
    /// its exact token. Placeholders are numbered in order of appearance (SQLite binds
    /// positionally).
    fn renew_statement(
        &self,
        ns: &Namespace,
        chunk: &[&LeaseRenewal],
        expires_at: Timestamp,
        now: Timestamp,
    ) -> sea_orm::Statement {
        let mut values: Vec<Value> = Vec::with_capacity(chunk.len() * 3 + 6);
        let mut sql = String::with_capacity(256 + chunk.len() * 24);
        sql.push_str(
            "UPDATE binding_records SET lease_expires_at = $1, lease_renewed_at = $2, \
             revision = revision + 1 WHERE namespace = $3 AND key IN (",
        );
        values.push(expires_at.as_millis().into());
        values.push(now.as_millis().into());
        values.push(ns.as_str().into());
        let mut n = 4;
        for (i, r) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            let _ = write!(sql, "${n}");
            n += 1;
            values.push(r.key.as_str().into());
        }
        sql.push_str(") AND (key, lease_token) IN (VALUES ");
        for (i, r) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push_str(", ");
            }
            let _ = write!(sql, "(${n}, ${})", n + 1);
            n += 2;
            values.push(r.key.as_str().into());
            values.push(r.token.as_str().into());
        }
        let _ = write!(
            sql,
            ") AND lease_expires_at > ${n} AND (expires_at IS NULL OR expires_at > ${}) RETURNING key, lease_token",
            n + 1
        );
        values.push(now.as_millis().into());
        values.push(now.as_millis().into());
        self.stmt(&sql, values)
    }
}

/// The parameters of one PostgreSQL renewal ([`PG_RENEW`] or [`PG_RENEW_AT`]).
#[derive(Debug)]
struct PgBatch {
    /// The distinct keys, [`SEPARATOR`]-separated.
    keys: String,
    /// Their tokens, likewise.
    tokens: String,
    expiries: PgExpiries,
    /// How many `(key, token)` pairs were sent.
    pairs: usize,
    /// Each renewal's pair, when some pair was given more than once and the batch was
    /// reduced to distinct pairs (else renewal `i` is pair `i`).
    slot: Option<Vec<usize>>,
}

/// The new expiries of a [`PgBatch`], in milliseconds.
#[derive(Debug, PartialEq, Eq)]
enum PgExpiries {
    /// Every pair's.
    One(i64),
    /// Pair by pair, comma-separated.
    Each(String),
}

impl PgBatch {
    /// Encodes `renewals` (not empty). When they share one expiry, every renewal as given,
    /// in order (a repeated pair is sent twice, and renewed once: see
    /// [`Store::renew_postgres`]); else distinct `(key, token)` pairs in first-seen order, each
    /// with its latest expiry. A key or token containing [`SEPARATOR`] is refused.
    fn encode(renewals: &[LeaseRenewal]) -> Result<Self, Error> {
        let first = renewals.first().map_or(0, |r| r.expires_at.as_millis());
        let (keys_len, tokens_len, shared) =
            renewals.iter().fold((0, 0, true), |(k, t, shared), r| {
                (
                    k + r.key.as_str().len() + 1,
                    t + r.token.as_str().len() + 1,
                    shared && r.expires_at.as_millis() == first,
                )
            });
        let mut keys = String::with_capacity(keys_len);
        let mut tokens = String::with_capacity(tokens_len);
        if shared {
            for (n, r) in renewals.iter().enumerate() {
                if n > 0 {
                    keys.push(SEPARATOR);
                    tokens.push(SEPARATOR);
                }
                keys.push_str(r.key.as_str());
                tokens.push_str(r.token.as_str());
            }
            check_separators(&keys, &tokens, renewals.iter())?;
            return Ok(Self {
                keys,
                tokens,
                expiries: PgExpiries::One(first),
                pairs: renewals.len(),
                slot: None,
            });
        }
        // Each pair's renewal (its first) and latest expiry.
        let mut pairs: Vec<(&LeaseRenewal, i64)> = Vec::with_capacity(renewals.len());
        let mut index: HashMap<(&str, &str), usize, BuildHasherDefault<PairHasher>> =
            HashMap::with_capacity_and_hasher(renewals.len(), BuildHasherDefault::default());
        let mut slot: Option<Vec<usize>> = None;
        for (n, r) in renewals.iter().enumerate() {
            let (key, token) = (r.key.as_str(), r.token.as_str());
            let at = r.expires_at.as_millis();
            let next = pairs.len();
            let i = *index.entry((key, token)).or_insert(next);
            if i == next {
                if next > 0 {
                    keys.push(SEPARATOR);
                    tokens.push(SEPARATOR);
                }
                keys.push_str(key);
                tokens.push_str(token);
                pairs.push((r, at));
            } else {
                pairs[i].1 = pairs[i].1.max(at);
                slot.get_or_insert_with(|| (0..n).collect());
            }
            if let Some(slot) = &mut slot {
                slot.push(i);
            }
        }
        drop(index);
        check_separators(&keys, &tokens, pairs.iter().map(|(r, _)| *r))?;
        // Expiries differ (else the batch went as given above).
        let mut list = String::with_capacity(pairs.len() * 15);
        for (n, (_, at)) in pairs.iter().enumerate() {
            if n > 0 {
                list.push(',');
            }
            let _ = write!(list, "{at}");
        }
        Ok(Self {
            keys,
            tokens,
            expiries: PgExpiries::Each(list),
            pairs: pairs.len(),
            slot,
        })
    }

    /// Whether the batch was sent as given, pair `i` being renewal `i` even where a pair
    /// repeats: exactly the batches of one shared expiry (see [`PgBatch::encode`]).
    fn as_given(&self) -> bool {
        matches!(self.expiries, PgExpiries::One(_))
    }
}

/// Refuses a batch whose joined `keys` or `tokens` hold a [`SEPARATOR`] other than those put
/// between the `sent` renewals, naming a culprit. One pass over each list instead of one
/// search per key and token.
fn check_separators<'a>(
    keys: &str,
    tokens: &str,
    sent: impl ExactSizeIterator<Item = &'a LeaseRenewal> + Clone,
) -> Result<(), Error> {
    let separators = sent.len().saturating_sub(1);
    if count_separators(keys) == separators && count_separators(tokens) == separators {
        return Ok(());
    }
    let culprit = sent
        .clone()
        .find(|r| r.key.as_str().contains(SEPARATOR) || r.token.as_str().contains(SEPARATOR));
    let key = culprit.map_or("", |r| r.key.as_str());
    Err(Error::other(format!(
        "cannot renew the lease of {key}: a control character in its key or token"
    )))
}

/// Completes the answers of a batch sent as given ([`PgBatch::as_given`]): a renewal refused
/// whose `(key, token)` pair was renewed at another position of the batch is answered `true`
/// (the statement renewed that row once, to the batch's one expiry, and returned one of the
/// pair's positions). Nothing to do when every renewal or none was renewed.
fn answer_repeats(renewals: &[LeaseRenewal], renewed: &mut [bool]) {
    fn pair(r: &LeaseRenewal) -> (&str, &str) {
        (r.key.as_str(), r.token.as_str())
    }
    if renewed.iter().all(|ok| *ok) || !renewed.iter().any(|ok| *ok) {
        return;
    }
    let refused: HashSet<(&str, &str), BuildHasherDefault<PairHasher>> = renewals
        .iter()
        .zip(renewed.iter())
        .filter(|(_, ok)| !**ok)
        .map(|(r, _)| pair(r))
        .collect();
    let again: HashSet<(&str, &str), BuildHasherDefault<PairHasher>> = renewals
        .iter()
        .zip(renewed.iter())
        .filter(|(r, ok)| **ok && refused.contains(&pair(r)))
        .map(|(r, _)| pair(r))
        .collect();
    if again.is_empty() {
        return;
    }
    for (r, ok) in renewals.iter().zip(renewed.iter_mut()) {
        if !*ok && again.contains(&pair(r)) {
            *ok = true;
        }
    }
}

/// How many [`SEPARATOR`]s `text` holds.
fn count_separators(text: &str) -> usize {
    let separator = SEPARATOR as u8;
    text.as_bytes().iter().filter(|b| **b == separator).count()
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher as _;
    use std::sync::Arc;
    use std::time::Duration;

    use tether_core::{
        BindingId, BindingKey, BindingStore, FakeClock, LeaseToken, LeaseWrite, NamespaceConfig,
        RowWrite,
    };

    use super::*;
    use crate::{MemoryStore, StoreOptions};

    fn key(i: usize) -> BindingKey {
        BindingKey::conversation(&BindingId::new(format!("b-{i}")).unwrap())
    }

    fn token(i: usize) -> LeaseToken {
        LeaseToken::new(format!("token-{i}")).unwrap()
    }

    /// Rows 0..n with leases of `token(i)` expiring at 10 s; row `n - 1` expired at 1 s.
    async fn seed(store: &dyn BindingStore, ns: &Namespace, n: usize) {
        store
            .register_namespace(NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
        for i in 0..n {
            let expires_at = if i == n - 1 { 1_000 } else { 10_000 };
            let row = RowWrite {
                value: format!("{{\"i\":{i}}}").into_bytes(),
                lease: Some(LeaseWrite {
                    token: token(i),
                    expires_at: Timestamp::from_millis(expires_at),
                    holder: Some("h".into()),
                }),
            };
            assert!(
                store
                    .register_if_absent(ns, &key(i), row, None)
                    .await
                    .unwrap()
            );
        }
    }

    /// Renews rows 0..n (row 1 with a wrong token) at `now` = 5 s, to 20 s.
    async fn check(store: &dyn BindingStore, ns: &Namespace, n: usize) {
        let now = Timestamp::from_millis(5_000);
        let before = store.observe(ns, &key(0)).await.unwrap();
        let renewals: Vec<LeaseRenewal> = (0..n)
            .map(|i| LeaseRenewal {
                key: key(i),
                token: if i == 1 { token(99) } else { token(i) },
                expires_at: Timestamp::from_millis(20_000),
            })
            .collect();
        let renewed = store.renew_leases(ns, &renewals, now).await.unwrap();
        let expected: Vec<bool> = (0..n).map(|i| i != 1 && i != n - 1).collect();
        assert_eq!(renewed, expected);
        let row = store.lookup(ns, &key(0)).await.unwrap().unwrap();
        let lease = row.lease.as_ref().unwrap();
        assert_eq!(lease.expires_at, Timestamp::from_millis(20_000));
        assert_eq!(lease.token, token(0));
        assert_eq!(lease.holder.as_deref(), Some("h"));
        assert_eq!(row.value, b"{\"i\":0}");
        let old = before.row.unwrap();
        assert_eq!(
            lease.epoch,
            old.lease.unwrap().epoch,
            "renewal keeps the epoch"
        );
        assert_ne!(row.revision, old.revision, "renewal changes the revision");
        let wrong = store.lookup(ns, &key(1)).await.unwrap().unwrap();
        assert_eq!(
            wrong.lease.unwrap().expires_at,
            Timestamp::from_millis(10_000),
            "a foreign token renews nothing"
        );
        assert!(
            store.renew_leases(ns, &[], now).await.unwrap().is_empty(),
            "an empty batch is a no-op"
        );
    }

    /// A store on `url` whose clock starts at 0, with [`seed`]'s `n` rows in namespace
    /// `renew`; the clock then reads 5 s.
    async fn seeded(url: &str, n: usize) -> (Store, Namespace) {
        let clock = Arc::new(FakeClock::new(Timestamp::from_millis(0)));
        let store = Store::open_with(StoreOptions::new(url).clock(clock.clone()))
            .await
            .unwrap();
        let ns = Namespace::new("renew").unwrap();
        seed(&store, &ns, n).await;
        clock.advance(Duration::from_secs(5));
        (store, ns)
    }

    /// Runs `check` on a store over a fresh PostgreSQL database named after `label`, seeded as
    /// [`seeded`] does with `n` rows; nothing when no server answers.
    #[cfg(feature = "test-support")]
    async fn on_postgres(label: &str, n: usize, check: impl AsyncFnOnce(&Store, &Namespace)) {
        let Some(db) = crate::testing::PgTestDatabase::create(label).await else {
            return;
        };
        let (store, ns) = seeded(db.url(), n).await;
        check(&store, &ns).await;
        store.close().await.unwrap();
        db.cleanup().await;
    }

    #[tokio::test]
    async fn sql_batch_renews_exactly_the_live_leases_of_the_given_tokens() {
        // More rows than one chunk.
        let n = CHUNK + 5;
        let (store, ns) = seeded("sqlite::memory:", n).await;
        check(&store, &ns, n).await;
    }

    #[cfg(feature = "test-support")]
    #[tokio::test]
    async fn postgres_batch_renews_exactly_the_live_leases_of_the_given_tokens() {
        let n = CHUNK + 5;
        on_postgres("renew", n, async |store, ns| check(store, ns, n).await).await;
    }

    /// A lease given twice in one batch is renewed to the later expiry (both answers `true`);
    /// the same key under a foreign token is refused. SQL stores only.
    async fn check_repeats(store: &Store, ns: &Namespace) {
        let now = Timestamp::from_millis(5_000);
        let renewal = |token: LeaseToken, at: i64| LeaseRenewal {
            key: key(0),
            token,
            expires_at: Timestamp::from_millis(at),
        };
        let renewals = [
            renewal(token(0), 30_000),
            renewal(token(7), 40_000),
            renewal(token(0), 20_000),
        ];
        let renewed = store.renew_leases(ns, &renewals, now).await.unwrap();
        assert_eq!(renewed, vec![true, false, true]);
        let row = store.lookup(ns, &key(0)).await.unwrap().unwrap();
        let lease = row.lease.unwrap();
        assert_eq!(lease.expires_at, Timestamp::from_millis(30_000));
        assert_eq!(lease.token, token(0));
    }

    /// Pairs repeated in a batch of one shared expiry (the lifecycle's batches): each answer is
    /// its pair's, whichever position the database renewed; a repeated live pair is renewed
    /// once, a repeated dead one is refused at every position. Rows of [`seed`] with `n = 3`
    /// (row 2 expired).
    async fn check_repeats_at_one_expiry(store: &dyn BindingStore, ns: &Namespace) {
        let now = Timestamp::from_millis(5_000);
        let before = store.lookup(ns, &key(0)).await.unwrap().unwrap();
        let renewal = |k: usize, t: usize| LeaseRenewal {
            key: key(k),
            token: token(t),
            expires_at: Timestamp::from_millis(30_000),
        };
        let renewals = [
            renewal(0, 0),
            renewal(0, 7),
            renewal(1, 1),
            renewal(0, 0),
            renewal(2, 2),
            renewal(2, 2),
            renewal(1, 1),
            renewal(0, 0),
        ];
        let renewed = store.renew_leases(ns, &renewals, now).await.unwrap();
        assert_eq!(
            renewed,
            vec![true, false, true, true, false, false, true, true]
        );
        for k in [0, 1] {
            let row = store.lookup(ns, &key(k)).await.unwrap().unwrap();
            let lease = row.lease.unwrap();
            assert_eq!(lease.expires_at, Timestamp::from_millis(30_000));
            assert_eq!(lease.token, token(k));
        }
        let after = store.lookup(ns, &key(0)).await.unwrap().unwrap();
        assert_ne!(
            after.revision, before.revision,
            "renewal changes the revision"
        );
        // A pair refused at each of its positions stays refused beside a renewed one.
        let renewed = store
            .renew_leases(ns, &[renewal(0, 7), renewal(1, 1), renewal(0, 7)], now)
            .await
            .unwrap();
        assert_eq!(renewed, vec![false, true, false]);
    }

    #[tokio::test]
    async fn sqlite_batch_answers_repeated_pairs_of_one_expiry() {
        let (store, ns) = seeded("sqlite::memory:", 3).await;
        check_repeats_at_one_expiry(&store, &ns).await;
    }

    #[tokio::test]
    async fn the_default_renewal_answers_repeated_pairs_of_one_expiry() {
        let clock = Arc::new(FakeClock::new(Timestamp::from_millis(0)));
        let store = MemoryStore::new(clock.clone());
        let ns = Namespace::new("renew").unwrap();
        seed(&store, &ns, 3).await;
        clock.advance(Duration::from_secs(5));
        check_repeats_at_one_expiry(&store, &ns).await;
    }

    #[cfg(feature = "test-support")]
    #[tokio::test]
    async fn postgres_batch_answers_repeated_pairs_of_one_expiry() {
        on_postgres("renew_repeat_one", 3, async |store, ns| {
            check_repeats_at_one_expiry(store, ns).await;
        })
        .await;
    }

    #[tokio::test]
    async fn sqlite_batch_renews_a_repeated_lease_to_its_later_expiry() {
        let (store, ns) = seeded("sqlite::memory:", 2).await;
        check_repeats(&store, &ns).await;
    }

    #[cfg(feature = "test-support")]
    #[tokio::test]
    async fn postgres_batch_renews_a_repeated_lease_to_its_later_expiry() {
        on_postgres("renew_repeat", 2, async |store, ns| {
            check_repeats(store, ns).await
        })
        .await;
    }

    fn renewal(key: &str, token: &str, at: i64) -> LeaseRenewal {
        LeaseRenewal {
            key: BindingKey::conversation(&BindingId::new(key).unwrap()),
            token: LeaseToken::new(token).unwrap(),
            expires_at: Timestamp::from_millis(at),
        }
    }

    #[test]
    fn a_batch_encodes_distinct_pairs_once_with_their_shared_expiry() {
        let renewals = [
            renewal("a,b", "t,1", 9_000),
            renewal("ключ ü 🔑", "tök", 9_000),
            renewal("c", "t 3", 9_000),
        ];
        let batch = PgBatch::encode(&renewals).unwrap();
        assert_eq!(
            batch.keys,
            "conversation:a,b\nconversation:ключ ü 🔑\nconversation:c"
        );
        assert_eq!(batch.tokens, "t,1\ntök\nt 3");
        assert_eq!(batch.expiries, PgExpiries::One(9_000));
        assert_eq!(batch.pairs, 3);
        assert!(
            batch.slot.is_none(),
            "no pair repeated: renewal i is pair i"
        );
        assert!(batch.as_given());
    }

    #[test]
    fn a_batch_of_one_expiry_is_sent_as_given_repeats_included() {
        let renewals = [
            renewal("a", "t0", 9_000),
            renewal("a", "t7", 9_000),
            renewal("a", "t0", 9_000),
        ];
        let batch = PgBatch::encode(&renewals).unwrap();
        assert_eq!(batch.keys, "conversation:a\nconversation:a\nconversation:a");
        assert_eq!(batch.tokens, "t0\nt7\nt0");
        assert_eq!(batch.expiries, PgExpiries::One(9_000));
        assert_eq!(batch.pairs, 3);
        assert!(batch.slot.is_none());
        assert!(batch.as_given());
    }

    #[test]
    fn a_refused_repeat_of_a_renewed_pair_is_answered_renewed() {
        let renewals = [
            renewal("a", "t0", 9_000),
            renewal("a", "t7", 9_000),
            renewal("b", "t1", 9_000),
            renewal("a", "t0", 9_000),
            renewal("b", "t1", 9_000),
        ];
        // The database returned position 3 for ("a", "t0") and none for ("b", "t1").
        let mut renewed = vec![false, false, false, true, false];
        answer_repeats(&renewals, &mut renewed);
        assert_eq!(renewed, vec![true, false, false, true, false]);
        let mut none = vec![false; 5];
        answer_repeats(&renewals, &mut none);
        assert_eq!(none, vec![false; 5]);
    }

    #[test]
    fn a_separator_no_renewal_accounts_for_is_refused() {
        let sent = [renewal("a", "t", 1), renewal("b", "u", 1)];
        assert!(check_separators("a\nb", "t\nu", sent.iter()).is_ok());
        assert!(check_separators("a\nb\nc", "t\nu", sent.iter()).is_err());
        assert!(check_separators("a\nb", "t\n\nu", sent.iter()).is_err());
    }

    #[test]
    fn a_batch_lists_differing_expiries_and_maps_repeats_to_their_pair() {
        let renewals = [
            renewal("a", "t0", 30_000),
            renewal("a", "t7", 40_000),
            renewal("b", "t0", -5),
            renewal("a", "t0", 50_000),
            renewal("a", "t7", 20_000),
        ];
        let batch = PgBatch::encode(&renewals).unwrap();
        assert_eq!(batch.keys, "conversation:a\nconversation:a\nconversation:b");
        assert_eq!(batch.tokens, "t0\nt7\nt0");
        assert_eq!(
            batch.expiries,
            PgExpiries::Each("50000,40000,-5".to_owned()),
            "each pair's latest expiry"
        );
        assert_eq!(batch.pairs, 3);
        assert_eq!(batch.slot, Some(vec![0, 1, 2, 0, 1]));
    }

    #[test]
    fn separators_are_counted_in_the_joined_lists() {
        assert_eq!(count_separators(""), 0);
        assert_eq!(count_separators("a\nb,c\n\nü"), 3);
    }

    #[test]
    fn the_pair_hasher_tells_apart_pairs_split_differently() {
        let hash = |key: &str, token: &str| {
            BuildHasherDefault::<PairHasher>::default().hash_one((key, token))
        };
        assert_eq!(hash("conversation:a", "t"), hash("conversation:a", "t"));
        assert_ne!(hash("ab", "c"), hash("a", "bc"));
        assert_ne!(hash("conversation:a", "t"), hash("conversation:b", "t"));
        assert_ne!(hash("12345678", ""), hash("1234567", "8"));
    }

    #[test]
    fn renewed_positions_are_one_based_and_checked() {
        let parse = |text: &str, len: usize| -> Result<Vec<usize>, Error> {
            renewed_positions(text, len).collect()
        };
        assert_eq!(parse("", 3).unwrap(), Vec::<usize>::new());
        assert_eq!(parse("3,1", 3).unwrap(), vec![2, 0]);
        assert!(parse("4", 3).is_err(), "past the batch");
        assert!(parse("0", 3).is_err(), "positions start at 1");
        assert!(parse("1,x", 3).is_err());
    }

    /// Keys and tokens with commas, spaces and non-ASCII characters renew exactly (the lists
    /// are split on newlines only), beside a refused foreign token.
    async fn check_unusual_keys(store: &Store) {
        let ns = Namespace::new("renew_unusual").unwrap();
        store
            .register_namespace(NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
        let names = [("a,b", "t,1"), ("ключ ü 🔑", "tök 2"), ("a", "b,t,1")];
        for (key, token) in names {
            let r = renewal(key, token, 10_000);
            let row = RowWrite {
                value: b"{}".to_vec(),
                lease: Some(LeaseWrite {
                    token: r.token.clone(),
                    expires_at: r.expires_at,
                    holder: None,
                }),
            };
            assert!(
                store
                    .register_if_absent(&ns, &r.key, row, None)
                    .await
                    .unwrap()
            );
        }
        let mut renewals: Vec<LeaseRenewal> = names
            .iter()
            .map(|(key, token)| renewal(key, token, 20_000))
            .collect();
        // "a" under "b,t,1" is not "a,b" under "t,1".
        renewals.push(renewal("a", "t,1", 20_000));
        let renewed = store
            .renew_leases(&ns, &renewals, Timestamp::from_millis(5_000))
            .await
            .unwrap();
        assert_eq!(renewed, vec![true, true, true, false]);
        for r in &renewals[..3] {
            let row = store.lookup(&ns, &r.key).await.unwrap().unwrap();
            let lease = row.lease.unwrap();
            assert_eq!(lease.expires_at, Timestamp::from_millis(20_000));
            assert_eq!(lease.token, r.token);
        }
    }

    #[tokio::test]
    async fn sqlite_batch_renews_keys_with_commas_and_unicode() {
        let (store, _) = seeded("sqlite::memory:", 1).await;
        check_unusual_keys(&store).await;
    }

    #[cfg(feature = "test-support")]
    #[tokio::test]
    async fn postgres_batch_renews_keys_with_commas_and_unicode() {
        on_postgres("renew_unusual", 1, async |store, _| {
            check_unusual_keys(store).await
        })
        .await;
    }

    #[tokio::test]
    async fn sweeping_an_expired_leased_row_records_its_epoch() {
        let clock = Arc::new(FakeClock::new(Timestamp::from_millis(0)));
        let store = Store::open_with(StoreOptions::new("sqlite::memory:").clock(clock.clone()))
            .await
            .unwrap();
        let ns = Namespace::new("sweep").unwrap();
        store
            .register_namespace(NamespaceConfig::new(ns.clone()))
            .await
            .unwrap();
        let row = RowWrite {
            value: b"{}".to_vec(),
            lease: Some(LeaseWrite {
                token: token(0),
                expires_at: Timestamp::from_millis(500),
                holder: None,
            }),
        };
        assert!(
            store
                .register_if_absent(&ns, &key(0), row, Some(Duration::from_secs(1)))
                .await
                .unwrap()
        );
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            crate::StoreAdmin::sweep_expired(&store, 10).await.unwrap(),
            1
        );
    }

    #[tokio::test]
    async fn the_default_renewal_agrees_with_the_sql_batch() {
        let clock = Arc::new(FakeClock::new(Timestamp::from_millis(0)));
        let store = MemoryStore::new(clock.clone());
        let ns = Namespace::new("renew").unwrap();
        seed(&store, &ns, 4).await;
        clock.advance(Duration::from_secs(5));
        check(&store, &ns, 4).await;
    }
}
