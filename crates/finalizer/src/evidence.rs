//! Attempt evidence that `tether-core`'s [`AttemptResult`](tether_core::AttemptResult) does not
//! carry, modelled here as the finalizer's own input types.

/// Tool item lifecycle counts of an attempt (started, completed, still active).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ItemLifecycle {
    /// Items started.
    pub started: u32,
    /// Items completed.
    pub completed: u32,
    /// Items still active.
    pub active: u32,
}

impl ItemLifecycle {
    /// A lifecycle with the given counts.
    pub const fn new(started: u32, completed: u32, active: u32) -> Self {
        Self {
            started,
            completed,
            active,
        }
    }

    /// Whether any count is non-zero.
    pub fn any(&self) -> bool {
        self.started > 0 || self.completed > 0 || self.active > 0
    }

    /// Started > 0, completed == started, active == 0.
    pub fn settled(&self) -> bool {
        self.started > 0 && self.completed == self.started && self.active == 0
    }
}

/// Which budget or observation timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TimeoutKind {
    /// The prompt stream was idle too long (the only timeout that may still finalize).
    IdlePrompt,
    /// The runtime timer fired.
    Runtime,
    /// The run wall-clock budget ran out.
    RunBudget,
    /// The timeout was observed during compaction.
    Compaction,
    /// The timeout was observed during tool execution.
    ToolExecution,
}
