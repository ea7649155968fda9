//! The structs that cross the trust boundary: ring descriptors and the
//! CUresult-compatible status codes carried in responses.
//!
//! Descriptors are `#[repr(C)]`, fixed-width, little-endian on the wire (the
//! only supported hosts and guests are little-endian, checked at compile
//! time) and exactly one cache line long. They are copied out of the region
//! once and then validated; nothing is ever re-read from shared memory for a
//! decision already taken.

use std::ops::Range;

use crate::limits::{DESC_SIZE, REQUEST_ARGS, RESPONSE_VALS};
use crate::opcode::Opcode;

#[cfg(not(target_endian = "little"))]
compile_error!("fairgpu's wire format is little-endian; big-endian targets are not supported");

/// Plain old data: can be copied in and out of shared memory bit for bit.
///
/// # Safety
/// Implementors must be `#[repr(C)]` (or a primitive), contain no padding
/// bytes, no pointers or references, and every bit pattern of their size must
/// be a valid value.
pub unsafe trait Pod: Copy + Send + Sync + 'static {}

// SAFETY: primitive integers accept every bit pattern and have no padding.
unsafe impl Pod for u8 {}
// SAFETY: as above.
unsafe impl Pod for u32 {}
// SAFETY: as above.
unsafe impl Pod for u64 {}

/// Request flag: the guest waits for a response to this request.
/// Requests without it are fire-and-forget; their errors are reported in the
/// `deferred` field of the next response.
pub const REQ_NEEDS_RESPONSE: u16 = 1 << 0;
/// Every request flag this protocol version defines.
pub const REQ_KNOWN_FLAGS: u16 = REQ_NEEDS_RESPONSE;

/// A request descriptor, written by the guest into the request ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// What to do; see [`Opcode`].
    pub opcode: u16,
    /// `REQ_*` bits.
    pub flags: u16,
    /// The guest vCPU (or thread) that issued the call; informational.
    pub vcpu: u32,
    /// Chosen by the guest, echoed in the response.
    pub call_id: u64,
    /// Offset of this request's data in the channel's arena.
    pub arena_off: u32,
    /// Length of this request's data in the channel's arena (0: none).
    pub arena_len: u32,
    /// Opcode-specific inline arguments.
    pub args: [u64; REQUEST_ARGS],
}

/// A response descriptor, written by the host into the response ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Response {
    /// The `call_id` of the request this answers.
    pub call_id: u64,
    /// Result of this request, a CUresult value.
    pub status: u32,
    /// First error of a fire-and-forget request since the previous response
    /// (0 if none): asynchronous errors surface at the next synchronous call.
    pub deferred: u32,
    /// Offset of the output data in the arena (the request's own slice).
    pub arena_off: u32,
    /// Number of output bytes the host wrote there.
    pub arena_len: u32,
    /// Opcode-specific inline return values.
    pub vals: [u64; RESPONSE_VALS],
}

const _: () = assert!(std::mem::size_of::<Request>() == DESC_SIZE);
const _: () = assert!(std::mem::size_of::<Response>() == DESC_SIZE);
const _: () = assert!(std::mem::align_of::<Request>() == 8);
const _: () = assert!(std::mem::align_of::<Response>() == 8);
const _: () = assert!(std::mem::offset_of!(Request, call_id) == 8);
const _: () = assert!(std::mem::offset_of!(Request, arena_off) == 16);
const _: () = assert!(std::mem::offset_of!(Request, args) == 24);
const _: () = assert!(std::mem::offset_of!(Response, status) == 8);
const _: () = assert!(std::mem::offset_of!(Response, arena_off) == 16);
const _: () = assert!(std::mem::offset_of!(Response, vals) == 24);

// SAFETY: repr(C), fields are u16,u16,u32,u64,u32,u32,[u64;5] laid out with
// no padding (size 64 asserted above); every bit pattern is a valid value.
unsafe impl Pod for Request {}
// SAFETY: repr(C), fields u64,u32,u32,u32,u32,[u64;5] with no padding (size
// asserted above); every bit pattern is a valid value.
unsafe impl Pod for Response {}

impl Request {
    /// A request for `op` with the given arguments and no arena data.
    pub fn new(op: Opcode, args: [u64; REQUEST_ARGS]) -> Self {
        Request {
            opcode: op as u16,
            args,
            ..Default::default()
        }
    }

    /// Decodes a request from its 64 little-endian wire bytes.
    pub fn from_bytes(b: &[u8; DESC_SIZE]) -> Self {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let mut args = [0u64; REQUEST_ARGS];
        for (i, a) in args.iter_mut().enumerate() {
            *a = u64_at(24 + 8 * i);
        }
        Request {
            opcode: u16_at(0),
            flags: u16_at(2),
            vcpu: u32_at(4),
            call_id: u64_at(8),
            arena_off: u32_at(16),
            arena_len: u32_at(20),
            args,
        }
    }

    /// Encodes a request as its 64 little-endian wire bytes.
    pub fn to_bytes(&self) -> [u8; DESC_SIZE] {
        let mut b = [0u8; DESC_SIZE];
        b[0..2].copy_from_slice(&self.opcode.to_le_bytes());
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.vcpu.to_le_bytes());
        b[8..16].copy_from_slice(&self.call_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.arena_off.to_le_bytes());
        b[20..24].copy_from_slice(&self.arena_len.to_le_bytes());
        for (i, a) in self.args.iter().enumerate() {
            b[24 + 8 * i..32 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        b
    }

    /// Validates a copied-out request against the channel's arena size.
    /// This is the only way the host turns guest bytes into something it acts on.
    pub fn validate(&self, arena_size: u32) -> Result<ValidRequest, RequestError> {
        if self.flags & !REQ_KNOWN_FLAGS != 0 {
            return Err(RequestError::UnknownFlags { flags: self.flags });
        }
        let op = Opcode::try_from(self.opcode).map_err(|_| RequestError::UnknownOpcode {
            opcode: self.opcode,
        })?;
        let end = self.arena_off.checked_add(self.arena_len);
        let arena = match end {
            Some(end) if end <= arena_size => self.arena_off..end,
            _ => {
                return Err(RequestError::ArenaOutOfRange {
                    off: self.arena_off,
                    len: self.arena_len,
                    arena: arena_size,
                })
            }
        };
        Ok(ValidRequest {
            op,
            needs_response: self.flags & REQ_NEEDS_RESPONSE != 0,
            call_id: self.call_id,
            vcpu: self.vcpu,
            arena,
            args: self.args,
        })
    }
}

/// A request that passed validation: known opcode, known flags, arena slice
/// inside the channel's arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidRequest {
    /// The operation.
    pub op: Opcode,
    /// Whether the guest waits for a response.
    pub needs_response: bool,
    /// Echoed in the response.
    pub call_id: u64,
    /// Issuing vCPU, informational.
    pub vcpu: u32,
    /// The request's arena slice, in bounds (possibly empty).
    pub arena: Range<u32>,
    /// Inline arguments, still unvalidated for their opcode-specific meaning.
    pub args: [u64; REQUEST_ARGS],
}

/// Why a request descriptor was refused. Each fails that request only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The opcode is not one this host knows.
    #[error("unknown opcode {opcode:#06x}")]
    UnknownOpcode {
        /// The opcode as received.
        opcode: u16,
    },
    /// Flag bits this protocol version does not define are set.
    #[error("unknown request flags {flags:#06x}")]
    UnknownFlags {
        /// The flags as received.
        flags: u16,
    },
    /// The arena slice does not lie inside the channel's arena.
    #[error("arena slice {off}+{len} outside arena of {arena} bytes")]
    ArenaOutOfRange {
        /// Offset as received.
        off: u32,
        /// Length as received.
        len: u32,
        /// The channel's arena size.
        arena: u32,
    },
}

impl RequestError {
    /// The status a response carries for this error.
    pub fn status(&self) -> Status {
        match self {
            RequestError::UnknownOpcode { .. } => Status::NOT_SUPPORTED,
            RequestError::UnknownFlags { .. } | RequestError::ArenaOutOfRange { .. } => {
                Status::INVALID_VALUE
            }
        }
    }
}

/// A CUresult value as carried in [`Response::status`] and
/// [`Response::deferred`]. The numbering is the CUDA driver's, so the guest
/// library hands it to applications unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status(pub u32);

impl Status {
    /// CUDA_SUCCESS.
    pub const SUCCESS: Status = Status(0);
    /// CUDA_ERROR_INVALID_VALUE.
    pub const INVALID_VALUE: Status = Status(1);
    /// CUDA_ERROR_OUT_OF_MEMORY.
    pub const OUT_OF_MEMORY: Status = Status(2);
    /// CUDA_ERROR_NOT_INITIALIZED.
    pub const NOT_INITIALIZED: Status = Status(3);
    /// CUDA_ERROR_DEINITIALIZED: the host side of the channel went away.
    pub const DEINITIALIZED: Status = Status(4);
    /// CUDA_ERROR_NO_DEVICE.
    pub const NO_DEVICE: Status = Status(100);
    /// CUDA_ERROR_INVALID_DEVICE.
    pub const INVALID_DEVICE: Status = Status(101);
    /// CUDA_ERROR_INVALID_IMAGE.
    pub const INVALID_IMAGE: Status = Status(200);
    /// CUDA_ERROR_INVALID_CONTEXT.
    pub const INVALID_CONTEXT: Status = Status(201);
    /// CUDA_ERROR_INVALID_HANDLE.
    pub const INVALID_HANDLE: Status = Status(400);
    /// CUDA_ERROR_NOT_FOUND.
    pub const NOT_FOUND: Status = Status(500);
    /// CUDA_ERROR_NOT_READY.
    pub const NOT_READY: Status = Status(600);
    /// CUDA_ERROR_LAUNCH_FAILED.
    pub const LAUNCH_FAILED: Status = Status(719);
    /// CUDA_ERROR_ASSERT: a device-side assertion failed (sticky).
    pub const ASSERT: Status = Status(710);
    /// CUDA_ERROR_ILLEGAL_ADDRESS.
    pub const ILLEGAL_ADDRESS: Status = Status(700);
    /// CUDA_ERROR_LAUNCH_TIMEOUT (sticky).
    pub const LAUNCH_TIMEOUT: Status = Status(702);
    /// CUDA_ERROR_NOT_SUPPORTED.
    pub const NOT_SUPPORTED: Status = Status(801);
    /// CUDA_ERROR_UNKNOWN.
    pub const UNKNOWN: Status = Status(999);

    /// Whether this is CUDA_SUCCESS.
    pub fn is_success(self) -> bool {
        self == Status::SUCCESS
    }

    /// Whether this is one of the errors the CUDA documentation calls
    /// sticky: a fault of device code (illegal or misaligned address,
    /// illegal instruction, invalid PC or address space, hardware stack
    /// error, device assert, a failed or timed-out launch) or an
    /// uncorrectable ECC error. On a real driver it leaves the *process*
    /// unable to use CUDA again: every later call, in every context of
    /// that process, new ones included, returns the same error.
    pub fn is_sticky(self) -> bool {
        matches!(self.0, 214 | 700 | 702 | 710 | 714..=719)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match *self {
            Status::SUCCESS => "CUDA_SUCCESS",
            Status::INVALID_VALUE => "CUDA_ERROR_INVALID_VALUE",
            Status::OUT_OF_MEMORY => "CUDA_ERROR_OUT_OF_MEMORY",
            Status::NOT_INITIALIZED => "CUDA_ERROR_NOT_INITIALIZED",
            Status::DEINITIALIZED => "CUDA_ERROR_DEINITIALIZED",
            Status::NO_DEVICE => "CUDA_ERROR_NO_DEVICE",
            Status::INVALID_DEVICE => "CUDA_ERROR_INVALID_DEVICE",
            Status::INVALID_IMAGE => "CUDA_ERROR_INVALID_IMAGE",
            Status::INVALID_CONTEXT => "CUDA_ERROR_INVALID_CONTEXT",
            Status::INVALID_HANDLE => "CUDA_ERROR_INVALID_HANDLE",
            Status::NOT_FOUND => "CUDA_ERROR_NOT_FOUND",
            Status::NOT_READY => "CUDA_ERROR_NOT_READY",
            Status::LAUNCH_FAILED => "CUDA_ERROR_LAUNCH_FAILED",
            Status::ASSERT => "CUDA_ERROR_ASSERT",
            Status::ILLEGAL_ADDRESS => "CUDA_ERROR_ILLEGAL_ADDRESS",
            Status::NOT_SUPPORTED => "CUDA_ERROR_NOT_SUPPORTED",
            Status::UNKNOWN => "CUDA_ERROR_UNKNOWN",
            _ => return write!(f, "CUresult {}", self.0),
        };
        f.write_str(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bytes_round_trip_and_match_memory_layout() {
        let r = Request {
            opcode: Opcode::CopyIn as u16,
            flags: REQ_NEEDS_RESPONSE,
            vcpu: 3,
            call_id: 0x1122_3344_5566_7788,
            arena_off: 4096,
            arena_len: 100,
            args: [1, 2, 3, 4, u64::MAX],
        };
        let b = r.to_bytes();
        assert_eq!(Request::from_bytes(&b), r);
        // SAFETY: Request is Pod of exactly DESC_SIZE bytes; reading its
        // bytes through a u8 pointer is always valid.
        let mem: [u8; DESC_SIZE] = unsafe { std::mem::transmute(r) };
        assert_eq!(
            mem, b,
            "in-memory layout must equal the documented wire layout"
        );
    }

    #[test]
    fn validation_rejects_each_bad_field() {
        let ok = Request {
            opcode: Opcode::Nop as u16,
            ..Default::default()
        };
        assert!(ok.validate(1024).is_ok());
        let bad_op = Request {
            opcode: 0x7fff,
            ..ok
        };
        assert_eq!(
            bad_op.validate(1024),
            Err(RequestError::UnknownOpcode { opcode: 0x7fff })
        );
        let bad_flags = Request {
            flags: 0x8000,
            ..ok
        };
        assert!(matches!(
            bad_flags.validate(1024),
            Err(RequestError::UnknownFlags { .. })
        ));
        let past_end = Request {
            arena_off: 1000,
            arena_len: 25,
            ..ok
        };
        assert!(matches!(
            past_end.validate(1024),
            Err(RequestError::ArenaOutOfRange { .. })
        ));
        let overflow = Request {
            arena_off: u32::MAX,
            arena_len: 2,
            ..ok
        };
        assert!(matches!(
            overflow.validate(1024),
            Err(RequestError::ArenaOutOfRange { .. })
        ));
        let exact = Request {
            arena_off: 1000,
            arena_len: 24,
            ..ok
        };
        assert_eq!(exact.validate(1024).map(|v| v.arena), Ok(1000..1024));
    }

    proptest! {
        #[test]
        fn validate_never_panics_and_bounds_arena(bytes in proptest::collection::vec(any::<u8>(), DESC_SIZE), arena in 0u32..=u32::MAX) {
            let mut b = [0u8; DESC_SIZE];
            b.copy_from_slice(&bytes);
            let r = Request::from_bytes(&b);
            prop_assert_eq!(r.to_bytes(), b);
            if let Ok(v) = r.validate(arena) {
                prop_assert!(v.arena.start <= v.arena.end && v.arena.end <= arena);
            }
        }
    }
}
