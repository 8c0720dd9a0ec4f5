//! Time and randomness, injected.
//!
//! `tether-core` never reads a global clock: every decision that depends on time takes a
//! [`Clock`], and every fresh lease token comes from a [`TokenSource`]. Tests use [`FakeClock`].

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An absolute instant: milliseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Self = Self(0);

    /// Builds a timestamp from milliseconds since the Unix epoch.
    pub const fn from_millis(ms: i64) -> Self {
        Self(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating at the representable range.
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(ms))
    }

    /// The duration from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_since(self, earlier: Self) -> Duration {
        u64::try_from(self.0.saturating_sub(earlier.0))
            .map(Duration::from_millis)
            .unwrap_or(Duration::ZERO)
    }
}

impl Add<Duration> for Timestamp {
    type Output = Self;
    fn add(self, rhs: Duration) -> Self {
        self.saturating_add(rhs)
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Self;
    fn sub(self, rhs: Duration) -> Self {
        let ms = i64::try_from(rhs.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_sub(ms))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}ms)", self.0)
    }
}

/// RFC 3339 in UTC with milliseconds, for example `2023-11-14T22:13:20.000Z` (years outside
/// 0000–9999 keep their sign and digits).
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.rem_euclid(1000);
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let of_day = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            of_day / 3600,
            of_day % 3600 / 60,
            of_day % 60
        )
    }
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    // `day` is 1..=31 and `month` 1..=12 by construction.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// A source of the current time.
///
/// On a single host the system clock is enough. With PostgreSQL shared by several hosts, lease
/// decisions must use the database server's clock (see `docs/storage.md`, "One clock"); the
/// storage crate provides such a clock.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// The process's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        // Reading the clock is not I/O; tether-core still only does it behind this trait.
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(ms)
    }
}

/// A controllable clock for tests. Cloning shares the same instant.
#[derive(Debug, Clone, Default)]
pub struct FakeClock {
    now: Arc<AtomicI64>,
}

impl FakeClock {
    /// A fake clock starting at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: Arc::new(AtomicI64::new(start.as_millis())),
        }
    }

    /// Sets the current instant.
    pub fn set(&self, at: Timestamp) {
        self.now.store(at.as_millis(), Ordering::SeqCst);
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.now.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::SeqCst))
    }
}

/// A source of fresh, unguessable lease tokens.
pub trait TokenSource: Send + Sync + fmt::Debug {
    /// A new token, different from every token handed out before.
    fn next_token(&self) -> crate::LeaseToken;
}

/// A deterministic token source for tests: `prefix-1`, `prefix-2`, …
#[derive(Debug)]
pub struct SequentialTokens {
    prefix: String,
    next: AtomicU64,
}

impl SequentialTokens {
    /// Tokens named `<prefix>-<n>`, starting at 1.
    ///
    /// # Panics
    ///
    /// When `prefix` cannot make valid tokens (a control character, or too long for the
    /// largest `n`): said here, at the call that chose the prefix.
    #[track_caller]
    pub fn new(prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        if let Err(e) = crate::LeaseToken::new(format!("{prefix}-{}", u64::MAX)) {
            panic!("SequentialTokens prefix {prefix:?} cannot make valid lease tokens: {e}");
        }
        Self {
            prefix,
            next: AtomicU64::new(1),
        }
    }
}

impl TokenSource for SequentialTokens {
    fn next_token(&self) -> crate::LeaseToken {
        let n = self.next.fetch_add(1, Ordering::SeqCst);
        crate::LeaseToken::new(format!("{}-{n}", self.prefix))
            .unwrap_or_else(|_| unreachable!("a non-empty prefix-number token is always valid"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_display_as_rfc_3339_utc() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_700_000_000_000, "2023-11-14T22:13:20.000Z"),
            (951_782_400_123, "2000-02-29T00:00:00.123Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        ];
        for (ms, text) in cases {
            assert_eq!(Timestamp::from_millis(ms).to_string(), text, "{ms}");
        }
    }

    #[test]
    fn fake_clock_is_shared_and_controllable() {
        let clock = FakeClock::new(Timestamp::from_millis(1_000));
        let other = clock.clone();
        clock.advance(Duration::from_secs(2));
        assert_eq!(other.now(), Timestamp::from_millis(3_000));
        other.set(Timestamp::from_millis(10));
        assert_eq!(clock.now().as_millis(), 10);
    }

    #[test]
    fn timestamp_arithmetic_saturates() {
        let t = Timestamp::from_millis(i64::MAX - 1);
        assert_eq!(t + Duration::from_secs(5), Timestamp::from_millis(i64::MAX));
        assert_eq!(
            Timestamp::from_millis(5).saturating_since(Timestamp::from_millis(9)),
            Duration::ZERO
        );
    }

    #[test]
    fn sequential_tokens_are_distinct() {
        let tokens = SequentialTokens::new("t");
        assert_eq!(tokens.next_token().as_str(), "t-1");
        assert_eq!(tokens.next_token().as_str(), "t-2");
    }

    #[test]
    #[should_panic(expected = "cannot make valid lease tokens")]
    fn a_prefix_that_cannot_make_tokens_is_refused_where_it_is_chosen() {
        let _ = SequentialTokens::new("bad\nprefix");
    }
}
