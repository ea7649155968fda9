// Cooperative groups' grid-wide barrier (the driver's grid workspace,
// through %envreg1/2): each round, every block writes its partial sum,
// the grid synchronizes, and every block adds up the partials of the
// blocks after it, which only a grid where all blocks are resident (a
// cooperative launch) can have written. Three rounds reuse the barrier.
// Built with the CCCL headers cooperative_groups needs (regen.sh's
// NVCC_FLAGS).
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

extern "C" __global__ void grid_rounds(const int *in, int n, long long *partial, long long *out)
{
    cg::grid_group grid = cg::this_grid();
    __shared__ long long acc;
    const unsigned nb = gridDim.x;
    for (int round = 0; round < 3; ++round) {
        long long mine = 0;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
            mine += (long long)in[i] * (round + 1);
        if (threadIdx.x == 0)
            acc = 0;
        __syncthreads();
        atomicAdd((unsigned long long *)&acc, (unsigned long long)mine);
        __syncthreads();
        if (threadIdx.x == 0)
            partial[round * nb + blockIdx.x] = acc;
        grid.sync();
        if (threadIdx.x == 0) {
            long long s = 0;
            for (unsigned b = blockIdx.x; b < nb; ++b)
                s += partial[round * nb + b];
            out[round * nb + blockIdx.x] = s;
        }
        grid.sync();
    }
}
