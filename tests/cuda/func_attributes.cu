// Function attributes describe the code that runs. Host code that tunes
// itself by them (CUB picks its tile sizes from cudaFuncAttributes'
// ptxVersion) computes wrong results when they describe other code than
// the device runs; fairgpu once reported the device's compute capability
// as every kernel's ptxVersion, and CuPy's CUB sums came out wrong.
//
// Checks: ptxVersion is the architecture the running code was compiled for
// (the kernel reports __CUDA_ARCH__ itself); sharedSizeBytes is the static
// shared memory the kernel declares; maxDynamicSharedSizeBytes is 48 KiB
// less it by default, and a launch asking more fails until
// cudaFuncSetAttribute raises it, after which a kernel really uses that
// much dynamic shared memory (its results checked against the CPU).
#define PROGRAM "func_attributes"
#include "common.h"

#include <vector>

constexpr int kTile = 300;  // floats of static shared memory: 1200 bytes

__global__ void arch_probe(int* arch, float* out) {
    __shared__ float tile[kTile];
    int t = threadIdx.x;
    tile[t] = (float)(t * 3);
    __syncthreads();
    out[t] = tile[(t + 1) % kTile];
    if (t == 0) {
#ifdef __CUDA_ARCH__
        *arch = __CUDA_ARCH__;
#endif
    }
}

// Each block fills `n` floats of dynamic shared memory and writes back the
// reversed array, so every byte of the shared memory asked for is used.
__global__ void big_shared(float* out, int n) {
    extern __shared__ float buf[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = (float)(i * 2 + blockIdx.x);
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[blockIdx.x * n + i] = buf[n - 1 - i];
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");

    cudaFuncAttributes a;
    CHECK(cudaFuncGetAttributes(&a, arch_probe));
    EXPECT(a.sharedSizeBytes == kTile * sizeof(float), "sharedSizeBytes %zu, want %zu",
           a.sharedSizeBytes, kTile * sizeof(float));
    EXPECT(a.maxThreadsPerBlock >= kTile, "maxThreadsPerBlock %d", a.maxThreadsPerBlock);
    EXPECT(a.numRegs > 0, "numRegs %d", a.numRegs);
    EXPECT(a.ptxVersion >= 50, "ptxVersion %d", a.ptxVersion);
    EXPECT(a.maxDynamicSharedSizeBytes + (int)a.sharedSizeBytes == 48 * 1024,
           "maxDynamicSharedSizeBytes %d with %zu static", a.maxDynamicSharedSizeBytes,
           a.sharedSizeBytes);
    int value = 0;
    CHECK(cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    EXPECT(value > 48 * 1024, "opt-in shared memory per block %d", value);

    if (check_results()) {
        int* d_arch;
        float* d_out;
        CHECK(cudaMalloc(&d_arch, sizeof(int)));
        CHECK(cudaMalloc(&d_out, kTile * sizeof(float)));
        CHECK(cudaMemset(d_arch, 0, sizeof(int)));
        arch_probe<<<1, kTile>>>(d_arch, d_out);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        int arch = 0;
        std::vector<float> out(kTile);
        CHECK(cudaMemcpy(&arch, d_arch, sizeof(int), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(out.data(), d_out, kTile * sizeof(float), cudaMemcpyDeviceToHost));
        // The code that ran was compiled for __CUDA_ARCH__: ptxVersion must
        // say the same, or host-side tuning mismatches the device code.
        EXPECT(arch == a.ptxVersion * 10, "the kernel ran code for __CUDA_ARCH__ %d, ptxVersion %d",
               arch, a.ptxVersion);
        for (int t = 0; t < kTile; t++)
            EXPECT(out[t] == (float)(((t + 1) % kTile) * 3), "out[%d] = %g", t, out[t]);
        CHECK(cudaFree(d_arch));
        CHECK(cudaFree(d_out));
    }

    // 64 KiB of dynamic shared memory: refused by default, allowed once set.
    const int n = 16 * 1024;
    const size_t bytes = n * sizeof(float);
    const int blocks = 3;
    float* d_big;
    CHECK(cudaMalloc(&d_big, blocks * bytes));
    big_shared<<<blocks, 256, bytes>>>(d_big, n);
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    CHECK(cudaFuncSetAttribute(big_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    cudaFuncAttributes b;
    CHECK(cudaFuncGetAttributes(&b, big_shared));
    EXPECT(b.maxDynamicSharedSizeBytes == (int)bytes, "maxDynamicSharedSizeBytes %d after set",
           b.maxDynamicSharedSizeBytes);
    EXPECT(b.sharedSizeBytes == 0, "big_shared has no static shared memory: %zu",
           b.sharedSizeBytes);
    EXPECT_ERR(cudaFuncSetAttribute(big_shared, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    value + 1),
               cudaErrorInvalidValue);
    // That error is also the runtime's last error: take it.
    EXPECT_ERR(cudaGetLastError(), cudaErrorInvalidValue);
    big_shared<<<blocks, 256, bytes>>>(d_big, n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (check_results()) {
        std::vector<float> big(blocks * n);
        CHECK(cudaMemcpy(big.data(), d_big, blocks * bytes, cudaMemcpyDeviceToHost));
        for (int blk = 0; blk < blocks; blk++)
            for (int i = 0; i < n; i++) {
                float want = (float)((n - 1 - i) * 2 + blk);
                EXPECT(big[blk * n + i] == want, "block %d [%d] = %g, want %g", blk, i,
                       big[blk * n + i], want);
            }
    }
    CHECK(cudaFree(d_big));
    pass();
    return 0;
}
