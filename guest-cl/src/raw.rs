//! Application memory: the library's reads and writes through the raw
//! pointers the OpenCL API hands it.
//!
//! Every function here is `unsafe` with the pointer contract of the OpenCL
//! parameter it serves; callers state at each use which parameter that is.
//! Null pointers are handled here (skipped, or reported as `None`), so the
//! contract is only about non-null pointers.

use std::ffi::{c_char, c_void, CStr};

use crate::types::CL_INVALID_VALUE;

/// Writes `v` to `*p` unless `p` is null.
///
/// # Safety
/// `p` is null or valid for writing one `T` (alignment not required).
pub unsafe fn set<T>(p: *mut T, v: T) {
    if !p.is_null() {
        // SAFETY: non-null and writable per this function's contract.
        unsafe { p.write_unaligned(v) };
    }
}

/// Reads `*p`.
///
/// # Safety
/// `p` is valid for reading one `T` (alignment not required).
pub unsafe fn get<T: Copy>(p: *const T) -> T {
    // SAFETY: readable per this function's contract.
    unsafe { p.read_unaligned() }
}

/// The `n` elements at `p`: empty when `n == 0`, `None` when `p` is null
/// (or misaligned) and `n > 0`.
///
/// # Safety
/// `p` is null or valid for reading `n` `T`s for `'a`, not written meanwhile.
pub unsafe fn slice<'a, T>(p: *const T, n: usize) -> Option<&'a [T]> {
    if n == 0 {
        return Some(&[]);
    }
    if p.is_null() || !p.is_aligned() {
        return None;
    }
    // SAFETY: non-null, aligned, `n` readable elements per the contract.
    Some(unsafe { std::slice::from_raw_parts(p, n) })
}

/// The `n` bytes at `p` (`None` when `p` is null and `n > 0`).
///
/// # Safety
/// As [`slice`] for bytes.
pub unsafe fn bytes<'a>(p: *const c_void, n: usize) -> Option<&'a [u8]> {
    // SAFETY: forwarded contract.
    unsafe { slice(p.cast::<u8>(), n) }
}

/// The `n` writable bytes at `p` (`None` when `p` is null and `n > 0`).
///
/// # Safety
/// `p` is null or valid for reading and writing `n` bytes for `'a`, and
/// nothing else accesses them meanwhile.
pub unsafe fn bytes_mut<'a>(p: *mut c_void, n: usize) -> Option<&'a mut [u8]> {
    if n == 0 {
        return Some(&mut []);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null, `n` writable bytes, exclusive per the contract.
    Some(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n) })
}

/// The bytes of a NUL-terminated string, without the NUL (`None` for null).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that lives for `'a`.
pub unsafe fn cstr<'a>(p: *const c_char) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    // SAFETY: NUL-terminated and live per the contract.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes())
}

/// Copies `src` to `dst`.
///
/// # Safety
/// `dst` is valid for writing `src.len()` bytes and does not overlap `src`.
pub unsafe fn write_bytes(dst: *mut c_void, src: &[u8]) {
    // SAFETY: per this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.cast::<u8>(), src.len()) };
}

/// The standard answer of every `clGet*Info`: `value` goes to
/// `param_value` when that is non-null (`CL_INVALID_VALUE` when
/// `param_value_size` is too small), its size to `param_value_size_ret`
/// when that is non-null.
///
/// # Safety
/// `param_value` is null or writable for `param_value_size` bytes;
/// `size_ret` is null or writable for one `size_t`.
pub unsafe fn info(
    value: &[u8],
    param_value_size: usize,
    param_value: *mut c_void,
    size_ret: *mut usize,
) -> Result<(), i32> {
    if !param_value.is_null() {
        if param_value_size < value.len() {
            return Err(CL_INVALID_VALUE);
        }
        // SAFETY: the caller's buffer holds param_value_size >= len bytes;
        // `value` is our own memory, so the two cannot overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(value.as_ptr(), param_value.cast::<u8>(), value.len())
        };
    }
    // SAFETY: forwarded contract for size_ret.
    unsafe { set(size_ret, value.len()) };
    Ok(())
}

/// Guest memory handed out by `clEnqueueMapBuffer` for a buffer that has no
/// host pointer of its own: zeroed, aligned to 128 bytes (the largest
/// OpenCL type, long16), kept until the unmap.
#[derive(Debug)]
pub struct MapMemory {
    blocks: Vec<Block>,
    len: usize,
}

#[repr(C, align(128))]
#[derive(Clone, Copy, Debug)]
struct Block([u8; 128]);

impl MapMemory {
    /// `len` zeroed bytes (`None` when the allocation fails).
    pub fn new(len: usize) -> Option<MapMemory> {
        let n = len.div_ceil(128).max(1);
        let mut blocks = Vec::new();
        blocks.try_reserve_exact(n).ok()?;
        blocks.resize(n, Block([0; 128]));
        Some(MapMemory { blocks, len })
    }

    /// The address the application gets.
    pub fn ptr(&mut self) -> *mut c_void {
        self.blocks.as_mut_ptr().cast()
    }

    /// The bytes, for filling at the map and reading back at the unmap.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        // SAFETY: the blocks are one allocation of at least `len` bytes of
        // plain u8 arrays (repr(C), no padding besides none: 128-byte
        // arrays), borrowed mutably through `self` for the slice's life.
        unsafe { std::slice::from_raw_parts_mut(self.blocks.as_mut_ptr().cast::<u8>(), len) }
    }
}
