//! Real CUDA programs (`tests/cuda/`), unmodified: compiled with NVIDIA's
//! nvcc 13 and linked against NVIDIA's libcudart 12.9 (shared and static)
//! and 13 (shared), plus a C program on the driver API. They run against
//! the guest library as `libcuda.so.1` (`LD_LIBRARY_PATH`) and a `fairgpu
//! serve` daemon on SimGpu, one VM per build variant, with
//! `FAIRGPU_CHECK_RESULTS=1`: SimGpu executes their kernels (its PTX
//! interpreter), except the timing-only spin kernels. Each program checks
//! itself (what its kernels computed against a CPU reference, bit for bit)
//! and prints `PASS <name>`; the test also compares what a program reports
//! (device properties, memory totals, modelled GPU time) with the daemon's
//! configuration and status.
//!
//! The toolchain comes from `scripts/cuda-toolchain.sh` (PyPI wheels, no
//! GPU needed), found through `FAIRGPU_CUDA_PREFIX` (default
//! `target/cuda-toolchain`). Without it these tests fail, unless
//! `FAIRGPU_ALLOW_NO_CUDA=1`, which makes them skip with a message.
//! `tests/cuda/build.sh` builds the programs once per run into
//! `target/<profile>/cuda-programs/`.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use fairgpu_tests::cuda::{sim_table, SIM_SM_COUNT};
use fairgpu_tests::{
    guest_lib_dir, run_command, status, vm, wait_for_status, DaemonProcess, Setup, VM_QUOTA,
};

/// The builds of each runtime program.
const VARIANTS: [&str; 3] = ["cu12", "cu12static", "cu13"];
/// The VM the driver-API program uses.
const DRIVER_VM: &str = "driver";
/// How long one program may run.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);
/// The device the programs must see.
const SIM_NAME: &str = "fairgpu cuda-programs SimGpu";
/// Guest channels per VM: the threaded programs may claim several.
const CHANNELS: u32 = 8;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The directory of built programs; `None` if the toolchain is missing and
/// `FAIRGPU_ALLOW_NO_CUDA=1`.
fn programs() -> Option<&'static Path> {
    fairgpu_tests::cuda::programs().map(|p| p.dir.as_path())
}

/// A daemon on SimGpu with one VM per runtime variant and one for the
/// driver-API program.
struct Sim {
    setup: Setup,
    daemon: DaemonProcess,
}

impl Sim {
    fn start(test: &str) -> Sim {
        let mut vms: Vec<(&str, u32, u32)> = VARIANTS.iter().map(|v| (*v, 1, CHANNELS)).collect();
        vms.push((DRIVER_VM, 1, CHANNELS));
        let setup = Setup::with_sim(test, &sim_table(SIM_NAME), &vms);
        let daemon = setup.start();
        Sim { setup, daemon }
    }

    fn region(&self, vm_name: &str) -> &Path {
        let i = VARIANTS
            .iter()
            .position(|v| *v == vm_name)
            .unwrap_or(VARIANTS.len());
        &self.setup.regions[i]
    }

    /// Runs `program` as a guest of VM `vm_name` with the guest library,
    /// checks that it passed, and waits until the VM has reclaimed what it
    /// used. Returns its stdout.
    fn run(&self, program: &Path, vm_name: &str) -> String {
        self.run_with(program, vm_name, &[])
    }

    /// [`Sim::run`] with more environment for the program.
    fn run_with(&self, program: &Path, vm_name: &str, env: &[(&str, &str)]) -> String {
        self.run_full(program, vm_name, env, &[])
    }

    /// [`Sim::run_with`] with arguments for the program.
    fn run_full(
        &self,
        program: &Path,
        vm_name: &str,
        env: &[(&str, &str)],
        args: &[&str],
    ) -> String {
        let name = program
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a program name");
        let out = run_command(
            Command::new(program)
                .args(args)
                .env("LD_LIBRARY_PATH", guest_lib_dir())
                .env("FAIRGPU_REGION", self.region(vm_name))
                .env("FAIRGPU_CHECK_RESULTS", "1")
                .envs(env.iter().copied()),
            RUN_TIMEOUT,
        );
        let stdout = text(&out.stdout);
        let base = name.split('-').next().unwrap_or(name);
        if !out.status.success() || !stdout.contains(&format!("PASS {base}\n")) {
            panic!(
                "{name} ({}) did not pass{}\n--- stdout ---\n{stdout}--- stderr ---\n{}\n--- daemon ---\n{}",
                out.status,
                if out.status.code() == Some(3) {
                    " (exit 3: libcudart or the program found no usable libcuda.so.1)"
                } else {
                    ""
                },
                text(&out.stderr),
                self.daemon.log()
            );
        }
        // The process is gone: its channel and memory are released.
        wait_for_status(
            &self.daemon,
            &format!("vm {vm_name} to release what {name} used"),
            |s| {
                let v = vm(s, vm_name);
                v.channels_used == 0 && v.mem_used == 0
            },
        );
        stdout
    }

    /// Checks that the VM's GPU time is the modelled time the program
    /// reports (`GPU_NS` line).
    fn check_gpu_time(&self, vm_name: &str, stdout: &str, program: &str) {
        let want: u64 = lines(stdout, "GPU_NS ")
            .first()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{program} printed no GPU_NS line:\n{stdout}"));
        assert!(want > 0, "{program}: GPU_NS 0");
        let s = wait_for_status(
            &self.daemon,
            &format!("vm {vm_name} to publish {want} ns of GPU time"),
            |s| vm(s, vm_name).gpu_time_ns >= want,
        );
        assert_eq!(
            vm(&s, vm_name).gpu_time_ns,
            want,
            "{program}: the VM's GPU time is not the sum of its kernels' modelled durations"
        );
    }
}

/// The rest of every stdout line starting with `prefix`.
fn lines<'a>(stdout: &'a str, prefix: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .collect()
}

/// Runs the three variants of runtime program `name`, each on its own VM,
/// one after the other (so that no other kernel shares the modelled device
/// while one measures), and returns their stdouts. `None`: skipped.
fn run_variants(test: &str, name: &str) -> Option<(Sim, Vec<(String, String)>)> {
    let dir = programs()?;
    guest_lib_dir();
    let sim = Sim::start(test);
    let outs = VARIANTS
        .iter()
        .map(|v| {
            let stdout = sim.run(&dir.join(format!("{name}-{v}")), v);
            ((*v).to_owned(), stdout)
        })
        .collect();
    Some((sim, outs))
}

#[test]
fn device_query_sees_the_configured_device() {
    let Some((_sim, outs)) = run_variants("cuda_device_query", "device_query") else {
        return;
    };
    for (variant, stdout) in outs {
        let props: HashMap<&str, &str> = lines(&stdout, "PROP ")
            .into_iter()
            .filter_map(|l| l.split_once('='))
            .collect();
        let want = [
            ("name", SIM_NAME.to_owned()),
            ("major", "9".to_owned()),
            ("minor", "0".to_owned()),
            ("multiProcessorCount", SIM_SM_COUNT.to_string()),
            // The VM's quota, below the device's memory.
            ("totalGlobalMem", VM_QUOTA.to_string()),
            ("warpSize", "32".to_owned()),
            ("maxThreadsPerBlock", "1024".to_owned()),
        ];
        for (key, value) in want {
            assert_eq!(
                props.get(key).copied(),
                Some(value.as_str()),
                "device_query-{variant}: PROP {key}; stdout:\n{stdout}"
            );
        }
    }
}

#[test]
fn memory_copies_memsets_and_the_quota() {
    let Some((_sim, outs)) = run_variants("cuda_memory", "memory") else {
        return;
    };
    for (variant, stdout) in outs {
        let info = lines(&stdout, "MEMINFO ");
        let total = info
            .first()
            .and_then(|l| l.split_whitespace().find_map(|w| w.strip_prefix("total=")))
            .unwrap_or_else(|| panic!("memory-{variant} printed no MEMINFO total:\n{stdout}"));
        assert_eq!(
            total,
            VM_QUOTA.to_string(),
            "memory-{variant}: cudaMemGetInfo's total is not the VM's quota"
        );
    }
}

#[test]
fn streams_events_and_host_threads() {
    let Some((sim, outs)) = run_variants("cuda_streams", "streams_events") else {
        return;
    };
    for (variant, stdout) in outs {
        sim.check_gpu_time(
            variant.as_str(),
            &stdout,
            &format!("streams_events-{variant}"),
        );
    }
}

#[test]
fn launch_parameters_reach_the_host_exactly() {
    let Some((sim, outs)) = run_variants("cuda_launch_args", "launch_args") else {
        return;
    };
    for (variant, stdout) in outs {
        let program = format!("launch_args-{variant}");
        sim.check_gpu_time(variant.as_str(), &stdout, &program);
        // The buffers the program passed, as it laid them out: 80 bytes
        // for the args_* kernels (the offsets its static_asserts pin).
        let args = lines(&stdout, "ARGS ");
        assert!(args.len() >= 6, "{program}: ARGS lines missing:\n{stdout}");
        for a in args {
            let (kernel, hex) = a.split_once(' ').expect("ARGS <kernel> <hex>");
            assert!(
                hex.len() == 160 && hex.bytes().all(|b| b.is_ascii_hexdigit()),
                "{program}: ARGS {kernel}: not 80 bytes of hex: {hex}"
            );
        }
    }
}

#[test]
fn errors_are_codes_and_the_context_survives() {
    let Some((_sim, outs)) = run_variants("cuda_errors", "errors") else {
        return;
    };
    for (variant, stdout) in outs {
        for note in lines(&stdout, "NOTE ") {
            eprintln!("errors-{variant}: {note}");
        }
    }
}

#[test]
fn driver_api_program_loads_ptx_and_launches_both_ways() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let sim = Sim::start("cuda_driver_api");
    let stdout = sim.run(&dir.join("driver_api"), DRIVER_VM);
    sim.check_gpu_time(DRIVER_VM, &stdout, "driver_api");
}

/// Contexts made with `cuCtxCreate` are host contexts of their own: their
/// memory (freed by `cuCtxDestroy` at once), modules, streams and sticky
/// errors are theirs; a library's kernel and variable work in every
/// context (each its own copy); handles name their context. The program
/// checks every result against the CPU; here also that a fault in one
/// created context leaves the others running.
#[test]
fn created_contexts_are_contexts_of_their_own() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let sim = Sim::start("cuda_contexts");
    let plain = sim.run(&dir.join("contexts"), DRIVER_VM);
    assert!(!plain.contains("STICKY_ISOLATED"), "{plain}");
    let stdout = sim.run_full(&dir.join("contexts"), DRIVER_VM, &[], &["fault"]);
    assert_eq!(
        lines(&stdout, "STICKY_ISOLATED "),
        ["1"],
        "contexts: a fault in one created context stays there:\n{stdout}"
    );
    // Everything the program's contexts held is given back.
    wait_for_status(&sim.daemon, "the contexts' memory and channels back", |s| {
        let v = vm(s, DRIVER_VM);
        v.mem_used == 0 && v.channels_used == 0
    });
}

/// `cudaDeviceReset` ends the primary context with what was made in it
/// (its memory is free again when the call returns) and the program goes
/// on in a fresh one, with every build of libcudart (which loads its
/// kernels again there); on SimGpu a sticky error ends with it.
#[test]
fn a_device_reset_frees_the_context_and_the_program_goes_on() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let sim = Sim::start("cuda_device_reset");
    for v in VARIANTS {
        let program = dir.join(format!("device_reset-{v}"));
        let plain = sim.run(&program, v);
        assert!(!plain.contains("RESET_RECOVERED"), "{v}: {plain}");
        let stdout = sim.run_full(&program, v, &[], &["fault"]);
        assert_eq!(
            lines(&stdout, "RESET_RECOVERED "),
            ["1"],
            "device_reset-{v}: the work after a reset runs:\n{stdout}"
        );
        wait_for_status(&sim.daemon, "the program's memory back", |s| {
            vm(s, v).mem_used == 0
        });
    }
}

/// The deprecated execution-control API (block shape, shared size and
/// parameters set on the function, then `cuLaunchGrid`/`cuLaunch`) and the
/// context usage count, as PyCUDA calls them: every kernel's output is
/// checked against the CPU by the program.
#[test]
fn legacy_api_program_launches_with_the_function_s_settings() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let sim = Sim::start("cuda_legacy_api");
    let stdout = sim.run(&dir.join("legacy_api"), DRIVER_VM);
    assert_eq!(
        lines(&stdout, "LEGACY_LAUNCHES "),
        ["4"],
        "legacy_api: every legacy launch form ran:\n{stdout}"
    );
    assert_eq!(
        lines(&stdout, "PARAM_COUNTS "),
        ["5 1"],
        "legacy_api: the guest library counts parameters:\n{stdout}"
    );
}

/// The programs that check what their kernels compute against the CPU.
const COMPUTE_PROGRAMS: [&str; 31] = [
    "vector_add",
    "saxpy",
    "matmul",
    "reduction",
    "histogram",
    "scan",
    "struct_arg",
    "func_attributes",
    "globals",
    "stream_ordered",
    "device_printf",
    "textures",
    "managed",
    "cooperative",
    "graphs",
    "jit_link",
    "video",
    "device_heap",
    "sm80_features",
    "per_thread_stream",
    "graph_memory",
    "vmm",
    "mma",
    "bulk_copy",
    "managed_vars",
    "recursion",
    "graph_conditional",
    "ipc",
    "batch_copy",
    "dynamic_parallelism",
    "threads",
];

/// Vector addition, SAXPY, a tiled matrix multiplication in shared
/// memory, reductions with barriers and warp shuffles, histograms with
/// atomics, prefix scans, structs passed by value, arrays read through
/// textures and written through surfaces, managed and mapped memory and `__managed__`
/// variables shared by the CPU and kernels, cooperative launches (and cluster launches
/// refused where the device has none), CUDA graphs built and captured (memory nodes among them, and
/// conditional IF/ELSE, WHILE and SWITCH nodes whose conditions kernels set), memory shared
/// between two processes of a VM through CUDA IPC (a child's kernel on its parent's allocation),
/// batched copies (`cudaMemcpyBatchAsync`), memory mapped through the virtual-memory API, tensor-core `mma.sync` with `ldmatrix`/`stmatrix` in inline PTX, sm_90's bulk copies on transaction-counting barriers,
/// PTX modules JIT-linked or loaded from files, kernels launching kernels (dynamic parallelism,
/// built with relocatable device code), recursive device functions
/// (and a recursion that overflows the call stack), programs built with the
/// per-thread default stream, host threads issuing at once on channels of
/// their own (one waiting while another works, a producer and a consumer
/// ordered on one stream): SimGpu's kernels compute exactly what the CPU
/// does. The three variants of a program run
/// at once, one per VM.
#[test]
fn kernels_compute_what_the_cpu_computes() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let sim = Sim::start("cuda_compute");
    for name in COMPUTE_PROGRAMS {
        std::thread::scope(|s| {
            for v in VARIANTS {
                let sim = &sim;
                let program = dir.join(format!("{name}-{v}"));
                s.spawn(move || sim.run(&program, v));
            }
        });
    }
    // Every VM executed kernels and was charged their modelled time.
    let st = status(&sim.daemon);
    for v in VARIANTS {
        let vm = vm(&st, v);
        assert!(vm.kernels > 0 && vm.gpu_time_ns > 0, "{v}: {vm:?}");
        assert_eq!(vm.restarts, 0, "{v}");
    }
    // The threads of `threads` issued on channels of their own.
    let log = sim.daemon.log();
    assert!(
        log.contains("joined its process's context"),
        "no thread's channel joined its process's context:\n{log}"
    );
}

/// A thread of a program waiting in `cudaStreamSynchronize` for a long
/// kernel does not hold another thread's calls: each thread has a channel
/// of its own, and the worker puts the synchronization aside while the
/// other threads' requests are served. Without a scheduler, whose grants
/// could hold the other thread's requests for their own reasons.
#[test]
fn a_thread_waiting_for_the_device_does_not_hold_another_thread() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let vms: Vec<(&str, u32, u32)> = VARIANTS.iter().map(|v| (*v, 1, CHANNELS)).collect();
    let setup = Setup::with_sim("cuda_thread_sync", &sim_table(SIM_NAME), &vms)
        .with_daemon("policy = \"none\"");
    let daemon = setup.start();
    let sim = Sim { setup, daemon };
    for v in VARIANTS {
        let stdout = sim.run(&dir.join(format!("threads-{v}")), v);
        assert!(
            stdout.contains("\nOVERLAP 1\n") || stdout.starts_with("OVERLAP 1\n"),
            "threads-{v}: a thread's copies waited for another thread's synchronization:\n{stdout}"
        );
        // A device synchronization waits for the work issued before it, not
        // for another thread's kernel launched while it waited.
        assert!(
            stdout.contains("LATER_DONE 0\n"),
            "threads-{v}: cudaDeviceSynchronize waited for a later kernel:\n{stdout}"
        );
        // Built with the per-thread default stream: a thread's synchronous
        // copies wait for its own default stream, not another thread's.
        let stdout = sim.run(&dir.join(format!("per_thread_stream-{v}")), v);
        assert!(
            stdout.contains("PTDS_OVERLAP 1\n"),
            "per_thread_stream-{v}: a synchronous copy waited for another thread's default stream:\n{stdout}"
        );
    }
    // With channels of their own turned off, the threads share the
    // process's channel: still right, but the waiting thread holds the
    // other's calls (so the check above can tell).
    let v = VARIANTS[0];
    let stdout = sim.run_with(
        &dir.join(format!("threads-{v}")),
        v,
        &[("FAIRGPU_THREAD_CHANNELS", "0")],
    );
    assert!(
        stdout.contains("\nOVERLAP 0\n") || stdout.starts_with("OVERLAP 0\n"),
        "threads-{v} with FAIRGPU_THREAD_CHANNELS=0:\n{stdout}"
    );
}

/// A kernel with an instruction SimGpu cannot execute fails with
/// cudaErrorNotSupported and leaves its context working; one writing far
/// outside its memory fails with a sticky cudaErrorIllegalAddress. Neither
/// disturbs another VM running at the same time, nor the next program of
/// the same VM, and the daemon's log names the instruction.
#[test]
fn unsupported_and_out_of_bounds_kernels_fail_with_cuda_errors() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let sim = Sim::start("cuda_faults");
    for (i, v) in VARIANTS.iter().enumerate() {
        // Another VM computes while this one faults.
        let other = VARIANTS[(i + 1) % VARIANTS.len()];
        let stdout = std::thread::scope(|s| {
            let neighbour = s.spawn(|| sim.run(&dir.join(format!("matmul-{other}")), other));
            let stdout = sim.run(&dir.join(format!("faults-{v}")), v);
            neighbour.join().expect("the other VM's program");
            stdout
        });
        assert!(
            stdout.contains("VIDEO cudaErrorNotSupported\n"),
            "faults-{v}: the unsupported instruction did not fail as not supported:\n{stdout}"
        );
        assert!(
            stdout.contains("OOB cudaErrorIllegalAddress\n"),
            "faults-{v}:\n{stdout}"
        );
        // The same VM serves its next guest normally.
        sim.run(&dir.join(format!("vector_add-{v}")), v);
    }
    let st = status(&sim.daemon);
    for v in VARIANTS {
        assert_eq!(vm(&st, v).restarts, 0, "{v}'s worker restarted");
    }
    let log = sim.daemon.log();
    assert!(
        log.contains("vabsdiff.u32"),
        "the daemon's log does not name the unsupported instruction:\n{log}"
    );
}

/// On a real GPU a sticky error (a kernel's illegal address) poisons the
/// whole worker process: `cuCtxCreate` fails with the same error for every
/// later guest (seen on an H100). SimGpu models that with
/// `sticky_poisons_process`: after a faulting program has exited, the
/// worker must be replaced by a fresh one, so the VM's next program runs.
#[test]
fn a_sticky_error_that_poisons_the_worker_is_followed_by_a_fresh_worker() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let v = VARIANTS[0];
    let table = format!("{}sticky_poisons_process = true\n", sim_table(SIM_NAME));
    let setup = Setup::with_sim("cuda_poison", &table, &[(v, 1, CHANNELS)]);
    let daemon = setup.start();
    let sim = Sim { setup, daemon };
    let stdout = sim.run(&dir.join(format!("faults-{v}")), v);
    assert!(
        stdout.contains("OOB cudaErrorIllegalAddress\n"),
        "faults-{v}:\n{stdout}"
    );
    // The poisoned worker stops once the faulting guest is gone, and the
    // daemon starts a fresh one at once.
    wait_for_status(&sim.daemon, "the poisoned worker to be replaced", |s| {
        let vm = vm(s, v);
        vm.restarts == 1 && vm.state == fairgpu_worker::stats::WorkerState::Running
    });
    sim.run(&dir.join(format!("vector_add-{v}")), v);
    let log = sim.daemon.log();
    assert!(
        log.contains("starting a fresh one"),
        "the daemon did not say why it replaced the worker:\n{log}"
    );
}

/// Without any libcuda.so.1, every program reports that there is no driver
/// (exit 3, "NODRIVER"): libcudart answers cudaErrorInsufficientDriver.
/// Skipped where the system has a libcuda.so.1 of its own.
#[test]
fn without_a_driver_every_program_says_so() {
    let Some(dir) = programs() else {
        return;
    };
    let run = |name: &str| -> Output {
        run_command(
            Command::new(dir.join(name))
                .env_remove("LD_LIBRARY_PATH")
                .env_remove("LD_PRELOAD")
                .env_remove("FAIRGPU_REGION"),
            RUN_TIMEOUT,
        )
    };
    let probe = run("driver_api");
    if probe.status.code() != Some(3) {
        eprintln!(
            "SKIPPED: this system has a libcuda.so.1 of its own (driver_api: {}):\n{}",
            probe.status,
            text(&probe.stdout)
        );
        return;
    }
    let mut names = vec!["driver_api".to_owned()];
    for p in [
        "device_query",
        "memory",
        "streams_events",
        "launch_args",
        "errors",
        "faults",
    ]
    .into_iter()
    .chain(COMPUTE_PROGRAMS)
    {
        names.extend(VARIANTS.iter().map(|v| format!("{p}-{v}")));
    }
    for name in names {
        let out = run(&name);
        let stdout = text(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{name} without a driver: {}\n{stdout}{}",
            out.status,
            text(&out.stderr)
        );
        let base = name.split('-').next().unwrap_or(&name);
        assert!(
            stdout.starts_with(&format!("NODRIVER {base}: ")),
            "{name}: {stdout}"
        );
        if name != "driver_api" {
            assert!(
                stdout.contains("35 cudaErrorInsufficientDriver"),
                "{name}: libcudart without libcuda.so.1 should say cudaErrorInsufficientDriver: {stdout}"
            );
        }
    }
}

/// The same programs through two hops: a daemon whose workers use
/// CudaExecutor (the real-GPU executor, on cudarc), with the guest library
/// as the `libcuda.so.1` it loads, forwarding to a second daemon on SimGpu,
/// which executes the kernels. This runs CudaExecutor's code path on every
/// CI run, without a GPU, results of kernels included.
#[test]
fn every_program_passes_through_cuda_executor_and_a_second_daemon() {
    let Some(dir) = programs() else {
        return;
    };
    let lib = guest_lib_dir();
    let backend = Setup::with_sim(
        "cuda_two_hop_backend",
        &sim_table(SIM_NAME),
        &[("backend", 1, CHANNELS)],
    );
    let backend_daemon = backend.start();
    let mut vms: Vec<(&str, u32, u32)> = VARIANTS.iter().map(|v| (*v, 1, CHANNELS)).collect();
    vms.push((DRIVER_VM, 1, CHANNELS));
    // A GPU's driver reserves a thread's stack for every thread the device
    // holds at once, and CudaExecutor charges that: device_heap's 4 KiB
    // stack is 1.1 GB of the VMs' quota.
    let setup = Setup::with_executor("cuda_two_hop", "cuda", &sim_table(SIM_NAME), &vms)
        .with_quota(4 << 30);
    let daemon = setup.start_with_env(&[
        ("FAIRGPU_REGION", backend.regions[0].as_os_str()),
        ("LD_LIBRARY_PATH", lib.as_os_str()),
    ]);
    let front = Sim { setup, daemon };
    assert_eq!(status(&front.daemon).daemon.executor, "cuda");

    let backend_time = || vm(&status(&backend_daemon), "backend").gpu_time_ns;
    let mut runs: Vec<(String, &str)> = Vec::new();
    for p in [
        "device_query",
        "memory",
        "streams_events",
        "launch_args",
        "struct_arg",
        "matmul",
        "func_attributes",
        "globals",
        "stream_ordered",
        "textures",
        "managed",
        "cooperative",
        "graphs",
        "jit_link",
        "device_heap",
        "sm80_features",
        "batch_copy",
        "vmm",
    ] {
        for v in VARIANTS {
            runs.push((format!("{p}-{v}"), v));
        }
    }
    runs.push(("driver_api".to_owned(), DRIVER_VM));
    for (program, vm_name) in runs {
        // The previous program's last kernels may still be being charged
        // on the backend (its accounting samples after the guest is gone):
        // start from a settled total, unchanged over five reads 100 ms apart.
        let mut last = (backend_time(), 0u32);
        let before = fairgpu_tests::wait_until(
            "the backend's GPU time to settle",
            Duration::from_secs(30),
            || {
                std::thread::sleep(Duration::from_millis(100));
                let now = backend_time();
                last = if now == last.0 {
                    (now, last.1 + 1)
                } else {
                    (now, 0)
                };
                (last.1 >= 5).then_some(now)
            },
        );
        let stdout = front.run(&dir.join(&program), vm_name);
        if program.starts_with("device_query") {
            assert!(
                stdout.contains(&format!("PROP name={SIM_NAME}\n")),
                "{program}: the device behind two hops is not the backend's SimGpu:\n{stdout}"
            );
        }
        // The modelled time of the program's kernels is charged, exactly,
        // on the backend SimGpu.
        if let Some(want) = lines(&stdout, "GPU_NS ")
            .first()
            .and_then(|v| v.parse::<u64>().ok())
        {
            let s = wait_for_status(
                &backend_daemon,
                &format!("{program}'s GPU time on the backend"),
                |s| vm(s, "backend").gpu_time_ns >= before + want,
            );
            assert_eq!(
                vm(&s, "backend").gpu_time_ns - before,
                want,
                "{program}: backend GPU time"
            );
        }
    }
    // What needs SimGpu is refused through CudaExecutor as not supported,
    // never run into wrong data: conditional graph nodes (a GPU's driver
    // resolves `cudaGraphSetConditional` against its own graphs' handles
    // only) and IPC (a GPU's contexts do not hand memory over).
    let v = VARIANTS[0];
    for (program, call) in [
        ("graph_conditional", "cudaGraphConditionalHandleCreate"),
        ("ipc", "cudaIpcGetMemHandle"),
    ] {
        let out = run_command(
            Command::new(dir.join(format!("{program}-{v}")))
                .env("LD_LIBRARY_PATH", guest_lib_dir())
                .env("FAIRGPU_REGION", front.region(v)),
            RUN_TIMEOUT,
        );
        let stdout = text(&out.stdout);
        assert!(
            out.status.code() == Some(1)
                && stdout.contains(call)
                && stdout.contains("cudaErrorNotSupported"),
            "{program}-{v} through CudaExecutor ({}):\n{stdout}{}",
            out.status,
            text(&out.stderr)
        );
    }
}

/// A graph launch crosses to the host as one request: the graphs program
/// launches a captured chain of 256 kernels (between a memset and an event
/// record) 8 times and checks the result against the CPU; its VM served
/// far fewer requests than the kernels it ran, where node-by-node issue
/// took a request per kernel. Each kernel is still counted and charged as
/// its own piece of work (the VM's kernel count covers the chain's 2,048).
#[test]
fn a_graph_launch_crosses_as_one_request() {
    let Some((sim, outs)) = run_variants("cuda_graph_request", "graphs") else {
        return;
    };
    let st = status(&sim.daemon);
    for (v, stdout) in &outs {
        let chain: u64 = lines(stdout, "CHAIN_KERNELS ")
            .first()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{v}: no CHAIN_KERNELS line:\n{stdout}"));
        let vm = vm(&st, v);
        assert!(
            vm.kernels >= chain,
            "{v}: {} kernels < {chain}: {vm:?}",
            vm.kernels
        );
        assert!(
            vm.calls * 4 < chain,
            "{v}: {} requests for a program whose graph launches ran {chain} kernels: {vm:?}",
            vm.calls
        );
    }
}

/// Device `printf` and `assert` reach the program as on a GPU: each
/// thread's line on stdout between what the host printed before and after
/// the synchronization, formatted as C formats it; a failed assert's
/// message (file, line, function, block, thread, expression) on stderr.
#[test]
fn device_printf_and_assert_reach_the_programs_own_streams() {
    let Some(dir) = programs() else {
        return;
    };
    guest_lib_dir();
    let sim = Sim::start("cuda_printf");
    for v in VARIANTS {
        let out = run_command(
            Command::new(dir.join(format!("device_printf-{v}")))
                .env("LD_LIBRARY_PATH", guest_lib_dir())
                .env("FAIRGPU_REGION", sim.region(v)),
            RUN_TIMEOUT,
        );
        let stdout = text(&out.stdout);
        let stderr = text(&out.stderr);
        assert!(
            out.status.success() && stdout.ends_with("PASS device_printf\n"),
            "{v} ({}):\n{stdout}{stderr}",
            out.status
        );
        let lines: Vec<&str> = stdout.lines().collect();
        let mut want = vec!["HOST before".to_owned()];
        for b in 0..2 {
            for t in 0..3 {
                want.push(format!(
                    "hello from block {b} thread {t}: {} {:.3} {}    ab|{t:<4}|{:x}",
                    7 * t,
                    1.5 * f64::from(t),
                    if t % 2 == 1 { "odd" } else { "even" },
                    255 + b
                ));
            }
        }
        want.push("HOST after".to_owned());
        want.push("PASS device_printf".to_owned());
        assert_eq!(lines, want, "{v}: stdout");
        let messages: Vec<&str> = stderr.lines().filter(|l| l.contains("Assertion")).collect();
        assert_eq!(messages.len(), 1, "{v}: stderr\n{stderr}");
        assert!(
            messages[0].ends_with(
                ": block: [0,0,0], thread: [2,0,0] Assertion `v[threadIdx.x] >= 0` failed."
            ) && messages[0].contains("device_printf.cu:")
                && messages[0].contains("check("),
            "{v}: {}",
            messages[0]
        );
    }
}

/// The guest library also works through `LD_PRELOAD` (no library path):
/// the preloaded object satisfies libcudart's `dlopen("libcuda.so.1")`.
#[test]
fn the_guest_library_works_through_ld_preload() {
    let Some(dir) = programs() else {
        return;
    };
    let lib = guest_lib_dir();
    let sim = Sim::start("cuda_preload");
    for v in VARIANTS {
        let name = format!("memory-{v}");
        let out = run_command(
            Command::new(dir.join(&name))
                .env_remove("LD_LIBRARY_PATH")
                .env("LD_PRELOAD", lib.join("libcuda.so.1"))
                .env("FAIRGPU_REGION", sim.region(v)),
            RUN_TIMEOUT,
        );
        let stdout = text(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("PASS memory\n"),
            "{name} with LD_PRELOAD ({}):\n{stdout}{}",
            out.status,
            text(&out.stderr)
        );
    }
}
