//! Wire conventions of the CUDA driver API opcodes (`0x0100..=0x0fff`).
//!
//! Handles (modules, functions, streams, events) are opaque
//! [`crate::handle::Handle`] values, valid only on the channel that created
//! them. Handle 0 as a stream is the NULL (legacy default) stream. Device
//! pointers are the executor's addresses, checked by the host against the
//! allocations of the same channel before any use.

use std::ops::Range;

use crate::limits::REQUEST_ARGS;
use crate::opcode::Opcode;
use crate::wire::Pod;

/// Most bytes of one module image (fatbin, cubin or PTX).
pub const MAX_MODULE_IMAGE: u64 = 256 * 1024 * 1024;
/// Longest kernel name accepted.
pub const MAX_NAME: usize = 4096;
/// Most parameters a kernel may have.
pub const MAX_PARAMS: usize = 1024;
/// Most bytes of packed kernel parameters (CUDA 12.1+ allows 32764).
pub const MAX_PARAM_BYTES: u32 = 32764;
/// Most live objects of each kind (allocations, modules, functions,
/// streams, events) one channel may hold.
pub const MAX_OBJECTS: usize = 1 << 16;
/// The virtual-memory API's granularity (`cuMemGetAllocationGranularity`,
/// minimum and recommended): sizes, offsets and addresses of
/// `MemAddressReserve`, `MemCreate` and `MemMap` are multiples of it, as
/// on NVIDIA's GPUs (2 MiB).
pub const VMM_GRANULARITY: u64 = 2 << 20;
/// Most bytes of address space one reservation may cover (the guest sees
/// no more device memory than its quota, but may reserve ahead of it, as
/// PyTorch's expandable segments do): 1 TiB.
pub const MAX_RESERVATION: u64 = 1 << 40;

/// A device attribute of fairgpu's own, outside CUDA's numbering (a GPU's
/// driver knows no such attribute and refuses it): 1 when the executor
/// runs the guest's PTX itself and resolves `cudaGraphSetConditional` to
/// a 32-bit store at the handle's address (SimGpu), which the guest
/// library's conditional graph nodes rely on. On a GPU the driver's own
/// JIT resolves that call against handles only its own graphs make.
pub const ATTR_GUEST_GRAPH_CONDITIONALS: i32 = 0x4647_0001;

/// A device attribute of fairgpu's own: 1 when the executor runs PTX only
/// and no machine code (SimGpu), so that a module of SASS alone cannot
/// load. fairgpu's NVRTC shim asks it to compile for the virtual
/// architecture where a program asks NVRTC for the device's machine code.
pub const ATTR_EXECUTES_PTX_ONLY: i32 = 0x4647_0002;

/// The device runtime's functions (dynamic parallelism's launches, its
/// streams, events, heap, copies) that SimGpu executes itself, named
/// without their prefix: PTX calls them as `cuda<Name>` or, from nvcc 12
/// on, `__cudaCDP2<Name>`. On a device that executes PTX only, a module
/// may leave them `.extern`; a GPU's driver takes them from NVIDIA's
/// `libcudadevrt.a` (machine code) instead.
pub const SIM_DEVICE_RUNTIME: [&str; 19] = [
    "GetParameterBuffer",
    "GetParameterBufferV2",
    "LaunchDevice",
    "LaunchDeviceV2",
    "StreamCreateWithFlags",
    "StreamDestroy",
    "EventCreateWithFlags",
    "EventRecord",
    "EventRecordWithFlags",
    "EventDestroy",
    "StreamWaitEvent",
    "GetLastError",
    "PeekAtLastError",
    "GetDevice",
    "GetDeviceCount",
    "Malloc",
    "Free",
    "MemcpyAsync",
    "MemsetAsync",
];

/// Whether SimGpu executes the device-runtime function a PTX module calls
/// as `name` ([`SIM_DEVICE_RUNTIME`]).
pub fn sim_device_runtime(name: &str) -> bool {
    name.strip_prefix("__cudaCDP2")
        .or_else(|| name.strip_prefix("cuda"))
        .is_some_and(|base| SIM_DEVICE_RUNTIME.contains(&base))
}

/// Longest device name returned.
pub const MAX_DEVICE_NAME: usize = 256;

/// Most image bytes a host keeps cached per VM (oldest evicted first).
pub const MAX_IMAGE_CACHE: u64 = 256 * 1024 * 1024;

/// The name of a module image in the host's per-VM image cache: 128-bit
/// FNV-1a over the bytes. Not cryptographic: the cache is per VM, so a
/// collision could only hand a VM one of its own images; the size is
/// checked too.
pub fn image_hash(bytes: &[u8]) -> [u64; 2] {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let h = bytes
        .iter()
        .fold(OFFSET, |h, &b| (h ^ u128::from(b)).wrapping_mul(PRIME));
    [h as u64, (h >> 64) as u64]
}

/// `CUlimit` values a `CtxSetLimit` request may carry: the limits the
/// host's device honours, all device memory counted against the VM's
/// quota. The guest keeps the others.
pub mod limit {
    /// CU_LIMIT_STACK_SIZE: bytes of call stack a thread. A GPU's driver
    /// reserves it for every thread the device holds at once, and so does
    /// the VM's quota.
    pub const STACK_SIZE: u32 = 0;
    /// The driver's default stack: 1 KiB a thread (not charged).
    pub const DEFAULT_STACK: u64 = 1 << 10;
    /// CU_LIMIT_PRINTF_FIFO_SIZE: bytes of device `printf` output held
    /// until the next synchronization.
    pub const PRINTF_FIFO_SIZE: u32 = 1;
    /// CU_LIMIT_MALLOC_HEAP_SIZE: bytes of the device heap (`malloc`,
    /// `new`); counted against the VM's device-memory quota.
    pub const MALLOC_HEAP_SIZE: u32 = 2;
    /// The driver's default heap: 8 MiB.
    pub const DEFAULT_HEAP: u64 = 8 << 20;
    /// The driver's default printf FIFO: 1 MiB.
    pub const DEFAULT_PRINTF_FIFO: u64 = 1 << 20;
}

/// CUDA_ERROR_NOT_READY, returned by queries of unfinished work.
pub const NOT_READY: u32 = crate::wire::Status::NOT_READY.0;

/// The largest grid, in blocks per dimension, as every GPU since compute
/// capability 3.0 (`MAX_GRID_DIM_X/Y/Z`): launches past it are refused,
/// so that a grid's block count (at most 2^63) fits a u64.
pub const MAX_GRID: [u32; 3] = [0x7fff_ffff, 65535, 65535];

/// Launch geometry, at the start of a `LaunchKernel` request's arena slice.
/// The packed parameters follow it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchHeader {
    /// Grid dimensions in blocks.
    pub grid: [u32; 3],
    /// Block dimensions in threads.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, bytes.
    pub shared_mem: u32,
    /// Bytes of packed parameters following this header.
    pub param_bytes: u32,
}

const _: () = assert!(size_of::<LaunchHeader>() == 32);
// SAFETY: repr(C), eight u32 fields, no padding (size asserted); every bit
// pattern is valid.
unsafe impl Pod for LaunchHeader {}

impl LaunchHeader {
    /// Decodes a header from its 32 little-endian bytes.
    pub fn from_bytes(b: &[u8; 32]) -> Self {
        let w = |i: usize| u32::from_le_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        LaunchHeader {
            grid: [w(0), w(1), w(2)],
            block: [w(3), w(4), w(5)],
            shared_mem: w(6),
            param_bytes: w(7),
        }
    }

    /// Encodes the header as 32 little-endian bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        let words = [
            self.grid[0],
            self.grid[1],
            self.grid[2],
            self.block[0],
            self.block[1],
            self.block[2],
            self.shared_mem,
            self.param_bytes,
        ];
        for (i, w) in words.iter().enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    /// Checks the geometry: no zero dimension, at most 1024 threads per block.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.grid.contains(&0) || self.block.contains(&0) {
            return Err("zero grid or block dimension");
        }
        // Saturating: three u32 dimensions can pass u64 (and a wrapped
        // product could look small).
        let threads = self
            .block
            .iter()
            .fold(1u64, |n, &d| n.saturating_mul(u64::from(d)));
        if threads > 1024 {
            return Err("more than 1024 threads per block");
        }
        if self.grid[0] > MAX_GRID[0] || self.grid[1] > MAX_GRID[1] || self.grid[2] > MAX_GRID[2] {
            return Err("a grid dimension past the device's maximum");
        }
        if self.param_bytes > MAX_PARAM_BYTES {
            return Err("parameter buffer larger than 32764 bytes");
        }
        Ok(())
    }
}

/// How a kernel is launched beyond its geometry (`cuLaunchKernelEx`'s
/// attributes that change what the kernel computes): thread-block cluster
/// dimensions and a cooperative (grid-synchronizing) launch. Sent as the
/// third argument word of `LaunchKernel`; 0 is a plain launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchOptions {
    /// Cluster dimensions in blocks; `[1, 1, 1]` is no cluster.
    pub cluster: [u32; 3],
    /// `cuLaunchCooperativeKernel` / `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
    pub cooperative: bool,
}

impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions {
            cluster: [1, 1, 1],
            cooperative: false,
        }
    }
}

/// Most blocks in one cluster (the non-portable limit of sm_90; the
/// portable one is 8, which the driver enforces per kernel).
pub const MAX_CLUSTER_BLOCKS: u32 = 16;

impl LaunchOptions {
    /// The argument word: bits 0–15, 16–31 and 32–47 hold the cluster's x,
    /// y and z (0 meaning 1), bit 48 the cooperative flag; the rest are 0.
    pub fn to_arg(&self) -> u64 {
        let dim = |d: u32| if d <= 1 { 0 } else { u64::from(d.min(0xffff)) };
        dim(self.cluster[0])
            | dim(self.cluster[1]) << 16
            | dim(self.cluster[2]) << 32
            | u64::from(self.cooperative) << 48
    }

    /// Decodes and checks an argument word against the launch's grid:
    /// reserved bits clear, at most [`MAX_CLUSTER_BLOCKS`] blocks per
    /// cluster, and every grid dimension a multiple of the cluster's.
    pub fn from_arg(w: u64, grid: [u32; 3]) -> Result<LaunchOptions, &'static str> {
        if w >> 49 != 0 {
            return Err("reserved launch option bits set");
        }
        let dim = |shift: u32| ((w >> shift) & 0xffff).max(1) as u32;
        let cluster = [dim(0), dim(16), dim(32)];
        if cluster.iter().map(|&d| u64::from(d)).product::<u64>() > u64::from(MAX_CLUSTER_BLOCKS) {
            return Err("more than 16 blocks per cluster");
        }
        if grid.iter().zip(cluster).any(|(&g, c)| g % c != 0) {
            return Err("grid not a whole number of clusters");
        }
        Ok(LaunchOptions {
            cluster,
            cooperative: w >> 48 & 1 == 1,
        })
    }

    /// Whether the launch needs more than `cuLaunchKernel`.
    pub fn is_plain(&self) -> bool {
        *self == LaunchOptions::default()
    }
}

/// One kernel parameter in the packed buffer: offset and size in bytes, as
/// `cuFuncGetParamInfo` reports them. Sent as 8 little-endian bytes each.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ParamInfo {
    /// Byte offset in the packed parameter buffer.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

impl ParamInfo {
    /// Encodes a layout for the wire.
    pub fn encode_all(params: &[ParamInfo]) -> Vec<u8> {
        params
            .iter()
            .flat_map(|p| [p.offset.to_le_bytes(), p.size.to_le_bytes()].concat())
            .collect()
    }

    /// Decodes a layout from the wire; `None` if the bytes are not a whole
    /// number of entries or exceed [`MAX_PARAMS`].
    pub fn decode_all(b: &[u8]) -> Option<Vec<ParamInfo>> {
        if !b.len().is_multiple_of(8) || b.len() / 8 > MAX_PARAMS {
            return None;
        }
        Some(
            b.chunks_exact(8)
                .map(|c| ParamInfo {
                    offset: u32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                    size: u32::from_le_bytes([c[4], c[5], c[6], c[7]]),
                })
                .collect(),
        )
    }

    /// Bytes the packed buffer needs for this layout.
    pub fn packed_size(params: &[ParamInfo]) -> u64 {
        params
            .iter()
            .map(|p| u64::from(p.offset) + u64::from(p.size))
            .max()
            .unwrap_or(0)
    }
}

/// Printed output (`CtxTakeOutput`) is a sequence of records: one byte
/// naming the stream (`STDOUT` for device `printf`, `STDERR` for a failed
/// device `assert`'s message, as the CUDA runtime prints them), the text's
/// length as a little-endian u32, then the text.
pub const STDOUT: u8 = 1;
/// See [`STDOUT`].
pub const STDERR: u8 = 2;

/// Splits output records ([`STDOUT`]) into (stream, text); a truncated
/// last record is dropped.
pub fn output_records(mut bytes: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    while bytes.len() >= 5 {
        let len = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        let Some(text) = bytes.get(5..5usize.saturating_add(len)) else {
            break;
        };
        out.push((bytes[0], text));
        bytes = &bytes[5 + len..];
    }
    out
}

/// Bytes of one step's header in a `GraphLaunch` request's arena: the
/// step's opcode (u16), 0 (u16), its data's length (u32) and its five
/// argument words, little-endian. The data follows, padded to 8 bytes.
pub const GRAPH_STEP_HEADER: usize = 48;
/// Most steps one `GraphLaunch` request carries.
pub const MAX_GRAPH_STEPS: u64 = 1 << 16;

/// Whether `op` may be a step of a `GraphLaunch`: the asynchronous
/// requests that put work on a stream or order it and answer nothing
/// (kernels, copies from the request's own data or between device
/// memory, memsets, event records and stream waits). A step is the
/// request it would have been on its own, checked as that request is.
pub fn graph_step_allowed(op: Opcode) -> bool {
    matches!(
        op,
        Opcode::LaunchKernel
            | Opcode::MemcpyHtoD
            | Opcode::MemcpyDtoD
            | Opcode::MemsetD8
            | Opcode::MemsetD16
            | Opcode::MemsetD32
            | Opcode::Memcpy3D
            | Opcode::EventRecord
            | Opcode::StreamWaitEvent
    )
}

/// One step of a `GraphLaunch`, as [`graph_steps`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphStep {
    /// The request it stands for.
    pub op: Opcode,
    /// That request's arguments.
    pub args: [u64; REQUEST_ARGS],
    /// Its data: a range of the bytes given to [`graph_steps`].
    pub data: Range<usize>,
}

/// Appends a step (a request `op` with `args` and `data`) to a
/// `GraphLaunch`'s arena bytes.
pub fn push_graph_step(buf: &mut Vec<u8>, op: Opcode, args: [u64; REQUEST_ARGS], data: &[u8]) {
    buf.extend_from_slice(&(op as u16).to_le_bytes());
    buf.extend_from_slice(&0u16.to_le_bytes());
    buf.extend_from_slice(&(data.len() as u32).to_le_bytes());
    for a in args {
        buf.extend_from_slice(&a.to_le_bytes());
    }
    buf.extend_from_slice(data);
    buf.resize(buf.len().next_multiple_of(8), 0);
}

/// Bytes a step with `data_len` bytes of data takes in a `GraphLaunch`.
pub fn graph_step_bytes(data_len: usize) -> usize {
    GRAPH_STEP_HEADER + data_len.next_multiple_of(8)
}

/// Reads the `count` steps of a `GraphLaunch` from its arena bytes (a
/// private copy): every step's header whole, its opcode one that
/// [`graph_step_allowed`], its reserved word 0, its data inside `bytes`,
/// and nothing after the last step.
pub fn graph_steps(bytes: &[u8], count: u64) -> Result<Vec<GraphStep>, &'static str> {
    if count == 0 || count > MAX_GRAPH_STEPS {
        return Err("a graph launch carries 1 to 65536 steps");
    }
    let mut steps = Vec::new();
    let mut at = 0usize;
    for _ in 0..count {
        let h = bytes
            .get(at..at + GRAPH_STEP_HEADER)
            .ok_or("a step's header runs past the data")?;
        let op = u16::from_le_bytes([h[0], h[1]]);
        let op = Opcode::try_from(op).map_err(|_| "a step of an unknown opcode")?;
        if !graph_step_allowed(op) {
            return Err("a step of an opcode a graph cannot carry");
        }
        if h[2] != 0 || h[3] != 0 {
            return Err("a step's reserved word is not 0");
        }
        let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let mut args = [0u64; REQUEST_ARGS];
        for (i, a) in args.iter_mut().enumerate() {
            let w = &h[8 + 8 * i..16 + 8 * i];
            *a = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        }
        let start = at + GRAPH_STEP_HEADER;
        let end = start.checked_add(len).ok_or("a step's data overflows")?;
        let next = start
            .checked_add(len.next_multiple_of(8))
            .filter(|&n| n <= bytes.len())
            .ok_or("a step's data runs past the request's")?;
        steps.push(GraphStep {
            op,
            args,
            data: start..end,
        });
        at = next;
    }
    if at != bytes.len() {
        return Err("bytes after the last step");
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_steps_round_trip_and_malformed_ones_are_refused() {
        let mut b = Vec::new();
        push_graph_step(&mut b, Opcode::MemsetD32, [0x1000, 7, 64, 3, 0], &[]);
        push_graph_step(&mut b, Opcode::LaunchKernel, [5, 3, 0, 0, 0], &[1, 2, 3]);
        push_graph_step(&mut b, Opcode::EventRecord, [9, 3, 0, 0, 0], &[]);
        assert_eq!(b.len(), 3 * GRAPH_STEP_HEADER + 8);
        assert_eq!(
            b.len(),
            graph_step_bytes(0) + graph_step_bytes(3) + graph_step_bytes(0)
        );
        let steps = graph_steps(&b, 3).unwrap();
        assert_eq!(steps[0].op, Opcode::MemsetD32);
        assert_eq!(steps[0].args, [0x1000, 7, 64, 3, 0]);
        assert_eq!(&b[steps[1].data.clone()], &[1, 2, 3]);
        assert_eq!(steps[2].op, Opcode::EventRecord);
        // Fewer or more steps than announced, none, too many.
        assert!(graph_steps(&b, 2).is_err());
        assert!(graph_steps(&b, 4).is_err());
        assert!(graph_steps(&b, 0).is_err());
        assert!(graph_steps(&b, MAX_GRAPH_STEPS + 1).is_err());
        // An opcode a graph cannot carry, an unknown one, a reserved word.
        for (at, v) in [(0usize, Opcode::MemcpyDtoH as u16), (0, 0xeeee), (2, 1)] {
            let mut bad = b.clone();
            bad[at..at + 2].copy_from_slice(&v.to_le_bytes());
            assert!(graph_steps(&bad, 3).is_err(), "{at} {v:#x}");
        }
        // Data past the end.
        let mut bad = b.clone();
        bad[GRAPH_STEP_HEADER + 4..GRAPH_STEP_HEADER + 8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(graph_steps(&bad, 3).is_err());
        assert!(graph_steps(&b[..b.len() - 8], 3).is_err());
    }

    proptest::proptest! {
        #[test]
        fn graph_steps_never_panic_and_stay_inside(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400), count in 0u64..10) {
            if let Ok(steps) = graph_steps(&bytes, count) {
                for s in steps {
                    proptest::prop_assert!(s.data.end <= bytes.len() && graph_step_allowed(s.op));
                }
            }
        }
    }

    #[test]
    fn launch_options_round_trip_and_are_checked_against_the_grid() {
        assert_eq!(LaunchOptions::default().to_arg(), 0);
        assert!(LaunchOptions::from_arg(0, [7, 3, 1]).unwrap().is_plain());
        let o = LaunchOptions {
            cluster: [2, 4, 1],
            cooperative: true,
        };
        assert_eq!(LaunchOptions::from_arg(o.to_arg(), [8, 4, 3]), Ok(o));
        assert!(!o.is_plain());
        // The grid must be whole clusters.
        assert!(LaunchOptions::from_arg(o.to_arg(), [5, 4, 1]).is_err());
        assert!(LaunchOptions::from_arg(o.to_arg(), [8, 2, 1]).is_err());
        // At most 16 blocks per cluster, each dimension alone or together.
        let big = |c| LaunchOptions {
            cluster: c,
            cooperative: false,
        };
        assert!(LaunchOptions::from_arg(big([16, 1, 1]).to_arg(), [32, 1, 1]).is_ok());
        assert!(LaunchOptions::from_arg(big([17, 1, 1]).to_arg(), [17, 1, 1]).is_err());
        assert!(LaunchOptions::from_arg(big([4, 4, 2]).to_arg(), [4, 4, 2]).is_err());
        assert!(LaunchOptions::from_arg(0xffff_ffff_ffff, [65535; 3]).is_err());
        // Reserved bits.
        assert!(LaunchOptions::from_arg(1 << 49, [1; 3]).is_err());
        assert!(LaunchOptions::from_arg(u64::MAX, [1; 3]).is_err());
    }

    #[test]
    fn launch_header_round_trips_and_validates() {
        let h = LaunchHeader {
            grid: [4, 2, 1],
            block: [256, 1, 1],
            shared_mem: 1024,
            param_bytes: 24,
        };
        assert_eq!(LaunchHeader::from_bytes(&h.to_bytes()), h);
        assert!(h.validate().is_ok());
        assert!(LaunchHeader {
            block: [1024, 2, 1],
            ..h
        }
        .validate()
        .is_err());
        assert!(LaunchHeader {
            grid: [0, 1, 1],
            ..h
        }
        .validate()
        .is_err());
        assert!(LaunchHeader {
            param_bytes: 40_000,
            ..h
        }
        .validate()
        .is_err());
    }

    /// Found by the `cuda_requests` fuzz target: block dimensions whose
    /// product passes u64 panicked the worker in builds with overflow
    /// checks, and in others wrapped to a small thread count that passed.
    #[test]
    fn a_block_whose_thread_count_overflows_u64_is_refused() {
        for block in [
            [u32::MAX; 3],
            [1 << 21, 1 << 21, 1 << 22], // 2^64: wraps to 0
            [1 << 31, 1 << 31, 4],       // 2^64 too
        ] {
            let h = LaunchHeader {
                grid: [1; 3],
                block,
                shared_mem: 0,
                param_bytes: 0,
            };
            assert_eq!(
                h.validate(),
                Err("more than 1024 threads per block"),
                "{block:?}"
            );
        }
    }

    /// Found by the `cuda_requests` fuzz target: a grid whose block count
    /// passes u64 panicked the worker in builds with overflow checks
    /// (`LaunchConfig::blocks`) and wrapped in others.
    #[test]
    fn a_grid_past_the_device_s_maximum_is_refused() {
        let h = |grid| LaunchHeader {
            grid,
            block: [32, 1, 1],
            shared_mem: 0,
            param_bytes: 0,
        };
        assert_eq!(h(MAX_GRID).validate(), Ok(()));
        for grid in [[u32::MAX; 3], [1 << 31, 1, 1], [1, 65536, 1], [1, 1, 65536]] {
            assert_eq!(
                h(grid).validate(),
                Err("a grid dimension past the device's maximum"),
                "{grid:?}"
            );
        }
        let blocks: u64 = MAX_GRID.iter().map(|&d| u64::from(d)).product();
        assert!(blocks < 1 << 63);
    }

    #[test]
    fn image_hash_is_fnv1a_128() {
        // FNV-1a 128 of the empty input is the offset basis; of "a" a
        // published test value.
        assert_eq!(
            image_hash(b""),
            [0x62b8_2175_6295_c58d, 0x6c62_272e_07bb_0142]
        );
        assert_eq!(
            image_hash(b"a"),
            [0x7891_2b70_4e4a_8964, 0xd228_cb69_6f1a_8caf]
        );
        assert_ne!(image_hash(b"ab"), image_hash(b"ba"));
    }

    #[test]
    fn param_layout_round_trips() {
        let p = vec![
            ParamInfo { offset: 0, size: 8 },
            ParamInfo { offset: 8, size: 4 },
            ParamInfo {
                offset: 16,
                size: 16,
            },
        ];
        let b = ParamInfo::encode_all(&p);
        assert_eq!(ParamInfo::decode_all(&b), Some(p.clone()));
        assert_eq!(ParamInfo::packed_size(&p), 32);
        assert_eq!(ParamInfo::decode_all(&b[..5]), None);
    }

    #[test]
    fn output_records_split_and_drop_a_truncated_tail() {
        let mut b = vec![STDOUT, 3, 0, 0, 0];
        b.extend_from_slice(b"abc");
        b.extend_from_slice(&[STDERR, 0, 0, 0, 0]);
        b.extend_from_slice(&[STDOUT, 9, 0, 0, 0, b'x']);
        assert_eq!(
            output_records(&b),
            vec![(STDOUT, &b"abc"[..]), (STDERR, &b""[..])]
        );
        assert!(output_records(&[STDOUT, 0xff, 0xff, 0xff, 0xff]).is_empty());
        assert!(output_records(&[]).is_empty());
    }
}
