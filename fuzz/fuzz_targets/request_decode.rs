//! Fuzzes the host's decoding of a request descriptor: the 64 bytes a guest
//! writes into a request slot, then the validation every request passes
//! before the host acts on it.
//!
//! Input: 64 descriptor bytes, then optionally 4 little-endian bytes giving
//! the channel's arena size (otherwise the default arena size).
//!
//! Properties:
//! - decoding never panics, whatever the bytes;
//! - `to_bytes(from_bytes(b)) == b` (the wire format has no slack bits);
//! - a request that validates has an arena slice inside the arena.

#![no_main]

use fairgpu_protocol::limits::DESC_SIZE;
use fairgpu_protocol::wire::Request;
use fairgpu_protocol::RegionConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((desc, rest)) = data.split_first_chunk::<DESC_SIZE>() else {
        return;
    };
    let arena = match rest.first_chunk::<4>() {
        Some(b) => u32::from_le_bytes(*b),
        None => RegionConfig::default().arena_size,
    };

    let req = Request::from_bytes(desc);
    assert_eq!(&req.to_bytes(), desc, "wire encoding does not round-trip");

    if let Ok(valid) = req.validate(arena) {
        assert!(
            valid.arena.start <= valid.arena.end,
            "inverted arena slice {:?}",
            valid.arena
        );
        assert!(
            valid.arena.end <= arena,
            "arena slice {:?} outside arena of {arena}",
            valid.arena
        );
        assert_eq!(valid.arena.start, req.arena_off);
        assert_eq!(valid.arena.end - valid.arena.start, req.arena_len);
        assert_eq!(valid.call_id, req.call_id);
        assert_eq!(valid.args, req.args);
    }
});
