//! Iterative helpers over `serde_json::Value` trees (no recursion on the call stack).

use serde_json::Value;

/// Whether `value` is a JSON string, array-free "truthy" value in the JavaScript sense.
pub(crate) fn is_truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The trimmed, non-empty string at `value`, if any.
pub(crate) fn trimmed_str(value: Option<&Value>) -> Option<&str> {
    value
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Drops a value of any nesting depth without recursing (the default `Drop` of
/// `serde_json::Value` recurses once per level).
pub fn drop_deep(value: Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

/// Deep equality of two values of any nesting depth, without recursion.
pub(crate) fn deep_equal(a: &Value, b: &Value) -> bool {
    let mut stack = vec![(a, b)];
    while let Some((x, y)) = stack.pop() {
        match (x, y) {
            (Value::Array(xs), Value::Array(ys)) => {
                if xs.len() != ys.len() {
                    return false;
                }
                stack.extend(xs.iter().zip(ys.iter()));
            }
            (Value::Object(xm), Value::Object(ym)) => {
                if xm.len() != ym.len() {
                    return false;
                }
                for (k, xv) in xm {
                    match ym.get(k) {
                        Some(yv) => stack.push((xv, yv)),
                        None => return false,
                    }
                }
            }
            (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => {
                return false;
            }
            (x, y) => {
                if x != y {
                    return false;
                }
            }
        }
    }
    true
}

/// Values nested at most this deep are copied with `Value::clone`, whose recursion is then
/// bounded (the limit equals `serde_json`'s own parser recursion limit); deeper values are
/// copied iteratively.
const CLONE_RECURSION_LIMIT: usize = 128;

/// Whether no array or object in `value` is nested more than `limit` levels deep (a scalar
/// has depth 0, `[1]` depth 1). Recurses at most `limit` levels.
fn depth_at_most(value: &Value, limit: usize) -> bool {
    fn within(child: &Value, limit: usize) -> bool {
        !matches!(child, Value::Array(_) | Value::Object(_)) || depth_at_most(child, limit - 1)
    }
    match value {
        Value::Array(items) => limit > 0 && items.iter().all(|v| within(v, limit)),
        Value::Object(map) => limit > 0 && map.values().all(|v| within(v, limit)),
        _ => true,
    }
}

/// Whether no array or object in `value` nests deeper than `limit` levels (recursing at most
/// `limit` levels).
pub(crate) fn depth_within(value: &Value, limit: usize) -> bool {
    depth_at_most(value, limit)
}

/// A deep copy of a value of any nesting depth. Values of ordinary depth are copied with
/// `Value::clone` (bounded recursion); deeper ones without recursion (`Value::clone` recurses
/// once per level).
pub fn deep_clone(value: &Value) -> Value {
    if depth_at_most(value, CLONE_RECURSION_LIMIT) {
        value.clone()
    } else {
        clone_iteratively(value)
    }
}

enum CloneFrame<'a> {
    Array {
        iter: std::slice::Iter<'a, Value>,
        out: Vec<Value>,
    },
    Object {
        iter: serde_json::map::Iter<'a>,
        out: serde_json::Map<String, Value>,
        pending: Option<String>,
    },
}

/// A deep copy with an explicit stack instead of recursion.
fn clone_iteratively(root: &Value) -> Value {
    fn enter<'a>(node: &'a Value, stack: &mut Vec<CloneFrame<'a>>) -> Option<Value> {
        match node {
            Value::Array(items) => {
                stack.push(CloneFrame::Array {
                    iter: items.iter(),
                    out: Vec::with_capacity(items.len()),
                });
                None
            }
            Value::Object(map) => {
                stack.push(CloneFrame::Object {
                    iter: map.iter(),
                    out: serde_json::Map::new(),
                    pending: None,
                });
                None
            }
            scalar => Some(scalar.clone()),
        }
    }
    let mut stack: Vec<CloneFrame<'_>> = Vec::new();
    let mut finished = enter(root, &mut stack);
    loop {
        if let Some(done) = finished.take() {
            match stack.last_mut() {
                None => return done,
                Some(CloneFrame::Array { out, .. }) => out.push(done),
                Some(CloneFrame::Object { out, pending, .. }) => {
                    if let Some(k) = pending.take() {
                        out.insert(k, done);
                    }
                }
            }
        }
        let next = match stack.last_mut() {
            None => return Value::Null,
            Some(CloneFrame::Array { iter, .. }) => iter.next(),
            Some(CloneFrame::Object { iter, pending, .. }) => iter.next().map(|(k, child)| {
                *pending = Some(k.clone());
                child
            }),
        };
        finished = match next {
            Some(child) => enter(child, &mut stack),
            None => Some(match stack.pop() {
                Some(CloneFrame::Array { out, .. }) => Value::Array(out),
                Some(CloneFrame::Object { out, .. }) => Value::Object(out),
                None => Value::Null,
            }),
        };
    }
}

/// A deep copy of `value` (any depth) with `f(key, parent_key, scalar)` applied to every
/// scalar of the copy (see [`for_each_scalar_mut`] for `key` and `parent_key`).
pub(crate) fn map_scalars<F>(value: &Value, mut f: F) -> Value
where
    F: FnMut(Option<&str>, Option<&str>, &mut Value),
{
    if depth_at_most(value, CLONE_RECURSION_LIMIT) {
        let mut out = value.clone();
        walk_bounded(&mut out, None, None, &mut f);
        out
    } else {
        let mut out = clone_iteratively(value);
        for_each_scalar_mut(&mut out, f);
        out
    }
}

/// [`for_each_scalar_mut`] by recursion, for a value whose depth is known to be bounded.
fn walk_bounded<F>(node: &mut Value, key: Option<&str>, parent_key: Option<&str>, f: &mut F)
where
    F: FnMut(Option<&str>, Option<&str>, &mut Value),
{
    match node {
        Value::Array(items) => {
            for child in items {
                walk_bounded(child, None, key, f);
            }
        }
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                walk_bounded(child, Some(k), key, f);
            }
        }
        scalar => f(key, parent_key, scalar),
    }
}

enum WalkFrame<'a> {
    Array(std::slice::IterMut<'a, Value>, Option<&'a str>),
    Object(serde_json::map::IterMut<'a>, Option<&'a str>),
}

/// Calls `f(key, parent_key, scalar)` for every scalar (string, number, boolean, null) of a
/// tree of any depth, without recursion. `key` is the object key the scalar is stored under
/// (`None` at the root or inside an array); `parent_key` is the key of the array or object
/// that holds it.
pub(crate) fn for_each_scalar_mut<'a, F>(root: &'a mut Value, mut f: F)
where
    F: FnMut(Option<&'a str>, Option<&'a str>, &'a mut Value),
{
    let mut stack: Vec<WalkFrame<'a>> = Vec::new();
    let mut visit = |node: &'a mut Value,
                     key: Option<&'a str>,
                     parent_key: Option<&'a str>,
                     stack: &mut Vec<WalkFrame<'a>>| match node {
        Value::Array(items) => stack.push(WalkFrame::Array(items.iter_mut(), key)),
        Value::Object(map) => stack.push(WalkFrame::Object(map.iter_mut(), key)),
        scalar => f(key, parent_key, scalar),
    };
    visit(root, None, None, &mut stack);
    while let Some(top) = stack.last_mut() {
        let next = match top {
            WalkFrame::Array(iter, key) => iter.next().map(|child| (child, None, *key)),
            WalkFrame::Object(iter, key) => iter
                .next()
                .map(|(k, child)| (child, Some(k.as_str()), *key)),
        };
        match next {
            Some((child, key, parent_key)) => visit(child, key, parent_key, &mut stack),
            None => {
                stack.pop();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nest(depth: usize) -> Value {
        let mut v = json!("x");
        for _ in 0..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn deep_clone_and_equal_handle_deep_nesting() {
        let v = nest(50_000);
        let c = deep_clone(&v);
        assert!(deep_equal(&v, &c));
        drop_deep(v);
        drop_deep(c);
    }

    #[test]
    fn deep_equal_distinguishes_values() {
        assert!(!deep_equal(&json!({"a": [1]}), &json!({"a": [2]})));
        assert!(!deep_equal(&json!("a"), &json!(["a"])));
        assert!(deep_equal(
            &json!({"a": [1, {"b": null}]}),
            &json!({"a": [1, {"b": null}]})
        ));
    }

    #[test]
    fn scalar_walk_reports_keys_and_parents() {
        let mut v = json!({"outer": {"inner": "s", "list": [1]}, "top": true});
        let mut seen = Vec::new();
        for_each_scalar_mut(&mut v, |key, parent_key, node| {
            seen.push((
                key.map(str::to_owned),
                parent_key.map(str::to_owned),
                node.clone(),
            ));
        });
        assert_eq!(
            seen,
            vec![
                (Some("inner".into()), Some("outer".into()), json!("s")),
                (None, Some("list".into()), json!(1)),
                (Some("top".into()), None, json!(true)),
            ]
        );
    }

    #[test]
    fn depth_limit_picks_the_clone_strategy() {
        assert!(depth_at_most(&json!(1), 0));
        assert!(depth_at_most(&json!([]), 1));
        assert!(!depth_at_most(&json!([]), 0));
        assert!(depth_at_most(&nest(128), CLONE_RECURSION_LIMIT));
        assert!(!depth_at_most(&nest(129), CLONE_RECURSION_LIMIT));
        let v = nest(200);
        assert_eq!(deep_clone(&v), v);
    }

    #[test]
    fn both_walks_agree() {
        let shallow = json!({"a": [{"b": "s", "c": [1, null]}, "t"], "d": {"e": false}});
        let deep = Value::Array(vec![nest(150), shallow.clone()]);
        for v in [shallow, deep] {
            let mut seen = Vec::new();
            let out = map_scalars(&v, |key, parent_key, node| {
                seen.push((key.map(str::to_owned), parent_key.map(str::to_owned)));
                *node = json!(seen.len());
            });
            let mut expected = Vec::new();
            let mut copy = clone_iteratively(&v);
            for_each_scalar_mut(&mut copy, |key, parent_key, node| {
                expected.push((key.map(str::to_owned), parent_key.map(str::to_owned)));
                *node = json!(expected.len());
            });
            assert_eq!(seen, expected);
            assert_eq!(out, copy);
        }
    }
}
