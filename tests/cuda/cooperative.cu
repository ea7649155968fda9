// nvcc-flags: -gencode arch=compute_90,code=[sm_90,compute_90]
//
// Cooperative launches (grid-wide synchronization) and thread-block
// clusters (cluster rank, cluster barrier, distributed shared memory), as
// the device reports them: where COOPERATIVE_LAUNCH or CLUSTER_LAUNCH is 1
// the kernels run and their results are checked against the CPU, and a
// cooperative grid larger than the device holds at once is refused; where
// it is 0 (SimGpu) a cluster launch must fail with cudaErrorNotSupported,
// never run without its semantics. Built for sm_90 (clusters need it).
#define PROGRAM "cooperative"
#include "common.h"

#include <vector>

// A grid barrier written by hand over a global counter (cooperative
// groups' grid.sync() is exercised in sm80_features.cu),
// correct only when every block is resident at once, as a cooperative
// launch guarantees; clusters through sm_90's PTX.
__device__ void grid_barrier(unsigned* arrived, unsigned blocks) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(arrived, 1u);
        while (atomicAdd(arrived, 0u) < blocks) {
        }
        __threadfence();
    }
    __syncthreads();
}

// Each block sums a strided share into partial[block]; after the grid-wide
// barrier, block 0 adds the partial sums: only correct if every block's
// partial is written before any is read.
__global__ void grid_sum(const int* in, int n, long long* partial, unsigned* arrived,
                         long long* out) {
    __shared__ long long acc;
    if (threadIdx.x == 0) acc = 0;
    __syncthreads();
    long long mine = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        mine += in[i];
    atomicAdd((unsigned long long*)&acc, (unsigned long long)mine);
    __syncthreads();
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
    grid_barrier(arrived, gridDim.x);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        long long total = 0;
        for (unsigned b = 0; b < gridDim.x; b++) total += partial[b];
        *out = total;
    }
}

__device__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ unsigned cluster_blocks() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}

__device__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive;\n\tbarrier.cluster.wait;" ::: "memory");
}

// Another block's copy of a shared variable, through distributed shared
// memory.
__device__ int read_rank(int* mine, unsigned rank) {
    unsigned local = (unsigned)__cvta_generic_to_shared(mine), remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
    int v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
    return v;
}

// Each block writes its cluster rank to its shared memory; after the
// cluster barrier every thread reads the next block's value.
__global__ void cluster_ring(int* out) {
    __shared__ int rank;
    if (threadIdx.x == 0) rank = (int)cluster_rank() * 100 + 7;
    cluster_sync();
    unsigned next = (cluster_rank() + 1) % cluster_blocks();
    out[blockIdx.x * blockDim.x + threadIdx.x] = read_rank(&rank, next) * 1000 + (int)cluster_blocks();
    cluster_sync();  // no block leaves while another may still read it
}

static int attribute(cudaDeviceAttr a) {
    int v = -1;
    CHECK(cudaDeviceGetAttribute(&v, a, 0));
    return v;
}

static void cooperative() {
    const int n = 1 << 16, threads = 128;
    int per_sm = 0, sms = attribute(cudaDevAttrMultiProcessorCount);
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sum, threads, 0));
    EXPECT(per_sm > 0, "no resident blocks of grid_sum");
    int blocks = per_sm * sms < 64 ? per_sm * sms : 64;
    std::vector<int> in(n);
    long long want = 0;
    for (int i = 0; i < n; i++) {
        in[i] = (i * 7919) % 1001 - 500;
        want += in[i];
    }
    int* d_in = nullptr;
    long long *partial = nullptr, *out = nullptr;
    unsigned* arrived = nullptr;
    CHECK(cudaMalloc(&arrived, sizeof(unsigned)));
    CHECK(cudaMemset(arrived, 0, sizeof(unsigned)));
    CHECK(cudaMalloc(&d_in, n * sizeof(int)));
    CHECK(cudaMalloc(&partial, blocks * sizeof(long long)));
    CHECK(cudaMalloc(&out, sizeof(long long)));
    CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    int nn = n;
    void* args[] = {&d_in, &nn, &partial, &arrived, &out};
    CHECK(cudaLaunchCooperativeKernel((void*)grid_sum, blocks, threads, args, 0, nullptr));
    CHECK(cudaDeviceSynchronize());
    long long got = 0;
    CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == want, "grid-wide sum %lld, want %lld", got, want);
    // Also through cudaLaunchKernelEx's attribute.
    CHECK(cudaMemset(out, 0, sizeof(long long)));
    CHECK(cudaMemset(arrived, 0, sizeof(unsigned)));
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeCooperative;
    attr.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CHECK(cudaLaunchKernelEx(&cfg, grid_sum, (const int*)d_in, nn, partial, arrived, out));
    CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == want, "grid-wide sum (cudaLaunchKernelEx) %lld, want %lld", got, want);
    // More blocks than can be resident at once: refused, nothing runs.
    int too_many = per_sm * sms + 1;
    long long* big_partial = nullptr;
    CHECK(cudaMalloc(&big_partial, too_many * sizeof(long long)));
    void* big_args[] = {&d_in, &nn, &big_partial, &arrived, &out};
    EXPECT_ERR(cudaLaunchCooperativeKernel((void*)grid_sum, too_many, threads, big_args, 0, nullptr),
               cudaErrorCooperativeLaunchTooLarge);
    (void)cudaGetLastError();
    CHECK(cudaFree(big_partial));
    CHECK(cudaFree(d_in));
    CHECK(cudaFree(partial));
    CHECK(cudaFree(arrived));
    CHECK(cudaFree(out));
}

static void clusters(bool supported) {
    const int cluster = 4, blocks = 8, threads = 32;
    int* out = nullptr;
    CHECK(cudaMalloc(&out, blocks * threads * sizeof(int)));
    CHECK(cudaMemset(out, 0, blocks * threads * sizeof(int)));
    cudaLaunchAttribute attr = {};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, cluster_ring, out);
    if (!supported) {
        EXPECT(e == cudaErrorNotSupported, "a cluster launch without CLUSTER_LAUNCH: %s",
               cudaGetErrorName(e));
        (void)cudaGetLastError();
        std::vector<int> got(blocks * threads, -1);
        CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
        for (int v : got) EXPECT(v == 0, "a refused cluster launch wrote %d", v);
        CHECK(cudaFree(out));
        return;
    }
    CHECK(e);
    int active = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&active, cluster_ring, &cfg));
    EXPECT(active > 0, "no active clusters of 4 blocks reported");
    std::vector<int> got(blocks * threads);
    CHECK(cudaMemcpy(got.data(), out, got.size() * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
        for (int t = 0; t < threads; t++) {
            int next = (b % cluster + 1) % cluster;
            int want = (next * 100 + 7) * 1000 + cluster;
            EXPECT(got[b * threads + t] == want, "block %d thread %d read %d, want %d", b, t,
                   got[b * threads + t], want);
        }
    // A grid that is not a whole number of clusters is refused.
    cfg.gridDim = dim3(blocks + 1);
    EXPECT(cudaLaunchKernelEx(&cfg, cluster_ring, out) != cudaSuccess,
           "a grid of 9 blocks in clusters of 4 was launched");
    (void)cudaGetLastError();
    CHECK(cudaFree(out));
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    int coop = attribute(cudaDevAttrCooperativeLaunch);
    int cl = attribute(cudaDevAttrClusterLaunch);
    EXPECT(coop == 0 || coop == 1, "COOPERATIVE_LAUNCH = %d", coop);
    EXPECT(cl == 0 || cl == 1, "CLUSTER_LAUNCH = %d", cl);
    if (coop) cooperative();
    clusters(cl == 1);
    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
