//! `fairgpu top`: a running daemon's per-VM GPU shares, live.
//!
//! Every interval it shows, per VM: weight, target share (its weight over
//! the weights of the VMs using the GPU), measured share of device time
//! over the last interval and since `top` started, kernels per second
//! (where the daemon counts kernels), GPU time and worker state; and the
//! Min-Max Ratio so far (FairGV's fairness index over the active VMs,
//! taking each as able to use its whole share). `fairgpu demo` shows the
//! same table.
//!
//! On a terminal the table is redrawn in place (ANSI home + clear);
//! otherwise one table is printed per interval.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::fairness::metrics;
use crate::fairness::observe::{Observed, Observer};
use fairgpu_config::table::format_table;
use fairgpu_daemon::control::format_gpu_time;

/// How often `top` reads the daemon (shares are computed from the change
/// points it sees).
const POLL_EVERY: Duration = Duration::from_millis(20);

/// `fairgpu top` options.
#[derive(Debug, Clone, clap::Args)]
pub struct TopArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    pub socket: Option<PathBuf>,
    /// The daemon's configuration file (for its control_socket).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
}

/// One VM's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Its name.
    pub name: String,
    /// Its weight.
    pub weight: u32,
    /// Its weight's share among the active VMs; `None` while idle.
    pub target: Option<f64>,
    /// Device-time share over the last interval.
    pub share_last: f64,
    /// Device-time share since the start.
    pub share_total: f64,
    /// Kernels per second over the last interval, where known.
    pub kernels_per_s: Option<f64>,
    /// Device time used, ns.
    pub gpu_time_ns: u64,
    /// The worker's state.
    pub state: String,
    /// The policy's standing of the VM (priority, budget, overuse, ...),
    /// where the policy has one to show.
    pub standing: Option<String>,
}

/// The live view of a daemon: rows plus totals.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// One per VM.
    pub rows: Vec<Row>,
    /// Device busy fraction over the last interval.
    pub busy_last: f64,
    /// Min-Max Ratio of the cumulative shares over the active VMs.
    pub mmr: Option<f64>,
}

/// Builds the view from what an observer saw, at `now` (seconds on the
/// observer's clock), since `since`, for the last `interval` seconds.
/// `kernel_ns[i]`, where given, turns VM `i`'s device time into kernels
/// when the daemon does not count them.
pub fn view(
    seen: &Observed,
    since: f64,
    now: f64,
    interval: f64,
    kernel_ns: &[Option<u64>],
) -> View {
    let Some(status) = &seen.last else {
        return View {
            rows: Vec::new(),
            busy_last: 0.0,
            mmr: None,
        };
    };
    let mut rows: Vec<Row> = status
        .vms
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let track = seen.gpu.get(i);
            let share = |from: f64| {
                track
                    .and_then(|t| t.rate(from, now))
                    .map_or(0.0, |r| r / 1e9)
            };
            let share_last = share((now - interval).max(since));
            let counted = seen
                .kernels
                .get(i)
                .filter(|t| !t.points.is_empty())
                .and_then(|t| t.rate((now - interval).max(since), now));
            let derived = kernel_ns
                .get(i)
                .copied()
                .flatten()
                .filter(|k| *k > 0)
                .map(|k| share_last * 1e9 / k as f64);
            Row {
                name: v.name.clone(),
                weight: v.weight,
                target: None,
                share_last,
                share_total: share(since),
                kernels_per_s: counted.or(derived),
                gpu_time_ns: v.gpu_time_ns,
                state: v.state.clone(),
                standing: v.sched.as_ref().and_then(|s| s.standing_text()),
            }
        })
        .collect();
    let active: Vec<usize> = rows
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            r.share_total > 0.0 || status.vms.get(*i).is_some_and(|v| v.channels_used > 0)
        })
        .map(|(i, _)| i)
        .collect();
    let total_w: f64 = active.iter().map(|&i| f64::from(rows[i].weight)).sum();
    for &i in &active {
        if total_w > 0.0 {
            rows[i].target = Some(f64::from(rows[i].weight) / total_w);
        }
    }
    let xs: Vec<f64> = active
        .iter()
        .filter_map(|&i| {
            rows[i]
                .target
                .map(|t| metrics::normalized_throughput(rows[i].share_total, t))
        })
        .collect();
    View {
        busy_last: rows.iter().map(|r| r.share_last).sum(),
        mmr: (xs.len() >= 2).then(|| metrics::min_max_ratio(&xs)),
        rows,
    }
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The table of a view.
pub fn render(v: &View, interval: f64) -> String {
    let rows: Vec<Vec<String>> = v
        .rows
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                r.weight.to_string(),
                r.target.map_or("-".into(), pct),
                pct(r.share_last),
                pct(r.share_total),
                r.kernels_per_s.map_or("-".into(), |k| format!("{k:.0}")),
                format_gpu_time(r.gpu_time_ns),
                r.state.clone(),
            ]
        })
        .collect();
    let last = if (interval - 1.0).abs() < 1e-9 {
        "SHARE 1S".to_owned()
    } else {
        format!("SHARE {interval}S")
    };
    let mut out = format_table(
        &[
            "VM",
            "WEIGHT",
            "TARGET",
            &last,
            "SHARE ALL",
            "KERNELS/S",
            "GPU TIME",
            "STATE",
        ],
        &rows,
    );
    for r in &v.rows {
        if let Some(t) = &r.standing {
            out.push_str(&format!("{}: {t}\n", r.name));
        }
    }
    out.push_str(&format!(
        "device busy {} over the last {interval} s; MMR so far {}\n",
        pct(v.busy_last),
        v.mmr.map_or("-".into(), |m| format!("{m:.3}"))
    ));
    out
}

/// Writes `text` as the new screen (terminal) or as the next block.
pub fn show(out: &mut impl Write, terminal: bool, text: &str) -> std::io::Result<()> {
    if terminal {
        // Home, clear to the end of the screen, then the table.
        write!(out, "\x1b[H\x1b[J{text}")?;
    } else {
        writeln!(out, "{text}")?;
    }
    out.flush()
}

/// Runs `fairgpu top`.
pub fn run(a: &TopArgs) -> anyhow::Result<()> {
    if !(a.interval >= 0.1 && a.interval <= 3600.0) {
        anyhow::bail!("--interval must be in [0.1, 3600] seconds");
    }
    let socket = match (&a.socket, &a.config) {
        (Some(s), _) => s.clone(),
        (None, Some(c)) => fairgpu_config::Config::load(c)?.daemon.control_socket,
        (None, None) => fairgpu_config::default_control_socket(),
    };
    let obs = Observer::start(&socket, POLL_EVERY).with_context(|| {
        format!(
            "asking the daemon at {} (is `fairgpu serve` running?)",
            socket.display()
        )
    })?;
    let first = obs
        .wait_for(Duration::from_secs(10), |_| true)
        .map_err(|e| anyhow::anyhow!("no status from the daemon: {e}"))?;
    let stop = fairgpu_worker::process::shutdown_flag().context("installing signal handlers")?;
    let terminal = std::io::stdout().is_terminal();
    let mut stdout = std::io::stdout();
    let since = obs.now();
    let mut shown = 0u64;
    let mut next = Instant::now() + Duration::from_secs_f64(a.interval);
    // Relaxed: a stop request, ordered with nothing else.
    while !stop.load(Ordering::Relaxed) && a.count.is_none_or(|c| shown < c) {
        if Instant::now() < next {
            std::thread::sleep((next - Instant::now()).min(Duration::from_millis(50)));
            continue;
        }
        next += Duration::from_secs_f64(a.interval);
        let seen = obs.snapshot();
        if let Some(e) = seen.last_error.as_ref().filter(|_| seen.errors > 0) {
            if obs.now() - seen.last_t > 2.0 * a.interval.max(1.0) {
                anyhow::bail!("lost the daemon: {e}");
            }
        }
        let v = view(&seen, since, obs.now(), a.interval, &[]);
        let status = seen.last.as_ref().unwrap_or(&first);
        let head = format!(
            "fairgpu top: daemon pid {}, executor {}, policy {}, {} VMs (every {} s{})\n\n",
            status
                .daemon
                .get("pid")
                .and_then(|p| p.as_u64())
                .unwrap_or(0),
            status.executor().unwrap_or("?"),
            status.policy().unwrap_or_else(|| "none".into()),
            status.vms.len(),
            a.interval,
            if terminal { ", Ctrl-C quits" } else { "" }
        );
        show(
            &mut stdout,
            terminal,
            &format!("{head}{}", render(&v, a.interval)),
        )?;
        shown += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fairness::observe::{StatusView, Track, VmView};

    /// A VM: name, weight and (time, device time) observations.
    type Vm<'a> = (&'a str, u32, &'a [(f64, u64)]);

    fn observed(vms: &[Vm<'_>]) -> Observed {
        let status = StatusView {
            daemon: serde_json::json!({"pid": 7, "executor": "sim"}),
            vms: vms
                .iter()
                .map(|(n, w, pts)| VmView {
                    name: (*n).into(),
                    weight: *w,
                    state: "running".into(),
                    channels_used: u32::from(pts.len() > 1),
                    gpu_time_ns: pts.last().map_or(0, |p| p.1),
                    calls: 0,
                    kernels: None,
                    sched: None,
                    long_kernels: Default::default(),
                })
                .collect(),
        };
        let gpu = vms
            .iter()
            .map(|(_, _, pts)| {
                let mut t = Track::default();
                for &(time, v) in pts.iter() {
                    t.observe(time, v);
                }
                t
            })
            .collect();
        Observed {
            last: Some(status),
            last_t: 2.0,
            gpu,
            kernels: Vec::new(),
            charged: Vec::new(),
            grants: Vec::new(),
            cosched: Vec::new(),
            cosched_woke: Vec::new(),
            errors: 0,
            last_error: None,
        }
    }

    #[test]
    fn shares_targets_and_mmr() {
        // a: 25% of the device, b: 75%, c: idle. Weights 1:3:5.
        let seen = observed(&[
            ("a", 1, &[(0.0, 0), (1.0, 250_000_000), (2.0, 500_000_000)]),
            (
                "b",
                3,
                &[(0.0, 0), (1.0, 750_000_000), (2.0, 1_500_000_000)],
            ),
            ("c", 5, &[(0.0, 0)]),
        ]);
        let v = view(&seen, 0.0, 2.0, 1.0, &[Some(250_000), None, None]);
        assert_eq!(v.rows.len(), 3);
        assert!((v.rows[0].share_last - 0.25).abs() < 1e-9);
        assert!((v.rows[1].share_total - 0.75).abs() < 1e-9);
        assert_eq!(v.rows[0].target, Some(0.25));
        assert_eq!(v.rows[2].target, None, "an idle VM has no target");
        assert_eq!(v.rows[0].kernels_per_s, Some(1000.0));
        assert_eq!(v.rows[1].kernels_per_s, None);
        assert!((v.busy_last - 1.0).abs() < 1e-9);
        assert!((v.mmr.unwrap() - 1.0).abs() < 1e-9);
        let t = render(&v, 1.0);
        assert!(
            t.contains("SHARE 1S") && t.contains("25.0%") && t.contains("MMR so far 1.000"),
            "{t}"
        );
        let mut buf = Vec::new();
        show(&mut buf, true, "x").unwrap();
        assert_eq!(buf, b"\x1b[H\x1b[Jx");
        assert!(!t.contains("priority"), "no standing without a policy: {t}");
    }

    #[test]
    fn the_policy_standing_is_shown_under_the_table() {
        let mut seen = observed(&[("rt", 1, &[(0.0, 0), (1.0, 100_000_000)])]);
        let status: StatusView = serde_json::from_value(serde_json::json!({
            "daemon": {"pid": 7},
            "vms": [{"name": "rt", "weight": 1, "sched": {
                "state": "running", "charged_ns": 5, "grants": 2, "cosched_wakes": 0,
                "overruns": 0, "revoked": 1, "priority": 10,
                "reservation": "2/10 ms pe", "budget_ns": 500000, "throttled": 4
            }}]
        }))
        .unwrap();
        seen.last = Some(status);
        let t = render(&view(&seen, 0.0, 1.0, 1.0, &[]), 1.0);
        assert!(
            t.contains("rt: priority 10, reservation 2/10 ms pe, budget left 0.500 ms, throttled 4 times, 1 grants revoked"),
            "{t}"
        );
    }

    #[test]
    fn an_empty_daemon_has_an_empty_view() {
        let v = view(&Observed::default(), 0.0, 1.0, 1.0, &[]);
        assert!(v.rows.is_empty() && v.mmr.is_none());
    }
}
