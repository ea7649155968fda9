//! The Credit baselines of FairGV's evaluation (TPDS 2017, section 5.3):
//! Credit-poll, Credit-hs, and Pegasus's Strict co-scheduling.
//!
//! # What the paper says
//!
//! - "The implementation of Credit scheduling is adopted from the CPU
//!   scheduler of Xen." Credit-poll polls continuously; Credit-hs uses
//!   FairGV's hybrid spinning. "Both the Credit scheduler and the Strict
//!   coscheduler adopt simple time-sharing based on a time slice" — they have
//!   no per-request accounting: "they just allow a vGPU to run for a time
//!   slice, which causes a severe fairness problem for mixed workloads"
//!   (section 3.3.1; Fig. 11 shows it).
//! - Strict co-scheduling (Pegasus, Algorithms 1–2) is CPU-centric: when the
//!   CPU scheduler is about to run a vCPU whose VM has a runnable vGPU, it asks
//!   the GPU scheduler to switch to that vGPU; the GPU scheduler switches only
//!   if the target's credit is at least the maximum credit of the others, and
//!   otherwise keeps the current vGPU. A vGPU preempted this way goes to the
//!   tail of its priority list without having used its slice, which is why
//!   the paper finds the policy unfair for non-interactive work (Figs. 8–9).
//!
//! # Xen's credit scheduler, as modelled here
//!
//! - Every accounting period (30 ms, Xen's default) the GPU's worth of time
//!   for that period is shared among the *active* vGPUs in proportion to
//!   their weights (rounded up, as Xen does) and added to their credit.
//! - Credit is debited by the usage reported at release.
//! - A vGPU is active once it has been charged. At accounting, credit below
//!   minus one period's worth is raised to it; a vGPU whose credit exceeds one
//!   period's worth stops earning (inactive) and has its credit halved, until
//!   it is charged again.
//! - At accounting, priority becomes `Under` for credit ≥ 0 and `Over`
//!   below; between accountings a vGPU keeps its class even if it overdraws,
//!   as in Xen. The run queue is re-sorted then, and is otherwise ordered by
//!   priority class, first in first out within a class: a released
//!   or woken vGPU goes to the tail of its class, and `pick` takes the head.
//!   This is Xen's round robin among `Under`, then among `Over`; there is no
//!   sorting by credit value inside a class. Simultaneous wakes queue in the
//!   order the driver reports them (in id order, for a driver that scans).
//!
//! # Simplifications
//!
//! - Credits are GPU nanoseconds, not Xen's 10 credits per ms, and there is
//!   one run queue because there is one GPU (no load balancing or stealing).
//! - Accounting runs lazily at the first call after a period boundary; after
//!   a long silence at most four missed periods are applied (by then every
//!   credit sits at a bound). Debit happens at release rather than at Xen's
//!   10 ms ticks, which is equivalent while the slice is shorter than the
//!   period. The debit is exact (no tick sampling), so a vGPU preempted
//!   mid-slice pays for exactly the time it held.
//! - An overrun is debited in full at release (and counted in full in
//!   [`VgpuStats::charged`]), but Xen's lower bound forgives debt beyond one
//!   period at the next accounting.
//! - No `BOOST` priority for waking vGPUs: the paper's GPU baseline does not
//!   describe one.
//! - In the paper, *poll* versus *hs* is how the guest waits for the response
//!   ring (the CPU side). This crate schedules only the GPU, so the variants
//!   differ in the GPU-side counterpart that section 3.2.2 describes for the
//!   request ring: a Credit-poll vGPU never blocks (it keeps polling; a holder
//!   with nothing to issue keeps its lease until the slice's wall-clock end,
//!   and the GPU idles), a Credit-hs vGPU yields and blocks after its spin
//!   budget like FairGV's.
//! - The execution mode defaults to [`ExecutionMode::TimeShared`], the
//!   paper's "simple time-sharing": the lease is wall-clock and what is
//!   charged is the lease's length. [`CreditConfig::with_mode`] can select
//!   [`ExecutionMode::Collaborative`] to isolate the effect of accounting.
//! - Strict co-scheduling is Credit with the [`Policy::cosched_request`]
//!   check of Algorithm 2 against every other runnable vGPU and the holder;
//!   its vGPUs poll (Pegasus has no hybrid spinning). AugC is not modelled.
//!   No Credit variant sets [`Grant::wake_vcpu`]: none is GPU-centric. The
//!   CPU-side interference the paper measures under Strict co-scheduling
//!   (vCPU switching, CPU weights) is outside this crate.
//!
//! # Invariants
//!
//! - `pick` returns `Some` whenever nobody holds the GPU and someone is
//!   runnable; a Credit-poll or Strict vGPU, once woken, stays runnable.
//! - Credit never exceeds one period's worth (above it, it is halved and the
//!   vGPU stops earning); right after accounting no active vGPU's credit is
//!   below minus one period's worth.

use std::collections::BTreeMap;

use crate::config::{ConfigError, InteractivityConfig, SliceConfig};
use crate::interactivity::InteractivityDetector;
use crate::policy::{
    check_weight, CoschedReply, CreditPriority, ExecutionMode, Grant, IdleBehaviour, Monotonic,
    Policy, PolicyKind, SchedError, Standing, VgpuId, VgpuState, VgpuStats,
};
use crate::time::Nanos;

/// Missed accounting periods applied at once after a silence.
const MAX_CATCH_UP: u64 = 4;

/// Credit's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditConfig {
    slice: SliceConfig,
    period: Nanos,
    interactivity: InteractivityConfig,
    mode: ExecutionMode,
}

impl CreditConfig {
    /// Xen's accounting period.
    pub const PERIOD: Nanos = Nanos::from_millis(30);
    /// Shortest period accepted.
    pub const MIN_PERIOD: Nanos = Nanos::from_millis(1);
    /// Longest period accepted.
    pub const MAX_PERIOD: Nanos = Nanos::from_secs(10);

    /// A slice and an accounting period; time-shared execution, default
    /// interactivity thresholds.
    pub fn new(slice: SliceConfig, period: Nanos) -> Result<Self, ConfigError> {
        if !(Self::MIN_PERIOD..=Self::MAX_PERIOD).contains(&period) {
            return Err(ConfigError::Period {
                period,
                min: Self::MIN_PERIOD,
                max: Self::MAX_PERIOD,
            });
        }
        Ok(CreditConfig {
            slice,
            period,
            interactivity: InteractivityConfig::default(),
            mode: ExecutionMode::TimeShared,
        })
    }

    /// The same, with another execution mode.
    pub fn with_mode(self, mode: ExecutionMode) -> Self {
        CreditConfig { mode, ..self }
    }

    /// The same, with other interactivity thresholds.
    pub fn with_interactivity(self, interactivity: InteractivityConfig) -> Self {
        CreditConfig {
            interactivity,
            ..self
        }
    }

    /// The time slice.
    pub fn slice(&self) -> SliceConfig {
        self.slice
    }

    /// The accounting period.
    pub fn period(&self) -> Nanos {
        self.period
    }

    /// The interactivity thresholds.
    pub fn interactivity(&self) -> InteractivityConfig {
        self.interactivity
    }

    /// The execution mode.
    pub fn mode(&self) -> ExecutionMode {
        self.mode
    }
}

impl Default for CreditConfig {
    /// 6 ms slice (as FairGV's, so that comparisons differ only in policy),
    /// 30 ms accounting period, time-shared execution.
    fn default() -> Self {
        CreditConfig {
            slice: SliceConfig::default(),
            period: Self::PERIOD,
            interactivity: InteractivityConfig::default(),
            mode: ExecutionMode::TimeShared,
        }
    }
}

/// Which Credit baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditVariant {
    /// Credit-poll: vGPUs never block.
    Poll,
    /// Credit-hs: vGPUs block after their spin budget.
    HybridSpin,
    /// Pegasus's Strict co-scheduling: Credit plus CPU-centric switch requests.
    StrictCoSchedule,
}

#[derive(Debug, Clone)]
struct Entry {
    weight: u32,
    /// GPU nanoseconds; negative when overdrawn.
    credit: i64,
    priority: CreditPriority,
    active: bool,
    state: VgpuState,
    /// Position in its class while runnable.
    seq: u64,
    charged: Nanos,
    grants: u64,
    detector: InteractivityDetector,
}

impl Entry {
    fn priority_of(credit: i64) -> CreditPriority {
        if credit < 0 {
            CreditPriority::Over
        } else {
            CreditPriority::Under
        }
    }
}

/// A Xen-style credit scheduler in one of its [`CreditVariant`]s. See the
/// module documentation.
#[derive(Debug, Clone)]
pub struct Credit {
    variant: CreditVariant,
    config: CreditConfig,
    vgpus: BTreeMap<VgpuId, Entry>,
    /// Runnable vGPUs (not the holder): priority class, then arrival order.
    runq: BTreeMap<(CreditPriority, u64), VgpuId>,
    next_seq: u64,
    holder: Option<VgpuId>,
    last_holder: Option<VgpuId>,
    /// When the next accounting is due; set by the first time-bearing call.
    next_acct: Option<Nanos>,
    /// Strict co-scheduling: the target of an accepted request.
    pending: Option<VgpuId>,
    clock: Monotonic,
}

impl Credit {
    /// An empty scheduler of the given variant.
    pub fn new(variant: CreditVariant, config: CreditConfig) -> Self {
        Credit {
            variant,
            config,
            vgpus: BTreeMap::new(),
            runq: BTreeMap::new(),
            next_seq: 0,
            holder: None,
            last_holder: None,
            next_acct: None,
            pending: None,
            clock: Monotonic::default(),
        }
    }

    /// Credit-poll.
    pub fn poll(config: CreditConfig) -> Self {
        Self::new(CreditVariant::Poll, config)
    }

    /// Credit-hs.
    pub fn hybrid_spin(config: CreditConfig) -> Self {
        Self::new(CreditVariant::HybridSpin, config)
    }

    /// Strict co-scheduling (Pegasus).
    pub fn strict_coschedule(config: CreditConfig) -> Self {
        Self::new(CreditVariant::StrictCoSchedule, config)
    }

    /// The variant.
    pub fn variant(&self) -> CreditVariant {
        self.variant
    }

    /// The settings.
    pub fn config(&self) -> &CreditConfig {
        &self.config
    }

    fn entry_mut(&mut self, id: VgpuId) -> Result<&mut Entry, SchedError> {
        self.vgpus.get_mut(&id).ok_or(SchedError::Unknown { id })
    }

    /// One period's worth of GPU time, in credit.
    fn cap(&self) -> i64 {
        i64::try_from(self.config.period.as_nanos()).unwrap_or(i64::MAX)
    }

    /// Puts `id` (not queued) at the tail of its class.
    fn enqueue(&mut self, id: VgpuId) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(e) = self.vgpus.get_mut(&id) {
            e.seq = seq;
            e.state = VgpuState::Runnable;
            self.runq.insert((e.priority, seq), id);
        }
    }

    /// Runs the accounting periods that ended by `now`.
    fn tick(&mut self, now: Nanos) {
        let period = self.config.period;
        match self.next_acct {
            None => self.next_acct = Some(now + period),
            Some(due) if now >= due => {
                let missed = (now - due).as_nanos() / period.as_nanos() + 1;
                for _ in 0..missed.min(MAX_CATCH_UP) {
                    self.account();
                }
                let skip = Nanos(missed.saturating_mul(period.as_nanos()));
                self.next_acct = Some(due + skip);
            }
            Some(_) => {}
        }
    }

    /// Xen's `csched_acct`: share one period among the active vGPUs.
    fn account(&mut self) {
        let total_weight: u128 = self
            .vgpus
            .values()
            .filter(|e| e.active)
            .map(|e| u128::from(e.weight))
            .sum();
        if total_weight == 0 {
            return;
        }
        let cap = self.cap();
        let period = u128::from(self.config.period.as_nanos());
        for (&id, e) in self.vgpus.iter_mut().filter(|(_, e)| e.active) {
            let share = (period * u128::from(e.weight)).div_ceil(total_weight);
            let mut credit = e
                .credit
                .saturating_add(i64::try_from(share).unwrap_or(i64::MAX));
            if credit < -cap {
                credit = -cap;
            }
            if credit > cap {
                // Stops earning until charged again; keeps a head start.
                e.active = false;
                credit /= 2;
            }
            e.credit = credit;
            let priority = Entry::priority_of(credit);
            if priority != e.priority && e.state == VgpuState::Runnable {
                self.runq.remove(&(e.priority, e.seq));
                self.runq.insert((priority, e.seq), id);
            }
            e.priority = priority;
        }
    }

    /// Whether blocking is a no-op for this variant (continuous polling).
    fn polls(&self) -> bool {
        matches!(
            self.variant,
            CreditVariant::Poll | CreditVariant::StrictCoSchedule
        )
    }
}

impl Policy for Credit {
    fn kind(&self) -> PolicyKind {
        match self.variant {
            CreditVariant::Poll => PolicyKind::CreditPoll,
            CreditVariant::HybridSpin => PolicyKind::CreditHybridSpin,
            CreditVariant::StrictCoSchedule => PolicyKind::StrictCoSchedule,
        }
    }

    fn idle_behaviour(&self) -> IdleBehaviour {
        if self.polls() {
            IdleBehaviour::Poll
        } else {
            IdleBehaviour::Block
        }
    }

    fn execution_mode(&self) -> ExecutionMode {
        self.config.mode
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
                credit: 0,
                priority: CreditPriority::Under,
                active: false,
                state: VgpuState::Blocked,
                seq: 0,
                charged: Nanos::ZERO,
                grants: 0,
                detector: InteractivityDetector::new(self.config.interactivity),
            },
        );
        Ok(())
    }

    fn remove(&mut self, id: VgpuId) -> Result<(), SchedError> {
        let e = self.vgpus.remove(&id).ok_or(SchedError::Unknown { id })?;
        if e.state == VgpuState::Runnable {
            self.runq.remove(&(e.priority, e.seq));
        }
        for slot in [&mut self.holder, &mut self.last_holder, &mut self.pending] {
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
        self.tick(now);
        if self.entry_mut(id)?.state == VgpuState::Blocked {
            self.enqueue(id);
        }
        Ok(())
    }

    fn block(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        self.tick(now);
        let polls = self.polls();
        let e = self.entry_mut(id)?;
        match e.state {
            VgpuState::Running => Err(SchedError::Holding { id }),
            VgpuState::Blocked => Ok(()),
            // A polling vGPU never yields: it stays in the run queue.
            VgpuState::Runnable if polls => Ok(()),
            VgpuState::Runnable => {
                e.state = VgpuState::Blocked;
                let key = (e.priority, e.seq);
                self.runq.remove(&key);
                if self.pending == Some(id) {
                    self.pending = None;
                }
                Ok(())
            }
        }
    }

    fn pick(&mut self, now: Nanos) -> Option<Grant> {
        let now = self.clock.observe(now);
        self.tick(now);
        if self.holder.is_some() {
            return None;
        }
        let target = self.pending.take().filter(|t| {
            self.vgpus
                .get(t)
                .is_some_and(|e| e.state == VgpuState::Runnable)
        });
        let id = match target {
            Some(t) => t,
            None => *self.runq.first_key_value()?.1,
        };
        let slice = self.config.slice.slice();
        let e = self.vgpus.get_mut(&id)?;
        let key = (e.priority, e.seq);
        e.state = VgpuState::Running;
        e.grants += 1;
        self.runq.remove(&key);
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
        // Periods that ended before this instant are accounted first, with the
        // active set they had; the usage is debited at the release instant.
        self.tick(now);
        let e = self.entry_mut(id)?;
        let debit = i64::try_from(used.as_nanos()).unwrap_or(i64::MAX);
        e.credit = e.credit.saturating_sub(debit);
        e.active = true;
        e.charged += used;
        self.holder = None;
        self.last_holder = Some(id);
        self.enqueue(id);
        Ok(())
    }

    fn adjust(&mut self, id: VgpuId, correction: i64, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        self.tick(now);
        let e = self.entry_mut(id)?;
        e.credit = e.credit.saturating_sub(correction);
        e.charged = e.charged.saturating_add_signed(correction);
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
        let now = self.clock.observe(now);
        self.tick(now);
        let e = self.vgpus.get(&id).ok_or(SchedError::Unknown { id })?;
        if self.variant != CreditVariant::StrictCoSchedule || e.state != VgpuState::Runnable {
            return Ok(CoschedReply::Ignored);
        }
        // Pegasus Algorithm 2: switch only if the target's credit is at least
        // the maximum credit of the others (queued ones and the holder).
        let others_max = self
            .runq
            .values()
            .chain(self.holder.iter())
            .filter(|&&o| o != id)
            .filter_map(|o| self.vgpus.get(o))
            .map(|o| o.credit)
            .max();
        if others_max.is_some_and(|m| e.credit < m) {
            return Ok(CoschedReply::Keep);
        }
        self.pending = Some(id);
        Ok(CoschedReply::Switch {
            preempt: self.holder,
        })
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
            standing: Standing::Credit {
                credit: e.credit,
                priority: e.priority,
                active: e.active,
            },
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

    fn credit(p: &Credit, id: VgpuId) -> (i64, CreditPriority, bool) {
        match p.stats(id).unwrap().standing {
            Standing::Credit {
                credit,
                priority,
                active,
            } => (credit, priority, active),
            other => panic!("unexpected standing {other:?}"),
        }
    }

    fn three(variant: CreditVariant) -> Credit {
        let mut p = Credit::new(variant, CreditConfig::default());
        for (id, w) in [(A, 1), (B, 2), (C, 3)] {
            p.add(id, w).unwrap();
            p.wake(id, Nanos::ZERO).unwrap();
        }
        p
    }

    #[test]
    fn round_robin_in_wake_order_then_by_class() {
        let mut p = three(CreditVariant::HybridSpin);
        let mut now = Nanos::ZERO;
        let mut order = vec![];
        for _ in 0..3 {
            let g = p.pick(now).unwrap();
            order.push(g.id);
            now += ms(6);
            p.release(g.id, ms(6), now).unwrap();
        }
        assert_eq!(order, [A, B, C]);
        // All overdrawn by 6 ms and active; still Under until accounting.
        for id in [A, B, C] {
            assert_eq!(credit(&p, id), (-6_000_000, CreditPriority::Under, true));
        }
        // The 30 ms accounting shares 30 ms by weight 1:2:3 (5, 10, 15 ms).
        p.wake(A, ms(30)).unwrap(); // any call runs the accounting
        assert_eq!(credit(&p, A), (-1_000_000, CreditPriority::Over, true));
        assert_eq!(credit(&p, B), (4_000_000, CreditPriority::Under, true));
        assert_eq!(credit(&p, C), (9_000_000, CreditPriority::Under, true));
        // Under before Over; FIFO within Under (B was queued before C).
        assert_eq!(p.pick(ms(30)).unwrap().id, B);
    }

    #[test]
    fn adjust_corrects_the_last_charge() {
        let mut p = three(CreditVariant::HybridSpin);
        let g = p.pick(Nanos::ZERO).unwrap();
        assert_eq!(g.id, A);
        p.release(A, ms(5), ms(6)).unwrap();
        p.adjust(A, 1_500_000, ms(6)).unwrap();
        assert_eq!(credit(&p, A), (-6_500_000, CreditPriority::Under, true));
        assert_eq!(p.stats(A).unwrap().charged, Nanos(6_500_000));
        p.adjust(A, -2_000_000, ms(6)).unwrap();
        assert_eq!(credit(&p, A).0, -4_500_000);
        assert_eq!(p.stats(A).unwrap().charged, Nanos(4_500_000));
        assert_eq!(p.stats(A).unwrap().state, VgpuState::Runnable);
        assert!(p.adjust(VgpuId(9), 1, ms(6)).is_err());
    }

    #[test]
    fn credit_bounds_follow_xen() {
        let mut p = Credit::hybrid_spin(CreditConfig::default());
        p.add(A, 1).unwrap();
        p.add(B, 1).unwrap();
        p.wake(A, Nanos::ZERO).unwrap();
        p.wake(B, Nanos::ZERO).unwrap();
        // A runs a 200 ms kernel: charged in full at release. Nobody was
        // active during the periods it overlapped, so nobody earned. A stays
        // Under until the next accounting, behind B in the queue.
        assert_eq!(p.pick(Nanos::ZERO).unwrap().id, A);
        p.release(A, ms(200), ms(200)).unwrap();
        assert_eq!(credit(&p, A), (-200_000_000, CreditPriority::Under, true));
        // B runs, is charged 1 ms, then blocks.
        assert_eq!(p.pick(ms(200)).unwrap().id, B);
        p.release(B, ms(1), ms(201)).unwrap();
        p.block(B, ms(201)).unwrap();
        // Accountings at 210, 240, 270, 300 (A holds idle grants meanwhile):
        // A: -185 clamped to -30, then -15, 0, and +30 once it is alone.
        // B earns while blocked: 14, 29, 44 > 30: halved to 22, inactive.
        for at in [210, 240, 270, 300] {
            assert_eq!(p.pick(ms(at)).unwrap().id, A);
            p.release(A, Nanos::ZERO, ms(at)).unwrap();
        }
        assert_eq!(credit(&p, A), (30_000_000, CreditPriority::Under, true));
        assert_eq!(credit(&p, B), (22_000_000, CreditPriority::Under, false));
        // After a long silence at most four periods are applied: A ends
        // halved and inactive, not with ten seconds' worth of credit.
        p.pick(ms(10_300)).unwrap();
        let (a, _, active) = credit(&p, A);
        assert!(!active && a <= 30_000_000, "{a}");
    }

    #[test]
    fn poll_never_blocks_hybrid_spin_does() {
        let mut poll = three(CreditVariant::Poll);
        poll.block(A, ms(1)).unwrap();
        assert_eq!(poll.stats(A).unwrap().state, VgpuState::Runnable);
        assert_eq!(poll.idle_behaviour(), IdleBehaviour::Poll);
        assert_eq!(poll.execution_mode(), ExecutionMode::TimeShared);
        assert_eq!(poll.pick(ms(1)).unwrap().id, A);

        let mut hs = three(CreditVariant::HybridSpin);
        hs.block(A, ms(1)).unwrap();
        assert_eq!(hs.stats(A).unwrap().state, VgpuState::Blocked);
        assert_eq!(hs.idle_behaviour(), IdleBehaviour::Block);
        assert_eq!(hs.pick(ms(1)).unwrap().id, B);
        assert_eq!(hs.block(B, ms(1)), Err(SchedError::Holding { id: B }));
    }

    #[test]
    fn strict_switches_only_when_the_target_has_the_most_credit() {
        let mut p = three(CreditVariant::StrictCoSchedule);
        let mut now = Nanos::ZERO;
        for _ in 0..3 {
            let g = p.pick(now).unwrap();
            now += ms(6);
            p.release(g.id, ms(6), now).unwrap();
        }
        p.wake(A, ms(30)).unwrap(); // accounting: A -1 ms, B 4 ms, C 9 ms
        let g = p.pick(ms(30)).unwrap();
        assert_eq!(g.id, B);
        // A asks (its vCPU is scheduled): A has the least credit, B keeps it.
        assert_eq!(p.cosched_request(A, ms(31)), Ok(CoschedReply::Keep));
        // C asks: 9 ms ≥ max(B 4 ms, A -1 ms): B is preempted for C.
        assert_eq!(
            p.cosched_request(C, ms(31)),
            Ok(CoschedReply::Switch { preempt: Some(B) })
        );
        p.release(B, ms(1), ms(31)).unwrap();
        let g = p.pick(ms(31)).unwrap();
        assert_eq!((g.id, g.wake_vcpu), (C, false));
        // The holder asking again, or a blocked-free poller: ignored.
        assert_eq!(p.cosched_request(C, ms(32)), Ok(CoschedReply::Ignored));
        assert_eq!(
            p.cosched_request(VgpuId(9), ms(32)),
            Err(SchedError::Unknown { id: VgpuId(9) })
        );
        // Plain Credit ignores CPU requests.
        let mut q = three(CreditVariant::Poll);
        assert_eq!(q.cosched_request(C, ms(1)), Ok(CoschedReply::Ignored));
    }

    #[test]
    fn removal_and_errors() {
        let mut p = three(CreditVariant::HybridSpin);
        let g = p.pick(Nanos::ZERO).unwrap();
        assert_eq!(p.pick(Nanos::ZERO), None);
        assert_eq!(
            p.release(B, ms(1), ms(1)),
            Err(SchedError::NotHolder { id: B })
        );
        p.remove(g.id).unwrap();
        assert_eq!(p.holder(), None);
        assert_eq!(p.ids(), [B, C]);
        assert_eq!(p.set_weight(A, 2), Err(SchedError::Unknown { id: A }));
        assert_eq!(p.set_weight(B, 0), Err(SchedError::Weight { weight: 0 }));
        p.set_weight(B, 7).unwrap();
        assert_eq!(p.stats(B).unwrap().weight, 7);
        assert_eq!(p.pick(ms(1)).unwrap().id, B);
        assert!(CreditConfig::new(SliceConfig::default(), Nanos::from_micros(10)).is_err());
        let cfg = CreditConfig::new(SliceConfig::preemptive(), ms(60))
            .unwrap()
            .with_mode(ExecutionMode::Collaborative);
        assert_eq!(
            (cfg.slice().slice(), cfg.period(), cfg.mode()),
            (ms(30), ms(60), ExecutionMode::Collaborative)
        );
    }
}
