"""Numba's CUDA target through fairgpu: each check compiles Python kernels
with Numba (NVVM to PTX, linked through the driver's cuLink* calls), runs
them on the (virtual) GPU and compares with NumPy on the CPU. Prints one
line per check (PASS/FAIL name) and exits 1 if any failed, 0 if all
passed.

Run with the guest library as libcuda.so.1 and FAIRGPU_REGION set. On
SimGpu, without nvJitLink installed: Numba then links through the
driver's cuLink* calls, which keep the PTX that SimGpu executes (nvJitLink
would make machine code for one GPU in the guest).
Usage: python3 check.py [NAME ...]   (default: every check)
"""
import math
import sys
import traceback
import warnings

import numpy as np
from numba import cuda, float32, float64, int32, vectorize, guvectorize

# Numba warns about small grids and about linking without nvJitLink; both
# are expected here.
warnings.simplefilter("ignore")

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def same(got, want, exact=True, rtol=1e-6, atol=1e-12):
    got = got.copy_to_host() if cuda.is_cuda_array(got) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype} != {want.dtype}"
    if exact:
        assert np.array_equal(got, want), f"\n got {got.ravel()[:8]}\nwant {want.ravel()[:8]}"
    else:
        assert np.allclose(got, want, rtol=rtol, atol=atol), (
            f"\n got {got.ravel()[:8]}\nwant {want.ravel()[:8]}"
        )


rng = np.random.default_rng(4321)


@cuda.jit
def axpy(a, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a * x[i] + y[i]


@check
def elementwise_and_copies():
    n = 100_003
    x = rng.standard_normal(n)
    y = rng.standard_normal(n)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    out = cuda.device_array_like(x)
    axpy[(n + 255) // 256, 256](2.5, dx, dy, out)
    # The GPU contracts a * x + y into one fused multiply-add: one rounding,
    # where NumPy rounds twice.
    same(out, 2.5 * x + y, exact=False, rtol=1e-15, atol=1e-15)
    # Copies back into an existing host array, slices of device arrays,
    # device-to-device copies.
    host = np.empty_like(x)
    out.copy_to_host(host)
    same(host, out.copy_to_host())
    part = cuda.device_array(1000)
    part.copy_to_device(dx[5000:6000])
    same(part, x[5000:6000])
    ints = np.arange(77 * 13, dtype=np.int32).reshape(77, 13)
    same(cuda.to_device(ints), ints)


@cuda.jit
def block_sums(x, out):
    # Tree reduction in shared memory, then one atomic per block.
    buf = cuda.shared.array(256, float64)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    buf[t] = x[i] if i < x.size else 0.0
    cuda.syncthreads()
    s = 128
    while s > 0:
        if t < s:
            buf[t] += buf[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, buf[0])


@cuda.jit
def histogram(x, bins):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(bins, x[i] % bins.size, 1)


@check
def shared_memory_and_atomics():
    x = rng.integers(-1000, 1000, 50_000).astype(np.float64)
    out = cuda.to_device(np.zeros(1))
    block_sums[(x.size + 255) // 256, 256](cuda.to_device(x), out)
    same(out, np.array([x.sum()]))
    v = rng.integers(0, 1 << 20, 200_000).astype(np.int32)
    bins = cuda.to_device(np.zeros(37, dtype=np.int32))
    histogram[(v.size + 127) // 128, 128](cuda.to_device(v), bins)
    same(bins, np.bincount(v % 37, minlength=37).astype(np.int32))


TILE = 16


@cuda.jit
def matmul(a, b, c):
    sa = cuda.shared.array((TILE, TILE), float32)
    sb = cuda.shared.array((TILE, TILE), float32)
    x, y = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for k0 in range(0, a.shape[1], TILE):
        sa[ty, tx] = a[y, k0 + tx] if y < a.shape[0] and k0 + tx < a.shape[1] else 0
        sb[ty, tx] = b[k0 + ty, x] if k0 + ty < b.shape[0] and x < b.shape[1] else 0
        cuda.syncthreads()
        for k in range(TILE):
            acc += sa[ty, k] * sb[k, tx]
        cuda.syncthreads()
    if y < c.shape[0] and x < c.shape[1]:
        c[y, x] = acc


@check
def tiled_matmul_2d_grid():
    a = rng.standard_normal((70, 45)).astype(np.float32)
    b = rng.standard_normal((45, 53)).astype(np.float32)
    c = cuda.device_array((70, 53), dtype=np.float32)
    grid = ((53 + TILE - 1) // TILE, (70 + TILE - 1) // TILE)
    matmul[grid, (TILE, TILE)](cuda.to_device(a), cuda.to_device(b), c)
    same(c, a @ b, exact=False, rtol=1e-4, atol=1e-4)


@vectorize(["float64(float64, float64)", "float32(float32, float32)"], target="cuda")
def wave(x, y):
    return math.sin(x) * math.exp(-y * y) + math.sqrt(abs(x)) - math.atan2(y, x + 3.0)


@guvectorize(["void(float64[:], float64[:])"], "(n)->()", target="cuda")
def norm(row, out):
    s = 0.0
    for v in row:
        s += v * v
    out[0] = math.sqrt(s)


@check
def ufuncs_with_libdevice():
    x = rng.standard_normal(10_000)
    y = rng.standard_normal(10_000)
    want = np.sin(x) * np.exp(-y * y) + np.sqrt(np.abs(x)) - np.arctan2(y, x + 3.0)
    same(wave(x, y), want, exact=False, rtol=1e-12, atol=1e-12)
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    same(wave(x32, y32), want.astype(np.float32), exact=False, rtol=1e-5, atol=1e-5)
    m = rng.standard_normal((300, 17))
    same(norm(m), np.sqrt((m * m).sum(axis=1)), exact=False, rtol=1e-12)


@check
def reduce_kernels():
    add = cuda.reduce(lambda a, b: a + b)
    biggest = cuda.reduce(lambda a, b: max(a, b))
    v = rng.integers(-(1 << 20), 1 << 20, 123_457).astype(np.int64)
    assert add(v) == v.sum(), f"{add(v)} != {v.sum()}"
    assert biggest(v) == v.max(), f"{biggest(v)} != {v.max()}"
    f = rng.standard_normal(4099)
    assert math.isclose(add(f), f.sum(), rel_tol=1e-9), f"{add(f)} != {f.sum()}"


@cuda.jit
def warp_ops(x, sums, ballots, lane_ids):
    i = cuda.grid(1)
    lane = cuda.laneid
    v = x[i]
    off = 16
    while off > 0:
        v += cuda.shfl_down_sync(0xFFFFFFFF, v, off)
        off //= 2
    b = cuda.ballot_sync(0xFFFFFFFF, x[i] > 0)
    if lane == 0:
        sums[i // 32] = v
        ballots[i // 32] = b
    lane_ids[i] = lane


@check
def warp_shuffles_and_votes():
    x = rng.integers(-50, 50, 32 * 40).astype(np.int32)
    sums = cuda.device_array(40, dtype=np.int32)
    ballots = cuda.device_array(40, dtype=np.uint32)
    lanes = cuda.device_array(x.size, dtype=np.int32)
    warp_ops[x.size // 128, 128](cuda.to_device(x), sums, ballots, lanes)
    same(sums, x.reshape(40, 32).sum(axis=1).astype(np.int32))
    bits = (x.reshape(40, 32) > 0).astype(np.uint64) << np.arange(32, dtype=np.uint64)
    same(ballots, bits.sum(axis=1).astype(np.uint32))
    same(lanes, np.tile(np.arange(32, dtype=np.int32), 40))


@cuda.jit(device=True)
def collatz_steps(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


@cuda.jit
def collatz(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = collatz_steps(i + 1)


@cuda.jit
def bubble_sort_rows(m):
    # A per-thread local array, sorted in place.
    row = cuda.grid(1)
    if row >= m.shape[0]:
        return
    tmp = cuda.local.array(24, int32)
    for j in range(m.shape[1]):
        tmp[j] = m[row, j]
    for a in range(m.shape[1]):
        for b in range(m.shape[1] - 1 - a):
            if tmp[b] > tmp[b + 1]:
                tmp[b], tmp[b + 1] = tmp[b + 1], tmp[b]
    for j in range(m.shape[1]):
        m[row, j] = tmp[j]


def collatz_cpu(n):
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


@check
def device_functions_and_local_arrays():
    out = cuda.device_array(3000, dtype=np.int64)
    collatz[(3000 + 127) // 128, 128](out)
    same(out, np.array([collatz_cpu(i + 1) for i in range(3000)], dtype=np.int64))
    m = rng.integers(-99, 99, (500, 24)).astype(np.int32)
    dm = cuda.to_device(m)
    bubble_sort_rows[4, 128](dm)
    same(dm, np.sort(m, axis=1))


@check
def streams_events_pinned_and_mapped():
    n = 1 << 16
    s1, s2 = cuda.stream(), cuda.stream()
    x = cuda.pinned_array(n, dtype=np.float64)
    x[:] = rng.standard_normal(n)
    y = np.ones(n)
    start, end = cuda.event(), cuda.event()
    start.record(s1)
    dx = cuda.to_device(x, stream=s1)
    dy = cuda.to_device(y, stream=s1)
    out = cuda.device_array(n, stream=s1)
    axpy[n // 256, 256, s1](-1.0, dx, dy, out)
    end.record(s1)
    back = cuda.pinned_array(n, dtype=np.float64)
    out.copy_to_host(back, stream=s1)
    s1.synchronize()
    same(back, -x + y, exact=False, rtol=1e-15, atol=1e-15)
    assert end.query() and cuda.event_elapsed_time(start, end) >= 0.0
    # Work on another stream that waits for an event of the first.
    e = cuda.event()
    out2 = cuda.device_array(n, stream=s1)
    axpy[n // 256, 256, s1](3.0, dx, dy, out2)
    e.record(s1)
    e.wait(s2)
    res = cuda.device_array(n, stream=s2)
    axpy[n // 256, 256, s2](2.0, out2, dy, res)
    s2.synchronize()
    same(res, 2.0 * (3.0 * x + y) + y, exact=False, rtol=1e-14, atol=1e-14)
    # Mapped host memory, written by a kernel, read by the CPU.
    mx = cuda.mapped_array(4096, dtype=np.float64)
    my = cuda.mapped_array(4096, dtype=np.float64)
    mo = cuda.mapped_array(4096, dtype=np.float64)
    mx[:] = np.arange(4096.0)
    my[:] = 1.0
    axpy[16, 256](0.5, mx, my, mo)
    cuda.synchronize()
    same(np.array(mo), 0.5 * np.arange(4096.0) + 1.0)


@check
def managed_memory():
    n = 10_000
    a = cuda.managed_array(n, dtype=np.float64)
    b = cuda.managed_array(n, dtype=np.float64)
    out = cuda.managed_array(n, dtype=np.float64)
    a[:] = rng.standard_normal(n)
    b[:] = np.arange(n)
    axpy[(n + 255) // 256, 256](4.0, a, b, out)
    cuda.synchronize()
    same(np.array(out), 4.0 * np.array(a) + np.arange(n))


@cuda.jit
def complex_rotate(z, out):
    i = cuda.grid(1)
    if i < z.size:
        out[i] = z[i] * 1j + abs(z[i])


@check
def complex_numbers():
    z = (rng.standard_normal(5000) + 1j * rng.standard_normal(5000)).astype(np.complex128)
    out = cuda.device_array_like(z)
    complex_rotate[(5000 + 127) // 128, 128](cuda.to_device(z), out)
    same(out, z * 1j + np.abs(z), exact=False, rtol=1e-12)


@check
def errors_are_reported():
    # An out-of-bounds index is checked by Numba's bounds checking only in
    # debug mode; a launch larger than the device allows must fail cleanly.
    try:
        axpy[1, 4096](1.0, cuda.to_device(np.ones(1)), cuda.to_device(np.ones(1)),
                      cuda.device_array(1))
        cuda.synchronize()
    except cuda.CudaSupportError:
        raise
    except Exception as e:  # a CUDA driver error for the invalid block size
        assert "INVALID_VALUE" in str(e) or "invalid" in str(e).lower(), str(e)
    else:
        raise AssertionError("a block of 4096 threads was accepted")
    # A block above the kernel's launch bound is refused at the launch.
    @cuda.jit(launch_bounds=64)
    def bounded(out):
        out[cuda.grid(1)] = 1.0

    small = cuda.device_array(128)
    bounded[2, 64](small)
    try:
        bounded[1, 128](small)
    except Exception as e:
        assert "INVALID_VALUE" in str(e), str(e)
    else:
        raise AssertionError("a block of 128 threads passed a launch bound of 64")
    same(small, np.ones(128))
    # The context is still usable afterwards.
    out = cuda.device_array(10)
    axpy[1, 32](1.0, cuda.to_device(np.arange(10.0)), cuda.to_device(np.ones(10)), out)
    same(out, np.arange(10.0) + 1.0)


COEFFS = np.array([0.5, -1.25, 2.0, 0.125, 3.0], dtype=np.float64)


@cuda.jit
def polynomial(x, out):
    # COEFFS becomes a __constant__ array of the module.
    c = cuda.const.array_like(COEFFS)
    i = cuda.grid(1)
    if i < x.size:
        acc = 0.0
        for k in range(c.size):
            acc = acc * x[i] + c[k]
        out[i] = acc


@cuda.jit
def reverse_blocks(x, out):
    # Dynamic shared memory: its size comes with the launch.
    buf = cuda.shared.array(0, dtype=float32)
    t = cuda.threadIdx.x
    n = cuda.blockDim.x
    base = cuda.blockIdx.x * n
    buf[t] = x[base + t]
    cuda.syncthreads()
    out[base + t] = buf[n - 1 - t]


@check
def constant_and_dynamic_shared_memory():
    x = rng.standard_normal(3000)
    out = cuda.device_array_like(x)
    polynomial[(3000 + 127) // 128, 128](cuda.to_device(x), out)
    want = np.zeros_like(x)
    for c in COEFFS:
        want = want * x + c
    same(out, want, exact=False, rtol=1e-12, atol=1e-12)
    v = rng.standard_normal(96 * 20).astype(np.float32)
    r = cuda.device_array_like(v)
    reverse_blocks[20, 96, 0, 96 * 4](cuda.to_device(v), r)
    same(r, v.reshape(20, 96)[:, ::-1].ravel())


@cuda.jit
def atomics(x, fsum, imax, imin, cas_hits, slots):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(fsum, 0, float32(x[i] % 7))
        cuda.atomic.max(imax, 0, x[i])
        cuda.atomic.min(imin, 0, x[i])
        # Each slot is claimed by exactly one thread.
        if cuda.atomic.compare_and_swap(slots[x[i] % slots.size:], -1, i) == -1:
            cuda.atomic.add(cas_hits, 0, 1)


@check
def atomic_operations():
    x = rng.integers(0, 1 << 24, 20_000).astype(np.int32)
    fsum = cuda.to_device(np.zeros(1, dtype=np.float32))
    imax = cuda.to_device(np.array([-1], dtype=np.int32))
    imin = cuda.to_device(np.array([1 << 30], dtype=np.int32))
    hits = cuda.to_device(np.zeros(1, dtype=np.int32))
    slots = cuda.to_device(np.full(257, -1, dtype=np.int32))
    atomics[(x.size + 255) // 256, 256](cuda.to_device(x), fsum, imax, imin, hits, slots)
    # Sums of small integers in float32 are exact whatever the order.
    same(fsum, np.array([(x % 7).sum()], dtype=np.float32))
    same(imax, np.array([x.max()], dtype=np.int32))
    same(imin, np.array([x.min()], dtype=np.int32))
    claimed = slots.copy_to_host()
    used = np.unique(x % 257)
    same(hits, np.array([used.size], dtype=np.int32))
    assert (claimed[used] >= 0).all() and (np.delete(claimed, used) == -1).all()
    assert (x[claimed[used]] % 257 == used).all(), "a slot holds a thread that did not hash to it"


@cuda.jit
def half_math(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = cuda.fp16.hfma(a[i], b[i], a[i]) - cuda.fp16.hmax(a[i], b[i])


@check
def half_precision():
    a = rng.uniform(-4, 4, 2048).astype(np.float16)
    b = rng.uniform(-4, 4, 2048).astype(np.float16)
    out = cuda.device_array(2048, dtype=np.float16)
    half_math[16, 128](cuda.to_device(a), cuda.to_device(b), out)
    # fma rounds once to half; the subtraction rounds again.
    fma = (a.astype(np.float64) * b + a).astype(np.float16)
    same(out, (fma - np.maximum(a, b)).astype(np.float16))


particle = np.dtype([("x", np.float64), ("y", np.float64), ("id", np.int32)], align=True)


@cuda.jit
def move(ps, dt):
    i = cuda.grid(1)
    if i < ps.size:
        ps[i].x += dt * ps[i].id
        ps[i].y -= dt


@check
def structured_records():
    ps = np.zeros(1000, dtype=particle)
    ps["x"] = rng.standard_normal(1000)
    ps["y"] = rng.standard_normal(1000)
    ps["id"] = np.arange(1000)
    d = cuda.to_device(ps)
    move[8, 128](d, 0.25)
    got = d.copy_to_host()
    same(got["x"], ps["x"] + 0.25 * ps["id"], exact=False, rtol=1e-15, atol=1e-15)
    same(got["y"], ps["y"] - 0.25)
    same(got["id"], ps["id"])


@cuda.jit(debug=True, opt=False)
def checked_store(out, i):
    if i >= out.size:
        raise IndexError("store past the end")
    out[i] = 1.0


@check
def kernel_exceptions():
    # With debug=True an exception raised in a kernel is recorded in a
    # module global, which Numba reads (cuModuleGetGlobal, a copy) after
    # the launch and raises on the host.
    out = cuda.device_array(8)
    checked_store[1, 1](out, 3)
    cuda.synchronize()
    assert out.copy_to_host()[3] == 1.0
    try:
        checked_store[1, 1](out, 8)
        cuda.synchronize()
    except IndexError as e:
        assert "store past the end" in str(e), str(e)
    else:
        raise AssertionError("an exception raised in a debug kernel was not reported")


@cuda.jit
def grid_phases(x, out):
    # Every phase reads what other blocks wrote in the phase before: right
    # only if the grid-wide barrier holds every block until all arrived.
    g = cuda.cg.this_grid()
    i = cuda.grid(1)
    n = x.size
    x[i] = i * 3
    g.sync()
    v = x[(i + cuda.blockDim.x) % n] + x[(i + 1) % n]
    g.sync()
    x[i] = v
    g.sync()
    out[i] = x[(n - 1 - i)]


@check
def cooperative_grid_sync():
    # Numba links NVIDIA's device runtime for grid groups and launches the
    # kernel cooperatively.
    blocks, threads = 8, 128
    n = blocks * threads
    x = cuda.device_array(n, dtype=np.int64)
    out = cuda.device_array(n, dtype=np.int64)
    grid_phases[blocks, threads](x, out)
    i = np.arange(n)
    v = ((i + threads) % n) * 3 + ((i + 1) % n) * 3
    same(out, v[n - 1 - i])
    assert grid_phases.overloads[grid_phases.signatures[0]].cooperative


@cuda.jit("i8(i8)", device=True)
def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


@cuda.jit
def fibs(out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = fib(i % 18)


@check
def recursive_device_functions():
    # Numba returns a device function's value through a pointer into its
    # caller's local memory, which a recursion passes down to deeper
    # activations of itself; lanes of a warp at different depths.
    out = cuda.device_array(96, dtype=np.int64)
    fibs[3, 32](out)

    def fib_cpu(n):
        a, b = 0, 1
        for _ in range(n):
            a, b = b, a + b
        return a

    same(out, np.array([fib_cpu(i % 18) for i in range(96)], dtype=np.int64))


@cuda.jit
def add_one(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


def ipc_child(handle, q):
    # A process of its own (spawned: a fresh interpreter, a fresh CUDA
    # context) opens the parent's allocation, reads it and adds 1 on the
    # device.
    try:
        with handle as arr:
            got = arr.copy_to_host()
            add_one[(arr.size + 127) // 128, 128](arr)
            cuda.synchronize()
        q.put(("ok", got))
    except Exception as e:
        q.put(("error", f"{type(e).__name__}: {e}"))


@check
def ipc_between_processes():
    # Numba's IPC: the handle pickles to another process of the same VM,
    # which opens the same device memory (cuIpcOpenMemHandle).
    import multiprocessing as mp

    x = rng.integers(0, 1 << 20, 5000).astype(np.int32)
    d = cuda.to_device(x)
    handle = d.get_ipc_handle()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=ipc_child, args=(handle, q))
    p.start()
    try:
        status, got = q.get(timeout=120)
    finally:
        p.join(120)
    assert status == "ok", got
    assert p.exitcode == 0, f"the child exited with {p.exitcode}"
    same(got, x)
    same(d, x + 1)


@check
def device_queries():
    dev = cuda.get_current_device()
    assert dev.compute_capability >= (5, 0), dev.compute_capability
    assert dev.MAX_THREADS_PER_BLOCK >= 1024 and dev.WARP_SIZE == 32
    free, total = cuda.current_context().get_memory_info()
    assert 0 < free <= total
    big = cuda.device_array(16 << 20, dtype=np.uint8)
    free2, _ = cuda.current_context().get_memory_info()
    assert free2 <= free - (16 << 20), f"{free} then {free2} after a 16 MiB allocation"
    del big


def main():
    names = sys.argv[1:]
    failed = 0
    for fn in CHECKS:
        if names and fn.__name__ not in names:
            continue
        try:
            fn()
            print(f"PASS {fn.__name__}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {fn.__name__}", flush=True)
            traceback.print_exc()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
