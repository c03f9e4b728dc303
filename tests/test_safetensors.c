/* safetensors reader / writer and dtype conversions (src/model/safetensors.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/rng.h"
#include "model/hf_io.h"
#include "model/safetensors.h"
#include "tolerance.h"

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

static char *path_in(void **state, const char *name)
{
    static _Thread_local char buf[512];
    snprintf(buf, sizeof buf, "%s/%s", (const char *)*state, name);
    return buf;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Write an 8-byte length (hlen_override >= 0 replaces strlen(header)), the header, the data. */
static void write_raw(const char *path, const char *header, long long hlen_override,
                      const void *data, size_t data_len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    uint64_t hl = hlen_override >= 0 ? (uint64_t)hlen_override : strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hl >> (8 * i));
    assert_int_equal(fwrite(len8, 1, 8, f), 8);
    if (strlen(header))
        assert_int_equal(fwrite(header, 1, strlen(header), f), strlen(header));
    if (data_len)
        assert_int_equal(fwrite(data, 1, data_len, f), data_len);
    fclose(f);
}

/* Open a malformed file and check the error code and that the message names the file. */
static void expect_open_error(const char *path, int code, const char *phrase)
{
    df_st_file *f = (df_st_file *)0x1;
    df_clear_error();
    assert_int_equal(df_st_open(path, &f), code);
    assert_null(f);
    const char *msg = df_last_error();
    if (!strstr(msg, path) || !strstr(msg, phrase))
        fail_msg("error \"%s\" should name %s and say \"%s\"", msg, path, phrase);
}

static int count_tmp_files(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

/* ---- conversions --------------------------------------------------------------- */

static void test_bf16_known_bits(void **state)
{
    (void)state;
    static const struct { uint32_t f; uint16_t b; } cases[] = {
        {0x3F800000u, 0x3F80}, /* 1.0 */
        {0x3F808000u, 0x3F80}, /* tie, kept even */
        {0x3F818000u, 0x3F82}, /* tie, odd rounds up to even */
        {0x3F808001u, 0x3F81}, /* just above half */
        {0x3F807FFFu, 0x3F80}, /* just below half */
        {0xBF800000u, 0xBF80}, /* -1.0 */
        {0x7F800000u, 0x7F80}, /* inf */
        {0xFF800000u, 0xFF80}, /* -inf */
        {0x7F7FFFFFu, 0x7F80}, /* FLT_MAX rounds to inf */
        {0x7F7F7FFFu, 0x7F7F}, /* largest that does not */
        {0x7FC00000u, 0x7FC0}, /* quiet NaN */
        {0x7F800001u, 0x7FC0}, /* signalling NaN stays NaN (quieted) */
        {0xFFC00001u, 0xFFC0}, /* negative NaN keeps its sign */
        {0x00000001u, 0x0000}, /* smallest subnormal -> 0 */
        {0x00400000u, 0x0040}, /* subnormal kept */
        {0x80000000u, 0x8000}, /* -0 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (df_f32_to_bf16(from_bits(cases[i].f)) != cases[i].b)
            fail_msg("bf16(0x%08x) = 0x%04x, expected 0x%04x", cases[i].f,
                     df_f32_to_bf16(from_bits(cases[i].f)), cases[i].b);
    assert_true(df_bf16_to_f32(0x3F80) == 1.0f);
    assert_true(df_bf16_to_f32(0x4049) == 3.140625f);
    assert_int_equal(bits(df_bf16_to_f32(0x0001)), 0x00010000u);
    assert_true(isinf(df_bf16_to_f32(0xFF80)) && df_bf16_to_f32(0xFF80) < 0);
    assert_true(isnan(df_bf16_to_f32(0x7FC1)));
    /* Every bf16 value survives bf16 -> f32 -> bf16; NaNs stay NaN. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = df_bf16_to_f32((uint16_t)h);
        uint16_t back = df_f32_to_bf16(f);
        if (isnan(f))
            assert_true(isnan(df_bf16_to_f32(back)));
        else if (back != h)
            fail_msg("bf16 0x%04x -> 0x%04x", h, back);
    }
}

static void test_f16_known_bits(void **state)
{
    (void)state;
    static const struct { float f; uint16_t h; } cases[] = {
        {1.0f, 0x3C00},
        {-2.0f, 0xC000},
        {65504.0f, 0x7BFF},          /* largest finite */
        {65519.0f, 0x7BFF},          /* below the midpoint to inf */
        {65520.0f, 0x7C00},          /* midpoint ties to "even" inf */
        {1e6f, 0x7C00},
        {0x1p-14f, 0x0400},          /* smallest normal */
        {0x1p-24f, 0x0001},          /* smallest subnormal */
        {0x1p-25f, 0x0000},          /* half of it: tie to even 0 */
        {0x1.8p-25f, 0x0001},        /* 0.75 units */
        {0x3p-25f, 0x0002},          /* 1.5 units: tie to even 2 */
        {0x5p-25f, 0x0002},          /* 2.5 units: tie to even 2 */
        {0x1p-14f - 0x1p-24f, 0x03FF}, /* largest subnormal */
        {0x1.ffep-15f, 0x0400},      /* 1023.75 units round up into the normals */
        {1.0f + 0x1p-11f, 0x3C00},   /* tie, kept even */
        {1.0f + 0x3p-11f, 0x3C02},   /* tie, odd rounds up */
        {1.0f + 0x1p-10f, 0x3C01},
        {0.1f, 0x2E66},
        {1.0f / 3.0f, 0x3555},
        {-0.0f, 0x8000},
        {1e-8f, 0x0000},
        {-1e-8f, 0x8000},
        {INFINITY, 0x7C00},
        {-INFINITY, 0xFC00},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (df_f32_to_f16(cases[i].f) != cases[i].h)
            fail_msg("f16(%a) = 0x%04x, expected 0x%04x", (double)cases[i].f,
                     df_f32_to_f16(cases[i].f), cases[i].h);
    assert_int_equal(df_f32_to_f16(NAN) & 0x7E00, 0x7E00);
    assert_int_equal(df_f32_to_f16(from_bits(0x7F800001u)), 0x7E00); /* sNaN -> quiet NaN */
    assert_true(df_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(df_f16_to_f32(0x8001) == -0x1p-24f);
    assert_true(df_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    assert_true(df_f16_to_f32(0x0400) == 0x1p-14f);
    assert_true(df_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(df_f16_to_f32(0x3555) == 0.333251953125f);
    assert_true(isinf(df_f16_to_f32(0x7C00)) && df_f16_to_f32(0x7C00) > 0);
    assert_true(isinf(df_f16_to_f32(0xFC00)) && df_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(df_f16_to_f32(0x7E00)) && isnan(df_f16_to_f32(0x7C01)));
    assert_int_equal(bits(df_f16_to_f32(0x7C01)), 0x7FC02000u); /* payload kept, quieted */
    assert_int_equal(bits(df_f16_to_f32(0x8000)), 0x80000000u);
    /* Exhaustive: every half survives half -> f32 -> half; NaNs stay NaN. */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = df_f16_to_f32((uint16_t)h);
        uint16_t back = df_f32_to_f16(f);
        if (isnan(f))
            assert_true(isnan(df_f16_to_f32(back)));
        else if (back != h)
            fail_msg("f16 0x%04x -> %a -> 0x%04x", h, (double)f, back);
    }
}

/* The blocked / vectorised array paths give the scalar converters' exact bits. */
static void test_bulk_matches_scalar(void **state)
{
    const char *path = path_in(state, "bulk.safetensors");
    enum { NH = 65536, NF = 200003 }; /* odd sizes exercise the vector tails */
    /* Reading: every half and bfloat16 bit pattern. */
    uint16_t *h = malloc(NH * sizeof *h);
    for (int i = 0; i < NH; i++)
        h[i] = (uint16_t)i;
    char hdr[256];
    snprintf(hdr, sizeof hdr, "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%d,%d]}}", NH, 2 * NH,
             NH, 2 * NH, 4 * NH);
    unsigned char *data = malloc(4 * NH);
    memcpy(data, h, 2 * NH);
    memcpy(data + 2 * NH, h, 2 * NH);
    write_raw(path, hdr, -1, data, 4 * NH);
    float *f = malloc(NF * sizeof *f);
    df_st_file *st;
    assert_int_equal(df_st_open(path, &st), 0);
    assert_int_equal(df_st_read_f32(st, "h", f, NH), 0);
    for (int i = 0; i < NH; i++)
        if (bits(f[i]) != bits(df_f16_to_f32((uint16_t)i)))
            fail_msg("f16 0x%04x: bulk 0x%08x, scalar 0x%08x", i, bits(f[i]),
                     bits(df_f16_to_f32((uint16_t)i)));
    assert_int_equal(df_st_read_f32(st, "b", f, NH), 0);
    for (int i = 0; i < NH; i++)
        assert_int_equal(bits(f[i]), bits(df_bf16_to_f32((uint16_t)i)));
    df_st_close(st);
    /* Writing: random bit patterns (all classes, NaNs included) and rounding ties. */
    df_rng r;
    df_rng_seed(&r, 11);
    for (int i = 0; i < NF; i++) {
        uint32_t u = (uint32_t)df_rng_u64(&r);
        if (i % 3 == 1) /* near f16's range, with ties: low 13 bits 0x1000 */
            u = (u & 0x80000000u) | ((0x33000000u + (u % 0x14800000u)) & ~0x1fffu) | 0x1000u;
        f[i] = from_bits(u);
    }
    int64_t shape[1] = {NF};
    for (int k = 0; k < 2; k++) {
        df_dtype dt = k ? DF_DTYPE_BF16 : DF_DTYPE_F16;
        df_st_writer *w;
        assert_int_equal(df_st_writer_new(&w), 0);
        assert_int_equal(df_st_writer_add(w, "copied", dt, 1, shape, f), 0);
        assert_int_equal(df_st_writer_add_borrowed(w, "borrowed", dt, 1, shape, f), 0);
        assert_int_equal(df_st_writer_write(w, path), 0);
        df_st_writer_free(w);
        assert_int_equal(df_st_open(path, &st), 0);
        for (int j = 0; j < 2; j++) {
            df_st_tensor t;
            assert_int_equal(df_st_find(st, j ? "borrowed" : "copied", &t), 0);
            const unsigned char *raw = t.data;
            for (int i = 0; i < NF; i++) {
                uint16_t got, want = dt == DF_DTYPE_F16 ? df_f32_to_f16(f[i]) : df_f32_to_bf16(f[i]);
                memcpy(&got, raw + 2 * i, 2);
                if (got != want)
                    fail_msg("%s of 0x%08x: bulk 0x%04x, scalar 0x%04x",
                             dt == DF_DTYPE_F16 ? "f16" : "bf16", bits(f[i]), got, want);
            }
        }
        df_st_close(st);
    }
    free(h);
    free(data);
    free(f);
}

/* ---- round trips ------------------------------------------------------------------- */

static void test_roundtrip_f32_exact(void **state)
{
    const char *path = path_in(state, "a.safetensors");
    float a[6] = {1.5f, -0.0f, INFINITY, -INFINITY, 0x1p-149f, 3.4028235e38f};
    float b[5] = {0.1f, 0.2f, 0.3f, NAN, -7.25f};
    float c[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float sc = 42.0f;
    int64_t sa[2] = {2, 3}, sb[1] = {5}, sempty[2] = {0, 4}, scc[3] = {2, 2, 2};
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    assert_int_equal(df_st_writer_add(w, "layer.a", DF_DTYPE_F32, 2, sa, a), 0);
    assert_int_equal(df_st_writer_add(w, "b", DF_DTYPE_F32, 1, sb, b), 0);
    assert_int_equal(df_st_writer_add(w, "scalar", DF_DTYPE_F32, 0, NULL, &sc), 0);
    assert_int_equal(df_st_writer_add(w, "empty", DF_DTYPE_F32, 2, sempty, NULL), 0);
    assert_int_equal(df_st_writer_add_borrowed(w, "cube", DF_DTYPE_F32, 3, scc, c), 0);
    assert_int_equal(df_st_writer_set_metadata(w, "format", "np"), 0);
    assert_int_equal(df_st_writer_set_metadata(w, "format", "pt"), 0); /* replaces */
    assert_int_equal(df_st_writer_data_bytes(w), (6 + 5 + 1 + 0 + 8) * 4);
    assert_int_equal(df_st_writer_write(w, path), 0);
    df_st_writer_free(w);
    assert_int_equal(count_tmp_files(*state), 0);

    df_st_file *f;
    assert_int_equal(df_st_open(path, &f), 0);
    assert_string_equal(df_st_path(f), path);
    assert_int_equal(df_st_count(f), 5);
    assert_string_equal(df_st_metadata(f, "format"), "pt");
    assert_null(df_st_metadata(f, "other"));
    static const char *order[] = {"layer.a", "b", "scalar", "empty", "cube"};
    for (int i = 0; i < 5; i++) { /* df_st_at follows data order = order added */
        df_st_tensor t;
        assert_int_equal(df_st_at(f, i, &t), 0);
        assert_string_equal(t.name, order[i]);
        assert_int_equal(t.dtype, DF_DTYPE_F32);
    }
    df_st_tensor t;
    assert_int_equal(df_st_find(f, "layer.a", &t), 0);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 2);
    assert_int_equal(t.shape[1], 3);
    assert_int_equal(t.nbytes, 24);
    assert_memory_equal(t.data, a, sizeof a); /* bit-exact, incl. -0, inf, subnormal */
    float rb[5];
    assert_int_equal(df_st_read_f32(f, "b", rb, 5), 0);
    assert_memory_equal(rb, b, sizeof b); /* NaN payload too */
    float rs = 0;
    assert_int_equal(df_st_read_f32(f, "scalar", &rs, 1), 0);
    assert_true(rs == 42.0f);
    assert_int_equal(df_st_find(f, "scalar", &t), 0);
    assert_int_equal(t.ndim, 0);
    assert_int_equal(df_st_find(f, "empty", &t), 0);
    assert_int_equal(t.nbytes, 0);
    assert_int_equal(t.shape[0], 0);
    assert_int_equal(t.shape[1], 4);
    float rc8[8];
    assert_int_equal(df_st_read_f32(f, "cube", rc8, 8), 0);
    assert_memory_equal(rc8, c, sizeof c);

    df_clear_error();
    assert_int_equal(df_st_find(f, "missing", &t), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "missing"));
    assert_non_null(strstr(df_last_error(), path));
    assert_int_equal(df_st_read_f32(f, "b", rb, 4), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "expected 4"));
    assert_int_equal(df_st_at(f, 5, &t), DF_EINVAL);
    df_st_close(f);

    /* The data buffer starts 8-byte aligned, as the reference writer pads it. */
    FILE *fp = fopen(path, "rb");
    unsigned char len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    fclose(fp);
    assert_int_equal(len8[0] % 8, 0);
}

static void check_half_roundtrip(void **state, df_dtype dt)
{
    const char *path = path_in(state, dt == DF_DTYPE_BF16 ? "bf16.safetensors" : "f16.safetensors");
    enum { N = 3000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    df_rng r;
    df_rng_seed(&r, 7);
    for (int i = 0; i < N; i++) /* magnitudes around 1e-3 .. 1e3; a few f16 subnormals */
        x[i] = (float)(df_rng_normal(&r) * pow(10.0, (double)(i % 7) - 3.0));
    int64_t shape[2] = {30, 100};
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    assert_int_equal(df_st_writer_add(w, "copied", dt, 2, shape, x), 0);
    assert_int_equal(df_st_writer_add_borrowed(w, "borrowed", dt, 2, shape, x), 0);
    assert_int_equal(df_st_writer_write(w, path), 0);
    df_st_writer_free(w);

    df_st_file *f;
    assert_int_equal(df_st_open(path, &f), 0);
    /* One round-to-nearest conversion: the unit roundoff relative (bf16: 8 significant bits,
     * DF_U_BF16 = 2^-8; f16: 11, 2^-11), plus half the smallest subnormal absolute for f16's
     * gradual underflow (bf16 shares float32's exponent range: no underflow here). */
    double rel = dt == DF_DTYPE_BF16 ? DF_U_BF16 : 0x1p-11, abs_tol = dt == DF_DTYPE_BF16 ? 0 : 0x1p-25;
    for (int k = 0; k < 2; k++) {
        const char *name = k ? "borrowed" : "copied";
        df_st_tensor t;
        assert_int_equal(df_st_find(f, name, &t), 0);
        assert_int_equal(t.dtype, dt);
        assert_int_equal(t.nbytes, N * 2);
        const unsigned char *raw = t.data;
        for (int i = 0; i < N; i++) { /* stored bits are the converter's */
            uint16_t h;
            memcpy(&h, raw + 2 * i, 2);
            uint16_t want = dt == DF_DTYPE_BF16 ? df_f32_to_bf16(x[i]) : df_f32_to_f16(x[i]);
            if (h != want)
                fail_msg("%s[%d]: stored 0x%04x, expected 0x%04x", name, i, h, want);
        }
        assert_int_equal(df_st_read_f32(f, name, y, N), 0);
        for (int i = 0; i < N; i++)
            if (fabs((double)y[i] - x[i]) > rel * fabs((double)x[i]) + abs_tol)
                fail_msg("%s[%d]: %g read back as %g", name, i, (double)x[i], (double)y[i]);
    }
    df_st_close(f);
    free(x);
    free(y);
}

static void test_roundtrip_bf16(void **state) { check_half_roundtrip(state, DF_DTYPE_BF16); }
static void test_roundtrip_f16(void **state) { check_half_roundtrip(state, DF_DTYPE_F16); }

/* The writer's bytes equal what huggingface/safetensors writes for the same tensor. */
static void test_reference_bytes(void **state)
{
    const char *path = path_in(state, "ref.safetensors");
    float v[4] = {1, 2, 3, 4};
    int64_t shape[2] = {2, 2};
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    assert_int_equal(df_st_writer_set_metadata(w, "format", "pt"), 0);
    assert_int_equal(df_st_writer_add(w, "w", DF_DTYPE_BF16, 2, shape, v), 0);
    assert_int_equal(df_st_writer_write(w, path), 0);
    df_st_writer_free(w);
    const char *hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"BF16\",\"shape\":"
                      "[2,2],\"data_offsets\":[0,8]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    unsigned char want[256] = {0};
    want[0] = (unsigned char)padded;
    memcpy(want + 8, hdr, hl);
    memset(want + 8 + hl, ' ', padded - hl);
    const unsigned char data[8] = {0x80, 0x3F, 0x00, 0x40, 0x40, 0x40, 0x80, 0x40};
    memcpy(want + 8 + padded, data, 8);
    char *got;
    size_t len;
    assert_int_equal(df_read_file(path, &got, &len), 0);
    assert_int_equal(len, 8 + padded + 8);
    assert_memory_equal(got, want, len);
    free(got);
}

static void test_other_dtypes(void **state)
{
    const char *path = path_in(state, "ints.safetensors");
    unsigned char data[8 + 8 + 8 + 2];
    double d = -2.5;
    int64_t i64 = -123456789012LL;
    int32_t i32[2] = {7, -8};
    memcpy(data, &d, 8);
    memcpy(data + 8, &i64, 8);
    memcpy(data + 16, i32, 8);
    data[24] = 1;
    data[25] = 0;
    write_raw(path,
              "{\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
              "\"l\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]},"
              "\"i\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[16,24]},"
              "\"m\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[24,26]}}",
              -1, data, sizeof data);
    df_st_file *f;
    assert_int_equal(df_st_open(path, &f), 0);
    float out[2];
    assert_int_equal(df_st_read_f32(f, "d", out, 1), 0);
    assert_true(out[0] == -2.5f);
    assert_int_equal(df_st_read_f32(f, "l", out, 1), 0);
    assert_true(out[0] == (float)-123456789012LL);
    assert_int_equal(df_st_read_f32(f, "i", out, 2), 0);
    assert_true(out[0] == 7.0f && out[1] == -8.0f);
    df_st_tensor t;
    assert_int_equal(df_st_find(f, "m", &t), 0);
    assert_int_equal(t.dtype, DF_ST_BOOL);
    assert_int_equal(df_st_read_f32(f, "m", out, 2), DF_EUNSUPPORTED);
    assert_non_null(strstr(df_last_error(), "BOOL"));
    df_st_close(f);
}

/* ---- malformed files ------------------------------------------------------------------- */

static void test_malformed(void **state)
{
    char p[512];
    snprintf(p, sizeof p, "%s", path_in(state, "bad.safetensors"));
    unsigned char zeros[64] = {0};

    FILE *fp = fopen(p, "wb"); /* truncated inside the length prefix */
    fwrite("\x10\x00\x00\x00", 1, 4, fp);
    fclose(fp);
    expect_open_error(p, DF_EINVAL, "truncated");

    write_raw(p, "{}", 1000, NULL, 0);
    expect_open_error(p, DF_EINVAL, "exceeds the file");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",", -1, NULL, 0);
    expect_open_error(p, DF_EINVAL, "not valid JSON");

    write_raw(p, "[1, 2]", -1, NULL, 0);
    expect_open_error(p, DF_EINVAL, "start with '{'");

    write_raw(p, "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, zeros, 4);
    expect_open_error(p, DF_EINVAL, "unknown dtype \"F33\"");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", -1, zeros, 4);
    expect_open_error(p, DF_EINVAL, "outside the 4-byte data buffer");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", -1, zeros, 8);
    expect_open_error(p, DF_EINVAL, "needs 12 bytes");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, zeros, 12);
    expect_open_error(p, DF_EINVAL, "overlaps");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", -1, zeros, 12);
    expect_open_error(p, DF_EINVAL, "belong to no tensor");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, zeros, 12);
    expect_open_error(p, DF_EINVAL, "after the last tensor");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", -1, zeros, 4);
    expect_open_error(p, DF_EINVAL, "data_offsets must be");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", -1, zeros, 4);
    expect_open_error(p, DF_EINVAL, "shape[0]");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", -1, zeros, 4);
    expect_open_error(p, DF_EINVAL, "data_offsets");

    write_raw(p, "{\"__metadata__\":{\"format\":1}}", -1, NULL, 0);
    expect_open_error(p, DF_EINVAL, "__metadata__");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", -1, zeros, 4);
    expect_open_error(p, DF_EINVAL, "duplicate");

    write_raw(p, "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
              -1, zeros, 4);
    expect_open_error(p, DF_EUNSUPPORTED, "dimensions");

    expect_open_error(path_in(state, "absent.safetensors"), DF_ENOTFOUND, "cannot open");

    /* A valid empty file (header "{}" padded) opens with no tensors. */
    write_raw(p, "{}      ", -1, NULL, 0);
    df_st_file *f;
    assert_int_equal(df_st_open(p, &f), 0);
    assert_int_equal(df_st_count(f), 0);
    df_st_close(f);
}

static void test_writer_errors(void **state)
{
    float v[2] = {1, 2};
    int64_t s1[1] = {2}, sneg[1] = {-1};
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    assert_int_equal(df_st_writer_add(w, "x", DF_DTYPE_F32, 1, s1, v), 0);
    assert_int_equal(df_st_writer_add(w, "x", DF_DTYPE_F16, 1, s1, v), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "added twice"));
    assert_int_equal(df_st_writer_add(w, "__metadata__", DF_DTYPE_F32, 1, s1, v), DF_EINVAL);
    assert_int_equal(df_st_writer_add(w, "", DF_DTYPE_F32, 1, s1, v), DF_EINVAL);
    assert_int_equal(df_st_writer_add(w, "y", (df_dtype)DF_ST_I32, 1, s1, v), DF_EINVAL);
    assert_int_equal(df_st_writer_add(w, "y", DF_DTYPE_F32, 1, sneg, v), DF_EINVAL);
    assert_int_equal(df_st_writer_add(w, "y", DF_DTYPE_F32, 9, s1, v), DF_EINVAL);
    assert_int_equal(df_st_writer_add(w, "y", DF_DTYPE_F32, 1, s1, NULL), DF_EINVAL);
    /* A directory that does not exist: DF_EIO naming the path, nothing left behind. */
    const char *bad = path_in(state, "no/such/dir/x.safetensors");
    assert_int_equal(df_st_writer_write(w, bad), DF_EIO);
    assert_non_null(strstr(df_last_error(), bad));
    assert_int_equal(count_tmp_files(*state), 0);
    df_st_writer_free(w);
}

/* Replacing an existing file is atomic: the old content stays readable until the rename. */
static void test_overwrite(void **state)
{
    const char *path = path_in(state, "o.safetensors");
    float v1[1] = {1}, v2[3] = {4, 5, 6};
    int64_t s1[1] = {1}, s3[1] = {3};
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), 0);
    assert_int_equal(df_st_writer_add(w, "v", DF_DTYPE_F32, 1, s1, v1), 0);
    assert_int_equal(df_st_writer_write(w, path), 0);
    df_st_writer_free(w);
    df_st_file *old;
    assert_int_equal(df_st_open(path, &old), 0);
    assert_int_equal(df_st_writer_new(&w), 0);
    assert_int_equal(df_st_writer_add(w, "v", DF_DTYPE_F32, 1, s3, v2), 0);
    assert_int_equal(df_st_writer_write(w, path), 0);
    df_st_writer_free(w);
    float o = 0, n[3];
    assert_int_equal(df_st_read_f32(old, "v", &o, 1), 0); /* old mapping still intact */
    assert_true(o == 1.0f);
    df_st_close(old);
    df_st_file *f;
    assert_int_equal(df_st_open(path, &f), 0);
    assert_int_equal(df_st_read_f32(f, "v", n, 3), 0);
    assert_true(n[0] == 4 && n[1] == 5 && n[2] == 6);
    df_st_close(f);
    assert_int_equal(count_tmp_files(*state), 0);
}

static void test_python_json_style(void **state)
{
    (void)state;
    char buf[64];
    static const struct { double v; const char *s; } cases[] = {
        {1e-6, "1e-06"}, {1e-5, "1e-05"}, {10000.0, "10000.0"}, {1000000.0, "1000000.0"},
        {0.02, "0.02"}, {0.0001, "0.0001"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"},
        {-1.5, "-1.5"}, {0.0, "0.0"}, {123456.789, "123456.789"}, {1.0 / 3, "0.3333333333333333"},
        {2.5e-300, "2.5e-300"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        df_format_double_py(cases[i].v, buf, sizeof buf);
        assert_string_equal(buf, cases[i].s);
    }
    json_t *o = json_pack("{s:[i, s], s:{}, s:[], s:b, s:n, s:f, s:s}", "b", 1, "x\"\n\xc3\xa9\xf0\x9f\x98\x80",
                          "a", "e", "t", 1, "n", "r", 0.5, "s", "\x7f");
    char *s = df_json_dumps_py(o);
    assert_string_equal(s, "{\n  \"a\": {},\n  \"b\": [\n    1,\n"
                           "    \"x\\\"\\n\\u00e9\\ud83d\\ude00\"\n  ],\n  \"e\": [],\n"
                           "  \"n\": null,\n  \"r\": 0.5,\n  \"s\": \"\\u007f\",\n  \"t\": true\n}\n");
    free(s);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_known_bits),
        cmocka_unit_test(test_f16_known_bits),
        cmocka_unit_test_setup_teardown(test_bulk_matches_scalar, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_roundtrip_f32_exact, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_roundtrip_bf16, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_roundtrip_f16, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_reference_bytes, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_other_dtypes, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_malformed, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_writer_errors, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_overwrite, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_python_json_style),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
