#!/usr/bin/env python3
"""PyOpenCL's basic use, checked with numpy against the CPU.

The platform is the first whose name contains $OPENCL_PLATFORM (default: the
first platform), the device its first one. Checks: pyopencl.array arithmetic
(a + b, a * 2, clmath.sin), a kernel from cl.Program(...).build(), an
ElementwiseKernel, pyopencl.array.sum/max and a ReductionKernel (a dot
product), cl.enqueue_copy both ways. Prints one line per check, then
"PASS pyopencl_basic"; exits 1 on the first failure ("FAIL ..."), 3 when
there is no OpenCL platform at all ("NODRIVER ...").

Needs: pip install pyopencl numpy mako (pyopencl.array.sum/max and
ReductionKernel need Mako, which pyopencl does not depend on). The PyPI
wheel of pyopencl brings its own ocl-icd loader
(pyopencl/.libs/libOpenCL-<hash>.so.1.0.0, a private soname), which reads
the ICDs from /etc/OpenCL/vendors or from $OCL_ICD_VENDORS (a directory of
.icd files or one .icd file), like the system's ocl-icd; LD_LIBRARY_PATH
does not swap that loader.
"""

import os
import sys

NAME = "pyopencl_basic"

try:
    import numpy as np
    import pyopencl as cl
    import pyopencl.array as cla
    import pyopencl.clmath as clmath
    from pyopencl.elementwise import ElementwiseKernel
    from pyopencl.reduction import ReductionKernel  # needs mako
except ImportError as e:
    print(f"FAIL {NAME}: {e.__class__.__name__}: {str(e).splitlines()[0]} "
          "(pip install pyopencl numpy mako)", flush=True)
    sys.exit(1)


def fail(msg):
    print(f"FAIL {NAME}: {msg}", flush=True)
    sys.exit(1)


def ok(msg):
    print(f"ok {msg}", flush=True)


def expect_equal(what, got, want):
    """Exact comparison (bit for bit for floats), first mismatch reported."""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        fail(f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
    if got.dtype.kind == "f":
        same = got.view(np.dtype(f"u{got.dtype.itemsize}")) == want.view(
            np.dtype(f"u{want.dtype.itemsize}")
        )
    else:
        same = got == want
    if not same.all():
        i = int(np.flatnonzero(~same)[0])
        fail(f"{what}: first mismatch at index {i}: got {got.flat[i]!r}, want {want.flat[i]!r}")


def expect_close(what, got, want, rtol, atol):
    got = np.asarray(got)
    want = np.asarray(want)
    if got.shape != want.shape:
        fail(f"{what}: shape {got.shape}, want {want.shape}")
    bad = ~(np.abs(got.astype(np.float64) - want.astype(np.float64))
            <= atol + rtol * np.abs(want.astype(np.float64)))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        fail(f"{what}: first mismatch at index {i}: got {got.flat[i]!r}, want {want.flat[i]!r}")


def pick_device():
    try:
        platforms = cl.get_platforms()
    except cl.Error as e:
        print(f"NODRIVER {NAME}: {e}", flush=True)
        sys.exit(3)
    if not platforms:
        print(f"NODRIVER {NAME}: no OpenCL platform", flush=True)
        sys.exit(3)
    want = os.environ.get("OPENCL_PLATFORM", "")
    chosen = next((p for p in platforms if want in p.name), None)
    if chosen is None:
        names = ", ".join(repr(p.name) for p in platforms)
        fail(f"no platform name contains OPENCL_PLATFORM={want!r}; there are {names}")
    devices = chosen.get_devices(device_type=cl.device_type.ALL)
    if not devices:
        fail(f"platform {chosen.name!r} has no device")
    print(f"platform: {chosen.name} ({chosen.version})")
    print(f"device: {devices[0].name}")
    return devices[0]


def main():
    dev = pick_device()
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx)
    rng = np.random.default_rng(1234)
    n = (1 << 18) + 17

    # Multiples of 2^-20 in (-4, 4): exact in float32, never denormal.
    a_h = (rng.integers(-(1 << 22), 1 << 22, n) / float(1 << 20)).astype(np.float32)
    b_h = (rng.integers(-(1 << 22), 1 << 22, n) / float(1 << 20)).astype(np.float32)

    # pyopencl.array arithmetic.
    a = cla.to_device(queue, a_h)
    b = cla.to_device(queue, b_h)
    expect_equal("a round trip", a.get(), a_h)
    expect_equal("a + b", (a + b).get(), a_h + b_h)
    ok(f"pyopencl.array a + b over {n} floats, bit for bit")
    expect_equal("a * 2", (a * 2).get(), a_h * np.float32(2))
    expect_equal("a * b - a", (a * b - a).get(), a_h * b_h - a_h)
    ok("pyopencl.array a * 2 and a * b - a, bit for bit")
    s = clmath.sin(a).get()
    if s.dtype != np.float32:
        fail(f"clmath.sin dtype {s.dtype}, want float32")
    # OpenCL's sin (without -cl-fast-relaxed-math) is within 4 ulp.
    expect_close("clmath.sin(a)", s, np.sin(a_h.astype(np.float64)), rtol=0, atol=2e-6)
    ok("pyopencl.clmath.sin(a) within 2e-6 of the double-precision sine")

    # A kernel from cl.Program(...).build().
    prg = cl.Program(ctx, """
        __kernel void axpb(__global const float *x, __global float *y,
                           const float alpha, const float beta, const uint n) {
            size_t i = get_global_id(0);
            if (i < n) y[i] = alpha * x[i] + beta;
        }
        __kernel void twice(__global int *p) {
            size_t i = get_global_id(0);
            p[i] = 2 * p[i] + (int)i;
        }
    """).build()
    y = cla.empty_like(a)
    local = 64
    glob = (n + local - 1) // local * local
    prg.axpb(queue, (glob,), (local,), a.data, y.data,
             np.float32(0.5), np.float32(-1.25), np.uint32(n))
    # alpha * x is exact (a power of two), so a fused multiply-add changes nothing.
    expect_equal("axpb", y.get(), np.float32(0.5) * a_h + np.float32(-1.25))
    ok("cl.Program(...).build(): axpb with a bounds check, global rounded up to 64")
    ints = rng.integers(-1000, 1000, 4096).astype(np.int32)
    ints_d = cla.to_device(queue, ints)
    prg.twice(queue, ints.shape, None, ints_d.data)
    expect_equal("twice", ints_d.get(), 2 * ints + np.arange(4096, dtype=np.int32))
    ok("cl.Program(...).build(): a second kernel on int32")

    # An ElementwiseKernel.
    lin = ElementwiseKernel(ctx, "float k, const float *x, const float *y, float *z",
                            "z[i] = x[i] * k - y[i]", "lin")
    z = cla.empty_like(a)
    lin(np.float32(4.0), a, b, z)
    expect_equal("ElementwiseKernel", z.get(), a_h * np.float32(4) - b_h)
    ok("ElementwiseKernel z = x * 4 - y, bit for bit")

    # Reductions: pyopencl.array.sum/max, a ReductionKernel.
    i_h = rng.integers(-5000, 5000, n).astype(np.int32)
    i_d = cla.to_device(queue, i_h)
    got_sum = int(cla.sum(i_d).get())
    if got_sum != int(i_h.astype(np.int64).sum()):
        fail(f"pyopencl.array.sum(int32): got {got_sum}, want {int(i_h.sum())}")
    i_h[n - 3] = 987654
    i_d.set(i_h)
    got_max = int(cla.max(i_d).get())
    if got_max != 987654:
        fail(f"pyopencl.array.max(int32): got {got_max}, want 987654")
    ok(f"pyopencl.array.sum = {got_sum} and max = {got_max} over {n} int32, exact")
    # Floats: multiples of 2^-4 below 1 in magnitude, n < 2^19: every partial
    # sum is a multiple of 2^-4 below 2^19 in magnitude (23 bits), so exact
    # in float32 whatever the order of the additions.
    small = (rng.integers(-16, 16, n) / 16.0).astype(np.float32)
    fsum = float(cla.sum(cla.to_device(queue, small)).get())
    want = float(small.astype(np.float64).sum())
    if fsum != want:
        fail(f"pyopencl.array.sum(float32): got {fsum!r}, want {want!r}")
    fmax = float(cla.max(a).get())
    if fmax != float(a_h.max()):
        fail(f"pyopencl.array.max(float32): got {fmax!r}, want {float(a_h.max())!r}")
    ok(f"pyopencl.array.sum(float32) = {fsum!r} (exact), max = {fmax!r}")
    dot = ReductionKernel(ctx, np.int64, neutral="0", reduce_expr="a+b",
                          map_expr="(long)x[i]*(long)y[i]",
                          arguments="__global const int *x, __global const int *y")
    x_h = rng.integers(-100000, 100000, n).astype(np.int32)
    y_h = rng.integers(-100000, 100000, n).astype(np.int32)
    got_dot = int(dot(cla.to_device(queue, x_h), cla.to_device(queue, y_h)).get())
    want_dot = int(np.dot(x_h.astype(np.int64), y_h.astype(np.int64)))
    if got_dot != want_dot:
        fail(f"ReductionKernel dot: got {got_dot}, want {want_dot}")
    ok(f"ReductionKernel int64 dot product = {got_dot}, exact")

    # cl.enqueue_copy both ways, and device to device.
    mf = cl.mem_flags
    src = rng.integers(0, 256, (1 << 20) + 3, dtype=np.uint8)
    buf = cl.Buffer(ctx, mf.READ_WRITE, src.nbytes)
    buf2 = cl.Buffer(ctx, mf.READ_WRITE, src.nbytes)
    cl.enqueue_copy(queue, buf, src)
    cl.enqueue_copy(queue, buf2, buf)
    back = np.zeros_like(src)
    cl.enqueue_copy(queue, back, buf2)
    queue.finish()
    expect_equal("enqueue_copy round trip", back, src)
    part = np.zeros(1000, dtype=np.uint8)
    cl.enqueue_copy(queue, part, buf, src_offset=12345)
    queue.finish()
    expect_equal("enqueue_copy at an offset", part, src[12345:13345])
    ok("cl.enqueue_copy host -> device -> device -> host and at an offset, byte for byte")

    print(f"PASS {NAME}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
