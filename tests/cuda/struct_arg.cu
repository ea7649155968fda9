// Kernels taking structs by value: one of mixed field types (char, short,
// int, long long, float, double, a pointer, a byte array, a float2 and an
// unsigned short, with padding) after an int parameter, and one whose
// 16-byte alignment (a double2 member) puts it at offset 16 after a char.
// Every thread computes from every field; thread 0 also writes back the
// struct as it received it. The values are chosen so that every result is
// exact, so the CPU reference must agree bit for bit.
#define PROGRAM "struct_arg"
#include "common.h"

#include <cstddef>
#include <vector>

struct Mixed {
    char c;
    short s;
    int i;
    long long ll;
    float f;
    double d;
    const int* p;
    unsigned char tag[3];
    float2 v;
    unsigned short us;
};
static_assert(offsetof(Mixed, ll) == 8 && offsetof(Mixed, d) == 24 && offsetof(Mixed, p) == 32 &&
                  offsetof(Mixed, tag) == 40 && offsetof(Mixed, v) == 48 &&
                  offsetof(Mixed, us) == 56 && sizeof(Mixed) == 64,
              "Mixed layout");

struct Aligned16 {
    int a;
    double2 q;
    bool yes;
};
static_assert(alignof(Aligned16) == 16 && offsetof(Aligned16, q) == 16 && sizeof(Aligned16) == 48,
              "Aligned16 layout");

__device__ double mixed_value(const Mixed& m, int i, int scale) {
    double ints = (double)m.c + (double)m.s + (double)m.i + (double)m.ll + (double)m.us +
                  (double)m.tag[i % 3] + (double)m.p[i % 4];
    float fv = __fadd_rn(__fmul_rn(m.f, m.v.x), m.v.y);
    return __dadd_rn(__dadd_rn(__dmul_rn(m.d, (double)(i * scale)), ints), (double)fv);
}

__global__ void apply_mixed(int scale, Mixed m, double* out, Mixed* echo, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = mixed_value(m, i, scale);
    if (i == 0) *echo = m;
}

__global__ void apply_aligned(char k, Aligned16 s, long long* out, Aligned16* echo) {
    int i = threadIdx.x;
    out[i] = (long long)k * i + s.a + (long long)s.q.x - (long long)s.q.y + (s.yes ? 1000 : 0);
    if (i == 0) *echo = s;
}

static double host_mixed_value(const Mixed& m, const int* p, int i, int scale) {
    double ints = (double)m.c + (double)m.s + (double)m.i + (double)m.ll + (double)m.us +
                  (double)m.tag[i % 3] + (double)p[i % 4];
    float fv = m.f * m.v.x + m.v.y;  // exact for these values
    return m.d * (double)(i * scale) + ints + (double)fv;
}

static void mixed() {
    const int n = 1000, scale = 3;
    const int table[4] = {10, -20, 30, -40};
    int* dp;
    CHECK(cudaMalloc((void**)&dp, sizeof table));
    CHECK(cudaMemcpy(dp, table, sizeof table, cudaMemcpyHostToDevice));
    Mixed m;
    std::memset(&m, 0, sizeof m);
    m.c = -5;
    m.s = -1234;
    m.i = 987654;
    m.ll = -(1ll << 40) + 12345;
    m.f = 1.25f;
    m.d = 0.5;
    m.p = dp;
    m.tag[0] = 1;
    m.tag[1] = 200;
    m.tag[2] = 255;
    m.v = make_float2(3.0f, -0.5f);
    m.us = 65535;
    double* dout;
    Mixed* decho;
    CHECK(cudaMalloc((void**)&dout, n * sizeof(double)));
    CHECK(cudaMalloc((void**)&decho, sizeof(Mixed)));
    apply_mixed<<<(n + 127) / 128, 128>>>(scale, m, dout, decho, n);
    LAUNCHED("apply_mixed");
    std::vector<double> got(n);
    CHECK(cudaMemcpy(got.data(), dout, n * sizeof(double), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        double want = host_mixed_value(m, table, i, scale);
        EXPECT(dbits(got[i]) == dbits(want), "apply_mixed: out[%d] = %.17g, want %.17g", i, got[i],
               want);
    }
    Mixed e;
    CHECK(cudaMemcpy(&e, decho, sizeof e, cudaMemcpyDeviceToHost));
    EXPECT(e.c == m.c && e.s == m.s && e.i == m.i && e.ll == m.ll && fbits(e.f) == fbits(m.f) &&
               dbits(e.d) == dbits(m.d) && e.p == m.p && std::memcmp(e.tag, m.tag, 3) == 0 &&
               fbits(e.v.x) == fbits(m.v.x) && fbits(e.v.y) == fbits(m.v.y) && e.us == m.us,
           "apply_mixed received another struct than was passed");
    CHECK(cudaFree(dp));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(decho));
}

static void aligned() {
    Aligned16 s;
    std::memset(&s, 0, sizeof s);
    s.a = 77;
    s.q = make_double2(1e6, -250.0);
    s.yes = true;
    const char k = -3;
    const int n = 64;
    long long* dout;
    Aligned16* decho;
    CHECK(cudaMalloc((void**)&dout, n * 8));
    CHECK(cudaMalloc((void**)&decho, sizeof s));
    apply_aligned<<<1, n>>>(k, s, dout, decho);
    LAUNCHED("apply_aligned");
    long long got[n];
    CHECK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        long long want = (long long)k * i + 77 + 1000000 + 250 + 1000;
        EXPECT(got[i] == want, "apply_aligned: out[%d] = %lld, want %lld", i, got[i], want);
    }
    Aligned16 e;
    CHECK(cudaMemcpy(&e, decho, sizeof e, cudaMemcpyDeviceToHost));
    EXPECT(e.a == s.a && dbits(e.q.x) == dbits(s.q.x) && dbits(e.q.y) == dbits(s.q.y) && e.yes,
           "apply_aligned received another struct than was passed");
    CHECK(cudaFree(dout));
    CHECK(cudaFree(decho));
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    mixed();
    aligned();
    pass();
    return 0;
}
