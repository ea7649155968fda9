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

/// `ptx-check` passes the PTX nvcc built for the interpreter's tests and
/// names, per kernel, what SimGpu cannot execute or parse.
#[test]
fn ptx_check_lists_what_simgpu_cannot_execute() {
    let kernels = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../ptx/tests/kernels");
    let mut files: Vec<_> = std::fs::read_dir(&kernels)
        .expect("ptx/tests/kernels")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
        .collect();
    files.sort();
    let out = run(
        Command::new(fairgpu_bin())
            .arg("ptx-check")
            .arg("--quiet")
            .args(&files),
        Duration::from_secs(60),
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("{} files (0 cannot be loaded)", files.len())),
        "{stdout}"
    );

    let dir = fairgpu_tests::TempDir::new("cli_ptx_check");
    let odd = dir.path().join("odd.ptx");
    std::fs::write(
        &odd,
        ".version 8.0\n.target sm_90\n.address_size 64\n\
         .visible .entry fine(.param .u64 p)\n{\n\t.reg .b64 %rd<2>;\n\
         \tld.param.u64 %rd1, [p];\n\tret;\n}\n\
         .visible .entry odd(.param .u64 p)\n{\n\t.reg .b32 %r<5>;\n\
         \tsured.b.add.u32.trap [%rd1, {%r1}], %r2;\n\tret;\n}\n",
    )
    .expect("writing odd.ptx");
    let broken = dir.path().join("broken.ptx");
    std::fs::write(&broken, ".version 8.0\n.target sm_90\n.visible .entry (").expect("write");
    let out = run(
        Command::new(fairgpu_bin())
            .arg("ptx-check")
            .arg(&odd)
            .arg(&broken),
        Duration::from_secs(60),
    );
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("odd.ptx: fine: ok"), "{stdout}");
    assert!(
        stdout.contains("odd.ptx: odd: unsupported: sured"),
        "{stdout}"
    );
    assert!(stdout.contains("broken.ptx: cannot be loaded"), "{stdout}");
    assert!(
        stdout.contains("2 files (1 cannot be loaded), 2 kernels (1 with"),
        "{stdout}"
    );
}
