//! Batched copies (CUDA 12.8/13): `cuMemcpyBatchAsync` and its `_v2`.
//!
//! Each copy of the batch is issued in order on the stream as
//! `cuMemcpyAsync` with unified addressing, so each is checked, quota'd
//! and scheduled as that call is. The attributes are checked as the
//! driver checks them; of what they say, the source access order needs
//! nothing here (sources in host memory are read before the call returns,
//! which every order allows) and location hints concern managed memory
//! on devices with concurrent managed access, which this device does not
//! report.

use crate::ffi_result;
use crate::types::{err, CUdeviceptr, CUresult, CUstream};

/// `CUmemcpyAttributes`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemcpyAttributes {
    src_access_order: u32,
    src_loc_hint: [u32; 2],
    dst_loc_hint: [u32; 2],
    flags: u32,
}

const _: () = assert!(std::mem::size_of::<MemcpyAttributes>() == 24);

/// `CU_MEMCPY_SRC_ACCESS_ORDER_STREAM` through `_ANY`.
const ACCESS_ORDERS: std::ops::RangeInclusive<u32> = 1..=3;
/// `CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE`, the one flag.
const PREFER_OVERLAP_WITH_COMPUTE: u32 = 1;
/// Most copies one batch may hold (a bound on what is read from the
/// caller's arrays).
const MAX_COPIES: usize = 1 << 20;

/// Reads `n` elements at `p` (non-null unless `n` is 0).
fn elements<'a, T>(p: *const T, n: usize) -> Result<&'a [T], CUresult> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err::INVALID_VALUE);
    }
    // SAFETY: the caller passes arrays of `n` (bounded) elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Checks a batch and issues it; on a copy's failure, its index is in the
/// error.
#[allow(clippy::too_many_arguments)]
fn batch(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
    s: CUstream,
    per_thread: bool,
) -> Result<(), (CUresult, Option<usize>)> {
    let whole = |e: CUresult| (e, None);
    // The legacy NULL stream is refused, as the driver refuses it (0 is
    // the per-thread stream for the `_ptsz` entry points).
    let legacy = s as usize == 1 || (s.is_null() && !per_thread);
    if legacy || count == 0 || count > MAX_COPIES {
        return Err(whole(err::INVALID_VALUE));
    }
    if num_attrs == 0 || num_attrs > count {
        return Err(whole(err::INVALID_VALUE));
    }
    let (dsts, srcs, sizes) = (
        elements(dsts, count).map_err(whole)?,
        elements(srcs, count).map_err(whole)?,
        elements(sizes, count).map_err(whole)?,
    );
    let attrs = elements(attrs, num_attrs).map_err(whole)?;
    let idxs = elements(attrs_idxs, num_attrs).map_err(whole)?;
    let ordered = idxs.first() == Some(&0)
        && idxs.windows(2).all(|w| w[0] < w[1])
        && idxs.last().is_some_and(|&l| l < count);
    let valid = attrs.iter().all(|a| {
        ACCESS_ORDERS.contains(&a.src_access_order) && a.flags & !PREFER_OVERLAP_WITH_COMPUTE == 0
    });
    if !ordered || !valid {
        return Err(whole(err::INVALID_VALUE));
    }
    for i in 0..count {
        // A copy past the end of device memory this process knows fails
        // here, with its index, rather than later on the stream.
        if crate::memory::overruns_device(dsts[i], sizes[i])
            || crate::memory::overruns_device(srcs[i], sizes[i])
        {
            return Err((err::INVALID_VALUE, Some(i)));
        }
        match crate::memory::cuMemcpyAsync(dsts[i], srcs[i], sizes[i], s) {
            err::SUCCESS => {}
            e => return Err((e, Some(i))),
        }
    }
    Ok(())
}

/// `cuMemcpyBatchAsync` (CUDA 12.8): `fail_idx` gets the failing copy's
/// index, or `usize::MAX` for an error of the whole batch.
#[allow(clippy::too_many_arguments)]
fn batch_v1(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
    fail_idx: *mut usize,
    s: CUstream,
    per_thread: bool,
) -> CUresult {
    ffi_result(|| {
        let r = batch(
            dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, s, per_thread,
        );
        if let Err((e, at)) = r {
            if !fail_idx.is_null() {
                // SAFETY: the caller passes a writable slot (checked for null).
                unsafe { fail_idx.write(at.unwrap_or(usize::MAX)) };
            }
            return Err(e);
        }
        Ok(())
    })
}

/// `cuMemcpyBatchAsync` (CUDA 12.8 ABI).
#[no_mangle]
pub extern "C" fn cuMemcpyBatchAsync(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
    fail_idx: *mut usize,
    s: CUstream,
) -> CUresult {
    let s = crate::stream::resolve(s);
    batch_v1(
        dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, s, false,
    )
}

/// `cuMemcpyBatchAsync_ptsz` (CUDA 12.8 ABI).
#[no_mangle]
pub extern "C" fn cuMemcpyBatchAsync_ptsz(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
    fail_idx: *mut usize,
    s: CUstream,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    batch_v1(
        dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, fail_idx, s, true,
    )
}

/// `cuMemcpyBatchAsync_v2` (CUDA 13).
#[no_mangle]
pub extern "C" fn cuMemcpyBatchAsync_v2(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
    s: CUstream,
) -> CUresult {
    let s = crate::stream::resolve(s);
    batch_v1(
        dsts,
        srcs,
        sizes,
        count,
        attrs,
        attrs_idxs,
        num_attrs,
        std::ptr::null_mut(),
        s,
        false,
    )
}

/// `cuMemcpyBatchAsync_v2_ptsz` (CUDA 13).
#[no_mangle]
pub extern "C" fn cuMemcpyBatchAsync_v2_ptsz(
    dsts: *const CUdeviceptr,
    srcs: *const CUdeviceptr,
    sizes: *const usize,
    count: usize,
    attrs: *const MemcpyAttributes,
    attrs_idxs: *const usize,
    num_attrs: usize,
    s: CUstream,
) -> CUresult {
    let s = crate::stream::per_thread_default(s);
    batch_v1(
        dsts,
        srcs,
        sizes,
        count,
        attrs,
        attrs_idxs,
        num_attrs,
        std::ptr::null_mut(),
        s,
        true,
    )
}
