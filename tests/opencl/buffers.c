// Buffer commands, every result checked byte for byte against the CPU:
//   - clEnqueueCopyBuffer at odd offsets and sizes, between buffers and
//     within one; overlapping regions -> CL_MEM_COPY_OVERLAP;
//   - clEnqueueFillBuffer with 1-, 2-, 4-, 8-, 16-, 32-, 64- and 128-byte
//     patterns over part of a buffer (the rest untouched);
//   - sub-buffers (clCreateSubBuffer at an origin aligned to
//     CL_DEVICE_MEM_BASE_ADDR_ALIGN): their info, reads and writes through
//     them seen in the parent, a kernel on one changing only its region; a
//     misaligned origin -> CL_MISALIGNED_SUB_BUFFER_OFFSET, one past the
//     end -> CL_INVALID_VALUE;
//   - clEnqueueMapBuffer/clEnqueueUnmapMemObject for reading, for writing
//     with CL_MAP_WRITE_INVALIDATE_REGION, and read-write (what is not
//     written keeps its value);
//   - a CL_MEM_USE_HOST_PTR buffer: written through a map, changed by a
//     kernel, read through a map (the pointer derived from host_ptr, the
//     host memory holding the kernel's result);
//   - clEnqueueWriteBufferRect/ReadBufferRect/CopyBufferRect on 2D regions
//     with row pitches (and a 3D one with slice pitches);
//   - a 24 MiB round trip (write, device copy, read; two buffers within a 64 MiB quota).
#define PROGRAM "buffers"
#include "common.h"

static const char *source =
    "__kernel void inc(__global uchar *p, uint n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) p[i] += (uchar)1;\n"
    "}\n"
    "__kernel void affine(__global uint *p, uint n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) p[i] = p[i] * 2u + 1u;\n"
    "}\n";

static cl_context ctx;
static cl_command_queue q;
static cl_device_id dev;
static cl_program prog;
// The device is NVIDIA's, reached without fairgpu (common.h).
static int nvidia_direct;

static cl_mem make_buffer(size_t size, cl_mem_flags flags, void *host) {
    cl_mem b;
    CREATE(b, clCreateBuffer(ctx, flags, size, host, ERR));
    return b;
}

static void read_all(cl_mem b, void *dst, size_t size) {
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, size, dst, 0, NULL, NULL));
}

static void run_1d(cl_kernel k, size_t n) {
    size_t global = n;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
}

static void test_copy(void) {
    const size_t n = (1 << 20) + 333;
    unsigned char *a = xmalloc(n), *b = xmalloc(n), *got = xmalloc(n);
    fill_bytes(a, n, 101);
    fill_bytes(b, n, 102);
    cl_mem da = make_buffer(n, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, a);
    cl_mem db = make_buffer(n, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, b);

    const size_t so = 1001, dof = 77, sz = 300001;
    CHECK(clEnqueueCopyBuffer(q, da, db, so, dof, sz, 0, NULL, NULL));
    memcpy(b + dof, a + so, sz);
    read_all(db, got, n);
    expect_bytes("CopyBuffer a[1001..] -> b[77..]", got, b, n);
    read_all(da, got, n);
    expect_bytes("CopyBuffer source unchanged", got, a, n);
    ok("clEnqueueCopyBuffer %zu bytes from offset %zu to offset %zu", sz, so, dof);

    // Within one buffer, regions apart.
    CHECK(clEnqueueCopyBuffer(q, da, da, 5, n / 2 + 3, 100003, 0, NULL, NULL));
    memmove(a + n / 2 + 3, a + 5, 100003);
    read_all(da, got, n);
    expect_bytes("CopyBuffer within a buffer", got, a, n);
    ok("clEnqueueCopyBuffer within one buffer (disjoint regions)");

    EXPECT_ERR(clEnqueueCopyBuffer(q, da, da, 0, 100, 1000, 0, NULL, NULL), CL_MEM_COPY_OVERLAP);
    EXPECT_ERR(clEnqueueCopyBuffer(q, da, db, n - 10, 0, 11, 0, NULL, NULL), CL_INVALID_VALUE);
    read_all(da, got, n);
    expect_bytes("buffer after failed copies", got, a, n);
    ok("overlapping copy -> CL_MEM_COPY_OVERLAP, past the end -> CL_INVALID_VALUE");
    CHECK(clReleaseMemObject(da));
    CHECK(clReleaseMemObject(db));
    free(a);
    free(b);
    free(got);
}

static void test_fill(void) {
    const size_t n = 65536 + 512;
    unsigned char *want = xmalloc(n), *got = xmalloc(n);
    fill_bytes(want, n, 201);
    cl_mem d = make_buffer(n, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, want);
    static const size_t sizes[] = {1, 2, 4, 8, 16, 32, 64, 128};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t p = sizes[s];
        unsigned char pattern[128];
        fill_bytes(pattern, p, 300 + p);
        // Offset and size are multiples of the pattern size, the region
        // neither the whole buffer nor aligned to more than it needs.
        size_t offset = p * 3, count = (n / p) - 7;
        size_t size = count * p;
        CHECK(clEnqueueFillBuffer(q, d, pattern, p, offset, size, 0, NULL, NULL));
        for (size_t i = 0; i < size; i++) want[offset + i] = pattern[i % p];
        read_all(d, got, n);
        char what[64];
        snprintf(what, sizeof what, "FillBuffer with a %zu-byte pattern", p);
        expect_bytes(what, got, want, n);
        ok("clEnqueueFillBuffer %zu-byte pattern, offset %zu, %zu bytes; the rest untouched", p,
           offset, size);
    }
    CHECK(clReleaseMemObject(d));
    free(want);
    free(got);
}

static void test_sub_buffers(void) {
    cl_uint align_bits = 0;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits,
                          NULL));
    size_t align = align_bits / 8;
    EXPECT(align >= 1, "CL_DEVICE_MEM_BASE_ADDR_ALIGN %u bits", align_bits);
    const size_t n = align * 16 + 4096;
    unsigned char *want = xmalloc(n), *got = xmalloc(n);
    fill_bytes(want, n, 401);
    cl_mem parent = make_buffer(n, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, want);
    cl_buffer_region region = {align * 3, align * 5 + 123};
    cl_mem sub;
    CREATE(sub, clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &region,
                                  ERR));
    size_t off = 0, size = 0;
    cl_mem assoc = NULL;
    CHECK(clGetMemObjectInfo(sub, CL_MEM_OFFSET, sizeof off, &off, NULL));
    CHECK(clGetMemObjectInfo(sub, CL_MEM_SIZE, sizeof size, &size, NULL));
    CHECK(clGetMemObjectInfo(sub, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof assoc, &assoc, NULL));
    EXPECT(off == region.origin, "CL_MEM_OFFSET %zu, want %zu", off, region.origin);
    EXPECT(size == region.size, "CL_MEM_SIZE %zu, want %zu", size, region.size);
    EXPECT(assoc == parent, "CL_MEM_ASSOCIATED_MEMOBJECT %p, want %p", (void *)assoc,
           (void *)parent);
    ok("sub-buffer at origin %zu (align %zu bytes), size %zu: offset, size, parent right",
       region.origin, align, region.size);

    read_all(sub, got, region.size);
    expect_bytes("sub-buffer read", got, want + region.origin, region.size);
    ok("reading the sub-buffer gives the parent's region");

    unsigned char *fresh = xmalloc(region.size);
    fill_bytes(fresh, region.size, 402);
    CHECK(clEnqueueWriteBuffer(q, sub, CL_TRUE, 0, region.size, fresh, 0, NULL, NULL));
    memcpy(want + region.origin, fresh, region.size);
    read_all(parent, got, n);
    expect_bytes("parent after writing the sub-buffer", got, want, n);
    ok("writing the sub-buffer changes exactly the parent's region");

    cl_kernel inc;
    CREATE(inc, clCreateKernel(prog, "inc", ERR));
    cl_uint len = (cl_uint)region.size;
    CHECK(clSetKernelArg(inc, 0, sizeof(cl_mem), &sub));
    CHECK(clSetKernelArg(inc, 1, sizeof(cl_uint), &len));
    run_1d(inc, region.size);
    for (size_t i = 0; i < region.size; i++) want[region.origin + i]++;
    read_all(parent, got, n);
    expect_bytes("parent after a kernel on the sub-buffer", got, want, n);
    ok("a kernel on the sub-buffer changes exactly the parent's region");
    CHECK(clReleaseKernel(inc));

    cl_buffer_region bad = {1, 64};
    if (align > 1 && device_is_nvidia(dev)) {
        // NVIDIA's driver makes it (see common.h); it must then be usable.
        cl_mem odd;
        CREATE(odd, clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                                      &bad, ERR));
        unsigned char b[64];
        CHECK(clEnqueueReadBuffer(q, odd, CL_TRUE, 0, sizeof b, b, 0, NULL, NULL));
        expect_bytes("sub-buffer at origin 1 (NVIDIA)", b, want + 1, sizeof b);
        CHECK(clReleaseMemObject(odd));
        ok("sub-buffer at origin 1 -> made by NVIDIA's driver, reads the parent's bytes");
    } else if (align > 1) {
        CREATE_FAILS(clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION,
                                       &bad, ERR),
                     CL_MISALIGNED_SUB_BUFFER_OFFSET);
        ok("sub-buffer at origin 1 -> CL_MISALIGNED_SUB_BUFFER_OFFSET");
    }
    cl_buffer_region past = {align, n};
    if (nvidia_direct) {
        // NVIDIA's driver makes even this one (common.h); fairgpu's host
        // refuses it whatever the host's platform.
        ok("sub-buffer past the parent's end: not checked on NVIDIA's own platform");
    } else {
        CREATE_FAILS(
            clCreateSubBuffer(parent, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &past, ERR),
            CL_INVALID_VALUE);
        ok("sub-buffer past the parent's end -> CL_INVALID_VALUE");
    }

    CHECK(clReleaseMemObject(sub));
    CHECK(clReleaseMemObject(parent));
    free(want);
    free(got);
    free(fresh);
}

static void test_map(void) {
    const size_t n = 256 * 1024 + 40;
    unsigned char *want = xmalloc(n), *got = xmalloc(n);
    fill_bytes(want, n, 501);
    cl_mem d = make_buffer(n, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, want);

    // Read.
    size_t off = 4096, size = 65536 + 3;
    cl_int err = 0;
    unsigned char *p =
        clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_READ, off, size, 0, NULL, NULL, &err);
    CHECK(err);
    EXPECT(p != NULL, "map for reading returned NULL");
    expect_bytes("mapped for reading", p, want + off, size);
    cl_event unmap;
    CHECK(clEnqueueUnmapMemObject(q, d, p, 0, NULL, &unmap));
    CHECK(clWaitForEvents(1, &unmap));
    CHECK(clReleaseEvent(unmap));
    ok("map CL_MAP_READ [%zu, +%zu) shows the buffer", off, size);

    // Write, invalidating the region: all of it is written.
    off = 8192 + 5;
    size = 10000;
    p = clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_WRITE_INVALIDATE_REGION, off, size, 0, NULL,
                           NULL, &err);
    CHECK(err);
    EXPECT(p != NULL, "map for writing returned NULL");
    fill_bytes(want + off, size, 502);
    memcpy(p, want + off, size);
    CHECK(clEnqueueUnmapMemObject(q, d, p, 0, NULL, NULL));
    CHECK(clFinish(q));
    read_all(d, got, n);
    expect_bytes("after map CL_MAP_WRITE_INVALIDATE_REGION", got, want, n);
    ok("map CL_MAP_WRITE_INVALIDATE_REGION [%zu, +%zu): written bytes in, the rest unchanged",
       off, size);

    // Read-write: bytes not written keep their values.
    off = 100000;
    size = 50001;
    p = clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, off, size, 0, NULL, NULL,
                           &err);
    CHECK(err);
    expect_bytes("mapped read-write", p, want + off, size);
    for (size_t i = 0; i < size; i += 7) {
        p[i] ^= 0xff;
        want[off + i] ^= 0xff;
    }
    CHECK(clEnqueueUnmapMemObject(q, d, p, 0, NULL, NULL));
    read_all(d, got, n);
    expect_bytes("after map CL_MAP_READ|CL_MAP_WRITE", got, want, n);
    ok("map CL_MAP_READ|CL_MAP_WRITE: every 7th byte changed, the rest kept");

    // Two regions mapped at once.
    unsigned char *p1 =
        clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_READ, 0, 1000, 0, NULL, NULL, &err);
    CHECK(err);
    unsigned char *p2 =
        clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_READ, n - 1000, 1000, 0, NULL, NULL, &err);
    CHECK(err);
    expect_bytes("first of two maps", p1, want, 1000);
    expect_bytes("second of two maps", p2, want + n - 1000, 1000);
    cl_uint maps = 0;
    CHECK(clGetMemObjectInfo(d, CL_MEM_MAP_COUNT, sizeof maps, &maps, NULL));
    printf("(CL_MEM_MAP_COUNT with two maps: %u)\n", maps);
    CHECK(clEnqueueUnmapMemObject(q, d, p2, 0, NULL, NULL));
    CHECK(clEnqueueUnmapMemObject(q, d, p1, 0, NULL, NULL));
    CHECK(clFinish(q));
    ok("two regions mapped at once");

    CHECK(clReleaseMemObject(d));
    free(want);
    free(got);
}

static void test_use_host_ptr(void) {
    const size_t n = 100000; // uints
    const size_t bytes = n * sizeof(cl_uint);
    cl_uint *host = aligned_alloc(4096, round_up(bytes, 4096));
    EXPECT(host != NULL, "aligned_alloc failed");
    for (size_t i = 0; i < n; i++) host[i] = (cl_uint)(i * 2654435761u);
    cl_mem d = make_buffer(bytes, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, host);
    void *hp = NULL;
    CHECK(clGetMemObjectInfo(d, CL_MEM_HOST_PTR, sizeof hp, &hp, NULL));
    EXPECT(hp == host, "CL_MEM_HOST_PTR %p, want %p", hp, (void *)host);

    cl_kernel k;
    CREATE(k, clCreateKernel(prog, "affine", ERR));
    cl_uint len = (cl_uint)n;
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &d));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_uint), &len));
    run_1d(k, n);

    cl_uint *want = xmalloc(bytes);
    for (size_t i = 0; i < n; i++) want[i] = (cl_uint)(i * 2654435761u) * 2u + 1u;
    cl_int err = 0;
    cl_uint *p = clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL, NULL, &err);
    CHECK(err);
    EXPECT((void *)p == (void *)host, "map of a USE_HOST_PTR buffer at %p, not host_ptr %p",
           (void *)p, (void *)host);
    expect_bytes("USE_HOST_PTR mapped after the kernel", p, want, bytes);
    expect_bytes("USE_HOST_PTR host memory after the map", host, want, bytes);
    CHECK(clEnqueueUnmapMemObject(q, d, p, 0, NULL, NULL));
    CHECK(clFinish(q));
    ok("USE_HOST_PTR: kernel result seen through a map at host_ptr and in host memory");

    // A map at an offset, for writing: the pointer is host_ptr + offset.
    size_t off = 4000 * sizeof(cl_uint), size = 1000 * sizeof(cl_uint);
    p = clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_WRITE, off, size, 0, NULL, NULL, &err);
    CHECK(err);
    EXPECT((unsigned char *)p == (unsigned char *)host + off,
           "map at offset %zu returned %p, want host_ptr + offset %p", off, (void *)p,
           (void *)((unsigned char *)host + off));
    for (size_t i = 0; i < 1000; i++) {
        p[i] = 0xdead0000u + (cl_uint)i;
        want[4000 + i] = 0xdead0000u + (cl_uint)i;
    }
    CHECK(clEnqueueUnmapMemObject(q, d, p, 0, NULL, NULL));
    run_1d(k, n);
    for (size_t i = 0; i < n; i++) want[i] = want[i] * 2u + 1u;
    cl_uint *got = xmalloc(bytes);
    read_all(d, got, bytes);
    expect_bytes("USE_HOST_PTR read after map-write and kernel", got, want, bytes);
    p = clEnqueueMapBuffer(q, d, CL_TRUE, CL_MAP_READ, 0, bytes, 0, NULL, NULL, &err);
    CHECK(err);
    expect_bytes("USE_HOST_PTR host memory after the second map", host, want, bytes);
    CHECK(clEnqueueUnmapMemObject(q, d, p, 0, NULL, NULL));
    CHECK(clFinish(q));
    ok("USE_HOST_PTR: written through a map at an offset, kernel, read back");

    CHECK(clReleaseKernel(k));
    CHECK(clReleaseMemObject(d));
    free(host);
    free(want);
    free(got);
}

// The CPU's rectangle copy: region bytes x rows x slices.
static void cpu_rect(unsigned char *dst, const size_t dorg[3], size_t drow, size_t dslice,
                     const unsigned char *src, const size_t sorg[3], size_t srow, size_t sslice,
                     const size_t region[3]) {
    for (size_t z = 0; z < region[2]; z++)
        for (size_t y = 0; y < region[1]; y++)
            memcpy(dst + (dorg[2] + z) * dslice + (dorg[1] + y) * drow + dorg[0],
                   src + (sorg[2] + z) * sslice + (sorg[1] + y) * srow + sorg[0], region[0]);
}

static void test_rect(void) {
    // The buffer: 64 rows of 1024 bytes (a 1000-byte-wide image, padded).
    const size_t brow = 1024, brows = 64, bn = brow * brows;
    // The host: 80 rows of 1100 bytes.
    const size_t hrow = 1100, hrows = 80, hn = hrow * hrows;
    unsigned char *bwant = xmalloc(bn), *bgot = xmalloc(bn);
    unsigned char *host = xmalloc(hn), *hgot = xmalloc(hn), *hwant = xmalloc(hn);
    fill_bytes(bwant, bn, 601);
    fill_bytes(host, hn, 602);
    cl_mem d = make_buffer(bn, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bwant);

    {
        size_t borg[3] = {17, 5, 0}, horg[3] = {3, 7, 0}, region[3] = {300, 50, 1};
        CHECK(clEnqueueWriteBufferRect(q, d, CL_TRUE, borg, horg, region, brow, 0, hrow, 0, host,
                                       0, NULL, NULL));
        cpu_rect(bwant, borg, brow, 0, host, horg, hrow, 0, region);
        read_all(d, bgot, bn);
        expect_bytes("WriteBufferRect", bgot, bwant, bn);
        ok("clEnqueueWriteBufferRect 300x50 at (17,5) from host (3,7), pitches 1024/1100");
    }
    {
        size_t borg[3] = {40, 2, 0}, horg[3] = {10, 4, 0}, region[3] = {500, 30, 1};
        const size_t drow = 600;
        memset(hgot, 0xee, hn);
        memset(hwant, 0xee, hn);
        CHECK(clEnqueueReadBufferRect(q, d, CL_TRUE, borg, horg, region, brow, 0, drow, 0, hgot,
                                      0, NULL, NULL));
        cpu_rect(hwant, horg, drow, 0, bwant, borg, brow, 0, region);
        expect_bytes("ReadBufferRect", hgot, hwant, hn);
        ok("clEnqueueReadBufferRect 500x30 at (40,2) to host (10,4), pitches 1024/600");
    }
    {
        // 3D: 3 slices of 16 rows of 128 bytes in the buffer, slices of 10
        // rows of 100 bytes on the host.
        size_t borg[3] = {9, 2, 1}, horg[3] = {1, 1, 0}, region[3] = {64, 8, 3};
        const size_t b_row = 128, b_slice = 128 * 16, h_row = 100, h_slice = 100 * 10;
        EXPECT(b_slice * 4 <= bn, "buffer too small for the 3D case");
        CHECK(clEnqueueWriteBufferRect(q, d, CL_TRUE, borg, horg, region, b_row, b_slice, h_row,
                                       h_slice, host, 0, NULL, NULL));
        cpu_rect(bwant, borg, b_row, b_slice, host, horg, h_row, h_slice, region);
        read_all(d, bgot, bn);
        expect_bytes("WriteBufferRect 3D", bgot, bwant, bn);
        memset(hgot, 0x11, hn);
        memset(hwant, 0x11, hn);
        CHECK(clEnqueueReadBufferRect(q, d, CL_TRUE, borg, horg, region, b_row, b_slice, h_row,
                                      h_slice, hgot, 0, NULL, NULL));
        cpu_rect(hwant, horg, h_row, h_slice, bwant, borg, b_row, b_slice, region);
        expect_bytes("ReadBufferRect 3D", hgot, hwant, hn);
        ok("Write/ReadBufferRect 3D 64x8x3 with row and slice pitches");
    }
    {
        // Device to device: a 2D region into another buffer with its own pitch.
        const size_t drow = 512, dn = drow * 40;
        unsigned char *dwant = xmalloc(dn), *dgot = xmalloc(dn);
        fill_bytes(dwant, dn, 603);
        cl_mem d2 = make_buffer(dn, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, dwant);
        size_t sorg[3] = {100, 10, 0}, dorg[3] = {7, 3, 0}, region[3] = {333, 25, 1};
        CHECK(clEnqueueCopyBufferRect(q, d, d2, sorg, dorg, region, brow, 0, drow, 0, 0, NULL,
                                      NULL));
        cpu_rect(dwant, dorg, drow, 0, bwant, sorg, brow, 0, region);
        read_all(d2, dgot, dn);
        expect_bytes("CopyBufferRect", dgot, dwant, dn);
        ok("clEnqueueCopyBufferRect 333x25 between pitches 1024 and 512");
        CHECK(clReleaseMemObject(d2));
        free(dwant);
        free(dgot);
    }
    CHECK(clReleaseMemObject(d));
    free(bwant);
    free(bgot);
    free(host);
    free(hgot);
    free(hwant);
}

static void test_large(void) {
    const size_t n = 24u << 20;
    unsigned char *src = xmalloc(n), *got = xmalloc(n);
    fill_bytes(src, n, 701);
    memset(got, 0, n);
    cl_mem a = make_buffer(n, CL_MEM_READ_WRITE, NULL);
    cl_mem b = make_buffer(n, CL_MEM_READ_WRITE, NULL);
    CHECK(clEnqueueWriteBuffer(q, a, CL_TRUE, 0, n, src, 0, NULL, NULL));
    CHECK(clEnqueueCopyBuffer(q, a, b, 0, 0, n, 0, NULL, NULL));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, n, got, 0, NULL, NULL));
    expect_bytes("24 MiB write -> copy -> read", got, src, n);
    // The tail at an odd offset, straight from the first buffer.
    size_t off = n - (1 << 20) - 3;
    memset(got, 0, n);
    CHECK(clEnqueueReadBuffer(q, a, CL_TRUE, off, n - off, got, 0, NULL, NULL));
    expect_bytes("24 MiB buffer's tail", got, src + off, n - off);
    ok("24 MiB round trip (write, device copy, read) and its tail at offset %zu", off);
    CHECK(clReleaseMemObject(a));
    CHECK(clReleaseMemObject(b));
    free(src);
    free(got);
}

int main(void) {
    cl_platform_id platform;
    setup(&platform, &dev, &ctx, &q, 0);
    nvidia_direct = device_is_nvidia(dev) && !platform_is_fairgpu(platform);
    prog = build_source(ctx, dev, source, "");
    test_copy();
    test_fill();
    test_sub_buffers();
    test_map();
    test_use_host_ptr();
    test_rect();
    test_large();
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    return pass();
}
