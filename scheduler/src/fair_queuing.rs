//! FairGV's fair queuing (TPDS 2017, sections 3.2–3.3).
//!
//! # What the paper specifies
//!
//! - Each vGPU has a weight `w`, a start tag `S` and a finish tag `F`. After
//!   its j-th quantum, in which it ran `L` (measured GPU time),
//!   `F = S + L / w`, and `S` becomes `F` (section 3.2.1).
//! - The runnable vGPU with the smallest start tag runs next; the scheduler
//!   keeps vGPUs in a red-black tree ordered by start tag and takes the
//!   leftmost node (section 4.2).
//! - The global virtual time `V` is the minimum start tag of the active
//!   vGPUs. A vGPU that unblocks gets `S = V`: it cannot claim GPU time for its
//!   idle period (Fig. 4).
//! - Work conservation by hybrid spinning (section 3.2.2): a holder that finds
//!   no request after its spin budget (100K spins in the prototype) yields and
//!   is marked blocked; a new request unblocks it.
//! - GPU-centric co-scheduling (section 3.2.3, Algorithms 3–4): when the GPU
//!   scheduler grants a vGPU that issues more than 10 synchronous calls per
//!   10 ms, it asks the CPU scheduler to wake that VM's vCPU.
//! - Collaborative non-preemptive scheduling (section 3.3.2): the holder
//!   measures its GPU usage and releases the GPU when the usage reaches the
//!   slice (6 ms on non-preemptive GPUs, 30 ms on preemptive ones). An
//!   overrunning kernel gets a correspondingly high start tag, so the vGPU is
//!   not picked again until the others catch up.
//!
//! # What this implementation chooses
//!
//! - Tags are [`VirtualTime`]: weighted nanoseconds in `u128` fixed point with
//!   32 fraction bits, so `L / w` never drifts the way floats would and never
//!   overflows in practice.
//! - The ordered set is a `BTreeSet<(S, id)>`: same `O(log n)` as the paper's
//!   red-black tree; equal start tags go to the smaller id (the paper's
//!   example schedules vGPU 1 first on a tie).
//! - A waking vGPU gets `S = max(S, V)` rather than exactly `V`: with `S = V`
//!   a vGPU whose last kernel overran far past the others could block briefly
//!   and have its debt forgiven. Sleeping still earns nothing.
//! - A *brief* block is not sleep: a vGPU that wakes within
//!   [`FairQueuingConfig::wake_grace`] of blocking keeps its start tag, with
//!   at most one slice of virtual time of lag (`S = max(S, V - slice)`). On a
//!   loaded host a holder's ring runs dry for a moment whenever its guest
//!   waits for the CPU after an answer; lifting it to `V` each time took
//!   from the heaviest vGPUs (those most often at the front, hence most
//!   often behind `V` when they block) up to a fifth of their share in the
//!   daemon's Fig. 8. A vGPU idle for longer is lifted to `V` as the paper
//!   says. Zero grace gives the paper's rule exactly.
//! - "Active" means runnable or running. When nobody is active, `V` keeps its
//!   last value, so `V` never decreases and a vGPU that ran alone for a long
//!   time is not overtaken by one that slept meanwhile.
//! - A newly added vGPU starts blocked with `S = 0`; its first wake lifts it
//!   to `V`.
//! - A weight change applies to charges from then on; tags already earned are
//!   not rescaled (as in start-time fair queuing).
//! - [`Grant::wake_vcpu`] is set on every grant to an interactive vGPU;
//!   [`Grant::switched`] tells the coordinator whether it was a context switch
//!   (Algorithm 3 runs at switches; waking a vCPU that already runs is
//!   harmless).
//!
//! # Invariants
//!
//! - `V` is non-decreasing; every runnable or running vGPU has
//!   `S ≥ V - slice` (`S ≥ V` unless it came back from a brief block),
//!   and while any is active with `S ≥ V`, `V` is the smallest such tag.
//! - `pick` returns `Some` whenever nobody holds the GPU and someone is
//!   runnable.
//! - Every released nanosecond is charged to the vGPU that reported it.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{InteractivityConfig, SliceConfig};
use crate::interactivity::InteractivityDetector;
use crate::policy::{
    check_weight, CoschedReply, ExecutionMode, Grant, IdleBehaviour, Monotonic, Policy, PolicyKind,
    SchedError, Standing, VgpuId, VgpuState, VgpuStats, VirtualTime,
};
use crate::time::Nanos;

/// Fair queuing's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FairQueuingConfig {
    /// The time slice (6 ms non-preemptive by default).
    pub slice: SliceConfig,
    /// When a vGPU counts as CPU–GPU interactive.
    pub interactivity: InteractivityConfig,
    /// Whether grants ask for the interactive holder's vCPU to be woken
    /// (GPU-centric co-scheduling). Off gives FairGV without co-scheduling.
    pub gpu_centric_cosched: bool,
    /// A vGPU that wakes within this long of blocking keeps its place
    /// (see the module documentation); zero lifts every waking vGPU to V.
    pub wake_grace: Nanos,
    /// Preemption on wake: a vGPU that woke during the current grant with
    /// a start tag below the holder's ends that grant at the holder's next
    /// request boundary, once the holder has held the GPU this long (so a
    /// holder that yielded while its guest thought does not lose the GPU
    /// for the rest of another's slice). `None`: slices are never cut
    /// short (the paper's non-preemptive slices).
    pub wake_preempt: Option<Nanos>,
}

impl Default for FairQueuingConfig {
    fn default() -> Self {
        FairQueuingConfig {
            slice: SliceConfig::default(),
            interactivity: InteractivityConfig::default(),
            gpu_centric_cosched: true,
            wake_grace: SliceConfig::NON_PREEMPTIVE,
            wake_preempt: None,
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    weight: u32,
    start: VirtualTime,
    finish: VirtualTime,
    state: VgpuState,
    charged: Nanos,
    grants: u64,
    detector: InteractivityDetector,
    /// When it last blocked; `None` before its first wake.
    blocked_at: Option<Nanos>,
    /// When it last woke.
    woke_at: Option<Nanos>,
}

/// FairGV's fair-queuing policy. See the module documentation.
#[derive(Debug, Clone)]
pub struct FairQueuing {
    config: FairQueuingConfig,
    vgpus: BTreeMap<VgpuId, Entry>,
    /// Runnable vGPUs (not the holder), keyed by start tag then id.
    runnable: BTreeSet<(VirtualTime, VgpuId)>,
    holder: Option<VgpuId>,
    last_holder: Option<VgpuId>,
    /// When the holder's grant was made.
    granted_at: Nanos,
    /// Global virtual time V.
    vtime: VirtualTime,
    clock: Monotonic,
}

impl Default for FairQueuing {
    fn default() -> Self {
        FairQueuing::new(FairQueuingConfig::default())
    }
}

impl FairQueuing {
    /// An empty scheduler.
    pub fn new(config: FairQueuingConfig) -> Self {
        FairQueuing {
            config,
            vgpus: BTreeMap::new(),
            runnable: BTreeSet::new(),
            holder: None,
            last_holder: None,
            granted_at: Nanos::ZERO,
            vtime: VirtualTime::ZERO,
            clock: Monotonic::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &FairQueuingConfig {
        &self.config
    }

    /// The global virtual time V.
    pub fn virtual_time(&self) -> VirtualTime {
        self.vtime
    }

    fn entry_mut(&mut self, id: VgpuId) -> Result<&mut Entry, SchedError> {
        self.vgpus.get_mut(&id).ok_or(SchedError::Unknown { id })
    }

    /// The smallest start tag among runnable and running vGPUs.
    fn active_min(&self) -> Option<VirtualTime> {
        let queued = self.runnable.first().map(|&(s, _)| s);
        let running = self
            .holder
            .and_then(|h| self.vgpus.get(&h))
            .map(|e| e.start);
        match (queued, running) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the front runnable vGPU may preempt the holder (see
    /// [`FairQueuingConfig::wake_preempt`]): it woke during the holder's
    /// grant with a start tag below the holder's, so it would have been
    /// picked had it been runnable then. `None` when it may not.
    fn wake_preempt_due(&self) -> Option<Nanos> {
        let min_hold = self.config.wake_preempt?;
        let holder = self.vgpus.get(&self.holder?)?;
        let &(tag, front) = self.runnable.first()?;
        let woke_during = self.vgpus[&front]
            .woke_at
            .is_some_and(|t| t >= self.granted_at);
        (woke_during && tag < holder.start).then(|| self.granted_at + min_hold)
    }

    /// Recomputes V after the active set or a start tag changed. V never
    /// decreases: a briefly blocked vGPU back below it does not pull it
    /// back.
    fn update_vtime(&mut self) {
        if let Some(min) = self.active_min() {
            self.vtime = self.vtime.max(min);
        }
    }
}

impl Policy for FairQueuing {
    fn kind(&self) -> PolicyKind {
        PolicyKind::FairQueuing
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
                start: VirtualTime::ZERO,
                finish: VirtualTime::ZERO,
                state: VgpuState::Blocked,
                charged: Nanos::ZERO,
                grants: 0,
                detector: InteractivityDetector::new(self.config.interactivity),
                blocked_at: None,
                woke_at: None,
            },
        );
        Ok(())
    }

    fn remove(&mut self, id: VgpuId) -> Result<(), SchedError> {
        let e = self.vgpus.remove(&id).ok_or(SchedError::Unknown { id })?;
        if e.state == VgpuState::Runnable {
            self.runnable.remove(&(e.start, id));
        }
        if self.holder == Some(id) {
            self.holder = None;
        }
        if self.last_holder == Some(id) {
            self.last_holder = None;
        }
        self.update_vtime();
        Ok(())
    }

    fn set_weight(&mut self, id: VgpuId, weight: u32) -> Result<(), SchedError> {
        let weight = check_weight(weight)?;
        self.entry_mut(id)?.weight = weight;
        Ok(())
    }

    fn wake(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        let vtime = self.vtime;
        let grace = self.config.wake_grace;
        let slice = self.config.slice.slice();
        let e = self.entry_mut(id)?;
        if e.state != VgpuState::Blocked {
            return Ok(());
        }
        let brief = e
            .blocked_at
            .is_some_and(|t| now.0.saturating_sub(t.0) < grace.0);
        // Sleeping earns nothing: catch up to V, keep any debt beyond it. A
        // brief block keeps the place, within one slice of V.
        let floor = if brief {
            vtime.saturating_sub(VirtualTime::charge(slice, 1))
        } else {
            vtime
        };
        e.start = e.start.max(floor);
        e.state = VgpuState::Runnable;
        e.woke_at = Some(now);
        let key = (e.start, id);
        self.runnable.insert(key);
        self.update_vtime();
        Ok(())
    }

    fn block(&mut self, id: VgpuId, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let now = self.clock.get().max(now);
        let e = self.entry_mut(id)?;
        match e.state {
            VgpuState::Blocked => return Ok(()),
            VgpuState::Running => return Err(SchedError::Holding { id }),
            VgpuState::Runnable => e.state = VgpuState::Blocked,
        }
        e.blocked_at = Some(now);
        let key = (e.start, id);
        self.runnable.remove(&key);
        self.update_vtime();
        Ok(())
    }

    fn pick(&mut self, now: Nanos) -> Option<Grant> {
        let now = self.clock.observe(now);
        if self.holder.is_some() {
            return None;
        }
        let (_, id) = self.runnable.pop_first()?;
        let slice = self.config.slice.slice();
        let cosched = self.config.gpu_centric_cosched;
        let e = self.vgpus.get_mut(&id)?;
        e.state = VgpuState::Running;
        e.grants += 1;
        let wake_vcpu = cosched && e.detector.is_interactive(now);
        self.holder = Some(id);
        self.granted_at = now;
        let switched = self.last_holder != Some(id);
        // The holder stays active with the same start tag: V is unchanged.
        Some(Grant {
            id,
            slice,
            wake_vcpu,
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
        let e = self.entry_mut(id)?;
        // F = S + L/w, all of L charged (overruns included); S := F.
        e.finish = e.start.saturating_add(VirtualTime::charge(used, e.weight));
        e.start = e.finish;
        e.charged += used;
        e.state = VgpuState::Runnable;
        let key = (e.start, id);
        self.runnable.insert(key);
        self.holder = None;
        self.last_holder = Some(id);
        self.update_vtime();
        Ok(())
    }

    fn adjust(&mut self, id: VgpuId, correction: i64, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let e = self.vgpus.get_mut(&id).ok_or(SchedError::Unknown { id })?;
        let queued = e.state == VgpuState::Runnable;
        if queued {
            self.runnable.remove(&(e.start, id));
        }
        e.start = e.start.corrected(correction, e.weight);
        e.finish = e.finish.corrected(correction, e.weight);
        e.charged = e.charged.saturating_add_signed(correction);
        if queued {
            self.runnable.insert((e.start, id));
        }
        self.update_vtime();
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
        // GPU-centric: the CPU scheduler does not steer the GPU.
        self.entry_mut(id).map(|_| CoschedReply::Ignored)
    }

    fn holder(&self) -> Option<VgpuId> {
        self.holder
    }

    fn preempt(&mut self, now: Nanos) -> Option<VgpuId> {
        let now = self.clock.observe(now);
        let due = self.wake_preempt_due()?;
        (now >= due).then_some(self.holder?)
    }

    fn next_event(&self) -> Option<Nanos> {
        // A waker that may preempt once the holder's minimum hold ends.
        self.wake_preempt_due()
            .filter(|&due| due > self.clock.get())
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
            standing: Standing::Fair {
                start: e.start,
                finish: e.finish,
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

    fn start(p: &FairQueuing, id: VgpuId) -> VirtualTime {
        match p.stats(id).unwrap().standing {
            Standing::Fair { start, .. } => start,
            other => panic!("unexpected standing {other:?}"),
        }
    }

    fn vt_ms(n: u64) -> VirtualTime {
        VirtualTime::charge(ms(n), 1)
    }

    /// Runs the holder for `used` and returns who it was.
    fn run(p: &mut FairQueuing, now: &mut Nanos, used: Nanos) -> VgpuId {
        let g = p.pick(*now).expect("someone is runnable");
        *now += used;
        p.release(g.id, used, *now).unwrap();
        g.id
    }

    /// FairGV Fig. 4: weights 1 and 2, 10 ms quanta; vGPU 1 blocks at 70 and
    /// wakes at 105 with its start tag forced up to V = 35.
    #[test]
    fn paper_figure_4() {
        let mut p = FairQueuing::default();
        p.add(A, 1).unwrap();
        p.add(B, 2).unwrap();
        let mut now = Nanos::ZERO;
        p.wake(A, now).unwrap();
        p.wake(B, now).unwrap();
        let order: Vec<_> = (0..7).map(|_| run(&mut p, &mut now, ms(10))).collect();
        assert_eq!(order, [A, B, B, A, B, B, A]);
        assert_eq!(start(&p, A), vt_ms(30));
        assert_eq!(start(&p, B), vt_ms(20));
        assert_eq!(now, ms(70));
        p.block(A, now).unwrap();
        for _ in 0..3 {
            assert_eq!(run(&mut p, &mut now, ms(10)), B);
        }
        // B runs 100..110; A wakes at 105 while B's start tag is 35.
        let g = p.pick(now).unwrap();
        assert_eq!(g.id, B);
        assert_eq!(p.virtual_time(), vt_ms(35));
        p.wake(A, ms(105)).unwrap();
        assert_eq!(start(&p, A), vt_ms(35));
        p.release(B, ms(10), ms(110)).unwrap();
        assert_eq!(p.pick(ms(110)).unwrap().id, A);
    }

    #[test]
    fn sleeping_earns_nothing_but_debt_survives_sleep() {
        let mut p = FairQueuing::default();
        for id in [A, B, C] {
            p.add(id, 1).unwrap();
        }
        let mut now = Nanos::ZERO;
        p.wake(A, now).unwrap();
        p.wake(B, now).unwrap();
        for _ in 0..100 {
            run(&mut p, &mut now, ms(6));
        }
        // C wakes late: it starts at V, not at 0.
        p.wake(C, now).unwrap();
        assert_eq!(start(&p, C), p.virtual_time());
        // C overruns hugely (its first grant comes after A's and B's, which
        // tie with it), blocks, wakes right away: the debt stays.
        loop {
            let g = p.pick(now).unwrap();
            let used = if g.id == C { ms(500) } else { ms(6) };
            now += used;
            p.release(g.id, used, now).unwrap();
            if g.id == C {
                break;
            }
        }
        p.block(C, now).unwrap();
        p.wake(C, now).unwrap();
        assert!(start(&p, C) > p.virtual_time().saturating_add(vt_ms(400)));
        // So A and B run until they catch up (~500 ms each at 6 ms grants).
        let mut others = 0;
        while run(&mut p, &mut now, ms(6)) != C {
            others += 1;
        }
        assert!((160..=170).contains(&others), "{others}");
    }

    #[test]
    fn weight_change_applies_to_future_charges() {
        let mut p = FairQueuing::default();
        p.add(A, 1).unwrap();
        let mut now = Nanos::ZERO;
        p.wake(A, now).unwrap();
        run(&mut p, &mut now, ms(6));
        assert_eq!(start(&p, A), vt_ms(6));
        p.set_weight(A, 3).unwrap();
        assert_eq!(start(&p, A), vt_ms(6));
        run(&mut p, &mut now, ms(6));
        assert_eq!(start(&p, A), vt_ms(8));
        assert_eq!(p.stats(A).unwrap().weight, 3);
        assert_eq!(p.stats(A).unwrap().charged, ms(12));
    }

    /// A release charged an estimate, corrected once the measurement is in:
    /// the tags and totals end as if the measured time had been released,
    /// and the order follows the corrected tag.
    #[test]
    fn an_estimated_release_is_corrected_by_adjust() {
        let mut p = FairQueuing::default();
        p.add(A, 2).unwrap();
        p.add(B, 1).unwrap();
        let mut now = Nanos::ZERO;
        p.wake(A, now).unwrap();
        p.wake(B, now).unwrap();
        assert_eq!(p.pick(now).unwrap().id, A);
        now += ms(6);
        // Released with 5 ms (its estimate); B is granted meanwhile.
        p.release(A, ms(5), now).unwrap();
        assert_eq!(start(&p, A), VirtualTime::charge(ms(5), 2));
        assert_eq!(p.pick(now).unwrap().id, B);
        // A reports 7 ms: 2 ms more, at weight 2.
        p.adjust(A, 2_000_000, now).unwrap();
        assert_eq!(start(&p, A), VirtualTime::charge(ms(7), 2));
        assert_eq!(p.stats(A).unwrap().charged, ms(7));
        assert_eq!(p.stats(A).unwrap().state, VgpuState::Runnable);
        now += ms(3);
        p.release(B, ms(3), now).unwrap();
        // A at 3.5 ms of virtual time, B at 3 ms: B goes first.
        assert_eq!(p.pick(now).unwrap().id, B);
        now += ms(1);
        p.release(B, ms(1), now).unwrap();
        // A too little: taken back, A now at 2.5 ms and first.
        p.adjust(A, -2_000_000, now).unwrap();
        assert_eq!(start(&p, A), VirtualTime::charge(ms(5), 2));
        assert_eq!(p.stats(A).unwrap().charged, ms(5));
        assert_eq!(p.pick(now).unwrap().id, A);
        assert_eq!(p.adjust(C, 1, now), Err(SchedError::Unknown { id: C }));
    }

    #[test]
    fn one_grant_at_a_time_and_protocol_errors() {
        let mut p = FairQueuing::default();
        assert_eq!(p.pick(Nanos::ZERO), None);
        p.add(A, 1).unwrap();
        assert_eq!(p.add(A, 1), Err(SchedError::Duplicate { id: A }));
        assert_eq!(p.add(B, 0), Err(SchedError::Weight { weight: 0 }));
        assert_eq!(
            p.set_weight(A, 10_001),
            Err(SchedError::Weight { weight: 10_001 })
        );
        assert_eq!(p.wake(B, Nanos::ZERO), Err(SchedError::Unknown { id: B }));
        p.add(B, 1).unwrap();
        // Added vGPUs are blocked: nobody to pick.
        assert_eq!(p.pick(Nanos::ZERO), None);
        p.wake(A, Nanos::ZERO).unwrap();
        p.wake(B, Nanos::ZERO).unwrap();
        p.wake(B, Nanos::ZERO).unwrap(); // idempotent
        let g = p.pick(Nanos::ZERO).unwrap();
        assert_eq!(
            g,
            Grant {
                id: A,
                slice: ms(6),
                wake_vcpu: false,
                switched: true
            }
        );
        assert_eq!(p.holder(), Some(A));
        assert_eq!(p.pick(Nanos::ZERO), None, "a grant is outstanding");
        assert_eq!(p.block(A, ms(1)), Err(SchedError::Holding { id: A }));
        assert_eq!(
            p.release(B, ms(1), ms(1)),
            Err(SchedError::NotHolder { id: B })
        );
        p.release(A, ms(1), ms(1)).unwrap();
        p.block(A, ms(1)).unwrap();
        p.block(A, ms(1)).unwrap(); // idempotent
        assert_eq!(p.stats(A).unwrap().state, VgpuState::Blocked);
        let g = p.pick(ms(1)).unwrap();
        assert_eq!((g.id, g.switched), (B, true));
        p.release(B, ms(6), ms(7)).unwrap();
        assert!(!p.pick(ms(7)).unwrap().switched, "B again");
        // Removing the holder frees the GPU.
        p.remove(B).unwrap();
        assert_eq!(p.holder(), None);
        assert_eq!(p.ids(), [A]);
        assert_eq!(p.remove(B), Err(SchedError::Unknown { id: B }));
        assert_eq!(p.pick(ms(7)), None);
        assert_eq!(p.cosched_request(A, ms(7)), Ok(CoschedReply::Ignored));
    }

    #[test]
    fn interactive_holders_get_their_vcpu_woken() {
        let mut p = FairQueuing::default();
        p.add(A, 1).unwrap();
        p.add(B, 1).unwrap();
        p.wake(A, Nanos::ZERO).unwrap();
        p.wake(B, Nanos::ZERO).unwrap();
        // A: 20 sync calls in 2 ms (SRD1-like). B: 1.
        for i in 0..20 {
            p.record_sync_call(A, Nanos::from_micros(100 * i)).unwrap();
        }
        p.record_sync_call(B, ms(1)).unwrap();
        assert!(p.is_interactive(A, ms(2)));
        assert!(!p.is_interactive(B, ms(2)));
        assert!(!p.is_interactive(C, ms(2)));
        let g = p.pick(ms(2)).unwrap();
        assert_eq!((g.id, g.wake_vcpu), (A, true));
        p.release(A, ms(6), ms(8)).unwrap();
        let g = p.pick(ms(8)).unwrap();
        assert_eq!((g.id, g.wake_vcpu), (B, false));
        p.release(B, ms(6), ms(14)).unwrap();
        // A's burst is over 10 ms later: no more wake-ups.
        let g = p.pick(ms(14)).unwrap();
        assert_eq!((g.id, g.wake_vcpu), (A, false));

        // Co-scheduling off: never asks.
        let mut q = FairQueuing::new(FairQueuingConfig {
            gpu_centric_cosched: false,
            ..FairQueuingConfig::default()
        });
        q.add(A, 1).unwrap();
        q.wake(A, Nanos::ZERO).unwrap();
        for i in 0..20 {
            q.record_sync_call(A, Nanos::from_micros(i)).unwrap();
        }
        assert!(q.is_interactive(A, ms(1)));
        assert!(!q.pick(ms(1)).unwrap().wake_vcpu);
    }

    #[test]
    fn a_brief_block_keeps_the_place_a_long_one_does_not() {
        let mut p = FairQueuing::default();
        for (id, w) in [(A, 1), (B, 1), (C, 3)] {
            p.add(id, w).unwrap();
            p.wake(id, Nanos::ZERO).unwrap();
        }
        let mut now = Nanos::ZERO;
        // C (weight 3) runs first and so is behind the others' tags.
        loop {
            if run(&mut p, &mut now, ms(6)) == C {
                break;
            }
        }
        // Its ring runs dry for 1 ms: it blocks and comes back.
        let before = start(&p, C);
        p.block(C, now).unwrap();
        now += ms(1);
        p.wake(C, now).unwrap();
        assert_eq!(start(&p, C), before, "a brief block lost C's place");
        assert!(before < p.virtual_time());
        // Sleeping longer than the grace: lifted to V.
        let g = p.pick(now).unwrap();
        assert_eq!(g.id, C, "C is the furthest behind");
        now += ms(6);
        p.release(C, ms(6), now).unwrap();
        p.block(C, now).unwrap();
        now += ms(50);
        for _ in 0..10 {
            run(&mut p, &mut now, ms(6));
        }
        p.wake(C, now).unwrap();
        assert_eq!(start(&p, C), p.virtual_time());

        // With no grace, the paper's rule: every wake lifts to V.
        let mut q = FairQueuing::new(FairQueuingConfig {
            wake_grace: Nanos::ZERO,
            ..FairQueuingConfig::default()
        });
        for (id, w) in [(A, 1), (C, 3)] {
            q.add(id, w).unwrap();
            q.wake(id, Nanos::ZERO).unwrap();
        }
        let mut now = Nanos::ZERO;
        run(&mut q, &mut now, ms(6));
        run(&mut q, &mut now, ms(6));
        q.block(C, now).unwrap();
        q.wake(C, now + ms(1)).unwrap();
        assert_eq!(start(&q, C), q.virtual_time());
    }

    #[test]
    fn preemptive_slice() {
        let mut p = FairQueuing::new(FairQueuingConfig {
            slice: SliceConfig::preemptive(),
            ..FairQueuingConfig::default()
        });
        p.add(A, 1).unwrap();
        p.wake(A, Nanos::ZERO).unwrap();
        assert_eq!(p.pick(Nanos::ZERO).unwrap().slice, ms(30));
    }

    /// A holder that yielded while its guest thought comes back before the
    /// next holder's slice ends: with `wake_preempt` its smaller start tag
    /// ends that grant once the minimum hold is over; without, it waits.
    #[test]
    fn a_brief_sleeper_preempts_after_the_minimum_hold() {
        for preempt in [None, Some(ms(1))] {
            let mut p = FairQueuing::new(FairQueuingConfig {
                wake_preempt: preempt,
                ..FairQueuingConfig::default()
            });
            p.add(A, 1).unwrap();
            p.add(B, 1).unwrap();
            let mut now = Nanos::ZERO;
            p.wake(A, now).unwrap();
            p.wake(B, now).unwrap();
            // A runs briefly and blocks (its guest thinks); B is granted.
            assert_eq!(run(&mut p, &mut now, Nanos::from_micros(200)), A);
            p.block(A, now).unwrap();
            assert_eq!(p.pick(now).unwrap().id, B);
            assert_eq!(p.preempt(now), None, "nobody waits");
            // A wakes 300 us later: its start tag (0.2 ms) is above B's
            // (0), so it may not preempt.
            now += Nanos::from_micros(300);
            p.wake(A, now).unwrap();
            assert_eq!(p.preempt(now), None, "A's tag is above B's");
            assert_eq!(p.next_event(), None);
            // B runs 2 ms, releases; A (0.2) runs 100 us and blocks; B (2.0)
            // is granted; A wakes with 0.3 < 2.0.
            now += ms(2);
            p.release(B, ms(2), now).unwrap();
            assert_eq!(run(&mut p, &mut now, Nanos::from_micros(100)), A);
            p.block(A, now).unwrap();
            let granted = now;
            assert_eq!(p.pick(now).unwrap().id, B);
            now += Nanos::from_micros(400);
            p.wake(A, now).unwrap();
            match preempt {
                None => {
                    assert_eq!(p.preempt(now), None);
                    assert_eq!(p.preempt(now + ms(5)), None, "slices are not cut short");
                    assert_eq!(p.next_event(), None);
                }
                Some(hold) => {
                    assert_eq!(p.preempt(now), None, "within B's minimum hold");
                    assert_eq!(p.next_event(), Some(granted + hold));
                    assert_eq!(p.preempt(granted + hold), Some(B));
                    now = granted + hold;
                    p.release(B, hold, now).unwrap();
                    assert_eq!(p.pick(now).unwrap().id, A, "the waker is next");
                }
            }
        }
    }

    /// VMs that never block never preempt each other: the slice holds.
    #[test]
    fn saturating_vgpus_keep_their_slices_under_wake_preempt() {
        let mut p = FairQueuing::new(FairQueuingConfig {
            wake_preempt: Some(Nanos::ZERO),
            ..FairQueuingConfig::default()
        });
        p.add(A, 1).unwrap();
        p.add(B, 3).unwrap();
        let mut now = Nanos::ZERO;
        p.wake(A, now).unwrap();
        p.wake(B, now).unwrap();
        for _ in 0..20 {
            let g = p.pick(now).unwrap();
            for step in 0..6 {
                assert_eq!(p.preempt(now + ms(step)), None);
            }
            now += ms(6);
            p.release(g.id, ms(6), now).unwrap();
        }
    }
}
