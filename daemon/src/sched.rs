//! The daemon's GPU scheduler: one thread that drives a
//! [`fairgpu_scheduler::Policy`] over the grant file ([`fairgpu_worker::grants`]).
//!
//! # The loop
//!
//! 1. Load the bell (Acquire), then look at every VM: a worker that died
//!    or was replaced (the supervisor's epoch changed) releases implicitly,
//!    charged the wall-clock time it held the grant, and is blocked; the
//!    holder's release word is compared with the outstanding grant's
//!    sequence, and on a match the reported usage goes to
//!    [`Policy::release`]; a holder that announced its drain is released
//!    early (see *Handing the grant over* below), and the late release of
//!    one released so corrects its charge; new synchronous calls go to
//!    [`Policy::record_sync_call`]; each live worker's *runnable* flag is
//!    compared with the policy's state and turned into `wake` or `block`.
//! 2. If nobody holds the GPU, [`Policy::pick`]: write the slice, bump the
//!    grant word, ring the VM region's doorbell; if the grant asks for it
//!    ([`Grant::wake_vcpu`]), the [`CpuCoordinator`] wakes the VM's waiting
//!    vCPUs (GPU-centric co-scheduling, FairGV Algorithms 3 and 4).
//! 3. Sleep on the bell with the value loaded in step 1: a worker that
//!    changed something after that load has rung it, so the wait returns
//!    at once. The wait is bounded ([`IDLE_WAIT`]), and shorter while a
//!    grant is outstanding and its grace has not run out.
//!
//! The policy is work conserving (`pick` answers whenever someone is
//! runnable), so the GPU is granted again in the same pass that saw the
//! release. The seeds' other policies add four things, described in
//! docs/seed-schedulers.md, "How the daemon drives them": a priority
//! policy's preemption of the holder (`Policy::preempt`, through the slot's
//! revoke word), disengaged timeslices (every grant a lease, revoked at its
//! slice's end), waking when a reservation's budget comes back
//! (`Policy::next_event`), and free runs, in which several VMs hold leases
//! at once (`Policy::free_run`, charged from the device time each worker
//! publishes).
//!
//! # Handing the grant over while the holder drains
//!
//! A `sampled` holder whose slice is full issues its last request, then
//! waits for the device to finish (the drain) and releases. Waiting for
//! that release before granting the next VM would leave the GPU idle for
//! two process wake-ups (holder → scheduler → next worker) at every switch.
//! So a holder announces its drain with the usage it expects to report
//! ([`fairgpu_worker::grants`], *Closing*). If another VM is runnable, the scheduler
//! releases the holder in the policy at once, charged that estimate, picks
//! the next VM and grants it naming the draining holder (*Handoff*). The
//! next worker, woken now, takes the grant at once: its work queues on the
//! device behind the holder's, so the GPU goes from one VM's work to the
//! next without waiting for any process to wake up, and the time its first
//! work waits behind the drain is not charged to it. The holder's real
//! report then corrects its charge ([`Policy::adjust`]), so every measured
//! nanosecond is still charged; only the choice of the next VM used the
//! estimate. A holder that dies while draining keeps its estimate, and the
//! grant that named it stops naming it.
//!
//! # Uncontended leases
//!
//! A grant made while no other VM is runnable, nor was for [`LEASE_QUIET`],
//! is a *lease* ([`fairgpu_worker::accounting`]): its holder issues without
//! interposition and without a slice (keeping a bounded number of requests
//! in flight). Meanwhile the scheduler charges it its wall-clock time
//! slice by slice itself (`release` of the elapsed time, then `pick`, which
//! can only answer the same VM), so tags, virtual time and credit advance
//! as if it had released every slice, and a VM that wakes later is not
//! owed the lone VM's time. As soon as another VM is runnable the lease is
//! revoked; the holder drains and releases with the wall-clock time it held
//! the lease, of which the part not yet charged is charged.
//!
//! # Overruns and dead workers
//!
//! A holder normally releases within its slice plus the request in flight
//! (a non-preemptive GPU finishes the kernel it runs). One that has not
//! released after slice + [`OVERRUN_GRACE`] is logged and counted as
//! overrunning, and keeps the grant: on a non-preemptive GPU the device is
//! busy with its work anyway, and its own measurement is charged in full
//! when it releases. A worker that dies (or is restarted) releases
//! implicitly: its wall-clock time holding the grant is charged, since
//! nothing else measured it.
//!
//! # Co-scheduling seam
//!
//! [`CpuCoordinator`] is what the scheduler asks when it grants an
//! interactive vGPU. [`LocalCoordinator`] wakes the VM's guest processes
//! that sleep in the transport (their futex words), which is the whole of
//! the vCPU wake-up in local mode; for QEMU VMs, `crate::qemu::coord`
//! (daemon/src/qemu/coord.rs) raises the VM's interrupt and nudges its
//! vCPU threads (QMP gives their ids) instead.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use fairgpu_scheduler::{
    ExecutionMode, FreeRun, Grant, Nanos, Policy, Reservation, SchedError, Standing, VgpuId,
    VgpuState,
};

use fairgpu_worker::grants::{Bell, GrantFile, GrantSlot};
use fairgpu_worker::host::RegionBells;

/// Longest sleep of the scheduler thread; also the rate at which idle VMs'
/// synchronous calls are sampled (the interactivity window is 10 ms).
pub const IDLE_WAIT: Duration = Duration::from_millis(10);
/// How long past its slice a holder may take to release before it is
/// logged as overrunning.
pub const OVERRUN_GRACE: Duration = Duration::from_secs(1);
/// Preemptive mode: how long past its slice a holder may stay busy before
/// it is switched out.
pub const PREEMPT_GRACE: Duration = Duration::from_millis(1);
/// A grant is an uncontended lease only if no other VM was runnable or
/// running for this long: a VM that comes and goes (waiting for its own
/// results between bursts) keeps the others on measured, drained grants,
/// so it never waits behind a lease holder's queue when it comes back.
pub const LEASE_QUIET: Duration = Duration::from_millis(100);
/// Device work each member of a free run keeps queued (its lease's queue
/// depth, at least one request): 300 µs, so that a VM that waits for each
/// of its kernels does not find a slice of every other member's work ahead
/// of it, and a device that serves queues first come first served
/// interleaves the members about as NEON's round-robin estimate assumes
/// (1 ms until 2026-11: `neon-dfq`'s Throttle MMR 0.32 with three request
/// sizes, 0.84 with 300 µs; docs/results.md).
pub const FREE_RUN_QUEUE: Duration = Duration::from_micros(300);
/// A VM that left this many backfill grants in a row unused is offered one
/// again only after 2^this many grants.
const BACKFILL_BACKOFF_MAX: u32 = 8;
/// Most synchronous calls fed to the policy per VM per pass (the detector
/// needs only more than its threshold).
const MAX_SYNC_RECORDS: u64 = 64;

/// Asks the CPU side to run a VM's vCPU now (FairGV Algorithm 4).
pub trait CpuCoordinator: Send + std::fmt::Debug {
    /// VM `vm` (its index in the configuration) was granted the GPU and is
    /// CPU–GPU interactive: wake its vCPUs that wait for the GPU. Returns
    /// how many waiters were woken.
    fn wake_vcpu(&self, vm: usize) -> u32;
}

/// Local mode: a VM's "vCPUs" are its guest processes, which sleep on their
/// channels' futex words; waking them is bumping `guest_wake` of every
/// channel whose `guest_sleeping` is set (the server's own wake-up).
#[derive(Debug)]
pub struct LocalCoordinator {
    regions: Vec<RegionBells>,
}

impl LocalCoordinator {
    /// A coordinator for the VMs whose regions are `regions`, in
    /// configuration order.
    pub fn new(regions: Vec<RegionBells>) -> Self {
        LocalCoordinator { regions }
    }
}

impl CpuCoordinator for LocalCoordinator {
    fn wake_vcpu(&self, vm: usize) -> u32 {
        self.regions.get(vm).map_or(0, RegionBells::wake_guests)
    }
}

/// One VM as the scheduler reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmSched {
    /// Its current weight.
    pub weight: u32,
    /// Blocked, runnable or running.
    pub state: VgpuState,
    /// GPU time charged by the policy, ns.
    pub charged_ns: u64,
    /// Grants received.
    pub grants: u64,
    /// Grants that asked for its vCPUs to be woken (GPU-centric
    /// co-scheduling: it was interactive when granted).
    pub cosched_wakes: u64,
    /// Of those, the grants that found a guest thread asleep and woke it;
    /// the others found the guest already waiting for the GPU.
    pub cosched_woke: u64,
    /// Grants it held past slice + grace.
    pub overruns: u64,
    /// The longest it held one grant, ns of wall-clock time from the grant
    /// to its release (or to its worker's exit): what the other VMs waited
    /// at most for this one, a runaway guard's bound included.
    pub longest_hold_ns: u64,
    /// Grants revoked before their end: preempted by a vGPU of higher
    /// priority, or a disengaged slice that ended while others waited.
    pub revoked: u64,
    /// Backfilling: requests it ran in other holders' idle gaps.
    pub backfilled: u64,
    /// Device time of those requests, ns (charged to it, and part of
    /// `charged_ns`).
    pub backfill_ns: u64,
    /// The policy's own standing (tags, credit, overuse, budget).
    pub standing: Standing,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    cosched_wakes: u64,
    cosched_woke: u64,
    overruns: u64,
    longest_hold_ns: u64,
    revoked: u64,
    backfilled: u64,
    backfill_ns: u64,
}

impl Counters {
    /// A grant taken at `at` ended at `now`.
    fn held(&mut self, at: Instant, now: Instant) {
        let ns = u64::try_from(now.saturating_duration_since(at).as_nanos()).unwrap_or(u64::MAX);
        self.longest_hold_ns = self.longest_hold_ns.max(ns);
    }
}

#[derive(Debug)]
struct Core {
    policy: Box<dyn Policy>,
    counters: Vec<Counters>,
}

/// What the scheduler thread shares with the supervisor and the control
/// socket. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SchedHandle {
    core: Arc<Mutex<Core>>,
    /// Per VM: odd while a worker runs, bumped at every start and exit
    /// (Release; the scheduler loads it with Acquire).
    epochs: Arc<[AtomicU64]>,
    slots: Arc<[GrantSlot]>,
    bell: Bell,
}

impl SchedHandle {
    fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The supervisor started VM `vm`'s worker.
    pub fn worker_started(&self, vm: usize) {
        if let Some(e) = self.epochs.get(vm) {
            // Release: orders the slot bookkeeping before it; pairs with the
            // scheduler's Acquire load of the epoch.
            e.fetch_add(1, Ordering::Release);
            self.bell.ring();
        }
    }

    /// The supervisor reaped VM `vm`'s worker.
    pub fn worker_gone(&self, vm: usize) {
        if let (Some(e), Some(slot)) = (self.epochs.get(vm), self.slots.get(vm)) {
            slot.worker_gone();
            // Release: publishes the cleared runnable flag; pairs with the
            // scheduler's Acquire load of the epoch.
            e.fetch_add(1, Ordering::Release);
            self.bell.ring();
        }
    }

    /// Changes VM `vm`'s weight; it applies to what is charged from now on.
    pub fn set_weight(&self, vm: usize, weight: u32) -> Result<(), SchedError> {
        self.lock().policy.set_weight(VgpuId(vm as u32), weight)
    }

    /// VM `vm` as the policy sees it.
    pub fn vm(&self, vm: usize) -> Option<VmSched> {
        Self::vm_of(&self.lock(), vm)
    }

    /// Every VM as the policy sees it, in one consistent snapshot (at most
    /// one is running, but in a disengaged policy's free run).
    pub fn snapshot(&self) -> Vec<Option<VmSched>> {
        let core = self.lock();
        (0..self.epochs.len())
            .map(|vm| Self::vm_of(&core, vm))
            .collect()
    }

    fn vm_of(core: &Core, vm: usize) -> Option<VmSched> {
        let s = core.policy.stats(VgpuId(vm as u32))?;
        let c = core.counters.get(vm).copied().unwrap_or_default();
        Some(VmSched {
            weight: s.weight,
            state: s.state,
            charged_ns: s.charged.as_nanos(),
            grants: s.grants,
            cosched_wakes: c.cosched_wakes,
            cosched_woke: c.cosched_woke,
            overruns: c.overruns,
            longest_hold_ns: c.longest_hold_ns,
            revoked: c.revoked,
            backfilled: c.backfilled,
            backfill_ns: c.backfill_ns,
            standing: s.standing,
        })
    }

    /// Sets VM `vm`'s priority (TimeGraph policies).
    pub fn set_priority(&self, vm: usize, priority: u8) -> Result<(), SchedError> {
        self.lock().policy.set_priority(VgpuId(vm as u32), priority)
    }

    /// Gives VM `vm` a reservation, or takes it away (TimeGraph policies),
    /// subject to the policy's admission control.
    pub fn set_reservation(
        &self,
        vm: usize,
        reservation: Option<Reservation>,
    ) -> Result<(), SchedError> {
        let r = self
            .lock()
            .policy
            .set_reservation(VgpuId(vm as u32), reservation);
        self.bell.ring();
        r
    }
}

/// A holder that announced its drain and was released early, charged its
/// estimate, so that the next grant could be handed over meanwhile: its own
/// release, when it comes, corrects the charge.
#[derive(Debug, Clone, Copy)]
struct Trailing {
    vm: usize,
    seq: u32,
    estimate: u64,
    /// Switched out in preemptive mode (its hold ended then).
    preempted: bool,
    /// What renewals of its lease charged already (its release reports
    /// the lease's whole wall-clock time).
    charged: u64,
    /// When its grant was taken.
    at: Instant,
}

/// A disengaged policy's free run: several VMs hold leases at once.
#[derive(Debug)]
struct Free {
    /// Members and the sequence of each one's lease.
    members: std::collections::BTreeMap<usize, u32>,
    /// Leases revoked and not yet released (the barrier's drain).
    draining: std::collections::BTreeMap<usize, u32>,
    /// When the interval ends.
    until: Instant,
    /// Each VM's published device time when the interval began.
    base: Vec<u64>,
    /// The policy asked for no next run: no VM joins, and once the drain
    /// is over the free run ends.
    closing: bool,
    /// Requests each member keeps in flight while there are several
    /// ([`FreeRun::turn`]; 0: [`FREE_RUN_QUEUE`] of device work).
    turn: u32,
    /// Whether members park their leases while idle ([`FreeRun::park`]).
    park: bool,
    /// Members whose lease is parked (as last seen).
    parked: std::collections::BTreeSet<usize>,
}

/// A backfill grant outstanding: `vm` may fill the idle gaps of `holder`'s
/// grant `holder_seq`.
#[derive(Debug, Clone, Copy)]
struct BackfillOut {
    vm: usize,
    seq: u32,
    holder: usize,
    holder_seq: u32,
}

/// The grant outstanding.
#[derive(Debug)]
struct Outstanding {
    vm: usize,
    seq: u32,
    /// The draining holder this grant was handed over from.
    after: Option<usize>,
    at: Instant,
    slice: Duration,
    /// An uncontended lease.
    lease: bool,
    /// When a lease was revoked.
    revoked: Option<Instant>,
    /// Wall-clock time of the lease charged by renewals, and until when.
    charged: Duration,
    charged_until: Instant,
    warned: bool,
    /// The policy refused to renew the lease and no longer counts the VM
    /// as the holder: its release is charged by a correction.
    unheld: bool,
}

impl Outstanding {
    /// Preemptive mode: from when it may be switched out while it still
    /// works: [`PREEMPT_GRACE`] after its slice, or after its lease was
    /// revoked. `None` for a lease that runs on, or one the policy no
    /// longer counts as held.
    fn switch_at(&self) -> Option<Instant> {
        match (self.lease, self.revoked) {
            _ if self.unheld => None,
            (false, _) => Some(self.at + self.slice + PREEMPT_GRACE),
            (true, Some(at)) => Some(at + PREEMPT_GRACE),
            (true, None) => None,
        }
    }

    /// After this, the holder counts as overrunning; `None` for a lease
    /// that still runs.
    fn deadline(&self) -> Option<Instant> {
        match (self.lease, self.revoked) {
            (false, _) => Some(self.at + self.slice + OVERRUN_GRACE),
            (true, Some(at)) => Some(at + OVERRUN_GRACE),
            (true, None) => None,
        }
    }
}

/// The scheduler thread's state. See the module documentation.
#[derive(Debug)]
pub struct Scheduler {
    handle: SchedHandle,
    _file: Arc<GrantFile>,
    regions: Vec<RegionBells>,
    coordinator: Box<dyn CpuCoordinator>,
    names: Vec<String>,
    origin: Instant,
    /// FairGV's preemptive mode (`[daemon] preemptive`).
    preemptive: bool,
    /// Backfilling (`[daemon] backfill`): the longest request a backfill
    /// grant admits, by its VM's prediction.
    backfill: Option<Duration>,
}

impl Scheduler {
    /// A scheduler over `file` (one slot per VM) for the VMs `names`, whose
    /// regions are `regions`, with weights `weights`. Every VM starts
    /// blocked, with no worker.
    pub fn new(
        mut policy: Box<dyn Policy>,
        file: Arc<GrantFile>,
        names: Vec<String>,
        weights: &[u32],
        regions: Vec<RegionBells>,
        coordinator: Box<dyn CpuCoordinator>,
    ) -> Result<Scheduler, SchedError> {
        for (i, &w) in weights.iter().enumerate() {
            policy.add(VgpuId(i as u32), w)?;
        }
        let n = names.len();
        let slots: Arc<[GrantSlot]> = (0..n)
            .map(|i| file.slot(i).expect("one grant slot per VM"))
            .collect();
        let handle = SchedHandle {
            core: Arc::new(Mutex::new(Core {
                policy,
                counters: vec![Counters::default(); n],
            })),
            epochs: (0..n).map(|_| AtomicU64::new(0)).collect(),
            slots,
            bell: file.bell(),
        };
        Ok(Scheduler {
            handle,
            _file: file,
            regions,
            coordinator,
            names,
            origin: Instant::now(),
            preemptive: false,
            backfill: None,
        })
    }

    /// FairGV's preemptive mode, for a GPU that time-slices between
    /// contexts: a holder still busy [`PREEMPT_GRACE`] after its slice
    /// (an over-long kernel) is switched out. Its grant is revoked (its
    /// worker releases when its wait ends), it is charged its wall-clock
    /// time so far, and the next VM is granted at once, as in a handoff
    /// (its first work is not charged for what it waits for or shares
    /// with the long kernel): its work runs beside the long kernel, the
    /// GPU time-slicing between the two contexts. Its release later corrects
    /// the charge to what it measured, the whole long kernel.
    pub fn with_preemptive(mut self, on: bool) -> Scheduler {
        self.preemptive = on;
        self
    }

    /// Backfilling: while the holder waits on its guest with its own device
    /// work done, one other runnable VM may issue kernels predicted to take
    /// at most `max` each, one at a time, charged to it
    /// (`fairgpu_worker::grants`, *Backfill*). A new holder is granted only
    /// once the backfiller has released.
    pub fn with_backfill(mut self, max: Option<Duration>) -> Scheduler {
        self.backfill = max;
        self
    }

    /// The handle for the supervisor and the control socket.
    pub fn handle(&self) -> SchedHandle {
        self.handle.clone()
    }

    fn nanos(&self, t: Instant) -> Nanos {
        Nanos::from_duration(t.duration_since(self.origin))
    }

    /// Runs until `shutdown`.
    pub fn run(self, shutdown: &AtomicBool) {
        let n = self.names.len();
        let h = self.handle.clone();
        let mut epoch = vec![0u64; n];
        let mut sync_seen: Vec<u64> = h.slots.iter().map(GrantSlot::sync_calls).collect();
        let mut out: Option<Outstanding> = None;
        let mut trailing: Option<Trailing> = None;
        let mut free: Option<Free> = None;
        let mut bf: Option<BackfillOut> = None;
        // Per VM: the holder's grant it released a backfill grant of
        // without issuing anything (its next request did not fit): it is
        // not asked again during that grant.
        let mut bf_declined: Vec<Option<(usize, u32)>> = vec![None; n];
        // Per VM: backfill grants in a row that it released unused, and
        // the count of grants before which it is not offered one again
        // (2^streak grants after the last: a VM whose next request is
        // seldom a kernel that fits, or which wakes too late for the
        // holder's gaps, costs every other VM's processes CPU time for
        // nothing with each offer).
        let mut bf_backoff: Vec<(u32, u64)> = vec![(0, 0); n];
        let mut grants_made: u64 = 0;
        // When each VM was last seen runnable or running.
        let mut active: Vec<Option<Instant>> = vec![None; n];
        while !shutdown.load(Ordering::Relaxed) {
            let seen = h.bell.seen();
            let now_i = Instant::now();
            let now = self.nanos(now_i);
            let mut core = h.lock();
            for i in 0..n {
                let id = VgpuId(i as u32);
                // Acquire: pairs with the supervisor's Release bump.
                let e = h.epochs[i].load(Ordering::Acquire);
                if e == epoch[i] {
                    continue;
                }
                epoch[i] = e;
                if let Some(o) = out.take_if(|o| o.vm == i) {
                    core.counters[i].held(o.at, now_i);
                    let held = Nanos::from_duration(now_i.duration_since(o.charged_until));
                    tracing::warn!(vm = %self.names[i], held = %held, "the GPU holder's worker is gone; its grant ends, charged the time it held it");
                    let r = if o.unheld {
                        let extra = i64::try_from(held.as_nanos()).unwrap_or(i64::MAX);
                        core.policy.adjust(id, extra, now)
                    } else {
                        core.policy.release(id, held, now)
                    };
                    log_refusal(&self.names[i], r);
                }
                if let Some(f) = free.as_mut() {
                    f.draining.remove(&i);
                    f.parked.remove(&i);
                    if f.members.remove(&i).is_some() {
                        log_refusal(&self.names[i], core.policy.left_free_run(id, now));
                    }
                }
                if let Some(t) = trailing.take_if(|t| t.vm == i) {
                    if !t.preempted {
                        core.counters[i].held(t.at, now_i);
                    }
                    // Its estimate stands; the grant handed over from it
                    // must not wait for a release that will not come.
                    if let Some(o) = out.as_ref().filter(|o| o.after == Some(i)) {
                        h.slots[o.vm].cancel_after();
                        self.regions[o.vm].ring_host();
                    }
                }
                // A dead backfiller's requests were synchronised one by one;
                // what it had not reported is lost with it.
                bf.take_if(|b| b.vm == i);
                log_refusal(&self.names[i], core.policy.block(id, now));
                sync_seen[i] = h.slots[i].sync_calls();
            }
            if let Some(b) = bf.take_if(|b| h.slots[b.vm].backfill_released() == b.seq) {
                let (used, requests) = h.slots[b.vm].backfill_used();
                let backoff = &mut bf_backoff[b.vm];
                if requests == 0 {
                    bf_declined[b.vm] = Some((b.holder, b.holder_seq));
                    backoff.0 = (backoff.0 + 1).min(BACKFILL_BACKOFF_MAX);
                    backoff.1 = grants_made + (1 << backoff.0);
                } else {
                    *backoff = (0, 0);
                }
                if used > 0 {
                    let c = &mut core.counters[b.vm];
                    c.backfilled += requests;
                    c.backfill_ns += used;
                    let extra = i64::try_from(used).unwrap_or(i64::MAX);
                    log_refusal(
                        &self.names[b.vm],
                        core.policy.adjust(VgpuId(b.vm as u32), extra, now),
                    );
                }
                tracing::trace!(vm = %self.names[b.vm], used, requests, "backfill released");
            }
            if let Some(o) = out.as_mut() {
                let slot = &h.slots[o.vm];
                if slot.released() == o.seq {
                    core.counters[o.vm].held(o.at, now_i);
                    // A lease reports all of its wall-clock time; renewals
                    // charged part of it already.
                    let used =
                        Nanos(slot.used_ns()).saturating_sub(Nanos::from_duration(o.charged));
                    let id = VgpuId(o.vm as u32);
                    let cost = slot.cost_ns();
                    if cost > 0 {
                        log_refusal(&self.names[o.vm], core.policy.observe_cost(id, Nanos(cost)));
                    }
                    let r = if o.unheld {
                        // Its renewal was refused: the policy released it
                        // then; the rest of its time is charged now.
                        let extra = i64::try_from(used.as_nanos()).unwrap_or(i64::MAX);
                        core.policy.adjust(id, extra, now)
                    } else {
                        core.policy.release(id, used, now)
                    };
                    log_refusal(&self.names[o.vm], r);
                    out = None;
                } else if !o.lease
                    && trailing.is_none()
                    && h.slots[o.vm].closing().is_some_and(|c| c.seq == o.seq)
                    && others_runnable(&*core.policy, VgpuId(o.vm as u32))
                {
                    // Its last work drains: charge the estimate now and
                    // grant the next vGPU below, which starts the moment
                    // this one releases.
                    let estimate = h.slots[o.vm].closing().map_or(0, |c| c.estimate_ns);
                    log_refusal(
                        &self.names[o.vm],
                        core.policy
                            .release(VgpuId(o.vm as u32), Nanos(estimate), now),
                    );
                    tracing::debug!(vm = %self.names[o.vm], estimate, "handoff while draining");
                    trailing = Some(Trailing {
                        vm: o.vm,
                        seq: o.seq,
                        estimate,
                        at: o.at,
                        preempted: false,
                        charged: 0,
                    });
                    out = None;
                } else if self.preemptive
                    && trailing.is_none()
                    && o.switch_at().is_some_and(|t| now_i >= t)
                    && others_runnable(&*core.policy, VgpuId(o.vm as u32))
                {
                    // Preemptive mode: still busy past its slice (or its
                    // revoked lease's end). Switched out; what it runs
                    // until its release is corrected then.
                    let estimate =
                        Nanos::from_duration(now_i.saturating_duration_since(o.charged_until));
                    if o.revoked.is_none() {
                        h.slots[o.vm].revoke(o.seq);
                        self.regions[o.vm].ring_host();
                    }
                    core.counters[o.vm].revoked += 1;
                    // The others wait for it no longer.
                    core.counters[o.vm].held(o.at, now_i);
                    log_refusal(
                        &self.names[o.vm],
                        core.policy.release(VgpuId(o.vm as u32), estimate, now),
                    );
                    tracing::debug!(vm = %self.names[o.vm], held = %estimate, "holder switched out (preemptive mode)");
                    trailing = Some(Trailing {
                        vm: o.vm,
                        seq: o.seq,
                        estimate: estimate.as_nanos(),
                        at: o.at,
                        preempted: true,
                        charged: Nanos::from_duration(o.charged).as_nanos(),
                    });
                    out = None;
                } else if !o.warned && o.deadline().is_some_and(|d| now_i > d) {
                    o.warned = true;
                    core.counters[o.vm].overruns += 1;
                    tracing::warn!(
                        vm = %self.names[o.vm],
                        slice = ?o.slice,
                        lease = o.lease,
                        "the GPU holder has not released its grant within {OVERRUN_GRACE:?} of its end; it keeps it and is charged what it reports"
                    );
                }
            }
            if let Some(t) =
                trailing.take_if(|t| h.slots[t.vm].released().wrapping_sub(t.seq) as i32 >= 0)
            {
                if !t.preempted {
                    core.counters[t.vm].held(t.at, now_i);
                }
                let slot = &h.slots[t.vm];
                // Its own report, unless a later grant of the same VM was
                // released before this look (then the estimate stands).
                let correction = if slot.released() == t.seq {
                    slot.used_ns() as i64 - t.charged as i64 - t.estimate as i64
                } else {
                    0
                };
                log_refusal(
                    &self.names[t.vm],
                    core.policy.adjust(VgpuId(t.vm as u32), correction, now),
                );
                // Its average request cost came with that release too.
                let cost = slot.cost_ns();
                if cost > 0 {
                    log_refusal(
                        &self.names[t.vm],
                        core.policy.observe_cost(VgpuId(t.vm as u32), Nanos(cost)),
                    );
                }
            }
            for i in 0..n {
                if epoch[i].is_multiple_of(2) {
                    continue; // no worker
                }
                let id = VgpuId(i as u32);
                let slot = &h.slots[i];
                let calls = slot.sync_calls();
                let new = calls.wrapping_sub(sync_seen[i]).min(MAX_SYNC_RECORDS);
                sync_seen[i] = calls;
                for _ in 0..new {
                    log_refusal(&self.names[i], core.policy.record_sync_call(id, now));
                }
                if let Some(f) = free.as_mut() {
                    // A member that gave its lease back (nothing left to
                    // issue) is runnable again, and blocked below if idle.
                    if f.members.get(&i).is_some_and(|&seq| slot.released() == seq) {
                        f.members.remove(&i);
                        f.parked.remove(&i);
                        log_refusal(&self.names[i], core.policy.left_free_run(id, now));
                    }
                    // A member that parked its lease (nothing to issue) is
                    // blocked but stays a member; it issues again on it.
                    if let Some(&seq) = f.members.get(&i) {
                        let parked = slot.parked() == seq;
                        if parked && f.parked.insert(i) {
                            log_refusal(&self.names[i], core.policy.member_parked(id, now));
                        } else if !parked && f.parked.remove(&i) {
                            log_refusal(&self.names[i], core.policy.member_resumed(id, now));
                        }
                    }
                    if f.draining
                        .get(&i)
                        .is_some_and(|&seq| slot.released() == seq)
                    {
                        f.draining.remove(&i);
                    }
                    if f.members.contains_key(&i) || f.draining.contains_key(&i) {
                        continue;
                    }
                }
                if out.as_ref().is_some_and(|o| o.vm == i) || trailing.is_some_and(|t| t.vm == i) {
                    continue;
                }
                let state = core.policy.stats(id).map(|s| s.state);
                match (slot.runnable(), state) {
                    (true, Some(VgpuState::Blocked)) => {
                        log_refusal(&self.names[i], core.policy.wake(id, now));
                    }
                    (false, Some(VgpuState::Runnable)) => {
                        log_refusal(&self.names[i], core.policy.block(id, now));
                    }
                    _ => {}
                }
            }
            for (i, a) in active.iter_mut().enumerate() {
                let state = core.policy.stats(VgpuId(i as u32)).map(|s| s.state);
                if matches!(state, Some(VgpuState::Runnable | VgpuState::Running)) {
                    *a = Some(now_i);
                }
            }
            // A priority policy preempts the holder at its next request
            // boundary when a vGPU that must run first waits.
            if let Some(o) = out.as_mut().filter(|o| o.revoked.is_none()) {
                if core.policy.preempt(now) == Some(VgpuId(o.vm as u32)) {
                    h.slots[o.vm].revoke(o.seq);
                    self.regions[o.vm].ring_host();
                    o.revoked = Some(now_i);
                    core.counters[o.vm].revoked += 1;
                    tracing::trace!(vm = %self.names[o.vm], "holder preempted");
                }
            }
            if out.is_none() {
                self.free_run_step(&mut core, &mut free, &epoch, now_i, now);
            }
            // A VM that could backfill now: one with a worker, whose kernels
            // fit, and not backing off.
            let can_backfill = |i: usize, max: Duration| {
                let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
                !epoch[i].is_multiple_of(2)
                    && (1..=max_ns).contains(&h.slots[i].kernel_ns())
                    && grants_made >= bf_backoff[i].1
            };
            if let (Some(max), None, Some(o)) = (self.backfill, bf, out.as_ref()) {
                if !o.lease && o.revoked.is_none() && h.slots[o.vm].quiet() == o.seq {
                    let holder = (o.vm, o.seq);
                    // ... that did not decline during this grant already.
                    let pick = backfiller(&*core.policy, o.vm, |i| {
                        can_backfill(i, max) && bf_declined[i] != Some(holder)
                    });
                    if let Some(vm) = pick {
                        let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
                        let seq = h.slots[vm].grant_backfill(o.vm, o.seq, max_ns);
                        self.regions[vm].ring_host();
                        bf = Some(BackfillOut {
                            vm,
                            seq,
                            holder: o.vm,
                            holder_seq: o.seq,
                        });
                        tracing::trace!(vm = %self.names[vm], holder = %self.names[o.vm], "backfill granted");
                    }
                }
            }
            let disengaged = core.policy.execution_mode() == ExecutionMode::Disengaged;
            match out.as_mut() {
                None if free.is_some() => {}
                // The next holder's work would queue behind a backfilled
                // request still on the device: it is granted once that
                // request ended. A backfiller with none on the device issues
                // nothing more (the holder is no longer quiet: it cleared
                // `quiet` before its release, which this thread has seen,
                // so the backfiller's check after its own store of
                // `bf_busy` sees it; `fairgpu_worker::grants`, *Backfill*).
                None if bf.is_some_and(|b| h.slots[b.vm].backfill_busy()) => {}
                None => {
                    let g = core.policy.pick(now);
                    if g.is_none() {
                        // A disengaged policy with nothing to grant alone
                        // may let several VMs issue at once.
                        if let Some(run) = core.policy.free_run(now) {
                            free = Some(self.start_free_run(&mut core, run, &epoch, now));
                        }
                    }
                    if let Some(g) = g {
                        let vm = g.id.0 as usize;
                        // A disengaged policy's every grant is a lease.
                        let lease = disengaged
                            || active.iter().enumerate().all(|(i, a)| {
                                i == vm || a.is_none_or(|t| now_i.duration_since(t) >= LEASE_QUIET)
                            });
                        // Also after a switch-out: the next holder issues at
                        // once, and what its first work waits for or shares
                        // with the switched-out VM's is not charged to it.
                        let after = trailing.filter(|t| t.vm != vm).map(|t| (t.vm, t.seq));
                        if let Some(max) = self.backfill {
                            // Its quiet periods are announced only if some
                            // VM could fill them now.
                            let wanted = (0..n).any(|i| i != vm && can_backfill(i, max));
                            h.slots[vm].want_backfill(wanted);
                        }
                        out = Some(self.grant(&mut core, g, lease, after, now_i));
                        grants_made += 1;
                    }
                }
                Some(o) if o.lease && o.revoked.is_none() => {
                    let id = VgpuId(o.vm as u32);
                    let slice_over = now_i.duration_since(o.charged_until) >= o.slice;
                    // A disengaged slice runs to its end; an uncontended
                    // lease ends as soon as another VM waits.
                    if others_runnable(&*core.policy, id) && (!disengaged || slice_over) {
                        h.slots[o.vm].revoke(o.seq);
                        self.regions[o.vm].ring_host();
                        o.revoked = Some(now_i);
                        if disengaged {
                            core.counters[o.vm].revoked += 1;
                        }
                    } else if slice_over {
                        // Renewal: charge the slice(s) the lease ran.
                        let dt = now_i.duration_since(o.charged_until);
                        log_refusal(
                            &self.names[o.vm],
                            core.policy.release(id, Nanos::from_duration(dt), now),
                        );
                        o.charged += dt;
                        o.charged_until = now_i;
                        match core.policy.pick(now) {
                            Some(g) if g.id == id => o.slice = g.slice.as_duration(),
                            None => {
                                // Refused (a reservation's budget is used
                                // up): the lease ends; what it runs until
                                // its release is charged then.
                                h.slots[o.vm].revoke(o.seq);
                                self.regions[o.vm].ring_host();
                                o.revoked = Some(now_i);
                                o.unheld = true;
                                core.counters[o.vm].revoked += 1;
                            }
                            Some(other) => tracing::error!(
                                vm = %self.names[o.vm],
                                picked = %other.id,
                                "the policy granted another vGPU while the only runnable one held a lease"
                            ),
                        }
                    }
                }
                Some(_) => {}
            }
            // A policy that throttles runnable vGPUs says when it may
            // grant again.
            // (During a grant too: a budget that comes back may preempt
            // the holder.)
            let event = core
                .policy
                .next_event()
                .map(|e| self.origin + e.as_duration());
            drop(core);
            let wait = match &out {
                Some(o) if !o.warned => {
                    let mut next = o.deadline().unwrap_or(o.charged_until + o.slice);
                    // Preemptive mode: look again when it may be switched
                    // out (a VM that becomes runnable later rings the bell).
                    if let Some(switch) = o.switch_at().filter(|&t| self.preemptive && t > now_i) {
                        next = next.min(switch);
                    }
                    next.saturating_duration_since(now_i)
                        .clamp(Duration::from_micros(100), IDLE_WAIT)
                }
                _ => IDLE_WAIT,
            };
            let wait = match &free {
                Some(f) if !f.draining.is_empty() => wait.min(Duration::from_micros(200)),
                Some(f) => wait.min(
                    f.until
                        .saturating_duration_since(now_i)
                        .max(Duration::from_micros(20)),
                ),
                None => wait,
            };
            let wait = match event {
                Some(at) => wait.min(
                    at.saturating_duration_since(now_i)
                        .max(Duration::from_micros(20)),
                ),
                None => wait,
            };
            h.bell.wait(seen, wait);
        }
    }

    /// Starts the free run `run` a disengaged policy asked for.
    fn start_free_run(&self, core: &mut Core, run: FreeRun, epoch: &[u64], now: Nanos) -> Free {
        let mut f = Free {
            members: Default::default(),
            draining: Default::default(),
            until: self.origin + run.until.as_duration(),
            base: (0..self.names.len())
                .map(|i| self.handle.slots[i].device_ns())
                .collect(),
            closing: false,
            turn: run.turn,
            park: run.park,
            parked: Default::default(),
        };
        self.join(core, &mut f, &run.ids, epoch, now);
        self.set_turns(&f);
        tracing::debug!(members = ?f.members.keys().collect::<Vec<_>>(), until = ?run.until, "free run");
        f
    }

    /// A disengaged policy's free run: at the end of an interval
    /// reports each VM's device time, asks for the next run, keeps the
    /// leases of the VMs in both and revokes the others (all of them at a
    /// barrier); lets VMs that became runnable join; ends the free run
    /// once a barrier's drain is over.
    fn free_run_step(
        &self,
        core: &mut Core,
        free: &mut Option<Free>,
        epoch: &[u64],
        now_i: Instant,
        now: Nanos,
    ) {
        let h = &self.handle;
        let device = |i: usize| h.slots[i].device_ns();
        let Some(f) = free.as_mut() else {
            return;
        };
        if !f.closing && now_i >= f.until {
            // The executors' own accounting, saturating across a worker's
            // restart (its count starts again from zero).
            let usage: Vec<(VgpuId, Nanos)> = (0..self.names.len())
                .map(|i| {
                    let d = device(i);
                    let used = if d >= f.base[i] { d - f.base[i] } else { d };
                    (VgpuId(i as u32), Nanos(used))
                })
                .filter(|&(_, u)| u > Nanos::ZERO)
                .collect();
            log_refusal("free run", core.policy.end_free_run(&usage, now));
            f.base = (0..self.names.len()).map(device).collect();
            let next = core.policy.free_run(now);
            tracing::debug!(
                members = ?f.members.keys().collect::<Vec<_>>(),
                ?usage,
                next = ?next.as_ref().map(|r| &r.ids),
                "free run interval ended"
            );
            let keep: Vec<usize> = next
                .as_ref()
                .map(|r| r.ids.iter().map(|id| id.0 as usize).collect())
                .unwrap_or_default();
            let members = std::mem::take(&mut f.members);
            for (vm, seq) in members {
                if keep.contains(&vm) {
                    f.members.insert(vm, seq);
                } else {
                    f.parked.remove(&vm);
                    h.slots[vm].revoke(seq);
                    self.regions[vm].ring_host();
                    core.counters[vm].revoked += 1;
                    f.draining.insert(vm, seq);
                }
            }
            match next {
                Some(run) => {
                    f.until = self.origin + run.until.as_duration();
                    f.turn = run.turn;
                    f.park = run.park;
                    let new: Vec<VgpuId> = run
                        .ids
                        .into_iter()
                        .filter(|id| !f.members.contains_key(&(id.0 as usize)))
                        .collect();
                    self.join(core, f, &new, epoch, now);
                }
                None => f.closing = true,
            }
        }
        if !f.closing {
            // VMs that became runnable join unless the policy denies them.
            for i in 0..self.names.len() {
                let id = VgpuId(i as u32);
                if f.members.contains_key(&i) || f.draining.contains_key(&i) {
                    continue;
                }
                let runnable = core
                    .policy
                    .stats(id)
                    .is_some_and(|s| s.state == VgpuState::Runnable);
                if runnable && core.policy.free_run_admits(id, now) {
                    self.lease(f, i, epoch, core, now);
                }
            }
        }
        self.set_turns(f);
        if f.closing && f.draining.is_empty() && f.members.is_empty() {
            *free = None;
        }
    }

    /// Tells each member of free run `f` how many requests to keep in
    /// flight: the run's turn while it has several members, about
    /// [`FREE_RUN_QUEUE`] of device work while one runs alone (a turn of a
    /// request or two would leave the device idle between them).
    fn set_turns(&self, f: &Free) {
        let turn = if f.members.len() > 1 { f.turn } else { 0 };
        for &vm in f.members.keys() {
            self.handle.slots[vm].set_turn(turn);
        }
    }

    /// Gives each of `ids` a lease in free run `f`.
    fn join(&self, core: &mut Core, f: &mut Free, ids: &[VgpuId], epoch: &[u64], now: Nanos) {
        for id in ids {
            self.lease(f, id.0 as usize, epoch, core, now);
        }
    }

    /// Gives VM `vm` a lease in free run `f` if its worker runs; otherwise
    /// tells the policy it left.
    fn lease(&self, f: &mut Free, vm: usize, epoch: &[u64], core: &mut Core, now: Nanos) {
        if epoch.get(vm).is_none_or(|e| e.is_multiple_of(2)) {
            log_refusal(
                &self.names[vm],
                core.policy.left_free_run(VgpuId(vm as u32), now),
            );
            return;
        }
        let slot = &self.handle.slots[vm];
        // A lease keeps about its "slice" of device work queued: a member
        // keeps FREE_RUN_QUEUE, so that on a device that serves its
        // queues first come first served the others' work never waits
        // behind more than that of each member.
        let seq = slot.grant_free_run(Nanos::from_duration(FREE_RUN_QUEUE).as_nanos(), f.park);
        self.regions[vm].ring_host();
        f.members.insert(vm, seq);
    }

    fn grant(
        &self,
        core: &mut Core,
        g: Grant,
        lease: bool,
        after: Option<(usize, u32)>,
        now: Instant,
    ) -> Outstanding {
        let vm = g.id.0 as usize;
        let apriori = core.policy.apriori(g.id);
        let seq = self.handle.slots[vm].grant_full(g.slice.as_nanos(), lease, after, apriori);
        self.regions[vm].ring_host();
        if g.wake_vcpu {
            core.counters[vm].cosched_wakes += 1;
            let woken = self.coordinator.wake_vcpu(vm);
            if woken > 0 {
                core.counters[vm].cosched_woke += 1;
            }
            tracing::trace!(vm = %self.names[vm], woken, "interactive vGPU granted; its vCPUs woken");
        }
        Outstanding {
            vm,
            seq,
            after: after.map(|(vm, _)| vm),
            at: now,
            slice: g.slice.as_duration(),
            lease,
            revoked: None,
            charged: Duration::ZERO,
            charged_until: now,
            warned: false,
            unheld: false,
        }
    }
}

/// The VM to backfill `holder`'s idle gaps: the runnable one (other than
/// the holder, and `eligible`) the policy would serve first, by its start
/// tag under fair queuing.
fn backfiller(
    policy: &dyn Policy,
    holder: usize,
    eligible: impl Fn(usize) -> bool,
) -> Option<usize> {
    policy
        .ids()
        .into_iter()
        .filter_map(|id| {
            let i = id.0 as usize;
            let s = policy.stats(id)?;
            (i != holder && s.state == VgpuState::Runnable && eligible(i))
                .then_some((s.standing, i))
        })
        .min_by_key(|(standing, i)| match standing {
            Standing::Fair { start, .. } => (*start, *i),
            _ => (fairgpu_scheduler::VirtualTime::default(), *i),
        })
        .map(|(_, i)| i)
}

/// Whether a vGPU other than `holder` is runnable.
fn others_runnable(policy: &dyn Policy, holder: VgpuId) -> bool {
    policy.ids().into_iter().any(|id| {
        id != holder
            && policy
                .stats(id)
                .is_some_and(|s| s.state == VgpuState::Runnable)
    })
}

/// Logs a call the policy refused (a bug in this driver, never the
/// guest's doing); the policy's state is unchanged by it.
fn log_refusal(vm: &str, r: Result<(), SchedError>) {
    if let Err(e) = r {
        tracing::error!(vm, error = %e, "the scheduling policy refused a call");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairgpu_protocol::layout::RegionConfig;
    use fairgpu_worker::host::HostRegion;

    fn temp(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("fairgpu-sched-test-{}-{name}", std::process::id()))
    }

    /// The scheduler thread over two VMs with `weights`, and the workers'
    /// view of the grant file, driven by hand.
    struct ThreadRig {
        h: SchedHandle,
        worker: GrantFile,
        stop: Arc<AtomicBool>,
        thread: std::thread::JoinHandle<()>,
        _regions: [HostRegion; 2],
    }

    impl ThreadRig {
        fn start(name: &str, weights: [u32; 2]) -> ThreadRig {
            let gpath = temp(&format!("{name}-grants"));
            let file = Arc::new(GrantFile::create(&gpath, 2).unwrap());
            let rcfg = RegionConfig {
                channels: 1,
                ring_entries: 8,
                arena_size: 64 * 1024,
                ..Default::default()
            };
            let region =
                |i: u32| HostRegion::create(&temp(&format!("{name}-r{i}")), &rcfg).unwrap();
            let regions = [region(0), region(1)];
            let bells = vec![regions[0].bells(), regions[1].bells()];
            let sched = Scheduler::new(
                fairgpu_config::policy::build_policy(&fairgpu_config::SchedConfig::default())
                    .unwrap(),
                file,
                vec!["a".into(), "b".into()],
                &weights,
                bells.clone(),
                Box::new(LocalCoordinator::new(bells)),
            )
            .unwrap();
            let h = sched.handle();
            let stop = Arc::new(AtomicBool::new(false));
            let thread = {
                let stop = stop.clone();
                std::thread::spawn(move || sched.run(&stop))
            };
            ThreadRig {
                h,
                worker: GrantFile::open(&gpath, 2).unwrap(),
                stop,
                thread,
                _regions: regions,
            }
        }

        fn stop(self) {
            self.stop.store(true, Ordering::Relaxed);
            self.thread.join().unwrap();
        }
    }

    /// Polls `f` until it holds (10 s at most).
    fn wait_for(what: &str, f: &dyn Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A holder that announces its drain while another VM waits is
    /// released with its estimate and the next grant names it; its own
    /// release corrects the charge; if it dies instead, the next grant
    /// stops waiting for it.
    #[test]
    fn a_draining_holder_hands_the_grant_over() {
        let rig = ThreadRig::start("handoff", [1, 1]);
        let (h, bell) = (&rig.h, rig.worker.bell());
        let (w0, w1) = (rig.worker.slot(0).unwrap(), rig.worker.slot(1).unwrap());
        h.worker_started(0);
        h.worker_started(1);
        w0.set_runnable(true);
        w1.set_runnable(true);
        bell.ring();
        // Both wait, so a (the smaller id on a tie) gets an ordinary grant.
        wait_for("a's grant", &|| w0.current_grant().0 == 1);
        assert!(!w0.current_grant().2);
        // a drains: released with its estimate, and b's grant waits for a.
        w0.publish_closing(1, 5_000_000);
        bell.ring();
        wait_for("b's grant", &|| w1.current_grant().0 == 1);
        assert_eq!(w1.after(), Some((0, 1)));
        assert_eq!(h.vm(0).unwrap().charged_ns, 5_000_000);
        assert_eq!(h.vm(0).unwrap().state, VgpuState::Runnable);
        assert_eq!(h.vm(1).unwrap().state, VgpuState::Running);
        // a's own report corrects the charge.
        w0.release(1, 6_200_000, true);
        bell.ring();
        wait_for("a's correction", &|| {
            h.vm(0).unwrap().charged_ns == 6_200_000
        });
        // b runs past a's tag and releases; a is next, waiting for nobody.
        w1.release(1, 7_000_000, true);
        bell.ring();
        wait_for("a's second grant", &|| w0.current_grant().0 == 2);
        assert_eq!(w0.after(), None);
        // a drains again, b is handed the grant, then a's worker dies.
        w0.publish_closing(2, 6_000_000);
        bell.ring();
        wait_for("b's second grant", &|| w1.current_grant().0 == 2);
        assert_eq!(w1.after(), Some((0, 2)));
        h.worker_gone(0);
        wait_for("the cancelled wait", &|| w1.after().is_none());
        assert_eq!(h.vm(0).unwrap().state, VgpuState::Blocked);
        rig.stop();
    }

    /// The scheduler thread against hand-driven worker slots: grants go to
    /// runnable VMs only, a release is charged what it reports, a dead
    /// worker releases implicitly.
    #[test]
    fn the_thread_grants_charges_and_survives_dead_workers() {
        let rig = ThreadRig::start("grants", [1, 2]);
        let (h, bell) = (&rig.h, rig.worker.bell());
        let (w0, w1) = (rig.worker.slot(0).unwrap(), rig.worker.slot(1).unwrap());
        h.worker_started(0);
        h.worker_started(1);
        // Nobody is runnable: no grant.
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!((w0.current_grant().0, w1.current_grant().0), (0, 0));
        // b becomes runnable alone: it is granted an uncontended lease,
        // which the scheduler charges slice by slice.
        w1.set_runnable(true);
        bell.ring();
        wait_for("b's lease", &|| w1.current_grant().0 == 1);
        assert_eq!(w1.current_grant(), (1, 6_000_000, true));
        assert_eq!(h.vm(1).unwrap().state, VgpuState::Running);
        wait_for("a renewal", &|| h.vm(1).unwrap().charged_ns >= 6_000_000);
        // a becomes runnable: b's lease is revoked.
        w0.set_runnable(true);
        bell.ring();
        wait_for("the revocation", &|| w1.revoked(1));
        assert_eq!(w0.current_grant().0, 0, "no grant while b holds its lease");
        // b drains and releases, reporting the whole lease; only the part not
        // charged yet is added.
        let charged = h.vm(1).unwrap().charged_ns;
        w1.release(1, charged + 1_000_000, false);
        bell.ring();
        wait_for("b's charge", &|| {
            h.vm(1).unwrap().charged_ns == charged + 1_000_000
        });
        wait_for("b blocked", &|| {
            h.vm(1).unwrap().state == VgpuState::Blocked
        });
        // a is granted, but b was active moments ago: an ordinary
        // (measured) grant, not a lease.
        wait_for("a's grant", &|| w0.current_grant().0 == 1);
        assert!(!w0.current_grant().2, "b was active within LEASE_QUIET");
        // b wakes while a holds; a releases 20 ms with more to do, so b's
        // start tag is the smaller and b is granted, again not a lease.
        w1.set_runnable(true);
        bell.ring();
        wait_for("b runnable", &|| {
            h.vm(1).unwrap().state == VgpuState::Runnable
        });
        w0.release(1, 20_000_000, true);
        bell.ring();
        wait_for("b's grant", &|| w1.current_grant().0 == 2);
        assert!(!w1.current_grant().2, "a waits, so no lease");
        w1.release(2, 6_000_000, false);
        bell.ring();
        // a is granted again, then its worker dies holding the grant.
        wait_for("a's grant", &|| w0.current_grant().0 == 2);
        let before = h.vm(0).unwrap().charged_ns;
        h.worker_gone(0);
        wait_for("a's implicit release", &|| {
            h.vm(0)
                .is_some_and(|v| v.state == VgpuState::Blocked && v.charged_ns > before)
        });
        assert!(!w0.runnable(), "the daemon clears a dead worker's flag");
        // The restarted worker is granted again once it is runnable.
        h.worker_started(0);
        w0.set_runnable(true);
        bell.ring();
        wait_for("a's third grant", &|| w0.current_grant().0 == 3);
        h.set_weight(0, 7).unwrap();
        assert_eq!(h.vm(0).unwrap().weight, 7);
        assert!(h.set_weight(0, 0).is_err());
        rig.stop();
    }
}
