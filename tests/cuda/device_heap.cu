// The device heap: cudaDeviceSetLimit(cudaLimitMallocHeapSize) reaches the
// host and counts against the VM's quota (the printf FIFO's too); per-thread malloc/free; a binary
// search tree built with new by one launch and read and deleted by later
// ones; virtual functions through objects another launch made; a request
// larger than the heap gives NULL; once a kernel that uses the heap has
// run, its size is fixed. Every result is checked against the CPU.
#define PROGRAM "device_heap"
#include "common.h"

#include <algorithm>
#include <vector>

// Each thread builds its row of a multiplication table in a scratch
// array, sums it backwards and frees it.
__global__ void row_sums(long long* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long* row = static_cast<long long*>(malloc(n * sizeof(long long)));
    if (row == nullptr) {
        out[i] = -1;
        return;
    }
    for (int k = 0; k < n; k++) row[k] = (long long)(i + 1) * (k + 3);
    long long s = 0;
    for (int k = n - 1; k >= 0; k--) s += row[k];
    out[i] = s;
    free(row);
}

struct TreeNode {
    int key;
    TreeNode* left;
    TreeNode* right;
};

// One thread inserts keys into a tree whose root lives in device memory.
__global__ void tree_insert(TreeNode** root, const int* keys, int n) {
    for (int k = 0; k < n; k++) {
        TreeNode** at = root;
        while (*at != nullptr) at = keys[k] < (*at)->key ? &(*at)->left : &(*at)->right;
        TreeNode* x = new TreeNode;
        x->key = keys[k];
        x->left = x->right = nullptr;
        *at = x;
    }
}

// In-order walk with an explicit stack, deleting as it goes.
__global__ void tree_drain(TreeNode** root, int* out, int* count) {
    TreeNode* stack[64];
    int depth = 0, c = 0;
    TreeNode* x = *root;
    while (x != nullptr || depth > 0) {
        while (x != nullptr) {
            stack[depth++] = x;
            x = x->left;
        }
        x = stack[--depth];
        out[c++] = x->key;
        TreeNode* right = x->right;
        delete x;
        x = right;
    }
    *root = nullptr;
    *count = c;
}

__global__ void try_malloc(size_t bytes, int* got) {
    void* p = malloc(bytes);
    *got = p != nullptr;
    free(p);
}

struct Account {
    long long balance;
    __device__ explicit Account(long long b) : balance(b) {}
    __device__ virtual long long interest() const { return 0; }
    __device__ virtual const char* kind() const { return "plain"; }
    __device__ virtual ~Account() {}
};

struct Savings : Account {
    int rate;
    __device__ Savings(long long b, int r) : Account(b), rate(r) {}
    __device__ long long interest() const override { return balance * rate / 100; }
};

struct Loan : Account {
    __device__ explicit Loan(long long b) : Account(b) {}
    __device__ long long interest() const override { return -balance / 10; }
};

__global__ void open_accounts(Account** acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long b = 1000 + 37 * i;
    if (i % 3 == 0)
        acc[i] = new Account(b);
    else if (i % 3 == 1)
        acc[i] = new Savings(b, i % 7);
    else
        acc[i] = new Loan(b);
}

__global__ void pay_interest(Account* const* acc, long long* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = acc[i]->balance + acc[i]->interest();
}

__global__ void close_accounts(Account** acc, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) delete acc[i];
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");

    size_t heap = 0;
    CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    EXPECT(heap == 8u << 20, "default heap %zu bytes, want 8 MiB", heap);
    size_t total = 0, free0 = 0;
    CHECK(cudaMemGetInfo(&free0, &total));
    // More than the whole device: fairgpu refuses it (past the VM's quota);
    // an H200's driver takes it, to reserve at the next launch.
    cudaError_t big = cudaDeviceSetLimit(cudaLimitMallocHeapSize, total + (1u << 20));
    EXPECT(big == cudaSuccess || big == cudaErrorMemoryAllocation,
           "a heap larger than the device: %d %s", (int)big, cudaGetErrorName(big));
    (void)cudaGetLastError();
    CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 4u << 20));
    CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    EXPECT(heap == 4u << 20, "heap %zu bytes after setting 4 MiB", heap);
    // The heap, the printf FIFO and the stack are device memory (when a
    // GPU's driver reserves them differs: what they cost a VM's quota is
    // checked in tests/tests/cuda.rs).
    CHECK(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 2u << 20));
    CHECK(cudaDeviceSetLimit(cudaLimitStackSize, 4096));
    size_t stack = 0;
    CHECK(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    EXPECT(stack == 4096, "stack size %zu after setting 4096", stack);

    // Per-thread scratch.
    const int threads = 256, n = 40;
    long long* d_sums;
    CHECK(cudaMalloc(&d_sums, threads * sizeof(long long)));
    row_sums<<<threads / 64, 64>>>(d_sums, n);
    CHECK(cudaGetLastError());
    std::vector<long long> sums(threads);
    CHECK(cudaMemcpy(sums.data(), d_sums, threads * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < threads; i++) {
        long long want = 0;
        for (int k = 0; k < n; k++) want += (long long)(i + 1) * (k + 3);
        EXPECT(sums[i] == want, "row %d sums to %lld, want %lld", i, sums[i], want);
    }

    // The heap's size is fixed now.
    EXPECT_ERR(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 2u << 20), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    CHECK(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    EXPECT(heap == 4u << 20, "heap %zu bytes after a refused change", heap);

    // A tree that outlives the launch that built it.
    const int keys_n = 200;
    std::vector<int> keys(keys_n);
    uint64_t s = 12345;
    for (int& k : keys) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        k = (int)(s >> 40) % 100000;
    }
    int *d_keys, *d_out, *d_count;
    TreeNode** d_root;
    CHECK(cudaMalloc(&d_keys, keys_n * sizeof(int)));
    CHECK(cudaMalloc(&d_out, keys_n * sizeof(int)));
    CHECK(cudaMalloc(&d_count, sizeof(int)));
    CHECK(cudaMalloc(&d_root, sizeof(TreeNode*)));
    CHECK(cudaMemset(d_root, 0, sizeof(TreeNode*)));
    CHECK(cudaMemcpy(d_keys, keys.data(), keys_n * sizeof(int), cudaMemcpyHostToDevice));
    tree_insert<<<1, 1>>>(d_root, d_keys, keys_n / 2);
    tree_insert<<<1, 1>>>(d_root, d_keys + keys_n / 2, keys_n - keys_n / 2);
    tree_drain<<<1, 1>>>(d_root, d_out, d_count);
    CHECK(cudaGetLastError());
    int count = 0;
    std::vector<int> sorted(keys_n);
    CHECK(cudaMemcpy(&count, d_count, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(sorted.data(), d_out, keys_n * sizeof(int), cudaMemcpyDeviceToHost));
    std::vector<int> want = keys;
    std::sort(want.begin(), want.end());
    EXPECT(count == keys_n, "the tree held %d keys, want %d", count, keys_n);
    for (int i = 0; i < keys_n; i++)
        EXPECT(sorted[i] == want[i], "key %d is %d, want %d", i, sorted[i], want[i]);

    // Everything was deleted: the heap is free again (half of it in one
    // piece: a GPU's allocator keeps some for itself).
    int* d_got;
    int got = -1;
    CHECK(cudaMalloc(&d_got, sizeof(int)));
    try_malloc<<<1, 1>>>(2u << 20, d_got);
    CHECK(cudaMemcpy(&got, d_got, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(got == 1, "malloc of half the heap gave NULL after everything was freed");
    try_malloc<<<1, 1>>>(64u << 20, d_got);
    CHECK(cudaMemcpy(&got, d_got, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT(got == 0, "malloc of more than the heap did not give NULL");

    // Virtual functions.
    const int accounts = 150;
    Account** d_acc;
    long long* d_paid;
    CHECK(cudaMalloc(&d_acc, accounts * sizeof(Account*)));
    CHECK(cudaMalloc(&d_paid, accounts * sizeof(long long)));
    open_accounts<<<(accounts + 63) / 64, 64>>>(d_acc, accounts);
    pay_interest<<<(accounts + 63) / 64, 64>>>(d_acc, d_paid, accounts);
    close_accounts<<<(accounts + 63) / 64, 64>>>(d_acc, accounts);
    CHECK(cudaGetLastError());
    std::vector<long long> paid(accounts);
    CHECK(cudaMemcpy(paid.data(), d_paid, accounts * sizeof(long long), cudaMemcpyDeviceToHost));
    for (int i = 0; i < accounts; i++) {
        long long b = 1000 + 37 * i;
        long long w = i % 3 == 0 ? b : i % 3 == 1 ? b + b * (i % 7) / 100 : b - b / 10;
        EXPECT(paid[i] == w, "account %d: %lld, want %lld", i, paid[i], w);
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(d_sums));
    CHECK(cudaFree(d_keys));
    CHECK(cudaFree(d_out));
    CHECK(cudaFree(d_count));
    CHECK(cudaFree(d_root));
    CHECK(cudaFree(d_got));
    CHECK(cudaFree(d_acc));
    CHECK(cudaFree(d_paid));
    pass();
    return 0;
}
