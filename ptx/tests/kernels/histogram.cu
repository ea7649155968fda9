// 256-bin histogram: per-block counts in shared memory, merged with global atomics.
extern "C" __global__ void histogram(const unsigned char *data, unsigned n, unsigned *bins)
{
    __shared__ unsigned local[256];
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x)
        local[b] = 0;
    __syncthreads();
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        atomicAdd(&local[data[i]], 1u);
    __syncthreads();
    for (unsigned b = threadIdx.x; b < 256; b += blockDim.x)
        if (local[b])
            atomicAdd(&bins[b], local[b]);
}

// Other atomics on global memory.
extern "C" __global__ void atomics(int *ints, unsigned long long *u64s, float *f, double *d, unsigned *ctr)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    atomicMax(&ints[0], t * 3 - 50);
    atomicMin(&ints[1], 100 - t);
    atomicAnd(&ints[2], ~(1 << (t % 31)));
    atomicOr(&ints[3], 1 << (t % 31));
    atomicXor(&ints[4], t);
    atomicAdd(&u64s[0], (unsigned long long)t * 1000000007ull);
    atomicCAS(&u64s[1], 0ull, (unsigned long long)t + 1);
    atomicAdd(&f[0], 0.5f);
    atomicAdd(&d[0], 0.25);
    atomicInc(&ctr[0], 9u);
    atomicDec(&ctr[1], 5u);
    atomicExch(&ctr[2], (unsigned)t);
}
