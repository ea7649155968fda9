// Dynamic parallelism: kernels that launch kernels, copies and fills from
// the device (nvcc -rdc=true). The tests check each against the CPU.

// Each thread of a level writes its value, then (below max_depth) launches
// a grid of `fan` threads one level down over its own part of `out`: a
// complete tree laid out level by level. out[node] = parent's value * 10 +
// the thread's index + 1.
__global__ void tree(int *out, int node, int value, int depth, int max_depth, int fan)
{
    int me = node * fan + 1 + threadIdx.x;  // children of `node` in a fan-ary heap
    if (depth == 0) {
        me = 0;
    }
    int v = value * 10 + (int)threadIdx.x + 1;
    if (depth == 0) {
        v = value;
    }
    out[me] = v;
    if (depth < max_depth) {
        tree<<<1, fan>>>(out, me, v, depth + 1, max_depth, fan);
    }
}

// A child that reads what its parent wrote before launching it and
// scales it into `dst`.
__global__ void scale(const int *src, int *dst, int n, int k)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        dst[i] = src[i] * k;
    }
}

// Sums `a` into `sum` (one thread): as a tail launch it sees what every
// other launch of its parent wrote.
__global__ void total(const int *a, int n, int *sum)
{
    int s = 0;
    for (int i = 0; i < n; i++) {
        s += a[i];
    }
    *sum = s;
}

// Block b's thread 0 fills src[b*per ..] with b*per + i, launches `scale`
// over it into a stream of its own, copies the scaled part on with
// cudaMemcpyAsync in the same stream (so after the kernel), fills `pad`
// with cudaMemsetAsync, and block 0 adds a tail launch that sums `copy`.
__global__ void pipeline(int *src, int *scaled, int *copy, int per, unsigned char *pad, int *sum)
{
    if (threadIdx.x != 0) {
        return;
    }
    int b = blockIdx.x;
    for (int i = 0; i < per; i++) {
        src[b * per + i] = b * per + i;
    }
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    scale<<<(per + 31) / 32, 32, 0, s>>>(src + b * per, scaled + b * per, per, 3);
    cudaMemcpyAsync(copy + b * per, scaled + b * per, per * sizeof(int), cudaMemcpyDeviceToDevice, s);
    cudaMemsetAsync(pad + b * 16, 0x5a, 16, s);
    cudaStreamDestroy(s);
    if (b == 0) {
        total<<<1, 1, 0, cudaStreamTailLaunch>>>(copy, per * gridDim.x, sum);
    }
}

__global__ void empty_kernel() {}

// The errors of the device runtime, each read with cudaGetLastError:
// [0] a block of 2048 threads (invalid configuration), [1] the error
// cleared, [2] peeked after another bad launch, [3] still there, [4] a
// device-side cudaMalloc and cudaFree (0 when both worked), [5] a launch
// that worked.
__global__ void errors(int *codes)
{
    empty_kernel<<<1, 2048>>>();
    codes[0] = (int)cudaGetLastError();
    codes[1] = (int)cudaGetLastError();
    empty_kernel<<<dim3(1, 1, 1), dim3(1, 1, 128)>>>();
    codes[2] = (int)cudaPeekAtLastError();
    codes[3] = (int)cudaGetLastError();
    int *p = nullptr;
    cudaError_t e = cudaMalloc((void **)&p, 64 * sizeof(int));
    if (e == cudaSuccess && p != nullptr) {
        for (int i = 0; i < 64; i++) {
            p[i] = i;
        }
        int s = 0;
        for (int i = 0; i < 64; i++) {
            s += p[i];
        }
        e = s == 2016 ? cudaFree(p) : cudaErrorUnknown;
    }
    codes[4] = (int)e;
    empty_kernel<<<1, 1>>>();
    codes[5] = (int)cudaGetLastError();
}

// Recurses one grid per level until a launch fails; level[d] = the error
// of the launch made at depth d (0 where it worked).
__global__ void deep(int *level, int depth)
{
    deep<<<1, 1>>>(level, depth + 1);
    level[depth] = (int)cudaGetLastError();
}

// Each thread launches one empty grid and records the launch's error.
__global__ void fan_out(int *codes)
{
    empty_kernel<<<1, 1>>>();
    codes[threadIdx.x] = (int)cudaGetLastError();
}
