// A program that compiles its kernels at run time with NVRTC for the
// device's own architecture and loads the machine code, as NVIDIA's
// samples (nvrtc_helper.h) and CuPy do: `--gpu-architecture=sm_XY` from
// the compute capability, nvrtcGetCUBIN, cuModuleLoadData. Driver API
// only, checked against the CPU. It also asks for PTX of a virtual
// architecture (unchanged path) and for a templated kernel by its name
// expression.
//
// Exit 0: every result matched. Exit 1: a mismatch or a failing call
// (printed).

#include <cuda.h>
#include <nvrtc.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CU(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char *s_ = nullptr;                                                \
      cuGetErrorName(r_, &s_);                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,          \
                   s_ ? s_ : "?");                                             \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

#define RTC(x)                                                                 \
  do {                                                                         \
    nvrtcResult r_ = (x);                                                      \
    if (r_ != NVRTC_SUCCESS) {                                                 \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,          \
                   nvrtcGetErrorString(r_));                                   \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

static const char *kSource = R"(
extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
template <typename T>
__global__ void sum(const T *x, T *out, int n) {
  __shared__ T part[256];
  T s = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    s += x[i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
)";

static void log_of(nvrtcProgram p) {
  size_t n = 0;
  RTC(nvrtcGetProgramLogSize(p, &n));
  std::string log(n, '\0');
  RTC(nvrtcGetProgramLog(p, &log[0]));
  if (n > 1) std::fprintf(stderr, "nvrtc log: %s\n", log.c_str());
}

// Compiles kSource with `opts`; returns what nvrtcGetCUBIN (or GetPTX)
// gives and the lowered name of sum<int>.
static std::vector<char> compile(const std::vector<const char *> &opts, bool cubin,
                                 std::string *sum_name) {
  nvrtcProgram p;
  RTC(nvrtcCreateProgram(&p, kSource, "kernels.cu", 0, nullptr, nullptr));
  RTC(nvrtcAddNameExpression(p, "sum<int>"));
  nvrtcResult r = nvrtcCompileProgram(p, (int)opts.size(), opts.data());
  if (r != NVRTC_SUCCESS) {
    log_of(p);
    RTC(r);
  }
  const char *lowered = nullptr;
  RTC(nvrtcGetLoweredName(p, "sum<int>", &lowered));
  *sum_name = lowered;
  size_t n = 0;
  std::vector<char> out;
  if (cubin) {
    RTC(nvrtcGetCUBINSize(p, &n));
    out.resize(n);
    RTC(nvrtcGetCUBIN(p, out.data()));
  } else {
    RTC(nvrtcGetPTXSize(p, &n));
    out.resize(n);
    RTC(nvrtcGetPTX(p, out.data()));
  }
  RTC(nvrtcDestroyProgram(&p));
  if (p != nullptr) {
    std::fprintf(stderr, "nvrtcDestroyProgram left the handle set\n");
    std::exit(1);
  }
  return out;
}

// Loads `image`, runs saxpy and sum<int>, compares with the CPU.
static int run(const char *what, const std::vector<char> &image, const std::string &sum_name) {
  CUmodule m;
  CU(cuModuleLoadData(&m, image.data()));
  CUfunction saxpy, sum;
  CU(cuModuleGetFunction(&saxpy, m, "saxpy"));
  CU(cuModuleGetFunction(&sum, m, sum_name.c_str()));

  const int n = 5000;
  std::vector<float> x(n), y(n), want(n);
  std::vector<int> v(n);
  long long want_sum = 0;
  for (int i = 0; i < n; i++) {
    x[i] = 0.25f * (float)(i % 97) - 3.0f;
    y[i] = (float)(i % 13) * 1.5f;
    want[i] = 2.5f * x[i] + y[i];
    v[i] = (i * 7919) % 1000 - 400;
    want_sum += v[i];
  }
  CUdeviceptr dx, dy, dv, dsum;
  CU(cuMemAlloc(&dx, n * sizeof(float)));
  CU(cuMemAlloc(&dy, n * sizeof(float)));
  CU(cuMemAlloc(&dv, n * sizeof(int)));
  CU(cuMemAlloc(&dsum, sizeof(int)));
  CU(cuMemcpyHtoD(dx, x.data(), n * sizeof(float)));
  CU(cuMemcpyHtoD(dy, y.data(), n * sizeof(float)));
  CU(cuMemcpyHtoD(dv, v.data(), n * sizeof(int)));
  CU(cuMemsetD32(dsum, 0, 1));

  float a = 2.5f;
  int count = n;
  void *sargs[] = {&a, &dx, &dy, &count};
  CU(cuLaunchKernel(saxpy, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, sargs, nullptr));
  void *rargs[] = {&dv, &dsum, &count};
  CU(cuLaunchKernel(sum, 8, 1, 1, 256, 1, 1, 0, nullptr, rargs, nullptr));
  CU(cuCtxSynchronize());

  std::vector<float> got(n);
  int got_sum = 0;
  CU(cuMemcpyDtoH(got.data(), dy, n * sizeof(float)));
  CU(cuMemcpyDtoH(&got_sum, dsum, sizeof(int)));
  int bad = 0;
  for (int i = 0; i < n; i++) {
    if (std::fabs(got[i] - want[i]) > 1e-5f * (1.0f + std::fabs(want[i]))) {
      if (bad++ < 5) std::fprintf(stderr, "%s: y[%d] = %g, want %g\n", what, i, got[i], want[i]);
    }
  }
  if (got_sum != (int)want_sum) {
    std::fprintf(stderr, "%s: sum %d, want %lld\n", what, got_sum, want_sum);
    bad++;
  }
  CU(cuMemFree(dx));
  CU(cuMemFree(dy));
  CU(cuMemFree(dv));
  CU(cuMemFree(dsum));
  CU(cuModuleUnload(m));
  std::printf("%s: %s\n", what, bad ? "MISMATCH" : "ok");
  return bad;
}

int main() {
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  int major = 0, minor = 0;
  CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  int nv_major = 0, nv_minor = 0;
  RTC(nvrtcVersion(&nv_major, &nv_minor));
  std::printf("device %d.%d, NVRTC %d.%d\n", major, minor, nv_major, nv_minor);

  char glued[64], sm[32], compute[64];
  std::snprintf(glued, sizeof glued, "--gpu-architecture=sm_%d%d", major, minor);
  std::snprintf(sm, sizeof sm, "sm_%d%d", major, minor);
  std::snprintf(compute, sizeof compute, "--gpu-architecture=compute_%d%d", major, minor);

  int bad = 0;
  std::string name;
  // The samples' way: the option with its value glued on.
  std::vector<char> img = compile({glued, "-default-device"}, true, &name);
  bad += run("cubin (--gpu-architecture=sm_XY)", img, name);
  // The value as the next option.
  img = compile({"-arch", sm, "-std=c++17"}, true, &name);
  bad += run("cubin (-arch sm_XY)", img, name);
  // PTX asked for: what every path does unchanged.
  img = compile({compute}, false, &name);
  bad += run("ptx (compute_XY)", img, name);

  CU(cuDevicePrimaryCtxRelease(dev));
  if (bad) {
    std::printf("FAILED\n");
    return 1;
  }
  std::printf("PASSED\n");
  return 0;
}
