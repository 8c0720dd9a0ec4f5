//! A JSON value graph whose nodes can be shared or cyclic, for sanitizing inputs where the
//! same object may be reached twice (vectors `tool_results_079`, `tool_results_080`, `tool_results_095`).
//!
//! `serde_json::Value` is a tree, so repeated references cannot occur in it; this type models
//! the JavaScript situation (`{x: s, y: s}`, `o.self = o`). Containers are `Arc`-shared; a cycle
//! built with them is never freed (like any `Arc` cycle), which is acceptable for test fixtures
//! and short-lived inputs.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use serde_json::{Map, Value};

use super::redact::{RedactionConfig, mask_flag_values};
use super::sanitize::{Place, ScalarMode, redact_scalar};

/// What a repeated node becomes in the output.
pub const CIRCULAR: &str = "[Circular]";

/// A JSON-like value whose arrays and objects are shared handles.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum SharedValue {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A number.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// A shared array.
    Array(SharedArray),
    /// A shared object.
    Object(SharedObject),
}

/// A shared, mutable array node.
#[derive(Clone, Default)]
pub struct SharedArray(Arc<RwLock<Vec<SharedValue>>>);

/// A shared, mutable object node (insertion-ordered).
#[derive(Clone, Default)]
pub struct SharedObject(Arc<RwLock<Vec<(String, SharedValue)>>>);

impl fmt::Debug for SharedArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never recurse: the graph may be cyclic.
        write!(
            f,
            "SharedArray({:p}, len {})",
            Arc::as_ptr(&self.0),
            self.items().len()
        )
    }
}

impl fmt::Debug for SharedObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SharedObject({:p}, len {})",
            Arc::as_ptr(&self.0),
            self.entries().len()
        )
    }
}

impl SharedArray {
    /// An empty array.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends an item.
    pub fn push(&self, value: SharedValue) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .push(value);
    }

    /// A snapshot of the items (handles are cloned, not the nodes behind them).
    pub fn items(&self) -> Vec<SharedValue> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn ptr(&self) -> usize {
        Arc::as_ptr(&self.0) as *const () as usize
    }
}

impl SharedObject {
    /// An empty object.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` (replacing an existing entry in place).
    pub fn insert(&self, key: impl Into<String>, value: SharedValue) {
        let key = key.into();
        let mut entries = self.0.write().unwrap_or_else(PoisonError::into_inner);
        match entries.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => entries.push((key, value)),
        }
    }

    /// A snapshot of the entries.
    pub fn entries(&self) -> Vec<(String, SharedValue)> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &str) -> Option<SharedValue> {
        self.entries()
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    fn ptr(&self) -> usize {
        Arc::as_ptr(&self.0) as *const () as usize
    }
}

impl SharedValue {
    /// Converts a JSON tree (any depth, without recursion).
    pub fn from_json(value: &Value) -> Self {
        let mut work: Vec<(&Value, SharedValue)> = Vec::new();
        let root = Self::shell(value);
        work.push((value, root.clone()));
        while let Some((node, target)) = work.pop() {
            match (node, &target) {
                (Value::Array(items), SharedValue::Array(arr)) => {
                    for item in items {
                        let child = Self::shell(item);
                        arr.push(child.clone());
                        work.push((item, child));
                    }
                }
                (Value::Object(map), SharedValue::Object(obj)) => {
                    for (k, v) in map {
                        let child = Self::shell(v);
                        obj.insert(k.clone(), child.clone());
                        work.push((v, child));
                    }
                }
                _ => {}
            }
        }
        root
    }

    fn shell(value: &Value) -> Self {
        match value {
            Value::Null => Self::Null,
            Value::Bool(b) => Self::Bool(*b),
            Value::Number(n) => Self::Number(n.clone()),
            Value::String(s) => Self::String(s.clone()),
            Value::Array(_) => Self::Array(SharedArray::new()),
            Value::Object(_) => Self::Object(SharedObject::new()),
        }
    }

    fn scalar_json(&self) -> Option<Value> {
        match self {
            Self::Null => Some(Value::Null),
            Self::Bool(b) => Some(Value::Bool(*b)),
            Self::Number(n) => Some(Value::Number(n.clone())),
            Self::String(s) => Some(Value::String(s.clone())),
            Self::Array(_) | Self::Object(_) => None,
        }
    }
}

/// Which repeats become [`CIRCULAR`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RepeatPolicy {
    /// Any node reached a second time (the `sanitize_tool_args` rule).
    AnyRepeat,
    /// Only a node that is its own ancestor (a cycle); shared siblings are copied separately.
    AncestorsOnly,
}

/// [`Place`] with owned keys (the entries of a shared node are copied out of it).
#[derive(Clone)]
struct OwnedPlace {
    key: Option<String>,
    parent_key: Option<String>,
    cause_chain: bool,
}

impl OwnedPlace {
    fn borrow(&self) -> Place<'_> {
        Place {
            key: self.key.as_deref(),
            parent_key: self.parent_key.as_deref(),
            cause_chain: self.cause_chain,
        }
    }

    fn object_child(&self, key: String) -> Self {
        let cause_chain = self.borrow().object_child(&key).cause_chain;
        OwnedPlace {
            key: Some(key),
            parent_key: self.key.clone(),
            cause_chain,
        }
    }

    fn array_element(&self) -> Self {
        OwnedPlace {
            cause_chain: false,
            ..self.clone()
        }
    }
}

enum Frame {
    Array {
        items: std::vec::IntoIter<SharedValue>,
        out: Vec<Value>,
        place: OwnedPlace,
        ptr: usize,
    },
    Object {
        entries: std::vec::IntoIter<(String, SharedValue)>,
        out: Map<String, Value>,
        pending: Option<String>,
        place: OwnedPlace,
        ptr: usize,
    },
}

impl Frame {
    fn ptr(&self) -> usize {
        match self {
            Frame::Array { ptr, .. } | Frame::Object { ptr, .. } => *ptr,
        }
    }
}

fn walk(
    root: &SharedValue,
    policy: RepeatPolicy,
    mode: ScalarMode,
    config: &RedactionConfig,
) -> Value {
    let mut seen: HashSet<usize> = HashSet::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut finished: Option<Value> = None;
    let root_place = OwnedPlace {
        key: None,
        parent_key: None,
        cause_chain: Place::ROOT.cause_chain,
    };
    let mut next: Option<(SharedValue, OwnedPlace)> = Some((root.clone(), root_place));
    loop {
        if let Some((node, place)) = next.take() {
            if let Some(scalar) = node.scalar_json() {
                finished = redact_scalar(&scalar, place.borrow(), mode, config);
            } else {
                let ptr = match &node {
                    SharedValue::Array(a) => a.ptr(),
                    SharedValue::Object(o) => o.ptr(),
                    _ => 0,
                };
                let repeated = match policy {
                    RepeatPolicy::AnyRepeat => !seen.insert(ptr),
                    RepeatPolicy::AncestorsOnly => stack.iter().any(|f| f.ptr() == ptr),
                };
                if repeated {
                    finished = Some(Value::String(CIRCULAR.to_owned()));
                } else {
                    match node {
                        SharedValue::Array(a) => stack.push(Frame::Array {
                            items: {
                                let mut items = a.items();
                                mask_flag_values(&mut items, |item| match item {
                                    SharedValue::String(s) => Some(s),
                                    _ => None,
                                });
                                items.into_iter()
                            },
                            out: Vec::new(),
                            place,
                            ptr,
                        }),
                        SharedValue::Object(o) => stack.push(Frame::Object {
                            entries: o.entries().into_iter(),
                            out: Map::new(),
                            pending: None,
                            place,
                            ptr,
                        }),
                        _ => {}
                    }
                }
            }
        }
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
        let Some(top) = stack.last_mut() else {
            return Value::Null;
        };
        match top {
            Frame::Array { items, place, .. } => match items.next() {
                Some(child) => next = Some((child, place.array_element())),
                None => {
                    if let Some(Frame::Array { out, .. }) = stack.pop() {
                        finished = Some(Value::Array(out));
                    }
                }
            },
            Frame::Object {
                entries,
                pending,
                place,
                ..
            } => match entries.next() {
                Some((k, child)) => {
                    *pending = Some(k.clone());
                    next = Some((child, place.object_child(k)));
                }
                None => {
                    if let Some(Frame::Object { out, .. }) = stack.pop() {
                        finished = Some(Value::Object(out));
                    }
                }
            },
        }
    }
}

/// [`sanitize_tool_args`](super::sanitize::sanitize_tool_args) over a shared graph: **any**
/// node reached a second time (a cycle or a shared reference) becomes `"[Circular]"`.
pub fn sanitize_shared_tool_args(value: &SharedValue) -> Value {
    walk(
        value,
        RepeatPolicy::AnyRepeat,
        ScalarMode::Args,
        &RedactionConfig::default(),
    )
}

/// [`redact_structured`](super::sanitize::redact_structured) over a shared graph: only a
/// cycle becomes `"[Circular]"`; shared non-cyclic nodes are copied separately.
pub fn redact_shared_structured(value: &SharedValue) -> Value {
    walk(
        value,
        RepeatPolicy::AncestorsOnly,
        ScalarMode::Result,
        &RedactionConfig::default(),
    )
}
