//! The driver's records for arrays, rectangular copies, texture and
//! surface objects, built from what the request layer validated.

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys::CUarray;

use super::api::{Array3DDescriptor, Memcpy3D, ResourceDesc, TextureDesc};
use super::Context;
use crate::{ArrayDesc, ExecError, ExecResult, HostData, Place, RectCopy, TexResource};

/// `CU_MEMORYTYPE_HOST`, `_DEVICE`, `_ARRAY`.
const MEMORYTYPE_HOST: u32 = 1;
const MEMORYTYPE_DEVICE: u32 = 2;
const MEMORYTYPE_ARRAY: u32 = 3;

fn size(v: u64) -> ExecResult<usize> {
    usize::try_from(v).map_err(|_| ExecError::Invalid("size"))
}

pub(super) fn array_descriptor(d: &ArrayDesc) -> ExecResult<Array3DDescriptor> {
    Ok(Array3DDescriptor {
        width: size(d.width)?,
        height: size(d.height)?,
        depth: size(d.depth)?,
        format: d.format,
        num_channels: d.channels,
        flags: d.flags,
    })
}

/// One side of a `CUDA_MEMCPY3D`: memory type, host pointer, device
/// pointer, array, pitch, height.
struct Side {
    kind: u32,
    host: *mut c_void,
    device: u64,
    array: CUarray,
    pitch: usize,
    height: usize,
}

fn side(c: &Context, p: &Place, host: *mut c_void, extent: [u64; 3]) -> ExecResult<Side> {
    Ok(match *p {
        // The request buffer holds the rows packed.
        Place::Host => Side {
            kind: MEMORYTYPE_HOST,
            host,
            device: 0,
            array: ptr::null_mut(),
            pitch: size(extent[0])?,
            height: size(extent[1])?,
        },
        Place::Device { ptr, pitch, height } => Side {
            kind: MEMORYTYPE_DEVICE,
            host: ptr::null_mut(),
            device: ptr,
            array: ptr::null_mut(),
            pitch: size(pitch)?,
            height: size(height)?,
        },
        Place::Array(a) => Side {
            kind: MEMORYTYPE_ARRAY,
            host: ptr::null_mut(),
            device: 0,
            array: *c.arrays.get(&a.0).ok_or(ExecError::Invalid("array"))?,
            pitch: 0,
            height: 0,
        },
    })
}

/// The `CUDA_MEMCPY3D` of a copy; its host pointer (if a side is the
/// host) points into `host`, which must outlive the copy.
pub(super) fn memcpy3d(
    c: &Context,
    copy: &RectCopy,
    host: &mut HostData<'_>,
) -> ExecResult<Memcpy3D> {
    let packed = copy.extent[0]
        .checked_mul(copy.extent[1])
        .and_then(|n| n.checked_mul(copy.extent[2]))
        .ok_or(ExecError::Invalid("copy size"))?;
    let (src_host, dst_host) = match host {
        HostData::None => (ptr::null_mut(), ptr::null_mut()),
        HostData::From(b) if b.len() as u64 == packed => {
            (b.as_ptr().cast::<c_void>().cast_mut(), ptr::null_mut())
        }
        HostData::To(b) if b.len() as u64 == packed => {
            (ptr::null_mut(), b.as_mut_ptr().cast::<c_void>())
        }
        _ => return Err(ExecError::Invalid("host data")),
    };
    let s = side(c, &copy.src.place, src_host, copy.extent)?;
    let d = side(c, &copy.dst.place, dst_host, copy.extent)?;
    if (s.kind == MEMORYTYPE_HOST && src_host.is_null())
        || (d.kind == MEMORYTYPE_HOST && dst_host.is_null())
    {
        return Err(ExecError::Invalid("host data"));
    }
    Ok(Memcpy3D {
        src_x_in_bytes: size(copy.src.pos[0])?,
        src_y: size(copy.src.pos[1])?,
        src_z: size(copy.src.pos[2])?,
        src_lod: 0,
        src_memory_type: s.kind,
        src_host: s.host,
        src_device: s.device,
        src_array: s.array,
        reserved0: ptr::null_mut(),
        src_pitch: s.pitch,
        src_height: s.height,
        dst_x_in_bytes: size(copy.dst.pos[0])?,
        dst_y: size(copy.dst.pos[1])?,
        dst_z: size(copy.dst.pos[2])?,
        dst_lod: 0,
        dst_memory_type: d.kind,
        dst_host: d.host,
        dst_device: d.device,
        dst_array: d.array,
        reserved1: ptr::null_mut(),
        dst_pitch: d.pitch,
        dst_height: d.height,
        width_in_bytes: size(copy.extent[0])?,
        height: size(copy.extent[1])?,
        depth: size(copy.extent[2])?,
    })
}

/// `CU_RESOURCE_TYPE_ARRAY`, `_LINEAR`, `_PITCH2D`.
const RESOURCE_ARRAY: u32 = 0;
const RESOURCE_LINEAR: u32 = 2;
const RESOURCE_PITCH2D: u32 = 3;

/// A `u32` pair as the union word that holds them.
fn pair(a: u32, b: u32) -> u64 {
    u64::from(a) | (u64::from(b) << 32)
}

pub(super) fn resource(c: &Context, r: &TexResource) -> ExecResult<ResourceDesc> {
    let mut d = ResourceDesc::default();
    match *r {
        TexResource::Array(a) => {
            d.res_type = RESOURCE_ARRAY;
            d.res[0] = c
                .arrays
                .get(&a.0)
                .ok_or(ExecError::Invalid("array"))?
                .addr() as u64;
        }
        TexResource::Linear {
            ptr,
            format,
            channels,
            bytes,
        } => {
            d.res_type = RESOURCE_LINEAR;
            d.res[..3].copy_from_slice(&[ptr, pair(format, channels), bytes]);
        }
        TexResource::Pitch2D {
            ptr,
            format,
            channels,
            width,
            height,
            pitch,
        } => {
            d.res_type = RESOURCE_PITCH2D;
            d.res[..5].copy_from_slice(&[ptr, pair(format, channels), width, height, pitch]);
        }
    }
    Ok(d)
}

pub(super) fn texture(t: &crate::TextureDesc) -> TextureDesc {
    TextureDesc {
        address_mode: t.address,
        filter_mode: t.filter,
        flags: t.flags,
        border_color: t.border,
        ..TextureDesc::default()
    }
}
