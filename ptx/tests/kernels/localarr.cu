// A per-thread array indexed dynamically (lives in local memory).
extern "C" __global__ void localarr(const int *in, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int a[32];
    for (int k = 0; k < 32; ++k)
        a[k] = in[(i + k) % n] * (k + 1);
    int s = 0;
    int j = i % 32;
    for (int k = 0; k < 64; ++k) {
        s += a[j];
        j = (j * 5 + 3) % 32;
        a[(j + k) % 32] ^= s;
    }
    if (i < n)
        out[i] = s;
}
