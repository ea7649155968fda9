//! Programs built with relocatable device code (`nvcc -rdc=true`, which
//! dynamic parallelism needs) on a device that executes PTX only.
//!
//! NVIDIA's device linker joins such a program's objects into one cubin
//! at build time, and libcudart registers that: a fatbin wrapper of
//! version 2 whose image holds machine code only, and whose fourth word
//! points to a NULL-terminated array of the objects' own fatbins (the
//! "prelinked" images, each with the PTX nvcc made for its translation
//! unit). SimGpu executes PTX; there the guest library loads, in place
//! of the cubin, one PTX module linked from the objects' PTX as
//! `cuLinkComplete` links PTX inputs (`link.rs`). The device runtime's
//! own object (`libcudadevrt.a`, machine code and PTX for architectures
//! other than the device's) is left out: SimGpu provides its functions
//! (`__cudaCDP2…`) itself, and cooperative groups' grid barrier comes
//! from `link.rs`. On a device that executes machine code (CudaExecutor,
//! NVIDIA's driver) the linked cubin is loaded as built.

use std::ffi::c_void;

use fairgpu_protocol::cuda::{ATTR_EXECUTES_PTX_ONLY, MAX_MODULE_IMAGE};

use crate::types::{err, CUresult};

const WRAPPER_MAGIC: u32 = 0x4662_43b1;
const FATBIN_MAGIC: u32 = 0xba55_ed50;
const ENTRY_KIND_PTX: u16 = 1;
const ENTRY_HEADER_MIN: usize = 64;
const FLAG_COMPRESSED: u64 = 0x2000;
const FLAG_ZSTD: u64 = 0x8000;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Most objects a linked program may have.
const MAX_OBJECTS: usize = 4096;
/// Most bytes of PTX all of a program's objects may decompress to.
const MAX_PTX_TOTAL: u64 = 256 << 20;

/// For a wrapper of a program linked from relocatable objects, on a
/// device that executes PTX only: one PTX module (NUL-terminated) linked
/// from its objects' PTX. `None` for any other image or device.
///
/// # Safety
/// `image` must point at a module image as the driver API requires it
/// (checked non-NULL by the caller); a wrapper's array and fatbins are
/// read as libcudart laid them out.
pub(crate) unsafe fn relocatable_ptx(image: *const c_void) -> Result<Option<Vec<u8>>, CUresult> {
    let p = image.cast::<u8>();
    // SAFETY: every image kind starts with at least 8 readable bytes
    // (a wrapper has 24).
    let head = unsafe { std::slice::from_raw_parts(p, 8) };
    let word = |o: usize| u32::from_le_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
    if word(0) != WRAPPER_MAGIC || word(4) != 2 {
        return Ok(None);
    }
    // SAFETY: a version-2 wrapper's fourth word (offset 16) is the array.
    let objects = unsafe { p.add(16).cast::<*const *const u8>().read_unaligned() };
    if objects.is_null() {
        return Ok(None);
    }
    let dev = crate::state::device()?;
    if dev.attribute(ATTR_EXECUTES_PTX_ONLY) != Ok(1) {
        return Ok(None);
    }
    let arch = dev.attribute(75).unwrap_or(0) * 10 + dev.attribute(76).unwrap_or(0);
    let arch = u32::try_from(arch).unwrap_or(0);
    let mut texts = Vec::new();
    let mut budget = MAX_PTX_TOTAL;
    for i in 0..=MAX_OBJECTS {
        // SAFETY: the array is NULL-terminated; the bound stops a
        // malformed one.
        let f = unsafe { *objects.add(i) };
        if f.is_null() {
            break;
        }
        if i == MAX_OBJECTS {
            return Err(crate::unsupported(
                "a program linked from more than 4096 relocatable objects",
            ));
        }
        // SAFETY: each entry points at a fatbin header.
        let bytes = unsafe { fatbin_bytes(f)? };
        if let Some(text) = best_ptx(bytes, arch, &mut budget)? {
            if !crate::link::is_device_runtime_ptx(&text) {
                texts.push(text);
            }
        }
    }
    if texts.is_empty() {
        return Ok(None);
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut linked = crate::link::link_ptx(&refs).into_bytes();
    linked.push(0);
    Ok(Some(linked))
}

/// The fatbin at `p`, sized from its header.
///
/// # Safety
/// `p` must point at a readable fatbin.
unsafe fn fatbin_bytes<'a>(p: *const u8) -> Result<&'a [u8], CUresult> {
    // SAFETY: a fatbin header is 16 bytes.
    let h = unsafe { std::slice::from_raw_parts(p, 16) };
    let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let header = u64::from(u16::from_le_bytes([h[6], h[7]]));
    let rest = u64::from_le_bytes(h[8..16].try_into().map_err(|_| err::INVALID_IMAGE)?);
    let total = header.saturating_add(rest);
    if magic != FATBIN_MAGIC || header < 16 || total > MAX_MODULE_IMAGE {
        return Err(err::INVALID_IMAGE);
    }
    // SAFETY: the header declares `total` bytes of fatbin.
    Ok(unsafe { std::slice::from_raw_parts(p, total as usize) })
}

/// The PTX of one object's fatbin for the newest architecture up to
/// `arch`; `None` if it has none.
fn best_ptx(fatbin: &[u8], arch: u32, budget: &mut u64) -> Result<Option<String>, CUresult> {
    let u16_at = |o: usize| {
        fatbin
            .get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |o: usize| {
        fatbin
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        fatbin
            .get(o..o + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    let bad = err::INVALID_IMAGE;
    let start = usize::from(u16_at(6).ok_or(bad)?);
    let mut best: Option<(u32, usize)> = None;
    let mut e = start;
    while e < fatbin.len() {
        let kind = u16_at(e).ok_or(bad)?;
        let header = u32_at(e + 4).ok_or(bad)? as usize;
        let payload = usize::try_from(u64_at(e + 8).ok_or(bad)?).map_err(|_| bad)?;
        if header < ENTRY_HEADER_MIN {
            return Err(bad);
        }
        let end = e
            .checked_add(header)
            .and_then(|d| d.checked_add(payload))
            .filter(|&d| d <= fatbin.len())
            .ok_or(bad)?;
        let entry_arch = u32_at(e + 28).ok_or(bad)?;
        if kind == ENTRY_KIND_PTX && entry_arch <= arch && best.is_none_or(|(a, _)| entry_arch > a)
        {
            best = Some((entry_arch, e));
        }
        e = end;
    }
    let Some((_, e)) = best else {
        return Ok(None);
    };
    let header = u32_at(e + 4).ok_or(bad)? as usize;
    let payload_len = usize::try_from(u64_at(e + 8).ok_or(bad)?).map_err(|_| bad)?;
    let payload = &fatbin[e + header..e + header + payload_len];
    let compressed_len = u32_at(e + 16).ok_or(bad)? as usize;
    let flags = u64_at(e + 40).ok_or(bad)?;
    let size = u64_at(e + 56).ok_or(bad)?;
    let zstd = flags & FLAG_ZSTD != 0 || payload.starts_with(&ZSTD_MAGIC);
    let plain = if zstd || flags & FLAG_COMPRESSED != 0 {
        *budget = budget.checked_sub(size).ok_or(bad)?;
        inflate(payload, compressed_len, size, zstd).ok_or(bad)?
    } else {
        payload.to_vec()
    };
    let end = plain.iter().position(|&b| b == 0).unwrap_or(plain.len());
    let text = std::str::from_utf8(&plain[..end]).map_err(|_| bad)?;
    Ok(Some(text.to_owned()))
}

/// A compressed PTX entry's text: zstd (nvcc 13) or an LZ4 block.
fn inflate(payload: &[u8], compressed_len: usize, size: u64, zstd: bool) -> Option<Vec<u8>> {
    use std::io::Read;
    if size == 0 {
        return None;
    }
    if zstd {
        let mut out = Vec::new();
        let dec = ruzstd::decoding::StreamingDecoder::new(payload).ok()?;
        dec.take(size).read_to_end(&mut out).ok()?;
        return (out.len() as u64 == size).then_some(out);
    }
    lz4_flex::block::decompress(payload.get(..compressed_len)?, usize::try_from(size).ok()?).ok()
}
