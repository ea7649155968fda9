// c = a + b over floats, n = 2^20 + 13 elements: not a multiple of the
// work-group size, so the kernel checks its bound. `a` is created with
// CL_MEM_COPY_HOST_PTR, `b` written with clEnqueueWriteBuffer; `c` has a
// guard of sentinel values past n that the kernel must not touch. The result
// is compared bit for bit with the CPU's (an IEEE float add is exact to
// compare). Runs with an explicit work-group size (global rounded up) and
// with the implementation's choice (global = n exactly), and at a global
// work offset.
#define PROGRAM "vector_add"
#include "common.h"

static const char *source =
    "__kernel void vadd(__global const float *a, __global const float *b,\n"
    "                   __global float *c, const uint n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) c[i] = a[i] + b[i];\n"
    "}\n";

#define N ((1u << 20) + 13)
#define GUARD 1024 /* sentinel elements after n */
static const float SENTINEL = -12345.5f;

// Reads back c (n + GUARD) and checks c[lo..n) = a + b, c[0..lo) and the
// guard still the sentinel.
static void check_c(cl_command_queue q, cl_mem c, const float *a, const float *b, size_t lo,
                    const char *what) {
    float *got = (float *)xmalloc((N + GUARD) * sizeof(float));
    float *want = (float *)xmalloc((N + GUARD) * sizeof(float));
    CHECK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, (N + GUARD) * sizeof(float), got, 0, NULL, NULL));
    for (size_t i = 0; i < N + GUARD; i++) want[i] = (i >= lo && i < N) ? a[i] + b[i] : SENTINEL;
    expect_floats(what, got, want, N + GUARD);
    free(got);
    free(want);
}

static void reset_c(cl_command_queue q, cl_mem c) {
    CHECK(clEnqueueFillBuffer(q, c, &SENTINEL, sizeof SENTINEL, 0, (N + GUARD) * sizeof(float), 0,
                              NULL, NULL));
}

int main(void) {
    cl_platform_id platform;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    setup(&platform, &dev, &ctx, &q, 0);

    float *a = (float *)xmalloc(N * sizeof(float));
    float *b = (float *)xmalloc(N * sizeof(float));
    Rng r = rng_new(1);
    for (size_t i = 0; i < N; i++) {
        a[i] = rng_unit(&r) * 1000.0f;
        b[i] = rng_unit(&r);
    }

    cl_program prog = build_source(ctx, dev, source, "");
    cl_kernel k;
    CREATE(k, clCreateKernel(prog, "vadd", ERR));
    ok("built kernel vadd");

    cl_mem da, db, dc;
    CREATE(da, clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, N * sizeof(float), a,
                              ERR));
    CREATE(db, clCreateBuffer(ctx, CL_MEM_READ_ONLY, N * sizeof(float), NULL, ERR));
    CREATE(dc, clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, (N + GUARD) * sizeof(float), NULL, ERR));
    CHECK(clEnqueueWriteBuffer(q, db, CL_TRUE, 0, N * sizeof(float), b, 0, NULL, NULL));
    reset_c(q, dc);
    // COPY_HOST_PTR copied the data at creation: changing the host array
    // afterwards must not change the buffer.
    float a0 = a[0];
    a[0] = 999.0f;
    {
        float *back = (float *)xmalloc(N * sizeof(float));
        CHECK(clEnqueueReadBuffer(q, da, CL_TRUE, 0, N * sizeof(float), back, 0, NULL, NULL));
        a[0] = a0;
        expect_floats("a read back (COPY_HOST_PTR)", back, a, N);
        CHECK(clEnqueueReadBuffer(q, db, CL_TRUE, 0, N * sizeof(float), back, 0, NULL, NULL));
        expect_floats("b read back (WriteBuffer)", back, b, N);
        free(back);
    }
    ok("inputs read back bit for bit (COPY_HOST_PTR and WriteBuffer)");

    cl_uint n = N;
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &da));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &db));
    CHECK(clSetKernelArg(k, 2, sizeof(cl_mem), &dc));
    CHECK(clSetKernelArg(k, 3, sizeof(cl_uint), &n));

    // An explicit work-group size, the global size rounded up to it.
    size_t kwg = 0;
    CHECK(clGetKernelWorkGroupInfo(k, dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg, NULL));
    size_t local = kwg < 64 ? kwg : 64;
    EXPECT(N % local != 0, "n=%u is a multiple of the work-group size %zu", N, local);
    size_t global = round_up(N, local);
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
    CHECK(clFinish(q));
    check_c(q, dc, a, b, 0, "c (local 64)");
    ok("c = a + b, n=%u, global=%zu local=%zu, guard untouched", N, global, local);

    // The implementation's work-group size, global = n.
    reset_c(q, dc);
    global = N;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clFinish(q));
    check_c(q, dc, a, b, 0, "c (local NULL)");
    ok("c = a + b, global=n local=NULL");

    // A global work offset: indices [lo, lo + global) only.
    reset_c(q, dc);
    size_t lo = 4096;
    size_t offset = lo;
    global = round_up(N - lo, local);
    CHECK(clEnqueueNDRangeKernel(q, k, 1, &offset, &global, &local, 0, NULL, NULL));
    CHECK(clFinish(q));
    check_c(q, dc, a, b, lo, "c (global offset)");
    ok("c = a + b from a global work offset of %zu, c[0..%zu) untouched", lo, lo);

    CHECK(clReleaseMemObject(da));
    CHECK(clReleaseMemObject(db));
    CHECK(clReleaseMemObject(dc));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    free(a);
    free(b);
    return pass();
}
