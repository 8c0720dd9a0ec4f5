//! The run's cancellation signal ([`RunSignal`]): cancels the run and its live try, and
//! remembers that the run's single finalization phase (and recovery notice) happened.

use std::sync::{Mutex, PoisonError};

use tether_core::Cancellation;

/// The run's cancellation signal (the queue signal). Cancelling it also cancels the live try;
/// a retired try's cancellation is detached, so its late callbacks cannot abort the run.
///
/// It also remembers whether the run's finalization phase already ran: the phase runs at most
/// once per run, so a retry loop that calls it again gets `not-attempted`.
#[derive(Debug, Default)]
pub struct RunSignal {
    run: Cancellation,
    phase_started: std::sync::atomic::AtomicBool,
    notice_recorded: std::sync::atomic::AtomicBool,
    reason: Mutex<Option<String>>,
    live_try: Mutex<Option<Cancellation>>,
}

impl RunSignal {
    /// A fresh, uncancelled signal.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels the run (and the live try) with `reason`.
    pub fn cancel(&self, reason: impl Into<String>) {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| reason.into());
        self.run.cancel();
        if let Some(live) = self
            .live_try
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            live.cancel();
        }
    }

    /// Times out the live try only (the host's per-try timer at the try's deadline): the try's
    /// cancellation fires, the run stays live, and the next try gets a fresh one. Returns
    /// whether a try was live.
    pub fn time_out_live_try(&self) -> bool {
        match self
            .live_try
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
        {
            Some(live) => {
                live.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether the run was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.run.is_cancelled()
    }

    /// The abort reason.
    pub fn reason(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The run-level cancellation flag (handed to the fallback append).
    pub fn cancellation(&self) -> &Cancellation {
        &self.run
    }

    /// Whether the run's finalization phase already ran.
    pub fn finalization_phase_started(&self) -> bool {
        self.phase_started.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Claims the run's single finalization phase; `false` when it was already claimed.
    pub(crate) fn claim_phase(&self) -> bool {
        !self
            .phase_started
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    /// Records the run's single recovery notice; `false` when it was already recorded.
    pub(crate) fn claim_notice(&self) -> bool {
        !self
            .notice_recorded
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    pub(crate) fn install_try(&self, try_cancel: &Cancellation) {
        let mut slot = self.live_try.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = Some(try_cancel.clone());
        if self.run.is_cancelled() {
            try_cancel.cancel();
        }
    }

    pub(crate) fn retire_try(&self) {
        *self.live_try.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}
