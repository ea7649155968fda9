// Recursive device functions: Fibonacci (lanes of one warp at different
// depths), a recursive walk of a binary search tree built by the CPU in
// device memory, and mutual recursion, checked against the CPU; then a
// recursion a billion levels deep, which overflows the call stack and
// fails the launch (as on a GPU), last since the error is sticky.
#define PROGRAM "recursion"
#include "common.h"

enum { N = 256, NODES = 1000 };

struct Node {
    int key;
    int left, right;  // indices, -1: none
};

__device__ __noinline__ unsigned int fib(unsigned int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

// Sum of the keys below `limit` in the subtree at `at`, and how deep it went.
__device__ __noinline__ long long sum_below(const Node* t, int at, int limit, int depth, int* deepest) {
    if (at < 0) return 0;
    if (depth > *deepest) *deepest = depth;
    const Node n = t[at];
    long long s = sum_below(t, n.left, limit, depth + 1, deepest);
    if (n.key < limit) s += n.key + sum_below(t, n.right, limit, depth + 1, deepest);
    return s;
}

__device__ __noinline__ int odd_steps(int n);
__device__ __noinline__ int even_steps(int n) { return n <= 0 ? 0 : 1 + odd_steps(n - 1); }
__device__ __noinline__ int odd_steps(int n) { return n <= 0 ? 100 : 2 + even_steps(n - 1); }

__global__ void walk(const Node* tree, const int* limits, unsigned int* fibs, long long* sums,
                     int* depths, int* steps, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    fibs[i] = fib((unsigned int)(i % 21));
    int deepest = 0;
    sums[i] = sum_below(tree, 0, limits[i], 0, &deepest);
    depths[i] = deepest;
    steps[i] = even_steps(i % 40);
}

__device__ __noinline__ int deep(int n, const int* w) { return n == 0 ? w[0] : deep(n - 1, w) * 3 + w[n & 1]; }

__global__ void runaway(const int* w, int* out, int n) { out[threadIdx.x] = deep(n, w); }

static unsigned int cpu_fib(unsigned int n) { return n < 2 ? n : cpu_fib(n - 1) + cpu_fib(n - 2); }

static long long cpu_sum(const Node* t, int at, int limit, int depth, int* deepest) {
    if (at < 0) return 0;
    if (depth > *deepest) *deepest = depth;
    long long s = cpu_sum(t, t[at].left, limit, depth + 1, deepest);
    if (t[at].key < limit) s += t[at].key + cpu_sum(t, t[at].right, limit, depth + 1, deepest);
    return s;
}

static int cpu_even(int n);
static int cpu_odd(int n) { return n <= 0 ? 100 : 2 + cpu_even(n - 1); }
static int cpu_even(int n) { return n <= 0 ? 0 : 1 + cpu_odd(n - 1); }

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    // A binary search tree of random keys, inserted in random order.
    static Node tree[NODES];
    Rng rng(42);
    for (int k = 0; k < NODES; k++) {
        tree[k] = {(int)rng.below(1000000), -1, -1};
        if (k == 0) continue;
        int at = 0;
        for (;;) {
            int* next = tree[k].key < tree[at].key ? &tree[at].left : &tree[at].right;
            if (*next < 0) {
                *next = k;
                break;
            }
            at = *next;
        }
    }
    static int limits[N];
    for (int i = 0; i < N; i++) limits[i] = (int)rng.below(1000000);
    Node* dtree;
    int *dlimits, *ddepths, *dsteps;
    unsigned int* dfibs;
    long long* dsums;
    CHECK(cudaMalloc((void**)&dtree, sizeof tree));
    CHECK(cudaMalloc((void**)&dlimits, sizeof limits));
    CHECK(cudaMalloc((void**)&dfibs, N * sizeof(unsigned int)));
    CHECK(cudaMalloc((void**)&dsums, N * sizeof(long long)));
    CHECK(cudaMalloc((void**)&ddepths, N * sizeof(int)));
    CHECK(cudaMalloc((void**)&dsteps, N * sizeof(int)));
    CHECK(cudaMemcpy(dtree, tree, sizeof tree, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dlimits, limits, sizeof limits, cudaMemcpyHostToDevice));
    // Recursion needs more stack than the default 1 KiB on a GPU.
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 16 * 1024));
    walk<<<(N + 127) / 128, 128>>>(dtree, dlimits, dfibs, dsums, ddepths, dsteps, N);
    LAUNCHED("walk");
    static unsigned int fibs[N];
    static long long sums[N];
    static int depths[N], steps[N];
    CHECK(cudaMemcpy(fibs, dfibs, sizeof fibs, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(sums, dsums, sizeof sums, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(depths, ddepths, sizeof depths, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(steps, dsteps, sizeof steps, cudaMemcpyDeviceToHost));
    int max_depth = 0;
    for (int i = 0; i < N; i++) {
        EXPECT(fibs[i] == cpu_fib(i % 21), "fib(%d) = %u, want %u", i % 21, fibs[i], cpu_fib(i % 21));
        int deepest = 0;
        long long want = cpu_sum(tree, 0, limits[i], 0, &deepest);
        EXPECT(sums[i] == want, "thread %d: sum below %d = %lld, want %lld", i, limits[i], sums[i], want);
        EXPECT(depths[i] == deepest, "thread %d: depth %d, want %d", i, depths[i], deepest);
        EXPECT(steps[i] == cpu_even(i % 40), "steps(%d) = %d, want %d", i % 40, steps[i], cpu_even(i % 40));
        if (deepest > max_depth) max_depth = deepest;
    }
    EXPECT(max_depth >= 10, "the tree walks went only %d levels deep", max_depth);
    std::printf("recursion: fib, a %d-node tree (%d levels), mutual recursion right\n", NODES, max_depth);

    // A billion levels: the launch fails, the context with it.
    int* dw;
    int* dout;
    const int w[2] = {5, -7};
    CHECK(cudaMalloc((void**)&dw, sizeof w));
    CHECK(cudaMalloc((void**)&dout, 32 * sizeof(int)));
    CHECK(cudaMemcpy(dw, w, sizeof w, cudaMemcpyHostToDevice));
    runaway<<<1, 32>>>(dw, dout, 1 << 30);
    cudaError_t e = cudaDeviceSynchronize();
    EXPECT(e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure,
           "endless recursion: %d %s, want a failed launch", (int)e, cudaGetErrorName(e));
    pass();
    return 0;
}
