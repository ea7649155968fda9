// Host threads of one process that use CUDA at the same time: a thread
// that finds another inside a call gets a channel of its own, which names
// the process's host context, so that
// - a thread waiting in cudaStreamSynchronize for a long kernel does not
//   hold another thread's calls: prints "OVERLAP 1" when the other thread
//   finished its copies while the first still waited (with SimGpu's
//   kernel durations; a scheduler's grant may still make them wait), and
//   "COPIES_MS" how long those copies took;
// - a thread's cudaDeviceSynchronize waits for the work issued before it,
//   not for a kernel another thread launches while it waits;
// - work one thread issued on a stream before it told another thread (no
//   CUDA synchronization between them) is done before what that thread
//   then issues on the same stream: a producer launches, a consumer copies
//   back, round after round;
// - memory, streams and events made by one thread are used by the others;
// - several threads each drive their own stream, results checked against
//   the CPU.
// Kernel results are checked when FAIRGPU_CHECK_RESULTS=1.
#define PROGRAM "threads"
#include "common.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

static const unsigned long long MS = 1000000ull;

__global__ void fill(int* p, int v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v * 7 + i;
}

__global__ void axpb(const float* x, float* y, float a, float b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

// One thread waits for a long kernel; another works meanwhile.
static void waiting_does_not_hold_others() {
    cudaStream_t longs, mine;
    CHECK(cudaStreamCreateWithFlags(&longs, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&mine, cudaStreamNonBlocking));
    const int n = 4096;
    int* d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    std::atomic<bool> waiting{false}, waited{false};
    std::thread waiter([&] {
        spin<<<1, 1, 0, longs>>>(1500 * MS);
        CHECK(cudaGetLastError());
        waiting = true;
        CHECK(cudaStreamSynchronize(longs));
        waited = true;
    });
    while (!waiting) std::this_thread::yield();
    // Let the waiter's synchronization reach the host.
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, nullptr);
    // Copies and memsets only: SimGpu models one kernel at a time, so a
    // kernel would start after the long one on any stream.
    std::vector<int> h(n), back(n);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int round = 0; round < 10; round++) {
        for (int i = 0; i < n; i++) h[i] = round * 7 + i;
        CHECK(cudaMemsetAsync(d, 0xff, n * sizeof(int), mine));
        CHECK(cudaMemcpyAsync(d, h.data(), n / 2 * sizeof(int), cudaMemcpyHostToDevice, mine));
        CHECK(cudaMemcpyAsync(back.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, mine));
        CHECK(cudaStreamSynchronize(mine));
        for (int i = 0; i < n; i++) {
            int want = i < n / 2 ? h[i] : -1;
            if (back[i] != want) fail("round %d: p[%d] = %d, want %d", round, i, back[i], want);
        }
    }
    bool early = !waited;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    waiter.join();
    if (sim_timing()) std::printf("OVERLAP %d\n", early ? 1 : 0);
    // How long the copies took while the other thread waited (or after).
    std::printf("COPIES_MS %.3f\n",
                (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(longs));
    CHECK(cudaStreamDestroy(mine));
}

// A producer launches on a stream and tells a consumer, which copies back on
// the same stream: stream order across threads, with no CUDA call between.
// One thread synchronizes the device while another issues a long kernel
// after it: the synchronization waits for the work issued before it, not
// for the later kernel. Prints "LATER_DONE 0" when the later kernel was
// still running as the synchronization returned, and "DEVSYNC_MS" how
// long the synchronization took.
static void device_sync_ignores_later_work() {
    cudaStream_t first, later;
    CHECK(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&later, cudaStreamNonBlocking));
    std::atomic<bool> issued{false};
    double sync_ms = 0;
    std::thread syncer([&] {
        spin<<<1, 1, 0, first>>>(100 * MS);
        CHECK(cudaGetLastError());
        issued = true;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(cudaDeviceSynchronize());
        clock_gettime(CLOCK_MONOTONIC, &t1);
        sync_ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    });
    while (!issued) std::this_thread::yield();
    // Let the synchronization reach the host first.
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, nullptr);
    spin<<<1, 1, 0, later>>>(1500 * MS);
    CHECK(cudaGetLastError());
    syncer.join();
    cudaError_t q = cudaStreamQuery(later);
    if (q != cudaSuccess && q != cudaErrorNotReady) CHECK(q);
    if (sim_timing()) std::printf("LATER_DONE %d\n", q == cudaSuccess ? 1 : 0);
    std::printf("DEVSYNC_MS %.3f\n", sync_ms);
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaStreamDestroy(first));
    CHECK(cudaStreamDestroy(later));
}

static void producer_consumer() {
    const int n = 1 << 14, rounds = 40;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    int* d;
    CHECK(cudaMalloc(&d, n * sizeof(int)));
    std::mutex m;
    std::condition_variable cv;
    int produced = -1, consumed = -1;
    std::thread consumer([&] {
        std::vector<int> h(n);
        for (int r = 0; r < rounds; r++) {
            {
                std::unique_lock<std::mutex> l(m);
                cv.wait(l, [&] { return produced >= r; });
            }
            CHECK(cudaMemcpyAsync(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
            CHECK(cudaStreamSynchronize(s));
            if (check_results())
                for (int i = 0; i < n; i += 97)
                    if (h[i] != r * 7 + i) fail("round %d: the consumer read p[%d] = %d", r, i, h[i]);
            {
                std::lock_guard<std::mutex> l(m);
                consumed = r;
            }
            cv.notify_all();
        }
    });
    for (int r = 0; r < rounds; r++) {
        // Keeps the process's channel busy now and then, so that the
        // consumer finds it so and takes a channel of its own.
        if (r % 8 == 0) spin<<<1, 1, 0, s>>>(2 * MS);
        fill<<<(n + 255) / 256, 256, 0, s>>>(d, r, n);
        CHECK(cudaGetLastError());
        {
            std::lock_guard<std::mutex> l(m);
            produced = r;
        }
        cv.notify_all();
        std::unique_lock<std::mutex> l(m);
        cv.wait(l, [&] { return consumed >= r; });
    }
    consumer.join();
    CHECK(cudaFree(d));
    CHECK(cudaStreamDestroy(s));
}

// Threads each with their own stream and buffers, all at once.
static void many_streams() {
    const int threads = 6, n = 5000;
    std::vector<std::thread> ts;
    std::atomic<int> done{0};
    for (int t = 0; t < threads; t++) {
        ts.emplace_back([&, t] {
            cudaStream_t s;
            CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
            std::vector<float> x(n), y(n);
            for (int i = 0; i < n; i++) x[i] = (float)(i % 113) * 0.25f + t;
            float *dx, *dy;
            CHECK(cudaMalloc(&dx, n * sizeof(float)));
            CHECK(cudaMalloc(&dy, n * sizeof(float)));
            CHECK(cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
            for (int r = 0; r < 5; r++) {
                float a = 1.5f + r, b = (float)t - r;
                axpb<<<(n + 127) / 128, 128, 0, s>>>(dx, dy, a, b, n);
                CHECK(cudaGetLastError());
                CHECK(cudaMemcpyAsync(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost, s));
                CHECK(cudaStreamSynchronize(s));
                if (check_results())
                    for (int i = 0; i < n; i++)
                        if (y[i] != a * x[i] + b)
                            fail("thread %d round %d: y[%d] = %g, want %g", t, r, i, y[i],
                                 a * x[i] + b);
            }
            CHECK(cudaFree(dx));
            CHECK(cudaFree(dy));
            CHECK(cudaStreamDestroy(s));
            done++;
        });
    }
    for (auto& th : ts) th.join();
    if (done != threads) fail("%d of %d threads finished", (int)done, threads);
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(nullptr)");
    waiting_does_not_hold_others();
    device_sync_ignores_later_work();
    producer_consumer();
    many_streams();
    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
