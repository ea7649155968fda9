//! Real CUDA programs inside a real VM: QEMU (TCG) boots the guest image of
//! scripts/guest-image.sh with a fairgpu device of a `fairgpu serve`
//! daemon on SimGpu (a `guest = "qemu"` VM), and the programs of
//! `tests/cuda/` (nvcc-built, linked against NVIDIA's libcudart) run in the
//! guest with the guest library as their `libcuda.so.1` and
//! `FAIRGPU_CHECK_RESULTS=1` (SimGpu's PTX interpreter computes what their
//! kernels write). The guest finds the region through the device's BAR2
//! (`FAIRGPU_REGION` unset).
//!
//! - `cuda_programs_pass_inside_a_qemu_guest`: every build of every
//!   program, one after the other, in one guest on an `ivshmem-doorbell`
//!   device served by the daemon. (Over `ivshmem-plain` a request that
//!   finds the host's worker asleep waits out its 50 ms block slice; with
//!   TCG's slow guest that is most requests, and a subset of the programs
//!   took 120 s instead of 23 s.)
//! - `two_guests_with_different_weights_both_complete_and_are_accounted`:
//!   two guests at once, weights 1 (`ivshmem-plain` over the daemon's
//!   region file) and 3 (`ivshmem-doorbell`), each running a CUDA program
//!   and the workload generator; the daemon charges each VM exactly the
//!   modelled time of its own kernels.
//!
//! The test appends to the image's initramfs, as a second archive: the
//! programs under `/opt/fairgpu/bin`, the guest library as
//! `/opt/fairgpu/lib/libcuda.so.1`, the libraries `ldd` finds for them on
//! this host (libcudart from the toolchain into `/opt/fairgpu/lib`, system
//! libraries such as libstdc++ at their own paths; the image already holds
//! this host's glibc), the freshly built `fairgpu` and a `/guest/run` script
//! that runs every program between two marker lines.
//!
//! Needs QEMU and the guest image (skipped without them unless
//! `FAIRGPU_REQUIRE_QEMU` is set, as in qemu_guest.rs) and the CUDA
//! toolchain of `scripts/cuda-toolchain.sh` (a failure without it, unless
//! `FAIRGPU_ALLOW_NO_CUDA=1`, as in cuda_programs.rs). Build first with
//! `cargo build -p fairgpu -p fairgpu-guest`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use fairgpu_daemon::control::Status;
use fairgpu_tests::qemu::{image, take_turn, Finished, Guest, GuestOptions, Image, Overlay};
use fairgpu_tests::{
    fairgpu_bin, guest_lib_dir, run_command, unique_region_path, vm, wait_for_status,
    DaemonProcess, TempDir, VM_QUOTA,
};
use serde_json::Value;

/// The builds of each runtime program (all of them: over the doorbell
/// device a program takes about a second of TCG).
const VARIANTS: [&str; 3] = ["cu12", "cu12static", "cu13"];
/// The build the second test runs.
const VARIANT: &str = "cu12static";
/// The driver-API program (one build).
const DRIVER_PROGRAM: &str = "driver_api";
/// Where the programs and their private libraries go in the guest.
const GUEST_BIN: &str = "/opt/fairgpu/bin";
const GUEST_LIB: &str = "/opt/fairgpu/lib";
/// What the guest's run script prints around each command.
const MARK_BEGIN: &str = "fairgpu-cuda: begin ";
const MARK_END: &str = "fairgpu-cuda: end ";
/// Boot, every program and power-off of the one guest of the first test
/// (106 programs took 141 s of TCG on an idle 2-core host, and past 300 s
/// beside other heavy work; the budget leaves room for more programs and
/// a busier host).
const PROGRAMS_TIMEOUT: Duration = Duration::from_secs(480);
/// Boot, workload and power-off of each of the two guests of the second.
const WEIGHTS_TIMEOUT: Duration = Duration::from_secs(90);
/// How long the workload generator issues kernels in each guest.
const WORKLOAD_SECONDS: &str = "3";
/// Guest channels per VM: the threaded programs claim several.
const CHANNELS: u32 = 8;
/// Each VM's arena per channel: copies of a few MiB take a few chunks.
const ARENA: &str = "1MiB";

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every program `tests/cuda/build.sh` built; `None` if the toolchain is
/// missing and `FAIRGPU_ALLOW_NO_CUDA=1`.
fn built_programs() -> Option<&'static [PathBuf]> {
    fairgpu_tests::cuda::programs().map(|p| p.list.as_slice())
}

/// A program's file name.
fn file_name(p: &Path) -> &str {
    p.file_name()
        .and_then(|n| n.to_str())
        .expect("a program name")
}

/// The program's own name, which its `PASS` line carries
/// (`memory-cu13` → `memory`).
fn base_name(label: &str) -> &str {
    label.split('-').next().unwrap_or(label)
}

/// What the guest runs in the first test, in the build script's order: the
/// [`VARIANTS`] of every runtime program the script produced (new programs
/// in tests/cuda/ join without a change here) and the driver-API program.
fn guest_programs(built: &[PathBuf]) -> Vec<PathBuf> {
    built
        .iter()
        .filter(|p| {
            let name = file_name(p);
            name == DRIVER_PROGRAM
                || VARIANTS
                    .iter()
                    .any(|v| name.strip_suffix(v).is_some_and(|b| b.ends_with('-')))
        })
        .cloned()
        .collect()
}

/// One command of the guest's run script.
#[derive(Debug, Clone)]
struct GuestCommand {
    /// Its name in the marker lines.
    label: String,
    /// Extra environment.
    env: Vec<(String, String)>,
    /// The command line.
    argv: Vec<String>,
}

impl GuestCommand {
    /// Program `file` as installed in [`GUEST_BIN`], with `env`.
    fn program(file: &Path, env: &[(&str, &str)]) -> GuestCommand {
        let name = file_name(file);
        GuestCommand {
            label: name.to_owned(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            argv: vec![format!("{GUEST_BIN}/{name}")],
        }
    }
}

/// A word the run script can hold without quoting.
fn plain_word(w: &str) -> &str {
    assert!(
        !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-./=:,".contains(&b)),
        "{w:?} would need quoting in the guest's script"
    );
    w
}

/// The guest's `/guest/run`: each command between a begin and an end line
/// (with its exit status), output and errors to the console; exit status
/// 1 if any command failed.
fn run_script(cmds: &[GuestCommand]) -> String {
    let mut s = String::from(
        "#!/bin/sh\n\
         # The region is the ivshmem device's BAR2, found through sysfs.\n\
         unset FAIRGPU_REGION\n",
    );
    s.push_str(&format!("export LD_LIBRARY_PATH={GUEST_LIB}\n"));
    s.push_str(&format!(
        "failed=0\n\
         run() {{\n\
         \x20   label=$1\n\
         \x20   shift\n\
         \x20   echo \"{MARK_BEGIN}$label $(cut -d' ' -f1 /proc/uptime)\"\n\
         \x20   env \"$@\" 2>&1\n\
         \x20   rc=$?\n\
         \x20   echo\n\
         \x20   echo \"{MARK_END}$label $rc $(cut -d' ' -f1 /proc/uptime)\"\n\
         \x20   [ $rc -eq 0 ] || failed=1\n\
         }}\n"
    ));
    for c in cmds {
        s.push_str("run ");
        s.push_str(plain_word(&c.label));
        for (k, v) in &c.env {
            s.push_str(&format!(" {}={}", plain_word(k), plain_word(v)));
        }
        for a in &c.argv {
            s.push(' ');
            s.push_str(plain_word(a));
        }
        s.push('\n');
    }
    s.push_str("exit $failed\n");
    s
}

/// One command's run in a guest, from its marker lines.
#[derive(Debug, Clone)]
struct Ran {
    label: String,
    /// Exit status; `None`: no end line (the guest stopped inside it).
    rc: Option<i32>,
    /// The guest's uptime at its begin and end lines, s.
    began: Option<f64>,
    ended: Option<f64>,
    output: String,
}

impl Ran {
    /// How long it ran in the guest, s.
    fn secs(&self) -> Option<f64> {
        Some(self.ended? - self.began?)
    }
}

/// The commands a guest ran, in order.
fn runs(console: &str) -> Vec<Ran> {
    let mut out: Vec<Ran> = Vec::new();
    let mut open = false;
    for line in console.lines() {
        if let Some(rest) = line.strip_prefix(MARK_BEGIN) {
            let mut words = rest.split_whitespace();
            out.push(Ran {
                label: words.next().unwrap_or_default().to_owned(),
                rc: None,
                began: words.next().and_then(|t| t.parse().ok()),
                ended: None,
                output: String::new(),
            });
            open = true;
            continue;
        }
        if open {
            let run = out.last_mut().expect("an open run");
            // The end line follows an empty echo, so it starts a line.
            if let Some(rest) = line.strip_prefix(MARK_END) {
                let mut words = rest.split_whitespace();
                if words.next() == Some(run.label.as_str()) {
                    run.rc = words.next().and_then(|c| c.parse().ok());
                    run.ended = words.next().and_then(|t| t.parse().ok());
                    open = false;
                    continue;
                }
            }
            run.output.push_str(line);
            run.output.push('\n');
        }
    }
    out
}

/// One line per run: label, status and guest seconds.
fn timings(ran: &[Ran]) -> String {
    ran.iter()
        .map(|r| {
            format!(
                "  {:<28} exit {:<4} {}\n",
                r.label,
                r.rc.map_or("-".into(), |c| c.to_string()),
                r.secs().map_or("-".into(), |t| format!("{t:.1} s"))
            )
        })
        .collect()
}

/// The run of `label`, which must have ended with status 0; panics with the
/// guest's whole console otherwise.
fn succeeded<'a>(f: &Finished, ran: &'a [Ran], label: &str) -> &'a Ran {
    let Some(r) = ran.iter().find(|r| r.label == label) else {
        panic!(
            "guest {} never started {label}; console:\n{}",
            f.name, f.output
        )
    };
    if r.rc != Some(0) {
        panic!(
            "{label} in guest {} ended with {:?}{}:\n{}\n--- whole console ---\n{}",
            f.name,
            r.rc,
            if r.rc == Some(3) {
                " (exit 3: libcudart or the program found no usable libcuda.so.1)"
            } else {
                ""
            },
            r.output,
            f.output
        );
    }
    r
}

/// Checks that a CUDA program passed: exit 0 and its `PASS` line.
fn assert_passed(f: &Finished, ran: &[Ran], label: &str) -> Ran {
    let r = succeeded(f, ran, label);
    let pass = format!("PASS {}", base_name(label));
    assert!(
        r.output.lines().any(|l| l == pass),
        "{label} in guest {} printed no `{pass}` line:\n{}",
        f.name,
        r.output
    );
    r.clone()
}

/// The `GPU_NS` a program printed (the modelled time of its kernels).
fn gpu_ns(r: &Ran) -> Option<u64> {
    r.output
        .lines()
        .find_map(|l| l.strip_prefix("GPU_NS "))
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|e| panic!("{}: GPU_NS {v:?}: {e}", r.label))
        })
}

/// How a VM's QEMU reaches its region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeviceKind {
    /// `ivshmem-plain` over the region file the daemon creates: a request
    /// that finds the host's worker asleep waits for its next wake-up
    /// (at most its 50 ms block slice).
    Plain,
    /// `ivshmem-doorbell` connected to the daemon's ivshmem server (a memfd
    /// region): the guest rings the host awake through BAR0's Doorbell.
    Doorbell,
}

/// A daemon on SimGpu whose VMs' guests run in QEMU.
struct VmDaemon {
    _dir: TempDir,
    config: PathBuf,
    daemon: DaemonProcess,
}

impl VmDaemon {
    /// VMs `(name, weight, device)`, each with `guest = "qemu"`.
    fn start(test: &str, vms: &[(&str, u32, DeviceKind)]) -> VmDaemon {
        let dir = TempDir::new(test);
        let socket = dir.join("control.sock");
        let mut config = format!(
            "[daemon]\ncontrol_socket = {:?}\nexecutor = \"sim\"\nstate_dir = {:?}\n\n[sim]\n{}\n",
            socket.display().to_string(),
            dir.path().display().to_string(),
            fairgpu_tests::cuda::sim_table("fairgpu qemu-cuda SimGpu")
        );
        let mut files = Vec::new();
        for (name, weight, device) in vms {
            config.push_str(&format!(
                "[[vm]]\nname = {name:?}\nweight = {weight}\nmemory = {VM_QUOTA}\n\
                 channels = {CHANNELS}\narena = {ARENA:?}\nguest = \"qemu\"\n"
            ));
            match device {
                DeviceKind::Plain => {
                    let region = unique_region_path(&format!("{test}-{name}"));
                    config.push_str(&format!("region = {:?}\n\n", region.display().to_string()));
                    files.push(region);
                }
                // The daemon's ivshmem server listens in its state dir.
                DeviceKind::Doorbell => config.push_str("[vm.ivshmem]\ndevice = \"doorbell\"\n\n"),
            }
        }
        let path = dir.join("fairgpu.toml");
        std::fs::write(&path, config).expect("writing the configuration");
        let daemon = DaemonProcess::start(&path, &socket, &files);
        wait_for_status(&daemon, "every worker to run", |s| {
            s.vms.iter().all(|v| v.worker_pid != 0)
        });
        VmDaemon {
            _dir: dir,
            config: path,
            daemon,
        }
    }

    /// QEMU's options for VM `name`'s device, as `fairgpu qemu-args`
    /// prints them (the temporary paths need no shell quoting).
    fn device_args(&self, name: &str) -> Vec<String> {
        let out = run_command(
            Command::new(fairgpu_bin())
                .args(["qemu-args", name, "--config"])
                .arg(&self.config),
            Duration::from_secs(30),
        );
        let printed = text(&out.stdout);
        assert!(
            out.status.success() && !printed.contains(['\'', '"', '\\']),
            "fairgpu qemu-args {name} ({}): {printed}{}",
            out.status,
            text(&out.stderr)
        );
        printed.split_whitespace().map(str::to_owned).collect()
    }

    fn status(&self) -> Status {
        fairgpu_tests::status(&self.daemon)
    }
}

/// The overlay every guest here gets: `programs` in [`GUEST_BIN`], the
/// guest library as `libcuda.so.1` in [`GUEST_LIB`], the libraries they
/// need, and the `fairgpu` just built.
fn cuda_overlay(programs: &[PathBuf]) -> Overlay {
    let lib_dir = guest_lib_dir();
    let libcuda = lib_dir.join("libcuda.so.1");
    let mut o = Overlay::new();
    o.add_stripped(&format!("{GUEST_LIB}/libcuda.so.1"), &libcuda);
    o.add_libraries(&libcuda, None, GUEST_LIB);
    o.add_stripped("/bin/fairgpu", &fairgpu_bin());
    o.add_libraries(&fairgpu_bin(), None, GUEST_LIB);
    for p in programs {
        o.add_stripped(&format!("{GUEST_BIN}/{}", file_name(p)), p);
        // With the guest library on the path, as in the guest.
        o.add_libraries(p, Some(&lib_dir), GUEST_LIB);
    }
    o
}

/// Writes `overlay` plus `script` over the image's initramfs and boots it
/// with VM `vm_name`'s device.
fn boot(
    img: &Image,
    dir: &TempDir,
    daemon: &VmDaemon,
    vm_name: &str,
    overlay: &Overlay,
    script: &str,
    opts: &GuestOptions,
) -> Guest {
    let mut o = overlay.clone();
    o.add("/guest/run", 0o755, script.as_bytes().to_vec());
    let initrd = dir.join(&format!("{vm_name}-initrd"));
    o.write(&img.initrd, &initrd);
    Guest::boot(vm_name, img, &initrd, &daemon.device_args(vm_name), opts)
}

/// Every build of every CUDA program passes inside one guest, and the
/// daemon accounts their kernels to the guest's VM.
#[test]
fn cuda_programs_pass_inside_a_qemu_guest() {
    let Some(img) = image() else { return };
    let Some(built) = built_programs() else {
        return;
    };
    let _turn = take_turn();
    let programs = guest_programs(built);
    for want in VARIANTS
        .iter()
        .map(|v| format!("device_query-{v}"))
        .chain([DRIVER_PROGRAM.to_owned()])
    {
        assert!(
            programs.iter().any(|p| file_name(p) == want),
            "tests/cuda/build.sh built no {want}: {built:?}"
        );
    }
    let cmds: Vec<GuestCommand> = programs
        .iter()
        .map(|p| GuestCommand::program(p, &[("FAIRGPU_CHECK_RESULTS", "1")]))
        .collect();
    let overlay = cuda_overlay(&programs);
    eprintln!(
        "guest overlay: {} programs, {:.1} MB",
        programs.len(),
        overlay.data_len() as f64 / 1e6
    );

    let dir = TempDir::new("qemu_cuda");
    let d = VmDaemon::start("qemu_cuda", &[("guest", 1, DeviceKind::Doorbell)]);
    let started = Instant::now();
    let guest = boot(
        &img,
        &dir,
        &d,
        "guest",
        &overlay,
        &run_script(&cmds),
        &GuestOptions {
            memory_mib: 1024,
            cpus: 2,
        },
    );
    let f = guest.finish(PROGRAMS_TIMEOUT);
    let ran = runs(&f.output);
    eprintln!(
        "guest ran {} programs in {:.1?}:\n{}\n{}",
        cmds.len(),
        f.took,
        f.output,
        timings(&ran)
    );
    let mut want_gpu_ns = 0;
    for c in &cmds {
        let r = assert_passed(&f, &ran, &c.label);
        want_gpu_ns += gpu_ns(&r).unwrap_or(0);
    }
    f.assert_run_succeeded();
    // With FAIRGPU_REGION unset, the guest library had only the device's
    // BAR2 to find the region through.
    assert!(
        f.output.contains("fairgpu-guest: ivshmem device "),
        "the guest saw no ivshmem device:\n{}",
        f.output
    );

    // Every program exited: the guest released its channels and memory.
    // The VM's device time holds at least the kernels the programs counted
    // (`GPU_NS`); the executed kernels of the others cost their
    // instructions, which the programs cannot count.
    assert!(want_gpu_ns > 0, "no program printed GPU_NS");
    let s = wait_for_status(&d.daemon, "the guest's programs to be accounted", |s| {
        let v = vm(s, "guest");
        v.channels_used == 0 && v.mem_used == 0 && v.gpu_time_ns > want_gpu_ns
    });
    let v = vm(&s, "guest");
    eprintln!(
        "vm guest: {} ns of GPU time, {} kernels, {} calls; programs counted {want_gpu_ns} ns; {:.1?} in all",
        v.gpu_time_ns,
        v.kernels,
        v.calls,
        started.elapsed()
    );
    assert_eq!(v.restarts, 0, "the VM's worker restarted");
    // The guest rang the host through the doorbell, and its programs
    // released their channels themselves (none was left for the daemon to
    // release when QEMU went away).
    let q = v.qemu.as_ref().expect("a QEMU VM's status has its device");
    assert_eq!(q.device, "ivshmem-doorbell", "{q:?}");
    assert!(q.doorbells > 0, "the guest never rang the host: {q:?}");
    assert_eq!(q.channels_released, 0, "{q:?}");
    assert_eq!(d.status().vms.len(), 1);
}

/// The workload generator's report (its one JSON line).
fn workload_report(r: &Ran) -> Value {
    let line = r
        .output
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{} printed no report:\n{}", r.label, r.output));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("report {line:?}: {e}"))
}

fn report_u64(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {v}"))
}

/// Two guests of different weights share the device at once; both finish
/// and each VM is charged its own kernels exactly. (No share is asserted:
/// how long the two workloads overlap depends on how fast each guest boots
/// under TCG.)
#[test]
fn two_guests_with_different_weights_both_complete_and_are_accounted() {
    let Some(img) = image() else { return };
    let Some(built) = built_programs() else {
        return;
    };
    let _turn = take_turn();
    let program = built
        .iter()
        .find(|p| file_name(p) == format!("streams_events-{VARIANT}"))
        .unwrap_or_else(|| panic!("no streams_events-{VARIANT} among {built:?}"));
    let overlay = cuda_overlay(std::slice::from_ref(program));
    // The workload generator first (both guests boot at once, so their
    // workloads overlap if the boots take about as long), then a CUDA
    // program, both through libcuda.so.1. The program's event timings
    // include the other VM's kernels when both share the device, so it
    // checks them only from below.
    let cmds = [
        GuestCommand {
            label: "workload".into(),
            env: Vec::new(),
            argv: [
                "fairgpu",
                "__workload",
                "--log",
                "warn",
                "--profile",
                "MM",
                "--seconds",
                WORKLOAD_SECONDS,
            ]
            .map(String::from)
            .to_vec(),
        },
        GuestCommand::program(program, &[("FAIRGPU_SIM_TIMING", "0")]),
    ];
    let script = run_script(&cmds);
    // One VM on each device kind, both served by the one daemon.
    let vms = [
        ("light", 1, DeviceKind::Plain),
        ("heavy", 3, DeviceKind::Doorbell),
    ];

    let dir = TempDir::new("qemu_cuda_weights");
    let d = VmDaemon::start("qemu_cuda_weights", &vms);
    let started = Instant::now();
    // One vCPU each: two guests, the daemon and its workers share the
    // host's cores.
    let opts = GuestOptions {
        memory_mib: 1024,
        cpus: 1,
    };
    let guests: Vec<Guest> = vms
        .iter()
        .map(|(name, _, _)| boot(&img, &dir, &d, name, &overlay, &script, &opts))
        .collect();
    let finished: Vec<Finished> = guests
        .into_iter()
        .map(|g| g.finish(WEIGHTS_TIMEOUT))
        .collect();

    let mut want = Vec::new();
    for f in &finished {
        eprintln!("guest {} finished in {:.1?}:\n{}", f.name, f.took, f.output);
        let ran = runs(&f.output);
        let prog = assert_passed(f, &ran, &cmds[1].label);
        let program_ns = gpu_ns(&prog)
            .unwrap_or_else(|| panic!("{} printed no GPU_NS:\n{}", prog.label, prog.output));
        let report = workload_report(succeeded(f, &ran, "workload"));
        assert_eq!(report["client"], "libcuda", "{report}");
        assert_eq!(report["device"], "fairgpu qemu-cuda SimGpu", "{report}");
        let kernels = report_u64(&report, "kernels");
        assert!(kernels > 0, "guest {}: no kernels: {report}", f.name);
        let workload_ns = report_u64(&report, "device_time_requested_ns");
        f.assert_run_succeeded();
        want.push((f.name.clone(), program_ns + workload_ns));
    }

    // Each VM is charged exactly the modelled time of its own kernels.
    let s = wait_for_status(&d.daemon, "both VMs' GPU time", |s| {
        want.iter().all(|(name, ns)| {
            let v = vm(s, name);
            v.gpu_time_ns >= *ns && v.channels_used == 0
        })
    });
    for (name, ns) in &want {
        assert_eq!(
            vm(&s, name).gpu_time_ns,
            *ns,
            "vm {name}'s GPU time is not its program's GPU_NS plus its workload's device time"
        );
    }
    for (name, weight, kind) in vms {
        let v = vm(&s, name);
        assert_eq!(v.weight, weight, "vm {name}'s weight");
        assert!(v.gpu_time_ns > 0 && v.kernels > 0, "vm {name}: {v:?}");
        // The scheduler (FairGV, the default policy) granted it the GPU and
        // charged it what the worker measured.
        let sched = v.sched.as_ref().expect("a scheduled VM's status");
        assert!(
            sched.grants > 0 && sched.charged_ns > 0,
            "vm {name} was never granted the GPU: {sched:?}"
        );
        let q = v.qemu.as_ref().expect("a QEMU VM's status has its device");
        let device = match kind {
            DeviceKind::Plain => "ivshmem-plain",
            DeviceKind::Doorbell => "ivshmem-doorbell",
        };
        assert_eq!(q.device, device, "vm {name}: {q:?}");
        eprintln!(
            "vm {name} (weight {weight}, {device}): {} ns of GPU time, {} kernels; scheduler: {} grants, {} ns charged",
            v.gpu_time_ns, v.kernels, sched.grants, sched.charged_ns
        );
    }
    eprintln!("both guests done in {:.1?}", started.elapsed());
}
