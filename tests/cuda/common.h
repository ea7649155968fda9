// Shared checks for the CUDA test programs.
//
// Every program prints "PASS <name>" and exits 0, or prints "FAIL <name>:
// ..." and exits 1. When the first CUDA call reports that there is no driver
// (cudaErrorInsufficientDriver, cudaErrorNoDevice), it prints "NODRIVER
// <name>: ..." and exits 3 instead, so a test can tell "libcuda.so.1 was not
// found or found no device" from a wrong answer.
//
// SimGpu (fairgpu's executor without a GPU) executes kernels with a PTX
// interpreter, except timing-only ones (spin kernels), and models their
// duration. The programs that exist to check what kernels compute
// (vector_add, saxpy, matmul, reduction, histogram, scan, struct_arg,
// faults) always check it against a CPU reference; the others check what
// reaches the driver and what it answers, and what kernels wrote only on
// request. Environment:
//   FAIRGPU_CHECK_RESULTS=1  kernels really run (a GPU, or SimGpu with
//                            those kernels not timing-only): also check
//                            what they wrote
//   FAIRGPU_SIM_TIMING=0     kernel durations are not SimGpu's modelled ones:
//                            check elapsed times only from below
#ifndef FAIRGPU_TEST_COMMON_H
#define FAIRGPU_TEST_COMMON_H

#include <cuda_runtime.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#ifndef PROGRAM
#error "define PROGRAM (the program's name) before including common.h"
#endif

[[noreturn]] static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stdout, "FAIL %s: ", PROGRAM);
    std::vfprintf(stdout, fmt, ap);
    std::fprintf(stdout, "\n");
    va_end(ap);
    std::fflush(stdout);
    std::exit(1);
}

static void pass() {
    std::printf("PASS %s\n", PROGRAM);
    std::fflush(stdout);
}

static bool env_flag(const char* name, bool dflt) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return dflt;
    return std::strcmp(v, "0") != 0;
}

// Whether kernel results are checked (kernels really run).
static bool check_results() { return env_flag("FAIRGPU_CHECK_RESULTS", false); }
// Whether kernel durations are SimGpu's modelled ones, hence exact.
static bool sim_timing() { return env_flag("FAIRGPU_SIM_TIMING", true); }

// The first CUDA call of a program: a missing driver is "NODRIVER", exit 3.
static void first_call(cudaError_t e, const char* what) {
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice) {
        std::printf("NODRIVER %s: %s returned %d %s\n", PROGRAM, what, (int)e,
                    cudaGetErrorName(e));
        std::fflush(stdout);
        std::exit(3);
    }
    if (e != cudaSuccess)
        fail("%s returned %d %s (%s)", what, (int)e, cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CHECK(call)                                                                      \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != cudaSuccess)                                                           \
            fail("line %d: %s returned %d %s (%s)", __LINE__, #call, (int)e_,            \
                 cudaGetErrorName(e_), cudaGetErrorString(e_));                          \
    } while (0)

// A call that must fail with `want`.
#define EXPECT_ERR(call, want)                                                           \
    do {                                                                                 \
        cudaError_t e_ = (call);                                                         \
        if (e_ != (want))                                                                \
            fail("line %d: %s returned %d %s, want %d %s", __LINE__, #call, (int)e_,     \
                 cudaGetErrorName(e_), (int)(want), cudaGetErrorName(want));             \
    } while (0)

// A condition that must hold; the message is printf-style.
#define EXPECT(cond, fmt, ...)                                                           \
    do {                                                                                 \
        if (!(cond)) fail("line %d: " fmt, __LINE__, ##__VA_ARGS__);                     \
    } while (0)

// `len` bytes of a pattern determined by `seed`.
static void fill_pattern(unsigned char* p, size_t len, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull | 1;
    for (size_t i = 0; i < len; i++) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        p[i] = (unsigned char)((s * 0x2545f4914f6cdd1dull) >> 56);
    }
}

// Offset of the first difference of two buffers, or -1.
static long first_diff(const unsigned char* a, const unsigned char* b, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (a[i] != b[i]) return (long)i;
    return -1;
}

static uint64_t wall_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

// A reproducible stream of pseudo-random values (xorshift64*).
struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull | 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545f4914f6cdd1dull;
    }
    // Uniform in [-1, 1), a multiple of 2^-23.
    float unit() { return (float)((int32_t)(next() >> 40) - (1 << 23)) / (float)(1 << 23); }
    uint32_t below(uint32_t n) { return (uint32_t)((next() >> 32) % n); }
};

// Checks a launch and waits for it: errors of the kernel surface here.
#define LAUNCHED(what)                                                                   \
    do {                                                                                 \
        CHECK(cudaGetLastError());                                                       \
        cudaError_t e_ = cudaDeviceSynchronize();                                        \
        if (e_ != cudaSuccess)                                                           \
            fail("line %d: kernel %s failed: %d %s (%s)", __LINE__, what, (int)e_,        \
                 cudaGetErrorName(e_), cudaGetErrorString(e_));                          \
    } while (0)

// The bits of a float and a double, to compare results exactly.
static uint32_t fbits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
static uint64_t dbits(double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u;
}

// Busy-waits `ns` nanoseconds of the GPU's global timer. SimGpu models it
// as `ns` of device time (configuration: name "spin", duration_param 0).
__global__ void spin(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

// Milliseconds between two completed events.
static float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms = -1.0f;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

#endif
