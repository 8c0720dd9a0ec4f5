//! The injectable timer: every sleep of the lifecycle (busy retries, heartbeats) goes through
//! a [`Timer`], so tests can drive heartbeats deterministically together with a
//! [`FakeClock`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tether_core::{BoxFuture, Clock, FakeClock, Timestamp};
use tokio::sync::oneshot;

/// A source of sleeps.
pub trait Timer: Send + Sync + fmt::Debug {
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// The production timer: `tokio::time::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioTimer;

impl Timer for TokioTimer {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A manual timer for tests, tied to a [`FakeClock`].
///
/// A sleep completes once [`ManualTimer::advance`] moves the clock to (or past) its deadline.
/// `advance` wakes sleepers one deadline at a time, in order, setting the clock to each
/// deadline and letting the woken tasks run before going on, so a heartbeat that is due three
/// times within the advanced span runs three times, each at its own instant.
///
/// Moving the [`FakeClock`] directly (`set`, `advance`) changes the time without waking
/// anyone, like jumping the system time under a fake-timer test.
///
/// ```
/// use std::time::Duration;
/// use tether_core::{Clock, FakeClock, Timestamp};
/// use tether_harness_sdk::lifecycle::{ManualTimer, Timer};
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let clock = FakeClock::new(Timestamp::from_millis(0));
/// let timer = ManualTimer::new(clock.clone());
/// let sleep = tokio::spawn(timer.sleep(Duration::from_secs(1)));
/// timer.advance(Duration::from_millis(999)).await;
/// assert!(!sleep.is_finished());
/// timer.advance(Duration::from_millis(1)).await;
/// assert!(sleep.is_finished());
/// assert_eq!(clock.now(), Timestamp::from_millis(1_000));
/// # });
/// ```
pub struct ManualTimer {
    clock: FakeClock,
    state: Mutex<Sleepers>,
    idle: Option<IdleProbe>,
}

/// Tells a [`ManualTimer`] whether background work (for example store calls doing real I/O)
/// is still in flight.
pub type IdleProbe = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

impl fmt::Debug for ManualTimer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualTimer")
            .field("clock", &self.clock)
            .field("pending", &self.pending())
            .field("idle_probe", &self.idle.is_some())
            .finish()
    }
}

#[derive(Debug, Default)]
struct Sleepers {
    next_seq: u64,
    waiting: BTreeMap<(Timestamp, u64), oneshot::Sender<()>>,
}

impl ManualTimer {
    /// How many times [`ManualTimer::settle`] yields to let woken tasks run.
    const SETTLE_YIELDS: usize = 64;

    /// How long [`ManualTimer::settle`] waits in real time for an idle probe before giving up.
    const SETTLE_LIMIT: Duration = Duration::from_secs(30);

    /// A manual timer over `clock`.
    pub fn new(clock: FakeClock) -> Self {
        Self {
            clock,
            state: Mutex::new(Sleepers::default()),
            idle: None,
        }
    }

    /// A manual timer whose [`settle`](ManualTimer::settle) also waits, in real time, until
    /// `idle` reports that no background work is in flight (for stores doing real I/O).
    pub fn with_idle_probe(clock: FakeClock, idle: IdleProbe) -> Self {
        Self {
            idle: Some(idle),
            ..Self::new(clock)
        }
    }

    /// The clock this timer moves.
    pub fn clock(&self) -> &FakeClock {
        &self.clock
    }

    /// Number of sleeps still waiting for their deadline.
    pub fn pending(&self) -> usize {
        self.lock()
            .waiting
            .values()
            .filter(|s| !s.is_closed())
            .count()
    }

    /// Lets other tasks on the runtime run until they block again (yields a bounded number of
    /// times; meant for a current-thread test runtime). With an idle probe, repeats until the
    /// probe reports idle right after a round of yields (bounded by 30 s of real time).
    pub async fn settle(&self) {
        let started = std::time::Instant::now();
        loop {
            for _ in 0..Self::SETTLE_YIELDS {
                tokio::task::yield_now().await;
            }
            match &self.idle {
                Some(idle) if !idle() && started.elapsed() < Self::SETTLE_LIMIT => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                _ => break,
            }
        }
    }

    /// Moves the clock forward by `by`, waking every sleeper due on the way, in deadline order.
    pub async fn advance(&self, by: Duration) {
        let target = self.clock.now() + by;
        loop {
            self.settle().await;
            let due = {
                let mut state = self.lock();
                let first = state.waiting.keys().next().copied();
                match first {
                    Some(k) if k.0 <= target => state.waiting.remove(&k).map(|tx| (k.0, tx)),
                    _ => None,
                }
            };
            let Some((deadline, tx)) = due else { break };
            if deadline > self.clock.now() {
                self.clock.set(deadline);
            }
            // A dropped sleeper (cancelled) simply does not receive.
            let _ = tx.send(());
        }
        if target > self.clock.now() {
            self.clock.set(target);
        }
        self.settle().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sleepers> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Timer for ManualTimer {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        let deadline = self.clock.now() + duration;
        if duration.is_zero() {
            return Box::pin(std::future::ready(()));
        }
        let (tx, rx) = oneshot::channel();
        {
            let mut state = self.lock();
            state.waiting.retain(|_, s| !s.is_closed());
            let seq = state.next_seq;
            state.next_seq += 1;
            state.waiting.insert((deadline, seq), tx);
        }
        Box::pin(async move {
            // The sender is only dropped with the timer itself; then never wake.
            if rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_sleepers_in_deadline_order_at_their_instants() {
        let clock = FakeClock::new(Timestamp::from_millis(0));
        let timer = std::sync::Arc::new(ManualTimer::new(clock.clone()));
        let seen = std::sync::Arc::new(Mutex::new(Vec::new()));
        for ms in [300_u64, 100, 200] {
            let timer = timer.clone();
            let seen = seen.clone();
            let clock = clock.clone();
            tokio::spawn(async move {
                timer.sleep(Duration::from_millis(ms)).await;
                seen.lock().unwrap().push((ms, clock.now().as_millis()));
            });
        }
        timer.settle().await;
        assert_eq!(timer.pending(), 3);
        timer.advance(Duration::from_millis(250)).await;
        assert_eq!(*seen.lock().unwrap(), vec![(100, 100), (200, 200)]);
        assert_eq!(clock.now().as_millis(), 250);
        timer.advance(Duration::from_millis(50)).await;
        assert_eq!(seen.lock().unwrap().len(), 3);
        assert_eq!(timer.pending(), 0);
    }

    #[tokio::test]
    async fn a_repeating_sleeper_fires_once_per_period() {
        let clock = FakeClock::new(Timestamp::from_millis(0));
        let timer = std::sync::Arc::new(ManualTimer::new(clock.clone()));
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handle = {
            let timer = timer.clone();
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    timer.sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            })
        };
        timer.advance(Duration::from_millis(35)).await;
        assert_eq!(ticks.load(std::sync::atomic::Ordering::SeqCst), 3);
        handle.abort();
    }
}
