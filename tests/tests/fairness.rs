//! The fairness tooling end to end: the workload generator through the
//! guest library against a daemon on SimGpu, `fairgpu bench fairness`,
//! `fairgpu top` and `fairgpu demo`, and the metrics' arithmetic. No test
//! asserts on timing; every wait is bounded.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fairgpu_benches::fairness::metrics;
use fairgpu_tests::{fairgpu_bin, guest_lib_dir, run_command, vm, wait_for_status, Setup, TempDir};
use serde_json::Value;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `fairgpu __workload` as a guest of the VM whose region is
/// `region`, through the guest library; returns its JSON report.
fn workload(region: &Path, args: &[&str]) -> Value {
    let out = run_command(
        Command::new(fairgpu_bin())
            .args(["__workload", "--log", "warn"])
            .args(args)
            .env("FAIRGPU_REGION", region)
            .env("LD_LIBRARY_PATH", guest_lib_dir()),
        Duration::from_secs(120),
    );
    assert!(
        out.status.success(),
        "workload {args:?} failed: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let line = text(&out.stdout);
    serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("report {line:?}: {e}"))
}

fn u(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

#[test]
fn the_workload_generator_is_charged_exactly_its_kernels() {
    let setup = Setup::new("fairness_workload", &[("vm1", 1, 2), ("vm2", 2, 2)]);
    let d = setup.start();
    let regions = setup.regions.clone();
    // Two generators at once through libcuda.so.1: a non-interactive one
    // with its own kernel size, and an interactive one that also sleeps.
    let a = std::thread::spawn({
        let r = regions[0].clone();
        move || {
            workload(
                &r,
                &["--profile", "MM", "--kernel-us", "150", "--seconds", "1"],
            )
        }
    });
    let b = workload(
        &regions[1],
        &["--profile", "BS", "--sleep-ratio", "0.5", "--seconds", "1"],
    );
    let a = a.join().expect("the MM generator");

    for (report, profile, kernel_ns) in [(&a, "MM", 150_000u64), (&b, "BS", 377_000)] {
        assert_eq!(report["profile"], profile, "{report}");
        assert_eq!(report["client"], "libcuda");
        let lib = report["library"].as_str().unwrap_or_default();
        assert!(lib.ends_with("libcuda.so.1"), "loaded {lib}");
        assert_eq!(report["device"], "daemon-test SimGpu");
        assert_eq!(u(&report["mix"], "kernel_ns"), kernel_ns);
        let kernels = u(report, "kernels");
        assert!(kernels > 0, "{report}");
        assert_eq!(u(report, "device_time_requested_ns"), kernels * kernel_ns);
        // Events time SimGpu's modelled kernels exactly; the first one may
        // queue behind the other VM's work, never run shorter.
        assert!(f(report, "kernel_event_us") >= kernel_ns as f64 / 1e3 - 1.0);
    }
    assert!(u(&b, "sync_calls") > 0, "{b}");
    assert!(f(&b["sync_latency_us"], "p99") > 0.0);
    assert!(u(&a, "flow_waits") > 0, "{a}");

    // The daemon charged each VM exactly kernels × kernel duration.
    let want = [
        ("vm1", u(&a, "device_time_requested_ns")),
        ("vm2", u(&b, "device_time_requested_ns")),
    ];
    wait_for_status(&d, "the device time of both generators", |s| {
        want.iter().all(|(name, ns)| vm(s, name).gpu_time_ns == *ns)
    });
}

#[test]
fn the_workload_generator_says_how_to_get_libcuda() {
    let empty = TempDir::new("fairness_nolib");
    let out = run_command(
        Command::new(fairgpu_bin())
            .args(["__workload", "--profile", "MM", "--seconds", "1"])
            .env("FAIRGPU_REGION", "/dev/shm/fairgpu-test-no-such-region")
            .env("LD_LIBRARY_PATH", empty.path()),
        Duration::from_secs(60),
    );
    let err = text(&out.stderr);
    // Where NVIDIA's driver is installed the loader finds it instead.
    if !out.status.success() && err.contains("cannot load libcuda.so.1") {
        assert!(
            err.contains("cargo build --release -p fairgpu-guest"),
            "{err}"
        );
    }
    let out = run_command(
        Command::new(fairgpu_bin()).args(["__workload", "--profile", "XYZ", "--seconds", "1"]),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("unknown profile"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn bench_fairness_quick_fig8_emits_its_results() {
    guest_lib_dir();
    let out_dir = TempDir::new("fairness_bench");
    let out = run_command(
        Command::new(fairgpu_bin())
            .args([
                "bench",
                "fairness",
                "--quick",
                "--experiment",
                "fig8",
                "--policy",
                "none",
                "--json",
                "--seconds",
                "1",
                "--no-baseline",
                "--out",
            ])
            .arg(out_dir.path()),
        Duration::from_secs(600),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "bench failed:\n{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(v["device"], "sim");
    assert_eq!(v["quick"], true);
    assert_eq!(v["policies"][0]["policy"], "none");
    assert_eq!(v["policies"][0]["accepted"], true);
    let runs = v["runs"].as_array().expect("runs");
    let cases: Vec<&str> = runs.iter().filter_map(|r| r["case"].as_str()).collect();
    assert_eq!(cases, ["MM", "HS", "BS", "SRD1"]);
    for r in runs {
        assert_eq!(r["experiment"], "fig8");
        assert_eq!(r["policy"], "none");
        assert_eq!(r["status"], "ok", "{r}");
        let mmr = f(r, "mmr");
        assert!((0.0..=1.0).contains(&mmr), "{r}");
        let overhead = f(r, "overhead");
        assert!(overhead.is_finite() && overhead > 0.0, "{r}");
        assert!(f(r, "utilization") > 0.0);
        assert!((f(r, "ideal_utilization") - 1.0).abs() < 1e-9);
        let vms = r["vms"].as_array().expect("vms");
        let weights: Vec<u64> = vms.iter().map(|x| u(x, "weight")).collect();
        assert_eq!(weights, [1, 2, 3]);
        let ideal: f64 = vms.iter().map(|x| f(x, "ideal_share")).sum();
        assert!((ideal - 1.0).abs() < 1e-9);
        for x in vms {
            assert!(f(x, "share") > 0.0, "{x}");
            assert!(
                (f(x, "x") - f(x, "share") / f(x, "ideal_share")).abs() < 1e-9,
                "{x}"
            );
            assert!(u(x, "workload_kernels") > 0);
        }
        // The MMR is the one of the VMs' normalized throughputs.
        let xs: Vec<f64> = vms.iter().map(|x| f(x, "x")).collect();
        assert!((metrics::min_max_ratio(&xs) - mmr).abs() < 1e-9);
    }
    // Tables went to stderr; the files are in --out.
    assert!(stderr.contains("MMR"), "{stderr}");
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("results.json")).expect("results.json"),
    )
    .expect("results.json is JSON");
    assert_eq!(file, v);
    let svg = std::fs::read_to_string(out_dir.join("fairness.svg")).expect("fairness.svg");
    assert_eq!(well_formed(&svg), Ok("svg".into()), "{svg}");
    assert!(svg.contains("Fig. 8"));
    assert!(svg.matches("<rect").count() >= 5, "bars: {svg}");
}

#[test]
fn bench_fairness_reports_what_the_daemon_rejects() {
    guest_lib_dir();
    let out_dir = TempDir::new("fairness_reject");
    let out = run_command(
        Command::new(fairgpu_bin())
            .args([
                "bench",
                "fairness",
                "--quick",
                "--experiment",
                "fig10",
                "--policy",
                "fairgv",
                "--seconds",
                "1",
                "--json",
                "--out",
            ])
            .arg(out_dir.path()),
        Duration::from_secs(600),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let v: Value = serde_json::from_str(&stdout).expect("JSON");
    let accepted = v["policies"][0]["accepted"].as_bool().expect("accepted");
    for r in v["runs"].as_array().expect("runs") {
        if accepted {
            // The scheduler has landed: the runs are measured, against
            // the standalone baselines.
            assert_eq!(r["status"], "ok", "{r}");
            assert!(f(r, "non_work_conserving_utilization") > 0.0);
            assert!(f(r, "overhead_vs_alone") > 0.0, "{r}");
            assert_eq!(r["daemon_policy"], "fairgv");
        } else {
            assert_eq!(r["status"], "rejected", "{r}");
            assert!(stderr.contains("rejects it"), "{stderr}");
        }
    }
    if accepted {
        // BS and the Throttle at two sleep ratios, each alone.
        let baselines = v["baselines"].as_array().expect("baselines");
        assert_eq!(baselines.len(), 3, "{baselines:?}");
        assert!(baselines.iter().all(|b| f(b, "utilization") > 0.0));
    }
}

#[test]
fn top_shows_a_running_daemon() {
    let setup = Setup::new("fairness_top", &[("alpha", 1, 2), ("beta", 3, 2)]);
    let d = setup.start();
    let r = setup.regions[0].clone();
    let gen = std::thread::spawn(move || {
        workload(&r, &["--profile", "HS", "--seconds", "2"]);
    });
    let out = run_command(
        Command::new(fairgpu_bin())
            .args(["top", "--interval", "0.5", "--count", "3", "--socket"])
            .arg(d.socket()),
        Duration::from_secs(60),
    );
    gen.join().expect("the generator");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // Not a terminal: one table per interval, no escape codes.
    assert_eq!(stdout.matches("fairgpu top:").count(), 3, "{stdout}");
    assert!(!stdout.contains('\x1b'));
    for want in ["alpha", "beta", "TARGET", "SHARE ALL", "MMR so far"] {
        assert!(stdout.contains(want), "{want}: {stdout}");
    }
    let out = run_command(
        Command::new(fairgpu_bin())
            .args(["top", "--count", "1", "--socket"])
            .arg(setup.dir.join("nobody.sock")),
        Duration::from_secs(60),
    );
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("is `fairgpu serve` running?"));
}

#[test]
fn the_demo_runs_and_sums_up() {
    guest_lib_dir();
    let out = run_command(
        Command::new(fairgpu_bin()).args(["demo", "--seconds", "2"]),
        Duration::from_secs(300),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for want in [
        "vm1",
        "vm4",
        "summary",
        "Min-Max Ratio",
        "fairgpu's libcuda.so.1",
    ] {
        assert!(stdout.contains(want), "{want}: {stdout}");
    }
}

#[test]
fn metrics_arithmetic() {
    // Weighted shares 1:2:3 met exactly: MMR 1, overhead 1.
    let exact: Vec<metrics::VmShare> = [1.0, 2.0, 3.0]
        .iter()
        .map(|&w| metrics::VmShare {
            weight: w,
            demand: 1.0,
            measured: w / 6.0,
        })
        .collect();
    let e = metrics::evaluate(&exact);
    assert!((e.mmr - 1.0).abs() < 1e-12 && (e.overhead - 1.0).abs() < 1e-12);
    // First come, first served: equal shares whatever the weights.
    let fifo: Vec<metrics::VmShare> = [1.0, 2.0, 3.0]
        .iter()
        .map(|&w| metrics::VmShare {
            weight: w,
            demand: 1.0,
            measured: 0.25,
        })
        .collect();
    let e = metrics::evaluate(&fifo);
    assert!((e.mmr - (0.25 / 0.5) / (0.25 / (1.0 / 6.0))).abs() < 1e-12);
    assert!((e.overhead - 1.0 / 0.75).abs() < 1e-12);
    assert!((e.utilization - 0.75).abs() < 1e-12);
    // A non-saturating VM keeps only what it can use.
    let s = metrics::ideal_shares(&[1.0, 1.0], &[0.3, 1.0]);
    assert!((s[0] - 0.3).abs() < 1e-12 && (s[1] - 0.7).abs() < 1e-12);
    assert!(
        (metrics::non_work_conserving_utilization(&[1.0, 1.0], &[1.0, 0.5]) - 0.75).abs() < 1e-12
    );
}

/// A small well-formedness check of XML, independent of the one in the
/// library: every tag closes in order, one root, quoted attributes, no
/// bare `&` or `<` in text. Returns the root's name.
fn well_formed(xml: &str) -> Result<String, String> {
    let mut stack: Vec<String> = Vec::new();
    let mut root: Option<String> = None;
    let mut i = 0;
    let b = xml.as_bytes();
    while i < b.len() {
        match b[i] {
            b'<' => {
                let end = xml[i..].find('>').ok_or("unclosed tag")? + i;
                let tag = &xml[i + 1..end];
                i = end + 1;
                if tag.starts_with('?') || tag.starts_with('!') {
                    continue;
                }
                if let Some(name) = tag.strip_prefix('/') {
                    match stack.pop() {
                        Some(open) if open == name => continue,
                        other => return Err(format!("</{name}> closes {other:?}")),
                    }
                }
                let name: String = tag
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '/')
                    .collect();
                if name.is_empty() {
                    return Err(format!("empty tag <{tag}>"));
                }
                // Attributes: name="value" pairs, quotes balanced.
                if !tag.matches('"').count().is_multiple_of(2) {
                    return Err(format!("unbalanced quotes in <{tag}>"));
                }
                let mut in_quote = false;
                for (j, c) in tag.char_indices() {
                    if c == '"' {
                        in_quote = !in_quote;
                    } else if c == '=' && !in_quote && !tag[j + 1..].starts_with('"') {
                        return Err(format!("unquoted attribute in <{tag}>"));
                    }
                }
                if stack.is_empty() {
                    if root.is_some() {
                        return Err("two roots".into());
                    }
                    root = Some(name.clone());
                }
                if !tag.ends_with('/') {
                    stack.push(name);
                }
            }
            b'&' => {
                let semi = xml[i..].find(';').ok_or("bare &")? + i;
                let ent = &xml[i + 1..semi];
                if !["amp", "lt", "gt", "quot", "apos"].contains(&ent) && !ent.starts_with('#') {
                    return Err(format!("unknown entity &{ent};"));
                }
                i = semi + 1;
            }
            _ => i += 1,
        }
    }
    if !stack.is_empty() {
        return Err(format!("unclosed {stack:?}"));
    }
    root.ok_or_else(|| "no root".into())
}

#[test]
fn the_xml_check_catches_breakage() {
    assert_eq!(well_formed("<a><b x=\"1\"/>t &amp; u</a>"), Ok("a".into()));
    for bad in ["<a><b></a>", "<a>&x;</a>", "<a x=1/>", "<a/><b/>", "<a>"] {
        assert!(well_formed(bad).is_err(), "{bad}");
    }
}
