// Graph memory nodes and a graph's structure: allocations a graph makes
// and frees as it runs (explicit nodes, stream capture of cudaMallocAsync
// and cudaFreeAsync, the generic cudaGraphAddNode), allocations left live
// and freed outside the graph or by another graph, relaunch rules, the
// footprint counters, and the queries and edits of nodes and edges.
// Results are checked against the CPU when FAIRGPU_CHECK_RESULTS=1.
#define PROGRAM "graph_memory"
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "common.h"

// User objects' destructors count here (they run on a thread of the
// driver's).
static std::atomic<int> destroyed{0};
static void destroy_one(void* p) { destroyed.fetch_add(*(int*)p); }

// Waits up to two seconds for `destroyed` to reach `want`.
static bool destroyed_reaches(int want) {
    for (int i = 0; i < 200 && destroyed.load() < want; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return destroyed.load() == want;
}

__global__ void square(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * in[i];
}

__global__ void negate(const float* in, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = -in[i];
}

__global__ void add_one(float* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1.0f;
}

static const int N = 5000;
static const size_t BYTES = N * sizeof(float);
static const int THREADS = 256;
static const int BLOCKS = (N + THREADS - 1) / THREADS;

#if CUDART_VERSION >= 13000
#define DEPS_OF(node, out, n) cudaGraphNodeGetDependencies(node, out, nullptr, n)
#define USERS_OF(node, out, n) cudaGraphNodeGetDependentNodes(node, out, nullptr, n)
#define EDGES_OF(g, from, to, n) cudaGraphGetEdges(g, from, to, nullptr, n)
#define ADD_NODE(node, g, deps, n, params) cudaGraphAddNode(node, g, deps, nullptr, n, params)
#define REMOVE_DEPS(g, from, to, n) cudaGraphRemoveDependencies(g, from, to, nullptr, n)
#else
#define DEPS_OF(node, out, n) cudaGraphNodeGetDependencies(node, out, n)
#define USERS_OF(node, out, n) cudaGraphNodeGetDependentNodes(node, out, n)
#define EDGES_OF(g, from, to, n) cudaGraphGetEdges(g, from, to, n)
#define ADD_NODE(node, g, deps, n, params) cudaGraphAddNode(node, g, deps, n, params)
#define REMOVE_DEPS(g, from, to, n) cudaGraphRemoveDependencies(g, from, to, n)
#endif

static cudaMemAllocNodeParams alloc_params() {
    cudaMemAllocNodeParams p;
    std::memset(&p, 0, sizeof p);
    p.bytesize = BYTES;
    p.poolProps.allocType = cudaMemAllocationTypePinned;
    p.poolProps.location.type = cudaMemLocationTypeDevice;
    p.poolProps.location.id = 0;
    return p;
}

static void fill(std::vector<float>& v, int seed) {
    Rng r(seed);
    for (auto& x : v) x = r.unit() * 4.0f;
}

// -(x*x) for each input, checked element by element.
static void check_neg_squares(const std::vector<float>& in, const std::vector<float>& out,
                              const char* what) {
    if (!check_results()) return;
    for (int i = 0; i < N; i++) {
        float want = -(in[i] * in[i]);
        EXPECT(out[i] == want, "%s: element %d is %g, want %g", what, i, out[i], want);
    }
}

static uint64_t graph_mem(cudaGraphMemAttributeType a) {
    size_t v = 0;
    CHECK(cudaDeviceGetGraphMemAttribute(0, a, &v));
    return v;
}

static cudaKernelNodeParams kernel_params(void* fn, void** args) {
    cudaKernelNodeParams k;
    std::memset(&k, 0, sizeof k);
    k.func = fn;
    k.gridDim = dim3(BLOCKS);
    k.blockDim = dim3(THREADS);
    k.kernelParams = args;
    return k;
}

// alloc in -> alloc sq -> copy host->in -> square -> free in -> alloc neg
// -> negate -> copy neg->host -> free sq, free neg: built node by node.
static cudaGraph_t explicit_graph(float* host_in, float* host_out, float** keep_neg) {
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaMemAllocNodeParams ap = alloc_params();
    cudaGraphNode_t a_in, a_sq, a_neg, c_in, k_sq, f_in, k_neg, c_out, f_sq;
    CHECK(cudaGraphAddMemAllocNode(&a_in, g, nullptr, 0, &ap));
    float* d_in = (float*)ap.dptr;
    CHECK(cudaGraphAddMemAllocNode(&a_sq, g, &a_in, 1, &ap));
    float* d_sq = (float*)ap.dptr;
    EXPECT(d_in != nullptr && d_sq != nullptr && d_in != d_sq,
           "allocation nodes gave %p and %p", (void*)d_in, (void*)d_sq);
    CHECK(cudaGraphAddMemcpyNode1D(&c_in, g, &a_sq, 1, d_in, host_in, BYTES,
                                   cudaMemcpyHostToDevice));
    int n = N;
    void* sq_args[] = {&d_in, &d_sq, &n};
    cudaKernelNodeParams kp = kernel_params((void*)square, sq_args);
    CHECK(cudaGraphAddKernelNode(&k_sq, g, &c_in, 1, &kp));
    CHECK(cudaGraphAddMemFreeNode(&f_in, g, &k_sq, 1, d_in));
    CHECK(cudaGraphAddMemAllocNode(&a_neg, g, &f_in, 1, &ap));
    float* d_neg = (float*)ap.dptr;
    void* neg_args[] = {&d_sq, &d_neg, &n};
    kp = kernel_params((void*)negate, neg_args);
    CHECK(cudaGraphAddKernelNode(&k_neg, g, &a_neg, 1, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&c_out, g, &k_neg, 1, host_out, d_neg, BYTES,
                                   cudaMemcpyDeviceToHost));
    CHECK(cudaGraphAddMemFreeNode(&f_sq, g, &k_neg, 1, d_sq));
    if (keep_neg != nullptr) {
        *keep_neg = d_neg;
    } else {
        cudaGraphNode_t f_neg;
        CHECK(cudaGraphAddMemFreeNode(&f_neg, g, &c_out, 1, d_neg));
    }

    // What the nodes say about themselves.
    cudaGraphNodeType t;
    CHECK(cudaGraphNodeGetType(a_in, &t));
    EXPECT(t == cudaGraphNodeTypeMemAlloc, "allocation node of type %d", (int)t);
    CHECK(cudaGraphNodeGetType(f_in, &t));
    EXPECT(t == cudaGraphNodeTypeMemFree, "free node of type %d", (int)t);
    cudaMemAllocNodeParams got;
    CHECK(cudaGraphMemAllocNodeGetParams(a_sq, &got));
    EXPECT(got.dptr == d_sq && got.bytesize == BYTES, "allocation node params: %p, %zu",
           got.dptr, got.bytesize);
    void* freed = nullptr;
    CHECK(cudaGraphMemFreeNodeGetParams(f_in, &freed));
    EXPECT(freed == d_in, "free node frees %p, want %p", freed, (void*)d_in);
    return g;
}

static void captured_negate(cudaStream_t s, float* host_in, float* host_out) {
    float *d_in, *d_sq, *d_neg;
    CHECK(cudaMallocAsync(&d_in, BYTES, s));
    CHECK(cudaMallocAsync(&d_sq, BYTES, s));
    CHECK(cudaMemcpyAsync(d_in, host_in, BYTES, cudaMemcpyHostToDevice, s));
    square<<<BLOCKS, THREADS, 0, s>>>(d_in, d_sq, N);
    CHECK(cudaFreeAsync(d_in, s));
    CHECK(cudaMallocAsync(&d_neg, BYTES, s));
    negate<<<BLOCKS, THREADS, 0, s>>>(d_sq, d_neg, N);
    CHECK(cudaMemcpyAsync(host_out, d_neg, BYTES, cudaMemcpyDeviceToHost, s));
    CHECK(cudaFreeAsync(d_sq, s));
    CHECK(cudaFreeAsync(d_neg, s));
}

static size_t count_nodes(cudaGraph_t g, cudaGraphNodeType want) {
    size_t n = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &n));
    std::vector<cudaGraphNode_t> nodes(n);
    CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
    size_t k = 0;
    for (auto node : nodes) {
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(node, &t));
        k += t == want;
    }
    return k;
}

int main() {
    first_call(cudaSetDevice(0), "cudaSetDevice");
    int pools = 0;
    CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, 0));
    EXPECT(pools == 1, "memory pools not supported");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<float> in(N), out(N);

    // 1. An explicit graph, launched three times with new inputs.
    {
        cudaGraph_t g = explicit_graph(in.data(), out.data(), nullptr);
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        for (int round = 0; round < 3; round++) {
            fill(in, 10 + round);
            CHECK(cudaGraphLaunch(e, s));
            CHECK(cudaStreamSynchronize(s));
            check_neg_squares(in, out, "explicit graph");
            // The driver maps a graph's memory when it first runs, and
            // keeps it with the graph after its free nodes ran.
            EXPECT(graph_mem(cudaGraphMemAttrUsedMemCurrent) >= 3 * BYTES,
                   "graph memory in use after a launch: %llu",
                   (unsigned long long)graph_mem(cudaGraphMemAttrUsedMemCurrent));
        }
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
    }

    // 2. The same through stream capture of cudaMallocAsync/cudaFreeAsync.
    {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        captured_negate(s, in.data(), out.data());
        CHECK(cudaStreamEndCapture(s, &g));
        EXPECT(count_nodes(g, cudaGraphNodeTypeMemAlloc) == 3, "captured allocation nodes: %zu",
               count_nodes(g, cudaGraphNodeTypeMemAlloc));
        EXPECT(count_nodes(g, cudaGraphNodeTypeMemFree) == 3, "captured free nodes: %zu",
               count_nodes(g, cudaGraphNodeTypeMemFree));
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        for (int round = 0; round < 2; round++) {
            fill(in, 20 + round);
            CHECK(cudaGraphLaunch(e, s));
            CHECK(cudaStreamSynchronize(s));
            check_neg_squares(in, out, "captured graph");
        }
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
    }

    // 3. An allocation the graph leaves live: used and freed outside it,
    // freed by another graph, and the relaunch rules.
    {
        float* d_neg = nullptr;
        cudaGraph_t g = explicit_graph(in.data(), out.data(), &d_neg);
        cudaGraphExec_t e, auto_free;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        // A graph with memory nodes has one instantiation at a time, is
        // not cloned, and is not copied into another as a child.
        EXPECT(cudaGraphInstantiate(&auto_free, g, 0) != cudaSuccess,
               "a second instantiation of a graph with memory nodes succeeded");
        (void)cudaGetLastError();
        cudaGraph_t other;
        EXPECT(cudaGraphClone(&other, g) != cudaSuccess,
               "a graph with memory nodes was cloned");
        (void)cudaGetLastError();
        CHECK(cudaGraphCreate(&other, 0));
        cudaGraphNode_t child;
        EXPECT(cudaGraphAddChildGraphNode(&child, other, nullptr, 0, g) != cudaSuccess,
               "a graph with memory nodes was copied in as a child graph");
        (void)cudaGetLastError();
        CHECK(cudaGraphDestroy(other));

        fill(in, 30);
        CHECK(cudaGraphLaunch(e, s));
        add_one<<<BLOCKS, THREADS, 0, s>>>(d_neg, N);  // the live allocation, outside the graph
        CHECK(cudaStreamSynchronize(s));
        std::vector<float> back(N);
        CHECK(cudaMemcpy(back.data(), d_neg, BYTES, cudaMemcpyDeviceToHost));
        if (check_results())
            for (int i = 0; i < N; i++)
                EXPECT(back[i] == -(in[i] * in[i]) + 1.0f, "live allocation, element %d: %g", i,
                       back[i]);
        // Still live: relaunching fails, and runs nothing.
        EXPECT_ERR(cudaGraphLaunch(e, s), cudaErrorInvalidValue);
        (void)cudaGetLastError();
        CHECK(cudaFree(d_neg));
        EXPECT_ERR(cudaFree(d_neg), cudaErrorInvalidValue);  // not live any more
        (void)cudaGetLastError();

        // Freed with cudaFreeAsync after a relaunch.
        fill(in, 31);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaFreeAsync(d_neg, s));
        CHECK(cudaStreamSynchronize(s));
        check_neg_squares(in, out, "relaunch after cudaFree");

        // Freed by a graph of its own.
        cudaGraph_t fg;
        cudaGraphNode_t fnode;
        CHECK(cudaGraphCreate(&fg, 0));
        CHECK(cudaGraphAddMemFreeNode(&fnode, fg, nullptr, 0, d_neg));
        cudaGraphExec_t fe;
        CHECK(cudaGraphInstantiate(&fe, fg, 0));
        fill(in, 32);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaGraphLaunch(fe, s));
        CHECK(cudaStreamSynchronize(s));
        check_neg_squares(in, out, "freed by another graph");

        // Instantiated to free on launch: two launches in a row.
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphInstantiate(&auto_free, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
        unsigned long long flags = 0;
        CHECK(cudaGraphExecGetFlags(auto_free, &flags));
        EXPECT(flags == cudaGraphInstantiateFlagAutoFreeOnLaunch, "exec flags %llu", flags);
        fill(in, 33);
        CHECK(cudaGraphLaunch(auto_free, s));
        CHECK(cudaGraphLaunch(auto_free, s));
        CHECK(cudaStreamSynchronize(s));
        check_neg_squares(in, out, "auto-free on launch");
        CHECK(cudaFree(d_neg));

        CHECK(cudaGraphExecDestroy(fe));
        CHECK(cudaGraphDestroy(fg));
        CHECK(cudaGraphExecDestroy(auto_free));
        CHECK(cudaGraphDestroy(g));
    }
    // Nothing holds graph memory any more.
    CHECK(cudaDeviceGraphMemTrim(0));
    EXPECT(graph_mem(cudaGraphMemAttrUsedMemCurrent) == 0, "graph memory still used: %llu",
           (unsigned long long)graph_mem(cudaGraphMemAttrUsedMemCurrent));
    EXPECT(graph_mem(cudaGraphMemAttrReservedMemCurrent) == 0,
           "graph memory still reserved: %llu",
           (unsigned long long)graph_mem(cudaGraphMemAttrReservedMemCurrent));
    EXPECT(graph_mem(cudaGraphMemAttrUsedMemHigh) >= 3 * BYTES, "high watermark %llu",
           (unsigned long long)graph_mem(cudaGraphMemAttrUsedMemHigh));
    {
        size_t zero = 0;
        CHECK(cudaDeviceSetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &zero));
        EXPECT(graph_mem(cudaGraphMemAttrUsedMemHigh) == 0, "high watermark not reset");
    }

    // 4. The generic node API: alloc, copy in, kernel, copy out, free.
    {
        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        // The struct has no default constructor: zeroed storage.
        alignas(cudaGraphNodeParams) unsigned char raw[sizeof(cudaGraphNodeParams)];
        std::memset(raw, 0, sizeof raw);
        cudaGraphNodeParams& p = *reinterpret_cast<cudaGraphNodeParams*>(raw);
        p.type = cudaGraphNodeTypeMemAlloc;
        cudaMemAllocNodeParams ap = alloc_params();
        p.alloc.poolProps = ap.poolProps;
        p.alloc.bytesize = ap.bytesize;
        cudaGraphNode_t a, cin, k, cout, f;
        CHECK(ADD_NODE(&a, g, nullptr, 0, &p));
        float* d = (float*)p.alloc.dptr;
        EXPECT(d != nullptr, "cudaGraphAddNode gave no address");
        CHECK(cudaGraphAddMemcpyNode1D(&cin, g, &a, 1, d, in.data(), BYTES,
                                       cudaMemcpyHostToDevice));
        int n = N;
        void* args[] = {&d, &n};
        std::memset(raw, 0, sizeof raw);
        p.type = cudaGraphNodeTypeKernel;
        p.kernel.func = (void*)add_one;
        p.kernel.gridDim = dim3(BLOCKS);
        p.kernel.blockDim = dim3(THREADS);
        p.kernel.kernelParams = args;
        CHECK(ADD_NODE(&k, g, &cin, 1, &p));
        CHECK(cudaGraphAddMemcpyNode1D(&cout, g, &k, 1, out.data(), d, BYTES,
                                       cudaMemcpyDeviceToHost));
        std::memset(raw, 0, sizeof raw);
        p.type = cudaGraphNodeTypeMemFree;
        p.free.dptr = d;
        CHECK(ADD_NODE(&f, g, &cout, 1, &p));

        // Structure: dependencies, dependents, edges.
        size_t nd = 8;
        cudaGraphNode_t deps[8];
        CHECK(DEPS_OF(k, deps, &nd));
        EXPECT(nd == 1 && deps[0] == cin, "kernel node: %zu dependencies", nd);
        nd = 8;
        CHECK(USERS_OF(k, deps, &nd));
        EXPECT(nd == 1 && deps[0] == cout, "kernel node: %zu dependents", nd);
        size_t ne = 0;
        CHECK(EDGES_OF(g, nullptr, nullptr, &ne));
        EXPECT(ne == 4, "%zu edges, want 4", ne);
        cudaGraphNode_t from[4], to[4];
        CHECK(EDGES_OF(g, from, to, &ne));
        EXPECT(ne == 4 && from[0] == a && to[0] == cin, "first edge wrong");

        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        fill(in, 40);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        if (check_results())
            for (int i = 0; i < N; i++)
                EXPECT(out[i] == in[i] + 1.0f, "generic nodes, element %d: %g", i, out[i]);
        // The kernel node turned off: the data goes through unchanged.
        CHECK(cudaGraphNodeSetEnabled(e, k, 0));
        unsigned on = 1;
        CHECK(cudaGraphNodeGetEnabled(e, k, &on));
        EXPECT(on == 0, "kernel node still enabled");
        fill(in, 41);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        if (check_results())
            for (int i = 0; i < N; i++)
                EXPECT(out[i] == in[i], "disabled kernel, element %d: %g", i, out[i]);
        CHECK(cudaGraphNodeSetEnabled(e, k, 1));

        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
    }

    // 5. A clone of a graph (ordinary memory), and edits of its structure.
    {
        float* d;
        CHECK(cudaMalloc(&d, BYTES));
        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphNode_t cin, k, cout;
        CHECK(cudaGraphAddMemcpyNode1D(&cin, g, nullptr, 0, d, in.data(), BYTES,
                                       cudaMemcpyHostToDevice));
        int n = N;
        void* args[] = {&d, &n};
        cudaKernelNodeParams kp = kernel_params((void*)add_one, args);
        CHECK(cudaGraphAddKernelNode(&k, g, &cin, 1, &kp));
        CHECK(cudaGraphAddMemcpyNode1D(&cout, g, &k, 1, out.data(), d, BYTES,
                                       cudaMemcpyDeviceToHost));
        cudaGraph_t c;
        CHECK(cudaGraphClone(&c, g));
        cudaGraphNode_t ck, ccin;
        CHECK(cudaGraphNodeFindInClone(&ck, k, c));
        CHECK(cudaGraphNodeFindInClone(&ccin, cin, c));
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(ck, &t));
        EXPECT(ck != k && t == cudaGraphNodeTypeKernel, "node found in clone");
        // The clone without its kernel node's incoming edge, then without
        // the node: the original is untouched.
        CHECK(REMOVE_DEPS(c, &ccin, &ck, 1));
        size_t nd = 8;
        cudaGraphNode_t deps[8];
        CHECK(DEPS_OF(ck, deps, &nd));
        EXPECT(nd == 0, "kernel node of the clone kept %zu dependencies", nd);
        CHECK(cudaGraphDestroyNode(ck));
        size_t ne = 0, nn = 0;
        CHECK(EDGES_OF(c, nullptr, nullptr, &ne));
        CHECK(cudaGraphGetNodes(c, nullptr, &nn));
        EXPECT(ne == 0 && nn == 2, "clone after removing its kernel node: %zu edges, %zu nodes",
               ne, nn);
        CHECK(EDGES_OF(g, nullptr, nullptr, &ne));
        EXPECT(ne == 2, "the original lost edges: %zu", ne);
        // Node parameters read back, and changed in the graph and in an
        // instantiated graph.
        cudaKernelNodeParams got;
        CHECK(cudaGraphKernelNodeGetParams(k, &got));
        EXPECT(got.func == (void*)add_one && got.gridDim.x == (unsigned)BLOCKS &&
                   got.blockDim.x == (unsigned)THREADS,
               "kernel node parameters read back wrong");
        EXPECT(got.kernelParams != nullptr && *(float**)got.kernelParams[0] == d &&
                   *(int*)got.kernelParams[1] == N,
               "kernel node arguments read back wrong");
        cudaMemcpy3DParms cp;
        CHECK(cudaGraphMemcpyNodeGetParams(cout, &cp));
        EXPECT(cp.extent.width * cp.extent.height * cp.extent.depth == BYTES,
               "copy node extent %zu x %zu x %zu", cp.extent.width, cp.extent.height,
               cp.extent.depth);
        // The clone copies without adding one; the original adds one.
        cudaGraphExec_t ce, oe;
        CHECK(cudaGraphInstantiate(&ce, c, 0));
        CHECK(cudaGraphInstantiate(&oe, g, 0));
        fill(in, 50);
        CHECK(cudaGraphLaunch(ce, s));
        CHECK(cudaStreamSynchronize(s));
        if (check_results())
            for (int i = 0; i < N; i++)
                EXPECT(out[i] == in[i], "clone without kernel, element %d: %g", i, out[i]);
        CHECK(cudaGraphLaunch(oe, s));
        CHECK(cudaStreamSynchronize(s));
        if (check_results())
            for (int i = 0; i < N; i++)
                EXPECT(out[i] == in[i] + 1.0f, "original, element %d: %g", i, out[i]);
        // A memset node added to the clone, then changed in its
        // instantiated graph: the value the launch writes is the new one.
        cudaGraphNode_t ms;
        cudaMemsetParams mp;
        std::memset(&mp, 0, sizeof mp);
        mp.dst = d;
        mp.elementSize = 4;
        mp.width = N;
        mp.height = 1;
        mp.value = 0x3f800000;  // 1.0f
        CHECK(cudaGraphAddMemsetNode(&ms, c, &ccin, 1, &mp));
        cudaMemsetParams mget;
        CHECK(cudaGraphMemsetNodeGetParams(ms, &mget));
        EXPECT(mget.value == 0x3f800000 && mget.width == (size_t)N && mget.dst == d,
               "memset node parameters read back wrong");
        // Through the generic node parameters too (a value the next call
        // replaces).
        {
            alignas(cudaGraphNodeParams) unsigned char raw[sizeof(cudaGraphNodeParams)];
            std::memset(raw, 0, sizeof raw);
            cudaGraphNodeParams& gp = *reinterpret_cast<cudaGraphNodeParams*>(raw);
            gp.type = cudaGraphNodeTypeMemset;
            gp.memset.dst = d;
            gp.memset.elementSize = 4;
            gp.memset.width = N;
            gp.memset.height = 1;
            gp.memset.value = 0x40a00000;  // 5.0f
            CHECK(cudaGraphNodeSetParams(ms, &gp));
            CHECK(cudaGraphMemsetNodeGetParams(ms, &mget));
            EXPECT(mget.value == 0x40a00000, "generic node parameters not taken");
        }
        cudaGraphExec_t me;
        CHECK(cudaGraphInstantiate(&me, c, 0));
        mp.value = 0x40000000;  // 2.0f
        CHECK(cudaGraphExecMemsetNodeSetParams(me, ms, &mp));
        CHECK(cudaGraphLaunch(me, s));
        CHECK(cudaStreamSynchronize(s));
        std::vector<float> seen(N);
        CHECK(cudaMemcpy(seen.data(), d, BYTES, cudaMemcpyDeviceToHost));
        if (check_results())
            for (int i = 0; i < N; i++)
                EXPECT(seen[i] == 2.0f, "memset node set to 2.0f, element %d: %g", i, seen[i]);
        CHECK(cudaGraphExecDestroy(me));
        CHECK(cudaGraphExecDestroy(ce));
        CHECK(cudaGraphExecDestroy(oe));
        CHECK(cudaGraphDestroy(c));
        CHECK(cudaGraphDestroy(g));
        CHECK(cudaFree(d));
    }

    // 6. Capture into an existing graph, after one of its nodes.
    {
        float* d;
        CHECK(cudaMalloc(&d, BYTES));
        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphNode_t fill;
        cudaMemsetParams mp;
        std::memset(&mp, 0, sizeof mp);
        mp.dst = d;
        mp.elementSize = 4;
        mp.width = N;
        mp.height = 1;
        mp.value = 0x40400000;  // 3.0f
        CHECK(cudaGraphAddMemsetNode(&fill, g, nullptr, 0, &mp));
        CHECK(cudaStreamBeginCaptureToGraph(s, g, &fill, nullptr, 1, cudaStreamCaptureModeGlobal));
        add_one<<<BLOCKS, THREADS, 0, s>>>(d, N);
        CHECK(cudaMemcpyAsync(out.data(), d, BYTES, cudaMemcpyDeviceToHost, s));
        cudaGraph_t back;
        CHECK(cudaStreamEndCapture(s, &back));
        EXPECT(back == g, "capture into a graph returned another graph");
        size_t nn = 0, ne = 0;
        CHECK(cudaGraphGetNodes(g, nullptr, &nn));
        CHECK(EDGES_OF(g, nullptr, nullptr, &ne));
        EXPECT(nn == 3 && ne == 2, "captured into the graph: %zu nodes, %zu edges", nn, ne);
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        if (check_results())
            for (int i = 0; i < N; i++)
                EXPECT(out[i] == 4.0f, "captured into a graph, element %d: %g", i, out[i]);
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
        CHECK(cudaFree(d));
    }

    // 7. User objects held by a graph and its instantiation, and a DOT
    // description of a graph.
    {
        static int one = 1;
        cudaUserObject_t obj, obj2;
        CHECK(cudaUserObjectCreate(&obj, &one, destroy_one, 1, cudaUserObjectNoDestructorSync));
        CHECK(cudaUserObjectCreate(&obj2, &one, destroy_one, 2, cudaUserObjectNoDestructorSync));
        CHECK(cudaUserObjectRelease(obj2, 1));
        EXPECT(!destroyed_reaches(1), "a user object went with a reference left");
        CHECK(cudaUserObjectRelease(obj2, 1));
        EXPECT(destroyed_reaches(1), "a user object's last release ran no destructor");

        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphNode_t e0, e1;
        CHECK(cudaGraphAddEmptyNode(&e0, g, nullptr, 0));
        CHECK(cudaGraphAddEmptyNode(&e1, g, &e0, 1));
        CHECK(cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove));
        cudaGraphExec_t ge;
        CHECK(cudaGraphInstantiate(&ge, g, 0));
        char path[] = "/tmp/fairgpu-graph-XXXXXX";
        int fd = mkstemp(path);
        EXPECT(fd >= 0, "mkstemp");
        close(fd);
        CHECK(cudaGraphDebugDotPrint(g, path, 0));
        FILE* f = std::fopen(path, "r");
        EXPECT(f != nullptr, "no DOT file");
        char text[4096] = {0};
        size_t got = std::fread(text, 1, sizeof text - 1, f);
        std::fclose(f);
        unlink(path);
        EXPECT(got > 0 && std::strstr(text, "digraph") && std::strstr(text, "->"),
               "DOT text: %s", text);
        CHECK(cudaGraphDestroy(g));
        EXPECT(!destroyed_reaches(2), "the instantiated graph's reference was not kept");
        CHECK(cudaGraphExecDestroy(ge));
        EXPECT(destroyed_reaches(2), "the last graph's reference ran no destructor");
    }

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaDeviceGraphMemTrim(0));
    EXPECT(graph_mem(cudaGraphMemAttrUsedMemCurrent) == 0, "graph memory left: %llu",
           (unsigned long long)graph_mem(cudaGraphMemAttrUsedMemCurrent));
    pass();
    return 0;
}
