//! What a context reset keeps: after a rewind or branch switch the host's transcript is the
//! authority on which turns the session still has. The harness reads the idempotency keys of
//! the entries on the session's active path (its mirrored items carry
//! `codex:<thread id>:<item id>`), finds the Codex thread and the last turn those entries come
//! from, and continues the session on a fork of that thread through that turn, so the next
//! turn runs with the kept turns and without the cut ones.

use std::collections::HashSet;

use serde_json::Value;

use crate::protocol::ListedTurn;

/// The prefix of the idempotency keys of mirrored Codex items.
const MIRROR_PREFIX: &str = "codex:";

/// The idempotency key of a mirrored Codex item.
pub(crate) fn mirror_key(thread_id: &str, item_id: &str) -> String {
    format!("{MIRROR_PREFIX}{thread_id}:{item_id}")
}

/// The mirrored items of the newest Codex thread on a transcript path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeptItems {
    /// The thread the newest mirrored entry came from.
    pub(crate) thread_id: String,
    /// The newest mirrored item of that thread on the path.
    pub(crate) last_item: String,
    /// Every item of that thread on the path.
    pub(crate) items: HashSet<String>,
}

/// The thread and items the path's newest mirrored entry belongs to, or `None` when the path
/// holds no mirrored Codex item (everything was cut, or nothing ran yet).
pub(crate) fn kept_items<'a>(keys: impl IntoIterator<Item = &'a str>) -> Option<KeptItems> {
    let parsed: Vec<(&str, &str)> = keys
        .into_iter()
        .filter_map(|key| key.strip_prefix(MIRROR_PREFIX)?.split_once(':'))
        .filter(|(thread, item)| !thread.is_empty() && !item.is_empty())
        .collect();
    let (thread_id, last_item) = *parsed.last()?;
    Some(KeptItems {
        thread_id: thread_id.to_owned(),
        last_item: last_item.to_owned(),
        items: parsed
            .iter()
            .filter(|(thread, _)| *thread == thread_id)
            .map(|(_, item)| (*item).to_owned())
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
    /// The path's newest item is in none of the thread's turns.
    ItemNotFound,
    /// The path keeps only part of the thread's first turn.
    FirstTurnCut,
}

/// The last turn of `turns` (oldest first) the path keeps whole: the turn holding the path's
/// newest item when every item the harness mirrored from it is on the path, else the turn
/// before it (a turn cut in the middle is dropped whole: Codex forks by turns, and the model
/// must not see what the host cut).
pub(crate) fn last_kept_turn<'a>(
    turns: &'a [ListedTurn],
    kept: &KeptItems,
) -> Result<&'a str, NoKeptTurn> {
    let index = turns
        .iter()
        .position(|turn| {
            turn.items
                .iter()
                .any(|item| item_id(item) == Some(kept.last_item.as_str()))
        })
        .ok_or(NoKeptTurn::ItemNotFound)?;
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
    fn the_newest_mirrored_thread_decides() {
        let keys = [
            "codex:old:u0",
            "codex-settled-finalizer:run-1:assistant",
            "codex:th:u1",
            "host-only",
            "codex:th:a1",
        ];
        let kept = kept_items(keys).unwrap();
        assert_eq!(kept.thread_id, "th");
        assert_eq!(kept.last_item, "a1");
        assert_eq!(kept.items, HashSet::from(["u1".into(), "a1".into()]));
        assert_eq!(
            kept_items(["host-only", "codex-settled-finalizer:r:a"]),
            None
        );
        assert_eq!(mirror_key("th", "a1"), "codex:th:a1");
    }

    #[test]
    fn a_whole_turn_is_kept_and_a_cut_one_dropped() {
        let turns = turns();
        let whole = kept_items(["codex:th:u1", "codex:th:a1"]).unwrap();
        assert_eq!(last_kept_turn(&turns, &whole), Ok("t1"));
        // Reasoning is never mirrored, so it does not count as cut.
        let second = kept_items([
            "codex:th:u1",
            "codex:th:a1",
            "codex:th:u2",
            "codex:th:c2",
            "codex:th:a2",
        ])
        .unwrap();
        assert_eq!(last_kept_turn(&turns, &second), Ok("t2"));
        // The path ends inside t2 (its answer was cut): t2 goes whole.
        let cut = kept_items(["codex:th:u1", "codex:th:a1", "codex:th:u2"]).unwrap();
        assert_eq!(last_kept_turn(&turns, &cut), Ok("t1"));
        let first_cut = kept_items(["codex:th:u1"]).unwrap();
        assert_eq!(
            last_kept_turn(&turns, &first_cut),
            Err(NoKeptTurn::FirstTurnCut)
        );
        let unknown = kept_items(["codex:th:zz"]).unwrap();
        assert_eq!(
            last_kept_turn(&turns, &unknown),
            Err(NoKeptTurn::ItemNotFound)
        );
    }
}
