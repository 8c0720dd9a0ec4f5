//! Proptest twins of the finalizer fuzz targets (`fuzz/fuzz_targets/`): the same checks
//! (`fuzz/checks/finalizer.rs`, compiled into both), over arbitrary bytes and generated results,
//! with a bounded number of cases so they run in `cargo xtask ci`.

#[allow(unreachable_pub, dead_code)]
#[path = "../../../../fuzz/checks/finalizer.rs"]
mod checks;

use proptest::prelude::*;
use serde_json::{Value, json};

/// Results close to valid: an assistant object with arbitrary text, stop reason, content
/// blocks, and sometimes an extra field.
fn near_valid() -> impl Strategy<Value = Value> {
    let stop = prop::sample::select(vec!["stop", "toolUse", "length", "", "error"]);
    let block = prop_oneof![
        ".{0,16}".prop_map(|t| json!({"type": "text", "text": t})),
        ".{0,8}".prop_map(|n| json!({"type": "toolCall", "id": "c1", "name": n, "arguments": {}})),
        Just(json!({"type": "thinking", "thinking": "hmm"})),
        Just(json!(null)),
    ];
    let extra = prop::option::of(prop::sample::select(vec![
        "tools",
        "diagnostic",
        "x",
        "usage",
    ]));
    (
        stop,
        prop::collection::vec(block, 0..4),
        extra,
        any::<bool>(),
    )
        .prop_map(|(stop, content, extra, role_ok)| {
            let mut v = json!({
                "assistant": {
                    "role": if role_ok { "assistant" } else { "user" },
                    "content": content,
                    "stop_reason": stop,
                }
            });
            if let Some(field) = extra {
                v[field] = json!(1);
            }
            v
        })
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..256)
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn fuzz_twin_finalization_result(value in near_valid(), raw in bytes()) {
        checks::check_finalization_result(&serde_json::to_vec(&value).unwrap());
        checks::check_finalization_result(&raw);
    }

    #[test]
    fn fuzz_twin_finalization_projection(raw in bytes()) {
        checks::check_finalization_projection(&raw);
    }
}

/// The evidence builder covers every terminal, so the projection twin reaches each branch.
#[test]
fn fuzz_twin_projection_evidence_covers_every_terminal() {
    let mut seen = std::collections::BTreeSet::new();
    for first in 0..4u8 {
        let evidence = checks::evidence(&[first, 0, 1, 1, b'h', b'i']);
        seen.insert(
            format!("{:?}", evidence.attempt.terminal)
                .chars()
                .take(4)
                .collect::<String>(),
        );
        checks::check_finalization_projection(&[first, 0, 1, 1, b'h', b'i']);
    }
    assert_eq!(seen.len(), 4, "{seen:?}");
}
