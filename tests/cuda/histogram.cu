// Histograms with atomics: 256 bins of bytes counted per block in shared
// memory (atomicAdd on __shared__), merged into the global histogram
// (atomicAdd on global memory); the same counted straight into global
// memory; the global minimum and maximum with atomicMin and atomicMax; and
// a counter every thread increments through an atomicCAS loop. Exact.
#define PROGRAM "histogram"
#include "common.h"

#include <vector>

#define BINS 256

__global__ void hist_shared(const unsigned char* in, int n, unsigned int* bins) {
    __shared__ unsigned int local[BINS];
    for (int b = threadIdx.x; b < BINS; b += blockDim.x) local[b] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(&local[in[i]], 1u);
    __syncthreads();
    for (int b = threadIdx.x; b < BINS; b += blockDim.x)
        if (local[b] != 0) atomicAdd(&bins[b], local[b]);
}

__global__ void hist_global(const unsigned char* in, int n, unsigned int* bins) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&bins[in[i]], 1u);
}

// out[0] = min, out[1] = max of the values, out[2] counts threads (CAS).
__global__ void extremes(const int* v, int n, int* out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicMin(&out[0], v[i]);
        atomicMax(&out[1], v[i]);
    }
    int old = out[2], seen;
    while ((seen = atomicCAS(&out[2], old, old + 1)) != old) old = seen;
}

static void histograms(int n) {
    Rng rng(n);
    std::vector<unsigned char> in(n);
    std::vector<unsigned int> want(BINS, 0);
    for (auto& x : in) {
        // Skewed: small values are common, so bins collide often.
        unsigned r = rng.below(1024);
        x = (unsigned char)(r < 512 ? r % 8 : r % BINS);
        want[x]++;
    }
    unsigned char* din;
    unsigned int* dbins;
    CHECK(cudaMalloc((void**)&din, n));
    CHECK(cudaMalloc((void**)&dbins, BINS * 4));
    CHECK(cudaMemcpy(din, in.data(), n, cudaMemcpyHostToDevice));
    for (int variant = 0; variant < 2; variant++) {
        const char* name = variant == 0 ? "hist_shared" : "hist_global";
        CHECK(cudaMemset(dbins, 0, BINS * 4));
        if (variant == 0)
            hist_shared<<<8, 256>>>(din, n, dbins);
        else
            hist_global<<<(n + 255) / 256, 256>>>(din, n, dbins);
        LAUNCHED(name);
        std::vector<unsigned int> got(BINS);
        CHECK(cudaMemcpy(got.data(), dbins, BINS * 4, cudaMemcpyDeviceToHost));
        for (int b = 0; b < BINS; b++)
            EXPECT(got[b] == want[b], "%s n=%d: bin %d counts %u, want %u", name, n, b, got[b],
                   want[b]);
    }
    CHECK(cudaFree(din));
    CHECK(cudaFree(dbins));
}

static void min_max_cas(int n) {
    Rng rng(5 * n);
    std::vector<int> v(n);
    int lo = 0x7fffffff, hi = -0x7fffffff - 1;
    for (auto& x : v) {
        x = (int)rng.next();
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    int *dv, *dout;
    CHECK(cudaMalloc((void**)&dv, n * 4));
    CHECK(cudaMalloc((void**)&dout, 12));
    CHECK(cudaMemcpy(dv, v.data(), n * 4, cudaMemcpyHostToDevice));
    int init[3] = {0x7fffffff, -0x7fffffff - 1, 0};
    CHECK(cudaMemcpy(dout, init, 12, cudaMemcpyHostToDevice));
    int blocks = (n + 127) / 128;
    extremes<<<blocks, 128>>>(dv, n, dout);
    LAUNCHED("extremes");
    int got[3];
    CHECK(cudaMemcpy(got, dout, 12, cudaMemcpyDeviceToHost));
    EXPECT(got[0] == lo && got[1] == hi, "n=%d: min %d max %d, want %d %d", n, got[0], got[1], lo,
           hi);
    EXPECT(got[2] == blocks * 128, "the CAS counter is %d, want %d", got[2], blocks * 128);
    CHECK(cudaFree(dv));
    CHECK(cudaFree(dout));
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    for (int n : {1, 1000, 100000}) histograms(n);
    min_max_cas(5000);
    pass();
    return 0;
}
