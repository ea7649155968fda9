//! CUDA arrays, rectangular copies (`cuMemcpy2D/3D`, to and from arrays)
//! and texture and surface objects.
//!
//! An array lives on the host: the guest holds its handle (the `CUarray`
//! value) and its description, for the descriptor queries. A copy's host
//! side is packed here into whole rows (its pitch is this process's
//! business) and sent as [`Copy3D`] requests; the host checks every device
//! range and array box. Texture and surface objects are the host's values,
//! which kernels receive as parameters; their descriptions are kept here
//! for `cuTexObjectGetResourceDesc` and friends.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use fairgpu_frontend::cuda::HostRows;
use fairgpu_protocol::array::{
    ArrayDesc, Copy3D, CopySide, ResourceDesc, TextureDesc, MEM_ARRAY, MEM_DEVICE, MEM_HOST,
    RESOURCE_ARRAY, RESOURCE_LINEAR, RESOURCE_PITCH2D,
};

use crate::context::{out, require_current};
use crate::memory::{is_device, slice, slice_mut};
use crate::state;
use crate::stream::{on_per_thread_stream, stream_handle};
use crate::types::{err, CUdeviceptr, CUresult, CUstream};
use crate::{ffi_result, unsupported};

/// `CUarray`: the host's handle, carried as a pointer-sized value.
pub type CUarray = *mut c_void;

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ArrayDescriptor {
    pub width: usize,
    pub height: usize,
    pub format: u32,
    pub num_channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Array3DDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: u32,
    pub num_channels: u32,
    pub flags: u32,
}

/// `CUDA_MEMCPY2D`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: CUarray,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: CUarray,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}

/// `CUDA_MEMCPY3D`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: u32,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: CUarray,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: u32,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: CUarray,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

/// `CUDA_RESOURCE_DESC`: the type, its 128-byte union as words, flags.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawResourceDesc {
    pub res_type: u32,
    pub res: [u64; 16],
    pub flags: u32,
}

/// `CUDA_TEXTURE_DESC`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawTextureDesc {
    pub address_mode: [u32; 3],
    pub filter_mode: u32,
    pub flags: u32,
    pub max_anisotropy: u32,
    pub mipmap_filter_mode: u32,
    pub mipmap_level_bias: f32,
    pub min_mipmap_level_clamp: f32,
    pub max_mipmap_level_clamp: f32,
    pub border_color: [f32; 4],
    pub reserved: [i32; 12],
}

const _: () = {
    use std::mem::size_of;
    assert!(size_of::<ArrayDescriptor>() == 24);
    assert!(size_of::<Array3DDescriptor>() == 40);
    assert!(size_of::<Memcpy2D>() == 128);
    assert!(size_of::<Memcpy3D>() == 200);
    assert!(size_of::<RawResourceDesc>() == 144);
    assert!(size_of::<RawTextureDesc>() == 104);
    // The union's u32 pairs are read as `lo | hi << 32`.
    assert!(cfg!(target_endian = "little"));
};

/// Arrays of this process, by handle.
static ARRAYS: Mutex<Option<HashMap<u64, ArrayDesc>>> = Mutex::new(None);
/// Texture objects and the descriptions they were made from.
static TEXTURES: Mutex<Option<HashMap<u64, (RawResourceDesc, RawTextureDesc)>>> = Mutex::new(None);
/// Surface objects and their resource descriptions.
static SURFACES: Mutex<Option<HashMap<u64, RawResourceDesc>>> = Mutex::new(None);

fn table<K: std::hash::Hash + Eq, V, R>(
    m: &Mutex<Option<HashMap<K, V>>>,
    f: impl FnOnce(&mut HashMap<K, V>) -> R,
) -> R {
    let mut g = m.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HashMap::new))
}

fn array_desc(a: CUarray) -> Result<ArrayDesc, CUresult> {
    table(&ARRAYS, |t| t.get(&(a as u64)).copied()).ok_or(err::INVALID_HANDLE)
}

fn create(pa: *mut CUarray, desc: ArrayDesc) -> Result<(), CUresult> {
    require_current()?;
    if pa.is_null() {
        return Err(err::INVALID_VALUE);
    }
    desc.validate().map_err(|_| err::INVALID_VALUE)?;
    let h = state::with(|cu| cu.array_create(&desc))?;
    table(&ARRAYS, |t| t.insert(h, desc));
    // SAFETY: `pa` is non-null and writable per the API.
    unsafe { out(pa, h as CUarray) }
}

/// `cuArrayCreate_v2`: a 1D or 2D array.
#[no_mangle]
pub extern "C" fn cuArrayCreate_v2(pa: *mut CUarray, d: *const ArrayDescriptor) -> CUresult {
    ffi_result(|| {
        if d.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a descriptor.
        let d = unsafe { *d };
        create(
            pa,
            ArrayDesc {
                width: d.width as u64,
                height: d.height as u64,
                depth: 0,
                format: d.format,
                channels: d.num_channels,
                flags: 0,
            },
        )
    })
}

/// `cuArray3DCreate_v2`: 1D, 2D, 3D, layered and cubemap arrays.
#[no_mangle]
pub extern "C" fn cuArray3DCreate_v2(pa: *mut CUarray, d: *const Array3DDescriptor) -> CUresult {
    ffi_result(|| {
        if d.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a descriptor.
        let d = unsafe { *d };
        create(
            pa,
            ArrayDesc {
                width: d.width as u64,
                height: d.height as u64,
                depth: d.depth as u64,
                format: d.format,
                channels: d.num_channels,
                flags: d.flags,
            },
        )
    })
}

/// `cuArrayDestroy`.
#[no_mangle]
pub extern "C" fn cuArrayDestroy(a: CUarray) -> CUresult {
    ffi_result(|| {
        state::device()?;
        array_desc(a)?;
        state::with(|cu| cu.array_destroy(a as u64))?;
        table(&ARRAYS, |t| t.remove(&(a as u64)));
        Ok(())
    })
}

/// `cuArrayGetDescriptor_v2`.
#[no_mangle]
pub extern "C" fn cuArrayGetDescriptor_v2(d: *mut ArrayDescriptor, a: CUarray) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let desc = array_desc(a)?;
        // SAFETY: the caller passes a writable descriptor (checked for null).
        unsafe {
            out(
                d,
                ArrayDescriptor {
                    width: desc.width as usize,
                    height: desc.height as usize,
                    format: desc.format,
                    num_channels: desc.channels,
                },
            )
        }
    })
}

/// `cuArray3DGetDescriptor_v2`.
#[no_mangle]
pub extern "C" fn cuArray3DGetDescriptor_v2(d: *mut Array3DDescriptor, a: CUarray) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let desc = array_desc(a)?;
        // SAFETY: the caller passes a writable descriptor (checked for null).
        unsafe {
            out(
                d,
                Array3DDescriptor {
                    width: desc.width as usize,
                    height: desc.height as usize,
                    depth: desc.depth as usize,
                    format: desc.format,
                    num_channels: desc.channels,
                    flags: desc.flags,
                },
            )
        }
    })
}

/// `CU_MEMORYTYPE_UNIFIED`: a pointer in `*Device` that may be either.
const MEM_UNIFIED: u32 = 4;

/// One side of a copy as the caller described it.
#[derive(Clone, Copy, Debug)]
enum Side {
    Host {
        ptr: usize,
        pitch: u64,
        height: u64,
        pos: [u64; 3],
    },
    Device(CopySide),
    Array(CopySide),
}

#[allow(clippy::too_many_arguments)]
fn side(
    kind: u32,
    host: usize,
    device: CUdeviceptr,
    array: CUarray,
    pitch: usize,
    height: usize,
    pos: [usize; 3],
) -> Result<Side, CUresult> {
    let pos = pos.map(|p| p as u64);
    let (pitch, height) = (pitch as u64, height as u64);
    let dev = |base| {
        Side::Device(CopySide {
            kind: MEM_DEVICE,
            base,
            pitch,
            height,
            pos,
        })
    };
    // Managed and mapped memory named by its device address: its CPU
    // bytes (pulled in `copy`).
    let view = match kind {
        2 | MEM_UNIFIED => crate::managed::host_view(device, 1),
        _ => None,
    };
    if let Some(ptr) = view {
        return Ok(Side::Host {
            ptr,
            pitch,
            height,
            pos,
        });
    }
    match kind {
        1 => Ok(Side::Host {
            ptr: host,
            pitch,
            height,
            pos,
        }),
        2 => Ok(dev(device)),
        3 => {
            array_desc(array)?;
            Ok(Side::Array(CopySide {
                kind: MEM_ARRAY,
                base: array as u64,
                pitch: 0,
                height: 0,
                pos,
            }))
        }
        MEM_UNIFIED if is_device(device) => Ok(dev(device)),
        MEM_UNIFIED => Ok(Side::Host {
            ptr: device as usize,
            pitch,
            height,
            pos,
        }),
        _ => Err(err::INVALID_VALUE),
    }
}

/// Byte offset of row `(y, z)` of a host side, if its rows fit the pitch.
fn host_row(
    pitch: u64,
    height: u64,
    pos: [u64; 3],
    extent: [u64; 3],
    y: u64,
    z: u64,
) -> Result<usize, CUresult> {
    let [w, h, d] = extent;
    if (h > 1 || d > 1) && pos[0].checked_add(w).is_none_or(|e| e > pitch) {
        return Err(err::INVALID_VALUE);
    }
    if d > 1 && pos[1].checked_add(h).is_none_or(|e| e > height) {
        return Err(err::INVALID_VALUE);
    }
    (pos[2] + z)
        .checked_mul(height)
        .and_then(|r| r.checked_add(pos[1] + y))
        .and_then(|r| r.checked_mul(pitch))
        .and_then(|o| o.checked_add(pos[0]))
        .and_then(|o| usize::try_from(o).ok())
        .ok_or(err::INVALID_VALUE)
}

/// Runs a rectangular copy: host sides packed here, the rest on the host.
fn copy(src: Side, dst: Side, extent: [u64; 3], stream: u64) -> Result<(), CUresult> {
    require_current()?;
    let [w, h, d] = extent;
    if w == 0 || h == 0 || d == 0 {
        return Ok(());
    }
    // Host sides may be managed memory kernels wrote.
    crate::managed::pull();
    let packed = w
        .checked_mul(h)
        .and_then(|n| n.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(err::INVALID_VALUE)?;
    let n = w as usize;
    let host_side = CopySide {
        kind: MEM_HOST,
        ..CopySide::default()
    };
    let wire = |s: &Side| match s {
        Side::Host { .. } => host_side,
        Side::Device(c) | Side::Array(c) => *c,
    };
    let c = Copy3D {
        src: wire(&src),
        dst: wire(&dst),
        extent,
    };
    match (src, dst) {
        (
            Side::Host {
                ptr: sp,
                pitch: spitch,
                height: sh,
                pos: spos,
            },
            Side::Host {
                ptr: dp,
                pitch: dpitch,
                height: dh,
                pos: dpos,
            },
        ) => {
            for z in 0..d {
                for y in 0..h {
                    let from = host_row(spitch, sh, spos, extent, y, z)?;
                    let to = host_row(dpitch, dh, dpos, extent, y, z)?;
                    let row = slice((sp + from) as *const c_void, n)?.to_vec();
                    slice_mut((dp + to) as *mut c_void, n)?.copy_from_slice(&row);
                }
            }
            Ok(())
        }
        (
            Side::Host {
                ptr,
                pitch,
                height,
                pos,
            },
            _,
        ) => {
            let mut buf = Vec::with_capacity(packed);
            for z in 0..d {
                for y in 0..h {
                    let off = host_row(pitch, height, pos, extent, y, z)?;
                    buf.extend_from_slice(slice((ptr + off) as *const c_void, n)?);
                }
            }
            state::with(|cu| cu.memcpy_3d(&c, HostRows::From(&buf), stream))
        }
        (
            _,
            Side::Host {
                ptr,
                pitch,
                height,
                pos,
            },
        ) => {
            // Check the destination rows before any data moves.
            for z in [0, d - 1] {
                host_row(pitch, height, pos, extent, h - 1, z)?;
            }
            let mut buf = vec![0u8; packed];
            state::with_sync(|cu| cu.memcpy_3d(&c, HostRows::To(&mut buf), stream))?;
            for (i, row) in buf.chunks_exact(n).enumerate() {
                let (y, z) = (i as u64 % h, i as u64 / h);
                let off = host_row(pitch, height, pos, extent, y, z)?;
                slice_mut((ptr + off) as *mut c_void, n)?.copy_from_slice(row);
            }
            Ok(())
        }
        _ => state::with(|cu| cu.memcpy_3d(&c, HostRows::None, stream)),
    }
}

fn copy_3d(p: *const Memcpy3D, stream: CUstream) -> CUresult {
    if !p.is_null() {
        // SAFETY: non-null; the caller passes a copy description.
        let params = crate::graph::Copy3DParams(unsafe { *p });
        if let Some(r) = crate::graph::captured(stream, || Ok(crate::graph::Work::Copy3D(params))) {
            return r;
        }
    }
    ffi_result(|| {
        if p.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a copy description.
        let p = unsafe { *p };
        if p.src_lod != 0 || p.dst_lod != 0 {
            return Err(err::INVALID_VALUE);
        }
        let src = side(
            p.src_memory_type,
            p.src_host as usize,
            p.src_device,
            p.src_array,
            p.src_pitch,
            p.src_height,
            [p.src_x_in_bytes, p.src_y, p.src_z],
        )?;
        let dst = side(
            p.dst_memory_type,
            p.dst_host as usize,
            p.dst_device,
            p.dst_array,
            p.dst_pitch,
            p.dst_height,
            [p.dst_x_in_bytes, p.dst_y, p.dst_z],
        )?;
        let extent = [p.width_in_bytes, p.height, p.depth].map(|v| v as u64);
        copy(src, dst, extent, stream_handle(stream))
    })
}

fn copy_2d(p: *const Memcpy2D, stream: CUstream) -> CUresult {
    ffi_result(|| {
        if p.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes a copy description.
        let p = unsafe { *p };
        // One slice: its rows per slice are the copy's own.
        let rows = p.height + p.src_y.max(p.dst_y);
        let src = side(
            p.src_memory_type,
            p.src_host as usize,
            p.src_device,
            p.src_array,
            p.src_pitch,
            rows,
            [p.src_x_in_bytes, p.src_y, 0],
        )?;
        let dst = side(
            p.dst_memory_type,
            p.dst_host as usize,
            p.dst_device,
            p.dst_array,
            p.dst_pitch,
            rows,
            [p.dst_x_in_bytes, p.dst_y, 0],
        )?;
        copy(
            src,
            dst,
            [p.width_in_bytes as u64, p.height as u64, 1],
            stream_handle(stream),
        )
    })
}

/// A copy between a whole-row range of an array (offset in bytes within
/// its first row, as the 1D array copies address it) and linear memory.
fn array_linear(
    a: CUarray,
    offset: usize,
    other: Side,
    n: usize,
    to_array: bool,
    stream: CUstream,
) -> CUresult {
    ffi_result(|| {
        array_desc(a)?;
        let arr_side = Side::Array(CopySide {
            kind: MEM_ARRAY,
            base: a as u64,
            pitch: 0,
            height: 0,
            pos: [offset as u64, 0, 0],
        });
        let (src, dst) = if to_array {
            (other, arr_side)
        } else {
            (arr_side, other)
        };
        copy(src, dst, [n as u64, 1, 1], stream_handle(stream))
    })
}

fn host_at(p: *const c_void) -> Side {
    Side::Host {
        ptr: p as usize,
        pitch: 0,
        height: 0,
        pos: [0; 3],
    }
}

fn device_at(p: CUdeviceptr) -> Side {
    Side::Device(CopySide {
        kind: MEM_DEVICE,
        base: p,
        pitch: 0,
        height: 0,
        pos: [0; 3],
    })
}

macro_rules! export {
    ($($(#[$m:meta])* fn $name:ident($($a:ident: $t:ty),*) => $body:expr;)*) => {$(
        $(#[$m])*
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> CUresult { $body }
    )*};
}

export! {
    /// `cuMemcpy2D_v2`.
    fn cuMemcpy2D_v2(p: *const Memcpy2D) => copy_2d(p, std::ptr::null_mut());
    /// `cuMemcpy2D_v2_ptds`.
    fn cuMemcpy2D_v2_ptds(p: *const Memcpy2D) => on_per_thread_stream(|s| copy_2d(p, s));
    /// `cuMemcpy2DUnaligned_v2`.
    fn cuMemcpy2DUnaligned_v2(p: *const Memcpy2D) => copy_2d(p, std::ptr::null_mut());
    /// `cuMemcpy2DUnaligned_v2_ptds`.
    fn cuMemcpy2DUnaligned_v2_ptds(p: *const Memcpy2D) => on_per_thread_stream(|s| copy_2d(p, s));
    /// `cuMemcpy2DAsync_v2`.
    fn cuMemcpy2DAsync_v2(p: *const Memcpy2D, s: CUstream) => copy_2d(p, crate::stream::resolve(s));
    /// `cuMemcpy2DAsync_v2_ptsz`.
    fn cuMemcpy2DAsync_v2_ptsz(p: *const Memcpy2D, s: CUstream) => copy_2d(p, crate::stream::per_thread_default(s));
    /// `cuMemcpy3D_v2`.
    fn cuMemcpy3D_v2(p: *const Memcpy3D) => copy_3d(p, std::ptr::null_mut());
    /// `cuMemcpy3D_v2_ptds`.
    fn cuMemcpy3D_v2_ptds(p: *const Memcpy3D) => on_per_thread_stream(|s| copy_3d(p, s));
    /// `cuMemcpy3DAsync_v2`.
    fn cuMemcpy3DAsync_v2(p: *const Memcpy3D, s: CUstream) => copy_3d(p, crate::stream::resolve(s));
    /// `cuMemcpy3DAsync_v2_ptsz`.
    fn cuMemcpy3DAsync_v2_ptsz(p: *const Memcpy3D, s: CUstream) => copy_3d(p, crate::stream::per_thread_default(s));
    /// `cuMemcpyHtoA_v2`.
    fn cuMemcpyHtoA_v2(a: CUarray, off: usize, src: *const c_void, n: usize) => array_linear(a, off, host_at(src), n, true, std::ptr::null_mut());
    /// `cuMemcpyHtoA_v2_ptds`.
    fn cuMemcpyHtoA_v2_ptds(a: CUarray, off: usize, src: *const c_void, n: usize) => on_per_thread_stream(|s| array_linear(a, off, host_at(src), n, true, s));
    /// `cuMemcpyHtoAAsync_v2`.
    fn cuMemcpyHtoAAsync_v2(a: CUarray, off: usize, src: *const c_void, n: usize, s: CUstream) => array_linear(a, off, host_at(src), n, true, crate::stream::resolve(s));
    /// `cuMemcpyHtoAAsync_v2_ptsz`.
    fn cuMemcpyHtoAAsync_v2_ptsz(a: CUarray, off: usize, src: *const c_void, n: usize, s: CUstream) => array_linear(a, off, host_at(src), n, true, crate::stream::per_thread_default(s));
    /// `cuMemcpyAtoH_v2`.
    fn cuMemcpyAtoH_v2(dst: *mut c_void, a: CUarray, off: usize, n: usize) => array_linear(a, off, host_at(dst), n, false, std::ptr::null_mut());
    /// `cuMemcpyAtoH_v2_ptds`.
    fn cuMemcpyAtoH_v2_ptds(dst: *mut c_void, a: CUarray, off: usize, n: usize) => on_per_thread_stream(|s| array_linear(a, off, host_at(dst), n, false, s));
    /// `cuMemcpyAtoHAsync_v2`.
    fn cuMemcpyAtoHAsync_v2(dst: *mut c_void, a: CUarray, off: usize, n: usize, s: CUstream) => array_linear(a, off, host_at(dst), n, false, crate::stream::resolve(s));
    /// `cuMemcpyAtoHAsync_v2_ptsz`.
    fn cuMemcpyAtoHAsync_v2_ptsz(dst: *mut c_void, a: CUarray, off: usize, n: usize, s: CUstream) => array_linear(a, off, host_at(dst), n, false, crate::stream::per_thread_default(s));
    /// `cuMemcpyDtoA_v2`.
    fn cuMemcpyDtoA_v2(a: CUarray, off: usize, src: CUdeviceptr, n: usize) => array_linear(a, off, device_at(src), n, true, std::ptr::null_mut());
    /// `cuMemcpyDtoA_v2_ptds`.
    fn cuMemcpyDtoA_v2_ptds(a: CUarray, off: usize, src: CUdeviceptr, n: usize) => on_per_thread_stream(|s| array_linear(a, off, device_at(src), n, true, s));
    /// `cuMemcpyAtoD_v2`.
    fn cuMemcpyAtoD_v2(dst: CUdeviceptr, a: CUarray, off: usize, n: usize) => array_linear(a, off, device_at(dst), n, false, std::ptr::null_mut());
    /// `cuMemcpyAtoD_v2_ptds`.
    fn cuMemcpyAtoD_v2_ptds(dst: CUdeviceptr, a: CUarray, off: usize, n: usize) => on_per_thread_stream(|s| array_linear(a, off, device_at(dst), n, false, s));
}

/// `cuMemcpyAtoA_v2`: whole-row ranges of two arrays.
#[no_mangle]
pub extern "C" fn cuMemcpyAtoA_v2(
    dst: CUarray,
    doff: usize,
    src: CUarray,
    soff: usize,
    n: usize,
) -> CUresult {
    ffi_result(|| {
        array_desc(dst)?;
        array_desc(src)?;
        let at = |a: CUarray, off: usize| {
            Side::Array(CopySide {
                kind: MEM_ARRAY,
                base: a as u64,
                pitch: 0,
                height: 0,
                pos: [off as u64, 0, 0],
            })
        };
        copy(at(src, soff), at(dst, doff), [n as u64, 1, 1], 0)
    })
}

/// `cuMemcpyAtoA_v2_ptds`.
#[no_mangle]
pub extern "C" fn cuMemcpyAtoA_v2_ptds(
    dst: CUarray,
    doff: usize,
    src: CUarray,
    soff: usize,
    n: usize,
) -> CUresult {
    cuMemcpyAtoA_v2(dst, doff, src, soff, n)
}

/// The wire form of a resource description, with `CUarray` handles
/// checked against this process's arrays.
fn resource(r: &RawResourceDesc) -> Result<ResourceDesc, CUresult> {
    if r.flags != 0 {
        return Err(err::INVALID_VALUE);
    }
    let lo = |w: u64| w as u32;
    let hi = |w: u64| (w >> 32) as u32;
    match u64::from(r.res_type) {
        RESOURCE_ARRAY => {
            array_desc(r.res[0] as CUarray)?;
            Ok(ResourceDesc {
                kind: RESOURCE_ARRAY,
                base: r.res[0],
                ..ResourceDesc::default()
            })
        }
        RESOURCE_LINEAR => Ok(ResourceDesc {
            kind: RESOURCE_LINEAR,
            base: r.res[0],
            format: lo(r.res[1]),
            channels: hi(r.res[1]),
            width: r.res[2],
            ..ResourceDesc::default()
        }),
        RESOURCE_PITCH2D => Ok(ResourceDesc {
            kind: RESOURCE_PITCH2D,
            base: r.res[0],
            format: lo(r.res[1]),
            channels: hi(r.res[1]),
            width: r.res[2],
            height: r.res[3],
            pitch: r.res[4],
        }),
        // Mipmapped arrays.
        1 => Err(unsupported("cuTexObjectCreate of a mipmapped array")),
        _ => Err(err::INVALID_VALUE),
    }
}

/// `cuTexObjectCreate`: no resource views.
#[no_mangle]
pub extern "C" fn cuTexObjectCreate(
    pt: *mut u64,
    res: *const RawResourceDesc,
    tex: *const RawTextureDesc,
    view: *const c_void,
) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if pt.is_null() || res.is_null() || tex.is_null() {
            return Err(err::INVALID_VALUE);
        }
        if !view.is_null() {
            return Err(unsupported("cuTexObjectCreate with a resource view"));
        }
        // SAFETY: non-null; the caller passes the descriptions.
        let (raw_res, raw_tex) = unsafe { (*res, *tex) };
        let r = resource(&raw_res)?;
        let t = TextureDesc {
            address: raw_tex.address_mode,
            filter: raw_tex.filter_mode,
            flags: raw_tex.flags,
            border: raw_tex.border_color,
        };
        t.validate().map_err(|_| err::INVALID_VALUE)?;
        let obj = state::with(|cu| cu.tex_object_create(&r, &t))?;
        table(&TEXTURES, |m| m.insert(obj, (raw_res, raw_tex)));
        // SAFETY: non-null and writable per the API.
        unsafe { out(pt, obj) }
    })
}

/// `cuTexObjectDestroy`.
#[no_mangle]
pub extern "C" fn cuTexObjectDestroy(t: u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        state::with(|cu| cu.tex_object_destroy(t))?;
        table(&TEXTURES, |m| m.remove(&t));
        Ok(())
    })
}

/// `cuTexObjectGetResourceDesc`.
#[no_mangle]
pub extern "C" fn cuTexObjectGetResourceDesc(d: *mut RawResourceDesc, t: u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let (r, _) = table(&TEXTURES, |m| m.get(&t).copied()).ok_or(err::INVALID_VALUE)?;
        // SAFETY: writable per the API (checked for null).
        unsafe { out(d, r) }
    })
}

/// `cuTexObjectGetTextureDesc`.
#[no_mangle]
pub extern "C" fn cuTexObjectGetTextureDesc(d: *mut RawTextureDesc, t: u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let (_, x) = table(&TEXTURES, |m| m.get(&t).copied()).ok_or(err::INVALID_VALUE)?;
        // SAFETY: writable per the API (checked for null).
        unsafe { out(d, x) }
    })
}

/// `cuSurfObjectCreate`: over an array made with `CUDA_ARRAY3D_SURFACE_LDST`.
#[no_mangle]
pub extern "C" fn cuSurfObjectCreate(ps: *mut u64, res: *const RawResourceDesc) -> CUresult {
    ffi_result(|| {
        require_current()?;
        if ps.is_null() || res.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: non-null; the caller passes the description.
        let raw = unsafe { *res };
        let r = resource(&raw)?;
        if r.kind != RESOURCE_ARRAY {
            return Err(err::INVALID_VALUE);
        }
        let obj = state::with(|cu| cu.surf_object_create(r.base))?;
        table(&SURFACES, |m| m.insert(obj, raw));
        // SAFETY: non-null and writable per the API.
        unsafe { out(ps, obj) }
    })
}

/// `cuSurfObjectDestroy`.
#[no_mangle]
pub extern "C" fn cuSurfObjectDestroy(s: u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        state::with(|cu| cu.surf_object_destroy(s))?;
        table(&SURFACES, |m| m.remove(&s));
        Ok(())
    })
}

/// `cuSurfObjectGetResourceDesc`.
#[no_mangle]
pub extern "C" fn cuSurfObjectGetResourceDesc(d: *mut RawResourceDesc, s: u64) -> CUresult {
    ffi_result(|| {
        state::device()?;
        let r = table(&SURFACES, |m| m.get(&s).copied()).ok_or(err::INVALID_VALUE)?;
        // SAFETY: writable per the API (checked for null).
        unsafe { out(d, r) }
    })
}
