//! The vGPU worker: one process per VM, started and supervised by the
//! daemon (`fairgpu worker`, a hidden subcommand).
//!
//! The crate holds everything the worker runs and the files it shares
//! with its daemon:
//! - [`host`]: serve a region's channels (rings, validation, dispatch,
//!   failure isolation, waiting); [`transport_ops`]: the transport's own
//!   no-op and bulk-copy opcodes.
//! - [`cuda_ops`]: the CUDA request layer (per-channel handles, device
//!   pointers checked against the channel's allocations, quotas) in front
//!   of a `fairgpu_executor::GpuExecutor`.
//! - [`accounting`]: issue only under the grant, measure GPU time.
//! - [`grants`] and [`stats`]: the daemon's grant file and stats file,
//!   shared with its workers; [`process`]: process control both need.
//! - [`fds`]: the descriptors the daemon passes to its worker.
//!
//! It re-reads the daemon's configuration file (refusing one that changed
//! since the daemon read it), attaches to the VM's region (created by the
//! daemon; never re-created or removed here), builds the executor the
//! daemon chose, and serves the region with a [`Server`] whose handler is
//! [`CudaOps`] wrapped in [`Scheduled`]. About every 100 ms it publishes the
//! VM's usage into its slot of the daemon's stats file.
//!
//! With a scheduling policy (`--grants`, the daemon's grant file), the
//! worker issues GPU work only while it holds the grant and measures what
//! it used ([`crate::accounting`]); without one (`policy = "none"`) every
//! request is served as it arrives.
//!
//! A restarted worker adopts the region ([`Server::adopt`]): channels whose
//! host-side state died with the previous worker stay failed until their
//! guests claim them again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};

pub mod accounting;
pub mod cl_ops;
pub mod cuda_ops;
pub mod fds;
pub mod grants;
pub mod host;
pub mod process;
pub mod slicing;
pub mod stats;
pub mod transport_ops;

use crate::accounting::{Gate, GateConfig, Scheduled};
use crate::cuda_ops::CudaOps;
use crate::grants::GrantFile;
use crate::host::{Answer, ArenaSlice, ChannelStats, Handler, ServeConfig, Server};
use crate::stats::{Field, Slot, StatsFile, WorkerState};
use fairgpu_config::{Config, ExecutorChoice, VmConfig};
use fairgpu_executor::host_memory::HostMemory;
use fairgpu_executor::GpuExecutor;

/// What the daemon tells a worker.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The daemon's configuration file.
    #[arg(long)]
    pub config: PathBuf,
    /// The VM to serve.
    #[arg(long)]
    pub vm: String,
    /// The configuration's fingerprint as the daemon read it (hex).
    #[arg(long)]
    pub fingerprint: String,
    /// The executor the daemon resolved: sim or cuda.
    #[arg(long)]
    pub executor: ExecutorChoice,
    /// The daemon's stats file.
    #[arg(long)]
    pub stats: PathBuf,
    /// The shared SimGpu device file (with --executor sim).
    #[arg(long)]
    pub sim_device: Option<PathBuf>,
    /// The daemon's pid: the worker exits when its daemon does.
    #[arg(long)]
    pub daemon_pid: u32,
    /// The daemon's grant file, when a scheduling policy is configured.
    #[arg(long)]
    pub grants: Option<PathBuf>,
    /// An ivshmem-doorbell VM's inherited region and wake relay.
    #[command(flatten)]
    pub ivshmem: crate::fds::WorkerFds,
}

/// The worker's request handler: the CUDA driver API, which also serves
/// the transport opcodes. Swapping the handler is this one function.
fn handler_for(
    mut executor: Box<dyn GpuExecutor>,
    cfg: &Config,
    vm: &VmConfig,
    budget: Arc<HostMemory>,
) -> CudaOps {
    let long = &cfg.daemon.long_kernels;
    // CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED.
    const COMPUTE_PREEMPTION: i32 = 90;
    if cfg.daemon.sched.preemptive && executor.device().attribute(COMPUTE_PREEMPTION) != Some(1) {
        tracing::warn!(
            vm = %vm.name,
            device = %executor.device().name,
            "preemptive = true, but this device does not report compute preemption: a holder switched out \
             past its slice keeps the device until its kernel ends, and the next VM's work queues behind it \
             (SimGpu models a non-preemptive GPU); the scheduler still switches grants"
        );
    }
    executor.set_request_limit(vm.max_request);
    executor.set_slicing(long.slicing);
    CudaOps::new(executor, vm.name.clone(), vm.memory)
        .with_host_memory(budget)
        .with_slicing(crate::slicing::SlicingConfig {
            enabled: long.slicing,
            threshold_ns: long.threshold.as_nanos().min(u128::from(u64::MAX)) as u64,
            min_blocks: long.min_blocks,
        })
}

/// Builds the executor the daemon chose.
fn executor_for(
    args: &WorkerArgs,
    cfg: &Config,
    budget: Arc<HostMemory>,
) -> anyhow::Result<Box<dyn GpuExecutor>> {
    match args.executor {
        ExecutorChoice::Sim => {
            let path = args
                .sim_device
                .as_deref()
                .context("--executor sim needs --sim-device")?;
            let device = fairgpu_executor::sim::SimDevice::open(path)
                .with_context(|| format!("opening the SimGpu device {}", path.display()))?;
            let gpu = fairgpu_executor::sim::SimGpu::new(cfg.sim.clone(), device)
                .context("starting SimGpu")?
                .with_host_memory(budget);
            Ok(Box::new(gpu))
        }
        ExecutorChoice::Cuda => {
            let gpu = fairgpu_executor::cuda::CudaExecutor::new(cfg.daemon.gpu as usize)
                .with_context(|| format!("opening CUDA device {}", cfg.daemon.gpu))?;
            Ok(Box::new(gpu))
        }
        ExecutorChoice::Auto => bail!("the daemon passes a resolved executor (sim or cuda)"),
    }
}

/// The exit status of a worker that stopped to be replaced by a fresh
/// process: a sticky GPU error poisoned its CUDA state
/// ([`CudaOps::recycle_due`]). The daemon restarts it at once, without
/// backoff (EX_TEMPFAIL).
pub const RECYCLE_EXIT: i32 = 75;
/// A worker's exit status after the runaway guard found a kernel that ran
/// past the VM's limit on one request's device time and the executor
/// cannot end it (a real GPU): the daemon starts a fresh worker.
pub const RUNAWAY_EXIT: i32 = 76;

/// Runs a worker until SIGTERM/SIGINT (or its daemon's death). Errors
/// name the VM. A worker whose GPU state was poisoned exits with
/// [`RECYCLE_EXIT`] once its guests have let go.
pub fn run(args: &WorkerArgs) -> anyhow::Result<()> {
    let span = tracing::info_span!("worker", vm = %args.vm);
    let _entered = span.enter();
    let recycle = serve(args).with_context(|| format!("worker of vm {:?}", args.vm))?;
    if recycle {
        drop(_entered);
        std::process::exit(RECYCLE_EXIT);
    }
    Ok(())
}

/// Serves until stopped; true if it stopped to be recycled.
fn serve(args: &WorkerArgs) -> anyhow::Result<bool> {
    crate::process::die_with_parent(libc::SIGTERM, args.daemon_pid)
        .context("tying the worker's life to its daemon")?;
    crate::process::precise_sleeps();
    let shutdown = crate::process::shutdown_flag().context("installing signal handlers")?;
    let cfg = Config::load(&args.config)?;
    if format!("{:016x}", cfg.fingerprint) != args.fingerprint {
        bail!(
            "{} changed since the daemon read it; restart the daemon to apply the change",
            args.config.display()
        );
    }
    let (index, vm) = cfg
        .vm(&args.vm)
        .with_context(|| format!("no vm {:?} in {}", args.vm, args.config.display()))?;
    let stats = StatsFile::open(&args.stats, cfg.vms.len())?;
    let slot = stats.slot(index).context("stats slot")?;
    let region = args.ivshmem.attach(vm)?;
    let budget = HostMemory::new(vm.host_memory);
    let executor = executor_for(args, &cfg, budget.clone())?;
    let ops = handler_for(executor, &cfg, vm, budget);
    let sched = &cfg.daemon.sched;
    let ops = match (&args.grants, sched.policy) {
        (Some(path), Some(_)) => {
            let grants = GrantFile::open(path, cfg.vms.len())?;
            let gate = Gate::new(
                grants.slot(index).context("grant slot")?,
                grants.bell(),
                GateConfig {
                    accounting: sched.accounting,
                    idle: fairgpu_config::policy::idle_behaviour(sched),
                    spin: sched.spin,
                    adaptive_spin: sched.adaptive_spin,
                    reserve: !sched.work_conserving,
                    publish_device_time: matches!(
                        sched.policy,
                        Some(
                            fairgpu_scheduler::PolicyKind::NeonDfq
                                | fairgpu_scheduler::PolicyKind::Loga
                        )
                    ),
                    backfill: sched.backfill,
                    vm: vm.name.clone(),
                },
            )
            .with_peers((0..grants.slots()).filter_map(|i| grants.slot(i)).collect());
            tracing::info!(
                policy = sched.policy_name(),
                accounting = %sched.accounting,
                slice = %sched.slice.slice(),
                spin_us = sched.spin.as_micros() as u64,
                "scheduled: GPU work is issued under the daemon's grants"
            );
            Scheduled::new(ops, gate)
        }
        (None, None) => Scheduled::unscheduled(ops),
        (Some(_), None) => bail!("--grants given, but the configuration has policy = \"none\""),
        (None, Some(_)) => bail!(
            "the configuration has policy = \"{}\", but the daemon gave no --grants file",
            sched.policy_name()
        ),
    };
    let handler = Publisher {
        ops,
        slot: slot.clone(),
        channels: None,
        shutdown: shutdown.clone(),
        recycle: false,
        published: Default::default(),
        fatal: None,
    };
    let mut server = Server::adopt(region, handler, ServeConfig::default(), shutdown);
    let channels = server.stats();
    server.handler_mut().channels = Some(channels);
    slot.set_state(WorkerState::Running);
    tracing::info!(
        region = %vm.region_path.display(),
        executor = %args.executor,
        "serving"
    );
    let mut publisher = server.run();
    if let Some(fatal) = publisher.fatal {
        // The GPU ends a runaway kernel only with this process: publish
        // what it did, then exit before any CUDA teardown, which would
        // wait for the kernel. The daemon starts a fresh worker.
        publisher.tick();
        tracing::error!(
            channel = ?fatal.runaway_channel,
            "runaway kernel: its channel fails with CUDA_ERROR_LAUNCH_TIMEOUT, the VM's other channels with WorkerCrashed; exiting so that the GPU ends the kernel"
        );
        crate::process::exit_now(RUNAWAY_EXIT);
    }
    let recycle = publisher.recycle;
    drop(publisher);
    tracing::info!(recycle, "stopped");
    Ok(recycle)
}

impl Publisher {
    /// Stops the server to have the worker replaced once its GPU state is
    /// poisoned and no guest context is left ([`CudaOps::recycle_due`]).
    fn recycle_if_due(&mut self) {
        if self.recycle {
            return;
        }
        if let Some(status) = self.ops.inner().recycle_due() {
            tracing::warn!(%status, "GPU state poisoned and no guest context left: stopping to be replaced by a fresh worker");
            self.recycle = true;
            // Relaxed: a stop request; the server loop only needs to see it
            // eventually, and nothing is published through it.
            self.shutdown.store(true, Ordering::Relaxed);
        }
    }
}

/// Wraps the handler and publishes usage on every tick.
#[derive(Debug)]
struct Publisher {
    ops: Scheduled<CudaOps>,
    slot: Slot,
    channels: Option<Arc<[ChannelStats]>>,
    /// The server's stop flag, raised to recycle a poisoned worker.
    shutdown: Arc<AtomicBool>,
    /// Whether the worker stopped to be recycled.
    recycle: bool,
    /// The long-kernel counts and runaways last published.
    published: (crate::cuda_ops::LongKernelCounts, u64),
    /// Set once the executor reported a runaway kernel.
    fatal: Option<crate::host::Fatal>,
}

impl Publisher {
    /// Notes a runaway kernel the executor reports (looked at without
    /// blocking).
    fn check_runaway(&mut self) {
        if self.fatal.is_some() {
            return;
        }
        if let Some((r, ch)) = self.ops.inner().runaway() {
            tracing::error!(
                kernel = %r.kernel,
                channel = ?ch,
                ran_ms = r.ran_ns as f64 / 1e6,
                "runaway guard: a kernel ran past the VM's limit on one request's device time"
            );
            self.fatal = Some(crate::host::Fatal {
                runaway_channel: ch,
            });
        }
    }
}

impl Handler for Publisher {
    fn handle(
        &mut self,
        ch: u32,
        req: &fairgpu_protocol::wire::ValidRequest,
        arena: &ArenaSlice<'_>,
    ) -> Result<Answer, fairgpu_protocol::Status> {
        self.ops.handle(ch, req, arena)
    }

    fn fatal(&mut self) -> Option<crate::host::Fatal> {
        // Asked by the server at every turn of its loop: a runaway found
        // by any wait, harvest or tick ends the serving there.
        self.check_runaway();
        self.fatal
    }

    fn reset(&mut self, ch: u32) {
        self.ops.reset(ch);
        // The last context of a poisoned worker may just have gone.
        self.recycle_if_due();
    }

    fn may_issue(&mut self, ch: u32, req: &fairgpu_protocol::wire::ValidRequest) -> bool {
        self.ops.may_issue(ch, req)
    }

    fn resume(&mut self, ch: u32) -> crate::host::Resume {
        self.ops.resume(ch)
    }

    fn unfinished(&self, ch: u32) -> Option<fairgpu_protocol::wire::ValidRequest> {
        self.ops.unfinished(ch)
    }

    fn group(&self, ch: u32) -> Option<u32> {
        self.ops.group(ch)
    }

    fn sync_wait(
        &mut self,
        ch: u32,
        req: &fairgpu_protocol::wire::ValidRequest,
        again: bool,
    ) -> Option<std::time::Duration> {
        self.ops.sync_wait(ch, req, again)
    }

    fn poll(&mut self, pass: crate::host::Pass) -> Option<std::time::Duration> {
        self.ops.poll(pass)
    }

    fn tick(&mut self) {
        self.ops.tick();
        let u = self.ops.inner().usage();
        let s = &self.slot;
        s.set(Field::MemUsed, u.mem_used);
        s.set(Field::MemQuota, u.mem_quota);
        s.set(Field::HostMemUsed, u.host_mem_used);
        s.set(Field::HostMemLimit, u.host_mem_limit);
        s.set(Field::Contexts, u.contexts.into());
        s.set(Field::GpuTimeNs, u.gpu_time_ns);
        s.set(Field::Calls, u.calls);
        s.set(Field::Kernels, u.kernels);
        // Cumulative over the VM's workers: this worker adds what it did
        // since it last published.
        let long = self.ops.inner().long_kernels();
        let runaways = self.ops.inner().executor_runaways();
        let last = std::mem::replace(&mut self.published, (long, runaways));
        s.add(Field::SlicedLaunches, long.sliced - last.0.sliced);
        s.add(Field::KernelParts, long.parts - last.0.parts);
        s.add(Field::Unsliceable, long.unsliceable - last.0.unsliceable);
        s.add(Field::Runaways, runaways - last.1);
        if let Some(ch) = &self.channels {
            // Relaxed: a monitoring count, ordered with nothing.
            let used = ch
                .iter()
                .filter(|c| c.owner_pid.load(Ordering::Relaxed) != 0)
                .count();
            s.set(Field::ChannelsUsed, used as u64);
        }
        s.published();
        self.recycle_if_due();
    }
}
