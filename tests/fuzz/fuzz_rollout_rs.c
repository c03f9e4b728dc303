/*
 * Fuzz target: algorithm.rollout_correction's rollout_rs and rollout_rs_threshold (src/algo/
 * rollout_corr_is.c, df_rollout_rs_parse), the input being "options\nthresholds" (no newline: no
 * threshold). Properties: refused with a "rollout_rs..." message and nothing parsed, or parsed
 * into 1 to 11 distinct known options whose bounds hold (k1: 0 < lower <= upper; k2 / k3: upper > 0,
 * no seq_max_k1), which then run on a small batch with a tool token: the output mask is the input
 * mask with tokens only removed, the truncated weights within [0, 2]. df_fuzz_status is the
 * parser's status.
 */
#include "fuzz.h"

#include "distflow/algo.h"
#include "distflow/common.h"

#include <string.h>

int df_fuzz_status;

static void check_parsed(const df_rollout_rs *rs)
{
    DF_FUZZ_CHECK(rs->n >= 1 && rs->n <= 11);
    for (int i = 0; i < rs->n; i++) {
        const df_rollout_rs_opt *o = &rs->opt[i];
        DF_FUZZ_CHECK(o->k >= 1 && o->k <= 3);
        DF_FUZZ_CHECK(o->level >= DF_ROLLOUT_RS_TOKEN && o->level <= DF_ROLLOUT_RS_SEQ_MAX);
        DF_FUZZ_CHECK(!(o->level == DF_ROLLOUT_RS_SEQ_MAX && o->k == 1) && o->upper > 0);
        DF_FUZZ_CHECK(o->k != 1 || (o->lower > 0 && o->lower <= o->upper));
        for (int j = 0; j < i; j++)
            DF_FUZZ_CHECK(strcmp(o->name, rs->opt[j].name));
    }
}

/* Two responses of 3 and 2 tokens, the second token of the first a tool token. */
static void run(const df_rollout_rs *rs)
{
    const int64_t off[] = {0, 3, 5};
    const int32_t mask[] = {1, 0, 1, 1, 1};
    const float old[] = {-1.0f, -2.0f, -0.5f, -3.0f, -0.1f}, ro[] = {-1.2f, -9.0f, -0.4f, -2.0f, -0.1f};
    int32_t out[5];
    const df_rollout_corr_cfg cfg = {.is_level = DF_ROLLOUT_IS_TOKEN, .is_threshold = 2.0, .rs = rs};
    float w[5];
    double norm[2] = {0, 0};
    DF_FUZZ_CHECK(df_rollout_correction(&cfg, 2, off, mask, old, ro, w, out, norm, NULL) == DF_OK);
    for (int t = 0; t < 5; t++)
        DF_FUZZ_CHECK((out[t] == 0 || out[t] == 1) && out[t] <= mask[t] && w[t] >= 0 && w[t] <= 2.0f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    df_clear_error();
    char *text = df_fuzz_cstr(data, size);
    char *nl = strchr(text, '\n');
    if (nl)
        *nl = '\0';
    df_rollout_rs rs;
    df_fuzz_status = df_rollout_rs_parse(text, nl ? nl + 1 : NULL, &rs);
    if (df_fuzz_status) {
        const bool named = !strncmp(df_last_error(), "rollout_rs", 10);
        DF_FUZZ_CHECK(rs.n == 0 && (df_fuzz_status == DF_ENOMEM || named));
    } else if (rs.n) {
        check_parsed(&rs);
        run(&rs);
    }
    free(text);
    return 0;
}
