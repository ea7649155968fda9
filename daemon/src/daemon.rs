//! `fairgpu serve`: the daemon. It owns every VM's region, the shared
//! SimGpu device file, the stats file and (with a scheduling policy) the
//! grant file, runs one worker process per VM and supervises it, runs the
//! GPU scheduler thread ([`crate::sched`]), and answers the control socket.
//!
//! Startup: the control socket is bound first (a second daemon on it
//! stops there, before it touches any region), but accepted on only once
//! every VM's region exists and every worker was spawned: the first answer
//! on the socket means the daemon is ready.
//!
//! Supervision: a worker that exits while the daemon is not shutting down
//! is logged with its VM and exit status; every established channel of its
//! region is failed at once with [`ChannelFailure::WorkerCrashed`] (so a
//! guest blocked in a call returns an error instead of waiting for the
//! heartbeat timeout); the worker is restarted after a backoff that starts
//! at [`BACKOFF_MIN`] and doubles up to [`BACKOFF_MAX`] (reset once a worker
//! has run for [`STABLE_AFTER`]).
//!
//! Shutdown (SIGTERM or SIGINT): workers get SIGTERM (they fail their
//! channels with `HostShutdown`), then SIGKILL after [`STOP_TIMEOUT`]; the
//! daemon removes the regions, the stats and device files and the control
//! socket, and exits 0.
//!
//! Invariants: the daemon writes a region only after reaping the worker
//! that served it, so it never races a live worker on the host's words; the
//! files it creates are removed on every exit path that unwinds.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use fairgpu_protocol::layout::ChannelFailure;

use crate::control::{
    ControlServer, DaemonStatus, Reply, Request, Status, VmSchedStatus, VmStatus,
};
use crate::qemu::coord::{Coordinator, QmpWatcher, Target, Watch};
use crate::qemu::doorbell::Doorbell;
use crate::qemu::QemuState;
use crate::region_socket::RegionSocket;
use crate::sched::{SchedHandle, Scheduler};
use fairgpu_config::{Config, ExecutorChoice, VmConfig, WEIGHTS};
use fairgpu_scheduler::PolicyKind;
use fairgpu_worker::grants::GrantFile;
use fairgpu_worker::host::HostRegion;
use fairgpu_worker::stats::{Field, Slot, StatsFile, WorkerState};

/// First restart delay after a crash.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest restart delay.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// A worker that ran this long before exiting is restarted after
/// [`BACKOFF_MIN`] again.
pub const STABLE_AFTER: Duration = Duration::from_secs(10);
/// How long workers get to exit after SIGTERM before SIGKILL.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the supervisor looks at its workers and the shutdown flag.
const SUPERVISE_EVERY: Duration = Duration::from_millis(20);

/// Removes a file when dropped.
#[derive(Debug)]
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// One VM as the daemon runs it.
#[derive(Debug)]
struct Vm {
    index: usize,
    cfg: VmConfig,
    region: HostRegion,
    slot: Slot,
    worker: Option<Child>,
    started: Instant,
    backoff: Duration,
    restart_at: Option<Instant>,
    /// A QEMU VM's state (ivshmem peers, QMP).
    qemu: Option<Arc<QemuState>>,
    /// The ivshmem server of a doorbell VM. Declared after `region`: the
    /// server stops after the daemon's mapping is gone.
    doorbell: Option<Doorbell>,
    /// A local VM's sealed region and the socket handing it to guests.
    local: Option<LocalRegion>,
}

/// A local VM's region: a sealed memfd (its workers inherit it), handed to
/// guests by the region socket at the VM's region path.
#[derive(Debug)]
struct LocalRegion {
    memory: std::fs::File,
    _socket: RegionSocket,
}

impl LocalRegion {
    /// Creates the memfd, writes the region into it and binds the socket.
    fn create(v: &VmConfig) -> anyhow::Result<(HostRegion, LocalRegion)> {
        use std::os::fd::AsRawFd;
        let size = fairgpu_protocol::Layout::new(&v.region)?.region_size() as u64;
        let memory = fairgpu_qemu::sealed_memfd(&format!("fairgpu-{}", v.name), size)
            .context("creating the region's memfd")?;
        let proc_path = PathBuf::from(format!("/proc/self/fd/{}", memory.as_raw_fd()));
        let region = HostRegion::format(&proc_path, &v.region)
            .context("writing the region into its memfd")?;
        let handed = memory
            .try_clone()
            .context("duplicating the region's descriptor")?;
        let socket = RegionSocket::bind(&v.region_path, handed, &v.name, &v.access)
            .with_context(|| format!("binding the region socket {}", v.region_path.display()))?;
        Ok((
            region,
            LocalRegion {
                memory,
                _socket: socket,
            },
        ))
    }
}

/// What a worker needs to be started.
#[derive(Debug)]
struct WorkerLaunch {
    exe: PathBuf,
    config: PathBuf,
    fingerprint: String,
    executor: ExecutorChoice,
    stats: PathBuf,
    sim_device: Option<PathBuf>,
    grants: Option<PathBuf>,
    log: String,
    sched: Option<SchedHandle>,
}

impl WorkerLaunch {
    fn spawn(
        &self,
        vm: &VmConfig,
        doorbell: Option<&Doorbell>,
        local: Option<&LocalRegion>,
    ) -> std::io::Result<Child> {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("worker")
            .arg("--config")
            .arg(&self.config)
            .args(["--vm", &vm.name, "--fingerprint", &self.fingerprint])
            .args(["--executor", &self.executor.to_string()])
            .arg("--stats")
            .arg(&self.stats)
            .args(["--daemon-pid", &std::process::id().to_string()])
            .args(["--log", &self.log])
            .stdin(Stdio::null())
            // Its own process group: a terminal's Ctrl-C reaches only the
            // daemon, which then stops the workers in order.
            .process_group(0);
        if let Some(p) = &self.sim_device {
            cmd.arg("--sim-device").arg(p);
        }
        if let Some(p) = &self.grants {
            cmd.arg("--grants").arg(p);
        }
        match doorbell {
            None => match local {
                None => cmd.spawn(),
                Some(l) => {
                    // The sealed region, kept at its number.
                    use std::os::fd::{AsFd, AsRawFd};
                    cmd.args(["--region-fd", &l.memory.as_raw_fd().to_string()]);
                    fairgpu_qemu::os::spawn_keeping(&mut cmd, &[l.memory.as_fd()])
                }
            },
            Some(d) => {
                // The memory and the wake relay, kept at their numbers.
                use std::os::fd::AsRawFd;
                let fds = d.worker_fds();
                cmd.args(["--region-fd", &fds[0].as_raw_fd().to_string()])
                    .args(["--wake-fd", &fds[1].as_raw_fd().to_string()]);
                fairgpu_qemu::os::spawn_keeping(&mut cmd, &fds)
            }
        }
    }
}

impl Vm {
    fn start(&mut self, launch: &WorkerLaunch) {
        self.restart_at = None;
        self.started = Instant::now();
        // Before the spawn: the worker stores `Running` itself once it
        // serves, which must not be overwritten.
        self.slot.set_state(WorkerState::Starting);
        self.slot
            .set(Field::StartedMs, fairgpu_worker::stats::unix_ms());
        match launch.spawn(&self.cfg, self.doorbell.as_ref(), self.local.as_ref()) {
            Ok(child) => {
                tracing::info!(vm = %self.cfg.name, pid = child.id(), "worker started");
                self.slot.set(Field::Pid, child.id().into());
                self.worker = Some(child);
                if let Some(s) = &launch.sched {
                    s.worker_started(self.index);
                }
            }
            Err(e) => {
                tracing::error!(vm = %self.cfg.name, error = %e, "cannot start the worker");
                self.schedule_restart();
            }
        }
    }

    fn schedule_restart(&mut self) {
        if self.started.elapsed() >= STABLE_AFTER {
            self.backoff = BACKOFF_MIN;
        }
        let delay = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        self.restart_at = Some(Instant::now() + delay);
        self.slot.set_state(WorkerState::Restarting);
        tracing::info!(vm = %self.cfg.name, delay_ms = delay.as_millis() as u64, "restarting the worker after a delay");
    }

    /// The worker exited while it should have been serving.
    fn worker_exited(&mut self, pid: u32, status: ExitStatus, launch: &WorkerLaunch) {
        self.worker = None;
        self.slot.worker_gone();
        if let Some(s) = &launch.sched {
            s.worker_gone(self.index);
        }
        let failed = self.region.fail_established(ChannelFailure::WorkerCrashed);
        // Planned exits: a fresh process serves the VM at once.
        let planned = match status.code() {
            // The runaway guard: the worker failed the offending channel
            // (LAUNCH_TIMEOUT) and exited so that the GPU would end the
            // kernel.
            Some(fairgpu_worker::RUNAWAY_EXIT) => {
                Some("worker exited to end a runaway kernel; starting a fresh one")
            }
            // A sticky GPU error poisoned the worker's CUDA state and its
            // guests have let go.
            Some(fairgpu_worker::RECYCLE_EXIT) => {
                Some("worker stopped after a sticky GPU error; starting a fresh one")
            }
            _ => None,
        };
        if let Some(why) = planned {
            tracing::warn!(vm = %self.cfg.name, pid, channels_failed = failed, "{why}");
            self.slot.set_state(WorkerState::Restarting);
            self.restart_at = Some(Instant::now());
            return;
        }
        tracing::error!(
            vm = %self.cfg.name,
            pid,
            status = %status,
            channels_failed = failed,
            "worker exited unexpectedly; its guests' channels were failed"
        );
        self.schedule_restart();
    }

    /// One supervision step.
    fn supervise(&mut self, launch: &WorkerLaunch) {
        if let Some(child) = &mut self.worker {
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    let pid = child.id();
                    self.worker_exited(pid, status, launch);
                }
                Err(e) => {
                    tracing::warn!(vm = %self.cfg.name, error = %e, "cannot check the worker")
                }
            }
        } else if self.restart_at.is_some_and(|at| Instant::now() >= at) {
            self.slot.add(Field::Restarts, 1);
            self.start(launch);
        }
    }
}

/// Answers control requests from the stats file, the scheduler and the
/// configuration.
#[derive(Debug)]
struct StatusSource {
    daemon: DaemonStatus,
    vms: Vec<(String, u32, PathBuf)>,
    stats: Arc<StatsFile>,
    sched: Option<SchedHandle>,
    started: Instant,
    /// QEMU VMs' configuration and state, by VM index.
    qemu: Vec<Option<(VmConfig, Arc<QemuState>)>>,
}

impl StatusSource {
    fn status(&self) -> Status {
        let mut holder = None;
        // Several VMs run at once in a disengaged policy's free run: then
        // none is "the" holder.
        let mut running = 0;
        let sched = self.sched.as_ref().map(SchedHandle::snapshot);
        let vms = self
            .vms
            .iter()
            .enumerate()
            .map(|(i, (name, weight, region))| {
                let s = self.stats.slot(i).expect("one slot per VM").snapshot();
                let sched = sched.as_ref().and_then(|v| v.get(i).copied().flatten());
                if sched.is_some_and(|v| v.state == fairgpu_scheduler::VgpuState::Running) {
                    running += 1;
                    holder = Some(name.clone());
                }
                VmStatus {
                    name: name.clone(),
                    weight: sched.map_or(*weight, |v| v.weight),
                    region: region.clone(),
                    worker_pid: s.pid,
                    state: s.state,
                    restarts: s.restarts,
                    channels_used: s.channels_used,
                    channels_total: s.channels_total,
                    mem_used: s.mem_used,
                    mem_quota: s.mem_quota,
                    host_mem_used: s.host_mem_used,
                    host_mem_limit: s.host_mem_limit,
                    contexts: s.contexts,
                    gpu_time_ns: s.gpu_time_ns,
                    calls: s.calls,
                    kernels: s.kernels,
                    long_kernels: s.long_kernels,
                    published: s.ticks,
                    sched: sched.map(|v| VmSchedStatus {
                        state: match v.state {
                            fairgpu_scheduler::VgpuState::Blocked => "blocked",
                            fairgpu_scheduler::VgpuState::Runnable => "runnable",
                            fairgpu_scheduler::VgpuState::Running => "running",
                        }
                        .into(),
                        charged_ns: v.charged_ns,
                        grants: v.grants,
                        cosched_wakes: v.cosched_wakes,
                        cosched_woke: v.cosched_woke,
                        overruns: v.overruns,
                        longest_hold_ns: v.longest_hold_ns,
                        backfilled: v.backfilled,
                        backfill_ns: v.backfill_ns,
                        ..crate::control::sched_standing(v.revoked, v.standing)
                    }),
                    qemu: self.qemu[i].as_ref().and_then(|(cfg, q)| q.status(cfg)),
                }
            })
            .collect();
        Status {
            daemon: DaemonStatus {
                uptime_s: self.started.elapsed().as_secs_f64(),
                holder: holder.filter(|_| running == 1),
                ..self.daemon.clone()
            },
            vms,
        }
    }

    fn set_weight(&self, vm: &str, weight: u32) -> Reply {
        let Some(index) = self.vms.iter().position(|(n, _, _)| n == vm) else {
            return Reply::error(format!("no vm {vm:?}"));
        };
        if !WEIGHTS.contains(&weight) {
            return Reply::error(format!(
                "weight {weight} is outside {}..={}",
                WEIGHTS.start(),
                WEIGHTS.end()
            ));
        }
        let Some(sched) = &self.sched else {
            return Reply::error(
                "the daemon runs no scheduler (policy = \"none\"), so weights have no effect",
            );
        };
        match sched.set_weight(index, weight) {
            Ok(()) => {
                tracing::info!(vm, weight, "weight changed");
                Reply {
                    ok: true,
                    error: None,
                    status: None,
                }
            }
            Err(e) => Reply::error(e.to_string()),
        }
    }

    fn handle(&self, req: &Request) -> Reply {
        match req {
            Request::Status {} => Reply {
                ok: true,
                error: None,
                status: Some(self.status()),
            },
            Request::SetWeight { vm, weight } => self.set_weight(vm, *weight),
        }
    }
}

/// Chooses the executor: `auto` becomes `cuda` if a GPU is usable, else
/// `sim`; `cuda` without a usable GPU is an error.
fn resolve_executor(cfg: &Config) -> anyhow::Result<ExecutorChoice> {
    let gpu = cfg.daemon.gpu;
    match cfg.daemon.executor {
        ExecutorChoice::Sim => Ok(ExecutorChoice::Sim),
        ExecutorChoice::Cuda => match probe_cuda(gpu) {
            Ok(()) => Ok(ExecutorChoice::Cuda),
            Err(e) => bail!("executor = \"cuda\", but CUDA device {gpu} is not usable: {e}"),
        },
        ExecutorChoice::Auto => match probe_cuda(gpu) {
            Ok(()) => {
                tracing::info!(gpu, "CUDA device usable; workers use it");
                Ok(ExecutorChoice::Cuda)
            }
            Err(e) => {
                tracing::info!(reason = %e, "no usable GPU; workers use SimGpu");
                Ok(ExecutorChoice::Sim)
            }
        },
    }
}

/// Whether CUDA device `gpu` can be opened (the executor is dropped again).
fn probe_cuda(gpu: u32) -> Result<(), fairgpu_executor::ExecError> {
    fairgpu_executor::cuda::CudaExecutor::new(gpu as usize).map(drop)
}

/// Runs the daemon until SIGTERM or SIGINT.
pub fn serve(config_path: &Path, log: &str) -> anyhow::Result<()> {
    let shutdown =
        fairgpu_worker::process::shutdown_flag().context("installing signal handlers")?;
    let cfg = Config::load(config_path)?;
    let config_path = std::fs::canonicalize(config_path)
        .with_context(|| format!("resolving {}", config_path.display()))?;
    let executor = resolve_executor(&cfg)?;

    // Bind first: a second daemon on the same socket stops here, before it
    // touches any region.
    let control = ControlServer::bind(
        &cfg.daemon.control_socket,
        cfg.daemon.control_group.as_ref(),
    )?;
    let state_dir = &cfg.daemon.state_dir;
    std::fs::create_dir_all(state_dir)
        .with_context(|| format!("creating state_dir {}", state_dir.display()))?;
    let pid = std::process::id();
    let stats_path = state_dir.join(format!("fairgpu-{pid}.stats"));
    let stats = Arc::new(StatsFile::create(&stats_path, cfg.vms.len())?);

    let mut sim_guard = None;
    let sim_device = if executor == ExecutorChoice::Sim {
        let path = state_dir.join(format!("fairgpu-{pid}.simgpu"));
        sim_guard = Some(RemoveOnDrop(path.clone()));
        fairgpu_executor::sim::SimDevice::create(&path)
            .with_context(|| format!("creating the SimGpu device file {}", path.display()))?;
        Some(path)
    } else {
        None
    };

    let mut grants_file = None;
    if cfg.daemon.sched.policy.is_some() {
        let path = state_dir.join(format!("fairgpu-{pid}.grants"));
        grants_file = Some(Arc::new(GrantFile::create(&path, cfg.vms.len())?));
    }

    let mut vms = Vec::with_capacity(cfg.vms.len());
    for (i, v) in cfg.vms.iter().enumerate() {
        let qemu = v.qemu.as_ref().map(|_| Arc::new(QemuState::default()));
        let (region, doorbell, local) = match &qemu {
            Some(state) if v.doorbell().is_some() => {
                let (region, d) = Doorbell::start(v, state.clone())
                    .with_context(|| format!("vm {:?}: its ivshmem-doorbell device", v.name))?;
                (region, Some(d), None)
            }
            None => {
                if v.region_path.exists() {
                    tracing::warn!(vm = %v.name, region = %v.region_path.display(), "replacing an existing file at the region path");
                }
                let (region, local) = LocalRegion::create(v)
                    .with_context(|| format!("vm {:?}: creating its region", v.name))?;
                (region, None, Some(local))
            }
            Some(_) => {
                if v.region_path.exists() {
                    tracing::warn!(vm = %v.name, region = %v.region_path.display(), "replacing an existing file at the region path");
                }
                let region = HostRegion::create(&v.region_path, &v.region)
                    .with_context(|| format!("vm {:?}: creating its region", v.name))?;
                // QEMU maps the file as a PCI BAR, whose size is a power of two.
                fairgpu_qemu::grow_to_bar_size(&v.region_path)
                    .with_context(|| format!("vm {:?}: sizing its region for ivshmem", v.name))?;
                fairgpu_config::perms::apply(
                    &v.region_path,
                    fairgpu_config::perms::Kind::File,
                    &v.access,
                )
                .with_context(|| format!("vm {:?}: giving its region its access", v.name))?;
                (region, None, None)
            }
        };
        let slot = stats.slot(i).expect("one slot per VM");
        slot.set(Field::ChannelsTotal, v.region.channels.into());
        slot.set(Field::MemQuota, v.memory);
        if doorbell.is_some() {
            tracing::info!(
                vm = %v.name,
                weight = v.weight,
                memory = %fairgpu_config::format_size(v.memory),
                channels = v.region.channels,
                "region created for the ivshmem-doorbell device"
            );
        } else {
            tracing::info!(
                vm = %v.name,
                weight = v.weight,
                memory = %fairgpu_config::format_size(v.memory),
                region = %v.region_path.display(),
                channels = v.region.channels,
                "region created; guests use FAIRGPU_REGION={}",
                v.region_path.display()
            );
        }
        vms.push(Vm {
            index: i,
            cfg: v.clone(),
            region,
            slot,
            worker: None,
            started: Instant::now(),
            backoff: BACKOFF_MIN,
            restart_at: None,
            qemu,
            doorbell,
            local,
        });
    }

    // The QMP thread, for every QEMU VM with a QMP socket.
    let watches: Vec<Watch> = vms
        .iter()
        .filter_map(|vm| {
            let q = vm.cfg.qemu.as_ref()?;
            Some(Watch {
                name: vm.cfg.name.clone(),
                vm: vm.index,
                qmp: q.qmp.clone()?,
                nudge: q.nudge,
                hold: crate::qemu::coord::NUDGE_HOLD,
                state: vm.qemu.clone()?,
            })
        })
        .collect();
    let mut qmp_watcher = if watches.is_empty() {
        None
    } else {
        Some(QmpWatcher::start(watches).context("starting the QMP thread")?)
    };

    let sched_cfg = cfg.daemon.sched;
    let scheduler = match (
        &grants_file,
        fairgpu_config::policy::build_policy(&sched_cfg),
    ) {
        (Some(file), Some(policy)) => {
            let regions: Vec<_> = vms.iter().map(|v| v.region.bells()).collect();
            let s = Scheduler::new(
                policy,
                file.clone(),
                cfg.vms.iter().map(|v| v.name.clone()).collect(),
                &cfg.vms.iter().map(|v| v.weight).collect::<Vec<_>>(),
                regions.clone(),
                Box::new(coordinator(&vms, regions, qmp_watcher.as_ref())),
            )
            .context("registering the VMs with the scheduling policy")?
            .with_preemptive(sched_cfg.preemptive)
            .with_backfill(sched_cfg.backfill);
            if sched_cfg.policy.is_some_and(PolicyKind::has_priorities) {
                let h = s.handle();
                for (i, v) in cfg.vms.iter().enumerate() {
                    h.set_priority(i, v.priority)
                        .and_then(|()| h.set_reservation(i, v.reservation))
                        .with_context(|| format!("vm {:?}: its priority or reservation", v.name))?;
                }
            }
            Some(s)
        }
        _ => None,
    };
    let sched = scheduler.as_ref().map(Scheduler::handle);
    let launch = WorkerLaunch {
        exe: std::env::current_exe().context("locating the fairgpu binary")?,
        config: config_path.clone(),
        fingerprint: format!("{:016x}", cfg.fingerprint),
        executor,
        stats: stats_path.clone(),
        sim_device: sim_device.clone(),
        grants: grants_file.as_ref().map(|f| f.path().to_owned()),
        log: log.to_owned(),
        sched: sched.clone(),
    };
    let source = StatusSource {
        daemon: DaemonStatus {
            pid,
            executor: executor.to_string(),
            uptime_s: 0.0,
            control_socket: control.path().to_owned(),
            stats_file: stats_path,
            sim_device,
            policy: sched_cfg.policy_name().into(),
            slice_ms: sched_cfg
                .policy
                .map(|_| sched_cfg.slice.slice().as_nanos() as f64 / 1e6),
            accounting: sched_cfg
                .policy
                .map(|_| sched_cfg.accounting.name().to_owned()),
            holder: None,
            preemptive: sched_cfg.preemptive,
            backfill_max_us: sched_cfg.backfill.map(|d| d.as_micros() as u64),
        },
        vms: cfg
            .vms
            .iter()
            .map(|v| (v.name.clone(), v.weight, v.region_path.clone()))
            .collect(),
        stats: stats.clone(),
        sched,
        started: Instant::now(),
        qemu: vms
            .iter()
            .map(|vm| vm.qemu.clone().map(|q| (vm.cfg.clone(), q)))
            .collect(),
    };
    // The scheduler stops at the shutdown signal, as the supervisor does:
    // workers being stopped need no more grants.
    let sched_thread = match scheduler {
        Some(s) => {
            let shutdown = shutdown.clone();
            Some(
                std::thread::Builder::new()
                    .name("fairgpu-sched".into())
                    .spawn(move || s.run(&shutdown))
                    .context("starting the scheduler thread")?,
            )
        }
        None => None,
    };
    for vm in &mut vms {
        vm.start(&launch);
    }
    // Only now accept on the control socket: the first answer a client
    // gets means every region exists and every worker was spawned. (The
    // socket is bound since the start, so a second daemon is refused
    // before it touches a region; connections made meanwhile wait in the
    // listen queue.)
    let control_thread = {
        let shutdown = shutdown.clone();
        std::thread::Builder::new()
            .name("fairgpu-control-accept".into())
            .spawn(move || {
                control.run(&shutdown, move |req| source.handle(req));
                drop(control);
            })
    };
    let control_thread = match control_thread {
        Ok(t) => t,
        Err(e) => {
            stop_workers(&mut vms);
            shutdown.store(true, Ordering::Relaxed);
            if let Some(t) = sched_thread {
                let _ = t.join();
            }
            return Err(e).context("starting the control socket thread");
        }
    };
    tracing::info!(
        config = %config_path.display(),
        executor = %executor,
        vms = vms.len(),
        control_socket = %cfg.daemon.control_socket.display(),
        policy = sched_cfg.policy_name(),
        "daemon started"
    );
    while !shutdown.load(Ordering::Relaxed) {
        for vm in &mut vms {
            vm.supervise(&launch);
        }
        std::thread::sleep(SUPERVISE_EVERY);
    }

    tracing::info!("shutting down");
    stop_workers(&mut vms);
    // After the workers: their last wakes of guests still reach the VMs.
    for vm in &mut vms {
        if let Some(d) = &mut vm.doorbell {
            d.stop();
        }
    }
    if let Some(w) = &mut qmp_watcher {
        w.stop();
    }
    // The accept loop sees the flag within its poll interval.
    shutdown.store(true, Ordering::Relaxed);
    let _ = control_thread.join();
    if let Some(t) = sched_thread {
        let _ = t.join();
    }
    drop(launch);
    drop(vms);
    drop(stats);
    drop(grants_file);
    drop(sim_guard);
    tracing::info!("shut down");
    Ok(())
}

/// The CPU coordinator: QEMU VMs by interrupt (and nudge, where asked
/// for), local VMs by their futex words.
fn coordinator(
    vms: &[Vm],
    regions: Vec<fairgpu_worker::host::RegionBells>,
    qmp: Option<&QmpWatcher>,
) -> Coordinator {
    let targets = vms
        .iter()
        .zip(regions)
        .map(|(vm, bells)| match &vm.cfg.qemu {
            None => Target::Local(bells),
            Some(q) => Target::Qemu {
                bells,
                nudge: qmp.filter(|_| q.nudge).map(|w| w.nudger(vm.index)),
            },
        })
        .collect();
    Coordinator::new(targets)
}

/// SIGTERM every worker, wait up to [`STOP_TIMEOUT`], SIGKILL the rest.
fn stop_workers(vms: &mut [Vm]) {
    for vm in vms.iter_mut() {
        vm.restart_at = None;
        vm.slot.set_state(WorkerState::Stopping);
        if let Some(child) = &vm.worker {
            if let Err(e) = fairgpu_worker::process::send_signal(child.id(), libc::SIGTERM) {
                tracing::warn!(vm = %vm.cfg.name, error = %e, "cannot signal the worker");
            }
        }
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    loop {
        let mut running = 0;
        for vm in vms.iter_mut() {
            if let Some(child) = &mut vm.worker {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        tracing::debug!(vm = %vm.cfg.name, status = %status, "worker stopped");
                        vm.worker = None;
                    }
                    Ok(None) => running += 1,
                    Err(_) => vm.worker = None,
                }
            }
        }
        if running == 0 || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for vm in vms.iter_mut() {
        if let Some(mut child) = vm.worker.take() {
            tracing::warn!(vm = %vm.cfg.name, pid = child.id(), "worker did not stop within {STOP_TIMEOUT:?}; killing it");
            let _ = child.kill();
            let _ = child.wait();
            vm.region.fail_established(ChannelFailure::HostShutdown);
        }
        vm.slot.worker_gone();
        vm.slot.set_state(WorkerState::Stopped);
    }
}
