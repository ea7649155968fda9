//! Memory objects, buffers and the commands that move their bytes (images
//! are memory objects too; their commands are in [`crate::image`]).
//!
//! A buffer is a host buffer. The host-pointer flags are the guest's
//! business: `CL_MEM_COPY_HOST_PTR` and `CL_MEM_USE_HOST_PTR` data is
//! written after the creation, on the host's own queue (queue handle 0);
//! a map is guest memory (the host pointer for `CL_MEM_USE_HOST_PTR`
//! buffers, else a fresh allocation) filled by a read and written back at
//! the unmap. Reads always complete before they return, blocking or not
//! (and so report earlier commands' failures, as synchronization points);
//! writes return once the data left the application's memory (copied into
//! the arena, or consumed by the host for a bulk transfer).
//!
//! A command's event rides on its request when it takes one request; a
//! command that takes several (a bulk transfer, a rectangle) is followed
//! by a `ClMarker` carrying it, since the requests of a bulk transfer share
//! their arguments.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use fairgpu_protocol::opencl::{encode_words, MAX_PATTERN};
use fairgpu_protocol::Opcode;

use crate::conn::{self, Conn};
use crate::context::Context;
use crate::event::Enqueue;
use crate::image::{self, ImageBox, ImageInfo, Pitch};
use crate::raw::{self, MapMemory};
use crate::rect::{self, Layout};
use crate::registry::{self, ParentRef};
use crate::types::*;
use crate::{guard, guard_obj, platform};

/// The device access flags.
pub const ACCESS: u64 = CL_MEM_READ_WRITE | CL_MEM_WRITE_ONLY | CL_MEM_READ_ONLY;
const HOST_ACCESS: u64 = CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS;
const HOST_PTR: u64 = CL_MEM_USE_HOST_PTR | CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR;

/// A memory object's state.
#[derive(Debug)]
pub struct Mem {
    /// Its context (counted).
    pub context: ParentRef,
    /// `CL_MEM_FLAGS` (for a sub-buffer, with what it inherited).
    pub flags: u64,
    /// Bytes (of an image: as the host allocated it).
    pub size: usize,
    /// The application's memory of a `CL_MEM_USE_HOST_PTR` buffer (0 else).
    pub host_ptr: usize,
    /// The host's buffer.
    pub host: u64,
    /// A sub-buffer's parent (counted).
    parent: Option<(ParentRef, Arc<Mem>)>,
    /// A sub-buffer's origin in its parent.
    pub offset: usize,
    /// An image's description (`None`: a buffer).
    pub image: Option<ImageInfo>,
    /// Its own handle, for destructor callbacks.
    handle: AtomicUsize,
    state: Mutex<MemState>,
}

type Destructor = (extern "C" fn(Handle, *mut c_void), usize);

#[derive(Debug, Default)]
struct MemState {
    maps: Vec<Mapping>,
    destructors: Vec<Destructor>,
}

/// One live map.
#[derive(Debug)]
pub struct Mapping {
    /// The address the application got.
    pub ptr: usize,
    /// A buffer map's offset in the buffer.
    pub offset: usize,
    /// Bytes from `ptr`.
    pub len: usize,
    /// Mapped for writing: the bytes go back at the unmap.
    pub write: bool,
    /// The memory, unless it is the application's own (host pointer).
    pub memory: Option<MapMemory>,
    /// An image map's box (origin, region) and its layout from `ptr`.
    pub image: Option<(ImageBox, Pitch)>,
}

impl Mem {
    fn state(&self) -> MutexGuard<'_, MemState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a live map.
    pub fn add_map(&self, m: Mapping) {
        self.state().maps.push(m);
    }

    /// The host buffer this buffer's bytes live in, and where.
    fn root(&self) -> (u64, usize) {
        match &self.parent {
            Some((_, p)) => (p.host, self.offset),
            None => (self.host, 0),
        }
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        conn::release_later(Opcode::ClReleaseMem, self.host);
        let h = self.handle.load(Ordering::Relaxed) as Handle;
        let destructors = std::mem::take(&mut self.state().destructors);
        for (f, ud) in destructors.into_iter().rev() {
            f(h, ud as *mut c_void);
        }
    }
}

/// Checks `clCreateBuffer` flags against the host pointer's presence.
pub fn check_flags(flags: u64, has_host_ptr: bool) -> Result<(), i32> {
    if flags & !(ACCESS | HOST_ACCESS | HOST_PTR) != 0
        || (flags & ACCESS).count_ones() > 1
        || (flags & HOST_ACCESS).count_ones() > 1
        || (flags & CL_MEM_USE_HOST_PTR != 0
            && flags & (CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR) != 0)
    {
        return Err(CL_INVALID_VALUE);
    }
    let needs = flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR) != 0;
    if needs != has_host_ptr {
        return Err(CL_INVALID_HOST_PTR);
    }
    Ok(())
}

/// A sub-buffer's flags from its parent's and the ones asked for: access
/// flags must not widen the parent's; what is not given is inherited.
pub fn sub_buffer_flags(parent: u64, flags: u64) -> Result<u64, i32> {
    if flags & !(ACCESS | HOST_ACCESS) != 0
        || (flags & ACCESS).count_ones() > 1
        || (flags & HOST_ACCESS).count_ones() > 1
    {
        return Err(CL_INVALID_VALUE);
    }
    let conflict = |p: u64, f: u64| parent & p != 0 && flags & f != 0;
    if conflict(CL_MEM_WRITE_ONLY, CL_MEM_READ_WRITE | CL_MEM_READ_ONLY)
        || conflict(CL_MEM_READ_ONLY, CL_MEM_READ_WRITE | CL_MEM_WRITE_ONLY)
        || conflict(CL_MEM_HOST_WRITE_ONLY, CL_MEM_HOST_READ_ONLY)
        || conflict(CL_MEM_HOST_READ_ONLY, CL_MEM_HOST_WRITE_ONLY)
        || conflict(
            CL_MEM_HOST_NO_ACCESS,
            CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_WRITE_ONLY,
        )
    {
        return Err(CL_INVALID_VALUE);
    }
    let mut f = flags | (parent & HOST_PTR);
    if f & ACCESS == 0 {
        f |= parent & ACCESS;
    }
    if f & HOST_ACCESS == 0 {
        f |= parent & HOST_ACCESS;
    }
    Ok(f)
}

/// Whether the host (the application) may read a memory object.
pub fn host_can_read(flags: u64) -> bool {
    flags & (CL_MEM_HOST_WRITE_ONLY | CL_MEM_HOST_NO_ACCESS) == 0
}

/// Whether the host (the application) may write a memory object.
pub fn host_can_write(flags: u64) -> bool {
    flags & (CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_NO_ACCESS) == 0
}

fn max_alloc() -> Option<u64> {
    let v = platform::host_device_info(CL_DEVICE_MAX_MEM_ALLOC_SIZE).ok()?;
    Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?))
}

/// Writes `data` to host buffer `buf` at `offset` on host queue `queue` (0:
/// the host's own), with the event of `e`.
fn write(
    c: &mut Conn,
    queue: u64,
    buf: u64,
    offset: usize,
    data: &[u8],
    e: Option<&Enqueue>,
) -> Result<(), i32> {
    let event = e.map_or(0, |e| e.event);
    if data.len() <= c.max_slice() {
        return c.fire(
            Opcode::ClWriteBuffer,
            &[queue, buf, offset as u64, 0, event],
            data,
        );
    }
    c.send(Opcode::ClWriteBuffer, &[queue, buf, offset as u64], 2, data)?;
    match e {
        Some(e) => e.marker(c),
        None => Ok(()),
    }
}

/// Reads `out.len()` bytes of host buffer `buf` from `offset`, on the queue
/// of `e` and with its event.
fn read(c: &mut Conn, e: &Enqueue, buf: u64, offset: usize, out: &mut [u8]) -> Result<(), i32> {
    let q = e.queue.host;
    if out.len() <= c.max_slice() {
        return c.exec(
            Opcode::ClReadBuffer,
            &[q, buf, offset as u64, 0, e.event],
            &[],
            out,
        );
    }
    c.recv(Opcode::ClReadBuffer, &[q, buf, offset as u64], 2, out)?;
    e.marker(c)
}

fn new_buffer(
    context: Handle,
    flags: u64,
    size: usize,
    host_ptr: *mut c_void,
) -> Result<Handle, i32> {
    let ctx = ParentRef::new::<Context>(context)?;
    check_flags(flags, !host_ptr.is_null())?;
    if size == 0 || max_alloc().is_some_and(|m| size as u64 > m) {
        return Err(CL_INVALID_BUFFER_SIZE);
    }
    let init = if flags & (CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR) != 0 {
        // SAFETY: host_ptr holds `size` bytes per clCreateBuffer's contract.
        Some(unsafe { raw::bytes(host_ptr, size) }.ok_or(CL_INVALID_HOST_PTR)?)
    } else {
        None
    };
    let access = match flags & ACCESS {
        0 => CL_MEM_READ_WRITE,
        a => a,
    };
    let host = conn::with(|c| {
        let h = c
            .call(Opcode::ClCreateBuffer, &[access, size as u64], &[], &mut [])?
            .vals[0];
        if let Some(data) = init {
            if let Err(e) = write(c, 0, h, 0, data, None) {
                let _ = c.fire(Opcode::ClReleaseMem, &[h], &[]);
                return Err(e);
            }
        }
        Ok(h)
    })?;
    let host_ptr = if flags & CL_MEM_USE_HOST_PTR != 0 {
        host_ptr as usize
    } else {
        0
    };
    Ok(register(Mem {
        context: ctx,
        flags,
        size,
        host_ptr,
        host,
        parent: None,
        offset: 0,
        image: None,
        handle: AtomicUsize::new(0),
        state: Mutex::new(MemState::default()),
    }))
}

/// Registers a new image: host image `host` of `size` bytes.
pub fn new_image(
    context: ParentRef,
    flags: u64,
    size: usize,
    host_ptr: usize,
    host: u64,
    info: ImageInfo,
) -> Handle {
    register(Mem {
        context,
        flags,
        size,
        host_ptr,
        host,
        parent: None,
        offset: 0,
        image: Some(info),
        handle: AtomicUsize::new(0),
        state: Mutex::new(MemState::default()),
    })
}

fn register(m: Mem) -> Handle {
    let m = Arc::new(m);
    let h = registry::create(m.clone());
    m.handle.store(h as usize, Ordering::Relaxed);
    h
}

pub(crate) extern "C" fn clCreateBuffer(
    context: Handle,
    flags: u64,
    size: usize,
    host_ptr: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateBuffer", errcode_ret, || {
        new_buffer(context, flags, size, host_ptr)
    })
}

pub(crate) extern "C" fn clCreateBufferWithProperties(
    context: Handle,
    properties: *const u64,
    flags: u64,
    size: usize,
    host_ptr: *mut c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateBufferWithProperties", errcode_ret, || {
        registry::get::<Context>(context)?;
        // No buffer property is supported: the list must be empty.
        // SAFETY: properties is null or a 0-terminated list.
        if !properties.is_null() && unsafe { raw::get(properties) } != 0 {
            return Err(CL_INVALID_PROPERTY);
        }
        new_buffer(context, flags, size, host_ptr)
    })
}

pub(crate) extern "C" fn clCreateSubBuffer(
    buffer: Handle,
    flags: u64,
    create_type: u32,
    info: *const c_void,
    errcode_ret: *mut i32,
) -> Handle {
    guard_obj("clCreateSubBuffer", errcode_ret, || {
        let parent = registry::get::<Mem>(buffer)?;
        if parent.parent.is_some() || parent.image.is_some() {
            return Err(CL_INVALID_MEM_OBJECT);
        }
        let flags = sub_buffer_flags(parent.flags, flags)?;
        if create_type != CL_BUFFER_CREATE_TYPE_REGION {
            return Err(CL_INVALID_VALUE);
        }
        // SAFETY: for CL_BUFFER_CREATE_TYPE_REGION, info points to a
        // cl_buffer_region {origin, size}.
        let region = unsafe { raw::slice(info.cast::<usize>(), 2) }.ok_or(CL_INVALID_VALUE)?;
        let (origin, size) = (region[0], region[1]);
        if size == 0 {
            return Err(CL_INVALID_BUFFER_SIZE);
        }
        if origin.checked_add(size).is_none_or(|end| end > parent.size) {
            return Err(CL_INVALID_VALUE);
        }
        let pref = ParentRef::new::<Mem>(buffer)?;
        let ctx = ParentRef::new::<Context>(parent.context.handle())?;
        let r = conn::with(|c| {
            c.call(
                Opcode::ClCreateSubBuffer,
                &[parent.host, flags & ACCESS, origin as u64, size as u64],
                &[],
                &mut [],
            )
        })?;
        let host_ptr = if flags & CL_MEM_USE_HOST_PTR != 0 {
            parent.host_ptr + origin
        } else {
            0
        };
        Ok(register(Mem {
            context: ctx,
            flags,
            size,
            host_ptr,
            host: r.vals[0],
            parent: Some((pref, parent)),
            offset: origin,
            image: None,
            handle: AtomicUsize::new(0),
            state: Mutex::new(MemState::default()),
        }))
    })
}

pub(crate) extern "C" fn clRetainMemObject(mem: Handle) -> i32 {
    guard("clRetainMemObject", || registry::retain::<Mem>(mem))
}

pub(crate) extern "C" fn clReleaseMemObject(mem: Handle) -> i32 {
    guard("clReleaseMemObject", || registry::release::<Mem>(mem))
}

pub(crate) extern "C" fn clSetMemObjectDestructorCallback(
    mem: Handle,
    notify: MemNotify,
    user_data: *mut c_void,
) -> i32 {
    guard("clSetMemObjectDestructorCallback", || {
        let m = registry::get::<Mem>(mem)?;
        let f = notify.ok_or(CL_INVALID_VALUE)?;
        m.state().destructors.push((f, user_data as usize));
        Ok(())
    })
}

pub(crate) extern "C" fn clGetMemObjectInfo(
    mem: Handle,
    param: u32,
    size: usize,
    value: *mut c_void,
    size_ret: *mut usize,
) -> i32 {
    guard("clGetMemObjectInfo", || {
        let m = registry::get::<Mem>(mem)?;
        let v = match param {
            CL_MEM_TYPE => m
                .image
                .map_or(CL_MEM_OBJECT_BUFFER, |i| i.desc.image_type)
                .to_ne_bytes()
                .to_vec(),
            CL_MEM_FLAGS => m.flags.to_ne_bytes().to_vec(),
            CL_MEM_SIZE => m.size.to_ne_bytes().to_vec(),
            CL_MEM_HOST_PTR => m.host_ptr.to_ne_bytes().to_vec(),
            CL_MEM_MAP_COUNT => (m.state().maps.len() as u32).to_ne_bytes().to_vec(),
            CL_MEM_REFERENCE_COUNT => registry::refs::<Mem>(mem)?.to_ne_bytes().to_vec(),
            CL_MEM_CONTEXT => (m.context.handle() as usize).to_ne_bytes().to_vec(),
            CL_MEM_ASSOCIATED_MEMOBJECT => m
                .parent
                .as_ref()
                .map_or(0, |(p, _)| p.handle() as usize)
                .to_ne_bytes()
                .to_vec(),
            CL_MEM_OFFSET => m.offset.to_ne_bytes().to_vec(),
            CL_MEM_USES_SVM_POINTER => CL_FALSE.to_ne_bytes().to_vec(),
            CL_MEM_PROPERTIES => Vec::new(),
            _ => return Err(CL_INVALID_VALUE),
        };
        // SAFETY: the clGetMemObjectInfo output contract.
        unsafe { raw::info(&v, size, value, size_ret) }
    })
}

/// Memory object `h` of the enqueue's context.
pub fn mem_of(e: &Enqueue, h: Handle) -> Result<Arc<Mem>, i32> {
    let m = registry::get::<Mem>(h)?;
    if m.context.handle() as usize != e.context() {
        return Err(CL_INVALID_CONTEXT);
    }
    Ok(m)
}

/// Buffer `h` of the enqueue's context (an image is CL_INVALID_MEM_OBJECT).
pub fn buffer_of(e: &Enqueue, h: Handle) -> Result<Arc<Mem>, i32> {
    let m = mem_of(e, h)?;
    if m.image.is_some() {
        return Err(CL_INVALID_MEM_OBJECT);
    }
    Ok(m)
}

/// CL_INVALID_VALUE unless `size > 0` bytes from `offset` lie in `m`.
fn check_range(m: &Mem, offset: usize, size: usize) -> Result<(), i32> {
    if size == 0 || offset.checked_add(size).is_none_or(|end| end > m.size) {
        return Err(CL_INVALID_VALUE);
    }
    Ok(())
}

pub(crate) extern "C" fn clEnqueueReadBuffer(
    queue: Handle,
    buffer: Handle,
    _blocking: u32,
    offset: usize,
    size: usize,
    ptr: *mut c_void,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueReadBuffer", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let m = buffer_of(&e, buffer)?;
        if !host_can_read(m.flags) {
            return Err(CL_INVALID_OPERATION);
        }
        check_range(&m, offset, size)?;
        // SAFETY: ptr holds `size` writable bytes, which the application
        // leaves alone until the read completes (before this returns).
        let out = unsafe { raw::bytes_mut(ptr, size) }.ok_or(CL_INVALID_VALUE)?;
        let earlier = conn::with(|c| {
            e.send_waits(c)?;
            read(c, &e, m.host, offset, out)?;
            // A read is a synchronization point, blocking or not: it
            // completes here.
            Ok(c.take_pending())
        })?;
        e.publish(CL_COMMAND_READ_BUFFER, true)?;
        earlier
    })
}

pub(crate) extern "C" fn clEnqueueWriteBuffer(
    queue: Handle,
    buffer: Handle,
    _blocking: u32,
    offset: usize,
    size: usize,
    ptr: *const c_void,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueWriteBuffer", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let m = buffer_of(&e, buffer)?;
        if !host_can_write(m.flags) {
            return Err(CL_INVALID_OPERATION);
        }
        check_range(&m, offset, size)?;
        // SAFETY: ptr holds `size` readable bytes; they are copied out
        // before this returns.
        let data = unsafe { raw::bytes(ptr, size) }.ok_or(CL_INVALID_VALUE)?;
        conn::with(|c| {
            e.send_waits(c)?;
            write(c, e.queue.host, m.host, offset, data, Some(&e))
        })?;
        e.publish(CL_COMMAND_WRITE_BUFFER, false)
    })
}

pub(crate) extern "C" fn clEnqueueCopyBuffer(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_offset: usize,
    dst_offset: usize,
    size: usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueCopyBuffer", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let s = buffer_of(&e, src)?;
        let d = buffer_of(&e, dst)?;
        check_range(&s, src_offset, size)?;
        check_range(&d, dst_offset, size)?;
        let ((sr, so), (dr, dof)) = (s.root(), d.root());
        if sr == dr {
            let (a, b) = (so + src_offset, dof + dst_offset);
            if a < b + size && b < a + size {
                return Err(CL_MEM_COPY_OVERLAP);
            }
        }
        let words = encode_words(&[src_offset as u64, dst_offset as u64, size as u64]);
        conn::with(|c| {
            e.send_waits(c)?;
            c.fire(
                Opcode::ClCopyBuffer,
                &[e.queue.host, s.host, d.host, 0, e.event],
                &words,
            )
        })?;
        e.publish(CL_COMMAND_COPY_BUFFER, false)
    })
}

/// Checks a fill: the pattern is 1 to 128 bytes, a power of two, and
/// offset and size are multiples of it.
pub fn check_fill(pattern_size: usize, offset: usize, size: usize) -> Result<(), i32> {
    if pattern_size == 0
        || pattern_size > MAX_PATTERN
        || !pattern_size.is_power_of_two()
        || !offset.is_multiple_of(pattern_size)
        || !size.is_multiple_of(pattern_size)
    {
        return Err(CL_INVALID_VALUE);
    }
    Ok(())
}

pub(crate) extern "C" fn clEnqueueFillBuffer(
    queue: Handle,
    buffer: Handle,
    pattern: *const c_void,
    pattern_size: usize,
    offset: usize,
    size: usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueFillBuffer", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let m = buffer_of(&e, buffer)?;
        check_fill(pattern_size, offset, size)?;
        check_range(&m, offset, size)?;
        // SAFETY: pattern holds pattern_size bytes.
        let pattern = unsafe { raw::bytes(pattern, pattern_size) }.ok_or(CL_INVALID_VALUE)?;
        conn::with(|c| {
            e.send_waits(c)?;
            c.fire(
                Opcode::ClFillBuffer,
                &[e.queue.host, m.host, offset as u64, size as u64, e.event],
                pattern,
            )
        })?;
        e.publish(CL_COMMAND_FILL_BUFFER, false)
    })
}

/// Reads three `size_t`s.
pub fn triple(p: *const usize) -> Result<[usize; 3], i32> {
    // SAFETY: origins and regions are size_t[3] per the API.
    let s = unsafe { raw::slice(p, 3) }.ok_or(CL_INVALID_VALUE)?;
    Ok([s[0], s[1], s[2]])
}

/// The buffer and host sides of a rectangular read or write, checked
/// against the buffer's size; returns them with the host side's extent.
fn rect_sides(
    m: &Mem,
    buffer_origin: *const usize,
    host_origin: *const usize,
    region: *const usize,
    pitches: [usize; 4],
) -> Result<([usize; 3], Layout, Layout, usize), i32> {
    let region = triple(region)?;
    let buf = Layout::new(triple(buffer_origin)?, region, pitches[0], pitches[1])?;
    let host = Layout::new(triple(host_origin)?, region, pitches[2], pitches[3])?;
    if buf.end(region).is_none_or(|end| end > m.size) {
        return Err(CL_INVALID_VALUE);
    }
    let host_end = host.end(region).ok_or(CL_INVALID_VALUE)?;
    Ok((region, buf, host, host_end))
}

pub(crate) extern "C" fn clEnqueueReadBufferRect(
    queue: Handle,
    buffer: Handle,
    _blocking: u32,
    buffer_origin: *const usize,
    host_origin: *const usize,
    region: *const usize,
    buffer_row_pitch: usize,
    buffer_slice_pitch: usize,
    host_row_pitch: usize,
    host_slice_pitch: usize,
    ptr: *mut c_void,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueReadBufferRect", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let m = buffer_of(&e, buffer)?;
        if !host_can_read(m.flags) {
            return Err(CL_INVALID_OPERATION);
        }
        let pitches = [
            buffer_row_pitch,
            buffer_slice_pitch,
            host_row_pitch,
            host_slice_pitch,
        ];
        let (region, buf, host, host_end) =
            rect_sides(&m, buffer_origin, host_origin, region, pitches)?;
        // SAFETY: ptr holds the host side of the rectangle (host_end bytes
        // from ptr), left alone until the read completes (before this returns).
        let out = unsafe { raw::bytes_mut(ptr, host_end) }.ok_or(CL_INVALID_VALUE)?;
        let runs = rect::runs(region, &buf, &host);
        let earlier = conn::with(|c| {
            e.send_waits(c)?;
            read_runs(c, &e, m.host, &runs, out)?;
            Ok(c.take_pending())
        })?;
        e.publish(CL_COMMAND_READ_BUFFER_RECT, true)?;
        earlier
    })
}

/// Reads the runs (`a`: buffer offset, `b`: offset in `out`). The bytes
/// from the first run's start to the last run's end come in one transfer
/// when that reads at most twice what the runs need (plus 1 MiB), else
/// every run is its own transfer.
fn read_runs(
    c: &mut Conn,
    e: &Enqueue,
    buf: u64,
    runs: &[rect::Run],
    out: &mut [u8],
) -> Result<(), i32> {
    if let [r] = runs {
        return read(c, e, buf, r.a, &mut out[r.b..r.b + r.len]);
    }
    let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
        return Ok(());
    };
    let need: usize = runs.iter().map(|r| r.len).sum();
    let span = last.a + last.len - first.a;
    let quiet = Enqueue::quiet(e);
    if span <= 2 * need + (1 << 20) {
        let mut tmp = vec![0u8; span];
        read(c, &quiet, buf, first.a, &mut tmp)?;
        for r in runs {
            let from = r.a - first.a;
            out[r.b..r.b + r.len].copy_from_slice(&tmp[from..from + r.len]);
        }
    } else {
        for r in runs {
            read(c, &quiet, buf, r.a, &mut out[r.b..r.b + r.len])?;
        }
    }
    e.marker(c)
}

pub(crate) extern "C" fn clEnqueueWriteBufferRect(
    queue: Handle,
    buffer: Handle,
    _blocking: u32,
    buffer_origin: *const usize,
    host_origin: *const usize,
    region: *const usize,
    buffer_row_pitch: usize,
    buffer_slice_pitch: usize,
    host_row_pitch: usize,
    host_slice_pitch: usize,
    ptr: *const c_void,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueWriteBufferRect", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let m = buffer_of(&e, buffer)?;
        if !host_can_write(m.flags) {
            return Err(CL_INVALID_OPERATION);
        }
        let pitches = [
            buffer_row_pitch,
            buffer_slice_pitch,
            host_row_pitch,
            host_slice_pitch,
        ];
        let (region, buf, host, host_end) =
            rect_sides(&m, buffer_origin, host_origin, region, pitches)?;
        // SAFETY: ptr holds the host side of the rectangle (host_end bytes
        // from ptr); they are copied out before this returns.
        let data = unsafe { raw::bytes(ptr, host_end) }.ok_or(CL_INVALID_VALUE)?;
        let runs = rect::runs(region, &buf, &host);
        conn::with(|c| {
            e.send_waits(c)?;
            if let [r] = runs.as_slice() {
                return write(
                    c,
                    e.queue.host,
                    m.host,
                    r.a,
                    &data[r.b..r.b + r.len],
                    Some(&e),
                );
            }
            for r in &runs {
                write(c, e.queue.host, m.host, r.a, &data[r.b..r.b + r.len], None)?;
            }
            e.marker(c)
        })?;
        e.publish(CL_COMMAND_WRITE_BUFFER_RECT, false)
    })
}

pub(crate) extern "C" fn clEnqueueCopyBufferRect(
    queue: Handle,
    src: Handle,
    dst: Handle,
    src_origin: *const usize,
    dst_origin: *const usize,
    region: *const usize,
    src_row_pitch: usize,
    src_slice_pitch: usize,
    dst_row_pitch: usize,
    dst_slice_pitch: usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueCopyBufferRect", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let s = buffer_of(&e, src)?;
        let d = buffer_of(&e, dst)?;
        let region = triple(region)?;
        let sl = Layout::new(triple(src_origin)?, region, src_row_pitch, src_slice_pitch)?;
        let dl = Layout::new(triple(dst_origin)?, region, dst_row_pitch, dst_slice_pitch)?;
        if sl.end(region).is_none_or(|end| end > s.size)
            || dl.end(region).is_none_or(|end| end > d.size)
        {
            return Err(CL_INVALID_VALUE);
        }
        if src == dst && (sl.row_pitch != dl.row_pitch || sl.slice_pitch != dl.slice_pitch) {
            return Err(CL_INVALID_VALUE);
        }
        let runs = rect::runs(region, &sl, &dl);
        let ((sr, so), (dr, dof)) = (s.root(), d.root());
        if sr == dr {
            let absolute: Vec<rect::Run> = runs
                .iter()
                .map(|r| rect::Run {
                    a: r.a + so,
                    b: r.b + dof,
                    len: r.len,
                })
                .collect();
            if rect::overlap(&absolute) {
                return Err(CL_MEM_COPY_OVERLAP);
            }
        }
        conn::with(|c| {
            e.send_waits(c)?;
            let single = runs.len() == 1;
            for r in &runs {
                let words = encode_words(&[r.a as u64, r.b as u64, r.len as u64]);
                let event = if single { e.event } else { 0 };
                c.fire(
                    Opcode::ClCopyBuffer,
                    &[e.queue.host, s.host, d.host, 0, event],
                    &words,
                )?;
            }
            if single {
                Ok(())
            } else {
                e.marker(c)
            }
        })?;
        e.publish(CL_COMMAND_COPY_BUFFER_RECT, false)
    })
}

/// Checks a map's flags against the memory object's: whether the map
/// writes (its bytes go back at the unmap) and whether it fetches them
/// (unless it discards them).
pub fn map_access(m: &Mem, map_flags: u64) -> Result<(bool, bool), i32> {
    let flags = match map_flags {
        0 => CL_MAP_READ | CL_MAP_WRITE,
        f => f,
    };
    let known = CL_MAP_READ | CL_MAP_WRITE | CL_MAP_WRITE_INVALIDATE_REGION;
    if flags & !known != 0
        || (flags & CL_MAP_WRITE_INVALIDATE_REGION != 0
            && flags & (CL_MAP_READ | CL_MAP_WRITE) != 0)
    {
        return Err(CL_INVALID_VALUE);
    }
    let writes = flags & (CL_MAP_WRITE | CL_MAP_WRITE_INVALIDATE_REGION) != 0;
    if (flags & CL_MAP_READ != 0 && !host_can_read(m.flags)) || (writes && !host_can_write(m.flags))
    {
        return Err(CL_INVALID_OPERATION);
    }
    Ok((writes, flags & CL_MAP_WRITE_INVALIDATE_REGION == 0))
}

pub(crate) extern "C" fn clEnqueueMapBuffer(
    queue: Handle,
    buffer: Handle,
    blocking: u32,
    map_flags: u64,
    offset: usize,
    size: usize,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
    errcode_ret: *mut i32,
) -> *mut c_void {
    guard_obj("clEnqueueMapBuffer", errcode_ret, || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let m = buffer_of(&e, buffer)?;
        let (writes, fetch) = map_access(&m, map_flags)?;
        check_range(&m, offset, size)?;
        let (ptr, mut memory) = if m.flags & CL_MEM_USE_HOST_PTR != 0 {
            (m.host_ptr + offset, None)
        } else {
            let mut mm = MapMemory::new(size).ok_or(CL_MAP_FAILURE)?;
            (mm.ptr() as usize, Some(mm))
        };
        let earlier = conn::with(|c| {
            e.send_waits(c)?;
            if fetch {
                let out = match &mut memory {
                    Some(mm) => mm.bytes_mut(),
                    None => {
                        // SAFETY: a USE_HOST_PTR buffer's host pointer holds
                        // its `size` bytes, which the application leaves to
                        // the buffer while it is in use.
                        let b = unsafe { raw::bytes_mut(ptr as *mut c_void, size) };
                        b.ok_or(CL_MAP_FAILURE)?
                    }
                };
                read(c, &e, m.host, offset, out)?;
            } else {
                e.marker(c)?;
            }
            // A map that read the bytes completed here, as a read does.
            Ok(if fetch || blocking != CL_FALSE {
                c.take_pending()
            } else {
                Ok(())
            })
        })?;
        m.add_map(Mapping {
            ptr,
            offset,
            len: size,
            write: writes,
            memory,
            image: None,
        });
        e.publish(CL_COMMAND_MAP_BUFFER, fetch)?;
        earlier?;
        Ok(ptr as Handle)
    })
}

pub(crate) extern "C" fn clEnqueueUnmapMemObject(
    queue: Handle,
    mem: Handle,
    mapped_ptr: *mut c_void,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueUnmapMemObject", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        let m = mem_of(&e, mem)?;
        let mut mapping = {
            let mut st = m.state();
            let i = st
                .maps
                .iter()
                .position(|mp| mp.ptr == mapped_ptr as usize)
                .ok_or(CL_INVALID_VALUE)?;
            st.maps.remove(i)
        };
        let r = conn::with(|c| {
            e.send_waits(c)?;
            if !mapping.write {
                return e.marker(c);
            }
            let data: &[u8] = match &mut mapping.memory {
                Some(mm) => mm.bytes_mut(),
                // SAFETY: the mapped region of a USE_HOST_PTR memory
                // object: `len` bytes of the application's memory at the
                // mapped pointer.
                None => unsafe { raw::bytes(mapping.ptr as *const c_void, mapping.len) }
                    .ok_or(CL_INVALID_VALUE)?,
            };
            match (mapping.image, m.image) {
                (Some((b, p)), Some(i)) => image::write_box(
                    c,
                    e.queue.host,
                    m.host,
                    i.elem,
                    b,
                    e.event,
                    |at, size, out| image::pack(data, p, i.elem, at, size, out),
                ),
                _ => write(c, e.queue.host, m.host, mapping.offset, data, Some(&e)),
            }
        });
        if let Err(err) = r {
            // Still mapped: the application may try again.
            m.state().maps.push(mapping);
            return Err(err);
        }
        drop(mapping);
        e.publish(CL_COMMAND_UNMAP_MEM_OBJECT, false)
    })
}

pub(crate) extern "C" fn clEnqueueMigrateMemObjects(
    queue: Handle,
    num_mems: u32,
    mems: *const Handle,
    flags: u64,
    num_events: u32,
    wait_list: *const Handle,
    event: *mut Handle,
) -> i32 {
    guard("clEnqueueMigrateMemObjects", || {
        let e = Enqueue::new(queue, num_events, wait_list, event)?;
        // SAFETY: mem_objects holds num_mem_objects handles.
        let list = unsafe { raw::slice(mems, num_mems as usize) };
        let list = list.filter(|l| !l.is_empty()).ok_or(CL_INVALID_VALUE)?;
        for &h in list {
            mem_of(&e, h)?;
        }
        if flags & !(CL_MIGRATE_MEM_OBJECT_HOST | CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED) != 0 {
            return Err(CL_INVALID_VALUE);
        }
        // The host places its buffers; a migration is only a point in the queue.
        conn::with(|c| {
            e.send_waits(c)?;
            e.marker(c)
        })?;
        e.publish(CL_COMMAND_MIGRATE_MEM_OBJECTS, false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_flags_follow_the_spec() {
        assert_eq!(check_flags(0, false), Ok(()));
        assert_eq!(
            check_flags(CL_MEM_READ_ONLY | CL_MEM_HOST_NO_ACCESS, false),
            Ok(())
        );
        assert_eq!(
            check_flags(CL_MEM_READ_ONLY | CL_MEM_WRITE_ONLY, false),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            check_flags(CL_MEM_HOST_READ_ONLY | CL_MEM_HOST_WRITE_ONLY, false),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            check_flags(CL_MEM_USE_HOST_PTR | CL_MEM_COPY_HOST_PTR, true),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            check_flags(CL_MEM_USE_HOST_PTR | CL_MEM_ALLOC_HOST_PTR, true),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            check_flags(CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR, true),
            Ok(())
        );
        assert_eq!(
            check_flags(CL_MEM_COPY_HOST_PTR, false),
            Err(CL_INVALID_HOST_PTR)
        );
        assert_eq!(
            check_flags(CL_MEM_USE_HOST_PTR, false),
            Err(CL_INVALID_HOST_PTR)
        );
        assert_eq!(
            check_flags(CL_MEM_READ_WRITE, true),
            Err(CL_INVALID_HOST_PTR)
        );
        assert_eq!(check_flags(1 << 40, false), Err(CL_INVALID_VALUE));
    }

    #[test]
    fn sub_buffers_inherit_and_never_widen() {
        let parent = CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR | CL_MEM_HOST_READ_ONLY;
        assert_eq!(sub_buffer_flags(parent, 0), Ok(parent));
        assert_eq!(
            sub_buffer_flags(parent, CL_MEM_READ_WRITE),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            sub_buffer_flags(parent, CL_MEM_HOST_WRITE_ONLY),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            sub_buffer_flags(parent, CL_MEM_HOST_NO_ACCESS),
            Ok(CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR | CL_MEM_HOST_NO_ACCESS)
        );
        assert_eq!(
            sub_buffer_flags(0, CL_MEM_COPY_HOST_PTR),
            Err(CL_INVALID_VALUE)
        );
        assert_eq!(
            sub_buffer_flags(CL_MEM_READ_WRITE, CL_MEM_WRITE_ONLY),
            Ok(CL_MEM_WRITE_ONLY)
        );
        assert_eq!(
            sub_buffer_flags(CL_MEM_HOST_NO_ACCESS, CL_MEM_HOST_READ_ONLY),
            Err(CL_INVALID_VALUE)
        );
    }

    #[test]
    fn fill_patterns_are_powers_of_two_up_to_128() {
        assert_eq!(check_fill(4, 8, 16), Ok(()));
        assert_eq!(check_fill(128, 0, 256), Ok(()));
        assert_eq!(check_fill(0, 0, 0), Err(CL_INVALID_VALUE));
        assert_eq!(check_fill(3, 0, 3), Err(CL_INVALID_VALUE));
        assert_eq!(check_fill(256, 0, 256), Err(CL_INVALID_VALUE));
        assert_eq!(check_fill(4, 2, 16), Err(CL_INVALID_VALUE));
        assert_eq!(check_fill(4, 0, 6), Err(CL_INVALID_VALUE));
    }

    #[test]
    fn host_access_flags_gate_reads_and_writes() {
        assert!(host_can_read(0) && host_can_write(0));
        assert!(!host_can_read(CL_MEM_HOST_WRITE_ONLY) && host_can_write(CL_MEM_HOST_WRITE_ONLY));
        assert!(host_can_read(CL_MEM_HOST_READ_ONLY) && !host_can_write(CL_MEM_HOST_READ_ONLY));
        assert!(!host_can_read(CL_MEM_HOST_NO_ACCESS) && !host_can_write(CL_MEM_HOST_NO_ACCESS));
    }
}
