// Link-time optimization at run time, the way programs that specialize
// kernels do it: NVRTC compiles two translation units to LTO-IR (`-dlto`),
// nvJitLink links them for the device's own architecture (`-lto
// -arch=sm_XY`) and the program loads what `nvJitLinkGetLinkedCubin`
// returns. One unit holds the kernel, the other a device function and a
// device variable it uses across units (the link resolves both). Every
// output element and the variable are checked against the CPU.
//
// Build: g++ -I<cuda.h> -I<nvrtc.h> -I<nvJitLink.h> jit_lto.cpp
//        -l:libcuda.so.1 -l:libnvrtc.so.12 -l:libnvJitLink.so.12
#include <cuda.h>
#include <nvJitLink.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CU(x)                                                                 \
    do {                                                                      \
        CUresult r_ = (x);                                                    \
        if (r_ != CUDA_SUCCESS) {                                             \
            const char *n_ = "?";                                             \
            cuGetErrorName(r_, &n_);                                          \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,   \
                         n_);                                                 \
            std::exit(1);                                                     \
        }                                                                     \
    } while (0)

#define RTC(x)                                                                \
    do {                                                                      \
        nvrtcResult r_ = (x);                                                 \
        if (r_ != NVRTC_SUCCESS) {                                            \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,   \
                         nvrtcGetErrorString(r_));                            \
            std::exit(1);                                                     \
        }                                                                     \
    } while (0)

static void jit_check(nvJitLinkHandle h, nvJitLinkResult r, const char *what, int line)
{
    if (r == NVJITLINK_SUCCESS)
        return;
    std::fprintf(stderr, "%s:%d: %s: nvJitLink error %d\n", __FILE__, line, what, (int)r);
    size_t n = 0;
    if (h && nvJitLinkGetErrorLogSize(h, &n) == NVJITLINK_SUCCESS && n > 1) {
        std::string log(n, '\0');
        if (nvJitLinkGetErrorLog(h, &log[0]) == NVJITLINK_SUCCESS)
            std::fprintf(stderr, "%s\n", log.c_str());
    }
    std::exit(1);
}
#define JIT(h, x) jit_check((h), (x), #x, __LINE__)

// The kernel's unit: it knows the other unit's function and variable by
// declaration only.
static const char *kernel_unit = R"(
extern __device__ int weigh(int x, int y);
extern __device__ unsigned int odd_seen;

extern "C" __global__ void combine(const int *x, const int *y, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        int v = weigh(x[i], y[i]);
        out[i] = v;
        if (v & 1)
            atomicAdd(&odd_seen, 1u);
    }
}
)";

// The other unit: the function the link inlines into the kernel, and the
// variable both see.
static const char *helper_unit = R"(
__device__ unsigned int odd_seen = 0;

__device__ int weigh(int x, int y)
{
    return 3 * x - y + (x & y);
}
)";

static std::vector<char> lto_ir(const char *src, const char *name)
{
    nvrtcProgram p;
    RTC(nvrtcCreateProgram(&p, src, name, 0, nullptr, nullptr));
    const char *opts[] = {"-dlto", "--relocatable-device-code=true"};
    nvrtcResult r = nvrtcCompileProgram(p, 2, opts);
    if (r != NVRTC_SUCCESS) {
        size_t n = 0;
        nvrtcGetProgramLogSize(p, &n);
        std::string log(n, '\0');
        nvrtcGetProgramLog(p, &log[0]);
        std::fprintf(stderr, "compiling %s: %s\n%s\n", name, nvrtcGetErrorString(r), log.c_str());
        std::exit(1);
    }
    size_t n = 0;
    RTC(nvrtcGetLTOIRSize(p, &n));
    std::vector<char> ir(n);
    RTC(nvrtcGetLTOIR(p, ir.data()));
    RTC(nvrtcDestroyProgram(&p));
    return ir;
}

static int weigh_cpu(int x, int y) { return 3 * x - y + (x & y); }

int main()
{
    unsigned vmaj = 0, vmin = 0;
    JIT(nullptr, nvJitLinkVersion(&vmaj, &vmin));
    std::printf("nvJitLink %u.%u\n", vmaj, vmin);

    std::vector<char> k = lto_ir(kernel_unit, "combine.cu");
    std::vector<char> h = lto_ir(helper_unit, "weigh.cu");

    CU(cuInit(0));
    CUdevice dev;
    CU(cuDeviceGet(&dev, 0));
    CUcontext ctx;
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    int major = 0, minor = 0;
    CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
    std::string arch = "-arch=sm_" + std::to_string(major * 10 + minor);

    nvJitLinkHandle link = nullptr;
    const char *lopts[] = {"-lto", arch.c_str()};
    JIT(link, nvJitLinkCreate(&link, 2, lopts));
    JIT(link, nvJitLinkAddData(link, NVJITLINK_INPUT_LTOIR, k.data(), k.size(), "combine"));
    JIT(link, nvJitLinkAddData(link, NVJITLINK_INPUT_LTOIR, h.data(), h.size(), "weigh"));
    JIT(link, nvJitLinkComplete(link));
    size_t size = 0;
    JIT(link, nvJitLinkGetLinkedCubinSize(link, &size));
    std::vector<char> image(size);
    JIT(link, nvJitLinkGetLinkedCubin(link, image.data()));
    JIT(nullptr, nvJitLinkDestroy(&link));
    std::printf("linked image: %zu bytes\n", size);

    CUmodule mod;
    CU(cuModuleLoadData(&mod, image.data()));
    CUfunction fn;
    CU(cuModuleGetFunction(&fn, mod, "combine"));
    CUdeviceptr odd;
    size_t odd_bytes = 0;
    CU(cuModuleGetGlobal(&odd, &odd_bytes, mod, "odd_seen"));
    if (odd_bytes != sizeof(unsigned)) {
        std::fprintf(stderr, "odd_seen is %zu bytes\n", odd_bytes);
        return 1;
    }

    const int n = 100000;
    std::vector<int> x(n), y(n), out(n, 0);
    for (int i = 0; i < n; i++) {
        x[i] = (int)((i * 7919LL) % 10007) - 5000;
        y[i] = (int)((i * 104729LL) % 65521);
    }
    CUdeviceptr dx, dy, dout;
    CU(cuMemAlloc(&dx, n * sizeof(int)));
    CU(cuMemAlloc(&dy, n * sizeof(int)));
    CU(cuMemAlloc(&dout, n * sizeof(int)));
    CU(cuMemcpyHtoD(dx, x.data(), n * sizeof(int)));
    CU(cuMemcpyHtoD(dy, y.data(), n * sizeof(int)));
    int count = n;
    void *args[] = {&dx, &dy, &dout, &count};
    const unsigned threads = 256, blocks = (n + threads - 1) / threads;
    CU(cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, nullptr, args, nullptr));
    CU(cuCtxSynchronize());
    CU(cuMemcpyDtoH(out.data(), dout, n * sizeof(int)));
    unsigned odd_dev = 0;
    CU(cuMemcpyDtoH(&odd_dev, odd, sizeof odd_dev));

    unsigned odd_cpu = 0;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int want = weigh_cpu(x[i], y[i]);
        if (want & 1)
            odd_cpu++;
        if (out[i] != want && bad++ < 5)
            std::fprintf(stderr, "out[%d] = %d, the CPU says %d\n", i, out[i], want);
    }
    if (odd_dev != odd_cpu) {
        std::fprintf(stderr, "odd_seen = %u, the CPU counts %u\n", odd_dev, odd_cpu);
        bad++;
    }
    CU(cuMemFree(dx));
    CU(cuMemFree(dy));
    CU(cuMemFree(dout));
    CU(cuModuleUnload(mod));
    CU(cuDevicePrimaryCtxRelease(dev));
    if (bad) {
        std::fprintf(stderr, "FAILED: %d wrong\n", bad);
        return 1;
    }
    std::printf("%d elements and the cross-unit counter (%u) match the CPU\nPASSED\n", n, odd_cpu);
    return 0;
}
