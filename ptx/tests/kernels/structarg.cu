// A struct passed by value, and module-scope __device__ / __constant__ variables.
struct Affine {
    float scale;
    float shift;
    int stride;
    double bias;
    unsigned char tag;
};

__constant__ float coeffs[4] = {1.0f, 0.5f, 0.25f, 0.125f};
__device__ unsigned launches = 0;
__device__ int table[8] = {3, 1, 4, 1, 5, 9, 2, 6};

extern "C" __global__ void affine(Affine p, const float *in, double *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0)
        atomicAdd(&launches, 1u);
    if (i < n) {
        float x = in[i * p.stride] * p.scale + p.shift;
        x *= coeffs[i & 3];
        out[i] = (double)x + p.bias + p.tag + table[i & 7];
    }
}

extern "C" __global__ void read_launches(unsigned *out)
{
    *out = launches;
}
