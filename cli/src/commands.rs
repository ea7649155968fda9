//! What each subcommand does.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fairgpu_frontend::{Channel, GuestRegion, WaitConfig};
use fairgpu_protocol::{Opcode, RegionConfig};

use crate::cli::{
    BenchCommand, Command, PingArgs, PtxCheckArgs, ServeArgs, ServeRegionArgs, StatusArgs,
};
use fairgpu_worker::host::{HostRegion, ServeConfig, Server};
use fairgpu_worker::transport_ops::TransportOps;

/// Runs one subcommand; `log` is the log filter in effect, which the
/// daemon hands on to its workers.
pub fn run_with_log(cmd: Command, log: &str) -> anyhow::Result<()> {
    match cmd {
        Command::Serve(a) => serve(&a, log),
        Command::Status(a) => status(&a),
        Command::SetWeight(a) => set_weight(&a),
        Command::Top(a) => fairgpu_benches::top::run(&a),
        Command::Worker(a) => fairgpu_worker::run(&a),
        Command::Workload(a) => fairgpu_benches::workload::run(&a),
        Command::Demo(a) => fairgpu_benches::demo::run(&a),
        Command::ServeRegion(a) => serve_region(&a),
        Command::Ping(a) => ping(&a),
        Command::GpuCheck { executor } => fairgpu_benches::gpu_check::run(&executor),
        Command::PtxCheck(a) => ptx_check(&a),
        Command::QemuArgs(a) => {
            let args = fairgpu_qemu::qemu_args(&vm_device(&a)?);
            println!(
                "{}",
                args.iter()
                    .map(|a| shell_quote(a))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            Ok(())
        }
        Command::LibvirtXml(a) => {
            print!("{}", fairgpu_qemu::libvirt_xml(&vm_device(&a)?));
            Ok(())
        }
        Command::Bench(BenchCommand::Transport(a)) => fairgpu_benches::bench::transport(&a),
        Command::Bench(BenchCommand::Fairness(a)) => fairgpu_benches::fairness::bench(&a),
        Command::SocketEcho { path, cpu } => fairgpu_benches::bench::socket_echo(&path, cpu),
    }
}

/// The region configuration the arguments ask for.
pub fn region_config(a: &ServeRegionArgs) -> anyhow::Result<RegionConfig> {
    let arena = a
        .arena_kib
        .checked_mul(1024)
        .context("--arena-kib too large")?;
    Ok(RegionConfig {
        channels: a.channels,
        ring_entries: a.ring_entries,
        arena_size: arena,
        ..Default::default()
    })
}

fn serve_region(a: &ServeRegionArgs) -> anyhow::Result<()> {
    let cfg = region_config(a)?;
    let region = HostRegion::create(&a.region, &cfg)?;
    if let Some(cpu) = a.cpu {
        fairgpu_worker::process::pin_to_cpu(cpu)
            .with_context(|| format!("pinning to CPU {cpu}"))?;
    }
    tracing::info!(
        region = %a.region.display(),
        channels = cfg.channels,
        ring_entries = cfg.ring_entries,
        arena_bytes = cfg.arena_size,
        size = region.layout().region_size(),
        "serving region; guests use FAIRGPU_REGION={}",
        a.region.display()
    );
    let shutdown =
        fairgpu_worker::process::shutdown_flag().context("installing signal handlers")?;
    let server = Server::new(
        region,
        TransportOps::default(),
        ServeConfig {
            spin: Duration::from_micros(a.spin_us),
        },
        shutdown,
    );
    server.run();
    tracing::info!("shut down");
    Ok(())
}

fn ping(a: &PingArgs) -> anyhow::Result<()> {
    let region = match &a.region {
        Some(p) => GuestRegion::open(p)?,
        None => GuestRegion::discover()?,
    };
    let mut ch = Channel::claim(region.clone(), WaitConfig::from_env())?;
    println!(
        "region {}: {} channels, claimed channel {}",
        region.path().display(),
        region.layout().channels(),
        ch.index()
    );
    let mut samples = Vec::with_capacity(a.count as usize);
    for i in 0..u64::from(a.count.max(1)) {
        let t = Instant::now();
        let r = ch.call(Opcode::Nop, [i, 0, 0, 0, 0])?;
        samples.push(t.elapsed().as_nanos() as u64);
        if r.vals[0] != i {
            bail!("no-op {i} echoed {}", r.vals[0]);
        }
    }
    samples.sort_unstable();
    let data: Vec<u8> = (0..3 * ch.max_slice() as usize + 12345)
        .map(|i| (i * 7 + 3) as u8)
        .collect();
    ch.send_bulk(Opcode::CopyIn, [0; 5], 0, &data)?;
    let mut back = vec![0u8; data.len()];
    ch.recv_bulk(Opcode::CopyOut, [0; 5], 0, &mut back)?;
    if back != data {
        bail!("bulk copy of {} bytes came back different", data.len());
    }
    println!(
        "{} round trips: p50 {} ns, p99 {} ns; bulk copy of {} bytes verified",
        samples.len(),
        fairgpu_benches::bench::percentile(&samples, 50.0),
        fairgpu_benches::bench::percentile(&samples, 99.0),
        data.len()
    );
    if a.driver_calls {
        // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT; CL_DEVICE_MAX_COMPUTE_UNITS.
        let cuda = time_calls(a.count, || {
            ch.call(Opcode::DeviceGetAttribute, [16, 0, 0, 0, 0])
                .map(drop)
        })
        .context("cuDeviceGetAttribute through the worker")?;
        let mut v = [0u8; 4];
        let opencl = time_calls(a.count, || {
            ch.call_with(Opcode::ClGetDeviceInfo, [0x1002, 0, 0, 0, 0], &[], &mut v)
                .map(drop)
        })
        .context("clGetDeviceInfo through the worker (does the host have OpenCL?)")?;
        let p50 = |s: &[u64]| fairgpu_benches::bench::percentile(s, 50.0);
        println!(
            "cuDeviceGetAttribute: p50 {} ns, p99 {} ns; clGetDeviceInfo: p50 {} ns, p99 {} ns; OpenCL/CUDA p50 {:.2}",
            p50(&cuda),
            fairgpu_benches::bench::percentile(&cuda, 99.0),
            p50(&opencl),
            fairgpu_benches::bench::percentile(&opencl, 99.0),
            p50(&opencl) as f64 / p50(&cuda).max(1) as f64
        );
    }
    Ok(())
}

/// Times `count` calls (after as many to warm up), sorted.
fn time_calls(
    count: u32,
    mut call: impl FnMut() -> Result<(), fairgpu_frontend::CallError>,
) -> anyhow::Result<Vec<u64>> {
    for _ in 0..count.max(1) {
        call()?;
    }
    let mut samples = Vec::with_capacity(count as usize);
    for _ in 0..count.max(1) {
        let t = Instant::now();
        call()?;
        samples.push(t.elapsed().as_nanos() as u64);
    }
    samples.sort_unstable();
    Ok(samples)
}

fn serve(a: &ServeArgs, log: &str) -> anyhow::Result<()> {
    if a.check {
        let cfg = fairgpu_config::Config::load(&a.config)?;
        print!("{}", fairgpu_config::describe(&cfg));
        return Ok(());
    }
    fairgpu_daemon::daemon::serve(&a.config, log)
}

/// The daemon's control socket: `socket`, else `config`'s, else the default.
fn control_socket(
    socket: Option<&Path>,
    config: Option<&Path>,
) -> anyhow::Result<std::path::PathBuf> {
    Ok(match (socket, config) {
        (Some(s), _) => s.to_owned(),
        (None, Some(c)) => fairgpu_config::Config::load(c)?.daemon.control_socket,
        (None, None) => fairgpu_config::default_control_socket(),
    })
}

fn set_weight(a: &crate::cli::SetWeightArgs) -> anyhow::Result<()> {
    let socket = control_socket(a.socket.as_deref(), a.config.as_deref())?;
    let req = fairgpu_daemon::control::Request::SetWeight {
        vm: a.vm.clone(),
        weight: a.weight,
    };
    let reply = fairgpu_daemon::control::request(&socket, &req, Duration::from_secs(10))
        .with_context(|| {
            format!(
                "asking the daemon at {} (is `fairgpu serve` running?)",
                socket.display()
            )
        })?;
    if !reply.ok {
        bail!(
            "the daemon refused: {}",
            reply.error.as_deref().unwrap_or("no reason given")
        );
    }
    println!("vm {} now has weight {}", a.vm, a.weight);
    Ok(())
}

fn status(a: &StatusArgs) -> anyhow::Result<()> {
    let socket = control_socket(a.socket.as_deref(), a.config.as_deref())?;
    let reply = fairgpu_daemon::control::request(
        &socket,
        &fairgpu_daemon::control::Request::Status {},
        Duration::from_secs(10),
    )
    .with_context(|| {
        format!(
            "asking the daemon at {} (is `fairgpu serve` running?)",
            socket.display()
        )
    })?;
    if !reply.ok {
        bail!(
            "the daemon refused: {}",
            reply.error.as_deref().unwrap_or("no reason given")
        );
    }
    let status = reply.status.context("the daemon's reply has no status")?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", fairgpu_daemon::control::render_table(&status));
    }
    Ok(())
}

/// The ivshmem device of a configured VM whose guests run in QEMU.
fn vm_device(a: &crate::cli::VmDeviceArgs) -> anyhow::Result<fairgpu_qemu::VmSpec> {
    let cfg = fairgpu_config::Config::load(&a.config)?;
    let (_, vm) = cfg
        .vm(&a.vm)
        .with_context(|| format!("no VM named {:?} in {}", a.vm, a.config.display()))?;
    fairgpu_daemon::qemu::device_spec(vm, a.qmp.as_deref())
}

/// `s` quoted for a POSIX shell when it needs it.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_=.,/:@%+".contains(&b))
    {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// `fairgpu ptx-check`: parses each file as SimGpu would and lists what
/// its kernels hold that SimGpu cannot execute.
fn ptx_check(a: &PtxCheckArgs) -> anyhow::Result<()> {
    let (mut bad_files, mut kernels, mut bad_kernels) = (0usize, 0usize, 0usize);
    for file in &a.files {
        let shown = file.display();
        let text = std::fs::read(file).with_context(|| format!("reading {shown}"))?;
        let m = match fairgpu_ptx::Module::parse(&String::from_utf8_lossy(&text)) {
            Ok(m) => m,
            Err(e) => {
                println!("{shown}: cannot be loaded: {e}");
                bad_files += 1;
                continue;
            }
        };
        let mut names: Vec<&str> = m.kernel_names().collect();
        names.sort_unstable();
        for k in names {
            kernels += 1;
            let missing = m.kernel_unsupported(k);
            if missing.is_empty() {
                if !a.quiet {
                    println!("{shown}: {k}: ok");
                }
                continue;
            }
            bad_kernels += 1;
            for what in missing {
                println!("{shown}: {k}: unsupported: {what}");
            }
        }
    }
    println!(
        "{} files ({bad_files} cannot be loaded), {kernels} kernels ({bad_kernels} with instructions SimGpu cannot execute)",
        a.files.len()
    );
    if bad_files > 0 || bad_kernels > 0 {
        std::process::exit(1);
    }
    Ok(())
}
