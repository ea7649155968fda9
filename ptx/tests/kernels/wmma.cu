// Tensor-core matrix products through the wmma API: one warp computes a
// tile D = A * B + C per launch block, for f16 (f32 and f16
// accumulators), bf16, tf32, 8-bit integers and f64, with row- and
// column-major operands, and an elementwise scaling of the accumulator
// fragment between load and multiply. Built with the CCCL headers
// cuda_fp16.h needs (regen.sh's NVCC_FLAGS).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

// 16x16x16, f16 inputs (A row-major, B column-major), f32 accumulator.
extern "C" __global__ void mma_f16_f32(const half *a, const half *b, const float *c, float *d)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    for (int i = 0; i < fc.num_elements; i++)
        fc.x[i] *= 0.5f;
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_col_major);
}

// 32x8x16, f16 accumulator, stored row-major with a leading dimension of 12.
extern "C" __global__ void mma_f16_f16(const half *a, const half *b, const half *c, half *d)
{
    wmma::fragment<wmma::matrix_a, 32, 8, 16, half, wmma::col_major> fa;
    wmma::fragment<wmma::matrix_b, 32, 8, 16, half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 32, 8, 16, half> fc;
    wmma::load_matrix_sync(fa, a, 32);
    wmma::load_matrix_sync(fb, b, 8);
    wmma::load_matrix_sync(fc, c, 8, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 12, wmma::mem_row_major);
}

extern "C" __global__ void mma_bf16(const __nv_bfloat16 *a, const __nv_bfloat16 *b, float *d)
{
    wmma::fragment<wmma::matrix_a, 8, 32, 16, __nv_bfloat16, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 8, 32, 16, __nv_bfloat16, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 8, 32, 16, float> fc;
    wmma::fill_fragment(fc, 1.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 32);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 32, wmma::mem_row_major);
}

extern "C" __global__ void mma_tf32(const float *a, const float *b, float *d)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 8);
    wmma::load_matrix_sync(fb, b, 16);
    for (int i = 0; i < fa.num_elements; i++)
        fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
    for (int i = 0; i < fb.num_elements; i++)
        fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

extern "C" __global__ void mma_s8(const signed char *a, const signed char *b, const int *c, int *d)
{
    wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc;
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::load_matrix_sync(fc, c, 16, wmma::mem_row_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 16, wmma::mem_row_major);
}

extern "C" __global__ void mma_f64(const double *a, const double *b, const double *c, double *d)
{
    wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 8, 8, 4, double> fc;
    wmma::load_matrix_sync(fa, a, 4);
    wmma::load_matrix_sync(fb, b, 4);
    wmma::load_matrix_sync(fc, c, 8, wmma::mem_col_major);
    wmma::mma_sync(fc, fa, fb, fc);
    wmma::store_matrix_sync(d, fc, 8, wmma::mem_row_major);
}

// A 32x32 tile of D = A * B + C with K = 64 staged through shared memory,
// as NVIDIA's cudaTensorCoreGemm stages its tiles: four warps, each a
// 16x16 quarter; A row-major and B column-major copied in with int4
// loads, C loaded from global memory, D stored to shared memory with a
// padded stride and copied out.
extern "C" __global__ void gemm_shared(const half *a, const half *b, const float *c, float *d)
{
    __shared__ __align__(32) half  sa[32 * 64];
    __shared__ __align__(32) half  sb[32 * 64];
    __shared__ __align__(32) float sd[32 * 36];
    int t = threadIdx.x;
    for (int i = t; i < 256; i += blockDim.x) {
        reinterpret_cast<int4 *>(sa)[i] = reinterpret_cast<const int4 *>(a)[i];
        reinterpret_cast<int4 *>(sb)[i] = reinterpret_cast<const int4 *>(b)[i];
    }
    __syncthreads();
    int warp = t / 32, wi = warp / 2, wj = warp % 2;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, c + wi * 16 * 32 + wj * 16, 32, wmma::mem_row_major);
    for (int k = 0; k < 64; k += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, sa + wi * 16 * 64 + k, 64);
        wmma::load_matrix_sync(fb, sb + wj * 16 * 64 + k, 64);
        wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(sd + wi * 16 * 36 + wj * 16, acc, 36, wmma::mem_row_major);
    __syncthreads();
    for (int i = t; i < 32 * 32; i += blockDim.x)
        d[i] = sd[(i / 32) * 36 + i % 32];
}
