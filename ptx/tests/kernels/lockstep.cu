// Warp-synchronous code written for warps that run in lockstep, as CuPy's
// sort and partition kernels are: a warp sorts 64 keys at a time with a
// bitonic network and no __syncwarp between the network's steps. It is
// right only if the threads that skip a step's conditional swap wait for
// the ones that take it, as a GPU's reconvergence after the branch makes
// them. The network is unrolled: the threads that skip a swap find the
// next step's code ahead of them, not behind a loop's back edge.
extern "C" __global__ void warp_bitonic(volatile int *keys, int segments)
{
    int lane = threadIdx.x % 32;
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int warps = gridDim.x * blockDim.x / 32;
    for (int seg = warp; seg < segments; seg += warps) {
        volatile int *a = keys + seg * 64;
#pragma unroll
        for (int s = 2; s <= 64; s *= 2) {
#pragma unroll
            for (int w = s / 2; w >= 1; w /= 2) {
                // The lane's pair of this step: n and n + w.
                int n = lane + (lane & -w);
                int u = a[n], v = a[n + w];
                bool up = (n & s) == 0;
                if (up ? u > v : u < v) {
                    a[n] = v;
                    a[n + w] = u;
                }
            }
        }
    }
}
