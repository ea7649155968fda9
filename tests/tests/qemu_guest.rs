//! fairgpu across a real VM boundary: QEMU (TCG) boots the guest image of
//! scripts/guest-image.sh, whose `fairgpu ping` finds the region through
//! the ivshmem device's BAR2 (FAIRGPU_REGION unset) and makes its calls to
//! a host serving that region from this process.
//!
//! The guest cannot use the futex across the VM boundary (FUTEX_WAIT on the
//! PFN-mapped BAR fails), so its channel falls back to a bounded sleep
//! backoff; the host's block slice bounds the guest → host direction.
//!
//! Needs `qemu-system-x86_64` and the image in `target/guest-image` (or
//! `FAIRGPU_GUEST_IMAGE`); scripts/test.sh provides both and sets
//! `FAIRGPU_REQUIRE_QEMU`, without which a missing piece skips the tests.
//! The image's `fairgpu` is replaced by the one just built: the test appends
//! it, with the guest's script, to the initramfs as a second archive.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fairgpu::host::{HostRegion, ServeConfig, Server};
use fairgpu::transport_ops::TransportOps;
use fairgpu_protocol::RegionConfig;
use fairgpu_qemu::{
    qemu_args, Device, Event, HostWaker, IvshmemServer, ServerConfig, SharedMemory, VmSpec,
};
use fairgpu_tests::{fairgpu_bin, unique_region_path, TempDir};

const QEMU: &str = "qemu-system-x86_64";
/// Boot, run and power-off of one guest, at most.
const GUEST_TIMEOUT: Duration = Duration::from_secs(90);
/// What `fairgpu ping` prints once its round trips and bulk copy are done.
const VERIFIED: &str = "verified";
/// TCG boots are CPU-heavy: the tests of this file take turns.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The kernel and base initramfs.
struct Image {
    vmlinuz: PathBuf,
    initrd: PathBuf,
}

/// The guest image, or `None` (test skipped) when QEMU or the image is
/// missing and `FAIRGPU_REQUIRE_QEMU` is unset.
fn image() -> Option<Image> {
    let dir = std::env::var_os("FAIRGPU_GUEST_IMAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // target/<profile>/fairgpu → target/guest-image
            let target = fairgpu_bin()
                .parent()
                .and_then(Path::parent)
                .expect("target dir")
                .to_owned();
            target.join("guest-image")
        });
    let img = Image {
        vmlinuz: dir.join("vmlinuz"),
        initrd: dir.join("initrd.gz"),
    };
    let qemu = Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let missing = if !qemu {
        Some(format!("{QEMU} not found"))
    } else if !img.vmlinuz.is_file() || !img.initrd.is_file() {
        Some(format!(
            "no guest image in {} (build it with scripts/guest-image.sh {} target/debug/fairgpu)",
            dir.display(),
            dir.display()
        ))
    } else {
        None
    };
    match missing {
        None => Some(img),
        Some(why) if std::env::var_os("FAIRGPU_REQUIRE_QEMU").is_some() => {
            panic!("{why}, and FAIRGPU_REQUIRE_QEMU is set")
        }
        Some(why) => {
            eprintln!("skipping: {why}");
            None
        }
    }
}

/// A host serving a fresh region file from a thread of this process.
///
/// The region has no `FEATURE_LOCAL_OWNERS`: its channels are claimed by
/// guest processes, whose pids mean nothing in the host's pid namespace.
/// The file is grown to a power of two, the size of the BAR QEMU maps.
struct VmHost {
    path: PathBuf,
    bar_size: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl VmHost {
    fn start(test: &str, channels: u32) -> VmHost {
        let path = unique_region_path(test);
        let cfg = RegionConfig {
            channels,
            features: 0,
            ..RegionConfig::default()
        };
        let region = HostRegion::create(&path, &cfg).expect("creating the region");
        let bar_size = fairgpu_qemu::grow_to_bar_size(&path).expect("growing the region file");
        let stop = Arc::new(AtomicBool::new(false));
        let server = Server::new(
            region,
            TransportOps::default(),
            ServeConfig::default(),
            stop.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("host-{test}"))
            .spawn(move || {
                server.run();
            })
            .expect("spawning the host");
        VmHost {
            path,
            bar_size,
            stop,
            thread: Some(thread),
        }
    }
}

impl VmHost {
    /// The VM's ivshmem-plain device over this host's region file.
    fn plain_spec(&self, name: &str) -> VmSpec {
        VmSpec::new(
            name,
            self.bar_size,
            Device::Plain {
                mem_path: self.path.clone(),
            },
        )
        .expect("a valid VM spec")
    }
}

impl Drop for VmHost {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // The server's HostRegion removes the file; make sure.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Appends one newc entry to `out`.
fn newc_entry(out: &mut Vec<u8>, ino: u32, name: &str, mode: u32, data: &[u8]) {
    let fields = [
        ino,
        mode,
        0,
        0,
        1,
        0,
        data.len() as u32,
        0,
        0,
        0,
        0,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out.extend_from_slice(data);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// Writes `base` followed by an uncompressed newc archive of `files` (path,
/// mode, contents) to `out`. The kernel unpacks concatenated archives in
/// order, so these files replace the base's.
fn overlay_initrd(base: &Path, out: &Path, files: &[(&str, u32, Vec<u8>)]) {
    let mut img = std::fs::read(base).expect("reading the base initramfs");
    // The kernel looks for the next archive at a 4-byte boundary.
    while !img.len().is_multiple_of(4) {
        img.push(0);
    }
    let mut ino = 0x4000_0000;
    let mut dirs: Vec<String> = Vec::new();
    for (path, _, _) in files {
        if let Some((dir, _)) = path.rsplit_once('/') {
            if !dirs.iter().any(|d| d == dir) {
                dirs.push(dir.to_owned());
            }
        }
    }
    for d in &dirs {
        ino += 1;
        newc_entry(&mut img, ino, d, 0o040_755, &[]);
    }
    for (path, mode, data) in files {
        ino += 1;
        newc_entry(&mut img, ino, path, 0o100_000 | mode, data);
    }
    newc_entry(&mut img, 0, "TRAILER!!!", 0, &[]);
    std::fs::write(out, img).expect("writing the test initramfs");
}

/// A booting guest: QEMU with its serial console on stdout.
struct Guest {
    name: String,
    child: Child,
    output: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
}

impl Guest {
    /// Boots `img` with `run` as the guest's /guest/run script and the
    /// fairgpu device `spec`.
    fn boot(name: &str, img: &Image, dir: &TempDir, spec: &VmSpec, run: &str) -> Guest {
        let initrd = dir.join(&format!("{name}-initrd"));
        let fairgpu = std::fs::read(fairgpu_bin()).expect("reading the fairgpu binary");
        overlay_initrd(
            &img.initrd,
            &initrd,
            &[
                ("bin/fairgpu", 0o755, fairgpu),
                ("guest/run", 0o755, run.as_bytes().to_vec()),
            ],
        );
        let mut child = Command::new(QEMU)
            .args(["-accel", "tcg", "-m", "512", "-smp", "2"])
            .args(["-nodefaults", "-no-reboot", "-display", "none"])
            .args(["-serial", "stdio"])
            .arg("-kernel")
            .arg(&img.vmlinuz)
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", "console=ttyS0 quiet panic=-1"])
            .args(qemu_args(spec))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning qemu");
        let output = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().expect("piped stdout")),
            Box::new(child.stderr.take().expect("piped stderr")),
        ];
        for pipe in pipes {
            let out = output.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                    o.push_str(line.trim_end_matches('\r'));
                    o.push('\n');
                }
            }));
        }
        Guest {
            name: name.to_owned(),
            child,
            output,
            readers,
            started: Instant::now(),
        }
    }

    /// Waits for QEMU to exit (the guest powers off); kills it and fails
    /// the test after [`GUEST_TIMEOUT`]. Returns the guest's output.
    fn finish(mut self) -> (ExitStatus, String, Duration) {
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for qemu") {
                break s;
            }
            if self.started.elapsed() > GUEST_TIMEOUT {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "guest {} still running after {GUEST_TIMEOUT:?}; output so far:\n{}",
                    self.name,
                    self.output.lock().unwrap_or_else(|e| e.into_inner())
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = self.started.elapsed();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let out = self
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (status, out, took)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Checks a finished guest ran `fairgpu ping` to the end.
fn assert_pinged(name: &str, status: ExitStatus, out: &str, took: Duration) {
    eprintln!("guest {name} finished in {took:.1?}:\n{out}");
    assert!(status.success(), "qemu for {name} exited with {status}");
    assert!(
        out.lines()
            .any(|l| l.contains("round trips") && l.contains(VERIFIED)),
        "guest {name} did not print the ping's verified line:\n{out}"
    );
    assert!(
        out.contains("fairgpu-guest: exit 0"),
        "guest {name}'s run script failed:\n{out}"
    );
}

/// The guest's script: ping over the BAR, with FAIRGPU_REGION unset.
fn ping_script(count: u32) -> String {
    format!("#!/bin/sh\nunset FAIRGPU_REGION\nfairgpu ping --count {count}\n")
}

#[test]
fn guest_pings_the_host_through_ivshmem_plain() {
    let Some(img) = image() else { return };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("qemu-ping");
    let host = VmHost::start("qemu-ping", 2);
    let guest = Guest::boot(
        "ping",
        &img,
        &dir,
        &host.plain_spec("ping"),
        &ping_script(200),
    );
    let (status, out, took) = guest.finish();
    assert_pinged("ping", status, &out, took);
    assert!(
        out.contains("resource2: 2 channels"),
        "the guest did not find the region through BAR2:\n{out}"
    );
}

#[test]
fn two_vms_with_their_own_regions_both_complete() {
    let Some(img) = image() else { return };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("qemu-two");
    let hosts = [
        VmHost::start("qemu-two-a", 1),
        VmHost::start("qemu-two-b", 1),
    ];
    let guests: Vec<Guest> = ["a", "b"]
        .iter()
        .zip(&hosts)
        .map(|(name, host)| {
            Guest::boot(name, &img, &dir, &host.plain_spec(name), &ping_script(100))
        })
        .collect();
    for (guest, name) in guests.into_iter().zip(["a", "b"]) {
        let (status, out, took) = guest.finish();
        assert_pinged(name, status, &out, took);
    }
}

/// The ping's p99 round trip in nanoseconds, from its summary line.
fn ping_p99_ns(out: &str) -> Option<u64> {
    let line = out.lines().find(|l| l.contains("round trips"))?;
    let rest = line.split("p99 ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

#[test]
fn guest_rings_the_host_through_ivshmem_doorbell() {
    let Some(img) = image() else { return };
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("qemu-doorbell");
    let host = VmHost::start("qemu-doorbell", 2);
    // The ivshmem server hands the region file to QEMU; each ring of the
    // host's vector 0 becomes the futex wake the serving loop blocks on.
    let socket = dir.join("ivshmem.sock");
    let shm = SharedMemory::open(&host.path).expect("opening the region for QEMU");
    let cfg = ServerConfig {
        name: "doorbell".into(),
        vectors: 1,
        ..ServerConfig::default()
    };
    let mut server = IvshmemServer::bind(&socket, shm, cfg).expect("binding the ivshmem socket");
    let waker = HostWaker::open(&host.path).expect("mapping the region to wake its host");
    let rings = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let serving = {
        let (rings, stop) = (rings.clone(), stop.clone());
        std::thread::spawn(move || {
            server
                .run(&stop, |e| {
                    if let Event::Doorbell { count, .. } = e {
                        waker.wake();
                        rings.fetch_add(*count, Ordering::Relaxed);
                    }
                })
                .expect("the ivshmem server");
        })
    };
    let spec = VmSpec::new(
        "doorbell",
        host.bar_size,
        Device::Doorbell {
            socket: socket.clone(),
            vectors: 1,
        },
    )
    .expect("a valid VM spec");
    let guest = Guest::boot("doorbell", &img, &dir, &spec, &ping_script(200));
    let (status, out, took) = guest.finish();
    stop.store(true, Ordering::Relaxed);
    serving.join().expect("the ivshmem server thread");
    assert_pinged("doorbell", status, &out, took);
    let rings = rings.load(Ordering::Relaxed);
    eprintln!(
        "host doorbell rung {rings} times; ping p99 {:?} ns",
        ping_p99_ns(&out)
    );
    assert!(
        rings > 0,
        "the guest never rang the host's doorbell:\n{out}"
    );
}
