/*
 * The CUDA driver API used directly, as programs that skip the runtime do.
 * libcuda.so.1 is opened with dlopen and every entry point taken with dlsym
 * under the name cuda.h binds (cuMemAlloc is cuMemAlloc_v2), so this builds
 * with no libcuda at all and runs against whichever one the loader finds.
 *
 * Covers: cuInit, the device queries, the primary context, a context of
 * its own (cuCtxCreate), cuModuleLoadData from PTX text, cuModuleGetFunction,
 * cuLaunchKernel with kernelParams and with an `extra` packed buffer,
 * event timing around launches, memory allocation, copies and memsets;
 * function attributes, a module variable, occupancy (the block-size
 * callback), context and stream ids, PCI bus ids, the profiler calls.
 *
 * Kernel durations are SimGpu's modelled ones (configuration: "spin" and
 * "mixed" take their duration from parameter 0 and 9), so event times show
 * that the parameters arrived intact, by either launch form. Prints
 * "GPU_NS <total>" for the test to compare with the VM's GPU time.
 * Environment: as the runtime programs (tests/cuda/common.h).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROGRAM "driver_api"

/* cudaProfiler.h's two calls (the header is not in the runtime wheel). */
CUresult CUDAAPI cuProfilerStart(void);
CUresult CUDAAPI cuProfilerStop(void);

/* Entry points, declared with cuda.h's own prototypes. */
#define DRIVER_CALLS(X)                                                                       \
    X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuDeviceGetCount) X(cuDeviceGet)      \
    X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute)                            \
    X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)               \
    X(cuCtxGetCurrent) X(cuCtxGetDevice) X(cuCtxCreate) X(cuCtxDestroy) X(cuCtxPushCurrent)   \
    X(cuCtxPopCurrent) X(cuCtxSynchronize) X(cuModuleLoadData) X(cuModuleUnload)              \
    X(cuModuleGetFunction) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemGetInfo)       \
    X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD8) X(cuMemsetD32)              \
    X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate)              \
    X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)        \
    X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuModuleGetGlobal) X(cuCtxGetId)           \
    X(cuStreamGetId) X(cuDeviceGetPCIBusId) X(cuDeviceGetByPCIBusId) X(cuProfilerStart)       \
    X(cuProfilerStop) X(cuOccupancyMaxPotentialBlockSize)                                     \
    X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

#include "driver_common.h"

/*
 * spin(u64 ns): busy-waits ns nanoseconds of %globaltimer.
 * mixed(...): the parameters of tests/cuda/launch_args.cu's kernels;
 * its body does nothing.
 */
static const char PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry spin(\n"
    "\t.param .u64 spin_param_0\n"
    ")\n"
    "{\n"
    "\t.reg .pred %p<2>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [spin_param_0];\n"
    "\tmov.u64 %rd2, %globaltimer;\n"
    "$L__spin:\n"
    "\tmov.u64 %rd3, %globaltimer;\n"
    "\tsub.s64 %rd4, %rd3, %rd2;\n"
    "\tsetp.lt.u64 %p1, %rd4, %rd1;\n"
    "\t@%p1 bra $L__spin;\n"
    "\tret;\n"
    "}\n"
    "\n"
    ".visible .entry mixed(\n"
    "\t.param .u64 mixed_param_0,\n"
    "\t.param .u8 mixed_param_1,\n"
    "\t.param .u16 mixed_param_2,\n"
    "\t.param .u32 mixed_param_3,\n"
    "\t.param .f64 mixed_param_4,\n"
    "\t.param .align 8 .b8 mixed_param_5[24],\n"
    "\t.param .u64 mixed_param_6,\n"
    "\t.param .align 1 .b8 mixed_param_7[3],\n"
    "\t.param .align 4 .b8 mixed_param_8[8],\n"
    "\t.param .u64 mixed_param_9\n"
    ")\n"
    "{\n"
    "\tret;\n"
    "}\n";

/* mixed's packed parameters (the layout of launch_args.cu's Packed). */
struct S24 {
    unsigned long long a, b;
    unsigned int c;
    unsigned short d;
    unsigned char e, f;
};
struct S3 {
    unsigned char x, y, z;
};
struct Mix8 {
    unsigned char a, b;
    unsigned short c;
    unsigned int d;
};
struct Packed {
    CUdeviceptr out;
    char c;
    short s;
    int i;
    double d;
    struct S24 big;
    const void* p;
    struct S3 tri;
    struct Mix8 m;
    unsigned long long ns;
};
_Static_assert(offsetof(struct Packed, tri) == 56 && offsetof(struct Packed, m) == 60 &&
                   offsetof(struct Packed, ns) == 72 && sizeof(struct Packed) == 80,
               "parameter layout");

static const unsigned long long MS = 1000000ull;
static unsigned long long gpu_ns = 0;

static int sim_timing(void) {
    const char* v = getenv("FAIRGPU_SIM_TIMING");
    return v == NULL || *v == '\0' || strcmp(v, "0") != 0;
}

static void fill_pattern(unsigned char* p, size_t len, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull | 1;
    for (size_t i = 0; i < len; i++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        p[i] = (unsigned char)((s * 0x2545f4914f6cdd1dull) >> 56);
    }
}

static void device_queries(CUdevice* dev) {
    int version = 0, count = 0;
    CHECK(p_cuDriverGetVersion(&version));
    EXPECT(version >= 12000, "cuDriverGetVersion: %d", version);
    CHECK(p_cuDeviceGetCount(&count));
    EXPECT(count == 1, "cuDeviceGetCount: %d", count);
    CHECK(p_cuDeviceGet(dev, 0));
    char name[256] = {0};
    CHECK(p_cuDeviceGetName(name, sizeof name, *dev));
    EXPECT(name[0] != '\0', "empty device name");
    size_t total = 0;
    CHECK(p_cuDeviceTotalMem(&total, *dev));
    EXPECT(total > 0, "cuDeviceTotalMem: 0");
    int warp = 0, major = 0;
    CHECK(p_cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, *dev));
    EXPECT(warp == 32, "warp size %d", warp);
    CHECK(p_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *dev));
    EXPECT(major >= 7, "compute capability major %d", major);
    CUdevice bad;
    EXPECT(p_cuDeviceGet(&bad, 1) == CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet(1) succeeded");
    printf("DEVICE %s, %zu bytes, driver %d\n", name, total, version);
}

static void memory(void) {
    enum { N = 100003 };
    static unsigned char in[N], out[N];
    fill_pattern(in, N, 11);
    CUdeviceptr a = 0, b = 0;
    CHECK(p_cuMemAlloc(&a, N + 8));
    CHECK(p_cuMemAlloc(&b, N + 8));
    EXPECT(a != 0 && b != 0 && a != b, "cuMemAlloc: %llx, %llx", (unsigned long long)a,
           (unsigned long long)b);
    CHECK(p_cuMemcpyHtoD(a + 3, in, N));
    CHECK(p_cuMemcpyDtoD(b + 5, a + 3, N));
    CHECK(p_cuMemcpyDtoH(out, b + 5, N));
    EXPECT(memcmp(in, out, N) == 0, "HtoD, DtoD, DtoH round trip differs");
    CHECK(p_cuMemsetD8(b + 5, 0x7e, 17));
    CHECK(p_cuMemsetD32(b + 24, 0x01020304u, 4));
    CHECK(p_cuMemcpyDtoH(out, b, 48));
    for (int k = 5; k < 22; k++) EXPECT(out[k] == 0x7e, "cuMemsetD8: byte %d is %#x", k, out[k]);
    for (int k = 24; k < 40; k++)
        EXPECT(out[k] == 4 - (k % 4), "cuMemsetD32: byte %d is %#x", k, out[k]);
    size_t free_b = 0, total_b = 0;
    CHECK(p_cuMemGetInfo(&free_b, &total_b));
    EXPECT(free_b <= total_b && total_b > 0, "cuMemGetInfo: %zu of %zu", free_b, total_b);
    CHECK(p_cuMemFree(a));
    CHECK(p_cuMemFree(b));
    EXPECT(p_cuMemFree(a) != CUDA_SUCCESS, "a second cuMemFree succeeded");
}

static struct Packed packed(CUdeviceptr out, unsigned long long ns) {
    struct Packed a;
    memset(&a, 0, sizeof a);
    a.out = out;
    a.c = (char)0xa5;
    a.s = (short)0xbeef;
    a.i = 1100000;
    unsigned long long dbits = 1200000;
    memcpy(&a.d, &dbits, 8);
    a.big.a = 0x0102030405060708ull;
    a.big.b = 0xf1f2f3f4f5f6f7f8ull;
    a.big.c = 0xcafebabeu;
    a.big.d = 0xd00d;
    a.big.e = 0xe1;
    a.big.f = 0xf2;
    a.p = (const void*)(uintptr_t)1300000;
    a.tri.x = 0x31;
    a.tri.y = 0x32;
    a.tri.z = 0x33;
    a.m.a = 0x91;
    a.m.b = 0x61;
    a.m.c = 0x15;
    a.ns = ns;
    return a;
}

/* Launches through both forms, each between two events. */
static int launches(CUfunction spin, CUfunction mixed, CUstream s, CUevent* ev,
                    unsigned long long head, unsigned long long* want) {
    int n = 0;
    unsigned long long h = head;
    void* head_args[] = {&h};
    CHECK(p_cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, head_args, NULL));
    gpu_ns += head;
    CHECK(p_cuEventRecord(ev[0], s));

    /* spin, kernelParams */
    unsigned long long ns1 = 2 * MS + 345678;
    void* args1[] = {&ns1};
    CHECK(p_cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, args1, NULL));
    want[n++] = ns1;
    CHECK(p_cuEventRecord(ev[n], s));

    /* spin, extra */
    unsigned long long ns2 = 1 * MS + 987654;
    size_t size2 = sizeof ns2;
    void* extra2[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns2, CU_LAUNCH_PARAM_BUFFER_SIZE, &size2,
                      CU_LAUNCH_PARAM_END};
    CHECK(p_cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra2));
    want[n++] = ns2;
    CHECK(p_cuEventRecord(ev[n], s));

    /* mixed, kernelParams: one pointer per parameter */
    struct Packed a = packed(0, 1 * MS + 111111);
    void* args3[] = {&a.out, &a.c, &a.s, &a.i, &a.d, &a.big, &a.p, &a.tri, &a.m, &a.ns};
    CHECK(p_cuLaunchKernel(mixed, 1, 1, 1, 32, 1, 1, 0, s, args3, NULL));
    want[n++] = a.ns;
    CHECK(p_cuEventRecord(ev[n], s));

    /* mixed, extra: the packed buffer */
    struct Packed b = packed(0, 1 * MS + 222222);
    size_t size4 = sizeof b;
    void* extra4[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &b, CU_LAUNCH_PARAM_BUFFER_SIZE, &size4,
                      CU_LAUNCH_PARAM_END};
    CHECK(p_cuLaunchKernel(mixed, 2, 1, 1, 64, 1, 1, 0, s, NULL, extra4));
    want[n++] = b.ns;
    CHECK(p_cuEventRecord(ev[n], s));
    printf("ARGS mixed ");
    for (size_t k = 0; k < sizeof b; k++) printf("%02x", ((unsigned char*)&b)[k]);
    printf("\n");

    for (int k = 0; k < n; k++) gpu_ns += want[k];
    return n;
}

static void kernels(void) {
    CUmodule mod;
    CHECK(p_cuModuleLoadData(&mod, PTX));
    CUfunction spin, mixed, missing;
    CHECK(p_cuModuleGetFunction(&spin, mod, "spin"));
    CHECK(p_cuModuleGetFunction(&mixed, mod, "mixed"));
    EXPECT(p_cuModuleGetFunction(&missing, mod, "no_such_kernel") == CUDA_ERROR_NOT_FOUND,
           "cuModuleGetFunction of a missing kernel did not say NOT_FOUND");

    CUstream s;
    CHECK(p_cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUevent ev[8];
    for (int k = 0; k < 8; k++) CHECK(p_cuEventCreate(&ev[k], CU_EVENT_DEFAULT));
    {
        unsigned long long want[8];
        /* A head start keeps the stream busy while the launches are issued.
         * The events may still include idle time (the host's pace, a
         * scheduler's sample synchronising the device): only the lower
         * bound is checked here; exact durations through GPU_NS. */
        int n = launches(spin, mixed, s, ev, 200 * MS, want);
        CHECK(p_cuEventSynchronize(ev[n]));
        for (int k = 0; k < n; k++) {
            float ms = -1;
            CHECK(p_cuEventElapsedTime(&ms, ev[k], ev[k + 1]));
            double w = (double)want[k] / 1e6;
            printf("TIME launch %d %.6f ms, modelled %.6f ms\n", k, ms, w);
            /* Modelled durations are SimGpu's; on a GPU only the spin
             * kernel takes the time it is given. */
            if (sim_timing()) EXPECT(ms >= w - 1e-3, "launch %d: %.6f ms, want %.6f ms", k, ms, w);
        }
    }
    CHECK(p_cuCtxSynchronize());
    for (int k = 0; k < 8; k++) CHECK(p_cuEventDestroy(ev[k]));
    CHECK(p_cuStreamDestroy(s));
    CHECK(p_cuModuleUnload(mod));
}

/* A kernel with 1,024 bytes of static shared memory and a module variable. */
static const char MISC_PTX[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".global .align 4 .u32 answer = 42;\n"
    ".visible .entry staged(.param .u64 p)\n"
    "{\n"
    "\t.reg .b32 %r<3>;\n"
    "\t.reg .b64 %rd<3>;\n"
    "\t.shared .align 4 .b8 buf[1024];\n"
    "\tmov.u32 %r1, %tid.x;\n"
    "\tmul.wide.u32 %rd1, %r1, 4;\n"
    "\tmov.u64 %rd2, buf;\n"
    "\tadd.s64 %rd2, %rd2, %rd1;\n"
    "\tst.shared.u32 [%rd2], %r1;\n"
    "\tret;\n"
    "}\n";

/* Dynamic shared memory a block of `n` threads asks for. */
static size_t smem_for_block(int n) { return (size_t)n * 16; }

static void misc(CUdevice dev, CUcontext ctx) {
    CUmodule mod;
    CHECK(p_cuModuleLoadData(&mod, MISC_PTX));
    CUfunction f;
    CHECK(p_cuModuleGetFunction(&f, mod, "staged"));
    int v = -1;
    CHECK(p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f));
    EXPECT(v == 1024, "SHARED_SIZE_BYTES %d", v);
    CHECK(p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PTX_VERSION, f));
    EXPECT(v == 70, "PTX_VERSION %d of .target sm_70 code", v);
    CHECK(p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    EXPECT(v == 48 * 1024 - 1024, "MAX_DYNAMIC_SHARED_SIZE_BYTES %d", v);
    CHECK(p_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 * 1024));
    CHECK(p_cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
    EXPECT(v == 64 * 1024, "MAX_DYNAMIC_SHARED_SIZE_BYTES %d after set", v);

    CUdeviceptr answer;
    size_t bytes = 0;
    CHECK(p_cuModuleGetGlobal(&answer, &bytes, mod, "answer"));
    EXPECT(bytes == 4, "answer is %zu bytes", bytes);
    unsigned got = 0;
    CHECK(p_cuMemcpyDtoH(&got, answer, 4));
    EXPECT(got == 42, "answer = %u", got);
    EXPECT(p_cuModuleGetGlobal(&answer, &bytes, mod, "question") == CUDA_ERROR_NOT_FOUND,
           "an unknown variable was found");

    /* The block size chosen keeps at least as many threads resident as any
     * other multiple of 32, by the driver's own occupancy. */
    int min_grid = 0, block = 0;
    CHECK(p_cuOccupancyMaxPotentialBlockSize(&min_grid, &block, f, smem_for_block, 0, 0));
    EXPECT(block > 0 && block % 32 == 0 && block <= 1024, "block size %d", block);
    int sms = 0;
    CHECK(p_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    int chosen = 0;
    CHECK(p_cuOccupancyMaxActiveBlocksPerMultiprocessor(&chosen, f, block, smem_for_block(block)));
    EXPECT(chosen > 0 && min_grid == chosen * sms, "min grid %d with %d blocks/SM on %d SMs",
           min_grid, chosen, sms);
    for (int b = 32; b <= 1024; b += 32) {
        int n = 0;
        CHECK(p_cuOccupancyMaxActiveBlocksPerMultiprocessor(&n, f, b, smem_for_block(b)));
        EXPECT(n * b <= chosen * block, "block %d keeps %d threads, the chosen %d keeps %d", b,
               n * b, block, chosen * block);
    }
    int limited = 0;
    CHECK(p_cuOccupancyMaxPotentialBlockSize(&min_grid, &limited, f, NULL, 0, 100));
    EXPECT(limited > 0 && limited <= 100, "block size %d under a limit of 100", limited);
    CHECK(p_cuModuleUnload(mod));

    unsigned long long id = 0, again = 0;
    CHECK(p_cuCtxGetId(ctx, &id));
    CHECK(p_cuCtxGetId(NULL, &again));
    EXPECT(id == again, "the current context's id %llu, by handle %llu", again, id);
    CUstream s1, s2;
    CHECK(p_cuStreamCreate(&s1, 0));
    CHECK(p_cuStreamCreate(&s2, 0));
    unsigned long long i1 = 0, i2 = 0;
    CHECK(p_cuStreamGetId(s1, &i1));
    CHECK(p_cuStreamGetId(s2, &i2));
    EXPECT(i1 != i2, "two streams share the id %llu", i1);
    CHECK(p_cuStreamDestroy(s1));
    CHECK(p_cuStreamDestroy(s2));

    char bus[32];
    CHECK(p_cuDeviceGetPCIBusId(bus, sizeof bus, dev));
    CUdevice found = -1;
    CHECK(p_cuDeviceGetByPCIBusId(&found, bus));
    EXPECT(found == dev, "cuDeviceGetByPCIBusId(%s) = %d", bus, found);
    EXPECT(p_cuDeviceGetByPCIBusId(&found, "ffff:ff:1f.0") != CUDA_SUCCESS,
           "a bus id of no device was found");

    CHECK(p_cuProfilerStart());
    CHECK(p_cuProfilerStop());
}

/* A context of its own, beside the primary one. */
static void own_context(CUdevice dev, CUcontext primary) {
    CUcontext ctx = NULL, cur = NULL;
    CHECK(p_cuCtxCreate(&ctx, 0, dev));
    CHECK(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx, "cuCtxCreate did not make its context current");
    CUcontext popped = NULL;
    CHECK(p_cuCtxPushCurrent(primary));
    CHECK(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == primary, "cuCtxPushCurrent did not make the primary context current");
    CHECK(p_cuCtxPopCurrent(&popped));
    EXPECT(popped == primary, "cuCtxPopCurrent returned another context");
    CHECK(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx, "cuCtxPopCurrent did not restore the created context");
    unsigned char in[4099], out[4099];
    fill_pattern(in, sizeof in, 3);
    CUdeviceptr d;
    CHECK(p_cuMemAlloc(&d, sizeof in));
    CHECK(p_cuMemcpyHtoD(d, in, sizeof in));
    CHECK(p_cuMemcpyDtoH(out, d, sizeof out));
    EXPECT(memcmp(in, out, sizeof in) == 0, "round trip in an own context differs");
    CHECK(p_cuMemFree(d));
    CHECK(p_cuCtxDestroy(ctx));
    CHECK(p_cuCtxSetCurrent(primary));
}

int main(void) {
    init_driver();
    CUdevice dev;
    device_queries(&dev);

    CUcontext ctx = NULL, cur = NULL;
    CHECK(p_cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(p_cuCtxSetCurrent(ctx));
    CHECK(p_cuCtxGetCurrent(&cur));
    EXPECT(cur == ctx, "cuCtxGetCurrent is not the context just set");
    CUdevice d2 = -1;
    CHECK(p_cuCtxGetDevice(&d2));
    EXPECT(d2 == dev, "cuCtxGetDevice: %d", d2);

    memory();
    kernels();
    misc(dev, ctx);
    own_context(dev, ctx);

    CHECK(p_cuCtxSynchronize());
    CHECK(p_cuDevicePrimaryCtxRelease(dev));
    printf("GPU_NS %llu\n", gpu_ns);
    printf("PASS %s\n", PROGRAM);
    return 0;
}
