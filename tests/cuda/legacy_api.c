/*
 * The driver's first execution-control API, deprecated since CUDA 4.0 but
 * still exported by the driver and declared by CUDA 13's cuda.h, as PyCUDA
 * (cuFuncSetBlockShape before every call) and older programs use it: a
 * function's block shape, dynamic shared memory and parameters are set on
 * the function (cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSetSize,
 * cuParamSeti, cuParamSetf, cuParamSetv), then cuLaunchGrid,
 * cuLaunchGridAsync or cuLaunch runs it. And the context usage count
 * (cuCtxAttach, cuCtxDetach), which PyCUDA pairs with cuCtxCreate, and
 * CUDA 13.2's cuFuncGetParamCount where the driver has it.
 *
 * Every kernel's result is checked against the CPU; the values are chosen
 * so that float results are exact.
 */
#include <stdint.h>
#include <string.h>

/* The calls under test are deprecated; so is taking their type. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define PROGRAM "legacy_api"

#define DRIVER_CALLS(X)                                                                       \
    X(cuInit) X(cuGetErrorName) X(cuDeviceGet) X(cuDevicePrimaryCtxRetain)                    \
    X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxCreate)         \
    X(cuCtxDestroy) X(cuCtxAttach) X(cuCtxDetach) X(cuCtxSynchronize) X(cuModuleLoadData)     \
    X(cuModuleUnload) X(cuModuleGetFunction) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)       \
    X(cuMemcpyDtoH) X(cuMemsetD32) X(cuStreamCreate) X(cuStreamDestroy)                       \
    X(cuStreamSynchronize) X(cuFuncSetBlockShape) X(cuFuncSetSharedSize) X(cuParamSetSize)   \
    X(cuParamSeti) X(cuParamSetf) X(cuParamSetv) X(cuLaunch) X(cuLaunchGrid)                  \
    X(cuLaunchGridAsync)

#include "driver_common.h"

/*
 * axpb(float* out, const float* in, float a, unsigned b, unsigned n):
 *   out[i] = a * in[i] + b for i < n, i over a 2D grid of 2D blocks.
 * rev(unsigned* buf): each block reverses its ntid.x elements through
 *   dynamic shared memory.
 */
static const char PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".extern .shared .align 4 .b8 rev_smem[];\n"
    "\n"
    ".visible .entry axpb(\n"
    "\t.param .u64 axpb_param_0,\n"
    "\t.param .u64 axpb_param_1,\n"
    "\t.param .f32 axpb_param_2,\n"
    "\t.param .u32 axpb_param_3,\n"
    "\t.param .u32 axpb_param_4\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b32 %r<12>;\n"
    "\t.reg .f32 %f<4>;\n"
    "\t.reg .b64 %rd<6>;\n"
    "\tld.param.u64 %rd1, [axpb_param_0];\n"
    "\tld.param.u64 %rd2, [axpb_param_1];\n"
    "\tld.param.f32 %f1, [axpb_param_2];\n"
    "\tld.param.u32 %r1, [axpb_param_3];\n"
    "\tld.param.u32 %r2, [axpb_param_4];\n"
    "\tmov.u32 %r3, %ctaid.y;\n"
    "\tmov.u32 %r4, %nctaid.x;\n"
    "\tmov.u32 %r5, %ctaid.x;\n"
    "\tmad.lo.s32 %r6, %r3, %r4, %r5;\n"
    "\tmov.u32 %r7, %ntid.x;\n"
    "\tmov.u32 %r8, %ntid.y;\n"
    "\tmul.lo.s32 %r9, %r7, %r8;\n"
    "\tmov.u32 %r10, %tid.y;\n"
    "\tmov.u32 %r11, %tid.x;\n"
    "\tmad.lo.s32 %r10, %r10, %r7, %r11;\n"
    "\tmad.lo.s32 %r6, %r6, %r9, %r10;\n"
    "\tsetp.ge.u32 %p1, %r6, %r2;\n"
    "\t@%p1 bra $L__done;\n"
    "\tmul.wide.u32 %rd3, %r6, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tld.global.f32 %f2, [%rd4];\n"
    "\tcvt.rn.f32.u32 %f3, %r1;\n"
    "\tfma.rn.f32 %f2, %f1, %f2, %f3;\n"
    "\tadd.s64 %rd5, %rd1, %rd3;\n"
    "\tst.global.f32 [%rd5], %f2;\n"
    "$L__done:\n"
    "\tret;\n"
    "}\n"
    "\n"
    ".visible .entry rev(\n"
    "\t.param .u64 rev_param_0\n"
    ")\n"
    "{\n"
    "\t.reg .b32 %r<8>;\n"
    "\t.reg .b64 %rd<7>;\n"
    "\tld.param.u64 %rd1, [rev_param_0];\n"
    "\tmov.u32 %r1, %tid.x;\n"
    "\tmov.u32 %r2, %ntid.x;\n"
    "\tmov.u32 %r3, %ctaid.x;\n"
    "\tmad.lo.s32 %r4, %r3, %r2, %r1;\n"
    "\tmul.wide.u32 %rd2, %r4, 4;\n"
    "\tadd.s64 %rd3, %rd1, %rd2;\n"
    "\tld.global.u32 %r5, [%rd3];\n"
    "\tmov.u64 %rd4, rev_smem;\n"
    "\tmul.wide.u32 %rd5, %r1, 4;\n"
    "\tadd.s64 %rd6, %rd4, %rd5;\n"
    "\tst.shared.u32 [%rd6], %r5;\n"
    "\tbar.sync 0;\n"
    "\tsub.s32 %r6, %r2, %r1;\n"
    "\tsub.s32 %r6, %r6, 1;\n"
    "\tmul.wide.u32 %rd5, %r6, 4;\n"
    "\tadd.s64 %rd6, %rd4, %rd5;\n"
    "\tld.shared.u32 %r7, [%rd6];\n"
    "\tst.global.u32 [%rd3], %r7;\n"
    "\tret;\n"
    "}\n";

/* Elements: a 3 x 2 grid of 16 x 4 blocks holds 384; the last 4 are past n. */
enum { N = 380, SLOTS = 384 };
static const unsigned UNTOUCHED = 0xdeadbeefu;

/* Sets axpb's five parameters at the offsets of its PTX layout. */
static void axpb_params(CUfunction f, CUdeviceptr out, CUdeviceptr in, float a, unsigned b,
                        unsigned n) {
    CHECK(p_cuParamSetv(f, 0, &out, sizeof out));
    CHECK(p_cuParamSetv(f, 8, &in, sizeof in));
    CHECK(p_cuParamSetf(f, 16, a));
    CHECK(p_cuParamSeti(f, 20, b));
    CHECK(p_cuParamSeti(f, 24, n));
    CHECK(p_cuParamSetSize(f, 28));
}

/* Checks out[i] == a * i + b below n and UNTOUCHED from n to SLOTS. */
static void check_axpb(CUdeviceptr d_out, float a, unsigned b, unsigned n, const char* how) {
    float out[SLOTS];
    CHECK(p_cuMemcpyDtoH(out, d_out, sizeof out));
    for (unsigned i = 0; i < SLOTS; i++) {
        unsigned bits;
        memcpy(&bits, &out[i], sizeof bits);
        if (i < n)
            EXPECT(out[i] == a * (float)i + (float)b, "%s: out[%u] = %g, want %g", how, i,
                   (double)out[i], (double)(a * (float)i + (float)b));
        else
            EXPECT(bits == UNTOUCHED, "%s: out[%u] written past n = %u (%08x)", how, i, n, bits);
    }
}

static void legacy_launches(void) {
    CUmodule m;
    CHECK(p_cuModuleLoadData(&m, PTX));
    CUfunction axpb, rev;
    CHECK(p_cuModuleGetFunction(&axpb, m, "axpb"));
    CHECK(p_cuModuleGetFunction(&rev, m, "rev"));

    float in[SLOTS];
    for (unsigned i = 0; i < SLOTS; i++) in[i] = (float)i;
    CUdeviceptr d_in, d_out;
    CHECK(p_cuMemAlloc(&d_in, sizeof in));
    CHECK(p_cuMemAlloc(&d_out, sizeof in));
    CHECK(p_cuMemcpyHtoD(d_in, in, sizeof in));

    /* cuLaunchGrid: a 3 x 2 grid of 16 x 4 x 1 blocks. */
    CHECK(p_cuMemsetD32(d_out, UNTOUCHED, SLOTS));
    CHECK(p_cuFuncSetBlockShape(axpb, 16, 4, 1));
    axpb_params(axpb, d_out, d_in, 1.5f, 7, N);
    CHECK(p_cuLaunchGrid(axpb, 3, 2));
    CHECK(p_cuCtxSynchronize());
    check_axpb(d_out, 1.5f, 7, N, "cuLaunchGrid");

    /* The settings stay with the function: only the scale changes, and
     * cuLaunchGridAsync runs it on a stream. */
    CUstream s;
    CHECK(p_cuStreamCreate(&s, 0));
    CHECK(p_cuMemsetD32(d_out, UNTOUCHED, SLOTS));
    CHECK(p_cuParamSetf(axpb, 16, -0.25f));
    CHECK(p_cuLaunchGridAsync(axpb, 3, 2, s));
    CHECK(p_cuStreamSynchronize(s));
    check_axpb(d_out, -0.25f, 7, N, "cuLaunchGridAsync");
    CHECK(p_cuStreamDestroy(s));

    /* cuLaunch: one block of 8 x 2 threads, n = 13. */
    CHECK(p_cuMemsetD32(d_out, UNTOUCHED, SLOTS));
    CHECK(p_cuFuncSetBlockShape(axpb, 8, 2, 1));
    CHECK(p_cuParamSeti(axpb, 24, 13));
    CHECK(p_cuLaunch(axpb));
    CHECK(p_cuCtxSynchronize());
    check_axpb(d_out, -0.25f, 7, 13, "cuLaunch");

    /* rev: dynamic shared memory from cuFuncSetSharedSize. */
    enum { BLOCK = 32, BLOCKS = 4 };
    unsigned vals[BLOCK * BLOCKS], back[BLOCK * BLOCKS];
    for (unsigned i = 0; i < BLOCK * BLOCKS; i++) vals[i] = i * 2654435761u;
    CHECK(p_cuMemcpyHtoD(d_out, vals, sizeof vals));
    CHECK(p_cuFuncSetBlockShape(rev, BLOCK, 1, 1));
    CHECK(p_cuFuncSetSharedSize(rev, BLOCK * sizeof(unsigned)));
    CHECK(p_cuParamSetv(rev, 0, &d_out, sizeof d_out));
    CHECK(p_cuParamSetSize(rev, sizeof d_out));
    CHECK(p_cuLaunchGrid(rev, BLOCKS, 1));
    CHECK(p_cuMemcpyDtoH(back, d_out, sizeof back));
    for (unsigned b = 0; b < BLOCKS; b++)
        for (unsigned t = 0; t < BLOCK; t++)
            EXPECT(back[b * BLOCK + t] == vals[b * BLOCK + BLOCK - 1 - t],
                   "rev: block %u, element %u: %u, want %u", b, t, back[b * BLOCK + t],
                   vals[b * BLOCK + BLOCK - 1 - t]);

    /* Shapes the device cannot run are refused at once. */
    EXPECT(p_cuFuncSetBlockShape(axpb, 0, 1, 1) == CUDA_ERROR_INVALID_VALUE,
           "a block of 0 threads was accepted");
    EXPECT(p_cuLaunchGrid(axpb, 0, 1) == CUDA_ERROR_INVALID_VALUE,
           "a grid of 0 blocks was accepted");

    /* CUDA 13.2's parameter counts, where the driver has them (declared
     * here: the headers this builds with are older). */
    typedef CUresult (*param_count_fn)(CUfunction, size_t*);
    param_count_fn count = (param_count_fn)dlsym(driver_lib, "cuFuncGetParamCount");
    if (count != NULL) {
        size_t n_axpb = 0, n_rev = 0;
        CHECK(count(axpb, &n_axpb));
        CHECK(count(rev, &n_rev));
        EXPECT(n_axpb == 5 && n_rev == 1, "cuFuncGetParamCount: axpb %zu, rev %zu", n_axpb,
               n_rev);
        printf("PARAM_COUNTS %zu %zu\n", n_axpb, n_rev);
    }

    CHECK(p_cuMemFree(d_in));
    CHECK(p_cuMemFree(d_out));
    CHECK(p_cuModuleUnload(m));
    printf("LEGACY_LAUNCHES 4\n");
}

static void attach_detach(CUdevice dev, CUcontext primary) {
    CUcontext ctx = NULL, again = NULL, cur = NULL;
    CHECK(p_cuCtxCreate(&ctx, 0, dev));
    CHECK(p_cuCtxAttach(&again, 0));
    EXPECT(again == ctx, "cuCtxAttach handed back another context than the current one");
    /* One detach of two uses: the context stays, current and working. */
    CHECK(p_cuCtxDetach(ctx));
    CHECK(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx, "the context went after one detach of two uses");
    CUdeviceptr d;
    unsigned v = 0x12345678u, w = 0;
    CHECK(p_cuMemAlloc(&d, sizeof v));
    CHECK(p_cuMemcpyHtoD(d, &v, sizeof v));
    CHECK(p_cuMemcpyDtoH(&w, d, sizeof w));
    EXPECT(w == v, "a round trip after a detach differs");
    CHECK(p_cuMemFree(d));
    /* The last detach destroys it and takes it off this thread. */
    CHECK(p_cuCtxDetach(ctx));
    CHECK(p_cuCtxGetCurrent(&cur));
    EXPECT(cur != ctx, "the context is still current after its last detach");
    CHECK(p_cuCtxSetCurrent(primary));
}

int main(void) {
    init_driver();
    CUdevice dev;
    CHECK(p_cuDeviceGet(&dev, 0));
    CUcontext ctx = NULL;
    CHECK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(p_cuCtxSetCurrent(ctx));
    legacy_launches();
    attach_detach(dev, ctx);
    CHECK(p_cuCtxSynchronize());
    CHECK(p_cuDevicePrimaryCtxRelease(dev));
    printf("PASS %s\n", PROGRAM);
    return 0;
}
