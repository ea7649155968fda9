//! Texture and surface instructions of one thread: `tex` and `tld4`
//! (through [`crate::sample`]), `suld.b` and `sust.b`, `txq` and `suq`.
//!
//! A handle that names no object fails the launch with
//! [`Error::InvalidHandle`]. Surface accesses take x in bytes, a multiple
//! of the access size ([`Error::Misaligned`] otherwise); out of range,
//! `.trap` fails the launch with [`Error::OutOfBounds`] in the `surface`
//! space, `.clamp` moves to the nearest element, and `.zero` reads zero and
//! drops stores. Queries return the PTX ISA's values: OpenCL channel data
//! types and orders, address modes from `{ wrap, mirror, clamp_ogl,
//! clamp_to_edge, clamp_to_border }`, and 0 for the array size of images
//! that are not arrays and for mipmap levels and samples.

use super::{sext, Launch, Warp};
use crate::ir::{Geom, Query, Src, SurfClamp, SurfData, SurfOp, TexOp, Ty};
use crate::sample::{self, element_address, Lookup};
use crate::texture::{AddressMode, ChannelFormat, Image, Sampler, Shape, Texture};
use crate::Error;

impl Launch<'_> {
    /// `tex` or `tld4` for lane `l`.
    pub(super) fn tex(&mut self, w: &mut Warp, l: usize, t: &TexOp) -> Result<(), Error> {
        let tex = self.texture(self.rd(w, t.handle, l))?;
        let mut coords = [0u32; 4];
        for (c, s) in coords.iter_mut().zip(t.coords) {
            *c = self.rd(w, s, l) as u32;
        }
        let q = Lookup {
            geom: t.geom,
            coords,
            int_coords: t.int_coords,
            int_dest: t.dty != Ty::F32,
            gather: t.gather,
        };
        let texel = sample::lookup(&tex, &q, &mut *self.mem)?;
        for (&d, v) in t.ds.iter().zip(texel) {
            let v = u64::from(v);
            Self::wr(
                w,
                d,
                l,
                if t.dty == Ty::S32 {
                    sext(v, 32) as u64
                } else {
                    v
                },
            );
        }
        // Every texel is resident.
        if let Some(p) = t.dp {
            Self::wr(w, p, l, 1);
        }
        Ok(())
    }

    /// `suld.b` or `sust.b` for lane `l`.
    pub(super) fn surf(&mut self, w: &mut Warp, l: usize, s: &SurfOp) -> Result<(), Error> {
        let handle = self.rd(w, s.handle, l);
        let img = self.mem.surface(handle).ok_or(Error::InvalidHandle {
            kind: "surface",
            handle,
        })?;
        let c = |k: usize| self.rd(w, s.coords[k], l) as u32;
        // x and y are `.s32`, a layer `.u32`.
        let signed = |k: usize| i64::from(c(k) as i32);
        let pos = match s.geom {
            Geom::D1 => [signed(0), 0, 0],
            Geom::D2 => [signed(0), signed(1), 0],
            Geom::A1 => [signed(1), 0, i64::from(c(0))],
            Geom::A2 => [signed(1), signed(2), i64::from(c(0))],
            _ => [signed(0), signed(1), signed(2)],
        };
        let size = usize::from(s.bytes);
        let len = size * usize::from(s.n);
        let at = surface_address(&img, pos, len as u64, s.clamp)?;
        match (&s.data, at) {
            (SurfData::Load(ds), at) => {
                let mut buf = [0u8; 32];
                if let Some(a) = at {
                    self.mem.read(a, &mut buf[..len])?;
                }
                for (k, &d) in ds.iter().enumerate().take(usize::from(s.n)) {
                    let mut b8 = [0u8; 8];
                    b8[..size].copy_from_slice(&buf[k * size..(k + 1) * size]);
                    Self::wr(w, d, l, u64::from_le_bytes(b8));
                }
            }
            (SurfData::Store(vs), Some(a)) => {
                let mut buf = [0u8; 32];
                for (k, &v) in vs.iter().enumerate().take(usize::from(s.n)) {
                    let v = self.rd(w, v, l).to_le_bytes();
                    buf[k * size..(k + 1) * size].copy_from_slice(&v[..size]);
                }
                self.mem.write(a, &buf[..len])?;
            }
            (SurfData::Store(_), None) => {}
        }
        Ok(())
    }

    /// `txq` (`surface` false) or `suq` for lane `l`.
    pub(super) fn query(
        &mut self,
        w: &mut Warp,
        l: usize,
        surface: bool,
        query: Query,
        d: u32,
        handle: Src,
    ) -> Result<(), Error> {
        let handle = self.rd(w, handle, l);
        let v = if surface {
            let img = self.mem.surface(handle).ok_or(Error::InvalidHandle {
                kind: "surface",
                handle,
            })?;
            query_value(&img, None, query)
        } else {
            let tex = self.texture(handle)?;
            query_value(&tex.image, Some(&tex.sampler), query)
        };
        Self::wr(w, d, l, u64::from(v));
        Ok(())
    }

    fn texture(&mut self, handle: u64) -> Result<Texture, Error> {
        match self.last_texture {
            Some((h, t)) if h == handle => return Ok(t),
            _ => {}
        }
        let t = self.mem.texture(handle).ok_or(Error::InvalidHandle {
            kind: "texture",
            handle,
        })?;
        self.last_texture = Some((handle, t));
        Ok(t)
    }
}

/// Address of a surface access of `len` bytes at byte `x`, row `y` and
/// slice (depth or layer) `z`, under the instruction's out-of-range mode;
/// `None` if `.zero` drops it.
fn surface_address(
    img: &Image,
    [x, y, z]: [i64; 3],
    len: u64,
    clamp: SurfClamp,
) -> Result<Option<u64>, Error> {
    // Where the access would be, for errors.
    let nominal = img
        .base
        .wrapping_add((z as u64).wrapping_mul(img.slice_pitch))
        .wrapping_add((y as u64).wrapping_mul(img.row_pitch))
        .wrapping_add(x as u64);
    let oob = || Error::OutOfBounds {
        space: "surface",
        addr: nominal,
        len,
    };
    if x.rem_euclid(len as i64) != 0 {
        return Err(Error::Misaligned {
            space: "surface",
            addr: nominal,
            len,
        });
    }
    // The last aligned x at which the access fits in a row.
    let last_x = img
        .width
        .saturating_mul(img.element_bytes())
        .checked_sub(len)
        .map(|m| m / len * len);
    let within =
        |v: i64, last: Option<u64>| u64::try_from(v).is_ok_and(|v| last.is_some_and(|m| v <= m));
    let (last_y, last_z) = (img.height.checked_sub(1), img.depth.checked_sub(1));
    let pos = if within(x, last_x) && within(y, last_y) && within(z, last_z) {
        [x as u64, y as u64, z as u64]
    } else {
        match (clamp, last_x, last_y, last_z) {
            (SurfClamp::Zero, ..) => return Ok(None),
            (SurfClamp::Clamp, Some(mx), Some(my), Some(mz)) => {
                let near = |v: i64, m: u64| u64::try_from(v).map_or(0, |v| v.min(m));
                [near(x, mx), near(y, my), near(z, mz)]
            }
            _ => return Err(oob()),
        }
    };
    element_address(img, pos[0], pos[1], pos[2])
        .map(Some)
        .ok_or_else(oob)
}

/// The value of a `txq` (with the texture's sampler) or `suq` query.
fn query_value(img: &Image, sampler: Option<&Sampler>, q: Query) -> u32 {
    let sat = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    match q {
        Query::Width => sat(img.width),
        Query::Height => sat(img.height),
        Query::Depth if img.shape == Shape::Array3D => sat(img.depth),
        Query::Depth => 1,
        Query::ChannelDataType => {
            channel_data_type(img.format, sampler.is_some_and(|s| s.read_normalized))
        }
        Query::ChannelOrder => match img.channels {
            1 => CL_R,
            2 => CL_RG,
            3 => CL_RGB,
            _ => CL_RGBA,
        },
        Query::NormalizedCoords => u32::from(sampler.is_some_and(|s| s.normalized_coords)),
        Query::FilterMode => u32::from(sampler.is_some_and(|s| s.linear)),
        Query::AddrMode(k) => sampler
            .and_then(|s| s.address.get(usize::from(k)))
            .map_or(0, |&m| addr_mode(m)),
        Query::ArraySize => match img.shape {
            Shape::Layered1D | Shape::Layered2D => sat(img.depth),
            Shape::LayeredCubemap => sat(img.depth / 6),
            _ => 0,
        },
        Query::MemoryLayout => u32::from(matches!(img.shape, Shape::Linear | Shape::Pitch2D)),
        Query::ForceUnnormalizedCoords | Query::NumMipmapLevels | Query::NumSamples => 0,
    }
}

/// OpenCL 1.0 channel orders (the PTX ISA's table).
const CL_R: u32 = 0x10B0;
const CL_RG: u32 = 0x10B2;
const CL_RGB: u32 = 0x10B4;
const CL_RGBA: u32 = 0x10B5;

/// The OpenCL 1.0 channel data type (the PTX ISA's table) of a format:
/// 8- and 16-bit integers as normalized types if they read as floats.
fn channel_data_type(f: ChannelFormat, normalized: bool) -> u32 {
    match (f, normalized) {
        (ChannelFormat::S8, true) => 0x10D0,
        (ChannelFormat::S16, true) => 0x10D1,
        (ChannelFormat::U8, true) => 0x10D2,
        (ChannelFormat::U16, true) => 0x10D3,
        (ChannelFormat::S8, false) => 0x10D7,
        (ChannelFormat::S16, false) => 0x10D8,
        (ChannelFormat::S32, _) => 0x10D9,
        (ChannelFormat::U8, false) => 0x10DA,
        (ChannelFormat::U16, false) => 0x10DB,
        (ChannelFormat::U32, _) => 0x10DC,
        (ChannelFormat::F16, _) => 0x10DD,
        (ChannelFormat::F32, _) => 0x10DE,
    }
}

/// An address mode as `txq` reports it.
fn addr_mode(m: AddressMode) -> u32 {
    match m {
        AddressMode::Wrap => 0,
        AddressMode::Mirror => 1,
        AddressMode::Clamp => 3,
        AddressMode::Border => 4,
    }
}
