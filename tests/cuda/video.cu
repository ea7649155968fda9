// SIMD video arithmetic: per-byte and per-halfword sums, differences,
// saturation, minima and maxima, through CUDA's SIMD intrinsics and the
// sum-of-absolute-differences instruction stereo matching uses
// (`vabsdiff4 ... .add`, inline PTX), checked against the CPU.
#define PROGRAM "video"
#include "common.h"

enum { N = 512, OPS = 10 };

__device__ unsigned int sad4(unsigned int a, unsigned int b, unsigned int c) {
    unsigned int d;
    asm("vabsdiff4.u32.u32.u32.add %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

__global__ void simd(const unsigned int* a, const unsigned int* b, unsigned int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int x = a[i], y = b[i];
    unsigned int* o = out + (size_t)i * OPS;
    o[0] = sad4(x, y, (unsigned int)i);
    o[1] = __vabsdiffu4(x, y);
    o[2] = __vadd4(x, y);
    o[3] = __vaddus4(x, y);
    o[4] = __vsubus4(x, y);
    o[5] = __vsubss4(x, y);
    o[6] = __vmaxs4(x, y);
    o[7] = __vminu4(x, y);
    o[8] = __vmaxu2(x, y);
    o[9] = __vmins2(x, y);
}

// Lane k of x, `bits` wide, sign-extended when `sgn`.
static int64_t lane(unsigned int x, int k, int bits, bool sgn) {
    int64_t v = (x >> (k * bits)) & ((1u << bits) - 1);
    if (sgn && (v >> (bits - 1))) v -= (int64_t)1 << bits;
    return v;
}

static int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

enum Kind { ABSDIFF, ADD, ADD_SAT, SUB_SAT, SUB_SSAT, MAX, MIN };

// Lane-wise `kind` on `lanes` lanes of x and y.
static unsigned int per_lane(Kind kind, int lanes, bool sgn, unsigned int x, unsigned int y) {
    int bits = 32 / lanes;
    unsigned int r = 0;
    for (int k = 0; k < lanes; k++) {
        int64_t p = lane(x, k, bits, sgn), q = lane(y, k, bits, sgn), v = 0;
        int64_t smax = ((int64_t)1 << (bits - 1)) - 1, umax = ((int64_t)1 << bits) - 1;
        switch (kind) {
            case ABSDIFF: v = p > q ? p - q : q - p; break;
            case ADD: v = p + q; break;
            case ADD_SAT: v = clamp(p + q, 0, umax); break;
            case SUB_SAT: v = clamp(p - q, 0, umax); break;
            case SUB_SSAT: v = clamp(p - q, -smax - 1, smax); break;
            case MAX: v = p > q ? p : q; break;
            case MIN: v = p < q ? p : q; break;
        }
        r |= (unsigned int)((uint64_t)v & (uint64_t)umax) << (k * bits);
    }
    return r;
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    static unsigned int ha[N], hb[N], hout[N * OPS];
    Rng rng(7);
    for (int i = 0; i < N; i++) {
        ha[i] = (unsigned int)rng.next();
        hb[i] = (unsigned int)rng.next();
    }
    // Edge lanes: equal, extreme and opposite-signed bytes and halfwords.
    ha[0] = 0x00ff807fu, hb[0] = 0xff00807fu;
    ha[1] = 0x7fff8000u, hb[1] = 0x80007fffu;
    ha[2] = 0xffffffffu, hb[2] = 0x01010101u;
    unsigned int *a, *b, *out;
    CHECK(cudaMalloc((void**)&a, sizeof ha));
    CHECK(cudaMalloc((void**)&b, sizeof hb));
    CHECK(cudaMalloc((void**)&out, sizeof hout));
    CHECK(cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice));
    simd<<<(N + 127) / 128, 128>>>(a, b, out, N);
    LAUNCHED("simd");
    CHECK(cudaMemcpy(hout, out, sizeof hout, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        unsigned int x = ha[i], y = hb[i];
        unsigned int sad = (unsigned int)i;
        for (int k = 0; k < 4; k++) {
            int64_t p = lane(x, k, 8, false), q = lane(y, k, 8, false);
            sad += (unsigned int)(p > q ? p - q : q - p);
        }
        const unsigned int want[OPS] = {
            sad,
            per_lane(ABSDIFF, 4, false, x, y),
            per_lane(ADD, 4, false, x, y),
            per_lane(ADD_SAT, 4, false, x, y),
            per_lane(SUB_SAT, 4, false, x, y),
            per_lane(SUB_SSAT, 4, true, x, y),
            per_lane(MAX, 4, true, x, y),
            per_lane(MIN, 4, false, x, y),
            per_lane(MAX, 2, false, x, y),
            per_lane(MIN, 2, true, x, y),
        };
        for (int k = 0; k < OPS; k++)
            EXPECT(hout[i * OPS + k] == want[k], "op %d of %#x, %#x: %#x, want %#x", k, x, y,
                   hout[i * OPS + k], want[k]);
    }
    pass();
    return 0;
}
