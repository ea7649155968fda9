// The virtual-memory API (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), as
// vectorAddMMAP and PyTorch's expandable segments use it: buffers made of
// memory mapped into reserved ranges, kernels across two mappings side by
// side, memory that keeps its bytes when mapped elsewhere, and the errors
// of misplaced calls. Memory exported as a POSIX file descriptor
// (cuMemExportToShareableHandle), imported by a child process (this
// program again, the descriptors inherited through exec) that maps it
// beside other memory, reads what the parent wrote and writes what the
// parent then reads; the memory lives until the last handle of either
// process goes. Handles, reservations and mappings are the process's,
// not a context's: made with no context current, mapped in a context of
// its own, unmapped after that context is destroyed. Results are checked
// against the CPU when FAIRGPU_CHECK_RESULTS=1.
#define PROGRAM "vmm"
#include <cuda.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "common.h"

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void iota(unsigned* p, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = i * 2654435761u;
}

// b[i] = a[i] + by, a[i] += 1.
__global__ void bump(unsigned* a, unsigned* b, unsigned n, unsigned by) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        b[i] = a[i] + by;
        a[i] += 1;
    }
}

template <typename F>
static F entry(const char* name, unsigned version = 12000) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q));
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
    decltype(&cuMemExportToShareableHandle) export_handle =
        entry<decltype(&cuMemExportToShareableHandle)>("cuMemExportToShareableHandle");
    decltype(&cuMemImportFromShareableHandle) import_handle =
        entry<decltype(&cuMemImportFromShareableHandle)>("cuMemImportFromShareableHandle");
    decltype(&cuCtxGetCurrent) get_current = entry<decltype(&cuCtxGetCurrent)>("cuCtxGetCurrent");
    decltype(&cuCtxSetCurrent) set_current = entry<decltype(&cuCtxSetCurrent)>("cuCtxSetCurrent");
    // cuCtxCreate as of CUDA 11.0 (flags, device).
    CUresult (*ctx_create)(CUcontext*, unsigned, CUdevice) =
        entry<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate", 11000);
    decltype(&cuCtxDestroy) ctx_destroy = entry<decltype(&cuCtxDestroy)>("cuCtxDestroy");
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

static const unsigned SHARED_WORDS = 1 << 16;

// The child: imports the parent's two descriptors, maps them side by side
// (a third piece of its own after them), checks that the first holds the
// parent's iota, and runs `bump` from the first into the second; it
// releases its handles once mapped, and unmaps at the end. Then it maps
// the first again in a context of its own, destroys that context, and
// unmaps and frees what the context held.
static int child(int fd0, int fd1, size_t gran) {
    first_call(cudaSetDevice(0), "cudaSetDevice");
    CHECK(cudaFree(nullptr));
    Vmm v;
    CUmemAllocationProp p = prop();
    CUmemGenericAllocationHandle m[3];
    DRV(v.import_handle(&m[0], (void*)(intptr_t)fd0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    DRV(v.import_handle(&m[1], (void*)(intptr_t)fd1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    DRV(v.create(&m[2], gran, &p, 0));
    CUmemAllocationProp got;
    std::memset(&got, 0, sizeof got);
    DRV(v.props(&got, m[0]));
    EXPECT(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
           "an imported handle's requested types: %d", (int)got.requestedHandleTypes);
    CUdeviceptr base = 0;
    DRV(v.reserve(&base, 3 * gran, 0, 0, 0));
    for (int i = 0; i < 3; i++) {
        DRV(v.map(base + i * gran, gran, 0, m[i], 0));
        DRV(v.release(m[i]));
    }
    read_write(v, base, 3 * gran);
    unsigned* h = (unsigned*)std::malloc(gran);
    CHECK(cudaMemcpy(h, (void*)base, gran, cudaMemcpyDeviceToHost));
    if (check_results())
        for (unsigned i = 0; i < SHARED_WORDS; i++)
            EXPECT(h[i] == i * 2654435761u, "the child reads word %u: %u, want %u", i, h[i], i * 2654435761u);
    bump<<<SHARED_WORDS / 256, 256>>>((unsigned*)base, (unsigned*)(base + gran), SHARED_WORDS, 7);
    LAUNCHED("bump");
    CHECK(cudaDeviceSynchronize());
    DRV(v.unmap(base, 3 * gran));
    DRV(v.address_free(base, 3 * gran));

    // A context of its own, destroyed before its mapping is unmapped.
    CUmemGenericAllocationHandle again;
    DRV(v.import_handle(&again, (void*)(intptr_t)fd0, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    CUcontext primary = nullptr, own = nullptr;
    DRV(v.get_current(&primary));
    DRV(v.ctx_create(&own, 0, 0));
    CUdeviceptr at = 0;
    DRV(v.reserve(&at, gran, 0, 0, 0));
    DRV(v.map(at, gran, 0, again, 0));
    DRV(v.release(again));
    read_write(v, at, gran);
    CHECK(cudaMemcpy(h, (void*)at, gran, cudaMemcpyDeviceToHost));
    if (check_results())
        for (unsigned i = 0; i < SHARED_WORDS; i++)
            EXPECT(h[i] == i * 2654435761u + 1, "in a context of its own, word %u: %u", i, h[i]);
    DRV(v.ctx_destroy(own));
    DRV(v.unmap(at, gran));
    DRV(v.address_free(at, gran));
    DRV(v.set_current(primary));
    std::free(h);
    close(fd0);
    close(fd1);
    return 0;
}

// 4. Shareable handles between two processes (see the top of the file).
static void shareable(const Vmm& v, size_t gran) {
    int posix = 0;
    CHECK(cudaDeviceGetAttribute(&posix, (cudaDeviceAttr)103 /* HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED */, 0));
    EXPECT(posix == 1, "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is %d", posix);
    CUmemAllocationProp p = prop();
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t free0 = 0, total = 0;
    CHECK(cudaMemGetInfo(&free0, &total));

    // Made with no context current: the handles are the process's.
    CUcontext primary = nullptr;
    DRV(v.get_current(&primary));
    DRV(v.set_current(nullptr));
    CUmemGenericAllocationHandle m[2];
    for (auto& h : m) DRV(v.create(&h, gran, &p, 0));
    DRV(v.set_current(primary));
    CUmemAllocationProp got;
    std::memset(&got, 0, sizeof got);
    DRV(v.props(&got, m[0]));
    EXPECT(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, "requested handle types %d",
           (int)got.requestedHandleTypes);

    // Memory made without the handle type does not export.
    CUmemAllocationProp plain = prop();
    CUmemGenericAllocationHandle unshared;
    DRV(v.create(&unshared, gran, &plain, 0));
    int fd = -1;
    EXPECT(v.export_handle(&fd, unshared, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS,
           "memory made without a shareable handle type was exported");
    DRV(v.release(unshared));

    // The parent writes the first piece, then unmaps it.
    CUdeviceptr at = 0;
    DRV(v.reserve(&at, gran, 0, 0, 0));
    DRV(v.map(at, gran, 0, m[0], 0));
    read_write(v, at, gran);
    iota<<<SHARED_WORDS / 256, 256>>>((unsigned*)at, SHARED_WORDS);
    LAUNCHED("iota");
    CHECK(cudaDeviceSynchronize());
    DRV(v.unmap(at, gran));

    int fds[2];
    for (int i = 0; i < 2; i++)
        DRV(v.export_handle(&fds[i], m[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));

    // A descriptor this library did not make names nothing.
    int bogus = memfd_create("not-a-handle", 0);
    EXPECT(bogus >= 0, "memfd_create");
    char junk[32] = "fgpuvmem, but not a real token";
    EXPECT(write(bogus, junk, sizeof junk) == (ssize_t)sizeof junk, "write");
    CUmemGenericAllocationHandle none;
    EXPECT(v.import_handle(&none, (void*)(intptr_t)bogus, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS,
           "a forged descriptor was imported");
    close(bogus);

    pid_t pid = fork();
    EXPECT(pid >= 0, "fork");
    if (pid == 0) {
        std::string a = std::to_string(fds[0]), b = std::to_string(fds[1]), g = std::to_string(gran);
        execl("/proc/self/exe", "vmm", "child", a.c_str(), b.c_str(), g.c_str(), (char*)nullptr);
        _exit(127);
    }
    int status = 0;
    EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the child failed (status %#x)", status);
    close(fds[0]);
    close(fds[1]);

    // What the child wrote, through the parent's own handles.
    CUdeviceptr both = 0;
    DRV(v.reserve(&both, 2 * gran, 0, 0, 0));
    DRV(v.map(both, gran, 0, m[0], 0));
    DRV(v.map(both + gran, gran, 0, m[1], 0));
    read_write(v, both, 2 * gran);
    unsigned* h = (unsigned*)std::malloc(2 * gran);
    CHECK(cudaMemcpy(h, (void*)both, 2 * gran, cudaMemcpyDeviceToHost));
    if (check_results())
        for (unsigned i = 0; i < SHARED_WORDS; i++) {
            unsigned want = i * 2654435761u;
            EXPECT(h[i] == want + 1, "after the child, word %u: %u, want %u", i, h[i], want + 1);
            unsigned* b = h + gran / sizeof(unsigned);
            EXPECT(b[i] == want + 7, "the child's output word %u: %u, want %u", i, b[i], want + 7);
        }
    std::free(h);
    size_t held = 0;
    CHECK(cudaMemGetInfo(&held, &total));
    DRV(v.unmap(both, 2 * gran));
    for (auto& x : m) DRV(v.release(x));
    DRV(v.address_free(both, 2 * gran));
    DRV(v.address_free(at, gran));
    size_t after = 0;
    CHECK(cudaMemGetInfo(&after, &total));
    EXPECT(after >= held + 2 * gran, "released shared memory came back: %zu free while held, %zu after", held, after);
    (void)free0;
}

int main(int argc, char** argv) {
    if (argc == 5 && std::strcmp(argv[1], "child") == 0)
        return child(atoi(argv[2]), atoi(argv[3]), (size_t)std::strtoull(argv[4], nullptr, 10));
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
    shareable(v, gran);
    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
