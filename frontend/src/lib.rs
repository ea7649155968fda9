//! The guest side of fairgpu's transport.
//!
//! A process finds the region ([`GuestRegion::discover`]: `FAIRGPU_REGION`
//! in local mode, else an ivshmem device's BAR2), claims a channel
//! ([`Channel::claim`]), and makes calls: synchronous ones wait for their
//! response; fire-and-forget ones return as soon as the descriptor is in the
//! ring and report errors at the next synchronous call; bulk data moves
//! through the channel's arena in pipelined chunks.
//!
//! Waiting is hybrid: spin for [`WaitConfig::spin`], then block until the
//! host's wake ([`WaitMode`], chosen per region by [`wake`]): on a futex in
//! the region (local mode); on the eventfd of the ivshmem device's MSI-X
//! vector 1, received through vfio-pci ([`vfio`]; a VM with an IOMMU); or,
//! where nothing can interrupt the wait (FUTEX_WAIT fails with EFAULT on the
//! PFN-mapped BAR, and the host's futex wake could not cross the VM boundary
//! anyway), with a bounded sleep backoff. A guest wakes a sleeping host with
//! the futex in local mode and, on an `ivshmem-doorbell` device, with its
//! Doorbell register ([`DoorbellRegister`]); on `ivshmem-plain` the host's
//! block slice bounds that wait. The host's heartbeat bounds how long a call
//! can wait for a dead host.
//!
//! Invariants: one `Channel` is used by one thread at a time (`&mut self`);
//! all region access goes through `RegionView`; the guest never trusts the
//! host's indices without the ring's range check.

pub mod arena;
pub mod channel;
pub mod cuda;
pub mod fdpass;
pub mod futex;
pub mod map;
pub mod pci;
pub mod region;
pub mod vfio;
pub mod wake;

use std::path::PathBuf;
use std::time::Duration;

pub use channel::{CallError, Channel, Reply, WaitMode, WaitStats};
pub use region::{DoorbellRegister, GuestRegion, HOST_PEER_ID, REGION_ENV};
pub use wake::{WaitPreference, WakeChoice, WAIT_ENV};

/// How a guest waits for the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitConfig {
    /// How long to spin before blocking (zero: block at once).
    pub spin: Duration,
    /// How long the host's heartbeat may stand still before calls fail
    /// (`None`: wait forever).
    pub host_timeout: Option<Duration>,
}

impl Default for WaitConfig {
    fn default() -> Self {
        WaitConfig {
            spin: Duration::from_micros(50),
            host_timeout: Some(Duration::from_secs(5)),
        }
    }
}

impl WaitConfig {
    /// Defaults overridden by `FAIRGPU_SPIN_US` and `FAIRGPU_HOST_TIMEOUT_MS`
    /// (0 = never time out). Unparseable values keep the default.
    pub fn from_env() -> Self {
        let mut c = WaitConfig::default();
        let num = |k: &str| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(us) = num("FAIRGPU_SPIN_US") {
            c.spin = Duration::from_micros(us);
        }
        if let Some(ms) = num("FAIRGPU_HOST_TIMEOUT_MS") {
            c.host_timeout = (ms > 0).then(|| Duration::from_millis(ms));
        }
        c
    }
}

/// Why a region or channel could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Nothing to open.
    #[error("FAIRGPU_REGION is not set and no ivshmem device (1af4:1110) holds a fairgpu region")]
    NoRegion,
    /// The file could not be mapped.
    #[error("cannot map {path}")]
    Map {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is too small to hold a header.
    #[error("{path} is too small to be a fairgpu region")]
    TooSmall {
        /// The file.
        path: PathBuf,
    },
    /// No magic (yet): not a region, or the host has not finished creating it.
    #[error("{path} holds no fairgpu region (no magic; is the host running?)")]
    NotARegion {
        /// The file.
        path: PathBuf,
    },
    /// The header failed validation.
    #[error("{path}: invalid region header")]
    Layout {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        #[source]
        source: fairgpu_protocol::layout::LayoutError,
    },
    /// [`WAIT_ENV`] asks for MSI-X and the region cannot have it.
    #[error("{path}: no MSI-X wake path: {why}")]
    NoInterruptPath {
        /// The region.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// [`WAIT_ENV`] asks for MSI-X and vfio refused.
    #[error("{path}: no MSI-X wake path through vfio")]
    Interrupt {
        /// The region.
        path: PathBuf,
        /// Why.
        #[source]
        source: vfio::VfioError,
    },
    /// Every channel has a live owner.
    #[error("all {0} channels are in use")]
    NoFreeChannel(u32),
    /// The host did not reset the channel for us.
    #[error("claiming channel {channel}")]
    Claim {
        /// The channel.
        channel: u32,
        /// Why.
        #[source]
        source: CallError,
    },
}
