// The virtual-memory API (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), as
// vectorAddMMAP and PyTorch's expandable segments use it: buffers made of
// memory mapped into reserved ranges, kernels across two mappings side by
// side, memory that keeps its bytes when mapped elsewhere, and the errors
// of misplaced calls. Results are checked against the CPU when
// FAIRGPU_CHECK_RESULTS=1.
#define PROGRAM "vmm"
#include <cuda.h>

#include "common.h"

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void iota(unsigned* p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i * 2654435761u;
}

template <typename F>
static F entry(const char* name) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q));
    EXPECT(q == cudaDriverEntryPointSuccess && fn != nullptr, "no driver entry point %s", name);
    return reinterpret_cast<F>(fn);
}

#define DRV(call)                                                                        \
    do {                                                                                 \
        CUresult r_ = (call);                                                            \
        if (r_ != CUDA_SUCCESS) fail("line %d: %s returned %d", __LINE__, #call, (int)r_); \
    } while (0)

struct Vmm {
    decltype(&cuMemGetAllocationGranularity) granularity =
        entry<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
    decltype(&cuMemAddressReserve) reserve =
        entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
    decltype(&cuMemAddressFree) address_free =
        entry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
    decltype(&cuMemCreate) create = entry<decltype(&cuMemCreate)>("cuMemCreate");
    decltype(&cuMemRelease) release = entry<decltype(&cuMemRelease)>("cuMemRelease");
    decltype(&cuMemMap) map = entry<decltype(&cuMemMap)>("cuMemMap");
    decltype(&cuMemUnmap) unmap = entry<decltype(&cuMemUnmap)>("cuMemUnmap");
    decltype(&cuMemSetAccess) set_access = entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
    decltype(&cuMemGetAccess) get_access = entry<decltype(&cuMemGetAccess)>("cuMemGetAccess");
    decltype(&cuMemRetainAllocationHandle) retain =
        entry<decltype(&cuMemRetainAllocationHandle)>("cuMemRetainAllocationHandle");
    decltype(&cuMemGetAllocationPropertiesFromHandle) props =
        entry<decltype(&cuMemGetAllocationPropertiesFromHandle)>("cuMemGetAllocationPropertiesFromHandle");
};

static CUmemAllocationProp prop() {
    CUmemAllocationProp p;
    std::memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    return p;
}

static void read_write(const Vmm& v, CUdeviceptr p, size_t bytes) {
    CUmemAccessDesc d;
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = 0;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRV(v.set_access(p, bytes, &d, 1));
}

// A buffer of `bytes` (a multiple of the granularity): its own range and
// memory, mapped and made read-write.
struct Buffer {
    CUdeviceptr ptr = 0;
    size_t bytes = 0;
    CUmemGenericAllocationHandle mem = 0;
};

static Buffer make(const Vmm& v, size_t bytes) {
    Buffer b;
    b.bytes = bytes;
    CUmemAllocationProp p = prop();
    DRV(v.reserve(&b.ptr, bytes, 0, 0, 0));
    DRV(v.create(&b.mem, bytes, &p, 0));
    DRV(v.map(b.ptr, bytes, 0, b.mem, 0));
    read_write(v, b.ptr, bytes);
    return b;
}

static void unmake(const Vmm& v, const Buffer& b) {
    DRV(v.unmap(b.ptr, b.bytes));
    DRV(v.release(b.mem));
    DRV(v.address_free(b.ptr, b.bytes));
}

int main() {
    first_call(cudaSetDevice(0), "cudaSetDevice");
    CHECK(cudaFree(nullptr));  // the primary context, current
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, (cudaDeviceAttr)102 /* VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */, 0));
    EXPECT(supported == 1, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is %d", supported);
    Vmm v;
    CUmemAllocationProp p = prop();
    size_t gran = 0;
    DRV(v.granularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    EXPECT(gran > 0 && (gran & (gran - 1)) == 0, "granularity %zu", gran);
    size_t rec = 0;
    DRV(v.granularity(&rec, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    EXPECT(rec >= gran && rec % gran == 0, "recommended granularity %zu", rec);

    // 1. vectorAddMMAP: three buffers, c = a + b.
    {
        const int n = 300000;
        size_t bytes = (n * sizeof(float) + gran - 1) / gran * gran;
        Buffer a = make(v, bytes), b = make(v, bytes), c = make(v, bytes);
        float* ha = (float*)std::malloc(n * sizeof(float));
        float* hb = (float*)std::malloc(n * sizeof(float));
        float* hc = (float*)std::malloc(n * sizeof(float));
        Rng r(7);
        for (int i = 0; i < n; i++) {
            ha[i] = r.unit();
            hb[i] = r.unit();
        }
        CHECK(cudaMemcpy((void*)a.ptr, ha, n * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy((void*)b.ptr, hb, n * sizeof(float), cudaMemcpyDefault));
        vector_add<<<(n + 255) / 256, 256>>>((float*)a.ptr, (float*)b.ptr, (float*)c.ptr, n);
        LAUNCHED("vector_add");
        CHECK(cudaMemcpy(hc, (void*)c.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
        if (check_results())
            for (int i = 0; i < n; i++)
                EXPECT(hc[i] == ha[i] + hb[i], "c[%d] = %g, want %g", i, hc[i], ha[i] + hb[i]);
        cudaPointerAttributes at;
        CHECK(cudaPointerGetAttributes(&at, (void*)c.ptr));
        EXPECT(at.type == cudaMemoryTypeDevice, "a mapping's pointer type %d", (int)at.type);
        unmake(v, a);
        unmake(v, b);
        unmake(v, c);
        std::free(ha);
        std::free(hb);
        std::free(hc);
    }

    // 2. Two pieces of memory side by side in one range: a kernel writes
    // across the seam; each piece is read back on its own.
    {
        CUdeviceptr base = 0;
        DRV(v.reserve(&base, 2 * gran, 0, 0, 0));
        CUmemGenericAllocationHandle m[2];
        for (auto& h : m) DRV(v.create(&h, gran, &p, 0));
        DRV(v.map(base, gran, 0, m[0], 0));
        DRV(v.map(base + gran, gran, 0, m[1], 0));
        read_write(v, base, 2 * gran);
        unsigned long long flags = 0;
        CUmemLocation loc;
        loc.type = CU_MEM_LOCATION_TYPE_DEVICE;
        loc.id = 0;
        DRV(v.get_access(&flags, &loc, base + gran + 64));
        EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access %llu", flags);
        unsigned n = (unsigned)(2 * gran / sizeof(unsigned));
        iota<<<(n + 255) / 256, 256>>>((unsigned*)base, n);
        LAUNCHED("iota");
        unsigned* h = (unsigned*)std::malloc(gran);
        for (int piece = 0; piece < 2; piece++) {
            CHECK(cudaMemcpy(h, (void*)(base + piece * gran), gran, cudaMemcpyDeviceToHost));
            if (check_results())
                for (size_t i = 0; i < gran / sizeof(unsigned); i++) {
                    unsigned want = (unsigned)(piece * gran / sizeof(unsigned) + i) * 2654435761u;
                    EXPECT(h[i] == want, "piece %d word %zu: %u, want %u", piece, i, h[i], want);
                }
        }
        // The handle of what is mapped at an address.
        CUmemGenericAllocationHandle got = 0;
        DRV(v.retain(&got, (void*)(base + gran + 4096)));
        EXPECT(got == m[1], "retained handle is not the mapped memory's");
        DRV(v.release(got));

        // Misplaced calls fail and change nothing.
        CUmemGenericAllocationHandle extra;
        DRV(v.create(&extra, gran, &p, 0));
        EXPECT(v.map(base + gran / 2, gran, 0, extra, 0) != CUDA_SUCCESS,
               "a mapping off the granularity");
        EXPECT(v.map(base, gran, 0, extra, 0) != CUDA_SUCCESS, "a mapping over a mapping");
        EXPECT(v.unmap(base, gran / 2) != CUDA_SUCCESS, "half a mapping unmapped");
        DRV(v.release(extra));

        // Memory released while mapped stays until unmapped; memory
        // unmapped keeps its bytes and is mapped again elsewhere.
        DRV(v.release(m[0]));
        DRV(v.unmap(base, 2 * gran));
        CUdeviceptr other = 0;
        DRV(v.reserve(&other, gran, 0, 0, 0));
        DRV(v.map(other, gran, 0, m[1], 0));
        read_write(v, other, gran);
        CHECK(cudaMemcpy(h, (void*)other, gran, cudaMemcpyDeviceToHost));
        if (check_results())
            for (size_t i = 0; i < gran / sizeof(unsigned); i++) {
                unsigned want = (unsigned)(gran / sizeof(unsigned) + i) * 2654435761u;
                EXPECT(h[i] == want, "remapped word %zu: %u, want %u", i, h[i], want);
            }
        DRV(v.unmap(other, gran));
        DRV(v.release(m[1]));
        DRV(v.address_free(other, gran));
        DRV(v.address_free(base, 2 * gran));
        std::free(h);
    }
    // 3. Compressible memory, where the device reports it
    // (GENERIC_COMPRESSION_SUPPORTED): the memory says it is, and holds
    // what a kernel writes as any memory does.
    int compression = 0;
    CHECK(cudaDeviceGetAttribute(&compression, (cudaDeviceAttr)107 /* GENERIC_COMPRESSION_SUPPORTED */, 0));
    for (int ask = 0; ask < 2; ask++) {
        CUmemAllocationProp cp = prop();
        cp.allocFlags.compressionType = ask ? CU_MEM_ALLOCATION_COMP_GENERIC : CU_MEM_ALLOCATION_COMP_NONE;
        CUmemGenericAllocationHandle m;
        DRV(v.create(&m, gran, &cp, 0));
        CUmemAllocationProp got;
        std::memset(&got, 0xff, sizeof got);
        DRV(v.props(&got, m));
        int want = ask && compression ? CU_MEM_ALLOCATION_COMP_GENERIC : CU_MEM_ALLOCATION_COMP_NONE;
        EXPECT(got.allocFlags.compressionType == want, "compression asked %d: memory says %d, want %d", ask,
               (int)got.allocFlags.compressionType, want);
        EXPECT(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE,
               "properties of created memory");
        CUdeviceptr at = 0;
        DRV(v.reserve(&at, gran, 0, 0, 0));
        DRV(v.map(at, gran, 0, m, 0));
        read_write(v, at, gran);
        unsigned n = (unsigned)(gran / sizeof(unsigned));
        iota<<<(n + 255) / 256, 256>>>((unsigned*)at, n);
        LAUNCHED("iota");
        unsigned* h = (unsigned*)std::malloc(gran);
        CHECK(cudaMemcpy(h, (void*)at, gran, cudaMemcpyDeviceToHost));
        if (check_results())
            for (unsigned i = 0; i < n; i++)
                EXPECT(h[i] == i * 2654435761u, "compressible %d word %u: %u", ask, i, h[i]);
        std::free(h);
        DRV(v.unmap(at, gran));
        DRV(v.release(m));
        DRV(v.address_free(at, gran));
    }
    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
