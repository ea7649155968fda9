//! The region layout: a versioned header, a doorbell block, then N channels.
//!
//! ```text
//! 0x0000  RegionHeader (64 bytes, written once by the host before the magic)
//! 0x0080  host_sleeping  u32   guest reads, host writes
//! 0x00c0  doorbell       u32   futex word the host sleeps on; guests bump it
//! 0x0100  heartbeat      u64   bumped by the host every HEARTBEAT_MS
//! 0x1000  channel 0
//!         channel 1 ... (each `channel_stride` bytes, page aligned)
//! ```
//!
//! One channel (offsets from its start):
//!
//! ```text
//! 0x000  owner        u64  (generation << 32 | pid); pid 0 = free. Guests CAS it.
//! 0x008  guest_gen    u32  generation whose guest-owned indices are zeroed
//! 0x040  host_gen     u32  generation the host has reset the channel for
//! 0x044  host_state   u32  0 = serving, else a ChannelFailure code (host writes)
//! 0x080  guest_sleeping u32  guest writes, host reads
//! 0x0c0  guest_wake   u32  futex word the guest sleeps on; host bumps it
//! 0x100  req.head     u32  consumer (host) index
//! 0x140  req.tail     u32  producer (guest) index
//! 0x180  resp.head    u32  consumer (guest) index
//! 0x1c0  resp.tail    u32  producer (host) index
//! 0x200  request slots   ring_entries * 64
//!        response slots  ring_entries * 64
//!        arena           arena_size (page aligned)
//! ```
//!
//! Every index and flag lives on its own cache line so that the two sides
//! never write the same line.

use crate::limits::*;
use crate::wire::Pod;

/// `b"FAIRGPU\x01"` read as a little-endian u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FAIRGPU\x01");
/// The protocol version this crate speaks.
pub const VERSION: u32 = 1;

/// Feature bit: owner words hold host-visible pids (local mode), so the host
/// may check owner liveness itself. Absent for VM regions, where the guest's
/// pids mean nothing to the host.
pub const FEATURE_LOCAL_OWNERS: u64 = 1 << 0;
/// Every feature bit this version understands.
pub const KNOWN_FEATURES: u64 = FEATURE_LOCAL_OWNERS;

/// Offset of the host's "I am about to sleep" flag.
pub const HOST_SLEEPING_OFF: usize = 0x80;
/// Offset of the doorbell futex word the host sleeps on.
pub const DOORBELL_OFF: usize = 0xc0;
/// Offset of the host's heartbeat counter.
pub const HEARTBEAT_OFF: usize = 0x100;
/// How often the host bumps the heartbeat, in milliseconds.
pub const HEARTBEAT_MS: u64 = 50;
/// Where channel 0 starts.
pub const CHANNELS_OFF: usize = PAGE;

/// Channel-relative offset of the owner word.
pub const CH_OWNER: usize = 0x000;
/// Channel-relative offset of the generation whose guest-side indices the
/// claiming guest has zeroed (guest writes, Release; host reads, Acquire).
pub const CH_GUEST_GEN: usize = 0x008;
/// Channel-relative offset of the host's acknowledged generation.
pub const CH_HOST_GEN: usize = 0x040;
/// Channel-relative offset of the host's channel state.
pub const CH_HOST_STATE: usize = 0x044;
/// Channel-relative offset of the guest's sleeping flag.
pub const CH_GUEST_SLEEPING: usize = 0x080;
/// Channel-relative offset of the guest's wake futex word.
pub const CH_GUEST_WAKE: usize = 0x0c0;
/// Channel-relative offset of the request ring's head (host-owned).
pub const CH_REQ_HEAD: usize = 0x100;
/// Channel-relative offset of the request ring's tail (guest-owned).
pub const CH_REQ_TAIL: usize = 0x140;
/// Channel-relative offset of the response ring's head (guest-owned).
pub const CH_RESP_HEAD: usize = 0x180;
/// Channel-relative offset of the response ring's tail (host-owned).
pub const CH_RESP_TAIL: usize = 0x1c0;
/// Channel-relative offset of the request slots.
pub const CH_SLOTS: usize = 0x200;

/// The region header. Pinned at 64 bytes; written by the host once, before
/// it stores the magic.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RegionHeader {
    /// [`MAGIC`].
    pub magic: u64,
    /// [`VERSION`].
    pub version: u32,
    /// Size of this header in bytes (64).
    pub header_size: u32,
    /// Size of the whole region in bytes.
    pub region_size: u64,
    /// `FEATURE_*` bits.
    pub features: u64,
    /// Number of channels.
    pub channel_count: u32,
    /// Descriptors per ring (power of two).
    pub ring_entries: u32,
    /// Arena bytes per channel.
    pub arena_size: u32,
    /// Bytes from one channel to the next.
    pub channel_stride: u32,
    /// Offset of channel 0.
    pub channels_offset: u64,
    /// Zero.
    pub reserved: u64,
}

const _: () = assert!(std::mem::size_of::<RegionHeader>() == 64);
const _: () = assert!(std::mem::offset_of!(RegionHeader, channel_count) == 32);
const _: () = assert!(std::mem::offset_of!(RegionHeader, channels_offset) == 48);
const _: () = assert!(CH_SLOTS.is_multiple_of(CACHE_LINE) && HEARTBEAT_OFF + 8 <= CHANNELS_OFF);

// SAFETY: repr(C), fields u64,u32,u32,u64,u64,u32,u32,u32,u32,u64,u64 with no
// padding (size asserted to 64); any bit pattern is a valid value.
unsafe impl Pod for RegionHeader {}

/// What a host asks for when it creates a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionConfig {
    /// Number of channels (guest processes served at once).
    pub channels: u32,
    /// Descriptors per ring; a power of two.
    pub ring_entries: u32,
    /// Arena bytes per channel; a multiple of the page size.
    pub arena_size: u32,
    /// `FEATURE_*` bits.
    pub features: u64,
}

impl Default for RegionConfig {
    fn default() -> Self {
        RegionConfig {
            channels: 4,
            ring_entries: 256,
            arena_size: 4 * 1024 * 1024,
            features: FEATURE_LOCAL_OWNERS,
        }
    }
}

/// A layout that passed validation: every offset it yields lies inside the
/// region. Both sides compute it; neither re-reads the header afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    channels: u32,
    ring_entries: u32,
    arena_size: u32,
    channel_stride: usize,
    region_size: usize,
    features: u64,
}

/// Why a layout or header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Not a fairgpu region.
    #[error("bad magic {found:#018x} (not a fairgpu region)")]
    BadMagic {
        /// What was found at offset 0.
        found: u64,
    },
    /// A protocol version this side does not speak.
    #[error("protocol version {found} unsupported (this side speaks {VERSION})")]
    BadVersion {
        /// The header's version.
        found: u32,
    },
    /// A field is outside its named limit or inconsistent with the others.
    #[error("{field} = {value} is invalid: {why}")]
    Field {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u64,
        /// The rule it breaks.
        why: &'static str,
    },
    /// The mapped size disagrees with the header.
    #[error("region maps {mapped} bytes but the layout needs {needed}")]
    SizeMismatch {
        /// Bytes actually mapped.
        mapped: u64,
        /// Bytes the layout needs.
        needed: u64,
    },
}

fn field(field: &'static str, value: u64, why: &'static str) -> LayoutError {
    LayoutError::Field { field, value, why }
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

impl Layout {
    /// Computes and checks the layout for a configuration.
    pub fn new(cfg: &RegionConfig) -> Result<Layout, LayoutError> {
        if !(MIN_CHANNELS..=MAX_CHANNELS).contains(&cfg.channels) {
            return Err(field("channels", cfg.channels.into(), "outside 1..=256"));
        }
        if !(MIN_RING_ENTRIES..=MAX_RING_ENTRIES).contains(&cfg.ring_entries)
            || !cfg.ring_entries.is_power_of_two()
        {
            return Err(field(
                "ring_entries",
                cfg.ring_entries.into(),
                "must be a power of two in 8..=4096",
            ));
        }
        if !(MIN_ARENA..=MAX_ARENA).contains(&cfg.arena_size)
            || !(cfg.arena_size as usize).is_multiple_of(PAGE)
        {
            return Err(field(
                "arena_size",
                cfg.arena_size.into(),
                "must be a multiple of 4096 in 64 KiB..=256 MiB",
            ));
        }
        if cfg.features & !KNOWN_FEATURES != 0 {
            return Err(field("features", cfg.features, "unknown feature bits"));
        }
        let rings = 2 * cfg.ring_entries as usize * DESC_SIZE;
        let arena_off = round_up(CH_SLOTS + rings, PAGE);
        let stride = arena_off + cfg.arena_size as usize;
        let size = CHANNELS_OFF as u64 + stride as u64 * u64::from(cfg.channels);
        if size > MAX_REGION || stride > u32::MAX as usize {
            return Err(field("region_size", size, "exceeds 64 GiB"));
        }
        Ok(Layout {
            channels: cfg.channels,
            ring_entries: cfg.ring_entries,
            arena_size: cfg.arena_size,
            channel_stride: stride,
            region_size: size as usize,
            features: cfg.features,
        })
    }

    /// Validates a header read from a region of `mapped` bytes.
    pub fn from_header(h: &RegionHeader, mapped: u64) -> Result<Layout, LayoutError> {
        if h.magic != MAGIC {
            return Err(LayoutError::BadMagic { found: h.magic });
        }
        if h.version != VERSION {
            return Err(LayoutError::BadVersion { found: h.version });
        }
        if h.header_size as usize != std::mem::size_of::<RegionHeader>() {
            return Err(field("header_size", h.header_size.into(), "must be 64"));
        }
        let layout = Layout::new(&RegionConfig {
            channels: h.channel_count,
            ring_entries: h.ring_entries,
            arena_size: h.arena_size,
            features: h.features,
        })?;
        if h.channel_stride as usize != layout.channel_stride {
            return Err(field(
                "channel_stride",
                h.channel_stride.into(),
                "disagrees with layout",
            ));
        }
        if h.reserved != 0 {
            return Err(field("reserved", h.reserved, "must be zero"));
        }
        if h.channels_offset != CHANNELS_OFF as u64 {
            return Err(field("channels_offset", h.channels_offset, "must be 4096"));
        }
        if h.region_size != layout.region_size as u64 {
            return Err(field("region_size", h.region_size, "disagrees with layout"));
        }
        // A BAR may be larger than the region (rounded to a power of two);
        // it must never be smaller.
        if mapped < h.region_size {
            return Err(LayoutError::SizeMismatch {
                mapped,
                needed: h.region_size,
            });
        }
        Ok(layout)
    }

    /// The header the host writes for this layout.
    pub fn header(&self) -> RegionHeader {
        RegionHeader {
            magic: MAGIC,
            version: VERSION,
            header_size: std::mem::size_of::<RegionHeader>() as u32,
            region_size: self.region_size as u64,
            features: self.features,
            channel_count: self.channels,
            ring_entries: self.ring_entries,
            arena_size: self.arena_size,
            channel_stride: self.channel_stride as u32,
            channels_offset: CHANNELS_OFF as u64,
            reserved: 0,
        }
    }

    /// Number of channels.
    pub fn channels(&self) -> u32 {
        self.channels
    }
    /// Descriptors per ring.
    pub fn ring_entries(&self) -> u32 {
        self.ring_entries
    }
    /// Arena bytes per channel.
    pub fn arena_size(&self) -> u32 {
        self.arena_size
    }
    /// Total region bytes.
    pub fn region_size(&self) -> usize {
        self.region_size
    }
    /// Feature bits.
    pub fn features(&self) -> u64 {
        self.features
    }

    /// Offsets of channel `ch`, or `None` if there is no such channel.
    pub fn channel(&self, ch: u32) -> Option<ChannelOffsets> {
        if ch >= self.channels {
            return None;
        }
        let base = CHANNELS_OFF + ch as usize * self.channel_stride;
        let slots = base + CH_SLOTS;
        let ring_bytes = self.ring_entries as usize * DESC_SIZE;
        Some(ChannelOffsets {
            base,
            req_slots: slots,
            resp_slots: slots + ring_bytes,
            arena: base + self.channel_stride - self.arena_size as usize,
        })
    }
}

/// Absolute offsets of one channel's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelOffsets {
    /// Start of the channel (its owner word).
    pub base: usize,
    /// First request slot.
    pub req_slots: usize,
    /// First response slot.
    pub resp_slots: usize,
    /// First arena byte.
    pub arena: usize,
}

impl ChannelOffsets {
    /// Absolute offset of a channel-relative `CH_*` field.
    pub fn at(&self, rel: usize) -> usize {
        self.base + rel
    }
}

/// The owner word of a channel: a generation (bumped at every claim) and the
/// owning process id (0 when free).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Bumped at every claim; the host resets the channel when it changes.
    pub generation: u32,
    /// Owning process, 0 when the channel is free.
    pub pid: u32,
}

impl Owner {
    /// Unpacks an owner word.
    pub fn from_word(w: u64) -> Owner {
        Owner {
            generation: (w >> 32) as u32,
            pid: w as u32,
        }
    }
    /// Packs an owner word.
    pub fn word(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.pid)
    }
    /// Whether no process holds the channel.
    pub fn is_free(self) -> bool {
        self.pid == 0
    }
}

/// Why the host stopped serving a channel (the `host_state` word).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChannelFailure {
    /// The request ring's indices are impossible (tail - head > entries).
    RequestRingCorrupt = 1,
    /// The response ring's indices are impossible.
    ResponseRingCorrupt = 2,
    /// The host is shutting down.
    HostShutdown = 3,
    /// The worker process serving the region died; the daemon failed every
    /// established channel and restarts the worker. The channel's host-side
    /// state (contexts, memory, handles) is gone: release and re-claim.
    WorkerCrashed = 4,
    /// A kernel of this channel's context ran past its VM's limit on one
    /// request's device time (the runaway guard): the worker serving the
    /// region ended so that the GPU would end the kernel, and the guest's
    /// calls fail with CUDA_ERROR_LAUNCH_TIMEOUT. Release and re-claim.
    RunawayKernel = 5,
}

impl ChannelFailure {
    /// Decodes a `host_state` word; `None` for 0 (serving) or unknown values.
    pub fn from_state(v: u32) -> Option<ChannelFailure> {
        match v {
            1 => Some(ChannelFailure::RequestRingCorrupt),
            2 => Some(ChannelFailure::ResponseRingCorrupt),
            3 => Some(ChannelFailure::HostShutdown),
            4 => Some(ChannelFailure::WorkerCrashed),
            5 => Some(ChannelFailure::RunawayKernel),
            _ => None,
        }
    }
}

impl std::fmt::Display for ChannelFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChannelFailure::RequestRingCorrupt => "request ring indices corrupt",
            ChannelFailure::ResponseRingCorrupt => "response ring indices corrupt",
            ChannelFailure::HostShutdown => "host shut down",
            ChannelFailure::WorkerCrashed => "worker process crashed",
            ChannelFailure::RunawayKernel => {
                "a kernel ran past the VM's limit on one request's device time (runaway guard)"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout_is_page_aligned_and_disjoint() {
        let l = Layout::new(&RegionConfig::default()).unwrap();
        let h = l.header();
        assert_eq!(Layout::from_header(&h, l.region_size() as u64), Ok(l));
        let mut prev_end = CHANNELS_OFF;
        for ch in 0..l.channels() {
            let c = l.channel(ch).unwrap();
            assert_eq!(c.base, prev_end);
            assert_eq!(c.base % PAGE, 0);
            assert_eq!(c.arena % PAGE, 0);
            assert!(c.resp_slots + l.ring_entries() as usize * DESC_SIZE <= c.arena);
            prev_end = c.arena + l.arena_size() as usize;
        }
        assert_eq!(prev_end, l.region_size());
        assert_eq!(l.channel(l.channels()), None);
    }

    #[test]
    fn header_checks_each_field() {
        let l = Layout::new(&RegionConfig::default()).unwrap();
        let good = l.header();
        let size = l.region_size() as u64;
        let cases: Vec<(RegionHeader, &str)> = vec![
            (RegionHeader { magic: 1, ..good }, "magic"),
            (RegionHeader { version: 2, ..good }, "version"),
            (
                RegionHeader {
                    header_size: 128,
                    ..good
                },
                "header_size",
            ),
            (
                RegionHeader {
                    channel_count: 0,
                    ..good
                },
                "channels",
            ),
            (
                RegionHeader {
                    channel_count: 100_000,
                    ..good
                },
                "channels",
            ),
            (
                RegionHeader {
                    ring_entries: 100,
                    ..good
                },
                "ring_entries",
            ),
            (
                RegionHeader {
                    arena_size: 12345,
                    ..good
                },
                "arena_size",
            ),
            (
                RegionHeader {
                    features: 1 << 40,
                    ..good
                },
                "features",
            ),
            (
                RegionHeader {
                    channel_stride: 4096,
                    ..good
                },
                "channel_stride",
            ),
            (
                RegionHeader {
                    channels_offset: 0,
                    ..good
                },
                "channels_offset",
            ),
            (
                RegionHeader {
                    region_size: 1,
                    ..good
                },
                "region_size",
            ),
        ];
        for (h, what) in cases {
            assert!(Layout::from_header(&h, size).is_err(), "{what} accepted");
        }
        assert!(matches!(
            Layout::from_header(&good, size - 1),
            Err(LayoutError::SizeMismatch { .. })
        ));
        assert!(
            Layout::from_header(&good, size * 2).is_ok(),
            "larger BAR is fine"
        );
    }

    #[test]
    fn channel_failures_round_trip_through_host_state() {
        for f in [
            ChannelFailure::RequestRingCorrupt,
            ChannelFailure::ResponseRingCorrupt,
            ChannelFailure::HostShutdown,
            ChannelFailure::WorkerCrashed,
            ChannelFailure::RunawayKernel,
        ] {
            assert_eq!(ChannelFailure::from_state(f as u32), Some(f));
        }
        assert_eq!(ChannelFailure::from_state(0), None);
        assert_eq!(ChannelFailure::from_state(6), None);
    }

    #[test]
    fn owner_word_round_trips() {
        let o = Owner {
            generation: 7,
            pid: 4242,
        };
        assert_eq!(Owner::from_word(o.word()), o);
        assert!(Owner::from_word(7 << 32).is_free());
    }
}
