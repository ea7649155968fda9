// Module variables: __constant__ and __device__ variables written and read
// by cudaMemcpyToSymbol/FromSymbol (cuModuleGetGlobal underneath), their
// initializers, cudaGetSymbolAddress/Size, a kernel writing through the
// symbol's address passed as a pointer, cudaMemset on it, and kernels that
// read what the host wrote. Results are checked against the CPU.
#define PROGRAM "globals"
#include "common.h"

#include <vector>

constexpr int kCoef = 16;
constexpr int kN = 1000;

__constant__ float c_coef[kCoef];
__device__ int d_counter;
__device__ int d_init[4] = {3, 1, 4, 1};
__device__ unsigned d_table[256];

__global__ void scale(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * c_coef[i % kCoef] + (float)d_init[i % 4];
}

__global__ void count(int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&d_counter, 1);
}

// Writes through a plain pointer: the address cudaGetSymbolAddress gave.
__global__ void fill(unsigned* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = (unsigned)(i * 7 + 1);
}

// Reads the table by its symbol.
__global__ void sum_table(unsigned* out) {
    __shared__ unsigned part[256];
    part[threadIdx.x] = d_table[threadIdx.x];
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned s = 0;
        for (int i = 0; i < 256; i++) s += part[i];
        *out = s;
    }
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");

    // Initializers are there before anything writes.
    int init[4] = {0, 0, 0, 0};
    CHECK(cudaMemcpyFromSymbol(init, d_init, sizeof(init)));
    EXPECT(init[0] == 3 && init[1] == 1 && init[2] == 4 && init[3] == 1,
           "d_init = {%d, %d, %d, %d}", init[0], init[1], init[2], init[3]);

    size_t size = 0;
    CHECK(cudaGetSymbolSize(&size, c_coef));
    EXPECT(size == kCoef * sizeof(float), "c_coef is %zu bytes", size);
    CHECK(cudaGetSymbolSize(&size, d_table));
    EXPECT(size == sizeof(unsigned) * 256, "d_table is %zu bytes", size);

    // Host writes, host reads back, at an offset too.
    float coef[kCoef];
    for (int i = 0; i < kCoef; i++) coef[i] = 0.5f * (float)(i + 1);
    CHECK(cudaMemcpyToSymbol(c_coef, coef, sizeof(coef)));
    float back[kCoef] = {};
    CHECK(cudaMemcpyFromSymbol(back, c_coef, sizeof(back)));
    EXPECT(std::memcmp(back, coef, sizeof(coef)) == 0, "c_coef read back differs");
    float two[2] = {-1.0f, -2.0f};
    CHECK(cudaMemcpyToSymbol(c_coef, two, sizeof(two), 4 * sizeof(float)));
    coef[4] = -1.0f;
    coef[5] = -2.0f;
    CHECK(cudaMemcpyFromSymbol(back, c_coef, sizeof(back)));
    EXPECT(back[3] == coef[3] && back[4] == -1.0f && back[5] == -2.0f && back[6] == coef[6],
           "offset write: %g %g %g %g", back[3], back[4], back[5], back[6]);
    // Past the end is an error, not a write elsewhere.
    EXPECT(cudaMemcpyToSymbol(c_coef, coef, sizeof(coef), 8) != cudaSuccess,
           "a copy past the end of c_coef succeeded");
    cudaGetLastError();

    int zero = 0;
    CHECK(cudaMemcpyToSymbol(d_counter, &zero, sizeof(zero)));

    void* table = nullptr;
    CHECK(cudaGetSymbolAddress(&table, d_table));
    EXPECT(table != nullptr, "no address for d_table");
    cudaPointerAttributes attr;
    CHECK(cudaPointerGetAttributes(&attr, table));
    EXPECT(attr.type == cudaMemoryTypeDevice, "d_table's address is of memory type %d",
           (int)attr.type);
    CHECK(cudaMemset(table, 0xff, 256 * sizeof(unsigned)));
    unsigned tb[256];
    CHECK(cudaMemcpyFromSymbol(tb, d_table, sizeof(tb)));
    EXPECT(tb[0] == 0xffffffffu && tb[255] == 0xffffffffu, "memset on the symbol: %x %x", tb[0],
           tb[255]);

    if (check_results()) {
        std::vector<float> in(kN), out(kN);
        for (int i = 0; i < kN; i++) in[i] = (float)(i % 37) - 18.0f;
        float *d_in, *d_out;
        CHECK(cudaMalloc(&d_in, kN * sizeof(float)));
        CHECK(cudaMalloc(&d_out, kN * sizeof(float)));
        CHECK(cudaMemcpy(d_in, in.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
        scale<<<(kN + 255) / 256, 256>>>(d_in, d_out, kN);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(out.data(), d_out, kN * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < kN; i++) {
            float want = in[i] * coef[i % kCoef] + (float)init[i % 4];
            EXPECT(out[i] == want, "scale[%d] = %g, want %g", i, out[i], want);
        }

        count<<<(kN + 127) / 128, 128>>>(kN);
        CHECK(cudaGetLastError());
        int counted = 0;
        CHECK(cudaMemcpyFromSymbol(&counted, d_counter, sizeof(counted)));
        EXPECT(counted == kN, "d_counter = %d, want %d", counted, kN);

        fill<<<1, 256>>>((unsigned*)table, 256);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyFromSymbol(tb, d_table, sizeof(tb)));
        unsigned want_sum = 0;
        for (int i = 0; i < 256; i++) {
            EXPECT(tb[i] == (unsigned)(i * 7 + 1), "d_table[%d] = %u", i, tb[i]);
            want_sum += (unsigned)(i * 7 + 1);
        }
        unsigned* d_sum;
        CHECK(cudaMalloc(&d_sum, sizeof(unsigned)));
        sum_table<<<1, 256>>>(d_sum);
        CHECK(cudaGetLastError());
        unsigned got_sum = 0;
        CHECK(cudaMemcpy(&got_sum, d_sum, sizeof(got_sum), cudaMemcpyDeviceToHost));
        EXPECT(got_sum == want_sum, "sum of d_table %u, want %u", got_sum, want_sum);
        CHECK(cudaFree(d_in));
        CHECK(cudaFree(d_out));
        CHECK(cudaFree(d_sum));
    }
    pass();
    return 0;
}
