//! Property tests: fair queuing's virtual-time invariants and lag bound over
//! random weights, kernel sizes and demands, and the driver protocol of every
//! policy over random call sequences.

#[allow(dead_code)]
mod sim;

use std::collections::BTreeSet;

use fairgpu_scheduler::{
    Credit, CreditConfig, ExecutionMode, FairQueuing, IdleBehaviour, Nanos, Policy, PolicyKind,
    PriorityMode, Reservation, ReserveMode, SchedError, SliceConfig, Standing, TimeGraph,
    Timeslice, TimesliceVariant, VgpuId, VgpuState, VirtualTime,
};
use proptest::prelude::*;
use sim::{run, Demand, Setup, Vgpu};

fn start_tag(p: &FairQueuing, id: VgpuId) -> VirtualTime {
    match p.stats(id).map(|s| s.standing) {
        Some(Standing::Fair { start, .. }) => start,
        other => panic!("unexpected standing {other:?}"),
    }
}

/// V never decreases; every active vGPU's start tag is ≥ V, or within one
/// slice below it (a vGPU back from a brief block keeps its place); while
/// any is active and none lags, V is the smallest active start tag.
fn check_virtual_time(p: &FairQueuing, prev: &mut VirtualTime) -> Result<(), TestCaseError> {
    let v = p.virtual_time();
    prop_assert!(v >= *prev, "V went back from {} to {}", prev, v);
    *prev = v;
    let active: Vec<VirtualTime> = p
        .ids()
        .into_iter()
        .filter(|&id| {
            matches!(
                p.stats(id).map(|s| s.state),
                Some(VgpuState::Runnable | VgpuState::Running)
            )
        })
        .map(|id| start_tag(p, id))
        .collect();
    let slice = VirtualTime::charge(SliceConfig::NON_PREEMPTIVE, 1);
    for s in &active {
        prop_assert!(
            s.saturating_add(slice) >= v,
            "start tag {} more than a slice below V {}",
            s,
            v
        );
    }
    if let Some(min) = active.iter().min().filter(|&&m| m >= v) {
        prop_assert_eq!(*min, v);
    }
    Ok(())
}

fn demand() -> impl Strategy<Value = Demand> {
    prop_oneof![
        Just(Demand::Always),
        (1u64..30_000, 1u64..60_000, 0u64..90_000).prop_map(|(on, off, phase)| {
            Demand::Periodic {
                on: Nanos::from_micros(on),
                off: Nanos::from_micros(off),
                phase: Nanos::from_micros(phase),
            }
        }),
        (0u64..200_000, 1u64..200_000).prop_map(|(from, len)| {
            let from = Nanos::from_micros(from);
            Demand::Windows(vec![(from, from + Nanos::from_micros(len))])
        }),
    ]
}

fn weight() -> impl Strategy<Value = u32> {
    prop_oneof![1u32..=8, 1u32..=10_000]
}

fn vgpu() -> impl Strategy<Value = Vgpu> {
    (weight(), 10u64..=20_000, demand()).prop_map(|(weight, kernel, demand)| Vgpu {
        weight,
        kernel: Nanos::from_micros(kernel),
        demand,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Random weights, kernel sizes (10 µs – 20 ms) and demands (busy,
    /// periodically sleeping, one burst), 300 ms: the virtual-time
    /// invariants hold after every step, and each vGPU is charged exactly the
    /// GPU time its kernels got.
    #[test]
    fn fair_queuing_virtual_time_invariants(vgpus in prop::collection::vec(vgpu(), 1..=5)) {
        let setup = Setup::new(vgpus, Nanos::from_millis(300));
        let mut p = FairQueuing::default();
        let mut prev = VirtualTime::ZERO;
        let mut failure = None;
        let trace = run(&mut p, &setup, &mut |p: &FairQueuing, _| {
            if failure.is_none() {
                failure = check_virtual_time(p, &mut prev).err();
            }
        });
        if let Some(e) = failure {
            return Err(e);
        }
        for (i, _) in setup.vgpus.iter().enumerate() {
            let charged = p.stats(VgpuId(i as u32)).unwrap().charged;
            prop_assert_eq!(charged, trace.gpu_time(i, Nanos::ZERO, Nanos::MAX));
        }
    }

    /// Always-busy vGPUs with random weights and kernel sizes, 300 ms: at every
    /// release, any two vGPUs' weighted service differs by at most their
    /// largest grants' weighted sizes (start-time fair queuing's bound,
    /// |W_i/w_i − W_j/w_j| ≤ L_i/w_i + L_j/w_j, with L = slice + one kernel).
    #[test]
    fn fair_queuing_lag_is_bounded(
        spec in prop::collection::vec((weight(), 10u64..=20_000), 2..=6)
    ) {
        let vgpus: Vec<Vgpu> = spec
            .iter()
            .map(|&(w, k)| Vgpu::busy(w, Nanos::from_micros(k)))
            .collect();
        let setup = Setup::new(vgpus.clone(), Nanos::from_millis(300));
        let slice = SliceConfig::NON_PREEMPTIVE.as_nanos() as f64;
        let mut failure = None;
        run(&mut FairQueuing::default(), &setup, &mut |p: &FairQueuing, _| {
            let served: Vec<f64> = vgpus
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let c = p.stats(VgpuId(i as u32)).unwrap().charged.as_nanos() as f64;
                    c / f64::from(v.weight)
                })
                .collect();
            for i in 0..vgpus.len() {
                for j in 0..vgpus.len() {
                    let bound = (slice + vgpus[i].kernel.as_nanos() as f64)
                        / f64::from(vgpus[i].weight)
                        + (slice + vgpus[j].kernel.as_nanos() as f64) / f64::from(vgpus[j].weight);
                    let lag = (served[i] - served[j]).abs();
                    if lag > bound * (1.0 + 1e-9) && failure.is_none() {
                        failure = Some(format!("lag {lag} between {i} and {j} exceeds {bound}"));
                    }
                }
            }
        });
        prop_assert!(failure.is_none(), "{}", failure.unwrap_or_default());
    }
}

/// A call a driver might make.
#[derive(Debug, Clone)]
enum Op {
    Add(u32, u32),
    Remove(u32),
    SetWeight(u32, u32),
    Wake(u32),
    Block(u32),
    Pick,
    Release(u64),
    ReleaseBy(u32, u64),
    Sync(u32),
    Cosched(u32),
    Advance(u64),
    Priority(u32, u8),
    Reserve(u32, Option<(u64, u64, bool)>),
    Cost(u32, u64),
}

fn op() -> impl Strategy<Value = Op> {
    let id = 0u32..6;
    let w = prop_oneof![0u32..=12, Just(10_000), Just(10_001)];
    prop_oneof![
        1 => (id.clone(), w.clone()).prop_map(|(i, w)| Op::Add(i, w)),
        1 => id.clone().prop_map(Op::Remove),
        1 => (id.clone(), w).prop_map(|(i, w)| Op::SetWeight(i, w)),
        3 => id.clone().prop_map(Op::Wake),
        2 => id.clone().prop_map(Op::Block),
        4 => Just(Op::Pick),
        4 => (0u64..40_000).prop_map(Op::Release),
        1 => (id.clone(), 0u64..10_000).prop_map(|(i, u)| Op::ReleaseBy(i, u)),
        1 => id.clone().prop_map(Op::Sync),
        1 => id.clone().prop_map(Op::Cosched),
        3 => (0u64..50_000).prop_map(Op::Advance),
        1 => (id.clone(), 0u8..4).prop_map(|(i, p)| Op::Priority(i, p)),
        1 => (id.clone(), prop::option::of((0u64..30_000, 0u64..60_000, any::<bool>())))
            .prop_map(|(i, r)| Op::Reserve(i, r)),
        1 => (id, 0u64..5_000).prop_map(|(i, c)| Op::Cost(i, c)),
    ]
}

/// State, charge and grant count of every vGPU: what a failed call must not
/// change.
fn snapshot(p: &dyn Policy) -> Vec<(VgpuId, u32, VgpuState, Nanos, u64)> {
    p.ids()
        .into_iter()
        .filter_map(|id| p.stats(id))
        .map(|s| (s.id, s.weight, s.state, s.charged, s.grants))
        .collect()
}

/// Applies `ops` to `p`, checking the protocol after each; `slice` is what
/// every grant must last, if the policy has one slice; `extra` checks
/// policy-specific invariants.
fn check_protocol<P: Policy>(
    p: &mut P,
    ops: &[Op],
    slice: Option<Nanos>,
    mut extra: impl FnMut(&P) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let mut now = Nanos::ZERO;
    for op in ops {
        let ids: BTreeSet<VgpuId> = p.ids().into_iter().collect();
        let holder = p.holder();
        let runnable: BTreeSet<VgpuId> = ids
            .iter()
            .copied()
            .filter(|&id| p.stats(id).unwrap().state == VgpuState::Runnable)
            .collect();
        let before = snapshot(p);
        let result: Result<(), SchedError> = match *op {
            Op::Add(i, w) => {
                let r = p.add(VgpuId(i), w);
                let valid = (1..=10_000).contains(&w) && !ids.contains(&VgpuId(i));
                prop_assert_eq!(r.is_ok(), valid);
                if valid {
                    prop_assert_eq!(p.stats(VgpuId(i)).unwrap().state, VgpuState::Blocked);
                }
                r
            }
            Op::Remove(i) => {
                let r = p.remove(VgpuId(i));
                prop_assert_eq!(r.is_ok(), ids.contains(&VgpuId(i)));
                prop_assert!(!p.ids().contains(&VgpuId(i)));
                if holder == Some(VgpuId(i)) {
                    prop_assert_eq!(p.holder(), None);
                }
                r
            }
            Op::SetWeight(i, w) => {
                let r = p.set_weight(VgpuId(i), w);
                let valid = (1..=10_000).contains(&w) && ids.contains(&VgpuId(i));
                prop_assert_eq!(r.is_ok(), valid);
                r
            }
            Op::Wake(i) => {
                let r = p.wake(VgpuId(i), now);
                prop_assert_eq!(r.is_ok(), ids.contains(&VgpuId(i)));
                if r.is_ok() {
                    let s = p.stats(VgpuId(i)).unwrap().state;
                    prop_assert!(s != VgpuState::Blocked);
                }
                r
            }
            Op::Block(i) => {
                let id = VgpuId(i);
                let r = p.block(id, now);
                if holder == Some(id) {
                    prop_assert_eq!(r.clone(), Err(SchedError::Holding { id }));
                } else if ids.contains(&id) {
                    prop_assert!(r.is_ok());
                    let s = p.stats(id).unwrap().state;
                    match p.idle_behaviour() {
                        IdleBehaviour::Block | IdleBehaviour::Hold => {
                            prop_assert_eq!(s, VgpuState::Blocked)
                        }
                        IdleBehaviour::Poll => {
                            let was = before.iter().find(|b| b.0 == id).unwrap().2;
                            prop_assert_eq!(s, was);
                        }
                    }
                } else {
                    prop_assert!(r.is_err());
                }
                r
            }
            Op::Pick => {
                let g = p.pick(now);
                // Work conserving (unless throttled, and then the policy
                // says when it looks again), one grant at a time.
                let due = holder.is_none() && !runnable.is_empty();
                if due && g.is_none() {
                    let event = p.next_event();
                    let later = event.is_some_and(|e| e > now);
                    prop_assert!(later, "runnable vGPUs wait with no event: {:?}", event);
                } else {
                    prop_assert_eq!(g.is_some(), due);
                }
                if let Some(g) = g {
                    prop_assert!(runnable.contains(&g.id));
                    prop_assert_eq!(p.holder(), Some(g.id));
                    prop_assert_eq!(p.stats(g.id).unwrap().state, VgpuState::Running);
                    prop_assert!(g.slice > Nanos::ZERO && g.slice <= SliceConfig::MAX);
                    if let Some(s) = slice {
                        prop_assert_eq!(g.slice, s);
                    }
                }
                Ok(())
            }
            Op::Release(us) => match holder {
                Some(h) => {
                    let used = Nanos::from_micros(us);
                    let charged = p.stats(h).unwrap().charged;
                    now += used;
                    let r = p.release(h, used, now);
                    prop_assert!(r.is_ok());
                    let s = p.stats(h).unwrap();
                    prop_assert_eq!(s.state, VgpuState::Runnable);
                    prop_assert_eq!(s.charged, charged + used);
                    prop_assert_eq!(p.holder(), None);
                    r
                }
                None => Ok(()),
            },
            Op::ReleaseBy(i, us) => {
                let id = VgpuId(i);
                if holder == Some(id) {
                    Ok(())
                } else {
                    let r = p.release(id, Nanos::from_micros(us), now);
                    prop_assert!(r.is_err());
                    r
                }
            }
            Op::Sync(i) => {
                let r = p.record_sync_call(VgpuId(i), now);
                prop_assert_eq!(r.is_ok(), ids.contains(&VgpuId(i)));
                r
            }
            Op::Cosched(i) => p.cosched_request(VgpuId(i), now).map(|_| ()),
            Op::Advance(us) => {
                now += Nanos::from_micros(us);
                Ok(())
            }
            Op::Priority(i, prio) => {
                let r = p.set_priority(VgpuId(i), prio);
                let known = ids.contains(&VgpuId(i));
                prop_assert_eq!(r.is_ok(), known && p.kind().has_priorities());
                r
            }
            Op::Reserve(i, r) => {
                let reservation = r.map(|(budget, period, ae)| Reservation {
                    budget: Nanos::from_micros(budget),
                    period: Nanos::from_micros(period),
                    mode: if ae {
                        ReserveMode::Apriori
                    } else {
                        ReserveMode::Posterior
                    },
                });
                let result = p.set_reservation(VgpuId(i), reservation);
                if !ids.contains(&VgpuId(i)) {
                    let unknown = matches!(result, Err(SchedError::Unknown { .. }));
                    prop_assert!(unknown, "{:?}", result);
                } else if !p.kind().has_priorities() {
                    let unsupported = matches!(result, Err(SchedError::Unsupported { .. }));
                    prop_assert!(unsupported, "{:?}", result);
                }
                result
            }
            Op::Cost(i, us) => {
                let r = p.observe_cost(VgpuId(i), Nanos::from_micros(us));
                prop_assert_eq!(r.is_ok(), ids.contains(&VgpuId(i)));
                r
            }
        };
        if result.is_err() {
            prop_assert_eq!(snapshot(p), before, "a failed {:?} changed something", op);
        }
        if let Some(h) = p.holder() {
            prop_assert_eq!(p.stats(h).map(|s| s.state), Some(VgpuState::Running));
        }
        extra(p)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random call sequences against fair queuing: the protocol holds and so
    /// do the virtual-time invariants, whatever the driver does.
    #[test]
    fn fair_queuing_protocol(ops in prop::collection::vec(op(), 1..200)) {
        let mut prev = VirtualTime::ZERO;
        check_protocol(
            &mut FairQueuing::default(),
            &ops,
            Some(SliceConfig::NON_PREEMPTIVE),
            |p| check_virtual_time(p, &mut prev),
        )?;
    }

    /// Random call sequences against every Credit variant (both execution
    /// modes): the protocol holds, and credits stay within Xen's bounds.
    #[test]
    fn credit_protocol(ops in prop::collection::vec(op(), 1..200), collaborative in any::<bool>()) {
        let mode = if collaborative {
            ExecutionMode::Collaborative
        } else {
            ExecutionMode::TimeShared
        };
        let cfg = CreditConfig::default().with_mode(mode);
        for mut p in [Credit::poll(cfg), Credit::hybrid_spin(cfg), Credit::strict_coschedule(cfg)] {
            check_protocol(&mut p, &ops, Some(SliceConfig::NON_PREEMPTIVE), |p| {
                prop_assert_eq!(p.execution_mode(), mode);
                for id in p.ids() {
                    let Some(Standing::Credit { credit, .. }) = p.stats(id).map(|s| s.standing) else {
                        return Err(TestCaseError::fail("not a credit standing"));
                    };
                    // Above: at most one period (halved when it passes it).
                    prop_assert!(credit <= 30_000_000, "credit {}", credit);
                }
                Ok(())
            })?;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Random call sequences against NEON's timeslice schedulers: the
    /// protocol holds; overuse never exceeds what was charged, and a vGPU
    /// that skipped turns paid one slice per skip.
    #[test]
    fn neon_timeslice_protocol(ops in prop::collection::vec(op(), 1..200), disengaged in any::<bool>()) {
        let variant = if disengaged { TimesliceVariant::Disengaged } else { TimesliceVariant::Engaged };
        let mut p = Timeslice::new(variant, SliceConfig::default());
        check_protocol(&mut p, &ops, None, |p| {
            for id in p.ids() {
                let s = p.stats(id).unwrap();
                let Standing::Timeslice { overuse, credit, .. } = s.standing else {
                    return Err(TestCaseError::fail("not a timeslice standing"));
                };
                let bounded = overuse <= s.charged;
                prop_assert!(bounded, "overuse {} beyond charged {}", overuse, s.charged);
                // At most the slice it was left of (weights may have
                // changed the slice since; a grant clamps it again).
                prop_assert!(credit <= SliceConfig::MAX, "credit {}", credit);
                if s.state == VgpuState::Blocked || s.state == VgpuState::Running {
                    prop_assert_eq!(credit, Nanos::ZERO, "{:?} keeps credit", s.state);
                }
            }
            Ok(())
        })?;
    }

    /// Random call sequences against TimeGraph (PRT and HT): the protocol
    /// holds; no budget exceeds its reservation; whenever a runnable vGPU
    /// without a reservation has a higher priority than the holder, the
    /// policy asks to preempt the holder; reserved utilization stays ≤ 1.
    #[test]
    fn timegraph_protocol(ops in prop::collection::vec(op(), 1..200), prt in any::<bool>()) {
        let mode = if prt { PriorityMode::Prt } else { PriorityMode::Ht };
        let mut p = TimeGraph::new(mode, SliceConfig::default());
        prop_assert_eq!(p.serializes(), prt);
        prop_assert_eq!(p.kind(), if prt { PolicyKind::TimeGraphPrt } else { PolicyKind::TimeGraphHt });
        check_protocol(&mut p, &ops, None, |p| {
            let mut p = p.clone();
            let p = &mut p;
            prop_assert!(p.reserved_utilization() <= 1.0 + 1e-9);
            for id in p.ids() {
                let s = p.stats(id).unwrap();
                let Standing::TimeGraph { budget, .. } = s.standing else {
                    return Err(TestCaseError::fail("not a timegraph standing"));
                };
                let (prio, reservation) = p.settings(id).unwrap();
                if let (Some(b), Some(r)) = (budget, reservation) {
                    let within = b <= r.budget.as_nanos() as i64;
                    prop_assert!(within, "budget {} above {}", b, r.budget);
                }
                if let Some(h) = p.holder() {
                    let (hp, _) = p.settings(h).unwrap();
                    if s.state == VgpuState::Runnable && reservation.is_none() && prio > hp {
                        prop_assert_eq!(p.preempt(Nanos::ZERO), Some(h));
                    }
                }
            }
            Ok(())
        })?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// LoGA's free runs over random usage, random sleeps and members that
    /// park their leases: the system virtual time never goes back, a free
    /// run has a member whenever a VM is runnable or parked (the slowest is
    /// never denied, a parked member keeps its lease), no member is blocked
    /// unless parked, and every nanosecond reported is charged to its VM.
    #[test]
    fn loga_free_runs(
        weights in prop::collection::vec(1u32..=8, 2..=5),
        steps in prop::collection::vec((prop::collection::vec(0u64..40_000, 5), 0usize..5, any::<bool>(), any::<bool>()), 1..60),
    ) {
        use fairgpu_scheduler::{DfqVariant, DisengagedFq};
        use std::collections::BTreeSet;
        let mut p = DisengagedFq::new(DfqVariant::Loga, SliceConfig::default());
        let ids: Vec<VgpuId> = (0..weights.len() as u32).map(VgpuId).collect();
        for (&id, &w) in ids.iter().zip(&weights) {
            p.add(id, w).unwrap();
            p.wake(id, Nanos::ZERO).unwrap();
        }
        let mut now = Nanos::ZERO;
        let mut reported = vec![Nanos::ZERO; ids.len()];
        let mut sys = p.system_time();
        let mut run = p.free_run(now);
        let mut parked: BTreeSet<VgpuId> = BTreeSet::new();
        for (usage, who, sleep, park) in steps {
            let members: Vec<VgpuId> = run.as_ref().map(|r| r.ids.clone()).unwrap_or_default();
            let any_runnable = ids.iter().any(|&id| {
                matches!(p.stats(id).unwrap().state, VgpuState::Runnable | VgpuState::Running)
            });
            prop_assert_eq!(
                run.is_some(),
                any_runnable || !parked.is_empty(),
                "a free run iff someone is runnable or parked"
            );
            for id in &members {
                prop_assert!(
                    parked.contains(id) || p.stats(*id).unwrap().state != VgpuState::Blocked
                );
            }
            let id = ids[who % ids.len()];
            // A member parks its lease during the run.
            if park && members.contains(&id) && !parked.contains(&id) {
                p.member_parked(id, now + Nanos::from_millis(1)).unwrap();
                prop_assert_eq!(p.stats(id).unwrap().state, VgpuState::Blocked);
                parked.insert(id);
            }
            now += Nanos::from_millis(30);
            let report: Vec<(VgpuId, Nanos)> = members
                .iter()
                .map(|&id| (id, Nanos::from_micros(usage[id.0 as usize % usage.len()])))
                .collect();
            for &(id, u) in &report {
                reported[id.0 as usize] += u;
            }
            p.end_free_run(&report, now).unwrap();
            // A VM sleeps or wakes between runs; a parked one resumes.
            if sleep {
                if !parked.contains(&id) {
                    p.block(id, now).unwrap();
                }
            } else if parked.remove(&id) {
                p.member_resumed(id, now).unwrap();
            } else {
                p.wake(id, now).unwrap();
            }
            prop_assert!(p.system_time() >= sys);
            sys = p.system_time();
            run = p.free_run(now);
            for id in &parked {
                prop_assert!(
                    run.as_ref().is_some_and(|r| r.ids.contains(id)),
                    "a parked member lost its lease"
                );
            }
        }
        for (i, &id) in ids.iter().enumerate() {
            prop_assert_eq!(p.stats(id).unwrap().charged, reported[i]);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// NEON's disengaged fair queueing driven as the daemon drives it, over
    /// random request costs, sample usage and sleeps: engagements grant one
    /// VM at a time and never during a free run; a free run follows every
    /// engagement that found a VM runnable, has a member whenever a VM is
    /// runnable, and charges exactly its length among its members; the
    /// system virtual time never goes back.
    #[test]
    fn neon_dfq_engagements_and_free_runs(
        costs in prop::collection::vec(1u64..5_000, 2..=4),
        steps in prop::collection::vec((0u64..6_000, 0usize..4, any::<bool>()), 1..40),
    ) {
        use fairgpu_scheduler::{DfqVariant, DisengagedFq};
        let mut p = DisengagedFq::new(DfqVariant::Neon, SliceConfig::default());
        let ids: Vec<VgpuId> = (0..costs.len() as u32).map(VgpuId).collect();
        for &id in &ids {
            p.add(id, 1).unwrap();
            p.wake(id, Nanos::ZERO).unwrap();
        }
        let mut now = Nanos::ZERO;
        let mut sys = p.system_time();
        for (used, who, sleep) in steps {
            // An engagement: each runnable VM alone, measured.
            let mut sampled = 0;
            while let Some(g) = p.pick(now) {
                prop_assert!(!p.free_running());
                prop_assert!(g.slice <= fairgpu_scheduler::dfq::SAMPLE_MAX);
                prop_assert_eq!(p.pick(now), None, "one grant at a time");
                p.observe_cost(g.id, Nanos::from_micros(costs[g.id.0 as usize])).unwrap();
                now += Nanos::from_micros(used.min(5_000));
                p.release(g.id, Nanos::from_micros(used.min(5_000)), now).unwrap();
                sampled += 1;
                prop_assert!(sampled <= ids.len(), "each VM sampled once");
            }
            let runnable = ids.iter().any(|&id| p.stats(id).unwrap().state == VgpuState::Runnable);
            let before: u64 = ids.iter().map(|&id| p.stats(id).unwrap().charged.0).sum();
            match p.free_run(now) {
                Some(run) => {
                    prop_assert!(!run.ids.is_empty());
                    prop_assert!(run.until > now);
                    prop_assert_eq!(p.pick(now), None, "no grant during a free run");
                    let length = run.until - now;
                    now = run.until;
                    p.end_free_run(&[], now).unwrap();
                    let after: u64 = ids.iter().map(|&id| p.stats(id).unwrap().charged.0).sum();
                    // The run's length, split by request size (integer
                    // division loses less than a nanosecond per member).
                    prop_assert!(after - before <= length.0 && after - before + run.ids.len() as u64 >= length.0);
                }
                None => prop_assert!(!runnable, "runnable VMs but no free run"),
            }
            prop_assert!(p.system_time() >= sys);
            sys = p.system_time();
            let id = ids[who % ids.len()];
            if sleep {
                p.block(id, now).unwrap();
            } else {
                p.wake(id, now).unwrap();
            }
        }
    }
}
