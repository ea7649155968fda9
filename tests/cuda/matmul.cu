// Tiled matrix multiplication: C = A * B for 64x64 (and 48x80 by 80x32)
// float matrices, each block computing a 16x16 tile of C from tiles of A
// and B staged in shared memory between __syncthreads() barriers; once
// with static shared memory, once with dynamic (extern __shared__). Each
// element accumulates with fmaf in ascending k, so the CPU reference,
// doing the same, must agree bit for bit.
#define PROGRAM "matmul"
#include "common.h"

#include <cmath>
#include <vector>

#define TILE 16

// C[m x n] = A[m x k] * B[k x n], row-major; dimensions multiples of TILE.
__global__ void matmul_static(const float* A, const float* B, float* C, int m, int n, int k) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float sum = 0.0f;
    for (int t = 0; t < k / TILE; t++) {
        As[ty][tx] = A[row * k + t * TILE + tx];
        Bs[ty][tx] = B[(t * TILE + ty) * n + col];
        __syncthreads();
        for (int j = 0; j < TILE; j++) sum = fmaf(As[ty][j], Bs[j][tx], sum);
        __syncthreads();
    }
    C[row * n + col] = sum;
}

// The same with both tiles in dynamic shared memory.
__global__ void matmul_dynamic(const float* A, const float* B, float* C, int m, int n, int k) {
    extern __shared__ float tiles[];
    float* As = tiles;
    float* Bs = tiles + TILE * TILE;
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float sum = 0.0f;
    for (int t = 0; t < k / TILE; t++) {
        As[ty * TILE + tx] = A[row * k + t * TILE + tx];
        Bs[ty * TILE + tx] = B[(t * TILE + ty) * n + col];
        __syncthreads();
        for (int j = 0; j < TILE; j++) sum = fmaf(As[ty * TILE + j], Bs[j * TILE + tx], sum);
        __syncthreads();
    }
    C[row * n + col] = sum;
}

static void run(int m, int n, int k, bool dynamic) {
    Rng rng(m * 131 + n * 7 + k);
    std::vector<float> a((size_t)m * k), b((size_t)k * n), c((size_t)m * n);
    for (auto& x : a) x = rng.unit();
    for (auto& x : b) x = rng.unit();
    float *da, *db, *dc;
    CHECK(cudaMalloc((void**)&da, a.size() * 4));
    CHECK(cudaMalloc((void**)&db, b.size() * 4));
    CHECK(cudaMalloc((void**)&dc, c.size() * 4));
    CHECK(cudaMemcpy(da, a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), b.size() * 4, cudaMemcpyHostToDevice));
    dim3 block(TILE, TILE), grid(n / TILE, m / TILE);
    uint64_t t0 = wall_ns();
    if (dynamic)
        matmul_dynamic<<<grid, block, 2 * TILE * TILE * sizeof(float)>>>(da, db, dc, m, n, k);
    else
        matmul_static<<<grid, block>>>(da, db, dc, m, n, k);
    LAUNCHED(dynamic ? "matmul_dynamic" : "matmul_static");
    uint64_t t1 = wall_ns();
    CHECK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float want = 0.0f;
            for (int p = 0; p < k; p++) want = std::fma(a[i * k + p], b[p * n + j], want);
            float got = c[i * n + j];
            EXPECT(fbits(got) == fbits(want), "%dx%dx%d%s: C[%d][%d] = %a, want %a", m, n, k,
                   dynamic ? " (dynamic)" : "", i, j, got, want);
        }
    std::printf("TIME matmul %dx%dx%d%s %.3f ms (launch to synchronized)\n", m, n, k,
                dynamic ? " dynamic" : "", (t1 - t0) / 1e6);
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
}

// `matmul N` multiplies N x N matrices instead (N a multiple of 16), to
// measure larger runs.
int main(int argc, char** argv) {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (argc > 1) {
        int n = std::atoi(argv[1]);
        EXPECT(n > 0 && n % TILE == 0 && n <= 4096, "matmul N: N = %d is not a multiple of %d", n,
               TILE);
        run(n, n, n, false);
    } else {
        run(64, 64, 64, false);
        run(64, 64, 64, true);
        run(48, 32, 80, false);
    }
    pass();
    return 0;
}
