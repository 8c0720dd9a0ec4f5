//! the narrow result validator, plus property tests.

use proptest::prelude::*;
use serde_json::{Value, json};
use tether_finalizer::{
    ALLOWED_RESULT_FIELDS, FinalizerError, validate_settled_turn_finalization_result,
};

fn assistant(text: &str, stop: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}], "stop_reason": stop})
}

#[test]
fn finalization_s001_valid_text_answer_is_returned_unchanged() {
    let raw = json!({"assistant": assistant("done", "stop")});
    let result = validate_settled_turn_finalization_result(&raw).expect("valid");
    assert_eq!(result.visible_text(), "done");
    assert_eq!(result.to_value(), raw, "the same result comes back");
}

#[test]
fn finalization_s002_tool_call_with_tool_use_stop_is_rejected() {
    let raw = json!({"assistant": {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": "c1", "name": "write", "arguments": {}}],
        "stop_reason": "toolUse"
    }});
    let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
    assert!(matches!(&err, FinalizerError::ToolCall { tool_names } if tool_names == &["write"]));
    assert!(err.to_string().contains("returned a tool call"));
    // A bare toolUse stop reports "tool call", not "stop reason" (check 3 runs before 4).
    let bare = json!({"assistant": assistant("text", "toolUse")});
    assert!(matches!(
        validate_settled_turn_finalization_result(&bare),
        Err(FinalizerError::ToolCall { .. })
    ));
    // A tool-call block under a `stop` reason fails closed too.
    let hidden = json!({"assistant": {
        "role": "assistant",
        "content": [{"type": "text", "text": "ok"}, {"type": "toolCall", "name": "exec"}],
        "stop_reason": "stop"
    }});
    assert!(matches!(
        validate_settled_turn_finalization_result(&hidden),
        Err(FinalizerError::ToolCall { .. })
    ));
}

#[test]
fn finalization_s003_whitespace_answer_is_empty_and_carries_the_result() {
    let raw = json!({"assistant": assistant("  ", "stop")});
    let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
    assert!(err.to_string().contains("without a visible answer"));
    match err {
        FinalizerError::Empty { result, silent } => {
            assert!(!silent);
            assert_eq!(result.to_value(), raw);
        }
        other => panic!("expected Empty, got {other:?}"),
    }
}

#[test]
fn finalization_s004_silent_token_is_empty_for_the_host_silence_policy() {
    for text in ["NO_REPLY", " NO_REPLY\n"] {
        let raw = json!({"assistant": assistant(text, "stop")});
        let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Settled-turn finalization completed without a visible answer"
        );
        // Newer behavior (G4): the Empty class, so the host silence policy decides.
        assert!(matches!(err, FinalizerError::Empty { silent: true, .. }));
    }
}

#[test]
fn finalization_s005_unsuccessful_stop_reasons_are_rejected() {
    for reason in ["length", "error", "aborted"] {
        let raw = json!({"assistant": assistant("partial", reason)});
        let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("Settled-turn finalization returned unsuccessful stop reason: {reason}")
        );
    }
    let missing = json!({"assistant": {"role": "assistant", "content": "x"}});
    assert!(matches!(
        validate_settled_turn_finalization_result(&missing),
        Err(FinalizerError::UnsuccessfulStopReason { reason }) if reason == "missing"
    ));
}

#[test]
fn finalization_s006_negative_message_index_is_rejected() {
    for index in [json!(-1), json!(1.5), json!("2"), json!(null)] {
        let raw = json!({"assistant": assistant("done", "stop"), "assistant_message_index": index});
        let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
        assert!(matches!(err, FinalizerError::InvalidMessageIndex), "{raw}");
        assert!(err.to_string().contains("invalid assistant message index"));
    }
}

#[test]
fn finalization_s007_unknown_field_is_rejected_even_when_null() {
    for value in [json!(true), json!(null)] {
        let raw =
            json!({"assistant": assistant("done", "stop"), "futureCapabilityEvidence": value});
        let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Settled-turn finalization returned unsupported result field: futureCapabilityEvidence"
        );
    }
    // The unknown-field check runs first: even without an assistant it reports the field.
    let raw = json!({"tools": []});
    assert!(matches!(
        validate_settled_turn_finalization_result(&raw),
        Err(FinalizerError::UnsupportedResultField { field }) if field == "tools"
    ));
}

#[test]
fn validator_rejects_non_assistant_roles_and_shapes() {
    for raw in [
        json!(null),
        json!([]),
        json!({}),
        json!({"assistant": null}),
        json!({"assistant": {"role": "user", "content": "x", "stop_reason": "stop"}}),
    ] {
        let err = validate_settled_turn_finalization_result(&raw).unwrap_err();
        assert!(matches!(err, FinalizerError::NotAssistant), "{raw}");
        assert_eq!(
            err.to_string(),
            "Settled-turn finalization did not return an assistant message"
        );
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop_oneof![
            Just("assistant".to_owned()),
            Just("stop".to_owned()),
            Just("toolUse".to_owned()),
            Just("text".to_owned()),
            Just("toolCall".to_owned()),
            Just("NO_REPLY".to_owned()),
            ".{0,8}",
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop_oneof![
            Just("assistant".to_owned()),
            Just("role".to_owned()),
            Just("content".to_owned()),
            Just("stop_reason".to_owned()),
            Just("type".to_owned()),
            Just("text".to_owned()),
            Just("usage".to_owned()),
            Just("assistant_message_index".to_owned()),
            Just("diagnostic_trace".to_owned()),
            "[a-z_]{1,6}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key, inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn property_arbitrary_json_never_panics_the_validator(raw in arb_json()) {
        match validate_settled_turn_finalization_result(&raw) {
            Ok(result) => {
                // A valid result round-trips through the typed form.
                let again = validate_settled_turn_finalization_result(&result.to_value());
                prop_assert!(again.is_ok());
            }
            Err(err) => prop_assert!(!err.to_string().is_empty()),
        }
    }

    #[test]
    fn property_any_field_outside_the_allowed_set_is_rejected(
        field in "[A-Za-z_]{1,12}",
        value in arb_json(),
        text in ".{0,12}",
    ) {
        prop_assume!(!ALLOWED_RESULT_FIELDS.contains(&field.as_str()));
        let raw = json!({"assistant": assistant(&text, "stop"), field.clone(): value});
        match validate_settled_turn_finalization_result(&raw) {
            Err(FinalizerError::UnsupportedResultField { field: reported }) => prop_assert_eq!(reported, field),
            other => prop_assert!(false, "expected unsupported field, got {:?}", other),
        }
    }
}
