// nvcc-flags: -gencode arch=compute_90,code=[sm_90,compute_90]
//
// sm_90's bulk asynchronous copies: libcu++'s cuda::memcpy_async of an
// aligned chunk completing on a cuda::barrier (which nvcc turns into
// `cp.async.bulk` and `mbarrier.expect_tx`), and the same by hand in inline
// PTX (`mbarrier.arrive.expect_tx`, `cp.async.bulk` into shared memory
// completing transaction bytes, `try_wait.parity`, and a bulk copy back to
// global memory in a bulk group). Sums and copies are checked against the
// CPU when FAIRGPU_CHECK_RESULTS=1.
#define PROGRAM "bulk_copy"
#include <cuda/barrier>

#include "common.h"

#pragma nv_diag_suppress static_var_with_dynamic_init

constexpr int kChunk = 256;

// Each block streams chunks of `in` into shared memory, one thread issuing
// each aligned copy; everyone waits on the barrier, then sums the chunk.
__global__ void libcu_bulk_sum(const float* in, int chunks, double* out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ alignas(16) float stage[kChunk];
    if (threadIdx.x == 0) init(&bar, blockDim.x);
    __syncthreads();
    double mine = 0;
    for (int c = blockIdx.x; c < chunks; c += gridDim.x) {
        if (threadIdx.x == 0)
            cuda::memcpy_async(stage, in + c * kChunk, cuda::aligned_size_t<16>(sizeof(stage)), bar);
        bar.arrive_and_wait();
        float v = stage[threadIdx.x];
        mine += (double)v * v;
        bar.arrive_and_wait();
    }
    atomicAdd(out, mine);
}

__device__ unsigned smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// By hand: thread 0 expects the bytes and issues the copy; every thread
// waits for the phase, doubles its element in shared memory, and thread 0
// copies the chunk back to `out` with a bulk store.
__global__ void ptx_bulk_double(const float* in, float* out) {
    __shared__ alignas(8) unsigned long long bar;
    __shared__ alignas(16) float stage[kChunk];
    const unsigned bytes = sizeof(stage);
    const float* src = in + blockIdx.x * kChunk;
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem(&bar)));
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long state;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                     : "=l"(state)
                     : "r"(smem(&bar)), "r"(bytes));
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(smem(stage)),
            "l"(src), "r"(bytes), "r"(smem(&bar))
            : "memory");
    }
    // Phase 0 completes when the arrival and all the bytes are in.
    unsigned done = 0;
    while (!done) {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(smem(&bar)), "r"(0u)
            : "memory");
    }
    stage[threadIdx.x] *= 2.0f;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                         out + blockIdx.x * kChunk),
                     "r"(smem(stage)), "r"(bytes)
                     : "memory");
        asm volatile("cp.async.bulk.commit_group;");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
}

int main() {
    first_call(cudaSetDevice(0), "cudaSetDevice");
    const int chunks = 24, n = chunks * kChunk;
    float* h = (float*)std::malloc(n * sizeof(float));
    float* back = (float*)std::malloc(n * sizeof(float));
    Rng r(5);
    for (int i = 0; i < n; i++) h[i] = r.unit();
    float *din, *dout;
    double* dsum;
    CHECK(cudaMalloc(&din, n * sizeof(float)));
    CHECK(cudaMalloc(&dout, n * sizeof(float)));
    CHECK(cudaMalloc(&dsum, sizeof(double)));
    CHECK(cudaMemcpy(din, h, n * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dsum, 0, sizeof(double)));

    libcu_bulk_sum<<<4, kChunk>>>(din, chunks, dsum);
    LAUNCHED("libcu_bulk_sum");
    double sum = 0, want = 0;
    CHECK(cudaMemcpy(&sum, dsum, sizeof sum, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) want += (double)h[i] * h[i];
    if (check_results())
        EXPECT(std::fabs(sum - want) <= 1e-9 * want, "sum of squares %.12g, want %.12g", sum, want);

    ptx_bulk_double<<<chunks, kChunk>>>(din, dout);
    LAUNCHED("ptx_bulk_double");
    CHECK(cudaMemcpy(back, dout, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (check_results())
        for (int i = 0; i < n; i++)
            EXPECT(back[i] == 2.0f * h[i], "element %d: %g, want %g", i, back[i], 2.0f * h[i]);

    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dsum));
    std::free(h);
    std::free(back);
    pass();
    return 0;
}
