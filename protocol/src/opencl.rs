//! Wire conventions of the OpenCL opcodes (`0x1000..=0x1fff`).
//!
//! The guest's installable client driver (guest-cl) keeps platform,
//! device and context objects to itself: a channel has exactly one host
//! OpenCL context on one host device, created at the channel's first
//! OpenCL request. Queues, buffers, programs, kernels and events are
//! opaque [`crate::handle::Handle`] values valid only on the channel that
//! created them, except events: the guest names an event with an id of its
//! own choosing (non-zero, unique among the channel's live events), so
//! that a fire-and-forget enqueue can produce one. The host keeps at most
//! [`MAX_EVENTS`] live events per channel and fails a request that would
//! reuse a live id.
//!
//! # Status codes
//! A response's `status` is 0 on success. An OpenCL error `e` (negative)
//! travels as [`cl_status`]`(e)` = `CL_STATUS_BASE + (-e)`; the transport's
//! own failures (unknown opcode, bad arena slice, a dead channel) stay
//! CUresult values, which the guest maps with [`cl_error`].
//!
//! # Enqueues
//! Every enqueue names its queue in `args[0]` and the event it creates in
//! `args[4]` (0: none). Wait lists travel in a preceding
//! [`crate::Opcode::ClWaitList`] request (a barrier with the wait list on
//! the same in-order queue, which orders exactly like the wait list).

use crate::wire::{Pod, Status};

/// First opcode of the OpenCL range.
pub const CL_FIRST: u16 = 0x1000;
/// Last opcode of the OpenCL range.
pub const CL_LAST: u16 = 0x1fff;

/// Where OpenCL error codes start in [`crate::wire::Status`] space.
pub const CL_STATUS_BASE: u32 = 0x0001_0000;

/// The response status that carries OpenCL error `e` (`e < 0`).
pub fn cl_status(e: i32) -> Status {
    Status(CL_STATUS_BASE + e.unsigned_abs())
}

/// The OpenCL error a guest reports for a response status: 0 for success,
/// the carried code for an OpenCL error, and the nearest OpenCL error for
/// a transport failure.
pub fn cl_error(s: Status) -> i32 {
    match s.0 {
        0 => 0,
        n if n > CL_STATUS_BASE && n < CL_STATUS_BASE + 0x1_0000 => -((n - CL_STATUS_BASE) as i32),
        1 => CL_INVALID_VALUE,
        2 => CL_OUT_OF_RESOURCES,
        400 => CL_INVALID_VALUE,
        801 => CL_INVALID_OPERATION,
        _ => CL_OUT_OF_RESOURCES,
    }
}

/// CL_SUCCESS.
pub const CL_SUCCESS: i32 = 0;
/// CL_DEVICE_NOT_FOUND.
pub const CL_DEVICE_NOT_FOUND: i32 = -1;
/// CL_MEM_OBJECT_ALLOCATION_FAILURE.
pub const CL_MEM_OBJECT_ALLOCATION_FAILURE: i32 = -4;
/// CL_OUT_OF_RESOURCES.
pub const CL_OUT_OF_RESOURCES: i32 = -5;
/// CL_OUT_OF_HOST_MEMORY.
pub const CL_OUT_OF_HOST_MEMORY: i32 = -6;
/// CL_PROFILING_INFO_NOT_AVAILABLE.
pub const CL_PROFILING_INFO_NOT_AVAILABLE: i32 = -7;
/// CL_IMAGE_FORMAT_MISMATCH.
pub const CL_IMAGE_FORMAT_MISMATCH: i32 = -9;
/// CL_INVALID_IMAGE_FORMAT_DESCRIPTOR.
pub const CL_INVALID_IMAGE_FORMAT_DESCRIPTOR: i32 = -39;
/// CL_INVALID_IMAGE_SIZE.
pub const CL_INVALID_IMAGE_SIZE: i32 = -40;
/// CL_INVALID_SAMPLER.
pub const CL_INVALID_SAMPLER: i32 = -41;
/// CL_INVALID_IMAGE_DESCRIPTOR.
pub const CL_INVALID_IMAGE_DESCRIPTOR: i32 = -65;
/// CL_BUILD_PROGRAM_FAILURE.
pub const CL_BUILD_PROGRAM_FAILURE: i32 = -11;
/// CL_INVALID_VALUE.
pub const CL_INVALID_VALUE: i32 = -30;
/// CL_INVALID_DEVICE.
pub const CL_INVALID_DEVICE: i32 = -33;
/// CL_INVALID_COMMAND_QUEUE.
pub const CL_INVALID_COMMAND_QUEUE: i32 = -36;
/// CL_INVALID_MEM_OBJECT.
pub const CL_INVALID_MEM_OBJECT: i32 = -38;
/// CL_INVALID_BINARY.
pub const CL_INVALID_BINARY: i32 = -42;
/// CL_INVALID_BUILD_OPTIONS.
pub const CL_INVALID_BUILD_OPTIONS: i32 = -43;
/// CL_INVALID_PROGRAM.
pub const CL_INVALID_PROGRAM: i32 = -44;
/// CL_INVALID_PROGRAM_EXECUTABLE.
pub const CL_INVALID_PROGRAM_EXECUTABLE: i32 = -45;
/// CL_INVALID_KERNEL_NAME.
pub const CL_INVALID_KERNEL_NAME: i32 = -46;
/// CL_INVALID_KERNEL.
pub const CL_INVALID_KERNEL: i32 = -48;
/// CL_INVALID_ARG_INDEX.
pub const CL_INVALID_ARG_INDEX: i32 = -49;
/// CL_INVALID_ARG_VALUE.
pub const CL_INVALID_ARG_VALUE: i32 = -50;
/// CL_INVALID_ARG_SIZE.
pub const CL_INVALID_ARG_SIZE: i32 = -51;
/// CL_INVALID_KERNEL_ARGS.
pub const CL_INVALID_KERNEL_ARGS: i32 = -52;
/// CL_INVALID_WORK_DIMENSION.
pub const CL_INVALID_WORK_DIMENSION: i32 = -53;
/// CL_INVALID_WORK_GROUP_SIZE.
pub const CL_INVALID_WORK_GROUP_SIZE: i32 = -54;
/// CL_INVALID_GLOBAL_OFFSET.
pub const CL_INVALID_GLOBAL_OFFSET: i32 = -56;
/// CL_INVALID_EVENT_WAIT_LIST.
pub const CL_INVALID_EVENT_WAIT_LIST: i32 = -57;
/// CL_INVALID_EVENT.
pub const CL_INVALID_EVENT: i32 = -58;
/// CL_INVALID_OPERATION.
pub const CL_INVALID_OPERATION: i32 = -59;
/// CL_INVALID_BUFFER_SIZE.
pub const CL_INVALID_BUFFER_SIZE: i32 = -61;
/// CL_INVALID_GLOBAL_WORK_SIZE.
pub const CL_INVALID_GLOBAL_WORK_SIZE: i32 = -63;

/// Most live events per channel.
pub const MAX_EVENTS: usize = 1 << 16;
/// Most events in one wait list.
pub const MAX_WAIT_LIST: usize = 1024;
/// Most bytes of one program's source or binary.
pub const MAX_PROGRAM_BYTES: u64 = 64 * 1024 * 1024;
/// Longest build options string.
pub const MAX_BUILD_OPTIONS: usize = 16 * 1024;
/// Most arguments of one kernel.
pub const MAX_KERNEL_ARGS: u32 = 256;
/// Most bytes of one by-value kernel argument.
pub const MAX_ARG_BYTES: u32 = 4096;
/// Most bytes of one fill pattern (OpenCL allows 1..=128, a power of two).
pub const MAX_PATTERN: usize = 128;
/// Most bytes of one device or program info value returned.
pub const MAX_INFO_BYTES: usize = 64 * 1024;

/// Kind of one kernel argument in an [`NdRangeHeader`]'s argument list.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// `size` bytes by value follow (padded to 8).
    Bytes = 0,
    /// A buffer: one u64 follows, the buffer handle (0: a NULL `cl_mem`).
    Mem = 1,
    /// `__local` memory of `size` bytes; nothing follows.
    Local = 2,
    /// A sampler: one u64 follows, the sampler handle.
    Sampler = 3,
}

impl ArgKind {
    /// Decodes a kind word.
    pub fn from_u32(v: u32) -> Option<ArgKind> {
        match v {
            0 => Some(ArgKind::Bytes),
            1 => Some(ArgKind::Mem),
            2 => Some(ArgKind::Local),
            3 => Some(ArgKind::Sampler),
            _ => None,
        }
    }
}

/// The start of a `ClNdRange` request's arena slice: the geometry, then
/// `nargs` arguments, each an 8-byte `{kind: u32, size: u32}` followed by
/// its payload padded to a multiple of 8 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NdRangeHeader {
    /// Work dimensions, 1..=3.
    pub dims: u32,
    /// 1 when `local` is given, 0 to let the host device choose.
    pub has_local: u32,
    /// Global work offset per dimension.
    pub offset: [u64; 3],
    /// Global work size per dimension.
    pub global: [u64; 3],
    /// Work-group size per dimension (when `has_local`).
    pub local: [u64; 3],
    /// Number of arguments that follow.
    pub nargs: u32,
    /// Zero.
    pub reserved: u32,
}

const _: () = assert!(size_of::<NdRangeHeader>() == 88);
// SAFETY: repr(C); u32,u32, three [u64;3], u32,u32: no padding (size
// asserted: 8 + 72 + 8); every bit pattern is a valid value.
unsafe impl Pod for NdRangeHeader {}

/// Size of [`NdRangeHeader`] on the wire.
pub const NDRANGE_HEADER: usize = 88;

impl NdRangeHeader {
    /// Encodes the header as little-endian bytes.
    pub fn to_bytes(&self) -> [u8; NDRANGE_HEADER] {
        let mut b = [0u8; NDRANGE_HEADER];
        b[0..4].copy_from_slice(&self.dims.to_le_bytes());
        b[4..8].copy_from_slice(&self.has_local.to_le_bytes());
        let words = self.offset.iter().chain(&self.global).chain(&self.local);
        for (i, w) in words.enumerate() {
            b[8 + 8 * i..16 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        b[80..84].copy_from_slice(&self.nargs.to_le_bytes());
        b[84..88].copy_from_slice(&self.reserved.to_le_bytes());
        b
    }

    /// Decodes a header from its little-endian bytes.
    pub fn from_bytes(b: &[u8; NDRANGE_HEADER]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let three = |base: usize| [u64_at(base), u64_at(base + 8), u64_at(base + 16)];
        NdRangeHeader {
            dims: u32_at(0),
            has_local: u32_at(4),
            offset: three(8),
            global: three(32),
            local: three(56),
            nargs: u32_at(80),
            reserved: u32_at(84),
        }
    }
}

/// One decoded kernel argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelArg {
    /// By-value bytes.
    Bytes(Vec<u8>),
    /// A buffer handle (0: NULL).
    Mem(u64),
    /// `__local` bytes.
    Local(u32),
    /// A sampler handle.
    Sampler(u64),
}

/// Why an argument list did not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// The list ends before its last argument.
    #[error("argument list truncated at argument {0}")]
    Truncated(u32),
    /// An argument's kind word is not an [`ArgKind`].
    #[error("argument {0} has an unknown kind")]
    Kind(u32),
    /// An argument is larger than [`MAX_ARG_BYTES`] (or a buffer's size is
    /// not 8).
    #[error("argument {0} has a bad size")]
    Size(u32),
    /// More arguments than [`MAX_KERNEL_ARGS`].
    #[error("too many arguments")]
    TooMany,
}

/// Appends one argument to an encoded argument list.
pub fn encode_arg(out: &mut Vec<u8>, arg: &KernelArg) {
    let (kind, size, payload): (ArgKind, u32, &[u8]) = match arg {
        KernelArg::Bytes(b) => (ArgKind::Bytes, b.len() as u32, b),
        KernelArg::Mem(_) => (ArgKind::Mem, 8, &[]),
        KernelArg::Local(n) => (ArgKind::Local, *n, &[]),
        KernelArg::Sampler(_) => (ArgKind::Sampler, 8, &[]),
    };
    out.extend_from_slice(&(kind as u32).to_le_bytes());
    out.extend_from_slice(&size.to_le_bytes());
    match arg {
        KernelArg::Mem(h) | KernelArg::Sampler(h) => out.extend_from_slice(&h.to_le_bytes()),
        _ => {
            out.extend_from_slice(payload);
            out.resize(out.len().next_multiple_of(8), 0);
        }
    }
}

/// Decodes `nargs` arguments from `b`, checking every size against the
/// limits before anything is copied.
pub fn decode_args(mut b: &[u8], nargs: u32) -> Result<Vec<KernelArg>, ArgsError> {
    if nargs > MAX_KERNEL_ARGS {
        return Err(ArgsError::TooMany);
    }
    let mut out = Vec::with_capacity(nargs as usize);
    for i in 0..nargs {
        if b.len() < 8 {
            return Err(ArgsError::Truncated(i));
        }
        let kind = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let size = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        b = &b[8..];
        let kind = ArgKind::from_u32(kind).ok_or(ArgsError::Kind(i))?;
        match kind {
            ArgKind::Bytes => {
                if size == 0 || size > MAX_ARG_BYTES {
                    return Err(ArgsError::Size(i));
                }
                let padded = (size as usize).next_multiple_of(8);
                if b.len() < padded {
                    return Err(ArgsError::Truncated(i));
                }
                out.push(KernelArg::Bytes(b[..size as usize].to_vec()));
                b = &b[padded..];
            }
            ArgKind::Mem | ArgKind::Sampler => {
                if size != 8 {
                    return Err(ArgsError::Size(i));
                }
                if b.len() < 8 {
                    return Err(ArgsError::Truncated(i));
                }
                let mut w = [0u8; 8];
                w.copy_from_slice(&b[..8]);
                let h = u64::from_le_bytes(w);
                out.push(if kind == ArgKind::Mem {
                    KernelArg::Mem(h)
                } else {
                    KernelArg::Sampler(h)
                });
                b = &b[8..];
            }
            ArgKind::Local => {
                if size == 0 {
                    return Err(ArgsError::Size(i));
                }
                out.push(KernelArg::Local(size));
            }
        }
    }
    Ok(out)
}

/// The description of a new image, the arena of a `ClCreateImage`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageDesc {
    /// `cl_channel_order`.
    pub order: u32,
    /// `cl_channel_type`.
    pub channel_type: u32,
    /// `cl_mem_object_type`: 1D, 1D array, 2D, 2D array or 3D (no 1D
    /// buffer images).
    pub image_type: u32,
    /// Zero.
    pub reserved: u32,
    /// Width in pixels.
    pub width: u64,
    /// Height in pixels (2D, 2D array, 3D).
    pub height: u64,
    /// Depth in pixels (3D).
    pub depth: u64,
    /// Images in an array (1D and 2D arrays).
    pub array_size: u64,
}

/// Size of [`ImageDesc`] on the wire.
pub const IMAGE_DESC: usize = 48;
const _: () = assert!(size_of::<ImageDesc>() == IMAGE_DESC);
// SAFETY: repr(C); four u32 then four u64, no padding (size asserted);
// every bit pattern is a valid value.
unsafe impl Pod for ImageDesc {}

/// `CL_MEM_OBJECT_IMAGE2D`.
pub const IMAGE2D: u32 = 0x10F1;
/// `CL_MEM_OBJECT_IMAGE3D`.
pub const IMAGE3D: u32 = 0x10F2;
/// `CL_MEM_OBJECT_IMAGE2D_ARRAY`.
pub const IMAGE2D_ARRAY: u32 = 0x10F3;
/// `CL_MEM_OBJECT_IMAGE1D`.
pub const IMAGE1D: u32 = 0x10F4;
/// `CL_MEM_OBJECT_IMAGE1D_ARRAY`.
pub const IMAGE1D_ARRAY: u32 = 0x10F5;

impl ImageDesc {
    /// Encodes the description as little-endian bytes.
    pub fn to_bytes(&self) -> [u8; IMAGE_DESC] {
        let mut b = [0u8; IMAGE_DESC];
        for (i, w) in [
            self.order,
            self.channel_type,
            self.image_type,
            self.reserved,
        ]
        .iter()
        .enumerate()
        {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        for (i, w) in [self.width, self.height, self.depth, self.array_size]
            .iter()
            .enumerate()
        {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Decodes a description from its little-endian bytes.
    pub fn from_bytes(b: &[u8; IMAGE_DESC]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        ImageDesc {
            order: u32_at(0),
            channel_type: u32_at(4),
            image_type: u32_at(8),
            reserved: u32_at(12),
            width: u64_at(16),
            height: u64_at(24),
            depth: u64_at(32),
            array_size: u64_at(40),
        }
    }

    /// The image's extent as (x, y, z) in pixels, with array layers as the
    /// last coordinate, as regions address it; `None` for a type this
    /// protocol does not carry.
    pub fn extent(&self) -> Option<[u64; 3]> {
        Some(match self.image_type {
            IMAGE1D => [self.width, 1, 1],
            IMAGE1D_ARRAY => [self.width, self.array_size, 1],
            IMAGE2D => [self.width, self.height, 1],
            IMAGE2D_ARRAY => [self.width, self.height, self.array_size],
            IMAGE3D => [self.width, self.height, self.depth],
            _ => return None,
        })
    }
}

/// The box of an image read or write: origin and region in pixels (array
/// layers as the last coordinate), at the start of the arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageRegion {
    /// First pixel.
    pub origin: [u64; 3],
    /// Pixels per dimension (all ≥ 1).
    pub region: [u64; 3],
}

/// Size of [`ImageRegion`] on the wire.
pub const IMAGE_REGION: usize = 48;

impl ImageRegion {
    /// Encodes the region as six little-endian u64 words.
    pub fn to_bytes(&self) -> Vec<u8> {
        encode_words(&[
            self.origin[0],
            self.origin[1],
            self.origin[2],
            self.region[0],
            self.region[1],
            self.region[2],
        ])
    }

    /// Decodes the first 48 bytes of `b`.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let w = decode_words(b.get(..IMAGE_REGION)?)?;
        Some(ImageRegion {
            origin: [w[0], w[1], w[2]],
            region: [w[3], w[4], w[5]],
        })
    }

    /// Whether the box is non-empty and lies within `extent`, with no
    /// overflow.
    pub fn within(&self, extent: [u64; 3]) -> bool {
        (0..3).all(|i| {
            self.region[i] > 0
                && self.origin[i]
                    .checked_add(self.region[i])
                    .is_some_and(|end| end <= extent[i])
        })
    }

    /// Bytes of the box packed at `elem` bytes a pixel, if that fits a u64.
    pub fn bytes(&self, elem: u64) -> Option<u64> {
        self.region
            .iter()
            .try_fold(elem, |acc, &r| acc.checked_mul(r))
    }
}

/// Encodes a list of u64 words (event ids, copy parameters) little-endian.
pub fn encode_words(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Decodes little-endian u64 words; `None` unless `b` is a whole number
/// of words.
pub fn decode_words(b: &[u8]) -> Option<Vec<u64>> {
    if !b.len().is_multiple_of(8) {
        return None;
    }
    Some(
        b.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_transport_errors_map() {
        for e in [-1, -5, -11, -30, -59, -63, -1000] {
            assert_eq!(cl_error(cl_status(e)), e);
        }
        assert_eq!(cl_error(Status::SUCCESS), 0);
        assert_eq!(cl_error(Status::NOT_SUPPORTED), CL_INVALID_OPERATION);
        assert_eq!(cl_error(Status::DEINITIALIZED), CL_OUT_OF_RESOURCES);
        assert_eq!(cl_error(Status::INVALID_VALUE), CL_INVALID_VALUE);
    }

    #[test]
    fn header_round_trips() {
        let h = NdRangeHeader {
            dims: 2,
            has_local: 1,
            offset: [1, 2, 3],
            global: [64, 32, 1],
            local: [8, 4, 1],
            nargs: 3,
            reserved: 0,
        };
        assert_eq!(NdRangeHeader::from_bytes(&h.to_bytes()), h);
    }

    #[test]
    fn arguments_round_trip_and_bad_lists_fail() {
        let args = vec![
            KernelArg::Mem(0x1_0000_0002),
            KernelArg::Bytes(vec![1, 2, 3]),
            KernelArg::Local(256),
            KernelArg::Bytes(vec![9; 16]),
            KernelArg::Mem(0),
            KernelArg::Sampler(3),
        ];
        let mut b = Vec::new();
        for a in &args {
            encode_arg(&mut b, a);
        }
        assert_eq!(decode_args(&b, 6).unwrap(), args);
        assert_eq!(
            decode_args(&b[..b.len() - 1], 6),
            Err(ArgsError::Truncated(5))
        );
        assert_eq!(decode_args(&b, 7), Err(ArgsError::Truncated(6)));
        assert_eq!(
            decode_args(&b, MAX_KERNEL_ARGS + 1),
            Err(ArgsError::TooMany)
        );
        let mut bad = b.clone();
        bad[0] = 7;
        assert_eq!(decode_args(&bad, 6), Err(ArgsError::Kind(0)));
        let mut huge = Vec::new();
        huge.extend_from_slice(&0u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(decode_args(&huge, 1), Err(ArgsError::Size(0)));
    }

    #[test]
    fn images_describe_and_bound_their_regions() {
        let d = ImageDesc {
            order: 0x10B5,
            channel_type: 0x10D2,
            image_type: IMAGE2D,
            width: 64,
            height: 32,
            ..Default::default()
        };
        assert_eq!(ImageDesc::from_bytes(&d.to_bytes()), d);
        assert_eq!(d.extent(), Some([64, 32, 1]));
        let r = ImageRegion {
            origin: [60, 0, 0],
            region: [4, 32, 1],
        };
        assert_eq!(ImageRegion::from_bytes(&r.to_bytes()), Some(r));
        assert!(r.within([64, 32, 1]));
        assert_eq!(r.bytes(4), Some(512));
        let past = ImageRegion {
            origin: [61, 0, 0],
            ..r
        };
        assert!(!past.within([64, 32, 1]));
        let empty = ImageRegion {
            region: [0, 1, 1],
            ..r
        };
        assert!(!empty.within([64, 32, 1]));
        let wraps = ImageRegion {
            origin: [u64::MAX, 0, 0],
            ..r
        };
        assert!(!wraps.within([u64::MAX, 32, 1]));
        assert_eq!(
            ImageRegion {
                origin: [0; 3],
                region: [u64::MAX, 2, 1]
            }
            .bytes(4),
            None
        );
        assert_eq!(
            ImageDesc {
                image_type: 0x10F6,
                ..d
            }
            .extent(),
            None
        );
    }

    #[test]
    fn words_round_trip() {
        let w = [1, u64::MAX, 42];
        assert_eq!(decode_words(&encode_words(&w)).unwrap(), w);
        assert_eq!(decode_words(&[0; 9]), None);
    }
}
