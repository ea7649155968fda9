// `__managed__` variables: module variables that the CPU code of the
// program reads and writes directly, as kernels do, with the device's
// view and the CPU's exchanged at launches and synchronizations (the
// model of devices without concurrent managed access). An initialized
// scalar, an array, a struct, and variables of two sizes in one module;
// and the range attributes of managed memory after advice and prefetches.
// Results are checked against the CPU when FAIRGPU_CHECK_RESULTS=1.
#define PROGRAM "managed_vars"
#include "common.h"

struct Stats {
    int count;
    float sum;
    double sq;
};

__managed__ int counter = 41;
__managed__ float values[3000];
__managed__ Stats stats;
__managed__ unsigned char flags[5] = {1, 2, 3, 4, 5};

__global__ void accumulate(int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        values[i] = values[i] * 2.0f + (float)flags[i % 5];
        atomicAdd(&stats.count, 1);
    }
    if (i == 0) counter += 1;
}

__global__ void summarize(int n) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        float s = 0;
        double q = 0;
        for (int i = 0; i < n; i++) {
            s += values[i];
            q += (double)values[i] * values[i];
        }
        stats.sum = s;
        stats.sq = q;
        flags[4] = 99;
    }
}

int main() {
    first_call(cudaSetDevice(0), "cudaSetDevice");
    const int n = 3000;
    // The initializer is what the CPU sees first.
    EXPECT(counter == 41, "counter starts at %d, want 41", counter);
    EXPECT(flags[0] == 1 && flags[4] == 5, "flags start at %d..%d", flags[0], flags[4]);
    for (int i = 0; i < n; i++) values[i] = (float)(i % 17) - 8.0f;
    stats.count = 0;
    counter = 100;  // the CPU's write reaches the next kernel

    accumulate<<<(n + 255) / 256, 256>>>(n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (check_results()) {
        EXPECT(counter == 101, "counter %d after the kernel, want 101", counter);
        EXPECT(stats.count == n, "count %d, want %d", stats.count, n);
        for (int i = 0; i < n; i++) {
            float want = ((float)(i % 17) - 8.0f) * 2.0f + (float)(1 + i % 5);
            EXPECT(values[i] == want, "values[%d] = %g, want %g", i, values[i], want);
        }
    }

    // The CPU changes some values; the next kernel sees them.
    for (int i = 0; i < n; i += 7) values[i] = 0.5f;
    summarize<<<1, 32>>>(n);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (check_results()) {
        float s = 0;
        double q = 0;
        for (int i = 0; i < n; i++) {
            s += values[i];
            q += (double)values[i] * values[i];
        }
        EXPECT(stats.sum == s, "sum %g, want %g", stats.sum, s);
        EXPECT(stats.sq == q, "sum of squares %g, want %g", stats.sq, q);
        EXPECT(flags[4] == 99 && flags[3] == 4, "flags %d %d", flags[3], flags[4]);
    }

    // Their addresses are device memory too: copies and pointers work.
    int* dc = nullptr;
    CHECK(cudaGetSymbolAddress((void**)&dc, counter));
    EXPECT(dc == &counter, "cudaGetSymbolAddress %p, &counter %p", (void*)dc, (void*)&counter);
    int seven = 7;
    CHECK(cudaMemcpyToSymbol(counter, &seven, sizeof seven));
    EXPECT(counter == 7, "counter %d after cudaMemcpyToSymbol, want 7", counter);
    cudaPointerAttributes at;
    CHECK(cudaPointerGetAttributes(&at, &counter));
    EXPECT(at.type == cudaMemoryTypeManaged, "pointer type %d, want managed", (int)at.type);
    // What was advised and prefetched is what the range attributes say,
    // page by page (1 MiB: its halves are whole pages of 4 KiB or 64 KiB).
    {
        const size_t bytes = 1 << 20, half = bytes / 2;
        char* m = nullptr;
        CHECK(cudaMallocManaged(&m, bytes));
        int v = -7;
        CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, m, bytes));
        EXPECT(v == 0, "read-mostly before any advice: %d", v);
#if CUDART_VERSION >= 13000
        cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0};
        CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, dev0));
        CHECK(cudaMemAdvise(m, half, cudaMemAdviseSetPreferredLocation, dev0));
        CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetAccessedBy, dev0));
        CHECK(cudaMemPrefetchAsync(m + half, half, dev0, 0, 0));
#else
        CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, 0));
        CHECK(cudaMemAdvise(m, half, cudaMemAdviseSetPreferredLocation, 0));
        CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetAccessedBy, 0));
        CHECK(cudaMemPrefetchAsync(m + half, half, 0, 0));
#endif
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, m, bytes));
        EXPECT(v == 1, "read-mostly after the advice: %d", v);
        CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, m, half));
        EXPECT(v == 0, "preferred location of the first half: %d", v);
        CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, m, bytes));
        EXPECT(v == cudaInvalidDeviceId, "preferred location of the whole: %d", v);
        int by[3] = {7, 7, 7};
        CHECK(cudaMemRangeGetAttribute(by, sizeof by, cudaMemRangeAttributeAccessedBy, m, bytes));
        EXPECT(by[0] == 0 && by[1] == cudaInvalidDeviceId && by[2] == cudaInvalidDeviceId,
               "accessed by %d %d %d", by[0], by[1], by[2]);
        CHECK(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeLastPrefetchLocation,
                                       m + half, half));
        EXPECT(v == 0, "last prefetch location of the second half: %d", v);
        CHECK(cudaFree(m));
    }
    pass();
    return 0;
}
