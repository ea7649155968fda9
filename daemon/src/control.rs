//! The daemon's control socket: a Unix stream socket carrying one JSON
//! request per line and one JSON reply per line.
//!
//! ```text
//! → {"cmd":"status"}
//! ← {"ok":true,"status":{"daemon":{...},"vms":[{...},...]}}
//! → {"cmd":"set-weight","vm":"vm1","weight":3}
//! ← {"ok":true}
//! → {"cmd":"reboot"}
//! ← {"ok":false,"error":"bad request: unknown variant `reboot`, ..."}
//! ```
//!
//! A connection may carry any number of requests. A request line longer
//! than [`MAX_REQUEST`] bytes gets an error reply and the connection is
//! closed; a malformed request gets an error reply and the connection stays
//! open. Nothing a client sends can stop the daemon. At most
//! [`MAX_CLIENTS`] connections are served at once; idle ones are closed
//! after [`IDLE_TIMEOUT`].
//!
//! Who may connect: the daemon's user, and `[daemon] control_group` if set
//! (the socket is 0600, or 0660 with that group). The socket's directory is
//! created 0700 if missing; daemon and client both refuse a directory
//! others could write, and at the default path (`/tmp/fairgpu-<uid>`,
//! which anyone could create first) also a symlink or a directory that is
//! not this user's ([`fairgpu_config::perms::check_socket_dir`]).

use fairgpu_config::table::format_table;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use fairgpu_config::perms::{self, Access, DirTrust, GroupSpec, PermsError};
use fairgpu_worker::stats::WorkerState;

/// Longest request line, in bytes.
pub const MAX_REQUEST: usize = 64 * 1024;
/// Most connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// How long a connection may stay silent before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the accept loop looks at the shutdown flag.
const ACCEPT_POLL: Duration = Duration::from_millis(20);

/// A request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Every VM's worker, channels and usage. (A struct variant, so that
    /// unknown fields are refused.)
    Status {},
    /// Changes a VM's weight while the daemon runs (1..=10000); it applies
    /// to the GPU time charged from then on.
    #[serde(alias = "set_weight")]
    SetWeight {
        /// The VM's name.
        vm: String,
        /// Its new weight.
        weight: u32,
    },
}

/// A reply: `ok` and the result, or `ok: false` and an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request succeeded.
    pub ok: bool,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The answer to `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
}

impl Reply {
    /// A failure reply.
    pub fn error(why: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            error: Some(why.into()),
            status: None,
        }
    }
}

/// The daemon's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// Daemon-wide facts.
    pub daemon: DaemonStatus,
    /// Every VM, in configuration order.
    pub vms: Vec<VmStatus>,
}

/// Daemon-wide facts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DaemonStatus {
    /// The daemon's process id.
    pub pid: u32,
    /// The executor the workers use: "sim" or "cuda".
    pub executor: String,
    /// Seconds since the daemon started.
    pub uptime_s: f64,
    /// The control socket.
    pub control_socket: PathBuf,
    /// The stats file.
    pub stats_file: PathBuf,
    /// The shared SimGpu device file, with the sim executor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim_device: Option<PathBuf>,
    /// The scheduling policy: "fairgv", "credit-poll", "credit-hs",
    /// "strict", or "none" (no scheduler).
    #[serde(default = "no_policy")]
    pub policy: String,
    /// The time slice, ms (with a policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slice_ms: Option<f64>,
    /// How holders measure their GPU time: "sampled", "every", "events" or
    /// "none" (with a policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accounting: Option<String>,
    /// The VM holding the GPU now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// FairGV's preemptive mode: holders busy past their slice are
    /// switched out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub preemptive: bool,
    /// Backfilling: the longest request a backfill grant admits, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_max_us: Option<u64>,
}

fn no_policy() -> String {
    "none".into()
}

/// One VM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmStatus {
    /// Its name.
    pub name: String,
    /// Its weight.
    pub weight: u32,
    /// Its region file.
    pub region: PathBuf,
    /// The worker's process id (0: no worker running).
    pub worker_pid: u32,
    /// What the worker is doing.
    pub state: WorkerState,
    /// Restarts after unexpected worker exits.
    pub restarts: u64,
    /// Channels claimed by guests.
    pub channels_used: u32,
    /// Channels in the region.
    pub channels_total: u32,
    /// Device memory allocated, bytes.
    pub mem_used: u64,
    /// Device-memory quota, bytes.
    pub mem_quota: u64,
    /// Host memory the worker holds for the VM's guests (parsed modules,
    /// module variables, images), bytes.
    #[serde(default)]
    pub host_mem_used: u64,
    /// The VM's host-memory budget, bytes.
    #[serde(default)]
    pub host_mem_limit: u64,
    /// Live device contexts.
    pub contexts: u32,
    /// Device time used, over every worker of the VM, ns.
    pub gpu_time_ns: u64,
    /// Requests served, over every worker of the VM.
    pub calls: u64,
    /// Kernel launches served, over every worker of the VM.
    #[serde(default)]
    pub kernels: u64,
    /// Kernel slicing and the runaway guard, over every worker of the VM.
    #[serde(default)]
    pub long_kernels: fairgpu_worker::stats::LongKernelStats,
    /// Times the worker published these counts (it does so between
    /// requests, every few milliseconds): a count read after this moved
    /// twice past a value read after some work ended includes that work.
    #[serde(default)]
    pub published: u64,
    /// The scheduler's view, with a policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sched: Option<VmSchedStatus>,
    /// A QEMU VM's device, ivshmem peers and QMP state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qemu: Option<crate::qemu::QemuStatus>,
}

/// One VM as the GPU scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmSchedStatus {
    /// "blocked" (nothing to issue), "runnable" (waits for the GPU) or
    /// "running" (holds the grant).
    pub state: String,
    /// GPU time the policy charged, ns (the holders' measurements).
    pub charged_ns: u64,
    /// Grants received.
    pub grants: u64,
    /// Grants that asked for the VM's vCPUs to be woken (GPU-centric
    /// co-scheduling of an interactive VM).
    pub cosched_wakes: u64,
    /// Of those, the grants that found a guest thread asleep and woke it;
    /// the rest found the guest already waiting.
    #[serde(default)]
    pub cosched_woke: u64,
    /// Grants held past the slice plus the grace.
    pub overruns: u64,
    /// The longest it held one grant, ns (wall-clock, grant to release).
    #[serde(default)]
    pub longest_hold_ns: u64,
    /// Grants revoked before their end (preempted by higher priority, or a
    /// disengaged slice that ended while others waited).
    #[serde(default)]
    pub revoked: u64,
    /// Backfilling: requests it ran in other holders' idle gaps.
    #[serde(default)]
    pub backfilled: u64,
    /// Their device time, ns (part of `charged_ns`).
    #[serde(default)]
    pub backfill_ns: u64,
    /// TimeGraph: its priority (higher runs first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// TimeGraph: its reservation, "BUDGET_MS/PERIOD_MS pe|ae".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// TimeGraph: budget left in the period, ns (negative after an overrun).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_ns: Option<i64>,
    /// TimeGraph: picks that found it throttled by its reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttled: Option<u64>,
    /// NEON: accrued overuse not yet paid, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overuse_ns: Option<u64>,
    /// NEON: turns skipped to pay for overuse.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// NEON: what its last release left of its slice, added to its next
    /// one, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credit_ns: Option<u64>,
    /// Disengaged fair queueing: how far its virtual time is ahead of the
    /// system's, in weighted ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead_ns: Option<u64>,
    /// Disengaged fair queueing: free runs it was denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denials: Option<u64>,
}

/// The policy-specific fields of a [`VmSchedStatus`] (the rest left empty).
pub fn sched_standing(revoked: u64, standing: fairgpu_scheduler::Standing) -> VmSchedStatus {
    use fairgpu_scheduler::Standing;
    let mut s = VmSchedStatus {
        state: String::new(),
        charged_ns: 0,
        grants: 0,
        cosched_wakes: 0,
        cosched_woke: 0,
        overruns: 0,
        longest_hold_ns: 0,
        revoked,
        backfilled: 0,
        backfill_ns: 0,
        priority: None,
        reservation: None,
        budget_ns: None,
        throttled: None,
        overuse_ns: None,
        skipped: None,
        credit_ns: None,
        ahead_ns: None,
        denials: None,
    };
    match standing {
        Standing::TimeGraph {
            priority,
            reservation,
            budget,
            throttled,
        } => {
            s.priority = Some(priority);
            s.reservation = reservation.map(|r| {
                format!(
                    "{}/{} ms {}",
                    r.budget.as_nanos() as f64 / 1e6,
                    r.period.as_nanos() as f64 / 1e6,
                    r.mode.name()
                )
            });
            s.budget_ns = budget;
            s.throttled = Some(throttled);
        }
        Standing::Timeslice {
            overuse,
            skipped,
            credit,
        } => {
            s.overuse_ns = Some(overuse.as_nanos());
            s.skipped = Some(skipped);
            s.credit_ns = Some(credit.as_nanos());
        }
        Standing::Disengaged {
            vt,
            system,
            denials,
            ..
        } => {
            s.ahead_ns = Some(vt.saturating_sub(system).as_weighted_nanos() as u64);
            s.denials = Some(denials);
        }
        Standing::Fair { .. } | Standing::Credit { .. } => {}
    }
    s
}

impl VmSchedStatus {
    /// Its policy-specific standing in words, or `None` if there is none
    /// to show.
    pub fn standing_text(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(p) = self.priority {
            parts.push(format!("priority {p}"));
        }
        if let Some(r) = &self.reservation {
            parts.push(format!("reservation {r}"));
        }
        if let Some(b) = self.budget_ns {
            parts.push(format!("budget left {:.3} ms", b as f64 / 1e6));
        }
        if let Some(t) = self.throttled.filter(|&t| t > 0) {
            parts.push(format!("throttled {t} times"));
        }
        if let Some(o) = self.overuse_ns {
            parts.push(format!("overuse {:.3} ms", o as f64 / 1e6));
        }
        if let Some(s) = self.skipped.filter(|&s| s > 0) {
            parts.push(format!("{s} turns skipped"));
        }
        if let Some(c) = self.credit_ns.filter(|&c| c > 0) {
            parts.push(format!("credit {:.3} ms", c as f64 / 1e6));
        }
        if let Some(a) = self.ahead_ns {
            parts.push(format!(
                "virtual time {:.3} ms ahead of the system's",
                a as f64 / 1e6
            ));
        }
        if let Some(d) = self.denials.filter(|&d| d > 0) {
            parts.push(format!("denied {d} free runs"));
        }
        if self.revoked > 0 {
            parts.push(format!("{} grants revoked", self.revoked));
        }
        if self.cosched_wakes > 0 {
            parts.push(format!(
                "{} co-scheduled grants: {} woke the guest, {} found it waiting",
                self.cosched_wakes,
                self.cosched_woke,
                self.cosched_wakes.saturating_sub(self.cosched_woke)
            ));
        }
        if self.longest_hold_ns > 0 {
            parts.push(format!(
                "longest grant held {:.1} ms",
                self.longest_hold_ns as f64 / 1e6
            ));
        }
        if self.backfilled > 0 {
            parts.push(format!(
                "backfilled {} kernels ({:.1} ms) in others' idle gaps",
                self.backfilled,
                self.backfill_ns as f64 / 1e6
            ));
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }
}

/// Why the control socket could not be set up or used.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Another daemon answers on the socket.
    #[error("another daemon is already listening on {0}")]
    InUse(PathBuf),
    /// Something that is not a socket is in the way.
    #[error("{0} exists and is not a socket")]
    NotASocket(PathBuf),
    /// Creating, binding or connecting failed.
    #[error("control socket {path}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The socket's directory is unsafe, or its mode or group could not
    /// be set.
    #[error("control socket {path}")]
    Perms {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: PermsError,
    },
    /// The daemon's reply was not valid.
    #[error("bad reply from the daemon: {0}")]
    BadReply(String),
}

fn perms_err(path: &Path) -> impl FnOnce(PermsError) -> ControlError + '_ {
    move |source| ControlError::Perms {
        path: path.to_owned(),
        source,
    }
}

/// How far the directory of the socket at `path` must be trusted: the
/// default one is at a well-known path someone else could create first.
fn dir_trust(path: &Path) -> DirTrust {
    if path == fairgpu_config::default_control_socket() {
        DirTrust::Ours
    } else {
        DirTrust::Named
    }
}

/// Checks the directory of the socket at `path` as a client must before
/// connecting ([`perms::check_socket_dir`]; the default directory must be
/// ours).
pub fn check_socket_dir(path: &Path) -> Result<(), PermsError> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) => perms::check_socket_dir(dir, dir_trust(path)),
        None => Ok(()),
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ControlError + '_ {
    move |source| ControlError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A bound control socket; the socket file is removed when it is dropped.
#[derive(Debug)]
pub struct ControlServer {
    listener: UnixListener,
    path: PathBuf,
}

impl ControlServer {
    /// Binds `path` with mode 0600, or 0660 and `group`, creating its
    /// directory (mode 0700) if needed and refusing an unsafe one. A stale
    /// socket left by a dead daemon is replaced; a live one is an error.
    pub fn bind(path: &Path, group: Option<&GroupSpec>) -> Result<ControlServer, ControlError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            perms::ensure_socket_dir(dir, dir_trust(path)).map_err(perms_err(path))?;
        }
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_socket() => {
                return Err(ControlError::NotASocket(path.to_owned()))
            }
            Ok(_) => {
                if UnixStream::connect(path).is_ok() {
                    return Err(ControlError::InUse(path.to_owned()));
                }
                tracing::info!(socket = %path.display(), "replacing a stale control socket");
                std::fs::remove_file(path).map_err(io_err(path))?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(path)(e)),
        }
        let access = Access {
            mode: group.map_or(perms::PRIVATE_MODE, |_| perms::GROUP_MODE),
            group: group.cloned(),
        };
        let listener = perms::bind_listener(path, &access).map_err(perms_err(path))?;
        let server = ControlServer {
            listener,
            path: path.to_owned(),
        };
        server
            .listener
            .set_nonblocking(true)
            .map_err(io_err(path))?;
        Ok(server)
    }

    /// The socket file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serves connections until `shutdown` becomes true, answering each
    /// request with `handle`. Each connection gets its own thread.
    pub fn run<F>(&self, shutdown: &AtomicBool, handle: F)
    where
        F: Fn(&Request) -> Reply + Send + Sync + 'static,
    {
        let handle = Arc::new(handle);
        let clients = Arc::new(AtomicUsize::new(0));
        while !shutdown.load(Ordering::Relaxed) {
            let stream = match self.listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(ACCEPT_POLL);
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "control socket accept failed");
                    std::thread::sleep(ACCEPT_POLL);
                    continue;
                }
            };
            if clients.fetch_add(1, Ordering::Relaxed) >= MAX_CLIENTS {
                clients.fetch_sub(1, Ordering::Relaxed);
                let mut s = stream;
                let _ = s.set_nonblocking(false);
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                let _ = write_reply(&mut s, &Reply::error("too many control connections"));
                continue;
            }
            let handle = handle.clone();
            let clients = clients.clone();
            let spawned = std::thread::Builder::new()
                .name("fairgpu-control".into())
                .spawn(move || {
                    if let Err(e) = serve_client(stream, &*handle) {
                        tracing::debug!(error = %e, "control connection ended");
                    }
                    clients.fetch_sub(1, Ordering::Relaxed);
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start a control connection thread");
            }
        }
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn write_reply(w: &mut impl Write, reply: &Reply) -> io::Result<()> {
    let mut line = serde_json::to_vec(reply).map_err(io::Error::other)?;
    line.push(b'\n');
    w.write_all(&line)?;
    w.flush()
}

/// Serves one connection until end of input, an oversized request, an
/// idle timeout or an I/O error.
fn serve_client(
    stream: UnixStream,
    handle: &(dyn Fn(&Request) -> Reply + Send + Sync),
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(IDLE_TIMEOUT))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .by_ref()
            .take(MAX_REQUEST as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && line.len() > MAX_REQUEST {
            write_reply(
                &mut writer,
                &Reply::error(format!("request longer than {MAX_REQUEST} bytes")),
            )?;
            return Ok(());
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<Request>(text) {
            Ok(req) => handle(&req),
            Err(e) => Reply::error(format!("bad request: {e}")),
        };
        write_reply(&mut writer, &reply)?;
    }
}

/// Sends one request to the daemon at `path` and returns its reply. A
/// socket in a directory others could write (or, at the default path, one
/// that is not ours) is refused before connecting: whoever answers there
/// need not be the daemon.
pub fn request(path: &Path, req: &Request, timeout: Duration) -> Result<Reply, ControlError> {
    check_socket_dir(path).map_err(perms_err(path))?;
    let mut stream = UnixStream::connect(path).map_err(io_err(path))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(io_err(path))?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(io_err(path))?;
    let mut line = serde_json::to_vec(req).map_err(|e| ControlError::BadReply(e.to_string()))?;
    line.push(b'\n');
    stream.write_all(&line).map_err(io_err(path))?;
    let mut reader = BufReader::new(stream);
    let mut reply = Vec::new();
    reader
        .by_ref()
        .take(16 * 1024 * 1024)
        .read_until(b'\n', &mut reply)
        .map_err(io_err(path))?;
    serde_json::from_slice(&reply).map_err(|e| ControlError::BadReply(e.to_string()))
}

/// GPU time for people: "0 s", "12.3 ms", "4.567 s".
pub fn format_gpu_time(ns: u64) -> String {
    match ns {
        0 => "0 s".into(),
        n if n < 1_000_000 => format!("{:.1} us", n as f64 / 1e3),
        n if n < 1_000_000_000 => format!("{:.1} ms", n as f64 / 1e6),
        n => format!("{:.3} s", n as f64 / 1e9),
    }
}

/// The `fairgpu status` table.
pub fn render_table(status: &Status) -> String {
    use fairgpu_config::format_size;
    let d = &status.daemon;
    let sched = match (&d.slice_ms, &d.accounting) {
        (Some(slice), Some(acct)) => format!(
            "policy {}{}{} (slice {slice} ms, accounting {acct}{})",
            d.policy,
            if d.preemptive { ", preemptive" } else { "" },
            d.backfill_max_us.map_or_else(String::new, |us| format!(
                ", backfilling kernels up to {us} us"
            )),
            d.holder
                .as_deref()
                .map_or_else(String::new, |h| format!(", holder {h}"))
        ),
        _ => format!("policy {}", d.policy),
    };
    let mut out = format!(
        "daemon pid {}, executor {}, {sched}, up {:.0} s, control socket {}\n\n",
        d.pid,
        d.executor,
        d.uptime_s,
        d.control_socket.display()
    );
    let scheduled = status.vms.iter().any(|v| v.sched.is_some());
    let rows: Vec<Vec<String>> = status
        .vms
        .iter()
        .map(|v| {
            let mut row = vec![
                v.name.clone(),
                v.weight.to_string(),
                if v.worker_pid == 0 {
                    "-".into()
                } else {
                    v.worker_pid.to_string()
                },
                v.state.to_string(),
                format!("{}/{}", v.channels_used, v.channels_total),
                format!("{} / {}", format_size(v.mem_used), format_size(v.mem_quota)),
                format!(
                    "{} / {}",
                    format_size(v.host_mem_used),
                    format_size(v.host_mem_limit)
                ),
                format_gpu_time(v.gpu_time_ns),
                v.kernels.to_string(),
                v.calls.to_string(),
                v.restarts.to_string(),
            ];
            if scheduled {
                match &v.sched {
                    Some(s) => row.extend([
                        s.state.clone(),
                        format_gpu_time(s.charged_ns),
                        s.grants.to_string(),
                    ]),
                    None => row.extend(["-".into(), "-".into(), "-".into()]),
                }
            }
            row
        })
        .collect();
    let mut headers = vec![
        "VM",
        "WEIGHT",
        "PID",
        "STATE",
        "CHANNELS",
        "MEMORY",
        "HOST MEMORY",
        "GPU TIME",
        "KERNELS",
        "CALLS",
        "RESTARTS",
    ];
    if scheduled {
        headers.extend(["SCHED", "CHARGED", "GRANTS"]);
    }
    out.push_str(&format_table(&headers, &rows));
    for v in &status.vms {
        if let Some(q) = &v.qemu {
            out.push_str(&format!("{}: {}\n", v.name, q.summary()));
        }
        if let Some(t) = v.sched.as_ref().and_then(VmSchedStatus::standing_text) {
            out.push_str(&format!("{}: {t}\n", v.name));
        }
        let l = &v.long_kernels;
        if !l.is_zero() {
            out.push_str(&format!(
                "{}: long kernels: {} launches sliced into {} parts, {} not sliceable, {} ended by the runaway guard\n",
                v.name, l.sliced, l.parts, l.unsliceable, l.runaways
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket path in a directory of its own (removed by the test).
    fn sock(name: &str) -> PathBuf {
        std::env::temp_dir()
            .join(format!("fairgpu-ctl-{}-{name}", std::process::id()))
            .join(format!("{name}.sock"))
    }

    fn raw(path: &Path, bytes: &[u8]) -> String {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(bytes).unwrap();
        let mut out = String::new();
        BufReader::new(s).read_line(&mut out).unwrap();
        out
    }

    #[test]
    fn requests_are_answered_and_garbage_is_refused() {
        let path = sock("basic");
        let server = ControlServer::bind(&path, None).unwrap();
        assert!(matches!(
            ControlServer::bind(&path, None),
            Err(ControlError::InUse(_))
        ));
        let stop = Arc::new(AtomicBool::new(false));
        let t = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                server.run(&stop, |r| match r {
                    Request::Status {} => Reply::error("no status in this test"),
                    Request::SetWeight { vm, weight } => Reply::error(format!("{vm} {weight}")),
                });
                server
            })
        };
        let r = request(&path, &Request::Status {}, Duration::from_secs(10)).unwrap();
        assert_eq!(r.error.as_deref(), Some("no status in this test"));
        for bad in [
            &b"not json\n"[..],
            b"{\"cmd\":\"reboot\"}\n",
            b"{\"cmd\":\"status\",\"extra\":1}\n",
            b"\xff\xfe\n",
        ] {
            let out = raw(&path, bad);
            assert!(out.contains("bad request"), "{out}");
        }
        let mut huge = vec![b'x'; MAX_REQUEST + 10];
        huge.push(b'\n');
        assert!(raw(&path, &huge).contains("longer than"));
        // The server still answers after all that.
        assert!(request(&path, &Request::Status {}, Duration::from_secs(10)).is_ok());
        let set = Request::SetWeight {
            vm: "vm1".into(),
            weight: 3,
        };
        let r = request(&path, &set, Duration::from_secs(10)).unwrap();
        assert_eq!(r.error.as_deref(), Some("vm1 3"));
        for (line, want) in [
            (
                &b"{\"cmd\":\"set_weight\",\"vm\":\"a\",\"weight\":2}\n"[..],
                "a 2",
            ),
            (
                b"{\"cmd\":\"set-weight\",\"vm\":\"a\",\"weight\":-1}\n",
                "bad request",
            ),
            (b"{\"cmd\":\"set-weight\",\"vm\":\"a\"}\n", "bad request"),
        ] {
            let out = raw(&path, line);
            assert!(out.contains(want), "{out}");
        }

        stop.store(true, Ordering::Relaxed);
        let server = t.join().unwrap();
        drop(server);
        assert!(!path.exists(), "the socket is removed on drop");
        std::fs::remove_dir(path.parent().unwrap()).unwrap();
    }

    /// The attack: the socket's directory was used whoever could write
    /// it, so another user could replace the socket with a fake daemon's.
    #[test]
    fn a_socket_dir_others_can_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let path = sock("world");
        let dir = path.parent().unwrap();
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = ControlServer::bind(&path, None).map(drop).unwrap_err();
        let e = format!("{:#}", anyhow::Error::from(e));
        assert!(
            e.contains(&dir.display().to_string()) && e.contains("writable"),
            "{e}"
        );
        assert!(!path.exists());
        std::fs::remove_dir(dir).unwrap();
    }

    /// The attack: a socket of mode 0660 in a directory the daemon's group
    /// may enter let every member (QEMU's user) set any VM's weight.
    #[test]
    fn a_group_member_cannot_reach_the_control_socket() {
        use std::os::unix::fs::PermissionsExt;
        let path = sock("private");
        let server = ControlServer::bind(&path, None).unwrap();
        let mode = std::fs::symlink_metadata(&path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777;
        assert_eq!(mode, 0o600, "control socket mode {mode:o}");
        drop(server);
        std::fs::remove_dir(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn the_status_table_has_a_row_per_vm() {
        let vm = |name: &str, pid| VmStatus {
            name: name.into(),
            weight: 2,
            region: PathBuf::from("/dev/shm/x"),
            worker_pid: pid,
            state: WorkerState::Running,
            restarts: 1,
            channels_used: 1,
            channels_total: 4,
            mem_used: 512 << 20,
            mem_quota: 4 << 30,
            host_mem_used: 3 << 20,
            host_mem_limit: 1 << 30,
            contexts: 1,
            gpu_time_ns: 1_500_000,
            calls: 77,
            kernels: 12,
            long_kernels: Default::default(),
            published: 40,
            sched: (pid != 0).then(|| VmSchedStatus {
                state: "runnable".into(),
                charged_ns: 1_400_000,
                grants: 5,
                cosched_wakes: 4,
                cosched_woke: 1,
                overruns: 0,
                longest_hold_ns: 7_300_000,
                revoked: 2,
                backfilled: 40,
                backfill_ns: 8_200_000,
                priority: Some(7),
                reservation: Some("2/10 ms pe".into()),
                budget_ns: Some(-1_500_000),
                throttled: Some(3),
                overuse_ns: None,
                skipped: None,
                credit_ns: None,
                ahead_ns: None,
                denials: None,
            }),
            qemu: None,
        };
        let status = Status {
            daemon: DaemonStatus {
                pid: 1,
                executor: "sim".into(),
                uptime_s: 3.0,
                control_socket: PathBuf::from("/tmp/c.sock"),
                stats_file: PathBuf::from("/dev/shm/s"),
                sim_device: None,
                policy: "fairgv".into(),
                slice_ms: Some(6.0),
                accounting: Some("sampled".into()),
                holder: Some("vm1".into()),
                preemptive: false,
                backfill_max_us: None,
            },
            vms: vec![vm("vm1", 10), vm("a-much-longer-name", 0)],
        };
        let t = render_table(&status);
        assert!(
            t.lines()
                .next()
                .unwrap()
                .contains("policy fairgv (slice 6 ms, accounting sampled, holder vm1)"),
            "{t}"
        );
        assert!(t.contains("KERNELS") && t.contains("CHARGED"), "{t}");
        assert!(
            t.contains("vm1: priority 7, reservation 2/10 ms pe, budget left -1.500 ms, throttled 3 times, 2 grants revoked, 4 co-scheduled grants: 1 woke the guest, 3 found it waiting, longest grant held 7.3 ms, backfilled 40 kernels (8.2 ms) in others' idle gaps"),
            "{t}"
        );
        assert!(t.lines().nth(3).unwrap().contains("runnable"), "{t}");
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[2].starts_with("VM "), "{t}");
        assert!(lines[3].contains("vm1") && lines[3].contains("1/4"), "{t}");
        assert!(
            lines[3].contains("512 MiB / 4 GiB") && lines[3].contains("1.5 ms"),
            "{t}"
        );
        assert!(lines[4].contains(" - "), "no worker shows as -: {t}");
        // Columns line up.
        assert_eq!(lines[3].find("running"), lines[4].find("running"), "{t}");
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(serde_json::from_str::<Status>(&json).unwrap(), status);
    }

    #[test]
    fn a_timeslice_standing_says_overuse_skips_and_credit() {
        use fairgpu_scheduler::{Nanos, Standing};
        let s = sched_standing(
            0,
            Standing::Timeslice {
                overuse: Nanos::from_micros(1_500),
                skipped: 2,
                credit: Nanos::from_micros(700),
            },
        );
        assert_eq!(
            (s.overuse_ns, s.skipped, s.credit_ns),
            (Some(1_500_000), Some(2), Some(700_000))
        );
        let text = s.standing_text().unwrap();
        for part in ["overuse 1.500 ms", "2 turns skipped", "credit 0.700 ms"] {
            assert!(text.contains(part), "{text:?} lacks {part:?}");
        }
    }

    #[test]
    fn a_stale_socket_is_replaced_and_a_file_is_not() {
        let path = sock("stale");
        drop(std::fs::remove_file(&path));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        {
            let _stale = UnixListener::bind(&path).unwrap();
        }
        assert!(path.exists());
        let s = ControlServer::bind(&path, None).unwrap();
        drop(s);
        std::fs::write(&path, b"x").unwrap();
        assert!(matches!(
            ControlServer::bind(&path, None),
            Err(ControlError::NotASocket(_))
        ));
        std::fs::remove_file(&path).unwrap();
        std::fs::remove_dir(path.parent().unwrap()).unwrap();
    }
}
