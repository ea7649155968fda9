// nvcc-flags: -rdc=true
// Dynamic parallelism (built with -rdc=true and device-linked with
// libcudadevrt, as CUDA requires): a quicksort that recurses by launching
// kernels into streams it creates on the device, children reading what
// their parent wrote, device-side cudaMemcpyAsync and cudaMemsetAsync in
// a stream after a kernel, a tail launch that sees all of its parent's
// other work, cudaMalloc/cudaFree from device code, the device runtime's
// errors through cudaGetLastError, and more launches from one grid than
// the default pending-launch count. Every result is checked against the
// CPU.
#define PROGRAM "dynamic_parallelism"
#include "common.h"

#include <algorithm>
#include <vector>

// Sorts data[left..=right] by selection: the base case.
__device__ void selection_sort(unsigned* data, int left, int right) {
    for (int i = left; i <= right; i++) {
        unsigned min_val = data[i];
        int min_idx = i;
        for (int j = i + 1; j <= right; j++) {
            if (data[j] < min_val) {
                min_idx = j;
                min_val = data[j];
            }
        }
        if (i != min_idx) {
            data[min_idx] = data[i];
            data[i] = min_val;
        }
    }
}

// One thread partitions data[left..=right] around its middle element and
// launches a grid for each side, each into a stream of its own; at
// depth 12 or at 16 elements it sorts in place.
__global__ void quicksort(unsigned* data, int left, int right, int depth) {
    if (depth >= 12 || right - left <= 16) {
        selection_sort(data, left, right);
        return;
    }
    unsigned pivot = data[(left + right) / 2];
    int l = left, r = right;
    while (l <= r) {
        while (data[l] < pivot) l++;
        while (data[r] > pivot) r--;
        if (l <= r) {
            unsigned t = data[l];
            data[l] = data[r];
            data[r] = t;
            l++;
            r--;
        }
    }
    if (left < r) {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        quicksort<<<1, 1, 0, s>>>(data, left, r, depth + 1);
        cudaStreamDestroy(s);
    }
    if (l < right) {
        cudaStream_t s;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        quicksort<<<1, 1, 0, s>>>(data, l, right, depth + 1);
        cudaStreamDestroy(s);
    }
}

__global__ void square(const int* src, int* dst, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i] * src[i];
}

__global__ void sum_all(const int* a, int n, long long* out) {
    long long s = 0;
    for (int i = 0; i < n; i++) s += a[i];
    *out = s;
}

// Each block's thread 0 writes its part of `src`, squares it into `sq`
// with a child grid in a stream of its own, copies the squares on into
// `copy` in the same stream (after the child), fills its 32 bytes of
// `pad`; block 0 adds a tail launch that sums `copy`.
__global__ void pipeline(int* src, int* sq, int* copy, int per, unsigned char* pad,
                         long long* sum, int* memset_codes) {
    if (threadIdx.x != 0) return;
    int b = blockIdx.x;
    for (int i = 0; i < per; i++) src[b * per + i] = b * per + i - 100;
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    square<<<(per + 63) / 64, 64, 0, s>>>(src + b * per, sq + b * per, per);
    cudaMemcpyAsync(copy + b * per, sq + b * per, per * sizeof(int), cudaMemcpyDeviceToDevice,
                    s);
    memset_codes[b] = (int)cudaMemsetAsync(pad + b * 32, 0xa5, 32, s);
    cudaStreamDestroy(s);
    if (b == 0) sum_all<<<1, 1, 0, cudaStreamTailLaunch>>>(copy, per * gridDim.x, sum);
}

__global__ void nothing() {}

// codes: [0] a block of 2048 threads, [1] the error cleared, [2] a device
// cudaMalloc/use/cudaFree (0 when it all worked), [3] a good launch.
__global__ void errors(int* codes) {
    nothing<<<1, 2048>>>();
    codes[0] = (int)cudaGetLastError();
    codes[1] = (int)cudaGetLastError();
    int* p = nullptr;
    cudaError_t e = cudaMalloc((void**)&p, 100 * sizeof(int));
    if (e == cudaSuccess) {
        for (int i = 0; i < 100; i++) p[i] = i * 2;
        int s = 0;
        for (int i = 0; i < 100; i++) s += p[i];
        e = s == 9900 ? cudaFree(p) : cudaErrorUnknown;
    }
    codes[2] = (int)e;
    nothing<<<1, 1>>>();
    codes[3] = (int)cudaGetLastError();
}

// Each thread launches an empty grid and records the launch's error.
__global__ void fan_out(int* codes) {
    nothing<<<1, 1>>>();
    codes[blockIdx.x * blockDim.x + threadIdx.x] = (int)cudaGetLastError();
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");

    // Quicksort of 20,000 values.
    const int n = 20000;
    std::vector<unsigned> h(n);
    Rng rng(7);
    for (auto& v : h) v = (unsigned)(rng.next() >> 40);
    unsigned* d;
    CHECK(cudaMalloc(&d, n * sizeof(unsigned)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    quicksort<<<1, 1>>>(d, 0, n - 1, 0);
    LAUNCHED("quicksort");
    std::vector<unsigned> got(n);
    CHECK(cudaMemcpy(got.data(), d, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    for (int i = 0; i < n; i++)
        EXPECT(got[i] == h[i], "sorted[%d] = %u, want %u", i, got[i], h[i]);

    // The pipeline.
    const int blocks = 6, per = 300, m = blocks * per;
    int *src, *sq, *copy;
    unsigned char* pad;
    long long* sum;
    CHECK(cudaMalloc(&src, m * sizeof(int)));
    CHECK(cudaMalloc(&sq, m * sizeof(int)));
    CHECK(cudaMalloc(&copy, m * sizeof(int)));
    CHECK(cudaMalloc(&pad, blocks * 32 + 32));
    CHECK(cudaMalloc(&sum, sizeof(long long)));
    CHECK(cudaMemset(copy, 0xff, m * sizeof(int)));
    CHECK(cudaMemset(pad, 0, blocks * 32 + 32));
    int* memset_codes;
    CHECK(cudaMalloc(&memset_codes, blocks * sizeof(int)));
    CHECK(cudaMemset(memset_codes, 0xff, blocks * sizeof(int)));
    pipeline<<<blocks, 32>>>(src, sq, copy, per, pad, sum, memset_codes);
    LAUNCHED("pipeline");
    std::vector<int> codes_back(blocks);
    CHECK(cudaMemcpy(codes_back.data(), memset_codes, blocks * sizeof(int),
                     cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; b++)
        EXPECT(codes_back[b] == 0, "block %d: the device's cudaMemsetAsync returned %d %s", b,
               codes_back[b], cudaGetErrorName((cudaError_t)codes_back[b]));
    CHECK(cudaFree(memset_codes));
    std::vector<int> hc(m);
    std::vector<unsigned char> hp(blocks * 32 + 32);
    long long hs = 0, want_sum = 0;
    CHECK(cudaMemcpy(hc.data(), copy, m * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hp.data(), pad, hp.size(), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&hs, sum, sizeof(long long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < m; i++) {
        int v = i - 100;
        EXPECT(hc[i] == v * v, "copy[%d] = %d, want %d", i, hc[i], v * v);
        want_sum += (long long)v * v;
    }
    for (size_t i = 0; i < hp.size(); i++) {
        unsigned char want = i < (size_t)blocks * 32 ? 0xa5 : 0;
        EXPECT(hp[i] == want, "pad[%zu] = %#x, want %#x", i, hp[i], want);
    }
    EXPECT(hs == want_sum, "the tail launch summed %lld, want %lld", hs, want_sum);

    // Errors.
    int* codes;
    CHECK(cudaMalloc(&codes, 4 * sizeof(int)));
    errors<<<1, 1>>>(codes);
    LAUNCHED("errors");
    int hcodes[4];
    CHECK(cudaMemcpy(hcodes, codes, 4 * sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(hcodes[0] == cudaErrorInvalidConfiguration, "a 2048-thread block gave %d",
           hcodes[0]);
    EXPECT(hcodes[1] == cudaSuccess, "the error was not cleared: %d", hcodes[1]);
    EXPECT(hcodes[2] == cudaSuccess, "device cudaMalloc/cudaFree gave %d", hcodes[2]);
    EXPECT(hcodes[3] == cudaSuccess, "a good launch gave %d", hcodes[3]);

    // More launches than the default pending-launch count (2048) from
    // one grid: a GPU queues those beyond in a virtualized pool.
    size_t pending = 0;
    CHECK(cudaDeviceGetLimit(&pending, cudaLimitDevRuntimePendingLaunchCount));
    EXPECT(pending == 2048, "default pending-launch count %zu, want 2048", pending);
    int* many;
    const int fan = 4096;
    CHECK(cudaMalloc(&many, fan * sizeof(int)));
    CHECK(cudaMemset(many, 0xff, fan * sizeof(int)));
    fan_out<<<fan / 256, 256>>>(many);
    LAUNCHED("fan_out");
    std::vector<int> hm(fan);
    CHECK(cudaMemcpy(hm.data(), many, fan * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < fan; i++)
        EXPECT(hm[i] == cudaSuccess, "thread %d's launch gave %d", i, hm[i]);
    CHECK(cudaFree(many));

    CHECK(cudaFree(d));
    CHECK(cudaFree(codes));
    pass();
    return 0;
}
