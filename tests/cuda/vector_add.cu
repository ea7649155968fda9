// Vector addition, the first CUDA program: c[i] = a[i] + b[i] over sizes
// that are not multiples of the block, in float and in 64-bit integers,
// compared bit for bit with the CPU. Also every thread of a 3-D grid of 3-D
// blocks writes its indices, which must be exactly the CUDA index
// variables.
#define PROGRAM "vector_add"
#include "common.h"

#include <vector>

__global__ void add_f32(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

__global__ void add_i64(const long long* a, const long long* b, long long* c, int n) {
    // A grid-stride loop: fewer threads than elements.
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

// Each thread writes its block and thread indices, packed, at its linear
// position in the grid.
__global__ void indices(unsigned int* out) {
    unsigned int block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    unsigned int per_block = blockDim.x * blockDim.y * blockDim.z;
    unsigned int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    out[block * per_block + t] = blockIdx.x | blockIdx.y << 4 | blockIdx.z << 8 |
                                 threadIdx.x << 12 | threadIdx.y << 18 | threadIdx.z << 24;
}

template <typename T>
static T* to_device(const std::vector<T>& v) {
    T* d = nullptr;
    CHECK(cudaMalloc((void**)&d, v.size() * sizeof(T)));
    CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

template <typename T>
static std::vector<T> to_host(const T* d, size_t n) {
    std::vector<T> v(n);
    CHECK(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
}

static void floats(int n) {
    Rng rng(n);
    std::vector<float> a(n), b(n);
    for (int i = 0; i < n; i++) {
        a[i] = rng.unit() * 1000.0f;
        b[i] = rng.unit();
    }
    float *da = to_device(a), *db = to_device(b), *dc = nullptr;
    CHECK(cudaMalloc((void**)&dc, n * sizeof(float)));
    CHECK(cudaMemset(dc, 0xff, n * sizeof(float)));
    add_f32<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    LAUNCHED("add_f32");
    std::vector<float> c = to_host(dc, n);
    for (int i = 0; i < n; i++) {
        float want = a[i] + b[i];
        EXPECT(fbits(c[i]) == fbits(want), "add_f32 n=%d: c[%d] = %a, want %a", n, i, c[i], want);
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
}

static void int64s(int n) {
    Rng rng(7 * n);
    std::vector<long long> a(n), b(n);
    for (int i = 0; i < n; i++) {
        a[i] = (long long)rng.next();
        b[i] = (long long)rng.next() >> 3;
    }
    long long *da = to_device(a), *db = to_device(b), *dc = nullptr;
    CHECK(cudaMalloc((void**)&dc, n * sizeof(long long)));
    add_i64<<<7, 128>>>(da, db, dc, n);
    LAUNCHED("add_i64");
    std::vector<long long> c = to_host(dc, n);
    for (int i = 0; i < n; i++) {
        long long want = (long long)((unsigned long long)a[i] + (unsigned long long)b[i]);
        EXPECT(c[i] == want, "add_i64 n=%d: c[%d] = %lld, want %lld", n, i, c[i], want);
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
}

static void grid_indices() {
    dim3 grid(3, 2, 2), block(8, 4, 2);
    const int n = 3 * 2 * 2 * 8 * 4 * 2;
    unsigned int* d = nullptr;
    CHECK(cudaMalloc((void**)&d, n * sizeof(unsigned int)));
    indices<<<grid, block>>>(d);
    LAUNCHED("indices");
    std::vector<unsigned int> got = to_host(d, n);
    int k = 0;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++)
                for (unsigned tz = 0; tz < block.z; tz++)
                    for (unsigned ty = 0; ty < block.y; ty++)
                        for (unsigned tx = 0; tx < block.x; tx++, k++) {
                            unsigned want = bx | by << 4 | bz << 8 | tx << 12 | ty << 18 | tz << 24;
                            EXPECT(got[k] == want, "indices[%d] = %#x, want %#x", k, got[k], want);
                        }
    CHECK(cudaFree(d));
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    for (int n : {1, 255, 1000, 50000}) floats(n);
    for (int n : {3, 4099}) int64s(n);
    grid_indices();
    pass();
    return 0;
}
