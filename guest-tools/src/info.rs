//! `fairgpu-guest info`: what this guest sees of fairgpu.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use fairgpu_frontend::pci::{self, IvshmemDevice};
use fairgpu_frontend::{Channel, GuestRegion, WaitConfig, WaitMode, REGION_ENV, WAIT_ENV};
use fairgpu_protocol::layout::{
    ChannelFailure, Owner, RegionHeader, CH_HOST_GEN, CH_HOST_STATE, CH_OWNER,
    FEATURE_LOCAL_OWNERS, HEARTBEAT_OFF, HOST_SLEEPING_OFF, MAGIC,
};
use fairgpu_protocol::limits::REQUEST_ARGS;
use fairgpu_protocol::Opcode;
use serde::Serialize;

/// Most no-op calls one measurement makes.
pub const MAX_COUNT: u32 = 1_000_000;

/// What to look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoOptions {
    /// The region to open; else `FAIRGPU_REGION`, else the first ivshmem
    /// device's BAR2.
    pub region: Option<PathBuf>,
    /// Where PCI devices are listed (normally `/sys/bus/pci/devices`).
    pub sysfs_pci: PathBuf,
    /// No-op round trips to measure; 0 skips the measurement.
    pub count: u32,
}

impl Default for InfoOptions {
    fn default() -> Self {
        InfoOptions {
            region: None,
            sysfs_pci: PathBuf::from(pci::SYSFS_PCI_DEVICES),
            count: 1000,
        }
    }
}

/// Why `info` found nothing to report on.
#[derive(Debug, thiserror::Error)]
pub enum InfoError {
    /// No region named, and no ivshmem device.
    #[error(
        "no ivshmem device (PCI {vendor:04x}:{device:04x}) in {sysfs} and {REGION_ENV} is not set: \
         is the VM started with an ivshmem device (fairgpu qemu-args)?",
        vendor = pci::IVSHMEM_VENDOR,
        device = pci::IVSHMEM_DEVICE,
        sysfs = .sysfs.display()
    )]
    NoDevice {
        /// Where devices were looked for.
        sysfs: PathBuf,
    },
    /// Too many calls asked for.
    #[error("count {0} exceeds {MAX_COUNT}")]
    Count(u32),
}

/// Everything `info` found.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Report {
    /// The ivshmem devices, by PCI address.
    pub devices: Vec<DeviceReport>,
    /// The region, if one could be opened.
    pub region: Option<RegionReport>,
    /// Why no region could be opened (devices are still listed).
    pub error: Option<String>,
}

/// One ivshmem device.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeviceReport {
    /// PCI address.
    pub address: String,
    /// `ivshmem-doorbell` or `ivshmem-plain`.
    pub variant: &'static str,
    /// BAR0 (registers) bytes.
    pub bar0_bytes: u64,
    /// BAR1 (MSI-X table) bytes; 0 for ivshmem-plain.
    pub bar1_bytes: u64,
    /// BAR2 (shared memory) bytes.
    pub bar2_bytes: u64,
    /// The bound driver.
    pub driver: Option<String>,
    /// The IOMMU group (none: the guest has no IOMMU).
    pub iommu_group: Option<u32>,
}

impl From<&IvshmemDevice> for DeviceReport {
    fn from(d: &IvshmemDevice) -> Self {
        DeviceReport {
            address: d.addr.clone(),
            variant: if d.is_doorbell() {
                "ivshmem-doorbell"
            } else {
                "ivshmem-plain"
            },
            bar0_bytes: d.bar_sizes[0],
            bar1_bytes: d.bar_sizes[1],
            bar2_bytes: d.bar_sizes[2],
            driver: d.driver.clone(),
            iommu_group: d.iommu_group,
        }
    }
}

/// The region and its channels.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RegionReport {
    /// Where it was mapped from.
    pub path: PathBuf,
    /// The device's PCI address, if it is a device's BAR2.
    pub device: Option<String>,
    /// The magic, as found.
    pub magic: String,
    /// Protocol version.
    pub version: u32,
    /// Bytes the header claims (validated against the mapping).
    pub region_bytes: u64,
    /// Bytes mapped.
    pub mapped_bytes: u64,
    /// Feature bits.
    pub features: u64,
    /// Their names.
    pub feature_names: Vec<&'static str>,
    /// Ring descriptors per direction.
    pub ring_entries: u32,
    /// Arena bytes per channel.
    pub arena_bytes: u32,
    /// The host's heartbeat counter (moves every 50 ms while it serves).
    pub heartbeat: u64,
    /// Whether the host's serving loop sleeps (and wants a doorbell).
    pub host_sleeping: bool,
    /// Every channel.
    pub channels: Vec<ChannelReport>,
    /// The wake path and why.
    pub wake: WakeReport,
    /// The measurement, if one ran.
    pub latency: Option<LatencyReport>,
    /// Why the measurement did not run or failed.
    pub latency_error: Option<String>,
}

/// One channel's state as the region shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ChannelReport {
    /// Index.
    pub index: u32,
    /// `free`, `claiming` (the host has not reset it yet), `claimed` or
    /// `failed`.
    pub state: &'static str,
    /// The owner word's generation.
    pub generation: u32,
    /// The owner's pid (in the guest), 0 when free.
    pub pid: u32,
    /// Why the host failed it.
    pub failure: Option<String>,
}

/// The wake path the frontend chose.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WakeReport {
    /// `futex`, `msix` or `backoff`.
    pub path: &'static str,
    /// Whether `FAIRGPU_WAIT` forced it.
    pub forced: bool,
    /// Why.
    pub reason: String,
    /// The guest → host wake: `doorbell` (BAR0 register) or `futex`/`none`.
    pub guest_to_host: &'static str,
}

/// Round trips of no-op calls.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LatencyReport {
    /// The channel claimed for it.
    pub channel: u32,
    /// Calls made.
    pub calls: u32,
    /// Median round trip.
    pub p50_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// Fastest.
    pub min_ns: u64,
    /// Slowest.
    pub max_ns: u64,
    /// The wake path the channel ended on (it may fall back).
    pub path: &'static str,
    /// Times the channel blocked.
    pub blocks: u64,
    /// Blocks ended by an interrupt.
    pub interrupt_wakes: u64,
    /// Sleeps of the backoff.
    pub naps: u64,
    /// MSI-X interrupts received meanwhile.
    pub interrupts: u64,
}

/// Looks at everything. `Err` only when there is nothing at all to show;
/// a region that cannot be opened, or a measurement that fails, is part of
/// the report.
pub fn collect(opts: &InfoOptions) -> Result<Report, InfoError> {
    if opts.count > MAX_COUNT {
        return Err(InfoError::Count(opts.count));
    }
    let devices = pci::ivshmem_devices(&opts.sysfs_pci);
    let named = opts
        .region
        .clone()
        .or_else(|| std::env::var_os(REGION_ENV).map(PathBuf::from));
    let opened = match &named {
        Some(p) => GuestRegion::open(p),
        None if devices.is_empty() => {
            return Err(InfoError::NoDevice {
                sysfs: opts.sysfs_pci.clone(),
            })
        }
        None => open_first(&devices),
    };
    let devices = devices.iter().map(DeviceReport::from).collect();
    match opened {
        Ok(region) => Ok(Report {
            // Re-read: opening may have bound a device to vfio-pci.
            devices: pci::ivshmem_devices(&opts.sysfs_pci)
                .iter()
                .map(DeviceReport::from)
                .collect(),
            region: Some(describe(&region, opts.count)),
            error: None,
        }),
        Err(e) => Ok(Report {
            devices,
            region: None,
            error: Some(chain(&e)),
        }),
    }
}

fn open_first(devices: &[IvshmemDevice]) -> Result<Arc<GuestRegion>, fairgpu_frontend::OpenError> {
    let mut last = None;
    for d in devices {
        match GuestRegion::open(&d.bar2_path()) {
            Ok(r) => return Ok(r),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or(fairgpu_frontend::OpenError::NoRegion))
}

/// An error with its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn describe(region: &Arc<GuestRegion>, count: u32) -> RegionReport {
    let view = region.view();
    let layout = *region.layout();
    // Validated at open; re-read only for display.
    let header: RegionHeader = view.read_obj(0).unwrap_or_default();
    let channels = (0..layout.channels())
        .map(|index| {
            let offs = layout.channel(index).expect("index < channels");
            // Acquire: pairs with the claim/release CASes of owners.
            let owner = Owner::from_word(
                view.atomic_u64(offs.at(CH_OWNER))
                    .expect("layout validated")
                    .load(Ordering::Acquire),
            );
            let word = |rel| {
                view.atomic_u32(offs.at(rel))
                    .expect("layout validated")
                    .load(Ordering::Acquire)
            };
            let (state, failure) = if owner.is_free() {
                ("free", None)
            } else if word(CH_HOST_GEN) != owner.generation {
                ("claiming", None)
            } else {
                match word(CH_HOST_STATE) {
                    0 => ("claimed", None),
                    s => (
                        "failed",
                        Some(
                            ChannelFailure::from_state(s)
                                .map_or_else(|| format!("unknown state {s}"), |f| f.to_string()),
                        ),
                    ),
                }
            };
            ChannelReport {
                index,
                state,
                generation: owner.generation,
                pid: owner.pid,
                failure,
            }
        })
        .collect();
    let wake = region.wake();
    let guest_to_host = match (region.doorbell(), wake.mode) {
        (Some(_), _) => "doorbell",
        (None, WaitMode::Futex) => "futex",
        // ivshmem-plain: the host's block slice bounds its own sleep.
        (None, _) => "none",
    };
    let (latency, latency_error) = if count == 0 {
        (None, Some("not measured (count 0)".to_owned()))
    } else {
        match measure(region, count) {
            Ok(l) => (Some(l), None),
            Err(e) => (None, Some(e)),
        }
    };
    let mut feature_names = Vec::new();
    if layout.features() & FEATURE_LOCAL_OWNERS != 0 {
        feature_names.push("local-owners");
    }
    RegionReport {
        path: region.path().to_owned(),
        device: region.device().map(|d| d.addr.clone()),
        magic: if header.magic == MAGIC {
            "FAIRGPU\\x01".to_owned()
        } else {
            format!("{:#018x}", header.magic)
        },
        version: header.version,
        region_bytes: layout.region_size() as u64,
        mapped_bytes: view.len() as u64,
        features: layout.features(),
        feature_names,
        ring_entries: layout.ring_entries(),
        arena_bytes: layout.arena_size(),
        heartbeat: view
            .atomic_u64(HEARTBEAT_OFF)
            .map(|w| w.load(Ordering::Relaxed))
            .unwrap_or(0),
        host_sleeping: view
            .atomic_u32(HOST_SLEEPING_OFF)
            .is_ok_and(|w| w.load(Ordering::Relaxed) != 0),
        channels,
        wake: WakeReport {
            path: wake.mode.name(),
            forced: wake.forced,
            reason: wake.reason.clone(),
            guest_to_host,
        },
        latency,
        latency_error,
    }
}

/// `count` no-op round trips on a freshly claimed channel.
fn measure(region: &Arc<GuestRegion>, count: u32) -> Result<LatencyReport, String> {
    let irq_before = region.interrupts().map_or(0, |i| i.received());
    let mut ch = Channel::claim(region.clone(), WaitConfig::from_env())
        .map_err(|e| format!("no channel could be claimed: {}", chain(&e)))?;
    let mut samples = Vec::with_capacity(count as usize);
    for i in 0..u64::from(count) {
        let t = Instant::now();
        let mut args = [0u64; REQUEST_ARGS];
        args[0] = i;
        let r = ch
            .call(Opcode::Nop, args)
            .map_err(|e| format!("no-op {i} of {count} failed: {e}"))?;
        samples.push(t.elapsed().as_nanos() as u64);
        if r.vals[0] != i {
            return Err(format!("no-op {i} echoed {}", r.vals[0]));
        }
    }
    samples.sort_unstable();
    let stats = ch.wait_stats();
    Ok(LatencyReport {
        channel: ch.index(),
        calls: count,
        p50_ns: percentile(&samples, 50),
        p99_ns: percentile(&samples, 99),
        min_ns: samples.first().copied().unwrap_or(0),
        max_ns: samples.last().copied().unwrap_or(0),
        path: ch.wait_mode().name(),
        blocks: stats.blocks,
        interrupt_wakes: stats.interrupt_wakes,
        naps: stats.naps,
        interrupts: region.interrupts().map_or(0, |i| i.received()) - irq_before,
    })
}

/// Nearest-rank percentile of sorted samples.
fn percentile(sorted: &[u64], p: u32) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (u64::from(p) * sorted.len() as u64).div_ceil(100).max(1);
    sorted[(rank as usize - 1).min(sorted.len() - 1)]
}

fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    format!("{n} B")
}

fn micros(ns: u64) -> String {
    format!("{:.1} µs", ns as f64 / 1000.0)
}

impl Report {
    /// The human-readable form.
    pub fn render(&self) -> String {
        let mut o = String::new();
        if self.devices.is_empty() {
            o.push_str("ivshmem devices: none\n");
        } else {
            o.push_str("ivshmem devices:\n");
        }
        for d in &self.devices {
            o.push_str(&format!(
                "  {}  {}  BAR0 {}  BAR1 {}  BAR2 {}  driver {}  IOMMU group {}\n",
                d.address,
                d.variant,
                bytes(d.bar0_bytes),
                if d.bar1_bytes == 0 {
                    "none".to_owned()
                } else {
                    format!("{} (MSI-X)", bytes(d.bar1_bytes))
                },
                bytes(d.bar2_bytes),
                d.driver.as_deref().unwrap_or("none"),
                d.iommu_group
                    .map_or_else(|| "none".to_owned(), |g| g.to_string()),
            ));
        }
        let Some(r) = &self.region else {
            o.push_str(&format!(
                "region: none: {}\n",
                self.error.as_deref().unwrap_or("not found")
            ));
            return o;
        };
        o.push_str(&format!("region: {}", r.path.display()));
        if let Some(d) = &r.device {
            o.push_str(&format!(" (device {d})"));
        }
        o.push('\n');
        o.push_str(&format!(
            "  magic {}, version {}, {} of {} mapped, features {:#x} ({})\n",
            r.magic,
            r.version,
            bytes(r.region_bytes),
            bytes(r.mapped_bytes),
            r.features,
            if r.feature_names.is_empty() {
                "none".to_owned()
            } else {
                r.feature_names.join(", ")
            }
        ));
        o.push_str(&format!(
            "  {} channels, {} descriptors per ring, {} arena each; host heartbeat {}, host {}\n",
            r.channels.len(),
            r.ring_entries,
            bytes(u64::from(r.arena_bytes)),
            r.heartbeat,
            if r.host_sleeping {
                "sleeping"
            } else {
                "polling"
            }
        ));
        for c in &r.channels {
            o.push_str(&format!("  channel {}: {}", c.index, c.state));
            match c.state {
                "free" => o.push_str(&format!(" (last generation {})", c.generation)),
                _ => o.push_str(&format!(" by pid {}, generation {}", c.pid, c.generation)),
            }
            if let Some(f) = &c.failure {
                o.push_str(&format!(": {f}"));
            }
            o.push('\n');
        }
        o.push_str(&format!(
            "wake path: {}{}: {}\n",
            r.wake.path,
            if r.wake.forced {
                format!(" (forced by {WAIT_ENV})")
            } else {
                " (auto)".to_owned()
            },
            r.wake.reason
        ));
        o.push_str(&format!("guest to host wake: {}\n", r.wake.guest_to_host));
        match (&r.latency, &r.latency_error) {
            (Some(l), _) => o.push_str(&format!(
                "latency: {} no-op round trips on channel {}: p50 {}, p99 {}, min {}, max {}; \
                 {} wake path, {} blocks, {} woken by interrupt, {} naps, {} interrupts received\n",
                l.calls,
                l.channel,
                micros(l.p50_ns),
                micros(l.p99_ns),
                micros(l.min_ns),
                micros(l.max_ns),
                l.path,
                l.blocks,
                l.interrupt_wakes,
                l.naps,
                l.interrupts
            )),
            (None, Some(e)) => o.push_str(&format!("latency: {e}\n")),
            (None, None) => {}
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let s: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&s, 50), 50);
        assert_eq!(percentile(&s, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn sizes_read_as_powers_of_two() {
        assert_eq!(bytes(256), "256 B");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(4097), "4097 B");
    }

    #[test]
    fn no_device_and_no_region_is_a_clear_error() {
        let empty = std::env::temp_dir().join(format!("fairgpu-info-empty-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        if std::env::var_os(REGION_ENV).is_some() {
            return; // the environment names a region: nothing to test here
        }
        let e = collect(&InfoOptions {
            sysfs_pci: empty.clone(),
            ..InfoOptions::default()
        })
        .unwrap_err();
        assert!(matches!(e, InfoError::NoDevice { .. }), "{e}");
        assert!(e.to_string().contains("1af4:1110"), "{e}");
        std::fs::remove_dir_all(&empty).unwrap();
    }
}
