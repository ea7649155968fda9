// Errors come back as error codes, never as crashes, and leave the context
// usable: bad device pointers, a launch configuration the device cannot
// run, calls the device may not support (managed memory, graphs), invalid
// handles, and the cudaGetLastError / cudaPeekAtLastError semantics.
//
// Last, a sticky error: a kernel that faults (on SimGpu, one configured
// with `fault = true`, which models an illegal address) poisons the
// context, and every later call reports it.
#define PROGRAM "errors"
#include "common.h"

static bool is_pointer_error(cudaError_t e) {
    return e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer;
}

// The context still works: allocate, copy both ways, free.
static void still_usable(const char* after) {
    unsigned char in[33], out[33] = {0};
    fill_pattern(in, sizeof in, 5);
    void* d = nullptr;
    cudaError_t e = cudaMalloc(&d, sizeof in);
    EXPECT(e == cudaSuccess, "after %s, cudaMalloc returned %d %s", after, (int)e,
           cudaGetErrorName(e));
    CHECK(cudaMemcpy(d, in, sizeof in, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost));
    EXPECT(first_diff(in, out, sizeof in) < 0, "after %s, a round trip differs", after);
    CHECK(cudaFree(d));
}

// cudaGetLastError returns the last error and resets it;
// cudaPeekAtLastError returns it without resetting.
static void last_error() {
    CHECK(cudaGetLastError());
    // A block of more threads than the device allows. Which code says so
    // depends on who refuses it: libcudart itself, from the kernel's limits
    // (cudaErrorInvalidConfiguration; cudart 12 once the kernel's module is
    // loaded), or the driver (invalid value; cudart 12's first launch,
    // cudart 13). Twice: as the first launch, which is also the first use of
    // the context, and after a good one.
    for (int round = 0; round < 2; round++) {
        spin<<<1, 2048>>>(0);
        cudaError_t e = cudaPeekAtLastError();
        EXPECT(e == cudaErrorInvalidConfiguration || e == cudaErrorInvalidValue,
               "round %d: a block of 2048 threads: %d %s", round, (int)e, cudaGetErrorName(e));
        EXPECT_ERR(cudaPeekAtLastError(), e);
        EXPECT_ERR(cudaGetLastError(), e);
        CHECK(cudaGetLastError());
        CHECK(cudaPeekAtLastError());
        spin<<<1, 1>>>(1000);
        CHECK(cudaDeviceSynchronize());
    }
    // Too much dynamic shared memory.
    spin<<<1, 1, 1 << 30>>>(0);
    cudaError_t e = cudaGetLastError();
    EXPECT(e == cudaErrorInvalidValue || e == cudaErrorInvalidConfiguration,
           "1 GiB of shared memory: %d %s", (int)e, cudaGetErrorName(e));
    CHECK(cudaGetLastError());
    // A good launch after the bad ones.
    spin<<<1, 1>>>(1000);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    // The error of a failed API call is also the last error.
    EXPECT_ERR(cudaSetDevice(7), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidDevice);
    CHECK(cudaGetLastError());
    still_usable("bad launches");
}

static void bad_pointers() {
    unsigned char buf[16] = {0};
    void* bogus = (void*)(uintptr_t)0xdead0000;
    cudaError_t e = cudaMemcpy(bogus, buf, sizeof buf, cudaMemcpyHostToDevice);
    EXPECT(is_pointer_error(e), "H2D to a bad pointer: %d %s", (int)e, cudaGetErrorName(e));
    EXPECT(cudaGetLastError() == e, "the failed copy is the last error");
    e = cudaMemset(bogus, 0, sizeof buf);
    EXPECT(is_pointer_error(e), "memset of a bad pointer: %d %s", (int)e, cudaGetErrorName(e));
    (void)cudaGetLastError();
    e = cudaFree(bogus);
    EXPECT(is_pointer_error(e), "cudaFree of a bad pointer: %d %s", (int)e, cudaGetErrorName(e));
    (void)cudaGetLastError();

    void* d = nullptr;
    CHECK(cudaMalloc(&d, 4u << 20));
    CHECK(cudaFree(d));
    e = cudaFree(d);
    EXPECT(is_pointer_error(e), "double cudaFree: %d %s", (int)e, cudaGetErrorName(e));
    (void)cudaGetLastError();
    EXPECT_ERR(cudaMemcpy(buf, buf, sizeof buf, (cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection);
    (void)cudaGetLastError();
    EXPECT_ERR(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    still_usable("bad pointers");
}

static void bad_handles() {
    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    float ms = 0;
    // Never recorded.
    cudaError_t e = cudaEventElapsedTime(&ms, ev, ev);
    EXPECT(e == cudaErrorInvalidResourceHandle || e == cudaErrorNotReady,
           "elapsed time of an unrecorded event: %d %s", (int)e, cudaGetErrorName(e));
    (void)cudaGetLastError();
    CHECK(cudaEventDestroy(ev));
    still_usable("bad handles");
}

// Features a device may lack answer with an error, or work.
static void optional_features() {
    int managed = -1;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    void* m = nullptr;
    cudaError_t e = cudaMallocManaged(&m, 4096);
    if (managed) {
        EXPECT(e == cudaSuccess, "cudaMallocManaged on a device with managed memory: %d %s",
               (int)e, cudaGetErrorName(e));
        CHECK(cudaFree(m));
    } else {
        EXPECT(e != cudaSuccess, "cudaMallocManaged succeeded without managed memory");
        std::printf("NOTE cudaMallocManaged: %d %s\n", (int)e, cudaGetErrorName(e));
    }
    (void)cudaGetLastError();

    // Graphs: either they work, or the calls fail with an error.
    cudaGraph_t g = nullptr;
    e = cudaGraphCreate(&g, 0);
    std::printf("NOTE cudaGraphCreate: %d %s\n", (int)e, cudaGetErrorName(e));
    if (e == cudaSuccess) {
        cudaGraphExec_t x = nullptr;
        e = cudaGraphInstantiate(&x, g, 0);
        std::printf("NOTE cudaGraphInstantiate: %d %s\n", (int)e, cudaGetErrorName(e));
        if (e == cudaSuccess) CHECK(cudaGraphExecDestroy(x));
        CHECK(cudaGraphDestroy(g));
    }
    (void)cudaGetLastError();

    // Stream capture: begin, a kernel, end. Works, or fails cleanly.
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    std::printf("NOTE cudaStreamBeginCapture: %d %s\n", (int)e, cudaGetErrorName(e));
    if (e == cudaSuccess) {
        spin<<<1, 1, 0, s>>>(1000);
        cudaGraph_t cg = nullptr;
        e = cudaStreamEndCapture(s, &cg);
        std::printf("NOTE cudaStreamEndCapture: %d %s\n", (int)e, cudaGetErrorName(e));
        if (e == cudaSuccess && cg != nullptr) CHECK(cudaGraphDestroy(cg));
    }
    (void)cudaGetLastError();
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    still_usable("optional features");
}

// Writes through a null pointer: on a GPU, and on SimGpu, which executes
// it, an illegal address.
__global__ void fault_kernel(int* p) { *p = 1; }

static void sticky_error() {
    fault_kernel<<<1, 1>>>(nullptr);
    CHECK(cudaGetLastError());  // the launch itself is accepted
    EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    void* p = nullptr;
    EXPECT_ERR(cudaMalloc(&p, 64), cudaErrorIllegalAddress);
    EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    EXPECT(std::strcmp(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation") == 0,
           "cudaGetErrorName");
    last_error();
    bad_pointers();
    bad_handles();
    optional_features();
    CHECK(cudaDeviceSynchronize());
    sticky_error();
    pass();
    return 0;
}
