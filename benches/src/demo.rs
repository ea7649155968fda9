//! `fairgpu demo`: the daemon with four VMs of different weights, each
//! running a different CUDA workload, and a live table of how the GPU is
//! shared among them.
//!
//! The daemon runs on SimGpu (or the GPU with `--device cuda`). Each VM's
//! guest is a `fairgpu __workload` process that loads fairgpu's guest
//! library as `libcuda.so.1`, exactly as an unmodified CUDA program would;
//! if the library has not been built (a fresh clone), the guests use
//! fairgpu's Rust client instead: the same protocol and the same kernels,
//! without the C ABI. The demo asks the daemon for the FairGV policy; a
//! daemon without a scheduler runs the VMs first come, first served, and
//! the demo says so.

use std::io::IsTerminal;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;

use crate::fairness::harness::{self, PolicySupport, Session, SessionConfig, VmSpec, WorkloadSpec};
use crate::fairness::metrics;
use crate::fairness::observe::Observer;
use crate::workload::ClientKind;

/// `fairgpu demo` options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// How long the guests run, in seconds.
    #[arg(long, default_value_t = 15.0)]
    pub seconds: f64,
    /// Where the daemon runs kernels: sim (SimGpu) or cuda (a GPU host).
    #[arg(long, value_enum, default_value_t = crate::fairness::harness::Device::Sim)]
    pub device: crate::fairness::harness::Device,
    /// One more `[daemon]` line for the daemon, as written (repeatable),
    /// e.g. --daemon-set "backfill = true" to see a setting's effect on
    /// the demo.
    #[arg(long = "daemon-set", value_name = "LINE")]
    pub daemon_set: Vec<String>,
}

/// The demo's VMs: weight and workload profile (FairGV Table 3).
const VMS: [(&str, u32, &str); 4] = [
    ("vm1", 1, "MM"),
    ("vm2", 2, "HS"),
    ("vm3", 3, "BS"),
    ("vm4", 2, "CFD"),
];
/// The policy the demo asks for.
const POLICY: &str = "fairgv";

/// Runs the demo.
pub fn run(a: &DemoArgs) -> anyhow::Result<()> {
    if !(a.seconds >= 1.0 && a.seconds <= 3600.0) {
        anyhow::bail!("--seconds must be in [1, 3600]");
    }
    let client = match harness::guest_library() {
        Ok(_) => ClientKind::Libcuda,
        Err(_) => {
            println!(
                "fairgpu's guest library is not built (cargo build --release -p fairgpu-guest): \
                 the guests use fairgpu's Rust client instead (same protocol, same kernels)"
            );
            ClientKind::Rust
        }
    };
    let policy = match harness::policy_support(POLICY) {
        Ok(PolicySupport::Key) => Some(POLICY.to_owned()),
        Ok(PolicySupport::NoKey) | Err(_) => None,
    };
    let vms: Vec<VmSpec> = VMS
        .iter()
        .map(|(name, weight, profile)| VmSpec {
            name: (*name).into(),
            weight: *weight,
            workload: WorkloadSpec::profile(profile),
            settings: Vec::new(),
        })
        .collect();
    let kernel_ns: Vec<Option<u64>> = vms.iter().map(|v| v.workload.kernel_ns()).collect();
    println!(
        "fairgpu demo: {} VMs share one {} through the daemon; guests use {}",
        vms.len(),
        match a.device {
            harness::Device::Sim => "SimGpu (a model of a non-preemptive GPU)",
            harness::Device::Cuda => "GPU",
        },
        match client {
            ClientKind::Libcuda => "fairgpu's libcuda.so.1",
            ClientKind::Rust => "fairgpu's Rust client",
            ClientKind::Opencl => "fairgpu's OpenCL client",
        }
    );
    match &policy {
        Some(p) => println!("scheduler: {p} (weighted fair queuing of GPU time)"),
        None => println!(
            "no scheduler yet: the daemon does not accept policy {POLICY}; the VMs share the \
             GPU first come, first served (policy none), whatever their weights"
        ),
    }
    for v in &vms {
        let p = crate::workload::table3(&v.workload.profile);
        println!(
            "  {} weight {}: {} ({})",
            v.name,
            v.weight,
            v.workload.profile,
            p.map_or(String::new(), |p| format!(
                "{}, {} us kernels, {} sync calls per 10 ms",
                p.about, p.kernel_us, p.sync_per_10ms
            ))
        );
    }
    println!();

    let stop = fairgpu_worker::process::shutdown_flag().context("installing signal handlers")?;
    let mut session = Session::start(SessionConfig {
        label: "demo".into(),
        device: a.device,
        policy: policy.clone(),
        vms: vms.clone(),
        client,
        tuning: crate::fairness::harness::Tuning {
            daemon_lines: a.daemon_set.clone(),
            ..crate::fairness::harness::Tuning::default()
        },
    })?;
    let obs = Observer::start(session.socket(), Duration::from_millis(10))?;
    obs.wait_for(Duration::from_secs(30), |s| {
        s.vms.len() == vms.len() && s.vms.iter().all(|v| v.state == "running")
    })
    .map_err(|e| anyhow::anyhow!("the workers did not start: {e}\n{}", session.daemon_log()))?;
    session.spawn_workloads(a.seconds + 1.5)?;
    let since = obs.now();
    let start = Instant::now();
    let terminal = std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout();
    let mut next = start + Duration::from_secs(1);
    let mut last_view = None;
    // Relaxed: a stop request, ordered with nothing else.
    while !stop.load(Ordering::Relaxed) && start.elapsed().as_secs_f64() < a.seconds + 0.05 {
        if let Some(why) = session.failed_workload() {
            anyhow::bail!("{why}");
        }
        if Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
            continue;
        }
        next += Duration::from_secs(1);
        let v = crate::top::view(&obs.snapshot(), since, obs.now(), 1.0, &kernel_ns);
        let head = format!(
            "fairgpu demo: {:.0} s of {:.0} s, policy {}{}\n\n",
            start.elapsed().as_secs_f64(),
            a.seconds,
            policy.as_deref().unwrap_or("none"),
            if terminal { " (Ctrl-C stops)" } else { "" }
        );
        crate::top::show(
            &mut stdout,
            terminal,
            &format!("{head}{}", crate::top::render(&v, 1.0)),
        )?;
        last_view = Some(v);
    }
    let end = obs.now();
    drop(obs);
    let reports = session.finish_workloads(Duration::from_secs(30));
    drop(session);
    let v = last_view.context("the demo ended before its first refresh")?;

    println!("\nsummary over {:.1} s:", end - since);
    let weights: Vec<f64> = v.rows.iter().map(|r| f64::from(r.weight)).collect();
    let measured: Vec<f64> = v.rows.iter().map(|r| r.share_total).collect();
    let f = metrics::evaluate(
        &weights
            .iter()
            .zip(&measured)
            .map(|(&weight, &m)| metrics::VmShare {
                weight,
                demand: 1.0,
                measured: m,
            })
            .collect::<Vec<_>>(),
    );
    let rows: Vec<Vec<String>> = v
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let rep = reports.get(i).and_then(|r| r.as_ref().ok());
            vec![
                r.name.clone(),
                r.weight.to_string(),
                vms[i].workload.profile.clone(),
                format!("{:.1}%", f.ideal[i] * 100.0),
                format!("{:.1}%", r.share_total * 100.0),
                format!("{:.2}", f.normalized[i]),
                rep.map_or("-".into(), |r| r.kernels.to_string()),
                rep.filter(|r| r.sync_calls > 0)
                    .map_or("-".into(), |r| format!("{:.0} us", r.sync_latency_us.p99)),
            ]
        })
        .collect();
    print!(
        "{}",
        fairgpu_config::table::format_table(
            &["VM", "WEIGHT", "WORKLOAD", "TARGET", "SHARE", "X", "KERNELS", "SYNC P99"],
            &rows
        )
    );
    println!(
        "Min-Max Ratio {:.3} (1 = every VM got exactly its weighted share), device busy {:.1}%",
        f.mmr,
        f.utilization * 100.0
    );
    if policy.is_none() {
        println!(
            "without a scheduler the device serves kernels in arrival order: the VMs that queue \
             more work get more of it, whatever their weights"
        );
    }
    let failed: Vec<&String> = reports.iter().filter_map(|r| r.as_ref().err()).collect();
    if !failed.is_empty() && !stop.load(Ordering::Relaxed) {
        for e in &failed {
            eprintln!("{e}");
        }
        anyhow::bail!("{} guest(s) failed", failed.len());
    }
    Ok(())
}
