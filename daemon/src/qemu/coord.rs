//! The CPU coordinator of GPU-centric co-scheduling (FairGV §3.2.3) for
//! QEMU VMs, and the QMP thread behind it.
//!
//! When the scheduler grants the GPU to a CPU–GPU interactive vGPU it asks
//! [`Coordinator::wake_vcpu`]. For a local VM that is the futex wake of
//! its sleeping guest processes ([`crate::sched::LocalCoordinator`]'s
//! work). For a QEMU VM it is the same wake of every channel whose guest
//! published that it sleeps, which the region's guest notifier turns into
//! the VM's wake interrupt (ivshmem vector [`super::VECTOR_WAKE`]): the
//! vCPU halted in the guest's wait runs again. With `nudge = true` the
//! VM's vCPU threads also get a brief priority boost: their nice value is
//! lowered by [`NUDGE_NICE`] for [`NUDGE_HOLD`], then restored.
//!
//! Stock Linux has no FairGV syscall, so the boost is `setpriority`, which
//! needs CAP_SYS_NICE to lower a nice value (or to touch another user's
//! threads). Without it the first attempt logs one warning, nudging stops
//! for that VM, and nothing else changes.
//!
//! The scheduler thread never waits here: `wake_vcpu` does futex wakes,
//! eventfd writes and a non-blocking send to the QMP thread. That thread
//! ([`QmpWatcher`]) owns every QMP connection: it connects lazily,
//! reconnects with a backoff of [`BACKOFF_MIN`] doubling to
//! [`BACKOFF_MAX`], re-reads the vCPU thread ids every [`REFRESH_EVERY`]
//! (the refresh is also how it notices that QEMU went away), applies and
//! undoes nudges, and waits at most [`QMP_TIMEOUT`] for any reply.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fairgpu_qemu::{Qmp, QmpError};

use super::QemuState;
use crate::sched::CpuCoordinator;
use fairgpu_worker::host::RegionBells;

/// First delay before reconnecting to a QMP socket.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Longest delay between QMP connection attempts.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// How often the vCPU thread ids are re-read.
pub const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// Longest wait for a QMP reply (or for a socket that refuses while QEMU
/// starts).
pub const QMP_TIMEOUT: Duration = Duration::from_millis(500);
/// How much a nudge lowers the vCPU threads' nice value.
pub const NUDGE_NICE: i32 = 5;
/// How long a nudge lasts (extended by nudges meanwhile).
pub const NUDGE_HOLD: Duration = Duration::from_millis(20);
/// Nudge requests queued for the QMP thread at most; more are dropped.
const QUEUE: usize = 64;
/// Longest sleep of the QMP thread before it re-checks its stop flag.
const TICK: Duration = Duration::from_millis(50);

/// One VM as the coordinator wakes it.
#[derive(Debug)]
pub enum Target {
    /// Guest processes on this host: their futex words.
    Local(RegionBells),
    /// A QEMU VM: its sleeping guests (the region's notifier interrupts
    /// them) and, optionally, a nudge of its vCPU threads.
    Qemu {
        /// The region's wake-ups.
        bells: RegionBells,
        /// Where nudges go, if the VM has `nudge = true`.
        nudge: Option<Nudger>,
    },
}

/// Asks the QMP thread to nudge one VM's vCPU threads.
#[derive(Debug, Clone)]
pub struct Nudger {
    vm: usize,
    tx: SyncSender<usize>,
}

impl Nudger {
    /// Queues a nudge without blocking; a full queue drops it (a nudge is
    /// pending anyway).
    pub fn nudge(&self) {
        // Full: a nudge is pending anyway. Disconnected: no QMP thread.
        let _: Result<(), TrySendError<usize>> = self.tx.try_send(self.vm);
    }
}

/// Dispatches [`CpuCoordinator::wake_vcpu`] by VM: local VMs as the local
/// coordinator does, QEMU VMs by interrupt and nudge.
#[derive(Debug)]
pub struct Coordinator {
    targets: Vec<Target>,
}

impl Coordinator {
    /// A coordinator for the VMs, in configuration order.
    pub fn new(targets: Vec<Target>) -> Self {
        Coordinator { targets }
    }
}

impl CpuCoordinator for Coordinator {
    fn wake_vcpu(&self, vm: usize) -> u32 {
        match self.targets.get(vm) {
            None => 0,
            Some(Target::Local(bells)) => bells.wake_guests(),
            Some(Target::Qemu { bells, nudge }) => {
                if let Some(n) = nudge {
                    n.nudge();
                }
                bells.wake_guests()
            }
        }
    }
}

/// A VM the QMP thread watches.
#[derive(Debug, Clone)]
pub struct Watch {
    /// Its name, for logs.
    pub name: String,
    /// Its index in the configuration.
    pub vm: usize,
    /// QEMU's QMP socket.
    pub qmp: PathBuf,
    /// Whether nudges are applied.
    pub nudge: bool,
    /// How long a nudge lasts ([`NUDGE_HOLD`] in the daemon).
    pub hold: Duration,
    /// Where the vCPU thread ids and counters go.
    pub state: Arc<QemuState>,
}

/// The QMP thread: vCPU thread ids of every watched VM, and nudges.
#[derive(Debug)]
pub struct QmpWatcher {
    tx: SyncSender<usize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl QmpWatcher {
    /// Starts the thread for `watches`.
    pub fn start(watches: Vec<Watch>) -> std::io::Result<QmpWatcher> {
        let (tx, rx) = sync_channel(QUEUE);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            let vms = watches.into_iter().map(Watched::new).collect();
            std::thread::Builder::new()
                .name("fairgpu-qmp".into())
                .spawn(move || run(vms, &rx, &stop))?
        };
        Ok(QmpWatcher {
            tx,
            stop,
            thread: Some(thread),
        })
    }

    /// A handle that nudges VM `vm` (its configuration index).
    pub fn nudger(&self, vm: usize) -> Nudger {
        Nudger {
            vm,
            tx: self.tx.clone(),
        }
    }

    /// Stops the thread; boosts in effect are undone first.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("the QMP thread panicked");
            }
        }
    }
}

impl Drop for QmpWatcher {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(mut vms: Vec<Watched>, rx: &Receiver<usize>, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        for w in &mut vms {
            w.step(now);
        }
        let next = vms
            .iter()
            .filter_map(Watched::due)
            .min()
            .map_or(TICK, |at| at.saturating_duration_since(Instant::now()))
            .min(TICK);
        match rx.recv_timeout(next) {
            Ok(vm) => {
                if let Some(w) = vms.iter_mut().find(|w| w.watch.vm == vm) {
                    w.nudge(Instant::now());
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            // Every sender is gone (no scheduler): only the stop flag ends
            // the thread, so keep the same pace.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(next),
        }
    }
    for w in &mut vms {
        w.restore();
    }
}

/// A boost in effect: the threads changed and their nice values before.
#[derive(Debug)]
struct Boost {
    until: Instant,
    saved: Vec<(i32, i32)>,
}

#[derive(Debug)]
struct Watched {
    watch: Watch,
    qmp: Option<Qmp>,
    next_try: Instant,
    backoff: Duration,
    next_refresh: Instant,
    failures: u32,
    boost: Option<Boost>,
    nudge_refused: bool,
}

impl Watched {
    fn new(watch: Watch) -> Watched {
        let now = Instant::now();
        Watched {
            watch,
            qmp: None,
            next_try: now,
            backoff: BACKOFF_MIN,
            next_refresh: now,
            failures: 0,
            boost: None,
            nudge_refused: false,
        }
    }

    /// When this VM next needs the thread.
    fn due(&self) -> Option<Instant> {
        let conn = if self.qmp.is_some() {
            self.next_refresh
        } else {
            self.next_try
        };
        Some(self.boost.as_ref().map_or(conn, |b| b.until.min(conn)))
    }

    fn step(&mut self, now: Instant) {
        if self.boost.as_ref().is_some_and(|b| b.until <= now) {
            self.restore();
        }
        if self.qmp.is_none() {
            if now >= self.next_try {
                self.connect(now);
            }
        } else if now >= self.next_refresh {
            self.refresh(now);
        }
    }

    fn connect(&mut self, now: Instant) {
        let name = self.watch.name.clone();
        // Qmp::connect waits for a socket that does not exist yet; here the
        // backoff does that, without holding up the other VMs.
        let attempt = if self.watch.qmp.exists() {
            Qmp::connect(&self.watch.qmp, QMP_TIMEOUT)
        } else {
            Err(QmpError::Io(std::io::ErrorKind::NotFound.into()))
        };
        match attempt {
            Ok(q) => {
                self.qmp = Some(q);
                self.backoff = BACKOFF_MIN;
                self.failures = 0;
                self.watch
                    .state
                    .qmp_connected
                    .store(true, Ordering::Relaxed);
                self.refresh(now);
                if self.qmp.is_some() {
                    tracing::info!(vm = %name, qmp = %self.watch.qmp.display(), vcpu_threads = ?self.watch.state.vcpu_threads(), "QMP connected");
                }
            }
            Err(e) => {
                self.failures += 1;
                // QEMU not started yet is the usual reason: say it once at
                // info, then only at debug.
                if self.failures == 1 {
                    tracing::info!(vm = %name, qmp = %self.watch.qmp.display(), error = %chain(&e), "QMP not reachable yet; retrying with backoff");
                } else {
                    tracing::debug!(vm = %name, error = %chain(&e), "QMP still not reachable");
                }
                self.next_try = now + self.backoff;
                self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
            }
        }
    }

    fn refresh(&mut self, now: Instant) {
        let Some(q) = &mut self.qmp else { return };
        self.next_refresh = now + REFRESH_EVERY;
        match q.vcpu_threads() {
            Ok(v) => {
                let tids: Vec<i64> = v.iter().map(|t| t.thread_id).collect();
                if tids != self.watch.state.vcpu_threads() {
                    tracing::debug!(vm = %self.watch.name, ?tids, "vCPU threads");
                }
                self.watch.state.set_vcpu_threads(tids);
            }
            Err(e) => self.lost(now, &e),
        }
    }

    fn lost(&mut self, now: Instant, e: &QmpError) {
        tracing::info!(vm = %self.watch.name, error = %chain(e), "QMP connection lost (QEMU exited?); reconnecting");
        self.restore();
        self.qmp = None;
        self.watch
            .state
            .qmp_connected
            .store(false, Ordering::Relaxed);
        self.watch.state.set_vcpu_threads(Vec::new());
        self.next_try = now + BACKOFF_MIN;
        self.backoff = BACKOFF_MIN * 2;
        self.failures = 1;
    }

    fn nudge(&mut self, now: Instant) {
        if !self.watch.nudge || self.nudge_refused {
            return;
        }
        // Relaxed: a monitoring counter.
        self.watch.state.nudges.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = &mut self.boost {
            b.until = now + self.watch.hold;
            return;
        }
        let mut saved = Vec::new();
        for tid in self.watch.state.vcpu_threads() {
            let Ok(tid) = i32::try_from(tid) else {
                continue;
            };
            let result = fairgpu_qemu::os::get_nice(tid).and_then(|old| {
                fairgpu_qemu::os::set_nice(tid, (old - NUDGE_NICE).max(-20)).map(|()| old)
            });
            match result {
                Ok(old) => saved.push((tid, old)),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) => {
                    tracing::warn!(
                        vm = %self.watch.name,
                        tid,
                        error = %e,
                        "cannot raise the vCPU threads' priority (needs CAP_SYS_NICE); nudging is off for this VM, the interrupt still wakes it"
                    );
                    self.nudge_refused = true;
                    break;
                }
                Err(e) => {
                    // ESRCH: QEMU restarted its vCPUs; read them again.
                    tracing::debug!(vm = %self.watch.name, tid, error = %e, "vCPU thread not nudged");
                    self.next_refresh = now;
                }
            }
        }
        self.boost = Some(Boost {
            until: now + self.watch.hold,
            saved,
        });
        if self.nudge_refused {
            self.restore();
        }
    }

    /// Undoes the boost in effect, if any.
    fn restore(&mut self) {
        let Some(b) = self.boost.take() else { return };
        for (tid, old) in b.saved {
            if let Err(e) = fairgpu_qemu::os::set_nice(tid, old) {
                tracing::debug!(vm = %self.watch.name, tid, error = %e, "vCPU thread's nice value not restored");
            }
        }
    }
}

/// An error with its sources, for one log field.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixListener;
    use std::sync::Mutex;

    use fairgpu_protocol::layout::{RegionConfig, CH_GUEST_SLEEPING};

    use fairgpu_worker::host::HostRegion;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("fairgpu-coord-{}-{name}", std::process::id()))
    }

    /// A QMP server answering `query-cpus-fast` with `tids`, one client at
    /// a time, until dropped (which closes the client and the socket).
    struct FakeQmp {
        path: PathBuf,
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
        connections: Arc<Mutex<u32>>,
    }

    impl FakeQmp {
        fn start(path: &std::path::Path, tids: Vec<i64>) -> FakeQmp {
            let _ = std::fs::remove_file(path);
            let listener = UnixListener::bind(path).unwrap();
            listener.set_nonblocking(true).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let connections = Arc::new(Mutex::new(0));
            let thread = {
                let (stop, connections) = (stop.clone(), connections.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let Ok((s, _)) = listener.accept() else {
                            std::thread::sleep(Duration::from_millis(5));
                            continue;
                        };
                        *connections.lock().unwrap() += 1;
                        s.set_nonblocking(false).unwrap();
                        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
                        let mut w = s.try_clone().unwrap();
                        let _ =
                            w.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n");
                        let mut r = BufReader::new(s);
                        let cpus: Vec<String> = tids
                            .iter()
                            .enumerate()
                            .map(|(i, t)| format!("{{\"cpu-index\": {i}, \"thread-id\": {t}}}"))
                            .collect();
                        let mut line = String::new();
                        while !stop.load(Ordering::Relaxed) {
                            line.clear();
                            match r.read_line(&mut line) {
                                Ok(0) => break,
                                Ok(_) => {}
                                Err(_) => continue,
                            }
                            let reply = if line.contains("query-cpus-fast") {
                                format!("{{\"return\": [{}]}}\n", cpus.join(", "))
                            } else {
                                "{\"return\": {}}\n".into()
                            };
                            if w.write_all(reply.as_bytes()).is_err() {
                                break;
                            }
                        }
                    }
                })
            };
            FakeQmp {
                path: path.to_owned(),
                stop,
                thread: Some(thread),
                connections,
            }
        }
    }

    impl Drop for FakeQmp {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                t.join().unwrap();
            }
            let _ = std::fs::remove_file(&self.path);
        }
    }

    fn wait(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn watch(path: &std::path::Path, nudge: bool, state: &Arc<QemuState>) -> Watch {
        Watch {
            name: "vm1".into(),
            vm: 0,
            qmp: path.to_owned(),
            nudge,
            hold: Duration::from_secs(3600),
            state: state.clone(),
        }
    }

    #[test]
    fn the_qmp_thread_follows_qemu_coming_and_going() {
        let path = temp("qmp-follow.sock");
        let state = Arc::new(QemuState::default());
        // QEMU is not running yet: the thread waits with a backoff.
        let mut watcher = QmpWatcher::start(vec![watch(&path, false, &state)]).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!state.qmp_connected.load(Ordering::Relaxed));
        let qemu = FakeQmp::start(&path, vec![101, 102]);
        wait("the vCPU threads", || state.vcpu_threads() == [101, 102]);
        assert!(state.qmp_connected.load(Ordering::Relaxed));
        // QEMU exits: the ids are forgotten.
        drop(qemu);
        wait("the loss of QMP", || {
            !state.qmp_connected.load(Ordering::Relaxed) && state.vcpu_threads().is_empty()
        });
        // A new QEMU with other threads is found again.
        let qemu = FakeQmp::start(&path, vec![201]);
        wait("the new vCPU threads", || state.vcpu_threads() == [201]);
        assert_eq!(*qemu.connections.lock().unwrap(), 1);
        watcher.stop();
    }

    /// A thread that idles until told to stop, and its tid.
    fn idle_thread() -> (i32, Arc<AtomicBool>, JoinHandle<()>) {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let s = stop.clone();
        let h = std::thread::spawn(move || {
            tx.send(fairgpu_qemu::os::gettid()).unwrap();
            while !s.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        (rx.recv().unwrap(), stop, h)
    }

    #[test]
    fn nudges_boost_the_vcpu_threads_and_are_undone() {
        let path = temp("qmp-nudge.sock");
        let (tid, stop, h) = idle_thread();
        let nice = || fairgpu_qemu::os::get_nice(tid).unwrap();
        // Lower than where it starts, so that a boost is possible at all.
        fairgpu_qemu::os::set_nice(tid, 10).unwrap();
        // Whether this process may lower a nice value (CAP_SYS_NICE).
        let capable = fairgpu_qemu::os::set_nice(tid, 9).is_ok();
        let start = nice();
        let _qemu = FakeQmp::start(&path, vec![tid.into(), 999_999_999]);
        let state = Arc::new(QemuState::default());
        let mut watcher = QmpWatcher::start(vec![watch(&path, true, &state)]).unwrap();
        wait("the vCPU threads", || !state.vcpu_threads().is_empty());
        // The scheduler's side: never blocks, counted by the QMP thread.
        watcher.nudger(0).nudge();
        wait("the nudge", || state.nudges() == 1);
        if capable {
            wait("the boost", || nice() == start - NUDGE_NICE);
        } else {
            // Refused: logged once, the thread is left alone, later nudges
            // are not even tried.
            assert_eq!(nice(), start);
            watcher.nudger(0).nudge();
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(state.nudges(), 1);
        }
        // Stopping undoes the boost (so would its hold running out).
        watcher.stop();
        assert_eq!(nice(), start);
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
    }

    #[test]
    fn the_coordinator_wakes_sleeping_guests_by_vm() {
        let cfg = RegionConfig {
            channels: 2,
            ring_entries: 8,
            arena_size: 64 * 1024,
            features: 0,
        };
        let local_path = temp("local");
        let vm_path = temp("vm");
        let local = HostRegion::create(&local_path, &cfg).unwrap();
        let notified = Arc::new(Mutex::new(Vec::new()));
        let n = notified.clone();
        let vm = HostRegion::create(&vm_path, &cfg)
            .unwrap()
            .with_guest_notifier(Arc::new(move |ch| n.lock().unwrap().push(ch)));
        let sleep = |r: &HostRegion, ch: u32| {
            let offs = r.layout().channel(ch).unwrap();
            r.view()
                .atomic_u32(offs.at(CH_GUEST_SLEEPING))
                .unwrap()
                .store(1, Ordering::SeqCst);
        };
        let (tx, rx) = sync_channel(4);
        let coord = Coordinator::new(vec![
            Target::Local(local.bells()),
            Target::Qemu {
                bells: vm.bells(),
                nudge: Some(Nudger { vm: 1, tx }),
            },
        ]);
        assert_eq!(coord.wake_vcpu(1), 0, "nobody sleeps");
        assert_eq!(rx.try_recv(), Ok(1), "the nudge is asked for anyway");
        sleep(&vm, 1);
        sleep(&local, 0);
        assert_eq!(coord.wake_vcpu(1), 1);
        assert_eq!(
            *notified.lock().unwrap(),
            [1],
            "the VM's guest is interrupted"
        );
        assert_eq!(coord.wake_vcpu(0), 1);
        assert_eq!(
            notified.lock().unwrap().len(),
            1,
            "local wakes need no interrupt"
        );
        assert_eq!(coord.wake_vcpu(7), 0);
    }
}
