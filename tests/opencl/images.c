// Images and samplers. A 2D RGBA8 (CL_UNORM_INT8) image created from host
// memory with a padded row pitch and written with another, read back
// exactly (packed and padded); a 3x3 box blur kernel reading it through a
// sampler (unnormalized coordinates, clamp to edge, nearest) passed as a
// kernel argument and writing a second image, checked against the CPU's blur
// (within 1 in 8 bits); a CL_R CL_FLOAT 3D image with padded rows and
// slices, read back whole and as a sub-box; copies image to image, image to
// buffer and buffer to image, checked byte for byte; a map of an image
// region, changed and unmapped; a fill; 1D and 2D image arrays; images of
// several MiB (transfers in pieces); clGetImageInfo, clGetMemObjectInfo
// and clGetSamplerInfo values; the supported formats, which must include
// CL_RGBA/CL_UNORM_INT8. Without image support the program prints "SKIP
// images: no image support" and passes.
#define PROGRAM "images"
#include "common.h"

static const char *source =
    "__kernel void blur(__read_only image2d_t src, __write_only image2d_t dst,\n"
    "                   sampler_t smp) {\n"
    "    int x = get_global_id(0), y = get_global_id(1);\n"
    "    float4 acc = (float4)(0.0f);\n"
    "    for (int dy = -1; dy <= 1; dy++)\n"
    "        for (int dx = -1; dx <= 1; dx++)\n"
    "            acc += read_imagef(src, smp, (int2)(x + dx, y + dy));\n"
    "    write_imagef(dst, (int2)(x, y), acc / 9.0f);\n"
    "}\n";

// Odd sizes: no dimension is a multiple of anything convenient.
#define W 67
#define H 45
#define PITCH_A (W * 4 + 12) /* creation's row pitch */
#define PITCH_B (W * 4 + 36) /* a write's row pitch */

static size_t image_info_size(cl_mem img, cl_image_info what) {
    size_t v = 0;
    CHECK(clGetImageInfo(img, what, sizeof v, &v, NULL));
    return v;
}

// The pixels of a W x H RGBA8 image laid out with `pitch`, from a seed.
static unsigned char *pattern(size_t pitch, uint64_t seed) {
    unsigned char *p = (unsigned char *)xmalloc(pitch * H);
    memset(p, 0xEE, pitch * H);
    Rng r = rng_new(seed);
    for (size_t y = 0; y < H; y++)
        for (size_t i = 0; i < W * 4; i++) p[y * pitch + i] = (unsigned char)(rng_next(&r) >> 56);
    return p;
}

// Checks packed W x H RGBA8 bytes `got` against `want` laid out with `pitch`.
static void expect_rows(const char *what, const unsigned char *got, const unsigned char *want,
                        size_t pitch) {
    for (size_t y = 0; y < H; y++) {
        char label[128];
        snprintf(label, sizeof label, "%s, row %zu", what, y);
        expect_bytes(label, got + y * W * 4, want + y * pitch, W * 4);
    }
}

static unsigned char *read_rgba(cl_command_queue q, cl_mem img) {
    unsigned char *out = (unsigned char *)xmalloc(W * H * 4);
    size_t origin[3] = {0, 0, 0}, region[3] = {W, H, 1};
    CHECK(clEnqueueReadImage(q, img, CL_TRUE, origin, region, 0, 0, out, 0, NULL, NULL));
    return out;
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// Image arrays: a 2D array and a 1D array from host memory with padded
// pitches, layers read back (with a padded slice pitch for the 1D array),
// and a map across two layers of the 2D array.
static void arrays(cl_context ctx, cl_command_queue q) {
    enum { AW = 16, AH = 8, AL = 3, LW = 32, LL = 5 };
    cl_image_format rgba = {CL_RGBA, CL_UNORM_INT8};
    size_t row = AW * 4 + 8, slice = row * (AH + 1);
    unsigned char *host = (unsigned char *)xmalloc(slice * AL);
    fill_bytes(host, slice * AL, 11);
    cl_image_desc d;
    memset(&d, 0, sizeof d);
    d.image_type = CL_MEM_OBJECT_IMAGE2D_ARRAY;
    d.image_width = AW;
    d.image_height = AH;
    d.image_array_size = AL;
    d.image_row_pitch = row;
    d.image_slice_pitch = slice;
    cl_mem arr;
    CREATE(arr, clCreateImage(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, &rgba, &d, host, ERR));
    unsigned char layer[AW * AH * 4];
    size_t o[3] = {0, 0, 1}, r[3] = {AW, AH, 1};
    CHECK(clEnqueueReadImage(q, arr, CL_TRUE, o, r, 0, 0, layer, 0, NULL, NULL));
    for (size_t y = 0; y < AH; y++)
        expect_bytes("2D array layer 1", layer + y * AW * 4, host + slice + y * row, AW * 4);
    size_t as = 0;
    CHECK(clGetImageInfo(arr, CL_IMAGE_ARRAY_SIZE, sizeof as, &as, NULL));
    EXPECT(as == AL, "CL_IMAGE_ARRAY_SIZE %zu", as);
    // A map across layers 1 and 2.
    size_t mo[3] = {2, 1, 1}, mr[3] = {4, 3, 2}, rp = 0, sp = 0;
    cl_int e = 0;
    unsigned char *m = (unsigned char *)clEnqueueMapImage(q, arr, CL_TRUE, CL_MAP_READ, mo, mr,
                                                          &rp, &sp, 0, NULL, NULL, &e);
    CHECK(e);
    EXPECT(rp >= mr[0] * 4 && sp >= rp * mr[1], "map pitches %zu, %zu", rp, sp);
    for (size_t z = 0; z < mr[2]; z++)
        for (size_t y = 0; y < mr[1]; y++)
            expect_bytes("2D array map row", m + z * sp + y * rp,
                         host + (mo[2] + z) * slice + (mo[1] + y) * row + mo[0] * 4, mr[0] * 4);
    CHECK(clEnqueueUnmapMemObject(q, arr, m, 0, NULL, NULL));
    CHECK(clReleaseMemObject(arr));
    free(host);

    // For a 1D array the slice pitch is the stride of its layers; PoCL 3.1
    // takes the row pitch for that instead, so both are given, equal.
    size_t lslice = LW * 4 + 16;
    unsigned char *lines = (unsigned char *)xmalloc(lslice * LL);
    fill_bytes(lines, lslice * LL, 12);
    memset(&d, 0, sizeof d);
    d.image_type = CL_MEM_OBJECT_IMAGE1D_ARRAY;
    d.image_width = LW;
    d.image_array_size = LL;
    d.image_row_pitch = lslice;
    d.image_slice_pitch = lslice;
    cl_mem arr1;
    CREATE(arr1, clCreateImage(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &rgba, &d, lines,
                               ERR));
    // Layers 2..4, each 4 bytes apart past its pixels.
    size_t out_slice = LW * 4 + 4;
    unsigned char *out = (unsigned char *)xmalloc(out_slice * 3);
    size_t lo[3] = {0, 2, 0}, lr[3] = {LW, 3, 1};
    CHECK(clEnqueueReadImage(q, arr1, CL_TRUE, lo, lr, out_slice, out_slice, out, 0, NULL, NULL));
    for (size_t l = 0; l < 3; l++)
        expect_bytes("1D array layer", out + l * out_slice, lines + (l + 2) * lslice, LW * 4);
    cl_mem_object_type mt = 0;
    CHECK(clGetMemObjectInfo(arr1, CL_MEM_TYPE, sizeof mt, &mt, NULL));
    EXPECT(mt == CL_MEM_OBJECT_IMAGE1D_ARRAY, "CL_MEM_TYPE 0x%x", mt);
    CHECK(clReleaseMemObject(arr1));
    free(lines);
    free(out);
    ok("2D array (%dx%d, %d layers) and 1D array (%d, %d layers) with padded pitches: layers "
       "read back, a map across layers",
       AW, AH, AL, LW, LL);
}

// Images larger than a transfer's usual unit (several MiB): a 2D RGBA8
// image written with a padded row pitch and read back, and a 3D CL_R
// CL_FLOAT image written whole and read back whole and in part.
static void large(cl_context ctx, cl_command_queue q, int r32f) {
    enum { BW = 1500, BH = 1100 };
    cl_image_format rgba = {CL_RGBA, CL_UNORM_INT8};
    cl_image_desc d;
    memset(&d, 0, sizeof d);
    d.image_type = CL_MEM_OBJECT_IMAGE2D;
    d.image_width = BW;
    d.image_height = BH;
    cl_mem big;
    CREATE(big, clCreateImage(ctx, CL_MEM_READ_WRITE, &rgba, &d, NULL, ERR));
    size_t pitch = BW * 4 + 64;
    unsigned char *src = (unsigned char *)xmalloc(pitch * BH);
    fill_bytes(src, pitch * BH, 21);
    size_t o[3] = {0, 0, 0}, r[3] = {BW, BH, 1};
    CHECK(clEnqueueWriteImage(q, big, CL_FALSE, o, r, pitch, 0, src, 0, NULL, NULL));
    unsigned char *back = (unsigned char *)xmalloc((size_t)BW * BH * 4);
    CHECK(clEnqueueReadImage(q, big, CL_TRUE, o, r, 0, 0, back, 0, NULL, NULL));
    for (size_t y = 0; y < BH; y++)
        expect_bytes("large 2D image row", back + y * BW * 4, src + y * pitch, BW * 4);
    CHECK(clReleaseMemObject(big));
    free(src);
    free(back);
    ok("%dx%d RGBA8 image (%.1f MiB) written with a padded pitch and read back", BW, BH,
       BW * BH * 4 / 1048576.0);
    if (!r32f) return;
    enum { VX = 256, VY = 256, VZ = 24 };
    cl_image_format r32 = {CL_R, CL_FLOAT};
    memset(&d, 0, sizeof d);
    d.image_type = CL_MEM_OBJECT_IMAGE3D;
    d.image_width = VX;
    d.image_height = VY;
    d.image_depth = VZ;
    cl_mem vol;
    CREATE(vol, clCreateImage(ctx, CL_MEM_READ_WRITE, &r32, &d, NULL, ERR));
    size_t n = (size_t)VX * VY * VZ;
    float *v = (float *)xmalloc(n * 4), *got = (float *)xmalloc(n * 4);
    Rng g = rng_new(22);
    for (size_t i = 0; i < n; i++) v[i] = rng_unit(&g);
    size_t r3[3] = {VX, VY, VZ};
    CHECK(clEnqueueWriteImage(q, vol, CL_FALSE, o, r3, 0, 0, v, 0, NULL, NULL));
    CHECK(clEnqueueReadImage(q, vol, CL_TRUE, o, r3, 0, 0, got, 0, NULL, NULL));
    expect_floats("large 3D image", got, v, n);
    size_t so[3] = {3, 5, 2}, sr[3] = {250, 200, 20};
    CHECK(clEnqueueReadImage(q, vol, CL_TRUE, so, sr, 0, 0, got, 0, NULL, NULL));
    for (size_t z = 0; z < sr[2]; z++)
        for (size_t y = 0; y < sr[1]; y++)
            expect_floats("large 3D sub-box row", got + (z * sr[1] + y) * sr[0],
                          v + ((z + so[2]) * VY + y + so[1]) * VX + so[0], sr[0]);
    CHECK(clReleaseMemObject(vol));
    free(v);
    free(got);
    ok("%dx%dx%d CL_R/CL_FLOAT 3D image (%.1f MiB) round trip and a sub-box", VX, VY, VZ,
       n * 4 / 1048576.0);
}

int main(void) {
    cl_platform_id platform;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    setup(&platform, &dev, &ctx, &q, 0);

    cl_bool support = CL_FALSE;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_IMAGE_SUPPORT, sizeof support, &support, NULL));
    if (!support) {
        printf("SKIP images: no image support\n");
        CHECK(clReleaseCommandQueue(q));
        CHECK(clReleaseContext(ctx));
        return pass();
    }
    size_t max2d = 0, max3d = 0;
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_IMAGE2D_MAX_WIDTH, sizeof max2d, &max2d, NULL));
    CHECK(clGetDeviceInfo(dev, CL_DEVICE_IMAGE3D_MAX_WIDTH, sizeof max3d, &max3d, NULL));
    EXPECT(max2d >= W && max3d >= 8, "2D max width %zu, 3D max width %zu", max2d, max3d);
    ok("image support, 2D max width %zu, 3D max width %zu", max2d, max3d);

    // Supported formats.
    cl_uint nfmt = 0;
    CHECK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE2D, 0, NULL,
                                     &nfmt));
    EXPECT(nfmt > 0, "no 2D image formats");
    cl_image_format *fmts = (cl_image_format *)xmalloc(nfmt * sizeof *fmts);
    CHECK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE2D, nfmt, fmts,
                                     NULL));
    int rgba8 = 0, half4 = 0;
    for (cl_uint i = 0; i < nfmt; i++) {
        if (fmts[i].image_channel_order == CL_RGBA &&
            fmts[i].image_channel_data_type == CL_UNORM_INT8)
            rgba8 = 1;
        if (fmts[i].image_channel_order == CL_RGBA &&
            fmts[i].image_channel_data_type == CL_HALF_FLOAT)
            half4 = 1;
    }
    EXPECT(rgba8, "CL_RGBA/CL_UNORM_INT8 not among the %u 2D formats", nfmt);
    free(fmts);
    cl_uint n3d = 0;
    CHECK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE3D, 0, NULL,
                                     &n3d));
    cl_image_format *f3 = (cl_image_format *)xmalloc((n3d ? n3d : 1) * sizeof *f3);
    if (n3d) CHECK(clGetSupportedImageFormats(ctx, CL_MEM_READ_WRITE, CL_MEM_OBJECT_IMAGE3D, n3d,
                                              f3, NULL));
    int r32f = 0;
    for (cl_uint i = 0; i < n3d; i++)
        if (f3[i].image_channel_order == CL_R && f3[i].image_channel_data_type == CL_FLOAT)
            r32f = 1;
    free(f3);
    ok("%u 2D formats with CL_RGBA/CL_UNORM_INT8, %u 3D formats", nfmt, n3d);

    // A 2D RGBA8 image from host memory with a padded row pitch.
    cl_image_format rgba = {CL_RGBA, CL_UNORM_INT8};
    cl_image_desc d2;
    memset(&d2, 0, sizeof d2);
    d2.image_type = CL_MEM_OBJECT_IMAGE2D;
    d2.image_width = W;
    d2.image_height = H;
    d2.image_row_pitch = PITCH_A;
    unsigned char *a = pattern(PITCH_A, 1);
    cl_mem src;
    CREATE(src, clCreateImage(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, &rgba, &d2, a, ERR));
    unsigned char *got = read_rgba(q, src);
    expect_rows("COPY_HOST_PTR image read back", got, a, PITCH_A);
    free(got);
    ok("%dx%d RGBA8 image from host memory with row pitch %d read back exactly", W, H, PITCH_A);

    // Info.
    cl_image_format f;
    CHECK(clGetImageInfo(src, CL_IMAGE_FORMAT, sizeof f, &f, NULL));
    EXPECT(f.image_channel_order == CL_RGBA && f.image_channel_data_type == CL_UNORM_INT8,
           "format 0x%x/0x%x", f.image_channel_order, f.image_channel_data_type);
    EXPECT(image_info_size(src, CL_IMAGE_ELEMENT_SIZE) == 4, "element size %zu",
           image_info_size(src, CL_IMAGE_ELEMENT_SIZE));
    EXPECT(image_info_size(src, CL_IMAGE_WIDTH) == W, "width");
    EXPECT(image_info_size(src, CL_IMAGE_HEIGHT) == H, "height");
    EXPECT(image_info_size(src, CL_IMAGE_DEPTH) == 0, "depth %zu",
           image_info_size(src, CL_IMAGE_DEPTH));
    EXPECT(image_info_size(src, CL_IMAGE_ARRAY_SIZE) == 0, "array size");
    EXPECT(image_info_size(src, CL_IMAGE_ROW_PITCH) >= W * 4, "row pitch %zu",
           image_info_size(src, CL_IMAGE_ROW_PITCH));
    cl_mem_object_type mt = 0;
    CHECK(clGetMemObjectInfo(src, CL_MEM_TYPE, sizeof mt, &mt, NULL));
    EXPECT(mt == CL_MEM_OBJECT_IMAGE2D, "CL_MEM_TYPE 0x%x", mt);
    ok("clGetImageInfo: format, element size 4, %dx%d, row pitch %zu; CL_MEM_TYPE image2d", W,
       H, image_info_size(src, CL_IMAGE_ROW_PITCH));

    // Written with another padded pitch, read back tight and padded.
    unsigned char *b = pattern(PITCH_B, 2);
    size_t origin[3] = {0, 0, 0}, region[3] = {W, H, 1};
    CHECK(clEnqueueWriteImage(q, src, CL_TRUE, origin, region, PITCH_B, 0, b, 0, NULL, NULL));
    got = read_rgba(q, src);
    expect_rows("written image read back", got, b, PITCH_B);
    free(got);
    unsigned char *padded = (unsigned char *)xmalloc(PITCH_A * H);
    memset(padded, 0x5A, PITCH_A * H);
    CHECK(clEnqueueReadImage(q, src, CL_TRUE, origin, region, PITCH_A, 0, padded, 0, NULL, NULL));
    for (size_t y = 0; y < H; y++) {
        expect_bytes("padded read", padded + y * PITCH_A, b + y * PITCH_B, W * 4);
        for (size_t i = W * 4; i < PITCH_A; i++)
            EXPECT(padded[y * PITCH_A + i] == 0x5A, "padding byte %zu of row %zu written", i, y);
    }
    free(padded);
    ok("WriteImage with row pitch %d, ReadImage packed and with row pitch %d (padding untouched)",
       PITCH_B, PITCH_A);

    // The blur, through a sampler passed as an argument.
    cl_sampler smp;
    CREATE(smp, clCreateSampler(ctx, CL_FALSE, CL_ADDRESS_CLAMP_TO_EDGE, CL_FILTER_NEAREST, ERR));
    cl_bool norm = CL_TRUE;
    cl_addressing_mode am = 0;
    cl_filter_mode fm = 0;
    cl_uint refs = 0;
    cl_context sctx = NULL;
    CHECK(clGetSamplerInfo(smp, CL_SAMPLER_NORMALIZED_COORDS, sizeof norm, &norm, NULL));
    CHECK(clGetSamplerInfo(smp, CL_SAMPLER_ADDRESSING_MODE, sizeof am, &am, NULL));
    CHECK(clGetSamplerInfo(smp, CL_SAMPLER_FILTER_MODE, sizeof fm, &fm, NULL));
    CHECK(clGetSamplerInfo(smp, CL_SAMPLER_REFERENCE_COUNT, sizeof refs, &refs, NULL));
    CHECK(clGetSamplerInfo(smp, CL_SAMPLER_CONTEXT, sizeof sctx, &sctx, NULL));
    EXPECT(norm == CL_FALSE && am == CL_ADDRESS_CLAMP_TO_EDGE && fm == CL_FILTER_NEAREST,
           "sampler info %u 0x%x 0x%x", norm, am, fm);
    EXPECT(refs >= 1 && sctx == ctx, "sampler refs %u, context %p", refs, (void *)sctx);
    ok("clCreateSampler and clGetSamplerInfo");

    cl_program prog = build_source(ctx, dev, source, "");
    cl_kernel k;
    CREATE(k, clCreateKernel(prog, "blur", ERR));
    cl_mem dst;
    d2.image_row_pitch = 0;
    CREATE(dst, clCreateImage(ctx, CL_MEM_WRITE_ONLY, &rgba, &d2, NULL, ERR));
    CHECK(clSetKernelArg(k, 0, sizeof(cl_mem), &src));
    CHECK(clSetKernelArg(k, 1, sizeof(cl_mem), &dst));
    CHECK(clSetKernelArg(k, 2, sizeof(cl_sampler), &smp));
    size_t global[2] = {W, H};
    CHECK(clEnqueueNDRangeKernel(q, k, 2, NULL, global, NULL, 0, NULL, NULL));
    CHECK(clFinish(q));
    got = read_rgba(q, dst);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 4; c++) {
                float acc = 0;
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++) {
                        int xx = clampi(x + dx, 0, W - 1), yy = clampi(y + dy, 0, H - 1);
                        acc += b[yy * PITCH_B + xx * 4 + c] / 255.0f;
                    }
                int want = (int)(acc / 9.0f * 255.0f + 0.5f);
                int have = got[(y * W + x) * 4 + c];
                EXPECT(abs(have - want) <= 1, "blur at (%d, %d) channel %d: got %d, want %d", x,
                       y, c, have, want);
            }
    free(got);
    ok("3x3 box blur through a sampler argument matches the CPU within 1/255");

    // Copies: image to image (a sub-box), image to buffer, buffer to image.
    cl_mem copy;
    CREATE(copy, clCreateImage(ctx, CL_MEM_READ_WRITE, &rgba, &d2, NULL, ERR));
    unsigned char *zeros = (unsigned char *)calloc(W * H * 4, 1);
    CHECK(clEnqueueWriteImage(q, copy, CL_TRUE, origin, region, 0, 0, zeros, 0, NULL, NULL));
    size_t so[3] = {3, 5, 0}, dof[3] = {10, 2, 0}, box[3] = {20, 17, 1};
    CHECK(clEnqueueCopyImage(q, src, copy, so, dof, box, 0, NULL, NULL));
    got = read_rgba(q, copy);
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++) {
            int inside = x >= dof[0] && x < dof[0] + box[0] && y >= dof[1] && y < dof[1] + box[1];
            const unsigned char *want =
                inside ? b + (y - dof[1] + so[1]) * PITCH_B + (x - dof[0] + so[0]) * 4 : zeros;
            char label[64];
            snprintf(label, sizeof label, "CopyImage pixel (%zu, %zu)", x, y);
            expect_bytes(label, got + (y * W + x) * 4, want, 4);
        }
    free(got);
    ok("CopyImage of a %zux%zu box from (%zu, %zu) to (%zu, %zu)", box[0], box[1], so[0], so[1],
       dof[0], dof[1]);

    size_t off = 64;
    cl_mem buf;
    CREATE(buf, clCreateBuffer(ctx, CL_MEM_READ_WRITE, off + W * H * 4, NULL, ERR));
    CHECK(clEnqueueCopyImageToBuffer(q, src, buf, origin, region, off, 0, NULL, NULL));
    unsigned char *bb = (unsigned char *)xmalloc(W * H * 4);
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, off, W * H * 4, bb, 0, NULL, NULL));
    expect_rows("CopyImageToBuffer", bb, b, PITCH_B);
    ok("CopyImageToBuffer at offset %zu", off);
    // Buffer to image: the buffer's bytes, reversed, into a fresh image.
    for (size_t i = 0; i < W * H * 4; i++) bb[i] = (unsigned char)~bb[i];
    CHECK(clEnqueueWriteBuffer(q, buf, CL_TRUE, off, W * H * 4, bb, 0, NULL, NULL));
    CHECK(clEnqueueCopyBufferToImage(q, buf, copy, off, origin, region, 0, NULL, NULL));
    got = read_rgba(q, copy);
    expect_bytes("CopyBufferToImage", got, bb, W * H * 4);
    free(got);
    ok("CopyBufferToImage from offset %zu", off);

    // A map of a region: read, changed, written back at the unmap.
    size_t mo[3] = {7, 9, 0}, mr[3] = {13, 11, 1}, rp = 0, sp = 99;
    cl_int e = 0;
    unsigned char *m = (unsigned char *)clEnqueueMapImage(
        q, copy, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, mo, mr, &rp, &sp, 0, NULL, NULL, &e);
    CHECK(e);
    EXPECT(m != NULL && rp >= mr[0] * 4, "map %p, row pitch %zu", (void *)m, rp);
    for (size_t y = 0; y < mr[1]; y++) {
        expect_bytes("mapped row", m + y * rp, bb + ((mo[1] + y) * W + mo[0]) * 4, mr[0] * 4);
        for (size_t i = 0; i < mr[0] * 4; i++) m[y * rp + i] = (unsigned char)(y * 16 + i);
    }
    CHECK(clEnqueueUnmapMemObject(q, copy, m, 0, NULL, NULL));
    got = read_rgba(q, copy);
    for (size_t y = 0; y < H; y++)
        for (size_t x = 0; x < W; x++)
            for (size_t c = 0; c < 4; c++) {
                int inside = x >= mo[0] && x < mo[0] + mr[0] && y >= mo[1] && y < mo[1] + mr[1];
                unsigned char want = inside ? (unsigned char)((y - mo[1]) * 16 + (x - mo[0]) * 4 + c)
                                            : bb[(y * W + x) * 4 + c];
                EXPECT(got[(y * W + x) * 4 + c] == want, "after the unmap, (%zu, %zu) channel %zu: "
                       "got %u, want %u", x, y, c, got[(y * W + x) * 4 + c], want);
            }
    free(got);
    ok("MapImage of a %zux%zu region (row pitch %zu), written back at the unmap", mr[0], mr[1],
       rp);

    // A fill of a box.
    float color[4] = {1.0f, 0.0f, 0.5f, 0.25f};
    size_t fo[3] = {1, 1, 0}, fr[3] = {4, 3, 1};
    CHECK(clEnqueueFillImage(q, copy, color, fo, fr, 0, NULL, NULL));
    got = read_rgba(q, copy);
    for (size_t y = fo[1]; y < fo[1] + fr[1]; y++)
        for (size_t x = fo[0]; x < fo[0] + fr[0]; x++) {
            const unsigned char *p = got + (y * W + x) * 4;
            EXPECT(p[0] == 255 && p[1] == 0 && abs(p[2] - 128) <= 1 && abs(p[3] - 64) <= 1,
                   "fill at (%zu, %zu): %u %u %u %u", x, y, p[0], p[1], p[2], p[3]);
        }
    EXPECT(memcmp(got, bb, 4) == 0, "the fill spilled to (0, 0)");
    free(got);
    ok("FillImage of a 4x3 box with a float4 color");
    if (half4) {
        cl_image_format hf = {CL_RGBA, CL_HALF_FLOAT};
        cl_image_desc dh;
        memset(&dh, 0, sizeof dh);
        dh.image_type = CL_MEM_OBJECT_IMAGE2D;
        dh.image_width = 3;
        dh.image_height = 2;
        cl_mem himg;
        CREATE(himg, clCreateImage(ctx, CL_MEM_READ_WRITE, &hf, &dh, NULL, ERR));
        float hc[4] = {1.0f, 0.5f, -2.0f, 65504.0f};
        size_t ho[3] = {0, 0, 0}, hr[3] = {3, 2, 1};
        CHECK(clEnqueueFillImage(q, himg, hc, ho, hr, 0, NULL, NULL));
        uint16_t hb[3 * 2 * 4];
        CHECK(clEnqueueReadImage(q, himg, CL_TRUE, ho, hr, 0, 0, hb, 0, NULL, NULL));
        const uint16_t hw[4] = {0x3c00, 0x3800, 0xc000, 0x7bff};
        for (size_t i = 0; i < 3 * 2 * 4; i++)
            EXPECT(hb[i] == hw[i % 4], "half fill, channel %zu of pixel %zu: 0x%04x, want 0x%04x",
                   i % 4, i / 4, hb[i], hw[i % 4]);
        CHECK(clReleaseMemObject(himg));
        ok("FillImage of a CL_RGBA/CL_HALF_FLOAT image");
    }

    // A CL_R CL_FLOAT 3D image with padded rows and slices.
    if (!r32f) {
        ok("no CL_R/CL_FLOAT 3D format: 3D round trip skipped");
    } else {
        enum { X = 9, Y = 7, Z = 5 };
        size_t rowp = X * 4 + 8, slicep = rowp * (Y + 1);
        unsigned char *vol = (unsigned char *)xmalloc(slicep * Z);
        memset(vol, 0xCC, slicep * Z);
        Rng r = rng_new(3);
        for (size_t z = 0; z < Z; z++)
            for (size_t y = 0; y < Y; y++)
                for (size_t x = 0; x < X; x++) {
                    float v = rng_unit(&r) * 100.0f;
                    memcpy(vol + z * slicep + y * rowp + x * 4, &v, 4);
                }
        cl_image_format r32 = {CL_R, CL_FLOAT};
        cl_image_desc d3;
        memset(&d3, 0, sizeof d3);
        d3.image_type = CL_MEM_OBJECT_IMAGE3D;
        d3.image_width = X;
        d3.image_height = Y;
        d3.image_depth = Z;
        d3.image_row_pitch = rowp;
        d3.image_slice_pitch = slicep;
        cl_mem img3;
        CREATE(img3, clCreateImage(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, &r32, &d3, vol,
                                   ERR));
        float *all = (float *)xmalloc(X * Y * Z * 4);
        float *want = (float *)xmalloc(X * Y * Z * 4);
        size_t o3[3] = {0, 0, 0}, r3[3] = {X, Y, Z};
        CHECK(clEnqueueReadImage(q, img3, CL_TRUE, o3, r3, 0, 0, all, 0, NULL, NULL));
        for (size_t z = 0; z < Z; z++)
            for (size_t y = 0; y < Y; y++)
                memcpy(want + (z * Y + y) * X, vol + z * slicep + y * rowp, X * 4);
        expect_floats("3D image read back", all, want, X * Y * Z);
        EXPECT(image_info_size(img3, CL_IMAGE_DEPTH) == Z, "depth %zu",
               image_info_size(img3, CL_IMAGE_DEPTH));
        EXPECT(image_info_size(img3, CL_IMAGE_SLICE_PITCH) >= X * Y * 4, "slice pitch %zu",
               image_info_size(img3, CL_IMAGE_SLICE_PITCH));
        // A sub-box, read with padded rows.
        size_t so3[3] = {2, 1, 1}, sr3[3] = {5, 4, 3}, subrow = 5 * 4 + 4;
        float *part = (float *)xmalloc(subrow * 4 * 3);
        CHECK(clEnqueueReadImage(q, img3, CL_TRUE, so3, sr3, subrow, subrow * 4, part, 0, NULL,
                                 NULL));
        for (size_t z = 0; z < sr3[2]; z++)
            for (size_t y = 0; y < sr3[1]; y++) {
                const float *row = (const float *)((const unsigned char *)part +
                                                   z * subrow * 4 + y * subrow);
                expect_floats("3D sub-box row", row,
                              want + ((z + so3[2]) * Y + y + so3[1]) * X + so3[0], sr3[0]);
            }
        free(part);
        free(all);
        free(want);
        free(vol);
        CHECK(clReleaseMemObject(img3));
        ok("%dx%dx%d CL_R/CL_FLOAT 3D image (pitches %zu, %zu) and a 5x4x3 sub-box read back",
           X, Y, Z, rowp, slicep);
    }

    arrays(ctx, q);
    large(ctx, q, r32f);

    // Boxes stay inside the image.
    unsigned char four[4];
    size_t past[3] = {W, 0, 0}, one[3] = {1, 1, 1}, deep[3] = {1, 1, 2};
    EXPECT_ERR(clEnqueueReadImage(q, src, CL_TRUE, past, one, 0, 0, four, 0, NULL, NULL),
               CL_INVALID_VALUE);
    EXPECT_ERR(clEnqueueReadImage(q, src, CL_TRUE, origin, deep, 0, 0, four, 0, NULL, NULL),
               CL_INVALID_VALUE);
    ok("reads past the image's edge, or deeper than a 2D image, fail");

    free(a);
    free(b);
    free(bb);
    free(zeros);
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseMemObject(copy));
    CHECK(clReleaseMemObject(dst));
    CHECK(clReleaseMemObject(src));
    CHECK(clReleaseSampler(smp));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    return pass();
}
