// Kernel parameters of mixed sizes and alignments must reach the device
// byte for byte, at the offsets the C++ ABI gives them.
//
// How this is checked without running kernels: SimGpu's cost model reads a
// kernel's duration from one of its parameters (`duration_param`). The
// kernels args_i, args_d, args_p, args_m and args_n have the same parameter
// list and each is configured to take its duration from a different
// parameter: the int (offset 12), the double (16), the pointer (48), the
// 8-byte struct of char, char, short, int (60) and the trailing u64 (72),
// each holding a distinct duration around a millisecond. Event times (exact
// on SimGpu) then prove each of those parameters arrived intact at its
// offset; the 1-, 2- and 3-byte parameters and the 24-byte struct before
// them fix those offsets. A shifted, truncated or reordered buffer gives a
// different duration, or one above SimGpu's 60 s limit (the launch fails).
// Also: a kernel in a namespace, a template kernel (their mangled names
// have no base name: configured by exact name) and one with 4 KiB of
// parameters, and the same kernel through cudaLaunchKernel.
//
// The test compares the printed "GPU_NS <total>" with the VM's GPU time.
// "ARGS <kernel> <hex>" lines show each launch's packed parameter buffer.
// With FAIRGPU_CHECK_RESULTS=1 each kernel also writes what it received to
// device memory and the program compares that with the same buffer.
#define PROGRAM "launch_args"
#include "common.h"

#include <cstddef>
#include <vector>

struct S24 {  // 24 bytes, alignment 8, no padding
    unsigned long long a, b;
    unsigned int c;
    unsigned short d;
    unsigned char e, f;
};
struct S3 {  // 3 bytes, alignment 1
    unsigned char x, y, z;
};
struct Mix8 {  // 8 bytes, alignment 4, no padding
    unsigned char a, b;
    unsigned short c;
    unsigned int d;
};
struct Big4k {
    unsigned char bytes[4096];
};

// The packed parameter buffer of the args_* kernels, as the host ABI lays
// it out; kernel parameters follow the same rules.
struct Packed {
    unsigned char* out;
    char c;
    short s;
    int i;
    double d;
    S24 big;
    const void* p;
    S3 tri;
    Mix8 m;
    unsigned long long ns;
};
static_assert(sizeof(S24) == 24 && alignof(S24) == 8, "S24");
static_assert(sizeof(S3) == 3 && alignof(S3) == 1, "S3");
static_assert(sizeof(Mix8) == 8 && alignof(Mix8) == 4, "Mix8");
static_assert(offsetof(Packed, c) == 8 && offsetof(Packed, s) == 10 && offsetof(Packed, i) == 12 &&
                  offsetof(Packed, d) == 16 && offsetof(Packed, big) == 24 &&
                  offsetof(Packed, p) == 48 && offsetof(Packed, tri) == 56 &&
                  offsetof(Packed, m) == 60 && offsetof(Packed, ns) == 72 && sizeof(Packed) == 80,
              "parameter layout");

#define ARGS_PARAMS                                                                          \
    unsigned char *out, char c, short s, int i, double d, S24 big, const void *p, S3 tri,    \
        Mix8 m, unsigned long long ns

// Writes the parameters where the host expects them (padding untouched).
__device__ void record(ARGS_PARAMS) {
    Packed* o = (Packed*)out;
    o->out = out;
    o->c = c;
    o->s = s;
    o->i = i;
    o->d = d;
    o->big = big;
    o->p = p;
    o->tri = tri;
    o->m = m;
    o->ns = ns;
}

// Same parameters, different names: each is configured with its duration
// in another parameter (see the top of this file).
__global__ void args_i(ARGS_PARAMS) { record(out, c, s, i, d, big, p, tri, m, ns); }
__global__ void args_d(ARGS_PARAMS) { record(out, c, s, i, d, big, p, tri, m, ns); }
__global__ void args_p(ARGS_PARAMS) { record(out, c, s, i, d, big, p, tri, m, ns); }
__global__ void args_m(ARGS_PARAMS) { record(out, c, s, i, d, big, p, tri, m, ns); }
__global__ void args_n(ARGS_PARAMS) { record(out, c, s, i, d, big, p, tri, m, ns); }
// Configured with `duration_hash`: its modelled duration is derived from
// every byte of its parameter buffer (see fnv1a64 below).
__global__ void args_h(ARGS_PARAMS) { record(out, c, s, i, d, big, p, tri, m, ns); }

namespace fg {
// _ZN2fg6nestedEPhiy: duration in parameter 2.
__global__ void nested(unsigned char* out, int a, unsigned long long ns) {
    *(int*)out = a;
    *(unsigned long long*)(out + 8) = ns;
}
}  // namespace fg

// _Z4tmplIfEvPhT_y for float: duration in parameter 2.
template <typename T>
__global__ void tmpl(unsigned char* out, T x, unsigned long long ns) {
    *(T*)out = x;
    *(unsigned long long*)(out + 8) = ns;
}

// 4 KiB of parameters; the duration (parameter 2) is at offset 4104.
__global__ void big_params(unsigned char* out, Big4k b, unsigned long long ns) {
    for (int k = 0; k < 4096; k++) out[k] = b.bytes[k];
    *(unsigned long long*)(out + 4096) = ns;
}

static const unsigned long long MS = 1000000ull;

// One kernel launch and what it must have received.
struct Launch {
    const char* name;
    unsigned long long ns;  // its modelled duration
    std::vector<unsigned char> want;  // what it writes with FAIRGPU_CHECK_RESULTS
    unsigned char* out;
};

static unsigned long long bits(double d) {
    unsigned long long u;
    std::memcpy(&u, &d, 8);
    return u;
}

static double from_bits(unsigned long long u) {
    double d;
    std::memcpy(&d, &u, 8);
    return d;
}

static Packed packed(unsigned char* out) {
    Packed a;
    std::memset(&a, 0, sizeof a);  // padding, as the device buffer starts
    a.out = out;
    a.c = (char)0xa5;
    a.s = (short)0xbeef;
    a.i = 1100000;                 // args_i: 1.1 ms
    a.d = from_bits(1200000);      // args_d: 1.2 ms (a denormal double)
    a.big = {0x0102030405060708ull, 0xf1f2f3f4f5f6f7f8ull, 0xcafebabeu, 0xd00d, 0xe1, 0xf2};
    a.p = (const void*)(uintptr_t)1300000;  // args_p: 1.3 ms; never dereferenced
    a.tri = {0x31, 0x32, 0x33};
    a.m = {0x91, 0x61, 0x0015, 0};  // args_m: 0x156191 = 1.401233 ms
    a.ns = 1500000;                 // args_n: 1.5 ms
    return a;
}

static void print_args(const char* name, const void* buf, size_t len) {
    std::printf("ARGS %s ", name);
    for (size_t k = 0; k < len; k++) std::printf("%02x", ((const unsigned char*)buf)[k]);
    std::printf("\n");
}

static unsigned long long gpu_ns = 0;

// What SimGpu's `duration_hash` cost gives a kernel whose packed parameter
// buffer is `buf`: 100 us + FNV-1a 64 of every byte, modulo 1 ms. Equal
// times prove the host received exactly these bytes, padding included.
static unsigned long long hashed_ns(const void* buf, size_t len) {
    unsigned long long h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < len; k++) {
        h ^= ((const unsigned char*)buf)[k];
        h *= 0x100000001b3ull;
    }
    return 100000ull + h % 1000000ull;
}

// Launches every kernel once on `s`, each between two events; returns the
// launches in order.
static std::vector<Launch> launch_all(cudaStream_t s, cudaEvent_t* ev, unsigned char* out_base) {
    std::vector<Launch> l;
    size_t slot = 0;
    auto out = [&] { return out_base + 8192 * slot++; };
    auto mark = [&] { CHECK(cudaEventRecord(ev[l.size()], s)); };
    mark();

    typedef void (*ArgsKernel)(ARGS_PARAMS);
    struct {
        const char* name;
        ArgsKernel k;
    } kernels[] = {{"args_i", args_i}, {"args_d", args_d}, {"args_p", args_p},
                   {"args_m", args_m}, {"args_n", args_n}};
    for (auto& k : kernels) {
        unsigned char* o = out();
        Packed a = packed(o);
        k.k<<<1, 1, 0, s>>>(a.out, a.c, a.s, a.i, a.d, a.big, a.p, a.tri, a.m, a.ns);
        CHECK(cudaGetLastError());
        unsigned long long ns = 0;
        if (k.k == args_i) ns = (unsigned long long)a.i;
        if (k.k == args_d) ns = bits(a.d);
        if (k.k == args_p) ns = (unsigned long long)(uintptr_t)a.p;
        if (k.k == args_m) std::memcpy(&ns, &a.m, 8);
        if (k.k == args_n) ns = a.ns;
        print_args(k.name, &a, sizeof a);
        l.push_back({k.name, ns, std::vector<unsigned char>((unsigned char*)&a,
                                                            (unsigned char*)&a + sizeof a),
                     o});
        mark();
    }

    // Every byte at once: the modelled duration is a hash of the buffer.
    for (int variant = 0; variant < 2; variant++) {
        unsigned char* o = out();
        Packed a = packed(o);
        a.ns = 0x0123456789abcdefull + variant;
        if (variant == 0) {
            args_h<<<1, 1, 0, s>>>(a.out, a.c, a.s, a.i, a.d, a.big, a.p, a.tri, a.m, a.ns);
            CHECK(cudaGetLastError());
        } else {
            void* argv[] = {&a.out, &a.c, &a.s, &a.i, &a.d, &a.big, &a.p, &a.tri, &a.m, &a.ns};
            CHECK(cudaLaunchKernel((const void*)args_h, dim3(1), dim3(1), argv, 0, s));
        }
        print_args("args_h", &a, sizeof a);
        l.push_back({variant == 0 ? "args_h (all bytes)" : "args_h (all bytes, cudaLaunchKernel)",
                     hashed_ns(&a, sizeof a),
                     std::vector<unsigned char>((unsigned char*)&a, (unsigned char*)&a + sizeof a),
                     o});
        mark();
    }

    // The same kernel through cudaLaunchKernel and an argument array.
    {
        unsigned char* o = out();
        Packed a = packed(o);
        a.ns = 1550000;
        void* argv[] = {&a.out, &a.c, &a.s, &a.i, &a.d, &a.big, &a.p, &a.tri, &a.m, &a.ns};
        CHECK(cudaLaunchKernel((const void*)args_n, dim3(1), dim3(1), argv, 0, s));
        print_args("args_n", &a, sizeof a);
        l.push_back({"args_n (cudaLaunchKernel)", a.ns,
                     std::vector<unsigned char>((unsigned char*)&a, (unsigned char*)&a + sizeof a),
                     o});
        mark();
    }

    {
        unsigned char* o = out();
        int a = 0x7777;
        unsigned long long ns = 1600000;
        fg::nested<<<1, 1, 0, s>>>(o, a, ns);
        CHECK(cudaGetLastError());
        std::vector<unsigned char> want(16, 0);
        std::memcpy(want.data(), &a, 4);
        std::memcpy(want.data() + 8, &ns, 8);
        l.push_back({"fg::nested", ns, want, o});
        mark();
    }
    {
        unsigned char* o = out();
        float x = -2.5f;
        unsigned long long ns = 1700000;
        tmpl<float><<<1, 1, 0, s>>>(o, x, ns);
        CHECK(cudaGetLastError());
        std::vector<unsigned char> want(16, 0);
        std::memcpy(want.data(), &x, 4);
        std::memcpy(want.data() + 8, &ns, 8);
        l.push_back({"tmpl<float>", ns, want, o});
        mark();
    }
    {
        unsigned char* o = out();
        static Big4k b;
        fill_pattern(b.bytes, sizeof b.bytes, 4096);
        unsigned long long ns = 1800000;
        big_params<<<1, 1, 0, s>>>(o, b, ns);
        CHECK(cudaGetLastError());
        std::vector<unsigned char> want(b.bytes, b.bytes + 4096);
        want.resize(4104);
        std::memcpy(want.data() + 4096, &ns, 8);
        l.push_back({"big_params", ns, want, o});
        mark();
    }
    for (auto& x : l) gpu_ns += x.ns;
    return l;
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int max_launches = 16;
    cudaEvent_t ev[max_launches + 1];
    for (auto& e : ev) CHECK(cudaEventCreate(&e));
    const size_t out_len = 8192 * max_launches;
    unsigned char* out = nullptr;
    CHECK(cudaMalloc((void**)&out, out_len));

    // A head start, so that the kernels usually run back to back however
    // slowly this host issues them. The events may still include idle time
    // (the host's pace, a scheduler's sample synchronising the device), so
    // only the lower bound is checked: a kernel that took less than its
    // modelled duration read another parameter, or other bytes. That each
    // duration arrived exactly is checked by the VM's GPU time (GPU_NS),
    // and the bytes themselves by the results below.
    CHECK(cudaMemset(out, 0, out_len));
    const unsigned long long head = 200 * MS;
    spin<<<1, 1, 0, s>>>(head);
    CHECK(cudaGetLastError());
    gpu_ns += head;
    std::vector<Launch> l = launch_all(s, ev, out);
    EXPECT(l.size() <= (size_t)max_launches, "too many launches");
    CHECK(cudaStreamSynchronize(s));
    for (size_t k = 0; k < l.size(); k++) {
        float ms = elapsed_ms(ev[k], ev[k + 1]);
        double want = (double)l[k].ns / 1e6;
        std::printf("TIME %s %.6f ms, modelled %.6f ms\n", l[k].name, ms, want);
        if (sim_timing()) {
            EXPECT(ms >= want - 1e-3, "%s: %.6f ms, want at least %.6f: its duration parameter "
                   "did not arrive intact", l[k].name, ms, want);
        }
    }

    if (check_results()) {
        for (auto& x : l) {
            std::vector<unsigned char> got(x.want.size());
            CHECK(cudaMemcpy(got.data(), x.out, got.size(), cudaMemcpyDeviceToHost));
            long d = first_diff(got.data(), x.want.data(), got.size());
            EXPECT(d < 0, "%s received byte %ld as %#x, want %#x", x.name, d, got[d < 0 ? 0 : d],
                   x.want[d < 0 ? 0 : d]);
        }
    }

    CHECK(cudaFree(out));
    for (auto& e : ev) CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s));
    std::printf("GPU_NS %llu\n", gpu_ns);
    pass();
    return 0;
}
