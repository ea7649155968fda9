//! The daemon as the ivshmem server of a VM with an `ivshmem-doorbell`
//! device.
//!
//! Per VM: the region (a sealed memfd of the BAR size, or the region file
//! grown to it), an [`IvshmemServer`] on the VM's socket (one peer at a
//! time: one QEMU per VM) driven by a thread of its own, the host's
//! doorbell turned into [`HostWaker::wake`], and a relay eventfd the worker
//! signals to wake sleeping guests, which the server forwards as
//! [`VECTOR_WAKE`] to whichever QEMU is connected.
//!
//! A QEMU that disconnects (the VM stopped or restarts) took its guest
//! processes with it: once no peer is left the daemon releases every
//! channel they had claimed ([`RegionBells::release_claims`]), as the
//! guests would have, so the worker frees their state and the VM's next
//! boot finds free channels. Nothing a peer does ends the thread; only the
//! daemon's shutdown does, after the workers stopped (their last wakes
//! still reach the guests), and then the socket file is removed.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use fairgpu_qemu::{Event, EventFd, HostWaker, IvshmemServer, ServerConfig, SharedMemory};

use super::{QemuState, VECTOR_WAKE};
use fairgpu_config::VmConfig;
use fairgpu_worker::host::{HostRegion, RegionBells};

/// How long one poll of the server waits before re-checking the stop flag.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// How long a send to QEMU may block before it is dropped.
const SEND_TIMEOUT: Duration = Duration::from_secs(1);
/// Pause after the server's own poll failed, so a lasting failure does not
/// spin.
const ERROR_PAUSE: Duration = Duration::from_secs(1);

/// A VM's ivshmem server, running.
#[derive(Debug)]
pub struct Doorbell {
    vm: String,
    memory: OwnedFd,
    relay: Arc<EventFd>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Doorbell {
    /// Creates `vm`'s region and starts its ivshmem server. Returns the
    /// daemon's mapping of the region, whose sleeping guests are woken
    /// through the VM's wake vector.
    pub fn start(vm: &VmConfig, state: Arc<QemuState>) -> anyhow::Result<(HostRegion, Doorbell)> {
        let (socket, vectors) = vm
            .doorbell()
            .context("the VM has no ivshmem-doorbell device")?;
        let size = fairgpu_protocol::Layout::new(&vm.region)?.region_size() as u64;
        let (region, shm) = if vm.region_is_memfd() {
            let shm = SharedMemory::memfd(
                &format!("fairgpu-{}", vm.name),
                fairgpu_qemu::bar_size(size),
            )
            .context("creating the region's memfd")?;
            let region = HostRegion::format(&shm.proc_path(), &vm.region)
                .context("writing the region into its memfd")?;
            (region, shm)
        } else {
            let path = &vm.region_path;
            if path.exists() {
                tracing::warn!(vm = %vm.name, region = %path.display(), "replacing an existing file at the region path");
            }
            let region = HostRegion::create(path, &vm.region).context("creating the region")?;
            fairgpu_qemu::grow_to_bar_size(path).context("sizing the region for ivshmem")?;
            fairgpu_config::perms::apply(path, fairgpu_config::perms::Kind::File, &vm.access)
                .context("giving the region its access")?;
            let shm = SharedMemory::open(path).context("opening the region for QEMU")?;
            (region, shm)
        };
        let memory = shm
            .as_fd()
            .try_clone_to_owned()
            .context("duplicating the region's descriptor for the workers")?;
        let waker = HostWaker::open(&shm.proc_path()).context("mapping the region's doorbell")?;
        if let Some(dir) = socket.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let cfg = ServerConfig {
            name: vm.name.clone(),
            vectors,
            max_peers: 1,
            send_timeout: SEND_TIMEOUT,
        };
        // Like the region: the VM's access (by default the daemon's user
        // alone; QEMU's user is given the VM's group), set before the
        // socket listens, so no one else can connect in between.
        let mut server = IvshmemServer::bind_with(socket, shm, cfg, |path| {
            fairgpu_config::perms::bind_listener(path, &vm.access).map_err(std::io::Error::other)
        })
        .with_context(|| format!("starting the ivshmem server on {}", socket.display()))?;
        let relay = Arc::new(EventFd::new().context("creating the wake relay eventfd")?);
        server.forward(relay.clone(), VECTOR_WAKE)?;
        let irq = server.interrupter();
        let notify_state = state.clone();
        let region = region.with_guest_notifier(Arc::new(move |_channel| {
            notify_state.count_interrupts(irq.interrupt_all(VECTOR_WAKE));
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let serving = Serving {
            vm: vm.name.clone(),
            server,
            waker,
            bells: region.bells(),
            state,
        };
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(format!("fairgpu-ivshmem-{}", vm.name))
                .spawn(move || serving.run(&stop))
                .context("starting the ivshmem server thread")?
        };
        tracing::info!(
            vm = %vm.name,
            socket = %socket.display(),
            vectors,
            memfd = vm.region_is_memfd(),
            "ivshmem server started; give QEMU `fairgpu qemu-args {}`",
            vm.name
        );
        Ok((
            region,
            Doorbell {
                vm: vm.name.clone(),
                memory,
                relay,
                stop,
                thread: Some(thread),
            },
        ))
    }

    /// The descriptors a worker inherits: the region's memory and the wake
    /// relay, in that order ([`super::WorkerFds`]).
    pub fn worker_fds(&self) -> [BorrowedFd<'_>; 2] {
        [self.memory.as_fd(), self.relay.as_fd()]
    }

    /// Stops the server thread; the socket file is removed.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!(vm = %self.vm, "the ivshmem server thread panicked");
            }
        }
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The server thread's state.
struct Serving {
    vm: String,
    server: IvshmemServer,
    waker: HostWaker,
    bells: RegionBells,
    state: Arc<QemuState>,
}

impl Serving {
    fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::Relaxed) {
            match self.server.poll(POLL_SLICE) {
                Ok(events) => {
                    for e in events {
                        self.handle(e);
                    }
                }
                Err(e) => {
                    tracing::error!(vm = %self.vm, error = %e, "ivshmem server poll failed; retrying");
                    std::thread::sleep(ERROR_PAUSE);
                }
            }
        }
    }

    fn handle(&mut self, e: Event) {
        // Relaxed: monitoring counters, ordered with nothing.
        let s = &self.state;
        match e {
            Event::Doorbell { count, .. } => {
                self.waker.wake();
                s.doorbells.fetch_add(count, Ordering::Relaxed);
            }
            Event::Forwarded { peers, .. } => s.count_interrupts(peers),
            Event::Connected { peer } => {
                s.connects.fetch_add(1, Ordering::Relaxed);
                s.set_peers(self.server.peers());
                // A fresh QEMU: its guest has not run yet, so any claim
                // still in the region is a leftover of an earlier one.
                let freed = self.release_if_alone();
                tracing::info!(vm = %self.vm, peer, stale_channels_released = freed, "QEMU connected to the ivshmem server");
            }
            Event::Disconnected { peer, reason } => {
                s.disconnects.fetch_add(1, Ordering::Relaxed);
                s.set_peers(self.server.peers());
                let freed = self.release_if_alone();
                tracing::warn!(
                    vm = %self.vm,
                    peer,
                    %reason,
                    channels_released = freed,
                    "QEMU left the ivshmem server (VM stopped or restarting); its guests' channels were released"
                );
            }
            Event::Refused { reason } => {
                tracing::warn!(vm = %self.vm, %reason, "ivshmem connection refused");
            }
        }
    }

    /// Releases every claim once no QEMU is connected (or only the one that
    /// just arrived).
    fn release_if_alone(&self) -> u32 {
        if self.server.peers().len() > 1 {
            return 0;
        }
        let freed = self.bells.release_claims();
        self.state
            .released
            .fetch_add(freed.into(), Ordering::Relaxed);
        freed
    }
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving").field("vm", &self.vm).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::path::Path;

    use super::*;

    /// A doorbell VM (region in a memfd) whose ivshmem socket is at
    /// `socket`, with the extra `[[vm]]` lines `access`.
    fn doorbell_vm(socket: &Path, access: &str) -> VmConfig {
        let text = format!(
            "[daemon]\ncontrol_socket = \"/run/f/control.sock\"\n[[vm]]\nname = \"vm1\"\n\
             memory = 1\nguest = \"qemu\"\n{access}\n[vm.ivshmem]\ndevice = \"doorbell\"\n\
             socket = {:?}\n",
            socket.display().to_string()
        );
        let cfg = fairgpu_config::Config::parse(&text, Path::new("test.toml")).unwrap();
        cfg.vms.into_iter().next().unwrap()
    }

    /// The ivshmem socket is QEMU's way into the VM's memory: it gets the
    /// VM's access (the daemon's user alone by default, the VM's group
    /// with `group`), set before it listens, like a region socket.
    #[test]
    fn a_doorbell_vms_ivshmem_socket_has_the_vms_access() {
        let dir = std::env::temp_dir().join(format!("fairgpu-doorbell-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gid = std::fs::metadata(&dir).unwrap().gid();
        for (access, mode) in [
            (String::new(), 0o600),
            (format!("group = \"{gid}\"\nmode = \"0660\""), 0o660),
        ] {
            let socket = dir.join("vm1.ivshmem.sock");
            let vm = doorbell_vm(&socket, &access);
            let (_region, doorbell) = Doorbell::start(&vm, Arc::default()).unwrap();
            let meta = std::fs::metadata(&socket).unwrap();
            assert_eq!(meta.permissions().mode() & 0o7777, mode, "{access:?}");
            assert_eq!(meta.gid(), gid);
            drop(doorbell);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
