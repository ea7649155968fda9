//! A QMP client over a unix socket: JSON objects, one per line. QEMU greets
//! with `{"QMP": ...}`; `qmp_capabilities` leaves negotiation mode; then
//! each command gets a `{"return": ...}` or `{"error": ...}`, with
//! asynchronous `{"event": ...}` lines possibly in between.
//!
//! Bounded: every read has a deadline, a line longer than [`MAX_LINE`] is an
//! error, and at most [`MAX_EVENTS_SKIPPED`] events are skipped while
//! waiting for one reply.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

/// Longest reply line accepted.
pub const MAX_LINE: usize = 1 << 20;
/// Most events skipped while waiting for one reply.
pub const MAX_EVENTS_SKIPPED: usize = 1024;

/// Why a QMP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// Connecting or a socket operation failed.
    #[error("QMP socket")]
    Io(#[from] io::Error),
    /// No complete reply before the deadline.
    #[error("no reply from QMP within {0:?}")]
    Timeout(Duration),
    /// QEMU closed the connection.
    #[error("QMP connection closed")]
    Closed,
    /// A line longer than [`MAX_LINE`].
    #[error("QMP line longer than {MAX_LINE} bytes")]
    LineTooLong,
    /// Too many events without the reply.
    #[error("more than {MAX_EVENTS_SKIPPED} events without a reply")]
    TooManyEvents,
    /// A line that is not JSON, or a reply of the wrong shape.
    #[error("malformed QMP message: {0}")]
    Malformed(String),
    /// The command failed.
    #[error("QMP command {command} failed: {class}: {desc}")]
    Command {
        /// The command.
        command: String,
        /// QEMU's error class.
        class: String,
        /// QEMU's description.
        desc: String,
    },
}

/// One vCPU and the host thread that runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct VcpuThread {
    /// QEMU's CPU index.
    #[serde(rename = "cpu-index")]
    pub cpu_index: u32,
    /// The host thread id (with single-threaded TCG, one for all vCPUs).
    #[serde(rename = "thread-id")]
    pub thread_id: i64,
}

/// A QMP session in command mode.
#[derive(Debug)]
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    timeout: Duration,
    greeting: Value,
}

impl Qmp {
    /// Connects to `path`, retrying until `timeout` while the socket does
    /// not exist yet or refuses (QEMU still starting), reads the greeting
    /// and negotiates capabilities. Every later reply waits at most
    /// `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Qmp, QmpError> {
        let start = Instant::now();
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
                    ) && start.elapsed() < timeout =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e.into()),
            }
        };
        let writer = stream.try_clone()?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
            timeout,
            greeting: Value::Null,
        };
        let greeting = qmp.read_message()?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Malformed(format!("greeting {greeting}")));
        }
        qmp.greeting = greeting;
        qmp.execute("qmp_capabilities", None)?;
        Ok(qmp)
    }

    /// QEMU's greeting (`{"QMP": {"version": ..., "capabilities": ...}}`).
    pub fn greeting(&self) -> &Value {
        &self.greeting
    }

    /// Runs `command` with optional `arguments` and returns its `return`
    /// value, skipping events that arrive before it.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value, QmpError> {
        let mut msg = json!({ "execute": command });
        if let Some(a) = arguments {
            msg["arguments"] = a;
        }
        let mut line = serde_json::to_vec(&msg).map_err(|e| QmpError::Malformed(e.to_string()))?;
        line.push(b'\n');
        self.writer.write_all(&line)?;
        for _ in 0..=MAX_EVENTS_SKIPPED {
            let mut reply = self.read_message()?;
            if reply.get("event").is_some() {
                continue;
            }
            if let Some(r) = reply.get_mut("return") {
                return Ok(r.take());
            }
            if let Some(e) = reply.get("error") {
                let field = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                return Err(QmpError::Command {
                    command: command.to_owned(),
                    class: field("class"),
                    desc: field("desc"),
                });
            }
            return Err(QmpError::Malformed(format!("reply {reply}")));
        }
        Err(QmpError::TooManyEvents)
    }

    /// Every vCPU's host thread (`query-cpus-fast`).
    pub fn vcpu_threads(&mut self) -> Result<Vec<VcpuThread>, QmpError> {
        let r = self.execute("query-cpus-fast", None)?;
        serde_json::from_value(r).map_err(|e| QmpError::Malformed(format!("query-cpus-fast: {e}")))
    }

    /// Asks QEMU to quit.
    pub fn quit(&mut self) -> Result<(), QmpError> {
        match self.execute("quit", None) {
            Ok(_) | Err(QmpError::Closed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Reads one JSON line before the deadline.
    fn read_message(&mut self) -> Result<Value, QmpError> {
        let deadline = Instant::now() + self.timeout;
        let mut line = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(QmpError::Timeout(self.timeout));
            }
            self.reader.get_ref().set_read_timeout(Some(left))?;
            let room = (MAX_LINE + 1 - line.len()) as u64;
            match (&mut self.reader).take(room).read_until(b'\n', &mut line) {
                Ok(0) => return Err(QmpError::Closed),
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
            if line.last() == Some(&b'\n') {
                break;
            }
            if line.len() > MAX_LINE {
                return Err(QmpError::LineTooLong);
            }
        }
        serde_json::from_slice(&line).map_err(|e| QmpError::Malformed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::os::unix::net::UnixListener;

    /// A scripted QMP server: sends the greeting, then answers each command
    /// line with the next canned reply lines.
    fn fake(replies: Vec<Vec<String>>) -> (tempdir::Dir, std::thread::JoinHandle<Vec<String>>) {
        let dir = tempdir::Dir::new();
        let path = dir.path.join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let h = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let _ = w.write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\n");
            let mut seen = Vec::new();
            for lines in replies {
                let mut cmd = String::new();
                if r.read_line(&mut cmd).unwrap() == 0 {
                    break;
                }
                seen.push(cmd.trim().to_owned());
                for l in lines {
                    let _ = w.write_all(l.as_bytes());
                }
            }
            // Hold the connection open until the client closes it.
            let mut rest = String::new();
            let _ = r.read_line(&mut rest);
            seen
        });
        (dir, h)
    }

    mod tempdir {
        pub struct Dir {
            pub path: std::path::PathBuf,
        }
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let path = std::env::temp_dir().join(format!(
                    "fairgpu-qmp-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&path).unwrap();
                Dir { path }
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.path);
            }
        }
    }

    #[test]
    fn negotiates_skips_events_and_parses_vcpus() {
        let (dir, h) = fake(vec![
            vec!["{\"return\": {}}\n".into()],
            vec![
                "{\"event\": \"RESUME\", \"timestamp\": {}}\n".into(),
                "{\"return\": [{\"cpu-index\": 0, \"thread-id\": 101, \"qom-path\": \"/x\"}, {\"cpu-index\": 1, \"thread-id\": 102}]}\n".into(),
            ],
            vec!["{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command nope has not been found\"}}\n".into()],
        ]);
        let mut q = Qmp::connect(&dir.path.join("qmp.sock"), Duration::from_secs(5)).unwrap();
        assert_eq!(
            q.vcpu_threads().unwrap(),
            [
                VcpuThread {
                    cpu_index: 0,
                    thread_id: 101
                },
                VcpuThread {
                    cpu_index: 1,
                    thread_id: 102
                }
            ]
        );
        match q.execute("nope", Some(json!({"a": 1}))) {
            Err(QmpError::Command { class, .. }) => assert_eq!(class, "CommandNotFound"),
            other => panic!("{other:?}"),
        }
        drop(q);
        let seen = h.join().unwrap();
        assert_eq!(seen[0], "{\"execute\":\"qmp_capabilities\"}");
        assert_eq!(seen[2], "{\"arguments\":{\"a\":1},\"execute\":\"nope\"}");
    }

    #[test]
    fn silence_times_out_and_long_lines_fail() {
        let (dir, _h) = fake(vec![vec![]]);
        let e = Qmp::connect(&dir.path.join("qmp.sock"), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(e, QmpError::Timeout(_)), "{e:?}");

        let long = format!("{{\"return\": \"{}\"}}\n", "x".repeat(MAX_LINE + 10));
        let (dir, _h) = fake(vec![vec![long]]);
        let e = Qmp::connect(&dir.path.join("qmp.sock"), Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, QmpError::LineTooLong), "{e:?}");
    }
}
