//! The CUDA driver API end to end: guests (this process and child
//! processes) call through the typed client [`Cuda`] into a `fairgpu serve`
//! daemon whose workers execute on SimGpu. Two VMs per daemon, 64 MiB
//! quotas and 256 KiB arenas, so that copies span many chunks.
//!
//! SimGpu keeps device memory in host RAM with exact copy semantics, so
//! every copy and memset is checked byte for byte against a model kept
//! here. Kernels have no functional effect; `fairgpu_spin(ns)` occupies
//! `ns` of modelled device time, so elapsed times read through events are
//! exact model arithmetic, not wall-clock measurements.

use std::io::BufRead;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fairgpu_executor::attr;
use fairgpu_frontend::cuda::{Cuda, HostRows};
use fairgpu_frontend::CallError;
use fairgpu_protocol::array::{
    ArrayDesc, Copy3D, CopySide, ResourceDesc, TextureDesc, MEM_ARRAY, MEM_DEVICE, MEM_HOST,
    RESOURCE_ARRAY, RESOURCE_LINEAR,
};
use fairgpu_protocol::cuda::{LaunchOptions, ParamInfo};
use fairgpu_protocol::{Opcode, Status};
use fairgpu_tests::{
    assert_bytes_eq, child_setup, claim, fairgpu_bin, is_child, pattern, run_command, status, vm,
    wait_config, wait_for_published, wait_for_status, DaemonProcess, GuestChild, Setup, VM_ARENA,
    VM_QUOTA,
};

/// The device the daemons of this file model.
const SIM_NAME: &str = "cuda-test SimGpu";
/// Its multiprocessor count.
const SM_COUNT: i32 = 24;
/// fairgpu's own kernels: `fairgpu_axpy` (SimGpu executes it) and
/// `fairgpu_spin(ns)` (timing-only, modelled as `ns` of device time).
const KERNELS_PTX: &str = include_str!("../../benches/kernels/fairgpu.ptx");
/// One millisecond of device time, in ns.
const MS: u64 = 1_000_000;
/// Bound on a child guest's start-up and on its work.
const CHILD_TIMEOUT: Duration = Duration::from_secs(30);
/// A handle no channel ever issued (index 0xdeadbeef - 1, generation 0).
const FORGED: u64 = 0xdead_beef;
/// The launch geometry of every kernel here (SimGpu ignores it).
const ONE: [u32; 3] = [1, 1, 1];

fn refused(s: Status) -> CallError {
    CallError::Cuda(s)
}

fn deferred(s: Status) -> CallError {
    CallError::Deferred(s)
}

/// A daemon with two VMs, `vm1` and `vm2`, of three channels each. Fields
/// drop in order: the daemon stops before its temp dir goes.
struct Rig {
    d: DaemonProcess,
    setup: Setup,
}

impl Rig {
    fn start(test: &str) -> Rig {
        Self::start_with(test, "")
    }

    /// [`Rig::start`] with `daemon` added to the `[daemon]` table.
    fn start_with(test: &str, daemon: &str) -> Rig {
        // 1 GiB of device memory, more than any VM's quota.
        let sim = format!(
            "memory_bytes = {}\nname = {SIM_NAME:?}\nsm_count = {SM_COUNT}\n",
            1u64 << 30
        );
        let setup =
            Setup::with_sim(test, &sim, &[("vm1", 1, 3), ("vm2", 1, 3)]).with_daemon(daemon);
        Rig {
            d: setup.start(),
            setup,
        }
    }

    /// VM `i`'s region (0: vm1, 1: vm2).
    fn region(&self, i: usize) -> &Path {
        &self.setup.regions[i]
    }

    /// A new guest of VM `i` on a channel of its own.
    fn cuda(&self, i: usize) -> Cuda {
        Cuda::new(claim(self.region(i), wait_config()))
    }
}

/// `fairgpu_spin` of `module`, with its layout checked.
fn spin_kernel(cu: &mut Cuda, module: u64) -> fairgpu_frontend::cuda::Kernel {
    let k = cu.module_get_function(module, "fairgpu_spin").unwrap();
    assert_eq!(k.params, [ParamInfo { offset: 0, size: 8 }]);
    k
}

/// Queues `fairgpu_spin(ns)` on `stream`.
fn spin(cu: &mut Cuda, kernel: u64, ns: u64, stream: u64) {
    cu.launch(kernel, ONE, ONE, 0, stream, &ns.to_le_bytes())
        .unwrap();
}

/// Panics unless the call failed with `want` itself (not deferred).
#[track_caller]
fn assert_refused<T: std::fmt::Debug>(r: Result<T, CallError>, want: Status) {
    match r {
        Err(CallError::Cuda(s)) if s == want => {}
        other => panic!("expected Err(Cuda({want:?})), got {other:?}"),
    }
}

/// Reads `len` bytes at `ptr` back.
fn read(cu: &mut Cuda, ptr: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    cu.memcpy_dtoh(&mut out, ptr, 0)
        .unwrap_or_else(|e| panic!("reading {len} bytes at {ptr:#x}: {e}"));
    out
}

/// Checks that the channel still serves: a fresh pattern round-trips
/// through `scratch` (at least 64 bytes) and no error is pending.
#[track_caller]
fn still_works(cu: &mut Cuda, scratch: u64, seed: u64) {
    let data = pattern(64, seed);
    cu.memcpy_htod(scratch, &data)
        .expect("a copy after an error");
    assert_bytes_eq(&read(cu, scratch, 64), &data, "a copy after an error");
    assert_eq!(cu.ctx_synchronize(), Ok(()), "no error left pending");
}

#[test]
fn device_queries_describe_the_configured_device_bounded_by_the_vm_quota() {
    let rig = Rig::start("cuda_device_queries");
    let mut cu = rig.cuda(0);
    assert_eq!(cu.device_count(), Ok(1));
    assert_eq!(cu.device_name(0).unwrap(), SIM_NAME);
    assert_eq!(
        cu.device_attribute(attr::COMPUTE_CAPABILITY_MAJOR, 0),
        Ok(9)
    );
    assert_eq!(
        cu.device_attribute(attr::COMPUTE_CAPABILITY_MINOR, 0),
        Ok(0)
    );
    assert_eq!(
        cu.device_attribute(attr::MULTIPROCESSOR_COUNT, 0),
        Ok(SM_COUNT)
    );
    assert_eq!(
        cu.device_attribute(attr::MAX_THREADS_PER_BLOCK, 0),
        Ok(1024)
    );
    assert_eq!(
        cu.device_attribute(9999, 0),
        Err(refused(Status::INVALID_VALUE)),
        "an attribute the device does not report"
    );
    // 1 GiB of device memory, 64 MiB of quota: the VM sees the quota.
    assert_eq!(cu.device_total_mem(0), Ok(VM_QUOTA));
    assert!(cu.driver_version().unwrap() > 0);
    let uuid = cu.device_uuid(0).unwrap();
    assert_ne!(uuid, [0; 16]);
    assert_eq!(cu.device_uuid(0), Ok(uuid), "the uuid is stable");
    // Ordinal 1 (and -1) name no device.
    for dev in [1, -1] {
        let bad = Status::INVALID_DEVICE;
        assert_refused(cu.device_name(dev), bad);
        assert_refused(cu.device_total_mem(dev), bad);
        assert_refused(cu.device_uuid(dev), bad);
        assert_refused(cu.device_attribute(attr::MULTIPROCESSOR_COUNT, dev), bad);
    }

    // Free memory is the quota minus what the VM's guests allocated.
    assert_eq!(cu.mem_get_info(), Ok((VM_QUOTA, VM_QUOTA)));
    let sizes = [1 << 20, 3, (5 << 20) + 1];
    let ptrs: Vec<u64> = sizes.iter().map(|&n| cu.mem_alloc(n).unwrap()).collect();
    let used: u64 = sizes.iter().sum();
    assert_eq!(cu.mem_get_info(), Ok((VM_QUOTA - used, VM_QUOTA)));
    // Another guest of the same VM sees the same quota; one of the other
    // VM sees its own, untouched, and the same device.
    let mut sibling = rig.cuda(0);
    assert_eq!(sibling.mem_get_info(), Ok((VM_QUOTA - used, VM_QUOTA)));
    let mut other = rig.cuda(1);
    assert_eq!(other.mem_get_info(), Ok((VM_QUOTA, VM_QUOTA)));
    assert_eq!(other.device_uuid(0), Ok(uuid));
    assert_eq!(other.device_name(0).unwrap(), SIM_NAME);
    cu.mem_free(ptrs[1]).unwrap();
    assert_eq!(cu.mem_get_info(), Ok((VM_QUOTA - used + 3, VM_QUOTA)));
    drop(sibling);
    drop(other);

    // A device smaller than the quota bounds what the VM sees.
    let small = Setup::with_sim(
        "cuda_device_smaller_than_quota",
        "memory_bytes = 50331648\nname = \"small SimGpu\"\n",
        &[("small", 1, 1)],
    );
    let d = small.start();
    let mut cu = Cuda::new(claim(&small.regions[0], wait_config()));
    assert_eq!(cu.device_total_mem(0), Ok(48 << 20));
    assert_eq!(cu.mem_get_info(), Ok((48 << 20, 48 << 20)));
    let p = cu.mem_alloc(48 << 20).unwrap();
    assert_eq!(cu.mem_get_info(), Ok((0, 48 << 20)));
    assert_eq!(cu.mem_alloc(1), Err(refused(Status::OUT_OF_MEMORY)));
    cu.mem_free(p).unwrap();
    drop(cu);
    drop(d);
}

/// A guest's device memory and the bytes it should hold.
struct Mirror {
    ptr: u64,
    bytes: Vec<u8>,
}

impl Mirror {
    /// Allocates `len` bytes and fills them with a pattern.
    fn new(cu: &mut Cuda, len: usize, seed: u64) -> Mirror {
        let ptr = cu.mem_alloc(len as u64).unwrap();
        let bytes = pattern(len, seed);
        cu.memcpy_htod(ptr, &bytes).unwrap();
        Mirror { ptr, bytes }
    }

    fn write(&mut self, cu: &mut Cuda, off: usize, data: &[u8]) {
        cu.memcpy_htod(self.ptr + off as u64, data)
            .unwrap_or_else(|e| panic!("writing {} bytes at +{off}: {e}", data.len()));
        self.bytes[off..off + data.len()].copy_from_slice(data);
    }

    /// Checks `[from, to)` against the model.
    #[track_caller]
    fn check(&self, cu: &mut Cuda, from: usize, to: usize, what: &str) {
        let got = read(cu, self.ptr + from as u64, to - from);
        assert_bytes_eq(&got, &self.bytes[from..to], what);
    }

    /// Checks everything.
    #[track_caller]
    fn check_all(&self, cu: &mut Cuda, what: &str) {
        self.check(cu, 0, self.bytes.len(), what);
    }
}

#[test]
fn copies_are_byte_exact_in_every_direction_at_odd_offsets_and_sizes() {
    let rig = Rig::start("cuda_copies");
    let mut cu = rig.cuda(0);
    // The frontend moves bulk data in quarter-arena chunks.
    let arena = cu.channel().max_slice() as usize;
    assert_eq!(arena as u64, VM_ARENA);
    let chunk = arena / 4;

    let mut big = Mirror::new(&mut cu, 8 << 20, 1);
    let mut sizes = vec![1, 3, 4095, 65537, 3 * chunk + 1, (3 << 20) + 5];
    for boundary in [chunk, arena] {
        sizes.extend([boundary - 1, boundary, boundary + 1]);
    }
    sizes.sort_unstable();
    sizes.dedup();
    let mut seed = 100;
    for &n in &sizes {
        // At the base, inside the allocation at odd offsets, and ending
        // exactly at its end.
        for off in [0, 1, 4097, big.bytes.len() - n] {
            seed += 1;
            big.write(&mut cu, off, &pattern(n, seed));
            let (from, to) = (off.saturating_sub(1), (off + n + 1).min(big.bytes.len()));
            big.check(&mut cu, off, off + n, &format!("{n} bytes at +{off}"));
            big.check(&mut cu, from, to, &format!("around {n} bytes at +{off}"));
        }
    }
    big.check_all(&mut cu, "the whole allocation after every copy");

    // Device to device: between allocations, within one, overlapping both
    // ways. SimGpu gives overlapping copies memmove semantics (the CUDA
    // driver leaves them undefined).
    let mut small = Mirror::new(&mut cu, (1 << 20) + 3, 2);
    let dtod = |cu: &mut Cuda, dst: &mut Mirror, doff: usize, src: &Mirror, soff: usize, n| {
        cu.memcpy_dtod(dst.ptr + doff as u64, src.ptr + soff as u64, n as u64)
            .unwrap_or_else(|e| panic!("dtod {n} bytes +{soff} -> +{doff}: {e}"));
        let data = src.bytes[soff..soff + n].to_vec();
        dst.bytes[doff..doff + n].copy_from_slice(&data);
    };
    dtod(&mut cu, &mut small, 5, &big, 4097, 300_001);
    let end = small.bytes.len();
    dtod(&mut cu, &mut small, end - 65537, &big, 1, 65537);
    small.check_all(&mut cu, "dtod between allocations");
    let mut within = |cu: &mut Cuda, doff: usize, soff: usize, n: usize| {
        cu.memcpy_dtod(big.ptr + doff as u64, big.ptr + soff as u64, n as u64)
            .unwrap_or_else(|e| panic!("dtod {n} bytes +{soff} -> +{doff} within: {e}"));
        big.bytes.copy_within(soff..soff + n, doff);
    };
    within(&mut cu, (6 << 20) + 1, 17, 100_003);
    within(&mut cu, 1001, 1000, 200_000); // overlapping, forwards
    within(&mut cu, 3000, 3333, 150_000); // overlapping, backwards
    big.check_all(&mut cu, "dtod within one allocation");

    // Asynchronous copies on a stream, visible after synchronizing it.
    let s = cu.stream_create(0).unwrap();
    let mut data = pattern((1 << 20) + 7, 3);
    cu.memcpy_htod_async(big.ptr + 3, &data, s).unwrap();
    big.bytes[3..3 + data.len()].copy_from_slice(&data);
    data.fill(0); // the source may be reused at once
    cu.memcpy_dtod_async(small.ptr + 1, big.ptr + 3, 4099, s)
        .unwrap();
    let copied = big.bytes[3..3 + 4099].to_vec();
    small.bytes[1..1 + 4099].copy_from_slice(&copied);
    cu.memset_async(big.ptr + 4, 0x5a, 1, 9, s).unwrap();
    big.bytes[4..13].fill(0x5a);
    cu.stream_synchronize(s).unwrap();
    let mut back = vec![0u8; big.bytes.len()];
    cu.memcpy_dtoh(&mut back, big.ptr, s).unwrap();
    assert_bytes_eq(&back, &big.bytes, "async copies on a stream");
    small.check_all(&mut cu, "async dtod on a stream");

    // Memsets of each element size, the last ending at the allocation's
    // end; a misaligned or overlong one is refused and writes nothing.
    let mut m = Mirror::new(&mut cu, 4100, 4);
    cu.memset(m.ptr + 1, 0xa5, 1, 4099).unwrap();
    m.bytes[1..].fill(0xa5);
    m.check_all(&mut cu, "memset D8 to the end");
    cu.memset(m.ptr + 6, 0xbeef, 2, 2047).unwrap();
    for e in m.bytes[6..].chunks_exact_mut(2) {
        e.copy_from_slice(&0xbeef_u16.to_le_bytes());
    }
    m.check_all(&mut cu, "memset D16 to the end");
    for (at, v, n) in [(8, 0xdead_beef_u32, 3), (4080, 0x0102_0304, 5)] {
        cu.memset(m.ptr + at as u64, v, 4, n as u64).unwrap();
        for e in m.bytes[at..at + 4 * n].chunks_exact_mut(4) {
            e.copy_from_slice(&v.to_le_bytes());
        }
    }
    m.check_all(&mut cu, "memset D32");
    let bad = Err(refused(Status::INVALID_VALUE));
    assert_eq!(cu.memset(m.ptr + 2, 7, 4, 1), bad, "misaligned D32");
    assert_eq!(cu.memset(m.ptr + 1, 7, 2, 1), bad, "misaligned D16");
    assert_eq!(
        cu.memset(m.ptr + 4084, 7, 4, 5),
        bad,
        "D32 one past the end"
    );
    assert_eq!(
        cu.memset(m.ptr + 4098, 7, 2, 2),
        bad,
        "D16 one past the end"
    );
    assert_eq!(cu.memset(m.ptr, 7, 1, 4101), bad, "D8 one past the end");
    m.check_all(&mut cu, "refused memsets wrote nothing");
}

/// Child side of the isolation checks: a guest of the other VM copying
/// byte-exact patterns in a loop until told to stop, then reporting how
/// many round trips it made.
#[test]
fn child_copier() {
    if !is_child("copier") {
        return;
    }
    let (region, seed) = child_setup();
    let mut cu = Cuda::new(fairgpu_frontend::Channel::claim(region, wait_config()).unwrap());
    let len = 1 << 20;
    let ptr = cu.mem_alloc(len as u64).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            // Any line, or the end of input (the parent died), stops us.
            let _ = std::io::stdin().lock().lines().next();
            stop.store(true, Ordering::Relaxed);
        });
    }
    let mut n = 0u64;
    let start = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) && start.elapsed() < CHILD_TIMEOUT {
        let size = 1 + (n as usize * 7919) % (200 << 10);
        let off = (n as usize * 131) % (len - size);
        let data = pattern(size, seed + n);
        cu.memcpy_htod(ptr + off as u64, &data).unwrap();
        let mut back = vec![0u8; size];
        cu.memcpy_dtoh(&mut back, ptr + off as u64, 0).unwrap();
        assert_bytes_eq(&back, &data, &format!("copier round trip {n}"));
        n += 1;
        if n == 1 {
            println!("copier ready");
        }
    }
    cu.ctx_synchronize().unwrap();
    println!("copier done {n}");
}

#[test]
fn bad_pointers_and_forged_handles_fail_cleanly_without_disturbing_anyone() {
    let rig = Rig::start("cuda_errors");
    let mut copier = GuestChild::spawn("child_copier", "copier", rig.region(1), 7);
    copier.expect_line("copier ready", CHILD_TIMEOUT);
    let mut cu = rig.cuda(0);
    let scratch = cu.mem_alloc(4096).unwrap();
    let inval = refused(Status::INVALID_VALUE);

    // Out of range: refused, and nothing around is written.
    let p = Mirror::new(&mut cu, 4096, 11);
    let end = p.ptr + 4096;
    assert_eq!(cu.memcpy_htod(end - 10, &[0xee; 20]), Err(inval.clone()));
    let mut out = [0u8; 20];
    assert_eq!(cu.memcpy_dtoh(&mut out, end - 10, 0), Err(inval.clone()));
    assert_eq!(cu.memcpy_dtod(end - 10, p.ptr, 20), Err(inval.clone()));
    assert_eq!(cu.memcpy_dtod(p.ptr, end - 10, 20), Err(inval.clone()));
    assert_eq!(cu.memset(end - 10, 0xee, 1, 20), Err(inval.clone()));
    assert_eq!(cu.memcpy_htod(end, &[1]), Err(inval.clone()), "one past");
    assert_eq!(cu.memcpy_htod(p.ptr - 1, &[1]), Err(inval.clone()));
    p.check_all(&mut cu, "refused copies wrote nothing");
    still_works(&mut cu, scratch, 1);

    // A multi-chunk copy running past the end: its own chunk errors are
    // this call's error, not a deferred error for the next call. (Chunks
    // before the end may have been written: the host sees one chunk at a
    // time.)
    let q = cu.mem_alloc(200 << 10).unwrap();
    assert_eq!(
        cu.memcpy_htod(q, &pattern(300 << 10, 12)),
        Err(inval.clone())
    );
    still_works(&mut cu, scratch, 2);
    let mut out = vec![0u8; 300 << 10];
    assert_eq!(cu.memcpy_dtoh(&mut out, q, 0), Err(inval.clone()));
    still_works(&mut cu, scratch, 3);
    // The same with fire-and-forget calls queued before: their errors stay
    // theirs, reported when this copy succeeds or held for the next call
    // when it fails.
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = spin_kernel(&mut cu, m);
    spin(&mut cu, k.handle, 1000, 0);
    assert_eq!(
        cu.memcpy_htod(q, &pattern(300 << 10, 12)),
        Err(inval.clone())
    );
    still_works(&mut cu, scratch, 31);
    let forged_launch = |cu: &mut Cuda| {
        cu.launch(FORGED, ONE, ONE, 0, 0, &MS.to_le_bytes())
            .unwrap()
    };
    forged_launch(&mut cu);
    let data = pattern(150 << 10, 14);
    assert_eq!(
        cu.memcpy_htod(q, &data),
        Err(deferred(Status::INVALID_HANDLE))
    );
    assert_bytes_eq(
        &read(&mut cu, q, data.len()),
        &data,
        "a copy after a failed launch",
    );
    still_works(&mut cu, scratch, 32);
    forged_launch(&mut cu);
    cu.memset_async(q, 0, 1, 1, 0).unwrap();
    assert_eq!(
        cu.memcpy_htod(q, &pattern(300 << 10, 15)),
        Err(inval.clone())
    );
    assert_eq!(cu.ctx_synchronize(), Err(deferred(Status::INVALID_HANDLE)));
    still_works(&mut cu, scratch, 33);

    // Pointers never allocated, in a guard gap, freed, interior.
    for never in [0, 0x1234, 0x7000_dead_0000, end + 100] {
        assert_eq!(cu.memcpy_htod(never, &[1, 2, 3]), Err(inval.clone()));
        assert_eq!(cu.memcpy_dtoh(&mut [0; 3], never, 0), Err(inval.clone()));
        assert_eq!(cu.memset(never, 0, 1, 3), Err(inval.clone()));
        assert_eq!(cu.mem_free(never), Err(inval.clone()));
    }
    let r = cu.mem_alloc(1000).unwrap();
    cu.mem_free(r).unwrap();
    assert_eq!(cu.memcpy_htod(r, &[1]), Err(inval.clone()), "freed pointer");
    assert_eq!(cu.memcpy_dtod(scratch, r, 1), Err(inval.clone()));
    assert_eq!(cu.mem_free(r), Err(inval.clone()), "double free");
    assert_eq!(cu.mem_free(p.ptr + 1), Err(inval.clone()), "interior");
    p.check_all(&mut cu, "an interior free leaves the allocation alone");
    still_works(&mut cu, scratch, 4);

    // Forged handles.
    let s = cu.stream_create(0).unwrap();
    let e = cu.event_create(0).unwrap();
    // Never issued, the NULL handle, and a live handle's slot with another
    // generation.
    for forged in [FORGED, 0, m | (0x7 << 32)] {
        let bad = Status::INVALID_HANDLE;
        assert_refused(cu.module_get_function(forged, "fairgpu_spin"), bad);
        assert_refused(cu.module_unload(forged), bad);
        assert_refused(cu.event_query(forged), bad);
        assert_refused(cu.event_synchronize(forged), bad);
        assert_refused(cu.event_elapsed_ms(forged, e), bad);
        assert_refused(cu.event_elapsed_ms(e, forged), bad);
        assert_refused(cu.event_destroy(forged), bad);
        if forged != 0 {
            // Stream 0 is the NULL stream, a valid one.
            assert_refused(cu.stream_synchronize(forged), bad);
            assert_refused(cu.stream_query(forged), bad);
            assert_refused(cu.stream_destroy(forged), bad);
            assert_refused(cu.memcpy_dtoh(&mut [0; 8], scratch, forged), bad);
            cu.memcpy_dtod_async(scratch, scratch, 8, forged).unwrap();
            assert_eq!(cu.ctx_synchronize(), Err(deferred(bad)));
        }
        // Fire-and-forget calls report at the next synchronizing call.
        cu.launch(forged, ONE, ONE, 0, 0, &MS.to_le_bytes())
            .unwrap();
        assert_eq!(cu.ctx_synchronize(), Err(deferred(bad)));
        cu.event_record(forged, 0).unwrap();
        assert_eq!(cu.ctx_synchronize(), Err(deferred(bad)));
        cu.event_record(e, forged).unwrap();
        let expect = if forged == 0 {
            Ok(())
        } else {
            Err(deferred(bad))
        };
        assert_eq!(cu.ctx_synchronize(), expect);
        still_works(&mut cu, scratch, 5);
    }

    // Handles are per channel: channel B of the same VM and a channel of
    // the other VM cannot reach channel A's objects. (Each channel numbers
    // its own objects, so B refuses A's handles only while it has no live
    // object in the same slot; below, B holds none.)
    let s2 = cu.stream_create(0).unwrap();
    let e2 = cu.event_create(0).unwrap();
    let mut b = rig.cuda(0);
    let mut c = rig.cuda(1);
    for other in [&mut b, &mut c] {
        let bad = Status::INVALID_HANDLE;
        assert_refused(other.module_get_function(m, "fairgpu_spin"), bad);
        assert_refused(other.module_unload(m), bad);
        assert_refused(other.stream_synchronize(s2), bad);
        assert_refused(other.stream_destroy(s), bad);
        assert_refused(other.event_query(e2), bad);
        assert_refused(other.event_destroy(e), bad);
        other
            .launch(k.handle, ONE, ONE, 0, 0, &MS.to_le_bytes())
            .unwrap();
        assert_eq!(other.ctx_synchronize(), Err(deferred(bad)));
    }
    // The same slot on another channel's context is that context's own
    // object, under another handle (each context tags its handles):
    // destroying B's stream leaves A's alone.
    let sb = b.stream_create(0).unwrap();
    assert_ne!(sb, s, "contexts tag their handles");
    b.stream_destroy(sb).unwrap();
    assert_refused(b.stream_synchronize(sb), Status::INVALID_HANDLE);
    assert_eq!(cu.stream_query(s), Ok(true), "A's stream survives");
    let eb = b.event_create(0).unwrap();
    assert_ne!(eb, e);
    b.event_destroy(eb).unwrap();
    assert_refused(b.event_query(eb), Status::INVALID_HANDLE);
    assert_eq!(cu.event_query(e), Ok(true), "A's event survives");
    still_works(&mut cu, scratch, 6);

    // A parameter buffer shorter than the kernel's layout: the launch is
    // queued, its error surfaces at the next synchronizing call.
    cu.launch(k.handle, ONE, ONE, 0, s, &[0; 4]).unwrap();
    assert_eq!(cu.ctx_synchronize(), Err(deferred(Status::INVALID_VALUE)));
    still_works(&mut cu, scratch, 7);

    // Launch options: a grid that is not whole clusters, clusters of more
    // than 16 blocks: refused by the worker; clusters on
    // SimGpu (no CLUSTER_LAUNCH): not supported. A cooperative launch runs.
    let ns = 1000u64.to_le_bytes();
    let opts = |cluster, cooperative| LaunchOptions {
        cluster,
        cooperative,
    };
    for (grid, o, want) in [
        ([3, 1, 1], opts([2, 1, 1], false), Status::INVALID_VALUE),
        ([32, 1, 1], opts([32, 1, 1], false), Status::INVALID_VALUE),
        ([4, 4, 1], opts([4, 4, 2], true), Status::INVALID_VALUE),
        ([4, 1, 1], opts([2, 1, 1], false), Status::NOT_SUPPORTED),
    ] {
        cu.launch_with(k.handle, grid, ONE, 0, s, &ns, o).unwrap();
        assert_eq!(
            cu.ctx_synchronize(),
            Err(deferred(want)),
            "grid {grid:?}, {o:?}"
        );
        still_works(&mut cu, scratch, 8);
    }
    cu.launch_with(k.handle, [2, 1, 1], ONE, 0, s, &ns, opts([1, 1, 1], true))
        .unwrap();
    assert_eq!(cu.ctx_synchronize(), Ok(()), "a cooperative launch");

    // Images that are not modules, single-chunk and staged in many chunks.
    for len in [3000, 200 << 10] {
        assert_eq!(
            cu.module_load(&pattern(len, 13)),
            Err(refused(Status::INVALID_IMAGE)),
            "{len} bytes of garbage"
        );
        still_works(&mut cu, scratch, 8);
    }
    assert_eq!(
        cu.module_get_function(m, "no_such_kernel"),
        Err(refused(Status::NOT_FOUND))
    );
    still_works(&mut cu, scratch, 9);

    // A kernel that SimGpu executes: y = 2x + y over the 16 floats at
    // scratch (x = y), fused as the PTX's fma.rn.f32.
    let axpy = cu.module_get_function(m, "fairgpu_axpy").unwrap();
    let layout =
        [(0, 8), (8, 8), (16, 4), (20, 4)].map(|(offset, size)| ParamInfo { offset, size });
    assert_eq!(axpy.params, layout);
    let params = axpy
        .pack(&[
            &scratch.to_le_bytes(),
            &scratch.to_le_bytes(),
            &2.0f32.to_le_bytes(),
            &16u32.to_le_bytes(),
        ])
        .unwrap();
    let before = read(&mut cu, scratch, 64);
    cu.launch(axpy.handle, ONE, [32, 1, 1], 0, 0, &params)
        .unwrap();
    assert_eq!(cu.ctx_synchronize(), Ok(()));
    let after = read(&mut cu, scratch, 64);
    for (b, a) in before.chunks_exact(4).zip(after.chunks_exact(4)) {
        let y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let (got, want) = (
            f32::from_le_bytes([a[0], a[1], a[2], a[3]]),
            2.0f32.mul_add(y, y),
        );
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "fairgpu_axpy: {got} from {y}, want {want}"
        );
    }
    still_works(&mut cu, scratch, 10);

    // After all that, the module still works and so does the other VM.
    spin(&mut cu, k.handle, MS, s);
    cu.stream_synchronize(s).unwrap();
    copier.send_line("stop");
    let n: u64 = copier
        .expect_line("copier done ", CHILD_TIMEOUT)
        .parse()
        .expect("a count");
    assert!(n > 0);
    copier.wait_success(CHILD_TIMEOUT);
    let st = status(&rig.d);
    assert_eq!((vm(&st, "vm1").restarts, vm(&st, "vm2").restarts), (0, 0));
}

#[test]
fn the_quota_is_shared_by_a_vm_s_channels_and_independent_of_other_vms() {
    let rig = Rig::start("cuda_quota");
    let mut a = rig.cuda(0);
    let oom = Err(refused(Status::OUT_OF_MEMORY));
    assert_eq!(a.mem_alloc(0), Err(refused(Status::INVALID_VALUE)));
    assert_eq!(a.mem_alloc(u64::MAX), oom);
    assert_eq!(a.mem_alloc(VM_QUOTA + 1), oom);

    // Up to the quota exactly, then not one byte more.
    let half = a.mem_alloc(VM_QUOTA / 2).unwrap();
    let quarter = a.mem_alloc(VM_QUOTA / 4).unwrap();
    let _rest = a.mem_alloc(VM_QUOTA / 4 - 4096).unwrap();
    let last = a.mem_alloc(4096).unwrap();
    assert_eq!(a.mem_get_info(), Ok((0, VM_QUOTA)));
    assert_eq!(a.mem_alloc(1), oom);
    // The memory is usable at both ends.
    for (ptr, len) in [(half, VM_QUOTA / 2), (last, 4096)] {
        let data = pattern(4096, ptr);
        a.memcpy_htod(ptr + len - 4096, &data).unwrap();
        assert_bytes_eq(&read(&mut a, ptr + len - 4096, 4096), &data, "tail");
    }

    // Another channel of the VM shares the quota; the other VM has its own.
    let mut b = rig.cuda(0);
    assert_eq!(b.mem_alloc(1), oom);
    assert_eq!(b.mem_get_info(), Ok((0, VM_QUOTA)));
    let mut c = rig.cuda(1);
    let all = c.mem_alloc(VM_QUOTA).unwrap();
    assert_eq!(c.mem_alloc(1), oom);
    let s = wait_for_status(&rig.d, "both VMs' memory to be published", |s| {
        vm(s, "vm1").mem_used == VM_QUOTA && vm(s, "vm2").mem_used == VM_QUOTA
    });
    assert_eq!((vm(&s, "vm1").contexts, vm(&s, "vm2").contexts), (2, 1));

    // Freeing makes room again, for whichever channel asks first.
    a.mem_free(last).unwrap();
    assert_eq!(b.mem_alloc(4097), oom);
    let bs = b.mem_alloc(4096).unwrap();
    assert_eq!(a.mem_alloc(1), oom);
    a.mem_free(quarter).unwrap();
    let again = a.mem_alloc(VM_QUOTA / 4).unwrap();
    assert_eq!(a.mem_alloc(1), oom);
    // Refusals leave the channel working.
    still_works(&mut a, again, 1);
    still_works(&mut b, bs, 2);

    // Releasing a channel frees its memory for the others.
    drop(b);
    wait_for_status(&rig.d, "vm1's released memory to be freed", |s| {
        vm(s, "vm1").mem_used == VM_QUOTA - 4096 && vm(s, "vm1").contexts == 1
    });
    a.mem_alloc(4096).unwrap();
    c.mem_free(all).unwrap();
    assert_eq!(c.mem_get_info(), Ok((VM_QUOTA, VM_QUOTA)));
    assert_eq!(a.mem_get_info(), Ok((0, VM_QUOTA)));
}

/// A kernel that stores to the address it is given: with a bad one, a
/// sticky CUDA_ERROR_ILLEGAL_ADDRESS on SimGpu (its PTX is executed).
const WILD_STORE_PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\
.visible .entry wild_store(.param .u64 p)\n{\n.reg .b64 %rd<2>;\n.reg .b32 %r<2>;\n\
ld.param.u64 %rd1, [p];\nmov.u32 %r1, 7;\nst.global.u32 [%rd1], %r1;\nret;\n}\n";

/// Finding: MemFree took the allocation off the quota before the executor
/// freed it; in a context made sticky by a faulting kernel SimGpu refuses
/// the free, so the memory stayed allocated but uncounted, and a guest
/// could hold many times its quota.
#[test]
fn quota_bypass_through_frees_refused_by_a_sticky_context_is_closed() {
    let rig = Rig::start("cuda_free_sticky");
    let mut a = rig.cuda(0);
    let held = a.mem_alloc(VM_QUOTA / 2).unwrap();
    let module = a.module_load(WILD_STORE_PTX.as_bytes()).unwrap();
    let k = a.module_get_function(module, "wild_store").unwrap();
    a.launch(k.handle, ONE, ONE, 0, 0, &16u64.to_le_bytes())
        .unwrap();
    assert_eq!(
        a.ctx_synchronize(),
        Err(refused(Status::ILLEGAL_ADDRESS)),
        "the wild store faults"
    );
    assert!(a.mem_free(held).is_err(), "a sticky context frees nothing");
    // Still allocated, so still counted: the VM's other guests cannot
    // allocate it again.
    let mut b = rig.cuda(0);
    assert_eq!(
        b.mem_alloc(VM_QUOTA / 2 + 4096),
        Err(refused(Status::OUT_OF_MEMORY))
    );
    wait_for_status(&rig.d, "vm1's held memory to be published", |s| {
        vm(s, "vm1").mem_used == VM_QUOTA / 2
    });
    // Releasing the faulted channel destroys its context and returns it.
    drop(a);
    wait_for_status(&rig.d, "vm1's faulted context to be destroyed", |s| {
        vm(s, "vm1").mem_used == 0
    });
    b.mem_alloc(VM_QUOTA).unwrap();
}

/// Finding: every `cuModuleGetFunction` minted a new handle holding a copy
/// of the kernel's parameter layout, so 64-byte requests grew the worker by
/// megabytes outside any quota. The same kernel now has one handle, as on
/// the driver.
/// A kernel whose PTX SimGpu cannot parse (here a special register it does
/// not know) fails its attribute queries as its launches, and the daemon's
/// log names it and why at the first of them: programs that size their
/// launches from the attributes first never launch it (NVIDIA's reduction
/// sample stopped that way, silently).
#[test]
fn a_kernel_simgpu_cannot_parse_is_named_at_its_first_attribute_query() {
    let rig = Rig::start("cuda_unparsable");
    let mut a = rig.cuda(0);
    let ptx = ".version 8.0\n.target sm_80\n.address_size 64\n\
               .visible .entry odd()\n{\n.reg .b32 %r<2>;\n\
               mov.u32 %r1, %no_such_register;\nret;\n}\n";
    let module = a.module_load(ptx.as_bytes()).unwrap();
    let f = a.module_get_function(module, "odd").unwrap();
    let r = a.func_get_attribute(f.handle, fairgpu_executor::func_attr::NUM_REGS);
    assert!(r.is_err(), "{r:?}");
    fairgpu_tests::wait_until("the daemon's warning", CHILD_TIMEOUT, || {
        let log = rig.d.log();
        (log.contains("SimGpu cannot execute this kernel") && log.contains("%no_such_register"))
            .then_some(())
    });
    // The channel still works.
    let p = a.mem_alloc(16).unwrap();
    a.memcpy_htod(p, &[5; 16]).unwrap();
}

#[test]
fn handle_minting_by_asking_for_a_kernel_again_and_again_is_closed() {
    let rig = Rig::start("cuda_function_handles");
    let mut a = rig.cuda(0);
    let module = a.module_load(WILD_STORE_PTX.as_bytes()).unwrap();
    let first = a.module_get_function(module, "wild_store").unwrap();
    for _ in 0..2_000 {
        let again = a.module_get_function(module, "wild_store").unwrap();
        assert_eq!(again.handle, first.handle, "a second handle for one kernel");
        assert_eq!(again.params, first.params);
    }
    // After an unload the handle is dead, and a reload gets a live one.
    a.module_unload(module).unwrap();
    a.launch(first.handle, ONE, ONE, 0, 0, &0u64.to_le_bytes())
        .unwrap();
    assert_eq!(a.ctx_synchronize(), Err(deferred(Status::INVALID_HANDLE)));
    let module = a.module_load(WILD_STORE_PTX.as_bytes()).unwrap();
    let fresh = a.module_get_function(module, "wild_store").unwrap();
    assert_ne!(fresh.handle, first.handle);
    assert_eq!(
        a.module_get_function(module, "wild_store").unwrap().handle,
        fresh.handle
    );
}

#[test]
fn streams_and_events_order_kernels_on_the_modelled_device_timeline() {
    let rig = Rig::start("cuda_streams");
    let mut cu = rig.cuda(0);
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = spin_kernel(&mut cu, m).handle;
    let s = cu.stream_create(0).unwrap();
    let ev = |cu: &mut Cuda| cu.event_create(0).unwrap();
    let (e0, e1) = (ev(&mut cu), ev(&mut cu));
    assert_eq!(
        cu.event_query(e1),
        Ok(true),
        "an unrecorded event is complete"
    );

    // One kernel between two events.
    cu.event_record(e0, s).unwrap();
    spin(&mut cu, k, 2 * MS, s);
    cu.event_record(e1, s).unwrap();
    let _ = cu.event_query(e1).unwrap(); // may or may not be done yet
    cu.event_synchronize(e1).unwrap();
    assert_eq!(cu.event_query(e1), Ok(true));
    let ms = cu.event_elapsed_ms(e0, e1).unwrap();
    assert!(ms >= 2.0, "elapsed {ms} ms around a 2 ms kernel");

    // Kernels of one stream run one after the other.
    let (e2, e3) = (ev(&mut cu), ev(&mut cu));
    cu.event_record(e2, s).unwrap();
    spin(&mut cu, k, 2 * MS, s);
    spin(&mut cu, k, 3 * MS, s);
    cu.event_record(e3, s).unwrap();
    cu.stream_synchronize(s).unwrap();
    assert_eq!(cu.stream_query(s), Ok(true));
    let ms = cu.event_elapsed_ms(e2, e3).unwrap();
    assert!(ms >= 5.0, "elapsed {ms} ms around 2 + 3 ms of kernels");

    // Priorities: the host's range, kept within it, clamped outside it;
    // a bad word is refused.
    let (least, greatest) = cu.stream_priority_range().unwrap();
    assert_eq!((least, greatest), (0, -5), "SimGpu's range");
    for (asked, want) in [(0, 0), (-1, -1), (-5, -5), (-6, -5), (i32::MIN, -5), (7, 0)] {
        let (hp, got) = cu.stream_create_with_priority(1, asked).unwrap();
        assert_eq!(got, want, "priority {asked}");
        spin(&mut cu, k, MS, hp);
        cu.stream_synchronize(hp).unwrap();
        cu.stream_destroy(hp).unwrap();
    }
    assert_refused(
        cu.channel()
            .call(Opcode::StreamCreate, [0, 1 << 32, 0, 0, 0]),
        Status::INVALID_VALUE,
    );

    // stream_wait_event: stream b's later work follows stream a's kernel.
    // (b is non-blocking, so nothing else orders it after a.)
    let a = cu.stream_create(0).unwrap();
    let b = cu.stream_create(1).unwrap();
    let (a0, a1, b1) = (ev(&mut cu), ev(&mut cu), ev(&mut cu));
    cu.event_record(a0, a).unwrap();
    spin(&mut cu, k, 4 * MS, a);
    cu.event_record(a1, a).unwrap();
    cu.stream_wait_event(b, a1).unwrap();
    cu.event_record(b1, b).unwrap();
    cu.event_synchronize(b1).unwrap();
    let ms = cu.event_elapsed_ms(a0, b1).unwrap();
    assert!(ms >= 4.0, "b's event {ms} ms after a's start, a ran 4 ms");
    assert_eq!(cu.stream_query(a), Ok(true));
    assert_eq!(cu.stream_query(b), Ok(true));

    // The NULL stream waits for blocking streams' work.
    let (n0, n1) = (ev(&mut cu), ev(&mut cu));
    cu.event_record(n0, a).unwrap();
    spin(&mut cu, k, 2 * MS, a);
    cu.event_record(n1, 0).unwrap();
    cu.ctx_synchronize().unwrap();
    assert_eq!(cu.stream_query(0), Ok(true));
    let ms = cu.event_elapsed_ms(n0, n1).unwrap();
    assert!(ms >= 2.0, "the NULL stream's event {ms} ms after a's start");

    // No elapsed time without timing or a record: as the driver says, an
    // invalid handle.
    let quiet = cu.event_create(0x2).unwrap(); // CU_EVENT_DISABLE_TIMING
    cu.event_record(quiet, s).unwrap();
    cu.event_synchronize(quiet).unwrap();
    assert_refused(cu.event_elapsed_ms(e0, quiet), Status::INVALID_HANDLE);
    let never = ev(&mut cu);
    assert_refused(cu.event_elapsed_ms(e0, never), Status::INVALID_HANDLE);
    assert_refused(cu.event_elapsed_ms(never, e0), Status::INVALID_HANDLE);

    // Destroyed streams and events are gone.
    cu.stream_destroy(b).unwrap();
    let gone = Status::INVALID_HANDLE;
    assert_refused(cu.stream_synchronize(b), gone);
    assert_refused(cu.stream_query(b), gone);
    assert_refused(cu.stream_destroy(b), gone);
    cu.launch(k, ONE, ONE, 0, b, &MS.to_le_bytes()).unwrap();
    assert_eq!(cu.ctx_synchronize(), Err(deferred(gone)));
    cu.event_destroy(e1).unwrap();
    assert_refused(cu.event_query(e1), gone);
    assert_refused(cu.event_synchronize(e1), gone);
    assert_refused(cu.event_elapsed_ms(e0, e1), gone);
    assert_refused(cu.event_destroy(e1), gone);
    cu.event_record(e1, s).unwrap();
    assert_eq!(cu.ctx_synchronize(), Err(deferred(gone)));
    // An unloaded module takes its functions with it.
    cu.module_unload(m).unwrap();
    assert_refused(cu.module_get_function(m, "fairgpu_spin"), gone);
    cu.launch(k, ONE, ONE, 0, s, &MS.to_le_bytes()).unwrap();
    assert_eq!(cu.ctx_synchronize(), Err(deferred(Status::INVALID_HANDLE)));
    assert_eq!(cu.stream_query(s), Ok(true));
    assert_eq!(cu.ctx_synchronize(), Ok(()));
}

/// Bytes a killed guest holds.
const HELD: u64 = 48 << 20;

/// Child side of the kill test: a guest holding memory, a module, streams
/// and events, which prints `holder ready` and waits to be killed.
#[test]
fn child_holder() {
    if !is_child("holder") {
        return;
    }
    let (region, seed) = child_setup();
    let mut cu = Cuda::new(fairgpu_frontend::Channel::claim(region, wait_config()).unwrap());
    let p = cu.mem_alloc(HELD).unwrap();
    cu.memcpy_htod(p + HELD - (1 << 20), &pattern(1 << 20, seed))
        .unwrap();
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = spin_kernel(&mut cu, m).handle;
    let s = cu.stream_create(0).unwrap();
    let _s2 = cu.stream_create(1).unwrap();
    let e = cu.event_create(0).unwrap();
    spin(&mut cu, k, MS, s);
    cu.event_record(e, s).unwrap();
    cu.event_synchronize(e).unwrap();
    println!("holder ready");
    // Killed here; a parent that died closes our stdin.
    let _ = fairgpu_tests::child_read_line();
}

#[test]
fn a_killed_guest_s_context_is_destroyed_and_its_memory_returned() {
    let rig = Rig::start("cuda_kill");
    // A guest of ours on the same VM, with a context of its own.
    let mut mine = rig.cuda(0);
    mine.ctx_synchronize().unwrap();
    let mut holder = GuestChild::spawn("child_holder", "holder", rig.region(0), 21);
    holder.expect_line("holder ready", CHILD_TIMEOUT);
    wait_for_status(&rig.d, "the holder's memory to be published", |s| {
        let v = vm(s, "vm1");
        v.mem_used == HELD && v.channels_used == 2 && v.contexts == 2
    });
    assert_eq!(
        mine.mem_alloc(VM_QUOTA - HELD + 1),
        Err(refused(Status::OUT_OF_MEMORY))
    );

    holder.kill();
    let s = wait_for_status(&rig.d, "the dead guest's context to be destroyed", |s| {
        let v = vm(s, "vm1");
        v.mem_used == 0 && v.channels_used == 1 && v.contexts == 1
    });
    assert_eq!(vm(&s, "vm1").restarts, 0, "the worker survived");

    // The whole quota is free again, for us and for a new guest.
    let p = mine.mem_alloc(VM_QUOTA).unwrap();
    still_works(&mut mine, p, 1);
    mine.mem_free(p).unwrap();
    let mut fresh = rig.cuda(0);
    let p = fresh.mem_alloc(VM_QUOTA).unwrap();
    still_works(&mut fresh, p, 2);
}

/// Launches the queuer leaves behind (its ring holds 64), and the elements
/// of each (each takes SimGpu's interpreter tens of milliseconds or more).
const QUEUED: u32 = 48;
const QUEUED_N: u32 = 1 << 20;

/// Child side of the dead-queue test: queues [`QUEUED`] launches of
/// `fairgpu_axpy` over 1 Mi elements without waiting for any, prints
/// `queued` and waits to be killed.
#[test]
fn child_queuer() {
    if !is_child("queuer") {
        return;
    }
    let (region, _) = child_setup();
    let mut cu = Cuda::new(fairgpu_frontend::Channel::claim(region, wait_config()).unwrap());
    let bytes = u64::from(QUEUED_N) * 4;
    let (x, y) = (cu.mem_alloc(bytes).unwrap(), cu.mem_alloc(bytes).unwrap());
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = cu.module_get_function(m, "fairgpu_axpy").unwrap().handle;
    let mut params = Vec::new();
    params.extend_from_slice(&x.to_le_bytes());
    params.extend_from_slice(&y.to_le_bytes());
    params.extend_from_slice(&2.0f32.to_le_bytes());
    params.extend_from_slice(&QUEUED_N.to_le_bytes());
    for _ in 0..QUEUED {
        cu.launch(k, [QUEUED_N / 256, 1, 1], [256, 1, 1], 0, 0, &params)
            .unwrap();
    }
    println!("queued");
    let _ = fairgpu_tests::child_read_line();
}

/// A guest killed with its ring full of launches: the worker drops what
/// it had not run yet instead of executing all of it (the VM's other
/// guests would wait behind a dead process's work), and keeps serving.
#[test]
fn a_killed_guest_s_queued_launches_are_dropped_not_run() {
    let rig = Rig::start("cuda_kill_queue");
    let mut mine = rig.cuda(0);
    mine.ctx_synchronize().unwrap();
    let mut queuer = GuestChild::spawn("child_queuer", "queuer", rig.region(0), 0);
    queuer.expect_line("queued", CHILD_TIMEOUT);
    queuer.kill();
    let s = wait_for_status(&rig.d, "the dead guest's channel and context to go", |s| {
        let v = vm(s, "vm1");
        v.channels_used == 1 && v.contexts == 1 && v.mem_used == 0
    });
    let v = vm(&s, "vm1");
    assert_eq!(v.restarts, 0, "the worker survived");
    assert!(
        v.kernels < u64::from(QUEUED),
        "all {} queued launches of a dead guest ran",
        v.kernels
    );
    let p = mine.mem_alloc(64).unwrap();
    still_works(&mut mine, p, 3);
}

/// Kernels the spinner runs, and how long each takes.
const SPINS: u64 = 6;
const SPIN_NS: u64 = 1_500_000;

/// Child side of the accounting test: runs [`SPINS`] spin kernels, checks
/// their modelled time through events and prints `spinner done`.
#[test]
fn child_spinner() {
    if !is_child("spinner") {
        return;
    }
    let (region, _) = child_setup();
    let mut cu = Cuda::new(fairgpu_frontend::Channel::claim(region, wait_config()).unwrap());
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = spin_kernel(&mut cu, m).handle;
    let s = cu.stream_create(0).unwrap();
    let (e0, e1) = (cu.event_create(0).unwrap(), cu.event_create(0).unwrap());
    cu.event_record(e0, s).unwrap();
    for _ in 0..SPINS {
        spin(&mut cu, k, SPIN_NS, s);
    }
    cu.event_record(e1, s).unwrap();
    cu.stream_synchronize(s).unwrap();
    let ms = cu.event_elapsed_ms(e0, e1).unwrap();
    assert!(ms >= (SPINS * SPIN_NS) as f32 / 1e6, "elapsed {ms} ms");
    println!("spinner done");
}

#[test]
fn gpu_time_is_charged_to_the_vm_whose_kernels_ran() {
    let rig = Rig::start("cuda_gpu_time");
    let mut spinner = GuestChild::spawn("child_spinner", "spinner", rig.region(0), 0);
    spinner.expect_line("spinner done", CHILD_TIMEOUT);
    spinner.wait_success(CHILD_TIMEOUT);
    // SimGpu's accounting is the exact sum of the modelled durations.
    let want = SPINS * SPIN_NS;
    let s = wait_for_status(&rig.d, "vm1's GPU time to be published", |s| {
        vm(s, "vm1").gpu_time_ns >= want
    });
    assert_eq!(vm(&s, "vm1").gpu_time_ns, want);
    assert_eq!(vm(&s, "vm2").gpu_time_ns, 0);

    // A kernel of vm2 is charged to vm2 alone.
    let mut cu = rig.cuda(1);
    let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = spin_kernel(&mut cu, m).handle;
    spin(&mut cu, k, 2 * MS, 0);
    cu.ctx_synchronize().unwrap();
    let s = wait_for_status(&rig.d, "vm2's GPU time to be published", |s| {
        vm(s, "vm2").gpu_time_ns >= 2 * MS
    });
    assert_eq!(vm(&s, "vm2").gpu_time_ns, 2 * MS);
    assert_eq!(vm(&s, "vm1").gpu_time_ns, want);
}

#[test]
fn gpu_check_passes_on_simgpu() {
    let out = run_command(
        Command::new(fairgpu_bin()).args(["gpu-check", "--executor", "sim"]),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "gpu-check failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

/// Requests served for vm1 once the worker has published every request
/// that was answered before this call.
fn settled_calls(rig: &Rig) -> u64 {
    vm(&wait_for_published(&rig.d, "vm1"), "vm1").calls
}

#[test]
fn a_module_image_crosses_the_channel_once_per_vm() {
    let rig = Rig::start("cuda_image_cache");
    // A 1 MiB image: many arena chunks when it is sent.
    let mut image = KERNELS_PTX.to_owned();
    while image.len() < 1 << 20 {
        image.push_str("// padding to make the image span many arena chunks\n");
    }
    let mut a = rig.cuda(0);
    let before = settled_calls(&rig);
    let m1 = a.module_load(image.as_bytes()).unwrap();
    let first = settled_calls(&rig) - before;
    assert!(
        first > 10,
        "the first load sent the image in chunks ({first} requests)"
    );

    // Another process of the same VM loads the same image: one request.
    let mut b = rig.cuda(0);
    let m2 = b.module_load(image.as_bytes()).unwrap();
    let second = settled_calls(&rig) - before - first;
    assert_eq!(second, 1, "the cached image was sent again");
    // Both modules work.
    spin_kernel(&mut a, m1);
    spin_kernel(&mut b, m2);

    // A different image of the same size is not taken for it.
    let other = image.replacen("padding", "Padding", 1);
    assert_eq!(other.len(), image.len());
    let m3 = b.module_load(other.as_bytes()).unwrap();
    spin_kernel(&mut b, m3);

    // The cache is per VM: vm2 sends the image itself.
    let mut c = rig.cuda(1);
    let m4 = c.module_load(image.as_bytes()).unwrap();
    spin_kernel(&mut c, m4);
    let s = wait_for_status(&rig.d, "vm2's calls", |s| vm(s, "vm2").calls >= first);
    assert!(vm(&s, "vm2").calls >= first, "vm2 used vm1's cached image");
}

/// A module with a variable and a kernel that adds it to its output.
const GLOBAL_PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n\
.global .align 4 .u32 bias = 5;\n\
.visible .entry add_bias(.param .u64 p)\n{\n.reg .b64 %rd<2>;\n.reg .b32 %r<3>;\n\
ld.param.u64 %rd1, [p];\nld.global.u32 %r1, [bias];\nld.global.u32 %r2, [%rd1];\n\
add.u32 %r2, %r2, %r1;\nst.global.u32 [%rd1], %r2;\nret;\n}\n";

/// Module variables over the wire: `cuModuleGetGlobal` gives an address
/// that copies reach and the module's kernels read; another channel's
/// module has its own; after an unload the range is refused, not reused
/// behind the guest's back.
#[test]
fn module_variables_are_device_memory_of_their_context_until_unloaded() {
    let rig = Rig::start("cuda_module_globals");
    let mut a = rig.cuda(0);
    let mut b = rig.cuda(0);
    let ma = a.module_load(GLOBAL_PTX.as_bytes()).unwrap();
    let mb = b.module_load(GLOBAL_PTX.as_bytes()).unwrap();
    let (pa, size) = a.module_get_global(ma, "bias").unwrap();
    assert_eq!(size, 4);
    assert_eq!(
        a.module_get_global(ma, "nothing"),
        Err(refused(Status::NOT_FOUND))
    );
    let mut got = [0u8; 4];
    a.memcpy_dtoh(&mut got, pa, 0).unwrap();
    assert_eq!(u32::from_le_bytes(got), 5, "the initializer");
    a.memcpy_htod(pa, &40u32.to_le_bytes()).unwrap();
    // Past the variable's end is refused.
    assert!(a.memcpy_htod(pa, &[0u8; 8]).is_err());
    // The kernel reads what the host wrote; b's variable is untouched.
    let run = |cu: &mut Cuda, m: u64| {
        let out = cu.mem_alloc(4).unwrap();
        cu.memcpy_htod(out, &2u32.to_le_bytes()).unwrap();
        let k = cu.module_get_function(m, "add_bias").unwrap();
        cu.launch(k.handle, ONE, ONE, 0, 0, &out.to_le_bytes())
            .unwrap();
        let mut r = [0u8; 4];
        cu.memcpy_dtoh(&mut r, out, 0).unwrap();
        u32::from_le_bytes(r)
    };
    assert_eq!(run(&mut a, ma), 42);
    assert_eq!(run(&mut b, mb), 7);
    // b cannot reach a's variable by its address.
    assert!(b.memcpy_dtoh(&mut got, pa, 0).is_err());
    // Unloaded: the address is refused, and a new module starts afresh.
    a.module_unload(ma).unwrap();
    assert!(a.memcpy_htod(pa, &1u32.to_le_bytes()).is_err());
    let ma = a.module_load(GLOBAL_PTX.as_bytes()).unwrap();
    assert_eq!(run(&mut a, ma), 7);
}

/// A kernel that prints its thread index, and one whose thread 1 fails an
/// assertion (as nvcc emits `printf` and `assert`).
const PRINTS_PTX: &str = ".version 8.0\n.target sm_80\n.address_size 64\n\
.extern .func (.param .b32 func_retval0) vprintf (.param .b64 p0, .param .b64 p1);\n\
.extern .func __assertfail (.param .b64 a0, .param .b64 a1, .param .b32 a2, .param .b64 a3, .param .b64 a4);\n\
.global .align 1 .b8 fmt[12] = {116, 105, 100, 32, 37, 100, 10, 0, 0, 0, 0, 0};\n\
.global .align 1 .b8 msg[4] = {120, 62, 48, 0};\n\
.visible .entry say()\n{\n.local .align 8 .b8 depot[8];\n.reg .b32 %r<3>;\n.reg .b64 %rd<5>;\n\
mov.u64 %rd1, depot;\ncvta.local.u64 %rd2, %rd1;\nmov.u32 %r1, %tid.x;\nst.local.u32 [%rd1], %r1;\n\
mov.u64 %rd3, fmt;\ncvta.global.u64 %rd4, %rd3;\n\
{\n.param .b64 param0;\nst.param.b64 [param0], %rd4;\n.param .b64 param1;\nst.param.b64 [param1], %rd2;\n\
.param .b32 retval0;\ncall.uni (retval0), vprintf, (param0, param1);\n}\nret;\n}\n\
.visible .entry fails()\n{\n.reg .pred %p<2>;\n.reg .b32 %r<3>;\n.reg .b64 %rd<3>;\n\
mov.u32 %r1, %tid.x;\nsetp.ne.u32 %p1, %r1, 1;\n@%p1 bra DONE;\nmov.u64 %rd1, msg;\ncvta.global.u64 %rd2, %rd1;\n\
{\n.param .b64 param0;\nst.param.b64 [param0], %rd2;\n.param .b64 param1;\nst.param.b64 [param1], %rd2;\n\
.param .b32 param2;\nst.param.b32 [param2], 12;\n.param .b64 param3;\nst.param.b64 [param3], %rd2;\n\
.param .b64 param4;\nst.param.b64 [param4], 1;\ncall.uni __assertfail, (param0, param1, param2, param3, param4);\n}\n\
DONE:\nret;\n}\n";

/// Device output over the wire: kernels that can print say so, their
/// lines wait on the host until taken (in order, as stdout records), and
/// a failed assertion's message (a stderr record) can still be taken from
/// the context it made sticky.
#[test]
fn printed_output_is_taken_in_order_even_after_a_failed_assert() {
    let rig = Rig::start("cuda_printf");
    let mut cu = rig.cuda(0);
    let m = cu.module_load(PRINTS_PTX.as_bytes()).unwrap();
    let say = cu.module_get_function(m, "say").unwrap();
    assert!(say.prints);
    let quiet = cu.module_load(WILD_STORE_PTX.as_bytes()).unwrap();
    assert!(!cu.module_get_function(quiet, "wild_store").unwrap().prints);
    cu.launch(say.handle, ONE, [3, 1, 1], 0, 0, &[]).unwrap();
    cu.launch(say.handle, ONE, [1, 1, 1], 0, 0, &[]).unwrap();
    cu.ctx_synchronize().unwrap();
    let mut out = Vec::new();
    cu.take_output(&mut out).unwrap();
    let records = fairgpu_protocol::cuda::output_records(&out);
    let lines: Vec<(u8, &[u8])> = records.clone();
    assert_eq!(
        lines,
        vec![
            (fairgpu_protocol::cuda::STDOUT, &b"tid 0\n"[..]),
            (fairgpu_protocol::cuda::STDOUT, &b"tid 1\n"[..]),
            (fairgpu_protocol::cuda::STDOUT, &b"tid 2\n"[..]),
            (fairgpu_protocol::cuda::STDOUT, &b"tid 0\n"[..]),
        ]
    );
    out.clear();
    cu.take_output(&mut out).unwrap();
    assert!(out.is_empty(), "taken once");
    let fails = cu.module_get_function(m, "fails").unwrap();
    assert!(fails.prints);
    cu.launch(fails.handle, ONE, [4, 1, 1], 0, 0, &[]).unwrap();
    assert_eq!(
        cu.ctx_synchronize().map_err(|e| e.status()),
        Err(Status::ASSERT)
    );
    cu.take_output(&mut out).unwrap();
    let records = fairgpu_protocol::cuda::output_records(&out);
    assert_eq!(records.len(), 1, "{out:?}");
    assert_eq!(records[0].0, fairgpu_protocol::cuda::STDERR);
    assert_eq!(
        records[0].1,
        &b"x>0:12: x>0: block: [0,0,0], thread: [1,0,0] Assertion `x>0` failed.\n"[..]
    );
}

/// A float32 array of `w` × `h` (× `d`) elements.
fn f32_array(w: u64, h: u64, d: u64, flags: u32) -> ArrayDesc {
    ArrayDesc {
        width: w,
        height: h,
        depth: d,
        format: 0x20,
        channels: 1,
        flags,
    }
}

fn side(kind: u64, base: u64, pitch: u64, height: u64, pos: [u64; 3]) -> CopySide {
    CopySide {
        kind,
        base,
        pitch,
        height,
        pos,
    }
}

const HOST: CopySide = CopySide {
    kind: MEM_HOST,
    base: 0,
    pitch: 0,
    height: 0,
    pos: [0; 3],
};

/// Arrays, rectangular copies and texture/surface objects over the wire:
/// the bytes land where a GPU puts them (pitched rows, array boxes at
/// offsets, copies split into many requests), arrays count against the
/// quota, and every hostile description (boxes past an array's end, rows
/// past their pitch, device ranges outside the channel's allocations,
/// another channel's arrays, forged objects) is refused with the channel
/// still working.
#[test]
fn arrays_and_rectangular_copies_are_exact_and_bounded() {
    let rig = Rig::start("cuda_arrays");
    let mut a = rig.cuda(0);
    let mut b = rig.cuda(0);
    let inval = |r: Result<(), CallError>| assert_refused(r, Status::INVALID_VALUE);

    // A 2D array of 300 x 200 floats: 240,000 bytes, several arena slices.
    let (w, h) = (300u64, 200u64);
    let arr = a.array_create(&f32_array(w, h, 0, 0)).unwrap();
    let data = pattern((w * h * 4) as usize, 7);
    let whole = Copy3D {
        src: HOST,
        dst: side(MEM_ARRAY, arr, 0, 0, [0; 3]),
        extent: [w * 4, h, 1],
    };
    a.memcpy_3d(&whole, HostRows::From(&data), 0).unwrap();
    // Into pitched device memory at an offset, through the array.
    let pitch = 1280u64;
    let dev = a.mem_alloc(pitch * (h + 3)).unwrap();
    let to_dev = Copy3D {
        src: side(MEM_ARRAY, arr, 0, 0, [8, 5, 0]),
        dst: side(MEM_DEVICE, dev, pitch, h + 3, [16, 3, 0]),
        extent: [(w - 2) * 4, h - 5, 1],
    };
    a.memcpy_3d(&to_dev, HostRows::None, 0).unwrap();
    let raw = read(&mut a, dev, (pitch * (h + 3)) as usize);
    for y in 0..(h - 5) {
        let got = &raw[((y + 3) * pitch + 16) as usize..][..((w - 2) * 4) as usize];
        let want = &data[((y + 5) * w * 4 + 8) as usize..][..((w - 2) * 4) as usize];
        assert_bytes_eq(got, want, &format!("row {y} in pitched memory"));
    }
    // Back to the host, packed, from a box of the array.
    let mut back = vec![0u8; (10 * 4 * 7) as usize];
    let from = Copy3D {
        src: side(MEM_ARRAY, arr, 0, 0, [40, 100, 0]),
        dst: HOST,
        extent: [40, 7, 1],
    };
    a.memcpy_3d(&from, HostRows::To(&mut back), 0).unwrap();
    for y in 0..7u64 {
        let want = &data[((100 + y) * w * 4 + 40) as usize..][..40];
        assert_bytes_eq(
            &back[(y * 40) as usize..][..40],
            want,
            &format!("box row {y}"),
        );
    }

    // Hostile descriptions, each refused; the channel goes on.
    let past_end = Copy3D {
        src: side(MEM_ARRAY, arr, 0, 0, [8, 0, 0]),
        dst: HOST,
        extent: [w * 4, 1, 1],
    };
    inval(a.memcpy_3d(&past_end, HostRows::To(&mut vec![0; (w * 4) as usize]), 0));
    let partial_element = Copy3D {
        src: side(MEM_ARRAY, arr, 0, 0, [2, 0, 0]),
        dst: HOST,
        extent: [4, 1, 1],
    };
    inval(a.memcpy_3d(&partial_element, HostRows::To(&mut [0; 4]), 0));
    let row_past_pitch = Copy3D {
        src: HOST,
        dst: side(MEM_DEVICE, dev, 64, h, [0; 3]),
        extent: [65, 2, 1],
    };
    inval(a.memcpy_3d(&row_past_pitch, HostRows::From(&[0; 130]), 0));
    let past_alloc = Copy3D {
        src: HOST,
        dst: side(MEM_DEVICE, dev, pitch, h + 3, [0, h + 2, 0]),
        extent: [pitch, 2, 1],
    };
    inval(a.memcpy_3d(
        &past_alloc,
        HostRows::From(&vec![0; (2 * pitch) as usize]),
        0,
    ));
    let wrapping = Copy3D {
        src: HOST,
        dst: side(MEM_DEVICE, dev, u64::MAX / 2, 4, [0, 1, 1]),
        extent: [4, 1, 1],
    };
    inval(a.memcpy_3d(&wrapping, HostRows::From(&[0; 4]), 0));
    let b_dev = b.mem_alloc(4096).unwrap();
    let other_channel = Copy3D {
        src: side(MEM_ARRAY, arr, 0, 0, [0; 3]),
        dst: side(MEM_DEVICE, b_dev, 4096, 1, [0; 3]),
        extent: [16, 1, 1],
    };
    assert_refused(
        b.memcpy_3d(&other_channel, HostRows::None, 0),
        Status::INVALID_HANDLE,
    );
    assert_refused(b.array_destroy(arr), Status::INVALID_HANDLE);
    assert_refused(a.array_destroy(FORGED), Status::INVALID_HANDLE);
    for bad in [
        f32_array(0, 0, 0, 0),
        f32_array(1 << 20, 0, 0, 0),
        f32_array(8, 0, 3, 0),
        f32_array(8, 4, 6, 4),
        ArrayDesc {
            format: 0xb0,
            ..f32_array(8, 0, 0, 0)
        },
        ArrayDesc {
            channels: 3,
            ..f32_array(8, 0, 0, 0)
        },
    ] {
        assert_refused(a.array_create(&bad), Status::INVALID_VALUE);
    }

    // Arrays count against the quota, and give it back.
    let (free, _) = a.mem_get_info().unwrap();
    assert_eq!(free, VM_QUOTA - w * h * 4 - pitch * (h + 3) - 4096);
    assert_refused(
        a.array_create(&f32_array(16_384, 16_384, 1 + VM_QUOTA / (1 << 30), 0)),
        Status::OUT_OF_MEMORY,
    );

    // Texture objects over the channel's own memory only.
    let tex = TextureDesc::default();
    let res = |kind, base, width| ResourceDesc {
        kind,
        base,
        format: 0x20,
        channels: 1,
        width,
        height: 1,
        pitch: 0,
    };
    let t = a
        .tex_object_create(&res(RESOURCE_ARRAY, arr, 0), &tex)
        .unwrap();
    let lin = a
        .tex_object_create(&res(RESOURCE_LINEAR, dev, 256), &tex)
        .unwrap();
    assert_refused(
        a.tex_object_create(&res(RESOURCE_LINEAR, b_dev, 256), &tex),
        Status::INVALID_VALUE,
    );
    assert_refused(
        a.tex_object_create(&res(RESOURCE_LINEAR, dev, pitch * (h + 4)), &tex),
        Status::INVALID_VALUE,
    );
    assert_refused(
        b.tex_object_create(&res(RESOURCE_ARRAY, arr, 0), &tex),
        Status::INVALID_HANDLE,
    );
    assert_refused(b.tex_object_destroy(t), Status::INVALID_VALUE);
    // Surfaces over any array of the channel (NVIDIA's driver does not
    // require SURFACE_LDST), none over another channel's.
    let plain = a.surf_object_create(arr).unwrap();
    assert_refused(b.surf_object_create(arr), Status::INVALID_HANDLE);
    let sarr = a.array_create(&f32_array(4, 4, 0, 2)).unwrap();
    let s = a.surf_object_create(sarr).unwrap();
    assert_refused(a.surf_object_destroy(t), Status::INVALID_VALUE);
    assert_refused(b.surf_object_destroy(s), Status::INVALID_VALUE);
    a.surf_object_destroy(s).unwrap();
    a.surf_object_destroy(plain).unwrap();
    a.tex_object_destroy(t).unwrap();
    a.tex_object_destroy(lin).unwrap();
    assert_refused(a.tex_object_destroy(t), Status::INVALID_VALUE);

    // Still working, and destroying the arrays returns their bytes.
    still_works(&mut a, dev, 3);
    a.array_destroy(arr).unwrap();
    a.array_destroy(sarr).unwrap();
    let (free, _) = a.mem_get_info().unwrap();
    assert_eq!(free, VM_QUOTA - pitch * (h + 3) - 4096);
    // A channel's arrays go with it.
    let kept = b.array_create(&f32_array(1024, 1024, 0, 0)).unwrap();
    assert_ne!(kept, 0);
    drop(b);
    wait_for_status(&rig.d, "b's array to be freed", |st| {
        vm(st, "vm1").mem_used == pitch * (h + 3)
    });
}

/// The virtual-memory API through the channel: every range, offset and
/// handle is checked on the host (granularity, inside one reservation of
/// the channel, over no other mapping, memory of the channel), memory
/// counts against the VM's quota from `MemCreate` until its last mapping
/// goes after `MemRelease`, copies reach a mapping only once access is
/// set, and another channel's reservations and memory are out of reach.
#[test]
fn virtual_memory_is_checked_on_the_host_and_charged_to_the_vm() {
    const G: u64 = fairgpu_protocol::cuda::VMM_GRANULARITY;
    let rig = Rig::start("cuda_vmm");
    let mut a = rig.cuda(0);
    let inval = Status::INVALID_VALUE;
    assert_refused(a.mem_address_reserve(0, 0), inval);
    assert_refused(a.mem_address_reserve(G + 1, 0), inval);
    assert_refused(a.mem_address_reserve(G, 3 * G), inval);
    assert_refused(a.mem_address_reserve(2 << 40, 0), inval);
    let base = a.mem_address_reserve(4 * G, 4 * G).unwrap();
    assert_eq!(base % (4 * G), 0);
    assert_refused(a.mem_create(G / 2), inval);
    assert_refused(a.mem_create((VM_QUOTA / G + 1) * G), Status::OUT_OF_MEMORY);
    let m = a.mem_create(2 * G).unwrap();
    assert_eq!(a.mem_get_info(), Ok((VM_QUOTA - 2 * G, VM_QUOTA)));
    // Misplaced mappings: off the granularity, outside any reservation,
    // past the memory's end, a forged handle.
    assert_refused(a.mem_map(base + 4096, 2 * G, 0, m), inval);
    assert_refused(a.mem_map(base + 3 * G, 2 * G, 0, m), inval);
    assert_refused(a.mem_map(base, 2 * G, G, m), inval);
    assert_refused(a.mem_map(base + (1 << 40), G, 0, m), inval);
    assert_refused(a.mem_map(base, 2 * G, 0, FORGED), inval);
    a.mem_map(base, 2 * G, 0, m).unwrap();
    assert_refused(a.mem_map(base, 2 * G, 0, m), inval);
    // No access yet: copies are refused.
    let data = pattern(4096, 9);
    assert_refused(a.memcpy_htod(base, &data), inval);
    assert_refused(a.mem_set_access(base, G, 3), inval); // half a mapping
    assert_refused(a.mem_set_access(base, 2 * G, 2), inval); // not a protection
    a.mem_set_access(base, 2 * G, 3).unwrap();
    a.memcpy_htod(base + 2 * G - 4096, &data).unwrap();
    assert_bytes_eq(&read(&mut a, base + 2 * G - 4096, 4096), &data, "mapped");
    // A copy past the mapping, into the reservation's unmapped rest.
    assert_refused(a.memcpy_htod(base + 2 * G - 2048, &data), inval);
    // Not an allocation: MemFree refuses it; the range cannot be freed
    // while mapped.
    assert_refused(a.mem_free(base), inval);
    assert_refused(a.mem_address_free(base, 4 * G), inval);

    // Another channel of the VM reaches none of it.
    let mut b = rig.cuda(0);
    assert_refused(b.memcpy_htod(base, &data), inval);
    assert_refused(b.mem_map(base + 2 * G, 2 * G, 0, m), inval);
    assert_refused(b.mem_unmap(base, 2 * G), inval);
    assert_refused(b.mem_release(m), inval);
    assert_refused(b.mem_address_free(base, 4 * G), inval);

    // Released while mapped: still there, and charged, until unmapped.
    a.mem_release(m).unwrap();
    assert_refused(a.mem_release(m), inval);
    assert_bytes_eq(
        &read(&mut a, base + 2 * G - 4096, 4096),
        &data,
        "released, mapped",
    );
    assert_eq!(a.mem_get_info(), Ok((VM_QUOTA - 2 * G, VM_QUOTA)));
    a.mem_unmap(base, 2 * G).unwrap();
    assert_eq!(a.mem_get_info(), Ok((VM_QUOTA, VM_QUOTA)));
    assert_refused(a.memcpy_htod(base, &data), inval);
    a.mem_address_free(base, 4 * G).unwrap();
    assert_refused(a.mem_address_free(base, 4 * G), inval);

    // What a channel leaves behind goes with it.
    let r = b.mem_address_reserve(2 * G, 0).unwrap();
    let m2 = b.mem_create(2 * G).unwrap();
    b.mem_map(r, 2 * G, 0, m2).unwrap();
    b.mem_set_access(r, 2 * G, 3).unwrap();
    wait_for_status(&rig.d, "vm1's mapped memory to be charged", |s| {
        vm(s, "vm1").mem_used == 2 * G
    });
    drop(b);
    wait_for_status(&rig.d, "vm1's memory to be returned", |s| {
        vm(s, "vm1").mem_used == 0 && vm(s, "vm1").contexts == 1
    });
    let scratch = a.mem_alloc(4096).unwrap();
    still_works(&mut a, scratch, 3);
}

/// Memory of the virtual-memory API shared between the channels of one VM
/// (`MemExport`/`MemImport`, what shareable handles carry): a token names
/// it in another channel of the exporting VM only, never in another VM's
/// or once forged; the importer's handle maps it (the exporter's bytes)
/// once the exporter has it mapped nowhere; the memory is charged once,
/// and goes with the last handle of either channel, even when the
/// exporter goes first.
#[test]
fn shared_virtual_memory_lives_until_the_last_handle_of_any_channel() {
    const G: u64 = fairgpu_protocol::cuda::VMM_GRANULARITY;
    let rig = Rig::start("cuda_vmm_shared");
    let mut a = rig.cuda(0);
    let mut b = rig.cuda(0);
    let mut other_vm = rig.cuda(1);
    let inval = Status::INVALID_VALUE;
    let m = a.mem_create(G).unwrap();
    let ra = a.mem_address_reserve(G, 0).unwrap();
    a.mem_map(ra, G, 0, m).unwrap();
    a.mem_set_access(ra, G, 3).unwrap();
    let data = pattern(8192, 5);
    a.memcpy_htod(ra + G - 8192, &data).unwrap();
    let token = a.mem_export(m).unwrap();
    assert_eq!(a.mem_export(m).unwrap(), token, "one token per memory");
    assert_refused(a.mem_export(FORGED), inval);
    assert_refused(other_vm.mem_import(token), inval);
    assert_refused(b.mem_import(token ^ 1), inval);
    let (mb, bytes) = b.mem_import(token).unwrap();
    assert_eq!(bytes, G);
    let rb = b.mem_address_reserve(G, 0).unwrap();
    // Mapped by the exporter still: SimGpu maps memory once at a time.
    assert_refused(b.mem_map(rb, G, 0, mb), Status::NOT_SUPPORTED);
    a.mem_unmap(ra, G).unwrap();
    b.mem_map(rb, G, 0, mb).unwrap();
    b.mem_set_access(rb, G, 3).unwrap();
    assert_bytes_eq(
        &read(&mut b, rb + G - 8192, 8192),
        &data,
        "the importer's view",
    );
    b.memcpy_htod(rb, &[0x5a; 64]).unwrap();
    // Charged once, to the VM.
    assert_eq!(a.mem_get_info(), Ok((VM_QUOTA - G, VM_QUOTA)));
    // The exporter's handle goes, and then the exporter: the importer's
    // mapping keeps the memory.
    a.mem_release(m).unwrap();
    assert_refused(a.mem_export(m), inval);
    drop(a);
    wait_for_status(&rig.d, "the exporter's context to go", |s| {
        vm(s, "vm1").contexts == 1
    });
    assert_eq!(read(&mut b, rb, 4), vec![0x5a; 4]);
    assert_eq!(b.mem_get_info(), Ok((VM_QUOTA - G, VM_QUOTA)));
    // Unmapped, the importer's handle still holds it; a second import
    // of the same token, in the same channel, is a handle of its own.
    b.mem_unmap(rb, G).unwrap();
    let (mb2, _) = b.mem_import(token).unwrap();
    assert_ne!(mb2, mb);
    b.mem_release(mb).unwrap();
    assert_eq!(b.mem_get_info(), Ok((VM_QUOTA - G, VM_QUOTA)));
    b.mem_map(rb, G, 0, mb2).unwrap();
    b.mem_set_access(rb, G, 3).unwrap();
    assert_bytes_eq(&read(&mut b, rb + G - 8192, 8192), &data, "mapped again");
    b.mem_release(mb2).unwrap();
    b.mem_unmap(rb, G).unwrap();
    assert_eq!(
        b.mem_get_info(),
        Ok((VM_QUOTA, VM_QUOTA)),
        "freed with the last handle and mapping"
    );
    assert_refused(b.mem_import(token), inval);
    b.mem_address_free(rb, G).unwrap();

    // A channel that exits with its import mapped: the exporter keeps it.
    let mut c = rig.cuda(0);
    let mut d = rig.cuda(0);
    let m = c.mem_create(G).unwrap();
    let token = c.mem_export(m).unwrap();
    let (md, _) = d.mem_import(token).unwrap();
    let rd = d.mem_address_reserve(G, 0).unwrap();
    d.mem_map(rd, G, 0, md).unwrap();
    d.mem_set_access(rd, G, 3).unwrap();
    d.memcpy_htod(rd + 4096, &data).unwrap();
    drop(d);
    wait_for_status(&rig.d, "the importer's context to go", |s| {
        vm(s, "vm1").contexts == 2
    });
    let rc = c.mem_address_reserve(G, 0).unwrap();
    c.mem_map(rc, G, 0, m).unwrap();
    c.mem_set_access(rc, G, 3).unwrap();
    assert_bytes_eq(
        &read(&mut c, rc + 4096, 8192),
        &data,
        "what the importer wrote",
    );
    c.mem_unmap(rc, G).unwrap();
    c.mem_release(m).unwrap();
    assert_eq!(c.mem_get_info(), Ok((VM_QUOTA, VM_QUOTA)));

    // The exporter releases its handle unmapped, and then the importer,
    // the last holder, exits: the memory goes, though the exporter's
    // context (whose table held it) lives on.
    let mut e = rig.cuda(0);
    let m = c.mem_create(G).unwrap();
    let token = c.mem_export(m).unwrap();
    e.mem_import(token).unwrap();
    c.mem_release(m).unwrap();
    assert_eq!(c.mem_get_info(), Ok((VM_QUOTA - G, VM_QUOTA)));
    drop(e);
    wait_for_status(&rig.d, "the last holder's memory to go", |s| {
        vm(s, "vm1").contexts == 2 && vm(s, "vm1").mem_used == 0
    });
    assert_refused(c.mem_import(token), inval);
    let scratch = b.mem_alloc(4096).unwrap();
    still_works(&mut b, scratch, 4);
}

/// Shared virtual memory of a context that threads share (channels joined
/// into it) survives the channel that made the context: the context moves
/// to another channel of it, and the memory, exported, still reaches an
/// importer in another process after the whole context has gone.
#[test]
fn shared_virtual_memory_follows_its_context_to_another_thread() {
    const G: u64 = fairgpu_protocol::cuda::VMM_GRANULARITY;
    let rig = Rig::start("cuda_vmm_shared_joined");
    let mut x = rig.cuda(0);
    let mut y = rig.cuda(0);
    let ids = Arc::new(std::sync::atomic::AtomicU64::new(1));
    for cu in [&mut x, &mut y] {
        cu.channel().share_call_ids(ids.clone());
    }
    y.context_join(x.context_share().unwrap()).unwrap();
    let m = x.mem_create(G).unwrap();
    let r = x.mem_address_reserve(G, 0).unwrap();
    x.mem_map(r, G, 0, m).unwrap();
    x.mem_set_access(r, G, 3).unwrap();
    let data = pattern(8192, 9);
    x.memcpy_htod(r + 4096, &data).unwrap();
    x.mem_unmap(r, G).unwrap();
    let token = x.mem_export(m).unwrap();
    // The thread that made the context goes; the other keeps it.
    drop(x);
    wait_for_status(&rig.d, "the first thread's channel to go", |s| {
        vm(s, "vm1").channels_used == 1
    });
    let mut w = rig.cuda(0);
    let (mw, bytes) = w.mem_import(token).unwrap();
    assert_eq!(bytes, G);
    // The context goes with its last thread; the importer's handle keeps
    // the memory and its bytes.
    drop(y);
    wait_for_status(&rig.d, "the shared context to go", |s| {
        vm(s, "vm1").contexts == 1
    });
    assert_eq!(w.mem_get_info(), Ok((VM_QUOTA - G, VM_QUOTA)));
    let rw = w.mem_address_reserve(G, 0).unwrap();
    w.mem_map(rw, G, 0, mw).unwrap();
    w.mem_set_access(rw, G, 3).unwrap();
    assert_bytes_eq(&read(&mut w, rw + 4096, 8192), &data, "the importer's view");
    w.mem_unmap(rw, G).unwrap();
    w.mem_release(mw).unwrap();
    assert_eq!(
        w.mem_get_info(),
        Ok((VM_QUOTA, VM_QUOTA)),
        "freed with the last handle"
    );
    w.mem_address_free(rw, G).unwrap();
}

/// CUDA IPC is between the processes of one VM: a token opens in another
/// channel of the exporting VM (the same address, the exporter's bytes;
/// an event recorded in either process),
/// never in another VM's channel, nor in the exporting channel, nor once
/// forged; a channel cannot free memory it opened; the exporter's free
/// waits for the last close (the VM stays charged till then), and when
/// the exporter goes its exports go with it.
#[test]
fn ipc_tokens_open_only_within_their_vm_and_memory_outlives_the_exporters_free() {
    let rig = Rig::start("cuda_ipc");
    let mut a = rig.cuda(0);
    let mut b = rig.cuda(0);
    let mut other_vm = rig.cuda(1);
    let p = a.mem_alloc(8192).unwrap();
    let data = pattern(8192, 7);
    a.memcpy_htod(p, &data).unwrap();
    let (token, base, size) = a.ipc_get_mem_handle(p + 100).unwrap();
    assert_eq!((base, size), (p, 8192));
    assert_eq!(
        a.ipc_get_mem_handle(p).unwrap().0,
        token,
        "one token per allocation"
    );
    assert_refused(a.ipc_get_mem_handle(p + 8192), Status::INVALID_VALUE);

    assert_refused(other_vm.ipc_open_mem_handle(token), Status::INVALID_VALUE);
    assert_refused(a.ipc_open_mem_handle(token), Status::INVALID_CONTEXT);
    assert_refused(b.ipc_open_mem_handle(token ^ 1), Status::INVALID_VALUE);
    assert_eq!(b.ipc_open_mem_handle(token).unwrap(), (p, 8192));
    assert_bytes_eq(&read(&mut b, p, 8192), &data, "the importer's view");
    b.memcpy_htod(p + 8000, &[0xab; 192]).unwrap();
    assert_eq!(read(&mut a, p + 8000, 4), vec![0xab; 4]);
    assert_refused(b.mem_free(p), Status::INVALID_VALUE);
    // The other VM cannot reach it by address either.
    assert_refused(other_vm.memcpy_htod(p, &[1]), Status::INVALID_VALUE);

    // Freed by the exporter while open: still there for the importer, and
    // still charged.
    a.mem_free(p).unwrap();
    assert_refused(a.memcpy_htod(p, &[1]), Status::INVALID_VALUE);
    assert_eq!(read(&mut b, p, 4), data[..4].to_vec());
    assert_eq!(a.mem_get_info().unwrap().0, VM_QUOTA - 8192);
    b.ipc_close_mem_handle(p).unwrap();
    assert_refused(b.ipc_close_mem_handle(p), Status::INVALID_VALUE);
    assert_refused(b.memcpy_htod(p, &[1]), Status::INVALID_VALUE);
    assert_eq!(
        a.mem_get_info().unwrap().0,
        VM_QUOTA,
        "freed at the last close"
    );

    // Events alike: CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS.
    let e = a.event_create(6).unwrap();
    let t = a.ipc_get_event_handle(e).unwrap();
    assert_refused(other_vm.ipc_open_event_handle(t), Status::INVALID_VALUE);
    assert_refused(a.ipc_open_event_handle(t), Status::INVALID_CONTEXT);
    let be = b.ipc_open_event_handle(t).unwrap();
    assert_refused(b.ipc_get_event_handle(be), Status::INVALID_VALUE);
    b.event_record_sync(be, 0).unwrap();
    assert_eq!(a.event_query(e), Ok(true));
    b.event_synchronize(be).unwrap();
    // Destroyed by its exporter while open: the opener's handle works on.
    a.event_destroy(e).unwrap();
    assert_refused(a.event_query(e), Status::INVALID_HANDLE);
    b.event_record_sync(be, 0).unwrap();
    b.event_destroy(be).unwrap();
    assert_refused(b.event_query(be), Status::INVALID_HANDLE);
    assert_refused(b.ipc_open_event_handle(t), Status::INVALID_VALUE);

    // An exporter that goes takes its exports with it.
    let q = a.mem_alloc(4096).unwrap();
    let (token, _, _) = a.ipc_get_mem_handle(q).unwrap();
    b.ipc_open_mem_handle(token).unwrap();
    drop(a);
    wait_for_status(&rig.d, "the exporter's context to go", |s| {
        vm(s, "vm1").contexts == 1
    });
    assert_refused(b.memcpy_htod(q, &[1]), Status::INVALID_VALUE);
    assert_refused(b.ipc_close_mem_handle(q), Status::INVALID_VALUE);
    assert_refused(b.ipc_open_mem_handle(token), Status::INVALID_VALUE);
    assert_eq!(b.mem_get_info().unwrap().0, VM_QUOTA);
}

/// An importer that destroys its context (`cuCtxDestroy`, or
/// `cudaDeviceReset` without closing what it opened) closes its imports:
/// the exporter's memory and events stay the exporter's, with their bytes,
/// and its free gives the quota back.
#[test]
fn an_importers_context_destroy_leaves_the_exporters_memory() {
    let rig = Rig::start("cuda_ipc_destroy");
    let mut a = rig.cuda(0);
    let mut b = rig.cuda(0);
    let p = a.mem_alloc(4096).unwrap();
    let data = pattern(4096, 3);
    a.memcpy_htod(p, &data).unwrap();
    let (token, _, _) = a.ipc_get_mem_handle(p).unwrap();
    let e = a.event_create(6).unwrap();
    let t = a.ipc_get_event_handle(e).unwrap();
    assert_eq!(b.ipc_open_mem_handle(token).unwrap(), (p, 4096));
    b.ipc_open_event_handle(t).unwrap();
    assert_bytes_eq(&read(&mut b, p, 4096), &data, "the importer's view");
    b.context_destroy().unwrap();

    assert_bytes_eq(&read(&mut a, p, 4096), &data, "the exporter's bytes");
    a.memcpy_htod(p, &[9; 16]).unwrap();
    a.event_record_sync(e, 0).unwrap();
    assert_eq!(a.event_query(e), Ok(true));
    a.event_destroy(e).unwrap();
    a.mem_free(p).unwrap();
    assert_eq!(
        a.mem_get_info().unwrap().0,
        VM_QUOTA,
        "the exporter's free gave the quota back"
    );
}

/// Context tags are not reused while their context lives: a channel that
/// destroys and remakes its context more times than there are tags never
/// gets the tag of another channel's live context, so neither accepts the
/// other's handles.
#[test]
fn a_remade_context_never_takes_a_live_contexts_tag() {
    let rig = Rig::start("cuda_ctx_tags");
    let mut a = rig.cuda(0);
    let mut b = rig.cuda(0);
    let s = a.stream_create(0).unwrap();
    for round in 0..=u32::from(fairgpu_protocol::handle::MAX_TAG) {
        let sb = b.stream_create(0).unwrap();
        assert_ne!(sb, s, "round {round}: another context's handle");
        assert_refused(b.stream_synchronize(s), Status::INVALID_HANDLE);
        b.context_destroy().unwrap();
    }
    assert_eq!(a.stream_query(s), Ok(true), "A's stream survives");
}

/// A graph launch (`GraphLaunch`): the asynchronous requests gathered
/// between `begin_batch` and `end_batch` cross as one request, and the
/// host runs them in order, each checked as the request it stands for; a
/// malformed graph launch fails that request only, and a step that fails
/// ends its launch (the steps after it do not run) with its error
/// deferred, as an asynchronous request's is.
#[test]
fn a_graph_launch_runs_its_steps_in_order_as_one_request() {
    use fairgpu_protocol::cuda::{push_graph_step, GRAPH_STEP_HEADER};
    use fairgpu_protocol::Opcode;
    let rig = Rig::start("cuda_graph_launch");
    let mut cu = rig.cuda(0);
    const LEN: usize = 4096;
    let x = cu.mem_alloc(LEN as u64).unwrap();
    let s = cu.stream_create(1).unwrap();
    let e = cu.event_create(0).unwrap();
    let data = pattern(256, 7);
    let mut model = vec![0u8; LEN];
    let before = settled_calls(&rig);

    cu.channel().begin_batch();
    cu.memset_async(x, 0x0102_0304, 4, (LEN / 4) as u64, s)
        .unwrap();
    for w in model.chunks_exact_mut(4) {
        w.copy_from_slice(&0x0102_0304u32.to_le_bytes());
    }
    cu.memcpy_htod_async(x + 8, &data, s).unwrap();
    model[8..264].copy_from_slice(&data);
    // Reads what the step before it wrote: order matters.
    cu.memcpy_dtod_async(x + 2048, x + 8, 256, s).unwrap();
    model[2048..2304].copy_from_slice(&data);
    cu.memset_async(x + 3001, 0x7f, 1, 99, s).unwrap();
    model[3001..3100].fill(0x7f);
    cu.event_record(e, s).unwrap();
    cu.stream_wait_event(0, e).unwrap();
    // Nothing crossed yet.
    assert_eq!(
        settled_calls(&rig),
        before,
        "a gathered step was sent on its own"
    );
    cu.channel().end_batch().unwrap();
    assert_eq!(
        settled_calls(&rig) - before,
        1,
        "the launch took more than one request"
    );
    cu.event_synchronize(e).unwrap();
    assert_bytes_eq(&read(&mut cu, x, LEN), &model, "the graph's steps");

    // Malformed launches fail that request only.
    let mut steps = Vec::new();
    push_graph_step(&mut steps, Opcode::MemsetD8, [x, 9, 16, 0, 0], &[]);
    push_graph_step(&mut steps, Opcode::MemsetD8, [x, 9, 16, 0, 0], &[]);
    let call = |cu: &mut Cuda, n: u64, b: &[u8]| {
        cu.channel()
            .call_with(Opcode::GraphLaunch, [n, 0, 0, 0, 0], b, &mut [])
            .map(drop)
    };
    let with_op = |op: Opcode| {
        let mut b = steps.clone();
        b[GRAPH_STEP_HEADER..GRAPH_STEP_HEADER + 2].copy_from_slice(&(op as u16).to_le_bytes());
        b
    };
    let bad_len = {
        let mut b = steps.clone();
        b[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        b
    };
    for (what, n, b) in [
        ("one step announced, two sent", 1, steps.clone()),
        ("three announced", 3, steps.clone()),
        ("none", 0, Vec::new()),
        (
            "a copy back to the guest as a step",
            2,
            with_op(Opcode::MemcpyDtoH),
        ),
        ("a graph launch as a step", 2, with_op(Opcode::GraphLaunch)),
        (
            "a synchronisation as a step",
            2,
            with_op(Opcode::CtxSynchronize),
        ),
        ("a step's data past the request's", 2, bad_len),
        ("a truncated step", 2, steps[..steps.len() - 8].to_vec()),
    ] {
        assert_refused(call(&mut cu, n, &b), Status::INVALID_VALUE);
        assert_bytes_eq(&read(&mut cu, x, LEN), &model, what);
    }

    // A failing step ends its launch: the first memset ran, the one after
    // the bad step did not.
    cu.channel().begin_batch();
    cu.memset_async(x, 0xaa, 1, 16, s).unwrap();
    cu.memset_async(FORGED << 20, 0, 1, 16, s).unwrap();
    cu.memset_async(x + 16, 0xbb, 1, 16, s).unwrap();
    cu.channel().end_batch().unwrap();
    assert_eq!(cu.ctx_synchronize(), Err(deferred(Status::INVALID_VALUE)));
    model[..16].fill(0xaa);
    assert_bytes_eq(&read(&mut cu, x, LEN), &model, "after a failed step");
    still_works(&mut cu, x, 9);

    // The other VM was never disturbed.
    let mut other = rig.cuda(1);
    let y = other.mem_alloc(64).unwrap();
    still_works(&mut other, y, 10);
}

/// Channels of one guest process that share its host context (a channel
/// per thread, `ContextShare`/`ContextJoin`): each reaches what the others
/// made, the host serves their requests in the order of their call ids (so
/// a request issued after another channel's runs after it, whatever the
/// channels' places in the region), the context outlives the channel that
/// made it while another names it, and only a fresh channel may join, with
/// a token the host gave.
#[test]
fn channels_that_join_one_context_share_it_and_keep_their_calls_in_order() {
    use std::sync::atomic::AtomicU64;
    let rig = Rig::start("cuda_joined_channels");
    // Claimed in this order, so x has the lowest index: a server that
    // served channels by index would read x's copy before y's memset.
    let mut x = rig.cuda(0);
    let mut y = rig.cuda(0);
    // Another guest of the VM, which holds the worker in a synchronization.
    let mut z = rig.cuda(0);
    assert!(x.channel().index() < y.channel().index());
    let ids = Arc::new(AtomicU64::new(1));
    for cu in [&mut x, &mut y] {
        cu.channel().share_call_ids(ids.clone());
    }
    const LEN: usize = 1 << 16;
    let buf = y.mem_alloc(LEN as u64).unwrap();
    y.memcpy_htod(buf, &vec![0u8; LEN]).unwrap();
    let token = y.context_share().unwrap();
    assert_eq!(y.context_share().unwrap(), token, "one token per context");
    // Bad joins fail that request only.
    assert_refused(x.context_join(token ^ 1), Status::INVALID_VALUE);
    assert_refused(y.context_join(token), Status::INVALID_CONTEXT);
    x.context_join(token).unwrap();
    assert_refused(x.context_join(token), Status::INVALID_CONTEXT);
    // x reaches y's allocation.
    assert_eq!(read(&mut x, buf, 64), vec![0u8; 64]);

    // z's synchronization holds the worker while the device runs its long
    // kernel; meanwhile y queues a memset and x asks for the bytes, which
    // the server then finds both waiting.
    let m = z.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = spin_kernel(&mut z, m).handle;
    spin(&mut z, k, 300_000_000, 0);
    let syncing = std::thread::spawn(move || {
        z.ctx_synchronize().unwrap();
        z
    });
    std::thread::sleep(Duration::from_millis(50));
    y.memset_async(buf, 0xab, 1, LEN as u64, 0).unwrap();
    assert_bytes_eq(
        &read(&mut x, buf, LEN),
        &vec![0xab; LEN],
        "a copy issued after another channel's memset",
    );
    drop(syncing.join().unwrap());

    // y (whose slot held the context) goes: x still uses it.
    drop(y);
    x.memset_async(buf, 0x5a, 1, 64, 0).unwrap();
    assert_eq!(read(&mut x, buf, 64), vec![0x5a; 64]);
    // A new claim (of a channel that held the context) has a context of
    // its own, without x's memory, and cannot join once it has one.
    let mut w = rig.cuda(0);
    w.channel().share_call_ids(ids.clone());
    let mut out = vec![0u8; 64];
    assert_refused(w.memcpy_dtoh(&mut out, buf, 0), Status::INVALID_VALUE);
    assert_refused(w.context_join(token), Status::INVALID_CONTEXT);
    // The last member keeps it alive alone.
    still_works(&mut x, buf, 9);
}

/// A member of a shared context that synchronizes with work still running
/// does not hold the other members' calls: the host puts the
/// synchronization aside while they have requests and answers it once its
/// work is done. Without a scheduler (whose grants could hold the other
/// member's requests for reasons of their own).
#[test]
fn context_limits_are_device_memory_of_the_vm_s_quota() {
    use fairgpu_protocol::cuda::limit;
    let rig = Rig::start("cuda_limits");
    let mut cu = rig.cuda(0);
    let mut other = rig.cuda(1);
    let free = |cu: &mut Cuda| cu.mem_get_info().unwrap().0;
    assert_eq!(free(&mut cu), VM_QUOTA);
    // The heap and the printf FIFO count when set; a new size replaces
    // the old one's charge.
    cu.ctx_set_limit(limit::MALLOC_HEAP_SIZE, 4 << 20).unwrap();
    assert_eq!(free(&mut cu), VM_QUOTA - (4 << 20));
    cu.ctx_set_limit(limit::PRINTF_FIFO_SIZE, 2 << 20).unwrap();
    assert_eq!(free(&mut cu), VM_QUOTA - (6 << 20));
    cu.ctx_set_limit(limit::MALLOC_HEAP_SIZE, 1 << 20).unwrap();
    assert_eq!(free(&mut cu), VM_QUOTA - (3 << 20));
    // Past the quota: refused, the old size kept.
    assert_refused(
        cu.ctx_set_limit(limit::MALLOC_HEAP_SIZE, VM_QUOTA),
        Status::OUT_OF_MEMORY,
    );
    assert_eq!(free(&mut cu), VM_QUOTA - (3 << 20));
    // SimGpu bounds each launch's stacks in host memory: a stack reaches
    // the device and costs the quota nothing (on a GPU, the size times
    // every thread the device holds: docs/wire-protocol.md).
    cu.ctx_set_limit(limit::STACK_SIZE, 64 << 10).unwrap();
    assert_eq!(free(&mut cu), VM_QUOTA - (3 << 20));
    // Limits the host does not hold are refused.
    assert_refused(cu.ctx_set_limit(3, 1), Status::INVALID_VALUE);
    // The other VM's quota is untouched; the channel's limits go with it.
    assert_eq!(free(&mut other), VM_QUOTA);
    drop(cu);
    let mut again = rig.cuda(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while free(&mut again) != VM_QUOTA && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        free(&mut again),
        VM_QUOTA,
        "the limits' charges went with the channel"
    );
}

/// Two channels of VM 0 that share one context, as two threads of one
/// process (one call-id counter), on a daemon without a scheduler, and the
/// spin kernel loaded in it.
fn joined_pair(test: &str) -> (Rig, Cuda, Cuda, u64) {
    use std::sync::atomic::AtomicU64;
    let rig = Rig::start_with(test, "policy = \"none\"");
    let mut x = rig.cuda(0);
    let mut y = rig.cuda(0);
    let ids = Arc::new(AtomicU64::new(1));
    for cu in [&mut x, &mut y] {
        cu.channel().share_call_ids(ids.clone());
    }
    y.context_join(x.context_share().unwrap()).unwrap();
    let m = y.module_load(KERNELS_PTX.as_bytes()).unwrap();
    let k = spin_kernel(&mut y, m).handle;
    (rig, x, y, k)
}

#[test]
fn a_synchronization_put_aside_waits_for_the_work_issued_before_it_alone() {
    let (_rig, mut x, mut y, k) = joined_pair("cuda_marked_sync");
    let mine = y.stream_create(1).unwrap();
    let other = x.stream_create(1).unwrap();
    // Half a second of device time, and y synchronizes the whole context.
    spin(&mut y, k, 500_000_000, mine);
    let waiter = std::thread::spawn(move || {
        y.ctx_synchronize().unwrap();
        y
    });
    std::thread::sleep(Duration::from_millis(100));
    // x issues twenty seconds more after y's synchronization was put
    // aside: a driver's synchronization does not wait for it.
    spin(&mut x, k, 20_000_000_000, other);
    let mut y = waiter.join().unwrap();
    assert!(y.stream_query(mine).unwrap(), "y's own work is done");
    assert!(
        !x.stream_query(other).unwrap(),
        "y's synchronization waited for work x issued after it"
    );
}

#[test]
fn one_thread_s_synchronization_does_not_hold_another_s_calls() {
    let (_rig, mut x, mut y, k) = joined_pair("cuda_joined_sync");
    let long = y.stream_create(1).unwrap();
    let other = x.stream_create(1).unwrap();
    let buf = x.mem_alloc(4096).unwrap();
    // Two seconds of device time on `long`, and y waits for it.
    spin(&mut y, k, 2_000_000_000, long);
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let waiter = std::thread::spawn(move || {
        y.stream_synchronize(long).unwrap();
        flag.store(true, Ordering::SeqCst);
        y
    });
    std::thread::sleep(Duration::from_millis(50));
    for i in 0..20u8 {
        x.memset_async(buf, u32::from(i), 1, 4096, other).unwrap();
        x.stream_synchronize(other).unwrap();
        let mut out = [0u8; 16];
        x.memcpy_dtoh(&mut out, buf, other).unwrap();
        assert_eq!(out, [i; 16]);
    }
    assert!(
        !done.load(Ordering::SeqCst),
        "x's calls waited for y's synchronization"
    );
    let mut y = waiter.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
    still_works(&mut y, buf, 4);
}

/// Two contexts of one VM (two channels, as a process's two CUDA contexts
/// are) give out handles that only their own context accepts: a stream,
/// an event, a module or a function of one named in the other is refused,
/// although the other holds objects in the same table slots.
#[test]
fn a_handle_of_one_context_is_refused_in_another_of_the_same_vm() {
    let rig = Rig::start("cuda_context_handles");
    let mut a = rig.cuda(0);
    let mut b = rig.cuda(0);
    let objects = |cu: &mut Cuda| {
        let m = cu.module_load(KERNELS_PTX.as_bytes()).unwrap();
        let k = spin_kernel(cu, m).handle;
        let s = cu.stream_create(0).unwrap();
        let e = cu.event_create(0).unwrap();
        (m, k, s, e)
    };
    let (am, ak, as_, ae) = objects(&mut a);
    let (bm, bk, bs, be) = objects(&mut b);
    for (x, y) in [(am, bm), (ak, bk), (as_, bs), (ae, be)] {
        assert_ne!(x, y, "the two contexts' handles differ");
    }
    let bad = Status::INVALID_HANDLE;
    assert_refused(b.stream_synchronize(as_), bad);
    assert_refused(b.stream_query(as_), bad);
    assert_refused(b.event_query(ae), bad);
    assert_refused(b.func_get_attribute(ak, 0), bad);
    assert_refused(b.module_get_function(am, "fairgpu_spin"), bad);
    assert_refused(b.module_unload(am), bad);
    // Asynchronous calls naming a's objects in b fail too (at b's next
    // call, as their errors are deferred).
    b.event_record(ae, 0).unwrap();
    assert_eq!(b.ctx_synchronize(), Err(deferred(bad)));
    b.launch(ak, ONE, ONE, 0, bs, &MS.to_le_bytes()).unwrap();
    assert_eq!(b.ctx_synchronize(), Err(deferred(bad)));
    // Each context's own objects still work, in both.
    for (cu, k, s, e) in [(&mut a, ak, as_, ae), (&mut b, bk, bs, be)] {
        spin(cu, k, 1000, s);
        cu.event_record(e, s).unwrap();
        cu.stream_synchronize(s).unwrap();
        assert!(cu.event_query(e).unwrap());
    }
    a.module_unload(am).unwrap();
    b.module_unload(bm).unwrap();
}
