// CUDA graphs: a graph built node by node (memset, kernels in a diamond,
// a copy back, a host node) launched several times; a kernel node's
// parameters changed in the instantiated graph; cudaGraphExecUpdate from
// a graph of the same shape; stream capture across two streams (fork and
// join through events) of copies from pageable memory, kernels and a host
// function, launched after the host input changed; a synchronize on a
// capturing stream refused and the capture invalidated; a captured chain
// of 256 order-dependent kernels between a memset and an event record,
// launched 8 times (each launch crosses to the host as one request).
// Results checked against the CPU.
#define PROGRAM "graphs"
#include "common.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

__global__ void iota_scaled(int* x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += k * i;
}

__global__ void add_const(const int* x, int* y, int n, int c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + c;
}

__global__ void combine(const int* a, const int* b, int* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * 2 - b[i];
}

__global__ void mix(int* x, int n, int k) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (x[i] * 31 + k + i) & 0xffff;
}

static void CUDART_CB count_up(void* p) { ++*(int*)p; }

static const int N = 1000, T = 128, B = (N + T - 1) / T;

static cudaKernelNodeParams kparams(void* f, void** args) {
    cudaKernelNodeParams k = {};
    k.func = f;
    k.gridDim = dim3(B);
    k.blockDim = dim3(T);
    k.kernelParams = args;
    return k;
}

static void explicit_graph() {
    int *x, *y, *z, *out;
    CHECK(cudaMalloc(&x, N * sizeof(int)));
    CHECK(cudaMalloc(&y, N * sizeof(int)));
    CHECK(cudaMalloc(&z, N * sizeof(int)));
    CHECK(cudaMalloc(&out, N * sizeof(int)));
    std::vector<int> host(N, -1);
    int calls = 0;

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemsetParams ms = {};
    ms.dst = x;
    ms.value = 0;
    ms.elementSize = 4;
    ms.width = N;
    ms.height = 1;
    cudaGraphNode_t zero, fill, plus, times, join, back, host_node;
    CHECK(cudaGraphAddMemsetNode(&zero, g, nullptr, 0, &ms));
    int n = N, k = 3, c1 = 1, c2 = 100;
    void* fill_args[] = {&x, &n, &k};
    cudaKernelNodeParams kp = kparams((void*)iota_scaled, fill_args);
    CHECK(cudaGraphAddKernelNode(&fill, g, &zero, 1, &kp));
    void* plus_args[] = {&x, &y, &n, &c1};
    kp = kparams((void*)add_const, plus_args);
    CHECK(cudaGraphAddKernelNode(&plus, g, &fill, 1, &kp));
    void* times_args[] = {&x, &z, &n, &c2};
    kp = kparams((void*)add_const, times_args);
    CHECK(cudaGraphAddKernelNode(&times, g, &fill, 1, &kp));
    cudaGraphNode_t both[] = {plus, times};
    void* join_args[] = {&y, &z, &out, &n};
    kp = kparams((void*)combine, join_args);
    CHECK(cudaGraphAddKernelNode(&join, g, both, 2, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&back, g, &join, 1, host.data(), out, N * sizeof(int),
                                   cudaMemcpyDeviceToHost));
    cudaHostNodeParams hp = {count_up, &calls};
    CHECK(cudaGraphAddHostNode(&host_node, g, &back, 1, &hp));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    EXPECT(count == 7, "the graph has %zu nodes, want 7", count);

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    for (int r = 0; r < 3; r++) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(calls == 3, "host node ran %d times, want 3", calls);
    // out = 2 * (3i + 1) - (3i + 100)
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == 3 * i - 98, "out[%d] = %d, want %d", i, host[i], 3 * i - 98);

    // New parameters for the instantiated "plus" node only.
    int c3 = 50;
    void* plus2_args[] = {&x, &y, &n, &c3};
    kp = kparams((void*)add_const, plus2_args);
    CHECK(cudaGraphExecKernelNodeSetParams(exec, plus, &kp));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == 3 * i, "after set-params out[%d] = %d, want %d", i, host[i], 3 * i);

    // A clone with the fill kernel's k changed, applied by exec update.
    cudaGraph_t g2;
    CHECK(cudaGraphClone(&g2, g));
    size_t n2 = 7;
    std::vector<cudaGraphNode_t> nodes(n2);
    CHECK(cudaGraphGetNodes(g2, nodes.data(), &n2));
    int k5 = 5;
    void* fill5_args[] = {&x, &n, &k5};
    kp = kparams((void*)iota_scaled, fill5_args);
    CHECK(cudaGraphKernelNodeSetParams(nodes[1], &kp));
    cudaGraphExecUpdateResultInfo info = {};
    CHECK(cudaGraphExecUpdate(exec, g2, &info));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaStreamSynchronize(s));
    // out = 2 * (5i + 1) - (5i + 100)
    for (int i = 0; i < N; i++)
        EXPECT(host[i] == 5 * i - 98, "after update out[%d] = %d, want %d", i, host[i], 5 * i - 98);
    EXPECT(calls == 5, "host node ran %d times, want 5", calls);

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g2));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
    for (int* p : {x, y, z, out}) CHECK(cudaFree(p));
}

// What cudaGraphDebugDotPrint writes for `g`.
static std::string dot_text(cudaGraph_t g, unsigned flags) {
    char path[] = "/tmp/fairgpu-dot-XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0, "mkstemp");
    close(fd);
    CHECK(cudaGraphDebugDotPrint(g, path, flags));
    std::string text;
    if (FILE* f = std::fopen(path, "r")) {
        char buf[4096];
        size_t got;
        while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, got);
        std::fclose(f);
    }
    unlink(path);
    return text;
}

static void captured_graph() {
    int *x, *y, *out;
    CHECK(cudaMalloc(&x, N * sizeof(int)));
    CHECK(cudaMalloc(&y, N * sizeof(int)));
    CHECK(cudaMalloc(&out, N * sizeof(int)));
    std::vector<int> in(N), host(N, -1);
    int calls = 0;
    cudaStream_t s1, s2;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    cudaEvent_t fork, joined;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));

    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus st;
    CHECK(cudaStreamIsCapturing(s1, &st));
    EXPECT(st == cudaStreamCaptureStatusActive, "s1 capture status %d", (int)st);
    CHECK(cudaMemcpyAsync(x, in.data(), N * sizeof(int), cudaMemcpyHostToDevice, s1));
    CHECK(cudaEventRecord(fork, s1));
    CHECK(cudaStreamWaitEvent(s2, fork, 0));
    CHECK(cudaStreamIsCapturing(s2, &st));
    EXPECT(st == cudaStreamCaptureStatusActive, "s2 did not join the capture: %d", (int)st);
    add_const<<<B, T, 0, s2>>>(x, y, N, 7);  // y = in + 7, on the forked stream
    iota_scaled<<<B, T, 0, s1>>>(x, N, 1);   // x = in + i
    CHECK(cudaEventRecord(joined, s2));
    CHECK(cudaStreamWaitEvent(s1, joined, 0));
    combine<<<B, T, 0, s1>>>(x, y, out, N);  // out = 2 (in + i) - (in + 7)
    CHECK(cudaMemcpyAsync(host.data(), out, N * sizeof(int), cudaMemcpyDeviceToHost, s1));
    CHECK(cudaLaunchHostFunc(s1, count_up, &calls));
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s1, &g));
    CHECK(cudaStreamIsCapturing(s1, &st));
    EXPECT(st == cudaStreamCaptureStatusNone, "s1 still capturing: %d", (int)st);
    EXPECT(calls == 0 && host[0] == -1, "captured work ran during the capture");
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    EXPECT(count == 6, "captured %zu nodes, want 6", count);
    // Its DOT text, plain and verbose: the verbose one says more.
    std::string plain = dot_text(g, 0), verbose = dot_text(g, cudaGraphDebugDotFlagsVerbose);
    EXPECT(plain.find("digraph") != std::string::npos && plain.find("->") != std::string::npos,
           "DOT text: %s", plain.c_str());
    EXPECT(verbose.size() > plain.size(), "the verbose DOT text says no more: %s", verbose.c_str());

    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    for (int round = 0; round < 2; round++) {
        // The copy node reads the pageable input when the graph runs.
        for (int i = 0; i < N; i++) in[i] = (i * 37 + round * 11) % 501;
        CHECK(cudaGraphLaunch(exec, s1));
        CHECK(cudaStreamSynchronize(s1));
        for (int i = 0; i < N; i++) {
            int want = in[i] + 2 * i - 7;
            EXPECT(host[i] == want, "round %d out[%d] = %d, want %d", round, i, host[i], want);
        }
    }
    EXPECT(calls == 2, "captured host function ran %d times, want 2", calls);

    // A synchronize on a capturing stream is refused and ends the capture
    // invalidated; the stream works afterwards.
    CHECK(cudaStreamBeginCapture(s2, cudaStreamCaptureModeRelaxed));
    add_const<<<B, T, 0, s2>>>(x, y, N, 1);
    EXPECT_ERR(cudaStreamSynchronize(s2), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t bad = nullptr;
    EXPECT_ERR(cudaStreamEndCapture(s2, &bad), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    add_const<<<B, T, 0, s2>>>(x, y, N, 1);
    CHECK(cudaStreamSynchronize(s2));

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaEventDestroy(joined));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    for (int* p : {x, y, out}) CHECK(cudaFree(p));
}

// What a capture refuses, as the driver does: ending one on a stream not
// capturing, or on a stream that only joined it (which invalidates it); a
// fork never joined back; a stream query inside it (invalidates it); the
// legacy NULL stream asked about while a blocking stream captures (the
// capture goes on).
static void capture_errors() {
    int* x;
    CHECK(cudaMalloc(&x, N * sizeof(int)));
    cudaStream_t s1, s2, blocking;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaStreamCreate(&blocking));
    cudaEvent_t e;
    CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    cudaGraph_t g = nullptr;
    cudaStreamCaptureStatus st;

    EXPECT_ERR(cudaStreamEndCapture(s2, &g), cudaErrorIllegalState);
    (void)cudaGetLastError();

    // s2 joins s1's capture; ending it on s2 is unmatched, and s1's end
    // then finds the capture invalidated.
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
    CHECK(cudaEventRecord(e, s1));
    CHECK(cudaStreamWaitEvent(s2, e, 0));
    add_const<<<B, T, 0, s2>>>(x, x, N, 1);
    EXPECT_ERR(cudaStreamEndCapture(s2, &g), cudaErrorStreamCaptureUnmatched);
    (void)cudaGetLastError();
    EXPECT_ERR(cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();
    CHECK(cudaStreamIsCapturing(s1, &st));
    EXPECT(st == cudaStreamCaptureStatusNone, "s1 still capturing: %d", (int)st);
    CHECK(cudaStreamIsCapturing(s2, &st));
    EXPECT(st == cudaStreamCaptureStatusNone, "s2 still capturing: %d", (int)st);

    // A fork with work of its own that s1 never waits for: unjoined.
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
    CHECK(cudaEventRecord(e, s1));
    CHECK(cudaStreamWaitEvent(s2, e, 0));
    add_const<<<B, T, 0, s2>>>(x, x, N, 1);
    add_const<<<B, T, 0, s1>>>(x, x, N, 2);
    EXPECT_ERR(cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureUnjoined);
    (void)cudaGetLastError();
    CHECK(cudaStreamIsCapturing(s2, &st));
    EXPECT(st == cudaStreamCaptureStatusNone, "s2 still capturing: %d", (int)st);

    // Querying a capturing stream invalidates its capture.
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeRelaxed));
    add_const<<<B, T, 0, s1>>>(x, x, N, 1);
    EXPECT(cudaStreamQuery(s1) == cudaErrorStreamCaptureUnsupported,
           "a query of a capturing stream was not refused");
    (void)cudaGetLastError();
    EXPECT_ERR(cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureInvalidated);
    (void)cudaGetLastError();

    // The legacy stream, asked while a blocking stream captures.
    CHECK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed));
    add_const<<<B, T, 0, blocking>>>(x, x, N, 1);
    EXPECT_ERR(cudaStreamIsCapturing(cudaStreamLegacy, &st), cudaErrorStreamCaptureImplicit);
    (void)cudaGetLastError();
    CHECK(cudaStreamEndCapture(blocking, &g));
    CHECK(cudaStreamIsCapturing(cudaStreamLegacy, &st));
    EXPECT(st == cudaStreamCaptureStatusNone, "the legacy stream captures: %d", (int)st);
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    EXPECT(count == 1, "captured %zu nodes past the refused query, want 1", count);
    CHECK(cudaGraphDestroy(g));

    // Every stream works afterwards.
    for (cudaStream_t s : {s1, s2, blocking}) {
        add_const<<<B, T, 0, s>>>(x, x, N, 1);
        CHECK(cudaStreamSynchronize(s));
    }
    CHECK(cudaEventDestroy(e));
    for (cudaStream_t s : {s1, s2, blocking}) CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
}

static const int CHAIN = 256, CHAIN_LAUNCHES = 8;

static void kernel_chain() {
    int* x;
    CHECK(cudaMalloc(&x, N * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t done, inner;
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&inner, cudaEventDisableTiming));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMemsetAsync(x, 0, N * sizeof(int), s));
    for (int k = 0; k < CHAIN; k++) mix<<<B, T, 0, s>>>(x, N, k);
    // An event recorded in a capture only orders work inside it; with
    // cudaEventRecordExternal it is a node: each launch records it.
    CHECK(cudaEventRecord(inner, s));
    CHECK(cudaEventRecordWithFlags(done, s, cudaEventRecordExternal));
    cudaGraph_t g;
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    std::vector<int> want(N, 0), host(N, -1);
    for (int k = 0; k < CHAIN; k++)
        for (int i = 0; i < N; i++) want[i] = (want[i] * 31 + k + i) & 0xffff;
    for (int round = 0; round < CHAIN_LAUNCHES; round++) {
        CHECK(cudaGraphLaunch(exec, s));
        if (round == 0) {
            // No work outside the graph records the capture's own event:
            // the driver refuses to wait for it.
            EXPECT_ERR(cudaEventSynchronize(inner), cudaErrorInvalidValue);
            EXPECT_ERR(cudaEventQuery(inner), cudaErrorInvalidValue);
            (void)cudaGetLastError();
        }
        if (round == 0 || round == CHAIN_LAUNCHES - 1) {
            CHECK(cudaEventSynchronize(done));
            CHECK(cudaMemcpy(host.data(), x, N * sizeof(int), cudaMemcpyDeviceToHost));
            for (int i = 0; i < N; i++)
                EXPECT(host[i] == want[i], "chain round %d x[%d] = %d, want %d", round, i, host[i],
                       want[i]);
        }
    }
    CHECK(cudaStreamSynchronize(s));
    printf("CHAIN_KERNELS %d\n", CHAIN * CHAIN_LAUNCHES);
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaEventDestroy(inner));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(x));
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    explicit_graph();
    captured_graph();
    capture_errors();
    kernel_chain();
    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
