//! The stats file: one fixed-layout slot of atomic counters per VM, in a
//! small shared-memory file the daemon creates and its workers update.
//!
//! ```text
//! 0x00  magic      u64  STATS_MAGIC, stored last (Release) by the creator
//! 0x08  version    u64  STATS_VERSION
//! 0x10  slots      u64  number of slots (VMs, in configuration order)
//! 0x18  slot_size  u64  SLOT_SIZE
//! 0x40  slot 0: SLOT_FIELDS u64 counters ([`Field`]), SLOT_SIZE bytes
//!       slot 1 ...
//! ```
//!
//! Only the daemon and its workers map the file; it is not shared with
//! guests. Each field has one writer at a time: the daemon writes what it
//! decides (worker pid, state, restarts, configured totals, counts carried
//! over from earlier workers), the running worker writes what it measures.
//! Every counter is independent and publishes no other memory, so every
//! access is Relaxed; readers may see a slot mid-update (each field is
//! still a value that was written). One exception: the worker ends each
//! publication by incrementing `Ticks` with Release ([`Slot::published`]),
//! and [`Slot::snapshot`] reads it first with Acquire, so a snapshot that
//! sees N publications sees every counter as of the N-th or later.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use fairgpu_frontend::map::Mapping;
use fairgpu_protocol::region::RegionView;
use serde::{Deserialize, Serialize};

/// `b"FGPUSTAT"` read as a little-endian u64.
pub const STATS_MAGIC: u64 = u64::from_le_bytes(*b"FGPUSTAT");
/// Layout version of the stats file.
pub const STATS_VERSION: u64 = 3;
/// Where slot 0 starts.
pub const SLOTS_OFF: usize = 0x40;
/// Counters per slot.
pub const SLOT_FIELDS: usize = 24;
/// Bytes per slot (three cache lines).
pub const SLOT_SIZE: usize = SLOT_FIELDS * 8;
/// Most slots a stats file may hold (one per VM).
pub const MAX_SLOTS: usize = 4096;

const _: () = assert!((Field::Reserved as usize) <= SLOT_FIELDS && SLOTS_OFF.is_multiple_of(8));

/// The counters of a slot, by index.
#[repr(usize)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// Pid of the current worker process (0: none). Daemon.
    Pid = 0,
    /// [`WorkerState`] code. Daemon; the worker stores `Running`.
    State = 1,
    /// Workers restarted after an unexpected exit. Daemon.
    Restarts = 2,
    /// Channels claimed by a guest (including ones failed but not yet
    /// released). Worker.
    ChannelsUsed = 3,
    /// Channels in the VM's region. Daemon.
    ChannelsTotal = 4,
    /// Device memory allocated by the VM's guests, bytes. Worker.
    MemUsed = 5,
    /// The VM's device-memory quota, bytes. Daemon and worker (same value).
    MemQuota = 6,
    /// Device time used by the current worker's kernels, ns. Worker.
    GpuTimeNs = 7,
    /// Requests served by the current worker. Worker.
    Calls = 8,
    /// Live device contexts. Worker.
    Contexts = 9,
    /// Times the current worker published (a liveness counter). Worker.
    Ticks = 10,
    /// Device time of earlier workers of this VM, ns. Daemon.
    PriorGpuTimeNs = 11,
    /// Requests served by earlier workers of this VM. Daemon.
    PriorCalls = 12,
    /// When the current worker started, ms since the Unix epoch. Daemon.
    StartedMs = 13,
    /// Kernel launches served by the current worker. Worker.
    Kernels = 14,
    /// Kernel launches served by earlier workers of this VM. Daemon.
    PriorKernels = 15,
    /// Host memory the VM's guests make the worker hold, bytes
    /// ([`fairgpu_executor::host_memory`]). Worker.
    HostMemUsed = 16,
    /// The VM's host-memory budget, bytes. Worker.
    HostMemLimit = 17,
    /// Launches run as parts (kernel slicing), over every worker of the
    /// VM. Worker (adds).
    SlicedLaunches = 18,
    /// Parts those launches ran as, over every worker. Worker (adds).
    KernelParts = 19,
    /// Launches predicted long that ran whole, not sliceable. Worker (adds).
    Unsliceable = 20,
    /// Requests the runaway guard ended, over every worker. Worker (adds).
    Runaways = 21,
    /// First unused index.
    Reserved = 22,
}

/// What a VM's worker is doing.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerState {
    /// No worker yet.
    None = 0,
    /// Spawned; not serving yet.
    Starting = 1,
    /// Serving the region.
    Running = 2,
    /// Exited unexpectedly; waiting out the restart backoff.
    Restarting = 3,
    /// Being stopped by a daemon shutdown.
    Stopping = 4,
    /// Stopped.
    Stopped = 5,
}

impl WorkerState {
    /// Decodes a state code; unknown codes read as `None`.
    pub fn from_code(v: u64) -> WorkerState {
        match v {
            1 => WorkerState::Starting,
            2 => WorkerState::Running,
            3 => WorkerState::Restarting,
            4 => WorkerState::Stopping,
            5 => WorkerState::Stopped,
            _ => WorkerState::None,
        }
    }
}

impl std::fmt::Display for WorkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WorkerState::None => "none",
            WorkerState::Starting => "starting",
            WorkerState::Running => "running",
            WorkerState::Restarting => "restarting",
            WorkerState::Stopping => "stopping",
            WorkerState::Stopped => "stopped",
        })
    }
}

/// Why a stats file could not be created or opened.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// The file could not be created, opened or mapped.
    #[error("cannot map stats file {path}")]
    Map {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Too many slots asked for.
    #[error("{slots} stats slots asked for; at most {MAX_SLOTS}")]
    TooManySlots {
        /// Slots asked for.
        slots: usize,
    },
    /// The file is not a stats file of this version, or is truncated.
    #[error("{path} is not a fairgpu stats file of version {STATS_VERSION} with {slots} slots")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Slots expected.
        slots: usize,
    },
}

/// A mapped stats file. The creator removes the file when it is dropped.
#[derive(Debug)]
pub struct StatsFile {
    view: RegionView,
    slots: usize,
    path: PathBuf,
    owns_file: bool,
}

fn file_len(slots: usize) -> usize {
    SLOTS_OFF + slots * SLOT_SIZE
}

impl StatsFile {
    /// Creates (replacing a stale one) a zeroed stats file with `slots` slots.
    pub fn create(path: &Path, slots: usize) -> Result<StatsFile, StatsError> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(StatsError::TooManySlots { slots });
        }
        let map = Mapping::create(path, file_len(slots)).map_err(|source| StatsError::Map {
            path: path.to_owned(),
            source,
        })?;
        let f = StatsFile {
            view: map.view(),
            slots,
            path: path.to_owned(),
            owns_file: true,
        };
        f.word(0x08).store(STATS_VERSION, Ordering::Relaxed);
        f.word(0x10).store(slots as u64, Ordering::Relaxed);
        f.word(0x18).store(SLOT_SIZE as u64, Ordering::Relaxed);
        // Release: publishes the header words above; pairs with the Acquire
        // load of the magic in `open`.
        f.word(0).store(STATS_MAGIC, Ordering::Release);
        Ok(f)
    }

    /// Maps a stats file the daemon created, which must hold `slots` slots.
    /// The file is left in place on drop.
    pub fn open(path: &Path, slots: usize) -> Result<StatsFile, StatsError> {
        let invalid = || StatsError::Invalid {
            path: path.to_owned(),
            slots,
        };
        let map = Mapping::open(path).map_err(|source| StatsError::Map {
            path: path.to_owned(),
            source,
        })?;
        if slots == 0 || slots > MAX_SLOTS || map.len() < file_len(slots) {
            return Err(invalid());
        }
        let f = StatsFile {
            view: map.view(),
            slots,
            path: path.to_owned(),
            owns_file: false,
        };
        // Acquire: pairs with the Release store of the magic in `create`.
        if f.word(0).load(Ordering::Acquire) != STATS_MAGIC
            || f.word(0x08).load(Ordering::Relaxed) != STATS_VERSION
            || f.word(0x10).load(Ordering::Relaxed) != slots as u64
            || f.word(0x18).load(Ordering::Relaxed) != SLOT_SIZE as u64
        {
            return Err(invalid());
        }
        Ok(f)
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        self.view.atomic_u64(off).expect("offset within the file")
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Slot `i`, or `None` past the last one.
    pub fn slot(&self, i: usize) -> Option<Slot> {
        (i < self.slots).then(|| Slot {
            view: self.view.clone(),
            base: SLOTS_OFF + i * SLOT_SIZE,
        })
    }
}

impl Drop for StatsFile {
    fn drop(&mut self) {
        if self.owns_file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// One VM's counters. Keeps the mapping alive.
#[derive(Debug, Clone)]
pub struct Slot {
    view: RegionView,
    base: usize,
}

impl Slot {
    fn word(&self, f: Field) -> &AtomicU64 {
        self.view
            .atomic_u64(self.base + f as usize * 8)
            .expect("slot within the file")
    }

    /// Reads a counter (Relaxed: see the module docs).
    pub fn get(&self, f: Field) -> u64 {
        self.word(f).load(Ordering::Relaxed)
    }

    /// Writes a counter (Relaxed: see the module docs).
    pub fn set(&self, f: Field, v: u64) {
        self.word(f).store(v, Ordering::Relaxed);
    }

    /// Adds to a counter (Relaxed: see the module docs).
    pub fn add(&self, f: Field, v: u64) {
        self.word(f).fetch_add(v, Ordering::Relaxed);
    }

    /// Ends a publication of the worker's counters: pairs with the
    /// Acquire load in [`Slot::snapshot`], so a reader that sees this
    /// count sees every counter written before it.
    pub fn published(&self) {
        self.word(Field::Ticks).fetch_add(1, Ordering::Release);
    }

    /// The worker state.
    pub fn state(&self) -> WorkerState {
        WorkerState::from_code(self.get(Field::State))
    }

    /// Sets the worker state.
    pub fn set_state(&self, s: WorkerState) {
        self.set(Field::State, s as u64);
    }

    /// The daemon's bookkeeping after its worker exited: carries the dead
    /// worker's totals over and clears what it measured.
    pub fn worker_gone(&self) {
        self.add(Field::PriorGpuTimeNs, self.get(Field::GpuTimeNs));
        self.add(Field::PriorCalls, self.get(Field::Calls));
        self.add(Field::PriorKernels, self.get(Field::Kernels));
        for f in [
            Field::Pid,
            Field::ChannelsUsed,
            Field::MemUsed,
            Field::HostMemUsed,
            Field::GpuTimeNs,
            Field::Calls,
            Field::Contexts,
            Field::Ticks,
            Field::StartedMs,
            Field::Kernels,
        ] {
            self.set(f, 0);
        }
    }

    /// Copies the counters out, with totals over every worker of the VM.
    pub fn snapshot(&self) -> SlotSnapshot {
        // Acquire, before any other counter: pairs with the Release in
        // `published`.
        let ticks = self.word(Field::Ticks).load(Ordering::Acquire);
        SlotSnapshot {
            pid: self.get(Field::Pid) as u32,
            state: self.state(),
            restarts: self.get(Field::Restarts),
            channels_used: self.get(Field::ChannelsUsed) as u32,
            channels_total: self.get(Field::ChannelsTotal) as u32,
            mem_used: self.get(Field::MemUsed),
            mem_quota: self.get(Field::MemQuota),
            host_mem_used: self.get(Field::HostMemUsed),
            host_mem_limit: self.get(Field::HostMemLimit),
            gpu_time_ns: self
                .get(Field::PriorGpuTimeNs)
                .saturating_add(self.get(Field::GpuTimeNs)),
            calls: self
                .get(Field::PriorCalls)
                .saturating_add(self.get(Field::Calls)),
            kernels: self
                .get(Field::PriorKernels)
                .saturating_add(self.get(Field::Kernels)),
            contexts: self.get(Field::Contexts) as u32,
            ticks,
            started_ms: self.get(Field::StartedMs),
            long_kernels: LongKernelStats {
                sliced: self.get(Field::SlicedLaunches),
                parts: self.get(Field::KernelParts),
                unsliceable: self.get(Field::Unsliceable),
                runaways: self.get(Field::Runaways),
            },
        }
    }
}

/// What kernel slicing and the runaway guard did for one VM, over every
/// worker it had (docs/long-kernels.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LongKernelStats {
    /// Launches run as parts.
    pub sliced: u64,
    /// Parts they ran as.
    pub parts: u64,
    /// Launches predicted long that ran whole (not sliceable).
    pub unsliceable: u64,
    /// Requests the runaway guard ended.
    pub runaways: u64,
}

impl LongKernelStats {
    /// Whether anything happened.
    pub fn is_zero(&self) -> bool {
        *self == LongKernelStats::default()
    }
}

/// A copy of one slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotSnapshot {
    /// Current worker pid (0: none).
    pub pid: u32,
    /// Worker state.
    pub state: WorkerState,
    /// Restarts after unexpected exits.
    pub restarts: u64,
    /// Channels claimed.
    pub channels_used: u32,
    /// Channels in the region.
    pub channels_total: u32,
    /// Device memory allocated, bytes.
    pub mem_used: u64,
    /// Device-memory quota, bytes.
    pub mem_quota: u64,
    /// Host memory held for the VM's guests, bytes.
    pub host_mem_used: u64,
    /// The VM's host-memory budget, bytes (0: not yet published).
    pub host_mem_limit: u64,
    /// Device time over every worker of the VM, ns.
    pub gpu_time_ns: u64,
    /// Requests served over every worker of the VM.
    pub calls: u64,
    /// Kernel launches served over every worker of the VM.
    pub kernels: u64,
    /// Live device contexts.
    pub contexts: u32,
    /// Times the current worker published.
    pub ticks: u64,
    /// When the current worker started, ms since the Unix epoch (0: none).
    pub started_ms: u64,
    /// Kernel slicing and the runaway guard.
    pub long_kernels: LongKernelStats,
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("fairgpu-stats-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn create_open_and_carry_over() {
        let path = temp_path("basic");
        let created = StatsFile::create(&path, 3).unwrap();
        let s = created.slot(2).unwrap();
        s.set(Field::Pid, 42);
        s.set_state(WorkerState::Running);
        s.set(Field::Calls, 10);
        s.set(Field::GpuTimeNs, 1000);
        s.set(Field::Kernels, 3);
        assert!(created.slot(3).is_none());

        let opened = StatsFile::open(&path, 3).unwrap();
        let o = opened.slot(2).unwrap();
        assert_eq!(o.snapshot().pid, 42);
        assert_eq!(o.state(), WorkerState::Running);
        assert!(StatsFile::open(&path, 2).is_err(), "slot count must match");

        o.worker_gone();
        o.set(Field::Calls, 5);
        o.set(Field::Kernels, 1);
        let snap = s.snapshot();
        assert_eq!((snap.pid, snap.calls, snap.gpu_time_ns), (0, 15, 1000));
        assert_eq!(snap.kernels, 4);

        drop(opened);
        assert!(path.exists(), "an opener leaves the file");
        drop(created);
        assert!(!path.exists(), "the creator removes the file");
    }

    /// The attack: a stats file of mode 0660 let every member of the
    /// daemon's group (QEMU's user, local guests) rewrite any VM's usage.
    #[test]
    fn a_vm_group_member_cannot_write_the_stats_file() {
        use std::os::unix::fs::PermissionsExt;
        let path = temp_path("private");
        let f = StatsFile::create(&path, 1).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600, "stats file mode {mode:o}");
        drop(f);
    }

    #[test]
    fn open_refuses_other_files() {
        let path = temp_path("garbage");
        std::fs::write(&path, vec![7u8; 4096]).unwrap();
        assert!(matches!(
            StatsFile::open(&path, 1),
            Err(StatsError::Invalid { .. })
        ));
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            StatsFile::open(&path, 1),
            Err(StatsError::Map { .. })
        ));
        assert!(StatsFile::create(&path, 0).is_err());
    }

    #[test]
    fn states_round_trip() {
        for s in [
            WorkerState::None,
            WorkerState::Starting,
            WorkerState::Running,
            WorkerState::Restarting,
            WorkerState::Stopping,
            WorkerState::Stopped,
        ] {
            assert_eq!(WorkerState::from_code(s as u64), s);
        }
        assert_eq!(WorkerState::from_code(99), WorkerState::None);
    }
}
