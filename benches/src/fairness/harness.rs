//! A daemon and its workloads for one experiment: write a configuration
//! into a private temp dir, start `fairgpu serve`, start one
//! `fairgpu __workload` process per VM as a guest of that VM, and remove
//! everything again.
//!
//! The workloads reach the daemon as CUDA programs do: through
//! `libcuda.so.1` on `LD_LIBRARY_PATH`, which is fairgpu's guest library
//! (`target/<profile>/libcuda.so` next to the `fairgpu` binary, or the file
//! `FAIRGPU_GUEST_LIB` names), or, with [`ClientKind::Rust`], through
//! fairgpu's Rust client.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::workload::{ClientKind, WorkloadReport};

/// Environment variable naming the guest library to use instead of the
/// one next to the `fairgpu` binary.
pub const GUEST_LIB_ENV: &str = "FAIRGPU_GUEST_LIB";
/// How long the daemon may take to open its control socket.
pub const DAEMON_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the daemon may take to stop after SIGTERM (it gives its
/// workers 5 s).
pub const DAEMON_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a session could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The guest library has not been built.
    #[error(
        "{path} not found: the workloads load it as libcuda.so.1; \
         build it: cargo build --release -p fairgpu-guest (or set {GUEST_LIB_ENV})"
    )]
    NoGuestLib {
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The daemon exited or did not open its socket.
    #[error("the daemon did not start: {why}")]
    Daemon {
        /// Why, with the end of its log.
        why: String,
    },
    /// A file or process operation failed.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}

/// Where the daemon runs its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// SimGpu, the model of a non-preemptive GPU (no GPU needed).
    Sim,
    /// A real NVIDIA GPU through CUDA (needs a GPU host).
    Cuda,
}

impl Device {
    /// The daemon's `executor` value.
    pub fn executor(self) -> &'static str {
        match self {
            Device::Sim => "sim",
            Device::Cuda => "cuda",
        }
    }
}

/// What one VM runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// The workload profile.
    pub profile: String,
    /// Kernel duration override, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_us: Option<f64>,
    /// Fraction of its run spent sleeping.
    #[serde(default)]
    pub sleep_ratio: f64,
    /// Blocks per launch (the long-kernel experiments); one when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<u32>,
    /// Periodic mode (TimeGraph's real-time task): a job every this many
    /// ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_ms: Option<f64>,
    /// Periodic mode: kernels per job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_kernels: Option<u32>,
    /// How this VM's guest reaches the device, when not the run's client
    /// (the mixed CUDA + OpenCL cases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ClientKind>,
}

impl WorkloadSpec {
    /// `profile` with its own kernel size, never sleeping.
    pub fn profile(profile: &str) -> WorkloadSpec {
        WorkloadSpec {
            profile: profile.to_owned(),
            kernel_us: None,
            sleep_ratio: 0.0,
            blocks: None,
            period_ms: None,
            job_kernels: None,
            client: None,
        }
    }

    /// A short description: "MM", "MM 400us", "Throttle 207us sleep 50%".
    pub fn describe(&self) -> String {
        let mut s = self.profile.clone();
        if let Some(k) = self.kernel_us {
            s.push_str(&format!(" {k}us"));
        }
        if self.sleep_ratio > 0.0 {
            s.push_str(&format!(" sleep {:.0}%", self.sleep_ratio * 100.0));
        }
        if let Some(b) = self.blocks {
            s.push_str(&format!(" x{b} blocks"));
        }
        if let Some(p) = self.period_ms {
            s.push_str(&format!(" x{} every {p}ms", self.job_kernels.unwrap_or(1)));
        }
        s
    }

    /// The kernel duration it runs, ns.
    pub fn kernel_ns(&self) -> Option<u64> {
        crate::workload::Mix::new(
            &self.profile,
            &crate::workload::MixOptions {
                kernel_us: self.kernel_us,
                sleep_ratio: self.sleep_ratio,
                ..Default::default()
            },
        )
        .ok()
        .map(|m| m.kernel_ns)
    }
}

/// One VM of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VmSpec {
    /// Its name.
    pub name: String,
    /// Its weight.
    pub weight: u32,
    /// What its guest runs.
    pub workload: WorkloadSpec,
    /// Its `[[vm]]` settings for the policies that take per-VM settings
    /// (TimeGraph's `priority` and `reservation`), as written; left out of
    /// the configuration under other policies, which refuse them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<String>,
}

/// What a session runs.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Names the temp dir and regions.
    pub label: String,
    /// The daemon's executor.
    pub device: Device,
    /// The `[daemon] policy` key, written only when set.
    pub policy: Option<String>,
    /// The VMs.
    pub vms: Vec<VmSpec>,
    /// How the workloads reach the GPU.
    pub client: ClientKind,
    /// Other `[daemon]` settings.
    pub tuning: Tuning,
}

/// `[daemon]` scheduling settings a session may set; `None` leaves the
/// daemon's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tuning {
    /// `accounting = NAME`.
    pub accounting: Option<fairgpu_config::Accounting>,
    /// `slice_ms = MS`.
    pub slice_ms: Option<f64>,
    /// `spin_us = US`.
    pub spin_us: Option<u32>,
    /// `work_conserving = false` when set.
    pub no_work_conserving: bool,
    /// Guests share the host's last CPU and the daemon (with its workers)
    /// has the others, as in FairGV's experiments (VMs sharing one core,
    /// the host's backend on its own); ignored on a one-CPU host.
    pub pin: bool,
    /// The daemon's log filter; with it the run's directory is kept.
    pub daemon_log: Option<String>,
    /// More `[daemon]` lines, as written (an experiment's own settings,
    /// e.g. kernel slicing's).
    pub daemon_lines: Vec<String>,
}

/// CPUs for the daemon and for the guests under [`Tuning::pin`]: `None`
/// when not pinning or on a one-CPU host.
fn cpu_split(pin: bool) -> Option<(Vec<usize>, Vec<usize>)> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (pin && n >= 2).then(|| ((0..n - 1).collect(), vec![n - 1]))
}

/// Makes `cmd`'s process run only on `cpus`.
fn restrict_to(cmd: &mut Command, cpus: Vec<usize>) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the child between fork and exec; it only
    // builds a cpu_set_t on the stack and makes one system call
    // (sched_setaffinity is async-signal-safe); it allocates nothing and
    // takes no lock.
    unsafe {
        cmd.pre_exec(move || {
            fairgpu_worker::process::pin_to_cpus(&cpus)?;
            Ok(())
        });
    }
}

/// How the daemon's configuration parser treats a `policy` key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySupport {
    /// It accepts `policy = NAME`.
    Key,
    /// It has no `policy` key: only "none" (no scheduler) is possible, by
    /// leaving the key out.
    NoKey,
}

/// Whether this build's daemon accepts `policy = NAME`: the configuration
/// parser is the daemon's own, so its answer is the daemon's. `Err` holds
/// the parser's message.
pub fn policy_support(name: &str) -> Result<PolicySupport, String> {
    let text = format!(
        "[daemon]\ncontrol_socket = \"/tmp/fairgpu-policy-probe.sock\"\npolicy = {name:?}\n\n\
         [[vm]]\nname = \"probe\"\nmemory = \"1MiB\"\nregion = \"/dev/shm/fairgpu-policy-probe\"\n"
    );
    match fairgpu_config::Config::parse(&text, Path::new("policy probe")) {
        Ok(_) => Ok(PolicySupport::Key),
        Err(e) => {
            let msg = e.to_string();
            if name == "none" && msg.contains("unknown field `policy`") {
                Ok(PolicySupport::NoKey)
            } else if msg.contains("unknown field `policy`") {
                Err(
                    "this daemon has no scheduler yet (its configuration has no `policy` key)"
                        .into(),
                )
            } else {
                Err(msg.replace("policy probe: ", ""))
            }
        }
    }
}

/// The guest library to put on the workloads' library path.
pub fn guest_library() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os(GUEST_LIB_ENV) {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(HarnessError::NoGuestLib { path: p })
        };
    }
    let exe = std::env::current_exe().map_err(io("locating the fairgpu binary"))?;
    let lib = exe
        .parent()
        .map(|d| d.join("libcuda.so"))
        .unwrap_or_else(|| PathBuf::from("libcuda.so"));
    if lib.is_file() {
        Ok(lib)
    } else {
        Err(HarnessError::NoGuestLib { path: lib })
    }
}

/// The daemon's configuration for `cfg`.
fn config_text(cfg: &SessionConfig, socket: &Path, dir: &Path, regions: &[PathBuf]) -> String {
    let q = |p: &Path| format!("{:?}", p.display().to_string());
    let mut t = format!(
        "# written by fairgpu for one experiment\n[daemon]\ncontrol_socket = {}\nexecutor = {:?}\nstate_dir = {}\n",
        q(socket),
        cfg.device.executor(),
        q(dir)
    );
    if let Some(p) = &cfg.policy {
        t.push_str(&format!("policy = {p:?}\n"));
    }
    if let Some(a) = cfg.tuning.accounting {
        t.push_str(&format!("accounting = {:?}\n", a.name()));
    }
    if let Some(ms) = cfg.tuning.slice_ms {
        t.push_str(&format!("slice_ms = {ms:?}\n"));
    }
    if let Some(us) = cfg.tuning.spin_us {
        t.push_str(&format!("spin_us = {us}\n"));
    }
    if cfg.tuning.no_work_conserving {
        t.push_str("work_conserving = false\n");
    }
    for line in &cfg.tuning.daemon_lines {
        t.push_str(line);
        t.push('\n');
    }
    t.push_str("\n[sim]\nmemory_bytes = 4294967296\nname = \"fairgpu SimGpu\"\n\n");
    let settings = cfg
        .policy
        .as_deref()
        .and_then(|p| fairgpu_config::parse_policy(p).ok().flatten())
        .is_some_and(fairgpu_scheduler::PolicyKind::has_priorities);
    for (v, region) in cfg.vms.iter().zip(regions) {
        t.push_str(&format!(
            "[[vm]]\nname = {:?}\nweight = {}\nmemory = \"256MiB\"\nregion = {}\nchannels = 2\narena = \"1MiB\"\n",
            v.name,
            v.weight,
            q(region)
        ));
        if settings {
            for line in &v.settings {
                t.push_str(line);
                t.push('\n');
            }
        }
        t.push('\n');
    }
    t
}

/// Sends `sig` to our child `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    let _ = fairgpu_worker::process::send_signal(pid, sig);
}

/// Waits up to `timeout` for `child` to exit.
fn wait_child(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}

/// The last `lines` lines of a file.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One workload process.
#[derive(Debug)]
struct Guest {
    vm: String,
    child: Child,
    report: PathBuf,
    log: PathBuf,
    exited: Option<std::process::ExitStatus>,
}

/// A running daemon with its VMs' workloads. Dropping it stops everything
/// and removes its files.
#[derive(Debug)]
pub struct Session {
    cfg: SessionConfig,
    dir: PathBuf,
    socket: PathBuf,
    regions: Vec<PathBuf>,
    daemon: Option<Child>,
    daemon_log: PathBuf,
    lib_dir: Option<PathBuf>,
    guests: Vec<Guest>,
}

impl Session {
    /// Writes the configuration and starts the daemon; returns once its
    /// control socket answers.
    pub fn start(cfg: SessionConfig) -> Result<Session, HarnessError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag: String = cfg
            .label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .take(24)
            .collect();
        let dir = std::env::temp_dir().join(format!("fairgpu-{tag}-{pid}-{n}"));
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let socket = dir.join("control.sock");
        let mut session = Session {
            regions: cfg
                .vms
                .iter()
                .map(|v| PathBuf::from(format!("/dev/shm/fairgpu-{tag}-{pid}-{n}-{}", v.name)))
                .collect(),
            daemon_log: dir.join("daemon.log"),
            cfg,
            dir,
            socket,
            daemon: None,
            lib_dir: None,
            guests: Vec::new(),
        };
        let cfg = &session.cfg;
        let libcuda = std::iter::once(cfg.client)
            .chain(cfg.vms.iter().filter_map(|v| v.workload.client))
            .any(|c| c == ClientKind::Libcuda);
        session.lib_dir = if libcuda {
            Some(session.link_guest_lib()?)
        } else {
            None
        };
        let config = session.dir.join("fairgpu.toml");
        let text = config_text(
            &session.cfg,
            &session.socket,
            &session.dir,
            &session.regions,
        );
        std::fs::write(&config, text).map_err(io(format!("writing {}", config.display())))?;
        let log = File::create(&session.daemon_log).map_err(io("creating the daemon log"))?;
        let exe = std::env::current_exe().map_err(io("locating the fairgpu binary"))?;
        let mut cmd = Command::new(exe);
        let filter = session.cfg.tuning.daemon_log.as_deref().unwrap_or("warn");
        cmd.args(["serve", "--log", filter, "--config"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some((daemon_cpus, _)) = cpu_split(session.cfg.tuning.pin) {
            restrict_to(&mut cmd, daemon_cpus);
        }
        let child = cmd.spawn().map_err(io("starting the daemon"))?;
        session.daemon = Some(child);
        let deadline = Instant::now() + DAEMON_START_TIMEOUT;
        while std::os::unix::net::UnixStream::connect(&session.socket).is_err() {
            if let Some(d) = &mut session.daemon {
                if let Ok(Some(status)) = d.try_wait() {
                    session.daemon = None;
                    return Err(HarnessError::Daemon {
                        why: format!("it exited ({status}):\n{}", tail(&session.daemon_log, 20)),
                    });
                }
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::Daemon {
                    why: format!(
                        "no control socket after {DAEMON_START_TIMEOUT:?}:\n{}",
                        tail(&session.daemon_log, 20)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(session)
    }

    /// `<dir>/lib` with `libcuda.so.1` and `libcuda.so` linked to the
    /// guest library.
    fn link_guest_lib(&self) -> Result<PathBuf, HarnessError> {
        let lib = guest_library()?;
        let lib =
            std::fs::canonicalize(&lib).map_err(io(format!("resolving {}", lib.display())))?;
        let dir = self.dir.join("lib");
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        for name in ["libcuda.so.1", "libcuda.so"] {
            let link = dir.join(name);
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&lib, &link)
                .map_err(io(format!("linking {}", link.display())))?;
        }
        Ok(dir)
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The VMs.
    pub fn vms(&self) -> &[VmSpec] {
        &self.cfg.vms
    }

    /// Starts every VM's workload for `seconds`.
    pub fn spawn_workloads(&mut self, seconds: f64) -> Result<(), HarnessError> {
        let exe = std::env::current_exe().map_err(io("locating the fairgpu binary"))?;
        for (v, region) in self.cfg.vms.iter().zip(&self.regions) {
            let report = self.dir.join(format!("{}.report.json", v.name));
            let log = self.dir.join(format!("{}.log", v.name));
            let stderr = File::create(&log).map_err(io("creating a workload log"))?;
            let mut cmd = Command::new(&exe);
            cmd.args([
                "__workload",
                "--log",
                "warn",
                "--profile",
                &v.workload.profile,
            ])
            .args(["--seconds", &seconds.to_string()])
            .arg("--report")
            .arg(&report)
            .args([
                "--client",
                v.workload.client.unwrap_or(self.cfg.client).name(),
            ])
            .env(fairgpu_frontend::REGION_ENV, region)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
            if let Some(k) = v.workload.kernel_us {
                cmd.args(["--kernel-us", &k.to_string()]);
            }
            if v.workload.sleep_ratio > 0.0 {
                cmd.args(["--sleep-ratio", &v.workload.sleep_ratio.to_string()]);
            }
            if let Some(b) = v.workload.blocks {
                cmd.args(["--blocks", &b.to_string()]);
            }
            if let Some(p) = v.workload.period_ms {
                cmd.args(["--period-ms", &p.to_string()]);
                cmd.args([
                    "--job-kernels",
                    &v.workload.job_kernels.unwrap_or(1).to_string(),
                ]);
            }
            if let Some((_, guest_cpus)) = cpu_split(self.cfg.tuning.pin) {
                restrict_to(&mut cmd, guest_cpus);
            }
            if let Some(lib) = &self.lib_dir {
                let mut path = std::ffi::OsString::from(lib);
                if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
                    path.push(":");
                    path.push(old);
                }
                cmd.env("LD_LIBRARY_PATH", path);
            }
            let child = cmd
                .spawn()
                .map_err(io(format!("starting the workload of {}", v.name)))?;
            self.guests.push(Guest {
                vm: v.name.clone(),
                child,
                report,
                log,
                exited: None,
            });
        }
        Ok(())
    }

    /// A workload that has already exited, with its log: the first one
    /// found, for error messages while waiting.
    pub fn failed_workload(&mut self) -> Option<String> {
        for g in &mut self.guests {
            if g.exited.is_none() {
                g.exited = g.child.try_wait().ok().flatten();
            }
            if let Some(s) = g.exited {
                if !s.success() {
                    return Some(format!(
                        "the workload of {} exited ({s}):\n{}",
                        g.vm,
                        tail(&g.log, 10)
                    ));
                }
            }
        }
        None
    }

    /// Waits up to `timeout` for every workload to exit and reads their
    /// reports (an error per VM that failed).
    pub fn finish_workloads(&mut self, timeout: Duration) -> Vec<Result<WorkloadReport, String>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        for g in &mut self.guests {
            if g.exited.is_none() {
                let left = deadline.saturating_duration_since(Instant::now());
                g.exited = wait_child(&mut g.child, left);
            }
            let r = match g.exited {
                None => {
                    signal(g.child.id(), libc::SIGKILL);
                    g.exited = g.child.wait().ok();
                    Err(format!("the workload of {} did not finish in time", g.vm))
                }
                Some(s) if !s.success() => Err(format!(
                    "the workload of {} exited ({s}): {}",
                    g.vm,
                    tail(&g.log, 5)
                )),
                Some(_) => std::fs::read_to_string(&g.report)
                    .map_err(|e| format!("reading {}: {e}", g.report.display()))
                    .and_then(|t| {
                        serde_json::from_str::<WorkloadReport>(t.trim())
                            .map_err(|e| format!("the report of {}: {e}", g.vm))
                    }),
            };
            out.push(r);
        }
        out
    }

    /// The daemon's log so far (its last lines).
    pub fn daemon_log(&self) -> String {
        tail(&self.daemon_log, 20)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for g in &mut self.guests {
            if g.exited.is_none() && matches!(g.child.try_wait(), Ok(None)) {
                signal(g.child.id(), libc::SIGKILL);
            }
            let _ = g.child.wait();
        }
        if let Some(mut d) = self.daemon.take() {
            if matches!(d.try_wait(), Ok(None)) {
                signal(d.id(), libc::SIGTERM);
                if wait_child(&mut d, DAEMON_STOP_TIMEOUT).is_none() {
                    signal(d.id(), libc::SIGKILL);
                }
            }
            let _ = d.wait();
        }
        for r in &self.regions {
            let _ = std::fs::remove_file(r);
        }
        if self.cfg.tuning.daemon_log.is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!(
                "kept {} (daemon.log, the workloads' logs)",
                self.dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_probe_matches_the_parser() {
        // "none" is always possible: as a key, or by leaving the key out.
        assert!(policy_support("none").is_ok());
        // A name no daemon accepts is refused with the parser's message.
        assert!(policy_support("no-such-policy").is_err());
    }

    #[test]
    fn configs_name_every_vm_and_parse() {
        let cfg = SessionConfig {
            label: "unit".into(),
            device: Device::Sim,
            policy: None,
            vms: vec![
                VmSpec {
                    name: "vm1".into(),
                    weight: 1,
                    workload: WorkloadSpec::profile("MM"),
                    settings: vec!["priority = 3".into()],
                },
                VmSpec {
                    name: "vm2".into(),
                    weight: 3,
                    workload: WorkloadSpec::profile("HS"),
                    settings: Vec::new(),
                },
            ],
            client: ClientKind::Rust,
            tuning: Tuning {
                daemon_lines: vec!["kernel_slice_blocks = 500".into()],
                ..Tuning::default()
            },
        };
        let regions = [PathBuf::from("/dev/shm/a"), PathBuf::from("/dev/shm/b")];
        let text = config_text(
            &cfg,
            Path::new("/tmp/x/control.sock"),
            Path::new("/tmp/x"),
            &regions,
        );
        let c = fairgpu_config::Config::parse(&text, Path::new("t")).unwrap();
        assert_eq!(c.vms.len(), 2);
        assert_eq!(c.vms[1].weight, 3);
        assert_eq!(c.daemon.executor, fairgpu_config::ExecutorChoice::Sim);
        assert_eq!(c.daemon.long_kernels.min_blocks, 500, "the extra lines");
        assert_eq!(
            c.vms[0].priority, 0,
            "no priority without a TimeGraph policy"
        );
        let tg = SessionConfig {
            policy: Some("timegraph-ht".into()),
            ..cfg.clone()
        };
        let text = config_text(
            &tg,
            Path::new("/tmp/x/control.sock"),
            Path::new("/tmp/x"),
            &regions,
        );
        let c = fairgpu_config::Config::parse(&text, Path::new("t")).unwrap();
        assert_eq!((c.vms[0].priority, c.vms[1].priority), (3, 0));
        assert_eq!(
            WorkloadSpec {
                profile: "Throttle".into(),
                kernel_us: Some(207.0),
                sleep_ratio: 0.5,
                ..WorkloadSpec::profile("Throttle")
            }
            .describe(),
            "Throttle 207us sleep 50%"
        );
        assert_eq!(
            WorkloadSpec {
                profile: "MM".into(),
                kernel_us: Some(100_000.0),
                sleep_ratio: 0.0,
                blocks: Some(60_000),
                ..WorkloadSpec::profile("MM")
            }
            .describe(),
            "MM 100000us x60000 blocks"
        );
        assert_eq!(
            WorkloadSpec {
                kernel_us: Some(200.0),
                period_ms: Some(20.0),
                job_kernels: Some(10),
                ..WorkloadSpec::profile("MM")
            }
            .describe(),
            "MM 200us x10 every 20ms"
        );
        assert_eq!(WorkloadSpec::profile("MM").kernel_ns(), Some(207_000));
    }
}
