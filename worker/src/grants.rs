//! The grant file: the control block between the daemon's scheduler thread
//! and the workers, one small shared-memory file the daemon creates when a
//! scheduling policy is configured.
//!
//! ```text
//! 0x00  magic      u64  GRANTS_MAGIC, stored last (Release) by the creator
//! 0x08  version    u64  GRANTS_VERSION
//! 0x10  slots      u64  number of slots (VMs, in configuration order)
//! 0x18  slot_size  u64  SLOT_SIZE
//! 0x20  bell       u32  the scheduler's doorbell (futex word)
//! 0x40  slot 0, SLOT_SIZE bytes:
//!       0x00 grant     u32  grant sequence; the daemon bumps it to grant (futex word)
//!       0x04 lease     u32  1: the grant is an uncontended lease (see below);
//!                           2: a free run's lease, parked while idle
//!       0x08 slice_ns  u64  the grant's slice, written before the bump
//!       0x10 revoke    u32  the sequence of a lease the daemon revokes
//!       0x14 after     u32  0, or 1 + the VM still draining when granted
//!       0x18 after_seq u32  the grant of that VM it drains
//!       0x1c apriori   u32  1: issue no request predicted to overrun the
//!                           slice (TimeGraph's apriori enforcement)
//!       0x20 bf_seq    u32  backfill grant sequence; the daemon bumps it
//!       0x24 bf_holder u32  1 + the holder whose idle gaps it may fill
//!       0x28 bf_holder_seq u32  that holder's grant
//!       0x30 bf_max_ns u64  the longest request it may backfill, predicted
//!       0x38 bf_wanted u32  1: the grant's holder announces its quiet
//!                           periods (another VM could backfill them)
//!       0x3c turn      u32  0, or the most requests a free run's lease
//!                           keeps in flight (NEON's round robin; the
//!                           daemon may change it during the lease)
//!       ---- second cache line: written by the worker ----
//!       0x40 release   u32  the grant sequence the worker released last
//!       0x44 runnable  u32  1: the worker has GPU work it may not issue yet
//!       0x48 used_ns   u64  GPU time used in the released grant
//!       0x50 sync_calls u64 synchronous device calls served so far
//!       0x58 closing   u32  the grant whose final drain has begun
//!       0x60 estimate  u64  the GPU time that grant should report, ns
//!       0x68 drained   u64  when the released grant's work ended (CLOCK_MONOTONIC ns)
//!       0x70 cost_ns   u64  what one of its requests costs on the device (its
//!                           running average of measured requests; 0 unknown)
//!       0x78 device_ns u64  all device time its executor accounted so far,
//!                           published while it holds a lease (free runs)
//!       ---- third cache line: written by the worker (backfilling) ----
//!       0x80 quiet     u32  the grant it holds while it waits on its guest
//!                           with its own device work done (0: not quiet)
//!       0x84 bf_release u32 the backfill grant it released last
//!       0x88 bf_busy   u32  1: a backfilled request may be on the device
//!       0x90 bf_used   u64  device time the released backfill grant used
//!       0x98 bf_end    u64  when its last backfilled request ended
//!                           (CLOCK_MONOTONIC ns)
//!       0xa0 bf_requests u64 requests the released backfill grant issued
//!       0xa8 kernel_ns u64  what one of its kernels takes, by its running
//!                           average (0 unknown): whether it can backfill
//!       0xb0 parked    u32  the lease (2) it keeps while it has nothing to
//!                           issue (0: not parked)
//!       slot 1 ...
//! ```
//!
//! The daemon writes the first line of a slot, the VM's worker the second
//! (the daemon also clears `runnable` after reaping a dead worker, when no
//! worker of that VM runs). Only the daemon and its workers map the file;
//! guests never see it, so no value in it is guest-controlled.
//!
//! # Protocol and orderings (docs/memory-ordering.md, section 7)
//!
//! - **Grant** (daemon): store `slice_ns` and `lease` (Relaxed), bump `grant`
//!   (Release), futex-wake `grant`, then ring the VM region's doorbell
//!   (Release increment + futex wake) so that a worker blocked on its
//!   region wakes up. The worker loads `grant` with Acquire; a value that
//!   differs from the last one it saw is a grant, and `slice_ns` is
//!   visible.
//! - **Release** (worker): store `cost_ns`, `drained`, `used_ns` and `runnable` (Relaxed), store
//!   the grant's sequence into `release` (Release), then ring the bell
//!   (Release increment + futex wake). The scheduler loads `release` with
//!   Acquire; equal to the outstanding grant's sequence means released,
//!   and `used_ns` is that grant's usage.
//! - **Revoke** (daemon): store the grant's sequence into `revoke`
//!   (Release), then ring the region's doorbell. The worker loads `revoke`
//!   (Acquire) before each request it issues under a grant and after each
//!   pass; equal to its grant's sequence means it must drain and release
//!   (a lease revoked because another VM waits, a disengaged slice that
//!   ended, or a holder preempted by a priority policy).
//!   Nothing else is published by it; the stale value of an earlier lease
//!   never equals a later sequence.
//! - **Closing** (worker): a holder that has issued the last request of its
//!   grant and now waits for the device to finish it stores `estimate`
//!   (Relaxed), stores the grant's sequence into `closing` (Release), then
//!   rings the bell. The scheduler loads `closing` (Acquire); equal to the
//!   outstanding grant's sequence means `estimate` is that grant's. The
//!   worker writes it again only for a later grant, which the scheduler
//!   makes after it read this one.
//! - **Handoff** (daemon): a grant made while the previous holder drains
//!   names it: `after` and `after_seq` are stored (Relaxed) before the
//!   grant's Release bump, so the worker that loads `grant` with Acquire
//!   sees them. That worker takes the grant at once: the previous holder
//!   issues nothing more, so the new holder's work queues behind what it
//!   drains and the device does not idle between them. The new holder
//!   loads the previous holder's `release` word (Acquire, pairing with
//!   that worker's Release store) when it takes the grant: not yet
//!   `after_seq` means its first work waits behind the drain, and that
//!   wait is not charged to it: when that work ends it loads `release`
//!   again, and a release seen then makes `drained` (stored Relaxed before
//!   the Release store of `release`) visible, the instant the drain ended.
//!   If the previous holder's worker dies, the
//!   daemon stores 0 into `after` (Release; the new holder loads it with
//!   Acquire) and rings the region's doorbell.
//! - **Backfill** (daemon, then two workers; docs/fairness.md,
//!   *Backfilling*): a holder whose ring is empty and whose own device work
//!   is done stores its grant's sequence into `quiet` (SeqCst) and rings the
//!   bell; it stores 0 (SeqCst) before it issues anything again, and at its
//!   release. The daemon, seeing `quiet` equal to the outstanding grant,
//!   gives another runnable VM a backfill grant: `bf_holder`,
//!   `bf_holder_seq`, `bf_max_ns` (Relaxed), then bumps `bf_seq`
//!   (Release; the worker's Acquire load makes them visible) and rings that
//!   VM's region doorbell. Before each request it backfills, that worker
//!   stores 1 into its `bf_busy` (SeqCst) and then loads the holder's
//!   `quiet` (SeqCst): only if it still names the holder's grant does it
//!   issue; the holder, after storing 0 into `quiet`, loads every peer's
//!   `bf_busy` (SeqCst). Of the two SeqCst store-then-load pairs at least
//!   one sees the other's store (Dekker): either the backfiller sees the
//!   holder back and issues nothing, or the holder knows its work may queue
//!   behind a backfilled request. The backfiller synchronises each request,
//!   stores its end into `bf_end` (Relaxed), then 0 into `bf_busy`
//!   (Release); a holder that loads `bf_busy` 0 with Acquire sees that end
//!   and charges its own work from there. The backfiller releases the
//!   backfill grant as soon as the holder is no longer quiet, or it has
//!   nothing to issue: `bf_used`, `bf_requests` (Relaxed), then `bf_release
//!   = seq` (Release; the daemon's Acquire load makes them visible), then
//!   rings the bell. The daemon charges that time to it.
//! - **Park** (worker): a holder of a lease granted with `lease = 2` that
//!   has nothing to issue and no work in flight keeps the lease instead of
//!   releasing it: it stores its device time into `device_ns` (Relaxed),
//!   the lease's sequence into `parked` (Release), then rings the bell; it
//!   stores 0 into `parked` (Release) and rings the bell again when it
//!   issues anything, without waiting for the daemon. The daemon loads
//!   `parked` (Acquire): equal to the member's lease means idle (and
//!   `device_ns` is up to date). A revocation ends a parked lease as any
//!   other (the worker is woken by the region's doorbell).
//! - **Turn** (daemon): store `turn` (Relaxed) whenever a free run's
//!   membership changes; the worker loads it (Relaxed) each time it decides
//!   whether its lease's queue is full. It is a hint with no data behind
//!   it: any value seen, old or new, keeps between one and `LEASE_QUEUE`
//!   requests in flight, and the next load sees a newer one.
//! - **Runnable** (worker): store `runnable` (Relaxed), then ring the bell
//!   (Release). The scheduler loads the bell (Acquire) *before* it scans
//!   the slots and futex-waits on the value it loaded, so a change made
//!   after its load makes the wait return at once, and a change made
//!   before it is visible to the scan: no update is lost.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use fairgpu_frontend::futex;
use fairgpu_frontend::map::Mapping;
use fairgpu_protocol::region::RegionView;

/// `b"FGPUGRNT"` read as a little-endian u64.
pub const GRANTS_MAGIC: u64 = u64::from_le_bytes(*b"FGPUGRNT");
/// Layout version of the grant file.
pub const GRANTS_VERSION: u64 = 5;
/// Where slot 0 starts.
pub const SLOTS_OFF: usize = 0x40;
/// Bytes per slot: three cache lines, the daemon's and two of the worker's.
pub const SLOT_SIZE: usize = 192;
/// Most slots a grant file may hold (one per VM).
pub const MAX_SLOTS: usize = 4096;

const BELL: usize = 0x20;
const GRANT: usize = 0x00;
const LEASE: usize = 0x04;
const SLICE_NS: usize = 0x08;
const REVOKE: usize = 0x10;
const AFTER: usize = 0x14;
const AFTER_SEQ: usize = 0x18;
const APRIORI: usize = 0x1c;
const TURN: usize = 0x3c;
const RELEASE: usize = 0x40;
const RUNNABLE: usize = 0x44;
const USED_NS: usize = 0x48;
const SYNC_CALLS: usize = 0x50;
const CLOSING: usize = 0x58;
const ESTIMATE: usize = 0x60;
const DRAINED: usize = 0x68;
const COST_NS: usize = 0x70;
const DEVICE_NS: usize = 0x78;
const BF_SEQ: usize = 0x20;
const BF_HOLDER: usize = 0x24;
const BF_HOLDER_SEQ: usize = 0x28;
const BF_MAX_NS: usize = 0x30;
const BF_WANTED: usize = 0x38;
const QUIET: usize = 0x80;
const BF_RELEASE: usize = 0x84;
const BF_BUSY: usize = 0x88;
const BF_USED: usize = 0x90;
const BF_END: usize = 0x98;
const BF_REQUESTS: usize = 0xa0;
const KERNEL_NS: usize = 0xa8;
const PARKED: usize = 0xb0;

const _: () = assert!(
    KERNEL_NS + 8 <= PARKED
        && PARKED + 4 <= SLOT_SIZE
        && BF_MAX_NS + 8 <= BF_WANTED
        && BF_WANTED + 4 <= TURN
        && TURN + 4 <= RELEASE
        && QUIET.is_multiple_of(64)
        && DEVICE_NS + 8 <= QUIET
        && COST_NS + 8 <= SLOT_SIZE
        && ESTIMATE + 8 <= SLOT_SIZE
        && AFTER_SEQ + 4 <= RELEASE
        && RELEASE.is_multiple_of(64)
        && SLOTS_OFF.is_multiple_of(64)
);

/// A backfill grant as its worker reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backfill {
    /// Its sequence (0: none was ever given).
    pub seq: u32,
    /// The holder whose idle gaps it fills.
    pub holder: usize,
    /// That holder's grant.
    pub holder_seq: u32,
    /// The longest request it may issue, by its prediction, ns.
    pub max_ns: u64,
}

/// A holder's announcement that its grant's last work is on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closing {
    /// The grant.
    pub seq: u32,
    /// The GPU time it should report, ns.
    pub estimate_ns: u64,
}

/// Why a grant file could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum GrantsError {
    /// The file could not be created, opened or mapped.
    #[error("cannot map grant file {path}")]
    Map {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// No slots, or too many.
    #[error("{slots} grant slots asked for; 1..={MAX_SLOTS} are possible")]
    Slots {
        /// Slots asked for.
        slots: usize,
    },
    /// The file is not a grant file of this version, or is truncated.
    #[error("{path} is not a fairgpu grant file of version {GRANTS_VERSION} with {slots} slots")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Slots expected.
        slots: usize,
    },
}

fn file_len(slots: usize) -> usize {
    SLOTS_OFF + slots * SLOT_SIZE
}

/// A mapped grant file. The creator removes the file when it is dropped.
#[derive(Debug)]
pub struct GrantFile {
    view: RegionView,
    slots: usize,
    path: PathBuf,
    owns_file: bool,
}

impl GrantFile {
    /// Creates (replacing a stale one) a zeroed grant file with `slots`
    /// slots.
    pub fn create(path: &Path, slots: usize) -> Result<GrantFile, GrantsError> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(GrantsError::Slots { slots });
        }
        let map = Mapping::create(path, file_len(slots)).map_err(|source| GrantsError::Map {
            path: path.to_owned(),
            source,
        })?;
        let f = GrantFile {
            view: map.view(),
            slots,
            path: path.to_owned(),
            owns_file: true,
        };
        f.u64_at(0x08).store(GRANTS_VERSION, Ordering::Relaxed);
        f.u64_at(0x10).store(slots as u64, Ordering::Relaxed);
        f.u64_at(0x18).store(SLOT_SIZE as u64, Ordering::Relaxed);
        // Release: publishes the header words above; pairs with the Acquire
        // load of the magic in `open`.
        f.u64_at(0).store(GRANTS_MAGIC, Ordering::Release);
        Ok(f)
    }

    /// Maps the grant file the daemon created, which must hold `slots`
    /// slots. The file is left in place on drop.
    pub fn open(path: &Path, slots: usize) -> Result<GrantFile, GrantsError> {
        let invalid = || GrantsError::Invalid {
            path: path.to_owned(),
            slots,
        };
        let map = Mapping::open(path).map_err(|source| GrantsError::Map {
            path: path.to_owned(),
            source,
        })?;
        if slots == 0 || slots > MAX_SLOTS || map.len() < file_len(slots) {
            return Err(invalid());
        }
        let f = GrantFile {
            view: map.view(),
            slots,
            path: path.to_owned(),
            owns_file: false,
        };
        // Acquire: pairs with the Release store of the magic in `create`.
        if f.u64_at(0).load(Ordering::Acquire) != GRANTS_MAGIC
            || f.u64_at(0x08).load(Ordering::Relaxed) != GRANTS_VERSION
            || f.u64_at(0x10).load(Ordering::Relaxed) != slots as u64
            || f.u64_at(0x18).load(Ordering::Relaxed) != SLOT_SIZE as u64
        {
            return Err(invalid());
        }
        Ok(f)
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.view.atomic_u64(off).expect("offset within the file")
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slot `i`, or `None` past the last one.
    pub fn slot(&self, i: usize) -> Option<GrantSlot> {
        (i < self.slots).then(|| GrantSlot {
            view: self.view.clone(),
            base: SLOTS_OFF + i * SLOT_SIZE,
        })
    }

    /// The scheduler's doorbell.
    pub fn bell(&self) -> Bell {
        Bell {
            view: self.view.clone(),
        }
    }
}

impl Drop for GrantFile {
    fn drop(&mut self) {
        if self.owns_file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The scheduler thread's doorbell: workers ring it when their `runnable`
/// flag changes or they release; the scheduler sleeps on it. Keeps the
/// mapping alive.
#[derive(Debug, Clone)]
pub struct Bell {
    view: RegionView,
}

impl Bell {
    fn word(&self) -> &AtomicU32 {
        self.view.atomic_u32(BELL).expect("bell within the file")
    }

    /// Publishes every store made before it and wakes the scheduler.
    pub fn ring(&self) {
        // Release: publishes the slot stores made before the ring (runnable,
        // release); pairs with the Acquire load in `Bell::seen`.
        self.word().fetch_add(1, Ordering::Release);
        futex::wake(self.word(), 1);
    }

    /// The bell's value, to wait on after scanning the slots.
    pub fn seen(&self) -> u32 {
        // Acquire: pairs with the Release increment in `ring`: a scan after
        // this load sees what was stored before the ring it observed.
        self.word().load(Ordering::Acquire)
    }

    /// Sleeps until the bell differs from `seen` (returns at once if it
    /// already does), for at most `timeout`.
    pub fn wait(&self, seen: u32, timeout: Duration) {
        futex::wait(self.word(), seen, timeout);
    }
}

/// One VM's slot. Keeps the mapping alive. The daemon uses the `grant_*`,
/// `released`, `used_ns`, `runnable` and `sync_calls` readers and
/// [`GrantSlot::grant`]; the worker the rest.
#[derive(Debug, Clone)]
pub struct GrantSlot {
    view: RegionView,
    base: usize,
}

impl GrantSlot {
    /// Its index in the grant file (the VM's, in configuration order).
    pub fn index(&self) -> usize {
        (self.base - SLOTS_OFF) / SLOT_SIZE
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.view
            .atomic_u32(self.base + off)
            .expect("slot within the file")
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.view
            .atomic_u64(self.base + off)
            .expect("slot within the file")
    }

    // ---- the daemon's side ----

    /// Grants the GPU for `slice_ns` (as an uncontended lease if `lease`):
    /// returns the new grant sequence. The caller then rings the VM's region
    /// doorbell.
    pub fn grant(&self, slice_ns: u64, lease: bool) -> u32 {
        self.grant_after(slice_ns, lease, None)
    }

    /// [`GrantSlot::grant`], to be taken only once VM `after.0`'s worker has
    /// released its grant `after.1` (a handoff while that one drains).
    pub fn grant_after(&self, slice_ns: u64, lease: bool, after: Option<(usize, u32)>) -> u32 {
        self.grant_full(slice_ns, lease, after, false)
    }

    /// [`GrantSlot::grant_after`], saying whether the holder must issue no
    /// request its measurements predict would overrun the slice
    /// (`apriori`: TimeGraph's apriori enforcement of a reservation).
    pub fn grant_full(
        &self,
        slice_ns: u64,
        lease: bool,
        after: Option<(usize, u32)>,
        apriori: bool,
    ) -> u32 {
        self.grant_word(slice_ns, u32::from(lease), after, apriori)
    }

    /// Grants a free run's lease of `slice_ns` (its queue's depth); with
    /// `parks` its holder keeps it while idle, parked (see "Park" in the
    /// module documentation), until it is revoked.
    pub fn grant_free_run(&self, slice_ns: u64, parks: bool) -> u32 {
        self.grant_word(slice_ns, if parks { 2 } else { 1 }, None, false)
    }

    fn grant_word(
        &self,
        slice_ns: u64,
        lease: u32,
        after: Option<(usize, u32)>,
        apriori: bool,
    ) -> u32 {
        // Relaxed: published by the Release bump below.
        self.u64_at(SLICE_NS).store(slice_ns, Ordering::Relaxed);
        self.u32_at(APRIORI)
            .store(u32::from(apriori), Ordering::Relaxed);
        self.u32_at(LEASE).store(lease, Ordering::Relaxed);
        self.u32_at(TURN).store(0, Ordering::Relaxed);
        let (vm, seq) = after.map_or((0, 0), |(vm, seq)| {
            (u32::try_from(vm + 1).unwrap_or(0), seq)
        });
        self.u32_at(AFTER).store(vm, Ordering::Relaxed);
        self.u32_at(AFTER_SEQ).store(seq, Ordering::Relaxed);
        // Release: publishes slice_ns; pairs with the worker's Acquire load
        // in `GrantSlot::current_grant`.
        let mut seq = self
            .u32_at(GRANT)
            .fetch_add(1, Ordering::Release)
            .wrapping_add(1);
        if seq == 0 {
            // Sequence 0 is never a grant (it is the zeroed file's, and the
            // revoke word's initial value): skip it after a wrap.
            seq = self.u32_at(GRANT).fetch_add(1, Ordering::Release) + 1;
        }
        futex::wake(self.u32_at(GRANT), i32::MAX);
        seq
    }

    /// Sets how many requests the current lease keeps in flight at most
    /// (0: about its slice of device work, by its requests' cost). A free
    /// run of several members sets a few, so that a device serving the
    /// members' queues first come first served serves them one request
    /// each in turn, as NEON's estimate assumes.
    pub fn set_turn(&self, requests: u32) {
        // Relaxed: a hint the worker reads again at each decision; see
        // "Turn" in the module documentation.
        self.u32_at(TURN).store(requests, Ordering::Relaxed);
    }

    /// The current lease's request limit (see [`GrantSlot::set_turn`]).
    pub fn turn(&self) -> u32 {
        // Relaxed: see "Turn" in the module documentation.
        self.u32_at(TURN).load(Ordering::Relaxed)
    }

    /// Revokes lease `seq`: its holder drains and releases. The caller
    /// then rings the VM's region doorbell.
    pub fn revoke(&self, seq: u32) {
        // Release: orders the revocation after the grant it names; pairs
        // with the worker's Acquire load in `revoked`.
        self.u32_at(REVOKE).store(seq, Ordering::Release);
    }

    /// The grant no longer waits for a previous holder (whose worker is
    /// gone). The caller then rings the VM's region doorbell.
    pub fn cancel_after(&self) {
        // Release: pairs with the worker's Acquire load in `after`.
        self.u32_at(AFTER).store(0, Ordering::Release);
    }

    /// The announcement of the last grant whose drain began, if any.
    pub fn closing(&self) -> Option<Closing> {
        // Acquire: pairs with the worker's Release store in `publish_closing`.
        let seq = self.u32_at(CLOSING).load(Ordering::Acquire);
        (seq != 0).then(|| Closing {
            seq,
            estimate_ns: self.u64_at(ESTIMATE).load(Ordering::Relaxed),
        })
    }

    /// The sequence of the last grant this VM's worker released.
    pub fn released(&self) -> u32 {
        // Acquire: pairs with the worker's Release store in `release`, so
        // `used_ns` read after it is the released grant's.
        self.u32_at(RELEASE).load(Ordering::Acquire)
    }

    /// GPU time the worker reported with its last release, in ns.
    pub fn used_ns(&self) -> u64 {
        // Relaxed: ordered by the Acquire load in `released`.
        self.u64_at(USED_NS).load(Ordering::Relaxed)
    }

    /// When the work of the grant released last ended on the device
    /// (`CLOCK_MONOTONIC` ns), 0 if its holder did not say.
    pub fn drained_ns(&self) -> u64 {
        // Relaxed: ordered by the Acquire load in `released`.
        self.u64_at(DRAINED).load(Ordering::Relaxed)
    }

    /// Whether the worker has GPU work it may not issue yet.
    pub fn runnable(&self) -> bool {
        // Relaxed: ordered by the bell (`Bell::seen` Acquire before the scan).
        self.u32_at(RUNNABLE).load(Ordering::Relaxed) != 0
    }

    /// Synchronous device calls the worker served so far.
    pub fn sync_calls(&self) -> u64 {
        // Relaxed: a counter; only its growth is used.
        self.u64_at(SYNC_CALLS).load(Ordering::Relaxed)
    }

    /// The daemon's bookkeeping after reaping this VM's worker: nothing of
    /// the dead worker's is runnable, quiet or backfilling.
    pub fn worker_gone(&self) {
        // Relaxed: no worker of this VM runs; the scheduler learns of the
        // death through the daemon's epoch (Release/Acquire, in memory).
        self.u32_at(RUNNABLE).store(0, Ordering::Relaxed);
        // Nor is it quiet in a grant it no longer holds (a backfiller
        // checks before each kernel), or running a backfilled kernel.
        self.u32_at(QUIET).store(0, Ordering::SeqCst);
        self.u32_at(BF_BUSY).store(0, Ordering::Release);
    }

    /// Gives this VM a backfill grant in the idle gaps of `holder`'s grant
    /// `holder_seq`, for requests predicted to take at most `max_ns`:
    /// returns its sequence. The caller then rings the VM's region
    /// doorbell.
    pub fn grant_backfill(&self, holder: usize, holder_seq: u32, max_ns: u64) -> u32 {
        // Relaxed: published by the Release bump below.
        self.u32_at(BF_HOLDER)
            .store(u32::try_from(holder + 1).unwrap_or(0), Ordering::Relaxed);
        self.u32_at(BF_HOLDER_SEQ)
            .store(holder_seq, Ordering::Relaxed);
        self.u64_at(BF_MAX_NS).store(max_ns, Ordering::Relaxed);
        // Release: publishes the words above; pairs with the worker's
        // Acquire load in `current_backfill`.
        let mut seq = self
            .u32_at(BF_SEQ)
            .fetch_add(1, Ordering::Release)
            .wrapping_add(1);
        if seq == 0 {
            // 0 is the zeroed file's (never a backfill grant).
            seq = self.u32_at(BF_SEQ).fetch_add(1, Ordering::Release) + 1;
        }
        seq
    }

    /// Whether the next grant's holder should announce its quiet periods
    /// (some other VM could backfill them): stored before the grant, whose
    /// Release bump publishes it.
    pub fn want_backfill(&self, wanted: bool) {
        // Relaxed: published by the Release bump of `grant`.
        self.u32_at(BF_WANTED)
            .store(u32::from(wanted), Ordering::Relaxed);
    }

    /// The backfill grant this VM's worker released last.
    pub fn backfill_released(&self) -> u32 {
        // Acquire: pairs with the worker's Release store in
        // `release_backfill`, so `backfill_used` read after it is that
        // grant's.
        self.u32_at(BF_RELEASE).load(Ordering::Acquire)
    }

    /// Device time and requests of the backfill grant released last.
    pub fn backfill_used(&self) -> (u64, u64) {
        // Relaxed: ordered by the Acquire load in `backfill_released`.
        (
            self.u64_at(BF_USED).load(Ordering::Relaxed),
            self.u64_at(BF_REQUESTS).load(Ordering::Relaxed),
        )
    }

    /// The grant this VM holds while it is quiet (its ring empty, its own
    /// device work done), 0 if it is not.
    pub fn quiet(&self) -> u32 {
        // SeqCst: the backfiller's load after its store of `bf_busy`
        // (Dekker; see the module documentation, *Backfill*). The daemon's
        // reads need no more than Relaxed; they are ordered by the bell.
        self.u32_at(QUIET).load(Ordering::SeqCst)
    }

    /// What one of this VM's kernels takes, ns, by its worker's running
    /// average (0: unknown).
    pub fn kernel_ns(&self) -> u64 {
        // Relaxed: a prediction read for its value alone (a stale one only
        // offers or withholds one backfill grant).
        self.u64_at(KERNEL_NS).load(Ordering::Relaxed)
    }

    // ---- the worker's side ----

    /// Publishes what one of this VM's kernels takes, ns.
    pub fn set_kernel_ns(&self, ns: u64) {
        // Relaxed: see `kernel_ns`.
        self.u64_at(KERNEL_NS).store(ns, Ordering::Relaxed);
    }

    /// Publishes that this holder is quiet in grant `seq` (0: it is not).
    /// Going quiet, the caller then rings the [`Bell`].
    pub fn set_quiet(&self, seq: u32) {
        // SeqCst: a store followed by loads of the peers' `bf_busy` (when
        // 0 is stored before issuing), Dekker against the backfiller's
        // store of `bf_busy` then load of `quiet`.
        self.u32_at(QUIET).store(seq, Ordering::SeqCst);
    }

    /// The current backfill grant.
    pub fn current_backfill(&self) -> Backfill {
        // Acquire: pairs with the Release bump in `grant_backfill`, making
        // the words stored before it visible.
        let seq = self.u32_at(BF_SEQ).load(Ordering::Acquire);
        let holder = self.u32_at(BF_HOLDER).load(Ordering::Relaxed);
        Backfill {
            seq,
            holder: (holder as usize).wrapping_sub(1),
            holder_seq: self.u32_at(BF_HOLDER_SEQ).load(Ordering::Relaxed),
            max_ns: self.u64_at(BF_MAX_NS).load(Ordering::Relaxed),
        }
    }

    /// A backfilled request may be about to go on the device: stored
    /// before the holder's `quiet` is loaded again (Dekker).
    pub fn set_backfill_busy(&self) {
        // SeqCst: see `set_quiet`.
        self.u32_at(BF_BUSY).store(1, Ordering::SeqCst);
    }

    /// The backfilled request ended on the device at `end_ns`
    /// (`CLOCK_MONOTONIC`; 0 if none was issued after all).
    pub fn backfill_done(&self, end_ns: u64) {
        if end_ns != 0 {
            // Relaxed: published by the Release store of `bf_busy` below.
            self.u64_at(BF_END).store(end_ns, Ordering::Relaxed);
        }
        // Release: publishes bf_end; pairs with the holder's Acquire load
        // in `backfill_end`.
        self.u32_at(BF_BUSY).store(0, Ordering::Release);
    }

    /// Whether a backfilled request of this VM may be on the device
    /// (read by a holder right after it stopped being quiet).
    pub fn backfill_busy(&self) -> bool {
        // SeqCst: see `set_quiet`.
        self.u32_at(BF_BUSY).load(Ordering::SeqCst) != 0
    }

    /// When this VM's last backfilled request ended (`CLOCK_MONOTONIC`
    /// ns), once none is on the device any more; `None` while one may be.
    pub fn backfill_end(&self) -> Option<u64> {
        // Acquire: pairs with the Release store in `backfill_done`.
        (self.u32_at(BF_BUSY).load(Ordering::Acquire) == 0)
            .then(|| self.u64_at(BF_END).load(Ordering::Relaxed))
    }

    /// Releases backfill grant `seq`, which used `used_ns` of device time in
    /// `requests` requests. The caller then rings the [`Bell`].
    pub fn release_backfill(&self, seq: u32, used_ns: u64, requests: u64) {
        // Relaxed: published by the Release store of `bf_release` below.
        self.u64_at(BF_USED).store(used_ns, Ordering::Relaxed);
        self.u64_at(BF_REQUESTS).store(requests, Ordering::Relaxed);
        // Release: pairs with the daemon's Acquire load in
        // `backfill_released`.
        self.u32_at(BF_RELEASE).store(seq, Ordering::Release);
    }

    /// The current grant: its sequence, slice and whether it is a lease.
    pub fn current_grant(&self) -> (u32, u64, bool) {
        // Acquire: pairs with the Release bump in `grant`, making its
        // slice_ns and lease visible.
        let seq = self.u32_at(GRANT).load(Ordering::Acquire);
        (
            seq,
            self.u64_at(SLICE_NS).load(Ordering::Relaxed),
            self.u32_at(LEASE).load(Ordering::Relaxed) != 0,
        )
    }

    /// Whether the current grant is a free run's lease that parks while
    /// idle. Read after [`GrantSlot::current_grant`], whose Acquire load
    /// made it visible.
    pub fn current_parks(&self) -> bool {
        // Relaxed: published by the daemon's Release bump of `grant`.
        self.u32_at(LEASE).load(Ordering::Relaxed) == 2
    }

    /// Parks lease `seq` (0: unparks), having published `device_ns`
    /// first. The caller then rings the [`Bell`].
    pub fn set_parked(&self, seq: u32) {
        // Release: makes the device time stored before it visible to the
        // daemon's Acquire load in `parked`.
        self.u32_at(PARKED).store(seq, Ordering::Release);
    }

    /// The lease its holder keeps parked (0: none).
    pub fn parked(&self) -> u32 {
        // Acquire: pairs with the worker's Release store in `set_parked`.
        self.u32_at(PARKED).load(Ordering::Acquire)
    }

    /// Whether the current grant is enforced a priori (its holder issues no
    /// request predicted to overrun the slice). Read after
    /// [`GrantSlot::current_grant`], whose Acquire load made it visible.
    pub fn current_apriori(&self) -> bool {
        // Relaxed: published by the daemon's Release bump of `grant`,
        // which the caller loaded with Acquire first.
        self.u32_at(APRIORI).load(Ordering::Relaxed) != 0
    }

    /// Whether the current grant's holder should announce its quiet
    /// periods. Read after [`GrantSlot::current_grant`], whose Acquire load
    /// made it visible.
    pub fn backfill_wanted(&self) -> bool {
        // Relaxed: published by the daemon's Release bump of `grant`.
        self.u32_at(BF_WANTED).load(Ordering::Relaxed) != 0
    }

    /// The previous holder the current grant waits for: its VM and the
    /// grant it must release; `None` if there is none (or no more).
    pub fn after(&self) -> Option<(usize, u32)> {
        // Acquire: pairs with the daemon's Release store in `cancel_after`;
        // the values of a grant were published by its bump, which the
        // caller loaded (Acquire) in `current_grant` first.
        let vm = self.u32_at(AFTER).load(Ordering::Acquire);
        let seq = self.u32_at(AFTER_SEQ).load(Ordering::Relaxed);
        (vm != 0).then(|| (vm as usize - 1, seq))
    }

    /// Announces that grant `seq`'s last work is on the device and that the
    /// grant should report `estimate_ns`. The caller then rings the
    /// [`Bell`].
    pub fn publish_closing(&self, seq: u32, estimate_ns: u64) {
        // Relaxed: published by the Release store of `closing` below.
        self.u64_at(ESTIMATE).store(estimate_ns, Ordering::Relaxed);
        // Release: pairs with the scheduler's Acquire load in `closing`.
        self.u32_at(CLOSING).store(seq, Ordering::Release);
    }

    /// What one request of this VM costs on the device, ns, as its worker
    /// last published it with a release (0: unknown).
    pub fn cost_ns(&self) -> u64 {
        // Relaxed: published by the worker's Release store of `release`,
        // which the caller loaded (Acquire) in `released` first.
        self.u64_at(COST_NS).load(Ordering::Relaxed)
    }

    /// All device time the VM's executor accounted, ns, as its worker last
    /// published it (0 before it did).
    pub fn device_ns(&self) -> u64 {
        // Relaxed: a monotonic counter read for its value alone; the
        // scheduler needs no other data ordered with it.
        self.u64_at(DEVICE_NS).load(Ordering::Relaxed)
    }

    /// Publishes all device time the VM's executor accounted so far.
    pub fn set_device_ns(&self, ns: u64) {
        // Relaxed: see `device_ns`.
        self.u64_at(DEVICE_NS).store(ns, Ordering::Relaxed);
    }

    /// Stores what one request costs, for the next release to publish.
    pub fn set_cost(&self, cost_ns: u64) {
        // Relaxed: published by the Release store of `release`.
        self.u64_at(COST_NS).store(cost_ns, Ordering::Relaxed);
    }

    /// Whether grant `seq` was revoked.
    pub fn revoked(&self, seq: u32) -> bool {
        // Acquire: pairs with the Release store in `revoke`.
        self.u32_at(REVOKE).load(Ordering::Acquire) == seq
    }

    /// Releases grant `seq` having used `used_ns`, saying whether work is
    /// still waiting. The caller then rings the [`Bell`].
    pub fn release(&self, seq: u32, used_ns: u64, runnable: bool) {
        self.release_drained(seq, used_ns, runnable, 0);
    }

    /// [`GrantSlot::release`], saying when the grant's work ended on the
    /// device (`CLOCK_MONOTONIC` ns, 0 if unknown): the next holder, whose
    /// first work may have queued behind it, is not charged for that wait.
    pub fn release_drained(&self, seq: u32, used_ns: u64, runnable: bool, drained_ns: u64) {
        // Relaxed: published by the Release store of `release` below.
        self.u64_at(DRAINED).store(drained_ns, Ordering::Relaxed);
        // Relaxed: published by the Release store of `release` below.
        self.u64_at(USED_NS).store(used_ns, Ordering::Relaxed);
        self.u32_at(RUNNABLE)
            .store(u32::from(runnable), Ordering::Relaxed);
        // Release: publishes used_ns and runnable; pairs with the
        // scheduler's Acquire load in `released`.
        self.u32_at(RELEASE).store(seq, Ordering::Release);
    }

    /// Publishes whether the worker has GPU work waiting for a grant. The
    /// caller then rings the [`Bell`].
    pub fn set_runnable(&self, runnable: bool) {
        // Relaxed: published by the bell's Release increment.
        self.u32_at(RUNNABLE)
            .store(u32::from(runnable), Ordering::Relaxed);
    }

    /// Counts one synchronous device call.
    pub fn count_sync_call(&self) {
        // Relaxed: a counter; only its growth is used.
        self.u64_at(SYNC_CALLS).fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("fairgpu-grants-test-{}-{name}", std::process::id()))
    }

    /// The attack: a grant file of mode 0660 let every member of the
    /// daemon's group grant any VM the GPU or revoke another's grant.
    #[test]
    fn a_vm_group_member_cannot_write_the_grant_file() {
        use std::os::unix::fs::PermissionsExt;
        let path = temp_path("private");
        let f = GrantFile::create(&path, 1).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600, "grant file mode {mode:o}");
        drop(f);
    }

    #[test]
    fn grant_and_release_round_trip_between_mappings() {
        let path = temp_path("basic");
        let daemon = GrantFile::create(&path, 2).unwrap();
        let worker = GrantFile::open(&path, 2).unwrap();
        assert!(GrantFile::open(&path, 3).is_err(), "slot count must match");
        assert!(daemon.slot(2).is_none());
        let d = daemon.slot(1).unwrap();
        let w = worker.slot(1).unwrap();
        assert_eq!(w.current_grant(), (0, 0, false));
        let seq = d.grant(6_000_000, false);
        assert_eq!(w.current_grant(), (seq, 6_000_000, false));
        assert!(!w.revoked(seq));
        assert_ne!(d.released(), seq);
        w.set_runnable(true);
        worker.bell().ring();
        assert!(d.runnable());
        let seen = daemon.bell().seen();
        w.release(seq, 6_100_000, false);
        worker.bell().ring();
        assert_ne!(daemon.bell().seen(), seen);
        daemon.bell().wait(seen, Duration::from_secs(5)); // returns at once
        assert_eq!(
            (d.released(), d.used_ns(), d.runnable()),
            (seq, 6_100_000, false)
        );
        w.count_sync_call();
        w.count_sync_call();
        assert_eq!(d.sync_calls(), 2);
        w.set_runnable(true);
        w.set_quiet(9);
        d.worker_gone();
        assert!(!d.runnable());
        assert_eq!(d.quiet(), 0, "a dead holder is not quiet");
        let lease = d.grant(6_000_000, true);
        assert_eq!(w.current_grant(), (lease, 6_000_000, true));
        d.revoke(lease);
        assert!(w.revoked(lease) && !w.revoked(seq));
        // Closing and handoff: slot 0's grant waits for slot 1's release.
        assert_eq!(d.closing(), None);
        w.publish_closing(lease, 5_900_000);
        assert_eq!(
            d.closing(),
            Some(Closing {
                seq: lease,
                estimate_ns: 5_900_000
            })
        );
        let (d0, w0) = (daemon.slot(0).unwrap(), worker.slot(0).unwrap());
        assert_eq!(w0.after(), None);
        let next = d0.grant_after(6_000_000, false, Some((1, lease)));
        assert_eq!(w0.current_grant(), (next, 6_000_000, false));
        assert_eq!(w0.after(), Some((1, lease)));
        // The waiter sees the draining holder's release.
        let peer = worker.slot(1).unwrap();
        assert_ne!(peer.released(), lease);
        w.release(lease, 6_000_000, true);
        assert_eq!(peer.released(), lease);
        d0.cancel_after();
        assert_eq!(w0.after(), None);
        // An ordinary grant names nobody.
        d0.grant(6_000_000, false);
        assert_eq!(w0.after(), None);
        // Backfill: slot 0 fills slot 1's idle gaps.
        assert_eq!(w0.current_backfill().seq, 0);
        w.set_quiet(next);
        assert_eq!(d.quiet(), next);
        let bf = d0.grant_backfill(1, next, 250_000);
        assert_eq!(
            w0.current_backfill(),
            Backfill {
                seq: bf,
                holder: 1,
                holder_seq: next,
                max_ns: 250_000
            }
        );
        w0.set_backfill_busy();
        assert!(w0.backfill_busy() && w0.backfill_end().is_none());
        w0.backfill_done(1_234);
        assert_eq!(w0.backfill_end(), Some(1_234));
        w0.set_backfill_busy();
        w0.backfill_done(0); // issued nothing: the last end stays
        assert_eq!(w0.backfill_end(), Some(1_234));
        assert_ne!(d0.backfill_released(), bf);
        w0.release_backfill(bf, 200_000, 3);
        assert_eq!(d0.backfill_released(), bf);
        assert_eq!(d0.backfill_used(), (200_000, 3));
        w0.set_kernel_ns(180_000);
        d0.want_backfill(true);
        let g = d0.grant(6_000_000, false);
        assert_eq!(w0.current_grant().0, g);
        assert!(w0.backfill_wanted());
        d0.want_backfill(false);
        d0.grant(6_000_000, false);
        assert!(!w0.backfill_wanted());
        assert_eq!(d0.kernel_ns(), 180_000);
        w.set_quiet(0);
        assert_eq!(d.quiet(), 0);
        // Slots are independent.
        assert_eq!(daemon.slot(0).unwrap().released(), 0);
        drop(worker);
        assert!(path.exists(), "an opener leaves the file");
        drop(daemon);
        assert!(!path.exists(), "the creator removes it");
    }

    #[test]
    fn open_refuses_other_files() {
        let path = temp_path("garbage");
        std::fs::write(&path, vec![7u8; 4096]).unwrap();
        assert!(matches!(
            GrantFile::open(&path, 1),
            Err(GrantsError::Invalid { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            GrantFile::open(&path, 1),
            Err(GrantsError::Map { .. })
        ));
        assert!(matches!(
            GrantFile::create(&path, 0),
            Err(GrantsError::Slots { .. })
        ));
    }
}
