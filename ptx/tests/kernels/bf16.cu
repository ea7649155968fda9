// bfloat16 arithmetic through cuda_bf16.h. sm_80 lowers add, sub and mul
// to fma and compares in f32; sm_90 has add/sub/mul/setp on bf16.
#include <cuda_bf16.h>

typedef __nv_bfloat16 bf;
typedef __nv_bfloat162 bf2;

#define NOUT 12

extern "C" __global__ void bf16_ops(const bf *a, const bf *b, const bf *c, const float *f,
                                    bf *out, float *wide, int *cmp, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bf x = a[i], y = b[i], z = c[i];
    bf *o = out + NOUT * i;
    o[0] = __hadd(x, y);
    o[1] = __hsub(x, y);
    o[2] = __hmul(x, y);
    o[3] = __hfma(x, y, z);
    o[4] = __hfma_relu(x, y, z);
    o[5] = __hneg(x);
    o[6] = __habs(y);
    o[7] = __hmin(x, y);
    o[8] = __hmax(x, y);
    o[9] = __hmin_nan(x, y);
    o[10] = __hmax_nan(x, y);
    o[11] = __float2bfloat16_rn(f[i]);
    wide[i] = __bfloat162float(x);
    cmp[i] = __hlt(x, y) | (__hgt(x, y) << 1) | (__heq(x, y) << 2);
}

#define NOUT2 10

extern "C" __global__ void bf16x2_ops(const bf2 *a, const bf2 *b, const bf2 *c, const float *f,
                                      bf2 *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    bf2 x = a[i], y = b[i], z = c[i];
    bf2 *o = out + NOUT2 * i;
    o[0] = __hadd2(x, y);
    o[1] = __hsub2(x, y);
    o[2] = __hmul2(x, y);
    o[3] = __hfma2(x, y, z);
    o[4] = __hfma2_relu(x, y, z);
    o[5] = __hneg2(x);
    o[6] = __habs2(y);
    o[7] = __hmin2(x, y);
    o[8] = __hmax2_nan(x, y);
    o[9] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
}
