//! Tool-result vectors.
