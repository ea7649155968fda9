// Streams and events: kernel timing with events, cudaStreamQuery and
// cudaEventQuery while a kernel runs, cross-stream ordering with
// cudaStreamWaitEvent, the legacy default stream, several host threads
// each driving its own stream, and stream priorities.
//
// The only kernel is `spin(ns)`, which SimGpu models as `ns` of device time.
// Prints "GPU_NS <total>": the modelled time of every kernel launched, for
// the test to compare with the VM's GPU time.
#define PROGRAM "streams_events"
#include "common.h"

#include <atomic>
#include <thread>
#include <vector>

static const unsigned long long MS = 1000000ull;
static std::atomic<unsigned long long> gpu_ns{0};

static void launch_spin(unsigned long long ns, cudaStream_t s) {
    spin<<<1, 1, 0, s>>>(ns);
    CHECK(cudaGetLastError());
    gpu_ns += ns;
}

// Elapsed time of a kernel between two events is at least its duration
// (SimGpu's modelled one). Not checked: that it is exactly that; the events
// include idle time when the host (or a scheduler's sample, which
// synchronises the device) falls behind the busy stream.
static void event_timing() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t ev[4];
    for (auto& e : ev) CHECK(cudaEventCreate(&e));
    const unsigned long long d[3] = {3 * MS, 1 * MS + 234567, 7 * MS};
    launch_spin(100 * MS, s);  // keeps the stream busy
    CHECK(cudaEventRecord(ev[0], s));
    for (int i = 0; i < 3; i++) {
        launch_spin(d[i], s);
        CHECK(cudaEventRecord(ev[i + 1], s));
    }
    CHECK(cudaEventSynchronize(ev[3]));
    for (int i = 0; i < 3; i++) {
        float ms = elapsed_ms(ev[i], ev[i + 1]);
        double want = (double)d[i] / 1e6;
        EXPECT(ms >= want - 1e-3, "kernel %d of %.6f ms took %.6f ms by events", i, want, ms);
    }
    for (auto& e : ev) CHECK(cudaEventDestroy(e));
    CHECK(cudaStreamDestroy(s));
}

// Queries answer "not ready" while a kernel runs, success once it is done.
static void queries() {
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t done;
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CHECK(cudaStreamQuery(s));
    uint64_t t0 = wall_ns();
    launch_spin(300 * MS, s);
    CHECK(cudaEventRecord(done, s));
    cudaError_t sq = cudaStreamQuery(s), eq = cudaEventQuery(done);
    // Unless this host stalled for most of the kernel, both were asked
    // while it ran.
    if (wall_ns() - t0 < 250 * MS) {
        EXPECT(sq == cudaErrorNotReady, "cudaStreamQuery while a kernel runs: %d %s", (int)sq,
               cudaGetErrorName(sq));
        EXPECT(eq == cudaErrorNotReady, "cudaEventQuery while a kernel runs: %d %s", (int)eq,
               cudaGetErrorName(eq));
    }
    (void)cudaGetLastError();
    CHECK(cudaStreamSynchronize(s));
    uint64_t waited = wall_ns() - t0;
    EXPECT(waited >= 299 * MS, "cudaStreamSynchronize returned after %.3f ms of a 300 ms kernel",
           (double)waited / 1e6);
    CHECK(cudaStreamQuery(s));
    CHECK(cudaEventQuery(done));
    // Timing was disabled on this event.
    float ms = 0;
    EXPECT_ERR(cudaEventElapsedTime(&ms, done, done), cudaErrorInvalidResourceHandle);
    (void)cudaGetLastError();
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s));
}

// cudaStreamWaitEvent orders a second stream after an event of the first;
// without it, the second stream does not wait.
static void cross_stream_order() {
    cudaStream_t a, b;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    cudaEvent_t start, a_done, b_mark;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&a_done));
    CHECK(cudaEventCreate(&b_mark));

    // Unordered: b's event completes while a still runs.
    CHECK(cudaEventRecord(start, a));
    uint64_t t0 = wall_ns();
    launch_spin(400 * MS, a);
    CHECK(cudaEventRecord(a_done, a));
    CHECK(cudaEventRecord(b_mark, b));
    CHECK(cudaEventSynchronize(b_mark));
    cudaError_t q = cudaEventQuery(a_done);
    if (wall_ns() - t0 < 350 * MS)
        EXPECT(q == cudaErrorNotReady, "an unrelated stream waited for another's kernel: %d %s",
               (int)q, cudaGetErrorName(q));
    (void)cudaGetLastError();
    CHECK(cudaStreamSynchronize(a));

    // Ordered: b waits for a's event.
    CHECK(cudaEventRecord(start, a));
    launch_spin(20 * MS, a);
    CHECK(cudaEventRecord(a_done, a));
    CHECK(cudaStreamWaitEvent(b, a_done, 0));
    CHECK(cudaEventRecord(b_mark, b));
    CHECK(cudaStreamSynchronize(b));
    CHECK(cudaEventQuery(a_done));
    float to_a = elapsed_ms(start, a_done), to_b = elapsed_ms(start, b_mark);
    EXPECT(to_a >= 20.0f - 1e-3f, "a's kernel of 20 ms took %.6f ms", to_a);
    EXPECT(to_b >= to_a, "b's event (%.6f ms) came before a's (%.6f ms) it waited for", to_b,
           to_a);

    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(a_done));
    CHECK(cudaEventDestroy(b_mark));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
}

// The legacy default stream waits for blocking streams and they wait for it.
static void default_stream() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    cudaEvent_t start, end;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&end));
    CHECK(cudaEventRecord(start, 0));
    launch_spin(10 * MS, s);
    launch_spin(5 * MS, 0);  // after s's kernel
    CHECK(cudaEventRecord(end, s));  // after the default stream's kernel
    CHECK(cudaEventSynchronize(end));
    float ms = elapsed_ms(start, end);
    EXPECT(ms >= 15.0f - 1e-3f, "default-stream ordering: %.6f ms for 10 + 5 ms", ms);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(end));
    CHECK(cudaStreamDestroy(s));
}

// Host threads, each with its own stream, copy and launch concurrently.
static void threads() {
    const int nthreads = 4, rounds = 5;
    std::vector<std::thread> ts;
    std::vector<int> ok(nthreads, 0);
    for (int t = 0; t < nthreads; t++) {
        ts.emplace_back([t, &ok] {
            CHECK(cudaSetDevice(0));
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            cudaEvent_t a, b;
            CHECK(cudaEventCreate(&a));
            CHECK(cudaEventCreate(&b));
            const size_t n = 65536 + 13 * t;
            std::vector<unsigned char> in(n), out(n);
            unsigned char* d = nullptr;
            CHECK(cudaMalloc((void**)&d, n));
            for (int r = 0; r < rounds; r++) {
                fill_pattern(in.data(), n, 1000 * t + r);
                CHECK(cudaMemcpyAsync(d, in.data(), n, cudaMemcpyHostToDevice, s));
                CHECK(cudaEventRecord(a, s));
                launch_spin(2 * MS, s);
                CHECK(cudaEventRecord(b, s));
                CHECK(cudaMemcpyAsync(out.data(), d, n, cudaMemcpyDeviceToHost, s));
                CHECK(cudaStreamSynchronize(s));
                long diff = first_diff(out.data(), in.data(), n);
                EXPECT(diff < 0, "thread %d round %d: byte %ld differs", t, r, diff);
                float ms = elapsed_ms(a, b);
                EXPECT(ms >= 2.0f - 1e-3f, "thread %d: a 2 ms kernel took %.6f ms", t, ms);
            }
            CHECK(cudaFree(d));
            CHECK(cudaEventDestroy(a));
            CHECK(cudaEventDestroy(b));
            CHECK(cudaStreamDestroy(s));
            ok[t] = 1;
        });
    }
    for (auto& th : ts) th.join();
    for (int t = 0; t < nthreads; t++) EXPECT(ok[t], "thread %d did not finish", t);
}

// Stream attributes (cache hints): an access policy window set on a
// stream reads back as set; persisting lines can be reset.
static void stream_attributes() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    if (prop.persistingL2CacheMaxSize == 0 || prop.accessPolicyMaxWindowSize == 0) return;
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    void* buf = nullptr;
    CHECK(cudaMalloc(&buf, 1 << 20));
    cudaStreamAttrValue v = {};
    v.accessPolicyWindow.base_ptr = buf;
    v.accessPolicyWindow.num_bytes = 1 << 20;
    v.accessPolicyWindow.hitRatio = 0.5f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    CHECK(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v));
    cudaStreamAttrValue back = {};
    CHECK(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &back));
    EXPECT(back.accessPolicyWindow.base_ptr == buf && back.accessPolicyWindow.num_bytes == (1 << 20) &&
               back.accessPolicyWindow.hitRatio == 0.5f,
           "access policy window read back as %p, %zu bytes, hit ratio %g",
           back.accessPolicyWindow.base_ptr, back.accessPolicyWindow.num_bytes,
           back.accessPolicyWindow.hitRatio);
    CHECK(cudaCtxResetPersistingL2Cache());
    CHECK(cudaFree(buf));
    CHECK(cudaStreamDestroy(s));
}

// Stream priorities: the range the device reports, each priority in it
// kept, one outside it clamped to its end (as CUDA documents), and work
// on a high-priority stream done in its order with a low one's.
static void priorities() {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int least = 1, greatest = 1;
    CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    if (!prop.streamPrioritiesSupported) {
        EXPECT(least == 0 && greatest == 0, "no priorities, yet a range of %d to %d", least, greatest);
        return;
    }
    EXPECT(least == 0 && greatest < 0, "priorities supported, range %d to %d", least, greatest);
    const int next = least - 1 > greatest ? least - 1 : greatest;  // one step up
    const struct {
        int asked, want;
    } cases[] = {{0, 0}, {greatest, greatest}, {next, next}, {greatest - 7, greatest}, {least + 3, least}};
    cudaStream_t s[5];
    for (int i = 0; i < 5; i++) {
        CHECK(cudaStreamCreateWithPriority(&s[i], cudaStreamNonBlocking, cases[i].asked));
        int got = 99;
        CHECK(cudaStreamGetPriority(s[i], &got));
        EXPECT(got == cases[i].want, "priority %d asked in %d..%d: got %d, want %d", cases[i].asked,
               least, greatest, got, cases[i].want);
        unsigned int flags = 0;
        CHECK(cudaStreamGetFlags(s[i], &flags));
        EXPECT(flags == cudaStreamNonBlocking, "a priority stream's flags %u", flags);
    }
    int plain = 99;
    cudaStream_t p;
    CHECK(cudaStreamCreate(&p));
    CHECK(cudaStreamGetPriority(p, &plain));
    EXPECT(plain == 0, "cudaStreamCreate's stream has priority %d", plain);
    // A high-priority stream waits for a low one's event, then its own
    // kernel runs: both done, in that order.
    cudaEvent_t low_done, high_done;
    CHECK(cudaEventCreate(&low_done));
    CHECK(cudaEventCreate(&high_done));
    launch_spin(2 * MS, p);
    CHECK(cudaEventRecord(low_done, p));
    CHECK(cudaStreamWaitEvent(s[1], low_done, 0));
    launch_spin(1 * MS, s[1]);
    CHECK(cudaEventRecord(high_done, s[1]));
    CHECK(cudaEventSynchronize(high_done));
    EXPECT(cudaEventQuery(low_done) == cudaSuccess, "the awaited low-priority work is not done");
    EXPECT(elapsed_ms(low_done, high_done) >= 1.0f - 1e-3f, "the high-priority kernel ran before its wait");
    CHECK(cudaEventDestroy(low_done));
    CHECK(cudaEventDestroy(high_done));
    CHECK(cudaStreamDestroy(p));
    for (auto& x : s) CHECK(cudaStreamDestroy(x));
}

int main() {
    int count = 0;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    event_timing();
    queries();
    cross_stream_order();
    default_stream();
    threads();
    stream_attributes();
    priorities();
    CHECK(cudaDeviceSynchronize());
    std::printf("GPU_NS %llu\n", (unsigned long long)gpu_ns);
    pass();
    return 0;
}
