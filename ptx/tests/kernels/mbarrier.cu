// Split barriers in shared memory (mbarrier), as libcu++'s cuda::barrier
// emits them for sm_80: phases reused many times, arrive_and_drop, a
// token waited for later, and cuda::memcpy_async completing on a barrier
// (cp.async with cp.async.mbarrier.arrive). Built with the CCCL headers
// (regen.sh's NVCC_FLAGS).
#pragma nv_diag_suppress static_var_with_dynamic_init
#include <cooperative_groups.h>
#include <cuda/barrier>

using block_barrier = cuda::barrier<cuda::thread_scope_block>;

// Four rounds: every thread writes its slot, waits for all, then reads
// its neighbour's; from round 2 on, threads whose index is a multiple of
// 4 have dropped out (their slots keep round 1's values).
extern "C" __global__ void rounds(int *out)
{
    __shared__ block_barrier bar;
    __shared__ int slot[256];
    const int t = threadIdx.x, n = blockDim.x;
    if (t == 0)
        init(&bar, n);
    __syncthreads();
    int acc = 0;
    for (int r = 1; r <= 4; ++r) {
        if (r > 1 && t % 4 == 0)
            break;
        slot[t] = r * 1000 + t;
        bar.arrive_and_wait();
        acc += slot[(t + 1) % n];
        if (r == 1 && t % 4 == 0) {
            bar.arrive_and_drop();
        } else {
            // Arrive now, wait later: the token names this phase.
            auto token = bar.arrive();
            acc += 1;
            bar.wait(std::move(token));
        }
    }
    out[blockIdx.x * n + t] = acc;
}

// Each block copies its tile into shared memory asynchronously, waits on
// the barrier the copy completes, and writes the tile reversed.
extern "C" __global__ void async_copy(const float *in, float *out)
{
    __shared__ block_barrier bar;
    __shared__ float tile[128];
    auto block = cooperative_groups::this_thread_block();
    if (block.thread_rank() == 0)
        init(&bar, block.size());
    block.sync();
    const float *src = in + blockIdx.x * 128;
    cuda::memcpy_async(block, tile, src, sizeof(tile), bar);
    bar.arrive_and_wait();
    out[blockIdx.x * 128 + threadIdx.x] = tile[127 - threadIdx.x] * 2.0f;
}
