// The device as the CUDA runtime sees it. Prints "PROP name=value" lines
// for the test to compare with the daemon's configuration.
#define PROGRAM "device_query"
#include "common.h"

int main() {
    int count = -1;
    first_call(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    EXPECT(count == 1, "cudaGetDeviceCount: %d devices, want 1", count);

    int driver = 0, runtime = 0;
    CHECK(cudaDriverGetVersion(&driver));
    CHECK(cudaRuntimeGetVersion(&runtime));
    EXPECT(driver >= runtime, "driver version %d below the runtime's %d", driver, runtime);

    CHECK(cudaSetDevice(0));
    int dev = -1;
    CHECK(cudaGetDevice(&dev));
    EXPECT(dev == 0, "cudaGetDevice: %d", dev);

    cudaDeviceProp p;
    std::memset(&p, 0, sizeof p);
    CHECK(cudaGetDeviceProperties(&p, 0));
    EXPECT(std::strlen(p.name) > 0, "empty device name");
    EXPECT(p.major >= 3, "compute capability %d.%d", p.major, p.minor);
    EXPECT(p.multiProcessorCount > 0, "multiProcessorCount %d", p.multiProcessorCount);
    EXPECT(p.totalGlobalMem > 0, "totalGlobalMem 0");
    EXPECT(p.warpSize == 32, "warpSize %d", p.warpSize);
    EXPECT(p.maxThreadsPerBlock == 1024, "maxThreadsPerBlock %d", p.maxThreadsPerBlock);
    EXPECT(p.maxThreadsDim[0] == 1024, "maxThreadsDim[0] %d", p.maxThreadsDim[0]);
    EXPECT(p.maxGridSize[0] > 0, "maxGridSize[0] %d", p.maxGridSize[0]);

    // The attribute path (cudaDeviceGetAttribute) agrees with the struct.
    int v = -1;
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0));
    EXPECT(v == p.multiProcessorCount, "attribute SM count %d, property %d", v,
           p.multiProcessorCount);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0));
    EXPECT(v == p.major, "attribute major %d, property %d", v, p.major);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMinor, 0));
    EXPECT(v == p.minor, "attribute minor %d, property %d", v, p.minor);
    CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0));
    EXPECT(v == 32, "attribute warp size %d", v);

    // An ordinal past the last device is refused.
    EXPECT_ERR(cudaGetDeviceProperties(&p, 1), cudaErrorInvalidDevice);
    EXPECT_ERR(cudaSetDevice(1), cudaErrorInvalidDevice);
    (void)cudaGetLastError();
    CHECK(cudaGetDeviceProperties(&p, 0));

    std::printf("PROP name=%s\n", p.name);
    std::printf("PROP major=%d\n", p.major);
    std::printf("PROP minor=%d\n", p.minor);
    std::printf("PROP multiProcessorCount=%d\n", p.multiProcessorCount);
    std::printf("PROP totalGlobalMem=%zu\n", p.totalGlobalMem);
    std::printf("PROP warpSize=%d\n", p.warpSize);
    std::printf("PROP maxThreadsPerBlock=%d\n", p.maxThreadsPerBlock);
    std::printf("PROP driverVersion=%d\n", driver);
    std::printf("PROP runtimeVersion=%d\n", runtime);

    CHECK(cudaDeviceSynchronize());
    pass();
    return 0;
}
