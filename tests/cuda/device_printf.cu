// Device-side printf and assert reach the program: each thread's printf
// line appears on stdout at the next synchronization, between what the
// host printed before and after; a failed assert prints the runtime's
// message on stderr and fails the context with cudaErrorAssert.
// tests/tests/cuda_programs.rs checks the lines themselves.
#define PROGRAM "device_printf"
#include "common.h"

#include <cassert>

__global__ void hello(int n) {
    printf("hello from block %d thread %d: %d %.3f %s %5s|%-4d|%x\n", blockIdx.x, threadIdx.x,
           n * (int)threadIdx.x, 1.5 * threadIdx.x, threadIdx.x % 2 ? "odd" : "even", "ab",
           (int)threadIdx.x, 255 + (int)blockIdx.x);
}

__global__ void check(const int* v) {
    assert(v[threadIdx.x] >= 0);
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    std::printf("HOST before\n");
    hello<<<2, 3>>>(7);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("HOST after\n");

    int host[4] = {1, 2, -3, 4};
    int* d;
    CHECK(cudaMalloc(&d, sizeof host));
    CHECK(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice));
    check<<<1, 4>>>(d);
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorAssert, "a failed assert gave %d %s", (int)e, cudaGetErrorName(e));
    pass();
    return 0;
}
