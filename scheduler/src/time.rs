//! Time as the policies see it: nanoseconds on a monotonic clock that the
//! caller supplies.
//!
//! Policies never read a clock themselves. Every call that depends on time
//! takes `now`; the daemon reads it from a real monotonic clock, tests and the
//! simulator from a [`ManualClock`]. A policy treats an instant earlier than
//! one it has already seen as that earlier-seen instant (time never goes back
//! inside a policy).

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A span or an instant in nanoseconds. Instants count from an origin the
/// clock chooses.
///
/// Arithmetic saturates: an instant never wraps, and the span between two
/// instants given in the wrong order is zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero.
    pub const ZERO: Nanos = Nanos(0);
    /// The largest representable span (about 584 years).
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// `n` nanoseconds.
    pub const fn from_nanos(n: u64) -> Self {
        Nanos(n)
    }

    /// `us` microseconds.
    pub const fn from_micros(us: u64) -> Self {
        Nanos(us.saturating_mul(1_000))
    }

    /// `ms` milliseconds.
    pub const fn from_millis(ms: u64) -> Self {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// `s` seconds.
    pub const fn from_secs(s: u64) -> Self {
        Nanos(s.saturating_mul(1_000_000_000))
    }

    /// A [`Duration`], saturating at [`Nanos::MAX`].
    pub fn from_duration(d: Duration) -> Self {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The count of nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// As a [`Duration`].
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// `self + rhs`, saturating.
    pub const fn saturating_add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(rhs.0))
    }

    /// `self - rhs`, or zero when `rhs` is larger.
    pub const fn saturating_sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(rhs.0))
    }

    /// `self` corrected by `delta` ns (added when positive, taken away when
    /// negative), saturating at both ends: a charge's correction.
    pub const fn saturating_add_signed(self, delta: i64) -> Nanos {
        Nanos(self.0.saturating_add_signed(delta))
    }
}

impl Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        self.saturating_add(rhs)
    }
}

impl AddAssign for Nanos {
    fn add_assign(&mut self, rhs: Nanos) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        self.saturating_sub(rhs)
    }
}

impl From<Duration> for Nanos {
    fn from(d: Duration) -> Self {
        Nanos::from_duration(d)
    }
}

impl fmt::Display for Nanos {
    /// `950ns`, `21.000us`, `6.000ms`, `1.500s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        let (unit, div) = match n {
            0..1_000 => return write!(f, "{n}ns"),
            1_000..1_000_000 => ("us", 1_000),
            1_000_000..1_000_000_000 => ("ms", 1_000_000),
            _ => ("s", 1_000_000_000),
        };
        let whole = n / div;
        let thousandths = (n % div) / (div / 1_000);
        write!(f, "{whole}.{thousandths:03}{unit}")
    }
}

/// A monotonic source of instants.
pub trait Clock {
    /// The current instant. Never smaller than an instant returned before.
    fn now(&self) -> Nanos;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

/// A clock that moves only when told to: for tests and simulation.
///
/// It never goes back: [`ManualClock::set`] to an earlier instant leaves it
/// where it is.
#[derive(Debug, Default)]
pub struct ManualClock {
    // Relaxed everywhere: the value is the whole message; no other memory is
    // published through it, so there is no pairing to make.
    now: AtomicU64,
}

impl ManualClock {
    /// A clock reading `start`.
    pub const fn new(start: Nanos) -> Self {
        ManualClock {
            now: AtomicU64::new(start.0),
        }
    }

    /// Moves the clock to `t`, or leaves it if `t` is in its past.
    pub fn set(&self, t: Nanos) {
        self.now.fetch_max(t.0, Ordering::Relaxed);
    }

    /// Moves the clock forward by `d` (saturating) and returns the new instant.
    pub fn advance(&self, d: Nanos) -> Nanos {
        let mut cur = self.now.load(Ordering::Relaxed);
        loop {
            let next = cur.saturating_add(d.0);
            match self
                .now
                .compare_exchange_weak(cur, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Nanos(next),
                Err(seen) => cur = seen,
            }
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        Nanos(self.now.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_display() {
        assert_eq!(Nanos::from_micros(21), Nanos(21_000));
        assert_eq!(Nanos::from_millis(6), Nanos(6_000_000));
        assert_eq!(Nanos::from_secs(2), Nanos(2_000_000_000));
        assert_eq!(Nanos(950).to_string(), "950ns");
        assert_eq!(Nanos::from_micros(21).to_string(), "21.000us");
        assert_eq!(Nanos(1_605_400).to_string(), "1.605ms");
        assert_eq!(Nanos::from_millis(1_500).to_string(), "1.500s");
        assert_eq!(Nanos::from_secs(u64::MAX), Nanos::MAX);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Nanos(3) - Nanos(5), Nanos::ZERO);
        assert_eq!(Nanos::MAX + Nanos(1), Nanos::MAX);
        let mut t = Nanos(1);
        t += Nanos(2);
        assert_eq!(t, Nanos(3));
        assert_eq!(Nanos::from(Duration::from_micros(7)), Nanos(7_000));
        assert_eq!(Nanos(7_000).as_duration(), Duration::from_micros(7));
    }

    #[test]
    fn manual_clock_is_monotonic() {
        let c = ManualClock::new(Nanos(10));
        assert_eq!(c.now(), Nanos(10));
        assert_eq!(c.advance(Nanos(5)), Nanos(15));
        c.set(Nanos(12));
        assert_eq!(c.now(), Nanos(15));
        c.set(Nanos(100));
        fn read(clock: impl Clock) -> Nanos {
            clock.now()
        }
        assert_eq!(read(&c), Nanos(100));
        let shared = Arc::new(c);
        assert_eq!(shared.now(), Nanos(100));
    }
}
