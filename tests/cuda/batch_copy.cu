// Batched copies (cudaMemcpyBatchAsync, CUDA 12.8/13): host to device,
// device to device and device to host in one batch with two sets of
// attributes, every byte checked; the batches the driver refuses (the
// legacy stream, bad attribute indices, no access order, a copy past its
// allocation) are refused.
#define PROGRAM "batch_copy"
#include "common.h"

#if CUDART_VERSION >= 13000
#define BATCH(d, s, n, c, a, i, na, stream) cudaMemcpyBatchAsync(d, s, n, c, a, i, na, stream)
#else
static size_t fail_idx;
#define BATCH(d, s, n, c, a, i, na, stream) cudaMemcpyBatchAsync(d, s, n, c, a, i, na, &fail_idx, stream)
#endif

int main() {
    size_t free0, total;
    first_call(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
    const size_t n = 1 << 16;
    unsigned char *x, *y, *z;
    CHECK(cudaMalloc(&x, n));
    CHECK(cudaMalloc(&y, n));
    CHECK(cudaMalloc(&z, 64));
    static unsigned char a[n], b[n];
    fill_pattern(a, n, 42);
    unsigned long long word = 0x0123456789abcdefull;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // x <- a; y <- x; b <- y (in stream order); z <- a stack word.
    void* dsts[] = {x, y, b, z};
    void* srcs[] = {a, x, y, &word};
    size_t sizes[] = {n, n, n, sizeof word};
    cudaMemcpyAttributes attrs[2] = {};
    attrs[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attrs[1].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
    size_t idxs[] = {0, 3};
    CHECK(BATCH(dsts, srcs, sizes, 4, attrs, idxs, 2, s));
    word = 0;  // read during the call: the copy has it already
    CHECK(cudaStreamSynchronize(s));
    long at = first_diff(a, b, n);
    EXPECT(at < 0, "the batch's round trip differs at byte %ld", at);
    unsigned long long back = 0;
    CHECK(cudaMemcpy(&back, z, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back == 0x0123456789abcdefull, "the stack word copied as %llx", back);

    // Refused: the legacy stream, indices not starting at 0 or not
    // increasing, an attribute without an access order.
    EXPECT_ERR(BATCH(dsts, srcs, sizes, 4, attrs, idxs, 2, cudaStreamLegacy), cudaErrorInvalidValue);
    size_t bad_idxs[] = {1, 3};
    EXPECT_ERR(BATCH(dsts, srcs, sizes, 4, attrs, bad_idxs, 2, s), cudaErrorInvalidValue);
    size_t down_idxs[] = {0, 0};
    EXPECT_ERR(BATCH(dsts, srcs, sizes, 4, attrs, down_idxs, 2, s), cudaErrorInvalidValue);
    cudaMemcpyAttributes none[1] = {};
    size_t zero[] = {0};
    EXPECT_ERR(BATCH(dsts, srcs, sizes, 4, none, zero, 1, s), cudaErrorInvalidValue);
    EXPECT_ERR(BATCH(dsts, srcs, sizes, 4, attrs, idxs, 5, s), cudaErrorInvalidValue);

    // A copy past its allocation fails the batch at that copy; the ones
    // before it were issued.
    CHECK(cudaMemset(z, 0, 64));
    void* d2[] = {z, z};
    void* s2[] = {&word, a};
    size_t n2[] = {sizeof word, 65};
    word = 77;
    cudaError_t e = BATCH(d2, s2, n2, 2, attrs, zero, 1, s);
    EXPECT(e != cudaSuccess, "a copy past its allocation was accepted");
#if CUDART_VERSION < 13000
    EXPECT(fail_idx == 1, "failIdx %zu, want 1", fail_idx);
#endif
    cudaGetLastError();
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(&back, z, sizeof back, cudaMemcpyDeviceToHost));
    EXPECT(back == 77, "the first copy of the failed batch gave %llu", back);

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
    CHECK(cudaFree(z));
    pass();
    return 0;
}
