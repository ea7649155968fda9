//! Fairness of the policies in simulation (see `sim` for the device model).
//!
//! Every test states its simulated setup; the numbers each one measures are
//! printed (`cargo test -p fairgpu-scheduler --test fairness -- --nocapture`).
//! Kernel sizes are the paper's (Table 3, Fig. 2, Fig. 11): 21 µs (smallest
//! matrixMul), 133 µs (HS), 207 µs (MM), 1,605 µs (largest background MM).

#[allow(dead_code)]
mod sim;

use fairgpu_scheduler::{
    Credit, CreditConfig, ExecutionMode, FairQueuing, Nanos, Policy, PriorityMode, Reservation,
    ReserveMode, SliceConfig, TimeGraph, Timeslice, TimesliceVariant, VgpuId,
};
use sim::{simulate, Demand, Setup, Trace, Vgpu};

fn us(n: u64) -> Nanos {
    Nanos::from_micros(n)
}

fn ms(n: u64) -> Nanos {
    Nanos::from_millis(n)
}

fn secs(n: u64) -> Nanos {
    Nanos::from_secs(n)
}

const SLICE: Nanos = SliceConfig::NON_PREEMPTIVE;

/// Time-shared runs start with an empty device queue that the first lease
/// fills; their shares are measured after this.
const WARM_UP: Nanos = Nanos::from_secs(1);

/// Every collaborative grant used less than slice + one of its kernels.
fn assert_overrun_bounded(trace: &Trace, setup: &Setup) {
    for g in &trace.grants {
        let bound = SLICE + setup.vgpus[g.vgpu].kernel;
        assert!(
            g.used < bound,
            "grant {g:?} used more than slice + one kernel"
        );
    }
}

/// Setup: three always-busy vGPUs, weights 1:2:3, kernels of very different
/// sizes (21 µs, 1,605 µs, 207 µs and permutations), 6 ms slice, 10 s.
/// Claim: fair queuing's MMR over the 10 s is at least 0.99.
#[test]
fn fair_queuing_shares_follow_weights_whatever_the_kernel_sizes() {
    let arrangements = [[21, 1_605, 207], [1_605, 21, 207], [207, 21, 1_605]];
    for kernels in arrangements {
        let setup = Setup::new(
            vec![
                Vgpu::busy(1, us(kernels[0])),
                Vgpu::busy(2, us(kernels[1])),
                Vgpu::busy(3, us(kernels[2])),
            ],
            secs(10),
        );
        let trace = simulate(&mut FairQueuing::default(), &setup);
        let mmr = trace.mmr(&setup.weights(), Nanos::ZERO, secs(10));
        let times = trace.gpu_times(Nanos::ZERO, secs(10));
        println!("fair queuing 1:2:3, kernels {kernels:?} us: GPU time {times:?}, MMR {mmr:.4}");
        assert!(mmr >= 0.99, "MMR {mmr}");
        assert!(trace.utilisation(Nanos::ZERO, secs(10)) > 0.999);
        assert_overrun_bounded(&trace, &setup);
    }
}

/// Setup: weights 1:2:3, 207 µs kernels; the weight-3 vGPU has no work from
/// 1 s to 2 s, then is busy again. Claims: over the 300 ms after it wakes it
/// gets at most its weighted share (1/2) plus one slice and one kernel, and at
/// least its share minus that; over 2–10 s the MMR is at least 0.99.
#[test]
fn sleeping_earns_no_credit() {
    let sleeper = Demand::Windows(vec![(Nanos::ZERO, secs(1)), (secs(2), Nanos::MAX)]);
    let setup = Setup::new(
        vec![
            Vgpu::busy(1, us(207)),
            Vgpu::busy(2, us(207)),
            Vgpu {
                weight: 3,
                kernel: us(207),
                demand: sleeper,
            },
        ],
        secs(10),
    );
    let trace = simulate(&mut FairQueuing::default(), &setup);
    let window = ms(300);
    let got = trace.gpu_time(2, secs(2), secs(2) + window);
    let share = Nanos(window.as_nanos() / 2);
    let slack = SLICE + us(207);
    println!("sleeper after waking: {got} of {window} (weighted share {share}, slack {slack})");
    assert!(got <= share + slack, "{got} > {share} + {slack}");
    assert!(got + slack >= share, "{got} starved");
    assert_eq!(trace.gpu_time(2, secs(1) + ms(1), secs(2)), Nanos::ZERO);
    let mmr = trace.mmr(&setup.weights(), secs(2), secs(10));
    println!("MMR over 2-10 s: {mmr:.4}");
    assert!(mmr >= 0.99, "MMR {mmr}");
}

/// Setup: weights 1:1:2; vGPU 0 issues 20 ms kernels (over three slices
/// each), vGPU 1 50 µs kernels, vGPU 2 1,605 µs kernels; 10 s. Claims: every
/// 20 ms overrun is charged in full, so vGPU 0 still gets only its weighted
/// share: MMR ≥ 0.98, and it gets about one grant for every 20/6 of vGPU 1's.
#[test]
fn overruns_are_charged_to_the_overrunner() {
    let setup = Setup::new(
        vec![
            Vgpu::busy(1, ms(20)),
            Vgpu::busy(1, us(50)),
            Vgpu::busy(2, us(1_605)),
        ],
        secs(10),
    );
    let mut fq = FairQueuing::default();
    let trace = simulate(&mut fq, &setup);
    let mmr = trace.mmr(&setup.weights(), Nanos::ZERO, secs(10));
    let times = trace.gpu_times(Nanos::ZERO, secs(10));
    let grants = |v| trace.grants.iter().filter(|g| g.vgpu == v).count();
    println!(
        "overrunner: GPU time {times:?}, MMR {mmr:.4}, grants {} vs {}",
        grants(0),
        grants(1)
    );
    assert!(mmr >= 0.98, "MMR {mmr}");
    assert!(trace
        .grants
        .iter()
        .filter(|g| g.vgpu == 0)
        .all(|g| g.used == ms(20)));
    let ratio = grants(1) as f64 / grants(0) as f64;
    assert!((3.0..3.7).contains(&ratio), "grant ratio {ratio}");
    let charged = fq.stats(fairgpu_scheduler::VgpuId(0)).unwrap().charged;
    assert_eq!(charged, trace.gpu_time(0, Nanos::ZERO, Nanos::MAX));
}

/// Setup: two busy vGPUs (207 µs and 1,605 µs kernels), weights 1:1; at 5 s
/// the second's weight becomes 4. Claims: MMR ≥ 0.99 for 1:1 over 0–5 s and
/// for 1:4 over 5.1–10 s.
#[test]
fn live_weight_change_takes_effect() {
    let mut setup = Setup::new(
        vec![Vgpu::busy(1, us(207)), Vgpu::busy(1, us(1_605))],
        secs(10),
    );
    setup.weight_changes = vec![(secs(5), 1, 4)];
    let trace = simulate(&mut FairQueuing::default(), &setup);
    let before = trace.mmr(&[1, 1], Nanos::ZERO, secs(5));
    let after = trace.mmr(&[1, 4], secs(5) + ms(100), secs(10));
    let times = trace.gpu_times(secs(5) + ms(100), secs(10));
    println!("weight change: MMR 1:1 before {before:.4}, 1:4 after {after:.4} ({times:?})");
    assert!(before >= 0.99, "{before}");
    assert!(after >= 0.99, "{after}");
}

/// Setup: one busy vGPU (207 µs), two registered that never have work; 10 s.
/// Claim: the busy one has the GPU the whole time, and nobody else is ever
/// granted it.
#[test]
fn a_single_runnable_vgpu_always_gets_the_gpu() {
    let setup = Setup::new(
        vec![
            Vgpu::busy(1, us(207)),
            Vgpu {
                weight: 5,
                kernel: us(207),
                demand: Demand::Never,
            },
            Vgpu {
                weight: 5,
                kernel: us(207),
                demand: Demand::Never,
            },
        ],
        secs(10),
    );
    let trace = simulate(&mut FairQueuing::default(), &setup);
    let util = trace.utilisation(Nanos::ZERO, secs(10));
    println!("single runnable vGPU: utilisation {util:.5}");
    assert!(util > 0.99999, "{util}");
    assert!(trace.grants.iter().all(|g| g.vgpu == 0));
}

/// Setup (after the paper's Fig. 10): a busy vGPU (377 µs, BS) beside a
/// non-saturating MM (207 µs kernels, busy 3 ms then idle 7 ms), weights 1:1,
/// 10 s, 50 µs spin budget. Claims: with hybrid spinning (fair queuing,
/// Credit-hs) idle vGPUs do not hold the GPU: utilisation ≥ 0.99; with
/// continuous polling (Credit-poll) the idle vGPU's leases are wasted.
#[test]
fn idle_vgpus_do_not_hold_the_gpu() {
    let setup = Setup::new(
        vec![
            Vgpu::busy(1, us(377)),
            Vgpu {
                weight: 1,
                kernel: us(207),
                demand: Demand::Periodic {
                    on: ms(3),
                    off: ms(7),
                    phase: Nanos::ZERO,
                },
            },
        ],
        secs(10),
    );
    let collaborative = CreditConfig::default().with_mode(ExecutionMode::Collaborative);
    let mut policies: Vec<(&str, Box<dyn Policy>)> = vec![
        ("fair queuing", Box::new(FairQueuing::default())),
        ("credit-hs", Box::new(Credit::hybrid_spin(collaborative))),
        ("credit-poll", Box::new(Credit::poll(collaborative))),
    ];
    let mut utils = vec![];
    for (name, p) in &mut policies {
        let trace = simulate(p.as_mut(), &setup);
        let util = trace.utilisation(Nanos::ZERO, secs(10));
        println!("{name}: utilisation {util:.4}");
        utils.push(util);
    }
    assert!(utils[0] >= 0.99, "{utils:?}");
    assert!(utils[1] >= 0.99, "{utils:?}");
    assert!(utils[2] < 0.9, "{utils:?}");
}

/// Setup (the paper's Fig. 11): a foreground VM running MM (207 µs kernels)
/// or HS (133 µs) and a background VM running MM with kernels swept from
/// 21 µs to 1,605 µs; weights 1:1; 10 s, measured over 1–10 s; both always
/// busy.
/// Credit-poll is time-shared: wall-clock 6 ms leases, charged by lease
/// length, kernels queued asynchronously in a 1,024-entry device queue.
/// Fair queuing is collaborative. Claims: fair queuing's MMR ≥ 0.95 at every
/// size; Credit-poll's collapses (MMR < 0.5) once the background kernels are
/// much larger than the foreground's, while with smaller background kernels
/// the foreground gets more than its half (normalised run time under 2);
/// Credit with collaborative accounting is fair again (MMR ≥ 0.9).
#[test]
fn figure_11_credit_poll_collapses_with_larger_background_kernels() {
    for fg in [207, 133] {
        for bg in [21, 51, 102, 207, 391, 1_605] {
            let setup = Setup::new(vec![Vgpu::busy(1, us(fg)), Vgpu::busy(1, us(bg))], secs(10));
            let w = setup.weights();
            let fq = simulate(&mut FairQueuing::default(), &setup);
            let poll = simulate(&mut Credit::poll(CreditConfig::default()), &setup);
            let collab = CreditConfig::default().with_mode(ExecutionMode::Collaborative);
            let poll_acct = simulate(&mut Credit::poll(collab), &setup);
            let span = (WARM_UP, secs(10));
            let fq_mmr = fq.mmr(&w, span.0, span.1);
            let poll_mmr = poll.mmr(&w, span.0, span.1);
            let acct_mmr = poll_acct.mmr(&w, span.0, span.1);
            let fg_share = sim::normalised(&poll.gpu_times(span.0, span.1), &w)[0] / 2.0;
            println!(
                "fig 11 fg {fg} us, bg {bg} us: fair queuing MMR {fq_mmr:.4}; credit-poll MMR \
                 {poll_mmr:.4} (fg share {fg_share:.3}, fg normalised run time {:.2}); \
                 credit-poll with collaborative accounting MMR {acct_mmr:.4}",
                0.5 / fg_share
            );
            assert!(fq_mmr >= 0.95, "fair queuing {fq_mmr}");
            assert!(acct_mmr >= 0.9, "collaborative credit {acct_mmr}");
            if bg >= 2 * fg {
                assert!(poll_mmr < 0.5, "credit-poll did not collapse: {poll_mmr}");
            }
            if bg * 2 <= fg {
                assert!(fg_share > 0.5, "fg share {fg_share}");
            }
        }
    }
}

/// Setup (after the paper's Fig. 8, non-interactive MM): three always-busy
/// vGPUs with the same 207 µs kernels, weights 1:2:3, 10 s, measured over
/// 1–10 s (the first time-shared lease fills the empty 1,024-entry device
/// queue, 212 ms of work, which skews the first second). Claim: with equal
/// kernels Credit-poll and Credit-hs keep weighted fairness (MMR ≥ 0.9, the
/// paper's figure), and fair queuing reaches ≥ 0.99.
#[test]
fn figure_8_credit_is_fair_when_kernels_are_alike() {
    let setup = Setup::new(
        vec![
            Vgpu::busy(1, us(207)),
            Vgpu::busy(2, us(207)),
            Vgpu::busy(3, us(207)),
        ],
        secs(10),
    );
    let w = setup.weights();
    let mut policies: Vec<(&str, Box<dyn Policy>, f64)> = vec![
        ("fair queuing", Box::new(FairQueuing::default()), 0.99),
        (
            "credit-poll",
            Box::new(Credit::poll(CreditConfig::default())),
            0.9,
        ),
        (
            "credit-hs",
            Box::new(Credit::hybrid_spin(CreditConfig::default())),
            0.9,
        ),
    ];
    for (name, p, floor) in &mut policies {
        let trace = simulate(p.as_mut(), &setup);
        let mmr = trace.mmr(&w, WARM_UP, secs(10));
        println!("fig 8 MM 1:2:3 {name}: MMR {mmr:.4}");
        assert!(mmr >= *floor, "{name} MMR {mmr}");
    }
}

/// Setup (after the paper's Figs. 8–9 for Strict co-scheduling): three
/// always-busy vGPUs, GPU weights 1:2:3; one core whose CPU scheduler
/// switches vCPUs every 4 ms in a weighted round robin (CPU weights 1:2:3)
/// and, CPU-centric, asks the GPU scheduler for each vCPU's vGPU; a granted
/// request revokes the current lease at once; 10 s, measured over 1–10 s.
/// Claims: the requests do preempt leases; with equal 207 µs kernels the
/// Algorithm 2 credit check keeps the shares weighted (MMR ≥ 0.95) in this
/// model, whose exact debit of held time gives a preempted vGPU no escape from
/// charging (the paper's measured unfairness also involves the CPU side,
/// which is not modelled); with mixed kernels (207 µs vs 1,605 µs) Strict
/// inherits Credit's time-sharing collapse (MMR < 0.5).
#[test]
fn strict_coscheduling_preempts_on_cpu_requests() {
    let cpu = sim::CpuModel {
        quantum: ms(4),
        weights: vec![1, 2, 3],
    };
    for (kernels, fair) in [([207, 207, 207], true), ([207, 1_605, 207], false)] {
        let mut setup = Setup::new(
            vec![
                Vgpu::busy(1, us(kernels[0])),
                Vgpu::busy(2, us(kernels[1])),
                Vgpu::busy(3, us(kernels[2])),
            ],
            secs(10),
        );
        setup.cpu = Some(cpu.clone());
        let trace = simulate(
            &mut Credit::strict_coschedule(CreditConfig::default()),
            &setup,
        );
        let mmr = trace.mmr(&setup.weights(), WARM_UP, secs(10));
        println!(
            "strict co-scheduling, kernels {kernels:?} us: MMR {mmr:.4}, {} of {} leases revoked",
            trace.preemptions,
            trace.grants.len()
        );
        assert!(trace.preemptions > 100, "{}", trace.preemptions);
        if fair {
            assert!(mmr >= 0.95, "{mmr}");
        } else {
            assert!(mmr < 0.5, "{mmr}");
        }
    }
}

/// Setup: two always-busy vGPUs of equal weight, one with kernels of 0.9
/// slice (5.4 ms, NEON's example: two per turn overrun the slice by 80%),
/// one with 207 µs kernels, 10 s. Claim: NEON's overuse control (engaged
/// and disengaged) keeps their GPU times within 10% of each other, where
/// charging nothing beyond the slice would give the long kernels 1.8× the
/// short ones' time.
#[test]
fn neon_overuse_control_evens_out_overrunning_requests() {
    for variant in [TimesliceVariant::Engaged, TimesliceVariant::Disengaged] {
        let setup = Setup::new(
            vec![Vgpu::busy(1, us(5_400)), Vgpu::busy(1, us(207))],
            secs(10),
        );
        let trace = simulate(&mut Timeslice::new(variant, SliceConfig::default()), &setup);
        let times = trace.gpu_times(Nanos::ZERO, trace.end);
        let mmr = trace.mmr(&[1, 1], Nanos::ZERO, trace.end);
        println!("NEON {variant:?}: GPU times {times:?}, MMR {mmr:.3}");
        assert!(mmr >= 0.9, "{variant:?}: MMR {mmr:.3}");
    }
}

/// Setup: a vGPU busy 200 µs then idle 200 µs, repeating, with 200 µs
/// kernels (NEON's Throttle sleeping half its time: alone it uses 50% of
/// the device) beside an always-busy vGPU of 1.7 ms kernels, equal
/// weights, 10 s. Claim: under NEON's timeslices (engaged and disengaged)
/// the sleeping vGPU keeps the token through its idle gaps for its whole
/// slice, so it slows down at most about 2× (NEON's criterion of
/// fairness), here at least 22% of the device against its 50% alone;
/// passing the token at each gap would leave it one kernel per turn.
#[test]
fn neon_timeslice_holders_keep_their_slice_through_idle_gaps() {
    for variant in [TimesliceVariant::Engaged, TimesliceVariant::Disengaged] {
        let sleepy = Vgpu {
            weight: 1,
            kernel: us(200),
            demand: Demand::Periodic {
                on: us(200),
                off: us(200),
                phase: Nanos::ZERO,
            },
        };
        let setup = Setup::new(vec![sleepy, Vgpu::busy(1, us(1_700))], secs(10));
        let trace = simulate(&mut Timeslice::new(variant, SliceConfig::default()), &setup);
        let times = trace.gpu_times(Nanos::ZERO, trace.end);
        let share = times[0].as_nanos() as f64 / trace.end.as_nanos() as f64;
        let busy = trace.utilisation(Nanos::ZERO, trace.end);
        println!(
            "NEON {variant:?}: sleeping vGPU {:.1}% of the device, busy {:.1}%",
            share * 100.0,
            busy * 100.0
        );
        assert!(share >= 0.22, "{variant:?}: {:.1}%", share * 100.0);
    }
}

/// The first instant `v` ran in each `[k·period, k·period + window)`, less
/// the period's start: how long its work waited.
fn first_run_delays(trace: &Trace, v: usize, period: Nanos, window: Nanos) -> Vec<Nanos> {
    let periods = trace.end.as_nanos() / period.as_nanos();
    (0..periods)
        .filter_map(|k| {
            let from = Nanos(k * period.as_nanos());
            trace.runs[v]
                .iter()
                .find(|&&(start, end)| end > from && start < from + window)
                .map(|&(start, _)| start.saturating_sub(from))
        })
        .collect()
}

/// Setup: a high-priority vGPU with work during the first 5 ms of every
/// 20 ms (200 µs requests) beside two always-busy low-priority vGPUs with
/// 1,605 µs requests, 10 s. Claim: under TimeGraph PRT and HT the
/// high-priority work starts within one low-priority request of its
/// arrival in every period (the holder is preempted at its next request
/// boundary), so it gets at least its 5 ms less that request each period;
/// fair queuing, which knows no priorities, leaves it behind the holder's
/// slice (its numbers are printed).
#[test]
fn timegraph_priority_work_waits_at_most_one_request() {
    let hp = Vgpu {
        weight: 1,
        kernel: us(200),
        demand: sim::Demand::Periodic {
            on: ms(5),
            off: ms(15),
            phase: Nanos::ZERO,
        },
    };
    let setup = Setup::new(
        vec![hp, Vgpu::busy(1, us(1_605)), Vgpu::busy(1, us(1_605))],
        secs(10),
    );
    let period = ms(20);
    for mode in [PriorityMode::Prt, PriorityMode::Ht] {
        let mut p = TimeGraph::new(mode, SliceConfig::default());
        for (i, _) in setup.vgpus.iter().enumerate() {
            p.add(VgpuId(i as u32), 1).unwrap();
        }
        p.set_priority(VgpuId(0), 10).unwrap();
        let trace = simulate(&mut p, &setup);
        let delays = first_run_delays(&trace, 0, period, ms(5));
        let worst = delays.iter().copied().max().unwrap();
        let least = least_per_period(&trace, period);
        println!(
            "TimeGraph {mode:?}: ran in {} of 500 periods, worst wait {worst}, least GPU time in a period {least}",
            delays.len()
        );
        assert_eq!(
            delays.len(),
            500,
            "{mode:?}: the high-priority vGPU ran in every period"
        );
        assert!(worst <= us(1_605), "{mode:?}: waited {worst}");
        assert!(least + us(1_605) >= ms(5), "{mode:?}: {least} in a period");
    }
    let trace = simulate(&mut FairQueuing::default(), &setup);
    let delays = first_run_delays(&trace, 0, period, ms(5));
    println!(
        "fair queuing: ran in {} of 500 periods, worst wait {}, least GPU time in a period {}",
        delays.len(),
        delays.iter().copied().max().unwrap_or(Nanos::ZERO),
        least_per_period(&trace, period)
    );
}

/// The least GPU time vGPU 0 got in any whole period.
fn least_per_period(trace: &Trace, period: Nanos) -> Nanos {
    let periods = trace.end.as_nanos() / period.as_nanos();
    (0..periods)
        .map(|k| {
            let from = Nanos(k * period.as_nanos());
            trace.gpu_time(0, from, from + period)
        })
        .min()
        .unwrap_or(Nanos::ZERO)
}

/// Setup: a vGPU reserved 2 ms per 10 ms (posterior, then apriori
/// enforcement), always busy with 207 µs requests, beside an always-busy
/// unreserved vGPU with 400 µs requests, 10 s. Claim: the reserved vGPU
/// gets its budget, 20% of the GPU, within 5%, and the other the rest.
#[test]
fn timegraph_reservations_hold_their_budget() {
    for mode in [ReserveMode::Posterior, ReserveMode::Apriori] {
        let setup = Setup::new(
            vec![Vgpu::busy(1, us(207)), Vgpu::busy(1, us(400))],
            secs(10),
        );
        let mut p = TimeGraph::new(PriorityMode::Ht, SliceConfig::default());
        p.add(VgpuId(0), 1).unwrap();
        p.add(VgpuId(1), 1).unwrap();
        p.set_reservation(
            VgpuId(0),
            Some(Reservation {
                budget: ms(2),
                period: ms(10),
                mode,
            }),
        )
        .unwrap();
        p.observe_cost(VgpuId(0), us(207)).unwrap();
        let trace = simulate(&mut p, &setup);
        let times = trace.gpu_times(Nanos::ZERO, trace.end);
        let share = times[0].as_nanos() as f64 / trace.end.as_nanos() as f64;
        println!("{mode:?}: reserved share {share:.4}, GPU times {times:?}");
        assert!(
            (share / 0.2 - 1.0).abs() <= 0.05,
            "{mode:?}: share {share:.4}"
        );
        assert!(trace.utilisation(Nanos::ZERO, trace.end) > 0.99);
    }
}
