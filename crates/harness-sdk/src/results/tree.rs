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
pub(crate) const CLONE_RECURSION_LIMIT: usize = 128;

/// Whether no array or object in `value` is nested more than `limit` levels deep (a scalar
/// has depth 0, `[1]` depth 1). Recurses at most `limit` levels.
pub(crate) fn depth_at_most(value: &Value, limit: usize) -> bool {
    fn within(child: &Value, limit: usize) -> bool {
        !matches!(child, Value::Array(_) | Value::Object(_)) || depth_at_most(child, limit - 1)
    }
    match value {
        Value::Array(items) => limit > 0 && items.iter().all(|v| within(v, limit)),
        Value::Object(map) => limit > 0 && map.values().all(|v| within(v, limit)),
        _ => true,
    }
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
pub(crate) fn clone_iteratively(root: &Value) -> Value {
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
    fn depth_limit_picks_the_clone_strategy() {
        assert!(depth_at_most(&json!(1), 0));
        assert!(depth_at_most(&json!([]), 1));
        assert!(!depth_at_most(&json!([]), 0));
        assert!(depth_at_most(&nest(128), CLONE_RECURSION_LIMIT));
        assert!(!depth_at_most(&nest(129), CLONE_RECURSION_LIMIT));
        let v = nest(200);
        assert_eq!(deep_clone(&v), v);
    }
}
