//! `fairgpu bench fairness`: FairGV's fairness experiments (Figs. 8–11) on
//! the daemon, with real CUDA driver-API clients as the VMs' workloads.
//!
//! For each experiment, case and policy the harness writes a daemon
//! configuration, starts `fairgpu serve` (SimGpu by default, or the GPU),
//! starts one [`workload`](crate::workload) process per VM through
//! `libcuda.so.1`, lets them warm up, and measures every VM's device-time
//! rate over a window from the daemon's own accounting (`gpu_time_ns` in
//! its status, read by an [`observe::Observer`]). [`metrics`] turns the
//! rates into normalized throughputs, the Min-Max Ratio, the aggregated
//! overhead and the utilization; tables go to the terminal, everything to
//! `results.json`, and a chart to `fairness.svg`.
//!
//! A policy this build's daemon does not accept is reported as rejected
//! (with the configuration parser's message) and skipped; `none` (no
//! scheduler: every worker issues freely, the device runs kernels first
//! come first served) always runs.

pub mod harness;
pub mod metrics;
pub mod observe;
pub mod svg;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::workload::ClientKind;
use harness::{Device, PolicySupport, Session, SessionConfig, Tuning, VmSpec, WorkloadSpec};
use metrics::VmShare;

/// FairGV's policies and its baselines, in the order tables and charts
/// show them: what `--policy all` runs in FairGV's experiments.
pub const POLICIES: [&str; 5] = ["fairgv", "credit-poll", "credit-hs", "strict", "none"];
/// What `--policy all` runs in NEON's experiment.
pub const NEON_POLICIES: [&str; 6] = ["neon-ts", "neon-dts", "neon-dfq", "loga", "fairgv", "none"];
/// What `--policy all` runs in LoGA's experiment.
pub const LOGA_POLICIES: [&str; 4] = ["neon-dfq", "loga", "fairgv", "none"];
/// What `--policy all` runs in LoGA's accounting-overhead experiment:
/// no accounting first, the reference of the others.
pub const LOGA_ACCOUNTING_POLICIES: [&str; 3] = ["none", "neon-dfq", "loga"];
/// What `--policy all` runs in TimeGraph's experiment.
pub const TIMEGRAPH_POLICIES: [&str; 4] = ["timegraph-prt", "timegraph-ht", "fairgv", "none"];
/// The policies `--experiment opencl --policy all` runs.
pub const OPENCL_POLICIES: [&str; 2] = ["fairgv", "none"];
/// Every policy `--policy` accepts.
pub const ALL_POLICIES: [&str; 11] = [
    "fairgv",
    "credit-poll",
    "credit-hs",
    "strict",
    "neon-ts",
    "neon-dts",
    "neon-dfq",
    "loga",
    "timegraph-prt",
    "timegraph-ht",
    "none",
];
/// The experiments `--experiment all` runs (FairGV's).
pub const EXPERIMENTS: [&str; 4] = ["fig8", "fig9", "fig10", "fig11"];

/// The policies `--policy all` runs in `experiment`.
pub fn policies_for(experiment: &str) -> &'static [&'static str] {
    match experiment {
        "neon" => &NEON_POLICIES,
        "loga" => &LOGA_POLICIES,
        "loga-accounting" => &LOGA_ACCOUNTING_POLICIES,
        "timegraph" => &TIMEGRAPH_POLICIES,
        "opencl" => &OPENCL_POLICIES,
        _ => &POLICIES,
    }
}
/// Background kernel sizes of Fig. 11, µs.
pub const FIG11_SIZES_US: [f64; 5] = [21.0, 100.0, 400.0, 800.0, 1605.0];
/// Throttle's kernel in Fig. 10: MM's size (the paper's co-runner is MM
/// with sleeps).
pub const FIG10_KERNEL_US: f64 = 207.0;
/// How often the observer reads the daemon's status.
const OBSERVE_EVERY: Duration = Duration::from_millis(5);

/// `fairgpu bench fairness` options.
#[derive(Debug, Clone, clap::Args)]
pub struct FairnessArgs {
    /// Which experiment: fig8 (3 VMs, weights 1:2:3; MM, HS, BS, SRD1),
    /// fig9 (6 VMs, weights 1:2:2:3:3:4; BS, SRD1), fig10 (utilization with
    /// a non-saturating co-runner), fig11 (background kernel size sweep),
    /// all (those four), or long-kernels (kernel slicing: FairGV's Table 4,
    /// and 100 ms kernels against 200 µs ones with and without slicing;
    /// SimGpu's model of a grid's duration; then a GPU eater against two
    /// VMs of 200 µs kernels under a 500 ms runaway guard, also in
    /// preemptive mode, and the two alone), neon (NEON's Throttle: request
    /// sizes from 19 µs to 1.7 ms, fairness, concurrency efficiency and
    /// standalone overhead), or timegraph (a periodic high-priority VM
    /// against throughput VMs: deadlines met and response times; VMs with
    /// reservations: the budgets held), or loga (non-saturating VMs beside
    /// saturating ones: what sampling engagements cost them against
    /// accounting that pauses no one), or loga-accounting (LoGA's Fig. 7:
    /// an application beside Throttles of 10 µs kernels sleeping 1 ms,
    /// scheduling disabled (`accounting_only`), the application's
    /// turnaround against no accounting), or opencl (OpenCL VMs at weights
    /// 1:2, and OpenCL beside CUDA: kernels on the host's OpenCL platform,
    /// PoCL without a GPU).
    #[arg(long, default_value = "all", value_parser = ["fig8", "fig9", "fig10", "fig11", "long-kernels", "neon", "timegraph", "loga", "loga-accounting", "opencl", "all"])]
    pub experiment: String,
    /// Which scheduling policy: fairgv, credit-poll, credit-hs, strict,
    /// neon-ts, neon-dts, neon-dfq, loga, timegraph-prt, timegraph-ht, none
    /// (no scheduler), or all (the experiment's own set: FairGV's four and
    /// none; for neon NEON's three, loga, fairgv and none; for loga
    /// neon-dfq, loga, fairgv and none; for timegraph TimeGraph's two,
    /// fairgv and none).
    #[arg(long, default_value = "all", value_parser = ["fairgv", "credit-poll", "credit-hs", "strict", "neon-ts", "neon-dts", "neon-dfq", "loga", "timegraph-prt", "timegraph-ht", "none", "all"])]
    pub policy: String,
    /// Where the daemon runs kernels: sim (SimGpu) or cuda (needs a GPU
    /// host).
    #[arg(long, value_enum, default_value_t = Device::Sim)]
    pub device: Device,
    /// A few seconds per run instead of ~20 s.
    #[arg(long)]
    pub quick: bool,
    /// Measurement window per run, seconds (default 2 with --quick, else 20).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Print the results as JSON on stdout (tables go to stderr).
    #[arg(long)]
    pub json: bool,
    /// Directory for results.json and fairness.svg.
    #[arg(long, value_name = "DIR", default_value = "target/fairness")]
    pub out: PathBuf,
    /// How the workloads reach the GPU: libcuda (fairgpu's guest library as
    /// libcuda.so.1) or rust (fairgpu's Rust client).
    #[arg(long, value_enum, default_value_t = ClientKind::Libcuda)]
    pub client: ClientKind,
    /// Skip the standalone runs (each workload alone, no scheduler) that
    /// give the paper's overhead against running alone and the demand of
    /// non-saturating VMs.
    #[arg(long)]
    pub no_baseline: bool,
    /// The daemon's accounting (`[daemon] accounting`): sampled, every,
    /// events or none; the daemon's default when left out.
    #[arg(long, value_parser = ["sampled", "every", "events", "none"])]
    pub accounting: Option<String>,
    /// The daemon's time slice in milliseconds (`[daemon] slice_ms`).
    #[arg(long, value_name = "MS")]
    pub slice_ms: Option<f64>,
    /// The daemon's hybrid-spin budget in microseconds (`[daemon] spin_us`).
    #[arg(long, value_name = "US")]
    pub spin_us: Option<u32>,
    /// Holders keep the GPU for their whole slice, idle or not
    /// (`[daemon] work_conserving = false`): Fig. 10's comparison.
    #[arg(long)]
    pub no_work_conserving: bool,
    /// One more `[daemon]` line for every run, as written (repeatable),
    /// e.g. --daemon-set "adaptive_spin = false" or
    /// --daemon-set "wake_preempt = false" to compare a setting's effect.
    #[arg(long = "daemon-set", value_name = "LINE")]
    pub daemon_set: Vec<String>,
    /// Guests share the host's last CPU and the daemon its other CPUs, as
    /// in FairGV's setup (VMs sharing one core, the backend on its own);
    /// without it every process may run anywhere.
    #[arg(long)]
    pub pin: bool,
    /// The daemon's log filter in each run (tracing syntax, e.g.
    /// "fairgpu_worker::accounting=trace" for every grant taken and released).
    /// With it each run's directory (configuration, daemon.log, the
    /// workloads' logs) is kept, and its path printed; by default the
    /// daemon logs warnings and the directory is removed.
    #[arg(long, value_name = "FILTER")]
    pub daemon_log: Option<String>,
    /// Run only the cases with this label (e.g. MM, "MM vs 400 us");
    /// repeatable. Every case when left out.
    #[arg(long = "case", value_name = "LABEL")]
    pub cases: Vec<String>,
}

impl FairnessArgs {
    /// Whether `--case` selects `case`.
    fn selects(&self, case: &Case) -> bool {
        self.cases.is_empty()
            || self
                .cases
                .iter()
                .any(|c| c.eq_ignore_ascii_case(&case.label))
    }
}

/// One run: an experiment's case with its VMs.
#[derive(Debug, Clone)]
pub struct Case {
    /// The experiment.
    pub experiment: &'static str,
    /// The case's label within it ("MM", "sleep 50%", "MM vs 400us").
    pub label: String,
    /// The VMs.
    pub vms: Vec<VmSpec>,
    /// Each VM's demand (1.0: saturating).
    pub demands: Vec<f64>,
    /// The case's own `[daemon]` lines (kernel slicing's settings).
    pub daemon: Vec<String>,
}

fn vm(name: &str, weight: u32, w: WorkloadSpec) -> VmSpec {
    VmSpec {
        name: name.to_owned(),
        weight,
        workload: w,
        settings: Vec::new(),
    }
}

/// A VM with `[[vm]]` settings for the TimeGraph policies.
fn vm_with(name: &str, w: WorkloadSpec, settings: &[&str]) -> VmSpec {
    VmSpec {
        settings: settings.iter().map(|s| (*s).to_owned()).collect(),
        ..vm(name, 1, w)
    }
}

fn same_workload(experiment: &'static str, weights: &[u32], profile: &str) -> Case {
    let vms: Vec<VmSpec> = weights
        .iter()
        .enumerate()
        .map(|(i, &w)| vm(&format!("vm{}", i + 1), w, WorkloadSpec::profile(profile)))
        .collect();
    Case {
        experiment,
        label: profile.to_owned(),
        demands: vec![1.0; vms.len()],
        vms,
        daemon: Vec::new(),
    }
}

/// The long VM's kernel in the long-kernel experiments: FairGV's "very
/// long" kernels, 100 ms over 60,000 blocks (on SimGpu the duration is the
/// grid's, and a part takes its blocks' share).
pub const LONG_KERNEL_US: f64 = 100_000.0;
/// Blocks of the long VM's grid.
pub const LONG_KERNEL_BLOCKS: u32 = 60_000;
/// The short VMs' kernel, µs (BS's mix: one synchronous call per kernel).
pub const SHORT_KERNEL_US: f64 = 200.0;

/// `fairgpu bench fairness --experiment long-kernels`
/// (docs/long-kernels.md): (a) FairGV's Table 4, the long VM alone with
/// parts of N blocks against the whole kernel; (b) the long VM against two
/// VMs of short kernels, weights 1:1:1, with slicing (the daemon's
/// defaults) and without.
fn long_kernel_cases(quick: bool) -> Vec<Case> {
    let long = WorkloadSpec {
        profile: "MM".into(),
        kernel_us: Some(LONG_KERNEL_US),
        sleep_ratio: 0.0,
        blocks: Some(LONG_KERNEL_BLOCKS),
        ..WorkloadSpec::profile("MM")
    };
    let short = WorkloadSpec {
        profile: "BS".into(),
        kernel_us: Some(SHORT_KERNEL_US),
        sleep_ratio: 0.0,
        ..WorkloadSpec::profile("BS")
    };
    let sizes: &[u32] = if quick {
        &[500, 1500, 6000]
    } else {
        &[150, 500, 1500, 3000, 6000, 15000]
    };
    let alone = |label: String, daemon: Vec<String>| Case {
        experiment: "long-kernels",
        label,
        vms: vec![vm("long", 1, long.clone())],
        demands: vec![1.0],
        daemon,
    };
    let mut v: Vec<Case> = sizes
        .iter()
        .map(|n| {
            alone(
                format!("alone, parts of {n}"),
                vec![
                    "kernel_slice_ms = 0.01".into(),
                    format!("kernel_slice_blocks = {n}"),
                ],
            )
        })
        .collect();
    v.push(alone(
        "alone, whole".into(),
        vec!["slice_kernels = false".into()],
    ));
    for (label, daemon) in [
        ("100ms vs 200us, sliced", Vec::new()),
        (
            "100ms vs 200us, whole",
            vec!["slice_kernels = false".to_owned()],
        ),
    ] {
        v.push(Case {
            experiment: "long-kernels",
            label: label.into(),
            vms: vec![
                vm("long", 1, long.clone()),
                vm("short1", 1, short.clone()),
                vm("short2", 1, short.clone()),
            ],
            demands: vec![1.0; 3],
            daemon,
        });
    }
    // (c) A GPU eater against the same two VMs, the guard at
    // EATER_GUARD_MS; and the two alone, for their throughput without it.
    let eater = WorkloadSpec {
        client: Some(ClientKind::Rust),
        ..WorkloadSpec::profile("Eater")
    };
    let guard = vec![format!("max_request_ms = {EATER_GUARD_MS}")];
    let eater_case = |label: String, daemon: Vec<String>| Case {
        experiment: "long-kernels",
        label,
        vms: vec![
            vm("eater", 1, eater.clone()),
            vm("short1", 1, short.clone()),
            vm("short2", 1, short.clone()),
        ],
        demands: vec![1.0; 3],
        daemon,
    };
    v.push(eater_case(
        format!("eater vs 200us, guard {EATER_GUARD_MS}ms"),
        guard.clone(),
    ));
    // The same in FairGV's preemptive mode: the eater is switched out
    // after its (30 ms) slice. SimGpu models a non-preemptive GPU, so the
    // short VMs' kernels still wait behind the eater's: this shows what the
    // scheduler does, not what a GPU that time-slices would give them.
    v.push(eater_case(
        format!("eater vs 200us, guard {EATER_GUARD_MS}ms, preemptive"),
        [guard.clone(), vec!["preemptive = true".into()]].concat(),
    ));
    v.push(Case {
        experiment: "long-kernels",
        label: "200us, no eater".into(),
        vms: vec![vm("short1", 1, short.clone()), vm("short2", 1, short)],
        demands: vec![1.0; 2],
        daemon: guard,
    });
    v
}

/// The runaway guard in the eater case of the long-kernel experiments, ms.
pub const EATER_GUARD_MS: u32 = 500;

/// For a long-kernel run: the long VM's kernels per second and the short
/// VMs' worst synchronous-call p99 (empty for other experiments).
fn long_kernel_note(r: &RunResult) -> String {
    if r.experiment != "long-kernels" {
        return String::new();
    }
    let mut note = String::new();
    if let Some(l) = r.vms.iter().find(|v| v.name == "long") {
        note.push_str(&format!(", long {:.2} kernels/s", l.kernels_per_s));
    }
    if let Some(e) = r.vms.iter().find(|v| v.name == "eater") {
        note.push_str(&format!(
            ", eater: {} kernels ended by the guard, longest grant {:.1} ms",
            e.runaways.unwrap_or(0),
            e.longest_hold_ms.unwrap_or(0.0)
        ));
    }
    let shorts: Vec<&VmResult> = r
        .vms
        .iter()
        .filter(|v| v.name.starts_with("short"))
        .collect();
    if !shorts.is_empty() {
        let total: f64 = shorts.iter().map(|v| v.kernels_per_s).sum();
        note.push_str(&format!(", short VMs {total:.0} kernels/s together"));
    }
    let worst = |f: fn(&VmResult) -> Option<f64>| {
        r.vms
            .iter()
            .filter(|v| v.name.starts_with("short"))
            .filter_map(f)
            .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
    };
    if let (Some(p99), Some(p999), Some(max)) = (
        worst(|v| v.sync_p99_us),
        worst(|v| v.sync_p999_us),
        worst(|v| v.sync_max_us),
    ) {
        note.push_str(&format!(
            ", short VMs' sync p99 {:.1} ms, p99.9 {:.1} ms, max {:.1} ms",
            p99 / 1e3,
            p999 / 1e3,
            max / 1e3
        ));
    }
    note
}

/// The cases of `experiment`.
pub fn cases(experiment: &str, quick: bool) -> Vec<Case> {
    match experiment {
        "fig8" => ["MM", "HS", "BS", "SRD1"]
            .iter()
            .map(|p| same_workload("fig8", &[1, 2, 3], p))
            .collect(),
        "fig9" => ["BS", "SRD1"]
            .iter()
            .map(|p| same_workload("fig9", &[1, 2, 2, 3, 3, 4], p))
            .collect(),
        "fig10" => {
            let ratios: &[f64] = if quick {
                &[0.5, 0.8]
            } else {
                &[0.5, 0.6, 0.7, 0.8]
            };
            ratios
                .iter()
                .map(|&r| Case {
                    experiment: "fig10",
                    label: format!("sleep {:.0}%", r * 100.0),
                    vms: vec![
                        vm("bs", 1, WorkloadSpec::profile("BS")),
                        vm(
                            "throttle",
                            1,
                            WorkloadSpec {
                                profile: "Throttle".into(),
                                kernel_us: Some(FIG10_KERNEL_US),
                                sleep_ratio: r,
                                ..WorkloadSpec::profile("Throttle")
                            },
                        ),
                    ],
                    demands: vec![1.0, 1.0 - r],
                    daemon: Vec::new(),
                })
                .collect()
        }
        "fig11" => ["MM", "HS"]
            .iter()
            .flat_map(|fg| {
                FIG11_SIZES_US.iter().map(move |&k| Case {
                    experiment: "fig11",
                    label: format!("{fg} vs {k}us"),
                    vms: vec![
                        vm("fg", 1, WorkloadSpec::profile(fg)),
                        vm(
                            "bg",
                            1,
                            WorkloadSpec {
                                profile: "MM".into(),
                                kernel_us: Some(k),
                                sleep_ratio: 0.0,
                                ..WorkloadSpec::profile("MM")
                            },
                        ),
                    ],
                    demands: vec![1.0, 1.0],
                    daemon: Vec::new(),
                })
            })
            .collect(),
        "long-kernels" => long_kernel_cases(quick),
        "neon" => neon_cases(),
        "loga" => loga_cases(),
        "loga-accounting" => loga_accounting_cases(),
        "timegraph" => timegraph_cases(),
        "opencl" => opencl_cases(),
        _ => Vec::new(),
    }
}

/// NEON's Throttle of `us` µs requests, saturating.
fn throttle(us: f64) -> WorkloadSpec {
    WorkloadSpec {
        kernel_us: Some(us),
        ..WorkloadSpec::profile("Throttle")
    }
}

/// `fairgpu bench fairness --experiment neon` (NEON, ASPLOS 2014, section
/// 5): Throttle tasks of request sizes from 19 µs to 1.7 ms at equal
/// weights; a non-saturating Throttle beside a saturating one; one Throttle
/// alone (the policy's standalone overhead against running without a
/// scheduler).
fn neon_cases() -> Vec<Case> {
    let case = |label: &str, vms: Vec<VmSpec>, demands: Vec<f64>| Case {
        experiment: "neon",
        label: label.to_owned(),
        vms,
        demands,
        daemon: Vec::new(),
    };
    vec![
        case(
            "19us vs 1700us",
            vec![
                vm("t19", 1, throttle(19.0)),
                vm("t1700", 1, throttle(1700.0)),
            ],
            vec![1.0, 1.0],
        ),
        case(
            "19us, 200us, 1700us",
            vec![
                vm("t19", 1, throttle(19.0)),
                vm("t200", 1, throttle(200.0)),
                vm("t1700", 1, throttle(1700.0)),
            ],
            vec![1.0; 3],
        ),
        case(
            "1700us vs 200us sleep 50%",
            vec![
                vm("t1700", 1, throttle(1700.0)),
                vm(
                    "sleepy",
                    1,
                    WorkloadSpec {
                        sleep_ratio: 0.5,
                        ..throttle(200.0)
                    },
                ),
            ],
            vec![1.0, 0.5],
        ),
        case(
            "200us alone",
            vec![vm("t200", 1, throttle(200.0))],
            vec![1.0],
        ),
    ]
}

/// `fairgpu bench fairness --experiment opencl`: VMs whose guests run
/// OpenCL (the workload generator's calls as OpenCL requests, kernels on
/// the host's OpenCL platform) at weights 1:2, alone and beside a CUDA VM.
/// On a host without a GPU the OpenCL device is PoCL, the host's CPU, and
/// the CUDA device SimGpu: the scheduler shares one grant between them.
fn opencl_cases() -> Vec<Case> {
    let cl = |us: f64| WorkloadSpec {
        kernel_us: Some(us),
        client: Some(ClientKind::Opencl),
        ..WorkloadSpec::profile("MM")
    };
    let cuda = |us: f64| WorkloadSpec {
        kernel_us: Some(us),
        ..WorkloadSpec::profile("MM")
    };
    let case = |label: &str, vms: Vec<VmSpec>| Case {
        experiment: "opencl",
        label: label.to_owned(),
        demands: vec![1.0; vms.len()],
        vms,
        daemon: Vec::new(),
    };
    vec![
        case(
            "OpenCL 1:2",
            vec![vm("cl1", 1, cl(1000.0)), vm("cl2", 2, cl(1000.0))],
        ),
        case(
            "CUDA 1 : OpenCL 2",
            vec![vm("cuda", 1, cuda(1000.0)), vm("cl", 2, cl(1000.0))],
        ),
        case(
            "OpenCL 1 : CUDA 2",
            vec![vm("cl", 1, cl(1000.0)), vm("cuda", 2, cuda(1000.0))],
        ),
    ]
}

/// `fairgpu bench fairness --experiment loga` (LoGA, section 5):
/// non-saturating VMs (Throttle sleeping half or 80% of the time) beside
/// a saturating one; what each gets of its demand (X) shows what the
/// accounting costs the co-runners that never over-use.
fn loga_cases() -> Vec<Case> {
    let sleepy = |r: f64| WorkloadSpec {
        sleep_ratio: r,
        ..throttle(200.0)
    };
    let case = |label: &str, vms: Vec<VmSpec>, demands: Vec<f64>| Case {
        experiment: "loga",
        label: label.to_owned(),
        vms,
        demands,
        daemon: Vec::new(),
    };
    vec![
        case(
            "2 sleeping 50% + MM",
            vec![
                vm("s1", 1, sleepy(0.5)),
                vm("s2", 1, sleepy(0.5)),
                vm("mm", 1, WorkloadSpec::profile("MM")),
            ],
            vec![0.5, 0.5, 1.0],
        ),
        case(
            "sleeping 80% + 2 MM",
            vec![
                vm("s1", 1, sleepy(0.8)),
                vm("mm1", 1, WorkloadSpec::profile("MM")),
                vm("mm2", 1, WorkloadSpec::profile("MM")),
            ],
            vec![0.2, 1.0, 1.0],
        ),
    ]
}

/// Throttles beside each application in LoGA's Fig. 7.
pub const LOGA_THROTTLES: usize = 4;

/// `fairgpu bench fairness --experiment loga-accounting` (LoGA, section
/// 5.3, Fig. 7): one application beside [`LOGA_THROTTLES`] Throttles of
/// 10 µs kernels that sleep 1 ms after each (about 1% of the device each),
/// with scheduling disabled (`accounting_only = true`: every VM is charged,
/// none is held back), so that the application's slowdown against no
/// accounting at all (`--policy none`) is what the accounting costs it.
/// The paper ran ten Throttles on a GPU; four keep this experiment's
/// guests within a small host's CPUs.
fn loga_accounting_cases() -> Vec<Case> {
    let tiny = WorkloadSpec {
        sleep_ratio: 1000.0 / 1010.0,
        ..throttle(10.0)
    };
    ["MM", "BS"]
        .into_iter()
        .map(|app| {
            let mut vms = vec![vm("app", 1, WorkloadSpec::profile(app))];
            let mut demands = vec![1.0];
            for i in 1..=LOGA_THROTTLES {
                vms.push(vm(&format!("t{i}"), 1, tiny.clone()));
                demands.push(1.0 - tiny.sleep_ratio);
            }
            Case {
                experiment: "loga-accounting",
                label: format!("{app} + {LOGA_THROTTLES} Throttles 10us/1ms"),
                vms,
                demands,
                daemon: vec!["accounting_only = true".into()],
            }
        })
        .collect()
}

/// LoGA's Fig. 7 measure: each VM's kernels per second over its rate in
/// the same case without accounting (`--policy none`), for the runs of
/// `experiment` in `runs` (1: the accounting cost it nothing).
fn annotate_against_none(runs: &mut [RunResult], experiment: &str) {
    let reference: Vec<(String, String, f64)> = runs
        .iter()
        .filter(|r| r.experiment == experiment && r.policy == "none" && r.status == RunStatus::Ok)
        .flat_map(|r| {
            r.vms
                .iter()
                .map(|v| (r.case.clone(), v.name.clone(), v.kernels_per_s))
        })
        .collect();
    for r in runs.iter_mut().filter(|r| r.experiment == experiment) {
        for v in &mut r.vms {
            v.vs_none = reference
                .iter()
                .find(|(c, n, _)| *c == r.case && *n == v.name)
                .filter(|(_, _, k)| *k > 0.0)
                .map(|(_, _, k)| v.kernels_per_s / k);
        }
    }
}

/// The table of LoGA's Fig. 7: per case and policy, the application's
/// kernels per second, its turnaround against no accounting (none's rate
/// over its rate: above 1 the accounting slowed it), and the Throttles'.
fn against_none_table(runs: &[RunResult], experiment: &str) -> String {
    let mut rows = Vec::new();
    for r in runs
        .iter()
        .filter(|r| r.experiment == experiment && r.status == RunStatus::Ok)
    {
        let Some(app) = r.vms.first() else { continue };
        let others: Vec<&VmResult> = r.vms.iter().skip(1).collect();
        let mean = |f: &dyn Fn(&VmResult) -> Option<f64>| -> Option<f64> {
            let v: Vec<f64> = others.iter().filter_map(|v| f(v)).collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        rows.push(vec![
            r.case.clone(),
            r.policy.clone(),
            format!("{:.0}", app.kernels_per_s),
            app.vs_none
                .filter(|x| *x > 0.0)
                .map_or("-".into(), |x| format!("{:.3}", 1.0 / x)),
            mean(&|v| Some(v.kernels_per_s)).map_or("-".into(), |k| format!("{k:.0}")),
            mean(&|v| v.vs_none.filter(|x| *x > 0.0).map(|x| 1.0 / x))
                .map_or("-".into(), |t| format!("{t:.3}")),
            pct(r.utilization),
        ]);
    }
    format!(
        "LoGA Fig. 7: turnaround against no accounting (none's kernels/s over the policy's; 1.000: the accounting cost nothing)\n{}",
        fairgpu_config::table::format_table(
            &[
                "CASE",
                "POLICY",
                "APP KERNELS/S",
                "APP TURNAROUND",
                "THROTTLE KERNELS/S",
                "THROTTLE TURNAROUND",
                "UTILIZATION",
            ],
            &rows,
        )
    )
}

/// TimeGraph's real-time task: ten 200 µs kernels (2 ms of device time)
/// every 20 ms, at priority 10.
fn realtime() -> VmSpec {
    vm_with(
        "rt",
        WorkloadSpec {
            kernel_us: Some(200.0),
            period_ms: Some(20.0),
            job_kernels: Some(10),
            ..WorkloadSpec::profile("MM")
        },
        &["priority = 10"],
    )
}

/// `fairgpu bench fairness --experiment timegraph` (TimeGraph, ATC 2011,
/// section 5): the periodic high-priority VM against two throughput VMs of
/// long (1,605 µs) kernels or of interactive BS; and two VMs with
/// reservations of 20% and 30% per 10 ms (posterior or apriori
/// enforcement) at priority 5 beside an unreserved one at 0.
fn timegraph_cases() -> Vec<Case> {
    let case = |label: &str, vms: Vec<VmSpec>, demands: Vec<f64>| Case {
        experiment: "timegraph",
        label: label.to_owned(),
        vms,
        demands,
        daemon: Vec::new(),
    };
    let long = WorkloadSpec {
        kernel_us: Some(1605.0),
        ..WorkloadSpec::profile("MM")
    };
    let mut v = vec![
        case(
            "rt vs 2 MM 1605us",
            vec![
                realtime(),
                vm("bg1", 1, long.clone()),
                vm("bg2", 1, long.clone()),
            ],
            vec![0.1, 1.0, 1.0],
        ),
        case(
            "rt vs 2 BS",
            vec![
                realtime(),
                vm("bg1", 1, WorkloadSpec::profile("BS")),
                vm("bg2", 1, WorkloadSpec::profile("BS")),
            ],
            vec![0.1, 1.0, 1.0],
        ),
    ];
    for mode in ["pe", "ae"] {
        let reserve = |budget: u32| {
            format!("reservation = {{ budget_ms = {budget}, period_ms = 10, mode = {mode:?} }}")
        };
        let (r20, r30) = (reserve(2), reserve(3));
        // Reserved VMs above the best-effort one, as TimeGraph runs them:
        // a reservation caps a VM's use, its priority gets it the GPU.
        v.push(case(
            &format!("reserved 20% + 30% ({mode})"),
            vec![
                vm_with("r20", WorkloadSpec::profile("MM"), &[&r20, "priority = 5"]),
                vm_with("r30", long.clone(), &[&r30, "priority = 5"]),
                vm("free", 1, WorkloadSpec::profile("HS")),
            ],
            vec![1.0; 3],
        ));
    }
    v
}

/// One VM's measured part of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmResult {
    /// Its name.
    pub name: String,
    /// Its weight.
    pub weight: u32,
    /// What it ran.
    pub workload: WorkloadSpec,
    /// Its demand (1.0: saturating).
    pub demand: f64,
    /// Measured device-time share of the window, `T_i`.
    pub share: f64,
    /// Ideal share, `O_i`.
    pub ideal_share: f64,
    /// Normalized throughput `x_i = T_i / O_i`.
    pub x: f64,
    /// Kernels per second in the window.
    pub kernels_per_s: f64,
    /// Kernels its workload completed over its whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_kernels: Option<u64>,
    /// Device utilization of its workload running alone (no scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alone: Option<f64>,
    /// Median latency of its synchronous calls over its run, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_p50_us: Option<f64>,
    /// 99th-percentile latency of its synchronous calls, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_p99_us: Option<f64>,
    /// 99.9th-percentile latency of its synchronous calls, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_p999_us: Option<f64>,
    /// Longest of its synchronous calls, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_max_us: Option<f64>,
    /// GPU time the policy charged it in the window, as a share of the
    /// window (compare with `share`, the device time it got).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub charged_share: Option<f64>,
    /// Grants it received per second in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grants_per_s: Option<f64>,
    /// Co-scheduled grants per second (it was interactive when granted)
    /// that found a guest thread asleep and woke it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosched_woke_per_s: Option<f64>,
    /// Co-scheduled grants per second that found the guest already
    /// waiting for the GPU (nobody to wake).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosched_waiting_per_s: Option<f64>,
    /// Periodic VMs: jobs it completed over its run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<u64>,
    /// Periodic VMs: the fraction of its jobs that met their deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadlines_met: Option<f64>,
    /// The share of the GPU its reservation holds (budget / period), under
    /// a policy that has reservations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved: Option<f64>,
    /// The longest it held one grant over the whole run (warm-up
    /// included), ms of wall-clock time: what the others waited for it
    /// at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_hold_ms: Option<f64>,
    /// Its requests the runaway guard ended over the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runaways: Option<u64>,
    /// Backfilling: the kernels it ran in other holders' idle gaps, and
    /// their device time in ms, over the whole run (warm-up included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfilled: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_ms: Option<f64>,
    /// Its kernels per second over its rate in the same case under
    /// `--policy none` (LoGA's Fig. 7; the experiment loga-accounting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_none: Option<f64>,
}

/// What happened to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Measured.
    Ok,
    /// The daemon does not accept the policy.
    Rejected,
    /// Something failed (see the error).
    Failed,
}

/// One (experiment, case, policy) run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The experiment.
    pub experiment: String,
    /// The case.
    pub case: String,
    /// The policy asked for.
    pub policy: String,
    /// What happened.
    pub status: RunStatus,
    /// Why it did not run or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The policy the daemon reported, if it reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_policy: Option<String>,
    /// Measurement window, s.
    pub window_s: f64,
    /// Per VM.
    pub vms: Vec<VmResult>,
    /// Min-Max Ratio.
    pub mmr: f64,
    /// Aggregated overhead.
    pub overhead: f64,
    /// Device utilization, `Σ T_i`.
    pub utilization: f64,
    /// Ideal utilization, `Σ O_i`.
    pub ideal_utilization: f64,
    /// Utilization without work conservation (each VM keeps its slices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub non_work_conserving_utilization: Option<f64>,
    /// FairGV's aggregated overhead against running alone: each VM's
    /// weighted share of its standalone throughput, summed, over the
    /// measured aggregated throughput (below 1: co-running VMs filled each
    /// other's gaps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_vs_alone: Option<f64>,
    /// NEON's concurrency efficiency, `Σ T_i / A_i` over the VMs' shares
    /// `T_i` and their standalone utilizations `A_i` (1: the co-run lost
    /// nothing against running each alone; for one VM, its standalone
    /// throughput under the policy over that without a scheduler).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
}

impl RunResult {
    fn empty(case: &Case, policy: &str, status: RunStatus, error: String, window_s: f64) -> Self {
        RunResult {
            experiment: case.experiment.to_owned(),
            case: case.label.clone(),
            policy: policy.to_owned(),
            status,
            error: Some(error),
            daemon_policy: None,
            window_s,
            vms: Vec::new(),
            mmr: 0.0,
            overhead: 0.0,
            utilization: 0.0,
            ideal_utilization: 0.0,
            non_work_conserving_utilization: None,
            overhead_vs_alone: None,
            efficiency: None,
        }
    }

    /// Adds what the standalone runs in `alone` say: each VM's standalone
    /// utilization and the overhead against running alone.
    pub fn annotate(&mut self, alone: &[Baseline]) {
        let find = |w: &WorkloadSpec| {
            alone
                .iter()
                .find(|b| &b.workload == w)
                .map(|b| b.utilization)
        };
        for v in &mut self.vms {
            v.alone = find(&v.workload);
        }
        let total_w: f64 = self.vms.iter().map(|v| f64::from(v.weight)).sum();
        let ideal: Option<f64> = self
            .vms
            .iter()
            .map(|v| v.alone.map(|a| f64::from(v.weight) / total_w * a))
            .sum();
        if self.status == RunStatus::Ok && total_w > 0.0 {
            self.overhead_vs_alone =
                ideal.map(|i| metrics::aggregated_overhead(i, self.utilization));
            // NEON's concurrency efficiency: each VM's throughput beside
            // the others over its throughput alone, summed (for NEON's
            // closed-loop Throttle tasks; a periodic VM's standalone use
            // is not its throughput).
            self.efficiency = (self.experiment == "neon")
                .then(|| {
                    self.vms
                        .iter()
                        .map(|v| v.alone.filter(|a| *a > 0.0).map(|a| v.share / a))
                        .sum::<Option<f64>>()
                })
                .flatten();
        }
    }
}

/// A workload measured alone on the device, without a scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// The workload.
    pub workload: WorkloadSpec,
    /// Device utilization it reached.
    pub utilization: f64,
    /// Kernels per second.
    pub kernels_per_s: f64,
}

impl Case {
    /// Demands from the standalone runs: in Fig. 10, whose point is how
    /// much of the device non-saturating VMs leave, every VM demands what
    /// it used alone; elsewhere a VM that sleeps does (1 - its sleep ratio
    /// where it was not measured) and the closed-loop ones saturate.
    pub fn apply_baselines(&mut self, alone: &[Baseline]) {
        let all = self.experiment == "fig10";
        for (i, v) in self.vms.iter().enumerate() {
            if all || v.workload.sleep_ratio > 0.0 {
                if let Some(b) = alone.iter().find(|b| b.workload == v.workload) {
                    self.demands[i] = b.utilization.clamp(0.0, 1.0);
                }
            }
        }
    }

    /// The workload alone.
    fn alone(w: &WorkloadSpec) -> Case {
        Case {
            experiment: "alone",
            label: w.describe(),
            vms: vec![vm("vm1", 1, w.clone())],
            demands: vec![1.0],
            daemon: Vec::new(),
        }
    }
}

/// The whole result file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// The command that produced it.
    pub command: String,
    /// sim or cuda.
    pub device: Device,
    /// libcuda or rust.
    pub client: ClientKind,
    /// Whether --quick was given.
    pub quick: bool,
    /// Measurement window per run, s.
    pub window_s: f64,
    /// Warm-up before each window, s.
    pub warmup_s: f64,
    /// CPUs of this host.
    pub host_cpus: usize,
    /// Per policy: "ok", or why the daemon rejects it.
    pub policies: Vec<PolicyNote>,
    /// Every workload alone, without a scheduler.
    #[serde(default)]
    pub baselines: Vec<Baseline>,
    /// Every run.
    pub runs: Vec<RunResult>,
}

/// Whether a policy could run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyNote {
    /// The policy.
    pub policy: String,
    /// Whether the daemon accepts it.
    pub accepted: bool,
    /// The parser's message when it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Timing of one run, and the daemon's scheduling settings for it.
#[derive(Debug, Clone)]
pub struct Timing {
    /// Warm-up before the window.
    pub warmup: Duration,
    /// The measurement window.
    pub window: Duration,
    /// `[daemon]` settings other than the policy.
    pub tuning: Tuning,
}

/// Sleeps `d`, or less if `stop` becomes true.
fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        // Relaxed: a stop request, ordered with nothing else.
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
    !stop.load(Ordering::Relaxed)
}

/// Measures one case under `policy` (whose key the daemon takes as `key`).
pub fn measure(
    case: &Case,
    policy: &str,
    key: &PolicySupport,
    device: Device,
    client: ClientKind,
    timing: &Timing,
    stop: &AtomicBool,
) -> RunResult {
    let window_s = timing.window.as_secs_f64();
    match measure_inner(case, policy, key, device, client, timing, stop) {
        Ok(r) => r,
        Err(e) => RunResult::empty(case, policy, RunStatus::Failed, format!("{e:#}"), window_s),
    }
}

fn measure_inner(
    case: &Case,
    policy: &str,
    key: &PolicySupport,
    device: Device,
    client: ClientKind,
    timing: &Timing,
    stop: &AtomicBool,
) -> anyhow::Result<RunResult> {
    let mut session = Session::start(SessionConfig {
        label: format!("{}-{policy}", case.experiment),
        device,
        policy: match key {
            PolicySupport::Key => Some(policy.to_owned()),
            PolicySupport::NoKey => None,
        },
        vms: case.vms.clone(),
        client,
        tuning: {
            let mut t = timing.tuning.clone();
            t.daemon_lines.extend(case.daemon.iter().cloned());
            t
        },
    })?;
    let obs = observe::Observer::start(session.socket(), OBSERVE_EVERY)?;
    let n = case.vms.len();
    let first = obs
        .wait_for(Duration::from_secs(30), |s| {
            s.vms.len() == n && s.vms.iter().all(|v| v.state == "running")
        })
        .map_err(|e| anyhow::anyhow!("the workers did not start: {e}\n{}", session.daemon_log()))?;
    if let Some(running) = first.policy() {
        if running != policy {
            anyhow::bail!("asked for policy {policy}, the daemon runs {running}");
        }
    }
    // The workloads run through warm-up, the window and a tail that covers
    // their start-up and the observation of the window's end.
    let tail = 2.0;
    let run_s = timing.warmup.as_secs_f64() + timing.window.as_secs_f64() + tail;
    session.spawn_workloads(run_s)?;
    let started = Instant::now();
    loop {
        let snap = obs.snapshot();
        let all = snap
            .last
            .as_ref()
            .is_some_and(|s| s.vms.len() == n && s.vms.iter().all(|v| v.gpu_time_ns > 0));
        if all {
            break;
        }
        if let Some(why) = session.failed_workload() {
            anyhow::bail!("{why}");
        }
        if started.elapsed() > Duration::from_secs(30) {
            anyhow::bail!(
                "the workloads did not start using the GPU within 30 s\n{}",
                session.daemon_log()
            );
        }
        if !sleep_unless(stop, Duration::from_millis(10)) {
            anyhow::bail!("interrupted");
        }
    }
    if !sleep_unless(stop, timing.warmup) {
        anyhow::bail!("interrupted");
    }
    let from = obs.now();
    if !sleep_unless(stop, timing.window) {
        anyhow::bail!("interrupted");
    }
    let to = obs.now();
    // One more publication of every worker after the window's end.
    std::thread::sleep(Duration::from_millis(250));
    let snap = obs.snapshot();
    let daemon_policy = first.policy();
    let kernel_tracks = snap.kernels.clone();
    let rate_of = |tracks: &[observe::Track], i: usize| {
        tracks
            .get(i)
            .filter(|t| t.points.len() > 1)
            .and_then(|t| t.rate(from, to))
    };
    let charged: Vec<Option<f64>> = (0..n).map(|i| rate_of(&snap.charged, i)).collect();
    let grants: Vec<Option<f64>> = (0..n).map(|i| rate_of(&snap.grants, i)).collect();
    let woke: Vec<Option<f64>> = (0..n).map(|i| rate_of(&snap.cosched_woke, i)).collect();
    let waiting: Vec<Option<f64>> = (0..n)
        .map(|i| Some((rate_of(&snap.cosched, i)? - woke[i]?).max(0.0)))
        .collect();
    drop(obs);
    let last_vm = |i: usize| snap.last.as_ref().and_then(|st| st.vms.get(i));
    let reports = session.finish_workloads(Duration::from_secs_f64(tail + 30.0));
    drop(session);

    let mut shares = Vec::with_capacity(n);
    for (i, v) in case.vms.iter().enumerate() {
        let rate = snap
            .gpu
            .get(i)
            .and_then(|t| t.rate(from, to))
            .with_context(|| format!("no device time seen for {}", v.name))?;
        shares.push(VmShare {
            weight: f64::from(v.weight),
            demand: case.demands[i],
            measured: rate / 1e9,
        });
    }
    if let Some(Err(e)) = reports.iter().find(|r| r.is_err()) {
        anyhow::bail!("{e}");
    }
    let f = metrics::evaluate(&shares);
    let vms = case
        .vms
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let report = reports.get(i).and_then(|r| r.as_ref().ok());
            // Its synchronous calls' latencies, if it made any.
            let sync = report
                .filter(|r| r.sync_calls > 0)
                .map(|r| r.sync_latency_us);
            let counted = kernel_tracks
                .get(i)
                .filter(|t| t.points.len() > 1)
                .and_then(|t| t.rate(from, to));
            let kernel_ns = v.workload.kernel_ns().unwrap_or(1).max(1);
            VmResult {
                name: v.name.clone(),
                weight: v.weight,
                workload: v.workload.clone(),
                demand: case.demands[i],
                share: shares[i].measured,
                ideal_share: f.ideal[i],
                x: f.normalized[i],
                kernels_per_s: counted.unwrap_or(shares[i].measured * 1e9 / kernel_ns as f64),
                workload_kernels: report.map(|r| r.kernels),
                alone: None,
                sync_p50_us: sync.map(|l| l.p50),
                sync_p99_us: sync.map(|l| l.p99),
                sync_p999_us: sync.map(|l| l.p999),
                sync_max_us: sync.map(|l| l.max),
                charged_share: charged[i].map(|ns_per_s| ns_per_s / 1e9),
                grants_per_s: grants[i],
                cosched_woke_per_s: woke[i],
                cosched_waiting_per_s: waiting[i],
                jobs: report.and_then(|r| r.periodic).map(|p| p.jobs),
                deadlines_met: report
                    .and_then(|r| r.periodic)
                    .filter(|p| p.jobs > 0)
                    .map(|p| p.met as f64 / p.jobs as f64),
                reserved: reserved_share(v, policy),
                longest_hold_ms: last_vm(i)
                    .and_then(|l| l.sched.as_ref())
                    .map(|s| s.longest_hold_ns as f64 / 1e6),
                runaways: last_vm(i).map(|l| l.long_kernels.runaways),
                backfilled: last_vm(i)
                    .and_then(|l| l.sched.as_ref())
                    .map(|s| s.backfilled)
                    .filter(|&n| n > 0),
                backfill_ms: last_vm(i)
                    .and_then(|l| l.sched.as_ref())
                    .map(|s| s.backfill_ns as f64 / 1e6)
                    .filter(|&ms| ms > 0.0),
                vs_none: None,
            }
        })
        .collect();
    let weights: Vec<f64> = shares.iter().map(|s| s.weight).collect();
    Ok(RunResult {
        experiment: case.experiment.to_owned(),
        case: case.label.clone(),
        policy: policy.to_owned(),
        status: RunStatus::Ok,
        error: None,
        daemon_policy,
        window_s: to - from,
        vms,
        mmr: f.mmr,
        overhead: f.overhead,
        utilization: f.utilization,
        ideal_utilization: f.ideal_utilization,
        non_work_conserving_utilization: (case.experiment == "fig10")
            .then(|| metrics::non_work_conserving_utilization(&weights, &case.demands)),
        overhead_vs_alone: None,
        efficiency: None,
    })
}

/// The share `v`'s reservation holds (budget / period) under `policy`, if
/// it has priorities and `v` a reservation.
fn reserved_share(v: &VmSpec, policy: &str) -> Option<f64> {
    let tg = fairgpu_config::parse_policy(policy)
        .ok()
        .flatten()
        .is_some_and(fairgpu_scheduler::PolicyKind::has_priorities);
    if !tg {
        return None;
    }
    let line = v.settings.iter().find(|l| l.starts_with("reservation"))?;
    let value = |key: &str| -> Option<f64> {
        let rest = &line[line.find(key)? + key.len()..];
        let rest = rest.trim_start().strip_prefix('=')?.trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    Some(value("budget_ms")? / value("period_ms")?)
}

/// What each experiment is, for table headings.
pub fn describe(experiment: &str) -> &'static str {
    match experiment {
        "fig8" => "FairGV Fig. 8: 3 VMs, weights 1:2:3, all running the same workload",
        "fig9" => "FairGV Fig. 9: 6 VMs, weights 1:2:2:3:3:4, all running the same workload",
        "fig10" => {
            "FairGV Fig. 10: BS beside a non-saturating Throttle (207 us kernels, sleeping), equal weights"
        }
        "fig11" => {
            "FairGV Fig. 11: MM or HS beside a background MM whose kernel size is swept, equal weights"
        }
        "neon" => "NEON's Throttle: request sizes 19 us to 1.7 ms, equal weights",
        "loga" => "LoGA: non-saturating VMs beside saturating ones, equal weights",
        "loga-accounting" => {
            "LoGA Fig. 7: an application beside Throttles of 10 us kernels sleeping 1 ms, scheduling disabled"
        }
        "timegraph" => {
            "TimeGraph: a periodic high-priority VM (2 ms every 20 ms) against throughput VMs; reservations"
        }
        "long-kernels" => "Long kernels: FairGV's Table 4 and 100 ms kernels against 200 us ones",
        _ => "",
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn opt_us(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0} us"))
}

/// The table of one experiment under one policy.
pub fn table(experiment: &str, policy: &str, runs: &[&RunResult]) -> String {
    let mut out = format!("{} — policy {policy}\n", describe(experiment));
    if let Some(r) = runs.iter().find(|r| r.status == RunStatus::Rejected) {
        out.push_str(&format!(
            "  not run: the daemon rejected policy {policy}: {}\n",
            r.error.as_deref().unwrap_or("")
        ));
        return out;
    }
    let mut rows = Vec::new();
    for r in runs {
        if r.status != RunStatus::Ok {
            rows.push(vec![
                r.case.clone(),
                "FAILED".into(),
                r.error
                    .as_deref()
                    .unwrap_or("")
                    .lines()
                    .next()
                    .unwrap_or("")
                    .into(),
            ]);
            continue;
        }
        for v in &r.vms {
            rows.push(vec![
                r.case.clone(),
                v.name.clone(),
                v.weight.to_string(),
                v.workload.describe(),
                pct(v.ideal_share),
                pct(v.share),
                format!("{:.2}", v.x),
                v.alone.map_or("-".into(), pct),
                format!("{:.0}", v.kernels_per_s),
                opt_us(v.sync_p50_us),
                opt_us(v.sync_p99_us),
                v.charged_share.map_or("-".into(), pct),
                v.grants_per_s.map_or("-".into(), |g| format!("{g:.0}")),
                match (v.deadlines_met, v.reserved) {
                    (Some(m), _) => format!("{} met", pct(m)),
                    (None, Some(r)) => format!("{} reserved", pct(r)),
                    (None, None) => "-".into(),
                },
            ]);
        }
    }
    if policy != "none"
        && runs
            .iter()
            .any(|r| r.status == RunStatus::Ok && r.daemon_policy.is_none())
    {
        out.push_str(&format!(
            "  note: the daemon accepted policy {policy} but does not report the policy it runs\n"
        ));
    }
    out.push_str(&fairgpu_config::table::format_table(
        &[
            "CASE",
            "VM",
            "WEIGHT",
            "WORKLOAD",
            "IDEAL",
            "SHARE",
            "X",
            "ALONE",
            "KERNELS/S",
            "SYNC P50",
            "SYNC P99",
            "CHARGED",
            "GRANTS/S",
            "DEADLINES/RESERVED",
        ],
        &rows,
    ));
    let summary: Vec<Vec<String>> = runs
        .iter()
        .filter(|r| r.status == RunStatus::Ok)
        .map(|r| {
            vec![
                r.case.clone(),
                format!("{:.3}", r.mmr),
                format!("{:.3}", r.overhead),
                r.overhead_vs_alone
                    .map_or("-".into(), |o| format!("{o:.3}")),
                pct(r.utilization),
                r.non_work_conserving_utilization.map_or("-".into(), pct),
                r.efficiency.map_or("-".into(), |e| format!("{e:.3}")),
            ]
        })
        .collect();
    if !summary.is_empty() {
        out.push('\n');
        out.push_str(&fairgpu_config::table::format_table(
            &[
                "CASE",
                "MMR",
                "OVERHEAD",
                "VS ALONE",
                "UTILIZATION",
                "NON-WC REF",
                "EFFICIENCY",
            ],
            &summary,
        ));
    }
    out
}

/// The chart of `results`.
pub fn chart(results: &Results) -> String {
    let policies: Vec<String> = ALL_POLICIES
        .iter()
        .filter(|p| results.runs.iter().any(|r| r.policy == **p))
        .map(|p| (*p).to_owned())
        .collect();
    let value = |exp: &str, case: &str, policy: &str, f: &dyn Fn(&RunResult) -> f64| {
        results
            .runs
            .iter()
            .find(|r| {
                r.experiment == exp
                    && r.case == case
                    && r.policy == policy
                    && r.status == RunStatus::Ok
            })
            .map(f)
    };
    let cases_of = |exp: &str| {
        let mut v: Vec<String> = Vec::new();
        for r in results.runs.iter().filter(|r| r.experiment == exp) {
            if !v.contains(&r.case) {
                v.push(r.case.clone());
            }
        }
        v
    };
    let mut panels = Vec::new();
    for exp in ["fig8", "fig9", "fig10"] {
        let groups = cases_of(exp);
        if groups.is_empty() {
            continue;
        }
        let fig10 = exp == "fig10";
        let metric: &dyn Fn(&RunResult) -> f64 = if fig10 {
            &|r| r.utilization
        } else {
            &|r| r.mmr
        };
        let series = policies
            .iter()
            .map(|p| svg::Series {
                name: p.clone(),
                values: groups.iter().map(|c| value(exp, c, p, metric)).collect(),
            })
            .collect();
        let reference = fig10.then(|| {
            (
                "non-work-conserving".to_owned(),
                groups
                    .iter()
                    .map(|c| {
                        results
                            .runs
                            .iter()
                            .find(|r| r.experiment == exp && &r.case == c)
                            .and_then(|r| r.non_work_conserving_utilization)
                    })
                    .collect(),
            )
        });
        panels.push(svg::Panel::Bars(svg::Bars {
            title: describe(exp).to_owned(),
            y_label: if fig10 {
                "GPU utilization"
            } else {
                "Min-Max Ratio"
            }
            .into(),
            y_max: 1.0,
            groups,
            series,
            reference,
        }));
    }
    for (exp, y_label) in [
        ("neon", "Min-Max Ratio"),
        ("loga", "Min-Max Ratio"),
        ("timegraph", "deadlines met by the periodic VM"),
    ] {
        let groups: Vec<String> = cases_of(exp)
            .into_iter()
            .filter(|c| exp != "timegraph" || c.starts_with("rt "))
            .collect();
        if groups.is_empty() {
            continue;
        }
        let metric: &dyn Fn(&RunResult) -> f64 = if exp != "timegraph" {
            &|r| r.mmr
        } else {
            &|r| r.vms.iter().find_map(|v| v.deadlines_met).unwrap_or(0.0)
        };
        panels.push(svg::Panel::Bars(svg::Bars {
            title: describe(exp).to_owned(),
            y_label: y_label.into(),
            y_max: 1.0,
            series: policies
                .iter()
                .map(|p| svg::Series {
                    name: p.clone(),
                    values: groups.iter().map(|c| value(exp, c, p, metric)).collect(),
                })
                .collect(),
            groups,
            reference: None,
        }));
    }
    for fg in ["MM", "HS"] {
        let cases: Vec<String> = cases_of("fig11")
            .into_iter()
            .filter(|c| c.starts_with(&format!("{fg} vs ")))
            .collect();
        if cases.is_empty() {
            continue;
        }
        panels.push(svg::Panel::Lines(svg::Lines {
            title: format!("FairGV Fig. 11: {fg} beside a background MM of growing kernel size"),
            y_label: "Min-Max Ratio".into(),
            x_label: "background kernel size".into(),
            y_max: 1.0,
            xs: cases
                .iter()
                .map(|c| c.trim_start_matches(&format!("{fg} vs ")).to_owned())
                .collect(),
            series: policies
                .iter()
                .map(|p| svg::Series {
                    name: p.clone(),
                    values: cases
                        .iter()
                        .map(|c| value("fig11", c, p, &|r| r.mmr))
                        .collect(),
                })
                .collect(),
        }));
    }
    let rejected: Vec<&str> = results
        .policies
        .iter()
        .filter(|p| !p.accepted)
        .map(|p| p.policy.as_str())
        .collect();
    let mut note = format!(
        "{} device, {} s windows{}",
        match results.device {
            Device::Sim => "SimGpu",
            Device::Cuda => "CUDA",
        },
        results.window_s,
        if results.quick { " (--quick)" } else { "" }
    );
    if !rejected.is_empty() {
        note.push_str(&format!(
            "; not accepted by this daemon: {}",
            rejected.join(", ")
        ));
    }
    svg::render("fairgpu: fairness experiments", &note, &panels)
}

/// Runs `fairgpu bench fairness`.
pub fn bench(a: &FairnessArgs) -> anyhow::Result<()> {
    let experiments: Vec<&str> = if a.experiment == "all" {
        EXPERIMENTS.to_vec()
    } else {
        vec![a.experiment.as_str()]
    };
    let policies_of = |exp: &str| -> Vec<&str> {
        if a.policy == "all" {
            policies_for(exp).to_vec()
        } else {
            vec![a.policy.as_str()]
        }
    };
    let mut policies: Vec<&str> = Vec::new();
    for exp in &experiments {
        for p in policies_of(exp) {
            if !policies.contains(&p) {
                policies.push(p);
            }
        }
    }
    let window = a.seconds.unwrap_or(if a.quick { 2.0 } else { 20.0 });
    if !(0.2..=3600.0).contains(&window) {
        anyhow::bail!("--seconds must be in [0.2, 3600]");
    }
    let timing = Timing {
        warmup: Duration::from_secs_f64(if a.quick { 0.5 } else { 2.0 }),
        window: Duration::from_secs_f64(window),
        tuning: Tuning {
            accounting: match a.accounting.as_deref() {
                None => None,
                Some(n) => Some(
                    fairgpu_config::Accounting::ALL
                        .into_iter()
                        .find(|x| x.name() == n)
                        .ok_or_else(|| anyhow::anyhow!("unknown accounting {n:?}"))?,
                ),
            },
            slice_ms: a.slice_ms,
            spin_us: a.spin_us,
            pin: a.pin,
            no_work_conserving: a.no_work_conserving,
            daemon_log: a.daemon_log.clone(),
            daemon_lines: a.daemon_set.clone(),
        },
    };
    if a.client == ClientKind::Libcuda {
        harness::guest_library()?;
    }
    let stop = fairgpu_worker::process::shutdown_flag().context("installing signal handlers")?;
    // Tables go to stdout, or to stderr when stdout carries the JSON.
    let mut say: Box<dyn std::io::Write> = if a.json {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    let mut notes = Vec::new();
    let mut support = Vec::new();
    for p in &policies {
        let s = harness::policy_support(p);
        if let Err(e) = &s {
            writeln!(say, "policy {p}: the daemon rejects it: {e}")?;
        }
        notes.push(PolicyNote {
            policy: (*p).to_owned(),
            accepted: s.is_ok(),
            error: s.as_ref().err().cloned(),
        });
        support.push(s);
    }
    let mut baselines: Vec<Baseline> = Vec::new();
    if !a.no_baseline && support.iter().any(|s| s.is_ok()) {
        let none = harness::policy_support("none").map_err(|e| anyhow::anyhow!(e))?;
        for exp in &experiments {
            for case in cases(exp, a.quick) {
                if !a.selects(&case) {
                    continue;
                }
                for v in &case.vms {
                    if stop.load(Ordering::Relaxed)
                        || baselines.iter().any(|b| b.workload == v.workload)
                    {
                        continue;
                    }
                    write!(say, "baseline: {} alone ... ", v.workload.describe())?;
                    say.flush()?;
                    let alone = Case::alone(&v.workload);
                    let r = measure(&alone, "none", &none, a.device, a.client, &timing, &stop);
                    match (r.status, r.vms.first()) {
                        (RunStatus::Ok, Some(vm)) => {
                            writeln!(say, "utilization {}", pct(r.utilization))?;
                            baselines.push(Baseline {
                                workload: v.workload.clone(),
                                utilization: r.utilization,
                                kernels_per_s: vm.kernels_per_s,
                            });
                        }
                        _ => writeln!(say, "failed: {}", r.error.as_deref().unwrap_or(""))?,
                    }
                }
            }
        }
    }
    let mut runs = Vec::new();
    'all: for exp in &experiments {
        for (p, s) in policies
            .iter()
            .zip(&support)
            .filter(|(p, _)| policies_of(exp).contains(p))
        {
            let mut these = Vec::new();
            for mut case in cases(exp, a.quick) {
                if stop.load(Ordering::Relaxed) {
                    break 'all;
                }
                if !a.selects(&case) {
                    continue;
                }
                case.apply_baselines(&baselines);
                let r = match s {
                    Err(e) => RunResult::empty(&case, p, RunStatus::Rejected, e.clone(), window),
                    Ok(key) => {
                        write!(say, "{exp} {} policy {p} ... ", case.label)?;
                        say.flush()?;
                        let mut r = measure(&case, p, key, a.device, a.client, &timing, &stop);
                        r.annotate(&baselines);
                        match r.status {
                            RunStatus::Ok => writeln!(
                                say,
                                "MMR {:.3}, overhead {:.3}, utilization {}{}",
                                r.mmr,
                                r.overhead,
                                pct(r.utilization),
                                long_kernel_note(&r)
                            )?,
                            _ => writeln!(say, "failed: {}", r.error.as_deref().unwrap_or(""))?,
                        }
                        r
                    }
                };
                these.push(r);
            }
            let refs: Vec<&RunResult> = these.iter().collect();
            writeln!(say, "\n{}", table(exp, p, &refs))?;
            runs.extend(these);
        }
        if *exp == "loga-accounting" {
            annotate_against_none(&mut runs, exp);
            writeln!(say, "{}", against_none_table(&runs, exp))?;
        }
    }
    let results = Results {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        device: a.device,
        client: a.client,
        quick: a.quick,
        window_s: window,
        warmup_s: timing.warmup.as_secs_f64(),
        host_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        policies: notes,
        baselines,
        runs,
    };
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let json = serde_json::to_string_pretty(&results)?;
    let json_path = a.out.join("results.json");
    std::fs::write(&json_path, format!("{json}\n"))
        .with_context(|| format!("writing {}", json_path.display()))?;
    let svg_path = a.out.join("fairness.svg");
    std::fs::write(&svg_path, chart(&results))
        .with_context(|| format!("writing {}", svg_path.display()))?;
    writeln!(
        say,
        "wrote {} and {}",
        json_path.display(),
        svg_path.display()
    )?;
    if a.json {
        println!("{json}");
    }
    if stop.load(Ordering::Relaxed) {
        anyhow::bail!("interrupted");
    }
    let failed = results
        .runs
        .iter()
        .filter(|r| r.status == RunStatus::Failed)
        .count();
    if failed > 0 {
        anyhow::bail!("{failed} run(s) failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_experiments_match_the_paper() {
        let f8 = cases("fig8", true);
        assert_eq!(
            f8.iter().map(|c| c.label.as_str()).collect::<Vec<_>>(),
            ["MM", "HS", "BS", "SRD1"]
        );
        assert!(f8
            .iter()
            .all(|c| c.vms.iter().map(|v| v.weight).eq([1, 2, 3])));
        let f9 = cases("fig9", false);
        assert_eq!(f9.len(), 2);
        assert!(f9[0].vms.iter().map(|v| v.weight).eq([1, 2, 2, 3, 3, 4]));
        let f10 = cases("fig10", false);
        assert_eq!(f10.len(), 4);
        assert_eq!(f10[3].demands, vec![1.0, 1.0 - 0.8]);
        let f11 = cases("fig11", true);
        assert_eq!(f11.len(), 10);
        assert_eq!(f11[4].vms[1].workload.kernel_us, Some(1605.0));
        assert!(cases("nope", true).is_empty());
        let neon = cases("neon", true);
        assert_eq!(neon.len(), 4);
        assert_eq!(neon[0].vms[0].workload.kernel_us, Some(19.0));
        assert!(policies_for("neon").contains(&"neon-dts"));
        assert!(policies_for("loga").contains(&"loga"));
        assert_eq!(cases("loga", true)[0].demands, vec![0.5, 0.5, 1.0]);
        let tg = cases("timegraph", true);
        assert_eq!(tg[0].vms[0].settings, ["priority = 10"]);
        assert_eq!(tg[0].vms[0].workload.period_ms, Some(20.0));
        // Reservations are written only for the TimeGraph policies.
        let r20 = &tg[2].vms[0];
        assert_eq!(reserved_share(r20, "timegraph-ht"), Some(0.2));
        assert_eq!(reserved_share(&tg[3].vms[1], "timegraph-prt"), Some(0.3));
        assert_eq!(reserved_share(r20, "fairgv"), None);
        assert!(tg[3].vms[0].settings[0].contains("mode = \"ae\""));
    }

    /// LoGA's Fig. 7: an application and four sleeping Throttles per
    /// case, accounting only, no accounting first; each VM's rate is set
    /// against none's for the same case and VM.
    #[test]
    fn loga_accounting_sets_each_vm_against_no_accounting() {
        let cs = cases("loga-accounting", false);
        assert_eq!(cs.len(), 2);
        for c in &cs {
            assert_eq!(c.vms.len(), 1 + LOGA_THROTTLES);
            assert_eq!(c.daemon, ["accounting_only = true"]);
            let t = &c.vms[1].workload;
            assert_eq!(t.kernel_us, Some(10.0));
            assert!((t.sleep_ratio / (1.0 - t.sleep_ratio) * 10.0 - 1000.0).abs() < 1e-6);
        }
        assert_eq!(policies_for("loga-accounting")[0], "none");
        let mut runs = vec![
            run("loga-accounting", "c", "none", 0.5),
            run("loga-accounting", "c", "loga", 0.5),
            run("loga-accounting", "other", "loga", 0.5),
        ];
        runs[1].vms[0].kernels_per_s = 80.0;
        annotate_against_none(&mut runs, "loga-accounting");
        assert_eq!(runs[0].vms[0].vs_none, Some(1.0));
        assert_eq!(runs[1].vms[0].vs_none, Some(0.8));
        assert_eq!(runs[2].vms[0].vs_none, None, "no reference for that case");
        let t = against_none_table(&runs, "loga-accounting");
        assert!(t.contains("1.250"), "turnaround 100/80: {t}");
    }

    fn run(exp: &str, case: &str, policy: &str, mmr: f64) -> RunResult {
        RunResult {
            experiment: exp.into(),
            case: case.into(),
            policy: policy.into(),
            status: RunStatus::Ok,
            error: None,
            daemon_policy: None,
            window_s: 2.0,
            vms: vec![VmResult {
                name: "vm1".into(),
                weight: 1,
                workload: WorkloadSpec::profile("MM"),
                demand: 1.0,
                share: 0.5,
                ideal_share: 0.5,
                x: 1.0,
                kernels_per_s: 100.0,
                workload_kernels: Some(10),
                alone: Some(0.5),
                sync_p50_us: None,
                sync_p99_us: Some(12.0),
                sync_p999_us: None,
                sync_max_us: None,
                charged_share: None,
                grants_per_s: None,
                cosched_woke_per_s: None,
                cosched_waiting_per_s: None,
                jobs: None,
                deadlines_met: None,
                reserved: None,
                longest_hold_ms: None,
                backfilled: None,
                backfill_ms: None,
                vs_none: None,
                runaways: None,
            }],
            mmr,
            overhead: 1.0,
            utilization: 0.9,
            ideal_utilization: 1.0,
            non_work_conserving_utilization: (exp == "fig10").then_some(0.6),
            overhead_vs_alone: None,
            efficiency: None,
        }
    }

    #[test]
    fn baselines_set_demands_and_the_overhead_against_alone() {
        let mut c = cases("fig10", true).remove(0);
        let throttle = c.vms[1].workload.clone();
        let alone = vec![
            Baseline {
                workload: throttle,
                utilization: 0.45,
                kernels_per_s: 2000.0,
            },
            Baseline {
                workload: WorkloadSpec::profile("MM"),
                utilization: 0.95,
                kernels_per_s: 4500.0,
            },
        ];
        assert_eq!(c.demands, vec![1.0, 0.5]);
        c.apply_baselines(&alone);
        assert_eq!(c.demands, vec![1.0, 0.45], "BS was not measured alone");
        let mut f8 = cases("fig8", true).remove(0);
        f8.apply_baselines(&alone);
        assert_eq!(f8.demands, vec![1.0; 3], "closed-loop VMs saturate");
        let mut r = run("fig8", "MM", "none", 0.4);
        r.vms[0].alone = None;
        r.annotate(&alone);
        assert_eq!(r.vms[0].alone, Some(0.95));
        let o = r.overhead_vs_alone.unwrap();
        assert!((o - 0.95 / 0.9).abs() < 1e-12, "{o}");
        let mut missing = run("fig8", "HS", "none", 0.4);
        missing.vms[0].workload = WorkloadSpec::profile("HS");
        missing.annotate(&alone);
        assert_eq!(missing.overhead_vs_alone, None);
    }

    #[test]
    fn tables_and_charts() {
        let mut runs = vec![
            run("fig8", "MM", "none", 0.4),
            run("fig10", "sleep 50%", "none", 1.0),
            run("fig11", "MM vs 21us", "none", 0.9),
            run("fig11", "HS vs 21us", "none", 0.8),
        ];
        let mut rejected = run("fig8", "MM", "fairgv", 0.0);
        rejected.status = RunStatus::Rejected;
        rejected.error = Some("no scheduler".into());
        runs.push(rejected.clone());
        let t = table("fig8", "none", &[&runs[0]]);
        assert!(
            t.contains("MMR") && t.contains("0.400") && t.contains("12 us"),
            "{t}"
        );
        let t = table("fig8", "fairgv", &[&rejected]);
        assert!(t.contains("rejected policy fairgv: no scheduler"), "{t}");
        let results = Results {
            command: "fairgpu bench fairness".into(),
            device: Device::Sim,
            client: ClientKind::Libcuda,
            quick: true,
            window_s: 2.0,
            warmup_s: 0.5,
            host_cpus: 2,
            baselines: vec![Baseline {
                workload: WorkloadSpec::profile("MM"),
                utilization: 0.95,
                kernels_per_s: 4500.0,
            }],
            policies: vec![PolicyNote {
                policy: "fairgv".into(),
                accepted: false,
                error: Some("no scheduler".into()),
            }],
            runs,
        };
        let svg = chart(&results);
        assert_eq!(svg::check_well_formed(&svg), Ok("svg".to_owned()));
        assert!(svg.contains("Fig. 11: MM") && svg.contains("Fig. 11: HS"));
        assert!(svg.contains("non-work-conserving"));
        let json = serde_json::to_string(&results).unwrap();
        assert_eq!(serde_json::from_str::<Results>(&json).unwrap(), results);
    }
}
