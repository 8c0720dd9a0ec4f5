//! `sanitize_tool_args` and `sanitize_tool_result` (see `docs/tool-results.md, 'Sanitizing and redaction'`).
//!
//! Both return new values and never mutate their input. Structure of one call:
//!
//! 1. **Copy.** A value nested at most 128 levels deep (checked first, recursing at most
//!    that far) is copied with `Value::clone`; a deeper one is copied with an explicit stack
//!    ([`deep_clone`](super::deep_clone)), so nesting of any depth never overflows the call
//!    stack.
//! 2. **Rewrite in place.** The copy is walked once (by bounded recursion, or with an
//!    explicit stack for a deep value) and each scalar is judged where it sits (its key, its
//!    parent's key, and whether it ends a `cause` chain): a string that no rule touches stays
//!    the copy made in step 1 (never rebuilt), a masked secret reuses its own buffer, and only
//!    a string rewritten by the pattern layer gets a new one. Whether the children of an
//!    object continue a `cause` chain is worked out once per object. In an array, the value
//!    that follows a credential flag (`["--password", "…"]`, `["-u", "user:…"]`) is masked
//!    before the array's elements are judged.
//! 3. **Key facts from a memo.** What the key rules say about a key on its own
//!    (`KeyFacts`) comes from a small per-thread memo, so a key is judged once per thread,
//!    not once per scalar or per call; a hit compares the key as three machine words. A key
//!    that misses is judged with a quick rejection by its last byte and length before the
//!    full table lookup.
//! 4. **Free text.** Every string first goes through the one-load-per-byte pair filter of
//!    the pattern layer; only a string where some pattern family can match is scanned word by
//!    word, and a word reaches the pattern checks only when its first byte, its length and the
//!    byte after it allow one of them (three table loads).
//!
//! Repeated references: a `serde_json::Value` is a tree — every node has exactly one owner,
//! so no node can be reached twice and `"[Circular]"` can never be produced for it. Inputs that
//! *can* share nodes or form cycles use [`SharedValue`](super::shared::SharedValue) and
//! [`sanitize_shared_tool_args`](super::shared::sanitize_shared_tool_args) /
//! [`redact_shared_structured`](super::shared::redact_shared_structured).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::redact::{
    KeyMemo, MASK, RedactionConfig, is_cause_key, is_sensitive_key_in, mask_flag_values,
    redact_field_value_cow, redact_field_value_in_place_with, redact_text_cow, redact_text_with,
    with_key_memo,
};
use super::tree::{CLONE_RECURSION_LIMIT, clone_iteratively, depth_at_most, drop_deep};

/// Text blocks of a tool result are cut to this many UTF-16 code units.
pub const TOOL_RESULT_MAX_CHARS: usize = 8000;

/// Appended to a truncated text block.
pub const TRUNCATION_SUFFIX: &str = "\n…(truncated)…";

/// Redaction mode of one scalar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScalarMode {
    /// Arguments: numbers and booleans are never masked.
    Args,
    /// Model-visible results: numbers and booleans under sensitive keys become `"***"`.
    Result,
}

/// Where a node sits in the tree being redacted: what decides a scalar's redaction.
///
/// Arrays are transparent: an element of an array stored under `k` is judged as if it were
/// stored under `k` itself (so `{"token": ["…"]}` masks the element, and the `code` of
/// `{"cause": [{"code": …}]}` has the parent `cause`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place<'a> {
    /// The key the node is stored under (an array element: its array's key); `None` at the
    /// root or in an array at the root.
    pub(crate) key: Option<&'a str>,
    /// The key of the object holding the node (an array element: its array's parent key).
    pub(crate) parent_key: Option<&'a str>,
    /// Whether the path from the root to the node is made of object keys only, all `cause`
    /// but the last (where a known transport error code under `code` is kept).
    pub(crate) cause_chain: bool,
}

impl<'a> Place<'a> {
    /// The place of the root.
    pub(crate) const ROOT: Place<'static> = Place {
        key: None,
        parent_key: None,
        cause_chain: true,
    };

    /// The place of the child stored under `key` in the object at this place.
    pub(crate) fn object_child(self, key: &'a str) -> Self {
        self.object_child_with(key, self.children_cause_chain())
    }

    /// [`Place::cause_chain`] of every child of the object at this place.
    #[inline]
    fn children_cause_chain(self) -> bool {
        self.cause_chain && self.key.is_none_or(is_cause_key)
    }

    /// [`Place::object_child`] given [`Place::children_cause_chain`] (the same for every
    /// child of one object, so it is worked out once per object).
    #[inline]
    fn object_child_with(self, key: &'a str, cause_chain: bool) -> Self {
        Place {
            key: Some(key),
            parent_key: self.key,
            cause_chain,
        }
    }

    /// The place of an element of the array at this place.
    pub(crate) fn array_element(self) -> Self {
        Place {
            cause_chain: false,
            ..self
        }
    }
}

/// Redacts one scalar given where it sits; `None` for arrays and objects.
pub(crate) fn redact_scalar(
    value: &Value,
    place: Place<'_>,
    mode: ScalarMode,
    config: &RedactionConfig,
) -> Option<Value> {
    match value {
        Value::String(s) => Some(Value::String(redact_string(s, place, config).into_owned())),
        Value::Number(_) | Value::Bool(_) => Some(if masks_scalar(place, mode) {
            Value::String(MASK.to_owned())
        } else {
            value.clone()
        }),
        Value::Null => Some(Value::Null),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// Free-text redaction at the root or inside an array at the root, key-aware redaction under
/// a key.
fn redact_string<'a>(s: &'a str, place: Place<'_>, config: &RedactionConfig) -> Cow<'a, str> {
    match place.key {
        Some(k) => redact_field_value_cow(k, place.parent_key, place.cause_chain, s, config),
        None => redact_text_cow(s, config).0,
    }
}

/// Whether a number or boolean at this place becomes [`MASK`].
fn masks_scalar(place: Place<'_>, mode: ScalarMode) -> bool {
    mode == ScalarMode::Result
        && place
            .key
            .is_some_and(|k| is_sensitive_key_in(k, place.parent_key))
}

/// [`redact_scalar`] on a scalar of a copy, in place (a kept string is not copied again). Key
/// facts come from `memo`.
#[inline]
fn redact_scalar_in_place(
    value: &mut Value,
    place: Place<'_>,
    mode: ScalarMode,
    config: &RedactionConfig,
    memo: &mut KeyMemo,
) {
    match value {
        Value::String(s) => match place.key {
            Some(k) => {
                let facts = memo.facts(k);
                redact_field_value_in_place_with(
                    k,
                    facts,
                    place.parent_key,
                    place.cause_chain,
                    s,
                    config,
                );
            }
            None => {
                if let (Cow::Owned(redacted), _) = redact_text_cow(s, config) {
                    *s = redacted;
                }
            }
        },
        Value::Number(_) | Value::Bool(_) => {
            if mode == ScalarMode::Result
                && place
                    .key
                    .is_some_and(|k| memo.facts(k).sensitive_in(place.parent_key))
            {
                *value = Value::String(MASK.to_owned());
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => {}
    }
}

/// What a walk does with each scalar it reaches.
trait VisitScalar {
    /// Visits the scalar `node` at `place`.
    fn visit(&mut self, place: Place<'_>, node: &mut Value);
}

impl<F> VisitScalar for F
where
    F: FnMut(Place<'_>, &mut Value),
{
    #[inline]
    fn visit(&mut self, place: Place<'_>, node: &mut Value) {
        self(place, node);
    }
}

/// The visitor of [`redact_tree`]: [`redact_scalar_in_place`], inlined into the walk.
struct Redactor<'c, 'm> {
    mode: ScalarMode,
    config: &'c RedactionConfig,
    memo: &'m mut KeyMemo,
}

impl VisitScalar for Redactor<'_, '_> {
    #[inline(always)]
    fn visit(&mut self, place: Place<'_>, node: &mut Value) {
        redact_scalar_in_place(node, place, self.mode, self.config, self.memo);
    }
}

/// A redacted copy of a whole tree. Values of ordinary depth are copied with `Value::clone`
/// and walked by recursion (both bounded by [`CLONE_RECURSION_LIMIT`]); deeper ones are
/// copied and walked with an explicit stack.
fn redact_tree(value: &Value, mode: ScalarMode, config: &RedactionConfig) -> Value {
    with_key_memo(|memo| {
        if depth_at_most(value, CLONE_RECURSION_LIMIT) {
            let mut out = value.clone();
            walk_bounded(&mut out, Place::ROOT, &mut Redactor { mode, config, memo });
            out
        } else {
            let mut out = clone_iteratively(value);
            walk_iteratively(&mut out, |place: Place<'_>, node: &mut Value| {
                redact_scalar_in_place(node, place, mode, config, memo);
            });
            out
        }
    })
}

/// Visits every scalar of a tree whose depth is known to be bounded, by recursion.
fn walk_bounded<F>(node: &mut Value, place: Place<'_>, f: &mut F)
where
    F: VisitScalar,
{
    match node {
        Value::Array(items) => {
            mask_flag_values(items, value_string);
            let inner = place.array_element();
            for child in items {
                walk_bounded(child, inner, f);
            }
        }
        Value::Object(map) => {
            let cause_chain = place.children_cause_chain();
            for (k, child) in map.iter_mut() {
                let child_place = place.object_child_with(k, cause_chain);
                match child {
                    Value::Array(_) | Value::Object(_) => walk_bounded(child, child_place, f),
                    scalar => f.visit(child_place, scalar),
                }
            }
        }
        scalar => f.visit(place, scalar),
    }
}

/// The string of a value, if it is one (for [`mask_flag_values`]).
fn value_string(value: &mut Value) -> Option<&mut String> {
    match value {
        Value::String(s) => Some(s),
        _ => None,
    }
}

enum WalkFrame<'a> {
    Array(std::slice::IterMut<'a, Value>, Place<'a>),
    Object(serde_json::map::IterMut<'a>, Place<'a>),
}

/// Calls `f(place, scalar)` for every scalar of a tree of any depth, without recursion.
fn walk_iteratively<'a, F>(root: &'a mut Value, mut f: F)
where
    F: FnMut(Place<'a>, &'a mut Value),
{
    let mut stack: Vec<WalkFrame<'a>> = Vec::new();
    let mut visit =
        |node: &'a mut Value, place: Place<'a>, stack: &mut Vec<WalkFrame<'a>>| match node {
            Value::Array(items) => {
                mask_flag_values(items, value_string);
                stack.push(WalkFrame::Array(items.iter_mut(), place));
            }
            Value::Object(map) => stack.push(WalkFrame::Object(map.iter_mut(), place)),
            scalar => f(place, scalar),
        };
    visit(root, Place::ROOT, &mut stack);
    while let Some(top) = stack.last_mut() {
        let next = match top {
            WalkFrame::Array(iter, place) => {
                iter.next().map(|child| (child, place.array_element()))
            }
            WalkFrame::Object(iter, place) => iter
                .next()
                .map(|(k, child)| (child, place.object_child(k.as_str()))),
        };
        match next {
            Some((child, place)) => visit(child, place, &mut stack),
            None => {
                stack.pop();
            }
        }
    }
}

/// Sanitizes tool arguments for diagnostics, event payloads and UI tool cards.
///
/// Strings at the root (or in arrays at the root) get free-text redaction; strings under an
/// object key get key-aware redaction (a sensitive key masks the whole value), and so do the
/// strings of an array stored under a key; numbers, booleans and null are returned as they are.
/// A `__proto__` key is an ordinary key.
pub fn sanitize_tool_args(args: &Value) -> Value {
    sanitize_tool_args_with(args, &RedactionConfig::default())
}

/// [`sanitize_tool_args`] with a caller [`RedactionConfig`].
pub fn sanitize_tool_args_with(args: &Value, config: &RedactionConfig) -> Value {
    redact_tree(args, ScalarMode::Args, config)
}

/// Deep key-aware redaction of a model-visible structure: strings under sensitive keys are
/// masked, numbers and booleans under sensitive keys become `"***"`, other strings get
/// free-text redaction.
pub fn redact_structured(value: &Value) -> Value {
    redact_structured_with(value, &RedactionConfig::default())
}

/// [`redact_structured`] with a caller [`RedactionConfig`].
pub fn redact_structured_with(value: &Value, config: &RedactionConfig) -> Value {
    redact_tree(value, ScalarMode::Result, config)
}

/// Sanitizes a tool result for model-visible and UI presentation.
///
/// * A string gets free-text redaction; numbers, booleans and null are returned as they are;
///   an array gets [`redact_structured`].
/// * An object: every `content[]` image block loses its `data` and gets `omitted: true` and
///   `bytes` — the decoded size of the base64 data (`floor(len * 3 / 4)` minus padding; an
///   existing numeric `bytes` is kept when there is no data); then the whole record gets
///   [`redact_structured`]; each `content[]` text block is cut to [`TOOL_RESULT_MAX_CHARS`]
///   UTF-16 code units plus [`TRUNCATION_SUFFIX`] (a text already ending with the suffix within
///   the limit is left alone, so sanitizing twice changes nothing).
pub fn sanitize_tool_result(result: &Value) -> Value {
    sanitize_tool_result_with(result, &RedactionConfig::default())
}

/// [`sanitize_tool_result`] with a caller [`RedactionConfig`].
pub fn sanitize_tool_result_with(result: &Value, config: &RedactionConfig) -> Value {
    match result {
        Value::String(s) => Value::String(redact_text_with(s, config).text),
        Value::Array(_) => redact_structured_with(result, config),
        Value::Object(input) => {
            let mut out = redact_structured_with(result, config);
            if let (Some(Value::Array(items_in)), Some(Value::Array(items_out))) =
                (input.get("content"), out.get_mut("content"))
            {
                for (item_in, item_out) in items_in.iter().zip(items_out.iter_mut()) {
                    if let (Value::Object(item_in), Value::Object(item_out)) = (item_in, item_out) {
                        finish_content_item(item_in, item_out, config);
                    }
                }
            }
            out
        }
        scalar => scalar.clone(),
    }
}

/// Image and text rules for one (already redacted) `content[]` item; edits the output copy only.
fn finish_content_item(
    item_in: &Map<String, Value>,
    item_out: &mut Map<String, Value>,
    config: &RedactionConfig,
) {
    match item_in.get("type").and_then(Value::as_str) {
        Some("image") => {
            let bytes = match item_in.get("data") {
                Some(Value::String(data)) => Some(Value::from(base64_decoded_len(data))),
                _ => item_out.get("bytes").filter(|b| b.is_number()).cloned(),
            };
            if let Some(data) = item_out.remove("data") {
                drop_deep(data);
            }
            match bytes {
                Some(b) => {
                    item_out.insert("bytes".into(), b);
                }
                None => {
                    if let Some(old) = item_out.remove("bytes") {
                        drop_deep(old);
                    }
                }
            }
            item_out.insert("omitted".into(), Value::Bool(true));
        }
        Some("text") => {
            if let Some(Value::String(text)) = item_out.get_mut("text")
                && let Some(cut) = truncate_text(text, config)
            {
                *text = cut;
            }
        }
        _ => {}
    }
}

/// The decoded size of base64 `data` (`floor(len * 3 / 4)` minus `=` padding).
pub fn base64_decoded_len(data: &str) -> u64 {
    let trimmed = data.trim();
    let padding = trimmed
        .chars()
        .rev()
        .take_while(|c| *c == '=')
        .count()
        .min(2) as u64;
    let len = trimmed.len() as u64;
    (len * 3 / 4).saturating_sub(padding)
}

fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Cuts an already redacted text to [`TOOL_RESULT_MAX_CHARS`] UTF-16 units plus the suffix;
/// `None` when it is kept as it is. The cut backs off until the kept prefix is a redaction
/// fixpoint, so a later pass cannot change it.
fn truncate_text(text: &str, config: &RedactionConfig) -> Option<String> {
    // A character takes at least as many UTF-8 bytes as UTF-16 units: a short text is not
    // counted.
    if text.len() <= TOOL_RESULT_MAX_CHARS || utf16_len(text) <= TOOL_RESULT_MAX_CHARS {
        return None;
    }
    if let Some(prefix) = text.strip_suffix(TRUNCATION_SUFFIX)
        && utf16_len(prefix) <= TOOL_RESULT_MAX_CHARS
    {
        return None;
    }
    let mut prefix = String::new();
    let mut units = 0;
    for c in text.chars() {
        units += c.len_utf16();
        if units > TOOL_RESULT_MAX_CHARS {
            break;
        }
        prefix.push(c);
    }
    for _ in 0..256 {
        if redact_text_with(&prefix, config).text == prefix {
            break;
        }
        prefix.pop();
    }
    if redact_text_with(&prefix, config).text != prefix {
        prefix.clear();
    }
    prefix.push_str(TRUNCATION_SUFFIX);
    Some(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decoded_length_estimate() {
        assert_eq!(base64_decoded_len("base64imagedata"), 11);
        assert_eq!(base64_decoded_len("aGk="), 2);
        assert_eq!(base64_decoded_len(""), 0);
    }

    fn nest(depth: usize) -> Value {
        let mut v = json!("x");
        for _ in 0..depth {
            v = Value::Array(vec![v]);
        }
        v
    }

    /// A scalar's place with owned keys: key, parent key, cause chain.
    type SeenPlace = (Option<String>, Option<String>, bool);

    /// Every scalar's place, in walk order, with the scalar replaced by its index.
    fn places(v: &Value, bounded: bool) -> (Value, Vec<SeenPlace>) {
        let mut seen = Vec::new();
        let mut out = clone_iteratively(v);
        let visit = |place: Place<'_>, node: &mut Value| {
            seen.push((
                place.key.map(str::to_owned),
                place.parent_key.map(str::to_owned),
                place.cause_chain,
            ));
            *node = json!(seen.len());
        };
        if bounded {
            walk_bounded(&mut out, Place::ROOT, &mut { visit });
        } else {
            walk_iteratively(&mut out, visit);
        }
        (out, seen)
    }

    #[test]
    fn places_inherit_through_arrays_and_track_cause_chains() {
        let v = json!({
            "outer": {"inner": "s", "list": [1, [2]]},
            "top": true,
            "cause": {"code": "c", "Cause": {"CODE": "d"}, "list": [{"code": "e"}]},
        });
        let o = |s: &str| Some(s.to_owned());
        let (_, seen) = places(&v, true);
        assert_eq!(
            seen,
            vec![
                (o("CODE"), o("Cause"), true),
                (o("code"), o("cause"), true),
                (o("code"), o("list"), false),
                (o("inner"), o("outer"), false),
                (o("list"), o("outer"), false),
                (o("list"), o("outer"), false),
                (o("top"), None, true),
            ]
        );
    }

    #[test]
    fn both_walks_agree() {
        let shallow = json!({"a": [{"b": "s", "c": [1, null]}, "t"], "d": {"e": false}});
        let deep = Value::Array(vec![nest(150), shallow.clone()]);
        for v in [shallow, deep] {
            assert_eq!(places(&v, true), places(&v, false));
        }
    }

    #[test]
    fn truncation_is_stable() {
        let long = "y".repeat(9000);
        let once = truncate_text(&long, &RedactionConfig::default()).expect("cut");
        assert!(once.ends_with(TRUNCATION_SUFFIX));
        assert_eq!(truncate_text(&once, &RedactionConfig::default()), None);
        assert_eq!(truncate_text("short", &RedactionConfig::default()), None);
        let v = json!({"content": [{"type": "text", "text": long}]});
        let s1 = sanitize_tool_result(&v);
        assert_eq!(sanitize_tool_result(&s1), s1);
    }
}
