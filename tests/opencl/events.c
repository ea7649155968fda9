// Events on in-order queues with CL_QUEUE_PROFILING_ENABLE:
//   - a chain of non-blocking commands (write -> kernel waiting on the
//     write's event -> read waiting on the kernel's event), then
//     clWaitForEvents on the read: the data is right and every event is
//     CL_COMPLETE, with CL_EVENT_COMMAND_TYPE/QUEUE/CONTEXT as enqueued;
//   - the same chain across two queues (each command on the other queue
//     than the one it waits for, with clFlush), so the wait lists carry the
//     ordering;
//   - profiling: QUEUED <= SUBMIT <= START <= END for writes, kernels,
//     copies and reads (no durations are checked);
//   - clEnqueueMarkerWithWaitList (with a wait list, and without: all
//     previous commands) and clEnqueueBarrierWithWaitList;
//   - clSetEventCallback(CL_COMPLETE) fires with the event, CL_COMPLETE and
//     its user data, for an event still pending when it is registered and
//     for one already complete; the callback may run on another thread, so
//     its flag is polled (up to 2 s) after clFinish.
//   - a queue without profiling answers CL_PROFILING_INFO_NOT_AVAILABLE.
#define PROGRAM "events"
#include "common.h"

#include <stdatomic.h>
#include <time.h>

static const char *source =
    "__kernel void scale(__global const int *in, __global int *out, int f, uint n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) out[i] = in[i] * f + (int)i;\n"
    "}\n"
    // A kernel that takes a while (a few ms on a CPU) so that callbacks
    // are usually registered before it completes.
    "__kernel void busy(__global uint *out, uint iters) {\n"
    "    size_t i = get_global_id(0);\n"
    "    uint x = (uint)i;\n"
    "    for (uint k = 0; k < iters; k++) x = x * 1664525u + 1013904223u;\n"
    "    out[i] = x;\n"
    "}\n";

#define N 100003

// The device is NVIDIA's, reached without fairgpu.
static int nvidia_direct;

static cl_int status_of(cl_event e) {
    cl_int st = -1;
    CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
    return st;
}

static void expect_event(cl_event e, const char *what, cl_command_type type, cl_command_queue q,
                         cl_context ctx) {
    cl_int st = status_of(e);
    EXPECT(st == CL_COMPLETE, "%s: status %d, want CL_COMPLETE", what, st);
    cl_command_type t = 0;
    CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_TYPE, sizeof t, &t, NULL));
    // NVIDIA's own markers report a command type no header defines (common.h).
    int nvidia_marker = type == CL_COMMAND_MARKER && nvidia_direct;
    EXPECT(t == type || nvidia_marker, "%s: command type 0x%x, want 0x%x", what, t, type);
    cl_command_queue eq = NULL;
    CHECK(clGetEventInfo(e, CL_EVENT_COMMAND_QUEUE, sizeof eq, &eq, NULL));
    EXPECT(eq == q, "%s: CL_EVENT_COMMAND_QUEUE %p, want %p", what, (void *)eq, (void *)q);
    cl_context ec = NULL;
    CHECK(clGetEventInfo(e, CL_EVENT_CONTEXT, sizeof ec, &ec, NULL));
    EXPECT(ec == ctx, "%s: CL_EVENT_CONTEXT %p, want %p", what, (void *)ec, (void *)ctx);
}

static void expect_profile(cl_event e, const char *what) {
    cl_ulong t[4];
    static const cl_profiling_info names[4] = {
        CL_PROFILING_COMMAND_QUEUED, CL_PROFILING_COMMAND_SUBMIT, CL_PROFILING_COMMAND_START,
        CL_PROFILING_COMMAND_END};
    for (int i = 0; i < 4; i++)
        CHECK(clGetEventProfilingInfo(e, names[i], sizeof(cl_ulong), &t[i], NULL));
    EXPECT(t[0] <= t[1] && t[1] <= t[2] && t[2] <= t[3],
           "%s: profiling QUEUED %llu SUBMIT %llu START %llu END %llu not ordered", what,
           (unsigned long long)t[0], (unsigned long long)t[1], (unsigned long long)t[2],
           (unsigned long long)t[3]);
    EXPECT(t[0] != 0, "%s: profiling QUEUED is 0", what);
    ok("%s: QUEUED <= SUBMIT <= START <= END", what);
}

static void check_scaled(const int *got, const int *in, int f, const char *what) {
    for (size_t i = 0; i < N; i++) {
        int want = in[i] * f + (int)i;
        if (got[i] != want)
            fail("%s: first mismatch at index %zu: got %d, want %d", what, i, got[i], want);
    }
}

typedef struct {
    atomic_int calls;
    atomic_int status;
    _Atomic(cl_event) event;
    int tag;
    atomic_int tag_seen;
} Callback;

static void CL_CALLBACK on_complete(cl_event e, cl_int status, void *user) {
    Callback *cb = (Callback *)user;
    atomic_store(&cb->event, e);
    atomic_store(&cb->status, status);
    atomic_store(&cb->tag_seen, cb->tag);
    atomic_fetch_add(&cb->calls, 1);
}

// Polls the flag for up to 2 s.
static void wait_callback(Callback *cb, cl_event e, const char *what) {
    for (int i = 0; i < 2000 && atomic_load(&cb->calls) == 0; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    EXPECT(atomic_load(&cb->calls) == 1, "%s: callback called %d times, want 1", what,
           atomic_load(&cb->calls));
    EXPECT(atomic_load(&cb->status) == CL_COMPLETE, "%s: callback status %d, want CL_COMPLETE",
           what, atomic_load(&cb->status));
    EXPECT(atomic_load(&cb->event) == e, "%s: callback for event %p, want %p", what,
           (void *)atomic_load(&cb->event), (void *)e);
    EXPECT(atomic_load(&cb->tag_seen) == cb->tag, "%s: callback user data wrong", what);
}

int main(void) {
    cl_platform_id platform;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    setup(&platform, &dev, &ctx, &q, CL_QUEUE_PROFILING_ENABLE);
    nvidia_direct = device_is_nvidia(dev) && !platform_is_fairgpu(platform);
    cl_command_queue q2;
    CREATE(q2, clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, ERR));
    cl_command_queue_properties qp = 0;
    CHECK(clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof qp, &qp, NULL));
    EXPECT(qp & CL_QUEUE_PROFILING_ENABLE, "CL_QUEUE_PROPERTIES 0x%llx lacks profiling",
           (unsigned long long)qp);
    EXPECT(!(qp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE), "queue is out of order");

    cl_program prog = build_source(ctx, dev, source, "");
    cl_kernel k, busy;
    CREATE(k, clCreateKernel(prog, "scale", ERR));
    CREATE(busy, clCreateKernel(prog, "busy", ERR));

    int *in = (int *)xmalloc(N * sizeof(int));
    int *out = (int *)xmalloc(N * sizeof(int));
    Rng r = rng_new(3);
    for (size_t i = 0; i < N; i++) in[i] = rng_int(&r, -100000, 100000);

    cl_mem din, dout, dcopy, dbusy;
    CREATE(din, clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(int), NULL, ERR));
    CREATE(dout, clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(int), NULL, ERR));
    CREATE(dcopy, clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(int), NULL, ERR));
    const size_t busy_n = 4096;
    CREATE(dbusy, clCreateBuffer(ctx, CL_MEM_READ_WRITE, busy_n * sizeof(cl_uint), NULL, ERR));
    cl_uint n = N;
    size_t global = N;

    // 1. One queue: write -> kernel -> read, all non-blocking.
    {
        int f = 3;
        CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &din));
        CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &dout));
        CHECK(clSetKernelArg(k, 2, sizeof(int), &f));
        CHECK(clSetKernelArg(k, 3, sizeof(cl_uint), &n));
        cl_event ew, ek, er;
        memset(out, 0, N * sizeof(int));
        CHECK(clEnqueueWriteBuffer(q, din, CL_FALSE, 0, N * sizeof(int), in, 0, NULL, &ew));
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 1, &ew, &ek));
        CHECK(clEnqueueReadBuffer(q, dout, CL_FALSE, 0, N * sizeof(int), out, 1, &ek, &er));
        cl_int st = status_of(er);
        EXPECT(st == CL_QUEUED || st == CL_SUBMITTED || st == CL_RUNNING || st == CL_COMPLETE,
               "read event status %d before the wait", st);
        CHECK(clWaitForEvents(1, &er));
        check_scaled(out, in, f, "write->kernel->read chain");
        ok("chain write -> kernel -> read on one queue: %d elements right", N);
        expect_event(ew, "write event", CL_COMMAND_WRITE_BUFFER, q, ctx);
        expect_event(ek, "kernel event", CL_COMMAND_NDRANGE_KERNEL, q, ctx);
        expect_event(er, "read event", CL_COMMAND_READ_BUFFER, q, ctx);
        ok("write, kernel and read events CL_COMPLETE with their command types");
        expect_profile(ew, "write");
        expect_profile(ek, "kernel");
        expect_profile(er, "read");
        CHECK(clReleaseEvent(ew));
        CHECK(clReleaseEvent(ek));
        CHECK(clReleaseEvent(er));
    }

    // 2. Two queues: write on q, kernel on q2 waiting on it, copy on q
    //    waiting on the kernel, read on q2 waiting on the copy.
    {
        int f = -7;
        CHECK(clSetKernelArg(k, 2, sizeof(int), &f));
        cl_event ew, ek, ec, er;
        for (size_t i = 0; i < N; i++) in[i] ^= 0x5a5a;
        memset(out, 0, N * sizeof(int));
        CHECK(clEnqueueWriteBuffer(q, din, CL_FALSE, 0, N * sizeof(int), in, 0, NULL, &ew));
        CHECK(clFlush(q));
        CHECK(clEnqueueNDRangeKernel(q2, k, 1, NULL, &global, NULL, 1, &ew, &ek));
        CHECK(clFlush(q2));
        CHECK(clEnqueueCopyBuffer(q, dout, dcopy, 0, 0, N * sizeof(int), 1, &ek, &ec));
        CHECK(clFlush(q));
        CHECK(clEnqueueReadBuffer(q2, dcopy, CL_FALSE, 0, N * sizeof(int), out, 1, &ec, &er));
        CHECK(clFlush(q2));
        CHECK(clWaitForEvents(1, &er));
        check_scaled(out, in, f, "cross-queue chain");
        ok("chain write(q) -> kernel(q2) -> copy(q) -> read(q2): %d elements right", N);
        expect_event(ew, "write event (q)", CL_COMMAND_WRITE_BUFFER, q, ctx);
        expect_event(ek, "kernel event (q2)", CL_COMMAND_NDRANGE_KERNEL, q2, ctx);
        expect_event(ec, "copy event (q)", CL_COMMAND_COPY_BUFFER, q, ctx);
        expect_event(er, "read event (q2)", CL_COMMAND_READ_BUFFER, q2, ctx);
        ok("cross-queue events CL_COMPLETE with their queues and command types");
        expect_profile(ec, "copy");
        cl_event all[4] = {ew, ek, ec, er};
        CHECK(clWaitForEvents(4, all));
        for (int i = 0; i < 4; i++) CHECK(clReleaseEvent(all[i]));
        CHECK(clFinish(q));
        CHECK(clFinish(q2));
    }

    // 3. Markers and barriers.
    {
        cl_uint iters = 20000;
        CHECK(clSetKernelArg(busy, 0, sizeof(cl_mem), &dbusy));
        CHECK(clSetKernelArg(busy, 1, sizeof(cl_uint), &iters));
        cl_event e1, e2, m, m_all, b, after;
        CHECK(clEnqueueNDRangeKernel(q, busy, 1, NULL, &busy_n, NULL, 0, NULL, &e1));
        CHECK(clEnqueueCopyBuffer(q, dout, dcopy, 0, 0, N * sizeof(int), 0, NULL, &e2));
        cl_event both[2] = {e1, e2};
        CHECK(clEnqueueMarkerWithWaitList(q, 2, both, &m));
        CHECK(clWaitForEvents(1, &m));
        EXPECT(status_of(e1) == CL_COMPLETE, "marker complete before the kernel it waits for");
        EXPECT(status_of(e2) == CL_COMPLETE, "marker complete before the copy it waits for");
        expect_event(m, "marker (wait list)", CL_COMMAND_MARKER, q, ctx);
        ok("clEnqueueMarkerWithWaitList(2 events) completes after both");

        CHECK(clReleaseEvent(e1));
        CHECK(clReleaseEvent(e2));
        CHECK(clEnqueueNDRangeKernel(q, busy, 1, NULL, &busy_n, NULL, 0, NULL, &e1));
        CHECK(clEnqueueMarkerWithWaitList(q, 0, NULL, &m_all));
        CHECK(clWaitForEvents(1, &m_all));
        EXPECT(status_of(e1) == CL_COMPLETE, "marker (no wait list) complete before the kernel");
        expect_event(m_all, "marker (all previous)", CL_COMMAND_MARKER, q, ctx);
        ok("clEnqueueMarkerWithWaitList(none) completes after all previous commands");

        CHECK(clReleaseEvent(e1));
        CHECK(clEnqueueNDRangeKernel(q, busy, 1, NULL, &busy_n, NULL, 0, NULL, &e1));
        CHECK(clEnqueueBarrierWithWaitList(q, 0, NULL, &b));
        int sentinel = 0x13572468;
        CHECK(clEnqueueFillBuffer(q, dcopy, &sentinel, sizeof sentinel, 0, N * sizeof(int), 0,
                                  NULL, NULL));
        CHECK(clEnqueueMarkerWithWaitList(q, 0, NULL, &after));
        CHECK(clWaitForEvents(1, &after));
        EXPECT(status_of(e1) == CL_COMPLETE, "barrier: kernel not complete");
        expect_event(b, "barrier", CL_COMMAND_BARRIER, q, ctx);
        CHECK(clEnqueueReadBuffer(q, dcopy, CL_TRUE, 0, N * sizeof(int), out, 0, NULL, NULL));
        for (size_t i = 0; i < N; i++)
            if (out[i] != sentinel)
                fail("fill after barrier: first mismatch at index %zu: got %d, want %d", i,
                     out[i], sentinel);
        ok("clEnqueueBarrierWithWaitList: barrier CL_COMPLETE, later commands ran");

        // A barrier waiting for an event of the other queue.
        cl_event eq2, b2;
        int fill2 = 0x0badf00d;
        CHECK(clEnqueueNDRangeKernel(q2, busy, 1, NULL, &busy_n, NULL, 0, NULL, &eq2));
        CHECK(clFlush(q2));
        CHECK(clEnqueueBarrierWithWaitList(q, 1, &eq2, &b2));
        CHECK(clEnqueueFillBuffer(q, dcopy, &fill2, sizeof fill2, 0, N * sizeof(int), 0, NULL,
                                  NULL));
        CHECK(clFinish(q));
        EXPECT(status_of(eq2) == CL_COMPLETE, "barrier on q finished before q2's kernel");
        EXPECT(status_of(b2) == CL_COMPLETE, "barrier with wait list not complete");
        ok("clEnqueueBarrierWithWaitList(event of another queue) completes after it");
        CHECK(clReleaseEvent(e1));
        CHECK(clReleaseEvent(m));
        CHECK(clReleaseEvent(m_all));
        CHECK(clReleaseEvent(b));
        CHECK(clReleaseEvent(after));
        CHECK(clReleaseEvent(eq2));
        CHECK(clReleaseEvent(b2));
    }

    // 4. Callbacks.
    {
        cl_uint iters = 20000;
        CHECK(clSetKernelArg(busy, 0, sizeof(cl_mem), &dbusy));
        CHECK(clSetKernelArg(busy, 1, sizeof(cl_uint), &iters));
        static Callback cb1, cb2;
        cb1.tag = 11;
        cb2.tag = 22;
        cl_event e;
        CHECK(clEnqueueNDRangeKernel(q, busy, 1, NULL, &busy_n, NULL, 0, NULL, &e));
        cl_int before = status_of(e);
        CHECK(clSetEventCallback(e, CL_COMPLETE, on_complete, &cb1));
        printf("(kernel event status when its callback was registered: %d)\n", before);
        CHECK(clFinish(q));
        EXPECT(status_of(e) == CL_COMPLETE, "kernel event not complete after clFinish");
        wait_callback(&cb1, e, "callback on a pending kernel");
        ok("clSetEventCallback(CL_COMPLETE) on a pending kernel fired once with CL_COMPLETE");
        // Registered on an event already complete: still called.
        CHECK(clSetEventCallback(e, CL_COMPLETE, on_complete, &cb2));
        wait_callback(&cb2, e, "callback on a complete event");
        ok("clSetEventCallback(CL_COMPLETE) on a complete event fired once");
        EXPECT(atomic_load(&cb1.calls) == 1, "first callback called again (%d)",
               atomic_load(&cb1.calls));

        cl_uint want[8];
        for (cl_uint i = 0; i < 8; i++) {
            cl_uint x = i;
            for (cl_uint j = 0; j < iters; j++) x = x * 1664525u + 1013904223u;
            want[i] = x;
        }
        cl_uint got[8];
        CHECK(clEnqueueReadBuffer(q, dbusy, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
        for (int i = 0; i < 8; i++)
            EXPECT(got[i] == want[i], "busy kernel: index %d got %u, want %u", i, got[i], want[i]);
        ok("busy kernel result right");
        CHECK(clReleaseEvent(e));
    }

    // 5. No profiling on a queue without CL_QUEUE_PROFILING_ENABLE.
    {
        cl_command_queue plain;
        CREATE(plain, clCreateCommandQueue(ctx, dev, 0, ERR));
        cl_event e;
        int v = 0;
        CHECK(clEnqueueReadBuffer(plain, dout, CL_TRUE, 0, sizeof v, &v, 0, NULL, &e));
        EXPECT(status_of(e) == CL_COMPLETE, "blocking read's event not complete");
        cl_ulong t = 0;
        EXPECT_ERR(clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof t, &t, NULL),
                   CL_PROFILING_INFO_NOT_AVAILABLE);
        ok("no profiling queue: CL_PROFILING_INFO_NOT_AVAILABLE");
        CHECK(clReleaseEvent(e));
        CHECK(clReleaseCommandQueue(plain));
    }

    // 6. An out-of-order queue, where the device has them: the order is
    //    the events' alone. write -> scale (waits on the write) -> copy
    //    (waits on the kernel) -> a barrier -> blocking read of the copy.
    {
        cl_command_queue_properties dp = 0;
        CHECK(clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof dp, &dp, NULL));
        if (!(dp & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)) {
            ok("out-of-order queues: the device has none (skipped)");
        } else {
            cl_command_queue oq;
            CREATE(oq, clCreateCommandQueue(ctx, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, ERR));
            cl_command_queue_properties op = 0;
            CHECK(clGetCommandQueueInfo(oq, CL_QUEUE_PROPERTIES, sizeof op, &op, NULL));
            EXPECT(op & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, "queue is not out of order");
            int f = 7;
            cl_event ew, ek, ec;
            CHECK(clEnqueueWriteBuffer(oq, din, CL_FALSE, 0, N * sizeof(int), in, 0, NULL, &ew));
            CHECK(clSetKernelArg(k, 0, sizeof din, &din));
            CHECK(clSetKernelArg(k, 1, sizeof dout, &dout));
            CHECK(clSetKernelArg(k, 2, sizeof f, &f));
            CHECK(clSetKernelArg(k, 3, sizeof n, &n));
            CHECK(clEnqueueNDRangeKernel(oq, k, 1, NULL, &global, NULL, 1, &ew, &ek));
            CHECK(clEnqueueCopyBuffer(oq, dout, dcopy, 0, 0, N * sizeof(int), 1, &ek, &ec));
            CHECK(clEnqueueBarrierWithWaitList(oq, 0, NULL, NULL));
            memset(out, 0, N * sizeof(int));
            CHECK(clEnqueueReadBuffer(oq, dcopy, CL_TRUE, 0, N * sizeof(int), out, 0, NULL, NULL));
            for (size_t i = 0; i < N; i++) {
                int want = in[i] * f + (int)i;
                EXPECT(out[i] == want, "out-of-order chain: out[%zu] = %d, want %d", i, out[i],
                       want);
            }
            EXPECT(status_of(ec) == CL_COMPLETE, "copy event not complete after the barrier");
            CHECK(clFinish(oq));
            ok("out-of-order queue: a chain ordered by its events and a barrier computes exactly");
            CHECK(clReleaseEvent(ew));
            CHECK(clReleaseEvent(ek));
            CHECK(clReleaseEvent(ec));
            CHECK(clReleaseCommandQueue(oq));
        }
    }

    CHECK(clReleaseMemObject(din));
    CHECK(clReleaseMemObject(dout));
    CHECK(clReleaseMemObject(dcopy));
    CHECK(clReleaseMemObject(dbusy));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseKernel(busy));
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseCommandQueue(q2));
    CHECK(clReleaseContext(ctx));
    free(in);
    free(out);
    return pass();
}
