//! The `fairgpu` command line against a running host.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fairgpu_tests::{fairgpu_bin, unique_region_path, HostProcess};

/// Runs `cmd` to completion, killing it (and failing) after `timeout`.
fn run(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning fairgpu");
    let start = Instant::now();
    while child.try_wait().expect("waiting for fairgpu").is_none() {
        if start.elapsed() > timeout {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collecting output");
            panic!(
                "{cmd:?} still running after {timeout:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().expect("collecting output")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn ping_verifies_a_running_host() {
    let host = HostProcess::start("cli_ping", 2);
    let out = run(
        Command::new(fairgpu_bin())
            .args(["ping", "--count", "100", "--region"])
            .arg(host.path()),
        Duration::from_secs(30),
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "ping failed: {stdout}\n{stderr}");
    assert!(stdout.contains("claimed channel 0"), "{stdout}");
    assert!(stdout.contains("100 round trips"), "{stdout}");
    assert!(stdout.contains("verified"), "{stdout}");

    // The region can also come from the environment.
    let out = run(
        Command::new(fairgpu_bin())
            .args(["ping", "--count", "10"])
            .env("FAIRGPU_REGION", host.path()),
        Duration::from_secs(30),
    );
    assert!(
        out.status.success() && text(&out.stdout).contains("verified"),
        "ping with FAIRGPU_REGION: {}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

#[test]
fn ping_fails_when_every_channel_is_taken() {
    let host = HostProcess::start("cli_ping_full", 1);
    let _held = host.claim();
    let out = run(
        Command::new(fairgpu_bin())
            .args(["ping", "--count", "10", "--region"])
            .arg(host.path()),
        Duration::from_secs(30),
    );
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success(),
        "ping succeeded without a free channel"
    );
    assert!(stderr.contains("channels are in use"), "{stderr}");
}

#[test]
fn serve_region_refuses_zero_channels() {
    let path = unique_region_path("cli_zero_channels");
    let out = run(
        Command::new(fairgpu_bin())
            .args(["serve-region", "--channels", "0", "--region"])
            .arg(&path),
        Duration::from_secs(10),
    );
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "serve-region accepted 0 channels");
    assert!(stderr.contains("channels"), "{stderr}");
    let created = path.exists();
    let _ = std::fs::remove_file(&path);
    assert!(!created, "a refused configuration leaves no region file");
}
