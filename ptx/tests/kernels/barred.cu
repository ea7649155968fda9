// Barriers that reduce: __syncthreads_count, __syncthreads_and, __syncthreads_or.
extern "C" __global__ void barred(const int *in, int *out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    int count = __syncthreads_count(v > 0);
    int all = __syncthreads_and(v > -50);
    int any = __syncthreads_or(v == 42);
    out[3 * t + 0] = count;
    out[3 * t + 1] = all;
    out[3 * t + 2] = any;
}
