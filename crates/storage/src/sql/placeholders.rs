//! The store's statements are written once, with PostgreSQL's numbered placeholders (`$1`,
//! `$2`, …, a value used as often as the text needs it); this module rewrites them for SQLite.
//!
//! SQLite reads `?NNN` as a numbered parameter, so `$n` → `?n` would do, but binding numbered
//! parameters is quadratic: SQLite keeps the names of a statement's numbered parameters in a
//! list it walks to answer `sqlite3_bind_parameter_name`, and the driver asks that for every
//! parameter it binds. A batch statement of a few hundred or a few thousand parameters (a group
//! commit's writes, a chunk of renewals) then spent more time binding than running: a fifth of
//! all CPU at 32 owners acquiring and releasing leases. Anonymous `?` parameters have no names
//! to walk, so the rewrite numbers nothing: each `$n` becomes `?` in order of appearance, with
//! its value (a value the text uses twice is bound twice). The driver binds the anonymous
//! parameters of a text with several statements in order across them, which is the order of
//! appearance too.
//!
//! The statements whose text depends only on a row count (a group commit's batch, a chunk of
//! lease events) are long and built often: [`TextCache`] makes each such text once per process,
//! already in the backend's own placeholders ([`push_param`]), and they skip the rewrite.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::OnceLock;

use sea_orm::{DbBackend, Value};

/// `sql` (with `$n` placeholders) and its `values` for SQLite: anonymous `?` placeholders and
/// the values in their order of appearance.
///
/// A text the rewrite cannot express with anonymous parameters — a bare `$`, or a placeholder
/// without a value (which SQLite binds as NULL) — keeps numbered ones (`?n`) and its values as
/// they are.
pub(crate) fn sqlite(sql: &str, values: Vec<Value>) -> (String, Vec<Value>) {
    let bytes = sql.as_bytes();
    let mut text = String::with_capacity(sql.len());
    let mut order: Vec<usize> = Vec::with_capacity(values.len());
    let mut copied = 0;
    let mut i = 0;
    while let Some(at) = bytes[i..].iter().position(|&b| b == b'$') {
        let dollar = i + at;
        let digits = bytes[dollar + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let number = sql[dollar + 1..dollar + 1 + digits].parse::<usize>().ok();
        let Some(n) = number.filter(|n| (1..=values.len()).contains(n)) else {
            return (sql.replace('$', "?"), values);
        };
        text.push_str(&sql[copied..dollar]);
        text.push('?');
        order.push(n - 1);
        i = dollar + 1 + digits;
        copied = i;
    }
    text.push_str(&sql[copied..]);
    // The common case: every value once, in order.
    if order.len() == values.len() && order.iter().enumerate().all(|(k, &n)| k == n) {
        return (text, values);
    }
    let bound = order.into_iter().map(|n| values[n].clone()).collect();
    (text, bound)
}

/// Appends the placeholder of parameter `n` (1-based) in the backend's own form: `$n` on
/// PostgreSQL, an anonymous `?` on SQLite. A text written with it binds its values in order
/// of appearance on SQLite, so every parameter must appear once, in order.
pub(crate) fn push_param(sql: &mut String, backend: DbBackend, n: usize) {
    if backend == DbBackend::Postgres {
        // Writing into a `String` cannot fail.
        let _ = write!(sql, "${n}");
    } else {
        sql.push('?');
    }
}

/// Statement texts that depend only on the backend and a row count from 1 to `N`, each made
/// once per process (with [`push_param`]) and then shared. A count outside that range is made
/// afresh each time.
///
/// The texts stay for the life of the process. Once every size has been used, the two caches
/// of the store (a batch of up to 64 writes, an event insert of up to 100 rows) hold about
/// 0.3 MB of text for SQLite and 0.5 MB for PostgreSQL (the batch texts alone measured 149 KB
/// and 226 KB).
pub(crate) struct TextCache<const N: usize> {
    postgres: [OnceLock<Box<str>>; N],
    sqlite: [OnceLock<Box<str>>; N],
}

impl<const N: usize> TextCache<N> {
    /// An empty cache.
    pub(crate) const fn new() -> Self {
        Self {
            postgres: [const { OnceLock::new() }; N],
            sqlite: [const { OnceLock::new() }; N],
        }
    }

    /// The text for `backend` and `rows`, made by `make` the first time.
    pub(crate) fn get(
        &'static self,
        backend: DbBackend,
        rows: usize,
        make: impl FnOnce() -> String,
    ) -> Cow<'static, str> {
        let slots = if backend == DbBackend::Postgres {
            &self.postgres
        } else {
            &self.sqlite
        };
        match rows.checked_sub(1).and_then(|at| slots.get(at)) {
            Some(slot) => Cow::Borrowed(slot.get_or_init(|| make().into_boxed_str())),
            None => Cow::Owned(make()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> Vec<Value> {
        values.iter().map(|&v| Value::from(v)).collect()
    }

    #[test]
    fn placeholders_in_order_become_anonymous_with_the_same_values() {
        let (sql, values) = sqlite(
            "UPDATE t SET a = $1 WHERE b = $2 AND c = $3",
            ints(&[1, 2, 3]),
        );
        assert_eq!(sql, "UPDATE t SET a = ? WHERE b = ? AND c = ?");
        assert_eq!(values, ints(&[1, 2, 3]));
    }

    #[test]
    fn reused_and_reordered_placeholders_bind_their_value_at_each_use() {
        let (sql, values) = sqlite(
            "SELECT $2, $1; INSERT INTO e VALUES ($1, $12, $2)",
            ints(&[10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120]),
        );
        assert_eq!(sql, "SELECT ?, ?; INSERT INTO e VALUES (?, ?, ?)");
        assert_eq!(values, ints(&[20, 10, 10, 120, 20]));
    }

    #[test]
    fn native_placeholders_are_numbered_on_postgres_and_anonymous_on_sqlite() {
        let mut sql = String::new();
        for n in [1, 2, 14] {
            push_param(&mut sql, DbBackend::Postgres, n);
            push_param(&mut sql, DbBackend::Sqlite, n);
        }
        assert_eq!(sql, "$1?$2?$14?");
    }

    #[test]
    fn a_cached_text_is_made_once_per_backend_and_count() {
        static CACHE: TextCache<2> = TextCache::new();
        let made = std::cell::Cell::new(0);
        let make = |backend: DbBackend, rows: usize| {
            made.set(made.get() + 1);
            format!("{backend:?} {rows}")
        };
        for _ in 0..3 {
            for backend in [DbBackend::Postgres, DbBackend::Sqlite] {
                for rows in [1, 2] {
                    let text = CACHE.get(backend, rows, || make(backend, rows));
                    assert!(matches!(text, Cow::Borrowed(_)));
                    assert_eq!(text, format!("{backend:?} {rows}"));
                }
            }
        }
        assert_eq!(made.get(), 4);
        // Outside the range: made afresh, not kept.
        for rows in [0, 3] {
            let text = CACHE.get(DbBackend::Sqlite, rows, || make(DbBackend::Sqlite, rows));
            assert!(matches!(text, Cow::Owned(_)));
        }
        assert_eq!(made.get(), 6);
    }

    #[test]
    fn a_text_without_placeholders_is_kept() {
        let (sql, values) = sqlite("SELECT 1", Vec::new());
        assert_eq!((sql.as_str(), values.len()), ("SELECT 1", 0));
    }

    #[test]
    fn what_anonymous_parameters_cannot_express_keeps_numbered_ones() {
        // A placeholder without a value (SQLite binds NULL), `$0`, a bare `$`.
        for text in ["SELECT $1, $3", "SELECT $0", "SELECT $ || $1"] {
            let (sql, values) = sqlite(text, ints(&[7, 8]));
            assert_eq!(sql, text.replace('$', "?"));
            assert_eq!(values, ints(&[7, 8]));
        }
    }

    /// The rewrite on a real SQLite connection: reused, reordered placeholders and a text of
    /// two statements read back the values they were given.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn the_rewritten_statements_run_on_sqlite_as_written() {
        use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
        let db = Database::connect("sqlite::memory:").await.expect("open");
        let run = |sql: &str, values: Vec<Value>| {
            let (sql, values) = sqlite(sql, values);
            Statement::from_sql_and_values(DbBackend::Sqlite, sql, values)
        };
        db.execute_raw(run(
            "CREATE TABLE e (a INTEGER, b INTEGER, c TEXT)",
            Vec::new(),
        ))
        .await
        .expect("create");
        let values = vec![Value::from(1_i64), Value::from(2_i64), Value::from("x")];
        db.execute_raw(run(
            "INSERT INTO e VALUES ($2, $1, $3); INSERT INTO e VALUES ($1, $1, $3 || $3)",
            values,
        ))
        .await
        .expect("insert");
        let rows = db
            .query_all_raw(run("SELECT a, b, c FROM e ORDER BY c", Vec::new()))
            .await
            .expect("select");
        let read: Vec<(i64, i64, String)> = rows
            .iter()
            .map(|r| {
                (
                    r.try_get("", "a").expect("a"),
                    r.try_get("", "b").expect("b"),
                    r.try_get("", "c").expect("c"),
                )
            })
            .collect();
        assert_eq!(read, vec![(2, 1, "x".to_owned()), (1, 1, "xx".to_owned())]);
    }
}
