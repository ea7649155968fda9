//! Kernel launches: the arguments are packed here, in the guest, with the
//! parameter layout cached at function lookup, and sent fire-and-forget.

use std::ffi::c_void;

use fairgpu_protocol::cuda::{LaunchOptions, ParamInfo};

use crate::context::{out, require_current};
use crate::ffi_result;
use crate::module::{function_ref, GuestFunction};
use crate::state;
use crate::stream::stream_handle;
use crate::types::{err, CUfunction, CUresult, CUstream};

/// `CU_LAUNCH_PARAM_END`.
const PARAM_END: usize = 0x00;
/// `CU_LAUNCH_PARAM_BUFFER_POINTER`.
const PARAM_BUFFER_POINTER: usize = 0x01;
/// `CU_LAUNCH_PARAM_BUFFER_SIZE`.
const PARAM_BUFFER_SIZE: usize = 0x02;
/// Most `extra` entries looked at before giving up on a missing END.
const MAX_EXTRA: usize = 64;

/// Packs the arguments of a launch into the layout's buffer.
///
/// # Safety
/// `params` (if non-null) must hold one pointer per parameter, each to a
/// value of that parameter's size; `extra` (if non-null) must be a
/// `CU_LAUNCH_PARAM_END`-terminated list as the driver API defines it.
unsafe fn pack(
    f: &GuestFunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Result<Vec<u8>, CUresult> {
    let size = ParamInfo::packed_size(&f.params) as usize;
    if !params.is_null() {
        let mut buf = vec![0u8; size];
        for (i, p) in f.params.iter().enumerate() {
            // SAFETY: the caller's array has one pointer per parameter.
            let src = unsafe { *params.add(i) };
            if src.is_null() {
                return Err(err::INVALID_VALUE);
            }
            let (o, n) = (p.offset as usize, p.size as usize);
            // SAFETY: `src` points at a value of the parameter's size.
            buf[o..o + n]
                .copy_from_slice(unsafe { std::slice::from_raw_parts(src.cast::<u8>(), n) });
        }
        return Ok(buf);
    }
    if extra.is_null() {
        return if size == 0 {
            Ok(Vec::new())
        } else {
            Err(err::INVALID_VALUE)
        };
    }
    let (mut buffer, mut len): (*const u8, Option<usize>) = (std::ptr::null(), None);
    let mut i = 0;
    loop {
        if i >= 2 * MAX_EXTRA {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: the list is END-terminated; we read key/value pairs.
        let key = unsafe { *extra.add(i) } as usize;
        if key == PARAM_END {
            break;
        }
        // SAFETY: every key but END is followed by its value.
        let value = unsafe { *extra.add(i + 1) };
        match key {
            PARAM_BUFFER_POINTER => buffer = value.cast::<u8>(),
            // SAFETY: the size entry points at a size_t.
            PARAM_BUFFER_SIZE if !value.is_null() => len = Some(unsafe { *value.cast::<usize>() }),
            _ => return Err(err::INVALID_VALUE),
        }
        i += 2;
    }
    let len = len.ok_or(err::INVALID_VALUE)?;
    if buffer.is_null() || len < size || len > fairgpu_protocol::cuda::MAX_PARAM_BYTES as usize {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: the buffer holds `len` bytes per the API.
    Ok(unsafe { std::slice::from_raw_parts(buffer, len) }.to_vec())
}

/// Refuses, at once as the driver does, a launch the device cannot run:
/// zero or oversized dimensions, too many threads, too much shared memory.
fn check_geometry(grid: [u32; 3], block: [u32; 3], shared: u32) -> Result<(), CUresult> {
    let d = state::device()?;
    let limit = |a: i32| d.attribute(a).map(|v| u64::try_from(v).unwrap_or(0));
    let (max_block, max_grid) = (
        [limit(2)?, limit(3)?, limit(4)?],
        [limit(5)?, limit(6)?, limit(7)?],
    );
    let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
    let ok = (0..3).all(|i| {
        grid[i] > 0
            && block[i] > 0
            && u64::from(block[i]) <= max_block[i]
            && u64::from(grid[i]) <= max_grid[i]
    }) && threads <= limit(1)?
        && u64::from(shared) <= limit(97)?.max(limit(8)?);
    if ok {
        Ok(())
    } else {
        Err(err::INVALID_VALUE)
    }
}

#[allow(clippy::too_many_arguments)]
fn launch(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    s: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    launch_with(
        f,
        grid,
        block,
        shared,
        s,
        params,
        extra,
        LaunchOptions::default(),
    )
}

#[allow(clippy::too_many_arguments)]
fn launch_with(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    s: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    options: LaunchOptions,
) -> CUresult {
    let buf = match prepare(f, grid, block, shared, params, extra) {
        Ok(b) => b,
        Err(e) => return e,
    };
    if let Some(r) = crate::graph::captured(s, || {
        Ok(crate::graph::Work::Kernel {
            f: f as usize,
            grid,
            block,
            shared,
            params: buf.clone(),
            options,
        })
    }) {
        return r;
    }
    launch_packed(f, grid, block, shared, s, &buf, options)
}

/// Launches `f` with its parameters already packed in `buf` (the legacy
/// launches of [`crate::legacy`]), as `cuLaunchKernel` with an `extra`
/// buffer.
pub(crate) fn launch_buffer(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    s: CUstream,
    buf: &mut [u8],
) -> CUresult {
    let mut len = buf.len();
    let mut extra: [*mut c_void; 5] = [
        PARAM_BUFFER_POINTER as *mut c_void,
        buf.as_mut_ptr().cast(),
        PARAM_BUFFER_SIZE as *mut c_void,
        (&mut len as *mut usize).cast(),
        PARAM_END as *mut c_void,
    ];
    launch(
        f,
        grid,
        block,
        shared,
        s,
        std::ptr::null_mut(),
        extra.as_mut_ptr(),
    )
}

/// Checks a launch's geometry and packs its parameters (also for a graph's
/// kernel node, when it is made).
pub(crate) fn prepare(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> Result<Vec<u8>, CUresult> {
    require_current()?;
    check_geometry(grid, block, shared)?;
    let func = function_ref(f)?;
    if shared > 0 && shared > func.max_dynamic_shared()? {
        return Err(err::INVALID_VALUE);
    }
    // Above the kernel's launch bound: refused at once, as the driver does.
    // (On a GPU a kernel's register use can lower the bound too, and the
    // driver then answers CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; refused here
    // with INVALID_VALUE, it fails all the same.)
    let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
    if threads > u64::from(func.max_threads()?) {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: the arguments come straight from the application's launch.
    unsafe { pack(func, params, extra) }
}

/// Sends a launch whose parameters [`prepare`] packed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_packed(
    f: CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    s: CUstream,
    buf: &[u8],
    options: LaunchOptions,
) -> CUresult {
    ffi_result(|| {
        require_current()?;
        let func = function_ref(f)?;
        check_options(func, grid, block, shared, &options)?;
        let stream = stream_handle(s);
        let host = func.host_here()?;
        // Kernels see what the CPU wrote to managed and mapped memory.
        crate::managed::push()?;
        state::with(|cu| cu.launch_with(host, grid, block, shared, stream, buf, options))?;
        crate::managed::note_launch();
        if func.prints {
            state::note_printing_launch();
        }
        Ok(())
    })
}

/// `cuLaunchKernel` (also given `CUkernel`s by CUDA 13's libcudart).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cuLaunchKernel(
    f: CUfunction,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    shared: u32,
    s: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let s = crate::stream::resolve(s);
    launch(f, [gx, gy, gz], [bx, by, bz], shared, s, params, extra)
}

/// `cuLaunchKernel_ptsz`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cuLaunchKernel_ptsz(
    f: CUfunction,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    shared: u32,
    s: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    launch(f, [gx, gy, gz], [bx, by, bz], shared, s, params, extra)
}

/// `cuLaunchCooperativeKernel`: a launch whose blocks may synchronize
/// grid-wide (the host's driver refuses a grid larger than can be
/// resident at once).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cuLaunchCooperativeKernel(
    f: CUfunction,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    shared: u32,
    s: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    let s = crate::stream::resolve(s);
    launch_with(
        f,
        [gx, gy, gz],
        [bx, by, bz],
        shared,
        s,
        params,
        std::ptr::null_mut(),
        LaunchOptions {
            cooperative: true,
            ..LaunchOptions::default()
        },
    )
}

/// `cuLaunchCooperativeKernel_ptsz` (the per-thread default stream is the
/// host's NULL stream, as for every `_ptsz` entry point).
#[no_mangle]
pub extern "C" fn cuLaunchCooperativeKernel_ptsz(
    f: CUfunction,
    gx: u32,
    gy: u32,
    gz: u32,
    bx: u32,
    by: u32,
    bz: u32,
    shared: u32,
    s: CUstream,
    params: *mut *mut c_void,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, s, params)
}

/// `CUlaunchConfig`.
#[repr(C)]
#[derive(Debug)]
pub struct LaunchConfig {
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: CUstream,
    attrs: *mut c_void,
    num_attrs: u32,
}

fn launch_ex(
    config: *const LaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    per_thread: bool,
) -> CUresult {
    if config.is_null() {
        return err::INVALID_VALUE;
    }
    // SAFETY: non-null; the caller passes a CUlaunchConfig.
    let c = unsafe { &*config };
    let s = if per_thread {
        crate::stream::per_thread_default(c.stream)
    } else {
        crate::stream::resolve(c.stream)
    };
    match launch_options(c) {
        Ok(options) => launch_with(f, c.grid, c.block, c.shared, s, params, extra, options),
        Err(e) => e,
    }
}

/// `CUlaunchAttribute`: an id, padding, and a 64-byte value union.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct LaunchAttribute {
    id: u32,
    pad: [u8; 4],
    value: [u32; 16],
}

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
const ATTR_COOPERATIVE: u32 = 2;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const ATTR_CLUSTER_DIMENSION: u32 = 4;
/// Most attributes one launch may carry.
const MAX_LAUNCH_ATTRIBUTES: u32 = 64;

/// The options a launch's attributes ask for: thread-block cluster
/// dimensions and the cooperative flag, carried to the host. Other
/// attributes (priorities, access policy windows, ...) are hints, accepted
/// and ignored.
fn launch_options(c: &LaunchConfig) -> Result<LaunchOptions, CUresult> {
    let mut options = LaunchOptions::default();
    if c.num_attrs == 0 {
        return Ok(options);
    }
    if c.attrs.is_null() || c.num_attrs > MAX_LAUNCH_ATTRIBUTES {
        return Err(err::INVALID_VALUE);
    }
    for i in 0..c.num_attrs as usize {
        // SAFETY: the caller passes `num_attrs` (bounded above) attributes
        // at `attrs` (checked for null); read_unaligned makes no alignment
        // assumption about the caller's array.
        let a = unsafe { c.attrs.cast::<LaunchAttribute>().add(i).read_unaligned() };
        match a.id {
            ATTR_CLUSTER_DIMENSION => {
                options.cluster = [a.value[0].max(1), a.value[1].max(1), a.value[2].max(1)];
            }
            ATTR_COOPERATIVE => options.cooperative = a.value[0] != 0,
            _ => {}
        }
    }
    Ok(options)
}

/// `CUDA_ERROR_INVALID_CLUSTER_SIZE`.
const INVALID_CLUSTER_SIZE: CUresult = 912;

/// Whether the device runs what `options` asks for: a cooperative grid
/// only if all of it can be resident; clusters only where it
/// reports CLUSTER_LAUNCH (SimGpu does not), in whole clusters of at most
/// 16 blocks; cooperative launches where it reports COOPERATIVE_LAUNCH
/// (SimGpu does: it runs a cooperative grid's blocks interleaved).
fn check_options(
    func: &GuestFunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    options: &LaunchOptions,
) -> Result<(), CUresult> {
    let d = state::device()?;
    if options.cooperative && d.attribute(ATTR_DEVICE_COOPERATIVE_LAUNCH).unwrap_or(0) == 1 {
        // At launch, as the driver answers: every block must be resident
        // at once (the host's driver checks again, with registers).
        let threads: u64 = block.iter().map(|&b| u64::from(b)).product();
        let smem = static_smem(func)?.saturating_add(u64::from(shared));
        let per_sm = SmLimits::of_device()?.blocks(i32::try_from(threads).unwrap_or(0), smem);
        let resident = i64::from(per_sm) * i64::from(d.attribute(16)?);
        let blocks: i64 = grid.iter().map(|&g| i64::from(g)).product();
        if blocks > resident {
            return Err(COOPERATIVE_LAUNCH_TOO_LARGE);
        }
    }
    if options.cluster != [1, 1, 1] {
        if d.attribute(ATTR_DEVICE_CLUSTER_LAUNCH).unwrap_or(0) == 0 {
            return Err(crate::unsupported(
                "cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION on a device without CLUSTER_LAUNCH",
            ));
        }
        LaunchOptions::from_arg(options.to_arg(), grid).map_err(|_| INVALID_CLUSTER_SIZE)?;
    }
    Ok(())
}

/// `CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH`.
const ATTR_DEVICE_CLUSTER_LAUNCH: i32 = 120;
/// `CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH`.
const ATTR_DEVICE_COOPERATIVE_LAUNCH: i32 = 95;
/// `CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`.
const COOPERATIVE_LAUNCH_TOO_LARGE: CUresult = 720;

/// `cuOccupancyMaxActiveClusters`: 0 on a device without CLUSTER_LAUNCH;
/// otherwise the clusters of the configuration's size that the resident
/// blocks of its geometry make up device-wide (an upper bound: the
/// hardware also keeps each cluster within one GPC).
#[no_mangle]
pub extern "C" fn cuOccupancyMaxActiveClusters(
    n: *mut i32,
    f: CUfunction,
    config: *const LaunchConfig,
) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        if config.is_null() || n.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a CUlaunchConfig.
        let c = unsafe { &*config };
        let options = launch_options(c)?;
        let d = state::device()?;
        let clusters = if d.attribute(ATTR_DEVICE_CLUSTER_LAUNCH).unwrap_or(0) == 0 {
            0
        } else {
            let threads: u64 = c.block.iter().map(|&b| u64::from(b)).product();
            let smem = static_smem(func)?.saturating_add(u64::from(c.shared));
            let per_sm = SmLimits::of_device()?.blocks(i32::try_from(threads).unwrap_or(0), smem);
            let size: i64 = options.cluster.iter().map(|&d| i64::from(d)).product();
            (i64::from(per_sm) * i64::from(d.attribute(16)?) / size.max(1)) as i32
        };
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(n, clusters) }
    })
}

/// `cuLaunchKernelEx`.
#[no_mangle]
pub extern "C" fn cuLaunchKernelEx(
    config: *const LaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    launch_ex(config, f, params, extra, false)
}

/// `cuLaunchKernelEx_ptsz`.
#[no_mangle]
pub extern "C" fn cuLaunchKernelEx_ptsz(
    config: *const LaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    launch_ex(config, f, params, extra, true)
}

/// What bounds how many blocks of a kernel one multiprocessor holds.
#[derive(Debug, Clone, Copy)]
struct SmLimits {
    threads: i32,
    blocks: i32,
    shared: i32,
}

impl SmLimits {
    fn of_device() -> Result<SmLimits, CUresult> {
        let d = state::device()?;
        Ok(SmLimits {
            threads: d.attribute(39)?,
            blocks: d.attribute(106)?,
            shared: d.attribute(81)?,
        })
    }

    /// Resident blocks of `block` threads each using `smem` bytes of
    /// shared memory (static and dynamic): by threads (in whole warps),
    /// blocks and shared memory per multiprocessor.
    fn blocks(&self, block: i32, smem: u64) -> i32 {
        if block <= 0 {
            return 0;
        }
        let warps = (i64::from(block) + 31) / 32 * 32;
        let by_threads = i64::from(self.threads.max(0)) / warps;
        let by_shared = match smem {
            0 => i64::MAX,
            b => i64::from(self.shared.max(0)) / i64::try_from(b).unwrap_or(i64::MAX),
        };
        by_threads.min(by_shared).min(i64::from(self.blocks.max(0))) as i32
    }
}

/// A kernel's static shared memory, as the host's code has it.
fn static_smem(func: &GuestFunction) -> Result<u64, CUresult> {
    // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES.
    let v = {
        let host = func.host_here()?;
        state::with(|cu| cu.func_get_attribute(host, 1))
    }?;
    Ok(u64::try_from(v).unwrap_or(0))
}

fn occupancy(n: *mut i32, f: CUfunction, block: i32, dynamic: usize) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        if block <= 0 || n.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let smem = static_smem(func)?.saturating_add(dynamic as u64);
        let blocks = SmLimits::of_device()?.blocks(block, smem);
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(n, blocks) }
    })
}

/// `size_t (*)(int blockSize)`: dynamic shared memory a block size needs.
type SmemForBlock = Option<unsafe extern "C" fn(i32) -> usize>;

/// The block size (a multiple of 32, at most `limit` if positive and the
/// kernel's and device's maximum) that keeps the most threads resident,
/// the larger on ties, and the grid that fills the device with it.
fn potential_block_size(
    min_grid: *mut i32,
    block_size: *mut i32,
    f: CUfunction,
    smem_for: SmemForBlock,
    dynamic: usize,
    limit: i32,
) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        if min_grid.is_null() || block_size.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let d = state::device()?;
        // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK.
        let kernel_max = {
            let host = func.host_here()?;
            state::with(|cu| cu.func_get_attribute(host, 0))
        }?;
        let mut max = kernel_max.min(d.attribute(1)?);
        if limit > 0 {
            max = max.min(limit);
        }
        let sms = SmLimits::of_device()?;
        let fixed = static_smem(func)?;
        let (mut best, mut best_blocks, mut best_threads) = (0, 0, -1i64);
        let mut size = max / 32 * 32;
        while size > 0 {
            let dynamic = match smem_for {
                // SAFETY: the application's callback, called as the driver
                // calls it: with a block size, returning bytes.
                Some(cb) => unsafe { cb(size) },
                None => dynamic,
            };
            let blocks = sms.blocks(size, fixed.saturating_add(dynamic as u64));
            let threads = i64::from(blocks) * i64::from(size);
            if threads > best_threads {
                (best, best_blocks, best_threads) = (size, blocks, threads);
            }
            size -= 32;
        }
        if best == 0 && max > 0 {
            // Fewer than 32 threads allowed: that many.
            best = max;
            best_blocks = sms.blocks(max, fixed.saturating_add(dynamic as u64));
        }
        let grid = best_blocks.saturating_mul(d.attribute(16)?);
        // SAFETY: both slots were checked for null; the caller passes them
        // writable.
        unsafe {
            out(block_size, best)?;
            out(min_grid, grid)
        }
    })
}

/// `cuOccupancyMaxPotentialBlockSize` (the dynamic-shared-memory callback
/// runs here, in the guest).
#[no_mangle]
pub extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut i32,
    block_size: *mut i32,
    f: CUfunction,
    smem_for: SmemForBlock,
    dynamic: usize,
    limit: i32,
) -> CUresult {
    potential_block_size(min_grid, block_size, f, smem_for, dynamic, limit)
}

/// `cuOccupancyMaxPotentialBlockSizeWithFlags` (no flag changes the model).
#[no_mangle]
pub extern "C" fn cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid: *mut i32,
    block_size: *mut i32,
    f: CUfunction,
    smem_for: SmemForBlock,
    dynamic: usize,
    limit: i32,
    _flags: u32,
) -> CUresult {
    potential_block_size(min_grid, block_size, f, smem_for, dynamic, limit)
}

/// Dynamic shared memory each of `blocks` resident blocks of `block_size`
/// threads may use on one multiprocessor of a device with `per_sm` bytes of
/// shared memory per multiprocessor, at most `per_block` (the opt-in limit)
/// per block, and `threads_per_sm` threads, for a kernel with
/// `static_smem` bytes of static shared memory: 0 when that many blocks do
/// not fit.
fn available_dynamic_smem(
    per_sm: i32,
    per_block: i32,
    threads_per_sm: i32,
    static_smem: i32,
    blocks: i32,
    block_size: i32,
) -> Option<usize> {
    if blocks <= 0 || block_size <= 0 {
        return None;
    }
    if i64::from(blocks) * i64::from(block_size) > i64::from(threads_per_sm) {
        return Some(0);
    }
    let share = (per_sm.max(0) / blocks).min(per_block.max(0)) - static_smem.max(0);
    Some(share.max(0) as usize)
}

/// `cuOccupancyAvailableDynamicSMemPerBlock` (cuBLAS asks it while
/// `cublasCreate` sets up), by the same model as the occupancy calls.
#[no_mangle]
pub extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    size: *mut usize,
    f: CUfunction,
    blocks: i32,
    block_size: i32,
) -> CUresult {
    ffi_result(|| {
        let func = function_ref(f)?;
        let info = state::device()?;
        // CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, as the host's code has it.
        let static_smem = {
            let host = func.host_here()?;
            state::with(|cu| cu.func_get_attribute(host, 1))
        }?;
        let n = available_dynamic_smem(
            info.attribute(81)?,
            info.attribute(97)?,
            info.attribute(39)?,
            static_smem,
            blocks,
            block_size,
        )
        .ok_or(err::INVALID_VALUE)?;
        // SAFETY: caller passes a writable slot (checked for null).
        unsafe { out(size, n) }
    })
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessor`: by threads, blocks and
/// shared memory (the kernel's static and `smem` dynamic bytes) per
/// multiprocessor.
#[no_mangle]
pub extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    n: *mut i32,
    f: CUfunction,
    block: i32,
    smem: usize,
) -> CUresult {
    occupancy(n, f, block, smem)
}

/// `cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags`.
#[no_mangle]
pub extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    n: *mut i32,
    f: CUfunction,
    block: i32,
    smem: usize,
    _flags: u32,
) -> CUresult {
    occupancy(n, f, block, smem)
}

#[cfg(test)]
mod tests {
    use super::{available_dynamic_smem, SmLimits};

    #[test]
    fn resident_blocks_are_bounded_by_threads_blocks_and_shared_memory() {
        let h100 = SmLimits {
            threads: 2048,
            blocks: 32,
            shared: 233_472,
        };
        assert_eq!(h100.blocks(256, 0), 8);
        assert_eq!(h100.blocks(32, 0), 32, "at most 32 blocks");
        assert_eq!(h100.blocks(33, 0), 32, "whole warps: 64 threads each");
        assert_eq!(h100.blocks(1024, 0), 2);
        assert_eq!(h100.blocks(128, 100_000), 2, "shared memory bounds it");
        assert_eq!(h100.blocks(128, 300_000), 0);
        assert_eq!(h100.blocks(0, 0), 0);
    }

    #[test]
    fn available_dynamic_shared_memory_divides_the_multiprocessor() {
        // H100: 233,472 bytes per SM, 232,448 opt-in per block, 2,048 threads.
        let h100 = |blocks, size| available_dynamic_smem(233_472, 232_448, 2048, 0, blocks, size);
        assert_eq!(h100(1, 256), Some(232_448), "capped by the per-block limit");
        assert_eq!(h100(2, 256), Some(116_736));
        assert_eq!(h100(8, 256), Some(29_184));
        assert_eq!(h100(16, 256), Some(0), "more threads than the SM holds");
        assert_eq!(h100(0, 256), None);
        assert_eq!(h100(1, 0), None);
        // A kernel's static shared memory comes off its dynamic share.
        let with_static =
            |s, blocks| available_dynamic_smem(233_472, 232_448, 2048, s, blocks, 256);
        assert_eq!(with_static(4096, 2), Some(116_736 - 4096));
        assert_eq!(
            with_static(200_000, 2),
            Some(0),
            "static alone fills the share"
        );
    }
}
