// Kernels that cannot run correctly must fail with a CUDA error, never
// produce wrong data:
//   1. A kernel using an instruction SimGpu's PTX interpreter does not
//      implement (the scalar video instruction vabsdiff with a secondary
//      add, via inline PTX; the SIMD vabsdiff4 it used before is
//      implemented now).
//      On SimGpu its launch fails with cudaErrorNotSupported (not sticky:
//      the context keeps working, which a correct kernel then shows); on a
//      GPU it runs and its result is checked. Prints "VIDEO <error name>".
//   2. A kernel writing far outside its buffer: cudaErrorIllegalAddress,
//      sticky, as on a GPU. Prints "OOB <error name>".
#define PROGRAM "faults"
#include "common.h"

__global__ void video(const unsigned int* a, const unsigned int* b, unsigned int* out) {
    unsigned int d;
    asm volatile("vabsdiff.u32.u32.u32.add %0, %1, %2, %3;"
                 : "=r"(d)
                 : "r"(a[threadIdx.x]), "r"(b[threadIdx.x]), "r"(0u));
    out[threadIdx.x] = d;
}

__global__ void fill(unsigned int* out, unsigned int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = v + i;
}

// Writes at `out + offset` (elements): far outside any allocation.
__global__ void wild_store(unsigned int* out, long long offset) { out[offset + threadIdx.x] = 1; }

// |a - b| on the whole words, plus nothing (c = 0).
static unsigned int absdiff_sum(unsigned int a, unsigned int b) { return a > b ? a - b : b - a; }

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    const int n = 32;
    unsigned int ha[n], hb[n], hout[n];
    Rng rng(1);
    for (int i = 0; i < n; i++) {
        ha[i] = (unsigned int)rng.next();
        hb[i] = (unsigned int)rng.next();
    }
    unsigned int *a, *b, *out;
    CHECK(cudaMalloc((void**)&a, sizeof ha));
    CHECK(cudaMalloc((void**)&b, sizeof hb));
    CHECK(cudaMalloc((void**)&out, sizeof hout));
    CHECK(cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(out, 0, sizeof hout));

    video<<<1, n>>>(a, b, out);
    CHECK(cudaGetLastError());  // the launch itself is accepted
    cudaError_t e = cudaDeviceSynchronize();
    std::printf("VIDEO %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaSuccess || e == cudaErrorNotSupported, "video: %d %s", (int)e,
           cudaGetErrorName(e));
    CHECK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) {
        // Either the right answer, or nothing written: never a wrong one.
        unsigned int want = e == cudaSuccess ? absdiff_sum(ha[i], hb[i]) : 0;
        EXPECT(hout[i] == want, "video: out[%d] = %#x, want %#x", i, hout[i], want);
    }
    // Not sticky: the runtime reports the error once more, then no more.
    cudaError_t last = cudaGetLastError();
    EXPECT(last == e, "cudaGetLastError after video: %d %s", (int)last, cudaGetErrorName(last));
    CHECK(cudaGetLastError());
    fill<<<1, n>>>(out, 100, n);
    LAUNCHED("fill after the unsupported kernel");
    CHECK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(hout[i] == 100u + i, "fill: out[%d] = %u, want %u", i, hout[i], 100u + i);

    wild_store<<<1, n>>>(out, 1ll << 36);
    CHECK(cudaGetLastError());
    e = cudaDeviceSynchronize();
    std::printf("OOB %s\n", cudaGetErrorName(e));
    EXPECT(e == cudaErrorIllegalAddress, "wild_store: %d %s, want cudaErrorIllegalAddress", (int)e,
           cudaGetErrorName(e));
    // Sticky: the context is unusable from now on.
    void* p = nullptr;
    EXPECT_ERR(cudaMalloc(&p, 64), cudaErrorIllegalAddress);
    pass();
    return 0;
}
