// Texture and surface object kernels (tests/textures.rs). Each thread does
// one lookup, so that the test can drive every address mode, filter and
// format through the same code.
#include <cuda_runtime.h>

extern "C" __global__ void fetch1d(cudaTextureObject_t t, const int* idx, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<float4>(t, idx[i]);
}

extern "C" __global__ void fetch1d_int(cudaTextureObject_t t, const int* idx, int4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<int4>(t, idx[i]);
}

extern "C" __global__ void sample1d(cudaTextureObject_t t, const float* x, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1D<float4>(t, x[i]);
}

extern "C" __global__ void sample2d(cudaTextureObject_t t, const float2* p, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float4>(t, p[i].x, p[i].y);
}

// A scalar float read of a one-channel texture.
extern "C" __global__ void sample2d_scalar(cudaTextureObject_t t, const float2* p, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float>(t, p[i].x, p[i].y);
}

extern "C" __global__ void sample2d_uint(cudaTextureObject_t t, const float2* p, uint4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<uint4>(t, p[i].x, p[i].y);
}

extern "C" __global__ void sample2d_int(cudaTextureObject_t t, const float2* p, int4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<int4>(t, p[i].x, p[i].y);
}

// tex2D with the residency flag of sparse arrays (`d|p`).
extern "C" __global__ void sample2d_resident(cudaTextureObject_t t, const float2* p, float4* out, int* resident, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        bool r = false;
        out[i] = tex2D<float4>(t, p[i].x, p[i].y, &r);
        resident[i] = r;
    }
}

// tex2DLod and tex2DGrad: level 0 of a texture without mipmaps.
extern "C" __global__ void sample2d_lod_grad(cudaTextureObject_t t, const float2* p, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = p[i].x, y = p[i].y;
        out[2 * i] = tex2DLod<float4>(t, x, y, 1.5f);
        out[2 * i + 1] = tex2DGrad<float4>(t, x, y, make_float2(x, 0.5f), make_float2(0.25f, y));
    }
}

extern "C" __global__ void sample3d(cudaTextureObject_t t, const float4* p, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex3D<float4>(t, p[i].x, p[i].y, p[i].z);
}

extern "C" __global__ void sample1d_layered(cudaTextureObject_t t, const float* x, const int* layer, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1DLayered<float4>(t, x[i], layer[i]);
}

extern "C" __global__ void sample2d_layered(cudaTextureObject_t t, const float2* p, const int* layer, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2DLayered<float4>(t, p[i].x, p[i].y, layer[i]);
}

extern "C" __global__ void sample_cube(cudaTextureObject_t t, const float4* d, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = texCubemap<float4>(t, d[i].x, d[i].y, d[i].z);
}

extern "C" __global__ void sample_cube_layered(cudaTextureObject_t t, const float4* d, const int* layer, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = texCubemapLayered<float4>(t, d[i].x, d[i].y, d[i].z, layer[i]);
}

// tex2Dgather of each component: out[4 * i + comp].
extern "C" __global__ void gather2d(cudaTextureObject_t t, const float2* p, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float x = p[i].x, y = p[i].y;
        out[4 * i] = tex2Dgather<float4>(t, x, y, 0);
        out[4 * i + 1] = tex2Dgather<float4>(t, x, y, 1);
        out[4 * i + 2] = tex2Dgather<float4>(t, x, y, 2);
        out[4 * i + 3] = tex2Dgather<float4>(t, x, y, 3);
    }
}

extern "C" __global__ void gather2d_uint(cudaTextureObject_t t, const float2* p, uint4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2Dgather<uint4>(t, p[i].x, p[i].y, 3);
}

// txq and suq have no CUDA C++ function; they are reached through asm.
#define TXQ(q)                                                      \
    __device__ int txq_##q(unsigned long long t) {                  \
        int r;                                                      \
        asm volatile("txq." #q ".b32 %0, [%1];" : "=r"(r) : "l"(t)); \
        return r;                                                   \
    }
#define SUQ(q)                                                      \
    __device__ int suq_##q(unsigned long long s) {                  \
        int r;                                                      \
        asm volatile("suq." #q ".b32 %0, [%1];" : "=r"(r) : "l"(s)); \
        return r;                                                   \
    }
TXQ(width)
TXQ(height)
TXQ(depth)
TXQ(channel_data_type)
TXQ(channel_order)
TXQ(normalized_coords)
TXQ(filter_mode)
TXQ(addr_mode_0)
TXQ(addr_mode_1)
TXQ(addr_mode_2)
TXQ(array_size)
TXQ(num_mipmap_levels)
TXQ(num_samples)
SUQ(width)
SUQ(height)
SUQ(depth)
SUQ(channel_data_type)
SUQ(channel_order)
SUQ(array_size)
SUQ(memory_layout)

extern "C" __global__ void queries(cudaTextureObject_t t, cudaSurfaceObject_t s, int* out) {
    out[0] = txq_width(t);
    out[1] = txq_height(t);
    out[2] = txq_depth(t);
    out[3] = txq_channel_data_type(t);
    out[4] = txq_channel_order(t);
    out[5] = txq_normalized_coords(t);
    out[6] = txq_filter_mode(t);
    out[7] = txq_addr_mode_0(t);
    out[8] = txq_addr_mode_1(t);
    out[9] = txq_addr_mode_2(t);
    out[10] = txq_array_size(t);
    out[11] = txq_num_mipmap_levels(t);
    out[12] = txq_num_samples(t);
    out[13] = suq_width(s);
    out[14] = suq_height(s);
    out[15] = suq_depth(s);
    out[16] = suq_channel_data_type(s);
    out[17] = suq_channel_order(s);
    out[18] = suq_array_size(s);
    out[19] = suq_memory_layout(s);
}

// dst(x, y) = 2 * src(x, y) + 1 over a float surface.
extern "C" __global__ void surf2d_float(cudaSurfaceObject_t src, cudaSurfaceObject_t dst, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        float v = surf2Dread<float>(src, x * 4, y);
        surf2Dwrite(2.0f * v + 1.0f, dst, x * 4, y);
    }
}

// Reverses the channels of a uchar4 surface in place.
extern "C" __global__ void surf2d_uchar4(cudaSurfaceObject_t s, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        uchar4 v = surf2Dread<uchar4>(s, x * 4, y);
        surf2Dwrite(make_uchar4(v.w, v.z, v.y, v.x), s, x * 4, y);
    }
}

extern "C" __global__ void surf1d_int(cudaSurfaceObject_t s, int w) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < w) surf1Dwrite(surf1Dread<int>(s, x * 4) * 3 + x, s, x * 4);
}

extern "C" __global__ void surf2d_long(cudaSurfaceObject_t s, int w, int h) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
    if (x < w && y < h) {
        long long v = surf2Dread<long long>(s, x * 8, y);
        surf2Dwrite(v * 5 - ((long long)y << 40), s, x * 8, y);
    }
}

extern "C" __global__ void surf3d_float2(cudaSurfaceObject_t s, int w, int h, int d) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, z = blockIdx.z;
    if (x < w && y < h && z < d) {
        float2 v = surf3Dread<float2>(s, x * 8, y, z);
        surf3Dwrite(make_float2(v.y + z, v.x - y), s, x * 8, y, z);
    }
}

extern "C" __global__ void surf1d_layered_ushort(cudaSurfaceObject_t s, int w, int layers) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, l = blockIdx.y;
    if (x < w && l < layers) {
        unsigned short v = surf1DLayeredread<unsigned short>(s, x * 2, l);
        surf1DLayeredwrite((unsigned short)(v ^ (l * 257 + x)), s, x * 2, l);
    }
}

extern "C" __global__ void surf2d_layered_int4(cudaSurfaceObject_t s, int w, int h, int layers) {
    int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y, l = blockIdx.z;
    if (x < w && y < h && l < layers) {
        int4 v = surf2DLayeredread<int4>(s, x * 16, y, l);
        surf2DLayeredwrite(make_int4(v.w, v.x + l, v.y - y, v.z * 2), s, x * 16, y, l);
    }
}

// Cubemap surfaces are layered 2D surfaces of six faces.
extern "C" __global__ void surf_cube(cudaSurfaceObject_t s, int w) {
    int x = threadIdx.x, y = threadIdx.y, face = blockIdx.x;
    if (x < w && y < w) {
        float v = surfCubemapread<float>(s, x * 4, y, face);
        surfCubemapwrite(v + 100.0f * face, s, x * 4, y, face);
    }
}

// Reads at arbitrary byte coordinates with the zero and clamp boundary
// modes, then stores 7 there in zero mode (dropped when out of range).
extern "C" __global__ void surf_modes(cudaSurfaceObject_t s, const int2* p, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int x = p[i].x, y = p[i].y;
        out[2 * i] = surf2Dread<int>(s, x, y, cudaBoundaryModeZero);
        out[2 * i + 1] = surf2Dread<int>(s, x, y, cudaBoundaryModeClamp);
    }
}

extern "C" __global__ void surf_store_modes(cudaSurfaceObject_t s, const int2* p, int n, int clamp) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        if (clamp) {
            surf2Dwrite(i + 1, s, p[i].x, p[i].y, cudaBoundaryModeClamp);
        } else {
            surf2Dwrite(i + 1, s, p[i].x, p[i].y, cudaBoundaryModeZero);
        }
    }
}

// The default (trap) boundary mode.
extern "C" __global__ void surf_trap(cudaSurfaceObject_t s, int x, int y, int* out) {
    out[0] = surf2Dread<int>(s, x, y);
}
