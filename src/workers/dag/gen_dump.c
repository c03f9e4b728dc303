/* verl's _dump_generations for validation and rollouts (gen_dump.h). */
#include "workers/dag/gen_dump.h"

#include "distflow/reward.h"
#include "util/fsutil.h"
#include "workers/common/val_metrics.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Row i as a JSON object (NULL: out of memory); input / output are its decoded texts. */
static json_t *row_object(const df_batch *b, int64_t i, const char *input, const char *output, bool with_step,
                          int64_t step)
{
    json_t *row = json_pack("{s:s, s:s, s:s?, s:f}", "input", input, "output", output, "gts",
                            df_batch_str(b, "ground_truth", i), "score", df_sequence_score(b, i));
    if (row && with_step)
        json_object_set_new(row, "step", json_integer((json_int_t)step));
    static const char *const extra[] = {"acc", "overlong_reward", "overlong"}; /* verl's reward_extra_info */
    for (int k = 0; row && k < 3; k++)
        if (df_batch_f32(b, extra[k]))
            json_object_set_new(row, extra[k], json_real(df_batch_f32(b, extra[k])[i]));
    for (int c = 0; row && c < df_batch_num_columns(b); c++) { /* a Python reward function's extra keys */
        const df_column *col = df_batch_column_at(b, c);
        const char *key = df_reward_extra_key(col), *jkey = df_reward_extra_json_key(col);
        if (key)
            json_object_set_new(row, key, json_real(((const float *)col->data)[i]));
        else if (jkey) /* as the function returned it (JSON text from the Python child) */
            json_object_set_new(row, jkey, json_loads(df_batch_str(b, col->name, i), JSON_DECODE_ANY, NULL));
    }
    if (row && df_row_has_pred(b, i))
        json_object_set_new(row, "pred", json_string(df_batch_str(b, "pred", i)));
    if (row) {
        json_object_set_new(row, "index", json_integer((json_int_t)df_batch_i64(b, "index")[i]));
        json_object_set_new(row, "data_source", json_string(df_batch_str(b, "data_source", i)));
    }
    return row;
}

int df_gen_dump_rows(FILE *f, const df_tokenizer *tok, const df_batch *b, bool with_step, int64_t step)
{
    if (df_batch_size(b) > 0 && (!df_batch_column(b, "prompt_ids") || !df_batch_column(b, "response_ids") ||
                                 !df_batch_i64(b, "index") || !df_batch_str(b, "data_source", 0)))
        return df_error(DF_EINVAL, "dumping generations: the batch needs prompt_ids, response_ids, "
                                   "index and data_source");
    int rc = DF_OK;
    for (int64_t i = 0; !rc && i < df_batch_size(b); i++) {
        int64_t plen, rlen;
        const int32_t *p = df_batch_tok_i32(b, "prompt_ids", i, &plen);
        const int32_t *r = df_batch_tok_i32(b, "response_ids", i, &rlen);
        char *input = NULL, *output = NULL;
        rc = df_tokenizer_decode(tok, p, plen, false, &input);
        if (!rc)
            rc = df_tokenizer_decode(tok, r, rlen, true, &output);
        json_t *row = rc ? NULL : row_object(b, i, input, output, with_step, step);
        if (!rc && !row)
            rc = df_error(DF_ENOMEM, "out of memory writing generations");
        if (!rc && (json_dumpf(row, f, JSON_COMPACT | JSON_ENSURE_ASCII) || fputc('\n', f) == EOF))
            rc = df_error(DF_EIO, "writing the generations: %s", strerror(errno));
        json_decref(row);
        free(input), free(output);
    }
    return rc;
}

int df_gen_dump_write(const char *dir, const char *key, int64_t step, int dp_rank, int dp_size,
                      const char *buf, size_t len)
{
    char name[96];
    if (dp_size > 1)
        snprintf(name, sizeof name, "%lld.dp%d.jsonl", (long long)step, dp_rank);
    else
        snprintf(name, sizeof name, "%lld.jsonl", (long long)step);
    char *d = df_expand_user(dir);
    char *path = d ? df_path_join(d, name) : NULL;
    int rc = path ? df_mkdir_p(d) : df_error(DF_ENOMEM, "out of memory");
    if (!rc)
        rc = df_write_file_atomic(path, buf, len);
    free(path), free(d);
    return rc ? df_error_wrap(rc, "%s", key) : DF_OK;
}
