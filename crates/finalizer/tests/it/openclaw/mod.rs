//! OpenClaw's own settled-turn finalization tests, translated case by case and named
//! `openclaw_<file>_<case>`. Deliberate differences keep Tether's expectation with a one-line
//! reason and are listed in `docs/compatibility.md`.

mod settled_turn_finalization;
mod settled_turn_finalization_result;
mod settled_turn_projection;
