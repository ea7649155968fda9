// Prefix sums (inclusive scan) of 32-bit integers over up to 16 Ki + 123
// elements, in three kernels: each block scans its part in shared memory
// (Hillis-Steele with double buffering and __syncthreads()) and writes its
// total; one block scans the totals; every block adds its offset. Then the
// same with the in-block scan done by warp shuffles (__shfl_up_sync).
// Compared exactly with the CPU's running sum.
#define PROGRAM "scan"
#include "common.h"

#include <vector>

#define BLOCK 256

__global__ void scan_block(const int* in, int* out, int* totals, int n) {
    __shared__ int buf[2][BLOCK];
    int t = threadIdx.x, i = blockIdx.x * BLOCK + t;
    int cur = 0;
    buf[cur][t] = i < n ? in[i] : 0;
    __syncthreads();
    for (int off = 1; off < BLOCK; off <<= 1) {
        int v = buf[cur][t];
        if (t >= off) v += buf[cur][t - off];
        buf[cur ^ 1][t] = v;
        cur ^= 1;
        __syncthreads();
    }
    if (i < n) out[i] = buf[cur][t];
    if (t == BLOCK - 1 && totals != nullptr) totals[blockIdx.x] = buf[cur][t];
}

__global__ void scan_warps(const int* in, int* out, int* totals, int n) {
    __shared__ int warp_totals[BLOCK / 32];
    int t = threadIdx.x, i = blockIdx.x * BLOCK + t, lane = t % 32, warp = t / 32;
    int v = i < n ? in[i] : 0;
    for (int off = 1; off < 32; off <<= 1) {
        int up = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) v += up;
    }
    if (lane == 31) warp_totals[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int w = lane < BLOCK / 32 ? warp_totals[lane] : 0;
        for (int off = 1; off < 32; off <<= 1) {
            int up = __shfl_up_sync(0xffffffffu, w, off);
            if (lane >= off) w += up;
        }
        if (lane < BLOCK / 32) warp_totals[lane] = w;
    }
    __syncthreads();
    if (warp > 0) v += warp_totals[warp - 1];
    if (i < n) out[i] = v;
    if (t == BLOCK - 1 && totals != nullptr) totals[blockIdx.x] = v;
}

// Adds the inclusive scan of the previous blocks' totals.
__global__ void add_offsets(int* out, const int* scanned_totals, int n) {
    int i = blockIdx.x * BLOCK + threadIdx.x;
    if (blockIdx.x > 0 && i < n) out[i] += scanned_totals[blockIdx.x - 1];
}

static void run(int n, bool warps) {
    Rng rng(n + warps);
    std::vector<int> in(n), want(n);
    int acc = 0;
    for (int i = 0; i < n; i++) {
        in[i] = (int)rng.below(2001) - 1000;
        acc += in[i];
        want[i] = acc;
    }
    int blocks = (n + BLOCK - 1) / BLOCK;
    int *din, *dout, *dtotals, *dscanned;
    CHECK(cudaMalloc((void**)&din, n * 4));
    CHECK(cudaMalloc((void**)&dout, n * 4));
    CHECK(cudaMalloc((void**)&dtotals, blocks * 4));
    CHECK(cudaMalloc((void**)&dscanned, blocks * 4));
    CHECK(cudaMemcpy(din, in.data(), n * 4, cudaMemcpyHostToDevice));
    auto scan = warps ? scan_warps : scan_block;
    scan<<<blocks, BLOCK>>>(din, dout, dtotals, n);
    LAUNCHED("scan of the blocks");
    scan<<<1, BLOCK>>>(dtotals, dscanned, nullptr, blocks);  // blocks <= BLOCK
    LAUNCHED("scan of the totals");
    add_offsets<<<blocks, BLOCK>>>(dout, dscanned, n);
    LAUNCHED("add_offsets");
    std::vector<int> got(n);
    CHECK(cudaMemcpy(got.data(), dout, n * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(got[i] == want[i], "%s n=%d: out[%d] = %d, want %d", warps ? "warps" : "shared", n,
               i, got[i], want[i]);
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dtotals));
    CHECK(cudaFree(dscanned));
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    for (int n : {1, 256, 1000, (1 << 14) + 123}) {
        run(n, false);
        run(n, true);
    }
    pass();
    return 0;
}
