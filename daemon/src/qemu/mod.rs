//! The daemon's side of VMs whose guests run in QEMU (`guest = "qemu"`).
//!
//! - [`doorbell`]: for an `ivshmem-doorbell` device the daemon is the VM's
//!   ivshmem server. It creates the region in a sealed memfd (or serves the
//!   region file), hands QEMU the memory and one eventfd per (peer,
//!   vector), turns the guest's doorbell (vector [`VECTOR_DOORBELL`]) into
//!   the futex wake of the worker's serving loop, and raises the guest's
//!   vector [`VECTOR_WAKE`] when the host wakes a sleeping guest. The
//!   worker gets the memory and a relay eventfd as inherited descriptors
//!   ([`WorkerFds`]): the guests' own eventfds change whenever QEMU
//!   reconnects, the relay does not.
//! - [`coord`]: the CPU coordinator of GPU-centric co-scheduling for QEMU
//!   VMs (interrupt the VM's sleeping guests; optionally nudge its vCPU
//!   threads, whose ids come from QMP).
//!
//! Invariants: nothing a VM does (connecting, hanging up, misbehaving on
//! the socket, a QMP server that stalls) stops the daemon or reaches
//! another VM; QMP I/O happens on its own thread, never the scheduler's.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::bail;
use serde::{Deserialize, Serialize};

use fairgpu_config::{IvshmemDevice, VmConfig};
pub use fairgpu_config::{VECTOR_DOORBELL, VECTOR_WAKE};

pub mod coord;
pub mod doorbell;

/// What the daemon knows of one QEMU VM: written by its ivshmem thread and
/// the QMP thread, read by `fairgpu status`.
#[derive(Debug, Default)]
pub struct QemuState {
    peers: Mutex<Vec<u16>>,
    connects: AtomicU64,
    disconnects: AtomicU64,
    doorbells: AtomicU64,
    interrupts: AtomicU64,
    released: AtomicU64,
    qmp_connected: AtomicBool,
    vcpu_threads: Mutex<Vec<i64>>,
    nudges: AtomicU64,
}

impl QemuState {
    /// The connected ivshmem peers.
    pub fn peers(&self) -> Vec<u16> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_peers(&self, peers: Vec<u16>) {
        *self.peers.lock().unwrap_or_else(|p| p.into_inner()) = peers;
    }

    /// The vCPU thread ids QMP reported last (empty while not connected).
    pub fn vcpu_threads(&self) -> Vec<i64> {
        self.vcpu_threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_vcpu_threads(&self, tids: Vec<i64>) {
        *self.vcpu_threads.lock().unwrap_or_else(|p| p.into_inner()) = tids;
    }

    /// Counts interrupts raised in the VM's guests.
    fn count_interrupts(&self, n: usize) {
        // Relaxed: monitoring counters, ordered with nothing.
        self.interrupts.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// How many times the vCPU threads were nudged.
    pub fn nudges(&self) -> u64 {
        self.nudges.load(Ordering::Relaxed)
    }

    /// A snapshot for `fairgpu status`.
    pub fn status(&self, vm: &VmConfig) -> Option<QemuStatus> {
        let q = vm.qemu.as_ref()?;
        let (socket, vectors) = match &q.device {
            IvshmemDevice::Doorbell {
                socket, vectors, ..
            } => (Some(socket.clone()), Some(*vectors)),
            IvshmemDevice::Plain => (None, None),
        };
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Some(QemuStatus {
            device: q.device.model().into(),
            socket,
            vectors,
            memfd: vm.region_is_memfd(),
            peers: self.peers(),
            connects: load(&self.connects),
            disconnects: load(&self.disconnects),
            doorbells: load(&self.doorbells),
            interrupts: load(&self.interrupts),
            channels_released: load(&self.released),
            qmp: q.qmp.clone(),
            qmp_connected: self.qmp_connected.load(Ordering::Relaxed),
            vcpu_threads: self.vcpu_threads(),
            nudge: q.nudge,
            nudges: self.nudges(),
        })
    }
}

/// One QEMU VM in `fairgpu status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QemuStatus {
    /// `ivshmem-plain` or `ivshmem-doorbell`.
    pub device: String,
    /// The daemon's ivshmem socket (doorbell).
    pub socket: Option<PathBuf>,
    /// Vectors per peer (doorbell).
    pub vectors: Option<u16>,
    /// The region is a memfd of the daemon's.
    pub memfd: bool,
    /// The ivshmem peers (QEMU processes) connected now.
    pub peers: Vec<u16>,
    /// Connections accepted since the daemon started.
    pub connects: u64,
    /// Peers that left.
    pub disconnects: u64,
    /// Guest → host doorbell rings counted.
    pub doorbells: u64,
    /// Host → guest interrupts raised (per peer).
    pub interrupts: u64,
    /// Channels released because their VM's QEMU went away.
    pub channels_released: u64,
    /// The QMP socket, if configured.
    pub qmp: Option<PathBuf>,
    /// Whether the daemon is connected to it.
    pub qmp_connected: bool,
    /// The vCPU thread ids QMP reported.
    pub vcpu_threads: Vec<i64>,
    /// Whether vCPU threads are nudged.
    pub nudge: bool,
    /// Nudges given.
    pub nudges: u64,
}

impl QemuStatus {
    /// One line for the status table.
    pub fn summary(&self) -> String {
        let mut s = self.device.clone();
        if let Some(socket) = &self.socket {
            s.push_str(&format!(
                " on {}: peers {:?}, {} doorbells, {} interrupts",
                socket.display(),
                self.peers,
                self.doorbells,
                self.interrupts
            ));
        }
        if let Some(qmp) = &self.qmp {
            s.push_str(&format!(
                "; QMP {} {}, vCPU threads {:?}",
                qmp.display(),
                if self.qmp_connected {
                    "connected"
                } else {
                    "not connected"
                },
                self.vcpu_threads
            ));
            if self.nudge {
                s.push_str(&format!(", {} nudges", self.nudges));
            }
        }
        s
    }
}

/// The QEMU device of a configured VM for `fairgpu qemu-args` and
/// `libvirt-xml`; `qmp` overrides the configuration's QMP socket.
pub fn device_spec(vm: &VmConfig, qmp: Option<&Path>) -> anyhow::Result<fairgpu_qemu::VmSpec> {
    let Some(q) = &vm.qemu else {
        bail!(
            "vm {:?} serves local guests; set guest = \"qemu\" in its [[vm]] table so its region is \
             sized and owned for a VM",
            vm.name
        );
    };
    let size = fairgpu_protocol::Layout::new(&vm.region)?.region_size() as u64;
    let device = match &q.device {
        IvshmemDevice::Plain => fairgpu_qemu::Device::Plain {
            mem_path: vm.region_path.clone(),
        },
        IvshmemDevice::Doorbell {
            socket, vectors, ..
        } => fairgpu_qemu::Device::Doorbell {
            socket: socket.clone(),
            vectors: *vectors,
        },
    };
    let spec = fairgpu_qemu::VmSpec::new(&vm.name, fairgpu_qemu::bar_size(size), device)?;
    Ok(match qmp.or(q.qmp.as_deref()) {
        Some(path) => spec.with_qmp(path)?,
        None => spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(ivshmem: &str) -> fairgpu_config::Config {
        fairgpu_config::Config::parse(
            &format!(
                "[daemon]\ncontrol_socket = \"/run/f/control.sock\"\n[[vm]]\nname = \"vm1\"\nmemory = 1\n\
                 region = \"/dev/shm/r1\"\nguest = \"qemu\"\n{ivshmem}\n[[vm]]\nname = \"local\"\nmemory = 1\nregion = \"/dev/shm/r2\"\n"
            ),
            Path::new("test.toml"),
        )
        .unwrap()
    }

    #[test]
    fn device_specs_follow_the_configuration() {
        let c = config("");
        let spec = device_spec(&c.vms[0], None).unwrap();
        assert!(matches!(spec.device(), fairgpu_qemu::Device::Plain { .. }));
        let args = fairgpu_qemu::qemu_args(&spec).join(" ");
        assert!(!args.contains("-qmp"), "{args}");
        let args =
            fairgpu_qemu::qemu_args(&device_spec(&c.vms[0], Some(Path::new("/run/q"))).unwrap())
                .join(" ");
        assert!(
            args.contains("-qmp unix:/run/q,server=on,wait=off"),
            "{args}"
        );

        let c = config("[vm.ivshmem]\ndevice = \"doorbell\"\nvectors = 3\nqmp = \"/run/f/q\"");
        let args = fairgpu_qemu::qemu_args(&device_spec(&c.vms[0], None).unwrap()).join(" ");
        assert_eq!(
            args,
            "-chardev socket,id=fairgpu-vm1,path=/run/f/vm1.ivshmem.sock \
             -device ivshmem-doorbell,chardev=fairgpu-vm1,vectors=3 \
             -qmp unix:/run/f/q,server=on,wait=off"
        );
        let e = device_spec(&c.vms[1], None).unwrap_err().to_string();
        assert!(e.contains("guest = \"qemu\""), "{e}");
    }
}
