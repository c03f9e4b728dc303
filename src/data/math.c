/*
 * MATH raw -> verl RL schema, following verl's
 * examples/data_preprocess/math_dataset.py (commit
 * b178a3cd56f58b2d502255daba591e92833930a7; see include/distflow/dataset.h).
 */
#include "distflow/dataset.h"
#include "distflow/reward.h"

#include "data/jsonl.h"

#include <stdlib.h>
#include <string.h>

/* Copy the raw row's optional `key` (any JSON type) into extra_info. */
static int copy_optional(json_t *raw, json_t *extra, const char *key)
{
    json_t *v = json_object_get(raw, key);
    return v && json_object_set(extra, key, v) ? df_error(DF_ENOMEM, "out of memory") : DF_OK;
}

/* verl's extract_solution (the solution's last \boxed{}), or the row's "answer" when the solution
 * has none; *gt is malloc'd. */
static int ground_truth(json_t *raw, const char *solution, const char *file, int64_t line, char **gt)
{
    const char *a;
    size_t n;
    if (df_reward_math_last_boxed(solution, &a, &n)) {
        *gt = malloc(n + 1);
        if (!*gt)
            return df_error(DF_ENOMEM, "out of memory");
        memcpy(*gt, a, n);
        (*gt)[n] = '\0';
        return DF_OK;
    }
    json_t *ans = json_object_get(raw, "answer");
    if (!json_is_string(ans))
        return df_error(DF_EINVAL,
                        "%s:%lld: \"solution\" has no complete \\boxed{...} final answer and the row has no "
                        "string \"answer\"",
                        file, (long long)line);
    *gt = strdup(json_string_value(ans));
    return *gt ? DF_OK : df_error(DF_ENOMEM, "out of memory");
}

/* extra_info: split, index, then the raw question / solution and MATH's labels when present. */
static json_t *extra_info(json_t *raw, const char *split, int64_t index, const char *q, const char *sol)
{
    json_t *e = json_pack("{s:s, s:I, s:s, s:s}", "split", split, "index", (json_int_t)index, "question", q,
                          "answer", sol);
    static const char *const OPTIONAL[] = {"subject", "type", "level", "unique_id"};
    for (size_t i = 0; e && i < sizeof OPTIONAL / sizeof *OPTIONAL; i++)
        if (copy_optional(raw, e, OPTIONAL[i])) {
            json_decref(e);
            return NULL;
        }
    return e;
}

/* One converted row, as a Python json.dumps line, appended to `out`. */
static int convert_row(void *user, json_t *raw, const char *file, int64_t line, const char *split, int64_t index,
                       df_jsonl_buf *out)
{
    const char *source = user; /* the data_source to write */
    const char *q, *sol;
    char *gt = NULL;
    int rc = df_jsonl_get_string(raw, "problem", file, line, &q);
    if (rc || (rc = df_jsonl_get_string(raw, "solution", file, line, &sol)) ||
        (rc = ground_truth(raw, sol, file, line, &gt)))
        return rc;
    df_jsonl_buf content = {0};
    bool ok = df_jsonl_buf_addf(&content, "%s %s", q, DF_MATH_INSTRUCTION);
    json_t *extra = ok ? extra_info(raw, split, index, q, sol) : NULL;
    json_t *row = extra ? json_pack("{s:s, s:[{s:s, s:s}], s:s, s:{s:s, s:s}, s:o}", "data_source", source, //
                                    "prompt", "role", "user", "content", content.p,                         //
                                    "ability", "math",                                                      //
                                    "reward_model", "style", "rule", "ground_truth", gt,                    //
                                    "extra_info", extra)
                        : NULL;
    ok = df_jsonl_buf_add_py_line(out, row);
    free(content.p);
    free(gt);
    return ok ? DF_OK : df_error(DF_ENOMEM, "%s:%lld: out of memory", file, (long long)line);
}

int df_math_convert(const char *in_path, const char *out_path, const char *split, const char *data_source,
                    int64_t *n_rows)
{
    if (!in_path || !out_path)
        return df_error(DF_EINVAL, "math: input and output paths are required");
    const char *source = data_source && data_source[0] ? data_source : DF_MATH_DATA_SOURCE;
    return df_jsonl_convert(in_path, out_path, split, true, convert_row, (void *)source, n_rows);
}
