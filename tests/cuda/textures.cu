// CUDA arrays, 2D/3D copies, texture and surface objects, checked against
// the CPU: pitched device memory (cudaMallocPitch, cudaMemcpy2D with
// offsets, cudaMalloc3D + cudaMemcpy3D), 2D arrays read through textures
// with point and linear filtering, unnormalized and normalized coordinates
// and every address mode, 8-bit data read as normalized floats, integer
// fetches from linear memory (tex1Dfetch), 3D, layered and cubemap arrays,
// and a surface written by one kernel and read by another. Texture
// coordinates are chosen so that linear-filter weights are exact in the
// hardware's 8-bit fixed point, so the CPU's answer is the GPU's.
#define PROGRAM "textures"
#include "common.h"

#include <cmath>
#include <vector>

constexpr int W = 16;
constexpr int H = 8;

__global__ void sample2d(cudaTextureObject_t t, const float2* at, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float>(t, at[i].x, at[i].y);
}

__global__ void sample2d4(cudaTextureObject_t t, const float2* at, float4* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex2D<float4>(t, at[i].x, at[i].y);
}

__global__ void fetch1d(cudaTextureObject_t t, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = tex1Dfetch<int>(t, i - 2);
}

__global__ void sample3d(cudaTextureObject_t t, float* out, int w, int h, int d) {
    int x = threadIdx.x, y = threadIdx.y, z = blockIdx.x;
    if (x < w && y < h && z < d) out[(z * h + y) * w + x] = tex3D<float>(t, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void sample_layered(cudaTextureObject_t t, float* out, int w, int h, int layers) {
    int x = threadIdx.x, y = threadIdx.y, l = blockIdx.x;
    if (x < w && y < h && l < layers)
        out[(l * h + y) * w + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l);
}

__global__ void sample_cube(cudaTextureObject_t t, const float4* dir, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = texCubemap<float>(t, dir[i].x, dir[i].y, dir[i].z);
}

__global__ void surf_fill(cudaSurfaceObject_t s, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) surf2Dwrite((float)(x * 3 + y * 100), s, x * (int)sizeof(float), y);
}

__global__ void surf_double(cudaSurfaceObject_t s, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) {
        float v = surf2Dread<float>(s, x * (int)sizeof(float), y);
        surf2Dwrite(v * 2.0f + 1.0f, s, x * (int)sizeof(float), y);
    }
}

__global__ void add_pitched(float* p, size_t pitch, int w, int h) {
    int x = threadIdx.x, y = blockIdx.x;
    if (x < w && y < h) {
        float* row = (float*)((char*)p + y * pitch);
        row[x] += 1000.0f;
    }
}

static float texel(int x, int y) { return (float)(x * 3 + y * 50) + 0.25f; }

static bool close(float a, float b) { return std::fabs(a - b) <= 1e-4f * (1.0f + std::fabs(b)); }

template <typename T>
static T* to_device(const std::vector<T>& v) {
    T* d = nullptr;
    CHECK(cudaMalloc(&d, v.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
static std::vector<T> from_device(const T* d, size_t n) {
    std::vector<T> v(n);
    CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

static void pitched_copies() {
    float* d = nullptr;
    size_t pitch = 0;
    CHECK(cudaMallocPitch((void**)&d, &pitch, W * sizeof(float), H));
    EXPECT(pitch >= W * sizeof(float) && pitch % 32 == 0, "pitch %zu", pitch);
    std::vector<float> host(W * H);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) host[y * W + x] = texel(x, y);
    CHECK(cudaMemcpy2D(d, pitch, host.data(), W * sizeof(float), W * sizeof(float), H,
                       cudaMemcpyHostToDevice));
    add_pitched<<<H, W>>>(d, pitch, W, H);
    CHECK(cudaGetLastError());
    std::vector<float> back(W * H, -1.0f);
    CHECK(cudaMemcpy2D(back.data(), W * sizeof(float), d, pitch, W * sizeof(float), H,
                       cudaMemcpyDeviceToHost));
    for (int i = 0; i < W * H; i++)
        EXPECT(back[i] == host[i] + 1000.0f, "pitched [%d] = %g, want %g", i, back[i], host[i] + 1000.0f);
    // A sub-rectangle: columns 3..8 of rows 2..5, into a host buffer with
    // its own pitch (10 floats) at column 1.
    std::vector<float> sub(10 * 4, -7.0f);
    CHECK(cudaMemcpy2D(sub.data() + 1, 10 * sizeof(float), (char*)d + 2 * pitch + 3 * sizeof(float),
                       pitch, 6 * sizeof(float), 4, cudaMemcpyDeviceToHost));
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 10; x++) {
            float want = (x >= 1 && x < 7) ? texel(x - 1 + 3, y + 2) + 1000.0f : -7.0f;
            EXPECT(sub[y * 10 + x] == want, "sub (%d,%d) = %g, want %g", x, y, sub[y * 10 + x], want);
        }
    // Device to device between pitched allocations.
    float* e = nullptr;
    size_t epitch = 0;
    CHECK(cudaMallocPitch((void**)&e, &epitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(e, epitch, d, pitch, W * sizeof(float), H, cudaMemcpyDeviceToDevice));
    std::vector<float> back2(W * H);
    CHECK(cudaMemcpy2D(back2.data(), W * sizeof(float), e, epitch, W * sizeof(float), H,
                       cudaMemcpyDeviceToHost));
    EXPECT(back2 == back, "device-to-device 2D copy differs");
    // Rows wider than their pitch are refused.
    EXPECT(cudaMemcpy2D(d, 4, host.data(), W * sizeof(float), W * sizeof(float), H,
                        cudaMemcpyHostToDevice) != cudaSuccess,
           "a copy with rows wider than the pitch was accepted");
    cudaGetLastError();
    CHECK(cudaFree(d));
    CHECK(cudaFree(e));

    // 3D pitched memory.
    cudaExtent ext = make_cudaExtent(5 * sizeof(int), 4, 3);
    cudaPitchedPtr p3;
    CHECK(cudaMalloc3D(&p3, ext));
    std::vector<int> h3(5 * 4 * 3);
    for (size_t i = 0; i < h3.size(); i++) h3[i] = (int)(i * 7 + 1);
    cudaMemcpy3DParms up = {};
    up.srcPtr = make_cudaPitchedPtr(h3.data(), 5 * sizeof(int), 5, 4);
    up.dstPtr = p3;
    up.extent = ext;
    up.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&up));
    std::vector<int> b3(h3.size(), 0);
    cudaMemcpy3DParms down = {};
    down.srcPtr = p3;
    down.dstPtr = make_cudaPitchedPtr(b3.data(), 5 * sizeof(int), 5, 4);
    down.extent = ext;
    down.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&down));
    EXPECT(b3 == h3, "3D pitched round trip differs");
    CHECK(cudaFree(p3.ptr));
}

// The CPU's answer for a 1-channel float texture of W x H texels.
struct Ref {
    const std::vector<float>& v;
    cudaTextureAddressMode mode;
    float border;
    bool normalized;

    // The texel index for coordinate c (texel space) along an axis of n,
    // or -1 for the border.
    int index(float c, int n) const {
        int i = (int)std::floor(c);
        if (i >= 0 && i < n) return i;
        switch (mode) {
        case cudaAddressModeWrap: return normalized ? ((i % n) + n) % n : (i < 0 ? 0 : n - 1);
        case cudaAddressModeMirror: {
            if (!normalized) return i < 0 ? 0 : n - 1;
            int p = ((i % (2 * n)) + 2 * n) % (2 * n);
            return p < n ? p : 2 * n - 1 - p;
        }
        case cudaAddressModeBorder: return -1;
        default: return i < 0 ? 0 : n - 1;
        }
    }
    float at(int x, int y) const {
        int i = index((float)x + 0.5f, W), j = index((float)y + 0.5f, H);
        return (i < 0 || j < 0) ? border : v[j * W + i];
    }
    float point(float x, float y) const {
        int i = index(x, W), j = index(y, H);
        return (i < 0 || j < 0) ? border : v[j * W + i];
    }
    float linear(float x, float y) const {
        float xb = x - 0.5f, yb = y - 0.5f;
        int i = (int)std::floor(xb), j = (int)std::floor(yb);
        float a = xb - (float)i, b = yb - (float)j;
        auto t = [&](int xi, int yj) { return at(xi, yj); };
        return (1 - a) * (1 - b) * t(i, j) + a * (1 - b) * t(i + 1, j) + (1 - a) * b * t(i, j + 1) +
               a * b * t(i + 1, j + 1);
    }
};

static void textures_2d() {
    std::vector<float> host(W * H);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) host[y * W + x] = texel(x, y);
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t arr = nullptr;
    CHECK(cudaMallocArray(&arr, &fd, W, H));
    CHECK(cudaMemcpy2DToArray(arr, 0, 0, host.data(), W * sizeof(float), W * sizeof(float), H,
                              cudaMemcpyHostToDevice));
    cudaChannelFormatDesc got;
    cudaExtent ext;
    unsigned flags = 99;
    CHECK(cudaArrayGetInfo(&got, &ext, &flags, arr));
    EXPECT(got.x == 32 && got.f == cudaChannelFormatKindFloat && ext.width == W && ext.height == H &&
               ext.depth == 0 && flags == 0,
           "cudaArrayGetInfo: %d bits, kind %d, %zux%zux%zu, flags %u", got.x, (int)got.f, ext.width,
           ext.height, ext.depth, flags);
    // Back from the array, whole and a sub-rectangle.
    std::vector<float> back(W * H, 0.0f);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * sizeof(float), arr, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    EXPECT(back == host, "array round trip differs");
    std::vector<float> sub(3 * 2, 0.0f);
    CHECK(cudaMemcpy2DFromArray(sub.data(), 3 * sizeof(float), arr, 4 * sizeof(float), 5,
                                3 * sizeof(float), 2, cudaMemcpyDeviceToHost));
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++)
            EXPECT(sub[y * 3 + x] == texel(x + 4, y + 5), "array sub (%d,%d) = %g", x, y, sub[y * 3 + x]);

    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = arr;

    // Coordinates: texel centres shifted by eighths (exact 8-bit weights),
    // inside and outside the image.
    std::vector<float2> at;
    for (int k = -20; k < 20; k++) {
        float x = (float)k + 0.5f + (float)((k * 3) & 7) / 8.0f;
        float y = (float)(k / 3) + 0.5f + (float)(k & 7) / 8.0f;
        at.push_back(make_float2(x, y));
    }
    int n = (int)at.size();
    float2* d_at = to_device(at);
    float* d_out = nullptr;
    CHECK(cudaMalloc(&d_out, n * sizeof(float)));
    std::vector<float2> at_norm(n);

    const cudaTextureAddressMode modes[] = {cudaAddressModeClamp, cudaAddressModeBorder,
                                            cudaAddressModeWrap, cudaAddressModeMirror};
    const char* names[] = {"clamp", "border", "wrap", "mirror"};
    for (int normalized = 0; normalized < 2; normalized++) {
        for (int linear = 0; linear < 2; linear++) {
            for (int m = 0; m < 4; m++) {
                if (!normalized && (m == 2 || m == 3)) continue;  // wrap/mirror need normalized
                if (linear && m == 3) continue;
                cudaTextureDesc td = {};
                td.addressMode[0] = td.addressMode[1] = modes[m];
                td.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
                td.readMode = cudaReadModeElementType;
                td.normalizedCoords = normalized;
                td.borderColor[0] = -3.5f;
                cudaTextureObject_t t = 0;
                CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
                std::vector<float2> use = at;
                if (normalized)
                    for (int i = 0; i < n; i++) use[i] = make_float2(at[i].x / W, at[i].y / H);
                CHECK(cudaMemcpy(d_at, use.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
                sample2d<<<1, 64>>>(t, d_at, d_out, n);
                CHECK(cudaGetLastError());
                std::vector<float> got_v = from_device(d_out, n);
                Ref ref{host, modes[m], -3.5f, normalized != 0};
                for (int i = 0; i < n; i++) {
                    float want = linear ? ref.linear(at[i].x, at[i].y) : ref.point(at[i].x, at[i].y);
                    EXPECT(close(got_v[i], want), "%s %s %s at (%g, %g): got %g, want %g",
                           names[m], linear ? "linear" : "point",
                           normalized ? "normalized" : "unnormalized", at[i].x, at[i].y, got_v[i],
                           want);
                }
                CHECK(cudaDestroyTextureObject(t));
            }
        }
    }
    CHECK(cudaFree(d_out));

    // 8-bit RGBA read as normalized floats.
    std::vector<uchar4> rgba(W * H);
    for (int i = 0; i < W * H; i++)
        rgba[i] = make_uchar4((unsigned char)(i * 3), (unsigned char)(255 - i), (unsigned char)(i * 7),
                              (unsigned char)(i & 0xff));
    cudaChannelFormatDesc fd4 = cudaCreateChannelDesc<uchar4>();
    cudaArray_t arr4 = nullptr;
    CHECK(cudaMallocArray(&arr4, &fd4, W, H));
    CHECK(cudaMemcpy2DToArray(arr4, 0, 0, rgba.data(), W * sizeof(uchar4), W * sizeof(uchar4), H,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc rd4 = {};
    rd4.resType = cudaResourceTypeArray;
    rd4.res.array.array = arr4;
    cudaTextureDesc td4 = {};
    td4.addressMode[0] = td4.addressMode[1] = cudaAddressModeClamp;
    td4.filterMode = cudaFilterModePoint;
    td4.readMode = cudaReadModeNormalizedFloat;
    cudaTextureObject_t t4 = 0;
    CHECK(cudaCreateTextureObject(&t4, &rd4, &td4, nullptr));
    float4* d_out4 = nullptr;
    CHECK(cudaMalloc(&d_out4, n * sizeof(float4)));
    CHECK(cudaMemcpy(d_at, at.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
    sample2d4<<<1, 64>>>(t4, d_at, d_out4, n);
    CHECK(cudaGetLastError());
    std::vector<float4> got4 = from_device(d_out4, n);
    for (int i = 0; i < n; i++) {
        int x = std::min(std::max((int)std::floor(at[i].x), 0), W - 1);
        int y = std::min(std::max((int)std::floor(at[i].y), 0), H - 1);
        uchar4 c = rgba[y * W + x];
        EXPECT(close(got4[i].x, c.x / 255.0f) && close(got4[i].y, c.y / 255.0f) &&
                   close(got4[i].z, c.z / 255.0f) && close(got4[i].w, c.w / 255.0f),
               "uchar4 at (%g, %g): got (%g, %g, %g, %g)", at[i].x, at[i].y, got4[i].x, got4[i].y,
               got4[i].z, got4[i].w);
    }
    cudaResourceDesc back_rd = {};
    CHECK(cudaGetTextureObjectResourceDesc(&back_rd, t4));
    EXPECT(back_rd.resType == cudaResourceTypeArray && back_rd.res.array.array == arr4,
           "cudaGetTextureObjectResourceDesc: type %d", (int)back_rd.resType);
    CHECK(cudaDestroyTextureObject(t4));
    CHECK(cudaFree(d_out4));
    CHECK(cudaFree(d_at));
    CHECK(cudaFreeArray(arr));
    CHECK(cudaFreeArray(arr4));
}

static void fetch_linear() {
    const int n = 100;
    std::vector<int> v(n);
    for (int i = 0; i < n; i++) v[i] = i * i - 50;
    int* d = to_device(v);
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeLinear;
    rd.res.linear.devPtr = d;
    rd.res.linear.desc = cudaCreateChannelDesc<int>();
    rd.res.linear.sizeInBytes = n * sizeof(int);
    cudaTextureDesc td = {};
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
    int* out = nullptr;
    CHECK(cudaMalloc(&out, (n + 4) * sizeof(int)));
    fetch1d<<<1, n + 4>>>(t, out, n + 4);
    CHECK(cudaGetLastError());
    std::vector<int> got = from_device(out, n + 4);
    for (int i = 0; i < n + 4; i++) {
        int j = i - 2;
        int want = (j >= 0 && j < n) ? v[j] : 0;
        EXPECT(got[i] == want, "tex1Dfetch(%d) = %d, want %d", j, got[i], want);
    }
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(out));
    CHECK(cudaFree(d));
}

static cudaTextureObject_t point_texture(cudaArray_t a) {
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    cudaTextureDesc td = {};
    td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModePoint;
    td.readMode = cudaReadModeElementType;
    cudaTextureObject_t t = 0;
    CHECK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
    return t;
}

static void volumes() {
    const int w = 6, h = 5, d = 4;
    std::vector<float> v(w * h * d);
    for (size_t i = 0; i < v.size(); i++) v[i] = (float)i * 0.5f - 3.0f;
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    float* out = nullptr;
    CHECK(cudaMalloc(&out, v.size() * sizeof(float)));
    for (int layered = 0; layered < 2; layered++) {
        cudaArray_t a = nullptr;
        CHECK(cudaMalloc3DArray(&a, &fd, make_cudaExtent(w, h, d), layered ? cudaArrayLayered : 0));
        cudaMemcpy3DParms p = {};
        p.srcPtr = make_cudaPitchedPtr(v.data(), w * sizeof(float), w, h);
        p.dstArray = a;
        p.extent = make_cudaExtent(w, h, d);
        p.kind = cudaMemcpyHostToDevice;
        CHECK(cudaMemcpy3D(&p));
        cudaTextureObject_t t = point_texture(a);
        CHECK(cudaMemset(out, 0, v.size() * sizeof(float)));
        if (layered)
            sample_layered<<<d, dim3(w, h)>>>(t, out, w, h, d);
        else
            sample3d<<<d, dim3(w, h)>>>(t, out, w, h, d);
        CHECK(cudaGetLastError());
        std::vector<float> got = from_device(out, v.size());
        for (size_t i = 0; i < v.size(); i++)
            EXPECT(got[i] == v[i], "%s [%zu] = %g, want %g", layered ? "layered" : "3D", i, got[i], v[i]);
        // And back from the array with cudaMemcpy3D.
        std::vector<float> back(v.size(), 0.0f);
        cudaMemcpy3DParms q = {};
        q.srcArray = a;
        q.dstPtr = make_cudaPitchedPtr(back.data(), w * sizeof(float), w, h);
        q.extent = make_cudaExtent(w, h, d);
        q.kind = cudaMemcpyDeviceToHost;
        CHECK(cudaMemcpy3D(&q));
        EXPECT(back == v, "%s array round trip differs", layered ? "layered" : "3D");
        CHECK(cudaDestroyTextureObject(t));
        CHECK(cudaFreeArray(a));
    }
    CHECK(cudaFree(out));
}

// Cube face and texel for direction (x, y, z), per the CUDA programming
// guide's cubemap table; false when the point lies too close to a texel
// edge for float rounding to be trusted.
static bool cube_texel(float x, float y, float z, int n, int* face, int* u, int* v) {
    float ax = std::fabs(x), ay = std::fabs(y), az = std::fabs(z), s, t, m;
    if (ax >= ay && ax >= az) {
        m = ax;
        *face = x >= 0 ? 0 : 1;
        s = x >= 0 ? -z : z;
        t = -y;
    } else if (ay >= az) {
        m = ay;
        *face = y >= 0 ? 2 : 3;
        s = x;
        t = y >= 0 ? z : -z;
    } else {
        m = az;
        *face = z >= 0 ? 4 : 5;
        s = z >= 0 ? x : -x;
        t = -y;
    }
    float fs = (s / m + 1) * 0.5f * n, ft = (t / m + 1) * 0.5f * n;
    if (std::fabs(fs - std::round(fs)) < 1e-3f || std::fabs(ft - std::round(ft)) < 1e-3f) return false;
    *u = std::min((int)fs, n - 1);
    *v = std::min((int)ft, n - 1);
    return true;
}

static void cubemap() {
    const int n = 8;
    std::vector<float> faces(6 * n * n);
    for (size_t i = 0; i < faces.size(); i++) faces[i] = (float)i;
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t a = nullptr;
    CHECK(cudaMalloc3DArray(&a, &fd, make_cudaExtent(n, n, 6), cudaArrayCubemap));
    cudaMemcpy3DParms p = {};
    p.srcPtr = make_cudaPitchedPtr(faces.data(), n * sizeof(float), n, n);
    p.dstArray = a;
    p.extent = make_cudaExtent(n, n, 6);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    std::vector<float4> dirs;
    std::vector<int> want_idx;
    for (int k = 0; k < 200 && dirs.size() < 96; k++) {
        float x = std::sin(k * 1.7f) * 2.0f, y = std::cos(k * 2.3f) * 1.5f, z = std::sin(k * 0.9f + 1.0f);
        int f, u, v;
        if (!cube_texel(x, y, z, n, &f, &u, &v)) continue;
        dirs.push_back(make_float4(x, y, z, 0));
        want_idx.push_back((f * n + v) * n + u);
    }
    int m = (int)dirs.size();
    float4* d_dirs = to_device(dirs);
    float* out = nullptr;
    CHECK(cudaMalloc(&out, m * sizeof(float)));
    cudaTextureObject_t t = point_texture(a);
    sample_cube<<<1, 128>>>(t, d_dirs, out, m);
    CHECK(cudaGetLastError());
    std::vector<float> got = from_device(out, m);
    for (int i = 0; i < m; i++)
        EXPECT(got[i] == faces[want_idx[i]], "cube (%g, %g, %g) = %g, want %g", dirs[i].x, dirs[i].y,
               dirs[i].z, got[i], faces[want_idx[i]]);
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(out));
    CHECK(cudaFree(d_dirs));
    CHECK(cudaFreeArray(a));
}

// Surface writes and reads, through an array made for surface load/store
// and through a plain one: NVIDIA's driver (580, H200) makes a surface over
// either.
static void surface_round_trip(unsigned flags) {
    cudaChannelFormatDesc fd = cudaCreateChannelDesc<float>();
    cudaArray_t a = nullptr;
    CHECK(cudaMallocArray(&a, &fd, W, H, flags));
    cudaResourceDesc rd = {};
    rd.resType = cudaResourceTypeArray;
    rd.res.array.array = a;
    cudaSurfaceObject_t s = 0;
    CHECK(cudaCreateSurfaceObject(&s, &rd));
    surf_fill<<<H, W>>>(s, W, H);
    surf_double<<<H, W>>>(s, W, H);
    CHECK(cudaGetLastError());
    std::vector<float> got(W * H, 0.0f);
    CHECK(cudaMemcpy2DFromArray(got.data(), W * sizeof(float), a, 0, 0, W * sizeof(float), H,
                                cudaMemcpyDeviceToHost));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            float want = (float)(x * 3 + y * 100) * 2.0f + 1.0f;
            EXPECT(got[y * W + x] == want, "surface (flags %u) (%d,%d) = %g, want %g", flags, x, y,
                   got[y * W + x], want);
        }
    CHECK(cudaDestroySurfaceObject(s));
    CHECK(cudaFreeArray(a));
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    pitched_copies();
    textures_2d();
    fetch_linear();
    volumes();
    cubemap();
    surface_round_trip(cudaArraySurfaceLoadStore);
    surface_round_trip(cudaArrayDefault);
    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
