//! The one seam between a GPU scheduling policy and whoever drives it: the
//! [`Policy`] trait, the values it exchanges, and its errors.
//!
//! # The protocol
//!
//! A driver (the daemon's scheduler thread, or a simulator) owns one policy
//! and tells it what happens, always with the current instant `now`:
//!
//! 1. [`Policy::add`] registers a vGPU. It starts *blocked*: it has no work.
//! 2. [`Policy::wake`] when a blocked vGPU gets work (a request arrived in its
//!    ring).
//! 3. [`Policy::pick`] when nobody holds the GPU: the policy answers with a
//!    [`Grant`] — who runs and for how long — or `None` when nobody is
//!    runnable. Exactly one grant is outstanding at a time; `pick` answers
//!    `None` while one is.
//! 4. [`Policy::release`] when the holder gives the GPU back, with the GPU
//!    time it used (measured, see [`ExecutionMode`]). Overruns beyond the slice
//!    are charged in full. The holder becomes runnable again.
//! 5. [`Policy::block`] when a vGPU that does not hold the GPU has nothing to
//!    issue (after its spin budget). A holder with nothing to issue first
//!    releases, then blocks.
//!
//! The states are therefore `Blocked --wake--> Runnable --pick--> Running
//! --release--> Runnable --block--> Blocked`. `wake` of a runnable or running
//! vGPU and `block` of a blocked one do nothing.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

use crate::time::Nanos;

/// Names one vGPU (one VM's GPU context on the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VgpuId(pub u32);

impl fmt::Display for VgpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "vgpu{}", self.0)
    }
}

/// Weights a policy accepts (the daemon's configuration uses the same range).
pub const WEIGHTS: RangeInclusive<u32> = 1..=10_000;

/// The GPU for one vGPU, for a while.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Who holds the GPU.
    pub id: VgpuId,
    /// How much GPU time it may use before it must release (it may overrun by
    /// the kernel in flight on a non-preemptive GPU).
    pub slice: Nanos,
    /// GPU-centric co-scheduling: the holder is CPU–GPU interactive, so the
    /// CPU coordinator should wake its VM's waiting vCPU now (FairGV
    /// Algorithms 3 and 4).
    pub wake_vcpu: bool,
    /// The holder differs from the previous holder (a vGPU context switch).
    pub switched: bool,
}

/// Where a vGPU stands in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VgpuState {
    /// Has nothing to issue; not considered by `pick`.
    Blocked,
    /// Has work and waits for the GPU.
    Runnable,
    /// Holds the GPU (the grant, or a lease in a disengaged policy's free
    /// run, where several vGPUs run at once).
    Running,
}

/// Fair-queuing virtual time: weighted GPU nanoseconds in fixed point,
/// [`VirtualTime::FRAC_BITS`] fraction bits. Running `L` nanoseconds at
/// weight `w` advances a start tag by `L / w` weighted nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VirtualTime(pub u128);

impl VirtualTime {
    /// Fraction bits: 2^-32 weighted nanoseconds is the rounding unit, so the
    /// truncation in `L / w` loses less than that per charge. The integer part
    /// has 96 bits, which no realistic uptime reaches.
    pub const FRAC_BITS: u32 = 32;

    /// Zero.
    pub const ZERO: VirtualTime = VirtualTime(0);

    /// The virtual time `used / weight` adds. `weight` must not be zero.
    pub fn charge(used: Nanos, weight: u32) -> VirtualTime {
        debug_assert!(weight > 0);
        VirtualTime((u128::from(used.0) << Self::FRAC_BITS) / u128::from(weight.max(1)))
    }

    /// `self + rhs`, saturating.
    pub fn saturating_add(self, rhs: VirtualTime) -> VirtualTime {
        VirtualTime(self.0.saturating_add(rhs.0))
    }

    /// `self - rhs`, saturating at zero.
    pub fn saturating_sub(self, rhs: VirtualTime) -> VirtualTime {
        VirtualTime(self.0.saturating_sub(rhs.0))
    }

    /// `self` moved by a correction of `delta` ns at `weight` (forward when
    /// positive, back when negative), saturating.
    pub fn corrected(self, delta: i64, weight: u32) -> VirtualTime {
        let dv = VirtualTime::charge(Nanos(delta.unsigned_abs()), weight);
        if delta >= 0 {
            self.saturating_add(dv)
        } else {
            self.saturating_sub(dv)
        }
    }

    /// In weighted nanoseconds, for display.
    pub fn as_weighted_nanos(self) -> f64 {
        self.0 as f64 / (1u64 << Self::FRAC_BITS) as f64
    }
}

impl fmt::Display for VirtualTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.3}wns", self.as_weighted_nanos())
    }
}

/// A Credit-scheduler priority class (Xen credit1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CreditPriority {
    /// Credit ≥ 0: runs before every `Over` vGPU.
    Under,
    /// Credit < 0: runs only when no `Under` vGPU is runnable.
    Over,
}

/// A vGPU's policy-specific standing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Fair queuing's tags. After a release `start == finish`.
    Fair {
        /// Start tag S.
        start: VirtualTime,
        /// Finish tag F computed at the last release.
        finish: VirtualTime,
    },
    /// NEON's token ring (Timeslice with overuse control).
    Timeslice {
        /// Accrued overuse not yet paid by a skipped turn.
        overuse: Nanos,
        /// Turns skipped to pay for overuse.
        skipped: u64,
        /// What its last release left of its slice, added to its next one.
        credit: Nanos,
    },
    /// TimeGraph's priority and reservation.
    TimeGraph {
        /// Priority: higher runs first.
        priority: u8,
        /// Its reservation, if it has one.
        reservation: Option<Reservation>,
        /// Budget left in the current period, ns (negative after an
        /// overrun); `None` without a reservation.
        budget: Option<i64>,
        /// Grants refused because the budget did not cover the VM's
        /// predicted cost (or was used up) while it had work.
        throttled: u64,
    },
    /// Disengaged fair queueing (NEON DFQ, LoGA).
    Disengaged {
        /// Its virtual time.
        vt: VirtualTime,
        /// The system virtual time.
        system: VirtualTime,
        /// Denied the current free run (ahead of the others).
        denied: bool,
        /// Free runs it was denied.
        denials: u64,
    },
    /// Credit's account.
    Credit {
        /// Credit in GPU nanoseconds (negative when overdrawn).
        credit: i64,
        /// Priority class derived from the credit's sign.
        priority: CreditPriority,
        /// Whether it earns credit at the next accounting period.
        active: bool,
    },
}

/// A snapshot of one vGPU, for status output and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VgpuStats {
    /// The vGPU.
    pub id: VgpuId,
    /// Its weight.
    pub weight: u32,
    /// Its state.
    pub state: VgpuState,
    /// All GPU time charged to it.
    pub charged: Nanos,
    /// How many grants it received.
    pub grants: u64,
    /// Tags or credit.
    pub standing: Standing,
}

/// What a holder does when it finds nothing to issue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleBehaviour {
    /// Hybrid spinning (FairGV section 3.2.2): spin for the spin budget, then
    /// release the grant and block; a new request wakes it.
    Block,
    /// Continuous polling: keep the grant and poll the ring until the slice's
    /// wall-clock time is over, then release, reporting what the
    /// [`ExecutionMode`] says. The GPU idles meanwhile. `block` leaves such a
    /// vGPU runnable.
    Poll,
    /// NEON's timeslice: a holder that has issued work under its grant
    /// keeps it to the end of its slice's wall-clock time (a lease: until
    /// it is revoked) even while it has nothing to issue, and the GPU idles
    /// meanwhile, as NEON's token holder keeps the token for its whole
    /// slice; a holder that issued nothing in its grant is not active: it
    /// releases after the spin budget and blocks, as under `Block`. `block`
    /// blocks.
    Hold,
}

impl IdleBehaviour {
    /// What a holder with nothing to issue does now, having `issued`
    /// under its grant or not: `Hold` is `Poll` for an active holder and
    /// `Block` for one that is not; the others are themselves.
    pub fn while_idle(self, issued: bool) -> IdleBehaviour {
        match self {
            IdleBehaviour::Hold if issued => IdleBehaviour::Poll,
            IdleBehaviour::Hold => IdleBehaviour::Block,
            other => other,
        }
    }
}

/// How the holder runs during its grant and what it reports at release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecutionMode {
    /// FairGV's collaborative scheduling (section 3.3.2): the holder measures
    /// the GPU time of what it issues (synchronising after requests, or
    /// sampling), releases once its usage reaches the slice, waits for its last
    /// request to finish, and reports the measured GPU time. Nothing of the
    /// holder's is left on the GPU after the release.
    Collaborative,
    /// Simple time sharing (the baselines of section 5.3): the grant is a
    /// wall-clock lease of one slice. The holder submits asynchronously with no
    /// interposition and reports the wall-clock time it held the lease, the
    /// only usage such a scheduler knows. Work it queued on the device keeps
    /// running into the next holder's lease.
    TimeShared,
    /// NEON's disengaged timeslice (section 3.2): the grant is a lease with
    /// no per-request interposition. At the slice's wall-clock end the
    /// driver revokes it if another vGPU waits; the holder then drains its
    /// work and reports the wall-clock time it held the lease, drain
    /// included, so an overrun is seen and charged. Alone, the holder's
    /// lease is renewed slice by slice.
    Disengaged,
}

/// A disengaged policy's free run: these vGPUs may issue at once, each
/// under a lease, unmeasured, until `until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeRun {
    /// Its members.
    pub ids: Vec<VgpuId>,
    /// When it ends.
    pub until: Nanos,
    /// While it has several members, how many requests each keeps in
    /// flight at most (0: as the driver sees fit). NEON's estimate assumes
    /// a device that serves the members one request each in turn; a device
    /// that serves first come first served does so when every member keeps
    /// the same small number of requests queued.
    pub turn: u32,
    /// Whether a member with nothing to issue keeps its lease, parked
    /// ([`Policy::member_parked`]), instead of giving it back: it then
    /// issues again at once, without asking the driver (LoGA, where
    /// every VM not over its share submits freely).
    pub park: bool,
}

/// A TimeGraph reservation (Kato et al., ATC 2011, section 4.2): `budget`
/// of GPU time per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    /// GPU time per period (TimeGraph's C).
    pub budget: Nanos,
    /// The replenishment period (TimeGraph's T).
    pub period: Nanos,
    /// How the budget is enforced.
    pub mode: ReserveMode,
}

impl Reservation {
    /// Shortest period accepted.
    pub const MIN_PERIOD: Nanos = Nanos::from_micros(100);
    /// Longest period accepted.
    pub const MAX_PERIOD: Nanos = Nanos::from_secs(100);

    /// Its utilization, `budget / period`.
    pub fn utilization(&self) -> f64 {
        self.budget.as_nanos() as f64 / self.period.as_nanos().max(1) as f64
    }

    /// Checks the bounds: `0 < budget <= period`, period within
    /// [`Self::MIN_PERIOD`]..=[`Self::MAX_PERIOD`].
    pub fn validate(&self) -> Result<(), SchedError> {
        let ok = (Self::MIN_PERIOD..=Self::MAX_PERIOD).contains(&self.period)
            && self.budget > Nanos::ZERO
            && self.budget <= self.period;
        if ok {
            Ok(())
        } else {
            Err(SchedError::Reservation {
                budget: self.budget,
                period: self.period,
            })
        }
    }
}

/// TimeGraph's budget enforcement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReserveMode {
    /// Posterior enforcement (PE): a VM may run while its budget is
    /// positive; what it used is charged after it completes, so the budget
    /// may go negative, and the debt is paid by the next replenishments
    /// (`e = min(C, e + C)` per period).
    Posterior,
    /// Apriori enforcement (AE): a VM runs only if its budget covers the
    /// predicted cost of its next request (from the history of what its
    /// requests cost), and its grant ends when the budget is used, so it
    /// overruns by a misprediction at most.
    Apriori,
}

impl ReserveMode {
    /// The configuration's name: `pe` or `ae`.
    pub const fn name(self) -> &'static str {
        match self {
            ReserveMode::Posterior => "pe",
            ReserveMode::Apriori => "ae",
        }
    }
}

impl FromStr for ReserveMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "pe" => Ok(ReserveMode::Posterior),
            "ae" => Ok(ReserveMode::Apriori),
            other => Err(format!(
                "reservation mode {other:?} is unknown (expected \"pe\", posterior enforcement, or \"ae\", apriori enforcement)"
            )),
        }
    }
}

/// A policy's answer to a CPU-centric co-scheduling request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoschedReply {
    /// The policy does not take requests from the CPU scheduler (or the target
    /// has nothing to run, or already holds the GPU).
    Ignored,
    /// The fairness condition failed: the current holder keeps the GPU.
    Keep,
    /// The fairness condition holds: the driver revokes `preempt`'s grant (if
    /// any; it releases with what it used, after its in-flight kernel on a
    /// non-preemptive GPU), and the next `pick` grants the target.
    Switch {
        /// The holder to revoke.
        preempt: Option<VgpuId>,
    },
}

/// A call the protocol does not allow.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchedError {
    /// No vGPU with this id.
    #[error("{id} is not registered")]
    Unknown {
        /// The id.
        id: VgpuId,
    },
    /// The id is taken.
    #[error("{id} is already registered")]
    Duplicate {
        /// The id.
        id: VgpuId,
    },
    /// A weight outside [`WEIGHTS`].
    #[error("weight {weight} is outside 1..=10000")]
    Weight {
        /// The weight.
        weight: u32,
    },
    /// `release` by a vGPU that holds no grant.
    #[error("{id} released a grant it does not hold")]
    NotHolder {
        /// The vGPU.
        id: VgpuId,
    },
    /// `block` by the holder: it must release (with its usage) first.
    #[error("{id} holds the GPU and must release it before blocking")]
    Holding {
        /// The vGPU.
        id: VgpuId,
    },
    /// A per-vGPU setting this policy has no use for.
    #[error("the {policy} policy has no {setting} setting")]
    Unsupported {
        /// The policy.
        policy: PolicyKind,
        /// The setting.
        setting: &'static str,
    },
    /// A reservation outside its bounds.
    #[error("reservation {budget} per {period} is invalid (needs 0 < budget <= period, period 100us..=100s)")]
    Reservation {
        /// Its budget.
        budget: Nanos,
        /// Its period.
        period: Nanos,
    },
    /// Admission control: the reservations together would ask for more than
    /// the whole GPU.
    #[error("admitting {id}'s reservation would reserve {total:.3} of the GPU (at most 1)")]
    Admission {
        /// The vGPU whose reservation was refused.
        id: VgpuId,
        /// The total utilization it would make.
        total: f64,
    },
}

/// Checks a weight against [`WEIGHTS`].
pub(crate) fn check_weight(weight: u32) -> Result<u32, SchedError> {
    if WEIGHTS.contains(&weight) {
        Ok(weight)
    } else {
        Err(SchedError::Weight { weight })
    }
}

/// A GPU scheduling policy: pure decisions, no I/O, no clock of its own.
///
/// Every time-bearing call takes `now` from the driver's clock; an instant
/// earlier than one already seen counts as that one.
pub trait Policy: fmt::Debug + Send {
    /// Which policy this is.
    fn kind(&self) -> PolicyKind;

    /// What a holder with nothing to issue must do under this policy.
    fn idle_behaviour(&self) -> IdleBehaviour;

    /// How a holder runs and what it reports at release.
    fn execution_mode(&self) -> ExecutionMode;

    /// Registers `id` with `weight`, blocked.
    fn add(&mut self, id: VgpuId, weight: u32) -> Result<(), SchedError>;

    /// Forgets `id`. If it held the GPU the grant ends uncharged (its worker
    /// is gone; a driver that can still measure should release first).
    fn remove(&mut self, id: VgpuId) -> Result<(), SchedError>;

    /// Changes `id`'s weight. It takes effect for charging from now on: usage
    /// already charged is not re-weighted, so the shares converge to the new
    /// ratio from the next release on.
    fn set_weight(&mut self, id: VgpuId, weight: u32) -> Result<(), SchedError>;

    /// `id` has work (it was blocked or idle). Does nothing if it is runnable
    /// or running.
    fn wake(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError>;

    /// `id` has nothing to issue after its spin budget and yields. Fails for
    /// the holder, which must release first.
    fn block(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError>;

    /// Who gets the GPU next and for how long. `None` when a grant is
    /// outstanding or nobody is runnable; never `None` otherwise (work
    /// conserving).
    fn pick(&mut self, now: Nanos) -> Option<Grant>;

    /// The holder `id` gives the GPU back, having used `used` GPU time, all of
    /// which is charged to it (overruns included). It stays runnable.
    fn release(&mut self, id: VgpuId, used: Nanos, now: Nanos) -> Result<(), SchedError>;

    /// Corrects what `id`'s last release charged by `correction` ns (added
    /// when positive, taken back when negative): the driver released it
    /// with an estimate before its measurement ended, to grant the next
    /// vGPU while the last work drained. Its state is unchanged; the
    /// correction counts toward its charged total as if it had been part of
    /// that release.
    fn adjust(&mut self, id: VgpuId, correction: i64, now: Nanos) -> Result<(), SchedError>;

    /// `id` issued a synchronous call: feeds the interactivity detector.
    fn record_sync_call(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError>;

    /// Whether `id` is CPU–GPU interactive at `now` (false for unknown ids).
    fn is_interactive(&self, id: VgpuId, now: Nanos) -> bool;

    /// A CPU-centric co-scheduling request: the CPU scheduler is about to run
    /// the vCPU of `id`'s VM (Pegasus Algorithm 1). Only
    /// [`PolicyKind::StrictCoSchedule`] acts on it.
    fn cosched_request(&mut self, id: VgpuId, now: Nanos) -> Result<CoschedReply, SchedError>;

    /// The vGPU holding the outstanding grant.
    fn holder(&self) -> Option<VgpuId>;

    /// Registered vGPUs in ascending order.
    fn ids(&self) -> Vec<VgpuId>;

    /// A snapshot of `id`.
    fn stats(&self, id: VgpuId) -> Option<VgpuStats>;

    /// Sets `id`'s priority (higher runs first). Only priority policies
    /// (TimeGraph) have one; the others refuse it.
    fn set_priority(&mut self, id: VgpuId, priority: u8) -> Result<(), SchedError> {
        let _ = priority;
        self.stats(id).ok_or(SchedError::Unknown { id })?;
        Err(SchedError::Unsupported {
            policy: self.kind(),
            setting: "priority",
        })
    }

    /// Gives `id` a reservation (or takes it away with `None`), subject to
    /// admission control. Only TimeGraph has reservations.
    fn set_reservation(
        &mut self,
        id: VgpuId,
        reservation: Option<Reservation>,
    ) -> Result<(), SchedError> {
        let _ = reservation;
        self.stats(id).ok_or(SchedError::Unknown { id })?;
        Err(SchedError::Unsupported {
            policy: self.kind(),
            setting: "reservation",
        })
    }

    /// What one request of `id` costs on the device, as its holder
    /// measured it (the average of its recent samples): the history a
    /// policy that predicts costs (TimeGraph's apriori enforcement) uses.
    /// Others ignore it.
    fn observe_cost(&mut self, id: VgpuId, cost: Nanos) -> Result<(), SchedError> {
        let _ = cost;
        self.stats(id).map(|_| ()).ok_or(SchedError::Unknown { id })
    }

    /// The holder whose grant should end now, at its next request
    /// boundary, because a vGPU that must run first is waiting (a priority
    /// policy; `now` replenishes the budgets due, so a reserved vGPU whose
    /// budget just came back preempts a lower one); the driver revokes
    /// that grant and the holder releases with what it used. `None` for
    /// the policies that never preempt.
    fn preempt(&mut self, now: Nanos) -> Option<VgpuId> {
        let _ = now;
        None
    }

    /// When `pick` or `preempt` may answer differently without any other
    /// call (a throttled vGPU's budget is replenished): a driver calls them
    /// again then, whether or not a grant is outstanding. `None` for
    /// work-conserving policies, whose `pick` never leaves a runnable vGPU
    /// waiting.
    fn next_event(&self) -> Option<Nanos> {
        None
    }

    /// A disengaged fair-queueing policy (NEON DFQ, LoGA), asked when no
    /// grant is outstanding, no free run is on and `pick` answered `None`:
    /// the vGPUs that may now issue at once, each under a lease, until
    /// `until`. They are `Running` meanwhile. `None` for every other policy.
    fn free_run(&mut self, now: Nanos) -> Option<FreeRun> {
        let _ = now;
        None
    }

    /// During a free run: whether `id`, which has become runnable, may join
    /// it (and then it does). False for every other policy.
    fn free_run_admits(&mut self, id: VgpuId, now: Nanos) -> bool {
        let _ = (id, now);
        false
    }

    /// During a free run: member `id` gave its lease back (nothing left to
    /// issue); it is runnable again, and blocked by the driver if it has no
    /// work.
    fn left_free_run(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let _ = now;
        self.stats(id).map(|_| ()).ok_or(SchedError::Unknown { id })
    }

    /// During a free run whose leases park ([`FreeRun::park`]): member `id`
    /// has nothing to issue and keeps its lease, parked. It is blocked
    /// (sleeping earns nothing) but stays a member. Nothing for every
    /// other policy.
    fn member_parked(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let _ = now;
        self.stats(id).map(|_| ()).ok_or(SchedError::Unknown { id })
    }

    /// Parked member `id` issues again, on the lease it kept: it is
    /// running again.
    fn member_resumed(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let _ = now;
        self.stats(id).map(|_| ()).ok_or(SchedError::Unknown { id })
    }

    /// The free run ends at `now`: `usage` is each member's device time in
    /// it, as the executor accounted it. Members still holding a lease are
    /// runnable again; the driver then asks for the next free run, keeps
    /// the leases of the members of both, and revokes the others.
    fn end_free_run(&mut self, usage: &[(VgpuId, Nanos)], now: Nanos) -> Result<(), SchedError> {
        let _ = (usage, now);
        Ok(())
    }

    /// When the free run on ends; `None` when none is.
    fn free_running_until(&self) -> Option<Nanos> {
        None
    }

    /// Whether `id`'s grants are enforced a priori: its holder must issue
    /// no request its measurements predict would overrun the grant's slice
    /// (TimeGraph's apriori enforcement). False by default.
    fn apriori(&self, id: VgpuId) -> bool {
        let _ = id;
        false
    }

    /// Whether a holder must wait for each request to finish before it
    /// issues the next (TimeGraph's PRT: every command group goes through
    /// the scheduler), so that a preemption takes effect after one request.
    fn serializes(&self) -> bool {
        false
    }
}

/// The policies this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// FairGV: fair queuing, hybrid spinning, GPU-centric co-scheduling.
    FairQueuing,
    /// Xen-style Credit with continuous polling.
    CreditPoll,
    /// Xen-style Credit with hybrid spinning.
    CreditHybridSpin,
    /// Pegasus: Credit with CPU-centric strict co-scheduling.
    StrictCoSchedule,
    /// NEON: Timeslice with overuse control, every request measured.
    NeonTimeslice,
    /// NEON: Disengaged Timeslice (no per-request interposition).
    NeonDisengaged,
    /// TimeGraph: priorities, PRT (each request waits for the previous one;
    /// the highest priority runs next), with reservations.
    TimeGraphPrt,
    /// TimeGraph: priorities, HT (the holder keeps submitting while nothing
    /// of higher priority waits), with reservations.
    TimeGraphHt,
    /// NEON: Disengaged Fair Queueing (sampling engagements, free runs).
    NeonDfq,
    /// LoGA: disengaged fair queueing on observed device time.
    Loga,
}

impl PolicyKind {
    /// Every policy, in a stable order.
    pub const ALL: [PolicyKind; 10] = [
        PolicyKind::FairQueuing,
        PolicyKind::CreditPoll,
        PolicyKind::CreditHybridSpin,
        PolicyKind::StrictCoSchedule,
        PolicyKind::NeonTimeslice,
        PolicyKind::NeonDisengaged,
        PolicyKind::TimeGraphPrt,
        PolicyKind::TimeGraphHt,
        PolicyKind::NeonDfq,
        PolicyKind::Loga,
    ];

    /// Whether vGPUs under this policy have priorities and reservations.
    pub const fn has_priorities(self) -> bool {
        matches!(self, PolicyKind::TimeGraphPrt | PolicyKind::TimeGraphHt)
    }

    /// The name used in configuration and status output.
    pub const fn name(self) -> &'static str {
        match self {
            PolicyKind::FairQueuing => "fair-queuing",
            PolicyKind::CreditPoll => "credit-poll",
            PolicyKind::CreditHybridSpin => "credit-hs",
            PolicyKind::StrictCoSchedule => "strict-cosched",
            PolicyKind::NeonTimeslice => "neon-ts",
            PolicyKind::NeonDisengaged => "neon-dts",
            PolicyKind::TimeGraphPrt => "timegraph-prt",
            PolicyKind::TimeGraphHt => "timegraph-ht",
            PolicyKind::NeonDfq => "neon-dfq",
            PolicyKind::Loga => "loga",
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A policy name that is none of [`PolicyKind::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scheduling policy {name:?} (expected fair-queuing, credit-poll, credit-hs, strict-cosched, neon-ts, neon-dts, neon-dfq, loga, timegraph-prt or timegraph-ht)")]
pub struct UnknownPolicy {
    /// What was given.
    pub name: String,
}

impl FromStr for PolicyKind {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PolicyKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| UnknownPolicy { name: s.to_owned() })
    }
}

/// The latest instant a policy has seen: makes its notion of time monotonic.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Monotonic(Nanos);

impl Monotonic {
    /// `now`, or the latest instant seen if that is later.
    pub(crate) fn observe(&mut self, now: Nanos) -> Nanos {
        self.0 = self.0.max(now);
        self.0
    }

    /// The latest instant seen.
    pub(crate) fn get(&self) -> Nanos {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_by_name() {
        for k in PolicyKind::ALL {
            assert_eq!(k.name().parse::<PolicyKind>(), Ok(k));
            assert_eq!(k.build().kind(), k);
        }
        let e = "cfs".parse::<PolicyKind>().unwrap_err();
        assert!(e
            .to_string()
            .starts_with("unknown scheduling policy \"cfs\""));
    }

    #[test]
    fn virtual_time_charge_is_fixed_point() {
        // 10 ms at weight 2 is 5 ms of virtual time (FairGV Fig. 4).
        let v = VirtualTime::charge(Nanos::from_millis(10), 2);
        assert_eq!(v.0 >> VirtualTime::FRAC_BITS, 5_000_000);
        assert_eq!(v.0 & ((1 << VirtualTime::FRAC_BITS) - 1), 0);
        // 1 ns at weight 3 keeps a third in the fraction.
        let third = VirtualTime::charge(Nanos(1), 3);
        assert!((third.as_weighted_nanos() - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(VirtualTime::charge(Nanos(7), 1).to_string(), "7.000wns");
    }

    #[test]
    fn weights_and_errors() {
        assert_eq!(check_weight(1), Ok(1));
        assert_eq!(check_weight(10_000), Ok(10_000));
        assert_eq!(
            check_weight(0).unwrap_err().to_string(),
            "weight 0 is outside 1..=10000"
        );
        assert!(check_weight(10_001).is_err());
        assert_eq!(VgpuId(3).to_string(), "vgpu3");
    }

    #[test]
    fn monotonic_never_goes_back() {
        let mut m = Monotonic::default();
        assert_eq!(m.observe(Nanos(5)), Nanos(5));
        assert_eq!(m.observe(Nanos(3)), Nanos(5));
        assert_eq!(m.get(), Nanos(5));
    }
}
