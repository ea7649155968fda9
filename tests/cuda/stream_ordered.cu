// Stream-ordered allocation: cudaMallocAsync/cudaFreeAsync on a stream
// around kernels and copies that use the memory, the default memory pool's
// attributes (release threshold, used-memory counters and their reset),
// a pool of one's own (cudaMemPoolCreate, cudaMallocFromPoolAsync, trim,
// access, destroy), cudaDeviceSetMemPool, and a pool's reserve: what is
// freed in stream order stays reserved until a synchronization, serves the
// freeing stream, and goes back at a synchronization or a trim. Kernel
// results are checked against the CPU.
#define PROGRAM "stream_ordered"
#include "common.h"

#include <vector>

__global__ void iota3(unsigned* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = 3u * (unsigned)i + 1u;
}

__global__ void add_into(const unsigned* a, unsigned* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) b[i] += a[i];
}

static uint64_t pool_attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
    uint64_t v = 0;
    CHECK(cudaMemPoolGetAttribute(pool, a, &v));
    return v;
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
    EXPECT(supported == 1, "cudaDevAttrMemoryPoolsSupported = %d", supported);

    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    cudaMemPool_t current;
    CHECK(cudaDeviceGetMemPool(&current, 0));
    EXPECT(current == pool, "the current pool is not the default one");
    uint64_t threshold = UINT64_MAX;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    EXPECT(pool_attr(pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX,
           "release threshold not kept");
    int reuse = 0;
    CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &reuse));
    EXPECT(reuse == 1, "opportunistic reuse %d by default", reuse);

    const int n = 5000;
    const size_t bytes = n * sizeof(unsigned);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint64_t used0 = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
    unsigned *a = nullptr, *b = nullptr;
    CHECK(cudaMallocAsync(&a, bytes, s));
    CHECK(cudaMallocAsync(&b, bytes, s));
    EXPECT(a != nullptr && b != nullptr && a != b, "allocations %p %p", (void*)a, (void*)b);
    uint64_t used1 = pool_attr(pool, cudaMemPoolAttrUsedMemCurrent);
    EXPECT(used1 >= used0 + 2 * bytes, "used memory %llu after two allocations, %llu before",
           (unsigned long long)used1, (unsigned long long)used0);
    EXPECT(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) >= used1, "high-water mark below current");
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, a));
    EXPECT(pa.type == cudaMemoryTypeDevice, "a stream-ordered allocation is memory type %d",
           (int)pa.type);

    std::vector<unsigned> host(n, 0);
    iota3<<<(n + 255) / 256, 256, 0, s>>>(a, n);
    CHECK(cudaMemsetAsync(b, 0, bytes, s));
    add_into<<<(n + 255) / 256, 256, 0, s>>>(a, b, n);
    add_into<<<(n + 255) / 256, 256, 0, s>>>(a, b, n);
    CHECK(cudaMemcpyAsync(host.data(), b, bytes, cudaMemcpyDeviceToHost, s));
    // Freed in stream order: the copy above still reads b.
    CHECK(cudaFreeAsync(a, s));
    CHECK(cudaFreeAsync(b, s));
    CHECK(cudaStreamSynchronize(s));
    if (check_results())
        for (int i = 0; i < n; i++)
            EXPECT(host[i] == 2u * (3u * (unsigned)i + 1u), "b[%d] = %u", i, host[i]);
    EXPECT(pool_attr(pool, cudaMemPoolAttrUsedMemCurrent) == used0,
           "used memory %llu after the frees, %llu before",
           (unsigned long long)pool_attr(pool, cudaMemPoolAttrUsedMemCurrent),
           (unsigned long long)used0);
    uint64_t zero = 0;
    CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
    EXPECT(pool_attr(pool, cudaMemPoolAttrUsedMemHigh) == used0, "reset high-water mark %llu",
           (unsigned long long)pool_attr(pool, cudaMemPoolAttrUsedMemHigh));

    // A pool of one's own.
    cudaMemPoolProps props;
    std::memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t mine;
    CHECK(cudaMemPoolCreate(&mine, &props));
    EXPECT(mine != pool, "a created pool is the default one");
    cudaMemAccessDesc desc;
    desc.location = props.location;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    CHECK(cudaMemPoolSetAccess(mine, &desc, 1));
    cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    cudaMemLocation loc = props.location;
    CHECK(cudaMemPoolGetAccess(&flags, mine, &loc));
    EXPECT(flags == cudaMemAccessFlagsProtReadWrite, "access flags %d", (int)flags);
    unsigned* c = nullptr;
    CHECK(cudaMallocFromPoolAsync(&c, bytes, mine, s));
    EXPECT(pool_attr(mine, cudaMemPoolAttrUsedMemCurrent) >= bytes, "own pool's used memory");
    iota3<<<(n + 255) / 256, 256, 0, s>>>(c, n);
    CHECK(cudaMemcpyAsync(host.data(), c, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(c, s));
    CHECK(cudaStreamSynchronize(s));
    if (check_results())
        for (int i = 0; i < n; i++)
            EXPECT(host[i] == 3u * (unsigned)i + 1u, "c[%d] = %u", i, host[i]);
    EXPECT(pool_attr(mine, cudaMemPoolAttrUsedMemCurrent) == 0, "own pool still in use");
    CHECK(cudaMemPoolTrimTo(mine, 0));

    // Made current, it serves cudaMallocAsync.
    CHECK(cudaDeviceSetMemPool(0, mine));
    CHECK(cudaDeviceGetMemPool(&current, 0));
    EXPECT(current == mine, "cudaDeviceSetMemPool did not take");
    CHECK(cudaMallocAsync(&c, 4096, s));
    EXPECT(pool_attr(mine, cudaMemPoolAttrUsedMemCurrent) >= 4096, "cudaMallocAsync used %s",
           "another pool");
    CHECK(cudaFreeAsync(c, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaDeviceSetMemPool(0, pool));
    CHECK(cudaMemPoolDestroy(mine));

    // A pool keeps what is freed in stream order reserved until a
    // synchronization, serves the freeing stream from it, and then hands
    // back what is above its release threshold (0 by default).
    cudaMemPool_t cache;
    CHECK(cudaMemPoolCreate(&cache, &props));
    EXPECT(pool_attr(cache, cudaMemPoolAttrReleaseThreshold) == 0, "release threshold %llu",
           (unsigned long long)pool_attr(cache, cudaMemPoolAttrReleaseThreshold));
    const size_t big = 1 << 20;
    const int bn = (int)(big / sizeof(unsigned));
    std::vector<unsigned> bhost(bn, 0);
    unsigned* x = nullptr;
    CHECK(cudaMallocFromPoolAsync(&x, big, cache, s));
    const uint64_t reserved = pool_attr(cache, cudaMemPoolAttrReservedMemCurrent);
    EXPECT(reserved >= big, "reserved %llu for a 1 MiB allocation", (unsigned long long)reserved);
    iota3<<<(bn + 255) / 256, 256, 0, s>>>(x, bn);
    CHECK(cudaFreeAsync(x, s));
    EXPECT(pool_attr(cache, cudaMemPoolAttrUsedMemCurrent) == 0, "used after the free");
    EXPECT(pool_attr(cache, cudaMemPoolAttrReservedMemCurrent) == reserved,
           "reserved %llu after a free without synchronization, %llu before",
           (unsigned long long)pool_attr(cache, cudaMemPoolAttrReservedMemCurrent),
           (unsigned long long)reserved);
    // The same stream again: served from what the pool holds, and the
    // kernel's writes are this allocation's.
    unsigned* y = nullptr;
    CHECK(cudaMallocFromPoolAsync(&y, big, cache, s));
    EXPECT(pool_attr(cache, cudaMemPoolAttrReservedMemCurrent) == reserved,
           "reserved grew to %llu for a second 1 MiB on the freeing stream",
           (unsigned long long)pool_attr(cache, cudaMemPoolAttrReservedMemCurrent));
    iota3<<<(bn + 255) / 256, 256, 0, s>>>(y, bn);
    add_into<<<(bn + 255) / 256, 256, 0, s>>>(y, y, bn);
    CHECK(cudaMemcpyAsync(bhost.data(), y, big, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(y, s));
    CHECK(cudaStreamSynchronize(s));
    if (check_results())
        for (int i = 0; i < bn; i++)
            EXPECT(bhost[i] == 2u * (3u * (unsigned)i + 1u), "y[%d] = %u", i, bhost[i]);
    EXPECT(pool_attr(cache, cudaMemPoolAttrReservedMemCurrent) == 0,
           "reserved %llu after a synchronization, release threshold 0",
           (unsigned long long)pool_attr(cache, cudaMemPoolAttrReservedMemCurrent));
    // An event recorded after the free: its synchronization shows the
    // free done and hands the memory back too.
    cudaEvent_t after;
    CHECK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
    CHECK(cudaMallocFromPoolAsync(&x, big, cache, s));
    iota3<<<(bn + 255) / 256, 256, 0, s>>>(x, bn);
    CHECK(cudaFreeAsync(x, s));
    CHECK(cudaEventRecord(after, s));
    CHECK(cudaEventSynchronize(after));
    EXPECT(pool_attr(cache, cudaMemPoolAttrReservedMemCurrent) == 0,
           "reserved %llu after an event synchronization, release threshold 0",
           (unsigned long long)pool_attr(cache, cudaMemPoolAttrReservedMemCurrent));
    CHECK(cudaEventDestroy(after));
    // With a threshold above what it holds, it keeps it; a trim hands it
    // back.
    CHECK(cudaMemPoolSetAttribute(cache, cudaMemPoolAttrReleaseThreshold, &threshold));
    CHECK(cudaMallocFromPoolAsync(&x, big, cache, s));
    CHECK(cudaFreeAsync(x, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(pool_attr(cache, cudaMemPoolAttrReservedMemCurrent) >= big,
           "reserved %llu with the threshold at its maximum",
           (unsigned long long)pool_attr(cache, cudaMemPoolAttrReservedMemCurrent));
    CHECK(cudaMemPoolTrimTo(cache, 0));
    EXPECT(pool_attr(cache, cudaMemPoolAttrReservedMemCurrent) == 0, "reserved %llu after a trim",
           (unsigned long long)pool_attr(cache, cudaMemPoolAttrReservedMemCurrent));
    // cudaFree of a pool's allocation gives it back to the pool.
    CHECK(cudaMallocFromPoolAsync(&x, 4096, cache, s));
    iota3<<<4, 256, 0, s>>>(x, 1024);
    CHECK(cudaFree(x));
    EXPECT(pool_attr(cache, cudaMemPoolAttrUsedMemCurrent) == 0, "used after cudaFree");
    CHECK(cudaMemPoolDestroy(cache));
    CHECK(cudaStreamDestroy(s));
    pass();
    return 0;
}
