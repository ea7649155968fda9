//! Named limits. Every size that comes from a header, a descriptor or a
//! configuration is checked against one of these before anything is
//! allocated or any offset is computed from it.

/// Size of one ring descriptor (request or response) in bytes: one cache line.
pub const DESC_SIZE: usize = 64;

/// Cache line size the layout is padded to. Indices written by different
/// sides never share a line.
pub const CACHE_LINE: usize = 64;

/// Page size the region's sub-structures are aligned to.
pub const PAGE: usize = 4096;

/// Fewest channels a region may have.
pub const MIN_CHANNELS: u32 = 1;
/// Most channels a region may have (one guest process per channel).
pub const MAX_CHANNELS: u32 = 256;

/// Fewest descriptors in one ring. Ring sizes are powers of two.
pub const MIN_RING_ENTRIES: u32 = 8;
/// Most descriptors in one ring.
pub const MAX_RING_ENTRIES: u32 = 4096;

/// Smallest data arena of a channel.
pub const MIN_ARENA: u32 = 64 * 1024;
/// Largest data arena of a channel.
pub const MAX_ARENA: u32 = 256 * 1024 * 1024;

/// Largest region either side will map.
pub const MAX_REGION: u64 = 64 * 1024 * 1024 * 1024;

/// Number of inline 64-bit arguments in a request.
pub const REQUEST_ARGS: usize = 5;
/// Number of inline 64-bit return values in a response.
pub const RESPONSE_VALS: usize = 5;
