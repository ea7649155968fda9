// Double precision: fma chains, division, sqrt, conversions.
extern "C" __global__ void fp64(const double *x, double *y, float *yf, long long *yi, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double v = x[i];
    double acc = 0.0;
    for (int k = 0; k < 5; ++k)
        acc = fma(acc, v, (double)k);
    y[4 * i + 0] = acc;
    y[4 * i + 1] = v / (1.0 + v * v);
    y[4 * i + 2] = sqrt(fabs(v));
    y[4 * i + 3] = fmin(v, 0.5) + fmax(v, -0.5);
    yf[i] = (float)v;
    yi[i] = (long long)(v * 1000.0);
}

// Single-precision ops with rounding modes and conversions.
extern "C" __global__ void fp32(const float *x, float *y, int *yi, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    y[8 * i + 0] = v / 3.0f;
    y[8 * i + 1] = sqrtf(fabsf(v));
    y[8 * i + 2] = __fmul_rz(v, 1.1f);
    y[8 * i + 3] = __fadd_rd(v, 0.3f);
    y[8 * i + 4] = rintf(v);
    y[8 * i + 5] = floorf(v) + ceilf(v) + truncf(v);
    y[8 * i + 6] = __int2float_rz(i * 123457);
    y[8 * i + 7] = fminf(v, 1.0f) * fmaxf(v, -1.0f);
    yi[2 * i + 0] = __float2int_rn(v);
    yi[2 * i + 1] = (int)(unsigned)(v * 100.0f);
}
