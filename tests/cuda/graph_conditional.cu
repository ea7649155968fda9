// Conditional graph nodes (CUDA 12.3+ IF and WHILE, 12.8+ IF/ELSE and
// SWITCH), whose conditions kernels set with cudaGraphSetConditional: built
// node by node and by stream capture, launched several times, nested, and
// every count and value checked against what the CPU expects.
#define PROGRAM "graph_conditional"
#include "common.h"

#include <utility>


// The condition is whether *x is odd.
__global__ void set_if_odd(const int* x, cudaGraphConditionalHandle h) {
    if (threadIdx.x == 0 && blockIdx.x == 0) cudaGraphSetConditional(h, *x & 1);
}

// Adds `by` to every element of a[0..n).
__global__ void add(int* a, int n, int by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += by;
}

// One step of a loop: counts itself, and keeps the loop going while the
// count is below `limit`.
__global__ void loop_step(int* count, int limit, cudaGraphConditionalHandle h) {
    if (threadIdx.x == 0) {
        int c = ++*count;
        cudaGraphSetConditional(h, c < limit);
    }
}

// As NVIDIA's captured WHILE loop: counts down *d to 0, and counts itself.
__global__ void count_down(int* d, int* runs, cudaGraphConditionalHandle h) {
    if (threadIdx.x == 0) {
        if (*d) --*d;
        ++*runs;
        cudaGraphSetConditional(h, *d);
    }
}

__global__ void set_value(cudaGraphConditionalHandle h, const int* v) {
    if (threadIdx.x == 0) cudaGraphSetConditional(h, (unsigned)*v);
}

__global__ void store(int* out, int v) {
    if (threadIdx.x == 0) *out = v;
}

// The CUDA 13 forms take edge data; 12.x's do not.
#if CUDART_VERSION >= 13000
#define ADD_NODE(node, g, deps, n, p) cudaGraphAddNode(node, g, deps, nullptr, n, p)
#define CAPTURE_INFO(s, st, g, deps, n) cudaStreamGetCaptureInfo(s, st, nullptr, g, deps, nullptr, n)
#define SET_DEPS(s, deps, n) \
    cudaStreamUpdateCaptureDependencies(s, deps, nullptr, n, cudaStreamSetCaptureDependencies)
#else
#define ADD_NODE(node, g, deps, n, p) cudaGraphAddNode(node, g, deps, n, p)
#define CAPTURE_INFO(s, st, g, deps, n) cudaStreamGetCaptureInfo(s, st, nullptr, g, deps, n)
#define SET_DEPS(s, deps, n) cudaStreamUpdateCaptureDependencies(s, deps, n, cudaStreamSetCaptureDependencies)
#endif

static cudaGraphNode_t kernel_node(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                   void* func, void** args, unsigned threads = 1) {
    cudaGraphNodeParams p = {cudaGraphNodeTypeKernel};
    p.kernel.func = func;
    p.kernel.gridDim = dim3(1);
    p.kernel.blockDim = dim3(threads);
    p.kernel.kernelParams = args;
    cudaGraphNode_t node;
    CHECK(ADD_NODE(&node, g, deps, n, &p));
    return node;
}

static cudaGraphNode_t cond_node(cudaGraph_t g, const cudaGraphNode_t* deps, size_t n,
                                 cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type,
                                 unsigned size, cudaGraph_t* bodies) {
    cudaGraphNodeParams p = {cudaGraphNodeTypeConditional};
    p.conditional.handle = h;
    p.conditional.type = type;
    p.conditional.size = size;
    cudaGraphNode_t node;
    CHECK(ADD_NODE(&node, g, deps, n, &p));
    for (unsigned i = 0; i < size; i++) {
        bodies[i] = p.conditional.phGraph_out[i];
        if (bodies[i] == nullptr) fail("body %u of a conditional node is null", i);
    }
    return node;
}

static int read_int(const int* d) {
    int v = 0;
    CHECK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

static void write_int(int* d, int v) { CHECK(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice)); }

// IF, and IF/ELSE: a kernel sets the condition from *x, the bodies add to
// an array (IF: +1 on odd x; ELSE: +100 on even x).
static void if_else(bool with_else) {
    const int n = 300;
    int *x, *a;
    CHECK(cudaMalloc(&x, sizeof(int)));
    CHECK(cudaMalloc(&a, n * sizeof(int)));
    CHECK(cudaMemset(a, 0, n * sizeof(int)));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    void* set_args[] = {&x, &h};
    cudaGraphNode_t set = kernel_node(g, nullptr, 0, (void*)set_if_odd, set_args);
    cudaGraph_t bodies[2];
    cudaGraphNode_t c = cond_node(g, &set, 1, h, cudaGraphCondTypeIf, with_else ? 2 : 1, bodies);
    int n_ = n, one = 1, hundred = 100;
    void* then_args[] = {&a, &n_, &one};
    cudaGraphNodeParams kp = {cudaGraphNodeTypeKernel};
    kp.kernel.func = (void*)add;
    kp.kernel.gridDim = dim3((n + 127) / 128);
    kp.kernel.blockDim = dim3(128);
    kp.kernel.kernelParams = then_args;
    cudaGraphNode_t body_node;
    CHECK(ADD_NODE(&body_node, bodies[0], nullptr, 0, &kp));
    if (with_else) {
        void* else_args[] = {&a, &n_, &hundred};
        kp.kernel.kernelParams = else_args;
        CHECK(ADD_NODE(&body_node, bodies[1], nullptr, 0, &kp));
    }
#if CUDART_VERSION >= 13000
    cudaGraphNodeType type;
    CHECK(cudaGraphNodeGetType(c, &type));
    if (type != cudaGraphNodeTypeConditional) fail("node type %d", (int)type);
#else
    (void)c;
#endif
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    int want = 0;
    for (int i = 0; i < 7; i++) {
        write_int(x, i);
        CHECK(cudaGraphLaunch(e, 0));
        CHECK(cudaDeviceSynchronize());
        want += (i & 1) ? 1 : (with_else ? 100 : 0);
    }
    int host[n];
    CHECK(cudaMemcpy(host, a, sizeof host, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (host[i] != want) fail("if%s: a[%d] = %d, want %d", with_else ? "/else" : "", i, host[i], want);
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(x));
    CHECK(cudaFree(a));
}

// A do-while loop: the handle's default (1, assigned at every launch)
// runs the body once at least; the body keeps it going below the limit.
// Its body holds a nested IF on a handle of its own, true on odd counts.
static void do_while_with_nested_if() {
    int *count, *odd;
    CHECK(cudaMalloc(&count, sizeof(int)));
    CHECK(cudaMalloc(&odd, sizeof(int)));
    write_int(count, 0);
    write_int(odd, 0);
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle loop;
    CHECK(cudaGraphConditionalHandleCreate(&loop, g, 1, cudaGraphCondAssignDefault));
    cudaGraph_t body;
    cond_node(g, nullptr, 0, loop, cudaGraphCondTypeWhile, 1, &body);
    const int limit = 13;
    int limit_ = limit;
    void* step_args[] = {&count, &limit_, &loop};
    cudaGraphNode_t step = kernel_node(body, nullptr, 0, (void*)loop_step, step_args);
    cudaGraphConditionalHandle is_odd;
    CHECK(cudaGraphConditionalHandleCreate(&is_odd, body));
    void* odd_args[] = {&count, &is_odd};
    cudaGraphNode_t test = kernel_node(body, &step, 1, (void*)set_if_odd, odd_args);
    cudaGraph_t inner;
    cond_node(body, &test, 1, is_odd, cudaGraphCondTypeIf, 1, &inner);
    int n1 = 1, one = 1;
    void* inc_args[] = {&odd, &n1, &one};
    kernel_node(inner, nullptr, 0, (void*)add, inc_args);

    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    if (read_int(count) != limit) fail("do-while: %d steps, want %d", read_int(count), limit);
    if (read_int(odd) != (limit + 1) / 2) fail("nested if: %d odd steps, want %d", read_int(odd), (limit + 1) / 2);
    // Launched again, the default starts the loop once more: one step.
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
    if (read_int(count) != limit + 1) fail("second launch: %d steps, want %d", read_int(count), limit + 1);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(count));
    CHECK(cudaFree(odd));
}

// NVIDIA's captured WHILE loop: captured kernel, conditional node added to
// the capturing graph, body filled by capturing into it.
static void captured_while() {
    int *d, *runs;
    CHECK(cudaMalloc(&d, sizeof(int)));
    CHECK(cudaMalloc(&runs, sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaStreamCaptureStatus status;
    cudaGraph_t g;
    const cudaGraphNode_t* deps;
    size_t ndeps;
    CHECK(CAPTURE_INFO(s, &status, &g, &deps, &ndeps));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    count_down<<<1, 32, 0, s>>>(d, runs, h);
    CHECK(CAPTURE_INFO(s, &status, &g, &deps, &ndeps));
    cudaGraph_t body;
    cudaGraphNode_t c = cond_node(g, deps, ndeps, h, cudaGraphCondTypeWhile, 1, &body);
    CHECK(SET_DEPS(s, &c, 1));
    store<<<1, 1, 0, s>>>(runs + 0, -1);  // overwritten below: runs counts on
    cudaGraph_t captured;
    CHECK(cudaStreamEndCapture(s, &captured));
    if (captured != g) fail("the captured graph is not the one capture info named");
    cudaStream_t bs;
    CHECK(cudaStreamCreate(&bs));
    CHECK(cudaStreamBeginCaptureToGraph(bs, body, nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
    count_down<<<1, 32, 0, bs>>>(d, runs, h);
    CHECK(cudaStreamEndCapture(bs, nullptr));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int start : {0, 10, 1, 25}) {
        write_int(d, start);
        write_int(runs, 0);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        // The kernel before the loop runs once, the body start-1 times
        // (0 for start 0); the last kernel overwrites runs with -1.
        if (read_int(d) != 0) fail("captured while from %d: d = %d", start, read_int(d));
        if (read_int(runs) != -1) fail("captured while from %d: the node after the loop did not run", start);
    }
    // Without the last node's store: how many kernels ran.
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaGraphCreate(&g, 0));
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    void* args[] = {&d, &runs, &h};
    cudaGraphNode_t first = kernel_node(g, nullptr, 0, (void*)count_down, args, 32);
    cond_node(g, &first, 1, h, cudaGraphCondTypeWhile, 1, &body);
    kernel_node(body, nullptr, 0, (void*)count_down, args, 32);
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int start : {0, 10, 1, 25}) {
        write_int(d, start);
        write_int(runs, 0);
        CHECK(cudaGraphLaunch(e, s));
        CHECK(cudaStreamSynchronize(s));
        int want = start <= 1 ? 1 : start;
        if (read_int(runs) != want) fail("while from %d: %d kernels ran, want %d", start, read_int(runs), want);
    }
    CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(bs));
    CHECK(cudaFree(d));
    CHECK(cudaFree(runs));
}

// SWITCH over five bodies, each storing its index + 10; values past the
// last body run none.
static void switch_node() {
    int *v, *out;
    CHECK(cudaMalloc(&v, sizeof(int)));
    CHECK(cudaMalloc(&out, sizeof(int)));
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    void* set_args[] = {&h, &v};
    cudaGraphNode_t set = kernel_node(g, nullptr, 0, (void*)set_value, set_args);
    const int n = 5;
    cudaGraph_t bodies[n];
    cond_node(g, &set, 1, h, cudaGraphCondTypeSwitch, n, bodies);
    int values[n];
    void* args[n][2];
    for (int i = 0; i < n; i++) {
        values[i] = i + 10;
        args[i][0] = &out;
        args[i][1] = &values[i];
        kernel_node(bodies[i], nullptr, 0, (void*)store, args[i]);
    }
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    for (int i = 0; i < 8; i++) {
        write_int(v, i);
        write_int(out, -1);
        CHECK(cudaGraphLaunch(e, 0));
        CHECK(cudaDeviceSynchronize());
        int want = i < n ? i + 10 : -1;
        if (read_int(out) != want) fail("switch on %d: %d, want %d", i, read_int(out), want);
    }
    CHECK(cudaGraphExecDestroy(e));
    // The driver does not clone a graph with conditional nodes.
    cudaGraph_t clone;
    EXPECT_ERR(cudaGraphClone(&clone, g), cudaErrorNotSupported);
    (void)cudaGetLastError();
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(v));
    CHECK(cudaFree(out));
}

// What the driver refuses: unknown flags, a WHILE node with two bodies, a
// SWITCH with none, a graph with a conditional node as a child graph.
static void refusals() {
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle h;
    if (cudaGraphConditionalHandleCreate(&h, g, 0, 0x80) == cudaSuccess) fail("unknown flags accepted");
    cudaGetLastError();
    CHECK(cudaGraphConditionalHandleCreate(&h, g));
    for (auto [type, size] : {std::pair{cudaGraphCondTypeWhile, 2u}, std::pair{cudaGraphCondTypeSwitch, 0u},
                              std::pair{cudaGraphCondTypeIf, 3u}}) {
        cudaGraphNodeParams p = {cudaGraphNodeTypeConditional};
        p.conditional.handle = h;
        p.conditional.type = type;
        p.conditional.size = size;
        cudaGraphNode_t node;
        if (ADD_NODE(&node, g, nullptr, 0, &p) == cudaSuccess)
            fail("a conditional node of type %d with %u bodies was accepted", (int)type, size);
        cudaGetLastError();
    }
    cudaGraph_t body;
    cond_node(g, nullptr, 0, h, cudaGraphCondTypeIf, 1, &body);
    cudaGraph_t parent;
    CHECK(cudaGraphCreate(&parent, 0));
    cudaGraphNode_t child;
    if (cudaGraphAddChildGraphNode(&child, parent, nullptr, 0, g) == cudaSuccess)
        fail("a graph with a conditional node became a child graph");
    cudaGetLastError();
    CHECK(cudaGraphDestroy(parent));
    CHECK(cudaGraphDestroy(g));
}

static void all() {
    if_else(false);
    if_else(true);
    do_while_with_nested_if();
    captured_while();
    switch_node();
    refusals();
}

int main() {
    size_t free0, total;
    first_call(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
    // Twice: a GPU's driver keeps memory it reserved the first time (an
    // H200's, 2 MiB); after that, every handle's slot goes with its graphs
    // and instantiations, and nothing more is lost.
    all();
    CHECK(cudaMemGetInfo(&free0, &total));
    all();
    size_t free1;
    CHECK(cudaMemGetInfo(&free1, &total));
    if (free1 != free0) fail("device memory free %zu before, %zu after", free0, free1);
    pass();
    return 0;
}
