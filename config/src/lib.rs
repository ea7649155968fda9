//! The daemon's configuration file (TOML): parsed with serde, refusing
//! unknown keys, then validated into typed configuration. Every error names
//! the file, the place (`[daemon]`, `[sim]`, or the VM) and the field.
//!
//! ```toml
//! [daemon]
//! control_socket = "/run/fairgpu/control.sock"
//! control_group = "fairgpu-admin"  # may use the control socket (default: none)
//! executor = "auto"        # auto | sim | cuda
//! gpu = 0
//! state_dir = "/dev/shm"
//! policy = "fairgv"        # fairgv | credit-poll | credit-hs | strict | none
//! slice_ms = 6.0
//! accounting = "sampled"   # sampled | every | events | none
//! spin_us = 500
//! adaptive_spin = true     # yield at once if the VM's quiet periods outlast spin_us by half
//! wake_preempt = true      # fairgv: a waking VM with a smaller tag preempts the holder
//! wake_preempt_us = 500    # ... once it has held the GPU this long
//! preemptive = false       # fairgv on a GPU that time-slices contexts: switch out a holder stuck past its slice
//! backfill = true          # fairgv: other VMs' short kernels run in a holder's idle gaps
//! backfill_max_us = 250    # ... predicted to take at most this long each
//! work_conserving = true    # false: a holder keeps its whole slice
//! accounting_only = false  # neon-dfq, loga: charge every VM but deny none (LoGA's Fig. 7)
//! [sim]                    # the SimGpu cost model (executor::sim::SimConfig)
//! [[vm]]
//! name = "vm1"
//! weight = 1
//! memory = "4GiB"
//! region = "/dev/shm/fairgpu-vm1"
//! group = "fairgpu-vm1"    # may open the region (default: the daemon's user alone)
//! mode = "0660"            # "0600" | "0660" (default: 0660 with group, else 0600)
//! channels = 4
//! ring_entries = 256
//! arena = "4MiB"
//! [[vm]]
//! name = "vm2"
//! memory = "4GiB"
//! guest = "qemu"           # guests in a QEMU VM
//! [vm.ivshmem]
//! device = "doorbell"      # plain (region file) | doorbell (daemon's server)
//! socket = "/run/fairgpu/vm2.ivshmem.sock"
//! vectors = 2
//! qmp = "/run/fairgpu/vm2.qmp.sock"
//! nudge = false
//! ```
//!
//! `examples/fairgpu.toml` is the complete, commented example.
//!
//! Besides: [`perms`], who may open what the daemon creates (the modes and
//! groups this file sets); [`policy`], the scheduling policy it asks for;
//! [`table`], the plain-text tables `fairgpu serve --check` and `status`
//! print. The daemon and every worker read the same file through this
//! crate.

use std::fmt;
use std::path::{Path, PathBuf};

use fairgpu_protocol::layout::{Layout, RegionConfig};
use fairgpu_protocol::limits::{
    MAX_ARENA, MAX_CHANNELS, MAX_RING_ENTRIES, MIN_ARENA, MIN_CHANNELS, MIN_RING_ENTRIES, PAGE,
};
use fairgpu_scheduler::{InteractivityConfig, Nanos, PolicyKind, Reservation, SliceConfig};
use serde::{Deserialize, Serialize};

use fairgpu_executor::sim::SimConfig;

pub mod perms;
pub mod policy;
pub mod table;
use crate::perms::{Access, GroupSpec};

/// Smallest and largest VM weight.
pub const WEIGHTS: std::ops::RangeInclusive<u32> = 1..=10_000;
/// Longest VM name.
pub const MAX_NAME_LEN: usize = 64;
/// Most VMs one daemon serves.
pub const MAX_VMS: usize = 1024;
/// Smallest `host_memory` a VM may be given.
pub const MIN_HOST_MEMORY: u64 = 16 << 20;

/// Longest Unix socket path (`sun_path` holds 108 bytes with the NUL).
pub const MAX_SOCKET_PATH: usize = 107;
/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read configuration {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not have the expected shape
    /// (unknown key, wrong type, missing field).
    #[error("{path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said, with the place in the file.
        message: String,
    },
    /// A value is out of range or inconsistent with another.
    #[error("{path}: {place}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Where: `[daemon]`, `[sim]`, `vm "NAME"` or `[[vm]] #N`.
        place: String,
        /// The field and what is wrong with it.
        why: String,
    },
}

/// Which executor the workers use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorChoice {
    /// CUDA if a GPU is usable, else SimGpu.
    #[default]
    Auto,
    /// SimGpu, the GPU model.
    Sim,
    /// A real NVIDIA GPU.
    Cuda,
}

impl fmt::Display for ExecutorChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExecutorChoice::Auto => "auto",
            ExecutorChoice::Sim => "sim",
            ExecutorChoice::Cuda => "cuda",
        })
    }
}

/// A size: bytes as an integer, or a string with a unit ("4GiB", "512 MiB",
/// "1G"). K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB,
/// TB powers of 1000; B or no unit means bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SizeSpec {
    Int(i128),
    Text(String),
}

impl<'de> Deserialize<'de> for SizeSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SizeSpec;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size: a number of bytes or a string such as \"4GiB\"")
            }
            fn visit_i64<E>(self, v: i64) -> Result<SizeSpec, E> {
                Ok(SizeSpec::Int(v.into()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<SizeSpec, E> {
                Ok(SizeSpec::Int(v.into()))
            }
            fn visit_str<E>(self, v: &str) -> Result<SizeSpec, E> {
                Ok(SizeSpec::Text(v.to_owned()))
            }
        }
        d.deserialize_any(V)
    }
}

impl SizeSpec {
    fn bytes(&self) -> Result<u64, String> {
        match self {
            SizeSpec::Int(v) => u64::try_from(*v).map_err(|_| "not a size in bytes".to_owned()),
            SizeSpec::Text(t) => parse_size(t),
        }
    }
}

impl fmt::Display for SizeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SizeSpec::Int(v) => write!(f, "{v}"),
            SizeSpec::Text(t) => write!(f, "{t:?}"),
        }
    }
}

/// Parses a human size ("4GiB", "512 MiB", "1G", "4096"); see [`SizeSpec`]
/// for the units.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(
            "not a size (expected a whole number with an optional unit, e.g. \"4GiB\")".into(),
        );
    }
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        "T" | "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} (use B, K/KiB, M/MiB, G/GiB, T/TiB, or KB, MB, GB, TB)"
            ))
        }
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| "too large".to_owned())
}

/// Formats bytes for people: "0 B", "512 MiB", "1.5 GiB".
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut v = bytes as f64;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[unit])
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    daemon: RawDaemon,
    #[serde(default)]
    sim: SimConfig,
    #[serde(default)]
    vm: Vec<RawVm>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDaemon {
    control_socket: Option<PathBuf>,
    control_group: Option<String>,
    #[serde(default)]
    executor: ExecutorChoice,
    #[serde(default)]
    gpu: i64,
    state_dir: Option<PathBuf>,
    policy: Option<String>,
    slice_ms: Option<f64>,
    accounting: Option<String>,
    spin_us: Option<i64>,
    adaptive_spin: Option<bool>,
    wake_preempt: Option<bool>,
    wake_preempt_us: Option<i64>,
    preemptive: Option<bool>,
    backfill: Option<bool>,
    backfill_max_us: Option<i64>,
    work_conserving: Option<bool>,
    accounting_only: Option<bool>,
    interactive_calls: Option<i64>,
    interactive_window_ms: Option<f64>,
    slice_kernels: Option<bool>,
    kernel_slice_ms: Option<f64>,
    kernel_slice_blocks: Option<i64>,
    max_request_ms: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVm {
    name: String,
    #[serde(default = "default_weight")]
    weight: i64,
    memory: SizeSpec,
    host_memory: Option<SizeSpec>,
    region: Option<PathBuf>,
    group: Option<String>,
    mode: Option<String>,
    #[serde(default = "default_channels")]
    channels: i64,
    ring_entries: Option<i64>,
    arena: Option<SizeSpec>,
    #[serde(default)]
    guest: GuestKind,
    ivshmem: Option<RawIvshmem>,
    max_request_ms: Option<f64>,
    priority: Option<i64>,
    reservation: Option<RawReservation>,
}

/// `[vm.reservation]` (TimeGraph policies).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReservation {
    budget_ms: f64,
    period_ms: f64,
    #[serde(default = "default_reserve_mode")]
    mode: String,
}

fn default_reserve_mode() -> String {
    "pe".to_owned()
}

/// `[vm.ivshmem]` of a `guest = "qemu"` VM.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawIvshmem {
    device: Option<String>,
    socket: Option<PathBuf>,
    vectors: Option<i64>,
    qmp: Option<PathBuf>,
    nudge: Option<bool>,
}

/// The interrupt vector a guest rings the host on (BAR0 Doorbell).
pub const VECTOR_DOORBELL: u16 = 0;
/// The interrupt vector the host raises in a guest to wake it.
pub const VECTOR_WAKE: u16 = 1;
/// Vectors of a doorbell device unless `vectors` says otherwise: one each
/// way.
pub const DEFAULT_VECTORS: u16 = 2;

/// A `guest = "qemu"` VM's device and CPU coordination (`[vm.ivshmem]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuConfig {
    /// The ivshmem device and where its memory comes from.
    pub device: IvshmemDevice,
    /// QEMU's QMP socket, through which the daemon learns the vCPU thread
    /// ids (`-qmp unix:PATH,server=on,wait=off`).
    pub qmp: Option<PathBuf>,
    /// Raise the vCPU threads' priority briefly when the VM is granted the
    /// GPU as CPU–GPU interactive (needs `qmp` and CAP_SYS_NICE).
    pub nudge: bool,
}

/// Which ivshmem device a QEMU VM has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IvshmemDevice {
    /// `ivshmem-plain` over the region file: no interrupts either way.
    Plain,
    /// `ivshmem-doorbell` connected to the daemon's ivshmem server.
    Doorbell {
        /// The server's socket.
        socket: PathBuf,
        /// MSI-X vectors per peer: [`VECTOR_DOORBELL`] and [`VECTOR_WAKE`]
        /// at least.
        vectors: u16,
        /// The region is a sealed memfd the daemon creates (no `region`
        /// key); otherwise it is the region file.
        memfd: bool,
    },
}

impl IvshmemDevice {
    /// QEMU's name of the device.
    pub fn model(&self) -> &'static str {
        match self {
            IvshmemDevice::Plain => "ivshmem-plain",
            IvshmemDevice::Doorbell { .. } => "ivshmem-doorbell",
        }
    }
}

/// Where a VM's guest processes run, which decides how the region is made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestKind {
    /// Processes on this host (containers, tests): owner pids are host pids,
    /// so the host may reclaim channels of dead owners itself.
    #[default]
    Local,
    /// A QEMU VM with an ivshmem device (`[vm.ivshmem]`): `ivshmem-plain`
    /// over the region file, or `ivshmem-doorbell` served by the daemon.
    /// The region is sized to a power of two (a PCI BAR), and owner pids
    /// are the guest's, reclaimed only by the guest (or by the daemon when
    /// the VM's QEMU disconnects from a doorbell device).
    Qemu,
}

fn default_weight() -> i64 {
    1
}

fn default_channels() -> i64 {
    RegionConfig::default().channels.into()
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Daemon-wide settings.
    pub daemon: DaemonConfig,
    /// The SimGpu cost model.
    pub sim: SimConfig,
    /// The VMs, in file order (which is also their stats slot order).
    pub vms: Vec<VmConfig>,
    /// A hash of the file's bytes: a worker refuses to start from a file
    /// other than the one its daemon read.
    pub fingerprint: u64,
}

/// `[daemon]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonConfig {
    /// Where the control socket listens.
    pub control_socket: PathBuf,
    /// The group that may use the control socket besides the daemon's
    /// user (mode 0660); `None`: the daemon's user alone (0600).
    pub control_group: Option<GroupSpec>,
    /// Which executor workers use.
    pub executor: ExecutorChoice,
    /// CUDA device ordinal.
    pub gpu: u32,
    /// Where the SimGpu device file and the stats file live.
    pub state_dir: PathBuf,
    /// GPU scheduling.
    pub sched: SchedConfig,
    /// Kernel slicing and the runaway guard.
    pub long_kernels: LongKernelConfig,
}

/// Fewest blocks per part of a sliced kernel accepted.
pub const MIN_SLICE_BLOCKS: u32 = 1;
/// Longest `max_request_ms` accepted (an hour).
pub const MAX_REQUEST_MS: f64 = 3_600_000.0;

/// Long kernels (docs/long-kernels.md): FairGV's kernel slicing and the
/// runaway guard, from `[daemon]` (the guard's limit also per VM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LongKernelConfig {
    /// `slice_kernels`: run launches predicted longer than
    /// [`LongKernelConfig::threshold`] as sub-launches (default on).
    pub slicing: bool,
    /// `kernel_slice_ms`: the prediction above which a launch is sliced,
    /// and twice what each part takes (default: the scheduler's slice).
    pub threshold: std::time::Duration,
    /// `kernel_slice_blocks`: the fewest blocks in one part (FairGV's
    /// 1,500 by default).
    pub min_blocks: u32,
    /// `max_request_ms`: the runaway guard, the most device time one
    /// request may take (default 5 s; 0 turns it off).
    pub max_request: Option<std::time::Duration>,
}

impl Default for LongKernelConfig {
    fn default() -> Self {
        LongKernelConfig {
            slicing: true,
            threshold: std::time::Duration::from_millis(6),
            min_blocks: 1500,
            max_request: Some(std::time::Duration::from_secs(5)),
        }
    }
}

/// `max_request_ms = ms` of `what`: `None` for 0 (off).
fn max_request(what: &str, ms: f64) -> Result<Option<std::time::Duration>, String> {
    if !ms.is_finite() || !(0.0..=MAX_REQUEST_MS).contains(&ms) {
        return Err(format!(
            "{what}max_request_ms = {ms} is outside 0..={MAX_REQUEST_MS} (0 turns the runaway guard off)"
        ));
    }
    Ok((ms > 0.0).then(|| std::time::Duration::from_nanos((ms * 1e6).round() as u64)))
}

fn validate_long_kernels(raw: &RawDaemon, sched: &SchedConfig) -> Result<LongKernelConfig, String> {
    let d = LongKernelConfig::default();
    let threshold = match raw.kernel_slice_ms {
        None => std::time::Duration::from_nanos(sched.slice.slice().0),
        Some(ms) if ms.is_finite() && (0.01..=MAX_REQUEST_MS).contains(&ms) => {
            std::time::Duration::from_nanos((ms * 1e6).round() as u64)
        }
        Some(ms) => {
            return Err(format!(
                "kernel_slice_ms = {ms} is outside 0.01..={MAX_REQUEST_MS}"
            ))
        }
    };
    let min_blocks = match raw.kernel_slice_blocks {
        None => d.min_blocks,
        Some(b) => u32::try_from(b)
            .ok()
            .filter(|b| *b >= MIN_SLICE_BLOCKS)
            .ok_or_else(|| format!("kernel_slice_blocks = {b} is outside 1..={}", u32::MAX))?,
    };
    let max_request = match raw.max_request_ms {
        None => d.max_request,
        Some(ms) => max_request("", ms)?,
    };
    Ok(LongKernelConfig {
        slicing: raw.slice_kernels.unwrap_or(d.slicing),
        threshold,
        min_blocks,
        max_request,
    })
}

/// How long a holder keeps the GPU before a waking VM with a smaller start
/// tag may preempt it, unless `wake_preempt_us` says otherwise.
pub const DEFAULT_WAKE_PREEMPT: std::time::Duration = std::time::Duration::from_micros(500);

/// The slice in preemptive mode when `slice_ms` is not set: FairGV's 30 ms
/// for GPUs that preempt (a context switch costs throughput, so slices are
/// longer than the 6 ms of non-preemptive scheduling).
pub const PREEMPTIVE_SLICE_MS: u64 = 30;

/// The longest request a backfilling VM may issue by default, as
/// predicted from its own history (`backfill_max_us`): what a holder's next
/// request may wait behind at most.
pub const DEFAULT_BACKFILL_MAX: std::time::Duration = std::time::Duration::from_micros(250);

/// Longest hybrid-spin budget accepted, in µs.
pub const MAX_SPIN_US: u64 = 100_000;

/// The scheduling settings of `[daemon]`: which policy grants the GPU, how
/// long a grant lasts, how a worker measures what its VM used, and how long
/// it spins on an empty ring before it yields the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedConfig {
    /// The policy; `None` runs no scheduler (`policy = "none"`): workers
    /// issue GPU work as it arrives.
    pub policy: Option<PolicyKind>,
    /// The time slice of one grant.
    pub slice: SliceConfig,
    /// How a holder measures its GPU time.
    pub accounting: Accounting,
    /// Hybrid spinning: how long a holder with nothing to issue keeps the
    /// grant before it yields it and is marked blocked.
    pub spin: std::time::Duration,
    /// The spin budget learned per VM (`adaptive_spin = true`): a holder
    /// whose guest's quiet periods (three in four) outlast `spin` by half yields at once
    /// when another VM waits, and one whose quiet periods end sooner spins
    /// only about as long as they last (`worker/src/accounting.rs`).
    pub adaptive_spin: bool,
    /// FairGV's preemption on wake (`wake_preempt`, `wake_preempt_us`): a
    /// VM that wakes with a smaller start tag than the holder's ends the
    /// holder's grant at its next request, once it has held the GPU this
    /// long. `None`: grants last their slice (the paper's rule).
    pub wake_preempt: Option<std::time::Duration>,
    /// FairGV's preemptive mode (`preemptive = true`), for GPUs that
    /// time-slice between contexts: a holder still busy a short grace
    /// after its slice (an over-long kernel) is switched out, and the next
    /// VM's work is submitted beside it. The slice defaults to
    /// [`PREEMPTIVE_SLICE_MS`] then. See docs/long-kernels.md.
    pub preemptive: bool,
    /// Backfilling (`backfill = true`, FairGV with sampled accounting):
    /// while the holder waits on its guest with its own device work done,
    /// another runnable VM may issue kernels its history predicts to take
    /// at most this long, one at a time, each synchronised and charged to
    /// it; the holder's next request waits behind at most one of them.
    /// `None`: off. On by default under FairGV with sampled accounting
    /// (at [`DEFAULT_BACKFILL_MAX`]). See docs/fairness.md, *Backfilling*.
    pub backfill: Option<std::time::Duration>,
    /// Off (`work_conserving = false`): a holder keeps the GPU for its
    /// whole slice, idle or not, and is charged at least the slice's
    /// wall-clock length; the reference FairGV's Fig. 10 compares with.
    pub work_conserving: bool,
    /// Disengaged fair queueing without its scheduling
    /// (`accounting_only = true`, `neon-dfq` and `loga`): every VM is
    /// charged as usual (NEON still drains and samples at each engagement)
    /// but none is denied a free run, so that what the accounting alone
    /// costs the VMs shows, as LoGA's Figure 7 measures it.
    pub accounting_only: bool,
    /// When a VM counts as CPU–GPU interactive, so that its grants wake
    /// its waiting guest threads (GPU-centric co-scheduling, under the
    /// policies that co-schedule: `fairgv` and the credit ones): more than
    /// `interactive_calls` synchronous calls within `interactive_window_ms`
    /// (FairGV section 3.2.3: more than 10 per 10 ms, the default).
    pub interactivity: InteractivityConfig,
}

impl Default for SchedConfig {
    /// FairGV with a 6 ms slice, sampled accounting, a 500 µs spin budget
    /// (long enough for a guest's next request to arrive after an answer
    /// on a loaded host: a shorter one hands the GPU away from interactive
    /// VMs at every reply).
    fn default() -> Self {
        SchedConfig {
            policy: Some(PolicyKind::FairQueuing),
            slice: SliceConfig::default(),
            accounting: Accounting::Sampled,
            spin: std::time::Duration::from_micros(500),
            adaptive_spin: true,
            wake_preempt: Some(DEFAULT_WAKE_PREEMPT),
            preemptive: false,
            backfill: Some(DEFAULT_BACKFILL_MAX),
            work_conserving: true,
            accounting_only: false,
            interactivity: InteractivityConfig::default(),
        }
    }
}

impl SchedConfig {
    /// The policy's name as the configuration and status spell it.
    pub fn policy_name(&self) -> &'static str {
        policy_name(self.policy)
    }
}

/// How the GPU holder measures the GPU time it used (FairGV section 3.3.1,
/// and LoGA's events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accounting {
    /// FairGV: synchronise after each of the first five requests of a
    /// grant, predict how many more fit in the slice, issue those,
    /// synchronise after the last.
    Sampled,
    /// Synchronise after every request (the costly baseline).
    Every,
    /// Executor events around every request, read without blocking.
    Events,
    /// No measurement: the grant is a wall-clock lease of one slice and its
    /// length is what is charged (`accounting = "none"`).
    WallClock,
}

impl Accounting {
    /// Every mode, in a stable order.
    pub const ALL: [Accounting; 4] = [
        Accounting::Sampled,
        Accounting::Every,
        Accounting::Events,
        Accounting::WallClock,
    ];

    /// The name in the configuration.
    pub const fn name(self) -> &'static str {
        match self {
            Accounting::Sampled => "sampled",
            Accounting::Every => "every",
            Accounting::Events => "events",
            Accounting::WallClock => "none",
        }
    }
}

impl fmt::Display for Accounting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Accounting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Accounting::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                format!("accounting = {s:?} is unknown (expected \"sampled\", \"every\", \"events\" or \"none\")")
            })
    }
}

/// The configuration's name of a policy: `fairgv`, `credit-poll`,
/// `credit-hs`, `strict`, `neon-ts`, `neon-dts`, `neon-dfq`, `loga`,
/// `timegraph-prt`, `timegraph-ht`, or `none` for no scheduler.
pub const fn policy_name(policy: Option<PolicyKind>) -> &'static str {
    match policy {
        None => "none",
        Some(PolicyKind::FairQueuing) => "fairgv",
        Some(PolicyKind::CreditPoll) => "credit-poll",
        Some(PolicyKind::CreditHybridSpin) => "credit-hs",
        Some(PolicyKind::StrictCoSchedule) => "strict",
        Some(PolicyKind::NeonTimeslice) => "neon-ts",
        Some(PolicyKind::NeonDisengaged) => "neon-dts",
        Some(PolicyKind::TimeGraphPrt) => "timegraph-prt",
        Some(PolicyKind::TimeGraphHt) => "timegraph-ht",
        Some(PolicyKind::NeonDfq) => "neon-dfq",
        Some(PolicyKind::Loga) => "loga",
    }
}

/// Parses a policy name: the configuration's (`fairgv`, `credit-poll`,
/// `credit-hs`, `strict`, `none`) or the scheduler crate's
/// (`fair-queuing`, `strict-cosched`). `Ok(None)` is `none`.
pub fn parse_policy(name: &str) -> Result<Option<PolicyKind>, String> {
    match name {
        "none" => Ok(None),
        "fairgv" => Ok(Some(PolicyKind::FairQueuing)),
        "strict" => Ok(Some(PolicyKind::StrictCoSchedule)),
        other => other.parse::<PolicyKind>().map(Some).map_err(|_| {
            format!(
                "policy = {other:?} is unknown (expected \"fairgv\", \"credit-poll\", \"credit-hs\", \"strict\", \"neon-ts\", \"neon-dts\", \"neon-dfq\", \"loga\", \"timegraph-prt\", \"timegraph-ht\" or \"none\"; \"fair-queuing\" and \"strict-cosched\" are accepted too)"
            )
        }),
    }
}

fn validate_sched(raw: &RawDaemon) -> Result<SchedConfig, String> {
    let defaults = SchedConfig::default();
    let policy = match &raw.policy {
        None => defaults.policy,
        Some(p) => parse_policy(p)?,
    };
    let preemptive = raw.preemptive.unwrap_or(defaults.preemptive);
    if preemptive && policy != Some(PolicyKind::FairQueuing) {
        return Err(format!(
            "preemptive = true is FairGV's preemptive mode (policy = \"fairgv\"), not policy = {:?}'s",
            policy_name(policy)
        ));
    }
    let slice = match raw.slice_ms {
        None if preemptive => {
            SliceConfig::new(fairgpu_scheduler::Nanos(PREEMPTIVE_SLICE_MS * 1_000_000))
                .map_err(|_| "the preemptive slice is out of range".to_owned())?
        }
        None => defaults.slice,
        Some(ms) => {
            let (min, max) = (SliceConfig::MIN, SliceConfig::MAX);
            let out_of_range = || {
                format!(
                    "slice_ms = {ms} is outside {}..={} (6 suits GPUs that cannot preempt kernels, 30 preemptive ones)",
                    min.as_nanos() as f64 / 1e6,
                    max.as_nanos() as f64 / 1e6
                )
            };
            if !ms.is_finite() || ms <= 0.0 {
                return Err(out_of_range());
            }
            let ns = (ms * 1e6).round();
            if ns > u64::MAX as f64 {
                return Err(out_of_range());
            }
            SliceConfig::new(fairgpu_scheduler::Nanos(ns as u64)).map_err(|_| out_of_range())?
        }
    };
    let serializes = policy == Some(PolicyKind::TimeGraphPrt);
    let accounting = match &raw.accounting {
        // PRT: every request waits for the previous one.
        None if serializes => Accounting::Every,
        None => defaults.accounting,
        Some(a) => a.parse()?,
    };
    if serializes && accounting != Accounting::Every {
        return Err(format!(
            "policy = \"timegraph-prt\" has each request wait for the previous one, which is accounting = \"every\" (not {:?}); use \"timegraph-ht\" to let requests pipeline",
            accounting.name()
        ));
    }
    let spin = match raw.spin_us {
        None => defaults.spin,
        Some(us) => u64::try_from(us)
            .ok()
            .filter(|us| *us <= MAX_SPIN_US)
            .map(std::time::Duration::from_micros)
            .ok_or_else(|| format!("spin_us = {us} is outside 0..={MAX_SPIN_US}"))?,
    };
    let fair_queuing = policy == Some(PolicyKind::FairQueuing);
    // `wake_preempt = false` is what every other policy does anyway (a
    // comparison run may set it for all).
    if !fair_queuing && (raw.wake_preempt == Some(true) || raw.wake_preempt_us.is_some()) {
        return Err(format!(
            "wake_preempt and wake_preempt_us are FairGV's (policy = \"fairgv\"), not policy = {:?}'s",
            policy_name(policy)
        ));
    }
    let wake_preempt = match (raw.wake_preempt, raw.wake_preempt_us) {
        _ if !fair_queuing => None,
        (Some(false), Some(_)) => {
            return Err("wake_preempt_us is set but wake_preempt = false".to_owned())
        }
        (Some(false), None) => None,
        (on, us) => {
            let hold = match us {
                None => DEFAULT_WAKE_PREEMPT,
                Some(us) => u64::try_from(us)
                    .ok()
                    .filter(|us| *us <= MAX_SPIN_US)
                    .map(std::time::Duration::from_micros)
                    .ok_or_else(|| {
                        format!("wake_preempt_us = {us} is outside 0..={MAX_SPIN_US}")
                    })?,
            };
            (on == Some(true) || us.is_some() || defaults.wake_preempt.is_some()).then_some(hold)
        }
    };
    let work_conserving = raw.work_conserving.unwrap_or(defaults.work_conserving);
    let backfill_max = match raw.backfill_max_us {
        None => DEFAULT_BACKFILL_MAX,
        Some(us) => u64::try_from(us)
            .ok()
            .filter(|us| (1..=MAX_SPIN_US).contains(us))
            .map(std::time::Duration::from_micros)
            .ok_or_else(|| format!("backfill_max_us = {us} is outside 1..={MAX_SPIN_US}"))?,
    };
    let backfill = match (raw.backfill, raw.backfill_max_us) {
        (Some(false), Some(_)) => {
            return Err("backfill_max_us is set but backfill = false".to_owned())
        }
        (Some(false), None) => None,
        // On by default where it applies (FairGV, sampled, work-conserving).
        (None, None) if fair_queuing && accounting == Accounting::Sampled && work_conserving => {
            defaults.backfill
        }
        (None, None) => None,
        // Without a scheduler every VM issues as its work comes: nothing to
        // backfill (accepted, so that a comparison run may set it for all).
        _ if policy.is_none() => None,
        _ if !fair_queuing || accounting != Accounting::Sampled || !work_conserving => {
            return Err(format!(
                "backfill is FairGV's with accounting = \"sampled\" and work_conserving = true, not policy = {:?} with accounting = {:?}{}",
                policy_name(policy),
                accounting.name(),
                if work_conserving { "" } else { " and work_conserving = false" }
            ));
        }
        _ => Some(backfill_max),
    };
    let accounting_only = raw.accounting_only.unwrap_or(defaults.accounting_only);
    let disengaged = matches!(policy, Some(PolicyKind::NeonDfq | PolicyKind::Loga));
    // Without a scheduler nothing is denied anyway (accepted, so that a
    // comparison run may set it for all).
    if accounting_only && !disengaged && policy.is_some() {
        return Err(format!(
            "accounting_only = true is disengaged fair queueing's (policy = \"neon-dfq\" or \"loga\"), not policy = {:?}'s",
            policy_name(policy)
        ));
    }
    let interactivity = validate_interactivity(raw, policy, defaults.interactivity)?;
    Ok(SchedConfig {
        policy,
        slice,
        accounting,
        spin,
        adaptive_spin: raw.adaptive_spin.unwrap_or(defaults.adaptive_spin),
        wake_preempt,
        preemptive,
        backfill,
        work_conserving,
        accounting_only: accounting_only && disengaged,
        interactivity,
    })
}

/// Largest `interactive_window_ms` accepted.
const MAX_INTERACTIVE_WINDOW_MS: f64 = 10_000.0;

/// `interactive_calls` and `interactive_window_ms`: the co-scheduling
/// policies' interactivity detector (FairGV, credit); another policy has
/// no co-scheduling for them to tune, so they are an error there.
fn validate_interactivity(
    raw: &RawDaemon,
    policy: Option<PolicyKind>,
    defaults: InteractivityConfig,
) -> Result<InteractivityConfig, String> {
    if raw.interactive_calls.is_none() && raw.interactive_window_ms.is_none() {
        return Ok(defaults);
    }
    let cosched = matches!(
        policy,
        Some(
            PolicyKind::FairQueuing
                | PolicyKind::CreditPoll
                | PolicyKind::CreditHybridSpin
                | PolicyKind::StrictCoSchedule
        )
    );
    if !cosched {
        return Err(format!(
            "interactive_calls and interactive_window_ms tune GPU-centric co-scheduling, which policy = {:?} does not do (fairgv and the credit policies do)",
            policy_name(policy)
        ));
    }
    let threshold = match raw.interactive_calls {
        None => defaults.threshold(),
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n <= InteractivityConfig::MAX_THRESHOLD)
            .ok_or_else(|| {
                format!(
                    "interactive_calls = {n} is outside 0..={}",
                    InteractivityConfig::MAX_THRESHOLD
                )
            })?,
    };
    let window = match raw.interactive_window_ms {
        None => defaults.window(),
        Some(ms) if (0.001..=MAX_INTERACTIVE_WINDOW_MS).contains(&ms) => {
            Nanos((ms * 1e6).round() as u64)
        }
        Some(ms) => {
            return Err(format!(
                "interactive_window_ms = {ms} is outside 0.001..={MAX_INTERACTIVE_WINDOW_MS}"
            ))
        }
    };
    InteractivityConfig::new(window, threshold).map_err(|e| e.to_string())
}

/// One `[[vm]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmConfig {
    /// Unique name (log lines and status carry it).
    pub name: String,
    /// Share of the GPU relative to the other VMs (used by the scheduler).
    pub weight: u32,
    /// Device-memory quota in bytes.
    pub memory: u64,
    /// Host-memory budget in bytes: what its guests may make its worker
    /// hold ([`fairgpu_executor::host_memory`]).
    pub host_memory: u64,
    /// The region file; for a doorbell VM whose region is a memfd (no
    /// `region` key), the ivshmem socket through which it is reached.
    pub region_path: PathBuf,
    /// The region's shape.
    pub region: RegionConfig,
    /// Who may open the region (its socket or file, and the ivshmem
    /// socket of a doorbell device): by default the daemon's user alone.
    pub access: Access,
    /// Where its guests run.
    pub guest: GuestKind,
    /// Its QEMU device, for `guest = "qemu"`.
    pub qemu: Option<QemuConfig>,
    /// The runaway guard's limit on one request's device time: the VM's
    /// `max_request_ms`, else the daemon's (`None`: off).
    pub max_request: Option<std::time::Duration>,
    /// `priority` (TimeGraph policies): higher runs first; 0 by default.
    pub priority: u8,
    /// `[vm.reservation]` (TimeGraph policies): GPU time per period.
    pub reservation: Option<Reservation>,
}

impl VmConfig {
    /// The ivshmem-doorbell device's socket and vectors, if it has one.
    pub fn doorbell(&self) -> Option<(&Path, u16)> {
        match &self.qemu.as_ref()?.device {
            IvshmemDevice::Doorbell {
                socket, vectors, ..
            } => Some((socket, *vectors)),
            IvshmemDevice::Plain => None,
        }
    }

    /// Whether the region is a memfd of the daemon's rather than a file.
    pub fn region_is_memfd(&self) -> bool {
        matches!(
            self.qemu.as_ref().map(|q| &q.device),
            Some(IvshmemDevice::Doorbell { memfd: true, .. })
        )
    }

    /// The unix sockets and files of this VM, named for error messages.
    fn paths(&self) -> Vec<(&'static str, &Path)> {
        let mut out = Vec::new();
        if !self.region_is_memfd() {
            out.push(("the region", self.region_path.as_path()));
        }
        if let Some((socket, _)) = self.doorbell() {
            out.push(("the ivshmem socket", socket));
        }
        if let Some(qmp) = self.qemu.as_ref().and_then(|q| q.qmp.as_deref()) {
            out.push(("the QMP socket", qmp));
        }
        out
    }
}

/// The control socket used when the file names none:
/// `$XDG_RUNTIME_DIR/fairgpu/control.sock`, else
/// `/tmp/fairgpu-<uid>/control.sock`.
pub fn default_control_socket() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("fairgpu").join("control.sock"),
        _ => {
            // The owner of /proc/self is this process's effective uid.
            use std::os::unix::fs::MetadataExt;
            let dir = match std::fs::metadata("/proc/self") {
                Ok(m) => format!("/tmp/fairgpu-{}", m.uid()),
                Err(_) => "/tmp/fairgpu".to_owned(),
            };
            PathBuf::from(dir).join("control.sock")
        }
    }
}

/// FNV-1a over the file's bytes: stable across processes and builds.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let read = |source| ConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > MAX_CONFIG_BYTES {
            return Err(ConfigError::Invalid {
                path: path.to_owned(),
                place: "file".into(),
                why: format!("{len} bytes; at most {MAX_CONFIG_BYTES} are read"),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Config::parse(&text, path)
    }

    /// Parses and validates configuration text; `path` is only used in
    /// error messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: describe_parse_error(text, &e),
        })?;
        let invalid = |place: String, why: String| ConfigError::Invalid {
            path: path.to_owned(),
            place,
            why,
        };
        let daemon = validate_daemon(raw.daemon).map_err(|why| invalid("[daemon]".into(), why))?;
        raw.sim
            .validate()
            .map_err(|why| invalid("[sim]".into(), why))?;
        if raw.vm.is_empty() {
            return Err(invalid(
                "file".into(),
                "no [[vm]] tables: at least one VM is needed".into(),
            ));
        }
        if raw.vm.len() > MAX_VMS {
            return Err(invalid(
                "file".into(),
                format!("{} VMs; at most {MAX_VMS}", raw.vm.len()),
            ));
        }
        let mut vms: Vec<VmConfig> = Vec::with_capacity(raw.vm.len());
        for (i, rv) in raw.vm.into_iter().enumerate() {
            let n = i + 1;
            check_name(&rv.name).map_err(|why| invalid(format!("[[vm]] #{n}"), why))?;
            let place = format!("vm {:?}", rv.name);
            if let Some(j) = vms.iter().position(|v| v.name == rv.name) {
                return Err(invalid(
                    format!("{place} (the {} [[vm]])", ordinal(n)),
                    format!(
                        "name {:?} is already used by the {} [[vm]]; VM names must be unique",
                        rv.name,
                        ordinal(j + 1)
                    ),
                ));
            }
            let vm = validate_vm(rv, &daemon).map_err(|why| invalid(place.clone(), why))?;
            if let Some(other) = vms.iter().find(|v| {
                !v.region_is_memfd() && !vm.region_is_memfd() && v.region_path == vm.region_path
            }) {
                return Err(invalid(
                    place,
                    format!(
                        "region {} is also the region of vm {:?}; every VM needs its own region file",
                        vm.region_path.display(),
                        other.name
                    ),
                ));
            }
            if !vm.region_is_memfd() && vm.region_path == daemon.control_socket {
                return Err(invalid(
                    place,
                    format!(
                        "region {} is the daemon's control socket",
                        vm.region_path.display()
                    ),
                ));
            }
            check_paths_unique(&vm, &vms, &daemon).map_err(|why| invalid(place, why))?;
            vms.push(vm);
        }
        let reserved: f64 = vms
            .iter()
            .filter_map(|v| v.reservation)
            .map(|r| r.utilization())
            .sum();
        if reserved > 1.0 + 1e-9 {
            return Err(invalid(
                "file".into(),
                format!(
                    "the VMs' reservations ask for {reserved:.3} of the GPU together (admission control: at most 1, the sum of budget_ms / period_ms)"
                ),
            ));
        }
        Ok(Config {
            daemon,
            sim: raw.sim,
            vms,
            fingerprint: fingerprint(text.as_bytes()),
        })
    }

    /// The VM named `name` and its index (its stats slot).
    pub fn vm(&self, name: &str) -> Option<(usize, &VmConfig)> {
        self.vms.iter().enumerate().find(|(_, v)| v.name == name)
    }
}

fn validate_daemon(raw: RawDaemon) -> Result<DaemonConfig, String> {
    let sched = validate_sched(&raw)?;
    let long_kernels = validate_long_kernels(&raw, &sched)?;
    let control_socket = raw.control_socket.unwrap_or_else(default_control_socket);
    if !control_socket.is_absolute() {
        return Err(format!(
            "control_socket = {:?} must be an absolute path",
            control_socket.display().to_string()
        ));
    }
    if control_socket.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(format!(
            "control_socket = {:?} is longer than {MAX_SOCKET_PATH} bytes (a Unix socket path limit)",
            control_socket.display().to_string()
        ));
    }
    let gpu = u32::try_from(raw.gpu)
        .ok()
        .filter(|g| *g < 1024)
        .ok_or_else(|| format!("gpu = {} is not a CUDA device ordinal (0..1024)", raw.gpu))?;
    let state_dir = raw.state_dir.unwrap_or_else(|| PathBuf::from("/dev/shm"));
    if !state_dir.is_absolute() {
        return Err(format!(
            "state_dir = {:?} must be an absolute path",
            state_dir.display().to_string()
        ));
    }
    let control_group = raw
        .control_group
        .as_deref()
        .map(GroupSpec::parse)
        .transpose()
        .map_err(|e| format!("control_group = {e}"))?;
    Ok(DaemonConfig {
        control_socket,
        control_group,
        executor: raw.executor,
        gpu,
        state_dir,
        sched,
        long_kernels,
    })
}

/// Refuses a VM whose files or sockets are another's (or the same twice,
/// or the control socket).
fn check_paths_unique(vm: &VmConfig, before: &[VmConfig], d: &DaemonConfig) -> Result<(), String> {
    let mine = vm.paths();
    for (i, (what, path)) in mine.iter().enumerate() {
        if *path == d.control_socket {
            return Err(format!(
                "{what} {} is the daemon's control socket",
                path.display()
            ));
        }
        if let Some((other, _)) = mine[..i].iter().find(|(_, p)| p == path) {
            return Err(format!(
                "{what} {} is also {other} of this VM",
                path.display()
            ));
        }
        for v in before {
            if let Some((other, _)) = v.paths().into_iter().find(|(_, p)| p == path) {
                return Err(format!(
                    "{what} {} is also {other} of vm {:?}; every VM needs its own",
                    path.display(),
                    v.name
                ));
            }
        }
    }
    Ok(())
}

/// Checks a unix socket path from the configuration.
fn check_socket_path(key: &str, path: &Path) -> Result<(), String> {
    if !path.is_absolute() {
        return Err(format!(
            "{key} = {:?} must be an absolute path",
            path.display().to_string()
        ));
    }
    if path.as_os_str().len() > MAX_SOCKET_PATH {
        return Err(format!(
            "{key} = {:?} is longer than {MAX_SOCKET_PATH} bytes (a Unix socket path limit)",
            path.display().to_string()
        ));
    }
    if path
        .to_str()
        .is_none_or(|s| s.chars().any(char::is_control))
    {
        return Err(format!(
            "{key} = {:?} must be UTF-8 without control characters (QEMU takes it on its command line)",
            path.display().to_string()
        ));
    }
    Ok(())
}

/// Where the daemon puts its sockets unless told: beside the control
/// socket.
pub fn runtime_dir(d: &DaemonConfig) -> PathBuf {
    d.control_socket
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_owned)
}

/// Validates `[vm.ivshmem]` of a VM with `guest = "qemu"` (absent: a plain
/// device, no QMP).
fn validate_ivshmem(
    name: &str,
    raw: Option<RawIvshmem>,
    region_given: bool,
    d: &DaemonConfig,
) -> Result<QemuConfig, String> {
    let raw = raw.unwrap_or_default();
    let device = match raw.device.as_deref().unwrap_or("plain") {
        "plain" => {
            for (key, given) in [
                ("socket", raw.socket.is_some()),
                ("vectors", raw.vectors.is_some()),
            ] {
                if given {
                    return Err(format!(
                        "[vm.ivshmem] {key} applies to device = \"doorbell\" only (an ivshmem-plain device has no server)"
                    ));
                }
            }
            if !region_given {
                return Err(
                    "region is missing: an ivshmem-plain device maps the region file (or use device = \"doorbell\", whose memory the daemon creates)".into(),
                );
            }
            IvshmemDevice::Plain
        }
        "doorbell" => {
            let socket = raw
                .socket
                .unwrap_or_else(|| runtime_dir(d).join(format!("{name}.ivshmem.sock")));
            check_socket_path("[vm.ivshmem] socket", &socket).map_err(|e| {
                if is_default_socket(&socket, name, d) {
                    format!(
                        "{e}; the default is beside the control socket, so set socket explicitly"
                    )
                } else {
                    e
                }
            })?;
            let max = fairgpu_qemu::server::MAX_VECTORS;
            let vectors = match raw.vectors {
                None => DEFAULT_VECTORS,
                Some(v) => u16::try_from(v)
                    .ok()
                    .filter(|v| (VECTOR_WAKE + 1..=max).contains(v))
                    .ok_or_else(|| {
                        format!(
                            "[vm.ivshmem] vectors = {v} is outside {}..={max} (vector {VECTOR_DOORBELL} rings the host, {VECTOR_WAKE} wakes the guest)",
                            VECTOR_WAKE + 1
                        )
                    })?,
            };
            IvshmemDevice::Doorbell {
                socket,
                vectors,
                memfd: !region_given,
            }
        }
        other => {
            return Err(format!(
                "[vm.ivshmem] device = {other:?} is unknown (expected \"plain\" or \"doorbell\")"
            ))
        }
    };
    if let Some(q) = &raw.qmp {
        check_socket_path("[vm.ivshmem] qmp", q)?;
    }
    let nudge = raw.nudge.unwrap_or(false);
    if nudge && raw.qmp.is_none() {
        return Err(
            "[vm.ivshmem] nudge = true needs qmp: the vCPU thread ids come from QEMU's QMP socket"
                .into(),
        );
    }
    Ok(QemuConfig {
        device,
        qmp: raw.qmp,
        nudge,
    })
}

/// Whether `socket` is the default path for VM `name` (for the hint).
fn is_default_socket(socket: &Path, name: &str, d: &DaemonConfig) -> bool {
    socket == runtime_dir(d).join(format!("{name}.ivshmem.sock"))
}

fn check_name(name: &str) -> Result<(), String> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if name.is_empty() || name.len() > MAX_NAME_LEN || !name.chars().all(ok_char) {
        return Err(format!(
            "name = {name:?} is invalid: use 1 to {MAX_NAME_LEN} letters, digits, '-', '_' or '.'"
        ));
    }
    Ok(())
}

/// Largest `priority` accepted.
pub const MAX_PRIORITY: u8 = 99;

/// `priority` and `[vm.reservation]`, which only the TimeGraph policies
/// have.
fn validate_priority(
    raw: &RawVm,
    sched: &SchedConfig,
) -> Result<(u8, Option<Reservation>), String> {
    let has = sched.policy.is_some_and(PolicyKind::has_priorities);
    if !has && (raw.priority.is_some() || raw.reservation.is_some()) {
        return Err(format!(
            "{} is a setting of the TimeGraph policies (policy = \"timegraph-prt\" or \"timegraph-ht\"), not of policy = {:?}",
            if raw.priority.is_some() { "priority" } else { "[vm.reservation]" },
            sched.policy_name()
        ));
    }
    let priority = match raw.priority {
        None => 0,
        Some(p) => u8::try_from(p)
            .ok()
            .filter(|p| *p <= MAX_PRIORITY)
            .ok_or_else(|| format!("priority = {p} is outside 0..={MAX_PRIORITY}"))?,
    };
    let reservation = match &raw.reservation {
        None => None,
        Some(r) => {
            let ms = |what: &str, v: f64| -> Result<Nanos, String> {
                if v.is_finite() && v > 0.0 && v <= 100_000.0 {
                    Ok(Nanos((v * 1e6).round() as u64))
                } else {
                    Err(format!("reservation {what} = {v} is outside (0, 100000]"))
                }
            };
            let res = Reservation {
                budget: ms("budget_ms", r.budget_ms)?,
                period: ms("period_ms", r.period_ms)?,
                mode: r.mode.parse()?,
            };
            res.validate().map_err(|_| {
                format!(
                    "reservation budget_ms = {} per period_ms = {} is invalid: the budget must be at most the period, and the period 0.1..=100000 ms",
                    r.budget_ms, r.period_ms
                )
            })?;
            Some(res)
        }
    };
    Ok((priority, reservation))
}

fn validate_vm(raw: RawVm, daemon: &DaemonConfig) -> Result<VmConfig, String> {
    let (priority, reservation) = validate_priority(&raw, &daemon.sched)?;
    let max_request = match raw.max_request_ms {
        None => daemon.long_kernels.max_request,
        Some(ms) => max_request(&format!("[[vm]] {:?}: ", raw.name), ms)?,
    };
    let weight = u32::try_from(raw.weight)
        .ok()
        .filter(|w| WEIGHTS.contains(w))
        .ok_or_else(|| {
            format!(
                "weight = {} is outside {}..={}",
                raw.weight,
                WEIGHTS.start(),
                WEIGHTS.end()
            )
        })?;
    let memory = raw
        .memory
        .bytes()
        .map_err(|e| format!("memory = {}: {e}", raw.memory))?;
    if memory == 0 {
        return Err(format!("memory = {} must be more than 0 bytes", raw.memory));
    }
    let host_memory = match &raw.host_memory {
        None => fairgpu_executor::host_memory::DEFAULT_HOST_MEMORY,
        Some(spec) => {
            let b = spec
                .bytes()
                .map_err(|e| format!("host_memory = {spec}: {e}"))?;
            if b < MIN_HOST_MEMORY {
                return Err(format!(
                    "host_memory = {spec} is below {} (modules and their variables need room)",
                    format_size(MIN_HOST_MEMORY)
                ));
            }
            b
        }
    };
    let qemu = match raw.guest {
        GuestKind::Local => {
            if raw.ivshmem.is_some() {
                return Err(
                    "[vm.ivshmem] applies to guest = \"qemu\" only; this VM's guests are local processes"
                        .into(),
                );
            }
            None
        }
        GuestKind::Qemu => Some(validate_ivshmem(
            &raw.name,
            raw.ivshmem,
            raw.region.is_some(),
            daemon,
        )?),
    };
    let region_path = match (&raw.region, &qemu) {
        (Some(r), _) => {
            if !r.is_absolute() {
                return Err(format!(
                    "region = {:?} must be an absolute path",
                    r.display().to_string()
                ));
            }
            // A local VM's region path is its region socket.
            if qemu.is_none() && r.as_os_str().len() > MAX_SOCKET_PATH {
                return Err(format!(
                        "region = {:?} is longer than {MAX_SOCKET_PATH} bytes (a local VM's region is a Unix socket)",
                        r.display().to_string()
                    ));
            }
            r.clone()
        }
        (
            None,
            Some(QemuConfig {
                device: IvshmemDevice::Doorbell { socket, .. },
                ..
            }),
        ) => socket.clone(),
        (None, _) => {
            return Err(
                "region is missing: where guests open the region (e.g. \"/dev/shm/fairgpu-NAME\")"
                    .into(),
            )
        }
    };
    let channels = u32::try_from(raw.channels)
        .ok()
        .filter(|c| (MIN_CHANNELS..=MAX_CHANNELS).contains(c))
        .ok_or_else(|| {
            format!(
                "channels = {} is outside {MIN_CHANNELS}..={MAX_CHANNELS}",
                raw.channels
            )
        })?;
    let defaults = RegionConfig::default();
    let ring_entries = match raw.ring_entries {
        None => defaults.ring_entries,
        Some(r) => u32::try_from(r)
            .ok()
            .filter(|r| (MIN_RING_ENTRIES..=MAX_RING_ENTRIES).contains(r) && r.is_power_of_two())
            .ok_or_else(|| {
                format!(
                    "ring_entries = {r} must be a power of two in {MIN_RING_ENTRIES}..={MAX_RING_ENTRIES}"
                )
            })?,
    };
    let arena_size = match &raw.arena {
        None => defaults.arena_size,
        Some(spec) => {
            let bytes = spec.bytes().map_err(|e| format!("arena = {spec}: {e}"))?;
            u32::try_from(bytes)
                .ok()
                .filter(|b| {
                    (MIN_ARENA..=MAX_ARENA).contains(b) && (*b as usize).is_multiple_of(PAGE)
                })
                .ok_or_else(|| {
                    format!(
                        "arena = {spec} ({bytes} bytes) must be a multiple of 4 KiB in {}..={}",
                        format_size(MIN_ARENA.into()),
                        format_size(MAX_ARENA.into())
                    )
                })?
        }
    };
    let features = match raw.guest {
        GuestKind::Local => defaults.features,
        GuestKind::Qemu => defaults.features & !fairgpu_protocol::layout::FEATURE_LOCAL_OWNERS,
    };
    let region = RegionConfig {
        channels,
        ring_entries,
        arena_size,
        features,
    };
    Layout::new(&region).map_err(|e| format!("the region's shape is invalid: {e}"))?;
    let access = Access::from_config(raw.mode.as_deref(), raw.group.as_deref())?;
    Ok(VmConfig {
        name: raw.name,
        weight,
        memory,
        host_memory,
        region_path,
        region,
        access,
        guest: raw.guest,
        qemu,
        max_request,
        priority,
        reservation,
    })
}

/// What a configuration resolves to, for `fairgpu serve --check`.
pub fn describe(cfg: &Config) -> String {
    let d = &cfg.daemon;
    let mut out = format!(
        "configuration OK: {} VMs, executor {}, gpu {}, control socket {} ({}), state dir {}\n",
        cfg.vms.len(),
        d.executor,
        d.gpu,
        d.control_socket.display(),
        d.control_group
            .as_ref()
            .map_or_else(|| "0600".to_owned(), |g| format!("0660 group {g}")),
        d.state_dir.display()
    );
    out.push_str(&match d.sched.policy {
        None => "scheduling: none (workers issue GPU work as it arrives)\n\n".to_owned(),
        Some(_) => format!(
            "scheduling: policy {}, slice {}, accounting {}, spin {} us{}\n\n",
            d.sched.policy_name(),
            d.sched.slice.slice(),
            d.sched.accounting,
            d.sched.spin.as_micros(),
            if d.sched.work_conserving {
                ""
            } else {
                ", not work-conserving"
            }
        ),
    });
    let rows: Vec<Vec<String>> = cfg
        .vms
        .iter()
        .map(|v| {
            let size = Layout::new(&v.region).map_or(0, |l| l.region_size() as u64);
            vec![
                v.name.clone(),
                v.weight.to_string(),
                format_size(v.memory),
                v.region.channels.to_string(),
                v.region.ring_entries.to_string(),
                format_size(v.region.arena_size.into()),
                match v.doorbell() {
                    Some((socket, vectors)) => format!(
                        "{} ({}) by ivshmem-doorbell on {} ({vectors} vectors)",
                        if v.region_is_memfd() {
                            "memfd".to_owned()
                        } else {
                            v.region_path.display().to_string()
                        },
                        format_size(fairgpu_qemu::bar_size(size)),
                        socket.display()
                    ),
                    None => format!("{} ({})", v.region_path.display(), format_size(size)),
                },
                v.access.to_string(),
            ]
        })
        .collect();
    out.push_str(&crate::table::format_table(
        &[
            "VM", "WEIGHT", "MEMORY", "CHANNELS", "RING", "ARENA", "REGION", "ACCESS",
        ],
        &rows,
    ));
    if d.sched.policy.is_some_and(PolicyKind::has_priorities) {
        for v in &cfg.vms {
            let reservation = v.reservation.map_or_else(
                || "no reservation".to_owned(),
                |r| {
                    format!(
                        "reservation {} ms per {} ms ({})",
                        r.budget.as_nanos() as f64 / 1e6,
                        r.period.as_nanos() as f64 / 1e6,
                        r.mode.name()
                    )
                },
            );
            out.push_str(&format!(
                "{}: priority {}, {reservation}\n",
                v.name, v.priority
            ));
        }
    }
    out
}

/// The parser's message, prefixed with the VM it is about when the error
/// lies inside a `[[vm]]` table.
fn describe_parse_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.to_string();
    let msg = msg.trim_end();
    let Some(span) = e.span() else {
        return msg.to_owned();
    };
    let Some(index) = vm_table_at(text, span.start) else {
        return msg.to_owned();
    };
    // The untyped parse succeeds for unknown keys and wrong types, so it can
    // say which VM the table is.
    let name = text.parse::<toml::Table>().ok().and_then(|t| {
        t.get("vm")?
            .as_array()?
            .get(index)?
            .get("name")?
            .as_str()
            .map(str::to_owned)
    });
    match name {
        Some(name) => format!("in vm {name:?} (the {} [[vm]]): {msg}", ordinal(index + 1)),
        None => format!("in the {} [[vm]]: {msg}", ordinal(index + 1)),
    }
}

/// Which `[[vm]]` table (0-based) the byte `offset` lies in, if any.
fn vm_table_at(text: &str, offset: usize) -> Option<usize> {
    let mut seen = 0usize;
    let mut current = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        if pos > offset {
            break;
        }
        let t = line.trim_start();
        if let Some(rest) = t.strip_prefix("[[") {
            let name = rest.split("]]").next().unwrap_or("").trim();
            current = (name == "vm").then_some(seen);
            if name == "vm" {
                seen += 1;
            }
        } else if let Some(rest) = t.strip_prefix('[') {
            // `[vm.ivshmem]` belongs to the [[vm]] above it.
            let name = rest.split(']').next().unwrap_or("").trim();
            current = match name.strip_prefix("vm.") {
                Some(_) => seen.checked_sub(1),
                None => None,
            };
        }
        pos += line.len();
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../examples/fairgpu.toml");

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("test.toml"))
    }

    fn err(text: &str) -> String {
        match parse(text) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    const ONE_VM: &str = r#"
[daemon]
control_socket = "/tmp/x/control.sock"
[[vm]]
name = "vm1"
memory = "1GiB"
region = "/dev/shm/fairgpu-vm1"
"#;

    #[test]
    fn the_example_parses() {
        let c = Config::parse(EXAMPLE, Path::new("examples/fairgpu.toml")).unwrap();
        assert!(c.vms.len() >= 2, "the example has several VMs");
        assert_eq!(c.daemon.executor, ExecutorChoice::Sim);
        assert_eq!(c.daemon.sched.policy, Some(PolicyKind::FairQueuing));
        for v in &c.vms {
            Layout::new(&v.region).unwrap();
        }
    }

    #[test]
    fn the_examples_qemu_vm_parses_when_uncommented() {
        let (head, tail) = EXAMPLE
            .split_once("# A VM whose guests run in QEMU")
            .expect("the example has a QEMU VM");
        let uncommented: String = tail
            .lines()
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| l.starts_with('[') || l.contains(" = "))
            .map(|l| format!("{l}\n"))
            .collect();
        let c = Config::parse(&format!("{head}\n{uncommented}"), Path::new("example")).unwrap();
        let (_, vm) = c.vm("vm3").unwrap();
        assert_eq!(
            vm.doorbell(),
            Some((Path::new("/run/fairgpu/vm3.ivshmem.sock"), 2))
        );
        assert!(vm.region_is_memfd());
        assert_eq!(vm.access.group, Some(GroupSpec::Name("fairgpu-vm3".into())));
        let q = vm.qemu.as_ref().unwrap();
        assert_eq!(q.qmp.as_deref(), Some(Path::new("/run/fairgpu/vm3.qmp")));
        assert!(!q.nudge);
    }

    #[test]
    fn defaults_fill_what_is_left_out() {
        let c = parse(ONE_VM).unwrap();
        let v = &c.vms[0];
        assert_eq!((v.weight, v.memory), (1, 1 << 30));
        assert_eq!(v.region, RegionConfig::default());
        assert_eq!(c.daemon.executor, ExecutorChoice::Auto);
        assert_eq!(c.daemon.gpu, 0);
        assert_eq!(c.daemon.state_dir, Path::new("/dev/shm"));
        assert_eq!(c.vm("vm1").map(|(i, _)| i), Some(0));
        assert!(c.vm("vm2").is_none());
        let text = ONE_VM.replace("[daemon]\ncontrol_socket = \"/tmp/x/control.sock\"\n", "");
        assert!(parse(&text).unwrap().daemon.control_socket.is_absolute());
    }

    #[test]
    fn sizes() {
        for (t, v) in [
            ("4GiB", 4 << 30),
            ("512MiB", 512 << 20),
            ("512 MiB", 512 << 20),
            ("1G", 1 << 30),
            ("64K", 64 << 10),
            ("1GB", 1_000_000_000),
            ("4096", 4096),
            ("7B", 7),
        ] {
            assert_eq!(parse_size(t), Ok(v), "{t}");
        }
        for t in [
            "",
            "GiB",
            "4 XB",
            "1.5GiB",
            "-1",
            "99999999999999999999",
            "20000000T",
        ] {
            assert!(parse_size(t).is_err(), "{t} accepted");
        }
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(512 << 20), "512 MiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
    }

    #[test]
    fn region_access_and_control_group() {
        let c = parse(ONE_VM).unwrap();
        assert_eq!(c.vms[0].access, Access::default());
        assert_eq!(c.daemon.control_group, None);
        let c = parse(
            &ONE_VM
                .replace("memory =", "group = \"kvm\"\nmemory =")
                .replace("[daemon]", "[daemon]\ncontrol_group = \"1001\""),
        )
        .unwrap();
        assert_eq!(c.vms[0].access.mode, 0o660);
        assert_eq!(c.vms[0].access.group, Some(GroupSpec::Name("kvm".into())));
        assert_eq!(c.daemon.control_group, Some(GroupSpec::Id(1001)));
        assert!(describe(&c).contains("0660 group kvm"), "{}", describe(&c));
        assert!(
            describe(&c).contains("(0660 group 1001)"),
            "{}",
            describe(&c)
        );
        let c = parse(&ONE_VM.replace("memory =", "mode = \"0660\"\nmemory =")).unwrap();
        assert_eq!(
            (c.vms[0].access.mode, &c.vms[0].access.group),
            (0o660, &None)
        );
        for (text, want) in [
            (
                ONE_VM.replace("memory =", "mode = \"0666\"\nmemory ="),
                "vm \"vm1\": mode = \"0666\" opens the region to every user",
            ),
            (
                ONE_VM.replace("memory =", "group = \"a b\"\nmemory ="),
                "vm \"vm1\": group = \"a b\" is not a group name",
            ),
            (
                ONE_VM.replace("[daemon]", "[daemon]\ncontrol_group = \"\""),
                "[daemon]: control_group = \"\" is not a group name",
            ),
        ] {
            let e = err(&text);
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn errors_name_the_place_and_field() {
        let unknown = err(&ONE_VM.replace("memory =", "colour = \"red\"\nmemory ="));
        assert!(
            unknown.contains("colour") && unknown.contains("vm \"vm1\""),
            "{unknown}"
        );
        let unknown_daemon = err(&ONE_VM.replace("[daemon]", "[daemon]\nthreads = 4"));
        assert!(unknown_daemon.contains("threads"), "{unknown_daemon}");
        let unknown_table = err(&format!("{ONE_VM}\n[extra]\n"));
        assert!(unknown_table.contains("extra"), "{unknown_table}");

        let dup = err(&format!(
            "{ONE_VM}\n[[vm]]\nname = \"vm1\"\nmemory = 1\nregion = \"/dev/shm/other\"\n"
        ));
        assert!(
            dup.contains("vm \"vm1\"") && dup.contains("unique"),
            "{dup}"
        );
        let dup_region = err(&format!(
            "{ONE_VM}\n[[vm]]\nname = \"vm2\"\nmemory = 1\nregion = \"/dev/shm//fairgpu-vm1\"\n"
        ));
        assert!(
            dup_region.contains("vm \"vm2\"") && dup_region.contains("also the region"),
            "{dup_region}"
        );

        for (from, to, want) in [
            ("memory = \"1GiB\"", "memory = \"1 GB2\"", "memory"),
            ("memory = \"1GiB\"", "memory = 0", "memory"),
            ("memory = \"1GiB\"", "memory = -5", "memory"),
            ("name = \"vm1\"", "name = \"vm1\"\nweight = 0", "weight = 0"),
            (
                "name = \"vm1\"",
                "name = \"vm1\"\nweight = 10001",
                "weight = 10001",
            ),
            (
                "name = \"vm1\"",
                "name = \"vm1\"\nchannels = 0",
                "channels = 0",
            ),
            (
                "name = \"vm1\"",
                "name = \"vm1\"\nchannels = 257",
                "channels = 257",
            ),
            (
                "name = \"vm1\"",
                "name = \"vm1\"\nring_entries = 100",
                "ring_entries",
            ),
            (
                "name = \"vm1\"",
                "name = \"vm1\"\narena = \"12345\"",
                "arena",
            ),
            (
                "name = \"vm1\"",
                "name = \"vm1\"\narena = \"1GiB\"",
                "arena",
            ),
            ("name = \"vm1\"", "name = \"a b\"", "name = \"a b\""),
            ("/dev/shm/fairgpu-vm1", "fairgpu-vm1", "absolute"),
            ("/tmp/x/control.sock", "x.sock", "control_socket"),
            ("[daemon]", "[daemon]\ngpu = -1", "gpu = -1"),
            ("[daemon]", "[daemon]\nexecutor = \"gpu\"", "executor"),
            ("[daemon]", "[daemon]\nstate_dir = \"shm\"", "state_dir"),
        ] {
            let text = ONE_VM.replace(from, to);
            assert_ne!(text, ONE_VM, "{from}");
            let e = err(&text);
            assert!(e.contains(want), "{to}: {e}");
        }
        assert!(err("[daemon]\n").contains("at least one VM"));
        assert!(err("this is not toml").contains("test.toml"));
        let missing = err(&ONE_VM.replace("memory = \"1GiB\"\n", ""));
        assert!(missing.contains("memory"), "{missing}");
        let long_region = format!("/dev/shm/{}", "r".repeat(110));
        let e = err(&ONE_VM.replace("/dev/shm/fairgpu-vm1", &long_region));
        assert!(e.contains("107") && e.contains("Unix socket"), "{e}");
        let long = format!("/tmp/{}/c.sock", "d".repeat(120));
        assert!(err(&ONE_VM.replace("/tmp/x/control.sock", &long)).contains("107"));
    }

    #[test]
    fn scheduling_keys() {
        let d = parse(ONE_VM).unwrap().daemon.sched;
        assert_eq!(d, SchedConfig::default());
        assert_eq!(d.policy, Some(PolicyKind::FairQueuing));
        assert_eq!(d.slice.slice(), fairgpu_scheduler::Nanos::from_millis(6));
        assert_eq!(d.accounting, Accounting::Sampled);
        assert_eq!(d.spin, std::time::Duration::from_micros(500));
        assert_eq!(d.policy_name(), "fairgv");
        let with = |lines: &str| {
            parse(&ONE_VM.replace("[daemon]", &format!("[daemon]\n{lines}")))
                .map(|c| c.daemon.sched)
        };
        for (name, kind) in [
            ("fairgv", Some(PolicyKind::FairQueuing)),
            ("fair-queuing", Some(PolicyKind::FairQueuing)),
            ("credit-poll", Some(PolicyKind::CreditPoll)),
            ("credit-hs", Some(PolicyKind::CreditHybridSpin)),
            ("strict", Some(PolicyKind::StrictCoSchedule)),
            ("strict-cosched", Some(PolicyKind::StrictCoSchedule)),
            ("neon-ts", Some(PolicyKind::NeonTimeslice)),
            ("neon-dts", Some(PolicyKind::NeonDisengaged)),
            ("timegraph-prt", Some(PolicyKind::TimeGraphPrt)),
            ("timegraph-ht", Some(PolicyKind::TimeGraphHt)),
            ("neon-dfq", Some(PolicyKind::NeonDfq)),
            ("loga", Some(PolicyKind::Loga)),
            ("none", None),
        ] {
            let c = with(&format!("policy = {name:?}")).unwrap();
            assert_eq!(c.policy, kind, "{name}");
            // Names round-trip through the canonical spelling.
            assert_eq!(parse_policy(policy_name(kind)), Ok(kind));
        }
        for a in Accounting::ALL {
            let c = with(&format!("accounting = {:?}", a.name())).unwrap();
            assert_eq!(c.accounting, a);
        }
        let c = with("slice_ms = 30\nspin_us = 0").unwrap();
        assert_eq!(c.slice.slice(), fairgpu_scheduler::Nanos::from_millis(30));
        assert_eq!(c.spin, std::time::Duration::ZERO);
        let c = with("slice_ms = 0.5").unwrap();
        assert_eq!(c.slice.slice(), fairgpu_scheduler::Nanos::from_micros(500));
        assert!(c.work_conserving);
        assert!(!with("work_conserving = false").unwrap().work_conserving);
        assert!(with("work_conserving = \"no\"").is_err());
    }

    #[test]
    fn backfill_keys() {
        let with = |lines: &str| {
            parse(&ONE_VM.replace("[daemon]", &format!("[daemon]\n{lines}")))
                .map(|c| c.daemon.sched)
        };
        assert_eq!(with("").unwrap().backfill, Some(DEFAULT_BACKFILL_MAX));
        // Off where it does not apply, unless asked for.
        for other in [
            "policy = \"credit-hs\"",
            "accounting = \"events\"",
            "work_conserving = false",
            "policy = \"none\"",
        ] {
            assert_eq!(with(other).unwrap().backfill, None, "{other}");
        }
        assert_eq!(
            with("backfill = true").unwrap().backfill,
            Some(DEFAULT_BACKFILL_MAX)
        );
        assert_eq!(
            with("backfill_max_us = 100").unwrap().backfill,
            Some(std::time::Duration::from_micros(100))
        );
        assert_eq!(with("backfill = false").unwrap().backfill, None);
        assert_eq!(
            with("policy = \"none\"\nbackfill = true").unwrap().backfill,
            None,
            "nothing to backfill without a scheduler"
        );
        for bad in [
            "backfill = false\nbackfill_max_us = 100",
            "backfill_max_us = 0",
            "backfill_max_us = -5",
            "policy = \"credit-hs\"\nbackfill = true",
            "accounting = \"events\"\nbackfill = true",
            "work_conserving = false\nbackfill = true",
            "policy = \"none\"\nbackfill_max_us = 0",
            "backfill = 1",
        ] {
            let e = with(bad).expect_err(bad).to_string();
            assert!(e.contains("backfill"), "{bad}: {e}");
        }
    }

    #[test]
    fn accounting_only_key() {
        let with = |lines: &str| {
            parse(&ONE_VM.replace("[daemon]", &format!("[daemon]\n{lines}")))
                .map(|c| c.daemon.sched)
        };
        assert!(!with("policy = \"loga\"").unwrap().accounting_only);
        for p in ["neon-dfq", "loga"] {
            let c = with(&format!("policy = {p:?}\naccounting_only = true")).unwrap();
            assert!(c.accounting_only, "{p}");
        }
        // Nothing to deny without a scheduler: accepted, and off.
        let c = with("policy = \"none\"\naccounting_only = true").unwrap();
        assert!(!c.accounting_only);
        for bad in [
            "accounting_only = true",
            "policy = \"neon-ts\"\naccounting_only = true",
        ] {
            let e = with(bad).expect_err(bad).to_string();
            assert!(e.contains("accounting_only"), "{bad}: {e}");
        }
        assert!(with("policy = \"loga\"\naccounting_only = 1").is_err());
    }

    #[test]
    fn preemptive_mode_key() {
        let with = |lines: &str| {
            parse(&ONE_VM.replace("[daemon]", &format!("[daemon]\n{lines}")))
                .map(|c| c.daemon.sched)
        };
        let ms = |n: u64| fairgpu_scheduler::Nanos(n * 1_000_000);
        let d = with("").unwrap();
        assert!(!d.preemptive);
        assert_eq!(d.slice.slice(), ms(6));
        let p = with("preemptive = true").unwrap();
        assert!(p.preemptive);
        assert_eq!(p.slice.slice(), ms(PREEMPTIVE_SLICE_MS), "FairGV's 30 ms");
        let p = with("preemptive = true\nslice_ms = 10").unwrap();
        assert_eq!(p.slice.slice(), ms(10), "an explicit slice stands");
        let e = with("policy = \"credit-hs\"\npreemptive = true")
            .unwrap_err()
            .to_string();
        assert!(e.contains("preemptive"), "{e}");
        assert!(
            !with("policy = \"none\"\npreemptive = false")
                .unwrap()
                .preemptive
        );
        assert!(with("preemptive = 1").is_err());
    }

    #[test]
    fn interactivity_keys_tune_the_co_scheduling_policies_only() {
        use fairgpu_scheduler::Nanos;
        let with = |lines: &str| {
            parse(&ONE_VM.replace("[daemon]", &format!("[daemon]\n{lines}")))
                .map(|c| c.daemon.sched.interactivity)
        };
        let d = with("").unwrap();
        assert_eq!((d.threshold(), d.window()), (10, Nanos::from_millis(10)));
        let c = with("interactive_calls = 2\ninteractive_window_ms = 200").unwrap();
        assert_eq!((c.threshold(), c.window()), (2, Nanos::from_millis(200)));
        let c = with("policy = \"credit-hs\"\ninteractive_window_ms = 2.5").unwrap();
        assert_eq!((c.threshold(), c.window()), (10, Nanos::from_micros(2500)));
        for bad in [
            "interactive_calls = -1",
            "interactive_calls = 10001",
            "interactive_window_ms = 0",
            "interactive_window_ms = 10001",
            "interactive_window_ms = nan",
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.contains("is outside"), "{bad}: {e}");
        }
        let e = with("policy = \"neon-ts\"\ninteractive_calls = 3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("neon-ts"), "{e}");
    }

    #[test]
    fn adaptive_spin_and_wake_preemption_keys() {
        use std::time::Duration;
        let with = |lines: &str| {
            parse(&ONE_VM.replace("[daemon]", &format!("[daemon]\n{lines}")))
                .map(|c| c.daemon.sched)
        };
        let d = with("").unwrap();
        assert!(d.adaptive_spin);
        assert!(!with("adaptive_spin = false").unwrap().adaptive_spin);
        assert_eq!(d.wake_preempt, Some(DEFAULT_WAKE_PREEMPT));
        assert!(!with("adaptive_spin = false").unwrap().adaptive_spin);
        assert_eq!(with("wake_preempt = false").unwrap().wake_preempt, None);
        assert_eq!(
            with("wake_preempt_us = 0").unwrap().wake_preempt,
            Some(Duration::ZERO)
        );
        assert_eq!(
            with("wake_preempt = true\nwake_preempt_us = 1500")
                .unwrap()
                .wake_preempt,
            Some(Duration::from_micros(1500))
        );
        let e = with("wake_preempt = false\nwake_preempt_us = 10")
            .unwrap_err()
            .to_string();
        assert!(e.contains("wake_preempt = false"), "{e}");
        let e = with("wake_preempt_us = -1").unwrap_err().to_string();
        assert!(e.contains("outside 0..=100000"), "{e}");
        // FairGV's alone: another policy refuses the keys, and has none.
        let e = with("policy = \"credit-hs\"\nwake_preempt = true")
            .unwrap_err()
            .to_string();
        assert!(e.contains("FairGV's"), "{e}");
        let e = with("policy = \"none\"\nwake_preempt_us = 100")
            .unwrap_err()
            .to_string();
        assert!(e.contains("FairGV's"), "{e}");
        assert_eq!(with("policy = \"credit-hs\"").unwrap().wake_preempt, None);
        assert_eq!(with("policy = \"none\"").unwrap().wake_preempt, None);
        // Turning it off is what the other policies do anyway.
        let off = with("policy = \"none\"\nwake_preempt = false").unwrap();
        assert_eq!(off.wake_preempt, None);
    }

    #[test]
    fn long_kernel_keys() {
        use std::time::Duration;
        let c = parse(ONE_VM).unwrap();
        assert_eq!(c.daemon.long_kernels, LongKernelConfig::default());
        assert_eq!(c.vms[0].max_request, Some(Duration::from_secs(5)));
        let with = |daemon: &str, vm: &str| {
            parse(
                &ONE_VM
                    .replace("[daemon]", &format!("[daemon]\n{daemon}"))
                    .replace("[[vm]]", &format!("[[vm]]\n{vm}")),
            )
        };
        // The threshold follows the slice unless set.
        let c = with("slice_ms = 30", "").unwrap();
        assert_eq!(c.daemon.long_kernels.threshold, Duration::from_millis(30));
        let c = with(
            "slice_kernels = false\nkernel_slice_ms = 2.5\nkernel_slice_blocks = 64\nmax_request_ms = 0",
            "max_request_ms = 250",
        )
        .unwrap();
        let l = c.daemon.long_kernels;
        assert!(!l.slicing);
        assert_eq!(l.threshold, Duration::from_micros(2500));
        assert_eq!(l.min_blocks, 64);
        assert_eq!(l.max_request, None, "0 turns the guard off");
        assert_eq!(
            c.vms[0].max_request,
            Some(Duration::from_millis(250)),
            "the VM's own"
        );
        for (daemon, vm, want) in [
            ("max_request_ms = -1", "", "max_request_ms = -1 is outside"),
            (
                "",
                "max_request_ms = 1e9",
                "max_request_ms = 1000000000 is outside",
            ),
            (
                "kernel_slice_blocks = 0",
                "",
                "kernel_slice_blocks = 0 is outside",
            ),
            ("kernel_slice_ms = 0", "", "kernel_slice_ms = 0 is outside"),
            ("slice_kernels = 1", "", "slice_kernels"),
        ] {
            let e = with(daemon, vm).unwrap_err().to_string();
            assert!(e.contains(want), "{daemon} {vm}: {e}");
        }
    }

    #[test]
    fn priorities_and_reservations() {
        use fairgpu_scheduler::ReserveMode;
        let two = |policy: &str, a: &str, b: &str| {
            let text = format!(
                "{ONE_VM}[[vm]]\nname = \"vm2\"\nmemory = \"1GiB\"\nregion = \"/dev/shm/fairgpu-vm2\"\n{b}\n"
            )
            .replace("[daemon]", &format!("[daemon]\npolicy = {policy:?}"))
            .replacen("[[vm]]", &format!("[[vm]]\n{a}"), 1);
            parse(&text)
        };
        let c = two(
            "timegraph-ht",
            "priority = 7\nreservation = { budget_ms = 2, period_ms = 10 }",
            "reservation = { budget_ms = 40, period_ms = 50, mode = \"ae\" }",
        )
        .unwrap();
        assert_eq!(c.vms[0].priority, 7);
        let r = c.vms[0].reservation.unwrap();
        assert_eq!(
            (r.budget, r.period, r.mode),
            (
                Nanos::from_millis(2),
                Nanos::from_millis(10),
                ReserveMode::Posterior
            )
        );
        assert_eq!(c.vms[1].priority, 0);
        assert_eq!(c.vms[1].reservation.unwrap().mode, ReserveMode::Apriori);
        let d = describe(&c);
        assert!(
            d.contains("vm1: priority 7, reservation 2 ms per 10 ms (pe)")
                && d.contains("vm2: priority 0, reservation 40 ms per 50 ms (ae)"),
            "{d}"
        );
        assert!(!describe(&parse(ONE_VM).unwrap()).contains("priority"));
        // PRT waits for every request: accounting "every", and no other.
        let c = two("timegraph-prt", "", "").unwrap();
        assert_eq!(c.daemon.sched.accounting, Accounting::Every);
        for (policy, a, b, want) in [
            (
                "fairgv",
                "priority = 1",
                "",
                "priority is a setting of the TimeGraph policies",
            ),
            (
                "neon-ts",
                "reservation = { budget_ms = 1, period_ms = 10 }",
                "",
                "[vm.reservation] is a setting of the TimeGraph policies",
            ),
            (
                "timegraph-ht",
                "priority = 100",
                "",
                "priority = 100 is outside 0..=99",
            ),
            (
                "timegraph-ht",
                "reservation = { budget_ms = 11, period_ms = 10 }",
                "",
                "the budget must be at most the period",
            ),
            (
                "timegraph-ht",
                "reservation = { budget_ms = 1, period_ms = 10, mode = \"xe\" }",
                "",
                "reservation mode \"xe\" is unknown",
            ),
            (
                "timegraph-ht",
                "reservation = { budget_ms = 6, period_ms = 10 }",
                "reservation = { budget_ms = 5, period_ms = 10 }",
                "ask for 1.100 of the GPU together",
            ),
        ] {
            let e = two(policy, a, b).unwrap_err().to_string();
            assert!(e.contains(want), "{policy} {a} {b}: {e}");
        }
        let e = parse(&ONE_VM.replace(
            "[daemon]",
            "[daemon]\npolicy = \"timegraph-prt\"\naccounting = \"sampled\"",
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("accounting = \"every\""), "{e}");
    }

    #[test]
    fn scheduling_errors_name_the_key_and_the_choices() {
        for (line, want) in [
            ("policy = \"cfs\"", "policy = \"cfs\" is unknown"),
            ("policy = \"FairGV\"", "\"fairgv\", \"credit-poll\""),
            (
                "accounting = \"sometimes\"",
                "accounting = \"sometimes\" is unknown",
            ),
            (
                "accounting = \"sometimes\"",
                "\"sampled\", \"every\", \"events\" or \"none\"",
            ),
            ("slice_ms = 0", "slice_ms = 0 is outside 0.1..=10000"),
            ("slice_ms = -6", "slice_ms = -6"),
            ("slice_ms = 20000", "slice_ms = 20000"),
            ("slice_ms = nan", "slice_ms = NaN"),
            ("spin_us = -1", "spin_us = -1 is outside 0..=100000"),
            ("spin_us = 100001", "spin_us = 100001"),
            ("policy = 3", "policy"),
            ("slice_ms = \"6\"", "slice_ms"),
        ] {
            let e = err(&ONE_VM.replace("[daemon]", &format!("[daemon]\n{line}")));
            assert!(e.contains(want), "{line}: {e}");
            assert!(e.contains("test.toml"), "{line}: {e}");
        }
        let e = err(&ONE_VM.replace("[daemon]", "[daemon]\nslice = 6"));
        assert!(e.contains("unknown field `slice`"), "{e}");
    }

    #[test]
    fn the_vm_of_a_parse_error_is_found() {
        let text = "[daemon]\n[[vm]]\nname = \"a\"\n[[vm]]\nname = \"b\"\nbad = 1\n[sim]\n";
        let off = text.find("bad").unwrap();
        assert_eq!(vm_table_at(text, off), Some(1));
        assert_eq!(vm_table_at(text, text.find("[sim]").unwrap() + 2), None);
        assert_eq!(vm_table_at(text, 3), None);
    }

    const QEMU_VM: &str = r#"
[daemon]
control_socket = "/tmp/x/control.sock"
[[vm]]
name = "vm1"
memory = "1GiB"
guest = "qemu"
[vm.ivshmem]
device = "doorbell"
"#;

    #[test]
    fn qemu_devices_and_their_defaults() {
        // A doorbell device without a region: a memfd, reached through a
        // socket beside the control socket, two vectors, no QMP.
        let c = parse(QEMU_VM).unwrap();
        let v = &c.vms[0];
        let q = v.qemu.as_ref().unwrap();
        let socket = Path::new("/tmp/x/vm1.ivshmem.sock");
        assert_eq!(
            q.device,
            IvshmemDevice::Doorbell {
                socket: socket.to_owned(),
                vectors: DEFAULT_VECTORS,
                memfd: true
            }
        );
        assert_eq!((q.qmp.as_deref(), q.nudge), (None, false));
        assert_eq!(v.doorbell(), Some((socket, 2)));
        assert!(v.region_is_memfd());
        assert_eq!(v.region_path, socket);
        assert_eq!(
            v.region.features & fairgpu_protocol::layout::FEATURE_LOCAL_OWNERS,
            0
        );
        assert!(describe(&c).contains("memfd"), "{}", describe(&c));

        // Everything given, over a region file.
        let c = parse(&format!(
            "{QEMU_VM}socket = \"/run/f/vm1.sock\"\nvectors = 4\nqmp = \"/run/f/vm1.qmp\"\nnudge = true\n"
        ))
        .unwrap();
        let q = c.vms[0].qemu.clone().unwrap();
        assert_eq!(q.qmp.as_deref(), Some(Path::new("/run/f/vm1.qmp")));
        assert!(q.nudge);
        assert_eq!(c.vms[0].doorbell(), Some((Path::new("/run/f/vm1.sock"), 4)));
        let c = parse(&QEMU_VM.replace("guest =", "region = \"/dev/shm/r1\"\nguest =")).unwrap();
        assert!(!c.vms[0].region_is_memfd());
        assert_eq!(c.vms[0].region_path, Path::new("/dev/shm/r1"));

        // guest = "qemu" alone is a plain device over the region file, as
        // before [vm.ivshmem] existed; so is device = "plain" with QMP.
        let plain = ONE_VM.replace("memory =", "guest = \"qemu\"\nmemory =");
        let c = parse(&plain).unwrap();
        assert_eq!(c.vms[0].qemu.as_ref().unwrap().device, IvshmemDevice::Plain);
        assert_eq!(c.vms[0].doorbell(), None);
        let c = parse(&format!(
            "{plain}[vm.ivshmem]\ndevice = \"plain\"\nqmp = \"/run/f/q.sock\"\nnudge = true\n"
        ))
        .unwrap();
        assert!(c.vms[0].qemu.as_ref().unwrap().nudge);
        assert_eq!(parse(ONE_VM).unwrap().vms[0].qemu, None);
    }

    #[test]
    fn qemu_device_errors_name_the_key() {
        let plain = ONE_VM.replace("memory =", "guest = \"qemu\"\nmemory =");
        for (text, want) in [
            (format!("{QEMU_VM}device = \"pci\"\n"), "duplicate key"),
            (QEMU_VM.replace("\"doorbell\"", "\"pci\""), "device = \"pci\" is unknown"),
            (format!("{QEMU_VM}vectors = 1\n"), "vectors = 1 is outside 2..=64"),
            (format!("{QEMU_VM}vectors = 65\n"), "vectors = 65"),
            (format!("{QEMU_VM}vectors = -1\n"), "vectors = -1"),
            (format!("{QEMU_VM}socket = \"vm1.sock\"\n"), "socket = \"vm1.sock\" must be an absolute path"),
            (
                format!("{QEMU_VM}socket = \"/{}\"\n", "s".repeat(120)),
                "longer than 107",
            ),
            (format!("{QEMU_VM}nudge = true\n"), "nudge = true needs qmp"),
            (format!("{QEMU_VM}qmp = \"q.sock\"\n"), "qmp = \"q.sock\""),
            (format!("{QEMU_VM}colour = 1\n"), "colour"),
            (
                format!("{plain}[vm.ivshmem]\nsocket = \"/run/a.sock\"\n"),
                "socket applies to device = \"doorbell\" only",
            ),
            (
                format!("{plain}[vm.ivshmem]\nvectors = 2\n"),
                "vectors applies to device = \"doorbell\" only",
            ),
            (
                plain.replace("region = \"/dev/shm/fairgpu-vm1\"\n", ""),
                "an ivshmem-plain device maps the region file",
            ),
            (
                ONE_VM.replace("region = \"/dev/shm/fairgpu-vm1\"\n", ""),
                "region is missing",
            ),
            (
                format!("{ONE_VM}[vm.ivshmem]\ndevice = \"doorbell\"\n"),
                "applies to guest = \"qemu\" only",
            ),
            (
                format!("{QEMU_VM}socket = \"/tmp/x/control.sock\"\n"),
                "ivshmem socket /tmp/x/control.sock is the daemon's control socket",
            ),
            (
                format!("{QEMU_VM}qmp = \"/tmp/x/vm1.ivshmem.sock\"\n"),
                "the QMP socket /tmp/x/vm1.ivshmem.sock is also the ivshmem socket of this VM",
            ),
            (
                format!(
                    "{QEMU_VM}\n[[vm]]\nname = \"vm2\"\nmemory = 1\nguest = \"qemu\"\n[vm.ivshmem]\ndevice = \"doorbell\"\nsocket = \"/tmp/x/vm1.ivshmem.sock\"\n"
                ),
                "is also the ivshmem socket of vm \"vm1\"",
            ),
            (
                format!(
                    "{QEMU_VM}qmp = \"/dev/shm/r2\"\n\n[[vm]]\nname = \"vm2\"\nmemory = 1\nregion = \"/dev/shm/r2\"\n"
                ),
                "the region /dev/shm/r2 is also the QMP socket of vm \"vm1\"",
            ),
        ] {
            let e = err(&text);
            assert!(e.contains(want), "{text}\n=> {e}");
            assert!(
                e.contains("vm1") || e.contains("vm2") || e.contains("1st [[vm]]"),
                "the VM is named: {e}"
            );
        }
    }

    #[test]
    fn the_fingerprint_follows_the_bytes() {
        let a = parse(ONE_VM).unwrap().fingerprint;
        assert_eq!(a, parse(ONE_VM).unwrap().fingerprint);
        assert_ne!(
            a,
            parse(&format!("{ONE_VM}\n# edited\n")).unwrap().fingerprint
        );
    }
}
