//! Lease values and lease math.
//!
//! A lease is held on a binding row by one owner at a time. It carries the exact random
//! [`LeaseToken`] minted for one acquisition, the monotonic [`LeaseEpoch`] the store assigned to
//! that acquisition (the fencing token handed to the owner, see `docs/storage.md`, "Rows, revisions
//! and lease epochs"), and the absolute expiry. Expiry is inclusive: a lease is expired when
//! `expires_at <= now`.

use std::fmt;
use std::time::Duration;

use crate::ids::{IdError, validate};
use crate::time::Timestamp;

/// The exact random token of one lease acquisition.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct LeaseToken(String);

impl LeaseToken {
    /// Validates and builds a token (non-blank, bounded, no control characters).
    pub fn new(raw: impl AsRef<str>) -> Result<Self, IdError> {
        validate("lease token", raw.as_ref()).map(Self)
    }

    /// The token as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first eight characters, for logs (never log a whole token).
    pub fn prefix(&self) -> &str {
        let end = self
            .0
            .char_indices()
            .nth(8)
            .map(|(i, _)| i)
            .unwrap_or(self.0.len());
        &self.0[..end]
    }
}

impl fmt::Debug for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LeaseToken({}…)", self.prefix())
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! counter {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
        pub struct $name(u64);

        impl $name {
            /// The first value handed out.
            pub const INITIAL: Self = Self(1);

            /// Builds the value from its stored number.
            pub const fn new(value: u64) -> Self {
                Self(value)
            }

            /// The stored number.
            pub const fn get(self) -> u64 {
                self.0
            }

            /// The next value (saturating).
            #[must_use]
            pub const fn next(self) -> Self {
                Self(self.0.saturating_add(1))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

counter!(
    /// The fencing token of one lease acquisition. Strictly increasing per key for the life of
    /// the store (also across row deletion), so a target can reject a stale writer.
    LeaseEpoch
);
counter!(
    /// A binding row's revision, incremented by the store on every write. Together with the
    /// row's expiry it is the compare-and-swap comparison.
    Revision
);
counter!(
    /// A host session entry's lifecycle revision, bumped on every generation change.
    LifecycleRevision
);

impl LeaseEpoch {
    /// Checks a writer's epoch against the current one: only the current epoch may write.
    pub fn admits(self, writer: LeaseEpoch) -> bool {
        writer == self
    }
}

/// The lease columns of a binding row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The exact token of the acquisition.
    pub token: LeaseToken,
    /// The epoch the store assigned to the acquisition.
    pub epoch: LeaseEpoch,
    /// Absolute expiry (exclusive of liveness: expired when `expires_at <= now`).
    pub expires_at: Timestamp,
    /// When this acquisition was first written.
    pub acquired_at: Timestamp,
    /// When the lease was last renewed (equal to `acquired_at` before the first renewal).
    pub renewed_at: Timestamp,
    /// A free-form label of the holder (host name, process id) for operators.
    pub holder: Option<String>,
}

impl Lease {
    /// Whether the lease is live at `now` (`expires_at > now`).
    pub fn is_live(&self, now: Timestamp) -> bool {
        is_live(self.expires_at, now)
    }
}

/// Whether an expiry is still in the future: `expires_at > now`. Equality counts as expired.
pub fn is_live(expires_at: Timestamp, now: Timestamp) -> bool {
    expires_at > now
}

/// Lease timing parameters (see `docs/lifecycle.md`, "Timing").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    /// Lease lifetime (`staleMs`). Default 65 s.
    pub lease_duration: Duration,
    /// Budget for waiting behind another live lease. Default 70 s.
    pub wait_budget: Duration,
    /// Pause between busy retries. Default 1 s.
    pub retry_interval: Duration,
    /// Heartbeat period. Default `lease_duration / 3`.
    pub renew_interval: Duration,
}

impl LeaseConfig {
    /// The default lease lifetime: 65 s (a 60 s guarded request plus 5 s).
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(65);
    /// The default wait budget: 70 s.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(70);
    /// The default retry interval: 1 s.
    pub const DEFAULT_RETRY: Duration = Duration::from_secs(1);

    /// A configuration with the given lease lifetime, renewing every third of it.
    pub fn with_lease_duration(lease_duration: Duration) -> Self {
        Self {
            lease_duration,
            renew_interval: lease_duration / 3,
            ..Self::default()
        }
    }

    /// Checks the parameters: every duration positive, renewal strictly shorter than the lease.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.lease_duration.is_zero() {
            return Err("lease duration must be positive");
        }
        if self.retry_interval.is_zero() {
            return Err("retry interval must be positive");
        }
        if self.renew_interval.is_zero() || self.renew_interval >= self.lease_duration {
            return Err("renew interval must be positive and shorter than the lease duration");
        }
        Ok(())
    }
}

impl Default for LeaseConfig {
    fn default() -> Self {
        Self {
            lease_duration: Self::DEFAULT_LEASE,
            wait_budget: Self::DEFAULT_WAIT,
            retry_interval: Self::DEFAULT_RETRY,
            renew_interval: Self::DEFAULT_LEASE / 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{Clock, FakeClock};

    #[test]
    fn expiry_is_inclusive_at_equality() {
        let clock = FakeClock::new(Timestamp::from_millis(0));
        let lease = Lease {
            token: LeaseToken::new("t").unwrap(),
            epoch: LeaseEpoch::INITIAL,
            expires_at: Timestamp::from_millis(65_000),
            acquired_at: Timestamp::from_millis(0),
            renewed_at: Timestamp::from_millis(0),
            holder: None,
        };
        clock.set(lease.expires_at - Duration::from_millis(1));
        assert!(lease.is_live(clock.now()), "live at expires_at - 1");
        clock.set(lease.expires_at);
        assert!(!lease.is_live(clock.now()), "expired at expires_at");
        clock.advance(Duration::from_millis(1));
        assert!(!lease.is_live(clock.now()));
    }

    #[test]
    fn defaults_match_the_reference() {
        let c = LeaseConfig::default();
        assert_eq!(c.lease_duration, Duration::from_secs(65));
        assert_eq!(c.wait_budget, Duration::from_secs(70));
        assert_eq!(c.retry_interval, Duration::from_secs(1));
        assert_eq!(c.renew_interval.as_millis(), 21_666);
        assert!(c.validate().is_ok());
        let bad = LeaseConfig {
            renew_interval: Duration::from_secs(65),
            ..c
        };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn epochs_and_tokens() {
        assert!(LeaseEpoch::new(3).admits(LeaseEpoch::new(3)));
        assert!(!LeaseEpoch::new(4).admits(LeaseEpoch::new(3)));
        assert_eq!(LeaseEpoch::INITIAL.next().get(), 2);
        let token = LeaseToken::new("0123456789abcdef").unwrap();
        assert_eq!(token.prefix(), "01234567");
        assert!(!format!("{token:?}").contains("89abcdef"));
    }
}
