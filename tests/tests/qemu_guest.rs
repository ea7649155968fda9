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

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fairgpu_protocol::RegionConfig;
use fairgpu_qemu::{
    qemu_args, Device, Event, HostWaker, IvshmemServer, ServerConfig, SharedMemory, VmSpec,
};
use fairgpu_tests::qemu::{image, take_turn, Guest, GuestOptions, Image, Overlay};
use fairgpu_tests::{fairgpu_bin, unique_region_path, TempDir};
use fairgpu_worker::host::{HostRegion, ServeConfig, Server};
use fairgpu_worker::transport_ops::TransportOps;

/// Boot, run and power-off of one guest, at most.
const GUEST_TIMEOUT: Duration = Duration::from_secs(90);
/// What `fairgpu ping` prints once its round trips and bulk copy are done.
const VERIFIED: &str = "verified";

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

/// Boots `img` with the freshly built `fairgpu` and `run` as the guest's
/// /guest/run script, and the fairgpu device `spec`.
fn boot(name: &str, img: &Image, dir: &TempDir, spec: &VmSpec, run: &str) -> Guest {
    let initrd = dir.join(&format!("{name}-initrd"));
    let mut overlay = Overlay::new();
    overlay.add_stripped("/bin/fairgpu", &fairgpu_bin()).add(
        "/guest/run",
        0o755,
        run.as_bytes().to_vec(),
    );
    overlay.write(&img.initrd, &initrd);
    Guest::boot(
        name,
        img,
        &initrd,
        &qemu_args(spec),
        &GuestOptions::default(),
    )
}

/// Waits for `guest` (bounded by [`GUEST_TIMEOUT`]).
fn finish(guest: Guest) -> (ExitStatus, String, Duration) {
    let f = guest.finish(GUEST_TIMEOUT);
    (f.status, f.output, f.took)
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
    let _turn = take_turn();
    let dir = TempDir::new("qemu-ping");
    let host = VmHost::start("qemu-ping", 2);
    let guest = boot(
        "ping",
        &img,
        &dir,
        &host.plain_spec("ping"),
        &ping_script(200),
    );
    let (status, out, took) = finish(guest);
    assert_pinged("ping", status, &out, took);
    assert!(
        out.contains("resource2: 2 channels"),
        "the guest did not find the region through BAR2:\n{out}"
    );
}

#[test]
fn two_vms_with_their_own_regions_both_complete() {
    let Some(img) = image() else { return };
    let _turn = take_turn();
    let dir = TempDir::new("qemu-two");
    let hosts = [
        VmHost::start("qemu-two-a", 1),
        VmHost::start("qemu-two-b", 1),
    ];
    let guests: Vec<Guest> = ["a", "b"]
        .iter()
        .zip(&hosts)
        .map(|(name, host)| boot(name, &img, &dir, &host.plain_spec(name), &ping_script(100)))
        .collect();
    for (guest, name) in guests.into_iter().zip(["a", "b"]) {
        let (status, out, took) = finish(guest);
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
    let _turn = take_turn();
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
    let guest = boot("doorbell", &img, &dir, &spec, &ping_script(200));
    let (status, out, took) = finish(guest);
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
