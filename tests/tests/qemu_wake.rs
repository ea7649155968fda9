//! The guest's wake paths across a real VM boundary (QEMU TCG), and the
//! interrupt path of the channel without a VM.
//!
//! Guest → host: the Doorbell register (BAR0 offset 12) rings the host
//! peer's vector 0; the ivshmem server of this test turns it into the futex
//! wake of the serving loop. Host → guest: the serving loop's guest notifier
//! raises the guest's MSI-X vector 1 whenever it wakes a channel that
//! published `guest_sleeping`; a guest with an IOMMU (q35 + intel-iommu)
//! receives it through vfio-pci as an eventfd. Without an IOMMU the guest
//! falls back to a bounded sleep backoff and still works.
//!
//! The guest runs `fairgpu-guest info` (which reports the wake path the
//! frontend chose, and measures round trips with a zero spin budget so that
//! every wait blocks and needs a wake) and `fairgpu ping`.
//!
//! Needs `qemu-system-x86_64`, the image in `target/guest-image` (or
//! `FAIRGPU_GUEST_IMAGE`) built with its vfio modules, and the binaries
//! (`cargo build -p fairgpu -p fairgpu-guest-tools`); a missing QEMU or
//! image skips the VM tests unless `FAIRGPU_REQUIRE_QEMU` is set.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use fairgpu_frontend::vfio::{InterruptWait, HOST_TO_GUEST_VECTOR};
use fairgpu_frontend::{Channel, GuestRegion, WaitConfig, WaitMode};
use fairgpu_protocol::{Opcode, RegionConfig};
use fairgpu_qemu::{
    qemu_args, Device, Event, HostWaker, IvshmemServer, ServerConfig, SharedMemory, VmSpec,
};
use fairgpu_tests::qemu::{
    guest_tool, image, image_has_vfio_or_skip, take_turn, Guest, GuestOptions, Image, Machine,
    Overlay,
};
use fairgpu_tests::{fairgpu_bin, unique_region_path, TempDir};
use fairgpu_worker::host::{GuestNotifier, HostRegion, ServeConfig, Server};
use fairgpu_worker::transport_ops::TransportOps;

/// Boot, run and power-off of one guest, at most.
const GUEST_TIMEOUT: Duration = Duration::from_secs(150);
/// Vectors of the device: 0 = guest → host doorbell, 1 = host → guest wake.
const VECTORS: u16 = 2;
/// No-op round trips `fairgpu-guest info` measures in the guest.
const INFO_CALLS: u32 = 300;

/// A host serving a fresh region file from a thread of this process, with
/// the ivshmem server QEMU connects to. The serving loop's guest notifier
/// raises vector 1 in the guest; the ivshmem server turns the guest's
/// doorbell into the serving loop's futex wake.
struct VmHost {
    path: PathBuf,
    socket: PathBuf,
    bar_size: u64,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// Interrupts the notifier raised.
    interrupts: Arc<AtomicU64>,
    /// Doorbell rings the ivshmem server saw.
    rings: Arc<AtomicU64>,
}

impl VmHost {
    fn start(test: &str, dir: &TempDir) -> VmHost {
        let path = unique_region_path(test);
        // Guest processes' pids mean nothing here: no FEATURE_LOCAL_OWNERS.
        let cfg = RegionConfig {
            channels: 2,
            features: 0,
            ..RegionConfig::default()
        };
        let region = HostRegion::create(&path, &cfg).expect("creating the region");
        let bar_size = fairgpu_qemu::grow_to_bar_size(&path).expect("growing the region file");
        let socket = dir.join("ivshmem.sock");
        let shm = SharedMemory::open(&path).expect("opening the region for QEMU");
        let mut ivshmem = IvshmemServer::bind(
            &socket,
            shm,
            ServerConfig {
                name: test.into(),
                vectors: VECTORS,
                ..ServerConfig::default()
            },
        )
        .expect("binding the ivshmem socket");
        let interrupter = ivshmem.interrupter();
        let interrupts = Arc::new(AtomicU64::new(0));
        let notifier: GuestNotifier = {
            let interrupts = interrupts.clone();
            Arc::new(move |_channel| {
                // One VM per region: raise the wake vector in its guest.
                let n = interrupter.interrupt_all(HOST_TO_GUEST_VECTOR as u16);
                interrupts.fetch_add(n as u64, Ordering::Relaxed);
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        // The host sleeps as soon as it is idle, so that every no-op is
        // answered after a wake-up (a doorbell, then the server's futex):
        // a guest waiting with no spin then blocks, and the host's MSI-X
        // vector ends the block, however fast the TCG guest runs. A host
        // that spins could answer each call before the guest looked once
        // (300 round trips, no block), as it once did in CI.
        let server = Server::new(
            region,
            TransportOps::default(),
            ServeConfig {
                spin: Duration::ZERO,
            },
            stop.clone(),
        )
        .with_guest_notifier(notifier);
        let serving = std::thread::Builder::new()
            .name(format!("host-{test}"))
            .spawn(move || {
                server.run();
            })
            .expect("spawning the host");
        let waker = HostWaker::open(&path).expect("mapping the region to wake its host");
        let rings = Arc::new(AtomicU64::new(0));
        let doorbells = {
            let (rings, stop) = (rings.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("ivshmem-{test}"))
                .spawn(move || {
                    ivshmem
                        .run(&stop, |e| {
                            if let Event::Doorbell { count, .. } = e {
                                waker.wake();
                                rings.fetch_add(*count, Ordering::Relaxed);
                            }
                        })
                        .expect("the ivshmem server");
                })
                .expect("spawning the ivshmem server")
        };
        VmHost {
            path,
            socket,
            bar_size,
            stop,
            threads: vec![serving, doorbells],
            interrupts,
            rings,
        }
    }

    fn spec(&self, name: &str) -> VmSpec {
        VmSpec::new(
            name,
            self.bar_size,
            Device::Doorbell {
                socket: self.socket.clone(),
                vectors: VECTORS,
            },
        )
        .expect("a valid VM spec")
    }
}

impl Drop for VmHost {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Boots a guest with `fairgpu` and `fairgpu-guest` and `run` as its
/// script; `iommu` boots q35 with an intel-iommu (before the ivshmem
/// device, as QEMU requires) and `intel_iommu=on`.
fn boot(name: &str, img: &Image, dir: &TempDir, spec: &VmSpec, run: &str, iommu: bool) -> Guest {
    let initrd = dir.join(&format!("{name}-initrd"));
    let mut overlay = Overlay::new();
    overlay
        .add_stripped("/bin/fairgpu", &fairgpu_bin())
        .add_stripped("/bin/fairgpu-guest", &guest_tool())
        .add("/guest/run", 0o755, run.as_bytes().to_vec());
    // A user without root for the non-root case.
    overlay
        .add(
            "/etc/passwd",
            0o644,
            b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n".to_vec(),
        )
        .add(
            "/etc/group",
            0o644,
            b"root:x:0:\nnogroup:x:65534:\n".to_vec(),
        );
    for bin in [fairgpu_bin(), guest_tool()] {
        overlay.add_libraries(&bin, None, "/opt/fairgpu/lib");
    }
    overlay.write(&img.initrd, &initrd);
    let machine = if iommu {
        Machine::q35_with_iommu()
    } else {
        Machine::default()
    };
    Guest::boot_on(
        name,
        img,
        &initrd,
        &machine,
        &qemu_args(spec),
        &GuestOptions::default(),
    )
}

/// The guest's script: `before`, info (every wait blocks: spin 0), ping,
/// `after`.
fn script(before: &str, after: &str) -> String {
    format!(
        "#!/bin/sh\nunset FAIRGPU_REGION\n{before}\
         FAIRGPU_SPIN_US=0 fairgpu-guest info --count {INFO_CALLS} || exit 1\n\
         fairgpu ping --count 200 || exit 1\n{after}"
    )
}

/// A second process while a first holds the vfio group: the first (in the
/// background) makes calls until killed; once its channel shows as claimed
/// (looked at without trying vfio), the second runs info, its lines
/// prefixed with `second: `.
const SECOND_PROCESS: &str = "FAIRGPU_SPIN_US=0 fairgpu-guest info --count 1000000 >/dev/null &\n\
     first=$!\n\
     i=0\n\
     until FAIRGPU_WAIT=backoff fairgpu-guest info --count 0 | grep -q 'claimed by'; do\n\
       i=$((i + 1)); [ $i -gt 600 ] && break; sleep 0.1\n\
     done\n\
     fairgpu-guest info --count 100 | sed 's/^/second: /'\n\
     kill $first\n\
     wait $first\n";

/// A user who may open the vfio group but not the BAR's sysfs files (root's
/// alone): the frontend maps the BARs through vfio. Lines prefixed `user: `.
const NON_ROOT_USER: &str = "for g in /dev/vfio/[0-9]*; do chmod 666 \"$g\"; done\n\
     su -s /bin/sh nobody -c 'FAIRGPU_SPIN_US=0 fairgpu-guest info --count 100' | sed 's/^/user: /'\n";

/// The numbers of `fairgpu-guest info`'s latency line.
#[derive(Debug)]
struct Latency {
    calls: u64,
    path: String,
    blocks: u64,
    interrupt_wakes: u64,
    interrupts: u64,
}

fn latency(out: &str) -> Latency {
    let line = out
        .lines()
        .find(|l| l.starts_with("latency: ") && l.contains("round trips"))
        .unwrap_or_else(|| panic!("no latency line in the guest's output:\n{out}"));
    let number_before = |what: &str| -> u64 {
        let head = line
            .split(what)
            .next()
            .unwrap_or_else(|| panic!("no {what:?} in {line:?}"));
        head.rsplit(|c: char| !c.is_ascii_digit())
            .find(|w| !w.is_empty())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no number before {what:?} in {line:?}"))
    };
    let path = line
        .split(" wake path")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .unwrap_or_default()
        .to_owned();
    Latency {
        calls: number_before(" no-op round trips"),
        path,
        blocks: number_before(" blocks"),
        interrupt_wakes: number_before(" woken by interrupt"),
        interrupts: number_before(" interrupts received"),
    }
}

fn assert_pinged(out: &str) {
    assert!(
        out.lines()
            .any(|l| l.contains("round trips") && l.contains("verified")),
        "the guest's ping did not finish:\n{out}"
    );
}

#[test]
fn latency_line_parses() {
    let l = latency(
        "x\nlatency: 300 no-op round trips on channel 0: p50 1.0 µs, p99 2.0 µs, min 1.0 µs, \
         max 3.0 µs; msix wake path, 290 blocks, 288 woken by interrupt, 0 naps, 301 interrupts received\n",
    );
    assert_eq!(l.calls, 300);
    assert_eq!(l.path, "msix");
    assert_eq!((l.blocks, l.interrupt_wakes, l.interrupts), (290, 288, 301));
}

#[test]
fn guest_with_an_iommu_is_woken_through_msix() {
    let Some(img) = image() else { return };
    if !image_has_vfio_or_skip(&img) {
        return;
    }
    let _turn = take_turn();
    let dir = TempDir::new("qemu-msix");
    let host = VmHost::start("qemu-msix", &dir);
    let guest = boot(
        "msix",
        &img,
        &dir,
        &host.spec("msix"),
        &script("", &format!("{SECOND_PROCESS}{NON_ROOT_USER}")),
        true,
    );
    let done = guest.finish(GUEST_TIMEOUT);
    eprintln!("guest msix finished in {:.1?}:\n{}", done.took, done.output);
    done.assert_run_succeeded();
    let out = &done.output;
    assert!(
        out.contains("vfio-pci loaded"),
        "the guest did not load vfio-pci:\n{out}"
    );
    assert!(
        out.lines().any(|l| l.starts_with("wake path: msix (auto)")),
        "the guest did not choose the MSI-X path:\n{out}"
    );
    let l = latency(out);
    assert_eq!(l.calls, u64::from(INFO_CALLS));
    assert_eq!(l.path, "msix", "the channel left the MSI-X path: {l:?}");
    assert!(l.blocks > 0, "no wait blocked: {l:?}");
    assert!(
        l.interrupt_wakes > 0 && l.interrupts > 0,
        "no block was ended by an interrupt: {l:?}"
    );
    assert_pinged(out);
    // The second process found the group taken and fell back, and works.
    let second = out
        .lines()
        .find(|l| l.starts_with("second: wake path: "))
        .unwrap_or_else(|| panic!("the second process printed no wake path:\n{out}"));
    assert!(
        second.starts_with("second: wake path: backoff (auto)")
            && second.contains("open in another process"),
        "the second process did not fall back for want of the vfio group: {second}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("second: latency: 100 no-op round trips")),
        "the second process's round trips did not complete:\n{out}"
    );
    // The user's process mapped the BARs through vfio and was woken by MSI-X.
    let user = out
        .lines()
        .find(|l| l.starts_with("user: wake path: "))
        .unwrap_or_else(|| panic!("the non-root process printed no wake path:\n{out}"));
    assert!(
        user.starts_with("user: wake path: msix (auto)")
            && user.contains("BARs mapped through vfio"),
        "the non-root process did not map the BARs through vfio: {user}"
    );
    let user_latency = out
        .lines()
        .find(|l| l.starts_with("user: latency: 100 no-op round trips"))
        .unwrap_or_else(|| panic!("the non-root process's round trips did not complete:\n{out}"));
    assert!(user_latency.contains("msix wake path"), "{user_latency}");
    let (sent, rings) = (
        host.interrupts.load(Ordering::Relaxed),
        host.rings.load(Ordering::Relaxed),
    );
    eprintln!("host raised vector 1 {sent} times, doorbell rung {rings} times; {l:?}");
    assert!(sent > 0, "the host never interrupted the guest");
}

#[test]
fn guest_without_an_iommu_falls_back_to_sleep_backoff() {
    let Some(img) = image() else { return };
    let _turn = take_turn();
    let dir = TempDir::new("qemu-backoff");
    let host = VmHost::start("qemu-backoff", &dir);
    // Forcing MSI-X without an IOMMU fails, and says why.
    let forced = "FAIRGPU_WAIT=msix fairgpu-guest info --count 0\n\
                  echo \"fairgpu-guest: forced msix exit $?\"\n";
    let guest = boot(
        "backoff",
        &img,
        &dir,
        &host.spec("backoff"),
        &script(forced, ""),
        false,
    );
    let done = guest.finish(GUEST_TIMEOUT);
    eprintln!(
        "guest backoff finished in {:.1?}:\n{}",
        done.took, done.output
    );
    done.assert_run_succeeded();
    let out = &done.output;
    assert!(
        out.contains("fairgpu-guest: forced msix exit 1") && out.contains("no IOMMU group"),
        "forcing MSI-X without an IOMMU did not fail with the reason:\n{out}"
    );
    let chose = out
        .lines()
        .find(|l| l.starts_with("wake path: "))
        .unwrap_or_else(|| panic!("no wake path line:\n{out}"));
    assert!(
        chose.starts_with("wake path: backoff (auto)") && chose.contains("no IOMMU group"),
        "the guest did not fall back to the sleep backoff for want of an IOMMU: {chose}"
    );
    let l = latency(out);
    assert_eq!(l.calls, u64::from(INFO_CALLS));
    assert_eq!(l.path, "backoff");
    assert_eq!(l.interrupts, 0);
    assert_pinged(out);
}

/// The channel's interrupt path against the real serving loop, without a
/// VM: the notifier signals the eventfd the channel waits on, as the host
/// raising MSI-X vector 1 would.
#[test]
fn channel_waits_on_the_interrupt_eventfd_the_host_notifier_signals() {
    let path = unique_region_path("wake-irq");
    let region = HostRegion::create(&path, &RegionConfig::default()).expect("creating the region");
    let irq = Arc::new(InterruptWait::for_tests().expect("an eventfd"));
    let notified = Arc::new(AtomicU64::new(0));
    let notifier: GuestNotifier = {
        let (irq, notified) = (irq.clone(), notified.clone());
        Arc::new(move |_| {
            notified.fetch_add(1, Ordering::Relaxed);
            irq.signal().expect("signalling the eventfd");
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let server = Server::new(
        region,
        TransportOps::default(),
        ServeConfig::default(),
        stop.clone(),
    )
    .with_guest_notifier(notifier);
    let serving = std::thread::spawn(move || {
        server.run();
    });
    let guest = GuestRegion::open_with_interrupts(&path, irq.clone()).expect("opening the region");
    let mut ch = Channel::claim(
        guest,
        WaitConfig {
            // Every wait blocks at once and needs the wake.
            spin: Duration::ZERO,
            host_timeout: Some(Duration::from_secs(5)),
        },
    )
    .expect("claiming a channel");
    assert_eq!(ch.wait_mode(), WaitMode::Interrupt);
    for i in 0..300u64 {
        let r = ch.call(Opcode::Nop, [i, 0, 0, 0, 0]).expect("a no-op");
        assert_eq!(r.vals[0], i);
    }
    let stats = ch.wait_stats();
    assert_eq!(ch.wait_mode(), WaitMode::Interrupt, "{stats:?}");
    assert!(stats.blocks > 0, "{stats:?}");
    assert!(
        stats.interrupt_wakes > 0 && irq.received() > 0,
        "no block was ended by the notifier's signal: {stats:?}"
    );
    assert!(notified.load(Ordering::Relaxed) > 0);
    drop(ch);
    stop.store(true, Ordering::Relaxed);
    serving.join().expect("the serving thread");
}
