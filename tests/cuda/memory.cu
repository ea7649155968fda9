// Device memory through the runtime: allocation, byte-exact copies in every
// direction at odd sizes and offsets, memsets, asynchronous copies on a
// stream (pageable and pinned host memory), cudaMemGetInfo under the VM's
// quota, an allocation beyond it, and copies with a bad pointer.
// Prints "MEMINFO free=F total=T" for the test to compare T with the quota.
#define PROGRAM "memory"
#include "common.h"

#include <algorithm>
#include <vector>

static const size_t SIZES[] = {1, 3, 255, 4097, 65537, 1000003, 5u << 20};
static const size_t OFFSETS[] = {0, 1, 7, 513};

static unsigned char* dalloc(size_t n) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, n));
    EXPECT(p != nullptr, "cudaMalloc(%zu) gave NULL", n);
    return (unsigned char*)p;
}

static void expect_same(const unsigned char* got, const unsigned char* want, size_t n,
                        const char* what, size_t size, size_t off) {
    long d = first_diff(got, want, n);
    EXPECT(d < 0, "%s (size %zu, offset %zu): first difference at byte %ld: %#x, want %#x",
           what, size, off, d, got[d < 0 ? 0 : d], want[d < 0 ? 0 : d]);
}

// H2D, D2D and D2H round trips at each size and offset.
static void round_trips() {
    uint64_t seed = 1;
    for (size_t size : SIZES) {
        for (size_t off : OFFSETS) {
            size_t n = size + off + 16;
            std::vector<unsigned char> in(size), out(n), back(size);
            fill_pattern(in.data(), size, seed++);
            unsigned char* a = dalloc(n);
            unsigned char* b = dalloc(n);
            CHECK(cudaMemcpy(a + off, in.data(), size, cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(back.data(), a + off, size, cudaMemcpyDeviceToHost));
            expect_same(back.data(), in.data(), size, "H2D then D2H", size, off);

            // D2D to a different offset of another allocation.
            size_t off2 = (off + 5) % 16;
            CHECK(cudaMemcpy(b + off2, a + off, size, cudaMemcpyDeviceToDevice));
            std::fill(back.begin(), back.end(), 0);
            CHECK(cudaMemcpy(back.data(), b + off2, size, cudaMemcpyDeviceToHost));
            expect_same(back.data(), in.data(), size, "D2D", size, off);

            // Bytes around the copied range are untouched (cudaMalloc does
            // not promise zeroes, so compare with what was there).
            CHECK(cudaMemcpy(out.data(), a, n, cudaMemcpyDeviceToHost));
            expect_same(out.data() + off, in.data(), size, "whole-buffer D2H", size, off);
            CHECK(cudaFree(a));
            CHECK(cudaFree(b));
        }
    }
}

// cudaMemset at odd offsets and lengths changes exactly its range.
static void memsets() {
    const size_t n = 70001;
    std::vector<unsigned char> want(n), got(n);
    fill_pattern(want.data(), n, 99);
    unsigned char* d = dalloc(n);
    CHECK(cudaMemcpy(d, want.data(), n, cudaMemcpyHostToDevice));
    struct {
        size_t off, len;
        int value;
    } cases[] = {{0, 1, 0xab}, {1, 2, 0x00}, {3, 4096, 0x5c}, {5000, 33, 0xff},
                 {8192, 8192, 0x11}, {n - 7, 7, 0x80}, {17, 60001, 0x3e}};
    for (auto& c : cases) {
        CHECK(cudaMemset(d + c.off, c.value, c.len));
        std::memset(want.data() + c.off, c.value, c.len);
        CHECK(cudaMemcpy(got.data(), d, n, cudaMemcpyDeviceToHost));
        expect_same(got.data(), want.data(), n, "cudaMemset", c.len, c.off);
    }
    CHECK(cudaFree(d));
}

// cudaMemset2D(Async) on pitched memory changes exactly its rectangle:
// the bytes between rows and past the width keep their values.
static void memsets_2d() {
    const size_t width = 301, height = 37;
    size_t pitch = 0;
    unsigned char* d = nullptr;
    CHECK(cudaMallocPitch((void**)&d, &pitch, width, height));
    if (pitch < width) fail("cudaMallocPitch gave a pitch below the width");
    const size_t n = pitch * height;
    std::vector<unsigned char> want(n), got(n);
    fill_pattern(want.data(), n, 7);
    CHECK(cudaMemcpy(d, want.data(), n, cudaMemcpyHostToDevice));
    struct {
        size_t x, y, w, h;
        int value;
    } cases[] = {{0, 0, width, height, 0x21}, {1, 2, 13, 5, 0xfe},
                 {4, 1, 64, 30, 0x00}, {width - 3, height - 1, 3, 1, 0x7f}};
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int async = 0; async < 2; async++) {
        for (auto& c : cases) {
            unsigned char* at = d + c.y * pitch + c.x;
            int v = c.value ^ async;
            if (async) {
                CHECK(cudaMemset2DAsync(at, pitch, v, c.w, c.h, s));
                CHECK(cudaStreamSynchronize(s));
            } else {
                CHECK(cudaMemset2D(at, pitch, v, c.w, c.h));
            }
            for (size_t r = 0; r < c.h; r++)
                std::memset(want.data() + (c.y + r) * pitch + c.x, v, c.w);
            CHECK(cudaMemcpy(got.data(), d, n, cudaMemcpyDeviceToHost));
            expect_same(got.data(), want.data(), n, "cudaMemset2D", c.w * c.h, c.y * pitch + c.x);
        }
    }
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
}

// cudaMemcpyAsync/cudaMemsetAsync on a stream, pageable and pinned memory.
static void async_copies() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    const size_t n = 3u << 20;
    std::vector<unsigned char> pageable(n), back(n);
    fill_pattern(pageable.data(), n, 7);
    unsigned char* d = dalloc(n);

    CHECK(cudaMemcpyAsync(d, pageable.data(), n, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(back.data(), d, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    expect_same(back.data(), pageable.data(), n, "async pageable round trip", n, 0);

    unsigned char *pin_in = nullptr, *pin_out = nullptr;
    CHECK(cudaMallocHost((void**)&pin_in, n));
    CHECK(cudaHostAlloc((void**)&pin_out, n, cudaHostAllocDefault));
    fill_pattern(pin_in, n, 8);
    std::memset(pin_out, 0, n);
    CHECK(cudaMemcpyAsync(d + 1, pin_in, n - 1, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemsetAsync(d, 0x42, 1, s));
    CHECK(cudaMemcpyAsync(pin_out, d, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(pin_out[0] == 0x42, "cudaMemsetAsync: byte 0 is %#x", pin_out[0]);
    expect_same(pin_out + 1, pin_in, n - 1, "async pinned round trip", n - 1, 1);
    CHECK(cudaStreamQuery(s));

    CHECK(cudaFreeHost(pin_in));
    CHECK(cudaFreeHost(pin_out));
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
}

// cudaMemGetInfo sees the VM's quota; allocations count against it.
static void quota() {
    size_t free0 = 0, total = 0;
    CHECK(cudaMemGetInfo(&free0, &total));
    std::printf("MEMINFO free=%zu total=%zu\n", free0, total);
    EXPECT(total > 0 && free0 <= total, "cudaMemGetInfo: free %zu, total %zu", free0, total);

    const size_t n = 8u << 20;
    unsigned char* d = dalloc(n);
    size_t free1 = 0, total1 = 0;
    CHECK(cudaMemGetInfo(&free1, &total1));
    EXPECT(total1 == total, "total changed from %zu to %zu", total, total1);
    EXPECT(free1 + n <= free0 && free1 + n + (2u << 20) >= free0,
           "free went from %zu to %zu after allocating %zu", free0, free1, n);
    CHECK(cudaFree(d));

    // More than the quota cannot be allocated, and the failure is not sticky.
    void* big = nullptr;
    EXPECT_ERR(cudaMalloc(&big, total + (1u << 20)), cudaErrorMemoryAllocation);
    EXPECT_ERR(cudaGetLastError(), cudaErrorMemoryAllocation);
    CHECK(cudaGetLastError());
    // Half the free memory can.
    size_t free2 = 0;
    CHECK(cudaMemGetInfo(&free2, &total));
    unsigned char* half = dalloc(free2 / 2);
    CHECK(cudaMemset(half + free2 / 2 - 1, 1, 1));
    CHECK(cudaFree(half));
}

// A copy with a pointer that is not device memory fails cleanly.
static void bad_pointers() {
    unsigned char buf[64] = {0};
    unsigned char* bogus = (unsigned char*)(uintptr_t)0x10;
    cudaError_t e = cudaMemcpy(bogus, buf, sizeof buf, cudaMemcpyHostToDevice);
    EXPECT(e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer,
           "H2D to a bad pointer returned %d %s", (int)e, cudaGetErrorName(e));
    e = cudaMemcpy(buf, bogus, sizeof buf, cudaMemcpyDeviceToHost);
    EXPECT(e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer,
           "D2H from a bad pointer returned %d %s", (int)e, cudaGetErrorName(e));
    (void)cudaGetLastError();

    // A freed allocation (large, so that it had a mapping of its own).
    const size_t n = 8u << 20;
    unsigned char* d = dalloc(n);
    CHECK(cudaFree(d));
    e = cudaMemcpy(d, buf, sizeof buf, cudaMemcpyHostToDevice);
    EXPECT(e == cudaErrorInvalidValue || e == cudaErrorInvalidDevicePointer,
           "H2D to freed memory returned %d %s", (int)e, cudaGetErrorName(e));
    (void)cudaGetLastError();
    // The failures are not sticky.
    d = dalloc(256);
    CHECK(cudaMemcpy(d + 192, buf, sizeof buf, cudaMemcpyHostToDevice));
    CHECK(cudaFree(d));
}

int main() {
    void* first = nullptr;
    first_call(cudaMalloc(&first, 1), "cudaMalloc");
    CHECK(cudaFree(first));
    CHECK(cudaFree(nullptr));

    round_trips();
    memsets();
    memsets_2d();
    async_copies();
    quota();
    bad_pointers();
    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
