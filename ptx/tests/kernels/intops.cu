// Integer arithmetic: division and remainder, wide multiplies, bit ops.
extern "C" __global__ void intops(const int *a, const int *b, int *out, long long *out64, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int x = a[i], y = b[i];
    unsigned ux = (unsigned)x, uy = (unsigned)y;
    int *o = out + 16 * i;
    o[0] = y != 0 ? x / y : 0;
    o[1] = y != 0 ? x % y : 0;
    o[2] = uy != 0 ? (int)(ux / uy) : 0;
    o[3] = uy != 0 ? (int)(ux % uy) : 0;
    o[4] = __mulhi(x, y);
    o[5] = (int)__umulhi(ux, uy);
    o[6] = __popc(ux);
    o[7] = __clz(x);
    o[8] = (int)__brev(ux);
    o[9] = __ffs(x);
    o[10] = (x >> (y & 31)) ^ (int)(ux >> (uy & 31));
    o[11] = (int)__byte_perm(ux, uy, 0x5140);
    o[12] = min(x, y) + max(x, y) * 3;
    o[13] = abs(x) - (int)umin(ux, uy);
    o[14] = (x << 3) | (y & 0xff0f);
    o[15] = (int)((ux >> 5) & 0x3ff) + __sad(x, y, 7u);
    long long lx = x, ly = y;
    out64[4 * i + 0] = lx * ly;
    out64[4 * i + 1] = ly != 0 ? (lx * 977) / ly : -1;
    out64[4 * i + 2] = (long long)((unsigned long long)(lx * 31) % 1000003ull);
    out64[4 * i + 3] = __popcll((unsigned long long)(lx * ly)) + __clzll(lx);
}
