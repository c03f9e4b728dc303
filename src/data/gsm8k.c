/*
 * GSM8K raw -> verl RL schema, following verl's examples/data_preprocess/gsm8k.py
 * (see include/distflow/dataset.h for the row layout).
 */
#include "distflow/dataset.h"

#include "data/jsonl.h"

#include <stdlib.h>
#include <string.h>

/* Length of `-?[0-9.,]+` at p (the regex backtracks the '-' when no digit
 * follows, which fails the match at this position either way); 0 if none. */
static size_t number_len(const char *p)
{
    const char *q = p + (*p == '-');
    const char *d = q;
    while ((*q >= '0' && *q <= '9') || *q == '.' || *q == ',')
        q++;
    return q == d ? 0 : (size_t)(q - p);
}

bool df_gsm8k_extract_answer(const char *answer, char *out, size_t cap)
{
    for (const char *p = strstr(answer, "#### "); p; p = strstr(p + 1, "#### ")) {
        size_t n = number_len(p + 5);
        if (!n)
            continue;
        size_t k = 0;
        for (size_t j = 0; j < n; j++) {
            if (p[5 + j] == ',')
                continue;
            if (k + 1 >= cap)
                return false;
            out[k++] = p[5 + j];
        }
        if (!cap)
            return false;
        out[k] = '\0';
        return true;
    }
    return false;
}

/* One converted row, as a Python json.dumps line, appended to `out`. */
/* verl's multi-turn layout (df_gsm8k_convert_tool): a system message, the tool's and the
   interaction's kwargs in extra_info. */
static json_t *tool_row(json_t *row, const char *q, const char *gt)
{
    json_t *prompt = json_object_get(row, "prompt"), *extra = json_object_get(row, "extra_info");
    json_t *sys = json_pack("{s:s, s:s}", "role", "system", "content", DF_GSM8K_TOOL_SYSTEM);
    json_t *tk = json_pack("{s:{s:{s:s}}}", "calc_gsm8k_reward", "create_kwargs", "ground_truth", gt);
    json_t *ik = json_pack("{s:s, s:s}", "query", q, "ground_truth", gt);
    if (!sys || !tk || !ik || json_array_insert_new(prompt, 0, sys) || json_object_set_new(extra, "need_tools_kwargs", json_true()) ||
        json_object_set_new(extra, "tools_kwargs", tk) || json_object_set_new(extra, "interaction_kwargs", ik)) {
        json_decref(row);
        return NULL;
    }
    return row;
}

static int convert_row(void *user, json_t *raw, const char *file, int64_t line, const char *split,
                       int64_t index, df_jsonl_buf *out)
{
    bool tools = user != NULL;
    const char *q, *a;
    int rc = df_jsonl_get_string(raw, "question", file, line, &q);
    if (rc || (rc = df_jsonl_get_string(raw, "answer", file, line, &a)))
        return rc;
    size_t alen = strlen(a);
    char *gt = malloc(alen + 1);
    if (!gt)
        return df_error(DF_ENOMEM, "out of memory");
    if (!df_gsm8k_extract_answer(a, gt, alen + 1)) {
        free(gt);
        return df_error(DF_EINVAL, "%s:%lld: answer has no \"#### <number>\" final answer",
                        file, (long long)line);
    }
    df_jsonl_buf content = {0};
    bool ok = df_jsonl_buf_addf(&content, "%s %s", q, DF_GSM8K_INSTRUCTION);
    json_t *row = ok ? json_pack("{s:s, s:[{s:s, s:s}], s:s, s:{s:s, s:s}, s:{s:s, s:I, s:s, s:s}}",
                                 "data_source", "openai/gsm8k",                //
                                 "prompt", "role", "user", "content", content.p, //
                                 "ability", "math",                            //
                                 "reward_model", "style", "rule", "ground_truth", gt,
                                 "extra_info", "split", split, "index", (json_int_t)index,
                                 "answer", a, "question", q)
                     : NULL;
    if (row && tools)
        row = tool_row(row, q, gt);
    ok = row && df_jsonl_buf_add_py_line(out, row);
    free(content.p);
    free(gt);
    return ok ? DF_OK : df_error(DF_ENOMEM, "%s:%lld: out of memory", file, (long long)line);
}

int df_gsm8k_convert(const char *in_path, const char *out_path, const char *split,
                     int64_t *n_rows)
{
    if (!in_path || !out_path)
        return df_error(DF_EINVAL, "gsm8k: input and output paths are required");
    return df_jsonl_convert(in_path, out_path, split, true, convert_row, NULL, n_rows);
}

int df_gsm8k_convert_tool(const char *in_path, const char *out_path, const char *split, int64_t *n_rows)
{
    static int tools = 1;
    if (!in_path || !out_path)
        return df_error(DF_EINVAL, "gsm8k: input and output paths are required");
    return df_jsonl_convert(in_path, out_path, split, true, convert_row, &tools, n_rows);
}
