// Device functions that nvcc does not inline, one with a local array, and
// the double-precision sine (whose argument reduction is a called function).
__device__ __noinline__ int collatz_steps(unsigned long long x, int limit)
{
    int steps = 0;
    while (x != 1 && steps < limit) {
        x = (x & 1) ? 3 * x + 1 : x / 2;
        ++steps;
    }
    return steps;
}

__device__ __noinline__ float poly(const float *c, int n, float x)
{
    float buf[8];
    for (int k = 0; k < 8; ++k)
        buf[k] = k < n ? c[k] : 0.0f;
    float acc = 0.0f;
    for (int k = 7; k >= 0; --k)
        acc = acc * x + buf[(k * 3) & 7];
    return acc;
}

extern "C" __global__ void calls(const float *coef, int *steps, float *vals, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        steps[i] = collatz_steps((unsigned long long)i + 1, 500);
        if (i & 1)
            vals[i] = poly(coef, 8, (float)i * 0.01f);
        else
            vals[i] = poly(coef, i % 8, (float)i * -0.01f);
    }
}

extern "C" __global__ void dsin(const double *x, double *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = sin(x[i]);
}
