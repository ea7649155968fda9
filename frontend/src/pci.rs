//! ivshmem PCI devices as sysfs shows them: address, BAR sizes, driver and
//! IOMMU group. Read-only; binding a driver is [`crate::vfio`]'s business.

use std::path::{Path, PathBuf};

/// Where the kernel lists PCI devices.
pub const SYSFS_PCI_DEVICES: &str = "/sys/bus/pci/devices";
/// The ivshmem device's PCI vendor id (Red Hat, Inc.).
pub const IVSHMEM_VENDOR: u16 = 0x1af4;
/// The ivshmem device's PCI device id.
pub const IVSHMEM_DEVICE: u16 = 0x1110;

/// One ivshmem device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IvshmemDevice {
    /// PCI address, e.g. `0000:00:03.0`.
    pub addr: String,
    /// Its sysfs directory.
    pub dir: PathBuf,
    /// Sizes of BAR0..BAR5 in bytes (0: absent). BAR0 holds the registers,
    /// BAR1 the MSI-X table (`ivshmem-doorbell` only), BAR2 the memory.
    pub bar_sizes: [u64; 6],
    /// The driver bound to it, if any (`vfio-pci` on the interrupt path).
    pub driver: Option<String>,
    /// Its IOMMU group, if the guest has an IOMMU (vfio needs one).
    pub iommu_group: Option<u32>,
}

impl IvshmemDevice {
    /// Reads what sysfs says about the device in `dir`, if it is an ivshmem
    /// device.
    pub fn from_sysfs(dir: &Path) -> Option<IvshmemDevice> {
        let id = |f: &str| read_hex(&dir.join(f));
        if id("vendor")? != u64::from(IVSHMEM_VENDOR) || id("device")? != u64::from(IVSHMEM_DEVICE)
        {
            return None;
        }
        let addr = dir.file_name()?.to_str()?.to_owned();
        let bar_sizes = std::fs::read_to_string(dir.join("resource"))
            .map(|t| bar_sizes(&t))
            .unwrap_or_default();
        Some(IvshmemDevice {
            addr,
            dir: dir.to_owned(),
            bar_sizes,
            driver: link_name(&dir.join("driver")),
            iommu_group: link_name(&dir.join("iommu_group")).and_then(|g| g.parse().ok()),
        })
    }

    /// Whether it is an `ivshmem-doorbell` (it has an MSI-X BAR and a
    /// Doorbell register; `ivshmem-plain` has neither).
    pub fn is_doorbell(&self) -> bool {
        self.bar_sizes[1] != 0
    }

    /// The sysfs file that maps BAR2, the shared memory.
    pub fn bar2_path(&self) -> PathBuf {
        self.dir.join("resource2")
    }
}

/// Every ivshmem device under `sysfs_pci` (normally
/// [`SYSFS_PCI_DEVICES`]), by address.
pub fn ivshmem_devices(sysfs_pci: &Path) -> Vec<IvshmemDevice> {
    let Ok(dir) = std::fs::read_dir(sysfs_pci) else {
        return Vec::new();
    };
    let mut out: Vec<IvshmemDevice> = dir
        .filter_map(Result::ok)
        .filter_map(|e| IvshmemDevice::from_sysfs(&e.path()))
        .collect();
    out.sort_by(|a, b| a.addr.cmp(&b.addr));
    out
}

/// The ivshmem device whose sysfs BAR file is `path` (`.../resource2`).
pub fn device_of_bar(path: &Path) -> Option<IvshmemDevice> {
    let name = path.file_name()?.to_str()?;
    if !name.starts_with("resource") {
        return None;
    }
    IvshmemDevice::from_sysfs(path.parent()?)
}

fn read_hex(path: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

fn link_name(path: &Path) -> Option<String> {
    let target = std::fs::read_link(path).ok()?;
    Some(target.file_name()?.to_str()?.to_owned())
}

/// BAR sizes from a sysfs `resource` file: one `start end flags` line of
/// hex numbers per resource, BAR0..BAR5 first. Malformed lines count as
/// absent BARs.
fn bar_sizes(text: &str) -> [u64; 6] {
    let mut sizes = [0u64; 6];
    for (i, line) in text.lines().take(6).enumerate() {
        let mut f = line
            .split_whitespace()
            .map(|w| u64::from_str_radix(w.strip_prefix("0x").unwrap_or(w), 16).ok());
        if let (Some(Some(start)), Some(Some(end))) = (f.next(), f.next()) {
            if end > start {
                sizes[i] = end - start + 1;
            }
        }
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_sizes_come_from_the_resource_file() {
        let text = "0x00000000febfe000 0x00000000febfe0ff 0x0000000000040200\n\
                    0x00000000febff000 0x00000000febfffff 0x0000000000040200\n\
                    0x00000000f8000000 0x00000000fbffffff 0x000000000014220c\n\
                    0x0000000000000000 0x0000000000000000 0x0000000000000000\n\
                    garbage\n";
        assert_eq!(bar_sizes(text), [256, 4096, 64 << 20, 0, 0, 0]);
        assert_eq!(bar_sizes(""), [0; 6]);
    }

    #[test]
    fn finds_ivshmem_devices_in_a_sysfs_tree() {
        let root = std::env::temp_dir().join(format!("fairgpu-pci-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("0000:00:03.0");
        let other = root.join("0000:00:02.0");
        for (d, vendor, device) in [(&dev, "0x1af4", "0x1110"), (&other, "0x8086", "0x100e")] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
            std::fs::write(d.join("device"), format!("{device}\n")).unwrap();
        }
        std::fs::write(
            dev.join("resource"),
            "0x1000 0x10ff 0x0\n0x0 0x0 0x0\n0x100000 0x1fffff 0x0\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("../../../kernel/iommu_groups/7", dev.join("iommu_group"))
            .unwrap();
        let found = ivshmem_devices(&root);
        assert_eq!(found.len(), 1);
        let d = &found[0];
        assert_eq!(d.addr, "0000:00:03.0");
        assert_eq!(d.bar_sizes[0], 256);
        assert_eq!(d.bar_sizes[2], 1 << 20);
        assert!(!d.is_doorbell());
        assert_eq!(d.iommu_group, Some(7));
        assert_eq!(d.driver, None);
        assert_eq!(device_of_bar(&d.bar2_path()), Some(d.clone()));
        assert_eq!(device_of_bar(&other.join("resource2")), None);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
