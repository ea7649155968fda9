//! `fairgpu bench transport`: the transport between two processes.
//!
//! The bench process is the guest; it starts `fairgpu serve-region` as the
//! host process, each pinned to its own CPU (when there are two), and both
//! sides spin for the whole run, so the figures are those of the polling
//! path. The Unix-socket baseline uses the same two-process, pinned setup
//! with a blocking echo peer: what socket-based remoting pays per call.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use fairgpu_frontend::{Channel, WaitConfig};
use fairgpu_protocol::Opcode;
use serde::Serialize;

use fairgpu_worker::process::pin_to_cpu;

use crate::open_region_wait;

/// `fairgpu bench transport` options.
#[derive(Debug, Clone, Args)]
pub struct TransportArgs {
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Timed synchronous round trips.
    #[arg(long, default_value_t = 200_000)]
    pub samples: u32,
    /// Fire-and-forget calls to submit for the throughput figure.
    #[arg(long, default_value_t = 4_000_000)]
    pub async_calls: u64,
    /// MiB to move in each direction for the bandwidth figures.
    #[arg(long, default_value_t = 2048)]
    pub bulk_mib: u64,
    /// Do not pin the two processes to separate CPUs.
    #[arg(long)]
    pub no_pin: bool,
}

/// Every figure of one transport run.
#[derive(Debug, Clone, Serialize)]
pub struct TransportReport {
    /// Synchronous no-op round trip, median, ns.
    pub rtt_p50_ns: u64,
    /// Synchronous no-op round trip, 99th percentile, ns.
    pub rtt_p99_ns: u64,
    /// Synchronous no-op round trip, mean, ns.
    pub rtt_mean_ns: u64,
    /// Timed round trips.
    pub rtt_samples: usize,
    /// Fire-and-forget no-ops accepted and executed per second.
    pub async_calls_per_s: f64,
    /// Guest memory → host scratch through the arena, GB/s (10^9 bytes).
    pub bulk_in_gb_s: f64,
    /// Host scratch → guest memory through the arena, GB/s.
    pub bulk_out_gb_s: f64,
    /// Synchronous no-op round trip when both sides block at once (spin
    /// budget 0: futex wake each way), median, ns.
    pub blocking_rtt_p50_ns: u64,
    /// Same, 99th percentile, ns.
    pub blocking_rtt_p99_ns: u64,
    /// The floor under the blocking round trip on this host: two bare
    /// threads on the same two CPUs, each asleep on a futex when the other
    /// wakes it, one wake each way, paced as the blocking round trips are;
    /// median, ns.
    pub futex_floor_p50_ns: u64,
    /// Same, 99th percentile, ns.
    pub futex_floor_p99_ns: u64,
    /// 64-byte request and reply over a Unix stream socket, both processes
    /// on one CPU (the socket's best case: no cross-CPU wake-up), median, ns.
    pub socket_rtt_p50_ns: u64,
    /// Same, 99th percentile, ns.
    pub socket_rtt_p99_ns: u64,
    /// Same with the peer on another CPU, median, ns.
    pub socket_cross_cpu_rtt_p50_ns: u64,
    /// Whether the two processes were pinned to separate CPUs.
    pub pinned: bool,
    /// CPUs online.
    pub cpus: usize,
}

/// The `p`th percentile of sorted samples.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Stops (SIGTERM, then SIGKILL after 3 s) and reaps a child process when
/// dropped.
#[derive(Debug)]
pub struct Reaped(Child);

impl Reaped {
    /// Takes charge of `child`.
    pub fn new(child: Child) -> Self {
        Reaped(child)
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        // SIGTERM first so the host removes its region file.
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn self_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe().context("locating the fairgpu executable")
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs the transport benchmark and prints its report.
pub fn transport(a: &TransportArgs) -> anyhow::Result<()> {
    let r = measure(a)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "fairgpu transport, two processes{}",
            if r.pinned {
                ", pinned to CPUs 0 and 1"
            } else {
                ""
            }
        );
        println!(
            "  sync round trip    p50 {:>8} ns   p99 {:>8} ns   mean {} ns ({} samples)",
            r.rtt_p50_ns, r.rtt_p99_ns, r.rtt_mean_ns, r.rtt_samples
        );
        println!(
            "  async submission   {:>8.2} M calls/s",
            r.async_calls_per_s / 1e6
        );
        println!(
            "  bulk arena copy    in {:.2} GB/s   out {:.2} GB/s",
            r.bulk_in_gb_s, r.bulk_out_gb_s
        );
        println!(
            "  blocking wake-ups  p50 {:>8} ns   p99 {:>8} ns   (spin budget 0 on both sides)",
            r.blocking_rtt_p50_ns, r.blocking_rtt_p99_ns
        );
        println!(
            "  futex floor        p50 {:>8} ns   p99 {:>8} ns   (two bare threads, one wake each way)",
            r.futex_floor_p50_ns, r.futex_floor_p99_ns
        );
        println!(
            "  unix socket        p50 {:>8} ns   p99 {:>8} ns   (baseline, one CPU; across CPUs p50 {} ns)",
            r.socket_rtt_p50_ns, r.socket_rtt_p99_ns, r.socket_cross_cpu_rtt_p50_ns
        );
        println!(
            "  shared-memory round trip is {:.1}x faster than the socket",
            r.socket_rtt_p50_ns as f64 / r.rtt_p50_ns.max(1) as f64
        );
    }
    Ok(())
}

/// Runs every measurement.
pub fn measure(a: &TransportArgs) -> anyhow::Result<TransportReport> {
    let cpus = cpus();
    let pinned = !a.no_pin && cpus >= 2;
    if pinned {
        pin_to_cpu(0).context("pinning the guest side to CPU 0")?;
    }
    // Spin for the whole run: this measures the polling path.
    let (host, mut ch) = start_host(pinned, Duration::from_secs(30))?;

    // Synchronous round trip.
    for i in 0..20_000u64 {
        ch.call(Opcode::Nop, [i, 0, 0, 0, 0])?;
    }
    let mut samples = Vec::with_capacity(a.samples as usize);
    for i in 0..u64::from(a.samples.max(1)) {
        let t = Instant::now();
        let r = ch.call(Opcode::Nop, [i, 0, 0, 0, 0])?;
        samples.push(t.elapsed().as_nanos() as u64);
        if r.vals[0] != i {
            bail!("no-op {i} echoed {}", r.vals[0]);
        }
    }
    let mean = samples.iter().sum::<u64>() / samples.len() as u64;
    samples.sort_unstable();

    // Fire-and-forget submission: the rate at which calls are accepted and
    // executed, closed by one synchronous call that drains the ring.
    let t = Instant::now();
    for i in 0..a.async_calls {
        ch.call_async(Opcode::Nop, [i, 0, 0, 0, 0], &[])?;
    }
    ch.call(Opcode::Nop, [0; 5])?;
    let async_rate = a.async_calls as f64 / t.elapsed().as_secs_f64();

    // Bulk bandwidth through the arena, 64 MiB at a time.
    let block = 64usize << 20;
    let rounds = (a.bulk_mib / 64).max(1);
    let data: Vec<u8> = (0..block).map(|i| (i as u8).wrapping_mul(31)).collect();
    ch.send_bulk(Opcode::CopyIn, [0; 5], 0, &data)?; // warm the host's scratch
    let t = Instant::now();
    for _ in 0..rounds {
        ch.send_bulk(Opcode::CopyIn, [0; 5], 0, &data)?;
    }
    let bulk_in = (rounds as f64 * block as f64) / t.elapsed().as_secs_f64() / 1e9;
    let mut back = vec![0u8; block];
    let t = Instant::now();
    for _ in 0..rounds {
        ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back)?;
    }
    let bulk_out = (rounds as f64 * block as f64) / t.elapsed().as_secs_f64() / 1e9;
    if back != data {
        bail!("bulk data came back different");
    }
    drop(ch);
    drop(host);

    // The same round trip when neither side spins and both are asleep when
    // the call starts: it pays a futex wake-up each way, which is what the
    // spin budget exists to avoid.
    let (host, mut ch) = start_host(pinned, Duration::ZERO)?;
    let mut blocking = Vec::new();
    for i in 0..u64::from(a.samples.clamp(1, 2_000)) {
        std::thread::sleep(Duration::from_micros(300));
        let t = Instant::now();
        ch.call(Opcode::Nop, [i, 0, 0, 0, 0])?;
        blocking.push(t.elapsed().as_nanos() as u64);
    }
    blocking.sort_unstable();
    drop(ch);
    drop(host);
    let floor = futex_floor(a.samples.clamp(1, 2_000), pinned)?;

    let socket_samples = a.samples.clamp(1, 50_000);
    let (socket_p50, socket_p99) = socket_baseline(socket_samples, Some(0))?;
    let (cross_p50, _) = socket_baseline(socket_samples, if pinned { Some(1) } else { None })?;
    Ok(TransportReport {
        rtt_p50_ns: percentile(&samples, 50.0),
        rtt_p99_ns: percentile(&samples, 99.0),
        rtt_mean_ns: mean,
        rtt_samples: samples.len(),
        async_calls_per_s: async_rate,
        bulk_in_gb_s: bulk_in,
        bulk_out_gb_s: bulk_out,
        blocking_rtt_p50_ns: percentile(&blocking, 50.0),
        blocking_rtt_p99_ns: percentile(&blocking, 99.0),
        futex_floor_p50_ns: percentile(&floor, 50.0),
        futex_floor_p99_ns: percentile(&floor, 99.0),
        socket_rtt_p50_ns: socket_p50,
        socket_rtt_p99_ns: socket_p99,
        socket_cross_cpu_rtt_p50_ns: cross_p50,
        pinned,
        cpus,
    })
}

/// Starts `fairgpu serve-region` as the host process (on CPU 1 when
/// pinned) with the given spin budget on both sides, and claims a channel.
fn start_host(pinned: bool, spin: Duration) -> anyhow::Result<(Reaped, Channel)> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let region_path = PathBuf::from(format!("/dev/shm/fairgpu-bench-{}-{n}", std::process::id()));
    let mut cmd = Command::new(self_exe()?);
    cmd.args([
        "serve-region",
        "--channels",
        "1",
        "--log",
        "warn",
        "--spin-us",
    ])
    .arg(spin.as_micros().to_string())
    .arg("--region")
    .arg(&region_path)
    .stdin(Stdio::null());
    if pinned {
        cmd.args(["--cpu", "1"]);
    }
    let host = Reaped(cmd.spawn().context("starting the host process")?);
    let region = open_region_wait(&region_path, Duration::from_secs(10))?;
    let cfg = WaitConfig {
        spin,
        host_timeout: Some(Duration::from_secs(10)),
    };
    Ok((host, Channel::claim(region, cfg)?))
}

/// Round trips between this thread and a bare peer thread (on CPU 1 when
/// pinned: the host process's CPU), each asleep on a futex word until the
/// other wakes it, paced 300 µs apart as the blocking round trips are:
/// what two wake-ups cost on this host with no transport at all. Sorted,
/// ns.
fn futex_floor(samples: u32, pinned: bool) -> anyhow::Result<Vec<u64>> {
    use fairgpu_frontend::futex;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    // `ask` counts requests, `done` replies. Each side publishes its
    // counter (Release) before waking the other, which reads it (Acquire)
    // after waking: the counter is the whole message.
    let words = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
    let peer_words = Arc::clone(&words);
    let peer = std::thread::spawn(move || {
        if pinned {
            let _ = pin_to_cpu(1);
        }
        let [ask, done] = &*peer_words;
        for i in 1..=samples {
            while ask.load(Ordering::Acquire) < i {
                futex::wait(ask, i - 1, Duration::from_secs(1));
            }
            done.store(i, Ordering::Release);
            futex::wake(done, 1);
        }
    });
    let [ask, done] = &*words;
    let mut out = Vec::with_capacity(samples as usize);
    for i in 1..=samples {
        std::thread::sleep(Duration::from_micros(300));
        let t = Instant::now();
        ask.store(i, Ordering::Release);
        futex::wake(ask, 1);
        while done.load(Ordering::Acquire) < i {
            futex::wait(done, i - 1, Duration::from_secs(1));
        }
        out.push(t.elapsed().as_nanos() as u64);
    }
    peer.join()
        .map_err(|_| anyhow::anyhow!("the futex peer thread panicked"))?;
    out.sort_unstable();
    Ok(out)
}

/// Round trips over a Unix socket to an echo peer pinned to `peer_cpu`.
fn socket_baseline(samples: u32, peer_cpu: Option<usize>) -> anyhow::Result<(u64, u64)> {
    let path = PathBuf::from(format!("/tmp/fairgpu-bench-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut cmd = Command::new(self_exe()?);
    cmd.args(["__socket-echo", "--log", "warn", "--path"])
        .arg(&path)
        .stdin(Stdio::null());
    if let Some(cpu) = peer_cpu {
        cmd.args(["--cpu", &cpu.to_string()]);
    }
    let _peer = Reaped(cmd.spawn().context("starting the socket echo peer")?);
    let start = Instant::now();
    let mut s = loop {
        match UnixStream::connect(&path) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e).context("connecting to the socket echo peer"),
        }
    };
    let mut msg = [0u8; 64];
    let mut times = Vec::with_capacity(samples as usize);
    for i in 0..(samples as u64 + 5_000) {
        msg[..8].copy_from_slice(&i.to_le_bytes());
        let t = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut msg)?;
        if i >= 5_000 {
            times.push(t.elapsed().as_nanos() as u64);
        }
        if msg[..8] != i.to_le_bytes() {
            bail!("socket echo returned the wrong message");
        }
    }
    drop(s);
    let _ = std::fs::remove_file(&path);
    times.sort_unstable();
    Ok((percentile(&times, 50.0), percentile(&times, 99.0)))
}

/// The socket baseline's peer: echoes 64-byte messages until EOF.
pub fn socket_echo(path: &Path, cpu: Option<usize>) -> anyhow::Result<()> {
    if let Some(cpu) = cpu {
        pin_to_cpu(cpu)?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    let (mut s, _) = listener.accept()?;
    let mut msg = [0u8; 64];
    while s.read_exact(&mut msg).is_ok() {
        s.write_all(&msg)?;
    }
    Ok(())
}
