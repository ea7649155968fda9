//! `fairgpu __workload`: a closed-loop CUDA workload generator, a real
//! driver-API client.
//!
//! It loads `libcuda.so.1` the way every CUDA program does (fairgpu's guest
//! library when `LD_LIBRARY_PATH` points at it; see [`driver`]), loads
//! fairgpu's own PTX, and issues `fairgpu_spin` kernels, small asynchronous
//! copies and small synchronous round trips in the mix of a workload
//! profile: the benchmarks of FairGV's Table 3, NEON's Throttle, or a custom
//! mix. Without the guest library it can also speak fairgpu's protocol
//! directly ([`ClientKind::Rust`], the same calls through
//! `fairgpu_frontend::cuda::Cuda`).
//!
//! # The call mix
//!
//! A profile gives the kernel size `K` and, per 10 ms of the program's own
//! run time when it runs alone, `A` asynchronous calls and `S` synchronous
//! calls. The asynchronous calls are kernel launches and async copies: the
//! kernels that fit are `k = min(A, 10 ms / K)` per 10 ms and the rest,
//! `A - k`, are copies. Per kernel the generator therefore issues
//! `(A - k) / k` copies and `S / k` synchronous calls, spread evenly by
//! accumulators. `--kernel-us` changes the kernel's duration but not this
//! per-kernel mix (the same program on a larger input). A synchronous call
//! is a 4-byte `cuMemcpyDtoH`: on the legacy stream it waits for the
//! kernels queued before it, so a program with one synchronous call per
//! kernel runs them one at a time, as the interactive benchmarks do.
//!
//! The generator is closed-loop: it issues as fast as the system lets it,
//! so its throughput (kernels per second, device time per second) is what
//! fairness is measured by. Flow control bounds the work it has queued on
//! the device, as a real driver's bounded launch queue does: an event is
//! recorded after every batch of `window`/[`FLOW_EVENTS`] kernels and,
//! before it, the generator waits for the one recorded [`FLOW_EVENTS`]
//! batches earlier, so at most `window` kernels plus one batch are ever
//! queued. The window ([`window`]) holds [`WINDOW_NS`] of device time, at
//! least [`DEFAULT_WINDOW`] and at most [`MAX_WINDOW`] kernels. These waits are counted apart from the profile's
//! synchronous calls.
//!
//! `--period-ms P --job-kernels N` makes it periodic instead, as
//! TimeGraph's real-time tasks are: a job of N kernels and one synchronous
//! call is released every P ms (at fixed instants from the start), and its
//! response time, from its release to the synchronous call's return, is
//! recorded; it meets its deadline if that is at most P. A job released
//! while the previous one still runs starts when it ends (its response
//! counts from its release).
//!
//! `--sleep-ratio R` makes any profile non-saturating, as NEON's Throttle
//! and FairGV's Fig. 10 do: after each kernel the generator waits for it
//! and sleeps `K × R / (1 − R)`, so that sleeping takes the fraction `R` of
//! the time spent sleeping or computing. Sleeps overshoot (timer slack,
//! wake-up latency); the overshoot is carried over and taken off the next
//! sleeps, so the total stays what the ratio asks. The round trip of the
//! wait itself adds to the computing part: alone, such a VM keeps the
//! device busy somewhat less than `1 − R` of the time.

mod driver;
pub mod opencl;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fairgpu_frontend::cuda::{Cuda, Kernel};
use fairgpu_frontend::{CallError, Channel, GuestRegion, WaitConfig};
use serde::{Deserialize, Serialize};

pub use driver::{Driver, COPY_BYTES, LIBCUDA};

/// fairgpu's PTX kernels: `fairgpu_spin(ns)` busy-waits `ns` nanoseconds.
pub const KERNELS_PTX: &str = include_str!("../kernels/fairgpu.ptx");
/// The kernel every profile launches.
pub const SPIN_KERNEL: &str = "fairgpu_spin";
/// Longest kernel a profile uses: LMD's 1.9 s kernels are capped here, so
/// one launch does not hold a non-preemptive device for seconds.
pub const MAX_PROFILE_KERNEL_US: f64 = 10_000.0;
/// Longest kernel `--kernel-us` asks for (the long-kernel experiments).
pub const MAX_KERNEL_US: f64 = 1_000_000.0;
/// Kernels the generator keeps queued on the device at least (see
/// [`window`]).
pub const DEFAULT_WINDOW: u32 = 32;
/// Device time the generator keeps queued, where that is more kernels than
/// [`DEFAULT_WINDOW`]: two 6 ms slices, so a VM of short kernels can fill
/// its grant from what it queued while it waited.
pub const WINDOW_NS: u64 = 12_000_000;
/// Most kernels queued at once, about a real driver's launch queue.
pub const MAX_WINDOW: u32 = 1024;

/// Kernels the generator keeps queued for kernels of `kernel_ns`:
/// [`WINDOW_NS`] of device time, within [`DEFAULT_WINDOW`]..=[`MAX_WINDOW`],
/// a multiple of [`FLOW_EVENTS`].
pub fn window(kernel_ns: u64) -> u32 {
    let k = WINDOW_NS.div_ceil(kernel_ns.max(1));
    let w = k.clamp(u64::from(DEFAULT_WINDOW), u64::from(MAX_WINDOW)) as u32;
    w.next_multiple_of(FLOW_EVENTS as u32).min(MAX_WINDOW)
}
/// Flow-control events (the window is split into this many batches).
pub const FLOW_EVENTS: usize = 4;
/// The event recorded before the first measured kernel.
const EV_START: usize = FLOW_EVENTS;
/// The event recorded after the last kernel.
const EV_END: usize = FLOW_EVENTS + 1;
/// Events the generator creates.
pub const EVENTS: usize = FLOW_EVENTS + 2;
/// Throttle's kernel size when `--kernel-us` is not given.
pub const THROTTLE_DEFAULT_US: f64 = 400.0;
/// The byte every copy writes to the device buffer: every synchronous
/// read must find it there (the others' results stay exact beside an
/// eater or a runaway).
pub const FILL: u8 = 0x5a;

/// Checks a word read back from the device buffer.
pub fn check_word(call: &'static str, word: [u8; 4]) -> Result<(), WorkloadError> {
    if word == [FILL; 4] {
        Ok(())
    } else {
        Err(WorkloadError::WrongData {
            call,
            got: u32::from_le_bytes(word),
        })
    }
}

/// The Eater's kernel when `--kernel-us` is not given: a minute, longer
/// than any runaway guard (SimGpu's longest modelled kernel), standing for
/// a persistent kernel whose flag never comes.
pub const EATER_DEFAULT_US: f64 = 60_000_000.0;

/// Why the generator could not run.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The loader did not find `libcuda.so.1`.
    #[error(
        "cannot load libcuda.so.1 ({why}); put fairgpu's guest library on LD_LIBRARY_PATH \
         as libcuda.so.1 (build it: cargo build --release -p fairgpu-guest; see docs/guest.md)"
    )]
    NoLibcuda {
        /// The loader's message.
        why: String,
    },
    /// The library lacks an entry point.
    #[error("libcuda.so.1 has no entry point {name}")]
    Symbol {
        /// The entry point.
        name: &'static str,
    },
    /// A driver call failed.
    #[error("{call} failed: {name} ({code})")]
    Cuda {
        /// The entry point.
        call: &'static str,
        /// The `CUresult`.
        code: i32,
        /// Its name, from `cuGetErrorName`.
        name: String,
    },
    /// A call over fairgpu's protocol failed.
    #[error("{call} failed")]
    Call {
        /// The driver call it stands for.
        call: &'static str,
        /// Why.
        #[source]
        source: CallError,
    },
    /// The region could not be opened or a channel claimed.
    #[error("fairgpu region: {0}")]
    Region(String),
    /// Something in setting up the generator.
    #[error("setup: {0}")]
    Setup(&'static str),
    /// A synchronous read returned other bytes than every write put there:
    /// the device or the system lost this VM's data.
    #[error("{call} read {got:#010x} back, but only {:#010x} was ever written", u32::from_le_bytes([FILL; 4]))]
    WrongData {
        /// The driver call.
        call: &'static str,
        /// The word read.
        got: u32,
    },
    /// The profile or its options are invalid.
    #[error("{0}")]
    Profile(String),
}

/// One workload profile.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Profile {
    /// Name (upper case for Table 3's benchmarks).
    pub name: &'static str,
    /// Kernel size, µs (capped at [`MAX_PROFILE_KERNEL_US`]).
    pub kernel_us: f64,
    /// Asynchronous calls per 10 ms of its own run time alone.
    pub async_per_10ms: f64,
    /// Synchronous calls per 10 ms of its own run time alone.
    pub sync_per_10ms: f64,
    /// CPU–GPU interactive in FairGV's sense (> 10 sync calls per 10 ms).
    pub interactive: bool,
    /// What the benchmark is.
    pub about: &'static str,
}

const fn p(
    name: &'static str,
    kernel_us: f64,
    async_per_10ms: f64,
    sync_per_10ms: f64,
    about: &'static str,
) -> Profile {
    Profile {
        name,
        kernel_us,
        async_per_10ms,
        sync_per_10ms,
        interactive: sync_per_10ms > 10.0,
        about,
    }
}

/// FairGV's Table 3 (kernel µs, async and sync calls per 10 ms).
pub const TABLE3: [Profile; 12] = [
    p("CFD", 198.0, 49.8, 87.1, "Rodinia CFD solver"),
    p("HW", 10201.0, 0.8, 11.2, "Rodinia heart wall"),
    p("HS", 133.0, 59.5, 0.01, "Rodinia hotspot"),
    p(
        "LMD",
        MAX_PROFILE_KERNEL_US,
        0.002,
        0.06,
        "Rodinia LavaMD; its 1,908,357 us kernel is capped at 10 ms",
    ),
    p("NW", 11032.0, 2.7, 0.08, "Rodinia Needleman-Wunsch"),
    p("PF", 592.0, 0.03, 0.08, "Rodinia particle filter"),
    p("SRD1", 46.0, 247.5, 643.6, "Rodinia SRAD v1"),
    p("BS", 377.0, 26.3, 26.4, "CUDA SDK Black-Scholes"),
    p("CS", 391.0, 19.2, 19.3, "CUDA SDK convolution separable"),
    p("HG", 431.0, 39.6, 39.6, "CUDA SDK histogram"),
    p("MM", 207.0, 44.2, 0.03, "CUDA SDK matrix multiply"),
    p("SCAN", 171.0, 54.7, 54.8, "CUDA SDK scan"),
];

/// Every profile name `--profile` accepts.
pub fn profile_names() -> Vec<&'static str> {
    let mut v: Vec<&str> = TABLE3.iter().map(|p| p.name).collect();
    v.extend(["Throttle", "Eater", "custom"]);
    v
}

/// Table 3's profile `name` (case-insensitive).
pub fn table3(name: &str) -> Option<Profile> {
    TABLE3
        .iter()
        .copied()
        .find(|p| p.name.eq_ignore_ascii_case(name))
}

/// What the generator issues per kernel.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    /// The profile's name.
    #[serde(skip)]
    pub profile: &'static str,
    /// Each kernel's duration, ns.
    pub kernel_ns: u64,
    /// Async copies per kernel.
    pub copies_per_kernel: f64,
    /// Synchronous calls per kernel.
    pub syncs_per_kernel: f64,
    /// Sleep after each kernel (which is waited for first), ns; 0: none.
    pub sleep_ns: u64,
    /// Blocks per launch: the kernel's duration is the whole grid's (one
    /// block per launch but for the long-kernel experiments, whose grids
    /// can be sliced).
    #[serde(default = "one")]
    pub blocks: u32,
    /// Periodic mode: a job released every this many ns (0: closed loop).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub period_ns: u64,
    /// Periodic mode: kernels per job.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub job_kernels: u32,
}

fn one() -> u32 {
    1
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

/// Options that shape a mix.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MixOptions {
    /// Kernel duration, µs.
    pub kernel_us: Option<f64>,
    /// Async calls per 10 ms.
    pub async_per_10ms: Option<f64>,
    /// Sync calls per 10 ms.
    pub sync_per_10ms: Option<f64>,
    /// Fraction of the run spent sleeping, in [0, 1).
    pub sleep_ratio: f64,
}

impl Mix {
    /// The mix of profile `name` with `o`.
    pub fn new(name: &str, o: &MixOptions) -> Result<Mix, WorkloadError> {
        let bad = |m: String| WorkloadError::Profile(m);
        if !(0.0..1.0).contains(&o.sleep_ratio) {
            return Err(bad(format!(
                "--sleep-ratio {} must be in [0, 1): the fraction of the run spent sleeping",
                o.sleep_ratio
            )));
        }
        let (profile, base): (&'static str, Profile) = if let Some(t) = table3(name) {
            (t.name, t)
        } else if name.eq_ignore_ascii_case("throttle") {
            let k = o.kernel_us.unwrap_or(THROTTLE_DEFAULT_US);
            (
                "Throttle",
                p("Throttle", k, 10_000.0 / k.max(1e-3), 0.0, "NEON Throttle"),
            )
        } else if name.eq_ignore_ascii_case("eater") {
            let k = o.kernel_us.unwrap_or(EATER_DEFAULT_US);
            if !(k.is_finite() && (1.0..=EATER_DEFAULT_US).contains(&k)) {
                return Err(bad(format!(
                    "--kernel-us {k} must be in 1..={EATER_DEFAULT_US} for the Eater"
                )));
            }
            if o.sleep_ratio > 0.0 {
                return Err(bad("the Eater does not sleep (--sleep-ratio)".into()));
            }
            let kernel_ns = (k * 1e3).round() as u64;
            return Ok(Mix {
                profile: "Eater",
                kernel_ns,
                copies_per_kernel: 0.0,
                syncs_per_kernel: 1.0,
                sleep_ns: 0,
                blocks: 1,
                period_ns: 0,
                job_kernels: 0,
            });
        } else if name.eq_ignore_ascii_case("custom") {
            let (Some(k), Some(a)) = (o.kernel_us, o.async_per_10ms) else {
                return Err(bad(
                    "profile custom needs --kernel-us and --async-per-10ms (and optionally --sync-per-10ms)"
                        .into(),
                ));
            };
            (
                "custom",
                p("custom", k, a, o.sync_per_10ms.unwrap_or(0.0), "custom"),
            )
        } else {
            return Err(bad(format!(
                "unknown profile {name:?}; known: {}",
                profile_names().join(", ")
            )));
        };
        let table_k = base.kernel_us.min(MAX_PROFILE_KERNEL_US);
        let asyncs = o.async_per_10ms.unwrap_or(base.async_per_10ms);
        let syncs = o.sync_per_10ms.unwrap_or(base.sync_per_10ms);
        let kernel_us = o.kernel_us.unwrap_or(table_k);
        for (what, v) in [
            ("--kernel-us", kernel_us),
            ("--async-per-10ms", asyncs),
            ("--sync-per-10ms", syncs),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(bad(format!("{what} {v} must be a finite number >= 0")));
            }
        }
        if !(0.001..=MAX_KERNEL_US).contains(&kernel_us) {
            return Err(bad(format!(
                "--kernel-us {kernel_us} must be in 0.001..={MAX_KERNEL_US}"
            )));
        }
        if asyncs <= 0.0 || table_k <= 0.0 {
            return Err(bad(format!(
                "profile {profile} issues no kernels (async calls per 10 ms = {asyncs})"
            )));
        }
        let kernels_per_10ms = asyncs.min(10_000.0 / table_k);
        let kernel_ns = (kernel_us * 1e3).round() as u64;
        let r = o.sleep_ratio;
        Ok(Mix {
            profile,
            kernel_ns,
            copies_per_kernel: (asyncs - kernels_per_10ms) / kernels_per_10ms,
            syncs_per_kernel: syncs / kernels_per_10ms,
            sleep_ns: (kernel_ns as f64 * r / (1.0 - r)).round() as u64,
            blocks: 1,
            period_ns: 0,
            job_kernels: 0,
        })
    }
}

/// The driver calls the generator makes; [`Driver`] and [`RustClient`] make
/// them for real, tests with a fake.
pub trait GpuClient {
    /// Launches `fairgpu_spin(ns)` on the generator's stream.
    fn launch_spin(&mut self, ns: u64, blocks: u32) -> Result<(), WorkloadError>;
    /// Queues a small host-to-device copy on the stream.
    fn copy_async(&mut self) -> Result<(), WorkloadError>;
    /// A synchronous 4-byte device-to-host copy (waits for queued work).
    fn read_back(&mut self) -> Result<(), WorkloadError>;
    /// `cuStreamSynchronize` on the stream.
    fn stream_sync(&mut self) -> Result<(), WorkloadError>;
    /// Records event `i` on the stream.
    fn record(&mut self, i: usize) -> Result<(), WorkloadError>;
    /// Waits for event `i`.
    fn event_sync(&mut self, i: usize) -> Result<(), WorkloadError>;
    /// Milliseconds between completed events `a` and `b`.
    fn elapsed_ms(&mut self, a: usize, b: usize) -> Result<f32, WorkloadError>;
    /// `cuCtxSynchronize`.
    fn ctx_sync(&mut self) -> Result<(), WorkloadError>;
}

impl GpuClient for Driver {
    fn launch_spin(&mut self, ns: u64, blocks: u32) -> Result<(), WorkloadError> {
        self.launch(ns, blocks)
    }
    fn copy_async(&mut self) -> Result<(), WorkloadError> {
        Driver::copy_async(self)
    }
    fn read_back(&mut self) -> Result<(), WorkloadError> {
        check_word("cuMemcpyDtoH", Driver::read_back(self)?.to_le_bytes())
    }
    fn stream_sync(&mut self) -> Result<(), WorkloadError> {
        Driver::stream_sync(self)
    }
    fn record(&mut self, i: usize) -> Result<(), WorkloadError> {
        Driver::record(self, i)
    }
    fn event_sync(&mut self, i: usize) -> Result<(), WorkloadError> {
        Driver::event_sync(self, i)
    }
    fn elapsed_ms(&mut self, a: usize, b: usize) -> Result<f32, WorkloadError> {
        Driver::elapsed_ms(self, a, b)
    }
    fn ctx_sync(&mut self) -> Result<(), WorkloadError> {
        Driver::ctx_sync(self)
    }
}

/// The same calls over fairgpu's protocol, without `libcuda.so.1`.
#[derive(Debug)]
pub struct RustClient {
    cu: Cuda,
    kernel: Kernel,
    stream: u64,
    events: Vec<u64>,
    device_buf: u64,
    host_buf: Vec<u8>,
    device_name: String,
}

fn call<T>(call: &'static str, r: Result<T, CallError>) -> Result<T, WorkloadError> {
    r.map_err(|source| WorkloadError::Call { call, source })
}

impl RustClient {
    /// Claims a channel of the region named by `FAIRGPU_REGION` (or the
    /// first ivshmem device) and sets up as [`Driver::load`] does.
    pub fn connect(events: usize) -> Result<RustClient, WorkloadError> {
        let region = GuestRegion::discover().map_err(|e| WorkloadError::Region(e.to_string()))?;
        let ch = Channel::claim(region, WaitConfig::from_env())
            .map_err(|e| WorkloadError::Region(e.to_string()))?;
        let mut cu = Cuda::new(ch);
        let device_name = call("cuDeviceGetName", cu.device_name(0))?;
        let module = call("cuModuleLoadData", cu.module_load(KERNELS_PTX.as_bytes()))?;
        let kernel = call(
            "cuModuleGetFunction",
            cu.module_get_function(module, SPIN_KERNEL),
        )?;
        let stream = call("cuStreamCreate", cu.stream_create(0))?;
        let events = (0..events)
            .map(|_| call("cuEventCreate", cu.event_create(0)))
            .collect::<Result<Vec<_>, _>>()?;
        let device_buf = call("cuMemAlloc", cu.mem_alloc(COPY_BYTES as u64))?;
        let host_buf = vec![FILL; COPY_BYTES];
        call("cuMemcpyHtoD", cu.memcpy_htod(device_buf, &host_buf))?;
        Ok(RustClient {
            cu,
            kernel,
            stream,
            events,
            device_buf,
            host_buf,
            device_name,
        })
    }

    fn event(&self, i: usize) -> Result<u64, WorkloadError> {
        self.events
            .get(i)
            .copied()
            .ok_or(WorkloadError::Setup("event index out of range"))
    }
}

impl GpuClient for RustClient {
    fn launch_spin(&mut self, ns: u64, blocks: u32) -> Result<(), WorkloadError> {
        let params = call("cuLaunchKernel", self.kernel.pack(&[&ns.to_le_bytes()]))?;
        call(
            "cuLaunchKernel",
            self.cu.launch(
                self.kernel.handle,
                [blocks, 1, 1],
                [1, 1, 1],
                0,
                self.stream,
                &params,
            ),
        )
    }
    fn copy_async(&mut self) -> Result<(), WorkloadError> {
        call(
            "cuMemcpyHtoDAsync",
            self.cu
                .memcpy_htod_async(self.device_buf, &self.host_buf, self.stream),
        )
    }
    fn read_back(&mut self) -> Result<(), WorkloadError> {
        let mut word = [0u8; 4];
        call(
            "cuMemcpyDtoH",
            self.cu.memcpy_dtoh(&mut word, self.device_buf, 0),
        )?;
        check_word("cuMemcpyDtoH", word)
    }
    fn stream_sync(&mut self) -> Result<(), WorkloadError> {
        call(
            "cuStreamSynchronize",
            self.cu.stream_synchronize(self.stream),
        )
    }
    fn record(&mut self, i: usize) -> Result<(), WorkloadError> {
        let e = self.event(i)?;
        call("cuEventRecord", self.cu.event_record(e, self.stream))
    }
    fn event_sync(&mut self, i: usize) -> Result<(), WorkloadError> {
        let e = self.event(i)?;
        call("cuEventSynchronize", self.cu.event_synchronize(e))
    }
    fn elapsed_ms(&mut self, a: usize, b: usize) -> Result<f32, WorkloadError> {
        let (a, b) = (self.event(a)?, self.event(b)?);
        call("cuEventElapsedTime", self.cu.event_elapsed_ms(a, b))
    }
    fn ctx_sync(&mut self) -> Result<(), WorkloadError> {
        call("cuCtxSynchronize", self.cu.ctx_synchronize())
    }
}

/// A latency histogram with log-linear buckets (32 per power of two, so a
/// percentile is within about 3% of the exact one) and a fixed footprint.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

const SUB_BITS: u32 = 5;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; (64 << SUB_BITS) as usize],
            total: 0,
            max: 0,
        }
    }
}

impl Histogram {
    fn bucket(v: u64) -> usize {
        if v < (1 << SUB_BITS) {
            return v as usize;
        }
        let exp = 63 - v.leading_zeros();
        let mantissa = (v >> (exp - SUB_BITS)) & ((1 << SUB_BITS) - 1);
        (((exp - SUB_BITS + 1) << SUB_BITS) as u64 + mantissa) as usize
    }

    /// The largest value of bucket `b`.
    fn upper(b: usize) -> u64 {
        let b = b as u64;
        if b < (1 << SUB_BITS) {
            return b;
        }
        let exp = (b >> SUB_BITS) + u64::from(SUB_BITS) - 1;
        let mantissa = b & ((1 << SUB_BITS) - 1);
        let base = (1u64 << exp) | (mantissa << (exp - u64::from(SUB_BITS)));
        base.saturating_add((1u64 << (exp - u64::from(SUB_BITS))) - 1)
    }

    /// Adds a value.
    pub fn record(&mut self, v: u64) {
        self.counts[Self::bucket(v)] += 1;
        self.total += 1;
        self.max = self.max.max(v);
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The `q`-th percentile (0..=100): the upper end of its bucket, never
    /// above the largest value recorded; 0 when empty.
    pub fn percentile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::upper(b).min(self.max);
            }
        }
        self.max
    }
}

/// Latency percentiles, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    /// 99.9th percentile, µs.
    #[serde(default)]
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    fn of(h: &Histogram) -> Latency {
        let us = |ns: u64| ns as f64 / 1e3;
        Latency {
            p50: us(h.percentile(50.0)),
            p90: us(h.percentile(90.0)),
            p99: us(h.percentile(99.0)),
            p999: us(h.percentile(99.9)),
            max: us(h.max),
        }
    }
}

/// What a periodic run's jobs did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Periodic {
    /// Jobs released and completed.
    pub jobs: u64,
    /// Jobs that completed within their period.
    pub met: u64,
    /// Response times (release to completion), µs.
    pub response_us: Latency,
}

/// What one run of the generator did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// The profile.
    pub profile: String,
    /// "libcuda" or "rust".
    pub client: String,
    /// The library file the loader used, or the region for the Rust client.
    pub library: String,
    /// The device name the driver reported.
    pub device: String,
    /// The mix it ran.
    pub mix: Mix,
    /// Wall-clock seconds of the run, setup excluded.
    pub wall_s: f64,
    /// Kernels launched and completed.
    pub kernels: u64,
    /// Device time asked for: kernels × kernel duration, ns.
    pub device_time_requested_ns: u64,
    /// Asynchronous copies.
    pub async_copies: u64,
    /// Synchronous calls of the profile (and the waits before sleeping).
    pub sync_calls: u64,
    /// Flow-control waits.
    pub flow_waits: u64,
    /// Kernels per second.
    pub kernels_per_s: f64,
    /// Latency of the synchronous calls, µs.
    pub sync_latency_us: Latency,
    /// One kernel alone, timed with events before the run, µs.
    pub kernel_event_us: f64,
    /// Device time between the first and last kernel of the run, measured
    /// with events, ms.
    pub device_span_ms: f64,
    /// Periodic mode's jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic: Option<Periodic>,
}

/// When the generator stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StopAfter {
    /// Wall-clock time.
    pub time: Duration,
    /// Kernels (tests use this for exact counts).
    pub kernels: Option<u64>,
}

/// What [`generate`] counted.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCounts {
    /// Kernels launched (all complete when it returns), the timed one
    /// included.
    pub kernels: u64,
    /// Asynchronous copies.
    pub copies: u64,
    /// Synchronous calls.
    pub syncs: u64,
    /// Flow-control waits.
    pub flow_waits: u64,
    /// Latency of the synchronous calls.
    pub latency: Latency,
    /// The first kernel, alone, timed with events, µs.
    pub kernel_event_us: f64,
    /// Device time from the first to the last kernel of the run, ms.
    pub span_ms: f64,
    /// Wall-clock seconds of the run.
    pub wall_s: f64,
    /// Periodic mode's jobs.
    pub periodic: Option<Periodic>,
}

/// Periodic mode of [`generate`]: a job of `mix.job_kernels` kernels and a
/// synchronous call released every `mix.period_ns`.
fn generate_periodic(
    gpu: &mut dyn GpuClient,
    mix: &Mix,
    stop: StopAfter,
    sleep: &mut dyn FnMut(Duration) -> Duration,
    kernel_event_us: f64,
) -> Result<RunCounts, WorkloadError> {
    let period = Duration::from_nanos(mix.period_ns);
    let mut response = Histogram::default();
    let (mut kernels, mut syncs, mut jobs, mut met) = (1u64, 0u64, 0u64, 0u64);
    let start = Instant::now();
    let deadline = start + stop.time;
    gpu.record(EV_START)?;
    let mut release = start;
    while release < deadline && stop.kernels.is_none_or(|k| kernels < k) {
        let now = Instant::now();
        if now < release {
            sleep(release - now);
        }
        for _ in 0..mix.job_kernels.max(1) {
            gpu.launch_spin(mix.kernel_ns, mix.blocks)?;
            kernels += 1;
        }
        gpu.read_back()?;
        syncs += 1;
        jobs += 1;
        let took = release.elapsed();
        response.record(took.as_nanos() as u64);
        if took <= period {
            met += 1;
        }
        release += period;
    }
    gpu.record(EV_END)?;
    gpu.ctx_sync()?;
    let wall_s = start.elapsed().as_secs_f64();
    let span_ms = f64::from(gpu.elapsed_ms(EV_START, EV_END)?);
    let latency = Latency::of(&response);
    Ok(RunCounts {
        kernels,
        copies: 0,
        syncs,
        flow_waits: 0,
        latency,
        kernel_event_us,
        span_ms,
        wall_s,
        periodic: Some(Periodic {
            jobs,
            met,
            response_us: latency,
        }),
    })
}

/// Runs `mix` on `gpu` until `stop`; `sleep` sleeps and returns how long
/// it really slept (injected for tests).
pub fn generate(
    gpu: &mut dyn GpuClient,
    mix: &Mix,
    stop: StopAfter,
    sleep: &mut dyn FnMut(Duration) -> Duration,
) -> Result<RunCounts, WorkloadError> {
    let mut latency = Histogram::default();
    let (mut kernels, mut copies, mut syncs, mut flow_waits) = (0u64, 0u64, 0u64, 0u64);
    let mut timed = |f: &mut dyn FnMut() -> Result<(), WorkloadError>| {
        let t = Instant::now();
        f()?;
        latency.record(t.elapsed().as_nanos() as u64);
        syncs += 1;
        Ok::<(), WorkloadError>(())
    };
    // One kernel alone, timed with events: what the device says it took.
    gpu.record(EV_START)?;
    gpu.launch_spin(mix.kernel_ns, mix.blocks)?;
    gpu.record(EV_END)?;
    gpu.event_sync(EV_END)?;
    let kernel_event_us = f64::from(gpu.elapsed_ms(EV_START, EV_END)?) * 1e3;
    kernels += 1;
    if mix.period_ns > 0 {
        return generate_periodic(gpu, mix, stop, sleep, kernel_event_us);
    }

    let flow = FLOW_EVENTS as u64;
    let batch = (u64::from(window(mix.kernel_ns)) / flow).max(1);
    let (mut copy_acc, mut sync_acc) = (0.0f64, 0.0f64);
    // Batches whose event was recorded, and how many of the first ones are
    // known complete (a synchronous call drains everything before it).
    let (mut recorded, mut complete) = (0u64, 0u64);
    let mut in_batch = 0u64;
    let mut sleep_debt: i128 = 0;
    let start = Instant::now();
    let deadline = start + stop.time;
    gpu.record(EV_START)?;
    while Instant::now() < deadline && stop.kernels.is_none_or(|k| kernels < k) {
        gpu.launch_spin(mix.kernel_ns, mix.blocks)?;
        kernels += 1;
        copy_acc += mix.copies_per_kernel;
        while copy_acc >= 1.0 {
            gpu.copy_async()?;
            copies += 1;
            copy_acc -= 1.0;
        }
        sync_acc += mix.syncs_per_kernel;
        let mut drained = false;
        while sync_acc >= 1.0 {
            timed(&mut || gpu.read_back())?;
            sync_acc -= 1.0;
            drained = true;
        }
        if mix.sleep_ns > 0 {
            if !drained {
                timed(&mut || gpu.stream_sync())?;
                drained = true;
            }
            // Sleep what is owed: this kernel's share plus what earlier
            // sleeps fell short of (negative after an overshoot).
            let want = i128::from(mix.sleep_ns) + sleep_debt;
            if want > 0 {
                let slept = sleep(Duration::from_nanos(want as u64));
                sleep_debt = want - slept.as_nanos() as i128;
            } else {
                sleep_debt = want;
            }
        }
        if drained {
            complete = recorded;
            in_batch = 0;
            continue;
        }
        in_batch += 1;
        if in_batch == batch {
            in_batch = 0;
            let slot = (recorded % flow) as usize;
            // The slot's previous batch must be done before the slot is
            // reused: at most FLOW_EVENTS batches are ever queued.
            if recorded >= flow && recorded - flow >= complete {
                gpu.event_sync(slot)?;
                flow_waits += 1;
                complete = recorded - flow + 1;
            }
            gpu.record(slot)?;
            recorded += 1;
        }
    }
    gpu.record(EV_END)?;
    gpu.ctx_sync()?;
    let wall_s = start.elapsed().as_secs_f64();
    let span_ms = f64::from(gpu.elapsed_ms(EV_START, EV_END)?);
    Ok(RunCounts {
        kernels,
        copies,
        syncs,
        flow_waits,
        latency: Latency::of(&latency),
        kernel_event_us,
        span_ms,
        wall_s,
        periodic: None,
    })
}

/// The Eater: a GPU eater in GLoop's sense. Each round claims a channel,
/// launches one kernel of `mix.kernel_ns` (a persistent kernel whose stop
/// flag never comes, by default a minute) and synchronizes. A runaway guard
/// ends it with `CUDA_ERROR_LAUNCH_TIMEOUT`, which leaves the context
/// failed, so the round ends and the next one starts on a fresh channel,
/// as a job restarted by its user would. `kernels` counts the rounds, the
/// synchronous calls' latency is how long each kernel held on; a round
/// whose kernel completed (no guard) counts too. Any other error ends the
/// run: the Eater is measured, not excused.
pub fn eat(mix: &Mix, stop: StopAfter) -> Result<RunCounts, WorkloadError> {
    let mut held = Histogram::default();
    let (mut rounds, mut claim_failures) = (0u64, 0u64);
    let start = Instant::now();
    let deadline = start + stop.time;
    while Instant::now() < deadline && stop.kernels.is_none_or(|k| rounds < k) {
        // A fresh worker may still be starting after the last round (the
        // GPU's guard ends the worker process): retry the claim briefly.
        let mut c = match RustClient::connect(EVENTS) {
            Ok(c) => c,
            Err(e) if claim_failures < 200 => {
                claim_failures += 1;
                tracing::debug!(error = %e, "the Eater's claim failed; retrying");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => return Err(e),
        };
        claim_failures = 0;
        c.launch_spin(mix.kernel_ns, mix.blocks)?;
        let t = Instant::now();
        let r = c.ctx_sync();
        held.record(t.elapsed().as_nanos() as u64);
        match r {
            Ok(()) => {}
            Err(WorkloadError::Call { source, .. })
                if source.status() == fairgpu_protocol::Status::LAUNCH_TIMEOUT => {}
            Err(e) => return Err(e),
        }
        rounds += 1;
    }
    let latency = Latency::of(&held);
    Ok(RunCounts {
        kernels: rounds,
        copies: 0,
        syncs: rounds,
        flow_waits: 0,
        latency,
        kernel_event_us: 0.0,
        span_ms: 0.0,
        wall_s: start.elapsed().as_secs_f64(),
        periodic: None,
    })
}

/// Which client the generator uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClientKind {
    /// `libcuda.so.1` through the loader: fairgpu's guest library (or
    /// NVIDIA's driver, natively).
    Libcuda,
    /// fairgpu's Rust client over the region, without `libcuda.so.1`.
    Rust,
    /// The same calls as OpenCL requests over the region
    /// ([`opencl::ClClient`]): kernels, copies and events on the host's
    /// OpenCL platform.
    Opencl,
}

impl ClientKind {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            ClientKind::Libcuda => "libcuda",
            ClientKind::Rust => "rust",
            ClientKind::Opencl => "opencl",
        }
    }
}

/// `fairgpu __workload` options.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkloadArgs {
    /// The profile: a Table 3 benchmark (CFD, HW, HS, LMD, NW, PF, SRD1, BS,
    /// CS, HG, MM, SCAN), Throttle, Eater (a GPU eater: one kernel of a
    /// minute per round, restarted on a fresh channel after the runaway
    /// guard ends it; needs --client rust) or custom.
    #[arg(long)]
    pub profile: String,
    /// Kernel duration in µs (the profile's by default).
    #[arg(long)]
    pub kernel_us: Option<f64>,
    /// Asynchronous calls per 10 ms of run time alone.
    #[arg(long = "async-per-10ms")]
    pub async_per_10ms: Option<f64>,
    /// Synchronous calls per 10 ms of run time alone.
    #[arg(long = "sync-per-10ms")]
    pub sync_per_10ms: Option<f64>,
    /// Fraction of the run spent sleeping after each kernel, in [0, 1).
    #[arg(long, default_value_t = 0.0)]
    pub sleep_ratio: f64,
    /// How long to issue work.
    #[arg(long)]
    pub seconds: f64,
    /// Blocks per launch (one block's worth of device time each when on a
    /// GPU, the whole grid's `--kernel-us` on SimGpu); for grids the
    /// daemon can slice.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=2_147_483_647))]
    pub blocks: u32,
    /// Periodic mode: release a job every this many ms (TimeGraph's
    /// real-time task) instead of issuing in a closed loop.
    #[arg(long, value_name = "MS")]
    pub period_ms: Option<f64>,
    /// Periodic mode: kernels per job (each job ends with one synchronous
    /// call, whose return is its completion).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub job_kernels: u32,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
    /// How to reach the GPU.
    #[arg(long, value_enum, default_value_t = ClientKind::Libcuda)]
    pub client: ClientKind,
}

/// Runs the generator as `a` asks and prints its report as one JSON line.
pub fn run(a: &WorkloadArgs) -> anyhow::Result<()> {
    if !(a.seconds > 0.0 && a.seconds <= 86_400.0) {
        anyhow::bail!("--seconds must be in (0, 86400]");
    }
    let mut mix = Mix::new(
        &a.profile,
        &MixOptions {
            kernel_us: a.kernel_us,
            async_per_10ms: a.async_per_10ms,
            sync_per_10ms: a.sync_per_10ms,
            sleep_ratio: a.sleep_ratio,
        },
    )?;
    mix.blocks = a.blocks;
    if let Some(ms) = a.period_ms {
        if !(ms.is_finite() && (0.1..=60_000.0).contains(&ms)) {
            anyhow::bail!("--period-ms {ms} must be in 0.1..=60000");
        }
        if a.sleep_ratio > 0.0 {
            anyhow::bail!("--period-ms and --sleep-ratio exclude each other");
        }
        mix.period_ns = (ms * 1e6).round() as u64;
        mix.job_kernels = a.job_kernels;
    }
    let stop = StopAfter {
        time: Duration::from_secs_f64(a.seconds),
        kernels: None,
    };
    let mut sleep = |d: Duration| {
        let t = Instant::now();
        std::thread::sleep(d);
        t.elapsed()
    };
    let (counts, library, device) = match a.client {
        _ if mix.profile == "Eater" => {
            if a.client != ClientKind::Rust {
                anyhow::bail!(
                    "the Eater needs --client rust: after a runaway guard ends its kernel the \
                     context stays failed, and each round claims a fresh channel, as a restarted \
                     program would"
                );
            }
            if a.period_ms.is_some() {
                anyhow::bail!("the Eater is not periodic (--period-ms)");
            }
            let counts = eat(&mix, stop)?;
            let region = std::env::var(fairgpu_frontend::REGION_ENV).unwrap_or_default();
            (counts, region, String::new())
        }
        ClientKind::Libcuda => {
            let mut d = Driver::load(KERNELS_PTX, SPIN_KERNEL, EVENTS)?;
            let counts = generate(&mut d, &mix, stop, &mut sleep)?;
            (counts, d.path().to_owned(), d.device_name().to_owned())
        }
        ClientKind::Rust => {
            let mut c = RustClient::connect(EVENTS)?;
            let counts = generate(&mut c, &mix, stop, &mut sleep)?;
            let region = std::env::var(fairgpu_frontend::REGION_ENV).unwrap_or_default();
            (counts, region, c.device_name.clone())
        }
        ClientKind::Opencl => {
            let mut c = opencl::ClClient::connect(EVENTS)?;
            let counts = generate(&mut c, &mix, stop, &mut sleep)?;
            let region = std::env::var(fairgpu_frontend::REGION_ENV).unwrap_or_default();
            (counts, region, "the host's OpenCL device".to_owned())
        }
    };
    let report = WorkloadReport {
        profile: mix.profile.to_owned(),
        client: a.client.name().to_owned(),
        library,
        device,
        mix,
        wall_s: counts.wall_s,
        kernels: counts.kernels,
        device_time_requested_ns: counts.kernels.saturating_mul(mix.kernel_ns),
        async_copies: counts.copies,
        sync_calls: counts.syncs,
        flow_waits: counts.flow_waits,
        kernels_per_s: counts.kernels as f64 / counts.wall_s.max(1e-9),
        sync_latency_us: counts.latency,
        kernel_event_us: counts.kernel_event_us,
        device_span_ms: counts.span_ms,
        periodic: counts.periodic,
    };
    let line = serde_json::to_string(&report)?;
    if let Some(path) = &a.report {
        std::fs::write(path, format!("{line}\n"))
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    println!("{line}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_eater_runs_one_kernel_longer_than_any_guard_and_reads_are_checked() {
        let m = Mix::new("eater", &MixOptions::default()).expect("eater");
        assert_eq!(m.profile, "Eater");
        assert_eq!(m.kernel_ns, 60_000_000_000);
        assert_eq!((m.blocks, m.sleep_ns), (1, 0));
        let sleepy = MixOptions {
            sleep_ratio: 0.5,
            ..MixOptions::default()
        };
        assert!(Mix::new("Eater", &sleepy).is_err());
        let too_long = MixOptions {
            kernel_us: Some(EATER_DEFAULT_US * 2.0),
            ..MixOptions::default()
        };
        assert!(Mix::new("Eater", &too_long).is_err());
        assert!(check_word("cuMemcpyDtoH", [FILL; 4]).is_ok());
        let e = check_word("cuMemcpyDtoH", [FILL, FILL, 0, FILL]).expect_err("lost data");
        assert!(
            matches!(
                e,
                WorkloadError::WrongData {
                    got: 0x5a00_5a5a,
                    ..
                }
            ),
            "{e}"
        );
    }

    /// Records calls and models completion: a synchronous call completes
    /// everything queued, an event wait what was queued before its record.
    #[derive(Debug, Default)]
    struct Fake {
        launched_ns: Vec<u64>,
        copies: u64,
        read_backs: u64,
        stream_syncs: u64,
        event_syncs: u64,
        done: u64,
        recorded_at: [u64; EVENTS],
        max_queued: u64,
    }

    impl Fake {
        fn launched(&self) -> u64 {
            self.launched_ns.len() as u64
        }
    }

    impl GpuClient for Fake {
        fn launch_spin(&mut self, ns: u64, _blocks: u32) -> Result<(), WorkloadError> {
            self.launched_ns.push(ns);
            self.max_queued = self.max_queued.max(self.launched() - self.done);
            Ok(())
        }
        fn copy_async(&mut self) -> Result<(), WorkloadError> {
            self.copies += 1;
            Ok(())
        }
        fn read_back(&mut self) -> Result<(), WorkloadError> {
            self.read_backs += 1;
            self.done = self.launched();
            Ok(())
        }
        fn stream_sync(&mut self) -> Result<(), WorkloadError> {
            self.stream_syncs += 1;
            self.done = self.launched();
            Ok(())
        }
        fn record(&mut self, i: usize) -> Result<(), WorkloadError> {
            self.recorded_at[i] = self.launched();
            Ok(())
        }
        fn event_sync(&mut self, i: usize) -> Result<(), WorkloadError> {
            self.event_syncs += 1;
            self.done = self.done.max(self.recorded_at[i]);
            Ok(())
        }
        fn elapsed_ms(&mut self, _: usize, _: usize) -> Result<f32, WorkloadError> {
            Ok(0.25)
        }
        fn ctx_sync(&mut self) -> Result<(), WorkloadError> {
            self.done = self.launched();
            Ok(())
        }
    }

    fn run_fake(profile: &str, o: MixOptions, kernels: u64) -> (Fake, RunCounts, u64) {
        let mix = Mix::new(profile, &o).unwrap();
        let mut fake = Fake::default();
        let mut slept = 0u64;
        let counts = generate(
            &mut fake,
            &mix,
            StopAfter {
                time: Duration::from_secs(3600),
                kernels: Some(kernels),
            },
            &mut |d| {
                slept += d.as_nanos() as u64;
                d
            },
        )
        .unwrap();
        (fake, counts, slept)
    }

    #[test]
    fn periodic_jobs_are_a_batch_and_one_synchronous_call() {
        let mut mix = Mix::new("MM", &MixOptions::default()).unwrap();
        // An hour: the fake sleeps cost nothing, and no job is ever late.
        let hour = Duration::from_secs(3600);
        mix.period_ns = hour.as_nanos() as u64;
        mix.job_kernels = 3;
        let mut fake = Fake::default();
        let mut slept = Vec::new();
        let counts = generate(
            &mut fake,
            &mix,
            StopAfter {
                time: hour * 10,
                kernels: Some(1 + 3 * 4),
            },
            &mut |d| {
                slept.push(d);
                d
            },
        )
        .unwrap();
        let p = counts.periodic.unwrap();
        // The timed kernel, then four jobs of three.
        assert_eq!(counts.kernels, 13);
        assert_eq!(fake.launched(), 13);
        assert_eq!((p.jobs, fake.read_backs, counts.syncs), (4, 4, 4));
        // The fake device answers at once: every job is on time, and the
        // generator waited for each release after the first (the fake
        // sleeps return at once, so the k-th release is k hours away).
        assert_eq!(p.met, 4);
        assert_eq!(slept.len(), 3);
        for (k, d) in slept.iter().enumerate() {
            let due = hour * (k as u32 + 1);
            assert!(
                *d <= due && *d > due - Duration::from_secs(60),
                "{k}: {d:?}"
            );
        }
        assert_eq!(fake.copies, 0);
    }

    #[test]
    fn table3_mixes() {
        let bs = Mix::new("bs", &MixOptions::default()).unwrap();
        assert_eq!(bs.kernel_ns, 377_000);
        // 26.3 async calls per 10 ms and 377 us kernels: all are kernels.
        assert_eq!(bs.copies_per_kernel, 0.0);
        assert!((bs.syncs_per_kernel - 26.4 / 26.3).abs() < 1e-12);
        // SRD1: 10 ms hold 217.4 kernels of 46 us; the other async calls
        // are copies.
        let srd = Mix::new("SRD1", &MixOptions::default()).unwrap();
        let k = 10_000.0 / 46.0;
        assert!((srd.copies_per_kernel - (247.5 - k) / k).abs() < 1e-9);
        assert!((srd.syncs_per_kernel - 643.6 / k).abs() < 1e-9);
        // LMD is capped.
        assert_eq!(
            Mix::new("LMD", &MixOptions::default()).unwrap().kernel_ns,
            10_000_000
        );
        // --kernel-us changes the duration, not the mix.
        let mm = Mix::new("MM", &MixOptions::default()).unwrap();
        let big = Mix::new(
            "MM",
            &MixOptions {
                kernel_us: Some(1605.0),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(big.kernel_ns, 1_605_000);
        assert_eq!(
            (big.copies_per_kernel, big.syncs_per_kernel),
            (mm.copies_per_kernel, mm.syncs_per_kernel)
        );
        for p in TABLE3 {
            assert_eq!(p.interactive, p.sync_per_10ms > 10.0, "{}", p.name);
            Mix::new(p.name, &MixOptions::default()).unwrap();
        }
    }

    #[test]
    fn bad_options_are_refused() {
        let e = |name: &str, o: MixOptions| Mix::new(name, &o).unwrap_err().to_string();
        assert!(e("nope", MixOptions::default()).contains("unknown profile"));
        assert!(e("custom", MixOptions::default()).contains("--kernel-us"));
        let ratio = MixOptions {
            sleep_ratio: 1.0,
            ..Default::default()
        };
        assert!(e("MM", ratio).contains("--sleep-ratio"));
        let zero = MixOptions {
            kernel_us: Some(100.0),
            async_per_10ms: Some(0.0),
            ..Default::default()
        };
        assert!(e("custom", zero).contains("no kernels"));
        let neg = MixOptions {
            kernel_us: Some(-1.0),
            ..Default::default()
        };
        assert!(e("Throttle", neg).contains("--kernel-us"));
    }

    #[test]
    fn the_generator_keeps_the_profile_ratio() {
        // BS: about one synchronous call per kernel, no copies.
        let (fake, counts, _) = run_fake("BS", MixOptions::default(), 1001);
        assert_eq!(counts.kernels, 1001);
        assert_eq!(fake.launched_ns.len(), 1001);
        assert!(fake.launched_ns.iter().all(|&ns| ns == 377_000));
        // 1000 kernels after the timed one, 26.4/26.3 sync calls each.
        assert_eq!(fake.read_backs, (1000.0 * 26.4 / 26.3f64).floor() as u64);
        assert_eq!(counts.syncs, fake.read_backs);
        assert_eq!(fake.copies, 0);
        assert!(fake.max_queued <= 2, "{}", fake.max_queued);
        assert_eq!(counts.kernel_event_us, 250.0);

        // SRD1: copies and several synchronous calls per kernel.
        let (fake, counts, _) = run_fake("SRD1", MixOptions::default(), 2001);
        let k: f64 = 10_000.0 / 46.0;
        assert_eq!(fake.copies, (2000.0 * (247.5 - k) / k).floor() as u64);
        assert_eq!(counts.syncs, (2000.0 * 643.6 / k).floor() as u64);
    }

    #[test]
    fn the_window_holds_two_slices_of_work_within_bounds() {
        assert_eq!(window(21_000), 572);
        assert_eq!(window(1_605_000), DEFAULT_WINDOW);
        assert_eq!(window(1), MAX_WINDOW);
        assert_eq!(window(0), MAX_WINDOW);
        for k in [1u64, 999, 21_000, 46_000, 133_000, 10_000_000] {
            assert_eq!(window(k) % FLOW_EVENTS as u32, 0, "{k}");
        }
    }

    #[test]
    fn flow_control_bounds_the_queue() {
        // MM syncs once per ~1473 kernels: flow control keeps the queue
        // within the window in between.
        let (fake, counts, _) = run_fake("MM", MixOptions::default(), 5000);
        assert!(counts.flow_waits > 100, "{}", counts.flow_waits);
        let w = u64::from(window(207_000));
        assert_eq!(w, 60, "12 ms of 207 us kernels, a multiple of 4");
        let batch = w / FLOW_EVENTS as u64;
        assert_eq!(fake.max_queued, w + batch);
        // The timed first kernel waits for its event too.
        assert_eq!(fake.event_syncs, counts.flow_waits + 1);
    }

    #[test]
    fn sleep_ratio_sleeps_its_share() {
        let o = MixOptions {
            kernel_us: Some(200.0),
            sleep_ratio: 0.75,
            ..Default::default()
        };
        let (fake, counts, slept) = run_fake("Throttle", o, 101);
        // 100 kernels, each waited for, then 600 us of sleep: 75% of
        // 800 us.
        assert_eq!(fake.stream_syncs, 100);
        assert_eq!(counts.syncs, 100);
        assert_eq!(slept, 100 * 600_000);
        assert_eq!(counts.flow_waits, 0);
    }

    #[test]
    fn sleep_overshoot_is_taken_off_later_sleeps() {
        let mix = Mix::new(
            "Throttle",
            &MixOptions {
                kernel_us: Some(100.0),
                sleep_ratio: 0.5,
                ..Default::default()
            },
        )
        .unwrap();
        let mut fake = Fake::default();
        let (mut asked, mut slept) = (Vec::new(), 0u64);
        generate(
            &mut fake,
            &mix,
            StopAfter {
                time: Duration::from_secs(3600),
                kernels: Some(11),
            },
            // Every sleep overshoots by 30 us.
            &mut |d| {
                asked.push(d.as_nanos() as u64);
                slept += d.as_nanos() as u64 + 30_000;
                d + Duration::from_micros(30)
            },
        )
        .unwrap();
        assert_eq!(asked[0], 100_000);
        assert_eq!(asked[1], 70_000, "the overshoot comes off the next sleep");
        // Ten sleeps of 100 us owed; at most one overshoot beyond it.
        assert!((1_000_000..=1_030_000).contains(&slept), "{slept}");
    }

    #[test]
    fn histogram_percentiles_are_close() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(50.0), 0);
        for v in 1..=100_000u64 {
            h.record(v * 10);
        }
        for (q, want) in [(50.0, 500_000.0), (90.0, 900_000.0), (99.0, 990_000.0)] {
            let got = h.percentile(q) as f64;
            assert!((got - want).abs() / want < 0.04, "p{q}: {got} vs {want}");
        }
        assert_eq!(h.percentile(100.0), 1_000_000);
        assert_eq!(h.len(), 100_000);
        for v in [0, 1, 31, 32, 33, 1000, u64::MAX / 2, u64::MAX] {
            let b = Histogram::bucket(v);
            assert!(Histogram::upper(b) >= v, "{v}");
            assert!(b == 0 || Histogram::upper(b - 1) < v, "{v}");
        }
    }
}
