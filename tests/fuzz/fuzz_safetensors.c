/*
 * Fuzz target: a .safetensors file (header + tensor table) through df_st_open,
 * the reader every model and checkpoint load goes through (src/model/safetensors.c).
 * Properties of an accepted file: the tensors tile the data buffer exactly, each
 * one is found by its name, and converting one reads only its own bytes (ASan
 * sees any read past the mapping).
 */
#include "fuzz.h"

#include "distflow/common.h"
#include "model/safetensors.h"

int df_fuzz_status;

/* Convert tensors of at most this many elements (bigger ones only by their table entry). */
#define CONVERT_MAX ((int64_t)1 << 20)

static void check_tensor(const df_st_file *f, const df_st_tensor *t)
{
    int64_t numel = df_st_numel(t);
    DF_FUZZ_CHECK(t->ndim >= 0 && t->ndim <= DF_ST_MAX_DIMS);
    DF_FUZZ_CHECK((uint64_t)t->nbytes == (uint64_t)numel * df_st_dtype_size(t->dtype));
    df_st_tensor by_name;
    DF_FUZZ_CHECK(df_st_find(f, t->name, &by_name) == DF_OK);
    DF_FUZZ_CHECK(by_name.data == t->data && by_name.nbytes == t->nbytes);
    if (numel > CONVERT_MAX)
        return;
    float *dst = malloc((size_t)(numel ? numel : 1) * sizeof *dst);
    DF_FUZZ_CHECK(dst != NULL);
    int rc = df_st_read_f32(f, t->name, dst, numel);
    int d = (int)t->dtype;
    bool convertible = d == DF_DTYPE_F32 || d == DF_DTYPE_BF16 || d == DF_DTYPE_F16 ||
                       d == DF_ST_F64 || d == DF_ST_I64 || d == DF_ST_I32;
    DF_FUZZ_CHECK(convertible ? rc == DF_OK : rc == DF_EUNSUPPORTED);
    free(dst);
}

static void walk(const df_st_file *f, size_t size, uint64_t hlen)
{
    uint64_t covered = 0;
    const unsigned char *prev_end = NULL;
    for (int i = 0; i < df_st_count(f); i++) {
        df_st_tensor t;
        DF_FUZZ_CHECK(df_st_at(f, i, &t) == DF_OK);
        /* in data order, back to back: the tiling rule */
        DF_FUZZ_CHECK(prev_end == NULL || (const unsigned char *)t.data == prev_end);
        prev_end = (const unsigned char *)t.data + t.nbytes;
        covered += t.nbytes;
        check_tensor(f, &t);
    }
    DF_FUZZ_CHECK(covered == size - 8 - hlen);
    df_st_tensor none;
    DF_FUZZ_CHECK(df_st_find(f, "\x01 no such tensor", &none) == DF_ENOTFOUND);
    (void)df_st_metadata(f, "format");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error(); /* a message left by the previous input must not count for this one */
    const char *path = df_fuzz_file("model.safetensors", data, size);
    df_st_file *f = NULL;
    df_fuzz_status = df_st_open(path, &f);
    if (df_fuzz_status == DF_OK) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
            hlen = (hlen << 8) | data[i];
        walk(f, size, hlen);
        df_st_close(f);
    } else {
        DF_FUZZ_CHECK(f == NULL && df_last_error()[0] != '\0');
    }
    return 0;
}
