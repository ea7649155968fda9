//! Disengaged fair queueing: NEON's (Menychtas, Shen and Scott, ASPLOS
//! 2014, section 3.3) and LoGA's (low-overhead GPU accounting) variants.
//! Several vGPUs issue at once, unmeasured, during a *free run*; only
//! those ahead in virtual time are held back.
//!
//! # What the papers say
//!
//! - NEON: each task has a virtual time approximating its cumulative GPU
//!   use. At each *engagement* every task is barred, the device drains, and
//!   each active task runs alone briefly (at most 5 ms or 32 requests) with
//!   every request monitored, which gives its average request size. Then
//!   comes a free run several times as long as the engagement, in which the
//!   tasks not denied submit directly. The GPU serves the queues round
//!   robin, so a task's share of a free run is estimated as its average
//!   request size over the sum of the active tasks'. At the next
//!   engagement: each active task's virtual time advances by its estimated
//!   use; the system virtual time becomes the smallest active one; an idle
//!   task behind it is brought forward; a task ahead of it by at least the
//!   interval is denied the next free run.
//! - LoGA: the same virtual-time rules, but each application's GPU time is
//!   *observed* while all run concurrently (LoGA polls a GPU status
//!   register for context switches), so there is no barrier and no
//!   sampling: applications not found over-using keep running, and only an
//!   over-user is suspended for the next interval.
//!
//! # As modelled here
//!
//! - The driver gives every member of a free run a lease at once
//!   ([`Policy::free_run`]); at its end it reports each member's device
//!   time in the run as the executor accounted it (SimGpu's model of the
//!   device; the worker's timing events on a GPU) with
//!   [`Policy::end_free_run`].
//! - NEON's variant ignores those numbers: it samples each runnable vGPU
//!   alone with an exclusive, measured grant of at most [`SAMPLE_MAX`]
//!   (its holder reports its average request cost with the release), and
//!   estimates each member's share of the free run from the average costs.
//!   The free run lasts [`FREE_RUN_FACTOR`] times the engagement, at least
//!   one slice. A request count limit (NEON's 32) is not modelled: the
//!   grant is bounded by time only.
//! - LoGA's variant charges the measured device time, keeps the free run
//!   going from one interval ([`FREE_RUN_FACTOR`] slices) to the next, and
//!   only changes its members: the driver revokes the leases of vGPUs newly
//!   denied and grants leases to those newly allowed.
//! - Virtual time is weighted (`use / weight`) as in FairGV; a vGPU is
//!   denied when it is ahead of the system virtual time by at least the
//!   virtual time the slowest active vGPU would gain running alone for the
//!   interval. A vGPU that wakes during a free run joins it unless denied
//!   ([`Policy::free_run_admits`]).
//!
//! # Invariants
//!
//! - At most one exclusive grant is outstanding, never during a free run;
//!   the slowest active vGPU is never denied, so a free run has a member
//!   whenever a vGPU is runnable.
//! - The system virtual time never decreases; an idle vGPU's virtual time
//!   is brought up to it when it wakes, so sleeping earns nothing.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::config::{InteractivityConfig, SliceConfig};
use crate::interactivity::InteractivityDetector;
use crate::policy::{
    check_weight, CoschedReply, ExecutionMode, FreeRun, Grant, IdleBehaviour, Monotonic, Policy,
    PolicyKind, SchedError, Standing, VgpuId, VgpuState, VgpuStats, VirtualTime,
};
use crate::time::Nanos;

/// Longest sampling grant of NEON's engagement.
pub const SAMPLE_MAX: Nanos = Nanos::from_millis(5);
/// A free run lasts this many engagements (NEON) or slices (LoGA).
pub const FREE_RUN_FACTOR: u64 = 5;
/// Requests each member of a free run keeps in flight while it has
/// several members ([`FreeRun::turn`]): the same number for every member,
/// so a device that serves them first come first served serves them one
/// request each in turn, as a GPU serves its channels (the round robin
/// NEON's estimate assumes, and the device LoGA's applications submit to
/// freely); two, so that a member's next request is queued before its
/// last one ends.
pub const FREE_RUN_TURN: u32 = 2;

/// Which disengaged fair queueing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DfqVariant {
    /// NEON: barrier, drain, sample each VM alone, estimate.
    Neon,
    /// LoGA: observe each VM's device time while all run.
    Loga,
}

#[derive(Debug, Clone)]
struct Entry {
    weight: u32,
    state: VgpuState,
    vt: VirtualTime,
    charged: Nanos,
    grants: u64,
    /// Average request cost from its samples (NEON).
    cost: Option<u64>,
    denied: bool,
    /// Free runs it sat out, denied.
    denials: u64,
    detector: InteractivityDetector,
}

#[derive(Debug, Clone)]
enum Phase {
    /// NEON: exclusive sampling grants to `queue`, begun at `started`.
    Sampling {
        queue: VecDeque<VgpuId>,
        started: Nanos,
    },
    /// NEON: the next `pick` begins an engagement (after a free run's
    /// barrier has drained).
    Engage,
    /// A free run is due; NEON's engagement took `engagement`.
    Due { engagement: Nanos },
    /// A free run with `members` since `since`, its interval `length`.
    Free {
        members: BTreeSet<VgpuId>,
        since: Nanos,
        length: Nanos,
    },
}

/// Disengaged fair queueing. See the module documentation.
#[derive(Debug, Clone)]
pub struct DisengagedFq {
    variant: DfqVariant,
    slice: SliceConfig,
    vgpus: BTreeMap<VgpuId, Entry>,
    phase: Phase,
    sys: VirtualTime,
    holder: Option<VgpuId>,
    last_holder: Option<VgpuId>,
    clock: Monotonic,
    /// Whether a vGPU ahead is denied free runs (false: accounting only).
    deny: bool,
    /// Members of the free run (LoGA's) that keep their lease parked,
    /// with nothing to issue: blocked, yet members into the next interval.
    parked: BTreeSet<VgpuId>,
}

impl DisengagedFq {
    /// An empty scheduler.
    pub fn new(variant: DfqVariant, slice: SliceConfig) -> Self {
        DisengagedFq {
            variant,
            slice,
            vgpus: BTreeMap::new(),
            phase: match variant {
                DfqVariant::Neon => Phase::Engage,
                DfqVariant::Loga => Phase::Due {
                    engagement: Nanos::ZERO,
                },
            },
            sys: VirtualTime::ZERO,
            holder: None,
            last_holder: None,
            clock: Monotonic::default(),
            deny: true,
            parked: BTreeSet::new(),
        }
    }

    /// With `on`, the scheduler only accounts: every vGPU is charged as
    /// usual (NEON still drains and samples at each engagement) but none
    /// is ever denied a free run. LoGA's Figure 7 measures what the
    /// accounting alone costs the applications this way ("scheduling
    /// disabled").
    pub fn accounting_only(mut self, on: bool) -> Self {
        self.deny = !on;
        self
    }

    /// The variant.
    pub fn variant(&self) -> DfqVariant {
        self.variant
    }

    /// The system virtual time.
    pub fn system_time(&self) -> VirtualTime {
        self.sys
    }

    /// Whether a free run is on.
    pub fn free_running(&self) -> bool {
        matches!(self.phase, Phase::Free { .. })
    }

    fn entry_mut(&mut self, id: VgpuId) -> Result<&mut Entry, SchedError> {
        self.vgpus.get_mut(&id).ok_or(SchedError::Unknown { id })
    }

    fn active(e: &Entry) -> bool {
        matches!(e.state, VgpuState::Runnable | VgpuState::Running)
    }

    /// Charges `used` to `id`.
    fn charge(&mut self, id: VgpuId, used: Nanos) {
        if let Some(e) = self.vgpus.get_mut(&id) {
            e.charged += used;
            e.vt = e.vt.saturating_add(VirtualTime::charge(used, e.weight));
        }
    }

    /// NEON's engagement step 1–3 and LoGA's equivalent: the system virtual
    /// time becomes the smallest active one (never lower), idle vGPUs
    /// behind it are brought forward, and the vGPUs ahead by at least what
    /// the slowest would gain in `interval` are denied.
    fn decide(&mut self, interval: Nanos) {
        let slowest = self
            .vgpus
            .values()
            .filter(|e| Self::active(e))
            .min_by_key(|e| e.vt)
            .map(|e| (e.vt, e.weight));
        if let Some((vt, _)) = slowest {
            self.sys = self.sys.max(vt);
        }
        let gap = slowest.map_or(VirtualTime::ZERO, |(_, w)| VirtualTime::charge(interval, w));
        let (sys, deny) = (self.sys, self.deny);
        for e in self.vgpus.values_mut() {
            if !Self::active(e) {
                e.vt = e.vt.max(sys);
                e.denied = false;
                continue;
            }
            e.denied = deny && e.vt.saturating_sub(sys) >= gap && gap > VirtualTime::ZERO;
            if e.denied {
                e.denials += 1;
            }
        }
    }

    fn interval(&self, engagement: Nanos) -> Nanos {
        let slice = self.slice.slice();
        match self.variant {
            DfqVariant::Neon => Nanos(engagement.0.saturating_mul(FREE_RUN_FACTOR)).max(slice),
            DfqVariant::Loga => Nanos(slice.0.saturating_mul(FREE_RUN_FACTOR)),
        }
    }

    fn runnable(&self) -> Vec<VgpuId> {
        self.vgpus
            .iter()
            .filter(|(_, e)| e.state == VgpuState::Runnable)
            .map(|(&id, _)| id)
            .collect()
    }
}

impl Policy for DisengagedFq {
    fn kind(&self) -> PolicyKind {
        match self.variant {
            DfqVariant::Neon => PolicyKind::NeonDfq,
            DfqVariant::Loga => PolicyKind::Loga,
        }
    }

    fn idle_behaviour(&self) -> IdleBehaviour {
        IdleBehaviour::Block
    }

    /// NEON's sampling grants are measured; free runs are leases the
    /// driver gives through [`Policy::free_run`].
    fn execution_mode(&self) -> ExecutionMode {
        ExecutionMode::Collaborative
    }

    fn add(&mut self, id: VgpuId, weight: u32) -> Result<(), SchedError> {
        let weight = check_weight(weight)?;
        if self.vgpus.contains_key(&id) {
            return Err(SchedError::Duplicate { id });
        }
        self.vgpus.insert(
            id,
            Entry {
                weight,
                state: VgpuState::Blocked,
                vt: VirtualTime::ZERO,
                charged: Nanos::ZERO,
                grants: 0,
                cost: None,
                denied: false,
                denials: 0,
                detector: InteractivityDetector::new(InteractivityConfig::default()),
            },
        );
        Ok(())
    }

    fn remove(&mut self, id: VgpuId) -> Result<(), SchedError> {
        self.vgpus.remove(&id).ok_or(SchedError::Unknown { id })?;
        for slot in [&mut self.holder, &mut self.last_holder] {
            if *slot == Some(id) {
                *slot = None;
            }
        }
        self.parked.remove(&id);
        match &mut self.phase {
            Phase::Sampling { queue, .. } => queue.retain(|&q| q != id),
            Phase::Free { members, .. } => {
                members.remove(&id);
            }
            Phase::Engage | Phase::Due { .. } => {}
        }
        Ok(())
    }

    fn set_weight(&mut self, id: VgpuId, weight: u32) -> Result<(), SchedError> {
        let weight = check_weight(weight)?;
        self.entry_mut(id)?.weight = weight;
        Ok(())
    }

    fn wake(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let sys = self.sys;
        let e = self.entry_mut(id)?;
        if e.state == VgpuState::Blocked {
            // Sleeping earns nothing.
            e.vt = e.vt.max(sys);
            e.state = VgpuState::Runnable;
        }
        Ok(())
    }

    fn block(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let e = self.entry_mut(id)?;
        match e.state {
            VgpuState::Running => Err(SchedError::Holding { id }),
            VgpuState::Blocked => Ok(()),
            VgpuState::Runnable => {
                e.state = VgpuState::Blocked;
                Ok(())
            }
        }
    }

    fn pick(&mut self, now: Nanos) -> Option<Grant> {
        let now = self.clock.observe(now);
        if self.holder.is_some() || self.variant == DfqVariant::Loga {
            return None;
        }
        match self.phase {
            Phase::Free { .. } => return None,
            Phase::Engage | Phase::Due { .. } => {
                // A new engagement: sample every runnable vGPU.
                self.phase = Phase::Sampling {
                    queue: self.runnable().into_iter().collect(),
                    started: now,
                };
            }
            Phase::Sampling { .. } => {}
        }
        let Phase::Sampling { queue, .. } = &mut self.phase else {
            return None;
        };
        let id = loop {
            let id = queue.pop_front()?;
            if self
                .vgpus
                .get(&id)
                .is_some_and(|e| e.state == VgpuState::Runnable)
            {
                break id;
            }
        };
        let slice = self.slice.slice().min(SAMPLE_MAX);
        let e = self.vgpus.get_mut(&id)?;
        e.state = VgpuState::Running;
        e.grants += 1;
        self.holder = Some(id);
        let switched = self.last_holder != Some(id);
        Some(Grant {
            id,
            slice,
            wake_vcpu: false,
            switched,
        })
    }

    fn release(&mut self, id: VgpuId, used: Nanos, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        if !self.vgpus.contains_key(&id) {
            return Err(SchedError::Unknown { id });
        }
        if self.holder != Some(id) {
            return Err(SchedError::NotHolder { id });
        }
        self.charge(id, used);
        self.entry_mut(id)?.state = VgpuState::Runnable;
        self.holder = None;
        self.last_holder = Some(id);
        Ok(())
    }

    fn adjust(&mut self, id: VgpuId, correction: i64, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let e = self.entry_mut(id)?;
        e.charged = e.charged.saturating_add_signed(correction);
        e.vt = e.vt.corrected(correction, e.weight);
        Ok(())
    }

    fn record_sync_call(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        self.entry_mut(id)?.detector.record(now);
        Ok(())
    }

    fn is_interactive(&self, id: VgpuId, now: Nanos) -> bool {
        self.vgpus
            .get(&id)
            .is_some_and(|e| e.detector.is_interactive(now.max(self.clock.get())))
    }

    fn cosched_request(&mut self, id: VgpuId, now: Nanos) -> Result<CoschedReply, SchedError> {
        self.clock.observe(now);
        self.entry_mut(id)?;
        Ok(CoschedReply::Ignored)
    }

    fn holder(&self) -> Option<VgpuId> {
        self.holder
    }

    fn ids(&self) -> Vec<VgpuId> {
        self.vgpus.keys().copied().collect()
    }

    fn stats(&self, id: VgpuId) -> Option<VgpuStats> {
        self.vgpus.get(&id).map(|e| VgpuStats {
            id,
            weight: e.weight,
            state: e.state,
            charged: e.charged,
            grants: e.grants,
            standing: Standing::Disengaged {
                vt: e.vt,
                system: self.sys,
                denied: e.denied,
                denials: e.denials,
            },
        })
    }

    fn observe_cost(&mut self, id: VgpuId, cost: Nanos) -> Result<(), SchedError> {
        let e = self.entry_mut(id)?;
        if cost > Nanos::ZERO {
            e.cost = Some(cost.as_nanos());
        }
        Ok(())
    }

    fn free_run(&mut self, now: Nanos) -> Option<FreeRun> {
        let now = self.clock.observe(now);
        if self.holder.is_some() {
            return None;
        }
        let engagement = match &self.phase {
            Phase::Due { engagement } => *engagement,
            // Sampling done (every queued vGPU sampled or gone).
            Phase::Sampling { queue, started } if queue.is_empty() => now - *started,
            Phase::Engage | Phase::Sampling { .. } | Phase::Free { .. } => return None,
        };
        let length = self.interval(engagement);
        self.decide(length);
        let mut members: BTreeSet<VgpuId> = self
            .vgpus
            .iter()
            .filter(|(_, e)| e.state == VgpuState::Runnable && !e.denied)
            .map(|(&id, _)| id)
            .collect();
        // Parked members keep their leases (blocked, they are never denied).
        members.extend(self.parked.iter().copied());
        if members.is_empty() {
            self.phase = Phase::Due { engagement };
            return None;
        }
        for id in members.difference(&self.parked) {
            if let Some(e) = self.vgpus.get_mut(id) {
                e.state = VgpuState::Running;
                e.grants += 1;
            }
        }
        self.phase = Phase::Free {
            members: members.clone(),
            since: now,
            length,
        };
        Some(FreeRun {
            ids: members.into_iter().collect(),
            until: now + length,
            turn: FREE_RUN_TURN,
            park: self.variant == DfqVariant::Loga,
        })
    }

    fn free_run_admits(&mut self, id: VgpuId, now: Nanos) -> bool {
        self.clock.observe(now);
        let Phase::Free { members, .. } = &mut self.phase else {
            return false;
        };
        let Some(e) = self.vgpus.get_mut(&id) else {
            return false;
        };
        if e.state != VgpuState::Runnable || e.denied {
            return false;
        }
        e.state = VgpuState::Running;
        e.grants += 1;
        members.insert(id);
        true
    }

    fn left_free_run(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        // A parked member whose lease ended stays blocked.
        self.parked.remove(&id);
        let holder = self.holder;
        let e = self.entry_mut(id)?;
        if e.state == VgpuState::Running && holder != Some(id) {
            e.state = VgpuState::Runnable;
        }
        Ok(())
    }

    fn member_parked(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let member = matches!(&self.phase, Phase::Free { members, .. } if members.contains(&id));
        let e = self.entry_mut(id)?;
        if member && e.state == VgpuState::Running {
            e.state = VgpuState::Blocked;
            self.parked.insert(id);
        }
        Ok(())
    }

    fn member_resumed(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let sys = self.sys;
        // Between two intervals it is runnable, and the next run takes it.
        let member = matches!(&self.phase, Phase::Free { members, .. } if members.contains(&id));
        let e = self.entry_mut(id)?;
        if e.state == VgpuState::Blocked && self.parked.remove(&id) {
            // Sleeping earns nothing.
            let e = self.entry_mut(id)?;
            e.vt = e.vt.max(sys);
            e.state = if member {
                VgpuState::Running
            } else {
                VgpuState::Runnable
            };
        }
        Ok(())
    }

    fn end_free_run(&mut self, usage: &[(VgpuId, Nanos)], now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        let next = match self.variant {
            // A barrier, then an engagement samples every VM again.
            DfqVariant::Neon => Phase::Engage,
            // No barrier: the next interval follows at once.
            DfqVariant::Loga => Phase::Due {
                engagement: Nanos::ZERO,
            },
        };
        let Phase::Free { members, since, .. } = std::mem::replace(&mut self.phase, next) else {
            return Ok(());
        };
        let elapsed = now - since;
        match self.variant {
            DfqVariant::Loga => {
                for &(id, used) in usage {
                    self.charge(id, used);
                }
            }
            DfqVariant::Neon => {
                // The device serves the queues round robin: a member's
                // share is its average request size over the members'.
                let known: Vec<u64> = members
                    .iter()
                    .filter_map(|id| self.vgpus.get(id)?.cost)
                    .collect();
                let mean = if known.is_empty() {
                    1
                } else {
                    known.iter().sum::<u64>() / known.len() as u64
                };
                let costs: Vec<(VgpuId, u64)> = members
                    .iter()
                    .map(|&id| {
                        let c = self.vgpus.get(&id).and_then(|e| e.cost).unwrap_or(mean);
                        (id, c.max(1))
                    })
                    .collect();
                let total: u128 = costs.iter().map(|&(_, c)| u128::from(c)).sum();
                for (id, c) in costs {
                    let est = u128::from(elapsed.0) * u128::from(c) / total.max(1);
                    self.charge(id, Nanos(u64::try_from(est).unwrap_or(u64::MAX)));
                }
            }
        }
        for id in members {
            if let Some(e) = self.vgpus.get_mut(&id) {
                if e.state == VgpuState::Running {
                    e.state = VgpuState::Runnable;
                }
            }
        }
        Ok(())
    }

    fn free_running_until(&self) -> Option<Nanos> {
        match &self.phase {
            Phase::Free { since, length, .. } => Some(*since + *length),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: VgpuId = VgpuId(1);
    const B: VgpuId = VgpuId(2);

    fn ms(n: u64) -> Nanos {
        Nanos::from_millis(n)
    }

    fn two(variant: DfqVariant) -> DisengagedFq {
        with_two(DisengagedFq::new(variant, SliceConfig::default()))
    }

    /// `p` with A and B added and runnable.
    fn with_two(mut p: DisengagedFq) -> DisengagedFq {
        for id in [A, B] {
            p.add(id, 1).unwrap();
            p.wake(id, Nanos::ZERO).unwrap();
        }
        p
    }

    fn denials(p: &DisengagedFq, id: VgpuId) -> u64 {
        match p.stats(id).unwrap().standing {
            Standing::Disengaged { denials, .. } => denials,
            other => panic!("unexpected standing {other:?}"),
        }
    }

    /// LoGA: both run at once; the one that used more falls ahead and,
    /// once ahead by a whole interval, sits out a free run while the other
    /// catches up; it is then let back in.
    #[test]
    fn loga_denies_only_the_over_user() {
        let mut p = two(DfqVariant::Loga);
        assert_eq!(p.pick(Nanos::ZERO), None, "LoGA never grants alone");
        let mut t = Nanos::ZERO;
        let run = p.free_run(t).unwrap();
        assert_eq!(run.ids, [A, B]);
        assert_eq!(run.until, ms(30), "five slices");
        assert_eq!(p.stats(A).unwrap().state, VgpuState::Running);
        assert!(p.free_running());
        let mut alone = 0;
        for _ in 0..12 {
            t += ms(30);
            let usage: Vec<(VgpuId, Nanos)> = run_usage(&p);
            p.end_free_run(&usage, t).unwrap();
            let run = p.free_run(t).unwrap();
            if run.ids == [B] {
                alone += 1;
            } else {
                assert_eq!(run.ids, [A, B]);
            }
        }
        assert!(alone > 0 && denials(&p, A) > 0, "A was never held back");
        assert_eq!(denials(&p, B), 0);
        // Over the runs, what A was charged stays within an interval of B's.
        let (a, b) = (p.stats(A).unwrap().charged, p.stats(B).unwrap().charged);
        assert!(a.0.abs_diff(b.0) <= ms(30).0, "A {a} B {b}");

        /// Members share 30 ms: A's requests take twice B's time.
        fn run_usage(p: &DisengagedFq) -> Vec<(VgpuId, Nanos)> {
            let members: Vec<VgpuId> = [A, B]
                .into_iter()
                .filter(|&id| p.stats(id).unwrap().state == VgpuState::Running)
                .collect();
            match members.as_slice() {
                [_, _] => vec![(A, ms(20)), (B, ms(10))],
                [only] => vec![(*only, ms(30))],
                _ => Vec::new(),
            }
        }
    }

    /// LoGA: a member with nothing to issue parks its lease: blocked (and
    /// brought up to the system time when it issues again, sleeping earns
    /// nothing), never denied, still a member of the next interval's run;
    /// a parked member whose lease ends is merely blocked.
    #[test]
    fn loga_members_park_and_stay_members() {
        let mut p = two(DfqVariant::Loga);
        let mut t = Nanos::ZERO;
        p.free_run(t).unwrap();
        p.member_parked(B, ms(1)).unwrap();
        assert_eq!(p.stats(B).unwrap().state, VgpuState::Blocked);
        for _ in 0..6 {
            t += ms(30);
            // A uses the whole device; parked B nothing.
            p.end_free_run(&[(A, ms(30))], t).unwrap();
            let run = p.free_run(t).unwrap();
            assert_eq!(run.ids, [A, B], "a member was dropped or denied");
            assert_eq!(p.stats(B).unwrap().state, VgpuState::Blocked);
        }
        assert_eq!((denials(&p, A), denials(&p, B)), (0, 0));
        p.member_resumed(B, t + ms(1)).unwrap();
        assert_eq!(p.stats(B).unwrap().state, VgpuState::Running);
        let vt = |p: &DisengagedFq, id| match p.stats(id).unwrap().standing {
            Standing::Disengaged { vt, system, .. } => (vt, system),
            other => panic!("{other:?}"),
        };
        assert!(vt(&p, B).0 >= vt(&p, B).1, "B earned time while parked");
        // Parked again, then its lease ends: blocked, no longer parked.
        p.member_parked(B, t + ms(2)).unwrap();
        p.left_free_run(B, t + ms(3)).unwrap();
        assert_eq!(p.stats(B).unwrap().state, VgpuState::Blocked);
        p.member_resumed(B, t + ms(4)).unwrap();
        assert_eq!(
            p.stats(B).unwrap().state,
            VgpuState::Blocked,
            "not a parked member any more: it must ask again"
        );
        // NEON's members do not park.
        let mut n = two(DfqVariant::Neon);
        n.member_parked(A, Nanos::ZERO).unwrap();
        assert_eq!(n.stats(A).unwrap().state, VgpuState::Runnable);
    }

    /// Accounting only (LoGA's Figure 7, "scheduling disabled"): the
    /// over-user is charged as before but never sits a free run out; NEON
    /// still engages (drains and samples) between free runs.
    #[test]
    fn accounting_only_charges_but_denies_no_one() {
        let mut p = with_two(
            DisengagedFq::new(DfqVariant::Loga, SliceConfig::default()).accounting_only(true),
        );
        let mut t = Nanos::ZERO;
        p.free_run(t).unwrap();
        for _ in 0..12 {
            t += ms(30);
            // A uses twice B's time in every run.
            p.end_free_run(&[(A, ms(20)), (B, ms(10))], t).unwrap();
            let run = p.free_run(t).unwrap();
            assert_eq!(run.ids, [A, B], "a VM was denied");
        }
        assert_eq!((denials(&p, A), denials(&p, B)), (0, 0));
        let (a, b) = (p.stats(A).unwrap().charged, p.stats(B).unwrap().charged);
        assert_eq!((a, b), (ms(240), ms(120)), "charged as measured");

        let mut p = with_two(
            DisengagedFq::new(DfqVariant::Neon, SliceConfig::default()).accounting_only(true),
        );
        let mut t = Nanos::ZERO;
        for _ in 0..6 {
            // An engagement: each VM sampled alone, A's requests 4x B's.
            for (id, cost) in [(A, ms(4)), (B, ms(1))] {
                let g = p.pick(t).expect("a sampling grant");
                assert_eq!(g.id, id);
                p.observe_cost(id, cost).unwrap();
                t += ms(5);
                p.release(id, ms(5), t).unwrap();
            }
            let run = p.free_run(t).expect("a free run after sampling");
            assert_eq!(run.ids, [A, B], "a VM was denied");
            t = run.until;
            p.end_free_run(&[], t).unwrap();
        }
        assert_eq!((denials(&p, A), denials(&p, B)), (0, 0));
        let (a, b) = (p.stats(A).unwrap().charged, p.stats(B).unwrap().charged);
        assert!(
            a > b + ms(100),
            "A, estimated at 4x B, charged {a} against {b}"
        );
    }

    /// NEON: an engagement samples each VM alone, then a free run five
    /// times as long; its time is split by the VMs' average request sizes.
    #[test]
    fn neon_samples_then_runs_free() {
        let mut p = two(DfqVariant::Neon);
        assert_eq!(p.free_run(Nanos::ZERO), None, "an engagement comes first");
        let g = p.pick(Nanos::ZERO).unwrap();
        assert_eq!((g.id, g.slice), (A, SAMPLE_MAX));
        p.observe_cost(A, ms(1)).unwrap();
        p.release(A, ms(5), ms(5)).unwrap();
        let g = p.pick(ms(5)).unwrap();
        assert_eq!(g.id, B);
        assert_eq!(p.free_run(ms(6)), None, "B still samples");
        p.observe_cost(B, Nanos::from_micros(250)).unwrap();
        p.release(B, ms(5), ms(10)).unwrap();
        assert_eq!(p.pick(ms(10)), None, "both sampled");
        let run = p.free_run(ms(10)).unwrap();
        assert_eq!(run.ids, [A, B]);
        assert_eq!(run.until, ms(10) + ms(50), "five engagements of 10 ms");
        assert_eq!(run.turn, FREE_RUN_TURN, "one request each in turn");
        assert!(!run.park, "NEON's members give their leases back");
        assert_eq!(p.pick(ms(20)), None, "nothing alone during a free run");
        p.end_free_run(&[(A, ms(1)), (B, ms(1))], ms(60)).unwrap();
        // 50 ms split 4:1 by request size, the measured usage ignored.
        assert_eq!(p.stats(A).unwrap().charged, ms(5) + ms(40));
        assert_eq!(p.stats(B).unwrap().charged, ms(5) + ms(10));
        assert_eq!(p.free_run(ms(60)), None, "a barrier, then sampling");
        assert_eq!(p.pick(ms(60)).map(|g| g.id), Some(A));
    }

    /// Sleeping earns nothing, and a VM that wakes during a free run joins
    /// it unless it is ahead.
    #[test]
    fn sleepers_catch_up_to_the_system_time_and_join() {
        let mut p = two(DfqVariant::Loga);
        p.block(B, Nanos::ZERO).unwrap();
        let run = p.free_run(Nanos::ZERO).unwrap();
        assert_eq!(run.ids, [A]);
        assert_eq!(run.turn, FREE_RUN_TURN);
        assert!(run.park, "LoGA's members keep their leases while idle");
        p.end_free_run(&[(A, ms(30))], ms(30)).unwrap();
        p.free_run(ms(30)).unwrap();
        p.end_free_run(&[(A, ms(30))], ms(60)).unwrap();
        p.free_run(ms(60)).unwrap();
        // B slept through A's 60 ms: it wakes at the system time, and joins.
        p.wake(B, ms(61)).unwrap();
        assert!(p.free_run_admits(B, ms(61)));
        let vt = |id| match p.stats(id).unwrap().standing {
            Standing::Disengaged { vt, system, .. } => (vt, system),
            other => panic!("{other:?}"),
        };
        assert_eq!(vt(B).0, vt(B).1);
        assert!(!p.free_run_admits(B, ms(61)), "already a member");
        p.left_free_run(B, ms(62)).unwrap();
        assert_eq!(p.stats(B).unwrap().state, VgpuState::Runnable);
        assert_eq!(p.block(A, ms(62)), Err(SchedError::Holding { id: A }));
    }
}
