//! Kernels, their arguments, and NDRange launches.
//!
//! Arguments are kept here until a launch, which sends them all with the
//! geometry in one fire-and-forget `ClNdRange`. The kind of an argument is
//! decided here ([`arg_kind`]): from its address space and type when the
//! host can say (`CL_KERNEL_ARG_ADDRESS_QUALIFIER` and
//! `CL_KERNEL_ARG_TYPE_NAME`, asked once per argument when the kernel is
//! made; hosts answer for programs built with `-cl-kernel-arg-info`, which
//! [`crate::program`] adds to every build), which also lets
//! `clSetKernelArg` fail as the spec says; else from what `clSetKernelArg`
//! got, which reproduces the application's call on the host exactly but
//! for the handle of a memory object or sampler, and leaves its errors to
//! the launch.

use std::ffi::{c_char, c_void};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use fairgpu_protocol::opencl::{
    encode_arg, KernelArg, NdRangeHeader, MAX_ARG_BYTES, MAX_KERNEL_ARGS,
};
use fairgpu_protocol::Opcode;

use crate::event::Enqueue;
use crate::mem::Mem;
use crate::platform::{check_device, cstring, host_device_info, host_info, host_str};
use crate::program::{split_names, Build, Program};
use crate::registry::{self, ParentRef};
use crate::sampler::Sampler;
use crate::types::*;
use crate::{conn, guard, guard_obj, raw};

/// A kernel's state.
#[derive(Debug)]
pub struct Kernel {
    /// Its program (counted).
    pub program: ParentRef,
    prog: Arc<Program>,
    /// The program's context.
    pub context: usize,
    /// The host's kernel.
    pub host: u64,
    name: Vec<u8>,
    /// Number of arguments.
    pub nargs: u32,
    /// Each argument's address space, or none known.
    spaces: Vec<ArgSpace>,
    args: Mutex<Vec<Option<KernelArg>>>,
}

/// What a kernel argument takes, as far as the host said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgSpace {
    /// Not known: decided from the call.
    Unknown,
    /// `__global` or `__constant` pointer: a buffer.
    Buffer,
    /// An image type (`image2d_t`, …): an image.
    Image,
    /// `sampler_t`: a sampler.
    Sampler,
    /// `__local`: a size.
    Local,
    /// `__private`: a value.
    Value,
}

/// A live object a `clSetKernelArg` value names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgObject {
    /// A buffer (its host handle).
    Buffer(u64),
    /// An image (its host handle).
    Image(u64),
    /// A sampler (its host handle).
    Sampler(u64),
}

const CL_KERNEL_ARG_ADDRESS_QUALIFIER: u64 = 0x1196;
const CL_KERNEL_ARG_TYPE_NAME: u64 = 0x1198;
const CL_KERNEL_ARG_ADDRESS_GLOBAL: u32 = 0x119B;
const CL_KERNEL_ARG_ADDRESS_LOCAL: u32 = 0x119C;
const CL_KERNEL_ARG_ADDRESS_CONSTANT: u32 = 0x119D;
const CL_KERNEL_ARG_ADDRESS_PRIVATE: u32 = 0x119E;

impl ArgSpace {
    fn from_qualifier(q: u32) -> ArgSpace {
        match q {
            CL_KERNEL_ARG_ADDRESS_GLOBAL | CL_KERNEL_ARG_ADDRESS_CONSTANT => ArgSpace::Buffer,
            CL_KERNEL_ARG_ADDRESS_LOCAL => ArgSpace::Local,
            CL_KERNEL_ARG_ADDRESS_PRIVATE => ArgSpace::Value,
            _ => ArgSpace::Unknown,
        }
    }

    /// From an argument's address qualifier and type name: image types
    /// and `sampler_t` by name (whatever qualifier the host reports for
    /// them), the rest by address space.
    fn of(q: u32, type_name: &str) -> ArgSpace {
        let t = type_name
            .split_whitespace()
            .last()
            .unwrap_or("")
            .trim_start_matches("__");
        let image = matches!(
            t,
            "image1d_t"
                | "image1d_array_t"
                | "image1d_buffer_t"
                | "image2d_t"
                | "image2d_array_t"
                | "image3d_t"
                | "image2d_depth_t"
                | "image2d_array_depth_t"
                | "image2d_msaa_t"
                | "image2d_array_msaa_t"
                | "image2d_msaa_depth_t"
                | "image2d_array_msaa_depth_t"
        );
        if image {
            ArgSpace::Image
        } else if t == "sampler_t" {
            ArgSpace::Sampler
        } else {
            ArgSpace::from_qualifier(q)
        }
    }
}

impl Kernel {
    fn args(&self) -> MutexGuard<'_, Vec<Option<KernelArg>>> {
        self.args.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.prog.kernels.fetch_sub(1, Ordering::AcqRel);
        conn::release_later(Opcode::ClReleaseKernel, self.host);
    }
}

/// The kind of a `clSetKernelArg` argument of `size` bytes at `value` for
/// an argument that takes `space` (`find` answers the live memory object or
/// sampler a handle names), checked as the spec says where the space is
/// known. Where it is not: no value is `__local` memory of that size; the
/// size of a handle holding a live memory object, a live sampler or NULL
/// is that object (NULL: a NULL buffer); anything else is bytes by value.
pub fn arg_kind(
    space: ArgSpace,
    size: usize,
    value: Option<&[u8]>,
    find: impl Fn(usize) -> Option<ArgObject>,
) -> Result<KernelArg, i32> {
    let word = |b: &[u8]| <[u8; size_of::<usize>()]>::try_from(b).map(usize::from_ne_bytes);
    match space {
        ArgSpace::Unknown => {}
        ArgSpace::Local => {
            if value.is_some() {
                return Err(CL_INVALID_ARG_VALUE);
            }
            return match u32::try_from(size) {
                Ok(n) if n > 0 => Ok(KernelArg::Local(n)),
                _ => Err(CL_INVALID_ARG_SIZE),
            };
        }
        ArgSpace::Buffer => {
            if size != size_of::<usize>() {
                return Err(CL_INVALID_ARG_SIZE);
            }
            return match value.map(word) {
                None | Some(Ok(0)) => Ok(KernelArg::Mem(0)),
                Some(Ok(p)) => match find(p) {
                    Some(ArgObject::Buffer(h)) => Ok(KernelArg::Mem(h)),
                    _ => Err(CL_INVALID_MEM_OBJECT),
                },
                Some(Err(_)) => Err(CL_INVALID_ARG_SIZE),
            };
        }
        ArgSpace::Image | ArgSpace::Sampler => {
            if size != size_of::<usize>() {
                return Err(CL_INVALID_ARG_SIZE);
            }
            let p = value.map(word).ok_or(CL_INVALID_ARG_VALUE)?;
            let image = space == ArgSpace::Image;
            return match (p.map(&find), image) {
                (Ok(Some(ArgObject::Image(h))), true) => Ok(KernelArg::Mem(h)),
                (Ok(Some(ArgObject::Sampler(h))), false) => Ok(KernelArg::Sampler(h)),
                (Ok(_), true) => Err(CL_INVALID_MEM_OBJECT),
                (Ok(_), false) => Err(CL_INVALID_SAMPLER),
                (Err(_), _) => Err(CL_INVALID_ARG_SIZE),
            };
        }
        ArgSpace::Value => {
            let bytes = value.ok_or(CL_INVALID_ARG_VALUE)?;
            if size == 0 || size > MAX_ARG_BYTES as usize {
                return Err(CL_INVALID_ARG_SIZE);
            }
            return Ok(KernelArg::Bytes(bytes.to_vec()));
        }
    }
    let Some(bytes) = value else {
        return match u32::try_from(size) {
            Ok(n) if n > 0 => Ok(KernelArg::Local(n)),
            _ => Err(CL_INVALID_ARG_SIZE),
        };
    };
    if size == 0 {
        return Err(CL_INVALID_ARG_SIZE);
    }
    if let Ok(p) = word(bytes) {
        if p == 0 {
            return Ok(KernelArg::Mem(0));
        }
        match find(p) {
            Some(ArgObject::Buffer(h) | ArgObject::Image(h)) => return Ok(KernelArg::Mem(h)),
            Some(ArgObject::Sampler(h)) => return Ok(KernelArg::Sampler(h)),
            None => {}
        }
    }
    if size > MAX_ARG_BYTES as usize {
        return Err(CL_INVALID_ARG_SIZE);
    }
    Ok(KernelArg::Bytes(bytes.to_vec()))
}

fn new_kernel(program: Handle, p: &Arc<Program>, name: &[u8]) -> Result<Handle, i32> {
    let pref = ParentRef::new::<Program>(program)?;
    // The build lock keeps clBuildProgram out until the kernel counts.
    let mut b = p.build();
    let host = b.executable()?;
    let r = conn::with(|c| {
        c.call(
            Opcode::ClCreateKernel,
            &[host, name.len() as u64],
            name,
            &mut [],
        )
    })?;
    let (kernel, nargs) = (r.vals[0], r.vals[1]);
    if nargs > u64::from(MAX_KERNEL_ARGS) {
        conn::release_later(Opcode::ClReleaseKernel, kernel);
        return Err(CL_OUT_OF_RESOURCES);
    }
    p.kernels.fetch_add(1, Ordering::AcqRel);
    let spaces = arg_spaces(&mut b, kernel, nargs as u32);
    drop(b);
    Ok(registry::create(Arc::new(Kernel {
        context: p.context.handle() as usize,
        program: pref,
        prog: p.clone(),
        host: kernel,
        name: name.to_vec(),
        nargs: nargs as u32,
        spaces,
        args: Mutex::new(vec![None; nargs as usize]),
    })))
}

/// What host kernel `kernel`'s arguments take, if the host answers for
/// the build `b` (asked once per build, then per argument: the address
/// qualifier and the type name).
fn arg_spaces(b: &mut Build, kernel: u64, nargs: u32) -> Vec<ArgSpace> {
    let unknown = vec![ArgSpace::Unknown; nargs as usize];
    if nargs == 0 || b.arg_info == Some(false) {
        return unknown;
    }
    let asked = conn::with(|c| {
        (0..nargs)
            .map(|i| {
                let mut q = [0u8; 4];
                let at = u64::from(i);
                let param = CL_KERNEL_ARG_ADDRESS_QUALIFIER;
                c.call(Opcode::ClKernelArgInfo, &[kernel, at, param], &[], &mut q)?;
                let mut name = [0u8; 256];
                let param = CL_KERNEL_ARG_TYPE_NAME;
                let r = c.call(
                    Opcode::ClKernelArgInfo,
                    &[kernel, at, param],
                    &[],
                    &mut name,
                )?;
                let name = &name[..(r.data_len as usize).min(name.len())];
                let name = String::from_utf8_lossy(host_str(name));
                Ok(ArgSpace::of(u32::from_ne_bytes(q), &name))
            })
            .collect::<Result<Vec<_>, i32>>()
    });
    b.arg_info = Some(asked.is_ok());
    asked.unwrap_or(unknown)
}

pub(crate) extern "C" fn clCreateKernel(
    program: Handle,
    name: *const c_char,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateKernel", errcode_ret, || {
        let p = registry::get::<Program>(program)?;
        // SAFETY: kernel_name is null or a NUL-terminated string.
        let name = unsafe { raw::cstr(name) }.ok_or(CL_INVALID_VALUE)?;
        p.build().executable()?;
        new_kernel(program, &p, name)
    })
}

pub(crate) extern "C" fn clCreateKernelsInProgram(
    program: Handle,
    num_kernels: u32,
    kernels: *mut Handle,
    num_ret: *mut u32,
) -> i32 {
    guard("clCreateKernelsInProgram", || {
        let p = registry::get::<Program>(program)?;
        let names = p.build().kernel_names()?;
        let names = split_names(&names);
        if !kernels.is_null() && (num_kernels as usize) < names.len() {
            return Err(CL_INVALID_VALUE);
        }
        if !kernels.is_null() {
            let mut made = Vec::with_capacity(names.len());
            for n in &names {
                match new_kernel(program, &p, n) {
                    Ok(k) => made.push(k),
                    Err(e) => {
                        for k in made {
                            let _ = registry::release::<Kernel>(k);
                        }
                        return Err(e);
                    }
                }
            }
            for (i, k) in made.into_iter().enumerate() {
                // SAFETY: kernels holds num_kernels >= names.len() slots.
                unsafe { raw::set(kernels.wrapping_add(i), k) };
            }
        }
        // SAFETY: num_kernels_ret is null or writable.
        unsafe { raw::set(num_ret, names.len() as u32) };
        Ok(())
    })
}

pub(crate) extern "C" fn clRetainKernel(kernel: Handle) -> i32 {
    guard("clRetainKernel", || registry::retain::<Kernel>(kernel))
}

pub(crate) extern "C" fn clReleaseKernel(kernel: Handle) -> i32 {
    guard("clReleaseKernel", || registry::release::<Kernel>(kernel))
}

pub(crate) extern "C" fn clSetKernelArg(
    kernel: Handle,
    index: u32,
    size: usize,
    value: *const c_void,
) -> i32 {
    guard("clSetKernelArg", || {
        let k = registry::get::<Kernel>(kernel)?;
        if index >= k.nargs {
            return Err(CL_INVALID_ARG_INDEX);
        }
        let bytes = if value.is_null() {
            None
        } else {
            // SAFETY: a non-null arg_value holds arg_size bytes.
            Some(unsafe { raw::bytes(value, size) }.ok_or(CL_INVALID_ARG_VALUE)?)
        };
        let space = k.spaces[index as usize];
        let arg = arg_kind(space, size, bytes, |p| {
            if let Some(m) = registry::find::<Mem>(p) {
                return Some(if m.image.is_some() {
                    ArgObject::Image(m.host)
                } else {
                    ArgObject::Buffer(m.host)
                });
            }
            registry::find::<Sampler>(p).map(|s| ArgObject::Sampler(s.host))
        })?;
        k.args()[index as usize] = Some(arg);
        Ok(())
    })
}

pub(crate) extern "C" fn clGetKernelInfo(
    kernel: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetKernelInfo", || {
        let k = registry::get::<Kernel>(kernel)?;
        let v = match param {
            CL_KERNEL_FUNCTION_NAME => {
                let mut n = k.name.clone();
                n.push(0);
                n
            }
            CL_KERNEL_NUM_ARGS => k.nargs.to_ne_bytes().to_vec(),
            CL_KERNEL_REFERENCE_COUNT => registry::refs::<Kernel>(kernel)?.to_ne_bytes().to_vec(),
            CL_KERNEL_CONTEXT => k.context.to_ne_bytes().to_vec(),
            CL_KERNEL_PROGRAM => (k.program.handle() as usize).to_ne_bytes().to_vec(),
            CL_KERNEL_ATTRIBUTES => cstring(""),
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetKernelInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

pub(crate) extern "C" fn clGetKernelWorkGroupInfo(
    kernel: Handle,
    dev: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetKernelWorkGroupInfo", || {
        let k = registry::get::<Kernel>(kernel)?;
        if !dev.is_null() {
            check_device(dev)?;
        }
        let v = host_info(Opcode::ClKernelWorkGroupInfo, &[k.host, u64::from(param)])?;
        // SAFETY: the clGetKernelWorkGroupInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

pub(crate) extern "C" fn clGetKernelArgInfo(
    kernel: Handle,
    index: u32,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetKernelArgInfo", || {
        let k = registry::get::<Kernel>(kernel)?;
        if index >= k.nargs {
            return Err(CL_INVALID_ARG_INDEX);
        }
        let v = host_info(
            Opcode::ClKernelArgInfo,
            &[k.host, u64::from(index), u64::from(param)],
        )?;
        // SAFETY: the clGetKernelArgInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

/// The geometry of a launch, checked as OpenCL 1.2 does.
pub fn geometry(
    dims: u32,
    offset: Option<&[usize]>,
    global: Option<&[usize]>,
    local: Option<&[usize]>,
) -> Result<NdRangeHeader, i32> {
    if !(1..=3).contains(&dims) {
        return Err(CL_INVALID_WORK_DIMENSION);
    }
    let d = dims as usize;
    let global = global.ok_or(CL_INVALID_GLOBAL_WORK_SIZE)?;
    let mut h = NdRangeHeader {
        dims,
        has_local: u32::from(local.is_some()),
        offset: [0; 3],
        global: [1; 3],
        local: [1; 3],
        nargs: 0,
        reserved: 0,
    };
    for i in 0..d {
        if global[i] == 0 {
            return Err(CL_INVALID_GLOBAL_WORK_SIZE);
        }
        h.global[i] = global[i] as u64;
        if let Some(o) = offset {
            if o[i].checked_add(global[i]).is_none() {
                return Err(CL_INVALID_GLOBAL_OFFSET);
            }
            h.offset[i] = o[i] as u64;
        }
        if let Some(l) = local {
            if l[i] == 0 || global[i] % l[i] != 0 {
                return Err(CL_INVALID_WORK_GROUP_SIZE);
            }
            h.local[i] = l[i] as u64;
        }
    }
    Ok(h)
}

/// Checks a work-group against the device's limits: at most `max_group`
/// work-items (CL_INVALID_WORK_GROUP_SIZE), at most `max_items[i]` in
/// dimension `i` (CL_INVALID_WORK_ITEM_SIZE). Limits the host did not give
/// are not checked; the kernel's own limit is the host's to check.
pub fn check_work_group(
    h: &NdRangeHeader,
    max_group: Option<u64>,
    max_items: &[u64],
) -> Result<(), i32> {
    if h.has_local == 0 {
        return Ok(());
    }
    let d = h.dims as usize;
    let items = h.local[..d].iter().try_fold(1u64, |a, &l| a.checked_mul(l));
    if max_group.is_some_and(|m| items.is_none_or(|n| n > m)) {
        return Err(CL_INVALID_WORK_GROUP_SIZE);
    }
    if h.local[..d].iter().zip(max_items).any(|(&l, &m)| l > m) {
        return Err(CL_INVALID_WORK_ITEM_SIZE);
    }
    Ok(())
}

/// The device's work-group limits, as the host reports them.
fn device_work_group_limits() -> (Option<u64>, Vec<u64>) {
    let words = |v: Vec<u8>| -> Vec<u64> {
        v.chunks_exact(size_of::<usize>())
            .map(|c| usize::from_ne_bytes(c.try_into().expect("a size_t")) as u64)
            .collect()
    };
    let group = host_device_info(CL_DEVICE_MAX_WORK_GROUP_SIZE)
        .ok()
        .and_then(|v| words(v).first().copied());
    let items = host_device_info(CL_DEVICE_MAX_WORK_ITEM_SIZES)
        .map(words)
        .unwrap_or_default();
    (group, items)
}

/// The `ClNdRange` payload: the header, then every argument (all set,
/// else CL_INVALID_KERNEL_ARGS).
pub fn launch_payload(mut h: NdRangeHeader, args: &[Option<KernelArg>]) -> Result<Vec<u8>, i32> {
    h.nargs = args.len() as u32;
    let mut out = h.to_bytes().to_vec();
    for a in args {
        encode_arg(&mut out, a.as_ref().ok_or(CL_INVALID_KERNEL_ARGS)?);
    }
    Ok(out)
}

fn launch(
    queue: Handle,
    kernel: Handle,
    dims: u32,
    offset: *const usize,
    global: *const usize,
    local: *const usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
    command: u32,
) -> Result<(), i32> {
    let e = Enqueue::new(queue, num_events, wait_list, event)?;
    let k = registry::get::<Kernel>(kernel)?;
    if k.context != e.context() {
        return Err(CL_INVALID_CONTEXT);
    }
    let d = if (1..=3).contains(&dims) {
        dims as usize
    } else {
        0
    };
    // SAFETY: each non-null array holds work_dim sizes.
    let offset = unsafe { raw::slice(offset, d) };
    // SAFETY: as above.
    let global = unsafe { raw::slice(global, d) };
    // SAFETY: as above.
    let local = unsafe { raw::slice(local, d) };
    let h = geometry(dims, offset, global, local)?;
    if h.has_local != 0 {
        let (group, items) = device_work_group_limits();
        check_work_group(&h, group, &items)?;
    }
    let payload = launch_payload(h, &k.args())?;
    conn::with(|c| {
        e.send_waits(c)?;
        c.fire(
            Opcode::ClNdRange,
            &[e.queue.host, k.host, 0, 0, e.event],
            &payload,
        )
    })?;
    e.publish(command, false)
}

pub(crate) extern "C" fn clEnqueueNDRangeKernel(
    queue: Handle,
    kernel: Handle,
    work_dim: u32,
    offset: *const usize,
    global: *const usize,
    local: *const usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueNDRangeKernel", || {
        launch(
            queue,
            kernel,
            work_dim,
            offset,
            global,
            local,
            num_events,
            wait_list,
            event,
            CL_COMMAND_NDRANGE_KERNEL,
        )
    })
}

pub(crate) extern "C" fn clEnqueueTask(
    queue: Handle,
    kernel: Handle,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueTask", || {
        let one = 1usize;
        launch(
            queue,
            kernel,
            1,
            std::ptr::null(),
            &one,
            &one,
            num_events,
            wait_list,
            event,
            CL_COMMAND_TASK,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fairgpu_protocol::opencl::decode_args;

    const LIVE: usize = 0x5000_1000;
    const IMAGE: usize = 0x5000_2000;
    const SAMPLER: usize = 0x5000_3000;

    fn find(p: usize) -> Option<ArgObject> {
        match p {
            LIVE => Some(ArgObject::Buffer(77)),
            IMAGE => Some(ArgObject::Image(78)),
            SAMPLER => Some(ArgObject::Sampler(79)),
            _ => None,
        }
    }

    fn kind(size: usize, value: Option<&[u8]>) -> Result<KernelArg, i32> {
        kind_in(ArgSpace::Unknown, size, value)
    }

    fn kind_in(space: ArgSpace, size: usize, value: Option<&[u8]>) -> Result<KernelArg, i32> {
        arg_kind(space, size, value, find)
    }

    #[test]
    fn known_address_spaces_check_the_call() {
        use ArgSpace::*;
        let live = LIVE.to_ne_bytes();
        let other = (LIVE + 8).to_ne_bytes();
        let zero = 0usize.to_ne_bytes();
        assert_eq!(kind_in(Buffer, 8, Some(&live)), Ok(KernelArg::Mem(77)));
        assert_eq!(kind_in(Buffer, 8, Some(&zero)), Ok(KernelArg::Mem(0)));
        assert_eq!(kind_in(Buffer, 8, None), Ok(KernelArg::Mem(0)));
        assert_eq!(kind_in(Buffer, 8, Some(&other)), Err(CL_INVALID_MEM_OBJECT));
        assert_eq!(
            kind_in(Buffer, 3, Some(&live[..3])),
            Err(CL_INVALID_ARG_SIZE)
        );
        assert_eq!(kind_in(Local, 64, None), Ok(KernelArg::Local(64)));
        assert_eq!(
            kind_in(Local, 4, Some(&[1, 2, 3, 4])),
            Err(CL_INVALID_ARG_VALUE)
        );
        assert_eq!(kind_in(Local, 0, None), Err(CL_INVALID_ARG_SIZE));
        // An 8-byte value that looks like a buffer, or is zero, stays a value.
        assert_eq!(
            kind_in(Value, 8, Some(&live)),
            Ok(KernelArg::Bytes(live.to_vec()))
        );
        assert_eq!(
            kind_in(Value, 8, Some(&zero)),
            Ok(KernelArg::Bytes(zero.to_vec()))
        );
        assert_eq!(kind_in(Value, 4, None), Err(CL_INVALID_ARG_VALUE));
        assert_eq!(ArgSpace::from_qualifier(0x119D), Buffer);
        assert_eq!(ArgSpace::from_qualifier(0), Unknown);
    }

    #[test]
    fn images_and_samplers_are_checked_by_type() {
        use ArgSpace::*;
        let (img, smp, buf) = (
            IMAGE.to_ne_bytes(),
            SAMPLER.to_ne_bytes(),
            LIVE.to_ne_bytes(),
        );
        assert_eq!(kind_in(Image, 8, Some(&img)), Ok(KernelArg::Mem(78)));
        assert_eq!(kind_in(Image, 8, Some(&buf)), Err(CL_INVALID_MEM_OBJECT));
        assert_eq!(kind_in(Image, 8, None), Err(CL_INVALID_ARG_VALUE));
        assert_eq!(kind_in(Image, 4, Some(&img[..4])), Err(CL_INVALID_ARG_SIZE));
        assert_eq!(kind_in(Buffer, 8, Some(&img)), Err(CL_INVALID_MEM_OBJECT));
        assert_eq!(kind_in(Sampler, 8, Some(&smp)), Ok(KernelArg::Sampler(79)));
        assert_eq!(kind_in(Sampler, 8, Some(&img)), Err(CL_INVALID_SAMPLER));
        assert_eq!(kind_in(Sampler, 8, None), Err(CL_INVALID_ARG_VALUE));
        // Unknown spaces: by what the value names.
        assert_eq!(kind(8, Some(&img)), Ok(KernelArg::Mem(78)));
        assert_eq!(kind(8, Some(&smp)), Ok(KernelArg::Sampler(79)));
        // Types decide before address spaces.
        assert_eq!(ArgSpace::of(0x119B, "image2d_t"), Image);
        assert_eq!(ArgSpace::of(0x119E, "image3d_t"), Image);
        assert_eq!(ArgSpace::of(0x119E, "sampler_t"), Sampler);
        assert_eq!(ArgSpace::of(0x119E, "float4"), Value);
        assert_eq!(ArgSpace::of(0x119B, "imagedata*"), Buffer);
        assert_eq!(ArgSpace::of(0x119E, "image_params_t"), Value);
    }

    #[test]
    fn argument_kinds_are_decided_from_size_and_value() {
        assert_eq!(kind(256, None), Ok(KernelArg::Local(256)));
        assert_eq!(kind(0, None), Err(CL_INVALID_ARG_SIZE));
        assert_eq!(kind(LIVE, None), Ok(KernelArg::Local(LIVE as u32)));
        let live = LIVE.to_ne_bytes();
        assert_eq!(kind(8, Some(&live)), Ok(KernelArg::Mem(77)));
        assert_eq!(kind(8, Some(&0usize.to_ne_bytes())), Ok(KernelArg::Mem(0)));
        let other = (LIVE + 8).to_ne_bytes();
        assert_eq!(kind(8, Some(&other)), Ok(KernelArg::Bytes(other.to_vec())));
        assert_eq!(
            kind(4, Some(&[1, 2, 3, 4])),
            Ok(KernelArg::Bytes(vec![1, 2, 3, 4]))
        );
        // A 4-byte zero is a value, not a NULL buffer.
        assert_eq!(kind(4, Some(&[0; 4])), Ok(KernelArg::Bytes(vec![0; 4])));
        let big = vec![0u8; MAX_ARG_BYTES as usize + 1];
        assert_eq!(kind(big.len(), Some(&big)), Err(CL_INVALID_ARG_SIZE));
        assert_eq!(kind(0, Some(&[])), Err(CL_INVALID_ARG_SIZE));
    }

    #[test]
    fn geometry_is_checked_like_opencl_1_2() {
        let g = geometry(2, None, Some(&[64, 32]), Some(&[8, 4])).unwrap();
        assert_eq!((g.dims, g.has_local), (2, 1));
        assert_eq!(g.global, [64, 32, 1]);
        assert_eq!(g.local, [8, 4, 1]);
        assert_eq!(g.offset, [0; 3]);
        let g = geometry(1, Some(&[5]), Some(&[10]), None).unwrap();
        assert_eq!(
            (g.has_local, g.offset, g.global),
            (0, [5, 0, 0], [10, 1, 1])
        );
        assert_eq!(
            geometry(0, None, Some(&[]), None),
            Err(CL_INVALID_WORK_DIMENSION)
        );
        assert_eq!(
            geometry(4, None, None, None),
            Err(CL_INVALID_WORK_DIMENSION)
        );
        assert_eq!(
            geometry(1, None, None, None),
            Err(CL_INVALID_GLOBAL_WORK_SIZE)
        );
        assert_eq!(
            geometry(1, None, Some(&[0]), None),
            Err(CL_INVALID_GLOBAL_WORK_SIZE)
        );
        assert_eq!(
            geometry(1, None, Some(&[10]), Some(&[3])),
            Err(CL_INVALID_WORK_GROUP_SIZE)
        );
        assert_eq!(
            geometry(1, None, Some(&[10]), Some(&[0])),
            Err(CL_INVALID_WORK_GROUP_SIZE)
        );
        assert_eq!(
            geometry(1, Some(&[usize::MAX]), Some(&[2]), None),
            Err(CL_INVALID_GLOBAL_OFFSET)
        );
    }

    #[test]
    fn work_groups_fit_the_device() {
        let h = geometry(2, None, Some(&[64, 64]), Some(&[16, 16])).unwrap();
        assert_eq!(check_work_group(&h, Some(256), &[256, 256, 64]), Ok(()));
        assert_eq!(
            check_work_group(&h, Some(128), &[256, 256, 64]),
            Err(CL_INVALID_WORK_GROUP_SIZE)
        );
        assert_eq!(
            check_work_group(&h, Some(1024), &[8, 256, 64]),
            Err(CL_INVALID_WORK_ITEM_SIZE)
        );
        assert_eq!(check_work_group(&h, None, &[]), Ok(()));
        let free = geometry(1, None, Some(&[1 << 20]), None).unwrap();
        assert_eq!(check_work_group(&free, Some(1), &[1]), Ok(()));
    }

    #[test]
    fn launches_carry_every_argument_or_fail() {
        let h = geometry(1, None, Some(&[16]), None).unwrap();
        let args = vec![
            Some(KernelArg::Mem(9)),
            Some(KernelArg::Bytes(vec![1, 2, 3])),
            Some(KernelArg::Local(64)),
        ];
        let p = launch_payload(h, &args).unwrap();
        let head: [u8; 88] = p[..88].try_into().unwrap();
        let back = NdRangeHeader::from_bytes(&head);
        assert_eq!(back.nargs, 3);
        assert_eq!(back.global, [16, 1, 1]);
        let decoded = decode_args(&p[88..], 3).unwrap();
        assert_eq!(decoded, args.into_iter().flatten().collect::<Vec<_>>());
        assert_eq!(
            launch_payload(h, &[Some(KernelArg::Mem(1)), None]),
            Err(CL_INVALID_KERNEL_ARGS)
        );
    }
}
