// SAXPY and DAXPY: y = a * x + y with one fused multiply-add per element
// (fmaf / fma on both sides, so the CPU reference rounds exactly as the
// device must), over 64 Ki elements, then the same on a stream with
// asynchronous copies. Compared bit for bit.
#define PROGRAM "saxpy"
#include "common.h"

#include <cmath>
#include <vector>

__global__ void saxpy(int n, float a, const float* x, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaf(a, x[i], y[i]);
}

__global__ void daxpy(int n, double a, const double* x, double* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fma(a, x[i], y[i]);
}

template <typename T>
static void run(int n, T a, bool on_stream) {
    Rng rng(n + (int)sizeof(T));
    std::vector<T> x(n), y(n), want(n), got(n);
    for (int i = 0; i < n; i++) {
        x[i] = (T)rng.unit() * (T)3;
        y[i] = (T)rng.unit();
        want[i] = std::fma(a, x[i], y[i]);
    }
    T *dx = nullptr, *dy = nullptr;
    size_t bytes = n * sizeof(T);
    CHECK(cudaMalloc((void**)&dx, bytes));
    CHECK(cudaMalloc((void**)&dy, bytes));
    cudaStream_t s = nullptr;
    if (on_stream) CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMemcpyAsync(dx, x.data(), bytes, cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyAsync(dy, y.data(), bytes, cudaMemcpyHostToDevice, s));
    if (sizeof(T) == 4)
        saxpy<<<(n + 511) / 512, 512, 0, s>>>(n, (float)a, (const float*)dx, (float*)dy);
    else
        daxpy<<<(n + 127) / 128, 128, 0, s>>>(n, (double)a, (const double*)dx, (double*)dy);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(got.data(), dy, bytes, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) {
        bool same = sizeof(T) == 4 ? fbits((float)got[i]) == fbits((float)want[i])
                                   : dbits((double)got[i]) == dbits((double)want[i]);
        EXPECT(same, "%s n=%d: y[%d] = %a, want %a", sizeof(T) == 4 ? "saxpy" : "daxpy", n, i,
               (double)got[i], (double)want[i]);
    }
    if (on_stream) CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    run<float>(1 << 16, 2.5f, false);
    run<float>(1000, -0.3f, true);
    run<double>(1 << 14, 1.0 / 3.0, false);
    run<double>(777, -7.25, true);
    pass();
    return 0;
}
