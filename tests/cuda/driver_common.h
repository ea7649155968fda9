/*
 * Shared by the C programs that use the CUDA driver API directly
 * (driver_api.c, legacy_api.c): libcuda.so.1 is opened with dlopen and
 * every entry point the including file lists in DRIVER_CALLS(X) is taken
 * with dlsym under the name cuda.h binds (cuMemAlloc is cuMemAlloc_v2),
 * into p_<name>. So the programs build with no libcuda at all and run
 * against whichever one the loader finds.
 *
 * Define PROGRAM and DRIVER_CALLS before including. Output as the runtime
 * programs' (common.h): "PASS <name>", "FAIL <name>: ..." (exit 1), or
 * "NODRIVER <name>: ..." (exit 3) when there is no driver.
 */
#ifndef FAIRGPU_DRIVER_COMMON_H
#define FAIRGPU_DRIVER_COMMON_H

#include <cuda.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void fail(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL %s: ", PROGRAM);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    exit(1);
}

#define STR_(x) #x
#define STR(x) STR_(x)
#define DECLARE(fn) static __typeof__(fn)* p_##fn;
DRIVER_CALLS(DECLARE)

static const char* err_name(CUresult r) {
    const char* s = NULL;
    if (p_cuGetErrorName == NULL || p_cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL)
        return "?";
    return s;
}

#define CHECK(call)                                                                           \
    do {                                                                                      \
        CUresult r_ = (call);                                                                 \
        if (r_ != CUDA_SUCCESS)                                                               \
            fail("line %d: %s returned %d %s", __LINE__, #call, (int)r_, err_name(r_));       \
    } while (0)

#define EXPECT(cond, fmt, ...)                                                                \
    do {                                                                                      \
        if (!(cond)) fail("line %d: " fmt, __LINE__, ##__VA_ARGS__);                          \
    } while (0)

/* The driver library, for entry points a program looks up itself. */
static void* driver_lib;

static void load_driver(void) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    driver_lib = lib;
    if (lib == NULL) {
        printf("NODRIVER %s: dlopen(libcuda.so.1): %s\n", PROGRAM, dlerror());
        exit(3);
    }
#define LOAD(fn)                                                                              \
    p_##fn = (__typeof__(fn)*)dlsym(lib, STR(fn));                                            \
    if (p_##fn == NULL) fail("libcuda.so.1 lacks %s", STR(fn));
    DRIVER_CALLS(LOAD)
}

/* cuInit, or exit 3 ("NODRIVER") when there is no device to use. */
static void init_driver(void) {
    load_driver();
    CUresult r = p_cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_NOT_INITIALIZED) {
        printf("NODRIVER %s: cuInit returned %d %s\n", PROGRAM, (int)r, err_name(r));
        exit(3);
    }
    CHECK(r);
}

#endif
