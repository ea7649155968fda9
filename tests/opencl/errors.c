// Error codes, not crashes; afterwards the context still works.
//   - clCreateKernel with a name the program lacks -> CL_INVALID_KERNEL_NAME;
//   - a program with a syntax error: clBuildProgram -> CL_BUILD_PROGRAM_FAILURE,
//     CL_PROGRAM_BUILD_STATUS == CL_BUILD_ERROR, a non-empty
//     CL_PROGRAM_BUILD_LOG naming the offending line or token, and
//     clCreateKernel on it -> CL_INVALID_PROGRAM_EXECUTABLE;
//   - clEnqueueNDRangeKernel with an argument not set -> CL_INVALID_KERNEL_ARGS;
//   - clSetKernelArg: bad index -> CL_INVALID_ARG_INDEX, a wrong size for a
//     buffer -> CL_INVALID_ARG_SIZE, a value for a __local argument ->
//     CL_INVALID_ARG_VALUE;
//   - reading or writing past a buffer's end -> CL_INVALID_VALUE;
//   - clCreateBuffer of 0 bytes -> CL_INVALID_BUFFER_SIZE, COPY_HOST_PTR
//     without a pointer -> CL_INVALID_HOST_PTR;
//   - work_dim 0 -> CL_INVALID_WORK_DIMENSION; a work-group larger than the
//     device allows -> CL_INVALID_WORK_GROUP_SIZE or CL_INVALID_WORK_ITEM_SIZE;
//   - an unknown clGetDeviceInfo parameter -> CL_INVALID_VALUE;
//   - clCreateProgramWithSource with no strings -> CL_INVALID_VALUE.
// Using a released object is undefined and not tested.
#define PROGRAM "errors"
#include "common.h"

static const char *good_source =
    "__kernel void add1(__global int *p, __local int *scratch, int v) {\n"
    "    size_t i = get_global_id(0);\n"
    "    scratch[get_local_id(0)] = p[i] + v;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    p[i] = scratch[get_local_id(0)];\n"
    "}\n";

// Line 4 uses an undeclared identifier.
static const char *bad_source =
    "__kernel void broken(__global int *p) {\n"
    "    size_t i = get_global_id(0);\n"
    "    int x = 1;\n"
    "    p[i] = x + undeclared_thing_42;\n"
    "}\n";

int main(void) {
    cl_platform_id platform;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    setup(&platform, &dev, &ctx, &q, 0);

    cl_program good = build_source(ctx, dev, good_source, "");
    CREATE_FAILS(clCreateKernel(good, "no_such_kernel", ERR), CL_INVALID_KERNEL_NAME);
    ok("clCreateKernel(\"no_such_kernel\") -> CL_INVALID_KERNEL_NAME");

    // A program that does not compile.
    {
        cl_program bad;
        CREATE(bad, clCreateProgramWithSource(ctx, 1, &bad_source, NULL, ERR));
        EXPECT_ERR(clBuildProgram(bad, 1, &dev, "", NULL, NULL), CL_BUILD_PROGRAM_FAILURE);
        ok("clBuildProgram of a program with an error -> CL_BUILD_PROGRAM_FAILURE");
        cl_build_status st = 0;
        CHECK(clGetProgramBuildInfo(bad, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL));
        EXPECT(st == CL_BUILD_ERROR, "CL_PROGRAM_BUILD_STATUS %d, want CL_BUILD_ERROR (%d)",
               (int)st, (int)CL_BUILD_ERROR);
        ok("CL_PROGRAM_BUILD_STATUS == CL_BUILD_ERROR");
        char *log = build_log(bad, dev);
        size_t len = strlen(log);
        EXPECT(len > 0, "the build log is empty");
        EXPECT(strstr(log, "undeclared_thing_42") != NULL || strstr(log, ":4:") != NULL ||
                   strstr(log, "line 4") != NULL || strstr(log, "(4)") != NULL,
               "the build log names neither the token nor line 4:\n%s", log);
        printf("(build log, %zu bytes: %.*s)\n", len, (int)(len > 300 ? 300 : len), log);
        ok("CL_PROGRAM_BUILD_LOG is non-empty and names the error");
        free(log);
        CREATE_FAILS(clCreateKernel(bad, "broken", ERR), CL_INVALID_PROGRAM_EXECUTABLE);
        ok("clCreateKernel on the failed program -> CL_INVALID_PROGRAM_EXECUTABLE");
        CHECK(clReleaseProgram(bad));
    }

    cl_kernel k;
    CREATE(k, clCreateKernel(good, "add1", ERR));
    const size_t n = 256;
    int host[256];
    for (int i = 0; i < (int)n; i++) host[i] = i * 3 - 100;
    cl_mem d;
    CREATE(d, clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof host, host,
                             ERR));
    size_t global = n, local = 64;

    // Arguments.
    {
        CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &d));
        CHECK(clSetKernelArg(k, 1, local * sizeof(int), NULL));
        // Argument 2 not set yet.
        EXPECT_ERR(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL),
                   CL_INVALID_KERNEL_ARGS);
        ok("clEnqueueNDRangeKernel with an argument not set -> CL_INVALID_KERNEL_ARGS");
        int v = 5;
        EXPECT_ERR(clSetKernelArg(k, 3, sizeof v, &v), CL_INVALID_ARG_INDEX);
        EXPECT_ERR(clSetKernelArg(k, 1000, sizeof v, &v), CL_INVALID_ARG_INDEX);
        ok("clSetKernelArg(index 3 and 1000 of 3) -> CL_INVALID_ARG_INDEX");
        EXPECT_ERR(clSetKernelArg(k, 0, 3, &d), CL_INVALID_ARG_SIZE);
        ok("clSetKernelArg(buffer, size 3) -> CL_INVALID_ARG_SIZE");
        EXPECT_ERR(clSetKernelArg(k, 1, sizeof v, &v), CL_INVALID_ARG_VALUE);
        ok("clSetKernelArg(__local, non-NULL value) -> CL_INVALID_ARG_VALUE");
        cl_uint nargs = 0;
        CHECK(clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL));
        EXPECT(nargs == 3, "CL_KERNEL_NUM_ARGS %u, want 3", nargs);
    }

    // Transfers out of range.
    {
        int buf[8] = {0};
        EXPECT_ERR(clEnqueueReadBuffer(q, d, CL_TRUE, sizeof host - 4, 8, buf, 0, NULL, NULL),
                   CL_INVALID_VALUE);
        EXPECT_ERR(clEnqueueReadBuffer(q, d, CL_TRUE, sizeof host, 4, buf, 0, NULL, NULL),
                   CL_INVALID_VALUE);
        ok("clEnqueueReadBuffer past the end (straddling, and at the end) -> CL_INVALID_VALUE");
        EXPECT_ERR(clEnqueueWriteBuffer(q, d, CL_TRUE, 4, sizeof host, host, 0, NULL, NULL),
                   CL_INVALID_VALUE);
        ok("clEnqueueWriteBuffer past the end -> CL_INVALID_VALUE");
        EXPECT_ERR(clEnqueueReadBuffer(q, d, CL_TRUE, 0, 4, NULL, 0, NULL, NULL),
                   CL_INVALID_VALUE);
        ok("clEnqueueReadBuffer into NULL -> CL_INVALID_VALUE");
    }

    // Creation errors.
    {
        CREATE_FAILS(clCreateBuffer(ctx, CL_MEM_READ_WRITE, 0, NULL, ERR),
                     CL_INVALID_BUFFER_SIZE);
        ok("clCreateBuffer(0 bytes) -> CL_INVALID_BUFFER_SIZE");
        CREATE_FAILS(clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, 64, NULL, ERR),
                     CL_INVALID_HOST_PTR);
        ok("clCreateBuffer(COPY_HOST_PTR, NULL) -> CL_INVALID_HOST_PTR");
        CREATE_FAILS(clCreateProgramWithSource(ctx, 0, NULL, NULL, ERR), CL_INVALID_VALUE);
        ok("clCreateProgramWithSource(0 strings) -> CL_INVALID_VALUE");
        char buf[64];
        EXPECT_ERR(clGetDeviceInfo(dev, 0x7fff, sizeof buf, buf, NULL), CL_INVALID_VALUE);
        ok("clGetDeviceInfo(unknown parameter) -> CL_INVALID_VALUE");
        cl_uint vendor = 0;
        EXPECT_ERR(clGetDeviceInfo(dev, CL_DEVICE_NAME, 0, &vendor, NULL), CL_INVALID_VALUE);
        ok("clGetDeviceInfo(CL_DEVICE_NAME into 0 bytes) -> CL_INVALID_VALUE");
    }

    // Launch geometry.
    {
        int v = 7;
        CHECK(clSetKernelArg(k, 2, sizeof v, &v));
        EXPECT_ERR(clEnqueueNDRangeKernel(q, k, 0, NULL, &global, &local, 0, NULL, NULL),
                   CL_INVALID_WORK_DIMENSION);
        ok("clEnqueueNDRangeKernel(work_dim 0) -> CL_INVALID_WORK_DIMENSION");
        size_t maxwg = 0;
        CHECK(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof maxwg, &maxwg, NULL));
        size_t big_local = maxwg * 2, big_global = maxwg * 2;
        CHECK(clSetKernelArg(k, 1, big_local * sizeof(int), NULL));
        cl_int e = clEnqueueNDRangeKernel(q, k, 1, NULL, &big_global, &big_local, 0, NULL, NULL);
        EXPECT(e == CL_INVALID_WORK_GROUP_SIZE || e == CL_INVALID_WORK_ITEM_SIZE,
               "a work-group of %zu (max %zu) returned %d (%s)", big_local, maxwg, (int)e,
               cl_err_name(e));
        ok("a work-group of 2x CL_DEVICE_MAX_WORK_GROUP_SIZE -> %s", cl_err_name(e));
        CHECK(clSetKernelArg(k, 1, local * sizeof(int), NULL));
    }

    // Nothing above changed the buffer.
    {
        int got[256];
        CHECK(clEnqueueReadBuffer(q, d, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
        expect_ints("buffer after the failed calls", got, host, n);
        ok("the buffer is unchanged by the failed calls");
    }

    // The context still works: the kernel runs and computes.
    {
        CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL));
        int got[256], want[256];
        CHECK(clEnqueueReadBuffer(q, d, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
        for (size_t i = 0; i < n; i++) want[i] = host[i] + 7;
        expect_ints("add1 after the errors", got, want, n);
        cl_program again = build_source(ctx, dev, good_source, "");
        cl_kernel k2;
        CREATE(k2, clCreateKernel(again, "add1", ERR));
        int v = -3;
        CHECK(clSetKernelArg(k2, 0, sizeof(cl_mem), &d));
        CHECK(clSetKernelArg(k2, 1, local * sizeof(int), NULL));
        CHECK(clSetKernelArg(k2, 2, sizeof v, &v));
        CHECK(clEnqueueNDRangeKernel(q, k2, 1, NULL, &global, &local, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(q, d, CL_TRUE, 0, sizeof got, got, 0, NULL, NULL));
        for (size_t i = 0; i < n; i++) want[i] = host[i] + 4;
        expect_ints("a new program after the errors", got, want, n);
        ok("after the errors: kernels run and a new program builds and runs");
        CHECK(clReleaseKernel(k2));
        CHECK(clReleaseProgram(again));
    }

    CHECK(clReleaseMemObject(d));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(good));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    return pass();
}
