//! The `fairgpu` command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// fairgpu shares one GPU among many virtual machines by API remoting: guest
/// processes push CUDA driver calls into lock-free rings in shared memory and
/// this host serves them.
#[derive(Debug, Parser)]
#[command(name = "fairgpu", version, propagate_version = true)]
pub struct Cli {
    /// Log filter (tracing syntax), e.g. "info" or "fairgpu=debug".
    #[arg(long, global = true, default_value = "info", env = "FAIRGPU_LOG")]
    pub log: String,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands, in the order `--help` lists them: the daemon and its
/// clients first, then the demo, benchmarks and checks, then the tools
/// for QEMU guests and for the transport alone. Each summary is one line;
/// `fairgpu help COMMAND` shows the rest.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: one vGPU worker per VM, the GPU scheduler, the
    /// control socket.
    #[command(long_about = SERVE_ABOUT)]
    Serve(ServeArgs),
    /// Show the running daemon's VMs: worker, channels, memory, GPU time.
    #[command(long_about = STATUS_ABOUT)]
    Status(StatusArgs),
    /// Change a VM's weight (its share of the GPU) while the daemon runs.
    #[command(long_about = SET_WEIGHT_ABOUT)]
    SetWeight(SetWeightArgs),
    /// Watch the running daemon's GPU shares live.
    ///
    /// Each VM's weight, target and measured share of the GPU (last
    /// interval and since start), kernels per second, and the Min-Max
    /// Ratio so far. Refreshes until Ctrl-C.
    Top(fairgpu_benches::top::TopArgs),
    /// Four VMs of different weights sharing the GPU, live, then a summary.
    ///
    /// Starts the daemon with four VMs of different weights, each running a
    /// different CUDA workload through fairgpu's libcuda.so.1, shows a live
    /// table of each VM's target and measured share of the GPU, then a
    /// summary. Runs on SimGpu unless --device cuda.
    Demo(fairgpu_benches::demo::DemoArgs),
    /// Benchmarks: the transport, FairGV's fairness experiments.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// End-to-end check of the GPU path against the CPU.
    ///
    /// Starts the daemon with one VM, loads fairgpu's PTX kernels as a
    /// guest, launches them and checks the results against the CPU, times a
    /// kernel with events and shows the accounting. Exits non-zero if a
    /// check fails. `scripts/gpu-check.sh` runs it.
    GpuCheck {
        /// Executor for the check: cuda (a real GPU), sim (SimGpu) or
        /// auto.
        #[arg(long, default_value = "cuda", value_parser = ["cuda", "sim", "auto"])]
        executor: String,
    },
    /// Check PTX files against SimGpu: what it cannot parse or execute.
    #[command(long_about = PTX_CHECK_ABOUT)]
    PtxCheck(PtxCheckArgs),
    /// Print the QEMU options that give a configured VM its fairgpu device.
    ///
    /// The device is ivshmem-plain over the VM's region file (or
    /// ivshmem-doorbell through the daemon's server). The VM must have
    /// `guest = "qemu"` in the configuration.
    QemuArgs(VmDeviceArgs),
    /// Print the libvirt `<shmem>` element for a configured VM.
    ///
    /// Put it in the domain's `<devices>`. The VM must have
    /// `guest = "qemu"` in the configuration.
    LibvirtXml(VmDeviceArgs),
    /// Serve a bare shared-memory region in the foreground (transport only).
    ///
    /// Local mode: guests find it through FAIRGPU_REGION=PATH. Serves the
    /// transport's own opcodes (no-op, bulk copies), no CUDA. Stops cleanly
    /// on SIGINT or SIGTERM and removes the region file.
    ServeRegion(ServeRegionArgs),
    /// Claim a channel of a running region as a guest would and time it.
    ///
    /// Measures the round trip and checks a bulk copy.
    Ping(PingArgs),
    /// Internal: the vGPU worker of one VM, started by `fairgpu serve`.
    #[command(hide = true)]
    Worker(fairgpu_worker::WorkerArgs),
    /// Internal: the echo peer of the Unix-socket baseline.
    #[command(hide = true, name = "__socket-echo")]
    SocketEcho {
        /// Socket path to listen on.
        #[arg(long)]
        path: PathBuf,
        /// CPU to pin to.
        #[arg(long)]
        cpu: Option<usize>,
    },
    /// Internal: a closed-loop CUDA workload (FairGV Table 3 profiles,
    /// Throttle, custom) through libcuda.so.1; prints a JSON report.
    #[command(hide = true, name = "__workload")]
    Workload(fairgpu_benches::workload::WorkloadArgs),
}

const SERVE_ABOUT: &str = "\
Run the fairgpu daemon in the foreground.

The daemon reads a TOML configuration file (see examples/fairgpu.toml),
creates every VM's shared-memory region, and runs one vGPU worker process per
VM that serves the region's channels on the configured executor (SimGpu, or a
real GPU through CUDA). A worker that exits unexpectedly is logged, every
established channel of its VM is failed at once (the guests' pending calls
return CUDA_ERROR_DEINITIALIZED), and it is restarted with a backoff of
100 ms doubling up to 5 s.

Guests of VM NAME use FAIRGPU_REGION=<its region path>. `fairgpu status`
asks the daemon through its control socket.

SIGTERM or SIGINT stops the workers, removes the regions, the stats and
device files and the control socket, and exits 0.

Use --check to validate the configuration and print what it resolves to
without starting anything.";

const STATUS_ABOUT: &str = "\
Ask the running daemon for every VM's state and print it as a table: weight,
worker pid and state, channels in use of the total, device memory used of the
quota, GPU time used, calls served and worker restarts.

The daemon is found through --socket, else the control_socket of --config's
file, else the default socket ($XDG_RUNTIME_DIR/fairgpu/control.sock, or
/tmp/fairgpu-<uid>/control.sock). --json prints the daemon's reply instead.";

/// `fairgpu serve` options.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The configuration file (TOML).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Only validate the configuration and print it.
    #[arg(long)]
    pub check: bool,
}

const SET_WEIGHT_ABOUT: &str = "\
Change a VM's weight while the daemon runs. The scheduler charges the GPU
time a VM uses divided by its weight, so from now on the VM's share of a
busy GPU follows the new ratio; time already charged is not re-weighted.
Weights are 1..=10000. A daemon running with policy = \"none\" has no
scheduler and refuses.

The daemon is found as for `fairgpu status`: --socket, else the
control_socket of --config's file, else the default socket.";

/// `fairgpu set-weight` options.
#[derive(Debug, Clone, Args)]
pub struct SetWeightArgs {
    /// The VM's name.
    pub vm: String,
    /// Its new weight, 1..=10000.
    #[arg(value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub weight: u32,
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    pub socket: Option<PathBuf>,
    /// The daemon's configuration file (for its control_socket).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `fairgpu status` options.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The daemon's control socket.
    #[arg(long, value_name = "PATH", conflicts_with = "config")]
    pub socket: Option<PathBuf>,
    /// The daemon's configuration file (for its control_socket).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the daemon's reply as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `fairgpu qemu-args` / `fairgpu libvirt-xml` options.
#[derive(Debug, Clone, Args)]
pub struct VmDeviceArgs {
    /// The VM's name in the configuration.
    pub vm: String,
    /// The daemon's configuration file.
    #[arg(long)]
    pub config: PathBuf,
    /// Also give QEMU a QMP socket at this path (for vCPU thread ids).
    #[arg(long)]
    pub qmp: Option<PathBuf>,
}

/// Region shape and serving options.
#[derive(Debug, Clone, Args)]
pub struct ServeRegionArgs {
    /// Where to create the region, e.g. /dev/shm/fairgpu-vm1.
    #[arg(long)]
    pub region: PathBuf,
    /// Number of channels (guest processes served at once), 1..=256.
    #[arg(long, default_value_t = 4)]
    pub channels: u32,
    /// Descriptors per ring: a power of two in 8..=4096.
    #[arg(long, default_value_t = 256)]
    pub ring_entries: u32,
    /// Arena per channel in KiB: a multiple of 4 in 64..=262144.
    #[arg(long, default_value_t = 4096)]
    pub arena_kib: u32,
    /// How long the host polls with nothing to do before it blocks, in µs.
    #[arg(long, default_value_t = 200)]
    pub spin_us: u64,
    /// Pin the serving thread to this CPU.
    #[arg(long)]
    pub cpu: Option<usize>,
}

/// `fairgpu ping` options.
#[derive(Debug, Clone, Args)]
pub struct PingArgs {
    /// The region (default: $FAIRGPU_REGION, else the first ivshmem device).
    #[arg(long)]
    pub region: Option<PathBuf>,
    /// Number of round trips to time.
    #[arg(long, default_value_t = 10_000)]
    pub count: u32,
    /// Also time one CUDA and one OpenCL call that a VM's worker answers
    /// without device work (cuDeviceGetAttribute, clGetDeviceInfo): the
    /// request layers' cost per call beside the transport's. Needs a
    /// daemon's VM region (serve-region has no request layer).
    #[arg(long)]
    pub driver_calls: bool,
}

/// Benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// The transport between two processes: round trip, rate, bandwidth.
    ///
    /// Synchronous round trip (p50, p99), fire-and-forget submission rate,
    /// bulk arena bandwidth, and the round trip over a Unix socket as a
    /// baseline.
    Transport(fairgpu_benches::bench::TransportArgs),
    /// FairGV's fairness experiments (Figs. 8-11) on the daemon.
    ///
    /// Per experiment and policy, the daemon with one VM per workload
    /// (workloads are real driver-API clients through libcuda.so.1), each
    /// VM's device-time share from the daemon's accounting, the Min-Max
    /// Ratio, the aggregated overhead and the utilization. Writes
    /// results.json and fairness.svg into --out.
    Fairness(fairgpu_benches::fairness::FairnessArgs),
}

const PTX_CHECK_ABOUT: &str = "\
Check PTX files against SimGpu: what it cannot parse or execute.

Each FILE is PTX text (`nvcc -ptx`, `cuobjdump -ptx`, NVRTC's output). SimGpu
parses it as it would a module a guest loads, then lists, per kernel, the
instructions it holds that SimGpu cannot execute (a launch fails with
CUDA_ERROR_NOT_SUPPORTED only if a thread reaches one). A file SimGpu cannot
parse fails every launch of its kernels. Exits 0 if every file parses and no
kernel holds an unsupported instruction, 1 otherwise.";

/// `fairgpu ptx-check`.
#[derive(Debug, Args)]
pub struct PtxCheckArgs {
    /// PTX files.
    #[arg(required = true)]
    pub files: Vec<std::path::PathBuf>,
    /// Print only the summary line and the problems, not each kernel
    /// that is fine.
    #[arg(long)]
    pub quiet: bool,
}
