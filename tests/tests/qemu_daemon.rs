//! `fairgpu serve` as the ivshmem server of a VM with an `ivshmem-doorbell`
//! device, and its QMP side: QEMU (TCG) boots the guest image with the
//! options `fairgpu qemu-args` prints, the guest's `fairgpu ping` runs over
//! the daemon's memfd region, and `fairgpu status --json` reports the
//! peer, the doorbells and the vCPU threads.
//!
//! The first test plays QEMU itself (this crate's ivshmem client) and runs
//! everywhere. The MSI-X test boots q35 with an IOMMU so the guest's
//! frontend waits on the device's vector 1 through vfio-pci, and needs the
//! image's vfio modules and `fairgpu-guest` (crate guest-tools). The others need `qemu-system-x86_64` and the image in
//! `target/guest-image` (or `FAIRGPU_GUEST_IMAGE`); without them they are
//! skipped unless `FAIRGPU_REQUIRE_QEMU` is set.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fairgpu_daemon::qemu::QemuStatus;
use fairgpu_tests::qemu::{
    guest_tool, image, image_has_vfio_or_skip, take_turn, Guest, GuestOptions, Image, Machine,
    Overlay,
};
use fairgpu_tests::{
    fairgpu_bin, run_command, status, vm, wait_config, wait_for_status, wait_until, DaemonProcess,
    TempDir,
};
use fairgpu_worker::stats::WorkerState;

/// Boot, run and power-off of one guest, at most.
const GUEST_TIMEOUT: Duration = Duration::from_secs(90);
/// What `fairgpu ping` prints once its round trips and bulk copy are done.
const VERIFIED: &str = "verified";
/// No-op round trips `fairgpu-guest info` measures in the MSI-X guest.
const INFO_CALLS: u32 = 300;

/// A daemon with one `guest = "qemu"` VM "vm1" whose `[vm.ivshmem]` has
/// the lines `ivshmem` returns for the test's directory.
struct Setup {
    dir: TempDir,
    config: PathBuf,
    daemon: DaemonProcess,
}

impl Setup {
    fn start(test: &str, ivshmem: impl FnOnce(&TempDir) -> String) -> Setup {
        let dir = TempDir::new(test);
        let ivshmem = ivshmem(&dir);
        let socket = dir.join("control.sock");
        let config = dir.join("fairgpu.toml");
        std::fs::write(
            &config,
            format!(
                "[daemon]\ncontrol_socket = {:?}\nexecutor = \"sim\"\nstate_dir = {:?}\n\n\
                 [[vm]]\nname = \"vm1\"\nmemory = \"64MiB\"\nchannels = 2\nguest = \"qemu\"\n\
                 [vm.ivshmem]\n{ivshmem}\n",
                socket.display().to_string(),
                dir.path().display().to_string(),
            ),
        )
        .expect("writing the configuration");
        let daemon = DaemonProcess::start(&config, &socket, &[]);
        // The daemon answered: its regions and ivshmem sockets exist and
        // the worker was spawned; wait for it to serve.
        wait_for_status(&daemon, "the worker to run", |s| {
            vm(s, "vm1").state == WorkerState::Running
        });
        Setup {
            dir,
            config,
            daemon,
        }
    }

    /// The QEMU options `fairgpu qemu-args vm1` prints.
    fn qemu_args(&self) -> Vec<String> {
        let out = run_command(
            Command::new(fairgpu_bin())
                .args(["qemu-args", "vm1", "--config"])
                .arg(&self.config),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "qemu-args: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The temporary paths need no shell quoting.
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// Boots a guest running `run` as its /guest/run script on QEMU's
    /// default machine.
    fn boot(&self, name: &str, img: &Image, run: &str) -> Guest {
        self.boot_on(name, img, &Machine::default(), &[], run)
    }

    /// Boots a guest on `machine` running `run` as its /guest/run script,
    /// with `fairgpu` and the binaries `tools` in its /bin.
    fn boot_on(
        &self,
        name: &str,
        img: &Image,
        machine: &Machine,
        tools: &[PathBuf],
        run: &str,
    ) -> Guest {
        let initrd = self.dir.join(&format!("{name}-initrd"));
        let mut overlay = Overlay::new();
        overlay.add_stripped("/bin/fairgpu", &fairgpu_bin()).add(
            "/guest/run",
            0o755,
            run.as_bytes().to_vec(),
        );
        for tool in tools {
            let file = tool
                .file_name()
                .and_then(|n| n.to_str())
                .expect("a tool's file name");
            overlay.add_stripped(&format!("/bin/{file}"), tool);
        }
        // The image's libraries may be older than what the binaries just
        // built need: bring the host's.
        for bin in std::iter::once(fairgpu_bin()).chain(tools.iter().cloned()) {
            overlay.add_libraries(&bin, None, "/usr/local/lib/fairgpu");
        }
        overlay.write(&img.initrd, &initrd);
        Guest::boot_on(
            name,
            img,
            &initrd,
            machine,
            &self.qemu_args(),
            &GuestOptions::default(),
        )
    }

    /// vm1's QEMU status.
    fn qemu(&self) -> QemuStatus {
        vm(&status(&self.daemon), "vm1")
            .qemu
            .clone()
            .expect("a QEMU VM has a qemu status")
    }

    /// Waits until vm1's QEMU status satisfies `f`.
    fn wait_qemu(&self, what: &str, f: impl Fn(&QemuStatus) -> bool) -> QemuStatus {
        let s = wait_for_status(&self.daemon, what, |s| {
            vm(s, "vm1").qemu.as_ref().is_some_and(&f)
        });
        vm(&s, "vm1").qemu.clone().expect("qemu status")
    }
}

/// `fairgpu status --json` through the CLI, as an operator reads it.
fn status_json(config: &Path) -> serde_json::Value {
    let out = run_command(
        Command::new(fairgpu_bin())
            .args(["status", "--json", "--config"])
            .arg(config),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "fairgpu status --json failed");
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Polls an eventfd until it counts something.
fn wait_signalled(fd: &fairgpu_qemu::EventFd, what: &str) -> u64 {
    wait_until(what, Duration::from_secs(20), || {
        fd.take().expect("reading an eventfd")
    })
}

#[test]
fn a_peer_gets_the_memory_rings_the_host_and_is_woken() {
    use fairgpu_protocol::layout::{Owner, CH_GUEST_SLEEPING, CH_OWNER};
    use fairgpu_protocol::Opcode;
    use std::os::fd::AsRawFd;
    use std::sync::atomic::Ordering;

    let setup = Setup::start("qemu_daemon-peer", |_| "device = \"doorbell\"".into());
    // Connect as QEMU's ivshmem-doorbell device does.
    let socket = setup.dir.join("vm1.ivshmem.sock");
    let peer = fairgpu_qemu::client::Client::connect(&socket, Duration::from_secs(10))
        .expect("connecting to the daemon's ivshmem server");
    let fds = peer.read_setup(2).expect("the server's setup");
    let me = peer.id();
    let q = setup.wait_qemu("the peer", |q| q.peers == [me]);
    assert_eq!(q.connects, 1);

    // The memory is the region: a guest claims a channel and calls.
    let path = PathBuf::from(format!(
        "/proc/self/fd/{}",
        peer.shared_memory().as_raw_fd()
    ));
    let region = fairgpu_frontend::GuestRegion::open(&path).expect("the region in the memory");
    assert_eq!(region.layout().channels(), 2);
    let mut ch = fairgpu_frontend::Channel::claim(region.clone(), wait_config())
        .expect("claiming a channel");
    let r = ch.call(Opcode::Nop, [7, 0, 0, 0, 0]).expect("a no-op");
    assert_eq!(r.vals[0], 7);

    // A guest that sleeps is woken by the worker through the daemon: the
    // worker's wake after serving becomes this peer's vector 1.
    let offs = region.layout().channel(ch.index()).unwrap();
    let sleeping = region
        .view()
        .atomic_u32(offs.at(CH_GUEST_SLEEPING))
        .unwrap();
    let _ = fds[&me][1].take();
    sleeping.store(1, Ordering::SeqCst);
    let r = ch.call(Opcode::Nop, [8, 0, 0, 0, 0]).expect("a no-op");
    assert_eq!(r.vals[0], 8);
    assert!(wait_signalled(&fds[&me][1], "the wake interrupt") >= 1);
    assert_eq!(fds[&me][0].take().unwrap(), None, "only the wake vector");
    sleeping.store(0, Ordering::SeqCst);
    setup.wait_qemu("the interrupt counted", |q| q.interrupts >= 1);

    // The guest rings the host's doorbell (QEMU signals the host's eventfd
    // for a Doorbell write of (0 << 16) | 0).
    fds[&fairgpu_qemu::HOST_PEER_ID][0].signal().unwrap();
    setup.wait_qemu("the doorbell counted", |q| q.doorbells >= 1);

    // QEMU goes away with the channel still claimed: it is released.
    let owner = region.view().atomic_u64(offs.at(CH_OWNER)).unwrap();
    assert!(!Owner::from_word(owner.load(Ordering::SeqCst)).is_free());
    drop(fds);
    drop(peer);
    let q = setup.wait_qemu("the peer gone", |q| {
        q.peers.is_empty() && q.disconnects == 1 && q.channels_released == 1
    });
    assert_eq!(q.connects, 1);
    let released = Owner::from_word(owner.load(Ordering::SeqCst));
    assert!(released.is_free());
    // In a VM this channel's process went with QEMU; here it lingers. Its
    // claim is not its own any more: a call fails instead of waiting for
    // an answer that never comes, and dropping it neither waits nor frees
    // the channel again.
    match ch.call(Opcode::Nop, [9, 0, 0, 0, 0]) {
        Err(fairgpu_frontend::CallError::ChannelFailed { reason, .. }) => {
            assert!(reason.contains("released"), "{reason}")
        }
        other => panic!("a call on the released claim returned {other:?}"),
    }
    drop(ch);
    assert_eq!(Owner::from_word(owner.load(Ordering::SeqCst)), released);
    let status = status_json(&setup.config);
    assert_eq!(
        status["vms"][0]["qemu"]["channels_released"], 1,
        "{status:#}"
    );
}

fn assert_pinged(out: &str) {
    assert!(
        out.lines()
            .any(|l| l.contains("round trips") && l.contains(VERIFIED)),
        "the guest's ping did not finish:\n{out}"
    );
}

#[test]
fn a_doorbell_vm_served_by_the_daemon_pings_and_boots_again() {
    let Some(img) = image() else { return };
    let _turn = take_turn();
    let setup = Setup::start("qemu_daemon-doorbell", |_| "device = \"doorbell\"".into());
    let args = setup.qemu_args().join(" ");
    assert!(
        args.contains("-device ivshmem-doorbell,chardev=fairgpu-vm1,vectors=2")
            && args.contains(&format!(
                "-chardev socket,id=fairgpu-vm1,path={}",
                setup.dir.join("vm1.ivshmem.sock").display()
            )),
        "{args}"
    );
    let before = setup.qemu();
    assert!(before.memfd && before.peers.is_empty(), "{before:?}");

    // First boot: a ping to the end, then a second ping that still holds
    // its channel when the VM powers off.
    let guest = setup.boot(
        "first",
        &img,
        "#!/bin/sh\nunset FAIRGPU_REGION\nfairgpu ping --count 300 || exit 1\n\
         fairgpu ping --count 100000000 >/dev/null 2>&1 &\nsleep 3\n",
    );
    let connected = setup.wait_qemu("QEMU connected", |q| q.peers.len() == 1);
    assert_eq!(connected.connects, 1);
    let json = status_json(&setup.config);
    let peers = &json["vms"][0]["qemu"]["peers"];
    assert_eq!(peers.as_array().map(Vec::len), Some(1), "{json:#}");
    let done = guest.finish(GUEST_TIMEOUT);
    eprintln!("first boot took {:.1?}:\n{}", done.took, done.output);
    done.assert_run_succeeded();
    assert_pinged(&done.output);

    // QEMU is gone: the daemon noticed, released the channel the guest
    // left claimed, and counted the guest's doorbell rings.
    let gone = setup.wait_qemu("QEMU gone and its channel released", |q| {
        q.peers.is_empty() && q.disconnects == 1 && q.channels_released >= 1
    });
    eprintln!("after the first boot: {gone:?}");
    assert!(
        gone.doorbells > 0,
        "the guest never rang the host: {gone:?}"
    );
    // The worker saw the release (it publishes its counts every tick).
    let s = wait_for_status(&setup.daemon, "the released channel free", |s| {
        vm(s, "vm1").channels_used == 0
    });
    assert_eq!(
        vm(&s, "vm1").restarts,
        0,
        "a VM leaving is not a worker crash"
    );

    // The VM boots again against the same daemon and socket.
    let guest = setup.boot(
        "second",
        &img,
        "#!/bin/sh\nunset FAIRGPU_REGION\nfairgpu ping --count 300\n",
    );
    let done = guest.finish(GUEST_TIMEOUT);
    eprintln!("second boot took {:.1?}:\n{}", done.took, done.output);
    done.assert_run_succeeded();
    assert_pinged(&done.output);
    let after = setup.wait_qemu("the second QEMU gone", |q| {
        q.peers.is_empty() && q.connects == 2 && q.disconnects == 2
    });
    assert!(after.doorbells > gone.doorbells, "{after:?}");
}

#[test]
fn the_daemon_reads_the_vcpu_threads_through_qmp() {
    let Some(img) = image() else { return };
    let _turn = take_turn();
    let setup = Setup::start("qemu_daemon-qmp", |dir| {
        format!(
            "device = \"doorbell\"\nqmp = {:?}\nnudge = true",
            dir.join("vm1.qmp").display().to_string()
        )
    });
    let qmp = setup.dir.join("vm1.qmp");
    let args = setup.qemu_args().join(" ");
    assert!(
        args.contains(&format!("-qmp unix:{},server=on,wait=off", qmp.display())),
        "{args}"
    );
    let q = setup.qemu();
    assert!(!q.qmp_connected && q.vcpu_threads.is_empty(), "{q:?}");

    let guest = setup.boot(
        "qmp",
        &img,
        "#!/bin/sh\nunset FAIRGPU_REGION\nfairgpu ping --count 2000\nsleep 2\n",
    );
    let q = setup.wait_qemu("the vCPU threads through QMP", |q| {
        q.qmp_connected && !q.vcpu_threads.is_empty()
    });
    // Every id is a thread of the QEMU process.
    for tid in &q.vcpu_threads {
        let status = std::fs::read_to_string(format!("/proc/{tid}/status"))
            .unwrap_or_else(|e| panic!("vCPU thread {tid}: {e}"));
        let tgid = status
            .lines()
            .find_map(|l| l.strip_prefix("Tgid:"))
            .map(str::trim)
            .expect("a Tgid line");
        let comm = std::fs::read_to_string(format!("/proc/{tgid}/comm")).unwrap_or_default();
        assert!(
            comm.starts_with("qemu-system"),
            "thread {tid} belongs to {comm:?}"
        );
    }
    let done = guest.finish(GUEST_TIMEOUT);
    eprintln!("guest took {:.1?}:\n{}", done.took, done.output);
    done.assert_run_succeeded();
    assert_pinged(&done.output);
    // QEMU's exit is noticed: the cached ids are dropped.
    let q = setup.wait_qemu("QMP lost", |q| {
        !q.qmp_connected && q.vcpu_threads.is_empty()
    });
    eprintln!("after the guest: {q:?}");
}

/// From `fairgpu-guest info`'s latency line ("...; msix wake path, B
/// blocks, W woken by interrupt, N naps, I interrupts received"): the wake
/// path and the number before `what`.
fn latency_field(out: &str, what: &str) -> (String, u64) {
    let line = out
        .lines()
        .find(|l| l.starts_with("latency: ") && l.contains("round trips"))
        .unwrap_or_else(|| panic!("no latency line in the guest's output:\n{out}"));
    let path = line
        .split(" wake path")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .unwrap_or_default()
        .to_owned();
    let n = line
        .split(what)
        .next()
        .and_then(|h| {
            h.rsplit(|c: char| !c.is_ascii_digit())
                .find(|w| !w.is_empty())
        })
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no number before {what:?} in {line:?}"));
    (path, n)
}

#[test]
fn latency_field_parses() {
    let line = "x\nlatency: 300 no-op round trips on channel 0: p50 1.0 µs, p99 2.0 µs; \
                msix wake path, 290 blocks, 288 woken by interrupt, 0 naps, 301 interrupts received\n";
    assert_eq!(
        latency_field(line, " interrupts received"),
        ("msix".to_owned(), 301)
    );
    assert_eq!(latency_field(line, " blocks"), ("msix".to_owned(), 290));
}

/// The whole host → guest wake path with the daemon as ivshmem server: a
/// q35 guest with an IOMMU binds the device to vfio-pci and waits on MSI-X
/// vector 1, which the daemon raises through its guest notifier when its
/// worker answers a sleeping guest.
#[test]
fn a_guest_with_an_iommu_is_woken_by_the_daemon_through_msix() {
    let Some(img) = image() else { return };
    if !image_has_vfio_or_skip(&img) {
        return;
    }
    let _turn = take_turn();
    let setup = Setup::start("qemu_daemon-msix", |_| {
        "device = \"doorbell\"\nvectors = 2".into()
    });
    let args = setup.qemu_args().join(" ");
    assert!(
        args.contains("-device ivshmem-doorbell,chardev=fairgpu-vm1,vectors=2"),
        "{args}"
    );
    // A zero spin budget: every wait of info's round trips blocks and needs
    // the daemon's interrupt.
    let guest = setup.boot_on(
        "msix",
        &img,
        &Machine::q35_with_iommu(),
        &[guest_tool()],
        &format!(
            "#!/bin/sh\nunset FAIRGPU_REGION\n\
             FAIRGPU_SPIN_US=0 fairgpu-guest info --count {INFO_CALLS} || exit 1\n\
             fairgpu ping --count 200 || exit 1\n"
        ),
    );
    let done = guest.finish(GUEST_TIMEOUT);
    eprintln!("guest msix took {:.1?}:\n{}", done.took, done.output);
    done.assert_run_succeeded();
    let out = &done.output;
    assert!(
        out.lines().any(|l| l.starts_with("wake path: msix (auto)")),
        "the guest did not choose the MSI-X path:\n{out}"
    );
    let (path, received) = latency_field(out, " interrupts received");
    assert_eq!(path, "msix", "the channel left the MSI-X path:\n{out}");
    let (_, woken) = latency_field(out, " woken by interrupt");
    assert!(
        received > 0 && woken > 0,
        "no wait of the guest was ended by an interrupt:\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with(&format!("latency: {INFO_CALLS} no-op round trips"))),
        "the guest's round trips did not all complete:\n{out}"
    );
    assert_pinged(out);

    // The daemon counted the vector-1 interrupts it raised for this VM.
    let q = setup.wait_qemu("QEMU gone", |q| q.peers.is_empty() && q.disconnects == 1);
    eprintln!("after the guest: {q:?}");
    let json = status_json(&setup.config);
    let interrupts = json["vms"][0]["qemu"]["interrupts"]
        .as_u64()
        .unwrap_or_else(|| panic!("no qemu.interrupts in the status:\n{json:#}"));
    assert!(
        interrupts > 0,
        "the daemon never interrupted the guest:\n{json:#}"
    );
    assert!(q.doorbells > 0, "the guest never rang the host: {q:?}");
}
