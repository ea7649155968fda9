//! Fuzzes the validation of a region header: the 64 bytes at offset 0 of a
//! region, which a guest reads (and, in a VM, could have rewritten) before
//! computing where every channel lives.
//!
//! Input: 64 header bytes; then optionally 8 little-endian bytes giving the
//! mapped size (otherwise the header's own `region_size`); then optionally one
//! steering byte that helps the fuzzer past the checks it rarely guesses:
//! - bit 0: force the correct magic, version and header size;
//! - bit 1: where the count, ring and arena fields form a valid layout, force
//!   the derived stride, channels offset and region size;
//! - bit 2: read the 8 size bytes as slack added to `region_size`.
//!
//! Properties, for every header `Layout::from_header` accepts:
//! - the layout reproduces the header (every field but `reserved`);
//! - the region fits in the mapping;
//! - every channel's indices, slots and arena are in order, page aligned,
//!   disjoint from the next channel and inside `region_size()`;
//! - `channel(channels())` is `None`.

#![no_main]

use fairgpu_protocol::layout::{
    Layout, RegionConfig, RegionHeader, CHANNELS_OFF, CH_RESP_TAIL, MAGIC, VERSION,
};
use fairgpu_protocol::limits::{DESC_SIZE, PAGE};
use libfuzzer_sys::fuzz_target;

/// Little-endian field reader over exactly the 64 header bytes.
struct Fields<'a> {
    bytes: &'a [u8; 64],
    at: usize,
}

impl Fields<'_> {
    fn u32(&mut self) -> u32 {
        let mut w = [0u8; 4];
        w.copy_from_slice(&self.bytes[self.at..self.at + 4]);
        self.at += 4;
        u32::from_le_bytes(w)
    }

    fn u64(&mut self) -> u64 {
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.bytes[self.at..self.at + 8]);
        self.at += 8;
        u64::from_le_bytes(w)
    }
}

/// Decodes the header in the field order of `RegionHeader` (`#[repr(C)]`,
/// no padding).
fn decode(bytes: &[u8; 64]) -> RegionHeader {
    let mut f = Fields { bytes, at: 0 };
    let h = RegionHeader {
        magic: f.u64(),
        version: f.u32(),
        header_size: f.u32(),
        region_size: f.u64(),
        features: f.u64(),
        channel_count: f.u32(),
        ring_entries: f.u32(),
        arena_size: f.u32(),
        channel_stride: f.u32(),
        channels_offset: f.u64(),
        reserved: f.u64(),
    };
    assert_eq!(f.at, 64);
    h
}

fuzz_target!(|data: &[u8]| {
    let Some((head, rest)) = data.split_first_chunk::<64>() else {
        return;
    };
    let mut h = decode(head);
    let size_bytes = rest.first_chunk::<8>().map(|b| u64::from_le_bytes(*b));
    let steer = rest.get(8).copied().unwrap_or(0);

    if steer & 1 != 0 {
        h.magic = MAGIC;
        h.version = VERSION;
        h.header_size = 64;
    }
    if steer & 2 != 0 {
        let cfg = RegionConfig {
            channels: h.channel_count,
            ring_entries: h.ring_entries,
            arena_size: h.arena_size,
            features: h.features,
        };
        if let Ok(l) = Layout::new(&cfg) {
            let good = l.header();
            h.channel_stride = good.channel_stride;
            h.channels_offset = good.channels_offset;
            h.region_size = good.region_size;
        }
    }
    let mapped = match size_bytes {
        Some(n) if steer & 4 != 0 => h.region_size.saturating_add(n & 0xffff_ffff),
        Some(n) => n,
        None => h.region_size,
    };

    let Ok(layout) = Layout::from_header(&h, mapped) else {
        return;
    };

    assert_eq!(
        layout.header(),
        RegionHeader { reserved: 0, ..h },
        "accepted header not reproduced"
    );
    let region = layout.region_size();
    assert!(
        region as u64 <= mapped,
        "region of {region} bytes exceeds mapping of {mapped}"
    );

    let ring_bytes = layout.ring_entries() as usize * DESC_SIZE;
    let arena = layout.arena_size() as usize;
    let mut prev_end = CHANNELS_OFF;
    for ch in 0..layout.channels() {
        let Some(c) = layout.channel(ch) else {
            panic!("channel {ch} of {} missing", layout.channels());
        };
        assert!(c.base >= prev_end, "channel {ch} overlaps its predecessor");
        assert_eq!(c.base % PAGE, 0, "channel {ch} not page aligned");
        assert!(
            c.at(CH_RESP_TAIL) + 4 <= c.req_slots,
            "channel {ch}: indices overlap slots"
        );
        assert!(
            c.req_slots + ring_bytes <= c.resp_slots,
            "channel {ch}: request ring overlaps"
        );
        assert!(
            c.resp_slots + ring_bytes <= c.arena,
            "channel {ch}: response ring overlaps arena"
        );
        assert_eq!(c.arena % PAGE, 0, "channel {ch}: arena not page aligned");
        prev_end = c.arena + arena;
        assert!(
            prev_end <= region,
            "channel {ch} ends at {prev_end}, past region of {region}"
        );
    }
    assert_eq!(layout.channel(layout.channels()), None);
    assert_eq!(layout.channel(u32::MAX), None);
});
