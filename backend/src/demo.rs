//! `fairgpu demo`: a host serving one region and three guest processes with
//! different workloads, with a live per-channel table and a summary.
//!
//! What it shows today is the transport: every call really crosses the
//! shared region between processes, bulk data is checked byte for byte.
//! Scheduling among guests comes with the scheduler.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fairgpu_frontend::{Channel, WaitConfig};
use fairgpu_protocol::{Opcode, RegionConfig};
use serde::{Deserialize, Serialize};

use crate::cli::DemoArgs;
use crate::commands::{open_region_wait, shutdown_flag};
use crate::host::{HostRegion, ServeConfig, Server};
use crate::transport_ops::TransportOps;

const PROFILES: [(&str, &str); 3] = [
    ("interactive", "synchronous no-ops back to back"),
    (
        "streaming",
        "bursts of 256 fire-and-forget calls, then one synchronous call",
    ),
    ("bulk", "4 MiB copied in and back out, verified"),
];

/// What one demo guest reports when it ends.
#[derive(Debug, Serialize, Deserialize)]
struct GuestSummary {
    profile: String,
    channel: u32,
    calls: u64,
    bytes: u64,
    p50_ns: u64,
    p99_ns: u64,
}

/// Runs the demo.
pub fn run(a: &DemoArgs) -> anyhow::Result<()> {
    if !(a.seconds > 0.0 && a.seconds <= 3600.0) {
        bail!("--seconds must be in (0, 3600]");
    }
    let path = PathBuf::from(format!("/dev/shm/fairgpu-demo-{}", std::process::id()));
    let region = HostRegion::create(&path, &RegionConfig::default())?;
    let shutdown = shutdown_flag()?;
    let server = Server::new(
        region,
        TransportOps::default(),
        ServeConfig::default(),
        shutdown.clone(),
    );
    let stats = server.stats();
    let host = std::thread::Builder::new()
        .name("fairgpu-host".into())
        .spawn(move || server.run())?;

    println!(
        "fairgpu demo: one host, {} guest processes, region {}",
        PROFILES.len(),
        path.display()
    );
    for (name, what) in PROFILES {
        println!("  {name:<12} {what}");
    }
    let exe = std::env::current_exe()?;
    let mut guests = Vec::new();
    for (name, _) in PROFILES {
        let child = Command::new(&exe)
            .args([
                "__demo-guest",
                "--log",
                "warn",
                "--profile",
                name,
                "--seconds",
            ])
            .arg(a.seconds.to_string())
            .arg("--region")
            .arg(&path)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .context("starting a demo guest")?;
        guests.push(child);
    }

    println!(
        "\n{:>5} {:>8} {:>12} {:>12} {:>10} {:>7}",
        "time", "channel", "sync/s", "async/s", "MB/s", "errors"
    );
    let start = Instant::now();
    let mut prev: Vec<(u64, u64, u64)> = vec![(0, 0, 0); stats.len()];
    let mut last = start;
    while guests
        .iter_mut()
        .any(|g| g.try_wait().ok().flatten().is_none())
        && !shutdown.load(Ordering::Relaxed)
    {
        std::thread::sleep(Duration::from_millis(50));
        if last.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let dt = last.elapsed().as_secs_f64();
        last = Instant::now();
        for (i, s) in stats.iter().enumerate() {
            let now = (
                s.sync_calls.load(Ordering::Relaxed),
                s.async_calls.load(Ordering::Relaxed),
                s.arena_bytes.load(Ordering::Relaxed),
            );
            let (ds, da, db) = (now.0 - prev[i].0, now.1 - prev[i].1, now.2 - prev[i].2);
            prev[i] = now;
            if s.owner_pid.load(Ordering::Relaxed) == 0 && ds + da == 0 {
                continue;
            }
            println!(
                "{:>4.0}s {:>8} {:>12.0} {:>12.0} {:>10.1} {:>7}",
                start.elapsed().as_secs_f64(),
                i,
                ds as f64 / dt,
                da as f64 / dt,
                db as f64 / dt / 1e6,
                s.errors.load(Ordering::Relaxed)
            );
        }
    }

    println!("\nsummary (measured by each guest):");
    println!(
        "{:<12} {:>8} {:>12} {:>10} {:>12} {:>12}",
        "profile", "channel", "calls", "MB moved", "p50 call", "p99 call"
    );
    let mut failed = 0;
    for mut g in guests {
        let out = g.stdout.take().context("guest stdout")?;
        let line = BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .last()
            .unwrap_or_default();
        let status = g.wait()?;
        match serde_json::from_str::<GuestSummary>(&line) {
            Ok(s) if status.success() => println!(
                "{:<12} {:>8} {:>12} {:>10.1} {:>9} ns {:>9} ns",
                s.profile,
                s.channel,
                s.calls,
                s.bytes as f64 / 1e6,
                s.p50_ns,
                s.p99_ns
            ),
            _ => {
                failed += 1;
                println!("a guest failed ({status})");
            }
        }
    }
    shutdown.store(true, Ordering::Relaxed);
    let _ = host.join();
    if failed > 0 {
        bail!("{failed} guest(s) failed");
    }
    Ok(())
}

/// One demo guest: runs `profile` for `seconds`, prints a JSON summary.
pub fn guest(region: &Path, profile: &str, seconds: f64) -> anyhow::Result<()> {
    let region = open_region_wait(region, Duration::from_secs(10))?;
    let mut ch = Channel::claim(region, WaitConfig::from_env())?;
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut lat = Vec::new();
    let (mut calls, mut bytes) = (0u64, 0u64);
    let data: Vec<u8> = (0..4usize << 20).map(|i| (i % 251) as u8).collect();
    let mut back = vec![0u8; data.len()];
    while Instant::now() < deadline {
        let t = Instant::now();
        match profile {
            "interactive" => {
                let r = ch.call(Opcode::Nop, [calls, 0, 0, 0, 0])?;
                if r.vals[0] != calls {
                    bail!("no-op echoed the wrong value");
                }
                calls += 1;
            }
            "streaming" => {
                for i in 0..256 {
                    ch.call_async(Opcode::Nop, [i, 0, 0, 0, 0], &[])?;
                }
                ch.call(Opcode::Nop, [0; 5])?;
                calls += 257;
            }
            "bulk" => {
                ch.send_bulk(Opcode::CopyIn, [0; 5], 0, &data)?;
                ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back)?;
                if back != data {
                    bail!("bulk data came back different");
                }
                back.fill(0);
                bytes += 2 * data.len() as u64;
                calls += 2;
            }
            other => bail!("unknown profile {other:?}"),
        }
        lat.push(t.elapsed().as_nanos() as u64);
    }
    lat.sort_unstable();
    let s = GuestSummary {
        profile: profile.to_owned(),
        channel: ch.index(),
        calls,
        bytes,
        p50_ns: crate::bench::percentile(&lat, 50.0),
        p99_ns: crate::bench::percentile(&lat, 99.0),
    };
    println!("{}", serde_json::to_string(&s)?);
    Ok(())
}
