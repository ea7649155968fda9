//! JIT linking (`cuLinkCreate`, `cuLinkAddData`, `cuLinkAddFile`,
//! `cuLinkComplete`, `cuLinkDestroy`) for PTX, as Numba and NVIDIA's
//! `ptxjit` sample use it.
//!
//! The linked image is itself a module image the host loads as usual:
//! - one input of any loadable kind (PTX, a cubin, a fatbin) is the image;
//! - several PTX inputs become one PTX module: the first input's
//!   `.version`, `.target` and `.address_size` head it (the version raised
//!   to the newest any input asks for), later inputs lose theirs, and an
//!   `.extern` declaration of a symbol another input defines (`.visible`)
//!   is dropped, so the host's PTX compiler (or SimGpu) sees one module in
//!   which every call resolves.
//!
//! NVIDIA's device runtime (`libcudadevrt.a`, which Numba links into every
//! kernel that uses a grid group) holds machine code only. Of it, fairgpu
//! provides in PTX what cooperative groups call through it for a grid
//! barrier ([`DEVICE_RUNTIME_PTX`]: `cudaCGGetIntrinsicHandle`,
//! `cudaCGSynchronize`); it is linked in when the PTX inputs call those.
//! Where the device executes PTX only (SimGpu), the functions SimGpu
//! executes itself (dynamic parallelism's launches, streams, events, heap:
//! `fairgpu_protocol::cuda::SIM_DEVICE_RUNTIME`) stay `.extern` in the
//! linked PTX. A link that needs anything else of the device runtime, or
//! dynamic parallelism on a GPU, fails at `cuLinkComplete` with
//! CUDA_ERROR_NOT_SUPPORTED naming what is missing.
//!
//! Anything else (object files, other static libraries, NVVM IR, several
//! cubins) needs NVIDIA's device linker, which the guest does not have:
//! `cuLinkAddData`/`cuLinkAddFile` refuse it with CUDA_ERROR_NOT_SUPPORTED,
//! named once. Options are accepted and ignored (the host's driver uses its
//! defaults when it compiles the PTX).

use std::collections::HashSet;
use std::ffi::{c_char, c_void, CStr};
use std::sync::Mutex;

use crate::context::out;
use crate::ffi_result;
use crate::state;
use crate::types::{err, CUresult};

/// `CUjitInputType`.
const INPUT_CUBIN: u32 = 0;
const INPUT_PTX: u32 = 1;
const INPUT_FATBINARY: u32 = 2;
const INPUT_LIBRARY: u32 = 4;

use crate::types::err::FILE_NOT_FOUND;

/// Most bytes one link keeps (all inputs together).
const MAX_LINK_BYTES: usize = 1 << 30;

type CUlinkState = *mut c_void;

#[derive(Default)]
struct Link {
    /// (input type, bytes without a trailing NUL).
    inputs: Vec<(u32, Vec<u8>)>,
    /// The image `cuLinkComplete` handed out (kept until destroy).
    image: Vec<u8>,
    /// NVIDIA's device runtime was added (its bytes are not kept: what of
    /// it fairgpu can provide is [`DEVICE_RUNTIME_PTX`]).
    device_runtime: bool,
}

static LINKS: Mutex<Vec<(usize, Link)>> = Mutex::new(Vec::new());
static NEXT: Mutex<usize> = Mutex::new(0);

fn with_link<R>(
    state: CUlinkState,
    f: impl FnOnce(&mut Link) -> Result<R, CUresult>,
) -> Result<R, CUresult> {
    let mut links = LINKS.lock().map_err(|_| err::UNKNOWN)?;
    let l = links
        .iter_mut()
        .find(|(h, _)| *h == state as usize)
        .ok_or(err::INVALID_HANDLE)?;
    f(&mut l.1)
}

fn create(state: *mut CUlinkState) -> CUresult {
    ffi_result(|| {
        crate::state::device()?;
        if state.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let h = {
            let mut n = NEXT.lock().map_err(|_| err::UNKNOWN)?;
            *n += 1;
            0x0f11_0000_0000_0000 | (*n << 4)
        };
        LINKS
            .lock()
            .map_err(|_| err::UNKNOWN)?
            .push((h, Link::default()));
        // SAFETY: `out` checks the slot for null.
        unsafe { out(state, h as CUlinkState) }
    })
}

/// `cuLinkCreate_v2`.
#[no_mangle]
pub extern "C" fn cuLinkCreate_v2(
    _n: u32,
    _options: *mut c_void,
    _values: *mut *mut c_void,
    state: *mut CUlinkState,
) -> CUresult {
    create(state)
}

/// `cuLinkCreate` (CUDA 5.5 name).
#[no_mangle]
pub extern "C" fn cuLinkCreate(
    _n: u32,
    _options: *mut c_void,
    _values: *mut *mut c_void,
    state: *mut CUlinkState,
) -> CUresult {
    create(state)
}

fn add(state: CUlinkState, ty: u32, bytes: Vec<u8>) -> Result<(), CUresult> {
    if ty == INPUT_LIBRARY && is_device_runtime(&bytes) {
        return with_link(state, |l| {
            l.device_runtime = true;
            Ok(())
        });
    }
    if !matches!(ty, INPUT_CUBIN | INPUT_PTX | INPUT_FATBINARY) {
        return Err(crate::unsupported(
            "cuLinkAddData/cuLinkAddFile of an object, library or NVVM input (needs NVIDIA's device linker)",
        ));
    }
    with_link(state, |l| {
        let total: usize = l.inputs.iter().map(|(_, b)| b.len()).sum();
        if total.saturating_add(bytes.len()) > MAX_LINK_BYTES {
            return Err(err::OUT_OF_MEMORY);
        }
        l.inputs.push((ty, bytes));
        Ok(())
    })
}

fn add_data(state: CUlinkState, ty: u32, data: *const c_void, size: usize) -> CUresult {
    ffi_result(|| {
        if data.is_null() || size == 0 || size > MAX_LINK_BYTES {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: the caller passes `size` readable bytes at `data`.
        let mut b = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), size) }.to_vec();
        if ty == INPUT_PTX {
            // PTX is text; its size may count a terminating NUL.
            if let Some(end) = b.iter().position(|&c| c == 0) {
                b.truncate(end);
            }
        }
        add(state, ty, b)
    })
}

/// `cuLinkAddData_v2`.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cuLinkAddData_v2(
    state: CUlinkState,
    ty: u32,
    data: *mut c_void,
    size: usize,
    _name: *const c_char,
    _n: u32,
    _options: *mut c_void,
    _values: *mut *mut c_void,
) -> CUresult {
    add_data(state, ty, data, size)
}

/// `cuLinkAddData` (the v2 ABI).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn cuLinkAddData(
    state: CUlinkState,
    ty: u32,
    data: *mut c_void,
    size: usize,
    name: *const c_char,
    n: u32,
    options: *mut c_void,
    values: *mut *mut c_void,
) -> CUresult {
    cuLinkAddData_v2(state, ty, data, size, name, n, options, values)
}

fn add_file(state: CUlinkState, ty: u32, path: *const c_char) -> CUresult {
    ffi_result(|| {
        if path.is_null() {
            return Err(err::INVALID_VALUE);
        }
        // SAFETY: a C string per the API.
        let p = unsafe { CStr::from_ptr(path) }
            .to_str()
            .map_err(|_| err::INVALID_VALUE)?;
        let meta = std::fs::metadata(p).map_err(|_| FILE_NOT_FOUND)?;
        if meta.len() > MAX_LINK_BYTES as u64 {
            return Err(err::INVALID_VALUE);
        }
        let mut b = std::fs::read(p).map_err(|_| FILE_NOT_FOUND)?;
        if ty == INPUT_PTX {
            if let Some(end) = b.iter().position(|&c| c == 0) {
                b.truncate(end);
            }
        }
        add(state, ty, b)
    })
}

/// `cuLinkAddFile_v2`.
#[no_mangle]
pub extern "C" fn cuLinkAddFile_v2(
    state: CUlinkState,
    ty: u32,
    path: *const c_char,
    _n: u32,
    _options: *mut c_void,
    _values: *mut *mut c_void,
) -> CUresult {
    add_file(state, ty, path)
}

/// `cuLinkAddFile` (the v2 ABI).
#[no_mangle]
pub extern "C" fn cuLinkAddFile(
    state: CUlinkState,
    ty: u32,
    path: *const c_char,
    n: u32,
    options: *mut c_void,
    values: *mut *mut c_void,
) -> CUresult {
    cuLinkAddFile_v2(state, ty, path, n, options, values)
}

/// The image of a link with no input: a PTX module that defines nothing.
const EMPTY_PTX: &str = ".version 7.0\n.target sm_52\n.address_size 64\n";

/// `cuLinkComplete`: the linked image, valid until `cuLinkDestroy`.
#[no_mangle]
pub extern "C" fn cuLinkComplete(
    state: CUlinkState,
    image: *mut *mut c_void,
    size: *mut usize,
) -> CUresult {
    ffi_result(|| {
        if image.is_null() {
            return Err(err::INVALID_VALUE);
        }
        let (p, n) = with_link(state, |l| {
            let runtime = if l.device_runtime {
                let ptx_only = state::device()?
                    .attribute(fairgpu_protocol::cuda::ATTR_EXECUTES_PTX_ONLY)
                    == Ok(1);
                device_runtime_needed(&l.inputs, ptx_only)?
            } else {
                false
            };
            // PTX images are text the loader reads up to a NUL.
            let mut img = match l.inputs.as_slice() {
                // NVIDIA's driver completes a link with no input (580, on
                // an H200); its image is a module without functions.
                [] => EMPTY_PTX.as_bytes().to_vec(),
                [(_, only)] if !runtime => only.clone(),
                many if many.iter().all(|(t, _)| *t == INPUT_PTX) => {
                    let mut texts: Vec<&str> = many
                        .iter()
                        .map(|(_, b)| std::str::from_utf8(b).map_err(|_| err::INVALID_IMAGE))
                        .collect::<Result<_, _>>()?;
                    if runtime {
                        texts.push(DEVICE_RUNTIME_PTX);
                    }
                    merge_ptx(&texts).into_bytes()
                }
                _ => {
                    return Err(crate::unsupported(
                        "cuLinkComplete of several inputs that are not all PTX (needs NVIDIA's device linker)",
                    ))
                }
            };
            if runtime || l.inputs.len() != 1 || l.inputs[0].0 == INPUT_PTX {
                img.push(0);
            }
            l.image = img;
            Ok((l.image.as_mut_ptr(), l.image.len()))
        })?;
        // SAFETY: `image` is non-null (checked); `size` may be null.
        unsafe {
            *image = p.cast();
            if !size.is_null() {
                *size = n;
            }
        }
        Ok(())
    })
}

/// `cuLinkDestroy`.
#[no_mangle]
pub extern "C" fn cuLinkDestroy(state: CUlinkState) -> CUresult {
    ffi_result(|| {
        let mut links = LINKS.lock().map_err(|_| err::UNKNOWN)?;
        let i = links
            .iter()
            .position(|(h, _)| *h == state as usize)
            .ok_or(err::INVALID_HANDLE)?;
        links.swap_remove(i);
        Ok(())
    })
}

/// Whether a library input is NVIDIA's device runtime (`libcudadevrt.a`:
/// an archive whose one member is `cuda_device_runtime.o`).
fn is_device_runtime(bytes: &[u8]) -> bool {
    const MEMBER: &[u8] = b"cuda_device_runtime.o";
    bytes.starts_with(b"!<arch>\n") && bytes.windows(MEMBER.len()).any(|w| w == MEMBER)
}

/// The functions of NVIDIA's device runtime that fairgpu provides, in PTX:
/// what cooperative groups' grid group calls (Numba's `this_grid()` and
/// `sync()`). The handle of the grid is the address of the grid's barrier
/// workspace, which the driver gives every thread of a cooperative launch
/// in `%envreg1` (high half) and `%envreg2` (low half), zeroed at launch;
/// outside a cooperative launch it is 0 and a barrier on it traps.
///
/// The barrier: after a block-wide barrier, one thread per block adds to
/// the counter at workspace + 4: 1 from every block but the first, which
/// adds 2^31 - (blocks - 1). The additions of one barrier sum to exactly
/// 2^31, so the counter's top bit flips once, when the last block has
/// arrived, and its lower bits are the same before and after each barrier;
/// every block waits until the top bit differs from the value its own
/// addition returned. The fences order the blocks' writes before the
/// barrier against their reads after it.
const DEVICE_RUNTIME_PTX: &str = r#".version 7.0
.target sm_70
.address_size 64

.visible .func (.param .b64 handle) cudaCGGetIntrinsicHandle(
	.param .b32 scope
)
{
	.reg .b32 %hi, %lo;
	.reg .b64 %ws;
	mov.u32 %hi, %envreg1;
	mov.u32 %lo, %envreg2;
	mov.b64 %ws, {%lo, %hi};
	st.param.b64 [handle], %ws;
	ret;
}

.visible .func (.param .b32 status) cudaCGSynchronize(
	.param .b64 handle,
	.param .b32 flags
)
{
	.reg .pred %p<4>;
	.reg .b32 %r<12>;
	.reg .b64 %ws, %counter;
	ld.param.u64 %ws, [handle];
	setp.eq.u64 %p0, %ws, 0;
	@%p0 trap;
	add.u64 %counter, %ws, 4;
	bar.sync 0;
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, %tid.y;
	mov.u32 %r2, %tid.z;
	or.b32 %r0, %r0, %r1;
	or.b32 %r0, %r0, %r2;
	setp.ne.u32 %p1, %r0, 0;
	@%p1 bra DONE;
	mov.u32 %r3, %nctaid.x;
	mov.u32 %r4, %nctaid.y;
	mov.u32 %r5, %nctaid.z;
	mul.lo.u32 %r3, %r3, %r4;
	mul.lo.u32 %r3, %r3, %r5;
	mov.u32 %r6, %ctaid.x;
	mov.u32 %r7, %ctaid.y;
	mov.u32 %r8, %ctaid.z;
	or.b32 %r6, %r6, %r7;
	or.b32 %r6, %r6, %r8;
	setp.eq.u32 %p2, %r6, 0;
	sub.u32 %r10, -2147483647, %r3;
	selp.u32 %r9, %r10, 1, %p2;
	fence.acq_rel.gpu;
	atom.global.add.u32 %r11, [%counter], %r9;
WAIT:
	ld.volatile.global.u32 %r4, [%counter];
	xor.b32 %r4, %r4, %r11;
	and.b32 %r4, %r4, -2147483648;
	setp.eq.u32 %p3, %r4, 0;
	@%p3 bra WAIT;
	fence.acq_rel.gpu;
DONE:
	bar.sync 0;
	mov.u32 %r0, 0;
	st.param.b32 [status], %r0;
	ret;
}
"#;

/// Whether a link that was given the device runtime needs
/// [`DEVICE_RUNTIME_PTX`]: its PTX inputs call a function of it. A
/// function none of them defines and fairgpu does not provide fails the
/// link (NVIDIA's linker would take it from the device runtime's machine
/// code), except, where the device executes PTX only (`ptx_only`:
/// SimGpu), the functions it executes itself (dynamic parallelism's:
/// [`fairgpu_protocol::cuda::SIM_DEVICE_RUNTIME`]), which stay `.extern`.
fn device_runtime_needed(inputs: &[(u32, Vec<u8>)], ptx_only: bool) -> Result<bool, CUresult> {
    let provided: HashSet<String> = statements(DEVICE_RUNTIME_PTX)
        .iter()
        .filter(|s| directive_word(s.trim_start()) == Some(".visible"))
        .filter_map(|s| declared_name(s))
        .collect();
    let mut defined = HashSet::new();
    let mut declared = Vec::new();
    for (ty, bytes) in inputs {
        if *ty != INPUT_PTX {
            continue;
        }
        let text = std::str::from_utf8(bytes).map_err(|_| err::INVALID_IMAGE)?;
        for s in statements(text) {
            let t = s.trim_start();
            let Some(name) = declared_name(t) else {
                continue;
            };
            if definition(t).is_some() {
                defined.insert(name);
            } else if directive_word(t) == Some(".extern") && t.contains(".func") {
                declared.push(name);
            }
        }
    }
    // What the GPU's own PTX compiler resolves (system calls), not a
    // library.
    const SYSTEM_CALLS: [&str; 4] = ["vprintf", "__assertfail", "malloc", "free"];
    let missing: Vec<&String> = declared
        .iter()
        .filter(|n| !defined.contains(*n) && !SYSTEM_CALLS.contains(&n.as_str()))
        .filter(|n| !(ptx_only && fairgpu_protocol::cuda::sim_device_runtime(n)))
        .collect();
    if let Some(other) = missing.iter().find(|n| !provided.contains(**n)) {
        if crate::log_level() != crate::LogLevel::Off {
            eprintln!(
                "fairgpu guest-lib: the linked PTX calls {other}, which NVIDIA's device runtime holds in machine code only"
            );
        }
        return Err(crate::unsupported(
            "cuLinkComplete with device-runtime functions other than cooperative groups' grid barrier",
        ));
    }
    if !missing.is_empty() && inputs.iter().any(|(t, _)| *t != INPUT_PTX) {
        return Err(crate::unsupported(
            "cuLinkComplete of machine code with the device runtime (needs NVIDIA's device linker)",
        ));
    }
    Ok(!missing.is_empty())
}

/// A statement's first word.
fn directive_word(stmt: &str) -> Option<&str> {
    stmt.split_whitespace().next()
}

/// The symbol a declaration names: its first word at the top level that
/// is neither a directive nor a number (`.align 8`), ended by the
/// parameter list, an index, an initializer or the statement's end. A
/// function's return parameters (`.func (.param .b32 r) name (...)`) and
/// the performance directives after its parameters (`.maxntid 256, 1, 1`)
/// are not it.
fn declared_name(stmt: &str) -> Option<String> {
    let s = stmt.trim().trim_end_matches(';');
    let is_name = |w: &str| {
        !w.is_empty() && !w.starts_with('.') && !w.starts_with(|c: char| c.is_ascii_digit())
    };
    let mut depth = 0i32;
    let mut word = String::new();
    for c in s.chars() {
        match c {
            '(' | ')' | '[' | '=' | '{' | ',' if depth == 0 && is_name(&word) => return Some(word),
            '(' => {
                depth += 1;
                word.clear();
            }
            ')' => {
                depth -= 1;
                word.clear();
            }
            _ if depth > 0 => {}
            '[' | '=' | '{' => return None,
            c if c.is_whitespace() || c == ',' => {
                if is_name(&word) {
                    return Some(word);
                }
                word.clear();
            }
            c => word.push(c),
        }
    }
    is_name(&word).then_some(word)
}

/// Top-level statements of `text`, each ended by its `;`, by the `}` that
/// closes its body, or (header directives) by its line; comments between
/// statements are dropped.
fn statements(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut depth) = (0usize, 0i32);
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if matches!(b.get(i + 1), Some(b'/' | b'*')) => {
                let at = i;
                if b[i + 1] == b'/' {
                    while i < b.len() && b[i] != b'\n' {
                        i += 1;
                    }
                } else {
                    i += 2;
                    while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                        i += 1;
                    }
                    i = (i + 2).min(b.len());
                }
                // A comment before any statement text is not part of it.
                if depth == 0 && text[start..at].trim().is_empty() {
                    start = i;
                }
                continue;
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    out.push(&text[start..=i]);
                    start = i + 1;
                }
            }
            b';' if depth == 0 => {
                out.push(&text[start..=i]);
                start = i + 1;
            }
            b'\n' if depth == 0 && is_header(&text[start..i]) => {
                // Header directives end at the line's end, without `;`.
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < text.len() && !text[start..].trim().is_empty() {
        out.push(&text[start..]);
    }
    out
}

/// Whether a statement is a header directive (ended by its line, not `;`).
fn is_header(stmt: &str) -> bool {
    matches!(
        directive_word(stmt.trim_start()),
        Some(".version" | ".target" | ".address_size")
    )
}

/// The symbol a statement defines and whether the definition is strong
/// (`.visible`) or weak (`.weak`, which NVVM gives functions that several
/// modules carry a copy of): a variable, or a function with its body (a
/// prototype ending in `;` defines nothing).
fn definition(stmt: &str) -> Option<(String, bool)> {
    let t = stmt.trim_start();
    let strong = match directive_word(t) {
        Some(".visible") => true,
        Some(".weak") => false,
        _ => return None,
    };
    let is_function = t.contains(".func") || t.contains(".entry");
    if is_function && !t.trim_end().ends_with('}') {
        return None;
    }
    declared_name(t).map(|n| (n, strong))
}

/// One PTX module from the PTX of a program's relocatable objects
/// (`linked.rs`): merged as [`merge_ptx`] merges, with fairgpu's PTX of
/// the device runtime's grid barrier where an object calls it.
pub(crate) fn link_ptx(texts: &[&str]) -> String {
    let provided: Vec<String> = statements(DEVICE_RUNTIME_PTX)
        .iter()
        .filter_map(|s| definition(s).map(|(n, _)| n))
        .collect();
    let calls_barrier = texts.iter().any(|t| {
        statements(t).iter().any(|s| {
            let s = s.trim_start();
            directive_word(s) == Some(".extern")
                && declared_name(s).is_some_and(|n| provided.contains(&n))
        })
    });
    let mut all = texts.to_vec();
    if calls_barrier {
        all.push(DEVICE_RUNTIME_PTX);
    }
    merge_ptx(&all)
}

/// Whether PTX text is NVIDIA's device runtime: it defines the functions
/// of dynamic parallelism (`__cudaCDP2…`) or of cooperative groups'
/// grid (`cudaCG…`), which fairgpu provides.
pub(crate) fn is_device_runtime_ptx(text: &str) -> bool {
    statements(text).iter().any(|s| {
        definition(s).is_some_and(|(n, _)| n.starts_with("__cudaCDP2") || n.starts_with("cudaCG"))
    })
}

/// One PTX module from several (see the module's documentation).
fn merge_ptx(texts: &[&str]) -> String {
    let parsed: Vec<Vec<&str>> = texts.iter().map(|t| statements(t)).collect();
    let defines: Vec<HashSet<String>> = parsed
        .iter()
        .map(|stmts| {
            stmts
                .iter()
                .filter_map(|s| definition(s).map(|(n, _)| n))
                .collect()
        })
        .collect();
    let defined: HashSet<&String> = defines.iter().flatten().collect();
    // Of a symbol defined weakly in several inputs (or strongly in one),
    // one definition is kept: the strong one, else the first weak one.
    let strong: HashSet<String> = parsed
        .iter()
        .flatten()
        .filter_map(|s| definition(s))
        .filter_map(|(n, strong)| strong.then_some(n))
        .collect();
    let mut kept_weak: HashSet<String> = HashSet::new();
    let externs: Vec<HashSet<String>> = parsed
        .iter()
        .map(|stmts| {
            stmts
                .iter()
                .filter(|s| directive_word(s.trim_start()) == Some(".extern"))
                .filter_map(|s| declared_name(s))
                .collect()
        })
        .collect();
    let version = |s: &str| -> Option<(u32, u32)> {
        let v = s.trim().strip_prefix(".version")?.trim();
        let (a, b) = v.split_once('.')?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    };
    // The newest architecture any input targets (`.target sm_90a` and
    // options such as `texmode_independent` kept as written).
    let arch = |s: &str| -> u32 {
        s.split(|c: char| c == ',' || c.is_whitespace())
            .find_map(|w| w.strip_prefix("sm_"))
            .map(|n| n.trim_end_matches(|c: char| c.is_ascii_alphabetic()))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let header = |word: &str| {
        parsed
            .iter()
            .flatten()
            .filter(|s| directive_word(s.trim_start()) == Some(word))
            .rev()
            .max_by_key(|s| arch(s))
            .map(|s| s.trim().to_owned())
    };
    let mut out = String::new();
    if let Some((a, b)) = parsed.iter().flatten().filter_map(|s| version(s)).max() {
        out.push_str(&format!(".version {a}.{b}\n"));
    }
    for word in [".target", ".address_size"] {
        if let Some(h) = header(word) {
            out.push_str(&h);
            out.push('\n');
        }
    }
    // Definitions before their uses: an input follows every input that
    // defines what it declares .extern (given order otherwise, and for
    // cycles).
    let mut order: Vec<usize> = Vec::with_capacity(parsed.len());
    let mut left: Vec<usize> = (0..parsed.len()).collect();
    while !left.is_empty() {
        let ready = left
            .iter()
            .position(|&i| {
                externs[i]
                    .iter()
                    .all(|name| left.iter().all(|&j| j == i || !defines[j].contains(name)))
            })
            .unwrap_or(0);
        order.push(left.remove(ready));
    }
    for i in order {
        for s in &parsed[i] {
            let t = s.trim_start();
            match directive_word(t) {
                Some(".version" | ".target" | ".address_size") => continue,
                Some(".extern") if declared_name(t).is_some_and(|n| defined.contains(&n)) => {
                    continue
                }
                _ => {}
            }
            if let Some((name, false)) = definition(t) {
                if strong.contains(&name) || !kept_weak.insert(name) {
                    continue;
                }
            }
            out.push_str(s);
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIB: &str = ".version 8.0\n.target sm_80\n.address_size 64\n\n\
        .visible .func (.param .b32 r) add3(\n\t.param .b32 a\n)\n{\n\t.reg .b32 %r<3>;\n\
        \tld.param.u32 %r1, [a];\n\tadd.s32 %r2, %r1, 3;\n\tst.param.b32 [r], %r2;\n\tret;\n}\n";
    const MAIN: &str = "//\n// Generated\n//\n.version 8.5\n.target sm_90\n.address_size 64\n\n\
        .extern .func (.param .b32 r) add3\n(\n\t.param .b32 a\n)\n;\n\
        .visible .entry k(\n\t.param .u64 p\n)\n{\n\tret;\n}\n";

    #[test]
    fn declarations_name_their_symbol() {
        assert_eq!(
            declared_name(".extern .func (.param .b32 r) add3\n(\n.param .b32 a\n)\n;").as_deref(),
            Some("add3")
        );
        assert_eq!(
            declared_name(".visible .entry k(\n.param .u64 p\n)\n{ ret; }").as_deref(),
            Some("k")
        );
        assert_eq!(
            declared_name(".extern .global .align 4 .b8 table[16];").as_deref(),
            Some("table")
        );
        // Launch bounds after the parameters (CUB's kernels) are not the
        // name, nor is an alignment or an initializer.
        assert_eq!(
            declared_name(".weak .entry kern(\n.param .u64 p\n)\n.maxntid 256, 1, 1\n{ ret; }")
                .as_deref(),
            Some("kern")
        );
        assert_eq!(
            declared_name(".weak .global .align 8 .u64 line_size = 128;").as_deref(),
            Some("line_size")
        );
        assert_eq!(
            declared_name(".global .texref tex;").as_deref(),
            Some("tex")
        );
    }

    #[test]
    fn ptx_modules_merge_into_one_with_externs_resolved() {
        let m = merge_ptx(&[MAIN, LIB]);
        assert_eq!(m.matches(".version").count(), 1, "{m}");
        // The definition comes before the kernel that calls it.
        assert!(
            m.find("add3(").unwrap() < m.find(".entry k(").unwrap(),
            "{m}"
        );
        assert!(m.contains(".version 8.5"), "{m}");
        assert_eq!(m.matches(".target").count(), 1, "{m}");
        assert!(m.contains(".target sm_90"), "{m}");
        assert!(!m.contains(".extern"), "{m}");
        assert!(m.contains(".visible .func (.param .b32 r) add3"), "{m}");
        assert!(m.contains(".visible .entry k("), "{m}");
        // An extern nobody defines stays (the loader reports it).
        let lone = merge_ptx(&[MAIN, ".version 8.0\n.target sm_80\n.address_size 64\n"]);
        assert!(
            lone.contains(".extern .func (.param .b32 r) add3"),
            "{lone}"
        );
    }

    /// NVVM's modules of one Numba kernel, each with a copy of a device
    /// function they share (`.weak`), and one that declares it.
    #[test]
    fn weak_definitions_in_several_inputs_are_kept_once() {
        let f = |body: &str| {
            format!(
                ".version 8.8\n.target sm_90\n.address_size 64\n\
                 .weak .func (.param .b32 r) leaf(\n\t.param .b32 a\n)\n;\n\
                 .weak .func (.param .b32 r) leaf(\n\t.param .b32 a\n)\n{{\n\t{body}\n\tret;\n}}\n"
            )
        };
        let (a, b) = (f("// first"), f("// second"));
        let user = ".version 8.8\n.target sm_90\n.address_size 64\n\
            .extern .func (.param .b32 r) leaf\n(\n\t.param .b32 a\n)\n;\n\
            .visible .entry k(\n\t.param .u64 p\n)\n{\n\tret;\n}\n";
        let m = merge_ptx(&[user, &a, &b]);
        assert_eq!(m.matches("// first").count(), 1, "{m}");
        assert_eq!(m.matches("// second").count(), 0, "{m}");
        assert!(!m.contains(".extern"), "{m}");
        // The definition, and the prototypes before it, come before the
        // kernel.
        assert!(
            m.find("// first").unwrap() < m.find(".entry k(").unwrap(),
            "{m}"
        );
        // A strong definition wins over weak ones.
        let strong = LIB.replace("add3", "leaf");
        let m = merge_ptx(&[&a, &strong]);
        assert_eq!(m.matches("// first").count(), 0, "{m}");
        assert_eq!(
            m.matches(".visible .func (.param .b32 r) leaf").count(),
            1,
            "{m}"
        );
    }

    /// A kernel that calls cooperative groups' grid barrier the way Numba
    /// emits it (declared .extern, defined by the device runtime).
    const GRID_SYNC: &str = ".version 8.5\n.target sm_90\n.address_size 64\n\n\
        .extern .func (.param .b64 func_retval0) cudaCGGetIntrinsicHandle\n(\n\t.param .b32 s\n)\n;\n\
        .extern .func (.param .b32 func_retval0) cudaCGSynchronize\n(\n\t.param .b64 h,\n\t.param .b32 f\n)\n;\n\
        .visible .entry k(\n\t.param .u64 p\n)\n{\n\tret;\n}\n";

    #[test]
    fn the_device_runtime_is_recognized_by_its_member() {
        let mut ar =
            b"!<arch>\n/               0           0     0     0       4         `\n".to_vec();
        ar.extend_from_slice(b"cuda_device_runtime.o/\n");
        assert!(is_device_runtime(&ar));
        assert!(!is_device_runtime(b"!<arch>\nother.o/"));
        assert!(!is_device_runtime(b"\x7fELF cuda_device_runtime.o"));
    }

    #[test]
    fn the_grid_barrier_of_the_device_runtime_is_provided_in_ptx() {
        let inputs = vec![(INPUT_PTX, GRID_SYNC.as_bytes().to_vec())];
        assert_eq!(device_runtime_needed(&inputs, false), Ok(true));
        assert_eq!(device_runtime_needed(&inputs, true), Ok(true));
        let m = merge_ptx(&[GRID_SYNC, DEVICE_RUNTIME_PTX]);
        assert!(!m.contains(".extern"), "{m}");
        assert!(m.contains(".target sm_90"), "{m}");
        for f in ["cudaCGGetIntrinsicHandle", "cudaCGSynchronize"] {
            assert_eq!(m.matches(f).count(), 1, "{f} once, defined: {m}");
        }
        // Defined before the kernel that calls them.
        assert!(m.find("cudaCGSynchronize(").unwrap() < m.find(".entry k(").unwrap());
        // Not needed: a kernel that calls none of it links as before.
        let plain = vec![
            (INPUT_PTX, MAIN.as_bytes().to_vec()),
            (INPUT_PTX, LIB.as_bytes().to_vec()),
        ];
        assert_eq!(device_runtime_needed(&plain, false), Ok(false));
    }

    #[test]
    fn other_device_runtime_functions_fail_the_link() {
        // Dynamic parallelism's launch exists in machine code only.
        let cdp = ".version 8.5\n.target sm_90\n.address_size 64\n\
            .extern .func (.param .b64 r) cudaGetParameterBufferV2\n(\n\t.param .b64 f\n)\n;\n";
        let inputs = vec![(INPUT_PTX, cdp.as_bytes().to_vec())];
        assert_eq!(
            device_runtime_needed(&inputs, false),
            Err(err::NOT_SUPPORTED)
        );
        // Unless the device executes PTX only and runs it itself (SimGpu).
        assert_eq!(device_runtime_needed(&inputs, true), Ok(false));
        let other = cdp.replace("cudaGetParameterBufferV2", "cudaGraphLaunch");
        let inputs = vec![(INPUT_PTX, other.into_bytes())];
        assert_eq!(
            device_runtime_needed(&inputs, true),
            Err(err::NOT_SUPPORTED)
        );
        // System calls are the GPU's compiler's, not the device runtime's.
        let assert = ".version 8.5\n.target sm_90\n.address_size 64\n\
            .extern .func __assertfail\n(\n\t.param .b64 m\n)\n;\n\
            .extern .func (.param .b32 r) vprintf\n(\n\t.param .b64 f,\n\t.param .b64 a\n)\n;\n";
        let inputs = vec![(INPUT_PTX, assert.as_bytes().to_vec())];
        assert_eq!(device_runtime_needed(&inputs, false), Ok(false));
        // Machine code that would need it cannot be linked here.
        let with_cubin = vec![
            (INPUT_PTX, GRID_SYNC.as_bytes().to_vec()),
            (INPUT_CUBIN, b"\x7fELF".to_vec()),
        ];
        assert_eq!(
            device_runtime_needed(&with_cubin, false),
            Err(err::NOT_SUPPORTED)
        );
    }
}
