//! What a texture or surface object names, as the interpreter's texture and
//! surface instructions (`tex`, `tld4`, `txq`, `suld`, `sust`, `suq`) need
//! it: where the texels lie in global memory, their format and extent, and
//! (for textures) how they are sampled.
//!
//! A kernel holds texture and surface objects as 64-bit handles (the values
//! `cuTexObjectCreate`/`cuSurfObjectCreate` returned); the caller's
//! [`crate::Memory`] resolves a handle to its [`Texture`] or [`Image`]. The
//! texels themselves are read and written through [`crate::Memory::read`]
//! and [`crate::Memory::write`], so every access stays bounds-checked.
//!
//! The numeric values of the enums are the CUDA driver API's
//! (`CUarray_format`, `CUaddress_mode`, `CUfilter_mode`).

/// Format of one channel of a texel (`CUarray_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ChannelFormat {
    U8 = 0x01,
    U16 = 0x02,
    U32 = 0x03,
    S8 = 0x08,
    S16 = 0x09,
    S32 = 0x0a,
    F16 = 0x10,
    F32 = 0x20,
}

impl ChannelFormat {
    /// The format of a `CUarray_format` value; `None` for the formats this
    /// interpreter does not model (block-compressed, YUV, packed UNORM).
    pub fn from_cuda(v: u32) -> Option<ChannelFormat> {
        Some(match v {
            0x01 => ChannelFormat::U8,
            0x02 => ChannelFormat::U16,
            0x03 => ChannelFormat::U32,
            0x08 => ChannelFormat::S8,
            0x09 => ChannelFormat::S16,
            0x0a => ChannelFormat::S32,
            0x10 => ChannelFormat::F16,
            0x20 => ChannelFormat::F32,
            _ => return None,
        })
    }

    /// Bytes of one channel.
    pub fn bytes(self) -> u32 {
        match self {
            ChannelFormat::U8 | ChannelFormat::S8 => 1,
            ChannelFormat::U16 | ChannelFormat::S16 | ChannelFormat::F16 => 2,
            ChannelFormat::U32 | ChannelFormat::S32 | ChannelFormat::F32 => 4,
        }
    }
}

/// The shape of the texels an object names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Linear memory read as a 1D array of `width` elements
    /// (`CU_RESOURCE_TYPE_LINEAR`, `tex1Dfetch`).
    Linear,
    /// Pitched linear memory read as a 2D array (`CU_RESOURCE_TYPE_PITCH2D`).
    Pitch2D,
    /// A CUDA array of 1, 2 or 3 dimensions.
    Array1D,
    Array2D,
    Array3D,
    /// A layered array: `depth` layers of 1D or 2D images.
    Layered1D,
    Layered2D,
    /// A cubemap: `depth` is 6, one 2D face per layer (+x, -x, +y, -y, +z,
    /// -z), `width == height`.
    Cubemap,
    /// A layered cubemap: `depth` is 6 × layers.
    LayeredCubemap,
}

/// Texels in global memory: element `(x, y, z)` (z the depth, layer or
/// face) lies at `base + z * slice_pitch + y * row_pitch + x * element
/// size`, its channels packed in order (r, g, b, a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Image {
    pub shape: Shape,
    pub base: u64,
    pub format: ChannelFormat,
    /// 1, 2 or 4.
    pub channels: u32,
    /// Extent in elements; 1 in the dimensions the shape does not have.
    pub width: u64,
    pub height: u64,
    /// Depth (3D), layers (layered) or faces (cubemaps: 6 × layers).
    pub depth: u64,
    pub row_pitch: u64,
    pub slice_pitch: u64,
}

impl Image {
    /// Bytes of one element (all channels).
    pub fn element_bytes(&self) -> u64 {
        u64::from(self.format.bytes()) * u64::from(self.channels)
    }
}

/// How out-of-range coordinates are mapped (`CUaddress_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum AddressMode {
    Wrap = 0,
    Clamp = 1,
    Mirror = 2,
    Border = 3,
}

impl AddressMode {
    pub fn from_cuda(v: u32) -> Option<AddressMode> {
        Some(match v {
            0 => AddressMode::Wrap,
            1 => AddressMode::Clamp,
            2 => AddressMode::Mirror,
            3 => AddressMode::Border,
            _ => return None,
        })
    }
}

/// How a texture is sampled (`CUDA_TEXTURE_DESC`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    /// Per dimension (x, y, z).
    pub address: [AddressMode; 3],
    /// Linear (bi-, trilinear) filtering instead of nearest point.
    pub linear: bool,
    /// Coordinates in [0, 1) instead of [0, extent).
    pub normalized_coords: bool,
    /// Integer formats read as floats in [0, 1] (unsigned) or [-1, 1]
    /// (signed); false: read as the integers they are
    /// (`CU_TRSF_READ_AS_INTEGER`).
    pub read_normalized: bool,
    /// sRGB to linear conversion of 8-bit unsigned channels.
    pub srgb: bool,
    /// Filtering across cubemap faces.
    pub seamless_cubemap: bool,
    /// What a border-mode fetch outside the image returns.
    pub border: [f32; 4],
}

/// A texture object: its texels and how they are sampled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Texture {
    pub image: Image,
    pub sampler: Sampler,
}
