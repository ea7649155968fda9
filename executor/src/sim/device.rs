//! The device timeline every SimGpu on the host shares.
//!
//! One non-preemptive GPU runs one kernel at a time, in the order kernels
//! were launched across all processes. The whole state of that model is two
//! 64-bit words: `busy_until_ns`, the moment the last reserved kernel ends,
//! and `busy_total_ns`, the sum of all reserved durations. The daemon puts
//! them in a small shared file ([`SimDevice::create`]); every worker maps
//! the same file ([`SimDevice::open`]). Times are `CLOCK_MONOTONIC`
//! nanoseconds, one clock for every process on the host.
//!
//! Invariant: `busy_until_ns` never decreases, and every reservation
//! `[start, end)` starts at or after the previous reservation's end, so the
//! reserved intervals are disjoint and ordered (see [`SimDevice::reserve`]).

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fairgpu_frontend::map::Mapping;
use fairgpu_protocol::region::RegionView;

/// "FGSIMDEV" as a little-endian u64, at offset 0 of the shared file.
const MAGIC: u64 = u64::from_le_bytes(*b"FGSIMDEV");
/// Layout version of the shared file, at offset 8.
const VERSION: u64 = 1;
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_BUSY_UNTIL: usize = 16;
const OFF_BUSY_TOTAL: usize = 24;
/// Bytes of the shared file (the words above plus room to grow).
pub const DEVICE_FILE_LEN: usize = 64;
const WORDS: usize = DEVICE_FILE_LEN / 8;

/// How long before a modelled time a waiter stops sleeping and yields.
const WAKE_AHEAD_NS: u64 = 100_000;

/// Where time comes from.
#[derive(Clone, Debug)]
enum Clock {
    /// `CLOCK_MONOTONIC`; waiting sleeps.
    Monotonic,
    /// A virtual clock that moves only when someone waits: waiting until `t`
    /// sets it to `t`. Deterministic; for single-threaded tests.
    Virtual(Arc<AtomicU64>),
}

impl Clock {
    fn now(&self) -> u64 {
        match self {
            Clock::Monotonic => crate::clock::now_ns(),
            // Relaxed: the virtual clock orders nothing but itself.
            Clock::Virtual(t) => t.load(Ordering::Relaxed),
        }
    }

    /// Sleeps until [`WAKE_AHEAD_NS`] before `t`, then yields until `t`: a
    /// waiter returns within microseconds of the modelled end, as a CUDA
    /// synchronization spinning or yielding on a real device does, instead
    /// of one wake-up latency late (which would count as device time in
    /// every measurement that synchronizes).
    fn sleep_until(&self, t: u64) {
        match self {
            Clock::Monotonic => loop {
                let now = crate::clock::now_ns();
                if now >= t {
                    return;
                }
                if t - now > WAKE_AHEAD_NS {
                    std::thread::sleep(std::time::Duration::from_nanos(t - now - WAKE_AHEAD_NS));
                } else {
                    std::thread::yield_now();
                }
            },
            Clock::Virtual(v) => {
                v.fetch_max(t, Ordering::Relaxed);
            }
        }
    }
}

/// Where the two words live.
enum Words {
    /// In a shared file; offsets checked against the mapping at open.
    Shared(RegionView),
    /// In this process only.
    Private(Box<[AtomicU64; WORDS]>),
}

struct Inner {
    words: Words,
    clock: Clock,
}

impl Inner {
    fn word(&self, off: usize) -> &AtomicU64 {
        match &self.words {
            Words::Shared(v) => v
                .atomic_u64(off)
                .expect("device file length checked when mapped"),
            Words::Private(w) => &w[off / 8],
        }
    }
}

/// A handle on the shared device timeline. Cloning is cheap (an `Arc`);
/// clones, and handles opened on the same file in other processes, all
/// model the same GPU.
#[derive(Clone)]
pub struct SimDevice {
    inner: Arc<Inner>,
}

impl fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match (&self.inner.words, &self.inner.clock) {
            (Words::Shared(_), _) => "shared",
            (Words::Private(_), Clock::Monotonic) => "private",
            (Words::Private(_), Clock::Virtual(_)) => "private, virtual clock",
        };
        f.debug_struct("SimDevice")
            .field("kind", &kind)
            .field("busy_until_ns", &self.busy_until_ns())
            .field("busy_total_ns", &self.busy_total_ns())
            .finish()
    }
}

impl SimDevice {
    /// Creates the shared device file at `path` (replacing a stale one) for
    /// the workers of this host to [`open`](Self::open). The daemon calls
    /// this once at start.
    pub fn create(path: &Path) -> io::Result<SimDevice> {
        let map = Mapping::create(path, DEVICE_FILE_LEN)?;
        let view = map.view();
        let word = |off| view.atomic_u64(off).map_err(io::Error::other);
        word(OFF_BUSY_UNTIL)?.store(0, Ordering::Relaxed);
        word(OFF_BUSY_TOTAL)?.store(0, Ordering::Relaxed);
        word(OFF_VERSION)?.store(VERSION, Ordering::Relaxed);
        // Release: publishes the initialised words; pairs with the Acquire
        // load of the magic in `open`.
        word(OFF_MAGIC)?.store(MAGIC, Ordering::Release);
        Ok(SimDevice::from_words(Words::Shared(view), Clock::Monotonic))
    }

    /// Maps the device file the daemon created.
    pub fn open(path: &Path) -> io::Result<SimDevice> {
        let map = Mapping::open(path)?;
        if map.len() < DEVICE_FILE_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is {} bytes, a SimGpu device file has {DEVICE_FILE_LEN}",
                    path.display(),
                    map.len()
                ),
            ));
        }
        let view = map.view();
        let word = |off| view.atomic_u64(off).map_err(io::Error::other);
        // Acquire: pairs with the Release store of the magic in `create`.
        let magic = word(OFF_MAGIC)?.load(Ordering::Acquire);
        let version = word(OFF_VERSION)?.load(Ordering::Relaxed);
        if magic != MAGIC || version != VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is not a SimGpu device file of version {VERSION} \
                     (magic {magic:#018x}, version {version})",
                    path.display()
                ),
            ));
        }
        Ok(SimDevice::from_words(Words::Shared(view), Clock::Monotonic))
    }

    /// A device private to this process (tests, single-process use), on
    /// `CLOCK_MONOTONIC`.
    pub fn private() -> SimDevice {
        SimDevice::from_words(Words::Private(Box::default()), Clock::Monotonic)
    }

    /// A private device on a virtual clock that starts at `start_ns` and
    /// moves only when a caller waits (waiting until `t` sets the clock to
    /// `t`). Every time it reports is a sum of modelled durations, so results
    /// are exact and reproducible; meant for single-threaded tests.
    pub fn private_virtual(start_ns: u64) -> SimDevice {
        SimDevice::from_words(
            Words::Private(Box::default()),
            Clock::Virtual(Arc::new(AtomicU64::new(start_ns))),
        )
    }

    fn from_words(words: Words, clock: Clock) -> SimDevice {
        SimDevice {
            inner: Arc::new(Inner { words, clock }),
        }
    }

    /// Whether the clock is virtual (moves only when someone waits).
    pub fn is_virtual(&self) -> bool {
        matches!(self.inner.clock, Clock::Virtual(_))
    }

    /// The device clock, in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.inner.clock.now()
    }

    /// Returns once the device clock has reached `t_ns` (sleeping on the
    /// monotonic clock; moving a virtual clock forward).
    pub fn wait_until(&self, t_ns: u64) {
        self.inner.clock.sleep_until(t_ns);
    }

    /// When the last reserved kernel ends.
    pub fn busy_until_ns(&self) -> u64 {
        // Acquire: pairs with the AcqRel CAS in `reserve`.
        self.inner.word(OFF_BUSY_UNTIL).load(Ordering::Acquire)
    }

    /// Device time reserved by all kernels so far, in ns.
    pub fn busy_total_ns(&self) -> u64 {
        // Relaxed: a statistic, ordered with nothing.
        self.inner.word(OFF_BUSY_TOTAL).load(Ordering::Relaxed)
    }

    /// Reserves the device for a kernel of `duration_ns` that may start no
    /// earlier than `not_before_ns`; returns its `(start, end)`.
    ///
    /// Algorithm: a CAS loop on `busy_until_ns`. `start = max(not_before,
    /// now, busy_until)`, `end = start + duration`; the CAS installs `end`
    /// only if `busy_until` is still the value `start` was computed from, so
    /// every reservation begins at or after the end of the one before it:
    /// one kernel at a time, first launched first served, across processes.
    pub fn reserve(&self, not_before_ns: u64, duration_ns: u64) -> (u64, u64) {
        self.reserve_issued(not_before_ns, self.now_ns(), duration_ns)
    }

    /// [`SimDevice::reserve`] for a kernel issued at `issued_ns` (a device
    /// time read earlier): `now` is `issued_ns`, so whatever the host did
    /// since (SimGpu executing the kernel's code) takes no device time.
    pub fn reserve_issued(
        &self,
        not_before_ns: u64,
        issued_ns: u64,
        duration_ns: u64,
    ) -> (u64, u64) {
        let busy = self.inner.word(OFF_BUSY_UNTIL);
        let now = issued_ns;
        // Acquire (here and on CAS failure): observe the latest reservation;
        // AcqRel on success: pairs with other reservers' CAS and loads.
        let mut cur = busy.load(Ordering::Acquire);
        loop {
            let start = not_before_ns.max(now).max(cur);
            let end = start.saturating_add(duration_ns);
            match busy.compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // Relaxed: a statistic, ordered with nothing.
                    self.inner
                        .word(OFF_BUSY_TOTAL)
                        .fetch_add(duration_ns, Ordering::Relaxed);
                    return (start, end);
                }
                Err(seen) => cur = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_fifo_and_disjoint() {
        let d = SimDevice::private_virtual(1_000);
        assert_eq!(d.reserve(0, 500), (1_000, 1_500));
        // Asked to start earlier than the device is free: waits its turn.
        assert_eq!(d.reserve(1_200, 100), (1_500, 1_600));
        // Asked to start later: leaves the device idle until then.
        assert_eq!(d.reserve(2_000, 10), (2_000, 2_010));
        assert_eq!(d.busy_until_ns(), 2_010);
        assert_eq!(d.busy_total_ns(), 610);
        d.wait_until(5_000);
        assert_eq!(d.now_ns(), 5_000);
        assert_eq!(d.reserve(0, 1), (5_000, 5_001));
        // Issued before the clock moved on: starts when it was issued,
        // still after the last reservation.
        d.wait_until(9_000);
        assert_eq!(d.reserve_issued(0, 8_000, 10), (8_000, 8_010));
        assert_eq!(d.reserve_issued(0, 7_000, 10), (8_010, 8_020));
        assert_eq!(d.reserve_issued(8_500, 7_000, 10), (8_500, 8_510));
    }

    #[test]
    fn concurrent_reservations_never_overlap() {
        let d = SimDevice::private();
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let d = d.clone();
                std::thread::spawn(move || {
                    (0..500)
                        .map(|k| d.reserve(0, 1 + (i * 7 + k) % 13))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(u64, u64)> = threads
            .into_iter()
            .flat_map(|t| t.join().expect("reserver thread"))
            .collect();
        all.sort_unstable();
        for w in all.windows(2) {
            assert!(w[0].1 <= w[1].0, "{:?} overlaps {:?}", w[0], w[1]);
        }
        let total: u64 = all.iter().map(|(s, e)| e - s).sum();
        assert_eq!(d.busy_total_ns(), total);
    }

    #[test]
    fn shared_file_is_one_device() {
        let path = std::env::temp_dir().join(format!("fairgpu-simdev-{}", std::process::id()));
        let a = SimDevice::create(&path).expect("create");
        let b = SimDevice::open(&path).expect("open");
        let (_, end) = a.reserve(0, 1_000_000_000);
        assert_eq!(b.busy_until_ns(), end);
        let (start, _) = b.reserve(0, 5);
        assert_eq!(start, end);
        assert_eq!(a.busy_total_ns(), 1_000_000_005);
        drop((a, b));

        // Not a device file: rejected, not trusted.
        std::fs::write(&path, [0u8; DEVICE_FILE_LEN]).expect("overwrite");
        assert!(SimDevice::open(&path).is_err());
        std::fs::write(&path, [0u8; 8]).expect("overwrite");
        assert!(SimDevice::open(&path).is_err());
        std::fs::remove_file(&path).expect("remove");
    }

    #[test]
    fn monotonic_wait_sleeps_until_the_deadline() {
        let d = SimDevice::private();
        let t = d.now_ns() + 2_000_000;
        d.wait_until(t);
        assert!(d.now_ns() >= t);
    }
}
