//! `CLOCK_MONOTONIC` as nanoseconds: one clock shared by every process of
//! the host, so that instants can cross the shared files (SimGpu's device
//! timeline, the grant file).

use std::time::Instant;

/// Nanoseconds of `CLOCK_MONOTONIC` now.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call;
    // CLOCK_MONOTONIC is always supported on Linux, so the call cannot
    // fail (on failure `ts` stays zero, which is still a valid time).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// `at` (not in the future) on the same clock, to within the few
/// nanoseconds between reading the two clocks.
pub fn instant_ns(at: Instant) -> u64 {
    let ago = Instant::now().saturating_duration_since(at);
    now_ns().saturating_sub(u64::try_from(ago.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn instants_map_onto_the_monotonic_clock() {
        let a = Instant::now();
        std::thread::sleep(Duration::from_millis(5));
        let b = Instant::now();
        let (na, nb) = (instant_ns(a), instant_ns(b));
        assert!(nb > na);
        let d = nb - na;
        let want = b.duration_since(a).as_nanos() as u64;
        assert!(d.abs_diff(want) < 1_000_000, "{d} ns for {want} ns");
        assert!(instant_ns(Instant::now()) <= now_ns());
    }
}
