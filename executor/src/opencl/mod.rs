//! The host's OpenCL platform, for the OpenCL calls guests forward.
//!
//! One [`ClHost`] per worker process, opened on the first OpenCL request:
//! the first platform with a device (never fairgpu's own ICD, should the
//! host have it installed). Each guest channel gets one [`Context`]; its
//! queues, buffers, programs, kernels and events are owned values here
//! that release their OpenCL object when dropped, so a channel's reset
//! frees everything it made. The worker (`cl_ops`) validates every request
//! before it reaches these wrappers: handles, ranges against buffer sizes,
//! argument counts, wait lists.
//!
//! Every call that enqueues device work is blocking on the host only where
//! the guest's data must be copied (writes and reads); kernels, copies and
//! fills are queued and ordered by the in-order queue.

pub mod api;

use std::ffi::{c_void, CString};
use std::sync::OnceLock;

use api::{Api, ClInt, ClUint, InfoFn, Obj, CL_SUCCESS};

/// An OpenCL error code (negative).
pub type ClError = i32;

/// How long [`Event::profiling_settled`] waits for a platform to mark a
/// finished command complete.
const SETTLE: std::time::Duration = std::time::Duration::from_secs(1);

/// CL_OUT_OF_HOST_MEMORY, for a value the host cannot hold.
const CL_OUT_OF_HOST_MEMORY: ClInt = -6;
/// CL_INVALID_VALUE.
const CL_INVALID_VALUE: ClInt = -30;

static API: OnceLock<Result<Api, api::LoadError>> = OnceLock::new();

fn api() -> Result<&'static Api, String> {
    API.get_or_init(Api::load).as_ref().map_err(|e| e.0.clone())
}

fn check(r: ClInt) -> Result<(), ClError> {
    if r == CL_SUCCESS {
        Ok(())
    } else {
        Err(r)
    }
}

/// Reads an info value with the size-then-value protocol, at most `max`
/// bytes (larger values are an error: the caller bounds what it returns).
fn info(
    max: usize,
    mut f: impl FnMut(usize, *mut c_void, *mut usize) -> ClInt,
) -> Result<Vec<u8>, ClError> {
    let mut size = 0usize;
    check(f(0, std::ptr::null_mut(), &mut size))?;
    if size > max {
        return Err(CL_OUT_OF_HOST_MEMORY);
    }
    let mut v = vec![0u8; size];
    check(f(size, v.as_mut_ptr().cast(), std::ptr::null_mut()))?;
    Ok(v)
}

macro_rules! owned {
    ($(#[$m:meta])* $name:ident, $release:ident) => {
        $(#[$m])*
        pub struct $name {
            api: &'static Api,
            raw: Obj,
        }

        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: `raw` is a live object this value holds the one
                // reference of (created by the matching create call).
                unsafe { (self.api.$release)(self.raw) };
            }
        }

        // SAFETY: OpenCL objects may be used and released from any
        // thread (OpenCL 1.2, appendix A.2); the worker uses each from one
        // thread at a time.
        unsafe impl Send for $name {}

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, concat!(stringify!($name), "({:p})"), self.raw)
            }
        }
    };
}

owned!(
    /// A context on the host device.
    Context,
    release_context
);
owned!(
    /// An in-order command queue.
    Queue,
    release_command_queue
);
owned!(
    /// A buffer.
    Mem,
    release_mem_object
);
owned!(
    /// A program.
    Program,
    release_program
);
owned!(
    /// A kernel.
    Kernel,
    release_kernel
);
owned!(
    /// An event of an enqueued command.
    Event,
    release_event
);
owned!(
    /// A sampler.
    Sampler,
    release_sampler
);

/// An image the host made: the memory object, its element size and bytes.
#[derive(Debug)]
pub struct Image {
    /// The memory object.
    pub mem: Mem,
    /// Bytes per pixel.
    pub elem: u64,
    /// Bytes the device holds for it.
    pub bytes: u64,
}

fn usizes(v: [u64; 3]) -> Result<[usize; 3], ClError> {
    let mut out = [0usize; 3];
    for (o, x) in out.iter_mut().zip(v) {
        *o = usize::try_from(x).map_err(|_| CL_INVALID_VALUE)?;
    }
    Ok(out)
}

/// The host platform and device.
pub struct ClHost {
    api: &'static Api,
    platform: Obj,
    device: Obj,
    /// The platform's name, for logs.
    pub platform_name: String,
}

// SAFETY: platform and device ids are immutable handles valid for the
// life of the process (the loader is never unloaded).
unsafe impl Send for ClHost {}

impl std::fmt::Debug for ClHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClHost")
            .field("platform", &self.platform_name)
            .finish_non_exhaustive()
    }
}

impl ClHost {
    /// Opens the first platform that has a device and is not fairgpu's own
    /// ICD; `want` (a substring of the platform name) picks another.
    pub fn open(want: Option<&str>) -> Result<ClHost, String> {
        let api = api()?;
        let mut n: ClUint = 0;
        // SAFETY: count query with a valid out-pointer.
        let r = unsafe { (api.get_platform_ids)(0, std::ptr::null_mut(), &mut n) };
        if r != CL_SUCCESS || n == 0 {
            return Err(format!(
                "no OpenCL platform on this host (clGetPlatformIDs: {r})"
            ));
        }
        let mut platforms = vec![std::ptr::null_mut(); n as usize];
        // SAFETY: the array holds `n` entries.
        check(unsafe { (api.get_platform_ids)(n, platforms.as_mut_ptr(), std::ptr::null_mut()) })
            .map_err(|e| format!("clGetPlatformIDs: {e}"))?;
        let mut seen = Vec::new();
        for p in platforms {
            let name = info(4096, |s, v, r| {
                // SAFETY: `p` is a platform id the loader returned; the
                // buffer holds `s` bytes.
                unsafe { (api.get_platform_info)(p, api::CL_PLATFORM_NAME, s, v, r) }
            })
            .map(|b| cstr(&b))
            .unwrap_or_default();
            seen.push(name.clone());
            if name.contains("fairgpu") || want.is_some_and(|w| !name.contains(w)) {
                continue;
            }
            let mut device: Obj = std::ptr::null_mut();
            // SAFETY: asks for one device id into a valid out-pointer.
            let r = unsafe {
                (api.get_device_ids)(
                    p,
                    api::CL_DEVICE_TYPE_ALL,
                    1,
                    &mut device,
                    std::ptr::null_mut(),
                )
            };
            if r == CL_SUCCESS && !device.is_null() {
                return Ok(ClHost {
                    api,
                    platform: p,
                    device,
                    platform_name: name,
                });
            }
        }
        Err(format!(
            "no usable OpenCL platform with a device (found: {})",
            if seen.is_empty() {
                "none".into()
            } else {
                seen.join(", ")
            }
        ))
    }

    /// `clGetDeviceInfo(param)`: the value's bytes.
    pub fn device_info(&self, param: u32, max: usize) -> Result<Vec<u8>, ClError> {
        info(max, |s, v, r| {
            // SAFETY: a live device id; the buffer holds `s` bytes.
            unsafe { (self.api.get_device_info)(self.device, param, s, v, r) }
        })
    }

    /// `clGetPlatformInfo(param)`: the value's bytes.
    pub fn platform_info(&self, param: u32, max: usize) -> Result<Vec<u8>, ClError> {
        info(max, |s, v, r| {
            // SAFETY: a live platform id; the buffer holds `s` bytes.
            unsafe { (self.api.get_platform_info)(self.platform, param, s, v, r) }
        })
    }

    /// A new context on the device.
    pub fn context(&self) -> Result<Context, ClError> {
        let mut e = 0;
        // SAFETY: one valid device id, no properties, no callback.
        let raw = unsafe {
            (self.api.create_context)(
                std::ptr::null(),
                1,
                &self.device,
                std::ptr::null(),
                std::ptr::null_mut(),
                &mut e,
            )
        };
        self.made(raw, e).map(|raw| Context { api: self.api, raw })
    }

    fn made(&self, raw: Obj, e: ClInt) -> Result<Obj, ClError> {
        if raw.is_null() {
            Err(if e == CL_SUCCESS {
                CL_OUT_OF_HOST_MEMORY
            } else {
                e
            })
        } else {
            Ok(raw)
        }
    }

    /// A queue in `ctx` with `properties` (only profiling is asked for).
    pub fn queue(&self, ctx: &Context, properties: u64) -> Result<Queue, ClError> {
        let mut e = 0;
        // SAFETY: live context and device.
        let raw =
            unsafe { (self.api.create_command_queue)(ctx.raw, self.device, properties, &mut e) };
        self.made(raw, e).map(|raw| Queue { api: self.api, raw })
    }

    /// A buffer of `size` bytes (`flags`: the access bits only).
    pub fn buffer(&self, ctx: &Context, flags: u64, size: u64) -> Result<Mem, ClError> {
        let size = usize::try_from(size).map_err(|_| CL_INVALID_VALUE)?;
        let mut e = 0;
        // SAFETY: live context; no host pointer.
        let raw =
            unsafe { (self.api.create_buffer)(ctx.raw, flags, size, std::ptr::null_mut(), &mut e) };
        self.made(raw, e).map(|raw| Mem { api: self.api, raw })
    }

    /// A sub-buffer of `parent` covering `origin..origin+size`.
    pub fn sub_buffer(
        &self,
        parent: &Mem,
        flags: u64,
        origin: u64,
        size: u64,
    ) -> Result<Mem, ClError> {
        let region = [
            usize::try_from(origin).map_err(|_| CL_INVALID_VALUE)?,
            usize::try_from(size).map_err(|_| CL_INVALID_VALUE)?,
        ];
        let mut e = 0;
        // SAFETY: live parent; `region` is a cl_buffer_region (origin, size).
        let raw = unsafe {
            (self.api.create_sub_buffer)(
                parent.raw,
                flags,
                api::CL_BUFFER_CREATE_TYPE_REGION,
                region.as_ptr().cast(),
                &mut e,
            )
        };
        self.made(raw, e).map(|raw| Mem { api: self.api, raw })
    }

    /// An image of `format` (order, channel type) and `desc` (type,
    /// width, height, depth, array size), without host data.
    pub fn image(
        &self,
        ctx: &Context,
        flags: u64,
        format: (u32, u32),
        desc: (u32, [u64; 4]),
    ) -> Result<Image, ClError> {
        let fmt = api::ImageFormat {
            order: format.0,
            channel_type: format.1,
        };
        let [w, h, d, a] = desc.1;
        let conv = |x: u64| usize::try_from(x).map_err(|_| CL_INVALID_VALUE);
        let dc = api::ImageDescC {
            image_type: desc.0,
            width: conv(w)?,
            height: conv(h)?,
            depth: conv(d)?,
            array_size: conv(a)?,
            row_pitch: 0,
            slice_pitch: 0,
            num_mip_levels: 0,
            num_samples: 0,
            buffer: std::ptr::null_mut(),
        };
        let mut e = 0;
        // SAFETY: live context; format and description are valid structs
        // for the call's duration; no host pointer.
        let raw = unsafe {
            (self.api.create_image)(ctx.raw, flags, &fmt, &dc, std::ptr::null_mut(), &mut e)
        };
        let mem = Mem {
            api: self.api,
            raw: self.made(raw, e)?,
        };
        let word = |f: InfoFn, param: u32| -> Result<u64, ClError> {
            let mut v: usize = 0;
            // SAFETY: a size_t value of a live memory object.
            check(unsafe {
                f(
                    mem.raw,
                    param,
                    size_of::<usize>(),
                    (&mut v as *mut usize).cast(),
                    std::ptr::null_mut(),
                )
            })?;
            Ok(v as u64)
        };
        let elem = word(self.api.get_image_info, api::CL_IMAGE_ELEMENT_SIZE)?;
        let bytes = word(self.api.get_mem_object_info, api::CL_MEM_SIZE)?;
        Ok(Image { mem, elem, bytes })
    }

    /// The image formats the device supports for `flags` and `image_type`,
    /// at most `max`.
    pub fn image_formats(
        &self,
        ctx: &Context,
        flags: u64,
        image_type: u32,
        max: usize,
    ) -> Result<Vec<(u32, u32)>, ClError> {
        let mut n: ClUint = 0;
        // SAFETY: a count query into a valid out-pointer.
        check(unsafe {
            (self.api.get_supported_image_formats)(
                ctx.raw,
                flags,
                image_type,
                0,
                std::ptr::null_mut(),
                &mut n,
            )
        })?;
        let n = (n as usize).min(max);
        let mut v = vec![api::ImageFormat::default(); n];
        if n > 0 {
            // SAFETY: the array holds `n` entries.
            check(unsafe {
                (self.api.get_supported_image_formats)(
                    ctx.raw,
                    flags,
                    image_type,
                    n as ClUint,
                    v.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            })?;
        }
        Ok(v.into_iter().map(|f| (f.order, f.channel_type)).collect())
    }

    /// A sampler.
    pub fn sampler(
        &self,
        ctx: &Context,
        normalized: bool,
        addressing: u32,
        filter: u32,
    ) -> Result<Sampler, ClError> {
        let mut e = 0;
        // SAFETY: live context; plain enum values (the platform checks them).
        let raw = unsafe {
            (self.api.create_sampler)(ctx.raw, u32::from(normalized), addressing, filter, &mut e)
        };
        self.made(raw, e).map(|raw| Sampler { api: self.api, raw })
    }

    /// A program from source text (not yet built).
    pub fn program_from_source(&self, ctx: &Context, src: &[u8]) -> Result<Program, ClError> {
        let ptr = src.as_ptr().cast();
        let len = src.len();
        let mut e = 0;
        // SAFETY: one string of `len` bytes (lengths given: no NUL needed).
        let raw = unsafe { (self.api.create_program_with_source)(ctx.raw, 1, &ptr, &len, &mut e) };
        self.made(raw, e).map(|raw| Program { api: self.api, raw })
    }

    /// A program from a binary this platform produced.
    pub fn program_from_binary(&self, ctx: &Context, bin: &[u8]) -> Result<Program, ClError> {
        let ptr = bin.as_ptr();
        let len = bin.len();
        let (mut status, mut e) = (0, 0);
        // SAFETY: one device, one binary of `len` bytes.
        let raw = unsafe {
            (self.api.create_program_with_binary)(
                ctx.raw,
                1,
                &self.device,
                &len,
                &ptr,
                &mut status,
                &mut e,
            )
        };
        let raw = self.made(raw, e)?;
        let p = Program { api: self.api, raw };
        check(status)?;
        Ok(p)
    }

    /// Builds `p` for the device; the build's status (a failed build keeps
    /// its log).
    pub fn build(&self, p: &Program, options: &str) -> ClInt {
        let Ok(opts) = CString::new(options) else {
            return -43; // CL_INVALID_BUILD_OPTIONS
        };
        // SAFETY: live program and device; NUL-terminated options; no
        // callback, so the call returns when the build is done.
        unsafe {
            (self.api.build_program)(
                p.raw,
                1,
                &self.device,
                opts.as_ptr(),
                std::ptr::null(),
                std::ptr::null_mut(),
            )
        }
    }

    /// The build log of `p`.
    pub fn build_log(&self, p: &Program, max: usize) -> Result<Vec<u8>, ClError> {
        info(max, |s, v, r| {
            // SAFETY: live program and device; buffer of `s` bytes.
            unsafe {
                (self.api.get_program_build_info)(
                    p.raw,
                    self.device,
                    api::CL_PROGRAM_BUILD_LOG,
                    s,
                    v,
                    r,
                )
            }
        })
    }

    /// `p`'s binary for the device.
    pub fn binary(&self, p: &Program, max: usize) -> Result<Vec<u8>, ClError> {
        let mut size = 0usize;
        // SAFETY: one device: BINARY_SIZES is one size_t.
        check(unsafe {
            (self.api.get_program_info)(
                p.raw,
                api::CL_PROGRAM_BINARY_SIZES,
                size_of::<usize>(),
                (&mut size as *mut usize).cast(),
                std::ptr::null_mut(),
            )
        })?;
        if size > max {
            return Err(CL_OUT_OF_HOST_MEMORY);
        }
        let mut bin = vec![0u8; size];
        let mut ptr = bin.as_mut_ptr();
        // SAFETY: BINARIES is an array of one pointer to `size` bytes.
        check(unsafe {
            (self.api.get_program_info)(
                p.raw,
                api::CL_PROGRAM_BINARIES,
                size_of::<*mut u8>(),
                (&mut ptr as *mut *mut u8).cast(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(bin)
    }

    /// `CL_PROGRAM_KERNEL_NAMES` of a built program.
    pub fn kernel_names(&self, p: &Program, max: usize) -> Result<Vec<u8>, ClError> {
        info(max, |s, v, r| {
            // SAFETY: live program; buffer of `s` bytes.
            unsafe { (self.api.get_program_info)(p.raw, api::CL_PROGRAM_KERNEL_NAMES, s, v, r) }
        })
    }

    /// Kernel `name` of a built program and its argument count.
    pub fn kernel(&self, p: &Program, name: &str) -> Result<(Kernel, u32), ClError> {
        let name = CString::new(name).map_err(|_| CL_INVALID_VALUE)?;
        let mut e = 0;
        // SAFETY: live program, NUL-terminated name.
        let raw = unsafe { (self.api.create_kernel)(p.raw, name.as_ptr(), &mut e) };
        let k = Kernel {
            api: self.api,
            raw: self.made(raw, e)?,
        };
        let mut n: ClUint = 0;
        // SAFETY: NUM_ARGS is a cl_uint.
        check(unsafe {
            (self.api.get_kernel_info)(
                k.raw,
                api::CL_KERNEL_NUM_ARGS,
                size_of::<ClUint>(),
                (&mut n as *mut ClUint).cast(),
                std::ptr::null_mut(),
            )
        })?;
        Ok((k, n))
    }

    /// `clGetKernelWorkGroupInfo(param)` for the device.
    pub fn work_group_info(&self, k: &Kernel, param: u32, max: usize) -> Result<Vec<u8>, ClError> {
        info(max, |s, v, r| {
            // SAFETY: live kernel and device; buffer of `s` bytes.
            unsafe { (self.api.get_kernel_work_group_info)(k.raw, self.device, param, s, v, r) }
        })
    }

    /// `clGetKernelArgInfo(index, param)`.
    pub fn arg_info(
        &self,
        k: &Kernel,
        index: u32,
        param: u32,
        max: usize,
    ) -> Result<Vec<u8>, ClError> {
        info(max, |s, v, r| {
            // SAFETY: live kernel; buffer of `s` bytes.
            unsafe { (self.api.get_kernel_arg_info)(k.raw, index, param, s, v, r) }
        })
    }
}

/// A kernel argument as the queue sets it.
#[derive(Debug)]
pub enum Arg<'a> {
    /// By value.
    Bytes(&'a [u8]),
    /// A buffer, or NULL.
    Mem(Option<&'a Mem>),
    /// `__local` bytes.
    Local(usize),
    /// A sampler.
    Sampler(&'a Sampler),
}

/// The geometry of one NDRange launch.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    /// Dimensions, 1..=3.
    pub dims: u32,
    /// Global offset.
    pub offset: [usize; 3],
    /// Global size.
    pub global: [usize; 3],
    /// Work-group size, or the device's choice.
    pub local: Option<[usize; 3]>,
}

fn raw_list(events: &[&Event]) -> Vec<Obj> {
    events.iter().map(|e| e.raw).collect()
}

impl Queue {
    fn list(waits: &[&Event]) -> (Vec<Obj>, ClUint) {
        let l = raw_list(waits);
        let n = l.len() as ClUint;
        (l, n)
    }

    /// Runs an enqueue call `f`, handing it the event out-pointer (null
    /// unless `want`), and returns the event it made.
    fn enqueue(
        &self,
        want: bool,
        f: impl FnOnce(*mut Obj) -> ClInt,
    ) -> Result<Option<Event>, ClError> {
        let mut ev: Obj = std::ptr::null_mut();
        check(f(if want { &mut ev } else { std::ptr::null_mut() }))?;
        Ok(want.then_some(Event {
            api: self.api,
            raw: ev,
        }))
    }

    /// [`Self::enqueue`] for a blocking command: its data is in place when
    /// `f` returns, but a platform may set the event's status from its own
    /// threads a moment later (PoCL does), and until then answers
    /// CL_PROFILING_INFO_NOT_AVAILABLE. The guest treats the command as
    /// complete from here on, so the event is waited for.
    fn enqueue_blocking(
        &self,
        want: bool,
        f: impl FnOnce(*mut Obj) -> ClInt,
    ) -> Result<Option<Event>, ClError> {
        let ev = self.enqueue(want, f)?;
        if let Some(e) = &ev {
            // The command itself succeeded; the event's status reports
            // anything else.
            let _ = Event::wait(&[e]);
        }
        Ok(ev)
    }

    fn list_ptr(l: &[Obj]) -> *const Obj {
        if l.is_empty() {
            std::ptr::null()
        } else {
            l.as_ptr()
        }
    }

    /// `clFinish`.
    pub fn finish(&self) -> Result<(), ClError> {
        // SAFETY: live queue.
        check(unsafe { (self.api.finish)(self.raw) })
    }

    /// `clFlush`.
    pub fn flush(&self) -> Result<(), ClError> {
        // SAFETY: live queue.
        check(unsafe { (self.api.flush)(self.raw) })
    }

    /// A blocking write of `data` at `offset` (the caller checked the range).
    pub fn write(
        &self,
        m: &Mem,
        offset: u64,
        data: &[u8],
        waits: &[&Event],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (l, n) = Self::list(waits);
        self.enqueue_blocking(want, |ev| {
            // SAFETY: live queue and buffer; `data` outlives the blocking call.
            unsafe {
                (self.api.enqueue_write_buffer)(
                    self.raw,
                    m.raw,
                    api::CL_TRUE,
                    offset as usize,
                    data.len(),
                    data.as_ptr().cast(),
                    n,
                    Self::list_ptr(&l),
                    ev,
                )
            }
        })
    }

    /// A blocking read into `out` from `offset`.
    pub fn read(
        &self,
        m: &Mem,
        offset: u64,
        out: &mut [u8],
        waits: &[&Event],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (l, n) = Self::list(waits);
        self.enqueue_blocking(want, |ev| {
            // SAFETY: live queue and buffer; `out` outlives the blocking call.
            unsafe {
                (self.api.enqueue_read_buffer)(
                    self.raw,
                    m.raw,
                    api::CL_TRUE,
                    offset as usize,
                    out.len(),
                    out.as_mut_ptr().cast(),
                    n,
                    Self::list_ptr(&l),
                    ev,
                )
            }
        })
    }

    /// `clEnqueueCopyBuffer`.
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        &self,
        src: &Mem,
        dst: &Mem,
        src_off: u64,
        dst_off: u64,
        size: u64,
        waits: &[&Event],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (l, n) = Self::list(waits);
        self.enqueue(want, |ev| {
            // SAFETY: live queue and buffers.
            unsafe {
                (self.api.enqueue_copy_buffer)(
                    self.raw,
                    src.raw,
                    dst.raw,
                    src_off as usize,
                    dst_off as usize,
                    size as usize,
                    n,
                    Self::list_ptr(&l),
                    ev,
                )
            }
        })
    }

    /// `clEnqueueFillBuffer` (the pattern is copied at enqueue time).
    pub fn fill(
        &self,
        m: &Mem,
        pattern: &[u8],
        offset: u64,
        size: u64,
        waits: &[&Event],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (l, n) = Self::list(waits);
        self.enqueue(want, |ev| {
            // SAFETY: live queue and buffer; OpenCL copies the pattern before
            // the call returns.
            unsafe {
                (self.api.enqueue_fill_buffer)(
                    self.raw,
                    m.raw,
                    pattern.as_ptr().cast(),
                    pattern.len(),
                    offset as usize,
                    size as usize,
                    n,
                    Self::list_ptr(&l),
                    ev,
                )
            }
        })
    }

    /// Sets `args` on `k` and enqueues it over `range`.
    pub fn nd_range(
        &self,
        k: &Kernel,
        args: &[Arg<'_>],
        range: &Range,
        waits: &[&Event],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        for (i, a) in args.iter().enumerate() {
            let i = i as ClUint;
            let r = match a {
                // SAFETY: `b` holds the value's bytes.
                Arg::Bytes(b) => unsafe {
                    (self.api.set_kernel_arg)(k.raw, i, b.len(), b.as_ptr().cast())
                },
                Arg::Mem(m) => {
                    let raw: Obj = m.map_or(std::ptr::null_mut(), |m| m.raw);
                    // SAFETY: a cl_mem value (or NULL) by address.
                    unsafe {
                        (self.api.set_kernel_arg)(
                            k.raw,
                            i,
                            size_of::<Obj>(),
                            (&raw as *const Obj).cast(),
                        )
                    }
                }
                // SAFETY: NULL value with a size: local memory.
                Arg::Local(n) => unsafe {
                    (self.api.set_kernel_arg)(k.raw, i, *n, std::ptr::null())
                },
                Arg::Sampler(smp) => {
                    let raw: Obj = smp.raw;
                    // SAFETY: a cl_sampler value by address.
                    unsafe {
                        (self.api.set_kernel_arg)(
                            k.raw,
                            i,
                            size_of::<Obj>(),
                            (&raw as *const Obj).cast(),
                        )
                    }
                }
            };
            check(r)?;
        }
        let (l, n) = Self::list(waits);
        let local = range
            .local
            .as_ref()
            .map_or(std::ptr::null(), |l| l.as_ptr());
        self.enqueue(want, |ev| {
            // SAFETY: live queue and kernel; the three arrays hold `dims`
            // (≤ 3) entries each.
            unsafe {
                (self.api.enqueue_nd_range_kernel)(
                    self.raw,
                    k.raw,
                    range.dims,
                    range.offset.as_ptr(),
                    range.global.as_ptr(),
                    local,
                    n,
                    Self::list_ptr(&l),
                    ev,
                )
            }
        })
    }

    /// A blocking write of the packed `data` into the box `origin`,
    /// `region` of `img` (the caller checked box and length).
    pub fn write_image(
        &self,
        img: &Mem,
        origin: [u64; 3],
        region: [u64; 3],
        data: &[u8],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (o, r) = (usizes(origin)?, usizes(region)?);
        self.enqueue_blocking(want, |ev| {
            // SAFETY: live queue and image; `data` holds the packed box and
            // outlives the blocking call.
            unsafe {
                (self.api.enqueue_write_image)(
                    self.raw,
                    img.raw,
                    api::CL_TRUE,
                    o.as_ptr(),
                    r.as_ptr(),
                    0,
                    0,
                    data.as_ptr().cast(),
                    0,
                    std::ptr::null(),
                    ev,
                )
            }
        })
    }

    /// A blocking read of the box into `out`, packed.
    pub fn read_image(
        &self,
        img: &Mem,
        origin: [u64; 3],
        region: [u64; 3],
        out: &mut [u8],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (o, r) = (usizes(origin)?, usizes(region)?);
        self.enqueue_blocking(want, |ev| {
            // SAFETY: live queue and image; `out` holds the packed box and
            // outlives the blocking call.
            unsafe {
                (self.api.enqueue_read_image)(
                    self.raw,
                    img.raw,
                    api::CL_TRUE,
                    o.as_ptr(),
                    r.as_ptr(),
                    0,
                    0,
                    out.as_mut_ptr().cast(),
                    0,
                    std::ptr::null(),
                    ev,
                )
            }
        })
    }

    /// `clEnqueueCopyImage`.
    pub fn copy_image(
        &self,
        src: &Mem,
        dst: &Mem,
        boxes: [[u64; 3]; 3],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (a, b, r) = (usizes(boxes[0])?, usizes(boxes[1])?, usizes(boxes[2])?);
        self.enqueue(want, |ev| {
            // SAFETY: live queue and images; three arrays of three.
            unsafe {
                (self.api.enqueue_copy_image)(
                    self.raw,
                    src.raw,
                    dst.raw,
                    a.as_ptr(),
                    b.as_ptr(),
                    r.as_ptr(),
                    0,
                    std::ptr::null(),
                    ev,
                )
            }
        })
    }

    /// `clEnqueueCopyImageToBuffer`.
    pub fn copy_image_to_buffer(
        &self,
        img: &Mem,
        buf: &Mem,
        boxes: [[u64; 3]; 2],
        offset: u64,
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (o, r) = (usizes(boxes[0])?, usizes(boxes[1])?);
        self.enqueue(want, |ev| {
            // SAFETY: live queue, image and buffer; arrays of three.
            unsafe {
                (self.api.enqueue_copy_image_to_buffer)(
                    self.raw,
                    img.raw,
                    buf.raw,
                    o.as_ptr(),
                    r.as_ptr(),
                    offset as usize,
                    0,
                    std::ptr::null(),
                    ev,
                )
            }
        })
    }

    /// `clEnqueueCopyBufferToImage`.
    pub fn copy_buffer_to_image(
        &self,
        buf: &Mem,
        img: &Mem,
        offset: u64,
        boxes: [[u64; 3]; 2],
        want: bool,
    ) -> Result<Option<Event>, ClError> {
        let (o, r) = (usizes(boxes[0])?, usizes(boxes[1])?);
        self.enqueue(want, |ev| {
            // SAFETY: live queue, buffer and image; arrays of three.
            unsafe {
                (self.api.enqueue_copy_buffer_to_image)(
                    self.raw,
                    buf.raw,
                    img.raw,
                    offset as usize,
                    o.as_ptr(),
                    r.as_ptr(),
                    0,
                    std::ptr::null(),
                    ev,
                )
            }
        })
    }

    /// A marker after everything queued before it.
    pub fn marker(&self) -> Result<Event, ClError> {
        let mut ev: Obj = std::ptr::null_mut();
        // SAFETY: live queue; no wait list.
        check(unsafe {
            (self.api.enqueue_marker_with_wait_list)(self.raw, 0, std::ptr::null(), &mut ev)
        })?;
        Ok(Event {
            api: self.api,
            raw: ev,
        })
    }

    /// A barrier that waits for `waits`.
    pub fn barrier(&self, waits: &[&Event]) -> Result<(), ClError> {
        let (l, n) = Self::list(waits);
        // SAFETY: live queue and events.
        check(unsafe {
            (self.api.enqueue_barrier_with_wait_list)(
                self.raw,
                n,
                Self::list_ptr(&l),
                std::ptr::null_mut(),
            )
        })
    }
}

impl Event {
    /// A second reference to the same event.
    pub fn retain(&self) -> Result<Event, ClError> {
        // SAFETY: a live event; the new value owns the added reference.
        check(unsafe { (self.api.retain_event)(self.raw) })?;
        Ok(Event {
            api: self.api,
            raw: self.raw,
        })
    }

    /// `CL_EVENT_COMMAND_EXECUTION_STATUS` (negative: the command failed).
    pub fn status(&self) -> Result<ClInt, ClError> {
        let mut s: ClInt = 0;
        // SAFETY: the value is a cl_int.
        check(unsafe {
            (self.api.get_event_info)(
                self.raw,
                api::CL_EVENT_COMMAND_EXECUTION_STATUS,
                size_of::<ClInt>(),
                (&mut s as *mut ClInt).cast(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(s)
    }

    /// Queued, submit, start and end times (ns).
    pub fn profiling(&self) -> Result<[u64; 4], ClError> {
        let mut t = [0u64; 4];
        for (i, v) in t.iter_mut().enumerate() {
            // SAFETY: each value is a cl_ulong.
            check(unsafe {
                (self.api.get_event_profiling_info)(
                    self.raw,
                    api::CL_PROFILING_COMMAND_QUEUED + i as ClUint,
                    size_of::<u64>(),
                    (v as *mut u64).cast(),
                    std::ptr::null_mut(),
                )
            })?;
        }
        Ok(t)
    }

    /// [`Self::profiling`] of a command the caller knows to be over (waited
    /// for). A platform may still be setting the event's status from its
    /// own threads after the wait returned (PoCL does, and answers
    /// CL_PROFILING_INFO_NOT_AVAILABLE until it has), so an event not yet
    /// CL_COMPLETE is polled for up to [`SETTLE`]; one that is complete and
    /// still has no times (a queue without profiling) answers at once.
    pub fn profiling_settled(&self) -> Result<[u64; 4], ClError> {
        let deadline = std::time::Instant::now() + SETTLE;
        loop {
            match self.profiling() {
                Err(api::CL_PROFILING_INFO_NOT_AVAILABLE)
                    if self.status()? > api::CL_COMPLETE
                        && std::time::Instant::now() < deadline =>
                {
                    let _ = Event::wait(&[self]);
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                r => return r,
            }
        }
    }

    /// `clWaitForEvents`.
    pub fn wait(events: &[&Event]) -> Result<(), ClError> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let l = raw_list(events);
        // SAFETY: `l` holds live events.
        check(unsafe { (first.api.wait_for_events)(l.len() as ClUint, l.as_ptr()) })
    }
}

/// The NUL-terminated string in `b`.
pub fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}
