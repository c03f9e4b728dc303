/*
 * Fuzz target: Parquet files (src/data/parquet*.c: the footer's Thrift structures, pages,
 * codecs, encodings, record assembly) through df_parquet_rows, the reader behind every
 * dataset file that starts with "PAR1". The buffer is a private copy of exactly `size`
 * bytes, so a read past the file shows in ASan.
 * Properties of an accepted file: an array of objects, every row with the same keys in the
 * same order (one per top-level column), and the dataset loader reads as many rows.
 */
#include "fuzz.h"

#include "data/parquet.h"
#include "distflow/common.h"
#include "distflow/dataset.h"

int df_fuzz_status;

static void check_rows(const json_t *rows, const char *buf, size_t size)
{
    DF_FUZZ_CHECK(json_is_array(rows));
    const json_t *first = json_array_get(rows, 0);
    for (size_t i = 0; i < json_array_size(rows); i++) {
        json_t *row = json_array_get(rows, i);
        DF_FUZZ_CHECK(json_is_object(row) && json_object_size(row) == json_object_size(first));
        void *a = json_object_iter(row), *b = json_object_iter((json_t *)first);
        for (; a && b; a = json_object_iter_next(row, a), b = json_object_iter_next((json_t *)first, b))
            DF_FUZZ_CHECK(!strcmp(json_object_iter_key(a), json_object_iter_key(b)));
    }
    df_dataset_opts o = {.reward_optional = true, .no_prompt = true};
    df_dataset *ds = NULL;
    if (df_dataset_load_buffer(buf, size, "train.parquet", &o, &ds) == DF_OK) {
        DF_FUZZ_CHECK(df_dataset_size(ds) == (int64_t)json_array_size(rows));
        df_dataset_free(ds);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error();
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    json_t *rows = NULL;
    df_fuzz_status = df_parquet_rows(buf, size, "train.parquet", &rows);
    if (df_fuzz_status == DF_OK)
        check_rows(rows, buf, size);
    else
        DF_FUZZ_CHECK(rows == NULL && df_last_error()[0] != '\0');
    json_decref(rows);
    free(buf);
    return 0;
}
