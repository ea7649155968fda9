//! Reading a daemon's per-VM usage precisely enough to measure shares.
//!
//! Workers publish their counters about every 100 ms, so one status read
//! is up to 100 ms stale, differently for each VM. The [`Observer`] polls
//! the control socket every few milliseconds on a thread of its own and
//! keeps, per VM, the instants at which each counter *changed*: those are
//! (within one poll period) the instants the worker published, so a rate
//! between two change points is exact to a poll period over the span, not
//! to a publication period.
//!
//! Status is read as plain JSON ([`StatusView`]) and only the fields used
//! here are required, so daemons that report more (a scheduler's policy,
//! a `kernels` counter) are read as they are.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// Why the daemon could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    /// Connecting, writing or reading failed.
    #[error("control socket {path}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The reply was not what `status` answers.
    #[error("bad status reply from the daemon: {0}")]
    BadReply(String),
    /// The daemon answered with an error.
    #[error("the daemon refused: {0}")]
    Refused(String),
    /// The socket's directory is one someone else could have put a
    /// socket in.
    #[error("control socket {path}")]
    UnsafeDir {
        /// The socket.
        path: PathBuf,
        /// Why.
        #[source]
        source: fairgpu_config::perms::PermsError,
    },
}

/// One VM as the daemon reports it (the fields used here).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct VmView {
    /// Its name.
    pub name: String,
    /// Its weight.
    pub weight: u32,
    /// The worker's state ("running", ...).
    #[serde(default)]
    pub state: String,
    /// Channels claimed by guests.
    #[serde(default)]
    pub channels_used: u32,
    /// Device time used, ns.
    #[serde(default)]
    pub gpu_time_ns: u64,
    /// Requests served.
    #[serde(default)]
    pub calls: u64,
    /// Kernels launched, where the daemon counts them.
    #[serde(default)]
    pub kernels: Option<u64>,
    /// The scheduler's view, when a policy runs.
    #[serde(default)]
    pub sched: Option<SchedView>,
    /// Kernel slicing and the runaway guard.
    #[serde(default)]
    pub long_kernels: LongKernelsView,
}

/// A VM's long-kernel counters (the fields used here).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct LongKernelsView {
    /// Requests the runaway guard ended.
    #[serde(default)]
    pub runaways: u64,
}

/// A VM's scheduling counters (the fields used here).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SchedView {
    /// GPU time the policy charged it, ns.
    #[serde(default)]
    pub charged_ns: u64,
    /// Grants it received.
    #[serde(default)]
    pub grants: u64,
    /// Grants revoked before their end.
    #[serde(default)]
    pub revoked: u64,
    /// Grants that asked for its vCPUs to be woken (it was interactive).
    #[serde(default)]
    pub cosched_wakes: u64,
    /// Of those, the grants that found a guest thread asleep and woke it.
    #[serde(default)]
    pub cosched_woke: u64,
    /// The longest it held one grant, ns.
    #[serde(default)]
    pub longest_hold_ns: u64,
    /// Backfilling: requests it ran in other holders' idle gaps.
    #[serde(default)]
    pub backfilled: u64,
    /// Their device time, ns.
    #[serde(default)]
    pub backfill_ns: u64,
    /// TimeGraph: its priority.
    #[serde(default)]
    pub priority: Option<u8>,
    /// TimeGraph: its reservation.
    #[serde(default)]
    pub reservation: Option<String>,
    /// TimeGraph: budget left, ns.
    #[serde(default)]
    pub budget_ns: Option<i64>,
    /// TimeGraph: picks that found it throttled.
    #[serde(default)]
    pub throttled: Option<u64>,
    /// NEON: unpaid overuse, ns.
    #[serde(default)]
    pub overuse_ns: Option<u64>,
    /// NEON: turns skipped.
    #[serde(default)]
    pub skipped: Option<u64>,
    /// NEON: the rest of its last slice, added to its next, ns.
    #[serde(default)]
    pub credit_ns: Option<u64>,
    /// Disengaged fair queueing: virtual time ahead of the system's.
    #[serde(default)]
    pub ahead_ns: Option<u64>,
    /// Disengaged fair queueing: free runs denied.
    #[serde(default)]
    pub denials: Option<u64>,
}

impl SchedView {
    /// Its policy-specific standing in words, as `fairgpu status` says it.
    pub fn standing_text(&self) -> Option<String> {
        fairgpu_daemon::control::VmSchedStatus {
            state: String::new(),
            charged_ns: self.charged_ns,
            grants: self.grants,
            cosched_wakes: self.cosched_wakes,
            cosched_woke: self.cosched_woke,
            overruns: 0,
            longest_hold_ns: 0,
            revoked: self.revoked,
            backfilled: self.backfilled,
            backfill_ns: self.backfill_ns,
            priority: self.priority,
            reservation: self.reservation.clone(),
            budget_ns: self.budget_ns,
            throttled: self.throttled,
            overuse_ns: self.overuse_ns,
            skipped: self.skipped,
            credit_ns: self.credit_ns,
            ahead_ns: self.ahead_ns,
            denials: self.denials,
        }
        .standing_text()
    }
}

/// The daemon's status (the fields used here).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StatusView {
    /// Daemon-wide facts, as sent.
    #[serde(default)]
    pub daemon: serde_json::Value,
    /// Every VM, in configuration order.
    pub vms: Vec<VmView>,
}

impl StatusView {
    /// The daemon's executor ("sim", "cuda"), if it says.
    pub fn executor(&self) -> Option<&str> {
        self.daemon.get("executor")?.as_str()
    }

    /// The daemon's scheduling policy, if it reports one.
    pub fn policy(&self) -> Option<String> {
        let p = self
            .daemon
            .get("policy")
            .or_else(|| self.daemon.get("scheduler"))?;
        match p {
            serde_json::Value::String(s) => Some(s.clone()),
            serde_json::Value::Object(o) => o
                .get("policy")
                .or_else(|| o.get("name"))
                .and_then(|v| v.as_str())
                .map(str::to_owned),
            _ => None,
        }
    }
}

#[derive(Deserialize)]
struct RawReply {
    ok: bool,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    status: Option<StatusView>,
}

/// A connection to a daemon's control socket.
#[derive(Debug)]
pub struct StatusClient {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    line: Vec<u8>,
}

/// Longest status reply read.
const MAX_REPLY: u64 = 16 << 20;

impl StatusClient {
    /// Connects to the socket at `path`, refusing one in an unsafe
    /// directory as [`fairgpu_daemon::control::request`] does.
    pub fn connect(path: &Path) -> Result<StatusClient, ObserveError> {
        let io = |source| ObserveError::Io {
            path: path.to_owned(),
            source,
        };
        fairgpu_daemon::control::check_socket_dir(path).map_err(|source| {
            ObserveError::UnsafeDir {
                path: path.to_owned(),
                source,
            }
        })?;
        let s = UnixStream::connect(path).map_err(io)?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(io)?;
        s.set_write_timeout(Some(Duration::from_secs(10)))
            .map_err(io)?;
        let reader = BufReader::new(s.try_clone().map_err(io)?);
        Ok(StatusClient {
            path: path.to_owned(),
            writer: s,
            reader,
            line: Vec::new(),
        })
    }

    /// Sends one raw request line and returns the reply's JSON.
    pub fn request(&mut self, req: &serde_json::Value) -> Result<serde_json::Value, ObserveError> {
        let io = |source| ObserveError::Io {
            path: self.path.clone(),
            source,
        };
        let mut line =
            serde_json::to_vec(req).map_err(|e| ObserveError::BadReply(e.to_string()))?;
        line.push(b'\n');
        self.writer.write_all(&line).map_err(io)?;
        self.line.clear();
        let n = (&mut self.reader)
            .take(MAX_REPLY)
            .read_until(b'\n', &mut self.line)
            .map_err(|source| ObserveError::Io {
                path: self.path.clone(),
                source,
            })?;
        if n == 0 {
            return Err(ObserveError::BadReply(
                "the daemon closed the connection".into(),
            ));
        }
        serde_json::from_slice(&self.line).map_err(|e| ObserveError::BadReply(e.to_string()))
    }

    /// Asks for the status.
    pub fn status(&mut self) -> Result<StatusView, ObserveError> {
        let v = self.request(&serde_json::json!({"cmd": "status"}))?;
        let r: RawReply =
            serde_json::from_value(v).map_err(|e| ObserveError::BadReply(e.to_string()))?;
        if !r.ok {
            return Err(ObserveError::Refused(
                r.error.unwrap_or_else(|| "no reason given".into()),
            ));
        }
        r.status
            .ok_or_else(|| ObserveError::BadReply("no status in the reply".into()))
    }
}

/// A counter's value and when it was first seen, in seconds since the
/// observer started.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Seconds since the observer started.
    pub t: f64,
    /// The counter.
    pub v: u64,
}

/// Change points of one VM's device time: the first point, then one per
/// change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Track {
    /// The points, in time order.
    pub points: Vec<Point>,
}

impl Track {
    /// Adds an observation; keeps it only if the value changed.
    pub fn observe(&mut self, t: f64, v: u64) {
        if self.points.last().is_none_or(|p| p.v != v) {
            self.points.push(Point { t, v });
        }
    }

    /// The first change point at or after `t`, or the last one before it.
    pub fn at_or_after(&self, t: f64) -> Option<Point> {
        self.points
            .iter()
            .find(|p| p.t >= t)
            .or(self.points.last())
            .copied()
    }

    /// The last change point at or before `t`, or the first one.
    pub fn at_or_before(&self, t: f64) -> Option<Point> {
        self.points
            .iter()
            .rev()
            .find(|p| p.t <= t)
            .or(self.points.first())
            .copied()
    }

    /// The counter's rate per second over about `[from, to]`: between the
    /// first change at or after `from` and the last change at or before
    /// `to`. With fewer than two changes inside, between the last change
    /// before the window and the first after it; 0 when the counter did
    /// not move; `None` when nothing was seen.
    pub fn rate(&self, from: f64, to: f64) -> Option<f64> {
        let first = self.points.first()?;
        let inside: Vec<&Point> = self
            .points
            .iter()
            .filter(|p| p.t >= from && p.t <= to)
            .collect();
        if let (Some(a), Some(b)) = (inside.first(), inside.last()) {
            if b.t > a.t {
                return super::metrics::rate(a.t, a.v, b.t, b.v);
            }
        }
        let before = self
            .points
            .iter()
            .rev()
            .find(|p| p.t < from)
            .unwrap_or(first);
        match self.points.iter().find(|p| p.t > to) {
            Some(after) => super::metrics::rate(before.t, before.v, after.t, after.v),
            None => {
                let last = self.points.last().unwrap_or(first);
                // No change after the window: whatever changed inside it
                // over the window's length (0 for an idle VM).
                let span = to - from;
                (span > 0.0 && last.v >= before.v)
                    .then(|| (last.v - before.v) as f64 / span)
                    .or(Some(0.0))
            }
        }
    }
}

/// What the observer has seen.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The last status.
    pub last: Option<StatusView>,
    /// Seconds since the start of the last successful poll.
    pub last_t: f64,
    /// Device time per VM, in configuration order.
    pub gpu: Vec<Track>,
    /// Kernels per VM, where the daemon counts them.
    pub kernels: Vec<Track>,
    /// Charged GPU time per VM, where a policy runs.
    pub charged: Vec<Track>,
    /// Grants per VM, where a policy runs.
    pub grants: Vec<Track>,
    /// Co-scheduled grants per VM (interactive when granted).
    pub cosched: Vec<Track>,
    /// Co-scheduled grants that woke a sleeping guest thread, per VM.
    pub cosched_woke: Vec<Track>,
    /// Polls that failed.
    pub errors: u64,
    /// The last error.
    pub last_error: Option<String>,
}

/// Polls a daemon's status on its own thread.
#[derive(Debug)]
pub struct Observer {
    start: Instant,
    seen: Arc<Mutex<Observed>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Observer {
    /// Starts polling `socket` every `every`.
    pub fn start(socket: &Path, every: Duration) -> Result<Observer, ObserveError> {
        let mut client = StatusClient::connect(socket)?;
        let start = Instant::now();
        let seen = Arc::new(Mutex::new(Observed::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let socket = socket.to_owned();
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            std::thread::Builder::new()
                .name("fairgpu-observer".into())
                .spawn(move || {
                    // Relaxed: a stop request, ordered with nothing else.
                    while !stop.load(Ordering::Relaxed) {
                        let t0 = start.elapsed().as_secs_f64();
                        let r = client.status();
                        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                        match r {
                            Ok(st) => {
                                if s.gpu.len() != st.vms.len() {
                                    s.gpu = vec![Track::default(); st.vms.len()];
                                    s.kernels = vec![Track::default(); st.vms.len()];
                                    s.charged = vec![Track::default(); st.vms.len()];
                                    s.grants = vec![Track::default(); st.vms.len()];
                                    s.cosched = vec![Track::default(); st.vms.len()];
                                    s.cosched_woke = vec![Track::default(); st.vms.len()];
                                }
                                for (i, v) in st.vms.iter().enumerate() {
                                    s.gpu[i].observe(t0, v.gpu_time_ns);
                                    if let Some(k) = v.kernels {
                                        s.kernels[i].observe(t0, k);
                                    }
                                    if let Some(sc) = &v.sched {
                                        s.charged[i].observe(t0, sc.charged_ns);
                                        s.grants[i].observe(t0, sc.grants);
                                        s.cosched[i].observe(t0, sc.cosched_wakes);
                                        s.cosched_woke[i].observe(t0, sc.cosched_woke);
                                    }
                                }
                                s.last = Some(st);
                                s.last_t = t0;
                            }
                            Err(e) => {
                                s.errors += 1;
                                s.last_error = Some(e.to_string());
                                drop(s);
                                // A daemon restart closes the connection.
                                if let Ok(c) = StatusClient::connect(&socket) {
                                    client = c;
                                }
                                std::thread::sleep(every.max(Duration::from_millis(50)));
                                continue;
                            }
                        }
                        drop(s);
                        std::thread::sleep(every);
                    }
                })
                .map_err(|source| ObserveError::Io {
                    path: PathBuf::from("observer thread"),
                    source,
                })?
        };
        Ok(Observer {
            start,
            seen,
            stop,
            thread: Some(thread),
        })
    }

    /// Seconds since the observer started.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// A copy of what it has seen.
    pub fn snapshot(&self) -> Observed {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until `f` accepts the last status, for at most `timeout`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&StatusView) -> bool,
    ) -> Result<StatusView, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let snap = self.snapshot();
            if let Some(st) = &snap.last {
                if f(st) {
                    return Ok(st.clone());
                }
            }
            if Instant::now() >= deadline {
                return Err(match (snap.last, snap.last_error) {
                    (_, Some(e)) => e,
                    (Some(st), None) => format!("last status: {:?}", st.vms),
                    (None, None) => "no status yet".into(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_keep_change_points() {
        let mut t = Track::default();
        for (time, v) in [(0.0, 0), (0.01, 0), (0.1, 100), (0.11, 100), (0.2, 300)] {
            t.observe(time, v);
        }
        assert_eq!(t.points.len(), 3);
        assert_eq!(t.at_or_after(0.05), Some(Point { t: 0.1, v: 100 }));
        assert_eq!(t.at_or_before(0.15), Some(Point { t: 0.1, v: 100 }));
        assert_eq!(t.at_or_after(5.0), Some(Point { t: 0.2, v: 300 }));
        // Between the changes at 0.1 and 0.2: 200 per 0.1 s.
        let r = t.rate(0.05, 0.25).unwrap();
        assert!((r - 2000.0).abs() < 1e-6, "{r}");
    }

    #[test]
    fn an_idle_track_has_rate_zero() {
        let mut t = Track::default();
        t.observe(0.0, 500);
        t.observe(1.0, 500);
        assert_eq!(t.rate(0.2, 0.8), Some(0.0));
        assert_eq!(Track::default().rate(0.0, 1.0), None);
        // One change inside the window: the span around it is used.
        let mut t = Track::default();
        t.observe(0.0, 0);
        t.observe(0.5, 100);
        t.observe(1.5, 300);
        let r = t.rate(0.4, 1.0).unwrap();
        assert!((r - 300.0 / 1.5).abs() < 1e-9, "{r}");
    }

    #[test]
    fn status_views_read_extra_and_missing_fields() {
        let j = serde_json::json!({
            "daemon": {"pid": 1, "executor": "sim", "policy": "fairgv"},
            "vms": [{"name": "a", "weight": 2, "gpu_time_ns": 5, "kernels": 3, "future": true},
                    {"name": "b", "weight": 1}]
        });
        let s: StatusView = serde_json::from_value(j).unwrap();
        assert_eq!(s.executor(), Some("sim"));
        assert_eq!(s.policy().as_deref(), Some("fairgv"));
        assert_eq!(s.vms[0].kernels, Some(3));
        assert_eq!(s.vms[1].kernels, None);
        assert_eq!(s.vms[1].gpu_time_ns, 0);
        let j = serde_json::json!({"daemon": {"scheduler": {"policy": "credit-hs"}}, "vms": []});
        let s: StatusView = serde_json::from_value(j).unwrap();
        assert_eq!(s.policy().as_deref(), Some("credit-hs"));
    }
}
