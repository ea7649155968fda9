// nvcc-flags: -gencode arch=compute_80,code=[sm_80,compute_80]
//
// sm_80 features as programs write them with NVIDIA's headers, each result
// checked against the CPU: a tiled matrix product on tensor cores (mma.h's
// wmma, f16 inputs into f32, and tf32), a producer/consumer pipeline over
// libcu++'s cuda::barrier with cuda::memcpy_async, and cooperative groups'
// grid.sync() in a cooperative launch (where the device reports
// COOPERATIVE_LAUNCH) and in a plain launch of a grid resident at once.
#define PROGRAM "sm80_features"
#include "common.h"

#include <cooperative_groups.h>
#include <cuda/barrier>
#include <cuda_fp16.h>
#include <mma.h>

#include <vector>

namespace cg = cooperative_groups;
using namespace nvcuda;

constexpr int kM = 64, kN = 48, kK = 32;

// C (kM x kN, f32) = A (kM x kK, f16, row-major) * B (kK x kN, f16,
// column-major); one warp per 16x16 tile of C.
__global__ void gemm_f16(const half* a, const half* b, float* c) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int tm = warp / (kN / 16), tn = warp % (kN / 16);
    if (tm >= kM / 16) return;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < kK; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, a + tm * 16 * kK + k, kK);
        wmma::load_matrix_sync(fb, b + tn * 16 * kK + k, kK);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + tm * 16 * kN + tn * 16, acc, kN, wmma::mem_row_major);
}

// The same product in tf32 from f32 inputs (B row-major here).
__global__ void gemm_tf32(const float* a, const float* b, float* c) {
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int tm = warp / (kN / 16), tn = warp % (kN / 16);
    if (tm >= kM / 16) return;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < kK; k += 8) {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, a + tm * 16 * kK + k, kK);
        wmma::load_matrix_sync(fb, b + k * kN + tn * 16, kN);
        for (int i = 0; i < fa.num_elements; i++) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
        for (int i = 0; i < fb.num_elements; i++) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(c + tm * 16 * kN + tn * 16, acc, kN, wmma::mem_row_major);
}

#pragma nv_diag_suppress static_var_with_dynamic_init
// Each block streams its chunks of `in` through a shared stage with
// memcpy_async completing on a barrier, and sums the squares.
__global__ void staged_sum(const float* in, int chunks, double* out) {
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    __shared__ float stage[256];
    auto block = cg::this_thread_block();
    if (block.thread_rank() == 0) init(&bar, block.size());
    block.sync();
    double mine = 0;
    for (int c = blockIdx.x; c < chunks; c += gridDim.x) {
        cuda::memcpy_async(block, stage, in + c * 256, sizeof(stage), bar);
        bar.arrive_and_wait();
        float v = stage[threadIdx.x];
        mine += (double)v * v;
        bar.arrive_and_wait();  // the stage is refilled only when all read it
    }
    atomicAdd(out, mine);
}

// Two phases around grid.sync(): every block publishes a value, then each
// reads the one of the block after it.
__global__ void grid_ring(int* published, int* out) {
    cg::grid_group grid = cg::this_grid();
    if (threadIdx.x == 0) published[blockIdx.x] = (int)(blockIdx.x * blockIdx.x + 11);
    grid.sync();
    if (threadIdx.x == 0) out[blockIdx.x] = published[(blockIdx.x + 1) % gridDim.x];
}

static float tf32(float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    b = (b + 0x1000u) & ~0x1fffu;
    std::memcpy(&x, &b, 4);
    return x;
}

static void gemms() {
    std::vector<float> a(kM * kK), b(kK * kN);
    for (int i = 0; i < kM * kK; i++) a[i] = (float)((i * 7) % 13) * 0.25f - 1.5f;
    for (int i = 0; i < kK * kN; i++) b[i] = (float)((i * 5) % 11) * 0.5f - 2.5f;
    // f16 copies: A row-major; B column-major (b_col[n * kK + k] = B[k][n]).
    std::vector<half> ah(kM * kK), bh(kK * kN);
    for (int i = 0; i < kM * kK; i++) ah[i] = __float2half(a[i]);
    for (int k = 0; k < kK; k++)
        for (int n = 0; n < kN; n++) bh[n * kK + k] = __float2half(b[k * kN + n]);
    half *da, *db;
    float *dc, *fa, *fb;
    CHECK(cudaMalloc(&da, ah.size() * sizeof(half)));
    CHECK(cudaMalloc(&db, bh.size() * sizeof(half)));
    CHECK(cudaMalloc(&fa, a.size() * sizeof(float)));
    CHECK(cudaMalloc(&fb, b.size() * sizeof(float)));
    CHECK(cudaMalloc(&dc, kM * kN * sizeof(float)));
    CHECK(cudaMemcpy(da, ah.data(), ah.size() * sizeof(half), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, bh.data(), bh.size() * sizeof(half), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(fa, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(fb, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
    int warps = (kM / 16) * (kN / 16);
    std::vector<float> c(kM * kN);
    for (int pass = 0; pass < 2; pass++) {
        CHECK(cudaMemset(dc, 0, kM * kN * sizeof(float)));
        if (pass == 0)
            gemm_f16<<<(warps + 3) / 4, 128>>>(da, db, dc);
        else
            gemm_tf32<<<(warps + 3) / 4, 128>>>(fa, fb, dc);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
        // The inputs are exact in f16 and tf32 and every partial sum is a
        // multiple of 1/8 below 2^20: the products are exact.
        for (int i = 0; i < kM; i++)
            for (int j = 0; j < kN; j++) {
                float want = 0;
                for (int k = 0; k < kK; k++) want += tf32(a[i * kK + k]) * tf32(b[k * kN + j]);
                EXPECT(c[i * kN + j] == want, "%s: c[%d][%d] = %g, want %g",
                       pass == 0 ? "f16" : "tf32", i, j, c[i * kN + j], want);
            }
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(fa));
    CHECK(cudaFree(fb));
    CHECK(cudaFree(dc));
}

static void staged() {
    const int chunks = 40;
    std::vector<float> in(chunks * 256);
    double want = 0;
    for (size_t i = 0; i < in.size(); i++) {
        in[i] = (float)((int)(i % 97) - 48) * 0.125f;
        want += (double)in[i] * in[i];
    }
    float* din;
    double* dout;
    CHECK(cudaMalloc(&din, in.size() * sizeof(float)));
    CHECK(cudaMalloc(&dout, sizeof(double)));
    CHECK(cudaMemcpy(din, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dout, 0, sizeof(double)));
    staged_sum<<<6, 256>>>(din, chunks, dout);
    CHECK(cudaGetLastError());
    double got = 0;
    CHECK(cudaMemcpy(&got, dout, sizeof(double), cudaMemcpyDeviceToHost));
    EXPECT(got == want, "staged sum of squares %.17g, want %.17g", got, want);
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
}

static void grid_sync() {
    int coop = 0;
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    if (!coop) return;
    const int blocks = 24;
    int *pub, *out;
    CHECK(cudaMalloc(&pub, blocks * sizeof(int)));
    CHECK(cudaMalloc(&out, blocks * sizeof(int)));
    CHECK(cudaMemset(pub, 0, blocks * sizeof(int)));
    void* args[] = {&pub, &out};
    CHECK(cudaLaunchCooperativeKernel((void*)grid_ring, blocks, 64, args, 0, nullptr));
    std::vector<int> got(blocks);
    CHECK(cudaMemcpy(got.data(), out, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++) {
        int n = (b + 1) % blocks;
        EXPECT(got[b] == n * n + 11, "block %d read %d, want %d", b, got[b], n * n + 11);
    }
    // Launched without the cooperative flag (as CuPy's JIT does), a grid
    // small enough to be resident at once: the driver gives every launch
    // a grid workspace, and the barrier holds.
    const int few = 2;
    CHECK(cudaMemset(pub, 0, blocks * sizeof(int)));
    CHECK(cudaMemset(out, 0, blocks * sizeof(int)));
    grid_ring<<<few, 64>>>(pub, out);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), out, few * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < few; b++) {
        int n = (b + 1) % few;
        EXPECT(got[b] == n * n + 11, "plain launch: block %d read %d, want %d", b, got[b], n * n + 11);
    }
    CHECK(cudaFree(pub));
    CHECK(cudaFree(out));
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    gemms();
    staged();
    grid_sync();
    pass();
    return 0;
}
