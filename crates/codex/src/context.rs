//! What a context reset keeps: after a rewind or branch switch the host's transcript is the
//! authority on which turns the session still has. The harness reads the idempotency keys of
//! the entries on the session's active path (its mirrored items carry
//! `codex:<thread id>:<turn id>:<item id>`), finds the Codex thread and the last turn those
//! entries come from, and continues the session on a fork of that thread through that turn,
//! so the next turn runs with the kept turns and without the cut ones.

use std::collections::HashSet;

use serde_json::Value;

use crate::protocol::ListedTurn;

/// The prefix of the idempotency keys of mirrored Codex items.
const MIRROR_PREFIX: &str = "codex:";

/// The idempotency key of a mirrored Codex item: `codex:<thread>:<turn>:<item>`, and for the
/// `n`-th item of one turn reported under an id the turn already used (`n` ≥ 2; a provider
/// numbering its call ids per response), `codex:<thread>:<turn>:<item>#<n>`.
///
/// Item ids come from the model provider through Codex (a message's id, a tool call's call
/// id) and are not unique everywhere: some providers number them per response or per
/// process. The turn id, which Codex mints, scopes them, so two distinct items never share a
/// key and neither is dropped as a repeat of the other.
pub(crate) fn mirror_key(thread_id: &str, turn_id: &str, item_id: &str, occurrence: u32) -> String {
    if occurrence <= 1 {
        format!("{MIRROR_PREFIX}{thread_id}:{turn_id}:{item_id}")
    } else {
        format!("{MIRROR_PREFIX}{thread_id}:{turn_id}:{item_id}#{occurrence}")
    }
}

/// The item id of a key's item part (`<item>` or `<item>#<n>`).
fn item_of(part: &str) -> &str {
    match part.rsplit_once('#') {
        Some((item, n)) if !item.is_empty() && n.parse::<u32>().is_ok_and(|n| n >= 2) => item,
        _ => part,
    }
}

/// The mirrored items of the newest Codex turn on a transcript path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptItems {
    /// The thread the newest mirrored entry came from.
    pub(crate) thread_id: String,
    /// The turn of that thread the newest mirrored entry came from.
    pub(crate) last_turn: String,
    /// Every item of that turn on the path.
    pub(crate) items: HashSet<String>,
}

/// The thread, turn and items the path's newest mirrored entry belongs to, or `None` when the
/// path holds no mirrored Codex item (everything was cut, or nothing ran yet).
pub(crate) fn kept_items<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<KeptItems> {
    let parsed: Vec<(&str, &str, &str)> = keys
        .into_iter()
        .filter_map(|key| {
            let mut parts = key.strip_prefix(MIRROR_PREFIX)?.splitn(3, ':');
            Some((parts.next()?, parts.next()?, item_of(parts.next()?)))
        })
        .filter(|(thread, turn, item)| !thread.is_empty() && !turn.is_empty() && !item.is_empty())
        .collect();
    let (thread_id, last_turn, _) = *parsed.last()?;
    Some(KeptItems {
        thread_id: thread_id.to_owned(),
        last_turn: last_turn.to_owned(),
        items: parsed
            .iter()
            .filter(|(thread, turn, _)| *thread == thread_id && *turn == last_turn)
            .map(|(_, _, item)| (*item).to_owned())
            .collect(),
    })
}

/// The item kinds the harness mirrors into the host transcript.
fn is_mirrored(item: &Value) -> bool {
    matches!(
        item.get("type").and_then(Value::as_str),
        Some("userMessage" | "agentMessage" | "dynamicToolCall")
    )
}

fn item_id(item: &Value) -> Option<&str> {
    item.get("id").and_then(Value::as_str)
}

/// Why no turn of the source thread can be kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoKeptTurn {
    /// The turn of the path's newest item is none of the thread's turns.
    TurnNotFound,
    /// The path keeps only part of the thread's first turn.
    FirstTurnCut,
}

/// The last turn of `turns` (oldest first) the path keeps whole: the turn of the path's newest
/// item when every item the harness mirrored from it is on the path, else the turn before it
/// (a turn cut in the middle is dropped whole: Codex forks by turns, and the model must not
/// see what the host cut).
pub(crate) fn last_kept_turn<'a>(
    turns: &'a [ListedTurn],
    kept: &KeptItems,
) -> Result<&'a str, NoKeptTurn> {
    let index = turns
        .iter()
        .position(|turn| turn.id == kept.last_turn)
        .ok_or(NoKeptTurn::TurnNotFound)?;
    let whole = turns[index]
        .items
        .iter()
        .filter(|item| is_mirrored(item))
        .filter_map(item_id)
        .all(|id| kept.items.contains(id));
    if whole {
        return Ok(&turns[index].id);
    }
    index
        .checked_sub(1)
        .map(|previous| turns[previous].id.as_str())
        .ok_or(NoKeptTurn::FirstTurnCut)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn turn(id: &str, items: &[(&str, &str)]) -> ListedTurn {
        ListedTurn {
            id: id.to_owned(),
            items: items
                .iter()
                .map(|(kind, id)| json!({ "type": kind, "id": id }))
                .collect(),
        }
    }

    fn turns() -> Vec<ListedTurn> {
        vec![
            turn("t1", &[("userMessage", "u1"), ("agentMessage", "a1")]),
            turn(
                "t2",
                &[
                    ("userMessage", "u2"),
                    ("reasoning", "r2"),
                    ("dynamicToolCall", "c2"),
                    ("agentMessage", "a2"),
                ],
            ),
            turn("t3", &[("userMessage", "u3"), ("agentMessage", "a3")]),
        ]
    }

    #[test]
    fn the_newest_mirrored_turn_decides() {
        let keys = [
            "codex:old:t0:u0",
            "codex-settled-finalizer:run-1:assistant",
            "codex:th:t1:u1",
            "host-only",
            "codex:th:t1:a1",
        ];
        let kept = kept_items(keys).unwrap();
        assert_eq!(kept.thread_id, "th");
        assert_eq!(kept.last_turn, "t1");
        assert_eq!(kept.items, HashSet::from(["u1".into(), "a1".into()]));
        assert_eq!(
            kept_items(["host-only", "codex-settled-finalizer:r:a"]),
            None
        );
        assert_eq!(mirror_key("th", "t1", "a1", 1), "codex:th:t1:a1");
        assert_eq!(mirror_key("th", "t1", "call_0", 2), "codex:th:t1:call_0#2");
        // A repeated id in one turn is the same item id to the thread's listing.
        let repeated = kept_items(["codex:th:t2:call_0", "codex:th:t2:call_0#2"]).unwrap();
        assert_eq!(repeated.items, HashSet::from(["call_0".into()]));
        // An item id with a colon or a `#` of its own is kept whole.
        let odd = kept_items(["codex:th:t2:a:b#x"]).unwrap();
        assert_eq!(odd.items, HashSet::from(["a:b#x".into()]));
    }

    #[test]
    fn item_ids_repeated_across_turns_keep_their_turns_apart() {
        // A provider that numbers ids per process: the same ids in t1 and t3.
        let turns = vec![
            turn("t1", &[("userMessage", "u1"), ("agentMessage", "msg-1")]),
            turn("t2", &[("userMessage", "u2"), ("agentMessage", "msg-2")]),
            turn("t3", &[("userMessage", "u3"), ("agentMessage", "msg-1")]),
        ];
        let keys = [
            "codex:th:t1:u1",
            "codex:th:t1:msg-1",
            "codex:th:t2:u2",
            "codex:th:t2:msg-2",
            "codex:th:t3:u3",
            "codex:th:t3:msg-1",
        ];
        assert_eq!(last_kept_turn(&turns, &kept_items(keys).unwrap()), Ok("t3"));
        // t3's answer cut: t3 goes whole, t2 is the last kept.
        assert_eq!(
            last_kept_turn(&turns, &kept_items(keys[..5].iter().copied()).unwrap()),
            Ok("t2")
        );
    }

    #[test]
    fn a_whole_turn_is_kept_and_a_cut_one_dropped() {
        let turns = turns();
        let whole = kept_items(["codex:th:t1:u1", "codex:th:t1:a1"]).unwrap();
        assert_eq!(last_kept_turn(&turns, &whole), Ok("t1"));
        // Reasoning is never mirrored, so it does not count as cut.
        let second = kept_items([
            "codex:th:t1:u1",
            "codex:th:t1:a1",
            "codex:th:t2:u2",
            "codex:th:t2:c2",
            "codex:th:t2:a2",
        ])
        .unwrap();
        assert_eq!(last_kept_turn(&turns, &second), Ok("t2"));
        // The path ends inside t2 (its answer was cut): t2 goes whole.
        let cut = kept_items(["codex:th:t1:u1", "codex:th:t1:a1", "codex:th:t2:u2"]).unwrap();
        assert_eq!(last_kept_turn(&turns, &cut), Ok("t1"));
        let first_cut = kept_items(["codex:th:t1:u1"]).unwrap();
        assert_eq!(
            last_kept_turn(&turns, &first_cut),
            Err(NoKeptTurn::FirstTurnCut)
        );
        let unknown = kept_items(["codex:th:tz:zz"]).unwrap();
        assert_eq!(
            last_kept_turn(&turns, &unknown),
            Err(NoKeptTurn::TurnNotFound)
        );
    }
}
