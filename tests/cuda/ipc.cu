// CUDA IPC between two processes of one VM: the parent exports an
// allocation, a child process (this program again) opens the handle,
// reads what the parent wrote, runs a kernel on it, and the parent sees
// the kernel's result. An exported event orders a child's kernel before
// the parent's copy, with only a pipe between the processes. The parent
// frees the memory while another child holds it open: the memory stays
// until that child closes it. A process cannot open its own handle, nor a
// forged one. A pool made for IPC exports as a file descriptor, and one
// of its pointers to a child that imports both, works on it and frees
// it. Every value is checked.
#define PROGRAM "ipc"
#include "common.h"

#include <string>
#include <sys/wait.h>
#include <unistd.h>

static const int N = 4096;

__global__ void add(int* a, int n, int by) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) a[i] += by;
}

template <typename C>
static std::string hex(const C (&bytes)[64]) {
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (unsigned char c : bytes) {
        s += digits[c >> 4];
        s += digits[c & 15];
    }
    return s;
}

// The 64 bytes written as hex by `hex`.
template <typename C>
static void unhex_into(const char* s, C (&out)[64]) {
    if (std::strlen(s) != 2 * sizeof out) fail("bad handle text");
    for (size_t i = 0; i < sizeof out; i++) {
        unsigned v;
        if (std::sscanf(s + 2 * i, "%2x", &v) != 1) fail("bad handle text");
        out[i] = (C)v;
    }
}

static cudaIpcMemHandle_t unhex(const char* s) {
    cudaIpcMemHandle_t h;
    unhex_into(s, h.reserved);
    return h;
}

static void expect_values(const int* d, int offset, const char* what) {
    static int host[N];
    CHECK(cudaMemcpy(host, d, sizeof host, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (host[i] != 3 * i + 1 + offset) fail("%s: a[%d] = %d, want %d", what, i, host[i], 3 * i + 1 + offset);
}

// Runs this program as `child MODE HANDLE [FDS]` and waits for it.
static pid_t spawn_text(const char* mode, const std::string& text, int in_fd = -1, int out_fd = -1) {
    std::string in = std::to_string(in_fd), out = std::to_string(out_fd);
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
        // Straight to exec: the child uses none of the parent's CUDA state.
        execl("/proc/self/exe", "ipc", "child", mode, text.c_str(), in.c_str(), out.c_str(), (char*)nullptr);
        _exit(127);
    }
    return pid;
}

static pid_t spawn(const char* mode, const cudaIpcMemHandle_t& h, int in_fd = -1, int out_fd = -1) {
    return spawn_text(mode, hex(h.reserved), in_fd, out_fd);
}

static void reap(pid_t pid, const char* what) {
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("the %s child failed (status %#x)", what, status);
}

static cudaIpcEventHandle_t event_handle;

// "pool": imports the pool the parent's descriptor `fd` names and the
// pointer `text` carries, checks it, adds 7 on the device, frees it.
static int pool_child(const char* text, int fd) {
    cudaMemPoolPtrExportData data;
    unhex_into(text, data.reserved);
    cudaMemPool_t pool;
    first_call(cudaMemPoolImportFromShareableHandle(&pool, (void*)(intptr_t)fd,
                                                    cudaMemHandleTypePosixFileDescriptor, 0),
               "cudaMemPoolImportFromShareableHandle");
    int* p = nullptr;
    CHECK(cudaMemPoolImportPointer((void**)&p, pool, &data));
    expect_values(p, 0, "the imported pool pointer");
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    add<<<(N + 255) / 256, 256, 0, s>>>(p, N, 7);
    CHECK(cudaFreeAsync(p, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaMemPoolDestroy(pool));
    return 0;
}

static int child(const char* mode, const char* text, int in_fd, int out_fd) {
    if (std::strcmp(mode, "pool") == 0) return pool_child(text, in_fd);
    cudaIpcMemHandle_t h = unhex(text);
    int* p = nullptr;
    first_call(cudaIpcOpenMemHandle((void**)&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    if (std::strcmp(mode, "use") == 0) {
        expect_values(p, 0, "the child's view");
        add<<<(N + 255) / 256, 256>>>(p, N, 1000);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        // Opened twice, the same address; it stays until both are closed.
        int* q = nullptr;
        CHECK(cudaIpcOpenMemHandle((void**)&q, h, cudaIpcMemLazyEnablePeerAccess));
        if (q != p) fail("opened twice: %p, then %p", (void*)p, (void*)q);
        CHECK(cudaIpcCloseMemHandle(q));
        expect_values(p, 1000, "after one of two closes");
        CHECK(cudaIpcCloseMemHandle(p));
        int v;
        if (cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess)
            fail("memory still reachable after its last close");
        cudaGetLastError();
        if (cudaIpcCloseMemHandle(p) == cudaSuccess) fail("closed a handle that is not open");
        cudaGetLastError();
    } else if (std::strcmp(mode, "event") == 0) {
        // Its kernel, then a record of the parent's event; the parent
        // hears of it through a pipe only and waits on the event.
        char c;
        if (read(in_fd, &event_handle, sizeof event_handle) != (ssize_t)sizeof event_handle) fail("pipe");
        cudaEvent_t ev;
        CHECK(cudaIpcOpenEventHandle(&ev, event_handle));
        cudaStream_t s;
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        add<<<(N + 255) / 256, 256, 0, s>>>(p, N, 5);
        CHECK(cudaEventRecord(ev, s));
        c = 'r';
        if (write(out_fd, &c, 1) != 1) fail("pipe");
        if (read(in_fd, &c, 1) != 1) fail("pipe");
        CHECK(cudaStreamDestroy(s));
        CHECK(cudaEventDestroy(ev));
        CHECK(cudaIpcCloseMemHandle(p));
    } else {
        // "hold": tell the parent it is open, wait until the parent freed
        // it, then check it is all still there.
        char c = 'o';
        if (write(out_fd, &c, 1) != 1) fail("pipe");
        if (read(in_fd, &c, 1) != 1) fail("pipe");
        expect_values(p, 1005, "after the exporter freed it");
        add<<<(N + 255) / 256, 256>>>(p, N, 1);
        CHECK(cudaDeviceSynchronize());
        expect_values(p, 1006, "a kernel after the exporter freed it");
        CHECK(cudaIpcCloseMemHandle(p));
    }
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 6 && std::strcmp(argv[1], "child") == 0) return child(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    size_t free0, total;
    first_call(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");
    int* d;
    CHECK(cudaMalloc(&d, N * sizeof(int)));
    static int host[N];
    for (int i = 0; i < N; i++) host[i] = 3 * i + 1;
    CHECK(cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice));

    // A pointer inside the allocation exports the whole allocation.
    cudaIpcMemHandle_t h, again;
    CHECK(cudaIpcGetMemHandle(&h, d + 100));
    CHECK(cudaIpcGetMemHandle(&again, d));
    if (std::memcmp(&h, &again, sizeof h) != 0) fail("two handles of one allocation differ");

    // This process cannot open its own handle, nor a forged one.
    int* p = nullptr;
    if (cudaIpcOpenMemHandle((void**)&p, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess)
        fail("a process opened its own handle");
    cudaGetLastError();
    // A handle no exporter made (a bit flipped in fairgpu's token is
    // refused too: tests/tests/cuda.rs; an H200's driver opened one).
    cudaIpcMemHandle_t forged = h;
    for (auto& b : forged.reserved) b ^= 0xa5;
    if (cudaIpcOpenMemHandle((void**)&p, forged, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess)
        fail("a forged handle was opened");
    cudaGetLastError();

    reap(spawn("use", h), "using");
    expect_values(d, 1000, "the parent's view of the child's kernel");

    // An event: interprocess events are made only without timing.
    cudaEvent_t timed, ev;
    cudaIpcEventHandle_t eh;
    EXPECT_ERR(cudaEventCreateWithFlags(&timed, cudaEventInterprocess | 0), cudaErrorInvalidValue);
    cudaGetLastError();
    CHECK(cudaEventCreateWithFlags(&timed, cudaEventDefault));
    if (cudaIpcGetEventHandle(&eh, timed) == cudaSuccess) fail("an event made without cudaEventInterprocess was exported");
    cudaGetLastError();
    CHECK(cudaEventDestroy(timed));
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming));
    CHECK(cudaIpcGetEventHandle(&eh, ev));
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) fail("pipe");
    pid_t recorder = spawn("event", h, to_child[0], from_child[1]);
    if (write(to_child[1], &eh, sizeof eh) != (ssize_t)sizeof eh) fail("pipe");
    char c;
    if (read(from_child[0], &c, 1) != 1) fail("the recording child did not record");
    // The child's kernel is ordered before this copy by its record alone.
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamWaitEvent(s, ev, 0));
    CHECK(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < N; i++)
        if (host[i] != 3 * i + 1 + 1005) fail("after the child's recorded kernel: a[%d] = %d", i, host[i]);
    CHECK(cudaEventQuery(ev));
    CHECK(cudaEventSynchronize(ev));
    if (write(to_child[1], &c, 1) != 1) fail("pipe");
    reap(recorder, "recording");
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaEventDestroy(ev));

    // Freed by the exporter while another process holds it open.
    pid_t holder = spawn("hold", h, to_child[0], from_child[1]);
    if (read(from_child[0], &c, 1) != 1) fail("the holding child did not open the handle");
    CHECK(cudaFree(d));
    if (write(to_child[1], &c, 1) != 1) fail("pipe");
    reap(holder, "holding");

    // A pool for IPC: its descriptor and a pointer's export data to a
    // child, which imports both, adds 7 on the device and frees its
    // import; the parent's allocation stays the parent's.
    int supported = 0;
    CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
    EXPECT(supported & cudaMemHandleTypePosixFileDescriptor, "pool handle types %d", supported);
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    int* q;
    CHECK(cudaMallocFromPoolAsync((void**)&q, N * sizeof(int), pool, 0));
    for (int i = 0; i < N; i++) host[i] = 3 * i + 1;
    CHECK(cudaMemcpy(q, host, sizeof host, cudaMemcpyHostToDevice));
    int fd = -1;
    CHECK(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
    cudaMemPoolPtrExportData data;
    CHECK(cudaMemPoolExportPointer(&data, q));
    reap(spawn_text("pool", hex(data.reserved), fd), "pool");
    close(fd);
    expect_values(q, 7, "the parent's view of the pool child's kernel");
    CHECK(cudaFreeAsync(q, 0));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemPoolDestroy(pool));

    // Its last close freed it.
    size_t free1;
    CHECK(cudaMemGetInfo(&free1, &total));
    if (free1 != free0) fail("device memory free %zu before, %zu after", free0, free1);
    pass();
    return 0;
}
