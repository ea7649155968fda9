//! The driver's first execution-control API (CUDA 1.x–3.x), deprecated
//! since CUDA 4.0 and still exported and declared by CUDA 13's `cuda.h`:
//! a kernel's block shape, dynamic shared memory and parameters are set on
//! the function object (`cuFuncSetBlockShape`, `cuFuncSetSharedSize`,
//! `cuParamSetSize`/`Seti`/`Setf`/`Setv`), then `cuLaunch`,
//! `cuLaunchGrid` or `cuLaunchGridAsync` starts it. PyCUDA sets the block
//! shape this way before every call, and older programs launch this way.
//!
//! The settings are the function's (every thread sees them, as on the
//! driver) and live with it: they go when its module is unloaded. A
//! launch here is `cuLaunchKernel` with the parameters as an `extra`
//! buffer, so it is checked, captured into graphs and sent the same way.
//!
//! Texture references (`cuParamSetTexRef`) are not carried: nvcc has not
//! compiled `texture<>` references since CUDA 12.

use std::ffi::c_void;

use fairgpu_protocol::cuda::MAX_PARAM_BYTES;

use crate::context::require_current;
use crate::ffi_result;
use crate::module::function_ref;
use crate::types::{err, CUfunction, CUresult, CUstream};

/// What the legacy calls set on one function.
#[derive(Debug, Default)]
pub struct LegacyLaunch {
    /// `cuFuncSetBlockShape`; a launch before it fails (INVALID_VALUE).
    block: Option<[u32; 3]>,
    /// `cuFuncSetSharedSize`.
    shared: u32,
    /// `cuParamSetSize`; unset, the kernel's own parameter size.
    size: Option<u32>,
    /// The parameter bytes written so far (zero where none was).
    params: Vec<u8>,
}

impl LegacyLaunch {
    fn set_block(&mut self, x: i32, y: i32, z: i32) -> Result<(), CUresult> {
        let dim = |v: i32| u32::try_from(v).ok().filter(|&v| v > 0);
        match (dim(x), dim(y), dim(z)) {
            (Some(x), Some(y), Some(z)) => {
                self.block = Some([x, y, z]);
                Ok(())
            }
            _ => Err(err::INVALID_VALUE),
        }
    }

    fn set_size(&mut self, n: u32) -> Result<(), CUresult> {
        if n > MAX_PARAM_BYTES {
            return Err(err::INVALID_VALUE);
        }
        self.size = Some(n);
        Ok(())
    }

    /// Writes `bytes` at `offset` of the parameter buffer.
    fn write(&mut self, offset: u32, bytes: &[u8]) -> Result<(), CUresult> {
        let end = u64::from(offset) + bytes.len() as u64;
        if end > u64::from(MAX_PARAM_BYTES) {
            return Err(err::INVALID_VALUE);
        }
        let (o, e) = (offset as usize, end as usize);
        if self.params.len() < e {
            self.params.resize(e, 0);
        }
        self.params[o..e].copy_from_slice(bytes);
        Ok(())
    }

    /// The block shape, shared size and parameter buffer of a launch of a
    /// kernel whose own parameters take `kernel_size` bytes.
    fn launch_args(&self, kernel_size: u64) -> Result<([u32; 3], u32, Vec<u8>), CUresult> {
        let block = self.block.ok_or(err::INVALID_VALUE)?;
        let size = self.size.map_or(kernel_size, u64::from);
        let size = usize::try_from(size).map_err(|_| err::INVALID_VALUE)?;
        let mut buf = self.params.clone();
        buf.resize(size, 0);
        Ok((block, self.shared, buf))
    }
}

/// Runs `f` on the legacy settings of function `hfunc`.
fn with_launch<T>(
    hfunc: CUfunction,
    f: impl FnOnce(&mut LegacyLaunch) -> Result<T, CUresult>,
) -> Result<T, CUresult> {
    require_current()?;
    let func = function_ref(hfunc)?;
    let mut l = func.legacy.lock().map_err(|_| err::UNKNOWN)?;
    f(&mut l)
}

/// `cuFuncSetBlockShape`.
#[no_mangle]
pub extern "C" fn cuFuncSetBlockShape(hfunc: CUfunction, x: i32, y: i32, z: i32) -> CUresult {
    ffi_result(|| with_launch(hfunc, |l| l.set_block(x, y, z)))
}

/// `cuFuncSetSharedSize`.
#[no_mangle]
pub extern "C" fn cuFuncSetSharedSize(hfunc: CUfunction, bytes: u32) -> CUresult {
    ffi_result(|| {
        with_launch(hfunc, |l| {
            l.shared = bytes;
            Ok(())
        })
    })
}

/// `cuParamSetSize`.
#[no_mangle]
pub extern "C" fn cuParamSetSize(hfunc: CUfunction, numbytes: u32) -> CUresult {
    ffi_result(|| with_launch(hfunc, |l| l.set_size(numbytes)))
}

/// `cuParamSeti`.
#[no_mangle]
pub extern "C" fn cuParamSeti(hfunc: CUfunction, offset: i32, value: u32) -> CUresult {
    ffi_result(|| {
        let offset = u32::try_from(offset).map_err(|_| err::INVALID_VALUE)?;
        with_launch(hfunc, |l| l.write(offset, &value.to_ne_bytes()))
    })
}

/// `cuParamSetf`.
#[no_mangle]
pub extern "C" fn cuParamSetf(hfunc: CUfunction, offset: i32, value: f32) -> CUresult {
    ffi_result(|| {
        let offset = u32::try_from(offset).map_err(|_| err::INVALID_VALUE)?;
        with_launch(hfunc, |l| l.write(offset, &value.to_ne_bytes()))
    })
}

/// `cuParamSetv`.
#[no_mangle]
pub extern "C" fn cuParamSetv(
    hfunc: CUfunction,
    offset: i32,
    ptr: *mut c_void,
    numbytes: u32,
) -> CUresult {
    ffi_result(|| {
        let offset = u32::try_from(offset).map_err(|_| err::INVALID_VALUE)?;
        if numbytes > MAX_PARAM_BYTES {
            return Err(err::INVALID_VALUE);
        }
        if numbytes == 0 {
            return with_launch(hfunc, |_| Ok(()));
        }
        if ptr.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: the caller passes `numbytes` readable bytes at `ptr`
        // (non-null, checked; the count is bounded above).
        let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), numbytes as usize) };
        with_launch(hfunc, |l| l.write(offset, bytes))
    })
}

/// Launches `hfunc` over a `w` × `h` grid with its legacy settings.
fn launch_grid(hfunc: CUfunction, w: i32, h: i32, s: CUstream) -> CUresult {
    let args = (|| {
        let dim = |v: i32| u32::try_from(v).ok().filter(|&v| v > 0);
        let grid = [
            dim(w).ok_or(err::INVALID_VALUE)?,
            dim(h).ok_or(err::INVALID_VALUE)?,
            1,
        ];
        let kernel_size =
            fairgpu_protocol::cuda::ParamInfo::packed_size(&function_ref(hfunc)?.params);
        let (block, shared, buf) = with_launch(hfunc, |l| l.launch_args(kernel_size))?;
        Ok::<_, CUresult>((grid, block, shared, buf))
    })();
    let (grid, block, shared, mut buf) = match args {
        Ok(a) => a,
        Err(e) => return e,
    };
    crate::launch::launch_buffer(hfunc, grid, block, shared, s, &mut buf)
}

/// `cuLaunch`: one block.
#[no_mangle]
pub extern "C" fn cuLaunch(f: CUfunction) -> CUresult {
    launch_grid(f, 1, 1, std::ptr::null_mut())
}

/// `cuLaunchGrid`: on the NULL stream.
#[no_mangle]
pub extern "C" fn cuLaunchGrid(f: CUfunction, grid_width: i32, grid_height: i32) -> CUresult {
    launch_grid(f, grid_width, grid_height, std::ptr::null_mut())
}

/// `cuLaunchGridAsync`.
#[no_mangle]
pub extern "C" fn cuLaunchGridAsync(
    f: CUfunction,
    grid_width: i32,
    grid_height: i32,
    s: CUstream,
) -> CUresult {
    launch_grid(f, grid_width, grid_height, crate::stream::resolve(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_land_at_their_offsets_and_the_size_pads_or_cuts() {
        let mut l = LegacyLaunch::default();
        assert_eq!(
            l.launch_args(8),
            Err(err::INVALID_VALUE),
            "no block shape yet"
        );
        l.set_block(32, 2, 1).unwrap();
        l.write(8, &7u32.to_ne_bytes()).unwrap();
        l.write(0, &[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        let (block, shared, buf) = l.launch_args(16).unwrap();
        assert_eq!((block, shared), ([32, 2, 1], 0));
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8, 7, 0, 0, 0, 0, 0, 0, 0]);
        l.set_size(4).unwrap();
        assert_eq!(l.launch_args(16).unwrap().2, [1, 2, 3, 4]);
    }

    #[test]
    fn bad_shapes_and_writes_past_the_parameter_limit_are_refused() {
        let mut l = LegacyLaunch::default();
        assert_eq!(l.set_block(0, 1, 1), Err(err::INVALID_VALUE));
        assert_eq!(l.set_block(-4, 1, 1), Err(err::INVALID_VALUE));
        assert_eq!(l.set_size(MAX_PARAM_BYTES + 1), Err(err::INVALID_VALUE));
        assert_eq!(
            l.write(MAX_PARAM_BYTES - 3, &[0; 8]),
            Err(err::INVALID_VALUE)
        );
        assert_eq!(l.write(u32::MAX, &[0; 4]), Err(err::INVALID_VALUE));
        assert!(l.params.is_empty(), "a refused write leaves nothing");
        l.write(MAX_PARAM_BYTES - 4, &[9; 4]).unwrap();
        assert_eq!(l.params.len(), MAX_PARAM_BYTES as usize);
    }
}
