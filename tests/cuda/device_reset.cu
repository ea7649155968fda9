// cudaDeviceReset ends the primary context with everything made in it:
// its memory is free again when the call returns, and the program goes on
// in a fresh context, where its kernels run again and its variables have
// their initial values. Results are checked against the CPU.
//
//   device_reset         the checks every driver passes
//   device_reset fault   also a wild store before a reset: the error is
//                        sticky until the reset, and the work after it
//                        runs (SimGpu's behaviour; NVIDIA's driver loses
//                        the process's CUDA state at such a fault, prints
//                        RESET_RECOVERED)
#define PROGRAM "device_reset"
#include "common.h"

#include <vector>

__device__ unsigned bias = 3;

__global__ void fill(unsigned* out, unsigned v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v + i;
}

__global__ void add_bias(unsigned* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = bias + i;
}

__global__ void poke(unsigned* p) { *p = 1; }

static const int N = 1000;
static const size_t BIG = size_t(16) << 20;

static void check_fill(const unsigned* d, unsigned v, const char* how) {
    std::vector<unsigned> h(N);
    CHECK(cudaMemcpy(h.data(), d, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (h[i] != v + unsigned(i)) fail("%s: out[%d] = %u, want %u", how, i, h[i], v + i);
}

static size_t free_now() {
    size_t free = 0, total = 0;
    CHECK(cudaMemGetInfo(&free, &total));
    return free;
}

// Allocates, fills and sets the variable in the current primary context;
// returns the buffer.
static unsigned* work(unsigned v, unsigned b, unsigned want_bias) {
    unsigned* d = nullptr;
    CHECK(cudaMalloc((void**)&d, N * sizeof(unsigned)));
    fill<<<(N + 127) / 128, 128>>>(d, v, N);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    check_fill(d, v, "fill");
    add_bias<<<(N + 127) / 128, 128>>>(d, N);
    CHECK(cudaDeviceSynchronize());
    check_fill(d, want_bias, "the variable's value in this context");
    CHECK(cudaMemcpyToSymbol(bias, &b, sizeof b));
    add_bias<<<(N + 127) / 128, 128>>>(d, N);
    CHECK(cudaDeviceSynchronize());
    check_fill(d, b, "the variable once set");
    return d;
}

int main(int argc, char** argv) {
    bool fault = argc > 1 && std::strcmp(argv[1], "fault") == 0;
    CHECK(cudaFree(nullptr));
    size_t before = free_now();
    work(5, 100, 3);
    void* big = nullptr;
    CHECK(cudaMalloc(&big, BIG));
    size_t with_big = free_now();
    if (with_big + BIG > before)
        fail("16 MiB are used: free %zu MiB before, %zu MiB after", before >> 20,
             with_big >> 20);

    CHECK(cudaDeviceReset());
    size_t after = free_now();
    if (after < with_big + BIG)
        fail("the reset freed the context's memory: free %zu MiB before it, %zu MiB after",
             with_big >> 20, after >> 20);
    // A fresh context: kernels run, the variable has its initial value.
    unsigned* d = work(7, 200, 3);
    CHECK(cudaFree(d));

    if (fault) {
        poke<<<1, 1>>>((unsigned*)0x10);
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaErrorIllegalAddress) fail("the wild store faulted, got %d", int(e));
        void* p = nullptr;
        e = cudaMalloc(&p, 64);
        if (e != cudaErrorIllegalAddress) fail("the error is sticky, got %d", int(e));
        // The runtime's last error is the program's to clear (a reset
        // does not).
        (void)cudaGetLastError();
        CHECK(cudaDeviceReset());
        d = work(9, 300, 3);
        CHECK(cudaFree(d));
        std::printf("RESET_RECOVERED 1\n");
    }
    CHECK(cudaDeviceReset());
    pass();
    return 0;
}
