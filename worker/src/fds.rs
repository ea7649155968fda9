//! The descriptors a daemon passes to its worker (hidden `fairgpu
//! worker` options) and how the worker takes them: the region's memory
//! (a local VM's sealed memfd, a doorbell VM's memfd or region file) and a
//! doorbell VM's wake relay.

use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use fairgpu_config::VmConfig;
use fairgpu_qemu::EventFd;

use crate::host::HostRegion;

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

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
