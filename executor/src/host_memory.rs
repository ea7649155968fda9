//! A VM's host-memory budget: the bytes of host memory its guests make its
//! worker hold on their behalf, besides the device-memory quota.
//!
//! What is charged: module-scope variables SimGpu creates for each loaded
//! module, parsed PTX modules, the PTX texts SimGpu keeps, the module
//! images and kernel tables the worker keeps for its guests, each channel's
//! handle tables, kernel parameter layouts, module staging buffer and
//! transport scratch buffer. Each holding
//! takes a [`HostCharge`] when it is made and gives its bytes back when the
//! charge is dropped with it, so the count follows the holdings without
//! bookkeeping at each release. A charge that would pass the limit is
//! refused and the request that needed it fails (out of memory) — the
//! worker and the other channels carry on.
//!
//! Invariants: `used <= limit` at all times (charges are admitted by one
//! compare-and-swap); every admitted charge is returned exactly once (on
//! drop).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Default budget per VM.
pub const DEFAULT_HOST_MEMORY: u64 = 1 << 30;

/// A VM's host-memory budget, shared by what charges it.
#[derive(Debug)]
pub struct HostMemory {
    limit: u64,
    used: AtomicU64,
}

/// A refused charge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} needs {bytes} bytes of host memory; the VM holds {used} of its {limit}")]
pub struct HostMemoryExceeded {
    /// What asked.
    pub what: &'static str,
    /// Bytes asked for.
    pub bytes: u64,
    /// Bytes held when it asked.
    pub used: u64,
    /// The budget.
    pub limit: u64,
}

impl HostMemory {
    /// A budget of `limit` bytes.
    pub fn new(limit: u64) -> Arc<HostMemory> {
        Arc::new(HostMemory {
            limit,
            used: AtomicU64::new(0),
        })
    }

    /// A budget that never refuses (tools and tests that build an executor
    /// without a VM).
    pub fn unlimited() -> Arc<HostMemory> {
        Self::new(u64::MAX)
    }

    /// Charges `bytes` for `what`, or refuses if the budget would be passed.
    pub fn charge(
        self: &Arc<Self>,
        bytes: u64,
        what: &'static str,
    ) -> Result<HostCharge, HostMemoryExceeded> {
        // Relaxed: the counter guards no other memory; the CAS alone keeps
        // used <= limit.
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.limit)
            })
            .map(|_| HostCharge {
                budget: self.clone(),
                bytes,
            })
            .map_err(|used| HostMemoryExceeded {
                what,
                bytes,
                used,
                limit: self.limit,
            })
    }

    /// A charge of nothing yet, to be grown with [`HostCharge::resize`] by a
    /// holding whose size changes (a staging buffer, a table).
    pub fn empty(self: &Arc<Self>) -> HostCharge {
        HostCharge {
            budget: self.clone(),
            bytes: 0,
        }
    }

    /// Bytes charged now.
    pub fn used(&self) -> u64 {
        // Relaxed: a statistic.
        self.used.load(Ordering::Relaxed)
    }

    /// The budget.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

/// Bytes charged to a budget, returned when dropped.
#[derive(Debug)]
pub struct HostCharge {
    budget: Arc<HostMemory>,
    bytes: u64,
}

impl HostCharge {
    /// The bytes charged.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Makes this charge `bytes`: growing is admitted like a new charge of
    /// the difference (and on refusal the charge stays as it was),
    /// shrinking always succeeds.
    pub fn resize(&mut self, bytes: u64, what: &'static str) -> Result<(), HostMemoryExceeded> {
        if bytes > self.bytes {
            let more = self.budget.charge(bytes - self.bytes, what)?;
            // The difference now belongs to this charge: forget `more`
            // without returning it.
            std::mem::forget(more);
        } else {
            // Relaxed: as in `charge`; these bytes were admitted earlier.
            self.budget
                .used
                .fetch_sub(self.bytes - bytes, Ordering::Relaxed);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for HostCharge {
    fn drop(&mut self) {
        // Relaxed: as in `charge`; admitted charges sum to at most `used`.
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_refused_past_the_limit_and_returned_on_drop() {
        let b = HostMemory::new(100);
        let a = b.charge(60, "a").unwrap();
        let e = b.charge(41, "b").unwrap_err();
        assert_eq!((e.bytes, e.used, e.limit), (41, 60, 100));
        let c = b.charge(40, "c").unwrap();
        assert_eq!(b.used(), 100);
        assert!(b.charge(1, "d").is_err());
        drop(a);
        assert_eq!(b.used(), 40);
        drop(c);
        assert_eq!(b.used(), 0);
        assert!(b.charge(u64::MAX, "huge").is_err());
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_resized_charge_grows_within_the_limit_and_gives_back_what_it_sheds() {
        let b = HostMemory::new(100);
        let other = b.charge(30, "other").unwrap();
        let mut c = b.empty();
        c.resize(50, "grow").unwrap();
        assert_eq!(b.used(), 80);
        let e = c.resize(71, "too much").unwrap_err();
        assert_eq!((e.bytes, e.used), (21, 80));
        assert_eq!((c.bytes(), b.used()), (50, 80));
        c.resize(70, "to the limit").unwrap();
        assert_eq!(b.used(), 100);
        c.resize(10, "shrink").unwrap();
        assert_eq!(b.used(), 40);
        drop(other);
        drop(c);
        assert_eq!(b.used(), 0);
    }
}
