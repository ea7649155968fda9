// JIT linking through the driver API, as Numba and NVIDIA's ptxjit sample
// use it (entry points taken with cudaGetDriverEntryPointByVersion): one
// PTX module linked alone, and a kernel linked with a device function from
// a second PTX module that it declares .extern; the linked images are
// loaded with cuModuleLoadData and launched, results checked against the
// CPU. A link with no input gives a module without functions.
#define PROGRAM "jit_link"
#include "common.h"

#include <cuda.h>

#include <vector>

static const char LIB_PTX[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    "// add3(a) = a + 3\n"
    ".visible .func (.param .b32 r) add3(\n"
    "\t.param .b32 a\n"
    ")\n"
    "{\n"
    "\t.reg .b32 %r<3>;\n"
    "\tld.param.b32 %r1, [a];\n"
    "\tadd.s32 %r2, %r1, 3;\n"
    "\tst.param.b32 [r], %r2;\n"
    "\tret;\n"
    "}\n";

// out[tid] = add3(tid) * m
static const char MAIN_PTX[] =
    "//\n// a kernel calling a function of another module\n//\n"
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    ".extern .func (.param .b32 r) add3\n"
    "(\n"
    "\t.param .b32 a\n"
    ")\n"
    ";\n"
    "\n"
    ".visible .entry scaled(\n"
    "\t.param .u64 out,\n"
    "\t.param .u32 m\n"
    ")\n"
    "{\n"
    "\t.reg .b32 %r<5>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [out];\n"
    "\tld.param.u32 %r4, [m];\n"
    "\tcvta.to.global.u64 %rd2, %rd1;\n"
    "\tmov.u32 %r1, %tid.x;\n"
    "\t{\n"
    "\t.param .b32 a0;\n"
    "\tst.param.b32 [a0], %r1;\n"
    "\t.param .b32 r0;\n"
    "\tcall.uni (r0), add3, (a0);\n"
    "\tld.param.b32 %r2, [r0];\n"
    "\t}\n"
    "\tmul.lo.s32 %r3, %r2, %r4;\n"
    "\tmul.wide.u32 %rd3, %r1, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tst.global.u32 [%rd4], %r3;\n"
    "\tret;\n"
    "}\n";

// out[tid] = tid * 2 (on its own)
static const char ALONE_PTX[] =
    ".version 7.0\n"
    ".target sm_75\n"
    ".address_size 64\n"
    ".visible .entry twice(.param .u64 out)\n"
    "{\n"
    "\t.reg .b32 %r<3>;\n"
    "\t.reg .b64 %rd<5>;\n"
    "\tld.param.u64 %rd1, [out];\n"
    "\tcvta.to.global.u64 %rd2, %rd1;\n"
    "\tmov.u32 %r1, %tid.x;\n"
    "\tshl.b32 %r2, %r1, 1;\n"
    "\tmul.wide.u32 %rd3, %r1, 4;\n"
    "\tadd.s64 %rd4, %rd2, %rd3;\n"
    "\tst.global.u32 [%rd4], %r2;\n"
    "\tret;\n"
    "}\n";

#define DRIVER(X)                                                                  \
    X(cuLinkCreate)                                        \
    X(cuLinkAddData)                                      \
    X(cuLinkComplete)                                    \
    X(cuLinkDestroy)                                      \
    X(cuModuleLoadData)                                \
    X(cuModuleGetFunction)                          \
    X(cuModuleUnload)                                    \
    X(cuLaunchKernel)

#define DECLARE(name) static decltype(&name) p_##name;
DRIVER(DECLARE)

#define DRV(call)                                                                    \
    do {                                                                             \
        CUresult r_ = (call);                                                        \
        if (r_ != CUDA_SUCCESS) fail("line %d: %s returned %d", __LINE__, #call, (int)r_); \
    } while (0)

static void entry_points() {
#define TAKE(name)                                                                   \
    {                                                                                      \
        cudaDriverEntryPointQueryResult q;                                                 \
        CHECK(cudaGetDriverEntryPointByVersion(#name, (void**)&p_##name, 12000,             \
                                                cudaEnableDefault, &q));                   \
        EXPECT(q == cudaDriverEntryPointSuccess && p_##name, "no entry point %s", #name); \
    }
    DRIVER(TAKE)
}

// Links `n` PTX inputs, loads the image and returns the function `name`.
static CUfunction link_and_load(const char* const* ptx, int n, const char* name, CUmodule* mod) {
    CUlinkState link;
    DRV(p_cuLinkCreate(0, nullptr, nullptr, &link));
    for (int i = 0; i < n; i++)
        DRV(p_cuLinkAddData(link, CU_JIT_INPUT_PTX, (void*)ptx[i], strlen(ptx[i]) + 1, "input", 0,
                            nullptr, nullptr));
    void* image = nullptr;
    size_t size = 0;
    DRV(p_cuLinkComplete(link, &image, &size));
    EXPECT(image != nullptr && size > 0, "cuLinkComplete gave %p, %zu bytes", image, size);
    DRV(p_cuModuleLoadData(mod, image));
    DRV(p_cuLinkDestroy(link));
    CUfunction f;
    DRV(p_cuModuleGetFunction(&f, *mod, name));
    return f;
}

int main() {
    first_call(cudaFree(nullptr), "cudaFree(0)");
    entry_points();
    const int n = 128;
    unsigned* out = nullptr;
    CHECK(cudaMalloc(&out, n * sizeof(unsigned)));
    std::vector<unsigned> got(n);

    CUmodule alone;
    const char* one[] = {ALONE_PTX};
    CUfunction twice = link_and_load(one, 1, "twice", &alone);
    void* args1[] = {&out};
    DRV(p_cuLaunchKernel(twice, 1, 1, 1, n, 1, 1, 0, nullptr, args1, nullptr));
    CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++) EXPECT(got[i] == 2u * i, "twice[%d] = %u", i, got[i]);

    CUmodule both;
    const char* two[] = {MAIN_PTX, LIB_PTX};
    CUfunction scaled = link_and_load(two, 2, "scaled", &both);
    unsigned m = 5;
    void* args2[] = {&out, &m};
    DRV(p_cuLaunchKernel(scaled, 1, 1, 1, n, 1, 1, 0, nullptr, args2, nullptr));
    CHECK(cudaMemcpy(got.data(), out, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        EXPECT(got[i] == (i + 3u) * 5u, "scaled[%d] = %u, want %u", i, got[i], (i + 3u) * 5u);

    // Nothing to link: NVIDIA's driver completes it with an image, which
    // loads as a module that has no function.
    CUlinkState empty;
    DRV(p_cuLinkCreate(0, nullptr, nullptr, &empty));
    void* image = nullptr;
    size_t size = 0;
    DRV(p_cuLinkComplete(empty, &image, &size));
    EXPECT(image != nullptr && size > 0, "an empty link gave %p, %zu bytes", image, size);
    CUmodule none;
    DRV(p_cuModuleLoadData(&none, image));
    DRV(p_cuLinkDestroy(empty));
    CUfunction nothing;
    EXPECT(p_cuModuleGetFunction(&nothing, none, "twice") == CUDA_ERROR_NOT_FOUND,
           "the empty link's module has a function");
    DRV(p_cuModuleUnload(none));

    DRV(p_cuModuleUnload(alone));
    DRV(p_cuModuleUnload(both));
    CHECK(cudaFree(out));
    pass();
    return 0;
}
