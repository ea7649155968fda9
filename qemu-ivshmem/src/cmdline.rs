//! QEMU command-line arguments and libvirt `<shmem>` elements that give a VM
//! its fairgpu region. Pure functions of a validated [`VmSpec`].
//!
//! Two device variants:
//! - `ivshmem-plain`: the region is a file (e.g. in /dev/shm) mapped through
//!   `memory-backend-file,share=on`; no interrupts. The guest polls with a
//!   bounded sleep backoff when it waits.
//! - `ivshmem-doorbell`: QEMU connects to an ivshmem server (this crate's
//!   [`crate::IvshmemServer`]) over a unix socket and receives the memory
//!   and eventfds from it; the guest can ring the host's doorbell and the
//!   host can raise the guest's MSI-X vectors.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::server::MAX_VECTORS;
use crate::shm::{MAX_SIZE, MIN_SIZE};

/// Longest VM name accepted.
pub const MAX_NAME: usize = 64;
/// Longest unix socket path (`sun_path` holds 108 bytes with the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// Which ivshmem device a VM gets, and where its memory comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Device {
    /// `ivshmem-plain` over `memory-backend-file` on this file.
    Plain {
        /// The region file, e.g. /dev/shm/fairgpu-vm1.
        mem_path: PathBuf,
    },
    /// `ivshmem-doorbell` connected to the ivshmem server on this socket.
    Doorbell {
        /// The server's socket.
        socket: PathBuf,
        /// MSI-X vectors (the server's `vectors`).
        vectors: u16,
    },
}

/// A VM's fairgpu device, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmSpec {
    name: String,
    size: u64,
    device: Device,
    qmp: Option<PathBuf>,
}

/// Why a [`VmSpec`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The name is empty, too long, or has characters outside `[A-Za-z0-9_.-]`.
    #[error("VM name {0:?} must be 1..={MAX_NAME} characters of [A-Za-z0-9_.-], starting with a letter or digit")]
    BadName(String),
    /// The size is not a power of two in range (a PCI BAR's size must be).
    #[error("region size {0} is not a power of two in {MIN_SIZE}..={MAX_SIZE}")]
    BadSize(u64),
    /// Vectors out of range.
    #[error("vectors = {0} is outside 1..={MAX_VECTORS}")]
    BadVectors(u16),
    /// A path QEMU or libvirt cannot take.
    #[error("path {path:?}: {why}")]
    BadPath {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
}

impl VmSpec {
    /// Validates a VM's device. `size` is the BAR size: the region size
    /// rounded up to a power of two ([`crate::bar_size`]).
    pub fn new(name: &str, size: u64, device: Device) -> Result<VmSpec, SpecError> {
        let name_ok = !name.is_empty()
            && name.len() <= MAX_NAME
            && name.starts_with(|c: char| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !name_ok {
            return Err(SpecError::BadName(name.to_owned()));
        }
        if !(MIN_SIZE..=MAX_SIZE).contains(&size) || !size.is_power_of_two() {
            return Err(SpecError::BadSize(size));
        }
        match &device {
            Device::Plain { mem_path } => check_path(mem_path, usize::MAX)?,
            Device::Doorbell { socket, vectors } => {
                check_path(socket, MAX_SOCKET_PATH)?;
                if *vectors == 0 || *vectors > MAX_VECTORS {
                    return Err(SpecError::BadVectors(*vectors));
                }
            }
        }
        Ok(VmSpec {
            name: name.to_owned(),
            size,
            device,
            qmp: None,
        })
    }

    /// Also asks for a QMP socket (`-qmp unix:PATH,server=on,wait=off`),
    /// through which the daemon reads the vCPU thread ids.
    pub fn with_qmp(mut self, socket: &Path) -> Result<VmSpec, SpecError> {
        check_path(socket, MAX_SOCKET_PATH)?;
        self.qmp = Some(socket.to_owned());
        Ok(self)
    }

    /// The VM name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The BAR size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The QEMU object/chardev id of this VM's fairgpu device.
    pub fn id(&self) -> String {
        format!("fairgpu-{}", self.name)
    }
}

fn check_path(path: &Path, max_len: usize) -> Result<(), SpecError> {
    let bad = |why| {
        Err(SpecError::BadPath {
            path: path.to_owned(),
            why,
        })
    };
    let Some(s) = path.to_str() else {
        return bad("not UTF-8");
    };
    if !path.is_absolute() {
        return bad("not absolute");
    }
    if s.len() > max_len {
        return bad("too long for a unix socket");
    }
    if s.chars().any(char::is_control) {
        return bad("contains control characters");
    }
    Ok(())
}

/// A value inside a QEMU `key=value,...` option: commas are doubled.
fn qemu_value(s: &str) -> String {
    s.replace(',', ",,")
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("VmSpec paths are UTF-8")
}

/// The QEMU arguments that add this VM's fairgpu device (and QMP socket,
/// if asked for), one argument per element.
pub fn qemu_args(spec: &VmSpec) -> Vec<String> {
    let id = spec.id();
    let mut args = Vec::new();
    match &spec.device {
        Device::Plain { mem_path } => {
            args.push("-object".into());
            args.push(format!(
                "memory-backend-file,id={id},share=on,mem-path={},size={}",
                qemu_value(path_str(mem_path)),
                spec.size
            ));
            args.push("-device".into());
            args.push(format!("ivshmem-plain,memdev={id}"));
        }
        Device::Doorbell { socket, vectors } => {
            args.push("-chardev".into());
            args.push(format!(
                "socket,id={id},path={}",
                qemu_value(path_str(socket))
            ));
            args.push("-device".into());
            args.push(format!("ivshmem-doorbell,chardev={id},vectors={vectors}"));
        }
    }
    if let Some(qmp) = &spec.qmp {
        args.push("-qmp".into());
        args.push(format!(
            "unix:{},server=on,wait=off",
            qemu_value(path_str(qmp))
        ));
    }
    args
}

/// Escapes text for an XML attribute or element.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\'' => out.push_str("&apos;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// The libvirt `<shmem>` element for this VM's `<devices>`.
///
/// libvirt maps an `ivshmem-plain` shmem named NAME to `/dev/shm/NAME`, so
/// the element is named after the region file; a region elsewhere gets a
/// comment saying libvirt will not find it there. A doorbell shmem names the
/// server's socket. The QMP socket is not part of `<shmem>` (libvirt owns
/// QMP; ask it with `virsh qemu-monitor-command`).
pub fn libvirt_xml(spec: &VmSpec) -> String {
    let size = if spec.size.is_multiple_of(1 << 20) {
        format!("<size unit='M'>{}</size>", spec.size >> 20)
    } else {
        format!("<size unit='b'>{}</size>", spec.size)
    };
    let mut x = String::new();
    match &spec.device {
        Device::Plain { mem_path } => {
            let file = mem_path
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or(&spec.name);
            if mem_path.parent() != Some(Path::new("/dev/shm")) {
                let _ = writeln!(
                    x,
                    "<!-- libvirt maps /dev/shm/{}; the region is {} -->",
                    xml_escape(file).replace("--", "- -"),
                    xml_escape(path_str(mem_path)).replace("--", "- -")
                );
            }
            let _ = writeln!(x, "<shmem name='{}'>", xml_escape(file));
            x.push_str("  <model type='ivshmem-plain'/>\n");
            let _ = writeln!(x, "  {size}");
        }
        Device::Doorbell { socket, vectors } => {
            let _ = writeln!(x, "<shmem name='{}'>", xml_escape(&spec.id()));
            x.push_str("  <model type='ivshmem-doorbell'/>\n");
            let _ = writeln!(x, "  {size}");
            let _ = writeln!(x, "  <server path='{}'/>", xml_escape(path_str(socket)));
            let _ = writeln!(x, "  <msi vectors='{vectors}' ioeventfd='on'/>");
        }
    }
    x.push_str("</shmem>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(path: &str) -> VmSpec {
        VmSpec::new(
            "vm1",
            16 << 20,
            Device::Plain {
                mem_path: path.into(),
            },
        )
        .unwrap()
    }

    #[test]
    fn plain_args() {
        assert_eq!(
            qemu_args(&plain("/dev/shm/fairgpu-vm1")),
            [
                "-object",
                "memory-backend-file,id=fairgpu-vm1,share=on,mem-path=/dev/shm/fairgpu-vm1,size=16777216",
                "-device",
                "ivshmem-plain,memdev=fairgpu-vm1",
            ]
        );
    }

    #[test]
    fn doorbell_args_with_qmp() {
        let spec = VmSpec::new(
            "db",
            1 << 20,
            Device::Doorbell {
                socket: "/run/fairgpu/db.sock".into(),
                vectors: 2,
            },
        )
        .unwrap()
        .with_qmp(Path::new("/run/fairgpu/db.qmp"))
        .unwrap();
        assert_eq!(
            qemu_args(&spec),
            [
                "-chardev",
                "socket,id=fairgpu-db,path=/run/fairgpu/db.sock",
                "-device",
                "ivshmem-doorbell,chardev=fairgpu-db,vectors=2",
                "-qmp",
                "unix:/run/fairgpu/db.qmp,server=on,wait=off",
            ]
        );
    }

    #[test]
    fn commas_in_paths_are_doubled() {
        let args = qemu_args(&plain("/dev/shm/a,b"));
        assert!(
            args[1].contains("mem-path=/dev/shm/a,,b,size="),
            "{}",
            args[1]
        );
    }

    #[test]
    fn plain_xml() {
        assert_eq!(
            libvirt_xml(&plain("/dev/shm/fairgpu-vm1")),
            "<shmem name='fairgpu-vm1'>\n  <model type='ivshmem-plain'/>\n  <size unit='M'>16</size>\n</shmem>\n"
        );
        let elsewhere = libvirt_xml(&plain("/run/x&y"));
        assert!(elsewhere.starts_with("<!-- libvirt maps /dev/shm/x&amp;y; the region is /run/x&amp;y -->\n<shmem name='x&amp;y'>"), "{elsewhere}");
    }

    #[test]
    fn doorbell_xml() {
        let spec = VmSpec::new(
            "vm2",
            64 << 10,
            Device::Doorbell {
                socket: "/run/fairgpu/vm2.sock".into(),
                vectors: 1,
            },
        )
        .unwrap();
        assert_eq!(
            libvirt_xml(&spec),
            "<shmem name='fairgpu-vm2'>\n  <model type='ivshmem-doorbell'/>\n  <size unit='b'>65536</size>\n  <server path='/run/fairgpu/vm2.sock'/>\n  <msi vectors='1' ioeventfd='on'/>\n</shmem>\n"
        );
    }

    #[test]
    fn bad_specs_are_refused() {
        let dev = || Device::Plain {
            mem_path: "/dev/shm/x".into(),
        };
        assert!(matches!(
            VmSpec::new("", 4096, dev()),
            Err(SpecError::BadName(_))
        ));
        assert!(matches!(
            VmSpec::new("a b", 4096, dev()),
            Err(SpecError::BadName(_))
        ));
        assert!(matches!(
            VmSpec::new("-x", 4096, dev()),
            Err(SpecError::BadName(_))
        ));
        assert!(matches!(
            VmSpec::new("a,b", 4096, dev()),
            Err(SpecError::BadName(_))
        ));
        assert!(matches!(
            VmSpec::new("a", 12288, dev()),
            Err(SpecError::BadSize(12288))
        ));
        assert!(matches!(
            VmSpec::new(
                "a",
                4096,
                Device::Plain {
                    mem_path: "rel".into()
                }
            ),
            Err(SpecError::BadPath { .. })
        ));
        let long = format!("/{}", "s".repeat(120));
        assert!(matches!(
            VmSpec::new(
                "a",
                4096,
                Device::Doorbell {
                    socket: long.into(),
                    vectors: 1
                }
            ),
            Err(SpecError::BadPath { .. })
        ));
        assert!(matches!(
            VmSpec::new(
                "a",
                4096,
                Device::Doorbell {
                    socket: "/s".into(),
                    vectors: 0
                }
            ),
            Err(SpecError::BadVectors(0))
        ));
    }
}
