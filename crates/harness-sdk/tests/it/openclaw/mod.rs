//! OpenClaw's own unit tests for the same helpers, translated case by case. Each test is named
//! `openclaw_<file>_<case>` after the OpenClaw test file and case it translates. Where Tether
//! deliberately differs, the test keeps Tether's expectation with a one-line reason, and the
//! case is listed in `docs/compatibility.md`.

mod accepted_session_spawn;
mod embedded_agent_message_tool_source_reply;
mod embedded_agent_subscribe_tools;
mod redact;
mod tool_display;
mod tool_error_state;
mod tool_media_payloads;
mod tool_mutation;
mod tool_terminal_outcome;
mod user_turn_transcript;
