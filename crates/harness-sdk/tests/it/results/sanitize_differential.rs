//! The redaction walks against recorded outputs: every document of the generated corpus
//! ([`super::sanitize_corpus`]) is sanitized four ways (`sanitize_tool_args`,
//! `redact_structured`, `sanitize_tool_result`, and `sanitize_tool_args_with` caller token
//! prefixes) and the digest of the outputs is compared with the one recorded, for the same
//! document, by the implementation before the key memo and the confirmed pair filter
//! (`sanitize_corpus.digests`: the digest of document `n` on line `n`, in hex). A change of output in any of the
//! four, for any document, fails here.

use serde_json::Value;
use tether_harness_sdk::results::redact::RedactionConfig;
use tether_harness_sdk::results::sanitize::{
    redact_structured, sanitize_tool_args, sanitize_tool_args_with, sanitize_tool_result,
};

use super::sanitize_corpus::{corpus_document, outputs_digest};

const RECORDED: &str = include_str!("sanitize_corpus.digests");

/// The caller configuration of the fourth output (caller prefixes turn every family on).
fn custom() -> RedactionConfig {
    RedactionConfig {
        token_prefixes: vec!["custom-secret-".into(), "zz".into()],
    }
}

fn outputs(doc: &Value, custom: &RedactionConfig) -> [Value; 4] {
    [
        sanitize_tool_args(doc),
        redact_structured(doc),
        sanitize_tool_result(doc),
        sanitize_tool_args_with(doc, custom),
    ]
}

#[test]
fn corpus_outputs_match_the_recorded_ones() {
    let custom = custom();
    let mut checked = 0;
    let mut mismatches = Vec::new();
    for (index, line) in (0u64..).zip(RECORDED.lines()) {
        let digest = u64::from_str_radix(line, 16).expect("hex digest");
        let doc = corpus_document(index);
        let outs = outputs(&doc, &custom);
        if outputs_digest(&outs) != digest {
            mismatches.push(format!(
                "document {index}: {doc}\n  args:       {}\n  structured: {}\n  result:     {}\n  custom:     {}",
                outs[0], outs[1], outs[2], outs[3]
            ));
        }
        checked += 1;
    }
    assert_eq!(checked, 3000, "the recorded corpus is complete");
    assert!(
        mismatches.is_empty(),
        "{} of {checked} documents changed output; the first ones:\n{}",
        mismatches.len(),
        mismatches[..mismatches.len().min(5)].join("\n")
    );
}

/// The corpus is worth comparing: most families of the pattern layer fire in it, so a
/// large share of documents is changed by sanitizing, and not only under sensitive keys.
#[test]
fn the_corpus_exercises_the_pattern_layer() {
    let mut changed = 0;
    let mut free_text_changed = 0;
    for index in 0..3000 {
        let doc = corpus_document(index);
        if sanitize_tool_args(&doc) != doc {
            changed += 1;
        }
        if let Value::String(s) = &doc
            && sanitize_tool_args(&doc) != Value::String(s.clone())
        {
            free_text_changed += 1;
        }
    }
    assert!(changed > 1000, "{changed}");
    assert!(free_text_changed > 100, "{free_text_changed}");
}
