//! The native-session binding lifecycle (reference `native-session-lifecycle.md` §2.1–2.10).
