//! CUDA arrays, rectangular copies, texture and surface objects on the
//! wire: the fixed little-endian records the guest sends in the arena of
//! `ArrayCreate`, `Memcpy3D` and `TexObjectCreate`, and the checks both
//! sides apply to them.
//!
//! Every record is a run of little-endian `u64`s (the sampler's `u32`s and
//! `f32`s are packed two to a word), decoded from a copy of the arena, so a
//! guest can send any bytes: decoding never fails, validation says what is
//! wrong.

/// `CUDA_ARRAY3D_LAYERED`.
pub const ARRAY_LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_SURFACE_LDST`.
pub const ARRAY_SURFACE_LDST: u32 = 0x02;
/// `CUDA_ARRAY3D_CUBEMAP`.
pub const ARRAY_CUBEMAP: u32 = 0x04;
/// `CUDA_ARRAY3D_TEXTURE_GATHER`.
pub const ARRAY_TEXTURE_GATHER: u32 = 0x08;
/// The array flags fairgpu carries (the others, sparse, deferred mapping,
/// depth and color attachments, are refused).
pub const ARRAY_FLAGS: u32 =
    ARRAY_LAYERED | ARRAY_SURFACE_LDST | ARRAY_CUBEMAP | ARRAY_TEXTURE_GATHER;

/// Bytes of one channel of a `CUarray_format`; `None` for the formats
/// fairgpu does not carry (packed, block-compressed, YUV).
pub fn format_bytes(format: u32) -> Option<u64> {
    match format {
        0x01 | 0x08 => Some(1),
        0x02 | 0x09 | 0x10 => Some(2),
        0x03 | 0x0a | 0x20 => Some(4),
        _ => None,
    }
}

/// The dimensionality of a valid array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayKind {
    D1,
    D2,
    D3,
    Layered1D,
    Layered2D,
    Cubemap,
    LayeredCubemap,
}

/// Largest extents of each kind (an H100's texture limits): width,
/// height, depth or layers.
fn max_extent(kind: ArrayKind) -> [u64; 3] {
    match kind {
        ArrayKind::D1 => [131_072, 1, 1],
        ArrayKind::D2 => [131_072, 65_536, 1],
        ArrayKind::D3 => [16_384, 16_384, 16_384],
        ArrayKind::Layered1D => [32_768, 1, 2048],
        ArrayKind::Layered2D => [32_768, 32_768, 2048],
        ArrayKind::Cubemap => [32_768, 32_768, 6],
        ArrayKind::LayeredCubemap => [32_768, 32_768, 2046],
    }
}

/// `CUDA_ARRAY3D_DESCRIPTOR`: 48 bytes on the wire (width, height, depth,
/// format, channels, flags; one `u64` each).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArrayDesc {
    pub width: u64,
    /// 0 for a 1D (or 1D layered) array.
    pub height: u64,
    /// 0 for a 1D or 2D array; layers for layered arrays; 6 (× layers) for
    /// cubemaps.
    pub depth: u64,
    /// A `CUarray_format`.
    pub format: u32,
    /// 1, 2 or 4.
    pub channels: u32,
    /// `CUDA_ARRAY3D_*` flags.
    pub flags: u32,
}

/// Bytes of an [`ArrayDesc`] on the wire.
pub const ARRAY_DESC_BYTES: usize = 48;

fn words<const N: usize>(b: &[u8]) -> [u64; N] {
    let mut w = [0u64; N];
    for (i, c) in b.chunks_exact(8).take(N).enumerate() {
        w[i] = u64::from_le_bytes(c.try_into().expect("chunks of 8"));
    }
    w
}

fn bytes_of(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A `u32` from a wire word: its low half, or `u32::MAX` (invalid
/// everywhere) when the high half is set.
fn low32(w: u64) -> u32 {
    u32::try_from(w).unwrap_or(u32::MAX)
}

impl ArrayDesc {
    /// Decodes the first [`ARRAY_DESC_BYTES`] of `b` (missing bytes read as 0).
    pub fn from_bytes(b: &[u8]) -> ArrayDesc {
        let w = words::<6>(b);
        ArrayDesc {
            width: w[0],
            height: w[1],
            depth: w[2],
            format: low32(w[3]),
            channels: low32(w[4]),
            flags: low32(w[5]),
        }
    }

    /// Encodes the descriptor for the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        bytes_of(&[
            self.width,
            self.height,
            self.depth,
            self.format.into(),
            self.channels.into(),
            self.flags.into(),
        ])
    }

    /// What kind of array the descriptor describes, if it is one the CUDA
    /// driver would create (within an H100's limits).
    pub fn validate(&self) -> Result<ArrayKind, &'static str> {
        format_bytes(self.format).ok_or("unsupported array format")?;
        if !matches!(self.channels, 1 | 2 | 4) {
            return Err("arrays have 1, 2 or 4 channels");
        }
        if self.flags & !ARRAY_FLAGS != 0 {
            return Err("unsupported array flags");
        }
        if self.width == 0 {
            return Err("zero array width");
        }
        let layered = self.flags & ARRAY_LAYERED != 0;
        let kind = if self.flags & ARRAY_CUBEMAP != 0 {
            if self.width != self.height {
                return Err("a cubemap's faces are square");
            }
            match (layered, self.depth) {
                (false, 6) => ArrayKind::Cubemap,
                (true, d) if d > 0 && d % 6 == 0 => ArrayKind::LayeredCubemap,
                _ => return Err("a cubemap has 6 faces per layer"),
            }
        } else if layered {
            match (self.height, self.depth) {
                (_, 0) => return Err("a layered array needs at least one layer"),
                (0, _) => ArrayKind::Layered1D,
                _ => ArrayKind::Layered2D,
            }
        } else {
            match (self.height, self.depth) {
                (0, 0) => ArrayKind::D1,
                (_, 0) => ArrayKind::D2,
                (0, _) => return Err("a 3D array needs a height"),
                _ => ArrayKind::D3,
            }
        };
        let max = max_extent(kind);
        let ext = self.extent();
        if ext.iter().zip(max).any(|(&e, m)| e > m) {
            return Err("array extent beyond the device's limits");
        }
        Ok(kind)
    }

    /// Bytes of one element (all channels); 0 for an unknown format.
    pub fn element_bytes(&self) -> u64 {
        format_bytes(self.format).unwrap_or(0) * u64::from(self.channels)
    }

    /// Extent in (bytes of a row, rows, slices): what copies address.
    pub fn byte_extent(&self) -> [u64; 3] {
        let [w, h, d] = self.extent();
        [w.saturating_mul(self.element_bytes()), h, d]
    }

    /// Extent in elements, 1 in missing dimensions.
    pub fn extent(&self) -> [u64; 3] {
        [self.width, self.height.max(1), self.depth.max(1)]
    }

    /// Bytes the array holds (densely packed).
    pub fn total_bytes(&self) -> u64 {
        let [w, h, d] = self.byte_extent();
        w.saturating_mul(h).saturating_mul(d)
    }
}

/// `CUmemorytype` of a copy's side.
pub const MEM_HOST: u64 = 1;
/// Device memory (a pointer).
pub const MEM_DEVICE: u64 = 2;
/// A CUDA array (a handle).
pub const MEM_ARRAY: u64 = 3;

/// One side of a rectangular copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CopySide {
    /// [`MEM_HOST`], [`MEM_DEVICE`] or [`MEM_ARRAY`]. Host data travels
    /// densely packed in the arena (its pitch is the guest's business).
    pub kind: u64,
    /// Device pointer or array handle; 0 for the host.
    pub base: u64,
    /// Device memory: bytes per row and rows per slice.
    pub pitch: u64,
    pub height: u64,
    /// Where the copy starts: x in bytes, y in rows, z in slices.
    pub pos: [u64; 3],
}

/// A rectangular copy (`CUDA_MEMCPY3D`, which 2D copies and the copies to
/// and from arrays are special cases of): 136 bytes on the wire, then the
/// packed host data when the source is the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copy3D {
    pub src: CopySide,
    pub dst: CopySide,
    /// Bytes per row, rows, slices.
    pub extent: [u64; 3],
}

/// Bytes of a [`Copy3D`] on the wire.
pub const COPY3D_BYTES: usize = 136;

impl CopySide {
    fn words(&self) -> [u64; 7] {
        [
            self.kind,
            self.base,
            self.pitch,
            self.height,
            self.pos[0],
            self.pos[1],
            self.pos[2],
        ]
    }

    fn from_words(w: &[u64]) -> CopySide {
        CopySide {
            kind: w[0],
            base: w[1],
            pitch: w[2],
            height: w[3],
            pos: [w[4], w[5], w[6]],
        }
    }

    /// For device memory: the byte range `[first, end)` the copy touches,
    /// if the extent is not empty, the rows fit their pitch and the
    /// arithmetic does not overflow.
    pub fn device_span(&self, extent: [u64; 3]) -> Option<(u64, u64)> {
        let [w, h, d] = extent;
        let [x, y, z] = self.pos;
        if w == 0 || h == 0 || d == 0 {
            return None;
        }
        let row_end = x.checked_add(w)?;
        if (h > 1 || d > 1) && row_end > self.pitch {
            return None;
        }
        if d > 1 && y.checked_add(h)? > self.height {
            return None;
        }
        let slice = self.pitch.checked_mul(self.height)?;
        let first = z
            .checked_mul(slice)?
            .checked_add(y.checked_mul(self.pitch)?)?
            .checked_add(x)?;
        let last_row = z
            .checked_add(d - 1)?
            .checked_mul(slice)?
            .checked_add(y.checked_add(h - 1)?.checked_mul(self.pitch)?)?;
        let end = last_row.checked_add(row_end)?;
        Some((self.base.checked_add(first)?, self.base.checked_add(end)?))
    }

    /// For an array of `desc`: whether the copy's box lies inside it, with
    /// whole elements.
    pub fn fits_array(&self, desc: &ArrayDesc, extent: [u64; 3]) -> bool {
        let e = desc.element_bytes();
        if e == 0 || !self.pos[0].is_multiple_of(e) || !extent[0].is_multiple_of(e) {
            return false;
        }
        desc.byte_extent()
            .iter()
            .zip(self.pos.iter().zip(extent))
            .all(|(&have, (&p, n))| p.checked_add(n).is_some_and(|end| end <= have))
    }
}

impl Copy3D {
    /// Decodes the first [`COPY3D_BYTES`] of `b` (missing bytes read as 0).
    pub fn from_bytes(b: &[u8]) -> Copy3D {
        let w = words::<17>(b);
        Copy3D {
            src: CopySide::from_words(&w[0..7]),
            dst: CopySide::from_words(&w[7..14]),
            extent: [w[14], w[15], w[16]],
        }
    }

    /// Encodes the copy for the wire.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Vec::with_capacity(17);
        w.extend(self.src.words());
        w.extend(self.dst.words());
        w.extend(self.extent);
        bytes_of(&w)
    }

    /// Bytes of packed host data the copy moves (rows × slices × row
    /// bytes); `None` on overflow.
    pub fn host_bytes(&self) -> Option<u64> {
        self.extent[0]
            .checked_mul(self.extent[1])?
            .checked_mul(self.extent[2])
    }
}

/// `CU_RESOURCE_TYPE_ARRAY`.
pub const RESOURCE_ARRAY: u64 = 0;
/// `CU_RESOURCE_TYPE_LINEAR`.
pub const RESOURCE_LINEAR: u64 = 2;
/// `CU_RESOURCE_TYPE_PITCH2D`.
pub const RESOURCE_PITCH2D: u64 = 3;

/// What a texture object reads (`CUDA_RESOURCE_DESC`): 56 bytes on the
/// wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceDesc {
    /// [`RESOURCE_ARRAY`], [`RESOURCE_LINEAR`] or [`RESOURCE_PITCH2D`].
    pub kind: u64,
    /// Array handle or device pointer.
    pub base: u64,
    /// Linear and pitched memory: `CUarray_format` and channels.
    pub format: u32,
    pub channels: u32,
    /// Linear: bytes; pitched: width in elements.
    pub width: u64,
    /// Pitched: rows and bytes per row.
    pub height: u64,
    pub pitch: u64,
}

/// `CU_TRSF_READ_AS_INTEGER`.
pub const TRSF_READ_AS_INTEGER: u32 = 0x01;
/// `CU_TRSF_NORMALIZED_COORDINATES`.
pub const TRSF_NORMALIZED_COORDINATES: u32 = 0x02;
/// `CU_TRSF_SRGB`.
pub const TRSF_SRGB: u32 = 0x10;
/// `CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION`.
pub const TRSF_DISABLE_TRILINEAR_OPTIMIZATION: u32 = 0x20;
/// `CU_TRSF_SEAMLESS_CUBEMAP`.
pub const TRSF_SEAMLESS_CUBEMAP: u32 = 0x40;

/// How a texture object samples (`CUDA_TEXTURE_DESC`, without the mipmap
/// fields): 40 bytes on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TextureDesc {
    /// `CUaddress_mode` per dimension.
    pub address: [u32; 3],
    /// `CUfilter_mode`.
    pub filter: u32,
    /// `CU_TRSF_*`.
    pub flags: u32,
    pub border: [f32; 4],
}

/// Bytes of a [`ResourceDesc`] and a [`TextureDesc`] on the wire, in this
/// order, in a `TexObjectCreate` request.
pub const TEX_OBJECT_BYTES: usize = 96;

impl ResourceDesc {
    /// For linear and pitched memory: the bytes the texture reads,
    /// `[base, end)`, if the description is consistent.
    pub fn device_span(&self) -> Result<(u64, u64), &'static str> {
        let e = format_bytes(self.format).ok_or("unsupported texture format")?
            * u64::from(self.channels);
        if !matches!(self.channels, 1 | 2 | 4) {
            return Err("textures have 1, 2 or 4 channels");
        }
        let len = match self.kind {
            RESOURCE_LINEAR => {
                if self.width == 0 || !self.width.is_multiple_of(e) {
                    return Err("linear texture size is not a whole number of elements");
                }
                if self.width / e > (1 << 28) {
                    return Err("linear texture beyond the device's limit");
                }
                self.width
            }
            RESOURCE_PITCH2D => {
                let row = self.width.checked_mul(e).ok_or("texture too wide")?;
                if self.width == 0 || self.height == 0 || self.pitch < row {
                    return Err("pitched texture rows do not fit their pitch");
                }
                if self.width > 131_072
                    || self.height > 65_000
                    || self.pitch > 2_097_120
                    || !self.pitch.is_multiple_of(32)
                {
                    return Err("pitched texture beyond the device's limits or misaligned pitch");
                }
                (self.height - 1)
                    .checked_mul(self.pitch)
                    .and_then(|n| n.checked_add(row))
                    .ok_or("texture too large")?
            }
            _ => return Err("not a memory resource"),
        };
        let end = self.base.checked_add(len).ok_or("texture too large")?;
        Ok((self.base, end))
    }
}

impl TextureDesc {
    /// Checks the modes and flags.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.address.iter().any(|&m| m > 3) {
            return Err("unknown address mode");
        }
        if self.filter > 1 {
            return Err("unknown filter mode");
        }
        let known = TRSF_READ_AS_INTEGER
            | TRSF_NORMALIZED_COORDINATES
            | TRSF_SRGB
            | TRSF_DISABLE_TRILINEAR_OPTIMIZATION
            | TRSF_SEAMLESS_CUBEMAP;
        if self.flags & !known != 0 {
            return Err("unknown texture flags");
        }
        Ok(())
    }
}

/// Encodes a texture object's description for the wire.
pub fn tex_object_to_bytes(res: &ResourceDesc, tex: &TextureDesc) -> Vec<u8> {
    let pair = |a: u32, b: u32| u64::from(a) | (u64::from(b) << 32);
    bytes_of(&[
        res.kind,
        res.base,
        pair(res.format, res.channels),
        res.width,
        res.height,
        res.pitch,
        0,
        pair(tex.address[0], tex.address[1]),
        pair(tex.address[2], tex.filter),
        pair(tex.flags, 0),
        pair(tex.border[0].to_bits(), tex.border[1].to_bits()),
        pair(tex.border[2].to_bits(), tex.border[3].to_bits()),
    ])
}

/// Decodes what [`tex_object_to_bytes`] encoded (missing bytes read as 0).
pub fn tex_object_from_bytes(b: &[u8]) -> (ResourceDesc, TextureDesc) {
    let w = words::<12>(b);
    let lo = |x: u64| x as u32;
    let hi = |x: u64| (x >> 32) as u32;
    (
        ResourceDesc {
            kind: w[0],
            base: w[1],
            format: lo(w[2]),
            channels: hi(w[2]),
            width: w[3],
            height: w[4],
            pitch: w[5],
        },
        TextureDesc {
            address: [lo(w[7]), hi(w[7]), lo(w[8])],
            filter: hi(w[8]),
            flags: lo(w[9]),
            border: [
                f32::from_bits(lo(w[10])),
                f32::from_bits(hi(w[10])),
                f32::from_bits(lo(w[11])),
                f32::from_bits(hi(w[11])),
            ],
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(w: u64, h: u64, d: u64, flags: u32) -> ArrayDesc {
        ArrayDesc {
            width: w,
            height: h,
            depth: d,
            format: 0x20,
            channels: 4,
            flags,
        }
    }

    #[test]
    fn array_kinds_follow_the_driver_rules() {
        assert_eq!(desc(8, 0, 0, 0).validate(), Ok(ArrayKind::D1));
        assert_eq!(desc(8, 4, 0, 0).validate(), Ok(ArrayKind::D2));
        assert_eq!(desc(8, 4, 2, 0).validate(), Ok(ArrayKind::D3));
        assert_eq!(
            desc(8, 0, 3, ARRAY_LAYERED).validate(),
            Ok(ArrayKind::Layered1D)
        );
        assert_eq!(
            desc(8, 4, 3, ARRAY_LAYERED).validate(),
            Ok(ArrayKind::Layered2D)
        );
        assert_eq!(
            desc(8, 8, 6, ARRAY_CUBEMAP).validate(),
            Ok(ArrayKind::Cubemap)
        );
        assert_eq!(
            desc(8, 8, 12, ARRAY_CUBEMAP | ARRAY_LAYERED).validate(),
            Ok(ArrayKind::LayeredCubemap)
        );
        assert!(desc(8, 0, 3, 0).validate().is_err());
        assert!(desc(8, 4, 6, ARRAY_CUBEMAP).validate().is_err());
        assert!(desc(8, 8, 7, ARRAY_CUBEMAP | ARRAY_LAYERED)
            .validate()
            .is_err());
        assert!(desc(0, 0, 0, 0).validate().is_err());
        assert!(desc(1 << 20, 0, 0, 0).validate().is_err());
        assert!(desc(8, 0, 0, 0x40).validate().is_err());
        let mut d = desc(8, 0, 0, 0);
        d.channels = 3;
        assert!(d.validate().is_err());
        d.channels = 1;
        d.format = 0xb0;
        assert!(d.validate().is_err());
    }

    #[test]
    fn records_round_trip() {
        let d = desc(7, 5, 3, ARRAY_SURFACE_LDST);
        assert_eq!(ArrayDesc::from_bytes(&d.to_bytes()), d);
        let c = Copy3D {
            src: CopySide {
                kind: MEM_DEVICE,
                base: 0x1000,
                pitch: 512,
                height: 9,
                pos: [4, 5, 6],
            },
            dst: CopySide {
                kind: MEM_ARRAY,
                base: 77,
                ..Default::default()
            },
            extent: [16, 2, 1],
        };
        let b = c.to_bytes();
        assert_eq!(b.len(), COPY3D_BYTES);
        assert_eq!(Copy3D::from_bytes(&b), c);
        let r = ResourceDesc {
            kind: RESOURCE_PITCH2D,
            base: 0x2000,
            format: 0x02,
            channels: 2,
            width: 100,
            height: 50,
            pitch: 512,
        };
        let t = TextureDesc {
            address: [0, 1, 3],
            filter: 1,
            flags: TRSF_NORMALIZED_COORDINATES,
            border: [0.5, -1.0, 2.0, f32::INFINITY],
        };
        let b = tex_object_to_bytes(&r, &t);
        assert_eq!(b.len(), TEX_OBJECT_BYTES);
        assert_eq!(tex_object_from_bytes(&b), (r, t));
    }

    #[test]
    fn device_spans_are_checked() {
        let s = CopySide {
            kind: MEM_DEVICE,
            base: 1000,
            pitch: 100,
            height: 10,
            pos: [10, 2, 1],
        };
        // First byte: 1000 + 1*1000 + 2*100 + 10; last row (z 2, y 4) ends
        // at 1000 + 2000 + 400 + 10 + 50.
        assert_eq!(s.device_span([50, 3, 2]), Some((2210, 3460)));
        // A row past its pitch, rows past the slice height.
        assert_eq!(s.device_span([91, 2, 1]), None);
        assert_eq!(s.device_span([50, 9, 2]), None);
        // A single row may be longer than the pitch (a linear copy).
        assert!(s.device_span([500, 1, 1]).is_some());
        let huge = CopySide {
            pitch: u64::MAX,
            ..s
        };
        assert_eq!(huge.device_span([1, 2, 2]), None);
        let a = desc(8, 4, 0, 0); // 128 bytes a row, 4 rows
        let side = CopySide {
            kind: MEM_ARRAY,
            pos: [16, 1, 0],
            ..Default::default()
        };
        assert!(side.fits_array(&a, [112, 3, 1]));
        assert!(!side.fits_array(&a, [128, 3, 1]));
        assert!(!side.fits_array(&a, [112, 3, 2]));
        assert!(!side.fits_array(&a, [8, 1, 1]));
    }
}
