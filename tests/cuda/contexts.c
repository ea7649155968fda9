/*
 * Contexts made with cuCtxCreate are contexts of their own, as on the
 * driver: their memory, modules, streams and sticky errors are theirs,
 * cuCtxDestroy frees what they held at once, a library (cuLibraryLoadData)
 * is usable in every context, and a function or a stream names the context
 * it was made in.
 *
 *   contexts         the checks every driver passes
 *   contexts fault   also a kernel that faults in one created context: the
 *                    others (created and primary) still work and the
 *                    faulting one is replaced by destroying it (prints
 *                    STICKY_ISOLATED). SimGpu's behaviour: NVIDIA's driver
 *                    loses the whole process's CUDA state at such a fault.
 *
 * Results are checked against the CPU.
 */
#include <stdint.h>
#include <string.h>

#define PROGRAM "contexts"

#define DRIVER_CALLS(X)                                                                       \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain)                    \
    X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxCreate)         \
    X(cuCtxDestroy) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxSynchronize)                \
    X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuMemAlloc) X(cuMemFree)   \
    X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD32) X(cuMemGetInfo) X(cuLaunchKernel)         \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamGetCtx)             \
    X(cuPointerGetAttribute) X(cuLibraryLoadData) X(cuLibraryUnload) X(cuLibraryGetKernel)    \
    X(cuLibraryGetGlobal)

#include "driver_common.h"

/*
 * fill(unsigned* out, unsigned v, unsigned n): out[i] = v + i for i < n.
 * poke(unsigned long long addr): one thread stores 1 at addr.
 * __device__ unsigned bias: read by fill_bias(out, n): out[i] = bias + i.
 */
static const char PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .global .align 4 .u32 bias = 7;\n"
    "\n"
    ".visible .entry fill(\n"
    "\t.param .u64 fill_param_0,\n"
    "\t.param .u32 fill_param_1,\n"
    "\t.param .u32 fill_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<8>;\n"
    "\t.reg .b64 %rd<4>;\n"
    "\tld.param.u64 %rd1, [fill_param_0];\n"
    "\tld.param.u32 %r1, [fill_param_1];\n"
    "\tld.param.u32 %r2, [fill_param_2];\n"
    "\tmov.u32 %r3, %ctaid.x;\n"
    "\tmov.u32 %r4, %ntid.x;\n"
    "\tmov.u32 %r5, %tid.x;\n"
    "\tmad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "\tsetp.ge.u32 %p1, %r6, %r2;\n"
    "\t@%p1 bra $L__fill_done;\n"
    "\tadd.s32 %r7, %r1, %r6;\n"
    "\tmul.wide.u32 %rd2, %r6, 4;\n"
    "\tadd.s64 %rd3, %rd1, %rd2;\n"
    "\tst.global.u32 [%rd3], %r7;\n"
    "$L__fill_done:\n"
    "\tret;\n"
    "}\n"
    "\n"
    ".visible .entry fill_bias(\n"
    "\t.param .u64 fill_bias_param_0,\n"
    "\t.param .u32 fill_bias_param_1\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<8>;\n"
    "\t.reg .b64 %rd<4>;\n"
    "\tld.param.u64 %rd1, [fill_bias_param_0];\n"
    "\tld.param.u32 %r2, [fill_bias_param_1];\n"
    "\tld.global.u32 %r1, [bias];\n"
    "\tmov.u32 %r3, %ctaid.x;\n"
    "\tmov.u32 %r4, %ntid.x;\n"
    "\tmov.u32 %r5, %tid.x;\n"
    "\tmad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "\tsetp.ge.u32 %p1, %r6, %r2;\n"
    "\t@%p1 bra $L__bias_done;\n"
    "\tadd.s32 %r7, %r1, %r6;\n"
    "\tmul.wide.u32 %rd2, %r6, 4;\n"
    "\tadd.s64 %rd3, %rd1, %rd2;\n"
    "\tst.global.u32 [%rd3], %r7;\n"
    "$L__bias_done:\n"
    "\tret;\n"
    "}\n"
    "\n"
    ".visible .entry poke(\n"
    "\t.param .u64 poke_param_0\n"
    ")\n"
    "{\n"
    "\t.reg .b32 %r<2>;\n"
    "\t.reg .b64 %rd<2>;\n"
    "\tld.param.u64 %rd1, [poke_param_0];\n"
    "\tmov.u32 %r1, 1;\n"
    "\tst.global.u32 [%rd1], %r1;\n"
    "\tret;\n"
    "}\n";

enum { N = 1000, THREADS = 128 };
/* What each created context allocates besides: enough to see in cuMemGetInfo. */
static const size_t BIG = (size_t)16 << 20;

static void launch_fill(CUfunction f, CUdeviceptr out, unsigned v, CUstream s) {
    unsigned n = N;
    void* args[] = {&out, &v, &n};
    CHECK(p_cuLaunchKernel(f, (N + THREADS - 1) / THREADS, 1, 1, THREADS, 1, 1, 0, s, args,
                           NULL));
}

/* Checks out[i] == v + i for i < N. */
static void check_fill(CUdeviceptr d, unsigned v, const char* how) {
    static unsigned host[N];
    CHECK(p_cuMemcpyDtoH(host, d, sizeof host));
    for (unsigned i = 0; i < N; i++)
        EXPECT(host[i] == v + i, "%s: out[%u] = %u, want %u", how, i, host[i], v + i);
}

/* A context's own module, function and buffer. */
struct own {
    CUcontext ctx;
    CUmodule mod;
    CUfunction fill;
    CUdeviceptr buf, big;
};

/* Creates a context (current afterwards) with its module and buffers, and
 * runs fill in it. */
static struct own make(CUdevice dev, unsigned v) {
    struct own o;
    CHECK(p_cuCtxCreate(&o.ctx, 0, dev));
    CUcontext cur = NULL;
    CHECK(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == o.ctx, "cuCtxCreate made the new context current");
    CHECK(p_cuModuleLoadData(&o.mod, PTX));
    CHECK(p_cuModuleGetFunction(&o.fill, o.mod, "fill"));
    CHECK(p_cuMemAlloc(&o.buf, N * sizeof(unsigned)));
    CHECK(p_cuMemAlloc(&o.big, BIG));
    launch_fill(o.fill, o.buf, v, NULL);
    CHECK(p_cuCtxSynchronize());
    check_fill(o.buf, v, "fill in a created context");
    return o;
}

static size_t free_now(void) {
    size_t free = 0, total = 0;
    CHECK(p_cuMemGetInfo(&free, &total));
    return free;
}

int main(int argc, char** argv) {
    int fault = argc > 1 && strcmp(argv[1], "fault") == 0;
    init_driver();
    CUdevice dev;
    CHECK(p_cuDeviceGet(&dev, 0));
    CUcontext primary = NULL;
    CHECK(p_cuDevicePrimaryCtxRetain(&primary, dev));
    CHECK(p_cuCtxSetCurrent(primary));
    CUdeviceptr pbuf;
    CHECK(p_cuMemAlloc(&pbuf, N * sizeof(unsigned)));
    CHECK(p_cuMemsetD32(pbuf, 0x11, N));

    /* A library loaded in the primary context, its kernel taken there. */
    CUlibrary lib;
    CHECK(p_cuLibraryLoadData(&lib, PTX, NULL, NULL, 0, NULL, NULL, 0));
    CUkernel lfill, lbias;
    CHECK(p_cuLibraryGetKernel(&lfill, lib, "fill"));
    CHECK(p_cuLibraryGetKernel(&lbias, lib, "fill_bias"));
    launch_fill((CUfunction)lfill, pbuf, 5, NULL);
    CHECK(p_cuCtxSynchronize());
    check_fill(pbuf, 5, "a library's kernel in the primary context");
    size_t before = free_now();

    /* A: a context of its own, with its memory counted. */
    struct own a = make(dev, 100);
    size_t with_a = free_now();
    EXPECT(with_a + BIG <= before, "A's %zu MiB are used: free %zu MiB before, %zu MiB after",
           BIG >> 20, before >> 20, with_a >> 20);

    /* The library's kernel runs in A too, and its variable is A's own. */
    launch_fill((CUfunction)lfill, a.buf, 200, NULL);
    CHECK(p_cuCtxSynchronize());
    check_fill(a.buf, 200, "a library's kernel in a created context");
    CUdeviceptr bias_a = 0, bias_p = 0;
    size_t bias_size = 0;
    CHECK(p_cuLibraryGetGlobal(&bias_a, &bias_size, lib, "bias"));
    EXPECT(bias_size == 4, "bias is 4 bytes, not %zu", bias_size);
    unsigned b = 1000;
    CHECK(p_cuMemcpyHtoD(bias_a, &b, sizeof b));
    void* bargs[] = {&a.buf, &(unsigned){N}};
    CHECK(p_cuLaunchKernel((CUfunction)lbias, (N + THREADS - 1) / THREADS, 1, 1, THREADS, 1, 1,
                           0, NULL, bargs, NULL));
    CHECK(p_cuCtxSynchronize());
    check_fill(a.buf, 1000, "a library's variable set in a created context");

    /* A stream and an allocation name their context. */
    CUstream sa;
    CHECK(p_cuStreamCreate(&sa, 0));
    CUcontext owner = NULL;
    CHECK(p_cuStreamGetCtx(sa, &owner));
    EXPECT(owner == a.ctx, "cuStreamGetCtx names A");
    CHECK(p_cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, a.buf));
    EXPECT(owner == a.ctx, "an allocation of A names A");
    launch_fill(a.fill, a.buf, 300, sa);
    CHECK(p_cuStreamSynchronize(sa));
    check_fill(a.buf, 300, "fill on A's stream");

    /* The primary context: its variable is its own, untouched by A's. */
    CHECK(p_cuCtxPushCurrent(primary));
    CHECK(p_cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, pbuf));
    EXPECT(owner == primary, "an allocation of the primary context names it");
    CHECK(p_cuLibraryGetGlobal(&bias_p, NULL, lib, "bias"));
    EXPECT(bias_p != bias_a, "the primary context's bias is not A's (both at %#llx)",
           (unsigned long long)bias_p);
    void* pargs[] = {&pbuf, &(unsigned){N}};
    CHECK(p_cuLaunchKernel((CUfunction)lbias, (N + THREADS - 1) / THREADS, 1, 1, THREADS, 1, 1,
                           0, NULL, pargs, NULL));
    CHECK(p_cuCtxSynchronize());
    check_fill(pbuf, 7, "the library's variable in the primary context");
    CUcontext popped = NULL;
    CHECK(p_cuCtxPopCurrent(&popped));
    EXPECT(popped == primary, "popped the primary context");

    /* B, made while A is current; a function of B's module is B's alone. */
    struct own b_ = make(dev, 400);
    CHECK(p_cuCtxPopCurrent(&popped));
    EXPECT(popped == b_.ctx, "popped B");
    /* Current: A again. B's function is refused here, and A's data stays. */
    launch_fill(a.fill, a.buf, 500, NULL);
    CUresult r = p_cuLaunchKernel(b_.fill, 1, 1, 1, 1, 1, 1, 0, NULL,
                                  (void*[]){&a.buf, &(unsigned){9}, &(unsigned){N}}, NULL);
    CUresult rs = p_cuCtxSynchronize();
    EXPECT(r != CUDA_SUCCESS || rs != CUDA_SUCCESS,
           "a function of B launched in A was refused (launch %d, synchronize %d)", (int)r,
           (int)rs);
    check_fill(a.buf, 500, "A's buffer after B's function was refused there");

    if (fault) {
        /* B faults: B's error is sticky in B; A and the primary context run on. */
        CHECK(p_cuCtxPushCurrent(b_.ctx));
        launch_fill((CUfunction)lfill, b_.buf, 1, NULL);
        CHECK(p_cuCtxSynchronize());
        check_fill(b_.buf, 1, "a library's kernel in B");
        unsigned long long wild = 0x10;
        void* wargs[] = {&wild};
        CUfunction poke;
        CHECK(p_cuModuleGetFunction(&poke, b_.mod, "poke"));
        r = p_cuLaunchKernel(poke, 1, 1, 1, 1, 1, 1, 0, NULL, wargs, NULL);
        rs = p_cuCtxSynchronize();
        EXPECT(rs == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_ILLEGAL_ADDRESS,
               "the wild store faulted (launch %d, synchronize %d)", (int)r, (int)rs);
        rs = p_cuCtxSynchronize();
        EXPECT(rs == CUDA_ERROR_ILLEGAL_ADDRESS, "B's error is sticky, got %d", (int)rs);
        CHECK(p_cuCtxPopCurrent(&popped));
        launch_fill(a.fill, a.buf, 600, NULL);
        CHECK(p_cuCtxSynchronize());
        check_fill(a.buf, 600, "A after B faulted");
        CHECK(p_cuCtxPushCurrent(primary));
        launch_fill((CUfunction)lfill, pbuf, 700, NULL);
        CHECK(p_cuCtxSynchronize());
        check_fill(pbuf, 700, "the primary context after B faulted");
        CHECK(p_cuCtxPopCurrent(&popped));
        printf("STICKY_ISOLATED 1\n");
    }

    /* Destroying B frees its memory now; a destroyed context is gone. */
    size_t with_b = free_now();
    CHECK(p_cuCtxDestroy(b_.ctx));
    size_t without_b = free_now();
    EXPECT(without_b >= with_b + BIG, "B's memory is freed: free %zu MiB before, %zu MiB after",
           with_b >> 20, without_b >> 20);
    EXPECT(p_cuCtxPushCurrent(b_.ctx) != CUDA_SUCCESS, "a destroyed context is refused");

    /* C after B: fresh, and the library's kernel runs there as well. */
    CHECK(p_cuCtxPushCurrent(primary));
    struct own c = make(dev, 800);
    launch_fill((CUfunction)lfill, c.buf, 900, NULL);
    CHECK(p_cuCtxSynchronize());
    check_fill(c.buf, 900, "a library's kernel in a context made after another was destroyed");
    /* A library loaded while C is current outlives C. */
    CUlibrary lib_c;
    CHECK(p_cuLibraryLoadData(&lib_c, PTX, NULL, NULL, 0, NULL, NULL, 0));
    CHECK(p_cuCtxDestroy(c.ctx));
    CHECK(p_cuCtxPopCurrent(&popped));
    EXPECT(popped == primary, "after C, the primary context again");
    CUdeviceptr qbuf;
    CHECK(p_cuMemAlloc(&qbuf, N * sizeof(unsigned)));
    CUkernel cfill;
    CHECK(p_cuLibraryGetKernel(&cfill, lib_c, "fill"));
    launch_fill((CUfunction)cfill, qbuf, 1100, NULL);
    CHECK(p_cuCtxSynchronize());
    check_fill(qbuf, 1100, "a library loaded in a context destroyed since");
    CHECK(p_cuLibraryUnload(lib_c));
    CHECK(p_cuMemFree(qbuf));

    /* A goes too; the primary context's memory and library are intact. */
    CHECK(p_cuStreamDestroy(sa));
    CHECK(p_cuCtxDestroy(a.ctx));
    EXPECT(free_now() >= before, "every created context's memory is back: %zu of %zu MiB",
           free_now() >> 20, before >> 20);
    CUcontext cur = NULL;
    CHECK(p_cuCtxGetCurrent(&cur));
    if (cur == NULL) CHECK(p_cuCtxSetCurrent(primary));
    check_fill(pbuf, fault ? 700 : 7, "the primary context's buffer at the end");
    CHECK(p_cuLibraryUnload(lib));
    CHECK(p_cuMemFree(pbuf));
    CHECK(p_cuDevicePrimaryCtxRelease(dev));
    printf("PASS %s\n", PROGRAM);
    return 0;
}
