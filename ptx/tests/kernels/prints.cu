// Device-side printf and assert, as the CUDA runtime provides them.
#include <cassert>
#include <cstdio>

extern "C" __global__ void prints(const int* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        printf("thread %d of block %d: v=%d %5.2f %s|%c|%lld|%x\n", threadIdx.x, blockIdx.x, v[i],
               v[i] * 0.5, i % 2 ? "odd" : "even", 'A' + i, (long long)v[i] << 33, v[i]);
    }
}

extern "C" __global__ void checks(const int* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) assert(v[i] >= 0);
}
