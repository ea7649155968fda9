// Half-precision arithmetic as cuda_fp16.h emits it (inline PTX on
// 16-bit and 32-bit registers; the header itself needs CCCL).
typedef unsigned short half_t;
typedef unsigned int half2_t;

#define H2(op, d, a, b) asm(op " %0, %1, %2;" : "=h"(d) : "h"(a), "h"(b))
#define H3(op, d, a, b, c) asm(op " %0, %1, %2, %3;" : "=h"(d) : "h"(a), "h"(b), "h"(c))
#define X2(op, d, a, b) asm(op " %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b))
#define X3(op, d, a, b, c) asm(op " %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c))

extern "C" __global__ void half_ops(const half_t *a, const half_t *b, half_t *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    half_t x = a[i], y = b[i], r, tenth;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(tenth) : "f"(0.1f));
    H2("add.f16", r, x, y);
    out[8 * i + 0] = r;
    H2("sub.f16", r, x, y);
    out[8 * i + 1] = r;
    H2("mul.f16", r, x, y);
    out[8 * i + 2] = r;
    H3("fma.rn.f16", r, x, y, tenth);
    out[8 * i + 3] = r;
    H2("max.f16", r, x, y);
    out[8 * i + 4] = r;
    H2("min.f16", r, x, y);
    out[8 * i + 5] = r;
    unsigned short lt;
    asm("{.reg .pred p; setp.lt.f16 p, %1, %2; selp.u16 %0, 1, 0, p;}" : "=h"(lt) : "h"(x), "h"(y));
    asm("neg.f16 %0, %1;" : "=h"(r) : "h"(x));
    half_t ab;
    asm("abs.f16 %0, %1;" : "=h"(ab) : "h"(y));
    out[8 * i + 6] = lt ? r : ab;
    H3("fma.rn.sat.f16", r, x, y, tenth);
    out[8 * i + 7] = r;
}

extern "C" __global__ void half2_ops(const half2_t *a, const half2_t *b, half2_t *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    half2_t x = a[i], y = b[i], sq, r;
    X2("mul.f16x2", sq, x, x);
    X3("fma.rn.f16x2", r, x, y, sq);
    out[2 * i + 0] = r;
    X2("add.f16x2", r, x, y);
    X2("sub.f16x2", r, r, sq);
    out[2 * i + 1] = r;
}
