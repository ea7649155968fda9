//! The crate against a real QEMU (`qemu-system-x86_64`, TCG, paused with
//! `-S`: nothing boots). Skipped when QEMU is not installed, unless
//! `FAIRGPU_REQUIRE_QEMU` is set (scripts/test.sh sets it).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairgpu_qemu::{
    qemu_args, Device, Event, IvshmemServer, Qmp, ServerConfig, SharedMemory, VmSpec,
};
use serde_json::Value;

const QEMU: &str = "qemu-system-x86_64";
const WAIT: Duration = Duration::from_secs(20);

fn qemu_available() -> bool {
    let found = Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var_os("FAIRGPU_REQUIRE_QEMU").is_none(),
            "{QEMU} not found and FAIRGPU_REQUIRE_QEMU is set"
        );
        eprintln!("skipping: {QEMU} not found");
    }
    found
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "fairgpu-qemu-{test}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A paused QEMU with a QMP socket, killed on drop.
struct Vm {
    child: Child,
    qmp: Qmp,
}

impl Vm {
    fn start(dir: &Path, extra: &[String]) -> Vm {
        let qmp_path = dir.join("qmp.sock");
        let child = Command::new(QEMU)
            .args([
                "-accel",
                "tcg",
                "-machine",
                "pc",
                "-nodefaults",
                "-display",
                "none",
                "-S",
            ])
            .args([
                "-m",
                "64",
                "-smp",
                "2",
                "-name",
                "fairgpu-test,debug-threads=on",
            ])
            .arg("-qmp")
            .arg(format!("unix:{},server=on,wait=off", qmp_path.display()))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning qemu");
        let mut vm_child = child;
        let qmp = match Qmp::connect(&qmp_path, WAIT) {
            Ok(q) => q,
            Err(e) => {
                let _ = vm_child.kill();
                let out = vm_child.wait_with_output().unwrap();
                panic!(
                    "QMP connect: {e}; qemu stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        };
        Vm {
            child: vm_child,
            qmp,
        }
    }

    /// The ivshmem device (1af4:1110) from `query-pci`.
    fn ivshmem_device(&mut self) -> Value {
        let buses = self.qmp.execute("query-pci", None).unwrap();
        buses
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| b["devices"].as_array().unwrap().iter())
            .find(|d| d["id"]["vendor"] == 0x1af4 && d["id"]["device"] == 0x1110)
            .cloned()
            .expect("an ivshmem device on the PCI bus")
    }

    fn quit(mut self) {
        self.qmp.quit().unwrap();
        let deadline = Instant::now() + WAIT;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "qemu did not quit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn bar_size(dev: &Value, bar: u64) -> u64 {
    dev["regions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["bar"] == bar)
        .and_then(|r| r["size"].as_u64())
        .expect("the BAR is listed")
}

#[test]
fn qmp_lists_vcpu_threads() {
    if !qemu_available() {
        return;
    }
    let dir = Scratch::new("qmp");
    let mut vm = Vm::start(&dir.0, &[]);
    assert!(vm.qmp.greeting()["QMP"]["version"]["qemu"]["major"].is_u64());
    let cpus = vm.qmp.vcpu_threads().unwrap();
    assert_eq!(cpus.len(), 2, "{cpus:?}");
    assert_eq!(cpus[0].cpu_index, 0);
    assert_eq!(cpus[1].cpu_index, 1);
    assert!(cpus.iter().all(|c| c.thread_id > 0), "{cpus:?}");
    match vm.qmp.execute("no-such-command", None) {
        Err(fairgpu_qemu::QmpError::Command { class, .. }) => assert_eq!(class, "CommandNotFound"),
        other => panic!("{other:?}"),
    }
    vm.quit();
}

#[test]
fn plain_device_from_generated_args() {
    if !qemu_available() {
        return;
    }
    let dir = Scratch::new("plain");
    let region = dir.0.join("region");
    std::fs::write(&region, vec![0u8; 100_000]).unwrap();
    let size = fairgpu_qemu::grow_to_bar_size(&region).unwrap();
    assert_eq!(size, 128 << 10);
    let spec = VmSpec::new(
        "plain",
        size,
        Device::Plain {
            mem_path: region.clone(),
        },
    )
    .unwrap();
    let mut vm = Vm::start(&dir.0, &qemu_args(&spec));
    let dev = vm.ivshmem_device();
    assert_eq!(bar_size(&dev, 2), size);
    vm.quit();
}

#[test]
fn doorbell_device_joins_the_server() {
    if !qemu_available() {
        return;
    }
    let dir = Scratch::new("doorbell");
    let sock = dir.0.join("ivshmem.sock");
    let shm = SharedMemory::memfd("fairgpu-qemu-test", 1 << 20).unwrap();
    let cfg = ServerConfig {
        name: "qemu-test".into(),
        vectors: 2,
        ..ServerConfig::default()
    };
    let mut server = IvshmemServer::bind(&sock, shm, cfg).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, events) = channel();
    let s = stop.clone();
    let thread = std::thread::spawn(move || {
        server
            .run(&s, |e| {
                let _ = tx.send(e.clone());
            })
            .unwrap();
    });
    let spec = VmSpec::new(
        "db",
        1 << 20,
        Device::Doorbell {
            socket: sock.clone(),
            vectors: 2,
        },
    )
    .unwrap();
    let mut vm = Vm::start(&dir.0, &qemu_args(&spec));
    assert_eq!(
        events.recv_timeout(WAIT).unwrap(),
        Event::Connected { peer: 1 }
    );
    let dev = vm.ivshmem_device();
    // BAR0 registers, BAR1 MSI-X, BAR2 the memfd.
    assert_eq!(bar_size(&dev, 0), 256);
    assert_eq!(bar_size(&dev, 2), 1 << 20);
    vm.quit();
    match events.recv_timeout(WAIT).unwrap() {
        Event::Disconnected { peer: 1, .. } => {}
        other => panic!("{other:?}"),
    }
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap();
}
