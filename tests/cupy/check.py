"""CuPy through fairgpu: each check computes on the (virtual) GPU and
compares with NumPy on the CPU. Prints one line per check (PASS/FAIL name)
and exits 1 if any failed, 0 if all passed.

Run with the guest library as libcuda.so.1 and FAIRGPU_REGION set; on
SimGpu also CUPY_COMPILE_WITH_PTX=1 (SimGpu executes PTX, not SASS).
Usage: python3 check.py [NAME ...]   (default: every check)
"""
import sys
import traceback

import numpy as np
import cupy as cp

CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def same(got, want, exact=True):
    got = cp.asnumpy(got) if isinstance(got, cp.ndarray) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype or not exact, f"dtype {got.dtype} != {want.dtype}"
    if exact:
        assert np.array_equal(got, want), f"\n got {got.ravel()[:8]}\nwant {want.ravel()[:8]}"
    else:
        assert np.allclose(got, want, rtol=1e-5, atol=1e-6), f"\n got {got.ravel()[:8]}\nwant {want.ravel()[:8]}"


rng = np.random.default_rng(1234)


@check
def creation():
    same(cp.zeros((3, 5), dtype=cp.float32), np.zeros((3, 5), dtype=np.float32))
    same(cp.ones(1000), np.ones(1000))
    same(cp.full((7,), 3, dtype=cp.int64), np.full((7,), 3, dtype=np.int64))
    same(cp.arange(10007, dtype=cp.int32), np.arange(10007, dtype=np.int32))
    same(cp.linspace(0, 1, 33), np.linspace(0, 1, 33), exact=False)
    same(cp.eye(5, dtype=cp.float64), np.eye(5))


@check
def copies():
    a = rng.standard_normal((123, 77)).astype(np.float32)
    d = cp.asarray(a)
    same(d, a)
    same(d.copy(), a)
    same(d.T.copy(), a.T.copy())
    same(d[5:100:3, 2::4], a[5:100:3, 2::4])
    b = cp.empty_like(d)
    b[...] = d
    same(b, a)
    same(cp.ascontiguousarray(d[:, ::-1]), np.ascontiguousarray(a[:, ::-1]))
    same(d.astype(cp.float64), a.astype(np.float64))


@check
def elementwise():
    x = rng.standard_normal(10_001).astype(np.float32)
    y = rng.standard_normal(10_001).astype(np.float32)
    dx, dy = cp.asarray(x), cp.asarray(y)
    same(dx + dy, x + y)
    same(dx * dy - 2.5, x * y - np.float32(2.5))
    same(dx / (cp.abs(dy) + 1), x / (np.abs(y) + 1), exact=False)
    i = rng.integers(-1000, 1000, 4099).astype(np.int64)
    di = cp.asarray(i)
    same(di * 3 + 7, i * 3 + 7)
    same(di // 7, i // 7)
    same(di % 7, i % 7)
    same(di >> 2, i >> 2)
    same(dx > dy, x > y)


@check
def ufuncs():
    x = rng.uniform(0.1, 10, 5000).astype(np.float64)
    dx = cp.asarray(x)
    for name in ["sin", "cos", "exp", "log", "sqrt", "tanh", "arctan"]:
        same(getattr(cp, name)(dx), getattr(np, name)(x), exact=False)
    y = rng.uniform(0.1, 10, 5000).astype(np.float64)
    dy = cp.asarray(y)
    same(cp.maximum(dx, dy), np.maximum(x, y))
    same(cp.minimum(dx, dy), np.minimum(x, y))
    same(cp.where(dx > dy, dx, -dy), np.where(x > y, x, -y))
    same(cp.power(dx, 1.5), np.power(x, 1.5), exact=False)
    f = x.astype(np.float32)
    same(cp.sqrt(cp.asarray(f)), np.sqrt(f), exact=False)
    same(cp.clip(dx, 2, 5), np.clip(x, 2, 5))


@check
def reductions():
    same(cp.ones(1000).sum(), np.float64(1000))
    for n in [1, 31, 1000, 100_003]:
        v = rng.integers(0, 100, n).astype(np.int64)
        same(cp.asarray(v).sum(), v.sum())
        same(cp.asarray(v).max(), v.max())
        same(cp.asarray(v).min(), v.min())
    a = rng.integers(-50, 50, (37, 45, 11)).astype(np.int32)
    da = cp.asarray(a)
    for axis in [0, 1, 2, (0, 2), None]:
        same(da.sum(axis=axis), a.sum(axis=axis))
        same(da.max(axis=axis), a.max(axis=axis))
    f = rng.standard_normal((64, 129)).astype(np.float64)
    df = cp.asarray(f)
    same(df.sum(axis=1), f.sum(axis=1), exact=False)
    same(df.mean(axis=0), f.mean(axis=0), exact=False)
    same(df.std(), f.std(), exact=False)
    same(cp.argmax(df, axis=1), np.argmax(f, axis=1))
    same(cp.argmin(df), np.argmin(f))
    b = rng.integers(0, 2, 5000).astype(bool)
    same(cp.asarray(b).sum(), b.sum())
    same(cp.count_nonzero(cp.asarray(b)), np.count_nonzero(b))
    same(cp.asarray(b).any(), b.any())
    same(cp.asarray(b).all(), b.all())


@check
def user_kernels():
    add = cp.RawKernel(r'''
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + 2.0f * b[i];
}''', "add")
    n = 3001
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    da, db = cp.asarray(a), cp.asarray(b)
    dc = cp.empty_like(da)
    add(((n + 127) // 128,), (128,), (da, db, dc, cp.int32(n)))
    same(dc, a + np.float32(2) * b)
    sq = cp.ElementwiseKernel("T x, T y", "T z", "z = x * x + y", "sq_plus")
    # NVRTC contracts x * x + y into one fma, NumPy rounds twice.
    same(sq(da, db), a * a + b, exact=False)
    l2 = cp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = a", "0", "l2sq")
    same(l2(cp.asarray(np.arange(100, dtype=np.int64))), np.sum(np.arange(100, dtype=np.int64) ** 2))


@check
def streams_events():
    s = cp.cuda.Stream(non_blocking=True)
    a = rng.standard_normal(100_000).astype(np.float32)
    with s:
        d = cp.asarray(a)
        e1 = cp.cuda.Event()
        e1.record(s)
        r = d * 2
        e2 = cp.cuda.Event()
        e2.record(s)
    e2.synchronize()
    s.synchronize()
    assert cp.cuda.get_elapsed_time(e1, e2) >= 0
    same(r, a * 2)
    assert s.done


@check
def sort_and_scan():
    v = rng.integers(-10_000, 10_000, 20_001).astype(np.int32)
    dv = cp.asarray(v)
    same(cp.sort(dv), np.sort(v))
    same(cp.argsort(cp.asarray(np.unique(v))), np.argsort(np.unique(v)))
    same(cp.cumsum(dv), np.cumsum(v))
    f = rng.standard_normal(777)
    same(cp.cumsum(cp.asarray(f)), np.cumsum(f), exact=False)
    m = rng.integers(0, 100, (13, 17)).astype(np.int64)
    same(cp.cumsum(cp.asarray(m), axis=1), np.cumsum(m, axis=1))
    same(cp.unique(cp.asarray(m)), np.unique(m))


@check
def fancy_indexing():
    a = rng.standard_normal((50, 40)).astype(np.float32)
    da = cp.asarray(a)
    idx = rng.integers(0, 50, 30)
    same(da[cp.asarray(idx)], a[idx])
    mask = a > 0.5
    same(da[cp.asarray(mask)], a[mask])
    b = a.copy()
    db = da.copy()
    b[idx, 3] = -1
    db[cp.asarray(idx), 3] = -1
    same(db, b)
    same(cp.take(da, cp.asarray([3, 1, 4]), axis=1), np.take(a, [3, 1, 4], axis=1))
    h = rng.integers(0, 10, 1000)
    same(cp.bincount(cp.asarray(h)), np.bincount(h))


def _curand():
    """NVIDIA's cuRAND, as CuPy loaded it (by its soname, already mapped)."""
    import ctypes

    from cupy_backends.cuda.libs import curand  # noqa: F401 - loads libcurand

    lib = ctypes.CDLL("libcurand.so.10")

    def call(name, *args):
        status = getattr(lib, name)(*args)
        assert status == 0, f"{name}: curandStatus {status}"

    return ctypes, lib, call


@check
def random_numbers():
    """cuRAND's device generators (their kernels run on the vGPU) against
    cuRAND's host generators (the same algorithms on the CPU) from the same
    seed: raw bits and uniforms exactly, normals to the last bits (the
    device computes them with its approximate transcendentals)."""
    ctypes, lib, call = _curand()
    n = 4096
    kinds = {"XORWOW": 101, "MRG32K3A": 121, "PHILOX4_32_10": 161, "SOBOL32": 201}
    for name, kind in kinds.items():
        for dist in ("bits", "uniform", "normal"):
            out = []
            for host in (True, False):
                g = ctypes.c_void_p()
                create = lib.curandCreateGeneratorHost if host else lib.curandCreateGenerator
                status = create(ctypes.byref(g), kind)
                assert status == 0, f"{name}: create (host={host}): curandStatus {status}"
                if name.startswith("SOBOL"):
                    call("curandSetQuasiRandomGeneratorDimensions", g, 2)
                else:
                    call("curandSetPseudoRandomGeneratorSeed", g, ctypes.c_ulonglong(20261202))
                dt = np.uint32 if dist == "bits" else np.float32
                if host:
                    buf = np.zeros(n, dt)
                    ptr = buf.ctypes.data
                else:
                    dbuf = cp.zeros(n, dt)
                    ptr = dbuf.data.ptr
                p = ctypes.c_void_p(ptr)
                if dist == "bits":
                    call("curandGenerate", g, p, ctypes.c_size_t(n))
                elif dist == "uniform":
                    call("curandGenerateUniform", g, p, ctypes.c_size_t(n))
                else:
                    call("curandGenerateNormal", g, p, ctypes.c_size_t(n),
                         ctypes.c_float(1.0), ctypes.c_float(2.0))
                out.append(buf if host else cp.asnumpy(dbuf))
                call("curandDestroyGenerator", g)
            want, got = out
            if dist == "normal":
                assert np.allclose(got, want, rtol=1e-5, atol=1e-5), \
                    f"{name} normal: max difference {np.abs(got - want).max()}"
            else:
                assert np.array_equal(got, want), \
                    f"{name} {dist}: {(got != want).sum()} of {n} differ: {got[:4]} vs {want[:4]}"
    # And CuPy's own random module, which draws through cuRAND: a seeded
    # stream repeats, and its numbers look uniform and normal.
    cp.random.seed(7)
    a = cp.random.rand(10_000)
    cp.random.seed(7)
    same(cp.random.rand(10_000), cp.asnumpy(a))
    h = cp.asnumpy(a)
    assert 0 <= h.min() and h.max() < 1 and abs(h.mean() - 0.5) < 0.02, (h.min(), h.max(), h.mean())
    z = cp.asnumpy(cp.random.standard_normal(10_000))
    assert abs(z.mean()) < 0.05 and abs(z.std() - 1) < 0.05, (z.mean(), z.std())


def main():
    want = set(sys.argv[1:])
    failed = 0
    for fn in CHECKS:
        if want and fn.__name__ not in want:
            continue
        try:
            fn()
            cp.cuda.Device().synchronize()
            print(f"PASS {fn.__name__}", flush=True)
        except Exception:  # noqa: BLE001 - every failure is reported
            failed += 1
            print(f"FAIL {fn.__name__}", flush=True)
            traceback.print_exc(limit=6, file=sys.stdout)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
