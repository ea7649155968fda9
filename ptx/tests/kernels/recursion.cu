// Recursive device functions: nvcc keeps them as real calls.
__device__ __noinline__ unsigned fib(unsigned n)
{
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

__device__ __noinline__ bool is_odd(int n);
__device__ __noinline__ bool is_even(int n) { return n == 0 ? true : is_odd(n - 1); }
__device__ __noinline__ bool is_odd(int n) { return n == 0 ? false : is_even(n - 1); }

// A local array live across the recursive calls (each activation its own).
__device__ __noinline__ long long digits(long long v, int depth)
{
    int d[6];
    for (int i = 0; i < 6; ++i) d[i] = (int)((v >> (4 * i)) & 15) + depth;
    long long below = depth > 0 ? digits(v / 3, depth - 1) : 0;
    long long s = 0;
    for (int i = 0; i < 6; ++i) s = s * 7 + d[(i * 5 + depth) % 6];
    return s ^ (below * 31);
}

// Recursion over a caller's array (quicksort), passed by pointer.
__device__ __noinline__ void qsort_rec(int *a, int lo, int hi)
{
    if (lo >= hi) return;
    int p = a[(lo + hi) / 2], i = lo, j = hi;
    while (i <= j) {
        while (a[i] < p) ++i;
        while (a[j] > p) --j;
        if (i <= j) { int t = a[i]; a[i] = a[j]; a[j] = t; ++i; --j; }
    }
    qsort_rec(a, lo, j);
    qsort_rec(a, i, hi);
}

extern "C" __global__ void recursion(const int *in, unsigned *fibs, int *parity, long long *dig,
                                     int *sorted, int n)
{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    int v = in[t];
    // Depths differ from lane to lane: the warp diverges inside the calls.
    fibs[t] = fib((unsigned)(v & 15));
    parity[t] = is_even(v & 63) ? 2 : 1;
    dig[t] = digits(v, v & 3);
    int a[8];
    for (int i = 0; i < 8; ++i) a[i] = (v * (i + 3) * 2654435761u) >> 24;
    qsort_rec(a, 0, 7);
    for (int i = 0; i < 8; ++i) sorted[8 * t + i] = a[i];
}

// Recursion as deep as the caller asks: far enough, the call stack
// overflows.
__device__ __noinline__ int deep(int n, const int *w)
{
    if (n == 0) return w[0];
    return deep(n - 1, w) * 3 + w[n & 1];
}

extern "C" __global__ void runaway(const int *w, int *out, int n)
{
    out[threadIdx.x] = deep(n + (int)threadIdx.x, w);
}
