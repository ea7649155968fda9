//! `fairgpu gpu-check`: an end-to-end check of the real-GPU path.
//!
//! Starts the daemon (`fairgpu serve`) with one VM on the chosen executor,
//! then, as a guest, queries the device, copies data in, loads fairgpu's own
//! PTX kernels (`benches/kernels/fairgpu.ptx`), launches `fairgpu_axpy` and
//! checks every result against the CPU, times a `fairgpu_spin` kernel with
//! events, reads the daemon's accounting, and prints a short report. With
//! `--executor sim` the same path runs on SimGpu, which executes
//! `fairgpu_axpy` with its PTX interpreter and models `fairgpu_spin`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use fairgpu_frontend::cuda::Cuda;
use fairgpu_frontend::{Channel, WaitConfig};
use fairgpu_protocol::cuda::ParamInfo;

use crate::bench::Reaped;
use crate::open_region_wait;
use fairgpu_executor::attr;

use crate::workload::KERNELS_PTX;

/// Runs the check with `executor` ("cuda", "sim" or "auto").
pub fn run(executor: &str) -> anyhow::Result<()> {
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("fairgpu-gpu-check-{pid}"));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let region = PathBuf::from(format!("/dev/shm/fairgpu-gpu-check-{pid}"));
    let config = dir.join("fairgpu.toml");
    let socket = dir.join("control.sock");
    std::fs::write(
        &config,
        format!(
            "[daemon]\ncontrol_socket = {socket:?}\nexecutor = {executor:?}\n\n\
             [[vm]]\nname = \"check\"\nweight = 1\nmemory = \"2GiB\"\nregion = {region:?}\nchannels = 2\n",
        ),
    )?;
    let exe = std::env::current_exe().context("locating the fairgpu executable")?;
    let daemon = Reaped::new(
        Command::new(&exe)
            .args(["serve", "--log", "warn", "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .spawn()
            .context("starting the daemon")?,
    );
    let result = check(&region);
    // Workers publish usage about every 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    let status = Command::new(&exe)
        .args(["status", "--socket"])
        .arg(&socket)
        .output();
    drop(daemon);
    let _ = std::fs::remove_dir_all(&dir);
    if let Ok(out) = status {
        println!("\ndaemon status:\n{}", String::from_utf8_lossy(&out.stdout));
    }
    let failures = result?;
    if failures > 0 {
        bail!("{failures} check(s) failed");
    }
    println!("gpu-check: all checks passed");
    Ok(())
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAILED"
    }
}

fn check(region: &std::path::Path) -> anyhow::Result<u32> {
    let region = open_region_wait(region, Duration::from_secs(30))?;
    let mut cu = Cuda::new(Channel::claim(region, WaitConfig::from_env())?);
    let mut failures = 0;
    let name = cu.device_name(0)?;
    let major = cu.device_attribute(attr::COMPUTE_CAPABILITY_MAJOR, 0)?;
    let minor = cu.device_attribute(attr::COMPUTE_CAPABILITY_MINOR, 0)?;
    let sms = cu.device_attribute(attr::MULTIPROCESSOR_COUNT, 0)?;
    let (free, total) = cu.mem_get_info()?;
    println!(
        "device: {name} (compute {major}.{minor}, {sms} SMs), driver {}",
        cu.driver_version()?
    );
    println!(
        "memory seen by the VM: {} MiB free of {} MiB",
        free >> 20,
        total >> 20
    );

    let n: u32 = 1 << 20;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>();
    let dx = cu.mem_alloc(u64::from(n) * 4)?;
    let dy = cu.mem_alloc(u64::from(n) * 4)?;
    cu.memcpy_htod(dx, &bytes(&x))?;
    cu.memcpy_htod(dy, &bytes(&y))?;
    let mut back = vec![0u8; n as usize * 4];
    cu.memcpy_dtoh(&mut back, dx, 0)?;
    let ok = back == bytes(&x);
    failures += u32::from(!ok);
    println!("copy 4 MiB in and back: {}", verdict(ok));

    let module = cu.module_load(KERNELS_PTX.as_bytes())?;
    let axpy = cu.module_get_function(module, "fairgpu_axpy")?;
    let want = [(0, 8), (8, 8), (16, 4), (20, 4)].map(|(offset, size)| ParamInfo { offset, size });
    let ok = axpy.params == want;
    failures += u32::from(!ok);
    println!(
        "fairgpu_axpy parameter layout {:?}: {}",
        axpy.params,
        verdict(ok)
    );

    let a = 2.0f32;
    let params = axpy.pack(&[
        &dy.to_le_bytes(),
        &dx.to_le_bytes(),
        &a.to_le_bytes(),
        &n.to_le_bytes(),
    ])?;
    cu.launch(
        axpy.handle,
        [n.div_ceil(256), 1, 1],
        [256, 1, 1],
        0,
        0,
        &params,
    )?;
    cu.ctx_synchronize()?;
    cu.memcpy_dtoh(&mut back, dy, 0)?;
    let got = back
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let bad = got
        .zip(x.iter().zip(&y))
        .filter(|(g, (xi, yi))| g.to_bits() != a.mul_add(**xi, **yi).to_bits())
        .count();
    failures += u32::from(bad > 0);
    println!(
        "fairgpu_axpy on {n} elements against the CPU: {} ({bad} mismatches)",
        verdict(bad == 0)
    );

    let spin = cu.module_get_function(module, "fairgpu_spin")?;
    let (e0, e1) = (cu.event_create(0)?, cu.event_create(0)?);
    let ns: u64 = 5_000_000;
    cu.event_record(e0, 0)?;
    cu.launch(
        spin.handle,
        [1, 1, 1],
        [1, 1, 1],
        0,
        0,
        &spin.pack(&[&ns.to_le_bytes()])?,
    )?;
    cu.event_record(e1, 0)?;
    cu.event_synchronize(e1)?;
    let ms = cu.event_elapsed_ms(e0, e1)?;
    let ok = (4.9..=100.0).contains(&ms);
    failures += u32::from(!ok);
    println!(
        "fairgpu_spin(5 ms) measured by events: {ms:.3} ms: {}",
        verdict(ok)
    );

    cu.mem_free(dx)?;
    cu.mem_free(dy)?;
    cu.module_unload(module)?;
    Ok(failures)
}
