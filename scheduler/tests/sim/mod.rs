//! A discrete-event model of one non-preemptive GPU shared by vGPUs under a
//! [`Policy`], for the fairness tests.
//!
//! The model:
//! - Each vGPU has a weight, a kernel size and a demand (when it has kernels
//!   to issue). Issuing costs no CPU time; the GPU runs one kernel at a time,
//!   to completion.
//! - Collaborative policies ([`ExecutionMode::Collaborative`]): the holder
//!   issues kernels one after another, measuring each, until its usage
//!   reaches the slice — so it uses at most slice + one kernel — and reports
//!   the measured usage. With nothing to issue it spins for `spin` (GPU idle)
//!   and then, under [`IdleBehaviour::Block`], releases and blocks; under
//!   [`IdleBehaviour::Poll`] it keeps the grant until the slice's wall-clock
//!   end; under [`IdleBehaviour::Hold`] it keeps it so once it has issued a
//!   kernel in the grant, and otherwise spins and blocks.
//! - Time-shared policies ([`ExecutionMode::TimeShared`]): the grant is a
//!   wall-clock lease of one slice. The holder keeps the device's hardware
//!   queue (`hw_queue` entries, shared by everyone, FIFO) full of its kernels
//!   while it has work, and reports the lease's wall-clock length. Kernels it
//!   queued keep running into the next lease.
//! - A blocked vGPU is woken at the instant it gets work, even while another
//!   holds the GPU.

use std::collections::VecDeque;

use fairgpu_scheduler::{CoschedReply, ExecutionMode, IdleBehaviour, Nanos, Policy, VgpuId};

/// When a vGPU has kernels to issue.
#[derive(Debug, Clone)]
pub enum Demand {
    /// Always.
    Always,
    /// Never (registered, idle).
    Never,
    /// Busy `on`, then idle `off`, repeating; `phase` shifts the cycle.
    Periodic { on: Nanos, off: Nanos, phase: Nanos },
    /// Within these `[start, end)` windows, in order.
    Windows(Vec<(Nanos, Nanos)>),
}

impl Demand {
    fn cycle_pos(on: Nanos, off: Nanos, phase: Nanos, t: Nanos) -> u64 {
        (t.as_nanos() + phase.as_nanos()) % (on + off).as_nanos()
    }

    /// Whether it has work at `t`.
    pub fn has_work(&self, t: Nanos) -> bool {
        self.next_work(t) == Some(t)
    }

    /// The earliest instant from `t` on at which it has work.
    pub fn next_work(&self, t: Nanos) -> Option<Nanos> {
        match self {
            Demand::Always => Some(t),
            Demand::Never => None,
            Demand::Periodic { on, off, phase } => {
                let pos = Self::cycle_pos(*on, *off, *phase, t);
                if pos < on.as_nanos() {
                    Some(t)
                } else {
                    Some(t + Nanos((*on + *off).as_nanos() - pos))
                }
            }
            Demand::Windows(w) => w
                .iter()
                .find(|&&(_, end)| end > t)
                .map(|&(start, _)| start.max(t)),
        }
    }

    /// While busy at `t`: when the current busy stretch ends (`None`: never).
    pub fn work_ends(&self, t: Nanos) -> Option<Nanos> {
        match self {
            Demand::Always | Demand::Never => None,
            Demand::Periodic { on, off, phase } => {
                let pos = Self::cycle_pos(*on, *off, *phase, t);
                Some(t + Nanos(on.as_nanos().saturating_sub(pos)))
            }
            Demand::Windows(w) => w
                .iter()
                .find(|&&(start, end)| start <= t && t < end)
                .map(|&(_, end)| end),
        }
    }
}

/// One simulated vGPU; its id is its index.
#[derive(Debug, Clone)]
pub struct Vgpu {
    pub weight: u32,
    pub kernel: Nanos,
    pub demand: Demand,
}

impl Vgpu {
    pub fn busy(weight: u32, kernel: Nanos) -> Self {
        Vgpu {
            weight,
            kernel,
            demand: Demand::Always,
        }
    }
}

/// A CPU scheduler sharing one core among the VMs' vCPUs (time-shared mode
/// only): every `quantum` it switches to the next vCPU of a smooth weighted
/// round robin over `weights` and, CPU-centric, sends the GPU scheduler a
/// co-scheduling request for that VM's vGPU (Pegasus Algorithm 1). A
/// `Switch` revokes the current lease at once.
#[derive(Debug, Clone)]
pub struct CpuModel {
    pub quantum: Nanos,
    pub weights: Vec<u32>,
}

impl CpuModel {
    /// The vCPU order of one round: smooth weighted round robin.
    fn round(&self) -> Vec<usize> {
        let total: i64 = self.weights.iter().map(|&w| i64::from(w)).sum();
        let mut current = vec![0i64; self.weights.len()];
        (0..total)
            .map(|_| {
                for (c, &w) in current.iter_mut().zip(&self.weights) {
                    *c += i64::from(w);
                }
                let best = (0..current.len()).max_by_key(|&i| (current[i], -(i as i64)));
                let best = best.unwrap_or(0);
                current[best] -= total;
                best
            })
            .collect()
    }
}

/// A scenario.
#[derive(Debug, Clone)]
pub struct Setup {
    pub vgpus: Vec<Vgpu>,
    pub duration: Nanos,
    /// Hybrid-spinning budget before a holder with nothing to issue yields.
    pub spin: Nanos,
    /// Device hardware queue depth (time-shared mode).
    pub hw_queue: usize,
    /// `(at, vgpu, weight)`, in time order.
    pub weight_changes: Vec<(Nanos, usize, u32)>,
    /// CPU-centric co-scheduling requests, if any.
    pub cpu: Option<CpuModel>,
}

impl Setup {
    pub fn new(vgpus: Vec<Vgpu>, duration: Nanos) -> Self {
        Setup {
            vgpus,
            duration,
            spin: Nanos::from_micros(50),
            hw_queue: 1024,
            weight_changes: vec![],
            cpu: None,
        }
    }

    pub fn weights(&self) -> Vec<u32> {
        self.vgpus.iter().map(|v| v.weight).collect()
    }
}

/// One grant as it happened.
#[derive(Debug, Clone, Copy)]
pub struct GrantRecord {
    pub vgpu: usize,
    pub at: Nanos,
    pub until: Nanos,
    pub used: Nanos,
}

/// What happened on the device.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Per vGPU, the device intervals its kernels ran in (merged).
    pub runs: Vec<Vec<(Nanos, Nanos)>>,
    pub grants: Vec<GrantRecord>,
    /// Leases revoked by a co-scheduling switch.
    pub preemptions: usize,
    pub end: Nanos,
}

impl Trace {
    fn new(n: usize) -> Self {
        Trace {
            runs: vec![vec![]; n],
            grants: vec![],
            preemptions: 0,
            end: Nanos::ZERO,
        }
    }

    fn run(&mut self, v: usize, start: Nanos, end: Nanos) {
        match self.runs[v].last_mut() {
            Some(last) if last.1 == start => last.1 = end,
            _ => self.runs[v].push((start, end)),
        }
    }

    /// GPU time `v`'s kernels got within `[from, to)`.
    pub fn gpu_time(&self, v: usize, from: Nanos, to: Nanos) -> Nanos {
        self.runs[v]
            .iter()
            .map(|&(s, e)| e.min(to) - s.max(from))
            .fold(Nanos::ZERO, |a, b| a + b)
    }

    /// Every vGPU's GPU time within `[from, to)`.
    pub fn gpu_times(&self, from: Nanos, to: Nanos) -> Vec<Nanos> {
        (0..self.runs.len())
            .map(|v| self.gpu_time(v, from, to))
            .collect()
    }

    /// Fraction of `[from, to)` the device was busy.
    pub fn utilisation(&self, from: Nanos, to: Nanos) -> f64 {
        let busy: u64 = self.gpu_times(from, to).iter().map(|t| t.as_nanos()).sum();
        busy as f64 / (to - from).as_nanos() as f64
    }

    /// FairGV's Min-Max Ratio over `[from, to)`: x_i = share_i / (w_i / Σw).
    pub fn mmr(&self, weights: &[u32], from: Nanos, to: Nanos) -> f64 {
        mmr(&self.gpu_times(from, to), weights)
    }
}

/// Each vGPU's share of the GPU time over its weighted fair share.
pub fn normalised(times: &[Nanos], weights: &[u32]) -> Vec<f64> {
    let total: f64 = times.iter().map(|t| t.as_nanos() as f64).sum();
    let wsum: f64 = weights.iter().map(|&w| f64::from(w)).sum();
    times
        .iter()
        .zip(weights)
        .map(|(t, &w)| (t.as_nanos() as f64 / total) / (f64::from(w) / wsum))
        .collect()
}

/// min x_i / max x_i.
pub fn mmr(times: &[Nanos], weights: &[u32]) -> f64 {
    let x = normalised(times, weights);
    let min = x.iter().copied().fold(f64::INFINITY, f64::min);
    let max = x.iter().copied().fold(0.0, f64::max);
    min / max
}

/// Runs `setup` under `policy`, which adds the vGPUs it does not have yet
/// (one given its settings beforehand keeps them); `observe` sees the
/// policy after every step.
pub fn run<P: Policy + ?Sized>(
    policy: &mut P,
    setup: &Setup,
    observe: &mut dyn FnMut(&P, Nanos),
) -> Trace {
    for (i, v) in setup.vgpus.iter().enumerate() {
        if policy.stats(id(i)).is_none() {
            policy.add(id(i), v.weight).unwrap();
        }
    }
    let mut sim = Sim {
        setup,
        blocked: vec![true; setup.vgpus.len()],
        next_change: 0,
        trace: Trace::new(setup.vgpus.len()),
        device: Device::default(),
        cpu_round: setup.cpu.as_ref().map(CpuModel::round).unwrap_or_default(),
        cpu_switches: 0,
    };
    match policy.execution_mode() {
        ExecutionMode::Collaborative => {
            assert!(
                setup.cpu.is_none(),
                "CPU requests are modelled for time sharing only"
            );
            sim.collaborative(policy, observe)
        }
        ExecutionMode::TimeShared => sim.time_shared(policy, observe),
        // A disengaged holder's lease ends at its slice with its work
        // drained and its wall-clock time charged: with a holder that keeps
        // the device busy, as this model's do, that is the collaborative
        // grant's usage.
        ExecutionMode::Disengaged => sim.collaborative(policy, observe),
    }
    sim.trace
}

/// Runs `setup` without observing.
pub fn simulate<P: Policy + ?Sized>(policy: &mut P, setup: &Setup) -> Trace {
    run(policy, setup, &mut |_, _| {})
}

fn id(i: usize) -> VgpuId {
    VgpuId(i as u32)
}

#[derive(Debug, Default)]
struct Device {
    /// `(vgpu, length, submitted at)`, not started.
    queue: VecDeque<(usize, Nanos, Nanos)>,
    /// The kernel running: `(vgpu, end)`.
    current: Option<(usize, Nanos)>,
    free_at: Nanos,
}

impl Device {
    fn len(&self) -> usize {
        self.queue.len() + usize::from(self.current.is_some())
    }

    /// Runs the device up to `to`, logging every kernel it starts.
    fn advance(&mut self, to: Nanos, trace: &mut Trace) {
        loop {
            if let Some((_, end)) = self.current {
                if end > to {
                    return;
                }
                self.free_at = end;
                self.current = None;
            }
            let Some(&(v, len, submitted)) = self.queue.front() else {
                return;
            };
            let start = self.free_at.max(submitted);
            if start > to {
                return;
            }
            self.queue.pop_front();
            trace.run(v, start, start + len);
            self.current = Some((v, start + len));
        }
    }
}

struct Sim<'a> {
    setup: &'a Setup,
    /// Blocked as the policy sees it.
    blocked: Vec<bool>,
    next_change: usize,
    trace: Trace,
    device: Device,
    /// One round of the CPU scheduler's vCPU order.
    cpu_round: Vec<usize>,
    /// CPU switches made so far.
    cpu_switches: u64,
}

impl Sim<'_> {
    /// When the CPU scheduler next switches vCPUs.
    fn next_cpu_switch(&self) -> Option<Nanos> {
        let cpu = self.setup.cpu.as_ref()?;
        Some(Nanos(cpu.quantum.as_nanos() * (self.cpu_switches + 1)))
    }

    /// Sends the co-scheduling requests of the CPU switches due by `t`;
    /// whether one of them revoked `holder`'s lease.
    fn cpu_requests<P: Policy + ?Sized>(&mut self, p: &mut P, t: Nanos, holder: usize) -> bool {
        let mut revoked = false;
        while let Some(at) = self.next_cpu_switch().filter(|&at| at <= t) {
            let target = self.cpu_round[(self.cpu_switches % self.cpu_round.len() as u64) as usize];
            self.cpu_switches += 1;
            let reply = p.cosched_request(id(target), at).unwrap();
            if reply
                == (CoschedReply::Switch {
                    preempt: Some(id(holder)),
                })
            {
                revoked = true;
            }
        }
        revoked
    }

    fn apply_changes<P: Policy + ?Sized>(&mut self, p: &mut P, t: Nanos) {
        while let Some(&(at, v, w)) = self.setup.weight_changes.get(self.next_change) {
            if at > t {
                break;
            }
            p.set_weight(id(v), w).unwrap();
            self.next_change += 1;
        }
    }

    /// Wakes every blocked vGPU that got work in `[from, to]`, at the instant
    /// it got it, in time order.
    fn wake_arrivals<P: Policy + ?Sized>(&mut self, p: &mut P, from: Nanos, to: Nanos) {
        let mut arrivals: Vec<(Nanos, usize)> = (0..self.blocked.len())
            .filter(|&v| self.blocked[v])
            .filter_map(|v| {
                let w = self.setup.vgpus[v].demand.next_work(from)?;
                (w <= to).then_some((w, v))
            })
            .collect();
        arrivals.sort();
        for (w, v) in arrivals {
            p.wake(id(v), w).unwrap();
            self.blocked[v] = false;
        }
    }

    /// The next instant something changes while nobody is runnable.
    fn next_arrival(&self, t: Nanos) -> Option<Nanos> {
        let work = (0..self.blocked.len())
            .filter(|&v| self.blocked[v])
            .filter_map(|v| self.setup.vgpus[v].demand.next_work(t))
            .min();
        let change = self.setup.weight_changes.get(self.next_change).map(|c| c.0);
        match (work, change) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Applies the weight changes and wake-ups due by `t` and picks, moving
    /// `t` over stretches where nobody is runnable. `None` when the run is
    /// over.
    fn step<P: Policy + ?Sized>(
        &mut self,
        p: &mut P,
        t: &mut Nanos,
        observe: &mut dyn FnMut(&P, Nanos),
    ) -> Option<(usize, fairgpu_scheduler::Grant)> {
        loop {
            if *t >= self.setup.duration {
                return None;
            }
            self.apply_changes(p, *t);
            self.wake_arrivals(p, *t, *t);
            observe(p, *t);
            if let Some(g) = p.pick(*t) {
                observe(p, *t);
                return Some((g.id.0 as usize, g));
            }
            // A policy that throttles runnable vGPUs says when it may
            // answer again.
            let event = p.next_event().filter(|&e| e > *t);
            let next = match (self.next_arrival(*t), event) {
                (Some(a), Some(e)) => a.min(e),
                (a, e) => a.or(e)?,
            };
            assert!(next > *t, "nobody runnable yet work is due");
            self.device.advance(next, &mut self.trace);
            *t = next;
        }
    }

    fn finish_grant<P: Policy + ?Sized>(
        &mut self,
        p: &mut P,
        v: usize,
        (t0, t): (Nanos, Nanos),
        used: Nanos,
        yields: bool,
    ) {
        self.wake_arrivals(p, t0, t);
        p.release(id(v), used, t).unwrap();
        if yields {
            p.block(id(v), t).unwrap();
            self.blocked[v] = true;
        }
        self.trace.grants.push(GrantRecord {
            vgpu: v,
            at: t0,
            until: t,
            used,
        });
    }

    fn collaborative<P: Policy + ?Sized>(&mut self, p: &mut P, observe: &mut dyn FnMut(&P, Nanos)) {
        let idle = p.idle_behaviour();
        let spin = self.setup.spin;
        let mut t = Nanos::ZERO;
        while let Some((v, g)) = self.step(p, &mut t, observe) {
            let vg = &self.setup.vgpus[v];
            let t0 = t;
            let lease_end = t0 + g.slice;
            let mut used = Nanos::ZERO;
            let mut yields = false;
            while used < g.slice {
                if vg.demand.has_work(t) {
                    self.trace.run(v, t, t + vg.kernel);
                    let before = t;
                    t += vg.kernel;
                    used += vg.kernel;
                    // A priority policy ends the grant at a request
                    // boundary when a vGPU that must run first arrived.
                    self.wake_arrivals(p, before, t);
                    if p.preempt(t) == Some(id(v)) {
                        self.trace.preemptions += 1;
                        break;
                    }
                    continue;
                }
                let next = vg.demand.next_work(t);
                match idle.while_idle(used > Nanos::ZERO) {
                    // Hybrid spinning: wait up to the budget, then yield.
                    IdleBehaviour::Block => match next {
                        Some(w) if w <= t + spin => t = w,
                        _ => {
                            t += spin;
                            yields = true;
                            break;
                        }
                    },
                    // Polling: hold the grant until its wall-clock end.
                    IdleBehaviour::Poll | IdleBehaviour::Hold => match next {
                        Some(w) if w < lease_end => t = w,
                        _ => {
                            t = t.max(lease_end);
                            break;
                        }
                    },
                }
            }
            self.finish_grant(p, v, (t0, t), used, yields);
            observe(p, t);
        }
        self.trace.end = t;
    }

    fn time_shared<P: Policy + ?Sized>(&mut self, p: &mut P, observe: &mut dyn FnMut(&P, Nanos)) {
        let idle = p.idle_behaviour();
        let spin = self.setup.spin;
        let cap = self.setup.hw_queue;
        let mut t = Nanos::ZERO;
        while let Some((v, g)) = self.step(p, &mut t, observe) {
            let vg = &self.setup.vgpus[v];
            let t0 = t;
            let lease_end = t0 + g.slice;
            let mut idle_since: Option<Nanos> = None;
            let mut yields = false;
            loop {
                self.device.advance(t, &mut self.trace);
                if self.cpu_requests(p, t, v) {
                    self.trace.preemptions += 1;
                    break;
                }
                let busy = vg.demand.has_work(t);
                if busy {
                    idle_since = None;
                    while self.device.len() < cap {
                        self.device.queue.push_back((v, vg.kernel, t));
                    }
                    self.device.advance(t, &mut self.trace);
                } else if idle_since.is_none() {
                    idle_since = Some(t);
                }
                if t >= lease_end {
                    break;
                }
                if let (IdleBehaviour::Block, Some(since)) = (idle, idle_since) {
                    if t >= since + spin {
                        yields = true;
                        break;
                    }
                }
                let mut next = lease_end;
                if busy {
                    // The queue is full: the next submission is at the next
                    // completion.
                    if let Some((_, end)) = self.device.current {
                        next = next.min(end);
                    }
                    if let Some(end) = vg.demand.work_ends(t) {
                        next = next.min(end);
                    }
                } else {
                    if let Some(w) = vg.demand.next_work(t) {
                        next = next.min(w);
                    }
                    if let (IdleBehaviour::Block, Some(since)) = (idle, idle_since) {
                        next = next.min(since + spin);
                    }
                }
                if let Some(at) = self.next_cpu_switch() {
                    next = next.min(at);
                }
                assert!(next > t, "time-shared lease made no progress");
                t = next;
            }
            // A time-sharing scheduler knows only how long the lease was held.
            self.finish_grant(p, v, (t0, t), t - t0, yields);
            observe(p, t);
        }
        self.device.advance(t, &mut self.trace);
        self.trace.end = t;
    }
}
