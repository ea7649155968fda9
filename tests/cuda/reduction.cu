// Reductions: per-block sums in shared memory with a tree of
// __syncthreads() barriers (unsigned integers, and floats whose CPU
// reference adds in the same tree order), a warp-shuffle reduction
// (__shfl_down_sync, then the warps' sums through shared memory), and the
// block sums reduced again on the device to one total. Compared exactly.
#define PROGRAM "reduction"
#include "common.h"

#include <vector>

#define BLOCK 256

template <typename T>
__global__ void block_sum(const T* in, T* out, int n) {
    __shared__ T s[BLOCK];
    int t = threadIdx.x, i = blockIdx.x * BLOCK + t;
    s[t] = i < n ? in[i] : (T)0;
    __syncthreads();
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// Sums within each warp by shuffles, then the warp sums by the first warp.
__global__ void shuffle_sum(const unsigned int* in, unsigned int* out, int n) {
    __shared__ unsigned int warp_sums[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int v = i < n ? in[i] : 0;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? warp_sums[lane] : 0;
        for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// The CPU's tree over one block, in the device's order.
static float tree_sum(const std::vector<float>& in, int first, int n) {
    float s[BLOCK];
    for (int t = 0; t < BLOCK; t++) s[t] = first + t < n ? in[first + t] : 0.0f;
    for (int stride = BLOCK / 2; stride > 0; stride >>= 1)
        for (int t = 0; t < stride; t++) s[t] += s[t + stride];
    return s[0];
}

static void integers(int n) {
    Rng rng(n);
    std::vector<unsigned int> in(n);
    unsigned long long total = 0;
    for (auto& x : in) {
        x = rng.below(1u << 20);
        total += x;
    }
    int blocks = (n + BLOCK - 1) / BLOCK;
    unsigned int *din, *dpart, *dtotal;
    CHECK(cudaMalloc((void**)&din, n * 4));
    CHECK(cudaMalloc((void**)&dpart, blocks * 4));
    CHECK(cudaMalloc((void**)&dtotal, 4));
    CHECK(cudaMemcpy(din, in.data(), n * 4, cudaMemcpyHostToDevice));
    for (int variant = 0; variant < 2; variant++) {
        const char* name = variant == 0 ? "block_sum" : "shuffle_sum";
        if (variant == 0)
            block_sum<unsigned int><<<blocks, BLOCK>>>(din, dpart, n);
        else
            shuffle_sum<<<blocks, BLOCK>>>(din, dpart, n);
        LAUNCHED(name);
        std::vector<unsigned int> part(blocks);
        CHECK(cudaMemcpy(part.data(), dpart, blocks * 4, cudaMemcpyDeviceToHost));
        for (int b = 0; b < blocks; b++) {
            unsigned int want = 0;
            for (int i = b * BLOCK; i < n && i < (b + 1) * BLOCK; i++) want += in[i];
            EXPECT(part[b] == want, "%s n=%d: block %d sums to %u, want %u", name, n, b, part[b],
                   want);
        }
        // The partial sums again, in one block (blocks <= BLOCK here).
        block_sum<unsigned int><<<1, BLOCK>>>(dpart, dtotal, blocks);
        LAUNCHED("block_sum of the partial sums");
        unsigned int got = 0;
        CHECK(cudaMemcpy(&got, dtotal, 4, cudaMemcpyDeviceToHost));
        EXPECT(got == (unsigned int)total, "%s n=%d: total %u, want %u", name, n, got,
               (unsigned int)total);
    }
    CHECK(cudaFree(din));
    CHECK(cudaFree(dpart));
    CHECK(cudaFree(dtotal));
}

static void floats(int n) {
    Rng rng(3 * n);
    std::vector<float> in(n);
    for (auto& x : in) x = rng.unit() * 100.0f;
    int blocks = (n + BLOCK - 1) / BLOCK;
    float *din, *dpart;
    CHECK(cudaMalloc((void**)&din, n * 4));
    CHECK(cudaMalloc((void**)&dpart, blocks * 4));
    CHECK(cudaMemcpy(din, in.data(), n * 4, cudaMemcpyHostToDevice));
    block_sum<float><<<blocks, BLOCK>>>(din, dpart, n);
    LAUNCHED("block_sum<float>");
    std::vector<float> part(blocks);
    CHECK(cudaMemcpy(part.data(), dpart, blocks * 4, cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++) {
        float want = tree_sum(in, b * BLOCK, n);
        EXPECT(fbits(part[b]) == fbits(want), "block_sum<float> n=%d: block %d sums to %a, want %a",
               n, b, part[b], want);
    }
    CHECK(cudaFree(din));
    CHECK(cudaFree(dpart));
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    for (int n : {1, 1000, 60000}) integers(n);
    floats(40000);
    pass();
    return 0;
}
