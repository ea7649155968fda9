//! OpenCL through fairgpu: a daemon on SimGpu whose workers run OpenCL
//! requests on the host's OpenCL platform (PoCL from Debian's packages on
//! machines without a GPU, NVIDIA's with one).
//!
//! - At the wire: a guest drives the OpenCL opcodes on its channel by hand,
//!   correctly (a kernel's results checked against the CPU) and hostilely
//!   (forged handles, ranges past a buffer's end, argument lists that lie,
//!   host files named in `#include` or build options): each bad request
//!   fails alone, the channel and the daemon stay up.
//! - Through the ICD: real OpenCL programs written in C (`tests/opencl/`),
//!   built against the Khronos headers and linked with the system's ICD
//!   loader (ocl-icd), find fairgpu's ICD (`libfairgpu_opencl.so`) through
//!   `OCL_ICD_VENDORS` and check their results against the CPU; PyOpenCL
//!   from PyPI does the same.
//!
//! Without an OpenCL platform on the host these tests fail, unless
//! `FAIRGPU_ALLOW_NO_OPENCL=1`, which makes them skip with a message
//! (`scripts/test.sh` installs ocl-icd and PoCL).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use fairgpu_frontend::{CallError, Channel};
use fairgpu_protocol::opencl::*;
use fairgpu_protocol::Opcode;
use fairgpu_tests::{
    claim, profile_dir, run_command, status, vm, wait_config, wait_for_published, wait_for_status,
    Setup, TempDir,
};

/// How long one program may run.
const RUN_TIMEOUT: Duration = Duration::from_secs(300);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether the host has an OpenCL platform (`clinfo -l` lists one); skips
/// (returns false) when it has none and `FAIRGPU_ALLOW_NO_OPENCL=1`.
fn have_opencl() -> bool {
    static HAVE: OnceLock<Result<(), String>> = OnceLock::new();
    let r = HAVE.get_or_init(|| match fairgpu_executor::opencl::ClHost::open(None) {
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    });
    match r {
        Ok(()) => true,
        Err(e) if std::env::var("FAIRGPU_ALLOW_NO_OPENCL").is_ok_and(|v| v == "1") => {
            eprintln!("SKIPPED: no OpenCL platform on this host: {e}");
            false
        }
        Err(e) => panic!(
            "no OpenCL platform on this host: {e}\n(scripts/test.sh installs ocl-icd-libopencl1 and pocl-opencl-icd; FAIRGPU_ALLOW_NO_OPENCL=1 skips)"
        ),
    }
}

fn cl_err(e: CallError) -> i32 {
    cl_error(e.status())
}

/// The OpenCL error of a call, or 0.
fn code<T>(r: Result<T, CallError>) -> i32 {
    r.map_or_else(cl_err, |_| 0)
}

const VADD: &str = r#"
__kernel void vadd(__global const float *a, __global const float *b,
                   __global float *c, const uint n) {
    size_t i = get_global_id(0);
    if (i < n) c[i] = a[i] + b[i];
}
__kernel void scale(__global float *x, const float f, __local float *scratch) {
    size_t i = get_global_id(0);
    scratch[get_local_id(0)] = x[i] * f;
    barrier(CLK_LOCAL_MEM_FENCE);
    x[i] = scratch[get_local_id(0)];
}
"#;

/// Stages `bytes` and builds them (kind 0: source) → (program, status).
fn build(
    ch: &mut Channel,
    kind: u64,
    bytes: &[u8],
    options: &str,
) -> Result<(u64, i32), CallError> {
    ch.send_bulk(
        Opcode::ClProgramStage,
        [0, bytes.len() as u64, 0, 0, 0],
        0,
        bytes,
    )?;
    let r = ch.call_with(
        Opcode::ClBuildProgram,
        [kind, bytes.len() as u64, 0, 0, 0],
        options.as_bytes(),
        &mut [],
    )?;
    Ok((r.vals[0], r.vals[1] as i64 as i32))
}

fn log(ch: &mut Channel, program: u64) -> String {
    let mut out = vec![0u8; 64 * 1024];
    let r = ch
        .call_with(Opcode::ClProgramLog, [program, 0, 0, 0, 0], &[], &mut out)
        .expect("the build log");
    text(&out[..r.data_len as usize])
}

fn kernel(ch: &mut Channel, program: u64, name: &str) -> Result<(u64, u64), CallError> {
    let r = ch.call_with(
        Opcode::ClCreateKernel,
        [program, name.len() as u64, 0, 0, 0],
        name.as_bytes(),
        &mut [],
    )?;
    Ok((r.vals[0], r.vals[1]))
}

fn scale_k(ch: &mut Channel, prog: u64) -> u64 {
    kernel(ch, prog, "scale").expect("scale").0
}

fn buffer(ch: &mut Channel, size: u64) -> Result<u64, CallError> {
    ch.call(Opcode::ClCreateBuffer, [1, size, 0, 0, 0])
        .map(|r| r.vals[0])
}

fn launch(
    ch: &mut Channel,
    queue: u64,
    k: u64,
    global: u64,
    local: Option<u64>,
    args: &[KernelArg],
    event: u64,
) -> Result<(), CallError> {
    let hdr = NdRangeHeader {
        dims: 1,
        has_local: u32::from(local.is_some()),
        global: [global, 1, 1],
        local: [local.unwrap_or(0), 1, 1],
        nargs: args.len() as u32,
        ..Default::default()
    };
    let mut b = hdr.to_bytes().to_vec();
    for a in args {
        encode_arg(&mut b, a);
    }
    ch.call_with(Opcode::ClNdRange, [queue, k, 0, 0, event], &b, &mut [])
        .map(drop)
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|f| f.to_le_bytes()).collect()
}

fn from_floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn opencl_requests_run_on_the_host_platform_and_bad_ones_fail_alone() {
    if !have_opencl() {
        return;
    }
    let setup = Setup::new("opencl-wire", &[("ocl", 1, 4)]);
    let daemon = setup.start();
    let mut ch = claim(&setup.regions[0], wait_config());

    // Device info comes from the host's device, memory bounded by the quota.
    let mut v = [0u8; 8];
    ch.call_with(Opcode::ClGetDeviceInfo, [0x101F, 0, 0, 0, 0], &[], &mut v)
        .expect("CL_DEVICE_GLOBAL_MEM_SIZE");
    let global = u64::from_le_bytes(v);
    assert!(global > 0 && global <= fairgpu_tests::VM_QUOTA, "{global}");

    let q = ch
        .call(Opcode::ClCreateQueue, [2, 0, 0, 0, 0])
        .expect("a queue")
        .vals[0];
    let (prog, st) =
        build(&mut ch, 0, VADD.as_bytes(), "-D UNUSED=1 -I /guest/include").expect("build");
    assert_eq!(st, 0, "build failed: {}", log(&mut ch, prog));
    let (vadd, nargs) = kernel(&mut ch, prog, "vadd").expect("vadd");
    assert_eq!(nargs, 4);

    // Three buffers; a correct launch, checked against the CPU.
    let n = 100_003usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| (n - i) as f32 * 0.25).collect();
    let bytes = (n * 4) as u64;
    let (ba, bb, bc) = (
        buffer(&mut ch, bytes).unwrap(),
        buffer(&mut ch, bytes).unwrap(),
        buffer(&mut ch, bytes).unwrap(),
    );
    ch.send_bulk(Opcode::ClWriteBuffer, [q, ba, 0, 0, 0], 2, &floats(&a))
        .unwrap();
    ch.send_bulk(Opcode::ClWriteBuffer, [q, bb, 0, 0, 0], 2, &floats(&b))
        .unwrap();
    let args = [
        KernelArg::Mem(ba),
        KernelArg::Mem(bb),
        KernelArg::Mem(bc),
        KernelArg::Bytes((n as u32).to_le_bytes().to_vec()),
    ];
    launch(
        &mut ch,
        q,
        vadd,
        n.next_multiple_of(64) as u64,
        Some(64),
        &args,
        7,
    )
    .expect("launch");
    let mut out = vec![0u8; n * 4];
    ch.recv_bulk(Opcode::ClReadBuffer, [q, bc, 0, 0, 0], 2, &mut out)
        .unwrap();
    let c = from_floats(&out);
    for i in 0..n {
        assert_eq!(c[i], a[i] + b[i], "c[{i}]");
    }
    // The launch's event completed, with profiling times in order.
    let s = ch
        .call(Opcode::ClEventStatus, [7, 0, 0, 0, 0])
        .unwrap()
        .vals[0] as i64;
    assert_eq!(s, 0, "CL_COMPLETE");
    let t = ch
        .call(Opcode::ClEventProfiling, [7, 0, 0, 0, 0])
        .unwrap()
        .vals;
    assert!(t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3], "{t:?}");
    // __local memory and a by-value float.
    let (scale, _) = kernel(&mut ch, prog, "scale").unwrap();
    launch(
        &mut ch,
        q,
        scale,
        1024,
        Some(64),
        &[
            KernelArg::Mem(ba),
            KernelArg::Bytes(2f32.to_le_bytes().to_vec()),
            KernelArg::Local(256),
        ],
        0,
    )
    .unwrap();
    let mut out = vec![0u8; 4096];
    ch.recv_bulk(Opcode::ClReadBuffer, [q, ba, 0, 0, 0], 2, &mut out)
        .unwrap();
    assert_eq!(
        from_floats(&out),
        a[..1024].iter().map(|x| x * 2.0).collect::<Vec<_>>()
    );

    // Bad requests fail with the OpenCL error the call names.
    let forged = bc ^ (1 << 40);
    let bad = |ch: &mut Channel, op, args: [u64; 5], data: &[u8]| {
        code(ch.call_with(op, args, data, &mut []))
    };
    assert_eq!(
        bad(
            &mut ch,
            Opcode::ClWriteBuffer,
            [q, forged, 0, 0, 0],
            &[1; 8]
        ),
        CL_INVALID_MEM_OBJECT
    );
    assert_eq!(
        bad(
            &mut ch,
            Opcode::ClWriteBuffer,
            [q, bc, bytes - 4, 0, 0],
            &[1; 8]
        ),
        CL_INVALID_VALUE,
        "past the end"
    );
    assert_eq!(
        bad(
            &mut ch,
            Opcode::ClWriteBuffer,
            [q, bc, u64::MAX - 2, 0, 0],
            &[1; 8]
        ),
        CL_INVALID_VALUE,
        "offset wraps"
    );
    let mut big = vec![0u8; 16];
    assert_eq!(
        code(ch.call_with(
            Opcode::ClReadBuffer,
            [q, bc, bytes - 8, 0, 0],
            &[],
            &mut big
        )),
        CL_INVALID_VALUE
    );
    assert_eq!(
        bad(
            &mut ch,
            Opcode::ClCopyBuffer,
            [q, ba, bc, 0, 0],
            &encode_words(&[0, 8, bytes])
        ),
        CL_INVALID_VALUE
    );
    assert_eq!(
        bad(&mut ch, Opcode::ClFillBuffer, [q, bc, 0, 12, 0], &[0; 3]),
        CL_INVALID_VALUE,
        "pattern of 3"
    );
    assert_eq!(
        bad(&mut ch, Opcode::ClFinish, [q + 1, 0, 0, 0, 0], &[]),
        CL_INVALID_COMMAND_QUEUE
    );
    assert_eq!(
        code(buffer(&mut ch, 1 << 50)),
        CL_MEM_OBJECT_ALLOCATION_FAILURE,
        "beyond the quota"
    );
    assert_eq!(
        code(kernel(&mut ch, prog, "no_such_kernel")),
        CL_INVALID_KERNEL_NAME
    );
    // Argument lists that lie.
    let short = &args[..3];
    assert_eq!(
        code(launch(&mut ch, q, vadd, 64, None, short, 0)),
        CL_INVALID_KERNEL_ARGS
    );
    let mut hdr = NdRangeHeader {
        dims: 1,
        global: [64, 1, 1],
        nargs: u32::MAX,
        ..Default::default()
    }
    .to_bytes()
    .to_vec();
    hdr.extend_from_slice(&[0; 64]);
    assert_eq!(
        bad(&mut ch, Opcode::ClNdRange, [q, vadd, 0, 0, 0], &hdr),
        CL_INVALID_KERNEL_ARGS
    );
    let forged_args = [
        KernelArg::Mem(forged),
        KernelArg::Mem(bb),
        KernelArg::Mem(bc),
        KernelArg::Bytes(vec![0; 4]),
    ];
    assert_eq!(
        code(launch(&mut ch, q, vadd, 64, None, &forged_args, 0)),
        CL_INVALID_MEM_OBJECT
    );
    // Bytes where a buffer pointer goes: a made-up device address (a
    // platform would dereference it; PoCL crashes).
    let made_up = [
        KernelArg::Bytes(0xdead_beef_u64.to_le_bytes().to_vec()),
        KernelArg::Mem(bb),
        KernelArg::Mem(bc),
        KernelArg::Bytes(vec![0; 4]),
    ];
    assert_eq!(
        code(launch(&mut ch, q, vadd, 64, None, &made_up, 0)),
        CL_INVALID_ARG_VALUE
    );
    let wrong_local = [
        KernelArg::Mem(ba),
        KernelArg::Bytes(vec![0; 4]),
        KernelArg::Bytes(vec![0; 8]),
    ];
    let scale = scale_k(&mut ch, prog);
    assert_eq!(
        code(launch(&mut ch, q, scale, 64, Some(64), &wrong_local, 0)),
        CL_INVALID_ARG_VALUE
    );
    let mut truncated = NdRangeHeader {
        dims: 1,
        global: [64, 1, 1],
        nargs: 4,
        ..Default::default()
    }
    .to_bytes()
    .to_vec();
    encode_arg(&mut truncated, &KernelArg::Bytes(vec![1; 64]));
    truncated.truncate(truncated.len() - 8);
    assert_eq!(
        bad(&mut ch, Opcode::ClNdRange, [q, vadd, 0, 0, 0], &truncated),
        CL_INVALID_ARG_VALUE
    );
    assert_eq!(
        code(launch(&mut ch, q, vadd, 0, None, &args, 0)),
        CL_INVALID_GLOBAL_WORK_SIZE
    );
    // Event ids: a live one cannot be reused; unknown ones are refused.
    assert_eq!(
        code(launch(&mut ch, q, vadd, 64, None, &args, 7)),
        CL_INVALID_EVENT
    );
    assert_eq!(
        bad(
            &mut ch,
            Opcode::ClWaitList,
            [q, 0, 0, 0, 0],
            &encode_words(&[7, 99])
        ),
        CL_INVALID_EVENT_WAIT_LIST
    );
    assert_eq!(
        bad(
            &mut ch,
            Opcode::ClWaitEvents,
            [0; 5],
            &vec![0; 8 * (MAX_WAIT_LIST + 1)]
        ),
        CL_INVALID_VALUE
    );
    assert_eq!(
        bad(&mut ch, Opcode::ClReleaseEvent, [7, 0, 0, 0, 0], &[]),
        0
    );
    assert_eq!(
        bad(&mut ch, Opcode::ClEventStatus, [7, 0, 0, 0, 0], &[]),
        CL_INVALID_EVENT
    );

    // The host's files stay out of reach of a program's compilation.
    let (p, st) = build(
        &mut ch,
        0,
        b"#include \"/etc/passwd\"\n__kernel void k() {}\n",
        "",
    )
    .unwrap();
    assert_eq!(st, CL_BUILD_PROGRAM_FAILURE);
    let l = log(&mut ch, p);
    assert!(l.contains("names a file") && !l.contains("root:"), "{l}");
    assert_eq!(code(kernel(&mut ch, p, "k")), CL_INVALID_PROGRAM_EXECUTABLE);
    assert_eq!(
        code(build(
            &mut ch,
            0,
            b"__kernel void k() {}",
            "-include /etc/passwd"
        )),
        CL_INVALID_BUILD_OPTIONS
    );
    assert_eq!(
        code(build(
            &mut ch,
            0,
            b"__kernel void k() {}",
            "-Xclang -load -Xclang /tmp/x.so"
        )),
        CL_INVALID_BUILD_OPTIONS
    );
    // A program that does not compile: its status and the compiler's log.
    let (p, st) = build(
        &mut ch,
        0,
        b"__kernel void k() { undeclared_thing = 1; }",
        "",
    )
    .unwrap();
    assert_eq!(st, CL_BUILD_PROGRAM_FAILURE);
    assert!(
        log(&mut ch, p).contains("undeclared_thing"),
        "{}",
        log(&mut ch, p)
    );
    // A binary round trip.
    let mut bin = vec![0u8; 0];
    loop {
        let mut chunk = vec![0u8; 256 * 1024];
        let r = ch
            .call_with(
                Opcode::ClProgramBinary,
                [prog, bin.len() as u64, 0, 0, 0],
                &[],
                &mut chunk,
            )
            .unwrap();
        bin.extend_from_slice(&chunk[..r.data_len as usize]);
        if bin.len() as u64 >= r.vals[0] || r.data_len == 0 {
            break;
        }
    }
    assert!(!bin.is_empty());
    let (p2, st) = build(&mut ch, 1, &bin, "").unwrap();
    assert_eq!(st, 0);
    kernel(&mut ch, p2, "vadd").expect("vadd from the binary");

    // After all that, the channel still computes, and the daemon lives.
    launch(&mut ch, q, vadd, n as u64, None, &args, 0).expect("launch");
    ch.call(Opcode::ClFinish, [q, 0, 0, 0, 0]).expect("finish");
    let mut out = vec![0u8; 64];
    ch.recv_bulk(Opcode::ClReadBuffer, [q, bc, 0, 0, 0], 2, &mut out)
        .unwrap();
    // `scale` doubled the first 1024 elements of `a` on the device.
    assert_eq!(
        from_floats(&out),
        (0..16).map(|i| 2.0 * a[i] + b[i]).collect::<Vec<_>>()
    );
    let used = vm(&status(&daemon), "ocl").mem_used;
    assert_eq!(used, 3 * bytes, "buffers count against the quota");
    drop(ch);
    wait_for_status(&daemon, "the channel's buffers to be freed", |s| {
        let v = vm(s, "ocl");
        v.channels_used == 0 && v.mem_used == 0
    });
    let sched = vm(&status(&daemon), "ocl")
        .sched
        .clone()
        .expect("the default policy schedules");
    assert!(
        sched.charged_ns > 0,
        "OpenCL work is charged to the VM: {sched:?}"
    );
}

const IMAGES: &str = r#"
__kernel void pick(__read_only image2d_t img, sampler_t smp, __global uint4 *out, int w) {
    int x = get_global_id(0), y = get_global_id(1);
    out[y * w + x] = read_imageui(img, smp, (int2)(x, y));
}
"#;

#[test]
fn images_and_samplers_at_the_wire() {
    if !have_opencl() {
        return;
    }
    let setup = Setup::new("opencl-images", &[("img", 1, 2)]);
    let _daemon = setup.start();
    let mut ch = claim(&setup.regions[0], wait_config());
    let mut v = [0u8; 4];
    ch.call_with(Opcode::ClGetDeviceInfo, [0x1016, 0, 0, 0, 0], &[], &mut v)
        .expect("CL_DEVICE_IMAGE_SUPPORT");
    if u32::from_le_bytes(v) == 0 {
        eprintln!("SKIPPED: the host's OpenCL device has no images");
        return;
    }
    let q = ch.call(Opcode::ClCreateQueue, [0; 5]).unwrap().vals[0];
    // CL_RGBA, CL_UNSIGNED_INT8: 16 x 8 pixels of 4 bytes.
    let (w, h) = (16u64, 8u64);
    let desc = ImageDesc {
        order: 0x10B5,
        channel_type: 0x10DA,
        image_type: IMAGE2D,
        width: w,
        height: h,
        ..Default::default()
    };
    let r = ch
        .call_with(
            Opcode::ClCreateImage,
            [1, 0, 0, 0, 0],
            &desc.to_bytes(),
            &mut [],
        )
        .expect("an image");
    let (img, elem) = (r.vals[0], r.vals[1]);
    assert_eq!(elem, 4);
    let pixels: Vec<u8> = (0..w * h * 4).map(|i| (i * 7 % 251) as u8).collect();
    let whole = ImageRegion {
        origin: [0; 3],
        region: [w, h, 1],
    };
    let mut msg = whole.to_bytes();
    msg.extend_from_slice(&pixels);
    ch.call_with(Opcode::ClWriteImage, [q, img, 0, 0, 0], &msg, &mut [])
        .expect("write");
    let mut back = vec![0u8; pixels.len()];
    ch.call_with(
        Opcode::ClReadImage,
        [q, img, 0, 0, 0],
        &whole.to_bytes(),
        &mut back,
    )
    .expect("read");
    assert_eq!(back, pixels);
    // A sub-box: rows 2..4, columns 3..7.
    let sub = ImageRegion {
        origin: [3, 2, 0],
        region: [4, 2, 1],
    };
    let mut part = vec![0u8; 4 * 2 * 4];
    ch.call_with(
        Opcode::ClReadImage,
        [q, img, 0, 0, 0],
        &sub.to_bytes(),
        &mut part,
    )
    .unwrap();
    for y in 0..2usize {
        let row = ((2 + y) * w as usize + 3) * 4;
        assert_eq!(
            &part[y * 16..y * 16 + 16],
            &pixels[row..row + 16],
            "row {y}"
        );
    }

    // A kernel reads it through a sampler into a buffer.
    let (prog, st) = build(&mut ch, 0, IMAGES.as_bytes(), "").unwrap();
    assert_eq!(st, 0, "{}", log(&mut ch, prog));
    let (pick, _) = kernel(&mut ch, prog, "pick").unwrap();
    // CLK_ADDRESS_CLAMP_TO_EDGE, CLK_FILTER_NEAREST, unnormalized.
    let smp = ch
        .call(Opcode::ClCreateSampler, [0, 0x1131, 0x1140, 0, 0])
        .expect("a sampler")
        .vals[0];
    let out = buffer(&mut ch, w * h * 16).unwrap();
    let geometry = NdRangeHeader {
        dims: 2,
        global: [w, h, 1],
        nargs: 4,
        ..Default::default()
    };
    let send = |ch: &mut Channel, args: &[KernelArg]| {
        let mut b = geometry.to_bytes().to_vec();
        for a in args {
            encode_arg(&mut b, a);
        }
        code(ch.call_with(Opcode::ClNdRange, [q, pick, 0, 0, 0], &b, &mut []))
    };
    let wi = KernelArg::Bytes((w as i32).to_le_bytes().to_vec());
    let good = [
        KernelArg::Mem(img),
        KernelArg::Sampler(smp),
        KernelArg::Mem(out),
        wi.clone(),
    ];
    assert_eq!(send(&mut ch, &good), 0);
    let mut got = vec![0u8; (w * h * 16) as usize];
    ch.recv_bulk(Opcode::ClReadBuffer, [q, out, 0, 0, 0], 2, &mut got)
        .unwrap();
    for (i, px) in got.chunks_exact(16).enumerate() {
        let want: Vec<u8> = pixels[i * 4..i * 4 + 4].to_vec();
        let have: Vec<u8> = px.chunks_exact(4).map(|c| c[0]).collect();
        assert_eq!(have, want, "pixel {i}");
    }

    // Bad requests fail alone.
    let past = ImageRegion {
        origin: [10, 0, 0],
        region: [8, 1, 1],
    };
    let mut m = past.to_bytes();
    m.extend_from_slice(&[0; 32]);
    assert_eq!(
        code(ch.call_with(Opcode::ClWriteImage, [q, img, 0, 0, 0], &m, &mut [])),
        CL_INVALID_VALUE,
        "past the width"
    );
    let mut short = whole.to_bytes();
    short.extend_from_slice(&pixels[..pixels.len() - 4]);
    assert_eq!(
        code(ch.call_with(Opcode::ClWriteImage, [q, img, 0, 0, 0], &short, &mut [])),
        CL_INVALID_VALUE,
        "too few bytes"
    );
    assert_eq!(
        code(ch.call_with(Opcode::ClWriteBuffer, [q, img, 0, 0, 0], &[0; 4], &mut [])),
        CL_INVALID_MEM_OBJECT,
        "an image is no buffer"
    );
    assert_eq!(
        code(ch.call_with(Opcode::ClWriteImage, [q, out, 0, 0, 0], &msg, &mut [])),
        CL_INVALID_MEM_OBJECT,
        "a buffer is no image"
    );
    let swapped = [
        KernelArg::Mem(out),
        KernelArg::Sampler(smp),
        KernelArg::Mem(img),
        wi.clone(),
    ];
    assert_eq!(send(&mut ch, &swapped), CL_INVALID_ARG_VALUE);
    let no_sampler = [
        KernelArg::Mem(img),
        KernelArg::Bytes(vec![0; 8]),
        KernelArg::Mem(out),
        wi.clone(),
    ];
    assert_eq!(send(&mut ch, &no_sampler), CL_INVALID_ARG_VALUE);
    let forged = [
        KernelArg::Mem(img),
        KernelArg::Sampler(smp ^ (1 << 40)),
        KernelArg::Mem(out),
        wi,
    ];
    assert_eq!(send(&mut ch, &forged), CL_INVALID_SAMPLER);
    let huge = ImageDesc {
        width: 1 << 40,
        ..desc
    };
    assert_ne!(
        code(ch.call_with(
            Opcode::ClCreateImage,
            [1, 0, 0, 0, 0],
            &huge.to_bytes(),
            &mut []
        )),
        0
    );
    let bad_type = ImageDesc {
        image_type: 0x10F6,
        ..desc
    };
    assert_eq!(
        code(ch.call_with(
            Opcode::ClCreateImage,
            [1, 0, 0, 0, 0],
            &bad_type.to_bytes(),
            &mut []
        )),
        CL_INVALID_IMAGE_DESCRIPTOR
    );
    // Still working.
    ch.call_with(
        Opcode::ClReadImage,
        [q, img, 0, 0, 0],
        &whole.to_bytes(),
        &mut back,
    )
    .unwrap();
    assert_eq!(back, pixels);
}

/// The C programs of `tests/opencl/`, built once per run.
fn programs() -> &'static [PathBuf] {
    static BUILT: OnceLock<Result<Vec<PathBuf>, String>> = OnceLock::new();
    let r = BUILT.get_or_init(|| {
        let dir = profile_dir().join("opencl-programs");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("opencl/build.sh");
        let out = run_command(Command::new("bash").arg(&script).arg(&dir), RUN_TIMEOUT);
        if !out.status.success() {
            return Err(format!(
                "tests/opencl/build.sh failed ({}):\n{}{}",
                out.status,
                text(&out.stdout),
                text(&out.stderr)
            ));
        }
        let mut list: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| e.to_string())?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file() && p.extension().is_none())
            .collect();
        list.sort();
        Ok(list)
    });
    match r {
        Ok(l) => l,
        Err(e) => panic!("{e}"),
    }
}

/// A directory with `fairgpu.icd` naming the built ICD, for `OCL_ICD_VENDORS`.
fn icd_dir(tmp: &TempDir) -> PathBuf {
    let lib = profile_dir().join("libfairgpu_opencl.so");
    assert!(
        lib.is_file(),
        "{} not found: run `cargo build -p fairgpu-guest-cl` first",
        lib.display()
    );
    let dir = tmp.join("vendors");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fairgpu.icd"), format!("{}\n", lib.display())).unwrap();
    dir
}

fn run_guest(cmd: &mut Command, region: &Path, vendors: &Path) -> (bool, String) {
    let out = run_command(
        cmd.env("OCL_ICD_VENDORS", vendors)
            .env("OPENCL_PLATFORM", "fairgpu")
            .env("FAIRGPU_REGION", region),
        RUN_TIMEOUT,
    );
    let stdout = text(&out.stdout);
    (
        out.status.success(),
        format!(
            "{} ({})\n--- stdout ---\n{stdout}--- stderr ---\n{}",
            "",
            out.status,
            text(&out.stderr)
        ),
    )
}

#[test]
fn c_programs_pass_through_the_icd() {
    if !have_opencl() {
        return;
    }
    let progs = programs();
    assert!(progs.len() >= 7, "tests/opencl/build.sh built {progs:?}");
    let setup = Setup::new("opencl-programs", &[("ocl", 1, 4)]);
    let daemon = setup.start();
    let tmp = TempDir::new("opencl-icd");
    let vendors = icd_dir(&tmp);
    for p in progs {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let (ok, report) = run_guest(&mut Command::new(p), &setup.regions[0], &vendors);
        assert!(
            ok && report.contains(&format!("PASS {name}")),
            "{name} did not pass: {report}\n--- daemon ---\n{}",
            daemon.log()
        );
        wait_for_status(
            &daemon,
            &format!("{name}'s channel and buffers to be freed"),
            |s| {
                let v = vm(s, "ocl");
                v.channels_used == 0 && v.mem_used == 0
            },
        );
    }
}

/// PyOpenCL from PyPI (`FAIRGPU_PYOPENCL_PATH`, installed by
/// `scripts/test.sh`): contexts, array arithmetic, custom and elementwise
/// kernels, reductions, copies, every result checked with NumPy.
#[test]
fn pyopencl_runs_through_the_icd() {
    if !have_opencl() {
        return;
    }
    let path = std::env::var("FAIRGPU_PYOPENCL_PATH").unwrap_or_default();
    if path.is_empty() || !Path::new(&path).join("pyopencl").is_dir() {
        let why = format!("PyOpenCL not installed in FAIRGPU_PYOPENCL_PATH ({path:?}; scripts/test.sh installs it)");
        if std::env::var("FAIRGPU_REQUIRE_PYOPENCL").is_ok_and(|v| v == "1") {
            panic!("{why}");
        }
        eprintln!("SKIPPED: {why}");
        return;
    }
    let setup = Setup::new("pyopencl", &[("pyocl", 1, 4)]);
    let daemon = setup.start();
    let tmp = TempDir::new("pyopencl");
    let vendors = icd_dir(&tmp);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("opencl/pyopencl_basic.py");
    let (ok, report) = run_guest(
        Command::new("python3")
            .arg(&script)
            .env("PYTHONPATH", &path)
            // PyOpenCL's compiler cache, private to this test.
            .env("PYOPENCL_CACHE_DIR", tmp.join("cache"))
            .env("XDG_CACHE_HOME", tmp.join("xdg")),
        &setup.regions[0],
        &vendors,
    );
    assert!(
        ok && report.contains("PASS"),
        "pyopencl_basic.py did not pass: {report}\n--- daemon ---\n{}",
        daemon.log()
    );
    wait_for_status(&daemon, "PyOpenCL's channel and buffers to be freed", |s| {
        let v = vm(s, "pyocl");
        v.channels_used == 0 && v.mem_used == 0
    });
}

/// OpenCL work is charged to its VM under each accounting mode: `sampled`
/// (synchronising with `clFinish`), `every`, and `events` (markers on the
/// request's queue, timed by their profiling completion times).
#[test]
fn opencl_work_is_charged_under_every_accounting_mode() {
    if !have_opencl() {
        return;
    }
    let program = programs()
        .iter()
        .find(|p| p.ends_with("reduction"))
        .expect("the reduction program");
    for mode in ["sampled", "every", "events"] {
        let setup = Setup::new(&format!("opencl-accounting-{mode}"), &[("acct", 1, 2)]);
        let text = std::fs::read_to_string(&setup.config).unwrap();
        std::fs::write(
            &setup.config,
            text.replacen(
                "[daemon]\n",
                &format!("[daemon]\naccounting = {mode:?}\n"),
                1,
            ),
        )
        .unwrap();
        let daemon = setup.start();
        let tmp = TempDir::new("opencl-accounting");
        let vendors = icd_dir(&tmp);
        let (ok, report) = run_guest(&mut Command::new(program), &setup.regions[0], &vendors);
        assert!(
            ok,
            "reduction under {mode} accounting: {report}\n{}",
            daemon.log()
        );
        wait_for_status(&daemon, "the program's work to be charged", |s| {
            let v = vm(s, "acct");
            v.channels_used == 0 && v.sched.as_ref().is_some_and(|s| s.charged_ns > 0)
        });
        assert!(
            vm(&wait_for_published(&daemon, "acct"), "acct").gpu_time_ns > 0,
            "{mode}: the VM's device time counts its OpenCL commands"
        );
    }
}
