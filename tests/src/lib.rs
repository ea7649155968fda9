//! Helpers for the multi-process integration tests.
//!
//! The tests run the real `fairgpu` binary as the host ([`HostProcess`]) and
//! re-execute their own test binary as guest processes ([`GuestChild`]).
//! Every wait here is bounded: a helper that runs out of time panics with
//! what it was waiting for, so a broken transport fails a test instead of
//! hanging it.
//!
//! [`Setup`] writes a `fairgpu serve` configuration on SimGpu and starts the
//! daemon ([`DaemonProcess`]); [`status`] and [`wait_for_status`] read what
//! it publishes on its control socket.
//!
//! The `fairgpu` binary must be built first (`cargo build -p fairgpu-cli`);
//! `scripts/test.sh` builds the workspace before it tests.

pub mod cuda;
pub mod qemu;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairgpu_daemon::control::{Request, Status, VmStatus};
use fairgpu_frontend::{Channel, GuestRegion, WaitConfig};
use fairgpu_worker::stats::WorkerState;

/// How long a host may take to create its region.
pub const HOST_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a host may take to exit after SIGTERM.
pub const HOST_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Environment variable that tells a re-executed test binary which guest
/// role to play; child tests return at once when it is absent.
pub const CHILD_ROLE_ENV: &str = "FAIRGPU_TEST_CHILD";
/// Environment variable naming the region a child guest uses.
pub const CHILD_REGION_ENV: &str = "FAIRGPU_TEST_REGION";
/// Environment variable carrying a child's seed (pattern, offsets).
pub const CHILD_SEED_ENV: &str = "FAIRGPU_TEST_SEED";

/// The waiting configuration every test uses.
pub fn wait_config() -> WaitConfig {
    WaitConfig {
        spin: Duration::from_micros(50),
        host_timeout: Some(Duration::from_secs(5)),
    }
}

/// The `fairgpu` binary next to this test binary
/// (`target/<profile>/deps/<test>` → `target/<profile>/fairgpu`).
pub fn fairgpu_bin() -> PathBuf {
    built_artifact("fairgpu", "fairgpu")
}

/// `target/<profile>`, from this test binary's path
/// (`target/<profile>/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("locating the test binary");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_owned()
}

/// `target/<profile>/NAME`, which `cargo build -p PACKAGE` builds; panics
/// with that advice if it is missing.
pub fn built_artifact(name: &str, package: &str) -> PathBuf {
    let path = profile_dir().join(name);
    assert!(
        path.is_file(),
        "{} not found: run `cargo build -p {package}` first (scripts/test.sh builds the workspace before testing)",
        path.display()
    );
    path
}

/// A region path no other test (or test process) uses.
pub fn unique_region_path(test: &str) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name: String = test
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    PathBuf::from(format!(
        "/dev/shm/fairgpu-test-{}-{n}-{name}",
        std::process::id()
    ))
}

/// Polls `f` every millisecond until it returns `Some`, for at most
/// `timeout`; panics naming `what` when time runs out.
pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() <= timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on its own thread and returns its result, failing the test if
/// it takes longer than `timeout` (the thread is then left behind) and
/// re-raising its panic if it panics.
pub fn with_timeout<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::Builder::new()
        .name(what.to_owned())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("spawning a guarded thread");
    match rx.recv_timeout(timeout) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("{what} did not finish within {timeout:?}"),
        Err(RecvTimeoutError::Disconnected) => match handle.join() {
            Err(payload) => std::panic::resume_unwind(payload),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
    }
}

/// `len` pseudo-random bytes determined by `seed` (xorshift64*).
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        out.extend_from_slice(&s.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Little-endian `f32`s from device bytes.
pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The little-endian bytes of `v`, for a copy to the device.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Panics with the first differing offset unless `got == want`.
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length differs");
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: first difference at byte {i} of {}: got {:#04x}, want {:#04x}",
            want.len(),
            got[i],
            want[i]
        );
    }
}

/// Sends `sig` to `pid`.
///
/// Callers pass only children they have not reaped yet, so the pid cannot
/// have been reused by an unrelated process.
fn send_signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is that of
    // an unreaped child of ours (see above).
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(
        r,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Drains a pipe into a shared string on a background thread.
fn collect_output(r: impl Read + Send + 'static) -> Arc<Mutex<String>> {
    let buf = Arc::new(Mutex::new(String::new()));
    let sink = buf.clone();
    std::thread::spawn(move || {
        let mut r = BufReader::new(r);
        let mut line = String::new();
        while matches!(r.read_line(&mut line), Ok(n) if n > 0) {
            sink.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push_str(&line);
            line.clear();
        }
    });
    buf
}

/// Forwards a pipe's lines to a channel on a background thread.
fn line_channel(r: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (bounded) for `child` to exit; `None` if it is still running.
fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(2)),
            Ok(None) => return None,
            Err(e) => panic!("waiting for child {}: {e}", child.id()),
        }
    }
}

/// A `fairgpu serve-region` process serving a fresh region. Dropping it
/// stops the host (SIGTERM, then SIGKILL after [`HOST_STOP_TIMEOUT`]) and
/// removes the region file if the host left it behind.
#[derive(Debug)]
pub struct HostProcess {
    child: Child,
    path: PathBuf,
    log: Arc<Mutex<String>>,
    exited: Option<ExitStatus>,
}

impl HostProcess {
    /// Starts a host with `channels` channels and waits until its region
    /// can be opened.
    pub fn start(test: &str, channels: u32) -> HostProcess {
        Self::start_with(test, channels, &[])
    }

    /// As [`HostProcess::start`], with extra `serve-region` arguments.
    pub fn start_with(test: &str, channels: u32, extra: &[&str]) -> HostProcess {
        let path = unique_region_path(test);
        let mut child = Command::new(fairgpu_bin())
            .arg("serve-region")
            .arg("--region")
            .arg(&path)
            .arg("--channels")
            .arg(channels.to_string())
            .args(["--log", "warn"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning fairgpu serve-region");
        let log = collect_output(child.stderr.take().expect("piped stderr"));
        let mut host = HostProcess {
            child,
            path,
            log,
            exited: None,
        };
        let start = Instant::now();
        loop {
            let err = match GuestRegion::open(&host.path) {
                Ok(_) => return host,
                Err(e) => e,
            };
            assert!(
                host.is_alive(),
                "host exited ({:?}) before creating its region; log:\n{}",
                host.exited,
                host.log()
            );
            assert!(
                start.elapsed() < HOST_START_TIMEOUT,
                "host did not create {} within {HOST_START_TIMEOUT:?}: {err}",
                host.path.display()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The region file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The host's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Maps the region (a fresh mapping each time).
    pub fn region(&self) -> Arc<GuestRegion> {
        GuestRegion::open(&self.path).expect("opening the host's region")
    }

    /// Claims a channel with [`wait_config`].
    pub fn claim(&self) -> Channel {
        Channel::claim(self.region(), wait_config()).expect("claiming a channel")
    }

    /// Whether the host is still running (a stopped host counts as running).
    pub fn is_alive(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(s)) => {
                self.exited = Some(s);
                false
            }
            Err(e) => panic!("waiting for the host: {e}"),
        }
    }

    /// Sends `sig` to the host, which must not have exited.
    pub fn signal(&mut self, sig: libc::c_int) {
        assert!(self.is_alive(), "signalling a host that exited");
        send_signal(self.pid(), sig);
    }

    /// Waits up to `timeout` for the host to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = wait_child(&mut self.child, timeout);
        }
        self.exited
    }

    /// SIGKILLs the host and reaps it.
    pub fn kill(&mut self) -> ExitStatus {
        self.signal(libc::SIGKILL);
        self.wait_exit(HOST_STOP_TIMEOUT)
            .expect("a SIGKILLed host exits")
    }

    /// SIGTERMs the host and waits for it to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        match self.wait_exit(HOST_STOP_TIMEOUT) {
            Some(s) => s,
            None => panic!(
                "host did not exit within {HOST_STOP_TIMEOUT:?} of SIGTERM; log:\n{}",
                self.log()
            ),
        }
    }

    /// Stops the host with SIGSTOP and waits until every thread of it has
    /// stopped.
    pub fn pause(&mut self) {
        self.signal(libc::SIGSTOP);
        let pid = self.pid() as libc::pid_t;
        wait_until("the host to stop", HOST_STOP_TIMEOUT, || {
            let mut status = 0;
            // SAFETY: `status` is a valid out-pointer; WUNTRACED|WNOHANG only
            // reports a stop (it reaps nothing while the child is alive).
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED | libc::WNOHANG) };
            assert!(r >= 0, "waitpid: {}", std::io::Error::last_os_error());
            assert!(
                r == 0 || libc::WIFSTOPPED(status),
                "host ended while being stopped (status {status:#x})"
            );
            (r == pid).then_some(())
        });
    }

    /// Continues a host stopped by [`HostProcess::pause`].
    pub fn resume(&mut self) {
        self.signal(libc::SIGCONT);
    }

    /// What the host has logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if self.is_alive() {
            send_signal(self.pid(), libc::SIGTERM);
            // In case a failed test left it stopped.
            send_signal(self.pid(), libc::SIGCONT);
            if self.wait_exit(HOST_STOP_TIMEOUT).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        let _ = std::fs::remove_file(&self.path);
        if std::thread::panicking() {
            eprintln!(
                "--- log of the host of {} ---\n{}",
                self.path.display(),
                self.log()
            );
        }
    }
}

/// Whether this test binary was started as a child guest in `role`.
pub fn is_child(role: &str) -> bool {
    std::env::var(CHILD_ROLE_ENV).is_ok_and(|r| r == role)
}

/// This child's region and seed (panics outside a child).
pub fn child_setup() -> (Arc<GuestRegion>, u64) {
    let path = std::env::var_os(CHILD_REGION_ENV).expect("child started without a region");
    let seed = std::env::var(CHILD_SEED_ENV)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let region = GuestRegion::open(Path::new(&path)).expect("child opening the region");
    (region, seed)
}

/// Waits for a line from the parent on stdin (the parent's go-ahead).
/// Returns `None` at end of input, e.g. when the parent died.
pub fn child_read_line() -> Option<String> {
    let mut line = String::new();
    match std::io::stdin().read_line(&mut line) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(line.trim_end().to_owned()),
    }
}

/// This test binary, re-executed to run one test as a guest process. The
/// child's stdout arrives line by line; its stderr is kept for failure
/// messages. Dropping it SIGKILLs and reaps the child if still running.
#[derive(Debug)]
pub struct GuestChild {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
    exited: Option<ExitStatus>,
}

impl GuestChild {
    /// Runs test `test` of this binary as a child in `role`, on `region`.
    pub fn spawn(test: &str, role: &str, region: &Path, seed: u64) -> GuestChild {
        let exe = std::env::current_exe().expect("locating the test binary");
        let mut child = Command::new(exe)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_ROLE_ENV, role)
            .env(CHILD_REGION_ENV, region)
            .env(CHILD_SEED_ENV, seed.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning a child guest");
        let lines = line_channel(child.stdout.take().expect("piped stdout"));
        let stderr = collect_output(child.stderr.take().expect("piped stderr"));
        GuestChild {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
            stderr,
            exited: None,
        }
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (bounded) for a stdout line containing `marker` and returns
    /// the rest of the line after it. Lines before it are skipped. (The
    /// marker need not start the line: the test harness prints
    /// `test NAME ... ` without a newline before the test's own output.)
    pub fn expect_line(&mut self, marker: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if let Some(at) = line.find(marker) {
                        return line[at + marker.len()..].to_owned();
                    }
                }
                Err(e) => panic!(
                    "child {} printed no line containing {marker:?} ({e:?}); stdout so far:\n{}\nstderr:\n{}",
                    self.pid(),
                    self.seen.join("\n"),
                    self.stderr()
                ),
            }
        }
    }

    /// Writes one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}").expect("writing to a child");
        stdin.flush().expect("flushing a child's stdin");
    }

    /// Waits (bounded) for the child to exit and checks that its test passed.
    pub fn wait_success(&mut self, timeout: Duration) {
        self.stdin = None;
        let status = wait_child(&mut self.child, timeout);
        self.exited = status;
        match status {
            Some(s) if s.success() => {}
            other => panic!(
                "child {} ended with {other:?} (None: still running after {timeout:?}); stderr:\n{}",
                self.pid(),
                self.stderr()
            ),
        }
    }

    /// SIGKILLs the child and reaps it, so that its pid is gone (a zombie
    /// would still count as alive to the owner checks).
    pub fn kill(&mut self) {
        assert!(self.exited.is_none(), "child already exited");
        send_signal(self.pid(), libc::SIGKILL);
        self.exited = Some(self.child.wait().expect("reaping a killed child"));
    }

    /// What the child wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for GuestChild {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `sig` to a process that is not our child (e.g. a daemon's
/// worker), which must exist.
///
/// Callers pass pids of processes they know to be alive (a worker the
/// daemon has not reaped yet), so the pid cannot name an unrelated process.
pub fn signal_process(pid: u32, sig: libc::c_int) {
    send_signal(pid, sig);
}

/// Runs `cmd` to completion with stdin closed, killing it (and failing the
/// test) after `timeout`.
pub fn run_command(cmd: &mut Command, timeout: Duration) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning a command");
    let out = collect_output(child.stdout.take().expect("piped stdout"));
    let err = collect_output(child.stderr.take().expect("piped stderr"));
    let status = wait_child(&mut child, timeout);
    let Some(status) = status else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "{cmd:?} still running after {timeout:?}; stderr:\n{}",
            err.lock().unwrap_or_else(|e| e.into_inner())
        );
    };
    // The pipes close when the child exits; give the readers a moment.
    let text = |b: &Arc<Mutex<String>>| {
        let start = Instant::now();
        loop {
            // The reader thread holds the only other reference until EOF.
            if Arc::strong_count(b) == 1 || start.elapsed() > Duration::from_secs(5) {
                return b.lock().unwrap_or_else(|e| e.into_inner()).clone();
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    std::process::Output {
        status,
        stdout: text(&out).into_bytes(),
        stderr: text(&err).into_bytes(),
    }
}

/// A directory of its own under the system temp dir, removed with its
/// contents on drop. Paths in it are short enough for Unix sockets.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh directory named after `test`.
    pub fn new(test: &str) -> TempDir {
        let name = unique_region_path(test);
        let name = name.file_name().expect("a file name");
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).expect("creating a temp dir");
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A `fairgpu serve` daemon. Dropping it stops the daemon (SIGTERM, then
/// SIGKILL after [`DAEMON_STOP_TIMEOUT`]) and removes the files it was
/// told about if the daemon left them behind.
#[derive(Debug)]
pub struct DaemonProcess {
    child: Child,
    socket: PathBuf,
    leftovers: Vec<PathBuf>,
    log: Arc<Mutex<String>>,
    exited: Option<ExitStatus>,
}

/// How long a daemon may take to exit after SIGTERM (its workers get 5 s
/// before it kills them).
pub const DAEMON_STOP_TIMEOUT: Duration = Duration::from_secs(15);

impl DaemonProcess {
    /// Starts `fairgpu serve --config CONFIG` and waits until it answers a
    /// status request on its control socket `socket` (then its regions
    /// exist and its workers were spawned). `leftovers` (regions) are
    /// removed on drop should the daemon not remove them.
    pub fn start(config: &Path, socket: &Path, leftovers: &[PathBuf]) -> DaemonProcess {
        Self::start_with_env(config, socket, leftovers, &[])
    }

    /// [`DaemonProcess::start`] with extra environment for the daemon and
    /// its workers.
    pub fn start_with_env(
        config: &Path,
        socket: &Path,
        leftovers: &[PathBuf],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> DaemonProcess {
        let mut child = Command::new(fairgpu_bin())
            .arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--log", "info"])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning fairgpu serve");
        let log = collect_output(child.stderr.take().expect("piped stderr"));
        let mut d = DaemonProcess {
            child,
            socket: socket.to_owned(),
            leftovers: leftovers.to_vec(),
            log,
            exited: None,
        };
        // The daemon binds its control socket first but answers only once
        // every region exists and every worker was spawned: wait for an
        // answer, not for the socket.
        let start = Instant::now();
        loop {
            let answer = fairgpu_daemon::control::request(
                socket,
                &Request::Status {},
                Duration::from_millis(500),
            );
            if answer.is_ok_and(|r| r.ok && r.status.is_some()) {
                return d;
            }
            assert!(
                d.is_alive(),
                "daemon exited ({:?}) before answering on its control socket; log:\n{}",
                d.exited,
                d.log()
            );
            assert!(
                start.elapsed() < HOST_START_TIMEOUT,
                "daemon did not answer on {} within {HOST_START_TIMEOUT:?}; log:\n{}",
                socket.display(),
                d.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The control socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Whether the daemon is still running.
    pub fn is_alive(&mut self) -> bool {
        if self.exited.is_some() {
            return false;
        }
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(s)) => {
                self.exited = Some(s);
                false
            }
            Err(e) => panic!("waiting for the daemon: {e}"),
        }
    }

    /// SIGTERMs the daemon and waits for it to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        assert!(self.is_alive(), "terminating a daemon that exited");
        send_signal(self.pid(), libc::SIGTERM);
        if self.exited.is_none() {
            self.exited = wait_child(&mut self.child, DAEMON_STOP_TIMEOUT);
        }
        match self.exited {
            Some(s) => s,
            None => panic!(
                "daemon did not exit within {DAEMON_STOP_TIMEOUT:?} of SIGTERM; log:\n{}",
                self.log()
            ),
        }
    }

    /// What the daemon and its workers have logged so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        if self.is_alive() {
            send_signal(self.pid(), libc::SIGTERM);
            if wait_child(&mut self.child, DAEMON_STOP_TIMEOUT).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        for p in &self.leftovers {
            let _ = std::fs::remove_file(p);
        }
        if std::thread::panicking() {
            eprintln!(
                "--- log of the daemon at {} ---\n{}",
                self.socket.display(),
                self.log()
            );
        }
    }
}

/// How long a daemon's published status may take to show what a test
/// expects (workers publish about every 100 ms).
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(20);
/// The `[sim]` table of a [`Setup::new`] daemon.
pub const DEFAULT_SIM: &str = "memory_bytes = 1073741824\nname = \"daemon-test SimGpu\"\n";
/// Each VM's device-memory quota in a [`Setup`] daemon.
pub const VM_QUOTA: u64 = 64 << 20;
/// Each VM's arena in a [`Setup`] daemon: small, so that bulk copies span
/// many chunks.
pub const VM_ARENA: u64 = 256 << 10;

/// A `fairgpu serve` configuration on SimGpu, written into its own temp
/// dir: every VM has a [`VM_QUOTA`] quota, 64 ring entries and a
/// [`VM_ARENA`] arena.
#[derive(Debug)]
pub struct Setup {
    /// The temp dir holding the configuration, socket and state files.
    pub dir: TempDir,
    /// The configuration file.
    pub config: PathBuf,
    /// The control socket.
    pub socket: PathBuf,
    /// Each VM's region, in configuration order.
    pub regions: Vec<PathBuf>,
}

impl Setup {
    /// VMs `(name, weight, channels)` on a SimGpu with [`DEFAULT_SIM`].
    pub fn new(test: &str, vms: &[(&str, u32, u32)]) -> Setup {
        Self::with_sim(test, DEFAULT_SIM, vms)
    }

    /// VMs `(name, weight, channels)` on a SimGpu whose `[sim]` table has
    /// the lines `sim`.
    pub fn with_sim(test: &str, sim: &str, vms: &[(&str, u32, u32)]) -> Setup {
        Self::with_executor(test, "sim", sim, vms)
    }

    /// VMs `(name, weight, channels)` on executor `executor` ("sim" or
    /// "cuda"), with the `[sim]` lines `sim`.
    pub fn with_executor(test: &str, executor: &str, sim: &str, vms: &[(&str, u32, u32)]) -> Setup {
        let dir = TempDir::new(test);
        let socket = dir.join("control.sock");
        let mut text = format!(
            "[daemon]\ncontrol_socket = {:?}\nexecutor = {executor:?}\nstate_dir = {:?}\n\n[sim]\n{sim}\n",
            socket.display().to_string(),
            dir.path().display().to_string()
        );
        let mut regions = Vec::new();
        for (name, weight, channels) in vms {
            let region = unique_region_path(&format!("{test}-{name}"));
            text.push_str(&format!(
                "[[vm]]\nname = {name:?}\nweight = {weight}\nmemory = {VM_QUOTA}\n\
                 region = {:?}\nchannels = {channels}\nring_entries = 64\narena = {VM_ARENA}\n\n",
                region.display().to_string()
            ));
            regions.push(region);
        }
        let config = dir.join("fairgpu.toml");
        std::fs::write(&config, text).expect("writing the configuration");
        Setup {
            dir,
            config,
            socket,
            regions,
        }
    }

    /// The same with every VM's device-memory quota `bytes` instead of
    /// [`VM_QUOTA`].
    pub fn with_quota(self, bytes: u64) -> Setup {
        let text = std::fs::read_to_string(&self.config).expect("reading the configuration");
        let text = text.replace(
            &format!("memory = {VM_QUOTA}\n"),
            &format!("memory = {bytes}\n"),
        );
        std::fs::write(&self.config, text).expect("writing the configuration");
        self
    }

    /// The same with `lines` added to the `[daemon]` table.
    pub fn with_daemon(self, lines: &str) -> Setup {
        let text = std::fs::read_to_string(&self.config).expect("reading the configuration");
        let text = text.replacen("[daemon]\n", &format!("[daemon]\n{lines}\n"), 1);
        std::fs::write(&self.config, text).expect("writing the configuration");
        self
    }

    /// Starts the daemon and waits until every worker runs.
    pub fn start(&self) -> DaemonProcess {
        self.start_with_env(&[])
    }

    /// [`Setup::start`] with extra environment for the daemon and workers.
    pub fn start_with_env(&self, env: &[(&str, &std::ffi::OsStr)]) -> DaemonProcess {
        let d = DaemonProcess::start_with_env(&self.config, &self.socket, &self.regions, env);
        wait_for_status(&d, "every worker to run", |s| {
            s.vms
                .iter()
                .all(|v| v.state == WorkerState::Running && v.worker_pid != 0)
        });
        d
    }
}

/// The daemon's status, through its control socket.
pub fn status(d: &DaemonProcess) -> Status {
    let reply = fairgpu_daemon::control::request(d.socket(), &Request::Status {}, STATUS_TIMEOUT)
        .unwrap_or_else(|e| panic!("status request: {e}; log:\n{}", d.log()));
    assert!(reply.ok, "status refused: {:?}", reply.error);
    reply.status.expect("a status")
}

/// Polls the daemon's status until `f` accepts it (for at most
/// [`STATUS_TIMEOUT`]); panics with the last status and the daemon's log.
pub fn wait_for_status(d: &DaemonProcess, what: &str, f: impl Fn(&Status) -> bool) -> Status {
    let mut last = None;
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(what, STATUS_TIMEOUT, || {
            let s = status(d);
            let ok = f(&s);
            last = Some(s.clone());
            ok.then_some(s)
        })
    }));
    match found {
        Ok(s) => s,
        Err(_) => panic!(
            "timed out waiting for {what}; last status: {last:#?}\nlog:\n{}",
            d.log()
        ),
    }
}

/// A status whose counts for VM `name` include everything that ended
/// before this call: two publications of its worker after the first
/// status read here (the first may have begun before).
pub fn wait_for_published(d: &DaemonProcess, name: &str) -> Status {
    let first = vm(&status(d), name).published;
    wait_for_status(d, &format!("{name}'s worker to publish its counts"), |s| {
        vm(s, name).published >= first + 2
    })
}

/// VM `name` in a status.
pub fn vm<'a>(s: &'a Status, name: &str) -> &'a VmStatus {
    s.vms
        .iter()
        .find(|v| v.name == name)
        .unwrap_or_else(|| panic!("no vm {name} in {s:#?}"))
}

/// Claims a channel of the region at `region`.
pub fn claim(region: &Path, cfg: WaitConfig) -> Channel {
    let r = GuestRegion::open(region).expect("opening a VM's region");
    Channel::claim(r, cfg).expect("claiming a channel")
}

/// A directory holding fairgpu's NVRTC shim for CUDA `major` (12 or 13)
/// under NVRTC's name, `libnvrtc.so.<major>`, for `LD_LIBRARY_PATH` ahead
/// of NVIDIA's: `target/<profile>/nvrtc-shim-<major>/`, a symlink to
/// `target/<profile>/libfairgpu_nvrtc<major>.so`. Panics if it has not
/// been built.
pub fn nvrtc_shim_dir(major: u32) -> PathBuf {
    shim_dir("nvrtc", "libnvrtc", major)
}

/// The same for fairgpu's nvJitLink shim: `libnvJitLink.so.<major>` in
/// `target/<profile>/nvjitlink-shim-<major>/`.
pub fn nvjitlink_shim_dir(major: u32) -> PathBuf {
    shim_dir("nvjitlink", "libnvJitLink", major)
}

/// `target/<profile>/<shim>-shim-<major>/<nvidia>.so.<major>`, a symlink
/// to the built `libfairgpu_<shim><major>.so` (package
/// `fairgpu-guest-<shim><major>`).
fn shim_dir(shim: &str, nvidia: &str, major: u32) -> PathBuf {
    let lib = format!("libfairgpu_{shim}{major}.so");
    built_artifact(&lib, &format!("fairgpu-guest-{shim}{major}"));
    let dir = profile_dir().join(format!("{shim}-shim-{major}"));
    std::fs::create_dir_all(&dir).expect("creating target/<profile>/<shim>-shim-N");
    link_into(
        &dir,
        &format!("{nvidia}.so.{major}"),
        &Path::new("..").join(lib),
    );
    dir
}

/// Makes `dir/name` a symlink to `target` (atomically, as tests run in
/// parallel), unless it already is one.
fn link_into(dir: &Path, name: &str, target: &Path) {
    let link = dir.join(name);
    if std::fs::read_link(&link).is_ok_and(|t| t == target) {
        return;
    }
    // Tests run in parallel: make the link under a name of our own and
    // rename it into place, which replaces atomically.
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .unwrap_or_else(|e| panic!("linking {}: {e}", tmp.display()));
    std::fs::rename(&tmp, &link)
        .unwrap_or_else(|e| panic!("renaming {} to {}: {e}", tmp.display(), link.display()));
}

/// A directory holding the guest library under the names the loader is
/// asked for, `libcuda.so.1` and `libcuda.so`, for `LD_LIBRARY_PATH`:
/// `target/<profile>/guest-lib/`, with symlinks to `target/<profile>/libcuda.so`,
/// the library `cargo build -p fairgpu-guest` builds. Panics if it has not
/// been built.
pub fn guest_lib_dir() -> PathBuf {
    built_artifact("libcuda.so", "fairgpu-guest");
    let dir = profile_dir().join("guest-lib");
    std::fs::create_dir_all(&dir).expect("creating target/<profile>/guest-lib");
    for name in ["libcuda.so.1", "libcuda.so"] {
        link_into(&dir, name, Path::new("../libcuda.so"));
    }
    dir
}
