// Managed and mapped memory, the patterns programs use, checked against
// the CPU: the CPU writes managed memory, a kernel updates it, the program
// synchronizes (device, stream, event) and the CPU reads; the CPU changes a
// few elements between kernels (only those pages move); copies and
// memsets through managed pointers; prefetch, advice and stream attachment
// accepted; pointer attributes; mapped host memory from cudaHostAlloc
// (used by its device pointer and, with unified addressing, by its host
// pointer) and from cudaHostRegister of the program's own buffer. Where
// the device has no concurrent managed access: CPU and kernel writes to
// different bytes of one page both survive, to the same bytes they fail
// the synchronization.
#define PROGRAM "managed"
#include "common.h"

#include <vector>

__global__ void affine(float* x, int n, float a, float b) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * a + b;
}

__global__ void add_from(float* dst, const float* src, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] += src[i];
}

static int blocks(int n) { return (n + 255) / 256; }

static void check_all(const float* x, int n, float (*want)(int), const char* what) {
    for (int i = 0; i < n; i++)
        EXPECT(x[i] == want(i), "%s: [%d] = %g, want %g", what, i, x[i], want(i));
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    int managed = 0, concurrent = 1;
    CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
    CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    EXPECT(managed == 1, "managedMemory = %d", managed);

    const int n = 100000;  // 400 KB: about a hundred pages
    float* x = nullptr;
    CHECK(cudaMallocManaged(&x, n * sizeof(float)));
    cudaPointerAttributes pa;
    CHECK(cudaPointerGetAttributes(&pa, x));
    EXPECT(pa.type == cudaMemoryTypeManaged && pa.devicePointer == x && pa.hostPointer == x,
           "attributes of managed memory: type %d", (int)pa.type);

    // CPU writes, kernel, device synchronize, CPU reads.
    for (int i = 0; i < n; i++) x[i] = (float)i;
    affine<<<blocks(n), 256>>>(x, n, 2.0f, 1.0f);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    check_all(x, n, [](int i) { return (float)i * 2.0f + 1.0f; }, "after the first kernel");

    // A few elements change on the CPU; the next kernel sees them and the
    // rest of what the first kernel left.
    for (int i = 0; i < n; i += 997) x[i] = -1.0f;
    affine<<<blocks(n), 256>>>(x, n, 1.0f, 3.0f);
    CHECK(cudaDeviceSynchronize());
    check_all(x, n, [](int i) { return i % 997 == 0 ? 2.0f : (float)i * 2.0f + 4.0f; },
              "after a CPU update and a second kernel");

    // Synchronizing by event and by stream.
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    affine<<<blocks(n), 256, 0, s>>>(x, n, 0.5f, 0.0f);
    CHECK(cudaEventRecord(ev, s));
    CHECK(cudaEventSynchronize(ev));
    check_all(x, n, [](int i) { return i % 997 == 0 ? 1.0f : (float)i + 2.0f; }, "after an event");
    CHECK(cudaStreamAttachMemAsync(s, x, 0, cudaMemAttachSingle));
    affine<<<blocks(n), 256, 0, s>>>(x, n, 1.0f, -2.0f);
    CHECK(cudaStreamSynchronize(s));
    check_all(x, n, [](int i) { return i % 997 == 0 ? -1.0f : (float)i; }, "after a stream");

    // Prefetch and advice are accepted.
#if CUDART_VERSION >= 13000
    cudaMemLocation dev0 = {cudaMemLocationTypeDevice, 0};
    cudaMemLocation cpu = {cudaMemLocationTypeHost, 0};
    CHECK(cudaMemAdvise(x, n * sizeof(float), cudaMemAdviseSetReadMostly, dev0));
    CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), dev0, 0, s));
    affine<<<blocks(n), 256, 0, s>>>(x, n, 3.0f, 0.0f);
    CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), cpu, 0, s));
#else
    CHECK(cudaMemAdvise(x, n * sizeof(float), cudaMemAdviseSetReadMostly, 0));
    CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), 0, s));
    affine<<<blocks(n), 256, 0, s>>>(x, n, 3.0f, 0.0f);
    CHECK(cudaMemPrefetchAsync(x, n * sizeof(float), cudaCpuDeviceId, s));
#endif
    CHECK(cudaStreamSynchronize(s));
    check_all(x, n, [](int i) { return i % 997 == 0 ? -3.0f : (float)i * 3.0f; }, "after a prefetch");

    // Copies and memsets through managed pointers.
    float* d = nullptr;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyDefault));
    add_from<<<blocks(n), 256>>>(x, d, n);  // x = 2x
    std::vector<float> h(n);
    CHECK(cudaMemcpy(h.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
    check_all(h.data(), n, [](int i) { return i % 997 == 0 ? -6.0f : (float)i * 6.0f; },
              "a copy from managed memory after a kernel");
    CHECK(cudaMemset(x, 0, 1000 * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    check_all(x, 1000, [](int) { return 0.0f; }, "after cudaMemset");
    EXPECT(x[1000] == 6000.0f, "past the memset: %g", x[1000]);
    for (int i = 0; i < n; i++) h[i] = 1.0f;
    CHECK(cudaMemcpy(x, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    check_all(x, n, [](int) { return 1.0f; }, "after a copy into managed memory");
    affine<<<blocks(n), 256>>>(x, n, 5.0f, 0.0f);
    CHECK(cudaDeviceSynchronize());
    check_all(x, n, [](int) { return 5.0f; }, "a kernel after a copy into managed memory");
    // Without concurrent managed access the CPU must leave managed memory
    // alone while kernels run. Where it writes bytes of a page that the
    // kernel does not, both writes survive; where both write the same
    // bytes, the synchronization reports it instead of returning one side's
    // value as if nothing happened.
    if (!concurrent) {
        affine<<<1, 256>>>(x, 256, 0.0f, 7.0f);  // x[0..256) = 7
        x[300] = -5.0f;                            // same page, other bytes
        CHECK(cudaDeviceSynchronize());
        check_all(x, 256, [](int) { return 7.0f; }, "a kernel's half of a page both wrote");
        EXPECT(x[300] == -5.0f, "the CPU's half of a page both wrote: %g", x[300]);
        affine<<<1, 256>>>(x, 256, 0.0f, 8.0f);
        x[10] = -1.0f;  // a byte the kernel writes too
        EXPECT_ERR(cudaDeviceSynchronize(), cudaErrorIllegalState);
        (void)cudaGetLastError();
        EXPECT(x[10] == 8.0f, "a byte both wrote holds %g, not the kernel's 8", x[10]);
        CHECK(cudaDeviceSynchronize());  // reported once, not sticky
    }
    CHECK(cudaFree(d));
    CHECK(cudaFree(x));

    // Mapped host memory: by its device pointer and by its own address.
    const int m = 5000;
    float* hm = nullptr;
    CHECK(cudaHostAlloc(&hm, m * sizeof(float), cudaHostAllocMapped));
    float* dm = nullptr;
    CHECK(cudaHostGetDevicePointer(&dm, hm, 0));
    unsigned flags = 0;
    CHECK(cudaHostGetFlags(&flags, hm));
    EXPECT(flags & cudaHostAllocMapped, "cudaHostGetFlags = %#x", flags);
    for (int i = 0; i < m; i++) hm[i] = (float)(i % 100);
    affine<<<blocks(m), 256>>>(dm, m, 1.0f, 0.5f);
    CHECK(cudaDeviceSynchronize());
    check_all(hm, m, [](int i) { return (float)(i % 100) + 0.5f; }, "mapped memory by its device pointer");
    affine<<<blocks(m), 256>>>(hm, m, 2.0f, 0.0f);
    CHECK(cudaDeviceSynchronize());
    check_all(hm, m, [](int i) { return (float)(i % 100) * 2.0f + 1.0f; }, "mapped memory by its host pointer");
    CHECK(cudaFreeHost(hm));

    // The program's own buffer, registered as mapped.
    std::vector<float> mine(m);
    for (int i = 0; i < m; i++) mine[i] = (float)i;
    CHECK(cudaHostRegister(mine.data(), m * sizeof(float), cudaHostRegisterMapped));
    float* dr = nullptr;
    CHECK(cudaHostGetDevicePointer(&dr, mine.data(), 0));
    affine<<<blocks(m), 256>>>(dr, m, -1.0f, 0.0f);
    CHECK(cudaDeviceSynchronize());
    check_all(mine.data(), m, [](int i) { return -(float)i; }, "registered memory");
    mine[7] = 100.0f;
    affine<<<blocks(m), 256>>>(dr, m, 1.0f, 1.0f);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaHostUnregister(mine.data()));
    check_all(mine.data(), m, [](int i) { return i == 7 ? 101.0f : 1.0f - (float)i; },
              "registered memory after unregistering");
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaEventDestroy(ev));
    pass();
    return 0;
}
