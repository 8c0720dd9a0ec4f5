//! Tool and media result helpers (reference `tool-results.md` parts A–H).
