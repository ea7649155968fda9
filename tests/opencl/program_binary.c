// Program binaries and the program's kernels:
//   - a program built from source (with a -D option the kernels use):
//     CL_PROGRAM_NUM_DEVICES/DEVICES, CL_PROGRAM_SOURCE, CL_PROGRAM_BUILD_STATUS,
//     CL_PROGRAM_BUILD_OPTIONS, CL_PROGRAM_BINARY_TYPE, CL_PROGRAM_NUM_KERNELS
//     and CL_PROGRAM_KERNEL_NAMES (the three kernels, in any order);
//   - clCreateKernelsInProgram: three kernels whose CL_KERNEL_FUNCTION_NAME
//     and CL_KERNEL_NUM_ARGS match, each run and checked;
//   - CL_PROGRAM_BINARY_SIZES/CL_PROGRAM_BINARIES fetched, a second program
//     made with clCreateProgramWithBinary (binary status CL_SUCCESS) and
//     built, its kernels run and checked, its kernel names the same;
//   - the binary of the second program can itself be fetched and reloaded
//     (a third program) and runs;
//   - a binary of garbage bytes -> CL_INVALID_BINARY.
#define PROGRAM "program_binary"
#include "common.h"

static const char *source =
    "#ifndef OFFSET\n"
    "#error OFFSET must be defined\n"
    "#endif\n"
    "__kernel void add_offset(__global int *p, uint n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) p[i] += OFFSET;\n"
    "}\n"
    "__kernel void square(__global const int *in, __global int *out, uint n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) out[i] = in[i] * in[i];\n"
    "}\n"
    "__kernel void iota(__global int *out, int start, uint n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) out[i] = start + (int)i;\n"
    "}\n";
static const char *options = "-DOFFSET=1000";
#define OFFSET 1000
#define N 4099

static cl_context ctx;
static cl_command_queue q;
static cl_device_id dev;

static const char *const kernel_names[3] = {"add_offset", "square", "iota"};

static char *program_str(cl_program p, cl_program_info what) {
    size_t n = 0;
    CHECK(clGetProgramInfo(p, what, 0, NULL, &n));
    char *s = xmalloc(n + 1);
    CHECK(clGetProgramInfo(p, what, n, s, NULL));
    s[n] = '\0';
    return s;
}

// CL_PROGRAM_NUM_KERNELS and CL_PROGRAM_KERNEL_NAMES list the three.
static void check_kernel_names(cl_program p, const char *what) {
    size_t nk = 0;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_NUM_KERNELS, sizeof nk, &nk, NULL));
    EXPECT(nk == 3, "%s: CL_PROGRAM_NUM_KERNELS %zu, want 3", what, nk);
    char *names = program_str(p, CL_PROGRAM_KERNEL_NAMES);
    char *copy = xmalloc(strlen(names) + 1);
    strcpy(copy, names);
    int seen[3] = {0, 0, 0}, count = 0;
    for (char *tok = strtok(copy, ";"); tok != NULL; tok = strtok(NULL, ";")) {
        int found = 0;
        for (int i = 0; i < 3; i++)
            if (strcmp(tok, kernel_names[i]) == 0) {
                seen[i]++;
                found = 1;
            }
        EXPECT(found, "%s: CL_PROGRAM_KERNEL_NAMES \"%s\" has unknown \"%s\"", what, names, tok);
        count++;
    }
    EXPECT(count == 3 && seen[0] == 1 && seen[1] == 1 && seen[2] == 1,
           "%s: CL_PROGRAM_KERNEL_NAMES \"%s\", want add_offset, square, iota", what, names);
    ok("%s: CL_PROGRAM_NUM_KERNELS 3, CL_PROGRAM_KERNEL_NAMES \"%s\"", what, names);
    free(names);
    free(copy);
}

// Runs iota, square and add_offset of `p` (created by name) and checks them.
static void run_program(cl_program p, int start, const char *what) {
    cl_kernel iota, square, add;
    CREATE(iota, clCreateKernel(p, "iota", ERR));
    CREATE(square, clCreateKernel(p, "square", ERR));
    CREATE(add, clCreateKernel(p, "add_offset", ERR));
    cl_mem a, b;
    CREATE(a, clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(int), NULL, ERR));
    CREATE(b, clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(int), NULL, ERR));
    cl_uint n = N;
    size_t global = N;
    CHECK(clSetKernelArg(iota, 0, sizeof(cl_mem), &a));
    CHECK(clSetKernelArg(iota, 1, sizeof(int), &start));
    CHECK(clSetKernelArg(iota, 2, sizeof(cl_uint), &n));
    CHECK(clSetKernelArg(square, 0, sizeof(cl_mem), &a));
    CHECK(clSetKernelArg(square, 1, sizeof(cl_mem), &b));
    CHECK(clSetKernelArg(square, 2, sizeof(cl_uint), &n));
    CHECK(clSetKernelArg(add, 0, sizeof(cl_mem), &b));
    CHECK(clSetKernelArg(add, 1, sizeof(cl_uint), &n));
    CHECK(clEnqueueNDRangeKernel(q, iota, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, square, 1, NULL, &global, NULL, 0, NULL, NULL));
    CHECK(clEnqueueNDRangeKernel(q, add, 1, NULL, &global, NULL, 0, NULL, NULL));
    int *got = xmalloc(N * sizeof(int)), *want = xmalloc(N * sizeof(int));
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, N * sizeof(int), got, 0, NULL, NULL));
    for (int i = 0; i < N; i++) want[i] = (start + i) * (start + i) + OFFSET;
    expect_ints(what, got, want, N);
    ok("%s: iota -> square -> add_offset gives (start+i)^2 + %d", what, OFFSET);
    CHECK(clReleaseMemObject(a));
    CHECK(clReleaseMemObject(b));
    CHECK(clReleaseKernel(iota));
    CHECK(clReleaseKernel(square));
    CHECK(clReleaseKernel(add));
    free(got);
    free(want);
}

// The program's one binary (malloc'ed), its size in *size.
static unsigned char *get_binary(cl_program p, size_t *size) {
    cl_uint nd = 0;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof nd, &nd, NULL));
    EXPECT(nd == 1, "CL_PROGRAM_NUM_DEVICES %u, want 1", nd);
    cl_device_id pd = NULL;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_DEVICES, sizeof pd, &pd, NULL));
    EXPECT(pd == dev, "CL_PROGRAM_DEVICES %p, want %p", (void *)pd, (void *)dev);
    size_t sizes[1] = {0}, ret = 0;
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof sizes, sizes, &ret));
    EXPECT(ret == sizeof(size_t), "CL_PROGRAM_BINARY_SIZES returned %zu bytes", ret);
    EXPECT(sizes[0] > 0, "CL_PROGRAM_BINARY_SIZES is 0");
    unsigned char *bin = xmalloc(sizes[0]);
    memset(bin, 0, sizes[0]);
    unsigned char *ptrs[1] = {bin};
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof ptrs, ptrs, &ret));
    EXPECT(ret == sizeof(unsigned char *), "CL_PROGRAM_BINARIES returned %zu bytes", ret);
    size_t nonzero = 0;
    for (size_t i = 0; i < sizes[0]; i++) nonzero += bin[i] != 0;
    EXPECT(nonzero > 0, "the binary is all zeros");
    *size = sizes[0];
    return bin;
}

static cl_program from_binary(const unsigned char *bin, size_t size, const char *what) {
    cl_int status = -9999;
    cl_program p;
    CREATE(p, clCreateProgramWithBinary(ctx, 1, &dev, &size, &bin, &status, ERR));
    EXPECT(status == CL_SUCCESS, "%s: binary_status %d (%s)", what, (int)status,
           cl_err_name(status));
    cl_int e = clBuildProgram(p, 1, &dev, NULL, NULL, NULL);
    if (e != CL_SUCCESS) {
        char *log = build_log(p, dev);
        fail("%s: clBuildProgram returned %d (%s); log:\n%s", what, (int)e, cl_err_name(e), log);
    }
    cl_build_status st = 0;
    CHECK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL));
    EXPECT(st == CL_BUILD_SUCCESS, "%s: build status %d", what, (int)st);
    cl_program_binary_type bt = 0;
    CHECK(clGetProgramBuildInfo(p, dev, CL_PROGRAM_BINARY_TYPE, sizeof bt, &bt, NULL));
    EXPECT(bt == CL_PROGRAM_BINARY_TYPE_EXECUTABLE, "%s: binary type %u, want EXECUTABLE",
           what, (unsigned)bt);
    ok("%s: clCreateProgramWithBinary (%zu bytes) + clBuildProgram, status CL_SUCCESS, executable",
       what, size);
    return p;
}

int main(void) {
    cl_platform_id platform;
    setup(&platform, &dev, &ctx, &q, 0);

    cl_program src = build_source(ctx, dev, source, options);
    {
        cl_build_status st = 0;
        CHECK(clGetProgramBuildInfo(src, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st, NULL));
        EXPECT(st == CL_BUILD_SUCCESS, "build status %d, want CL_BUILD_SUCCESS", (int)st);
        cl_program_binary_type bt = 0;
        CHECK(clGetProgramBuildInfo(src, dev, CL_PROGRAM_BINARY_TYPE, sizeof bt, &bt, NULL));
        EXPECT(bt == CL_PROGRAM_BINARY_TYPE_EXECUTABLE, "binary type %u, want EXECUTABLE",
               (unsigned)bt);
        size_t n = 0;
        CHECK(clGetProgramBuildInfo(src, dev, CL_PROGRAM_BUILD_OPTIONS, 0, NULL, &n));
        char *opts = xmalloc(n + 1);
        CHECK(clGetProgramBuildInfo(src, dev, CL_PROGRAM_BUILD_OPTIONS, n, opts, NULL));
        opts[n] = '\0';
        EXPECT(strstr(opts, "-DOFFSET=1000") != NULL, "CL_PROGRAM_BUILD_OPTIONS \"%s\"", opts);
        free(opts);
        char *text = program_str(src, CL_PROGRAM_SOURCE);
        EXPECT(strcmp(text, source) == 0, "CL_PROGRAM_SOURCE differs from the source");
        free(text);
        ok("from source with \"%s\": CL_BUILD_SUCCESS, executable, options and source kept",
           options);
    }
    check_kernel_names(src, "from source");

    // clCreateKernelsInProgram.
    {
        cl_uint nk = 0;
        CHECK(clCreateKernelsInProgram(src, 0, NULL, &nk));
        EXPECT(nk == 3, "clCreateKernelsInProgram counts %u kernels, want 3", nk);
        cl_kernel ks[3];
        CHECK(clCreateKernelsInProgram(src, 3, ks, &nk));
        EXPECT(nk == 3, "clCreateKernelsInProgram made %u kernels, want 3", nk);
        static const cl_uint nargs_want[3] = {2, 3, 3};
        cl_kernel by_name[3] = {NULL, NULL, NULL};
        for (int i = 0; i < 3; i++) {
            size_t len = 0;
            CHECK(clGetKernelInfo(ks[i], CL_KERNEL_FUNCTION_NAME, 0, NULL, &len));
            char *name = xmalloc(len + 1);
            CHECK(clGetKernelInfo(ks[i], CL_KERNEL_FUNCTION_NAME, len, name, NULL));
            name[len] = '\0';
            int j = 0;
            while (j < 3 && strcmp(name, kernel_names[j]) != 0) j++;
            EXPECT(j < 3, "kernel %d is named \"%s\"", i, name);
            EXPECT(by_name[j] == NULL, "two kernels named \"%s\"", name);
            by_name[j] = ks[i];
            cl_uint nargs = 0;
            CHECK(clGetKernelInfo(ks[i], CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL));
            EXPECT(nargs == nargs_want[j], "%s: CL_KERNEL_NUM_ARGS %u, want %u", name, nargs,
                   nargs_want[j]);
            cl_program kp = NULL;
            CHECK(clGetKernelInfo(ks[i], CL_KERNEL_PROGRAM, sizeof kp, &kp, NULL));
            EXPECT(kp == src, "%s: CL_KERNEL_PROGRAM %p, want %p", name, (void *)kp, (void *)src);
            free(name);
        }
        ok("clCreateKernelsInProgram: add_offset, square, iota with 2, 3, 3 arguments");
        // Run them: iota(-50) into a, add_offset on a.
        cl_mem a;
        CREATE(a, clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(int), NULL, ERR));
        cl_uint n = N;
        int start = -50;
        size_t global = N;
        CHECK(clSetKernelArg(by_name[2], 0, sizeof(cl_mem), &a));
        CHECK(clSetKernelArg(by_name[2], 1, sizeof(int), &start));
        CHECK(clSetKernelArg(by_name[2], 2, sizeof(cl_uint), &n));
        CHECK(clSetKernelArg(by_name[0], 0, sizeof(cl_mem), &a));
        CHECK(clSetKernelArg(by_name[0], 1, sizeof(cl_uint), &n));
        CHECK(clEnqueueNDRangeKernel(q, by_name[2], 1, NULL, &global, NULL, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(q, by_name[0], 1, NULL, &global, NULL, 0, NULL, NULL));
        int *got = xmalloc(N * sizeof(int)), *want = xmalloc(N * sizeof(int));
        CHECK(clEnqueueReadBuffer(q, a, CL_TRUE, 0, N * sizeof(int), got, 0, NULL, NULL));
        for (int i = 0; i < N; i++) want[i] = start + i + OFFSET;
        expect_ints("kernels from clCreateKernelsInProgram", got, want, N);
        ok("kernels from clCreateKernelsInProgram run: iota then add_offset");
        CHECK(clReleaseMemObject(a));
        for (int i = 0; i < 3; i++) CHECK(clReleaseKernel(ks[i]));
        free(got);
        free(want);
    }
    run_program(src, 7, "from source");

    // The binary, and a program from it.
    size_t size = 0;
    unsigned char *bin = get_binary(src, &size);
    ok("CL_PROGRAM_BINARY_SIZES %zu, CL_PROGRAM_BINARIES fetched", size);
    cl_program p2 = from_binary(bin, size, "from binary");
    check_kernel_names(p2, "from binary");
    run_program(p2, -321, "from binary");

    // The second program's binary, reloaded once more.
    size_t size2 = 0;
    unsigned char *bin2 = get_binary(p2, &size2);
    cl_program p3 = from_binary(bin2, size2, "from the binary's binary");
    run_program(p3, 12345, "from the binary's binary");

    // Garbage is not a binary.
    {
        unsigned char junk[4096];
        fill_bytes(junk, sizeof junk, 99);
        memcpy(junk, "not a binary", 12);
        const unsigned char *jp = junk;
        size_t js = sizeof junk;
        cl_int status = -9999;
        cl_int err = -9999;
        cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &js, &jp, &status, &err);
        if (err == CL_SUCCESS) {
            // Some implementations only find out when building.
            EXPECT(p != NULL, "clCreateProgramWithBinary returned NULL with CL_SUCCESS");
            cl_int e = clBuildProgram(p, 1, &dev, NULL, NULL, NULL);
            EXPECT(e == CL_INVALID_BINARY || e == CL_BUILD_PROGRAM_FAILURE,
                   "clBuildProgram of a garbage binary returned %d (%s)", (int)e,
                   cl_err_name(e));
            ok("garbage binary: accepted at creation (status %d), clBuildProgram -> %s",
               (int)status, cl_err_name(e));
            CHECK(clReleaseProgram(p));
        } else {
            EXPECT(err == CL_INVALID_BINARY, "clCreateProgramWithBinary(garbage) returned %d (%s)",
                   (int)err, cl_err_name(err));
            EXPECT(status == CL_INVALID_BINARY, "garbage binary_status %d (%s)", (int)status,
                   cl_err_name(status));
            EXPECT(p == NULL, "failed clCreateProgramWithBinary returned a program");
            ok("garbage binary -> CL_INVALID_BINARY (binary_status CL_INVALID_BINARY)");
        }
    }

    // The context still works after that.
    run_program(p2, 1, "from binary, again");

    CHECK(clReleaseProgram(src));
    CHECK(clReleaseProgram(p2));
    CHECK(clReleaseProgram(p3));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    free(bin);
    free(bin2);
    return pass();
}
