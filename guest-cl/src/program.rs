//! Programs: source or binary kept here, built on the host.
//!
//! `clBuildProgram` stages the source (or binary) with `ClProgramStage` and
//! builds it with `ClBuildProgram`, which answers with the host program
//! even when the build failed, so that its log can be read. A program has
//! at most one host program; a rebuild replaces it.

use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fairgpu_protocol::opencl::{MAX_BUILD_OPTIONS, MAX_PROGRAM_BYTES};
use fairgpu_protocol::Opcode;

use crate::conn::{self, Conn};
use crate::context::Context;
use crate::platform::{check_device, cstring, device, host_info, host_str};
use crate::registry::{self, ParentRef};
use crate::types::*;
use crate::{guard, guard_obj, raw};

/// A program's state.
#[derive(Debug)]
pub struct Program {
    /// Its context (counted).
    pub context: ParentRef,
    /// The source, without a terminating NUL.
    source: Option<Vec<u8>>,
    /// The binary it was created with.
    binary: Option<Vec<u8>>,
    /// Kernels created from it and alive.
    pub kernels: AtomicU32,
    build: Mutex<Build>,
}

/// What the last build made.
#[derive(Debug)]
pub struct Build {
    /// The host program (0: none).
    pub host: u64,
    /// `CL_PROGRAM_BUILD_STATUS`.
    pub status: i32,
    options: Vec<u8>,
    /// The host's binary, once asked.
    binary: Option<Vec<u8>>,
    /// `CL_PROGRAM_KERNEL_NAMES` without its NUL, once asked.
    names: Option<Vec<u8>>,
    /// Whether the host answers `CL_KERNEL_ARG_ADDRESS_QUALIFIER` for this
    /// build's kernels (unknown until a kernel is made).
    pub arg_info: Option<bool>,
}

impl Program {
    /// The build state; held across the host calls that depend on it.
    pub fn build(&self) -> MutexGuard<'_, Build> {
        self.build.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Build {
    /// The host program of a successful build (else
    /// CL_INVALID_PROGRAM_EXECUTABLE).
    pub fn executable(&self) -> Result<u64, i32> {
        if self.status == CL_BUILD_SUCCESS && self.host != 0 {
            Ok(self.host)
        } else {
            Err(CL_INVALID_PROGRAM_EXECUTABLE)
        }
    }

    /// The kernel names of the successful build (`;`-separated, no NUL).
    pub fn kernel_names(&mut self) -> Result<Vec<u8>, i32> {
        let host = self.executable()?;
        if let Some(n) = &self.names {
            return Ok(n.clone());
        }
        let v = host_info(Opcode::ClProgramKernelNames, &[host])?;
        let names = host_str(&v).to_vec();
        self.names = Some(names.clone());
        Ok(names)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        conn::release_later(Opcode::ClReleaseProgram, self.build().host);
    }
}

/// The names in a `CL_PROGRAM_KERNEL_NAMES` list.
pub fn split_names(names: &[u8]) -> Vec<&[u8]> {
    names
        .split(|&b| b == b';')
        .map(|n| n.trim_ascii())
        .filter(|n| !n.is_empty())
        .collect()
}

fn new_program(context: ParentRef, source: Option<Vec<u8>>, binary: Option<Vec<u8>>) -> Handle {
    registry::create(Arc::new(Program {
        context,
        source,
        binary,
        kernels: AtomicU32::new(0),
        build: Mutex::new(Build {
            host: 0,
            status: CL_BUILD_NONE,
            options: Vec::new(),
            binary: None,
            names: None,
            arg_info: None,
        }),
    }))
}

/// The source of `clCreateProgramWithSource`: the strings concatenated,
/// each `lengths[i]` bytes long, or NUL-terminated where `lengths` is null
/// or `lengths[i]` is 0.
///
/// # Safety
/// `strings` holds `count` strings as the API describes; `lengths` is null
/// or holds `count` lengths.
pub unsafe fn concat_sources(
    count: u32,
    strings: *const *const c_char,
    lengths: *const usize,
) -> Result<Vec<u8>, i32> {
    // SAFETY: strings holds `count` pointers per the contract.
    let strs = unsafe { raw::slice(strings, count as usize) };
    let strs = strs.filter(|s| !s.is_empty()).ok_or(CL_INVALID_VALUE)?;
    // SAFETY: lengths is null or holds `count` sizes.
    let lens = unsafe { raw::slice(lengths, count as usize) };
    let mut out = Vec::new();
    for (i, &s) in strs.iter().enumerate() {
        let len = lens.map_or(0, |l| l[i]);
        let part = if len == 0 {
            // SAFETY: without a length, the string is NUL-terminated.
            unsafe { raw::cstr(s) }
        } else {
            // SAFETY: with a length, the string holds that many bytes.
            unsafe { raw::bytes(s.cast(), len) }
        };
        out.extend_from_slice(part.ok_or(CL_INVALID_VALUE)?);
    }
    Ok(out)
}

pub(crate) extern "C" fn clCreateProgramWithSource(
    context: Handle,
    count: u32,
    strings: *const *const c_char,
    lengths: *const usize,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateProgramWithSource", errcode_ret, || {
        let ctx = ParentRef::new::<Context>(context)?;
        // SAFETY: the clCreateProgramWithSource contract.
        let source = unsafe { concat_sources(count, strings, lengths) }?;
        Ok(new_program(ctx, Some(source), None))
    })
}

/// CL_INVALID_VALUE for a malformed device list, CL_INVALID_DEVICE for a
/// device that is not ours.
fn check_device_list(num: u32, list: *const Handle) -> Result<(), i32> {
    if (num == 0) != list.is_null() {
        return Err(CL_INVALID_VALUE);
    }
    // SAFETY: device_list holds num_devices handles.
    let devices = unsafe { raw::slice(list, num as usize) }.ok_or(CL_INVALID_VALUE)?;
    devices.iter().try_for_each(|&d| check_device(d))
}

pub(crate) extern "C" fn clCreateProgramWithBinary(
    context: Handle,
    num_devices: u32,
    device_list: *const Handle,
    lengths: *const usize,
    binaries: *const *const u8,
    binary_status: *mut i32,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateProgramWithBinary", errcode_ret, || {
        let ctx = ParentRef::new::<Context>(context)?;
        if num_devices == 0 {
            return Err(CL_INVALID_VALUE);
        }
        check_device_list(num_devices, device_list)?;
        let n = num_devices as usize;
        // SAFETY: lengths holds num_devices entries.
        let lens = unsafe { raw::slice(lengths, n) };
        // SAFETY: binaries holds num_devices entries.
        let bins = unsafe { raw::slice(binaries, n) };
        let (Some(lens), Some(bins)) = (lens, bins) else {
            return Err(CL_INVALID_VALUE);
        };
        let mut status = vec![CL_SUCCESS; n];
        for i in 0..n {
            if lens[i] == 0 || bins[i].is_null() {
                status[i] = CL_INVALID_VALUE;
            }
        }
        if !binary_status.is_null() {
            for (i, s) in status.iter().enumerate() {
                // SAFETY: binary_status holds num_devices entries.
                unsafe { raw::set(binary_status.wrapping_add(i), *s) };
            }
        }
        if status.iter().any(|&s| s != CL_SUCCESS) {
            return Err(CL_INVALID_VALUE);
        }
        // SAFETY: binaries[0] holds lengths[0] bytes.
        let bin = unsafe { raw::bytes(bins[0].cast(), lens[0]) }.ok_or(CL_INVALID_VALUE)?;
        Ok(new_program(ctx, None, Some(bin.to_vec())))
    })
}

pub(crate) extern "C" fn clRetainProgram(program: Handle) -> i32 {
    guard("clRetainProgram", || registry::retain::<Program>(program))
}

pub(crate) extern "C" fn clReleaseProgram(program: Handle) -> i32 {
    guard("clReleaseProgram", || registry::release::<Program>(program))
}

pub(crate) extern "C" fn clBuildProgram(
    program: Handle,
    num_devices: u32,
    device_list: *const Handle,
    options: *const c_char,
    notify: ProgramNotify,
    user_data: *mut c_void,
) -> i32 {
    guard("clBuildProgram", || {
        let p = registry::get::<Program>(program)?;
        check_device_list(num_devices, device_list)?;
        if notify.is_none() && !user_data.is_null() {
            return Err(CL_INVALID_VALUE);
        }
        // SAFETY: options is null or a NUL-terminated string.
        let options = unsafe { raw::cstr(options) }.unwrap_or_default().to_vec();
        if options.len() > MAX_BUILD_OPTIONS {
            return Err(CL_INVALID_BUILD_OPTIONS);
        }
        let wire_options = with_arg_info(&options);
        // Headers are the guest's: inline them here (crate::include).
        let expanded;
        let (kind, bytes) = match (&p.source, &p.binary) {
            (Some(s), _) => {
                expanded = crate::include::expand(
                    &String::from_utf8_lossy(s),
                    &String::from_utf8_lossy(&options),
                )
                .into_bytes();
                (0u64, &expanded)
            }
            (None, Some(b)) => (1u64, b),
            (None, None) => return Err(CL_INVALID_PROGRAM),
        };
        if bytes.len() as u64 > MAX_PROGRAM_BYTES {
            return Err(CL_OUT_OF_RESOURCES);
        }
        let status = {
            let mut b = p.build();
            if p.kernels.load(Ordering::Acquire) > 0 {
                return Err(CL_INVALID_OPERATION);
            }
            let len = bytes.len() as u64;
            let previous = b.host;
            let r = conn::with(|c| {
                c.send(Opcode::ClProgramStage, &[0, len], 0, bytes)?;
                c.call(
                    Opcode::ClBuildProgram,
                    &[kind, len, previous],
                    &wire_options,
                    &mut [],
                )
            });
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    // The host may have dropped the program this build was
                    // to replace before it failed: forget it rather than
                    // release it twice (at worst the host keeps it until
                    // the channel goes).
                    if previous != 0 {
                        b.host = 0;
                        b.status = CL_BUILD_ERROR;
                        b.binary = None;
                        b.names = None;
                        b.arg_info = None;
                    }
                    return Err(e);
                }
            };
            b.host = r.vals[0];
            let status = match r.vals[1] as i64 as i32 {
                0 if b.host == 0 => CL_BUILD_PROGRAM_FAILURE,
                s => s,
            };
            b.status = if status == CL_SUCCESS {
                CL_BUILD_SUCCESS
            } else {
                CL_BUILD_ERROR
            };
            b.options = options;
            b.binary = None;
            b.names = None;
            b.arg_info = None;
            status
        };
        if let Some(f) = notify {
            f(program, user_data);
        }
        match status {
            CL_SUCCESS => Ok(()),
            e => Err(e),
        }
    })
}

/// The option that keeps the kernels' argument information, which
/// `clSetKernelArg` uses to check its arguments (and which hosts answer
/// `clGetKernelArgInfo` with only for programs built with it).
const ARG_INFO: &[u8] = b"-cl-kernel-arg-info";

/// The build options sent to the host: the application's, with
/// [`ARG_INFO`] added unless they have it (or it would not fit).
pub fn with_arg_info(options: &[u8]) -> Vec<u8> {
    let mut out = options.to_vec();
    let has = options
        .split(u8::is_ascii_whitespace)
        .any(|w| w == ARG_INFO);
    if !has && options.len() + 1 + ARG_INFO.len() <= MAX_BUILD_OPTIONS {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(ARG_INFO);
    }
    out
}

/// The program's binary: the host's after a successful build, else the one
/// it was created with, else none.
fn binary(p: &Program) -> Result<Vec<u8>, i32> {
    let mut b = p.build();
    if let Some(bin) = &b.binary {
        return Ok(bin.clone());
    }
    if let Ok(host) = b.executable() {
        let bin = conn::with(|c| fetch_binary(c, host))?;
        b.binary = Some(bin.clone());
        return Ok(bin);
    }
    Ok(p.binary.clone().unwrap_or_default())
}

/// The binary of host program `host`, a page per request.
fn fetch_binary(c: &mut Conn, host: u64) -> Result<Vec<u8>, i32> {
    let mut page = vec![0u8; c.max_slice()];
    let mut out = Vec::new();
    loop {
        let r = c.call(
            Opcode::ClProgramBinary,
            &[host, out.len() as u64],
            &[],
            &mut page,
        )?;
        let total = r.vals[0];
        if total > MAX_PROGRAM_BYTES {
            return Err(CL_OUT_OF_RESOURCES);
        }
        let total = total as usize;
        let got = (r.data_len as usize).min(total.saturating_sub(out.len()));
        out.extend_from_slice(&page[..got]);
        if out.len() >= total || got == 0 {
            return Ok(out);
        }
    }
}

pub(crate) extern "C" fn clGetProgramInfo(
    program: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetProgramInfo", || {
        let p = registry::get::<Program>(program)?;
        let v = match param {
            CL_PROGRAM_REFERENCE_COUNT => {
                registry::refs::<Program>(program)?.to_ne_bytes().to_vec()
            }
            CL_PROGRAM_CONTEXT => (p.context.handle() as usize).to_ne_bytes().to_vec(),
            CL_PROGRAM_NUM_DEVICES => 1u32.to_ne_bytes().to_vec(),
            CL_PROGRAM_DEVICES => (device() as usize).to_ne_bytes().to_vec(),
            CL_PROGRAM_SOURCE => {
                let mut s = p.source.clone().unwrap_or_default();
                s.push(0);
                s
            }
            CL_PROGRAM_BINARY_SIZES => binary(&p)?.len().to_ne_bytes().to_vec(),
            CL_PROGRAM_BINARIES => {
                let bin = binary(&p)?;
                let n = size_of::<*mut u8>();
                if !value.is_null() {
                    if size < n {
                        return Err(CL_INVALID_VALUE);
                    }
                    // SAFETY: param_value is an array of one pointer per
                    // device (size checked).
                    let dst: *mut c_void = unsafe { raw::get(value.cast::<*mut c_void>()) };
                    if !dst.is_null() {
                        // SAFETY: a non-null entry points to
                        // CL_PROGRAM_BINARY_SIZES bytes.
                        unsafe { raw::write_bytes(dst, &bin) };
                    }
                }
                // SAFETY: size_ret is null or writable.
                unsafe { raw::set(size_ret, n) };
                return Ok(());
            }
            CL_PROGRAM_NUM_KERNELS => split_names(&p.build().kernel_names()?)
                .len()
                .to_ne_bytes()
                .to_vec(),
            CL_PROGRAM_KERNEL_NAMES => {
                let mut names = p.build().kernel_names()?;
                names.push(0);
                names
            }
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetProgramInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

pub(crate) extern "C" fn clGetProgramBuildInfo(
    program: Handle,
    dev: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetProgramBuildInfo", || {
        let p = registry::get::<Program>(program)?;
        check_device(dev)?;
        let b = p.build();
        let v = match param {
            CL_PROGRAM_BUILD_STATUS => b.status.to_ne_bytes().to_vec(),
            CL_PROGRAM_BUILD_OPTIONS => {
                let mut o = b.options.clone();
                o.push(0);
                o
            }
            CL_PROGRAM_BUILD_LOG => match b.host {
                0 => cstring(""),
                host => {
                    let mut log = host_str(&host_info(Opcode::ClProgramLog, &[host])?).to_vec();
                    log.push(0);
                    log
                }
            },
            CL_PROGRAM_BINARY_TYPE => {
                let executable = b.status == CL_BUILD_SUCCESS
                    || (b.status == CL_BUILD_NONE && p.binary.is_some());
                if executable {
                    CL_PROGRAM_BINARY_TYPE_EXECUTABLE
                } else {
                    CL_PROGRAM_BINARY_TYPE_NONE
                }
                .to_ne_bytes()
                .to_vec()
            }
            _ => return Err(CL_INVALID_VALUE),
        };
        drop(b);
        // SAFETY: the clGetProgramBuildInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn sources_concatenate_by_length_or_terminator() {
        let a = CString::new("kernel void f(").unwrap();
        let b = b"global int *p) {}XXXX";
        let c = CString::new("\n// end").unwrap();
        let strings = [a.as_ptr(), b.as_ptr().cast::<c_char>(), c.as_ptr()];
        let lengths = [0usize, 17, 0];
        // SAFETY: three strings; the second has a length, the others end in NUL.
        let src = unsafe { concat_sources(3, strings.as_ptr(), lengths.as_ptr()) }.unwrap();
        assert_eq!(src, b"kernel void f(global int *p) {}\n// end");
        let strings = [a.as_ptr(), c.as_ptr()];
        // SAFETY: NUL-terminated strings, no lengths.
        let src = unsafe { concat_sources(2, strings.as_ptr(), std::ptr::null()) }.unwrap();
        assert_eq!(src, b"kernel void f(\n// end");
    }

    #[test]
    fn bad_source_lists_are_invalid_values() {
        let strings = [std::ptr::null::<c_char>()];
        let call = |n, s: *const *const c_char| {
            // SAFETY: the lists are null or hold `n` (null) pointers.
            unsafe { concat_sources(n, s, std::ptr::null()) }
        };
        assert_eq!(call(0, strings.as_ptr()), Err(CL_INVALID_VALUE));
        assert_eq!(call(1, std::ptr::null()), Err(CL_INVALID_VALUE));
        assert_eq!(call(1, strings.as_ptr()), Err(CL_INVALID_VALUE));
    }

    #[test]
    fn builds_keep_argument_information() {
        assert_eq!(with_arg_info(b""), b"-cl-kernel-arg-info");
        assert_eq!(with_arg_info(b"-DN=4"), b"-DN=4 -cl-kernel-arg-info");
        assert_eq!(
            with_arg_info(b"-cl-kernel-arg-info -w"),
            b"-cl-kernel-arg-info -w"
        );
        let long = vec![b'x'; MAX_BUILD_OPTIONS - 4];
        assert_eq!(with_arg_info(&long), long);
    }

    #[test]
    fn kernel_names_split_on_semicolons() {
        assert_eq!(
            split_names(b"add;mul; scale"),
            [&b"add"[..], b"mul", b"scale"]
        );
        assert!(split_names(b"").is_empty());
        assert_eq!(split_names(b"one;"), [&b"one"[..]]);
    }
}
