// Block sums: shared-memory tree with barriers, and warp shuffles.
extern "C" __global__ void reduce_shared(const unsigned *in, unsigned *out, unsigned n)
{
    extern __shared__ unsigned sdata[];
    unsigned tid = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x * 2 + threadIdx.x;
    unsigned v = 0;
    if (i < n) v = in[i];
    if (i + blockDim.x < n) v += in[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s)
            sdata[tid] += sdata[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        out[blockIdx.x] = sdata[0];
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void reduce_shfl(const float *in, float *out, int n)
{
    __shared__ float partial[32];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? in[i] : 0.0f;
    v = warp_sum(v);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (blockDim.x + 31) / 32 ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) out[blockIdx.x] = v;
    }
}

// Votes and the other shuffles.
extern "C" __global__ void warp_ops(const int *in, unsigned *out)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    int v = in[t];
    unsigned ballot = __ballot_sync(0xffffffffu, v > 0);
    int all = __all_sync(0xffffffffu, v > -100);
    int any = __any_sync(0xffffffffu, v == 7);
    int up = __shfl_up_sync(0xffffffffu, v, 3);
    int x = __shfl_xor_sync(0xffffffffu, v, 5);
    int idx = __shfl_sync(0xffffffffu, v, (threadIdx.x * 7) & 31);
    int w8 = __shfl_down_sync(0xffffffffu, v, 2, 8);
    unsigned act = 0;
    if (v & 1) act = __activemask();
    out[t * 8 + 0] = ballot;
    out[t * 8 + 1] = all;
    out[t * 8 + 2] = any;
    out[t * 8 + 3] = up;
    out[t * 8 + 4] = x;
    out[t * 8 + 5] = idx;
    out[t * 8 + 6] = w8;
    out[t * 8 + 7] = act;
}
