//! Texture lookups (`tex`, `tld4`): which texels a coordinate selects under
//! the sampler's addressing and filtering, and what they read as (the CUDA
//! C++ Programming Guide's "Texture Fetching" and "Texture Memory").
//!
//! - Float coordinates are texel positions, or fractions of the extent
//!   with normalized coordinates. Point sampling takes texel
//!   `floor(x)`; linear filtering weighs texels `i` and `i + 1` around
//!   `x - 0.5` by `1 - α` and `α`, where `x - 0.5` is rounded to 1/256 of a
//!   texel (the weights' 8 fractional bits; a gather sees the same texels).
//!   Integer coordinates are texel indices, out of range reading zero.
//! - Each texel index is addressed on its own: clamp to the edge, border
//!   (the sampler's border color), wrap and mirror (normalized coordinates
//!   only; otherwise clamp). Layer indices are clamped; cubemaps pick a
//!   face by the major axis and clamp within it.
//! - 8- and 16-bit integer channels read as normalized floats when the
//!   sampler says so and the destination is a float (unsigned `v / MAX`,
//!   signed `max(v / MAX, -1)`, 8-bit unsigned r, g, b from sRGB if
//!   asked); `f16` and `f32` channels read as floats; otherwise channels
//!   are integers, sign- or zero-extended, and not filtered. Missing
//!   channels read as 0, alpha as 1.
//!
//! NaN coordinates count as 0. Texels are read through [`Memory::read`].

use crate::float::f16_to_f32;
use crate::ir::Geom;
use crate::texture::{AddressMode, ChannelFormat, Image, Texture};
use crate::{Error, Memory};

/// Four 32-bit channel values (r, g, b, a): `f32` bits, or integers.
pub(crate) type Texel = [u32; 4];

/// Coordinates are clamped to this many texels either side of 0 before
/// they become integers, so that index arithmetic cannot overflow.
const INDEX_LIMIT: f64 = (1u64 << 40) as f64;

/// One thread's lookup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lookup {
    pub geom: Geom,
    /// The coordinate vector's bits.
    pub coords: [u32; 4],
    /// `.s32` coordinates: texel indices.
    pub int_coords: bool,
    /// An integer destination: integer channels read as integers.
    pub int_dest: bool,
    /// `tld4`: the component gathered.
    pub gather: Option<u8>,
}

/// Whether a lookup's channels are floats or integers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Float,
    Int,
}

/// The texels of `tex` at a lookup's coordinates, as the lookup returns
/// them.
pub(crate) fn lookup(tex: &Texture, q: &Lookup, mem: &mut dyn Memory) -> Result<Texel, Error> {
    let img = &tex.image;
    let kind = match img.format {
        ChannelFormat::F16 | ChannelFormat::F32 => Kind::Float,
        ChannelFormat::U32 | ChannelFormat::S32 => Kind::Int,
        _ if tex.sampler.read_normalized && !q.int_dest => Kind::Float,
        _ => Kind::Int,
    };
    let c = q.coords;
    let (ndims, first, slice) = match q.geom {
        Geom::D1 => (1, 0, Some(0)),
        Geom::D2 => (2, 0, Some(0)),
        Geom::D3 => (3, 0, Some(0)),
        Geom::A1 => (1, 1, layer(c[0], img.depth)),
        Geom::A2 => (2, 1, layer(c[0], img.depth)),
        Geom::Cube | Geom::ACube => return cube(tex, kind, q, mem),
    };
    let Some(slice) = slice else {
        return Ok([0; 4]);
    };
    let mut f = Fetch::new(tex, kind, mem, slice, tex.sampler.normalized_coords);
    if q.int_coords {
        let mut idx = [0i64; 3];
        for (d, i) in idx.iter_mut().enumerate().take(ndims) {
            *i = i64::from(c[first + d] as i32);
        }
        return f.index(idx, ndims);
    }
    let mut t = [0f32; 3];
    for (d, x) in t.iter_mut().enumerate().take(ndims) {
        *x = f.scale(coord(c[first + d]), d);
    }
    f.sample(t, ndims, q.gather)
}

/// A cubemap lookup: the face the direction points at, then a 2D lookup
/// in it with normalized coordinates, clamped to the face.
fn cube(tex: &Texture, kind: Kind, q: &Lookup, mem: &mut dyn Memory) -> Result<Texel, Error> {
    let c = q.coords;
    let (first, base) = if q.geom == Geom::ACube {
        match layer(c[0], tex.image.depth / 6) {
            Some(l) => (1, l.saturating_mul(6)),
            None => return Ok([0; 4]),
        }
    } else {
        (0, 0)
    };
    let (face, u, v) = cube_face(coord(c[first]), coord(c[first + 1]), coord(c[first + 2]));
    let mut f = Fetch::new(tex, kind, mem, base.saturating_add(face), true);
    f.mode = [AddressMode::Clamp; 3];
    let t = [f.scale(u, 0), f.scale(v, 1), 0.0];
    f.sample(t, 2, q.gather)
}

/// The face (0 to 5: +x, -x, +y, -y, +z, -z) direction `(x, y, z)` points
/// at, and the face coordinates `((s/m + 1)/2, (t/m + 1)/2)` of the
/// Programming Guide's cubemap table. Ties go to x, then y.
pub(crate) fn cube_face(x: f32, y: f32, z: f32) -> (u64, f32, f32) {
    let (ax, ay, az) = (x.abs(), y.abs(), z.abs());
    let (face, m, s, t) = if ax >= ay && ax >= az {
        if x >= 0.0 {
            (0, ax, -z, -y)
        } else {
            (1, ax, z, -y)
        }
    } else if ay >= az {
        if y >= 0.0 {
            (2, ay, x, z)
        } else {
            (3, ay, x, -z)
        }
    } else if z >= 0.0 {
        (4, az, x, -y)
    } else {
        (5, az, -x, -y)
    };
    let half = |s: f32| (nan0(s / m) + 1.0) / 2.0;
    (face, half(s), half(t))
}

/// A layer index clamped to `layers`; `None` if there are none.
fn layer(bits: u32, layers: u64) -> Option<u64> {
    layers.checked_sub(1).map(|last| u64::from(bits).min(last))
}

/// A float coordinate from register bits.
fn coord(bits: u32) -> f32 {
    nan0(f32::from_bits(bits))
}

/// `v`, NaN read as 0.
fn nan0(v: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v
    }
}

/// The texel containing position `t`.
fn floor_index(t: f32) -> i64 {
    // Truncation, one less where that rounded up (a negative fraction):
    // `floor` without a call into the C library, exact for values this
    // small.
    let x = f64::from(t).clamp(-INDEX_LIMIT, INDEX_LIMIT);
    let i = x as i64;
    i - i64::from((i as f64) > x)
}

/// The texel below `t - 0.5` and the weight of the one above it: `t - 0.5`
/// rounded to 1/256 of a texel.
fn split(t: f32) -> (i64, f32) {
    let q = ((f64::from(t) - 0.5) * 256.0)
        .clamp(-INDEX_LIMIT, INDEX_LIMIT)
        .round_ties_even() as i64;
    (q >> 8, (q & 255) as f32 / 256.0)
}

/// Where texel index `i` of a dimension of `n` texels lies under `mode`;
/// `None` for the border (or an empty dimension).
fn address(i: i64, n: u64, mode: AddressMode) -> Option<u64> {
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    if n == 0 {
        return None;
    }
    let at = match mode {
        AddressMode::Wrap => i.rem_euclid(n),
        AddressMode::Mirror => {
            let period = n.saturating_mul(2);
            let m = i.rem_euclid(period);
            if m >= n {
                period - 1 - m
            } else {
                m
            }
        }
        AddressMode::Clamp => i.clamp(0, n - 1),
        AddressMode::Border => (0..n).contains(&i).then_some(i)?,
    };
    Some(at as u64)
}

/// Address of element `(x, y, z)` of an image, `x` in bytes; `None` if it
/// overflows.
pub(crate) fn element_address(img: &Image, x_bytes: u64, y: u64, z: u64) -> Option<u64> {
    img.base
        .checked_add(z.checked_mul(img.slice_pitch)?)?
        .checked_add(y.checked_mul(img.row_pitch)?)?
        .checked_add(x_bytes)
}

/// The sRGB transfer function undone.
pub(crate) fn srgb_to_linear(c: f32) -> f32 {
    let c = f64::from(c);
    let l = if c <= 0.04045 {
        c / 12.92
    } else {
        ((c + 0.055) / 1.055).powf(2.4)
    };
    l as f32
}

/// Texel reads of one lookup.
struct Fetch<'a, 'm> {
    tex: &'a Texture,
    kind: Kind,
    mem: &'m mut dyn Memory,
    /// The slice (layer, face) of 1D and 2D lookups.
    slice: u64,
    normalized: bool,
    /// Per dimension; wrap and mirror act as clamp without normalized
    /// coordinates.
    mode: [AddressMode; 3],
}

impl<'a, 'm> Fetch<'a, 'm> {
    fn new(
        tex: &'a Texture,
        kind: Kind,
        mem: &'m mut dyn Memory,
        slice: u64,
        normalized: bool,
    ) -> Self {
        let mode = tex.sampler.address.map(|m| match m {
            AddressMode::Wrap | AddressMode::Mirror if !normalized => AddressMode::Clamp,
            m => m,
        });
        Fetch {
            tex,
            kind,
            mem,
            slice,
            normalized,
            mode,
        }
    }

    fn extent(&self, d: usize) -> u64 {
        let img = &self.tex.image;
        [img.width, img.height, img.depth][d]
    }

    /// Coordinate `c` of dimension `d` in texels.
    fn scale(&self, c: f32, d: usize) -> f32 {
        if self.normalized {
            c * self.extent(d) as f32
        } else {
            c
        }
    }

    /// A float lookup at texel position `t`.
    fn sample(&mut self, t: [f32; 3], ndims: usize, gather: Option<u8>) -> Result<Texel, Error> {
        if let Some(comp) = gather {
            return self.gather(t, comp);
        }
        if self.kind == Kind::Float && self.tex.sampler.linear {
            return self.linear(t, ndims);
        }
        self.fetch(t.map(floor_index), ndims)
    }

    /// Linear (bi-, trilinear) filtering: the weighted sum, in the
    /// Programming Guide's order (x varying fastest).
    fn linear(&mut self, t: [f32; 3], ndims: usize) -> Result<Texel, Error> {
        let mut lo = [0i64; 3];
        let mut alpha = [0f32; 3];
        for d in 0..ndims {
            (lo[d], alpha[d]) = split(t[d]);
        }
        let mut acc = [0f32; 4];
        for corner in 0..1usize << ndims {
            let mut w = 1f32;
            let mut idx = lo;
            for d in 0..ndims {
                let hi = corner >> d & 1 == 1;
                w *= if hi { alpha[d] } else { 1.0 - alpha[d] };
                idx[d] += i64::from(hi);
            }
            let texel = self.fetch(idx, ndims)?;
            for (s, v) in acc.iter_mut().zip(texel) {
                *s += w * f32::from_bits(v);
            }
        }
        Ok(acc.map(f32::to_bits))
    }

    /// `tld4`: component `comp` of the four texels of the bilinear
    /// footprint, counter-clockwise from the lower left: (i, j+1),
    /// (i+1, j+1), (i+1, j), (i, j).
    fn gather(&mut self, t: [f32; 3], comp: u8) -> Result<Texel, Error> {
        let (i, _) = split(t[0]);
        let (j, _) = split(t[1]);
        let mut out = [0u32; 4];
        for (o, (x, y)) in out
            .iter_mut()
            .zip([(i, j + 1), (i + 1, j + 1), (i + 1, j), (i, j)])
        {
            *o = self.fetch([x, y, 0], 2)?[usize::from(comp & 3)];
        }
        Ok(out)
    }

    /// The texel at indices `idx` under the address modes.
    fn fetch(&mut self, idx: [i64; 3], ndims: usize) -> Result<Texel, Error> {
        let mut pos = [0, 0, self.slice];
        for d in 0..ndims {
            match address(idx[d], self.extent(d), self.mode[d]) {
                Some(p) => pos[d] = p,
                None => return Ok(self.border()),
            }
        }
        self.texel(pos)
    }

    /// The texel at integer coordinates; zero out of range.
    fn index(&mut self, idx: [i64; 3], ndims: usize) -> Result<Texel, Error> {
        let mut pos = [0, 0, self.slice];
        for d in 0..ndims {
            match u64::try_from(idx[d]) {
                Ok(p) if p < self.extent(d) => pos[d] = p,
                _ => return Ok([0; 4]),
            }
        }
        self.texel(pos)
    }

    /// What a border-mode lookup reads outside the image.
    fn border(&self) -> Texel {
        let b = self.tex.sampler.border;
        match self.kind {
            Kind::Float => b.map(f32::to_bits),
            Kind::Int if signed(self.tex.image.format) => b.map(|v| v as i32 as u32),
            Kind::Int => b.map(|v| v as u32),
        }
    }

    /// Texel `(x, y, z)` of the image (in range).
    fn texel(&mut self, [x, y, z]: [u64; 3]) -> Result<Texel, Error> {
        let img = &self.tex.image;
        let size = img.format.bytes() as usize;
        let n = (img.channels as usize).min(4);
        let oob = || Error::OutOfBounds {
            space: "texture",
            addr: img.base,
            len: img.element_bytes(),
        };
        let addr = x
            .checked_mul(img.element_bytes())
            .and_then(|xb| element_address(img, xb, y, z))
            .ok_or_else(oob)?;
        let mut buf = [0u8; 16];
        if n > 0 {
            self.mem.read(addr, &mut buf[..size * n])?;
        }
        let mut out = match self.kind {
            Kind::Float => [0, 0, 0, 1f32.to_bits()],
            Kind::Int => [0, 0, 0, 1],
        };
        for (c, o) in out.iter_mut().enumerate().take(n) {
            *o = self.channel(&buf[c * size..(c + 1) * size], c);
        }
        Ok(out)
    }

    /// Channel `c` of a texel, from its bytes.
    fn channel(&self, raw: &[u8], c: usize) -> u32 {
        let v = raw.iter().rev().fold(0u32, |v, &b| (v << 8) | u32::from(b));
        let s = &self.tex.sampler;
        match (self.kind, self.tex.image.format) {
            (_, ChannelFormat::F32) => v,
            (_, ChannelFormat::F16) => f16_to_f32(v as u16).to_bits(),
            (Kind::Int, ChannelFormat::S8) => v as u8 as i8 as u32,
            (Kind::Int, ChannelFormat::S16) => v as u16 as i16 as u32,
            (Kind::Int, _) => v,
            (Kind::Float, ChannelFormat::U8) => {
                let x = v as f32 / 255.0;
                if s.srgb && c < 3 {
                    srgb_to_linear(x).to_bits()
                } else {
                    x.to_bits()
                }
            }
            (Kind::Float, ChannelFormat::S8) => {
                (f32::from(v as u8 as i8) / 127.0).max(-1.0).to_bits()
            }
            (Kind::Float, ChannelFormat::U16) => (v as f32 / 65535.0).to_bits(),
            (Kind::Float, ChannelFormat::S16) => {
                (f32::from(v as u16 as i16) / 32767.0).max(-1.0).to_bits()
            }
            (Kind::Float, ChannelFormat::U32 | ChannelFormat::S32) => v,
        }
    }
}

/// Whether a format's channels are signed integers.
fn signed(f: ChannelFormat) -> bool {
    matches!(
        f,
        ChannelFormat::S8 | ChannelFormat::S16 | ChannelFormat::S32
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addressing() {
        use AddressMode::*;
        assert_eq!(address(-1, 4, Wrap), Some(3));
        assert_eq!(address(9, 4, Wrap), Some(1));
        assert_eq!(address(-1, 4, Mirror), Some(0));
        assert_eq!(address(4, 4, Mirror), Some(3));
        assert_eq!(address(8, 4, Mirror), Some(0));
        assert_eq!(address(-5, 4, Clamp), Some(0));
        assert_eq!(address(7, 4, Clamp), Some(3));
        assert_eq!(address(4, 4, Border), None);
        assert_eq!(address(0, 0, Clamp), None);
        assert_eq!(
            address(i64::MAX, u64::MAX, Clamp),
            Some((i64::MAX - 1) as u64)
        );
        assert!(address(i64::MIN, u64::MAX, Mirror).is_some());
    }

    #[test]
    fn weights_have_eight_fractional_bits() {
        assert_eq!(split(1.0), (0, 0.5));
        // The guide's example: 2.49805 - 0.5 rounds up to texel 2.
        assert_eq!(split(2.49805), (2, 0.0));
        assert_eq!(split(0.0), (-1, 0.5));
        assert_eq!(split(f32::INFINITY).0, (INDEX_LIMIT as i64) >> 8);
        assert_eq!(floor_index(f32::NEG_INFINITY), -(INDEX_LIMIT as i64));
    }

    #[test]
    fn cube_faces() {
        assert_eq!(cube_face(1.0, 0.0, 0.0), (0, 0.5, 0.5));
        assert_eq!(cube_face(-1.0, 0.5, 0.0), (1, 0.5, 0.25));
        assert_eq!(cube_face(0.0, 2.0, 1.0), (2, 0.5, 0.75));
        assert_eq!(cube_face(0.5, -1.0, 0.0), (3, 0.75, 0.5));
        assert_eq!(cube_face(0.0, 0.0, 4.0), (4, 0.5, 0.5));
        assert_eq!(cube_face(1.0, 0.0, -2.0), (5, 0.25, 0.5));
        assert_eq!(cube_face(0.0, 0.0, 0.0).1, 0.5);
    }
}
