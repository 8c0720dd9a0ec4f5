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

/// A deep copy of a value of any nesting depth, without recursion (`Value::clone` recurses
/// once per level).
pub fn deep_clone(value: &Value) -> Value {
    map_tree(value, &mut |_, _| Visit::Descend)
}

/// Where a node sits while a tree is mapped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeCtx<'a> {
    /// The object key this node is stored under (`None` at the root or inside an array).
    pub(crate) key: Option<&'a str>,
    /// The key of the object that holds this node's parent object, when the parent is an object.
    pub(crate) parent_key: Option<&'a str>,
    /// Nesting depth (root = 0).
    pub(crate) depth: usize,
}

/// What [`map_tree`] does with one node.
#[derive(Debug)]
pub(crate) enum Visit {
    /// Put this value in the output and do not look inside the node.
    Replace(Value),
    /// Copy scalars as they are; walk into arrays and objects.
    Descend,
}

enum Frame<'a> {
    Array {
        iter: std::slice::Iter<'a, Value>,
        out: Vec<Value>,
        key: Option<&'a str>,
        depth: usize,
    },
    Object {
        iter: serde_json::map::Iter<'a>,
        out: serde_json::Map<String, Value>,
        pending: Option<String>,
        key: Option<&'a str>,
        depth: usize,
    },
}

/// Maps a tree iteratively: `f` decides for every node whether to replace it or descend.
pub(crate) fn map_tree<'a, F>(root: &'a Value, f: &mut F) -> Value
where
    F: FnMut(&NodeCtx<'a>, &'a Value) -> Visit,
{
    let root_ctx = NodeCtx {
        key: None,
        parent_key: None,
        depth: 0,
    };
    let mut stack: Vec<Frame<'a>> = Vec::new();
    let mut finished: Option<Value> = enter(root, root_ctx, f, &mut stack);
    loop {
        if let Some(done) = finished.take() {
            match stack.last_mut() {
                None => return done,
                Some(Frame::Array { out, .. }) => out.push(done),
                Some(Frame::Object { out, pending, .. }) => {
                    if let Some(k) = pending.take() {
                        out.insert(k, done);
                    }
                }
            }
        }
        let top = match stack.last_mut() {
            Some(top) => top,
            None => unreachable_root(),
        };
        let next = match top {
            Frame::Array {
                iter, key, depth, ..
            } => iter.next().map(|child| {
                (
                    child,
                    NodeCtx {
                        key: None,
                        parent_key: *key,
                        depth: *depth + 1,
                    },
                )
            }),
            Frame::Object {
                iter,
                pending,
                key,
                depth,
                ..
            } => iter.next().map(|(k, child)| {
                *pending = Some(k.clone());
                (
                    child,
                    NodeCtx {
                        key: Some(k.as_str()),
                        parent_key: *key,
                        depth: *depth + 1,
                    },
                )
            }),
        };
        match next {
            Some((child, ctx)) => finished = enter(child, ctx, f, &mut stack),
            None => {
                finished = Some(match stack.pop() {
                    Some(Frame::Array { out, .. }) => Value::Array(out),
                    Some(Frame::Object { out, .. }) => Value::Object(out),
                    None => Value::Null,
                });
            }
        }
    }
}

fn unreachable_root() -> ! {
    // `finished` is always `Some` when the stack is empty (the root was just entered or closed),
    // so the loop returns before reaching here.
    unreachable!("map_tree: empty stack without a finished root")
}

fn enter<'a, F>(
    node: &'a Value,
    ctx: NodeCtx<'a>,
    f: &mut F,
    stack: &mut Vec<Frame<'a>>,
) -> Option<Value>
where
    F: FnMut(&NodeCtx<'a>, &'a Value) -> Visit,
{
    match f(&ctx, node) {
        Visit::Replace(v) => Some(v),
        Visit::Descend => match node {
            Value::Array(items) => {
                stack.push(Frame::Array {
                    iter: items.iter(),
                    out: Vec::with_capacity(items.len()),
                    key: ctx.key,
                    depth: ctx.depth,
                });
                None
            }
            Value::Object(map) => {
                stack.push(Frame::Object {
                    iter: map.iter(),
                    out: serde_json::Map::new(),
                    pending: None,
                    key: ctx.key,
                    depth: ctx.depth,
                });
                None
            }
            scalar => Some(scalar.clone()),
        },
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
    fn map_tree_reports_keys_and_parents() {
        let v = json!({"outer": {"inner": "s"}});
        let mut seen = Vec::new();
        let out = map_tree(&v, &mut |ctx, node| {
            if node.is_string() {
                seen.push((
                    ctx.key.map(str::to_owned),
                    ctx.parent_key.map(str::to_owned),
                ));
            }
            Visit::Descend
        });
        assert_eq!(out, v);
        assert_eq!(seen, vec![(Some("inner".into()), Some("outer".into()))]);
    }
}
