// nvcc-flags: -gencode arch=compute_90,code=[sm_90,compute_90]
//
// Warp-level tensor-core instructions in inline PTX, as hand-tuned GEMMs
// write them: `mma.sync` on f16 (f32 and f16 accumulators), bf16, tf32,
// 8-bit integers and f64, with fragments loaded lane by lane from the
// layouts the PTX ISA documents, and through `ldmatrix` (plain and
// transposed) and `stmatrix` from shared memory. Inputs are small
// integers, so every product and sum is exact in every format and the
// result must equal the CPU's exactly (checked when
// FAIRGPU_CHECK_RESULTS=1).
#define PROGRAM "mma"
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common.h"

// Element layouts of the PTX ISA: lanes in groups of four.
__device__ int grp() { return (threadIdx.x & 31) >> 2; }
__device__ int tig() { return threadIdx.x & 3; }

__device__ unsigned pack_h(float lo, float hi) {
    return (unsigned)__half_as_ushort(__float2half(lo)) |
           (unsigned)__half_as_ushort(__float2half(hi)) << 16;
}
__device__ unsigned pack_bf(float lo, float hi) {
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16(lo)) |
           (unsigned)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16;
}
__device__ unsigned pack_s8(const int* v) {
    return (unsigned)(v[0] & 0xff) | (unsigned)(v[1] & 0xff) << 8 | (unsigned)(v[2] & 0xff) << 16 |
           (unsigned)(v[3] & 0xff) << 24;
}

// C/D of m16n8: element i of a lane at (g + 8*(i>>1), 2t + (i&1)).
__device__ int cd_row(int i) { return grp() + 8 * (i >> 1); }
__device__ int cd_col(int i) { return 2 * tig() + (i & 1); }

// m16n8k16 f16 -> f32. A 16x16, B 16x8 (row-major k x n), C/D 16x8.
__global__ void mma_f16_k16(const float* A, const float* B, const float* C, float* D) {
    int g = grp(), t = tig();
    unsigned a[4], b[2];
    for (int r = 0; r < 4; r++) {
        int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        a[r] = pack_h(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; r++) {
        int k = 2 * t + 8 * r;
        b[r] = pack_h(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    float c[4], d[4];
    for (int i = 0; i < 4; i++) c[i] = C[cd_row(i) * 8 + cd_col(i)];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
          "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; i++) D[cd_row(i) * 8 + cd_col(i)] = d[i];
}

// m16n8k8 f16 -> f16 accumulate. A 16x8, B 8x8.
__global__ void mma_f16_k8_h(const float* A, const float* B, const float* C, float* D) {
    int g = grp(), t = tig();
    unsigned a[2], b, c[2], d[2];
    for (int r = 0; r < 2; r++) {
        int row = g + 8 * r;
        a[r] = pack_h(A[row * 8 + 2 * t], A[row * 8 + 2 * t + 1]);
    }
    b = pack_h(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]);
    for (int r = 0; r < 2; r++) {
        int row = g + 8 * r;
        c[r] = pack_h(C[row * 8 + 2 * t], C[row * 8 + 2 * t + 1]);
    }
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3}, {%4}, {%5,%6};"
        : "=r"(d[0]), "=r"(d[1])
        : "r"(a[0]), "r"(a[1]), "r"(b), "r"(c[0]), "r"(c[1]));
    for (int r = 0; r < 2; r++) {
        int row = g + 8 * r;
        D[row * 8 + 2 * t] = __half2float(__ushort_as_half((unsigned short)(d[r] & 0xffff)));
        D[row * 8 + 2 * t + 1] = __half2float(__ushort_as_half((unsigned short)(d[r] >> 16)));
    }
}

// m16n8k16 bf16 -> f32.
__global__ void mma_bf16_k16(const float* A, const float* B, const float* C, float* D) {
    int g = grp(), t = tig();
    unsigned a[4], b[2];
    for (int r = 0; r < 4; r++) {
        int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
        a[r] = pack_bf(A[row * 16 + col], A[row * 16 + col + 1]);
    }
    for (int r = 0; r < 2; r++) {
        int k = 2 * t + 8 * r;
        b[r] = pack_bf(B[k * 8 + g], B[(k + 1) * 8 + g]);
    }
    float c[4], d[4];
    for (int i = 0; i < 4; i++) c[i] = C[cd_row(i) * 8 + cd_col(i)];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
          "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; i++) D[cd_row(i) * 8 + cd_col(i)] = d[i];
}

// m16n8k8 tf32 -> f32. A 16x8: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4).
__global__ void mma_tf32_k8(const float* A, const float* B, const float* C, float* D) {
    int g = grp(), t = tig();
    unsigned a[4], b[2];
    for (int i = 0; i < 4; i++) a[i] = __float_as_uint(A[(g + 8 * (i & 1)) * 8 + t + 4 * (i >> 1)]);
    for (int i = 0; i < 2; i++) b[i] = __float_as_uint(B[(t + 4 * i) * 8 + g]);
    float c[4], d[4];
    for (int i = 0; i < 4; i++) c[i] = C[cd_row(i) * 8 + cd_col(i)];
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
          "f"(c[1]), "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; i++) D[cd_row(i) * 8 + cd_col(i)] = d[i];
}

// m16n8k32 s8 -> s32. A 16x32, B 32x8.
__global__ void mma_s8_k32(const int* A, const int* B, const int* C, int* D) {
    int g = grp(), t = tig();
    unsigned a[4], b[2];
    for (int r = 0; r < 4; r++) {
        int row = g + 8 * (r & 1), col = 4 * t + 16 * (r >> 1);
        a[r] = pack_s8(&A[row * 32 + col]);
    }
    for (int r = 0; r < 2; r++) {
        int v[4];
        for (int q = 0; q < 4; q++) v[q] = B[(4 * t + q + 16 * r) * 8 + g];
        b[r] = pack_s8(v);
    }
    int c[4], d[4];
    for (int i = 0; i < 4; i++) c[i] = C[cd_row(i) * 8 + cd_col(i)];
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]),
          "r"(c[1]), "r"(c[2]), "r"(c[3]));
    for (int i = 0; i < 4; i++) D[cd_row(i) * 8 + cd_col(i)] = d[i];
}

// m8n8k4 f64. A 8x4 (g, t), B 4x8 (t, g), C/D 8x8 (g, 2t + i).
__global__ void mma_f64(const double* A, const double* B, const double* C, double* D) {
    int g = grp(), t = tig();
    double a = A[g * 4 + t], b = B[t * 8 + g], c[2], d[2];
    for (int i = 0; i < 2; i++) c[i] = C[g * 8 + 2 * t + i];
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%5};"
                 : "=d"(d[0]), "=d"(d[1])
                 : "d"(a), "d"(b), "d"(c[0]), "d"(c[1]));
    for (int i = 0; i < 2; i++) D[g * 8 + 2 * t + i] = d[i];
}

// m16n8k16 f16 through shared memory: A by ldmatrix.x4, B (row-major
// k x n) by ldmatrix.x2.trans, D (rounded to f16) out by stmatrix.x2.
__global__ void mma_ldmatrix(const __half* A, const __half* B, const float* C, __half* D) {
    __shared__ __align__(16) __half As[16][16];
    __shared__ __align__(16) __half Bs[16][8];
    __shared__ __align__(16) __half Ds[16][8];
    int l = threadIdx.x;
    for (int i = l; i < 256; i += 32) As[i / 16][i % 16] = A[i];
    for (int i = l; i < 128; i += 32) Bs[i / 8][i % 8] = B[i];
    __syncwarp();
    unsigned a[4], b[2];
    int j = l / 8, r = l % 8;
    unsigned pa = (unsigned)__cvta_generic_to_shared(&As[r + 8 * (j & 1)][8 * (j >> 1)]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(pa));
    unsigned pb = (unsigned)__cvta_generic_to_shared(&Bs[l % 16][0]);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(pb));
    float c[4], d[4];
    for (int i = 0; i < 4; i++) c[i] = C[cd_row(i) * 8 + cd_col(i)];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]),
          "f"(c[1]), "f"(c[2]), "f"(c[3]));
    unsigned dh[2] = {pack_h(d[0], d[1]), pack_h(d[2], d[3])};
    unsigned pd = (unsigned)__cvta_generic_to_shared(&Ds[(l % 16)][0]);
    asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1,%2};" ::"r"(pd), "r"(dh[0]),
                 "r"(dh[1]));
    __syncwarp();
    for (int i = l; i < 128; i += 32) D[i] = Ds[i / 8][i % 8];
}

// Small integers in [-3, 3]: exact in every format and in every sum here.
template <typename T>
static void fill_small(T* p, int n, uint64_t seed) {
    Rng r(seed);
    for (int i = 0; i < n; i++) p[i] = (T)((int)r.below(7) - 3);
}

template <typename T>
static void reference(const T* A, const T* B, const T* C, T* D, int m, int n, int k) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = (double)C[i * n + j];
            for (int q = 0; q < k; q++) s += (double)A[i * k + q] * (double)B[q * n + j];
            D[i * n + j] = (T)s;
        }
}

template <typename T>
static void run(const char* name, void (*kernel)(const T*, const T*, const T*, T*), int m, int n,
                int k) {
    T *hA = new T[m * k], *hB = new T[k * n], *hC = new T[m * n], *hD = new T[m * n],
      *want = new T[m * n];
    fill_small(hA, m * k, 1 + m + k);
    fill_small(hB, k * n, 2 + n + k);
    fill_small(hC, m * n, 3 + m + n);
    reference(hA, hB, hC, want, m, n, k);
    T *dA, *dB, *dC, *dD;
    CHECK(cudaMalloc(&dA, m * k * sizeof(T)));
    CHECK(cudaMalloc(&dB, k * n * sizeof(T)));
    CHECK(cudaMalloc(&dC, m * n * sizeof(T)));
    CHECK(cudaMalloc(&dD, m * n * sizeof(T)));
    CHECK(cudaMemcpy(dA, hA, m * k * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dB, hB, k * n * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dC, hC, m * n * sizeof(T), cudaMemcpyHostToDevice));
    kernel<<<1, 32>>>(dA, dB, dC, dD);
    LAUNCHED(name);
    CHECK(cudaMemcpy(hD, dD, m * n * sizeof(T), cudaMemcpyDeviceToHost));
    if (check_results())
        for (int i = 0; i < m * n; i++)
            EXPECT(hD[i] == want[i], "%s: D[%d][%d] = %g, want %g", name, i / n, i % n,
                   (double)hD[i], (double)want[i]);
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    CHECK(cudaFree(dD));
    delete[] hA;
    delete[] hB;
    delete[] hC;
    delete[] hD;
    delete[] want;
}

int main() {
    first_call(cudaSetDevice(0), "cudaSetDevice");
    run<float>("mma m16n8k16 f16 -> f32", mma_f16_k16, 16, 8, 16);
    run<float>("mma m16n8k8 f16 -> f16", mma_f16_k8_h, 16, 8, 8);
    run<float>("mma m16n8k16 bf16", mma_bf16_k16, 16, 8, 16);
    run<float>("mma m16n8k8 tf32", mma_tf32_k8, 16, 8, 8);
    run<int>("mma m16n8k32 s8", mma_s8_k32, 16, 8, 32);
    run<double>("mma m8n8k4 f64", mma_f64, 8, 8, 4);

    // ldmatrix / stmatrix: the same product through shared memory.
    {
        float fA[256], fB[128], fC[128], want[128];
        fill_small(fA, 256, 11);
        fill_small(fB, 128, 12);
        fill_small(fC, 128, 13);
        reference(fA, fB, fC, want, 16, 8, 16);
        __half hA[256], hB[128], hD[128];
        for (int i = 0; i < 256; i++) hA[i] = __float2half(fA[i]);
        for (int i = 0; i < 128; i++) hB[i] = __float2half(fB[i]);
        __half *dA, *dB, *dD;
        float* dC;
        CHECK(cudaMalloc(&dA, sizeof hA));
        CHECK(cudaMalloc(&dB, sizeof hB));
        CHECK(cudaMalloc(&dC, sizeof fC));
        CHECK(cudaMalloc(&dD, sizeof hD));
        CHECK(cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dB, hB, sizeof hB, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dC, fC, sizeof fC, cudaMemcpyHostToDevice));
        mma_ldmatrix<<<1, 32>>>(dA, dB, dC, dD);
        LAUNCHED("mma_ldmatrix");
        CHECK(cudaMemcpy(hD, dD, sizeof hD, cudaMemcpyDeviceToHost));
        if (check_results())
            for (int i = 0; i < 128; i++)
                EXPECT(__half2float(hD[i]) == want[i], "ldmatrix/stmatrix: D[%d][%d] = %g, want %g",
                       i / 8, i % 8, __half2float(hD[i]), want[i]);
        CHECK(cudaFree(dA));
        CHECK(cudaFree(dB));
        CHECK(cudaFree(dC));
        CHECK(cudaFree(dD));
    }
    pass();
    return 0;
}
