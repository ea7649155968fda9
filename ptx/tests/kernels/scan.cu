// Inclusive Hillis-Steele scan and exclusive Blelloch scan of one block each.
extern "C" __global__ void scan_hillis(const int *in, int *out, int n)
{
    extern __shared__ int buf[]; // 2 * blockDim.x ints, double buffered
    int tid = threadIdx.x;
    int pout = 0, pin = 1;
    buf[tid] = tid < n ? in[tid] : 0;
    __syncthreads();
    for (int off = 1; off < blockDim.x; off <<= 1) {
        pout = 1 - pout;
        pin = 1 - pout;
        int v = buf[pin * blockDim.x + tid];
        if (tid >= off)
            v += buf[pin * blockDim.x + tid - off];
        buf[pout * blockDim.x + tid] = v;
        __syncthreads();
    }
    if (tid < n)
        out[tid] = buf[pout * blockDim.x + tid];
}

extern "C" __global__ void scan_blelloch(const int *in, int *out, int n)
{
    extern __shared__ int temp[]; // n ints, n a power of two = 2 * blockDim.x
    int tid = threadIdx.x;
    int offset = 1;
    temp[2 * tid] = in[2 * tid];
    temp[2 * tid + 1] = in[2 * tid + 1];
    for (int d = n >> 1; d > 0; d >>= 1) {
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1;
            int bi = offset * (2 * tid + 2) - 1;
            temp[bi] += temp[ai];
        }
        offset *= 2;
    }
    if (tid == 0)
        temp[n - 1] = 0;
    for (int d = 1; d < n; d *= 2) {
        offset >>= 1;
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1;
            int bi = offset * (2 * tid + 2) - 1;
            int t = temp[ai];
            temp[ai] = temp[bi];
            temp[bi] += t;
        }
    }
    __syncthreads();
    out[2 * tid] = temp[2 * tid];
    out[2 * tid + 1] = temp[2 * tid + 1];
}

// Inclusive scan of each block's blockDim.x elements over a zero-padded,
// volatile buffer: no thread diverges, and each step has two barriers
// (read, then write), as many scans in the wild are written.
extern "C" __global__ void scan_padded(const unsigned *in, unsigned *out)
{
    extern __shared__ unsigned padded[]; // 2 * blockDim.x
    volatile unsigned *s = padded;
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned pos = blockDim.x + threadIdx.x;
    s[threadIdx.x] = 0;
    s[pos] = in[i];
    for (unsigned off = 1; off < blockDim.x; off <<= 1) {
        __syncthreads();
        unsigned t = s[pos] + s[pos - off];
        __syncthreads();
        s[pos] = t;
    }
    out[i] = s[pos];
}
