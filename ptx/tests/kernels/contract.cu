// Products whose one use is a subtraction, which NVVM leaves as a `mul`
// and a `sub` with no rounding modifier and ptxas contracts into a fused
// multiply-add (a remainder, as CuPy computes it), beside the same
// arithmetic through the round-to-nearest intrinsics, which it must not.
extern "C" __global__ void remainders(const double *x, const double *y, const double *z,
                                      double *out, const float *fx, const float *fy,
                                      float *fout, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    double q = floor(x[i] / y[i]);
    out[4 * i] = x[i] - q * y[i];
    out[4 * i + 1] = __dsub_rn(x[i], __dmul_rn(q, y[i]));
    out[4 * i + 2] = x[i] * z[i] - y[i];
    out[4 * i + 3] = __dsub_rn(__dmul_rn(x[i], z[i]), y[i]);
    float fq = floorf(fx[i] / fy[i]);
    fout[2 * i] = fx[i] - fq * fy[i];
    fout[2 * i + 1] = __fsub_rn(fx[i], __fmul_rn(fq, fy[i]));
}
