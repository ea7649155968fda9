//! GPU scheduling policies: FairGV's fair queuing and the baselines it is
//! evaluated against, as pure logic behind one trait.
//!
//! - [`policy`]: the [`Policy`] trait and the protocol a driver follows
//!   (`add`, `wake`, `pick` → [`Grant`], `release` with measured usage,
//!   `block`), plus [`VgpuId`], [`VgpuStats`] and the errors.
//! - [`fair_queuing`]: [`FairQueuing`], FairGV (start/finish tags, virtual
//!   time, hybrid spinning, GPU-centric co-scheduling).
//! - [`credit`]: [`Credit`] in its Credit-poll, Credit-hs and Strict
//!   co-scheduling (Pegasus) variants.
//! - [`neon`]: [`Timeslice`], NEON's Timeslice with overuse control and its
//!   disengaged variant.
//! - [`timegraph`]: [`TimeGraph`], TimeGraph's priorities (PRT, HT) and
//!   reservations (posterior and apriori enforcement, admission control).
//! - [`dfq`]: [`DisengagedFq`], NEON's Disengaged Fair Queueing and LoGA's
//!   accounting: free runs in which several vGPUs issue at once.
//! - [`interactivity`]: the sliding-window CPU–GPU interactivity detector.
//! - [`config`]: validated slice and interactivity settings.
//! - [`time`]: [`Nanos`], the [`Clock`] trait and [`ManualClock`].
//!
//! No I/O, no threads, no clock reads: every decision is a function of the
//! calls made and the instants passed in, so the daemon can drive a policy
//! from its scheduler thread and a simulator can replay it deterministically.
//!
//! Invariants every policy upholds:
//! - at most one grant is outstanding; `pick` returns `None` while it is, and
//!   otherwise returns `Some` whenever a vGPU is runnable (work conserving),
//!   except where a reservation throttles every runnable vGPU
//!   ([`TimeGraph`]; [`Policy::next_event`] then says when to ask again);
//! - every nanosecond a holder reports at release is charged to that holder,
//!   overruns beyond the slice included;
//! - a blocked vGPU is never picked;
//! - time never goes back inside a policy (an earlier `now` counts as the
//!   latest seen);
//! - calls that break the protocol (unknown ids, releasing a grant not held,
//!   blocking while holding, weights outside 1..=10000) fail with a
//!   [`SchedError`] and leave every vGPU's state and charges as they were.
//!
//! [`FairQueuing`] adds: the virtual time `V` never decreases; every runnable
//! or running vGPU's start tag is at least `V`; a vGPU that wakes gets
//! `S = max(S, V)`, so sleeping earns no GPU time.
//!
//! # Driving a policy
//!
//! ```
//! use fairgpu_scheduler::{Clock, FairQueuing, ManualClock, Nanos, Policy, VgpuId};
//!
//! let clock = ManualClock::new(Nanos::ZERO);
//! let mut policy = FairQueuing::default();
//! policy.add(VgpuId(1), 1)?;
//! policy.add(VgpuId(2), 3)?;
//! // Requests arrived in both rings.
//! policy.wake(VgpuId(1), clock.now())?;
//! policy.wake(VgpuId(2), clock.now())?;
//! let grant = policy.pick(clock.now()).expect("two vGPUs are runnable");
//! assert_eq!(grant.slice, Nanos::from_millis(6));
//! // The holder issues work until its measured usage reaches the slice; its
//! // last kernel overran a little, which is charged too.
//! let used = Nanos::from_micros(6_150);
//! clock.advance(used);
//! policy.release(grant.id, used, clock.now())?;
//! // The other vGPU is next; its ring turns out empty after the spin budget.
//! let next = policy.pick(clock.now()).expect("one vGPU is runnable");
//! assert_ne!(next.id, grant.id);
//! policy.release(next.id, Nanos::ZERO, clock.now())?;
//! policy.block(next.id, clock.now())?;
//! assert_eq!(policy.pick(clock.now()).map(|g| g.id), Some(grant.id));
//! # Ok::<(), fairgpu_scheduler::SchedError>(())
//! ```

pub mod config;
pub mod credit;
pub mod dfq;
pub mod fair_queuing;
pub mod interactivity;
pub mod neon;
pub mod policy;
pub mod time;
pub mod timegraph;

pub use config::{ConfigError, InteractivityConfig, SliceConfig};
pub use credit::{Credit, CreditConfig, CreditVariant};
pub use dfq::{DfqVariant, DisengagedFq};
pub use fair_queuing::{FairQueuing, FairQueuingConfig};
pub use interactivity::InteractivityDetector;
pub use neon::{Timeslice, TimesliceVariant};
pub use policy::{
    CoschedReply, CreditPriority, ExecutionMode, FreeRun, Grant, IdleBehaviour, Policy, PolicyKind,
    Reservation, ReserveMode, SchedError, Standing, UnknownPolicy, VgpuId, VgpuState, VgpuStats,
    VirtualTime, WEIGHTS,
};
pub use time::{Clock, ManualClock, Nanos};
pub use timegraph::{PriorityMode, TimeGraph};

// Here rather than in `policy`, which every policy depends on: building
// one of each kind is what depends on them all.
impl PolicyKind {
    /// A policy of this kind with the paper's default settings.
    pub fn build(self) -> Box<dyn Policy> {
        match self {
            PolicyKind::FairQueuing => Box::new(FairQueuing::default()),
            PolicyKind::CreditPoll => Box::new(Credit::poll(CreditConfig::default())),
            PolicyKind::CreditHybridSpin => Box::new(Credit::hybrid_spin(CreditConfig::default())),
            PolicyKind::StrictCoSchedule => {
                Box::new(Credit::strict_coschedule(CreditConfig::default()))
            }
            PolicyKind::NeonTimeslice => Box::new(Timeslice::default()),
            PolicyKind::NeonDisengaged => Box::new(Timeslice::new(
                TimesliceVariant::Disengaged,
                SliceConfig::default(),
            )),
            PolicyKind::TimeGraphPrt => {
                Box::new(TimeGraph::new(PriorityMode::Prt, SliceConfig::default()))
            }
            PolicyKind::TimeGraphHt => Box::new(TimeGraph::default()),
            PolicyKind::NeonDfq => {
                Box::new(DisengagedFq::new(DfqVariant::Neon, SliceConfig::default()))
            }
            PolicyKind::Loga => {
                Box::new(DisengagedFq::new(DfqVariant::Loga, SliceConfig::default()))
            }
        }
    }
}
