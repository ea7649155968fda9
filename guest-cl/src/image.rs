//! Images: memory objects ([`Mem`] with an [`ImageInfo`]) in the host
//! buffers' handle space, and the commands that move their pixels.
//!
//! Boxes are in pixels, with an array's layers as the last coordinate (`y`
//! for 1D arrays, `z` for 2D arrays), as the wire's
//! [`ImageRegion`] has them. The bytes of a box travel packed (rows of
//! `region[0]` pixels, no padding) in pieces that fit one arena slice:
//! whole slices, else rows, else parts of a row; the application's side
//! may have any row and slice pitch, which the packing honours. A command's
//! event rides on its last piece.
//!
//! As for buffers, `CL_MEM_COPY_HOST_PTR` and `CL_MEM_USE_HOST_PTR` data
//! is written after the creation on the host's own queue (queue 0); a map
//! is guest memory (the host pointer's pixels for `CL_MEM_USE_HOST_PTR`,
//! else a packed allocation) filled by a read and written back at the
//! unmap ([`crate::mem::clEnqueueUnmapMemObject`]). Reads complete before
//! they return.

use std::ffi::c_void;
use std::sync::Arc;

use fairgpu_protocol::opencl::{
    encode_words, ImageDesc, ImageRegion, IMAGE1D, IMAGE1D_ARRAY, IMAGE2D, IMAGE2D_ARRAY, IMAGE3D,
    IMAGE_REGION,
};
use fairgpu_protocol::Opcode;

use crate::conn::{self, Conn};
use crate::context::Context;
use crate::event::Enqueue;
use crate::mem::{self, check_flags, host_can_read, host_can_write, triple, Mem, ACCESS};
use crate::platform::host_device_info;
use crate::raw::{self, MapMemory};
use crate::registry::{self, ParentRef};
use crate::types::*;
use crate::{guard, guard_obj, unsupported};

/// What an image keeps beside its memory object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    /// `cl_channel_order`.
    pub order: u32,
    /// `cl_channel_type`.
    pub channel_type: u32,
    /// The description as the host got it (fields the type does not use
    /// are 0).
    pub desc: ImageDesc,
    /// Bytes per pixel.
    pub elem: usize,
    /// The layout of a `CL_MEM_USE_HOST_PTR` image's host memory (for
    /// others, the packed layout).
    pub host: Pitch,
}

impl ImageInfo {
    /// The extent (x, y, z) in pixels, array layers last.
    pub fn extent(&self) -> [usize; 3] {
        let e = self.desc.extent().unwrap_or([0; 3]);
        [e[0] as usize, e[1] as usize, e[2] as usize]
    }

    /// Bytes of one row of the whole image, packed.
    fn row_pitch(&self) -> usize {
        self.desc.width as usize * self.elem
    }

    /// `CL_IMAGE_SLICE_PITCH`: a 2D slice for 3D images and 2D arrays, a
    /// row for 1D arrays, 0 otherwise.
    fn slice_pitch(&self) -> usize {
        match self.desc.image_type {
            IMAGE3D | IMAGE2D_ARRAY => self.row_pitch() * self.desc.height as usize,
            IMAGE1D_ARRAY => self.row_pitch(),
            _ => 0,
        }
    }
}

/// The layout of a box's bytes in guest memory: bytes from one `y` to the
/// next and from one `z` to the next (for a 1D array, whose layers are
/// `y`, `row` is the API's slice pitch).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pitch {
    /// Bytes between consecutive `y`.
    pub row: usize,
    /// Bytes between consecutive `z`.
    pub slice: usize,
}

impl Pitch {
    /// One past the last byte of a box of `region` pixels from offset 0
    /// (`None` on overflow).
    pub fn span(&self, region: [usize; 3], elem: usize) -> Option<usize> {
        (region[2] - 1)
            .checked_mul(self.slice)?
            .checked_add((region[1] - 1).checked_mul(self.row)?)?
            .checked_add(region[0].checked_mul(elem)?)
    }

    /// Offset of pixel `at` of the box.
    fn at(&self, at: [usize; 3], elem: usize) -> usize {
        at[2] * self.slice + at[1] * self.row + at[0] * elem
    }
}

/// A box of an image: origin and region in pixels (array layers last).
pub type ImageBox = ([usize; 3], [usize; 3]);

/// `cl_image_format`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ClImageFormat {
    /// `image_channel_order`.
    pub order: u32,
    /// `image_channel_data_type`.
    pub channel_type: u32,
}

/// `cl_image_desc` (OpenCL 1.2).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ClImageDesc {
    /// `image_type`.
    pub image_type: u32,
    /// `image_width`.
    pub width: usize,
    /// `image_height`.
    pub height: usize,
    /// `image_depth`.
    pub depth: usize,
    /// `image_array_size`.
    pub array_size: usize,
    /// `image_row_pitch`.
    pub row_pitch: usize,
    /// `image_slice_pitch`.
    pub slice_pitch: usize,
    /// `num_mip_levels`.
    pub num_mip_levels: u32,
    /// `num_samples`.
    pub num_samples: u32,
    /// `buffer` (`mem_object`).
    pub buffer: Handle,
}

// ---------------------------------------------------------------------------
// Formats, descriptions, layouts.

/// Bytes per pixel of a format: `CL_INVALID_IMAGE_FORMAT_DESCRIPTOR` for
/// values or combinations OpenCL does not define, and
/// `CL_IMAGE_FORMAT_NOT_SUPPORTED` for the orders this library does not
/// carry (the padded `CL_Rx`/`CL_RGx`, sRGB without alpha, depth).
pub fn element_size(order: u32, channel_type: u32) -> Result<usize, i32> {
    let bad = CL_INVALID_IMAGE_FORMAT_DESCRIPTOR;
    let size = match channel_type {
        CL_SNORM_INT8 | CL_UNORM_INT8 | CL_SIGNED_INT8 | CL_UNSIGNED_INT8 => 1,
        CL_SNORM_INT16 | CL_UNORM_INT16 | CL_SIGNED_INT16 | CL_UNSIGNED_INT16 | CL_HALF_FLOAT => 2,
        CL_SIGNED_INT32 | CL_UNSIGNED_INT32 | CL_FLOAT => 4,
        CL_UNORM_SHORT_565 | CL_UNORM_SHORT_555 | CL_UNORM_INT_101010 | CL_UNORM_INT_101010_2 => 0,
        0x10DF => return Err(CL_IMAGE_FORMAT_NOT_SUPPORTED),
        _ => return Err(bad),
    };
    let eight_bit = size == 1;
    match order {
        CL_RGB | CL_RGBX => match channel_type {
            CL_UNORM_SHORT_565 | CL_UNORM_SHORT_555 => Ok(2),
            CL_UNORM_INT_101010 => Ok(4),
            _ => Err(bad),
        },
        _ if size == 0 => {
            if order == CL_RGBA && channel_type == CL_UNORM_INT_101010_2 {
                Ok(4)
            } else {
                Err(bad)
            }
        }
        CL_R | CL_A => Ok(size),
        CL_RG | CL_RA => Ok(2 * size),
        CL_RGBA => Ok(4 * size),
        CL_BGRA | CL_ARGB | CL_ABGR if eight_bit => Ok(4),
        CL_SRGBA | CL_SBGRA if channel_type == CL_UNORM_INT8 => Ok(4),
        CL_INTENSITY | CL_LUMINANCE => match channel_type {
            CL_UNORM_INT8 | CL_UNORM_INT16 | CL_SNORM_INT8 | CL_SNORM_INT16 | CL_HALF_FLOAT
            | CL_FLOAT => Ok(size),
            _ => Err(bad),
        },
        CL_BGRA | CL_ARGB | CL_ABGR | CL_SRGBA | CL_SBGRA => Err(bad),
        CL_RX | CL_RGX | CL_DEPTH | 0x10BE | CL_SRGB | CL_SRGBX => {
            Err(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        }
        _ => Err(bad),
    }
}

/// The number of coordinates an image type addresses (the others of a box
/// are origin 0, region 1).
fn dims(image_type: u32) -> usize {
    match image_type {
        IMAGE1D => 1,
        IMAGE2D | IMAGE1D_ARRAY => 2,
        _ => 3,
    }
}

/// The layout of a box of `region` pixels in guest memory with the API's
/// `row_pitch` and `slice_pitch` (0: packed), checked: `err` for a pitch
/// below its minimum (a row; a 2D slice for 3D images and 2D arrays, a row
/// for 1D arrays). 1D and 2D images have no slice pitch.
pub fn app_pitch(
    image_type: u32,
    region: [usize; 3],
    elem: usize,
    row_pitch: usize,
    slice_pitch: usize,
    err: i32,
) -> Result<Pitch, i32> {
    let tight = region[0].checked_mul(elem).ok_or(err)?;
    let row = match row_pitch {
        0 => tight,
        p if p < tight => return Err(err),
        p => p,
    };
    let slice_of = |min: usize| match slice_pitch {
        0 => Ok(min),
        p if p < min => Err(err),
        p => Ok(p),
    };
    Ok(match image_type {
        IMAGE1D_ARRAY => Pitch {
            row: slice_of(row)?,
            slice: 0,
        },
        IMAGE2D_ARRAY | IMAGE3D => Pitch {
            row,
            slice: slice_of(row.checked_mul(region[1]).ok_or(err)?)?,
        },
        _ => Pitch { row, slice: 0 },
    })
}

/// A box of an image, checked: the coordinates the type does not address
/// are origin 0 and region 1, the box is not empty and lies within the
/// image (`CL_INVALID_VALUE` else).
pub fn check_box(
    image_type: u32,
    extent: [usize; 3],
    origin: [usize; 3],
    region: [usize; 3],
) -> Result<ImageBox, i32> {
    for i in dims(image_type)..3 {
        if origin[i] != 0 || region[i] != 1 {
            return Err(CL_INVALID_VALUE);
        }
    }
    for i in 0..3 {
        if region[i] == 0
            || origin[i]
                .checked_add(region[i])
                .is_none_or(|end| end > extent[i])
        {
            return Err(CL_INVALID_VALUE);
        }
    }
    Ok((origin, region))
}

/// The wire's box.
fn wire(origin: [usize; 3], region: [usize; 3]) -> ImageRegion {
    ImageRegion {
        origin: origin.map(|v| v as u64),
        region: region.map(|v| v as u64),
    }
}

/// A box of `region` pixels split into pieces of at most `cap` packed
/// bytes: runs of whole slices, else runs of rows, else parts of a row
/// (a piece is never smaller than one pixel). Each piece is its offset in
/// the box and its size, in order.
pub fn pieces(region: [usize; 3], elem: usize, cap: usize) -> Vec<([usize; 3], [usize; 3])> {
    let row = region[0].saturating_mul(elem);
    let slice = row.saturating_mul(region[1]);
    let mut out = Vec::new();
    if slice <= cap {
        let k = cap / slice;
        for z in (0..region[2]).step_by(k) {
            out.push(([0, 0, z], [region[0], region[1], k.min(region[2] - z)]));
        }
    } else if row <= cap {
        let k = cap / row;
        for z in 0..region[2] {
            for y in (0..region[1]).step_by(k) {
                out.push(([0, y, z], [region[0], k.min(region[1] - y), 1]));
            }
        }
    } else {
        let k = (cap / elem).max(1);
        for z in 0..region[2] {
            for y in 0..region[1] {
                for x in (0..region[0]).step_by(k) {
                    out.push(([x, y, z], [k.min(region[0] - x), 1, 1]));
                }
            }
        }
    }
    out
}

/// Appends the packed bytes of piece `(at, size)` of a box whose bytes lie
/// in `src` with layout `p`.
pub fn pack(
    src: &[u8],
    p: Pitch,
    elem: usize,
    at: [usize; 3],
    size: [usize; 3],
    out: &mut Vec<u8>,
) {
    let len = size[0] * elem;
    for z in 0..size[2] {
        for y in 0..size[1] {
            let o = p.at([at[0], at[1] + y, at[2] + z], elem);
            out.extend_from_slice(&src[o..o + len]);
        }
    }
}

/// Places the packed bytes `data` of piece `(at, size)` of a box into
/// `dst`, laid out with `p`.
pub fn unpack(
    dst: &mut [u8],
    p: Pitch,
    elem: usize,
    at: [usize; 3],
    size: [usize; 3],
    data: &[u8],
) {
    let len = size[0] * elem;
    let mut from = 0;
    for z in 0..size[2] {
        for y in 0..size[1] {
            let o = p.at([at[0], at[1] + y, at[2] + z], elem);
            dst[o..o + len].copy_from_slice(&data[from..from + len]);
            from += len;
        }
    }
}

/// The IEEE half nearest `v` (ties to even; overflow to infinity, NaN
/// stays NaN).
pub fn f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = ((b >> 23) & 0xff) as i32;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | 0x7c00 | if man != 0 { 0x200 } else { 0 };
    }
    // Rounds `m >> shift` to nearest, ties to even.
    let round = |m: u32, shift: u32| {
        let r = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rem > half || (rem == half && r & 1 == 1) {
            r + 1
        } else {
            r
        }
    };
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // A subnormal half (or zero): units of 2^-24.
        if e < -10 {
            return sign;
        }
        return sign | round(man | 0x80_0000, (14 - e) as u32) as u16;
    }
    // A carry out of the mantissa moves to the next exponent (to infinity
    // past the largest half), as it should.
    sign | round(((e as u32) << 23) | man, 13) as u16
}

/// One pixel of `fill_color` (`float4`, `int4` or `uint4` as the channel
/// type wants) in the format, converted as `write_image{f,i,ui}` would;
/// `None` for the formats this library does not convert.
pub fn fill_pixel(order: u32, channel_type: u32, color: &[u8; 16]) -> Option<Vec<u8>> {
    let channels: &[usize] = match order {
        CL_R => &[0],
        CL_A => &[3],
        CL_RG => &[0, 1],
        CL_RA => &[0, 3],
        CL_RGBA => &[0, 1, 2, 3],
        CL_BGRA => &[2, 1, 0, 3],
        CL_ARGB => &[3, 0, 1, 2],
        _ => return None,
    };
    let word = |i: usize| -> [u8; 4] { color[4 * i..4 * i + 4].try_into().expect("4 bytes") };
    let f = |i| f32::from_ne_bytes(word(i));
    let s = |i| i32::from_ne_bytes(word(i));
    let u = |i| u32::from_ne_bytes(word(i));
    // `as` saturates, and takes NaN to 0: convert_*_sat.
    let norm = |v: f32, scale: f32| (v * scale).round_ties_even();
    let mut out = Vec::with_capacity(16);
    for &c in channels {
        match channel_type {
            CL_FLOAT => out.extend(f(c).to_ne_bytes()),
            CL_HALF_FLOAT => out.extend(f16_bits(f(c)).to_ne_bytes()),
            CL_UNORM_INT8 => out.push(norm(f(c), 255.0) as u8),
            CL_UNORM_INT16 => out.extend((norm(f(c), 65535.0) as u16).to_ne_bytes()),
            CL_SNORM_INT8 => out.push(norm(f(c), 127.0) as i8 as u8),
            CL_SNORM_INT16 => out.extend((norm(f(c), 32767.0) as i16).to_ne_bytes()),
            CL_SIGNED_INT8 => out.push(s(c).clamp(-128, 127) as i8 as u8),
            CL_SIGNED_INT16 => out.extend((s(c).clamp(-32768, 32767) as i16).to_ne_bytes()),
            CL_SIGNED_INT32 => out.extend(s(c).to_ne_bytes()),
            CL_UNSIGNED_INT8 => out.push(u(c).min(255) as u8),
            CL_UNSIGNED_INT16 => out.extend((u(c).min(65535) as u16).to_ne_bytes()),
            CL_UNSIGNED_INT32 => out.extend(u(c).to_ne_bytes()),
            _ => return None,
        }
    }
    Some(out)
}

// ---------------------------------------------------------------------------
// Transfers.

/// Writes box `(origin, region)` of host image `img` on host queue `queue`
/// (0: the host's own) in pieces, the event `event` on the last;
/// `fill(at, size, out)` appends a piece's packed bytes.
pub fn write_box(
    c: &mut Conn,
    queue: u64,
    img: u64,
    elem: usize,
    (origin, region): ImageBox,
    event: u64,
    mut fill: impl FnMut([usize; 3], [usize; 3], &mut Vec<u8>),
) -> Result<(), i32> {
    let cap = c.max_slice().saturating_sub(IMAGE_REGION);
    let parts = pieces(region, elem, cap);
    let last = parts.len() - 1;
    let mut payload = Vec::new();
    for (i, (at, size)) in parts.into_iter().enumerate() {
        let o = [0, 1, 2].map(|d| origin[d] + at[d]);
        payload.clear();
        payload.extend(wire(o, size).to_bytes());
        fill(at, size, &mut payload);
        let ev = if i == last { event } else { 0 };
        c.fire(Opcode::ClWriteImage, &[queue, img, 0, 0, ev], &payload)?;
    }
    Ok(())
}

/// Reads box `(origin, region)` of host image `img` on host queue `queue`
/// in pieces, the event `event` on the last; `place(at, size, bytes)`
/// takes each piece's packed bytes.
pub fn read_box(
    c: &mut Conn,
    queue: u64,
    img: u64,
    elem: usize,
    (origin, region): ImageBox,
    event: u64,
    mut place: impl FnMut([usize; 3], [usize; 3], &[u8]),
) -> Result<(), i32> {
    let parts = pieces(region, elem, c.max_slice());
    let last = parts.len() - 1;
    let mut buf = Vec::new();
    for (i, (at, size)) in parts.into_iter().enumerate() {
        let o = [0, 1, 2].map(|d| origin[d] + at[d]);
        buf.clear();
        buf.resize(size[0] * size[1] * size[2] * elem, 0);
        let ev = if i == last { event } else { 0 };
        c.exec(
            Opcode::ClReadImage,
            &[queue, img, 0, 0, ev],
            &wire(o, size).to_bytes(),
            &mut buf,
        )?;
        place(at, size, &buf);
    }
    Ok(())
}

/// Image `h` of the enqueue's context, with its description.
fn image_of(e: &Enqueue, h: Handle) -> Result<(Arc<Mem>, ImageInfo), i32> {
    let m = mem::mem_of(e, h)?;
    let info = m.image.ok_or(CL_INVALID_MEM_OBJECT)?;
    Ok((m, info))
}

// ---------------------------------------------------------------------------
// Creation and queries.

/// A device limit (a `size_t` value), if the host gives it.
fn device_size(param: u32) -> Option<usize> {
    let v = host_device_info(param).ok()?;
    Some(usize::from_ne_bytes(
        v.get(..size_of::<usize>())?.try_into().ok()?,
    ))
}

/// `CL_INVALID_IMAGE_SIZE` unless every used dimension is at least 1 and
/// within the device's limits (those it reports).
fn check_size(d: &ClImageDesc) -> Result<(), i32> {
    let (w2, h2) = (CL_DEVICE_IMAGE2D_MAX_WIDTH, CL_DEVICE_IMAGE2D_MAX_HEIGHT);
    let arr = CL_DEVICE_IMAGE_MAX_ARRAY_SIZE;
    let limits: &[(usize, u32)] = match d.image_type {
        IMAGE1D => &[(d.width, w2)],
        IMAGE1D_ARRAY => &[(d.width, w2), (d.array_size, arr)],
        IMAGE2D => &[(d.width, w2), (d.height, h2)],
        IMAGE2D_ARRAY => &[(d.width, w2), (d.height, h2), (d.array_size, arr)],
        _ => &[
            (d.width, CL_DEVICE_IMAGE3D_MAX_WIDTH),
            (d.height, CL_DEVICE_IMAGE3D_MAX_HEIGHT),
            (d.depth, CL_DEVICE_IMAGE3D_MAX_DEPTH),
        ],
    };
    for &(v, param) in limits {
        if v == 0 || device_size(param).is_some_and(|max| v > max) {
            return Err(CL_INVALID_IMAGE_SIZE);
        }
    }
    Ok(())
}

/// The wire description of a checked `cl_image_desc`: the fields its type
/// does not use are 0.
fn wire_desc(f: ClImageFormat, d: &ClImageDesc) -> ImageDesc {
    let t = d.image_type;
    let uses = |yes: bool, v: usize| if yes { v as u64 } else { 0 };
    ImageDesc {
        order: f.order,
        channel_type: f.channel_type,
        image_type: t,
        reserved: 0,
        width: d.width as u64,
        height: uses(matches!(t, IMAGE2D | IMAGE2D_ARRAY | IMAGE3D), d.height),
        depth: uses(t == IMAGE3D, d.depth),
        array_size: uses(matches!(t, IMAGE1D_ARRAY | IMAGE2D_ARRAY), d.array_size),
    }
}

/// Checks a description (with the format's element size `elem`) as
/// `clCreateImage` does, and returns the host memory's layout when
/// `host_ptr` is given.
pub fn check_desc(d: &ClImageDesc, elem: usize, has_host_ptr: bool) -> Result<Pitch, i32> {
    match d.image_type {
        IMAGE1D | IMAGE1D_ARRAY | IMAGE2D | IMAGE2D_ARRAY | IMAGE3D => {}
        CL_MEM_OBJECT_IMAGE1D_BUFFER => {
            return Err(unsupported("clCreateImage (CL_MEM_OBJECT_IMAGE1D_BUFFER)"))
        }
        _ => return Err(CL_INVALID_IMAGE_DESCRIPTOR),
    }
    if d.num_mip_levels != 0 || d.num_samples != 0 || !d.buffer.is_null() {
        return Err(CL_INVALID_IMAGE_DESCRIPTOR);
    }
    check_size(d)?;
    let bad = CL_INVALID_IMAGE_DESCRIPTOR;
    let no_format = ClImageFormat {
        order: 0,
        channel_type: 0,
    };
    let extent = wire_desc(no_format, d)
        .extent()
        .ok_or(bad)?
        .map(|v| v as usize);
    if !has_host_ptr {
        if d.row_pitch != 0 || d.slice_pitch != 0 {
            return Err(bad);
        }
        return app_pitch(d.image_type, extent, elem, 0, 0, bad);
    }
    if !d.row_pitch.is_multiple_of(elem) {
        return Err(bad);
    }
    let p = app_pitch(d.image_type, extent, elem, d.row_pitch, d.slice_pitch, bad)?;
    let row = if d.row_pitch == 0 {
        d.width * elem
    } else {
        d.row_pitch
    };
    if matches!(d.image_type, IMAGE1D_ARRAY | IMAGE2D_ARRAY | IMAGE3D)
        && !d.slice_pitch.is_multiple_of(row)
    {
        return Err(bad);
    }
    Ok(p)
}

fn new_image(
    context: Handle,
    flags: u64,
    format: *const ClImageFormat,
    desc: Option<ClImageDesc>,
    host_ptr: *mut c_void,
) -> Result<Handle, i32> {
    let ctx = ParentRef::new::<Context>(context)?;
    check_flags(flags, !host_ptr.is_null())?;
    if format.is_null() {
        return Err(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR);
    }
    // SAFETY: a non-null image_format points to a cl_image_format.
    let fmt: ClImageFormat = unsafe { raw::get(format) };
    let elem = element_size(fmt.order, fmt.channel_type)?;
    let d = desc.ok_or(CL_INVALID_IMAGE_DESCRIPTOR)?;
    let pitch = check_desc(&d, elem, !host_ptr.is_null())?;
    let wd = wire_desc(fmt, &d);
    let extent = wd
        .extent()
        .ok_or(CL_INVALID_IMAGE_DESCRIPTOR)?
        .map(|v| v as usize);
    let init = if flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR) != 0 {
        let len = pitch.span(extent, elem).ok_or(CL_INVALID_IMAGE_SIZE)?;
        // SAFETY: host_ptr holds the image's pixels with the given pitches
        // (`len` bytes) per clCreateImage's contract.
        Some(unsafe { raw::bytes(host_ptr, len) }.ok_or(CL_INVALID_HOST_PTR)?)
    } else {
        None
    };
    let access = match flags & ACCESS {
        0 => CL_MEM_READ_WRITE,
        a => a,
    };
    let (host, bytes) = conn::with(|c| {
        let r = c.call(Opcode::ClCreateImage, &[access], &wd.to_bytes(), &mut [])?;
        let (h, host_elem, bytes) = (r.vals[0], r.vals[1], r.vals[2]);
        let done = if host_elem != elem as u64 {
            crate::log(format_args!(
                "clCreateImage: the host says {host_elem} bytes a pixel for format \
                 {:#x}/{:#x}, not {elem}",
                fmt.order, fmt.channel_type
            ));
            Err(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        } else if let Some(data) = init {
            write_box(c, 0, h, elem, ([0; 3], extent), 0, |at, size, out| {
                pack(data, pitch, elem, at, size, out)
            })
        } else {
            Ok(())
        };
        if let Err(e) = done {
            let _ = c.fire(Opcode::ClReleaseMem, &[h], &[]);
            return Err(e);
        }
        Ok((h, bytes))
    })?;
    let host_ptr = if flags & CL_MEM_USE_HOST_PTR != 0 {
        host_ptr as usize
    } else {
        0
    };
    let info = ImageInfo {
        order: fmt.order,
        channel_type: fmt.channel_type,
        desc: wd,
        elem,
        host: pitch,
    };
    Ok(mem::new_image(
        ctx,
        flags,
        bytes as usize,
        host_ptr,
        host,
        info,
    ))
}

/// Reads a `cl_image_desc` (`None` for null).
fn read_desc(desc: *const ClImageDesc) -> Option<ClImageDesc> {
    if desc.is_null() {
        return None;
    }
    // SAFETY: a non-null image_desc points to a cl_image_desc.
    Some(unsafe { raw::get(desc) })
}

pub(crate) extern "C" fn clCreateImage(
    context: Handle,
    flags: u64,
    format: *const ClImageFormat,
    desc: *const ClImageDesc,
    host_ptr: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateImage", errcode_ret, || {
        new_image(context, flags, format, read_desc(desc), host_ptr)
    })
}

pub(crate) extern "C" fn clCreateImageWithProperties(
    context: Handle,
    properties: *const u64,
    flags: u64,
    format: *const ClImageFormat,
    desc: *const ClImageDesc,
    host_ptr: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateImageWithProperties", errcode_ret, || {
        registry::get::<Context>(context)?;
        // No image property is supported: the list must be empty.
        // SAFETY: properties is null or a 0-terminated list.
        if !properties.is_null() && unsafe { raw::get(properties) } != 0 {
            return Err(CL_INVALID_PROPERTY);
        }
        new_image(context, flags, format, read_desc(desc), host_ptr)
    })
}

/// A description of the OpenCL 1.0 entry points.
fn desc_of(
    image_type: u32,
    extent: [usize; 3],
    row_pitch: usize,
    slice_pitch: usize,
) -> ClImageDesc {
    ClImageDesc {
        image_type,
        width: extent[0],
        height: extent[1],
        depth: extent[2],
        array_size: 0,
        row_pitch,
        slice_pitch,
        num_mip_levels: 0,
        num_samples: 0,
        buffer: std::ptr::null_mut(),
    }
}

pub(crate) extern "C" fn clCreateImage2D(
    context: Handle,
    flags: u64,
    format: *const ClImageFormat,
    width: usize,
    height: usize,
    row_pitch: usize,
    host_ptr: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateImage2D", errcode_ret, || {
        let d = desc_of(IMAGE2D, [width, height, 0], row_pitch, 0);
        new_image(context, flags, format, Some(d), host_ptr)
    })
}

pub(crate) extern "C" fn clCreateImage3D(
    context: Handle,
    flags: u64,
    format: *const ClImageFormat,
    width: usize,
    height: usize,
    depth: usize,
    row_pitch: usize,
    slice_pitch: usize,
    host_ptr: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateImage3D", errcode_ret, || {
        registry::get::<Context>(context)?;
        // OpenCL 1.0: a 3D image has more than one slice.
        if depth <= 1 {
            return Err(CL_INVALID_IMAGE_SIZE);
        }
        let d = desc_of(IMAGE3D, [width, height, depth], row_pitch, slice_pitch);
        new_image(context, flags, format, Some(d), host_ptr)
    })
}

pub(crate) extern "C" fn clGetSupportedImageFormats(
    context: Handle,
    flags: u64,
    image_type: u32,
    num_entries: u32,
    formats: *mut ClImageFormat,
    num_formats: *mut u32,
) -> i32 {
    guard("clGetSupportedImageFormats", || {
        registry::get::<Context>(context)?;
        check_flags(flags & !(CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR), false)?;
        if num_entries == 0 && !formats.is_null() {
            return Err(CL_INVALID_VALUE);
        }
        let list = match image_type {
            IMAGE1D | IMAGE1D_ARRAY | IMAGE2D | IMAGE2D_ARRAY | IMAGE3D => {
                host_formats(flags, image_type)?
            }
            // Not carried: no format.
            CL_MEM_OBJECT_IMAGE1D_BUFFER => Vec::new(),
            _ => return Err(CL_INVALID_VALUE),
        };
        if !formats.is_null() {
            for (i, f) in list.iter().take(num_entries as usize).enumerate() {
                // SAFETY: image_formats holds num_entries cl_image_formats.
                unsafe { raw::set(formats.wrapping_add(i), *f) };
            }
        }
        // SAFETY: num_image_formats is null or writable.
        unsafe { raw::set(num_formats, list.len() as u32) };
        Ok(())
    })
}

/// The host's formats for `flags` and an image type, less those this
/// library cannot create.
fn host_formats(flags: u64, image_type: u32) -> Result<Vec<ClImageFormat>, i32> {
    let access = match flags & ACCESS {
        0 => CL_MEM_READ_WRITE,
        a => a,
    };
    let (n, bytes) = conn::with(|c| {
        let mut buf = vec![0u8; c.max_slice()];
        let r = c.call(
            Opcode::ClImageFormats,
            &[access, u64::from(image_type)],
            &[],
            &mut buf,
        )?;
        buf.truncate(r.data_len as usize);
        Ok((r.vals[0] as usize, buf))
    })?;
    let word = |c: &[u8]| u32::from_le_bytes(c.try_into().expect("4 bytes"));
    Ok(bytes
        .chunks_exact(8)
        .take(n)
        .map(|p| ClImageFormat {
            order: word(&p[..4]),
            channel_type: word(&p[4..]),
        })
        .filter(|f| element_size(f.order, f.channel_type).is_ok())
        .collect())
}

pub(crate) extern "C" fn clGetImageInfo(
    image: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetImageInfo", || {
        let m = registry::get::<Mem>(image)?;
        let i = m.image.ok_or(CL_INVALID_MEM_OBJECT)?;
        let d = &i.desc;
        let sz = |v: u64| (v as usize).to_ne_bytes().to_vec();
        let v = match param {
            CL_IMAGE_FORMAT => [i.order, i.channel_type]
                .iter()
                .flat_map(|w| w.to_ne_bytes())
                .collect(),
            CL_IMAGE_ELEMENT_SIZE => i.elem.to_ne_bytes().to_vec(),
            CL_IMAGE_ROW_PITCH => i.row_pitch().to_ne_bytes().to_vec(),
            CL_IMAGE_SLICE_PITCH => i.slice_pitch().to_ne_bytes().to_vec(),
            CL_IMAGE_WIDTH => sz(d.width),
            CL_IMAGE_HEIGHT => sz(d.height),
            CL_IMAGE_DEPTH => sz(d.depth),
            CL_IMAGE_ARRAY_SIZE => sz(d.array_size),
            CL_IMAGE_BUFFER => 0usize.to_ne_bytes().to_vec(),
            CL_IMAGE_NUM_MIP_LEVELS | CL_IMAGE_NUM_SAMPLES => 0u32.to_ne_bytes().to_vec(),
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetImageInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

// ---------------------------------------------------------------------------
// Commands.

pub(crate) extern "C" fn clEnqueueReadImage(
    queue: Handle,
    image: Handle,
    _blocking: u32,
    origin: *const usize,
    region: *const usize,
    row_pitch: usize,
    slice_pitch: usize,
    ptr: *mut c_void,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueReadImage", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let (m, i) = image_of(&e, image)?;
        if !host_can_read(m.flags) {
            return Err(CL_INVALID_OPERATION);
        }
        let b = check_box(
            i.desc.image_type,
            i.extent(),
            triple(origin)?,
            triple(region)?,
        )?;
        let t = i.desc.image_type;
        let p = app_pitch(t, b.1, i.elem, row_pitch, slice_pitch, CL_INVALID_VALUE)?;
        let len = p.span(b.1, i.elem).ok_or(CL_INVALID_VALUE)?;
        // SAFETY: ptr holds the box's pixels with the given pitches (`len`
        // bytes), which the application leaves alone until the read
        // completes (before this returns).
        let out = unsafe { raw::bytes_mut(ptr, len) }.ok_or(CL_INVALID_VALUE)?;
        let earlier = conn::with(|c| {
            e.send_waits(c)?;
            read_box(
                c,
                e.queue.host,
                m.host,
                i.elem,
                b,
                e.event,
                |at, size, data| unpack(out, p, i.elem, at, size, data),
            )?;
            // A read is a synchronization point, blocking or not.
            Ok(c.take_pending())
        })?;
        e.publish(CL_COMMAND_READ_IMAGE, true)?;
        earlier
    })
}

pub(crate) extern "C" fn clEnqueueWriteImage(
    queue: Handle,
    image: Handle,
    _blocking: u32,
    origin: *const usize,
    region: *const usize,
    row_pitch: usize,
    slice_pitch: usize,
    ptr: *const c_void,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueWriteImage", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let (m, i) = image_of(&e, image)?;
        if !host_can_write(m.flags) {
            return Err(CL_INVALID_OPERATION);
        }
        let b = check_box(
            i.desc.image_type,
            i.extent(),
            triple(origin)?,
            triple(region)?,
        )?;
        let t = i.desc.image_type;
        let p = app_pitch(t, b.1, i.elem, row_pitch, slice_pitch, CL_INVALID_VALUE)?;
        let len = p.span(b.1, i.elem).ok_or(CL_INVALID_VALUE)?;
        // SAFETY: ptr holds the box's pixels with the given pitches (`len`
        // bytes); they are copied out before this returns.
        let data = unsafe { raw::bytes(ptr, len) }.ok_or(CL_INVALID_VALUE)?;
        conn::with(|c| {
            e.send_waits(c)?;
            write_box(
                c,
                e.queue.host,
                m.host,
                i.elem,
                b,
                e.event,
                |at, size, out| pack(data, p, i.elem, at, size, out),
            )
        })?;
        e.publish(CL_COMMAND_WRITE_IMAGE, false)
    })
}

pub(crate) extern "C" fn clEnqueueCopyImage(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_origin: *const usize,
    dst_origin: *const usize,
    region: *const usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueCopyImage", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let (s, si) = image_of(&e, src)?;
        let (d, di) = image_of(&e, dst)?;
        if (si.order, si.channel_type) != (di.order, di.channel_type) {
            return Err(CL_IMAGE_FORMAT_MISMATCH);
        }
        let region = triple(region)?;
        let (so, _) = check_box(si.desc.image_type, si.extent(), triple(src_origin)?, region)?;
        let (dof, _) = check_box(di.desc.image_type, di.extent(), triple(dst_origin)?, region)?;
        if src == dst && (0..3).all(|k| so[k] < dof[k] + region[k] && dof[k] < so[k] + region[k]) {
            return Err(CL_MEM_COPY_OVERLAP);
        }
        let words: Vec<u64> = so
            .iter()
            .chain(&dof)
            .chain(&region)
            .map(|&v| v as u64)
            .collect();
        conn::with(|c| {
            e.send_waits(c)?;
            c.fire(
                Opcode::ClCopyImage,
                &[e.queue.host, s.host, d.host, 0, e.event],
                &encode_words(&words),
            )
        })?;
        e.publish(CL_COMMAND_COPY_IMAGE, false)
    })
}

/// CL_INVALID_VALUE unless a box of `region` pixels of `elem` bytes fits
/// buffer `b` from `offset`.
fn check_buffer_side(b: &Mem, offset: usize, region: [usize; 3], elem: usize) -> Result<(), i32> {
    let n = region
        .iter()
        .try_fold(elem, |a, &r| a.checked_mul(r))
        .ok_or(CL_INVALID_VALUE)?;
    if offset.checked_add(n).is_none_or(|end| end > b.size) {
        return Err(CL_INVALID_VALUE);
    }
    Ok(())
}

pub(crate) extern "C" fn clEnqueueCopyImageToBuffer(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_origin: *const usize,
    region: *const usize,
    dst_offset: usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueCopyImageToBuffer", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let (s, si) = image_of(&e, src)?;
        let d = mem::buffer_of(&e, dst)?;
        let (o, r) = check_box(
            si.desc.image_type,
            si.extent(),
            triple(src_origin)?,
            triple(region)?,
        )?;
        check_buffer_side(&d, dst_offset, r, si.elem)?;
        let words: Vec<u64> = o
            .iter()
            .chain(&r)
            .chain(&[dst_offset])
            .map(|&v| v as u64)
            .collect();
        conn::with(|c| {
            e.send_waits(c)?;
            c.fire(
                Opcode::ClCopyImageToBuffer,
                &[e.queue.host, s.host, d.host, 0, e.event],
                &encode_words(&words),
            )
        })?;
        e.publish(CL_COMMAND_COPY_IMAGE_TO_BUFFER, false)
    })
}

pub(crate) extern "C" fn clEnqueueCopyBufferToImage(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_offset: usize,
    dst_origin: *const usize,
    region: *const usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueCopyBufferToImage", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let s = mem::buffer_of(&e, src)?;
        let (d, di) = image_of(&e, dst)?;
        let (o, r) = check_box(
            di.desc.image_type,
            di.extent(),
            triple(dst_origin)?,
            triple(region)?,
        )?;
        check_buffer_side(&s, src_offset, r, di.elem)?;
        let words: Vec<u64> = [src_offset]
            .iter()
            .chain(&o)
            .chain(&r)
            .map(|&v| v as u64)
            .collect();
        conn::with(|c| {
            e.send_waits(c)?;
            c.fire(
                Opcode::ClCopyBufferToImage,
                &[e.queue.host, s.host, d.host, 0, e.event],
                &encode_words(&words),
            )
        })?;
        e.publish(CL_COMMAND_COPY_BUFFER_TO_IMAGE, false)
    })
}

pub(crate) extern "C" fn clEnqueueMapImage(
    queue: Handle,
    image: Handle,
    blocking: u32,
    map_flags: u64,
    origin: *const usize,
    region: *const usize,
    row_pitch_ret: *mut usize,
    slice_pitch_ret: *mut usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
    errcode_ret: *mut i32,
) -> *mut c_void {
    guard_obj("clEnqueueMapImage", errcode_ret, || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let (m, i) = image_of(&e, image)?;
        let (writes, fetch) = mem::map_access(&m, map_flags)?;
        let t = i.desc.image_type;
        let b = check_box(t, i.extent(), triple(origin)?, triple(region)?)?;
        if row_pitch_ret.is_null()
            || (slice_pitch_ret.is_null() && matches!(t, IMAGE1D_ARRAY | IMAGE2D_ARRAY | IMAGE3D))
        {
            return Err(CL_INVALID_VALUE);
        }
        // The application's own memory for a USE_HOST_PTR image (the box
        // within it), else a packed allocation.
        let (p, ptr, mut memory) = if m.flags & CL_MEM_USE_HOST_PTR != 0 {
            (i.host, m.host_ptr + i.host.at(b.0, i.elem), None)
        } else {
            let p = app_pitch(t, b.1, i.elem, 0, 0, CL_INVALID_VALUE)?;
            let len = p.span(b.1, i.elem).ok_or(CL_MAP_FAILURE)?;
            let mut mm = MapMemory::new(len).ok_or(CL_MAP_FAILURE)?;
            (p, mm.ptr() as usize, Some(mm))
        };
        let len = p.span(b.1, i.elem).ok_or(CL_MAP_FAILURE)?;
        let earlier = conn::with(|c| {
            e.send_waits(c)?;
            if fetch {
                let out = match &mut memory {
                    Some(mm) => mm.bytes_mut(),
                    None => {
                        // SAFETY: a USE_HOST_PTR image's host pointer holds
                        // its pixels with the creation's pitches (the box's
                        // `len` bytes from `ptr`), which the application
                        // leaves to the image while it is in use.
                        let b = unsafe { raw::bytes_mut(ptr as *mut c_void, len) };
                        b.ok_or(CL_MAP_FAILURE)?
                    }
                };
                read_box(
                    c,
                    e.queue.host,
                    m.host,
                    i.elem,
                    b,
                    e.event,
                    |at, size, data| unpack(out, p, i.elem, at, size, data),
                )?;
            } else {
                e.marker(c)?;
            }
            // A map that read the pixels completed here, as a read does.
            Ok(if fetch || blocking != CL_FALSE {
                c.take_pending()
            } else {
                Ok(())
            })
        })?;
        let slice = match t {
            IMAGE1D_ARRAY => p.row,
            IMAGE2D_ARRAY | IMAGE3D => p.slice,
            _ => 0,
        };
        // SAFETY: image_row_pitch is the application's non-null size_t.
        unsafe { raw::set(row_pitch_ret, p.row) };
        // SAFETY: image_slice_pitch is null or the application's size_t.
        unsafe { raw::set(slice_pitch_ret, slice) };
        m.add_map(mem::Mapping {
            ptr,
            offset: 0,
            len,
            write: writes,
            memory,
            image: Some((b, p)),
        });
        e.publish(CL_COMMAND_MAP_IMAGE, fetch)?;
        earlier?;
        Ok(ptr as Handle)
    })
}

pub(crate) extern "C" fn clEnqueueFillImage(
    queue: Handle,
    image: Handle,
    fill_color: *const c_void,
    origin: *const usize,
    region: *const usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueFillImage", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let (m, i) = image_of(&e, image)?;
        // SAFETY: fill_color is a four-component vector (16 bytes).
        let color = unsafe { raw::bytes(fill_color, 16) }.ok_or(CL_INVALID_VALUE)?;
        let b = check_box(
            i.desc.image_type,
            i.extent(),
            triple(origin)?,
            triple(region)?,
        )?;
        let color: &[u8; 16] = color.try_into().map_err(|_| CL_INVALID_VALUE)?;
        let pixel = fill_pixel(i.order, i.channel_type, color)
            .ok_or_else(|| unsupported("clEnqueueFillImage (this image format)"))?;
        conn::with(|c| {
            e.send_waits(c)?;
            write_box(
                c,
                e.queue.host,
                m.host,
                i.elem,
                b,
                e.event,
                |_, size, out| {
                    for _ in 0..size[0] * size[1] * size[2] {
                        out.extend_from_slice(&pixel);
                    }
                },
            )
        })?;
        e.publish(CL_COMMAND_FILL_IMAGE, false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_sizes_follow_the_format_tables() {
        assert_eq!(element_size(CL_RGBA, CL_UNORM_INT8), Ok(4));
        assert_eq!(element_size(CL_RGBA, CL_FLOAT), Ok(16));
        assert_eq!(element_size(CL_R, CL_FLOAT), Ok(4));
        assert_eq!(element_size(CL_RG, CL_HALF_FLOAT), Ok(4));
        assert_eq!(element_size(CL_BGRA, CL_UNORM_INT8), Ok(4));
        assert_eq!(element_size(CL_RGB, CL_UNORM_SHORT_565), Ok(2));
        assert_eq!(element_size(CL_RGB, CL_UNORM_INT_101010), Ok(4));
        assert_eq!(element_size(CL_INTENSITY, CL_FLOAT), Ok(4));
        assert_eq!(
            element_size(CL_BGRA, CL_FLOAT),
            Err(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        );
        assert_eq!(
            element_size(CL_RGB, CL_UNORM_INT8),
            Err(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        );
        assert_eq!(
            element_size(CL_R, CL_UNORM_SHORT_565),
            Err(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        );
        assert_eq!(
            element_size(CL_INTENSITY, CL_SIGNED_INT8),
            Err(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        );
        assert_eq!(
            element_size(0x1234, CL_FLOAT),
            Err(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        );
        assert_eq!(
            element_size(CL_RGBA, 0x1234),
            Err(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
        );
        assert_eq!(
            element_size(CL_RX, CL_FLOAT),
            Err(CL_IMAGE_FORMAT_NOT_SUPPORTED)
        );
    }

    #[test]
    fn pitches_default_and_are_checked() {
        let v = CL_INVALID_VALUE;
        let p = app_pitch(IMAGE2D, [4, 3, 1], 4, 0, 0, v).unwrap();
        assert_eq!(p, Pitch { row: 16, slice: 0 });
        assert_eq!(p.span([4, 3, 1], 4), Some(48));
        let p = app_pitch(IMAGE2D, [4, 3, 1], 4, 20, 0, v).unwrap();
        assert_eq!(p.span([4, 3, 1], 4), Some(56));
        assert_eq!(app_pitch(IMAGE2D, [4, 3, 1], 4, 12, 0, v), Err(v));
        let p = app_pitch(IMAGE3D, [4, 3, 2], 1, 0, 0, v).unwrap();
        assert_eq!(p, Pitch { row: 4, slice: 12 });
        let p = app_pitch(IMAGE3D, [4, 3, 2], 1, 8, 32, v).unwrap();
        assert_eq!(p, Pitch { row: 8, slice: 32 });
        assert_eq!(app_pitch(IMAGE3D, [4, 3, 2], 1, 8, 20, v), Err(v));
        // 1D arrays: layers are y, the slice pitch their stride.
        let p = app_pitch(IMAGE1D_ARRAY, [4, 3, 1], 2, 0, 0, v).unwrap();
        assert_eq!(p, Pitch { row: 8, slice: 0 });
        let p = app_pitch(IMAGE1D_ARRAY, [4, 3, 1], 2, 0, 10, v).unwrap();
        assert_eq!(p.row, 10);
        assert_eq!(app_pitch(IMAGE1D_ARRAY, [4, 3, 1], 2, 0, 6, v), Err(v));
    }

    #[test]
    fn boxes_fit_their_image_type() {
        let v = Err(CL_INVALID_VALUE);
        assert!(check_box(IMAGE2D, [8, 4, 1], [4, 0, 0], [4, 4, 1]).is_ok());
        assert_eq!(check_box(IMAGE2D, [8, 4, 1], [5, 0, 0], [4, 4, 1]), v);
        assert_eq!(check_box(IMAGE2D, [8, 4, 1], [0, 0, 0], [4, 4, 2]), v);
        assert_eq!(check_box(IMAGE2D, [8, 4, 1], [0, 0, 0], [0, 4, 1]), v);
        assert_eq!(check_box(IMAGE1D, [8, 1, 1], [0, 1, 0], [1, 1, 1]), v);
        assert!(check_box(IMAGE1D_ARRAY, [8, 3, 1], [0, 2, 0], [8, 1, 1]).is_ok());
        assert!(check_box(IMAGE3D, [8, 4, 5], [1, 1, 1], [7, 3, 4]).is_ok());
        assert_eq!(
            check_box(IMAGE3D, [8, 4, 5], [usize::MAX, 0, 0], [2, 1, 1]),
            v
        );
    }

    #[test]
    fn pieces_cover_the_box_once_in_order() {
        let covered = |region: [usize; 3], elem: usize, cap: usize| {
            let ps = pieces(region, elem, cap);
            let mut seen = vec![0u8; region[0] * region[1] * region[2]];
            for (at, size) in &ps {
                assert!(size.iter().product::<usize>() * elem <= cap.max(elem));
                for z in 0..size[2] {
                    for y in 0..size[1] {
                        for x in 0..size[0] {
                            let (x, y, z) = (at[0] + x, at[1] + y, at[2] + z);
                            seen[(z * region[1] + y) * region[0] + x] += 1;
                        }
                    }
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "{region:?} {elem} {cap}");
            ps
        };
        assert_eq!(covered([4, 3, 2], 4, 1000).len(), 1);
        // Whole slices: 48 bytes each, two to a piece.
        assert_eq!(
            covered([4, 3, 5], 4, 100),
            vec![
                ([0, 0, 0], [4, 3, 2]),
                ([0, 0, 2], [4, 3, 2]),
                ([0, 0, 4], [4, 3, 1])
            ]
        );
        // Rows: 16 bytes each, three to a piece.
        assert_eq!(covered([4, 5, 2], 4, 50).len(), 4);
        // Parts of rows.
        let ps = covered([10, 2, 1], 4, 12);
        assert_eq!(ps[0], ([0, 0, 0], [3, 1, 1]));
        assert_eq!(ps[3], ([9, 0, 0], [1, 1, 1]));
        assert_eq!(ps.len(), 8);
        covered([7, 5, 3], 3, 20);
        covered([1, 1, 1], 16, 4);
    }

    #[test]
    fn packing_honours_the_pitches() {
        // A 3 x 2 x 2 box of 2-byte pixels, rows of 8 bytes, slices of 20.
        let p = Pitch { row: 8, slice: 20 };
        let src: Vec<u8> = (0..40).collect();
        let mut out = Vec::new();
        pack(&src, p, 2, [0, 0, 0], [3, 2, 2], &mut out);
        assert_eq!(
            out,
            [
                0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 28, 29, 30, 31, 32,
                33
            ]
        );
        // A piece: the second row's last two pixels of slice 1.
        out.clear();
        pack(&src, p, 2, [1, 1, 1], [2, 1, 1], &mut out);
        assert_eq!(out, [30, 31, 32, 33]);
        let mut back = vec![0u8; 40];
        unpack(&mut back, p, 2, [1, 1, 1], [2, 1, 1], &out);
        assert_eq!(&back[30..34], &[30, 31, 32, 33]);
        assert!(back[..30].iter().all(|&b| b == 0));
    }

    #[test]
    fn fill_colors_convert_like_write_image() {
        let floats = |v: [f32; 4]| -> [u8; 16] {
            let mut c = [0u8; 16];
            for (i, f) in v.iter().enumerate() {
                c[4 * i..4 * i + 4].copy_from_slice(&f.to_ne_bytes());
            }
            c
        };
        let c = floats([1.0, 0.5, -0.25, 2.0]);
        assert_eq!(
            fill_pixel(CL_RGBA, CL_UNORM_INT8, &c),
            Some(vec![255, 128, 0, 255])
        );
        assert_eq!(
            fill_pixel(CL_BGRA, CL_UNORM_INT8, &c),
            Some(vec![0, 128, 255, 255])
        );
        assert_eq!(
            fill_pixel(CL_R, CL_FLOAT, &c),
            Some(1.0f32.to_ne_bytes().to_vec())
        );
        assert_eq!(fill_pixel(CL_RG, CL_SNORM_INT8, &c), Some(vec![127, 64]));
        let mut ints = [0u8; 16];
        for (i, v) in [-5i32, 70000, 3, 9].iter().enumerate() {
            ints[4 * i..4 * i + 4].copy_from_slice(&v.to_ne_bytes());
        }
        let mut want = (-5i16).to_ne_bytes().to_vec();
        want.extend(32767i16.to_ne_bytes());
        assert_eq!(fill_pixel(CL_RG, CL_SIGNED_INT16, &ints), Some(want));
        assert_eq!(
            fill_pixel(CL_RGBA, CL_UNSIGNED_INT8, &ints),
            Some(vec![255, 255, 3, 9])
        );
        let mut want = 0x3c00u16.to_ne_bytes().to_vec();
        want.extend(0x3800u16.to_ne_bytes());
        assert_eq!(fill_pixel(CL_RG, CL_HALF_FLOAT, &c), Some(want));
        assert_eq!(fill_pixel(CL_RGBA, CL_UNORM_SHORT_565, &c), None);
        assert_eq!(fill_pixel(CL_INTENSITY, CL_FLOAT, &c), None);
    }

    #[test]
    fn halves_round_to_nearest_even() {
        assert_eq!(f16_bits(1.0), 0x3c00);
        assert_eq!(f16_bits(-2.0), 0xc000);
        assert_eq!(f16_bits(0.0), 0);
        assert_eq!(f16_bits(-0.0), 0x8000);
        assert_eq!(f16_bits(65504.0), 0x7bff);
        assert_eq!(f16_bits(65519.0), 0x7bff);
        assert_eq!(f16_bits(65520.0), 0x7c00, "the tie goes to even: infinity");
        assert_eq!(f16_bits(1e9), 0x7c00);
        assert_eq!(f16_bits(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f16_bits(f32::NAN) & 0x7c00, 0x7c00);
        assert_ne!(f16_bits(f32::NAN) & 0x3ff, 0);
        // Ties between 1 and the next halves.
        assert_eq!(f16_bits(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f16_bits(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        // Subnormals: units of 2^-24.
        assert_eq!(f16_bits(2f32.powi(-24)), 0x0001);
        assert_eq!(f16_bits(3.0 * 2f32.powi(-24)), 0x0003);
        assert_eq!(f16_bits(2f32.powi(-25)), 0, "a tie with 0 goes to 0");
        assert_eq!(f16_bits(1.5 * 2f32.powi(-25)), 0x0001);
        assert_eq!(f16_bits(2f32.powi(-14)), 0x0400, "the smallest normal");
        assert_eq!(f16_bits(1023.0 * 2f32.powi(-24)), 0x03ff);
        assert_eq!(
            f16_bits(1023.75 * 2f32.powi(-24)),
            0x0400,
            "a carry into the normals"
        );
        assert_eq!(f16_bits(1e-10), 0);
        // Every half converts back to itself.
        for h in (0u16..0x7c00).step_by(7) {
            let e = (h >> 10) as i32;
            let m = f32::from(h & 0x3ff);
            let v = if e == 0 {
                m * 2f32.powi(-24)
            } else {
                (1.0 + m / 1024.0) * 2f32.powi(e - 15)
            };
            assert_eq!(f16_bits(v), h, "{v}");
        }
    }

    #[test]
    fn descriptions_are_checked_like_create_image() {
        let d = desc_of(IMAGE2D, [16, 8, 0], 0, 0);
        assert_eq!(check_desc(&d, 4, false), Ok(Pitch { row: 64, slice: 0 }));
        let padded = desc_of(IMAGE2D, [16, 8, 0], 80, 0);
        assert_eq!(
            check_desc(&padded, 4, false),
            Err(CL_INVALID_IMAGE_DESCRIPTOR),
            "a pitch without a host pointer"
        );
        assert_eq!(
            check_desc(&padded, 4, true),
            Ok(Pitch { row: 80, slice: 0 })
        );
        let odd = desc_of(IMAGE2D, [16, 8, 0], 66, 0);
        assert_eq!(check_desc(&odd, 4, true), Err(CL_INVALID_IMAGE_DESCRIPTOR));
        let zero = desc_of(IMAGE2D, [16, 0, 0], 0, 0);
        assert_eq!(check_desc(&zero, 4, false), Err(CL_INVALID_IMAGE_SIZE));
        let vol = desc_of(IMAGE3D, [4, 4, 4], 16, 80);
        assert_eq!(check_desc(&vol, 1, true), Ok(Pitch { row: 16, slice: 80 }));
        let vol = desc_of(IMAGE3D, [4, 4, 4], 16, 72);
        assert_eq!(check_desc(&vol, 1, true), Err(CL_INVALID_IMAGE_DESCRIPTOR));
        let mut mips = d;
        mips.num_mip_levels = 2;
        assert_eq!(
            check_desc(&mips, 4, false),
            Err(CL_INVALID_IMAGE_DESCRIPTOR)
        );
        let mut other = d;
        other.image_type = CL_MEM_OBJECT_BUFFER;
        assert_eq!(
            check_desc(&other, 4, false),
            Err(CL_INVALID_IMAGE_DESCRIPTOR)
        );
        let mut arr = desc_of(IMAGE1D_ARRAY, [16, 0, 0], 0, 0);
        assert_eq!(check_desc(&arr, 4, false), Err(CL_INVALID_IMAGE_SIZE));
        arr.array_size = 3;
        assert_eq!(check_desc(&arr, 4, false), Ok(Pitch { row: 64, slice: 0 }));
        // The 1D array's height is not used.
        assert_eq!(
            wire_desc(
                ClImageFormat {
                    order: 1,
                    channel_type: 2
                },
                &arr
            )
            .height,
            0
        );
    }
}
