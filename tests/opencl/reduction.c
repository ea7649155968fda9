// Sum and max reductions in two passes: each work-group reduces its part to
// one value (a grid-stride loop per work-item, then a tree in __local memory
// sized with clSetKernelArg(k, i, bytes, NULL), separated by
// barrier(CLK_LOCAL_MEM_FENCE)); a second launch of one work-group reduces
// the partial values. Checked against the CPU: int sums and maxima exactly
// (the partials too), float sums bit for bit against the CPU doing the
// device's order of additions (and near the double-precision sum).
#define PROGRAM "reduction"
#include "common.h"

#include <limits.h>
#include <math.h>

static const char *source =
    "#define REDUCE(NAME, T, INIT, OP) \\\n"
    "__kernel void NAME(__global const T *in, __global T *out, \\\n"
    "                   __local T *scratch, const uint n) { \\\n"
    "    const uint lid = get_local_id(0); \\\n"
    "    const uint stride = get_global_size(0); \\\n"
    "    T acc = INIT; \\\n"
    "    for (uint i = get_global_id(0); i < n; i += stride) acc = OP(acc, in[i]); \\\n"
    "    scratch[lid] = acc; \\\n"
    "    barrier(CLK_LOCAL_MEM_FENCE); \\\n"
    "    for (uint s = get_local_size(0) / 2; s > 0; s >>= 1) { \\\n"
    "        if (lid < s) scratch[lid] = OP(scratch[lid], scratch[lid + s]); \\\n"
    "        barrier(CLK_LOCAL_MEM_FENCE); \\\n"
    "    } \\\n"
    "    if (lid == 0) out[get_group_id(0)] = scratch[0]; \\\n"
    "}\n"
    "#define ADD(x, y) ((x) + (y))\n"
    "#define MAX(x, y) max((x), (y))\n"
    "REDUCE(sum_int, int, 0, ADD)\n"
    "REDUCE(sum_float, float, 0.0f, ADD)\n"
    "REDUCE(max_int, int, INT_MIN, MAX)\n";

#define N ((1u << 20) + 77)

// The CPU doing what one pass does: `groups` groups of `local` work-items.
#define CPU_PASS(NAME, T, INIT, OP)                                                    \
    static void NAME(const T *in, size_t n, T *out, size_t groups, size_t local) {     \
        T *acc = (T *)xmalloc(local * sizeof(T));                                      \
        size_t stride = groups * local;                                                \
        for (size_t g = 0; g < groups; g++) {                                          \
            for (size_t l = 0; l < local; l++) {                                       \
                T a = INIT;                                                            \
                for (size_t i = g * local + l; i < n; i += stride) a = OP(a, in[i]);   \
                acc[l] = a;                                                            \
            }                                                                          \
            for (size_t s = local / 2; s > 0; s >>= 1)                                 \
                for (size_t l = 0; l < s; l++) acc[l] = OP(acc[l], acc[l + s]);        \
            out[g] = acc[0];                                                           \
        }                                                                              \
        free(acc);                                                                     \
    }
#define ADD(x, y) ((x) + (y))
#define MAX(x, y) ((x) > (y) ? (x) : (y))
CPU_PASS(cpu_sum_int, int, 0, ADD)
CPU_PASS(cpu_sum_float, float, 0.0f, ADD)
CPU_PASS(cpu_max_int, int, INT_MIN, MAX)

static cl_context ctx;
static cl_command_queue q;
static cl_device_id dev;

// Runs `k` over `in` (n elements of `elem` bytes) as `groups` groups of
// `local`, writing `groups` values to `out`.
static void run_pass(cl_kernel k, cl_mem in, cl_mem out, size_t elem, cl_uint n, size_t groups,
                     size_t local) {
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &in));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &out));
    CHECK(clSetKernelArg(k, 2, local * elem, NULL));
    CHECK(clSetKernelArg(k, 3, sizeof(cl_uint), &n));
    size_t global = groups * local;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
}

// A power of two no larger than 256 nor what the kernels allow.
static size_t pick_local(cl_kernel *ks, int nk) {
    size_t dev_max = 0, item_max[3] = {0, 0, 0};
    cl_ulong local_mem = 0;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof dev_max, &dev_max, NULL));
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof item_max, item_max, NULL));
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL));
    size_t lim = 256;
    if (dev_max < lim) lim = dev_max;
    if (item_max[0] < lim) lim = item_max[0];
    for (int i = 0; i < nk; i++) {
        size_t kwg = 0;
        CHECK(clGetKernelWorkGroupInfo(ks[i], dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof kwg, &kwg,
                                       NULL));
        if (kwg < lim) lim = kwg;
    }
    size_t local = 1;
    while (local * 2 <= lim) local *= 2;
    EXPECT(local * sizeof(int) <= local_mem, "local memory %llu too small",
           (unsigned long long)local_mem);
    return local;
}

int main(void) {
    cl_platform_id platform;
    setup(&platform, &dev, &ctx, &q, 0);
    cl_program prog = build_source(ctx, dev, source, "");
    cl_kernel ks[3];
    CREATE(ks[0], clCreateKernel(prog, "sum_int", ERR));
    CREATE(ks[1], clCreateKernel(prog, "sum_float", ERR));
    CREATE(ks[2], clCreateKernel(prog, "max_int", ERR));
    const size_t local = pick_local(ks, 3);
    const size_t groups = 128;
    ok("built sum_int, sum_float, max_int; work-groups of %zu, %zu groups", local, groups);

    int *ints = (int *)xmalloc(N * sizeof(int));
    float *floats = (float *)xmalloc(N * sizeof(float));
    Rng r = rng_new(7);
    for (size_t i = 0; i < N; i++) {
        ints[i] = rng_int(&r, -1000, 1000);
        floats[i] = rng_unit(&r);
    }
    // The maximum once, in the ragged tail that only some work-items read.
    const size_t max_at = N - 5;
    ints[max_at] = 1234567;

    cl_mem din, dfin, dpart, dout;
    CREATE(din, clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, N * sizeof(int),
                               ints, ERR));
    CREATE(dfin, clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, N * sizeof(float),
                                floats, ERR));
    CREATE(dpart, clCreateBuffer(ctx, CL_MEM_READ_WRITE, groups * 4, NULL, ERR));
    CREATE(dout, clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4, NULL, ERR));

    int *part = (int *)xmalloc(groups * sizeof(int));
    int *want_part = (int *)xmalloc(groups * sizeof(int));
    float *fpart = (float *)xmalloc(groups * sizeof(float));
    float *want_fpart = (float *)xmalloc(groups * sizeof(float));

    // int sum
    {
        run_pass(ks[0], din, dpart, sizeof(int), N, groups, local);
        CHECK(clEnqueueReadBuffer(q, dpart, CL_TRUE, 0, groups * 4, part, 0, NULL, NULL));
        cpu_sum_int(ints, N, want_part, groups, local);
        expect_ints("int sum partials", part, want_part, groups);
        ok("int sum: %zu partial sums equal the CPU's", groups);
        run_pass(ks[0], dpart, dout, sizeof(int), (cl_uint)groups, 1, local);
        int got = 0;
        CHECK(clEnqueueReadBuffer(q, dout, CL_TRUE, 0, 4, &got, 0, NULL, NULL));
        long long want = 0;
        for (size_t i = 0; i < N; i++) want += ints[i];
        EXPECT(got == want, "int sum: got %d, want %lld", got, want);
        ok("int sum of %u elements = %d", N, got);
    }
    // float sum
    {
        run_pass(ks[1], dfin, dpart, sizeof(float), N, groups, local);
        CHECK(clEnqueueReadBuffer(q, dpart, CL_TRUE, 0, groups * 4, fpart, 0, NULL, NULL));
        cpu_sum_float(floats, N, want_fpart, groups, local);
        expect_floats("float sum partials (device order)", fpart, want_fpart, groups);
        ok("float sum: %zu partial sums equal the CPU's in the same order, bit for bit", groups);
        run_pass(ks[1], dpart, dout, sizeof(float), (cl_uint)groups, 1, local);
        float got = 0;
        CHECK(clEnqueueReadBuffer(q, dout, CL_TRUE, 0, 4, &got, 0, NULL, NULL));
        float want = 0;
        cpu_sum_float(want_fpart, groups, &want, 1, local);
        EXPECT(fbits(got) == fbits(want), "float sum: got %.9g (0x%08x), want %.9g (0x%08x)",
               got, fbits(got), want, fbits(want));
        double exact = 0;
        for (size_t i = 0; i < N; i++) exact += floats[i];
        EXPECT(fabs(got - exact) <= 1e-3 * (fabs(exact) + 1), "float sum %.9g far from %.9g",
               got, exact);
        ok("float sum = %.9g (double-precision sum %.9g)", got, exact);
    }
    // int max
    {
        run_pass(ks[2], din, dpart, sizeof(int), N, groups, local);
        CHECK(clEnqueueReadBuffer(q, dpart, CL_TRUE, 0, groups * 4, part, 0, NULL, NULL));
        cpu_max_int(ints, N, want_part, groups, local);
        expect_ints("int max partials", part, want_part, groups);
        ok("int max: %zu partial maxima equal the CPU's", groups);
        run_pass(ks[2], dpart, dout, sizeof(int), (cl_uint)groups, 1, local);
        int got = 0;
        CHECK(clEnqueueReadBuffer(q, dout, CL_TRUE, 0, 4, &got, 0, NULL, NULL));
        EXPECT(got == ints[max_at], "int max: got %d, want %d", got, ints[max_at]);
        ok("int max = %d (planted at index %zu)", got, max_at);
    }
    // A small input, fewer elements than work-items: idle work-items
    // contribute the identity.
    {
        cl_uint n = 37;
        run_pass(ks[0], din, dout, sizeof(int), n, 1, local);
        run_pass(ks[2], din, dpart, sizeof(int), n, 1, local);
        int got_sum = 0, got_max = 0;
        CHECK(clEnqueueReadBuffer(q, dout, CL_TRUE, 0, 4, &got_sum, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, dpart, CL_TRUE, 0, 4, &got_max, 0, NULL, NULL));
        int want_sum = 0, want_max = INT_MIN;
        for (cl_uint i = 0; i < n; i++) {
            want_sum += ints[i];
            if (ints[i] > want_max) want_max = ints[i];
        }
        EXPECT(got_sum == want_sum, "sum of %u: got %d, want %d", n, got_sum, want_sum);
        EXPECT(got_max == want_max, "max of %u: got %d, want %d", n, got_max, want_max);
        ok("one work-group over %u elements: sum %d, max %d", n, got_sum, got_max);
    }

    CHECK(clReleaseMemObject(din));
    CHECK(clReleaseMemObject(dfin));
    CHECK(clReleaseMemObject(dpart));
    CHECK(clReleaseMemObject(dout));
    for (int i = 0; i < 3; i++) CHECK(clReleaseKernel(ks[i]));
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    free(ints);
    free(floats);
    free(part);
    free(want_part);
    free(fpart);
    free(want_fpart);
    return pass();
}
