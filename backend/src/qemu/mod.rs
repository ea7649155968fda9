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

use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context};
use fairgpu_qemu::EventFd;
use serde::{Deserialize, Serialize};

use crate::config::{IvshmemDevice, VmConfig};
pub use crate::config::{VECTOR_DOORBELL, VECTOR_WAKE};
use crate::host::HostRegion;

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

/// The descriptors a daemon passes to its workers (hidden `fairgpu worker`
/// options): the region's memory for a local VM (its sealed memfd) and a
/// doorbell VM (the memfd or region file), and for a doorbell VM the wake
/// relay.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WorkerFds {
    /// The region's memory, inherited.
    #[arg(long, hide = true)]
    pub region_fd: Option<i32>,
    /// An eventfd, inherited: signalling it makes the daemon raise the
    /// guests' wake vector.
    #[arg(long, hide = true, requires = "region_fd")]
    pub wake_fd: Option<i32>,
}

impl WorkerFds {
    /// The worker's region: the inherited memory of a doorbell VM, whose
    /// sleeping guests are woken through the daemon's relay; the inherited
    /// memfd of a local VM; else (a plain QEMU VM, or a worker started by
    /// hand) the region file.
    pub fn attach(&self, vm: &VmConfig) -> anyhow::Result<HostRegion> {
        let doorbell = vm.doorbell().is_some();
        let (region_fd, wake_fd) = match (self.region_fd, self.wake_fd) {
            (None, None) => {
                if doorbell {
                    bail!("vm {:?} has an ivshmem-doorbell device: the daemon passes --region-fd and --wake-fd", vm.name);
                }
                return HostRegion::attach(&vm.region_path, &vm.region)
                    .with_context(|| format!("attaching to {}", vm.region_path.display()));
            }
            (Some(r), None) if !doorbell => (r, None),
            (Some(_), None) => {
                bail!(
                    "vm {:?} has an ivshmem-doorbell device: --wake-fd is missing",
                    vm.name
                )
            }
            (Some(r), Some(w)) if r != w => (r, Some(w)),
            _ => bail!("--region-fd and --wake-fd name two different descriptors"),
        };
        if !doorbell && wake_fd.is_some() {
            bail!(
                "vm {:?} has no ivshmem-doorbell device, but --wake-fd was given",
                vm.name
            );
        }
        // Checked before they are taken: nothing else may be closed by
        // mistake if the numbers are wrong.
        if let Some(w) = wake_fd {
            check_fd_kind(w, "anon_inode:[eventfd]")?;
        }
        let link = std::fs::read_link(format!("/proc/self/fd/{region_fd}"))
            .with_context(|| format!("--region-fd {region_fd} is not open"))?;
        if link
            .as_os_str()
            .to_string_lossy()
            .starts_with("anon_inode:")
        {
            bail!("--region-fd {region_fd} is not a memory file");
        }
        // SAFETY: the daemon passed these descriptors to this process for
        // the worker alone and named them on its command line; nothing else
        // here knows their numbers, and each is taken once, here.
        let region = unsafe { fairgpu_qemu::os::take_inherited(region_fd) }
            .with_context(|| format!("taking --region-fd {region_fd}"))?;
        let wake = match wake_fd {
            // SAFETY: as above.
            Some(w) => Some(EventFd::from_owned(
                unsafe { fairgpu_qemu::os::take_inherited(w) }
                    .with_context(|| format!("taking --wake-fd {w}"))?,
            )),
            None => None,
        };
        // Kept open for the worker's life, so the path stays valid in logs.
        let raw = region.into_raw_fd();
        let path = PathBuf::from(format!("/proc/self/fd/{raw}"));
        let region = HostRegion::attach(&path, &vm.region)
            .with_context(|| format!("mapping the region passed as descriptor {raw}"))?;
        tracing::debug!(
            region_fd = raw,
            ?wake_fd,
            "serving the daemon's region memory"
        );
        Ok(match wake {
            None => region,
            Some(wake) => region.with_guest_notifier(Arc::new(move |_channel| {
                // A full counter still means "signalled"; an error cannot
                // happen on a live eventfd and would only cost this wake.
                let _ = wake.signal();
            })),
        })
    }
}

/// Refuses descriptor `fd` unless its /proc link is `want`.
fn check_fd_kind(fd: i32, want: &str) -> anyhow::Result<()> {
    let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .with_context(|| format!("descriptor {fd} is not open"))?;
    if link != Path::new(want) {
        bail!("descriptor {fd} is {}, not {want}", link.display());
    }
    Ok(())
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
    use std::os::fd::AsRawFd;

    fn config(ivshmem: &str) -> crate::config::Config {
        crate::config::Config::parse(
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

    #[test]
    fn a_worker_refuses_descriptors_that_are_not_what_the_daemon_passes() {
        let doorbell = config("[vm.ivshmem]\ndevice = \"doorbell\"");
        let vm = &doorbell.vms[0];
        let fds = |r, w| WorkerFds {
            region_fd: r,
            wake_fd: w,
        };
        let e = fds(None, None).attach(vm).unwrap_err().to_string();
        assert!(e.contains("--region-fd"), "{e}");
        let e = fds(Some(5), Some(5)).attach(vm).unwrap_err().to_string();
        assert!(e.contains("two different"), "{e}");
        // A regular file is no eventfd: refused, and left open.
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let memory = fairgpu_qemu::SharedMemory::memfd("t", 1 << 20).unwrap();
        use std::os::fd::AsFd;
        let (m, f) = (memory.as_fd().as_raw_fd(), file.as_raw_fd());
        let e = format!("{:#}", fds(Some(m), Some(f)).attach(vm).unwrap_err());
        assert!(e.contains("not anon_inode:[eventfd]"), "{e}");
        assert!(file.metadata().is_ok(), "the descriptor is still open");
        // Descriptors for a VM without a doorbell device are refused too.
        let plain = config("");
        let wake = EventFd::new().unwrap();
        let e = fds(Some(m), Some(wake.as_fd().as_raw_fd()))
            .attach(&plain.vms[0])
            .unwrap_err()
            .to_string();
        assert!(e.contains("no ivshmem-doorbell device"), "{e}");
    }
}
