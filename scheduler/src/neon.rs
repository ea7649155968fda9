//! NEON's token-based schedulers (Menychtas, Shen and Scott, ASPLOS 2014,
//! sections 3.1 and 3.2): Timeslice with overuse control, and its
//! disengaged variant.
//!
//! # What the paper says
//!
//! - A token that permits access to the GPU passes among the active tasks;
//!   only the holder submits. Requests that overrun the end of a timeslice
//!   are charged to the holder: at the end of the slice the scheduler
//!   waits for its outstanding requests and charges the excess as
//!   *overuse*. "When a task's accrued overuse exceeds a full timeslice, we
//!   skip the task's next turn to hold the token, and subtract a timeslice
//!   from its accrued overuse."
//! - *Disengaged* Timeslice intercepts nothing inside a slice: the holder
//!   has direct access; the scheduler re-engages at the slice's end, waits
//!   for the holder's pending requests, and charges the overrun.
//! - A request that runs past a limit gets its task killed (here: the
//!   daemon's runaway guard, `max_request_ms`, which ends the VM's worker).
//!
//! # As modelled here
//!
//! - The token visits runnable vGPUs round robin, in the order they became
//!   runnable. A holder's slice is the configured slice times its weight
//!   over the smallest weight registered (equal weights: equal slices), at
//!   most [`SliceConfig::MAX`]; the paper has no weights.
//! - Overuse is what a release reports beyond the holder's slice. At its
//!   turn, a vGPU whose overuse is at least its slice skips the turn (goes
//!   to the back of the ring) and pays one slice. Skipping never idles the
//!   GPU: if every waiting vGPU owes a turn, they pay in ring order until
//!   one may run.
//! - A busy holder that hands the token back before its slice is over
//!   keeps the unused part as *credit*: its next slice is longer by it
//!   (at most [`CREDIT_SLICES`] slices more). NEON's holder keeps the
//!   token for the whole slice; ours releases early when its measurement
//!   predicts that no further request fits (`sampled` predicts from
//!   synchronised samples, which run slower than the requests issued back
//!   to back after them), and without the credit a VM of short requests
//!   would lose that part of every slice to one whose requests overrun
//!   (47 % against 53 % for 200 µs against 1.6 ms requests on SimGpu; on
//!   a GPU, whose round trips weigh more on 19 µs requests, 33 % against
//!   67 %). The unused part is the slice less the larger of the time
//!   used and the wall-clock time held: a holder that kept the token for
//!   its whole slice (an interactive VM that used little of it) had its
//!   turn, as in NEON. A holder that blocks forfeits its credit, as an
//!   idle holder forfeits its slice in NEON.
//! - The engaged variant is [`ExecutionMode::Collaborative`]: the holder
//!   measures its requests (the daemon's `accounting`). The disengaged
//!   variant is [`ExecutionMode::Disengaged`]: the holder has a lease,
//!   revoked at the slice's wall-clock end when another vGPU waits; it
//!   drains and reports the wall-clock time it held the lease, so the
//!   drain is its overuse.
//! - A holder keeps the token for its whole slice, as NEON's does ("not
//!   work-conserving"), once it has issued work in it
//!   ([`IdleBehaviour::Hold`]): a VM that sleeps between its requests
//!   keeps its turn and the GPU idles meanwhile. Passing the token after
//!   the spin budget instead (as FairGV's holders do) leaves a VM whose
//!   gaps outlast the budget one request per turn (in the scheduler's
//!   model, 1 % of the device against 25 % held for a VM busy half its
//!   time beside a busy one, where NEON's criterion of fairness is a
//!   slowdown of at most about 2). A holder that issued nothing in its
//!   grant is not active: it passes the token after the spin budget and
//!   blocks.
//!
//! # Invariants
//!
//! - At most one grant is outstanding; `pick` answers whenever nobody holds
//!   the GPU and someone is runnable.
//! - Every nanosecond released is charged; overuse only grows by what a
//!   release reports beyond the slice and only shrinks by whole slices, one
//!   per skipped turn.
//! - Credit is at most [`CREDIT_SLICES`] slices, only comes from a release
//!   under its grant, and is gone once the vGPU blocks or is granted
//!   again.

use std::collections::{BTreeMap, VecDeque};

use crate::config::{InteractivityConfig, SliceConfig};
use crate::interactivity::InteractivityDetector;
use crate::policy::{
    check_weight, CoschedReply, ExecutionMode, Grant, IdleBehaviour, Monotonic, Policy, PolicyKind,
    SchedError, Standing, VgpuId, VgpuState, VgpuStats,
};
use crate::time::Nanos;

/// The most credit a holder carries to its next slice, in slices: enough
/// for a holder that fills a quarter of each grant to fill a slice.
pub const CREDIT_SLICES: u64 = 3;

/// Which of NEON's timeslice schedulers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimesliceVariant {
    /// Timeslice with overuse control: the holder's requests are measured.
    Engaged,
    /// Disengaged Timeslice: the holder has a lease; the drain at the
    /// slice's end is measured.
    Disengaged,
}

#[derive(Debug, Clone)]
struct Entry {
    weight: u32,
    state: VgpuState,
    overuse: Nanos,
    skipped: u64,
    charged: Nanos,
    grants: u64,
    /// The slice of its last grant (what its release is compared with).
    granted: Nanos,
    /// What its last release left of its grant, added to its next slice.
    credit: Nanos,
    /// When its last grant began.
    since: Nanos,
    detector: InteractivityDetector,
}

/// NEON's Timeslice with overuse control, engaged or disengaged. See the
/// module documentation.
#[derive(Debug, Clone)]
pub struct Timeslice {
    variant: TimesliceVariant,
    slice: SliceConfig,
    vgpus: BTreeMap<VgpuId, Entry>,
    /// Runnable vGPUs (not the holder), in token order.
    ring: VecDeque<VgpuId>,
    holder: Option<VgpuId>,
    last_holder: Option<VgpuId>,
    clock: Monotonic,
}

impl Timeslice {
    /// An empty scheduler.
    pub fn new(variant: TimesliceVariant, slice: SliceConfig) -> Self {
        Timeslice {
            variant,
            slice,
            vgpus: BTreeMap::new(),
            ring: VecDeque::new(),
            holder: None,
            last_holder: None,
            clock: Monotonic::default(),
        }
    }

    /// The variant.
    pub fn variant(&self) -> TimesliceVariant {
        self.variant
    }

    /// `id`'s slice: the base slice scaled by its weight over the smallest.
    pub fn slice_of(&self, id: VgpuId) -> Option<Nanos> {
        let w = self.vgpus.get(&id)?.weight;
        let min = self.vgpus.values().map(|e| e.weight).min().unwrap_or(w);
        let base = u128::from(self.slice.slice().as_nanos());
        let ns = base * u128::from(w) / u128::from(min.max(1));
        Some(Nanos(u64::try_from(ns).unwrap_or(u64::MAX)).min(SliceConfig::MAX))
    }

    fn entry_mut(&mut self, id: VgpuId) -> Result<&mut Entry, SchedError> {
        self.vgpus.get_mut(&id).ok_or(SchedError::Unknown { id })
    }
}

impl Default for Timeslice {
    /// Engaged, with FairGV's non-preemptive slice.
    fn default() -> Self {
        Timeslice::new(TimesliceVariant::Engaged, SliceConfig::default())
    }
}

impl Policy for Timeslice {
    fn kind(&self) -> PolicyKind {
        match self.variant {
            TimesliceVariant::Engaged => PolicyKind::NeonTimeslice,
            TimesliceVariant::Disengaged => PolicyKind::NeonDisengaged,
        }
    }

    fn idle_behaviour(&self) -> IdleBehaviour {
        IdleBehaviour::Hold
    }

    fn execution_mode(&self) -> ExecutionMode {
        match self.variant {
            TimesliceVariant::Engaged => ExecutionMode::Collaborative,
            TimesliceVariant::Disengaged => ExecutionMode::Disengaged,
        }
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
                overuse: Nanos::ZERO,
                skipped: 0,
                charged: Nanos::ZERO,
                grants: 0,
                granted: Nanos::ZERO,
                credit: Nanos::ZERO,
                since: Nanos::ZERO,
                detector: InteractivityDetector::new(InteractivityConfig::default()),
            },
        );
        Ok(())
    }

    fn remove(&mut self, id: VgpuId) -> Result<(), SchedError> {
        self.vgpus.remove(&id).ok_or(SchedError::Unknown { id })?;
        self.ring.retain(|&r| r != id);
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
        self.clock.observe(now);
        let e = self.entry_mut(id)?;
        if e.state == VgpuState::Blocked {
            e.state = VgpuState::Runnable;
            self.ring.push_back(id);
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
                e.credit = Nanos::ZERO;
                self.ring.retain(|&r| r != id);
                Ok(())
            }
        }
    }

    fn pick(&mut self, now: Nanos) -> Option<Grant> {
        let now = self.clock.observe(now);
        if self.holder.is_some() || self.ring.is_empty() {
            return None;
        }
        // Each skip pays one slice of overuse, so this ends; it is bounded
        // anyway, by the turns needed to pay every debt in the ring.
        loop {
            let id = self.ring.pop_front()?;
            let slice = self.slice_of(id)?;
            let e = self.vgpus.get_mut(&id)?;
            if e.overuse >= slice && slice > Nanos::ZERO {
                e.overuse = e.overuse.saturating_sub(slice);
                e.skipped += 1;
                self.ring.push_back(id);
                continue;
            }
            let slice = slice
                .saturating_add(std::mem::take(&mut e.credit).min(credit_cap(slice)))
                .min(SliceConfig::MAX);
            e.since = now;
            e.state = VgpuState::Running;
            e.grants += 1;
            e.granted = slice;
            self.holder = Some(id);
            let switched = self.last_holder != Some(id);
            return Some(Grant {
                id,
                slice,
                wake_vcpu: false,
                switched,
            });
        }
    }

    fn release(&mut self, id: VgpuId, used: Nanos, now: Nanos) -> Result<(), SchedError> {
        let now = self.clock.observe(now);
        if !self.vgpus.contains_key(&id) {
            return Err(SchedError::Unknown { id });
        }
        if self.holder != Some(id) {
            return Err(SchedError::NotHolder { id });
        }
        let slice = self.slice_of(id).ok_or(SchedError::Unknown { id })?;
        let e = self.entry_mut(id)?;
        e.charged += used;
        e.overuse += used.saturating_sub(e.granted);
        let held = now.saturating_sub(e.since);
        e.credit = e
            .granted
            .saturating_sub(used.max(held))
            .min(credit_cap(slice));
        e.state = VgpuState::Runnable;
        self.holder = None;
        self.last_holder = Some(id);
        self.ring.push_back(id);
        Ok(())
    }

    fn adjust(&mut self, id: VgpuId, correction: i64, now: Nanos) -> Result<(), SchedError> {
        self.clock.observe(now);
        let slice = self.slice_of(id).ok_or(SchedError::Unknown { id })?;
        let e = self.entry_mut(id)?;
        e.charged = e.charged.saturating_add_signed(correction);
        // As if the release had reported it: more use spends the credit
        // before it counts as overuse; less gives back overuse first.
        let c = Nanos(correction.unsigned_abs());
        if correction >= 0 {
            let spent = c.min(e.credit);
            e.credit = e.credit.saturating_sub(spent);
            e.overuse = e.overuse.saturating_add(c.saturating_sub(spent));
        } else {
            let back = c.min(e.overuse);
            e.overuse = e.overuse.saturating_sub(back);
            if e.state != VgpuState::Blocked {
                e.credit = e
                    .credit
                    .saturating_add(c.saturating_sub(back))
                    .min(credit_cap(slice));
            }
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
            standing: Standing::Timeslice {
                overuse: e.overuse,
                skipped: e.skipped,
                credit: e.credit,
            },
        })
    }
}

/// The most credit a holder of `slice` carries.
fn credit_cap(slice: Nanos) -> Nanos {
    Nanos(slice.as_nanos().saturating_mul(CREDIT_SLICES))
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

    fn overuse(p: &Timeslice, id: VgpuId) -> (Nanos, u64) {
        match p.stats(id).unwrap().standing {
            Standing::Timeslice {
                overuse, skipped, ..
            } => (overuse, skipped),
            other => panic!("unexpected standing {other:?}"),
        }
    }

    fn busy(ids: &[VgpuId]) -> Timeslice {
        let mut p = Timeslice::default();
        for &id in ids {
            p.add(id, 1).unwrap();
            p.wake(id, Nanos::ZERO).unwrap();
        }
        p
    }

    #[test]
    fn the_token_goes_round_in_wake_order() {
        let mut p = busy(&[B, A, C]);
        let mut order = Vec::new();
        for _ in 0..6 {
            let g = p.pick(Nanos::ZERO).unwrap();
            assert_eq!(g.slice, ms(6));
            order.push(g.id);
            p.release(g.id, ms(6), Nanos::ZERO).unwrap();
        }
        // Woken in the order given: B, A, C.
        assert_eq!(order, [B, A, C, B, A, C]);
        assert_eq!(p.pick(Nanos::ZERO).map(|g| g.switched), Some(true));
    }

    /// The paper's example: requests of 0.9 slice, two per slice, steal 80%
    /// of the next slice; the overuse is charged, and once it reaches a
    /// slice the task skips a turn, so over time both get the same.
    #[test]
    fn overuse_costs_turns() {
        let mut p = busy(&[A, B]);
        let mut used = BTreeMap::<VgpuId, Nanos>::new();
        for _ in 0..100 {
            let g = p.pick(Nanos::ZERO).unwrap();
            // A issues two 5.4 ms requests per turn; B stays within its slice.
            let u = if g.id == A {
                Nanos::from_micros(10_800)
            } else {
                ms(6)
            };
            *used.entry(g.id).or_default() += u;
            p.release(g.id, u, Nanos::ZERO).unwrap();
        }
        let (a, b) = (used[&A].as_nanos() as f64, used[&B].as_nanos() as f64);
        assert!((a / b - 1.0).abs() < 0.1, "A {a} vs B {b}");
        let (debt, skipped) = overuse(&p, A);
        assert!(skipped > 0);
        assert!(debt < ms(6), "overuse below a slice after skipping: {debt}");
        assert_eq!(overuse(&p, B), (Nanos::ZERO, 0));
        assert_eq!(p.stats(A).unwrap().charged, used[&A]);
    }

    /// A holder that releases early while busy (a `sampled` holder whose
    /// prediction is conservative) gets the rest of its slice on its next
    /// turn, so it keeps its share against one whose requests overrun; a
    /// holder that blocks loses it.
    #[test]
    fn a_busy_holder_keeps_what_it_left_of_its_slice() {
        let mut p = busy(&[A, B]);
        let mut used = BTreeMap::<VgpuId, Nanos>::new();
        for _ in 0..400 {
            let g = p.pick(Nanos::ZERO).unwrap();
            // A fills 89 % of each grant; B's requests overrun by 0.4 ms.
            let u = if g.id == A {
                Nanos(g.slice.as_nanos() * 89 / 100)
            } else {
                Nanos::from_micros(6_400)
            };
            assert!(g.slice <= ms(12), "{g:?}");
            *used.entry(g.id).or_default() += u;
            p.release(g.id, u, Nanos::ZERO).unwrap();
        }
        let (a, b) = (used[&A].as_nanos() as f64, used[&B].as_nanos() as f64);
        assert!((a / b - 1.0).abs() < 0.02, "A {a} vs B {b}");

        let mut p = busy(&[A, B]);
        let g = p.pick(Nanos::ZERO).unwrap();
        p.release(g.id, ms(2), Nanos::ZERO).unwrap();
        p.block(g.id, Nanos::ZERO).unwrap();
        p.wake(g.id, Nanos::ZERO).unwrap();
        let other = p.pick(Nanos::ZERO).unwrap();
        p.release(other.id, ms(6), Nanos::ZERO).unwrap();
        assert_eq!(
            p.pick(Nanos::ZERO).map(|h| (h.id, h.slice)),
            Some((g.id, ms(6)))
        );

        // Holding the token for the whole slice of wall-clock time is a
        // whole turn, however little it used (an interactive VM); a
        // holder that filled a tenth of each grant and handed it back as
        // quickly carries at most three slices.
        let mut p = busy(&[A]);
        let g = p.pick(ms(100)).unwrap();
        p.release(g.id, ms(2), ms(105)).unwrap();
        assert_eq!(p.pick(ms(105)).map(|h| h.slice), Some(ms(7)));
        p.release(A, ms(1), ms(112)).unwrap();
        let mut t = ms(112);
        let mut slice = p.pick(t).map(|h| h.slice);
        assert_eq!(slice, Some(ms(6)));
        for _ in 0..10 {
            let used = Nanos(slice.unwrap().as_nanos() / 10);
            t = t.saturating_add(used);
            p.release(A, used, t).unwrap();
            slice = p.pick(t).map(|h| h.slice);
        }
        assert_eq!(slice, Some(ms(24)));
    }

    #[test]
    fn a_debtor_alone_still_runs() {
        let mut p = busy(&[A]);
        let g = p.pick(Nanos::ZERO).unwrap();
        p.release(g.id, ms(30), Nanos::ZERO).unwrap();
        // Four slices of overuse: four skipped turns, paid at once.
        assert_eq!(p.pick(Nanos::ZERO).map(|g| g.id), Some(A));
        assert_eq!(overuse(&p, A), (ms(0), 4));
    }

    #[test]
    fn weights_scale_slices_and_blocked_vgpus_lose_their_turn() {
        let mut p = Timeslice::new(TimesliceVariant::Disengaged, SliceConfig::default());
        p.add(A, 2).unwrap();
        p.add(B, 6).unwrap();
        assert_eq!(p.slice_of(A), Some(ms(6)));
        assert_eq!(p.slice_of(B), Some(ms(18)));
        assert_eq!(p.execution_mode(), ExecutionMode::Disengaged);
        assert_eq!(p.kind(), PolicyKind::NeonDisengaged);
        p.wake(A, Nanos::ZERO).unwrap();
        p.wake(B, Nanos::ZERO).unwrap();
        p.block(A, Nanos::ZERO).unwrap();
        assert_eq!(
            p.pick(Nanos::ZERO).map(|g| (g.id, g.slice)),
            Some((B, ms(18)))
        );
        assert_eq!(p.pick(Nanos::ZERO), None, "one grant at a time");
        assert_eq!(p.block(B, Nanos::ZERO), Err(SchedError::Holding { id: B }));
        // Within its slice: no overuse; a correction after the fact counts,
        // beyond the slice (17 + 2 ms of 18).
        p.release(B, ms(17), Nanos::ZERO).unwrap();
        p.adjust(B, 2_000_000, Nanos::ZERO).unwrap();
        assert_eq!(overuse(&p, B).0, ms(1));
        assert_eq!(p.stats(B).unwrap().charged, ms(19));
        assert_eq!(
            p.release(A, ms(1), Nanos::ZERO),
            Err(SchedError::NotHolder { id: A })
        );
        assert_eq!(
            p.set_priority(A, 3),
            Err(SchedError::Unsupported {
                policy: PolicyKind::NeonDisengaged,
                setting: "priority"
            })
        );
        p.remove(B).unwrap();
        assert_eq!(p.pick(Nanos::ZERO), None);
    }
}
