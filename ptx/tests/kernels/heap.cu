// The device heap: malloc/free per thread, new/delete of objects that
// outlive the launch that made them, a request the heap cannot hold, and
// virtual functions called through objects another launch built.

// Each thread sums a scratch array it allocates and frees.
extern "C" __global__ void heap_sums(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int *buf = (int *)malloc(n * sizeof(int));
    if (buf == nullptr) {
        out[i] = -1;
        return;
    }
    for (int k = 0; k < n; ++k)
        buf[k] = i * k + 1;
    int s = 0;
    for (int k = n - 1; k >= 0; --k)
        s += buf[k];
    out[i] = s;
    free(buf);
}

struct Node {
    int value;
    Node *next;
};

// One thread pushes n nodes onto a list whose head lives in device memory.
extern "C" __global__ void heap_push(Node **head, int n)
{
    for (int k = 0; k < n; ++k) {
        Node *x = new Node;
        x->value = k * k + 7;
        x->next = *head;
        *head = x;
    }
}

// One thread walks the list a previous launch built, deleting it.
extern "C" __global__ void heap_walk(Node **head, int *out, int *count)
{
    int c = 0;
    Node *x = *head;
    while (x != nullptr) {
        out[c++] = x->value;
        Node *next = x->next;
        delete x;
        x = next;
    }
    *head = nullptr;
    *count = c;
}

extern "C" __global__ void heap_too_large(unsigned long long bytes, int *is_null)
{
    void *p = malloc(bytes);
    *is_null = p == nullptr;
    free(p);
}

struct Shape {
    __device__ virtual float area() const = 0;
    __device__ virtual int sides() const { return 0; }
    __device__ virtual ~Shape() {}
};

struct Square : Shape {
    float s;
    __device__ explicit Square(float s) : s(s) {}
    __device__ float area() const override { return s * s; }
    __device__ int sides() const override { return 4; }
};

struct Circle : Shape {
    float r;
    __device__ explicit Circle(float r) : r(r) {}
    __device__ float area() const override { return 3.25f * r * r; }
};

struct Triangle : Shape {
    float b, h;
    __device__ Triangle(float b, float h) : b(b), h(h) {}
    __device__ float area() const override { return 0.5f * b * h; }
    __device__ int sides() const override { return 3; }
};

// The objects are built here and used by other launches, so nvcc cannot
// see their types where their virtual functions are called.
extern "C" __global__ void shapes_make(Shape **out, const int *kind, const float *size, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    switch (kind[i]) {
    case 0:
        out[i] = new Square(size[i]);
        break;
    case 1:
        out[i] = new Circle(size[i]);
        break;
    default:
        out[i] = new Triangle(size[i], 2.0f);
        break;
    }
}

extern "C" __global__ void shapes_measure(Shape *const *shapes, float *area, int *sides, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        area[i] = shapes[i]->area();
        sides[i] = shapes[i]->sides();
    }
}

extern "C" __global__ void shapes_delete(Shape **shapes, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        delete shapes[i];
        shapes[i] = nullptr;
    }
}

// Calls whatever a pointer in device memory names.
typedef int (*IntOp)(int);
__device__ __noinline__ int twice(int x) { return 2 * x; }
__device__ __noinline__ int square(int x) { return x * x; }
__device__ IntOp int_ops[2] = {twice, square};

extern "C" __global__ void call_pointer(const int *which, const int *x, int *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = int_ops[which[i]](x[i]);
}
