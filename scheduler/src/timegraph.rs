//! TimeGraph's priority scheduling and reservations (Kato, Lakshmanan,
//! Rajkumar and Ishikawa, USENIX ATC 2011, section 4).
//!
//! # What the paper says
//!
//! - **Priorities.** GPU command groups are queued and dispatched by
//!   priority. Under the *Predictable-Response-Time* (PRT) policy every
//!   group waits for the running one to complete, and the highest priority
//!   waiting goes next, so a high-priority task waits at most one group.
//!   Under *High-Throughput* (HT) a task may keep submitting while its own
//!   group runs, as long as nothing of higher priority waits, which costs
//!   the high-priority task more blocking but saves the scheduler's round
//!   trip per group.
//! - **Reservations** `(C, T)`: a budget `C` of GPU time per period `T`.
//!   *Posterior enforcement* (PE) lets a task submit while its budget is
//!   positive and charges the group's time after it completes, so the
//!   budget may go negative; it is replenished as `e = min(C, e + C)` each
//!   period. *Apriori enforcement* (AE) predicts the cost `x` of the next
//!   group from a history table keyed by the group's shape, and lets it
//!   run only if `e >= x`.
//! - **Admission control** keeps the reserved utilization `Σ C/T` within
//!   what the GPU can give.
//!
//! # As modelled here
//!
//! - A "group" is one request. PRT ([`Policy::serializes`]) has the holder
//!   wait for each request before issuing the next (the daemon's workers
//!   synchronise after every request), HT lets it pipeline. Both end the
//!   holder's grant at its next request boundary when a runnable vGPU of
//!   higher priority may run ([`Policy::preempt`]); under PRT the device
//!   then holds at most one request, under HT whatever the holder queued.
//! - The next holder is the runnable vGPU of highest priority whose
//!   reservation (if any) allows it to run, first come first served within
//!   a priority. A grant lasts one slice, or less: a reserved vGPU's slice
//!   is at most its remaining budget. vGPUs without a reservation are never
//!   throttled.
//! - PE: may run while `e > 0`. AE: may run while `e >= x`, where `x` is
//!   the average cost of its recent requests as its holder measured them
//!   ([`Policy::observe_cost`]; keyed by vGPU, not by command shape, since
//!   the scheduler sees grants, not commands); with no history yet, `e > 0`.
//!   Its grant ends when the budget is used, and its holder issues only the
//!   requests predicted to fit.
//! - Replenishment runs lazily at each call: the periods since the last one
//!   add `C` each, capped at `C`. A throttled vGPU waits even if the GPU is
//!   idle (reservations are enforced, not work conserving);
//!   [`Policy::next_event`] tells the driver when to look again.
//! - Admission control refuses a reservation that would make `Σ C/T`
//!   exceed 1.
//! - A holder with nothing to issue yields after the spin budget
//!   ([`IdleBehaviour::Block`]); usage is measured
//!   ([`ExecutionMode::Collaborative`]).
//!
//! # Invariants
//!
//! - At most one grant is outstanding. `pick` answers `None` with runnable
//!   vGPUs only when every one of them is throttled by its reservation, and
//!   then [`Policy::next_event`] is the next replenishment.
//! - No vGPU runs while a runnable, unthrottled vGPU of higher priority
//!   waits at a `pick`; [`Policy::preempt`] names a holder that one waits
//!   behind.
//! - A budget never exceeds its `C`; every nanosecond released is charged.

use std::collections::BTreeMap;

use crate::config::{InteractivityConfig, SliceConfig};
use crate::interactivity::InteractivityDetector;
use crate::policy::{
    check_weight, CoschedReply, ExecutionMode, Grant, IdleBehaviour, Monotonic, Policy, PolicyKind,
    Reservation, ReserveMode, SchedError, Standing, VgpuId, VgpuState, VgpuStats,
};
use crate::time::Nanos;

/// TimeGraph's two priority policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorityMode {
    /// Predictable-Response-Time: one request at a time.
    Prt,
    /// High-Throughput: the holder pipelines its requests.
    Ht,
}

/// Shortest grant a reserved vGPU is given (a budget nearly used up still
/// lets one short request through).
const MIN_GRANT: Nanos = Nanos::from_micros(10);

#[derive(Debug, Clone)]
struct Budget {
    reservation: Reservation,
    /// Budget left, ns; negative after an overrun.
    left: i64,
    /// When the next period starts; set by the first time-bearing call.
    next: Option<Nanos>,
}

impl Budget {
    fn capacity(&self) -> i64 {
        i64::try_from(self.reservation.budget.as_nanos()).unwrap_or(i64::MAX)
    }

    /// Replenishes the periods that started by `now`.
    fn refill(&mut self, now: Nanos) {
        let period = self.reservation.period.as_nanos().max(1);
        match self.next {
            None => self.next = Some(now + Nanos(period)),
            Some(next) if now >= next => {
                let n = (now - next).as_nanos() / period + 1;
                let add = i64::try_from(n)
                    .unwrap_or(i64::MAX)
                    .saturating_mul(self.capacity());
                self.left = self.left.saturating_add(add).min(self.capacity());
                self.next = Some(next + Nanos(n.saturating_mul(period)));
            }
            Some(_) => {}
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    weight: u32,
    priority: u8,
    budget: Option<Budget>,
    /// AE's prediction: the average cost of one request, ns.
    cost: Option<u64>,
    state: VgpuState,
    /// Arrival order while runnable.
    seq: u64,
    charged: Nanos,
    grants: u64,
    throttled: u64,
    /// Whether it was counted as throttled since it last ran.
    counted: bool,
    detector: InteractivityDetector,
}

impl Entry {
    /// Whether its reservation lets it run now.
    fn may_run(&self) -> bool {
        let Some(b) = &self.budget else {
            return true;
        };
        match b.reservation.mode {
            ReserveMode::Posterior => b.left > 0,
            ReserveMode::Apriori => {
                let x = self.cost.unwrap_or(1).max(1);
                b.left >= i64::try_from(x).unwrap_or(i64::MAX)
            }
        }
    }
}

/// TimeGraph. See the module documentation.
#[derive(Debug, Clone)]
pub struct TimeGraph {
    mode: PriorityMode,
    slice: SliceConfig,
    vgpus: BTreeMap<VgpuId, Entry>,
    next_seq: u64,
    holder: Option<VgpuId>,
    last_holder: Option<VgpuId>,
    clock: Monotonic,
}

impl TimeGraph {
    /// An empty scheduler.
    pub fn new(mode: PriorityMode, slice: SliceConfig) -> Self {
        TimeGraph {
            mode,
            slice,
            vgpus: BTreeMap::new(),
            next_seq: 0,
            holder: None,
            last_holder: None,
            clock: Monotonic::default(),
        }
    }

    /// PRT or HT.
    pub fn mode(&self) -> PriorityMode {
        self.mode
    }

    /// `id`'s priority and reservation.
    pub fn settings(&self, id: VgpuId) -> Option<(u8, Option<Reservation>)> {
        self.vgpus
            .get(&id)
            .map(|e| (e.priority, e.budget.as_ref().map(|b| b.reservation)))
    }

    /// The reserved share of the GPU, `Σ C/T`.
    pub fn reserved_utilization(&self) -> f64 {
        self.vgpus
            .values()
            .filter_map(|e| e.budget.as_ref())
            .map(|b| b.reservation.utilization())
            .sum()
    }

    fn entry_mut(&mut self, id: VgpuId) -> Result<&mut Entry, SchedError> {
        self.vgpus.get_mut(&id).ok_or(SchedError::Unknown { id })
    }

    fn refill(&mut self, now: Nanos) {
        for e in self.vgpus.values_mut() {
            if let Some(b) = e.budget.as_mut() {
                b.refill(now);
            }
        }
    }

    /// The runnable vGPU that should run next: highest priority among
    /// those allowed to, first come first served.
    fn best(&self) -> Option<VgpuId> {
        self.vgpus
            .iter()
            .filter(|(_, e)| e.state == VgpuState::Runnable && e.may_run())
            .min_by_key(|(_, e)| (std::cmp::Reverse(e.priority), e.seq))
            .map(|(&id, _)| id)
    }

    fn enqueue(&mut self, id: VgpuId) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(e) = self.vgpus.get_mut(&id) {
            e.state = VgpuState::Runnable;
            e.seq = seq;
        }
    }
}

impl Default for TimeGraph {
    /// HT with FairGV's non-preemptive slice.
    fn default() -> Self {
        TimeGraph::new(PriorityMode::Ht, SliceConfig::default())
    }
}

impl Policy for TimeGraph {
    fn kind(&self) -> PolicyKind {
        match self.mode {
            PriorityMode::Prt => PolicyKind::TimeGraphPrt,
            PriorityMode::Ht => PolicyKind::TimeGraphHt,
        }
    }

    fn idle_behaviour(&self) -> IdleBehaviour {
        IdleBehaviour::Block
    }

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
                priority: 0,
                budget: None,
                cost: None,
                state: VgpuState::Blocked,
                seq: 0,
                charged: Nanos::ZERO,
                grants: 0,
                throttled: 0,
                counted: false,
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
        Ok(())
    }

    fn set_weight(&mut self, id: VgpuId, weight: u32) -> Result<(), SchedError> {
        let weight = check_weight(weight)?;
        self.entry_mut(id)?.weight = weight;
        Ok(())
    }

    fn wake(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        self.refill(now);
        if self.entry_mut(id)?.state == VgpuState::Blocked {
            self.enqueue(id);
        }
        Ok(())
    }

    fn block(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        self.refill(now);
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
        self.refill(now);
        if self.holder.is_some() {
            return None;
        }
        // A runnable vGPU passed over for its reservation counts as
        // throttled (once until it runs again).
        for e in self.vgpus.values_mut() {
            if e.state == VgpuState::Runnable && !e.may_run() && !e.counted {
                e.counted = true;
                e.throttled += 1;
            }
        }
        let id = self.best()?;
        let base = self.slice.slice();
        let e = self.vgpus.get_mut(&id)?;
        let slice = match &e.budget {
            Some(b) => Nanos(u64::try_from(b.left).unwrap_or(0))
                .min(base)
                .max(MIN_GRANT),
            None => base,
        };
        e.state = VgpuState::Running;
        e.grants += 1;
        e.counted = false;
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
        let now = self.clock.observe(now);
        if !self.vgpus.contains_key(&id) {
            return Err(SchedError::Unknown { id });
        }
        if self.holder != Some(id) {
            return Err(SchedError::NotHolder { id });
        }
        // Periods that began before the release are replenished first; the
        // usage falls in the period of the release.
        self.refill(now);
        let e = self.entry_mut(id)?;
        e.charged += used;
        if let Some(b) = e.budget.as_mut() {
            b.left = b
                .left
                .saturating_sub(i64::try_from(used.as_nanos()).unwrap_or(i64::MAX));
        }
        self.holder = None;
        self.last_holder = Some(id);
        self.enqueue(id);
        Ok(())
    }

    fn adjust(&mut self, id: VgpuId, correction: i64, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        self.refill(now);
        let e = self.entry_mut(id)?;
        e.charged = e.charged.saturating_add_signed(correction);
        if let Some(b) = e.budget.as_mut() {
            b.left = b.left.saturating_sub(correction).min(b.capacity());
        }
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
            standing: Standing::TimeGraph {
                priority: e.priority,
                reservation: e.budget.as_ref().map(|b| b.reservation),
                budget: e.budget.as_ref().map(|b| b.left),
                throttled: e.throttled,
            },
        })
    }

    fn set_priority(&mut self, id: VgpuId, priority: u8) -> Result<(), SchedError> {
        self.entry_mut(id)?.priority = priority;
        Ok(())
    }

    fn set_reservation(
        &mut self,
        id: VgpuId,
        reservation: Option<Reservation>,
    ) -> Result<(), SchedError> {
        self.entry_mut(id)?;
        let Some(r) = reservation else {
            self.entry_mut(id)?.budget = None;
            return Ok(());
        };
        r.validate()?;
        let others: f64 = self
            .vgpus
            .iter()
            .filter(|(&o, _)| o != id)
            .filter_map(|(_, e)| e.budget.as_ref())
            .map(|b| b.reservation.utilization())
            .sum();
        let total = others + r.utilization();
        if total > 1.0 + 1e-9 {
            return Err(SchedError::Admission { id, total });
        }
        let now = self.clock.get();
        let e = self.entry_mut(id)?;
        let left = i64::try_from(r.budget.as_nanos()).unwrap_or(i64::MAX);
        e.budget = Some(Budget {
            reservation: r,
            left,
            next: (now > Nanos::ZERO).then(|| now + r.period),
        });
        Ok(())
    }

    fn observe_cost(&mut self, id: VgpuId, cost: Nanos) -> Result<(), SchedError> {
        let e = self.entry_mut(id)?;
        if cost > Nanos::ZERO {
            // An exponential average, weighted 1/4 to the newest: follows a
            // change of request size within a few grants.
            let c = cost.as_nanos();
            e.cost = Some(e.cost.map_or(c, |old| old - old / 4 + c / 4));
        }
        Ok(())
    }

    fn preempt(&mut self, now: Nanos) -> Option<VgpuId> {
        let now = self.clock.observe(now);
        self.refill(now);
        let h = self.holder?;
        let mine = self.vgpus.get(&h)?.priority;
        let waiting = self
            .vgpus
            .values()
            .any(|e| e.state == VgpuState::Runnable && e.may_run() && e.priority > mine);
        waiting.then_some(h)
    }

    fn next_event(&self) -> Option<Nanos> {
        self.vgpus
            .values()
            .filter(|e| e.state == VgpuState::Runnable && !e.may_run())
            .filter_map(|e| e.budget.as_ref()?.next)
            .min()
    }

    fn serializes(&self) -> bool {
        self.mode == PriorityMode::Prt
    }

    fn apriori(&self, id: VgpuId) -> bool {
        self.vgpus.get(&id).is_some_and(|e| {
            e.budget
                .as_ref()
                .is_some_and(|b| b.reservation.mode == ReserveMode::Apriori)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: VgpuId = VgpuId(1);
    const B: VgpuId = VgpuId(2);
    const C: VgpuId = VgpuId(3);

    fn ms(n: u64) -> Nanos {
        Nanos::from_millis(n)
    }

    fn reservation(budget: u64, period: u64, mode: ReserveMode) -> Reservation {
        Reservation {
            budget: ms(budget),
            period: ms(period),
            mode,
        }
    }

    fn budget(p: &TimeGraph, id: VgpuId) -> Option<i64> {
        match p.stats(id).unwrap().standing {
            Standing::TimeGraph { budget, .. } => budget,
            other => panic!("unexpected standing {other:?}"),
        }
    }

    #[test]
    fn highest_priority_first_then_arrival_order() {
        let mut p = TimeGraph::new(PriorityMode::Prt, SliceConfig::default());
        for id in [A, B, C] {
            p.add(id, 1).unwrap();
        }
        p.set_priority(C, 5).unwrap();
        p.wake(B, Nanos::ZERO).unwrap();
        p.wake(A, Nanos::ZERO).unwrap();
        assert!(p.serializes());
        let g = p.pick(Nanos::ZERO).unwrap();
        assert_eq!(g.id, B, "first come first served among equals");
        assert_eq!(p.preempt(Nanos::ZERO), None);
        // C wakes: higher priority waits, so the holder is preempted.
        p.wake(C, ms(1)).unwrap();
        assert_eq!(p.preempt(ms(1)), Some(B));
        p.release(B, ms(1), ms(1)).unwrap();
        assert_eq!(p.pick(ms(1)).map(|g| g.id), Some(C));
        assert_eq!(p.preempt(ms(1)), None, "nothing above C");
        p.release(C, ms(1), ms(2)).unwrap();
        p.block(C, ms(2)).unwrap();
        // A has waited since before B's release.
        assert_eq!(p.pick(ms(2)).map(|g| g.id), Some(A));
    }

    #[test]
    fn posterior_enforcement_goes_negative_and_replenishes() {
        let mut p = TimeGraph::default();
        p.add(A, 1).unwrap();
        p.add(B, 1).unwrap();
        p.set_reservation(A, Some(reservation(4, 20, ReserveMode::Posterior)))
            .unwrap();
        p.wake(A, Nanos::ZERO).unwrap();
        let g = p.pick(Nanos::ZERO).unwrap();
        assert_eq!((g.id, g.slice), (A, ms(4)), "a grant is at most the budget");
        // It overran its budget by a long request: the budget goes negative.
        p.release(A, ms(9), ms(9)).unwrap();
        assert_eq!(budget(&p, A), Some(-5_000_000));
        assert_eq!(p.pick(ms(9)), None, "throttled although the GPU is idle");
        assert_eq!(p.next_event(), Some(ms(20)));
        // B, unreserved, runs meanwhile.
        p.wake(B, ms(10)).unwrap();
        assert_eq!(p.pick(ms(10)).map(|g| g.id), Some(B));
        p.release(B, ms(6), ms(16)).unwrap();
        p.block(B, ms(16)).unwrap();
        // One period: -5 + 4 = -1, still throttled; two: min(4, 3) = 3.
        assert_eq!(p.pick(ms(20)), None);
        assert_eq!(budget(&p, A), Some(-1_000_000));
        assert_eq!(p.next_event(), Some(ms(40)));
        let g = p.pick(ms(40)).unwrap();
        assert_eq!((g.id, g.slice), (A, ms(3)));
        assert!(matches!(
            p.stats(A).unwrap().standing,
            Standing::TimeGraph { throttled: 1, .. }
        ));
        // A budget that comes back while a lower-priority vGPU holds the
        // GPU preempts it at once.
        let mut q = TimeGraph::default();
        q.add(A, 1).unwrap();
        q.add(B, 1).unwrap();
        q.set_priority(A, 1).unwrap();
        q.set_reservation(A, Some(reservation(2, 10, ReserveMode::Posterior)))
            .unwrap();
        q.wake(A, Nanos::ZERO).unwrap();
        q.wake(B, Nanos::ZERO).unwrap();
        assert_eq!(q.pick(Nanos::ZERO).map(|g| g.id), Some(A));
        q.release(A, ms(2), ms(2)).unwrap();
        assert_eq!(q.pick(ms(2)).map(|g| g.id), Some(B));
        assert_eq!(q.preempt(ms(9)), None, "A's budget is used up");
        assert_eq!(q.next_event(), Some(ms(10)));
        assert_eq!(q.preempt(ms(10)), Some(B), "replenished at 10 ms");
        // Budgets never exceed C however long the idle time.
        p.release(A, ms(1), ms(41)).unwrap();
        p.block(A, ms(41)).unwrap();
        p.wake(A, ms(1000)).unwrap();
        assert_eq!(budget(&p, A), Some(4_000_000));
    }

    #[test]
    fn apriori_enforcement_waits_for_a_budget_that_covers_the_request() {
        let mut p = TimeGraph::default();
        p.add(A, 1).unwrap();
        p.set_reservation(A, Some(reservation(5, 10, ReserveMode::Apriori)))
            .unwrap();
        p.observe_cost(A, ms(2)).unwrap();
        p.wake(A, Nanos::ZERO).unwrap();
        let g = p.pick(Nanos::ZERO).unwrap();
        assert_eq!(g.slice, ms(5));
        assert!(p.apriori(A));
        // Two requests of 2 ms fit; 1 ms is left, less than the next.
        p.release(A, ms(4), ms(4)).unwrap();
        assert_eq!(budget(&p, A), Some(1_000_000));
        assert_eq!(p.pick(ms(4)), None);
        assert_eq!(p.next_event(), Some(ms(10)));
        // PE would have let it run on the 1 ms left.
        let mut pe = p.clone();
        pe.set_reservation(A, Some(reservation(5, 10, ReserveMode::Posterior)))
            .unwrap();
        assert!(pe.pick(ms(4)).is_some());
        // Replenished at 10 ms: min(5, 1 + 5) = 5.
        assert_eq!(p.pick(ms(10)).map(|g| g.slice), Some(ms(5)));
    }

    #[test]
    fn admission_control_and_bounds() {
        let mut p = TimeGraph::default();
        for id in [A, B, C] {
            p.add(id, 1).unwrap();
        }
        p.set_reservation(A, Some(reservation(6, 10, ReserveMode::Posterior)))
            .unwrap();
        p.set_reservation(B, Some(reservation(4, 10, ReserveMode::Apriori)))
            .unwrap();
        assert!((p.reserved_utilization() - 1.0).abs() < 1e-9);
        match p.set_reservation(C, Some(reservation(1, 10, ReserveMode::Posterior))) {
            Err(SchedError::Admission { id, total }) => {
                assert_eq!(id, C);
                assert!((total - 1.1).abs() < 1e-9);
            }
            other => panic!("admitted: {other:?}"),
        }
        // Replacing A's own reservation counts A once.
        p.set_reservation(A, Some(reservation(5, 10, ReserveMode::Posterior)))
            .unwrap();
        p.set_reservation(C, Some(reservation(1, 10, ReserveMode::Posterior)))
            .unwrap();
        assert_eq!(
            p.set_reservation(C, Some(reservation(11, 10, ReserveMode::Posterior))),
            Err(SchedError::Reservation {
                budget: ms(11),
                period: ms(10)
            })
        );
        p.set_reservation(C, None).unwrap();
        assert_eq!(p.settings(C), Some((0, None)));
        assert!(matches!(
            p.set_priority(VgpuId(9), 1),
            Err(SchedError::Unknown { .. })
        ));
    }
}
