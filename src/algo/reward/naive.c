/* verl's NaiveRewardManager over a df_batch (include/distflow/reward.h). */
#include "distflow/reward.h"

#include "algo/reward/reward_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int need_str_col(const df_batch *b, const char *name)
{
    const df_column *c = df_batch_column(b, name);
    if (!c)
        return df_error(DF_ENOTFOUND, "reward manager: batch has no column %s", name);
    if (c->kind != DF_COL_STR)
        return df_error(DF_EINVAL, "reward manager: column %s must hold strings", name);
    return DF_OK;
}

/* The key of a DF_REWARD_EXTRA_PREFIX column of this kind, else NULL. */
static const char *extra_key(const df_column *col, df_col_kind kind)
{
    const size_t pre = strlen(DF_REWARD_EXTRA_PREFIX);
    return col->kind == kind && !strncmp(col->name, DF_REWARD_EXTRA_PREFIX, pre) ? col->name + pre : NULL;
}

const char *df_reward_extra_key(const df_column *col)
{
    return extra_key(col, DF_COL_F32);
}

const char *df_reward_extra_json_key(const df_column *col)
{
    return extra_key(col, DF_COL_STR);
}

/* Drop the DF_REWARD_EXTRA_PREFIX columns of an earlier scoring of b. */
static void drop_extra(df_batch *b)
{
    for (int c = df_batch_num_columns(b) - 1; c >= 0; c--) {
        char name[DF_COL_NAME_MAX];
        const df_column *col = df_batch_column_at(b, c);
        if (!df_reward_extra_key(col) && !df_reward_extra_json_key(col))
            continue;
        snprintf(name, sizeof name, "%s", col->name); /* dropping frees the column */
        df_batch_drop(b, name);
    }
}

/* The Python function's extra keys as DF_REWARD_EXTRA_PREFIX<key> columns of b: F32 for the numeric
   ones, STR (JSON text) for the others. */
static int set_extra(const df_reward_python *p, df_batch *b)
{
    int n_keys, n_text;
    const char *const *names, *const *tnames, *const *texts;
    const double *v;
    df_reward_python_extra(p, &n_keys, &names, &v);
    df_reward_python_extra_json(p, &n_text, &tnames, &texts);
    int64_t n = df_batch_size(b);
    float *col = malloc((size_t)(n ? n : 1) * sizeof *col);
    int rc = col ? DF_OK : df_error(DF_ENOMEM, "reward manager: out of memory");
    for (int k = 0; !rc && k < n_keys + n_text; k++) {
        const char *key = k < n_keys ? names[k] : tnames[k - n_keys];
        char name[DF_COL_NAME_MAX];
        if (snprintf(name, sizeof name, DF_REWARD_EXTRA_PREFIX "%s", key) >= (int)sizeof name)
            rc = df_error(DF_EINVAL, "reward manager: extra key '%s' is too long", key);
        for (int64_t i = 0; !rc && k < n_keys && i < n; i++)
            col[i] = (float)v[(size_t)k * (size_t)n + (size_t)i];
        if (!rc)
            rc = k < n_keys ? df_batch_set_f32(b, name, col)
                            : df_batch_set_str(b, name, texts + (size_t)(k - n_keys) * (size_t)n);
    }
    free(col);
    return rc;
}

/* Every row scored by cfg->python in one request into *out (n results; NULL when n is 0). */
static int score_python(const df_reward_manager_cfg *cfg, const df_batch *b, const char *key,
                        const char *const *responses, bool has_extra, df_reward_result **out)
{
    int64_t n = df_batch_size(b);
    size_t m = (size_t)(n ? n : 1);
    const char **src = malloc(m * sizeof *src), **gt = malloc(m * sizeof *gt);
    const char **extra = malloc(m * sizeof *extra);
    *out = malloc(m * sizeof **out);
    int rc = src && gt && extra && *out ? DF_OK : df_error(DF_ENOMEM, "reward manager: out of memory");
    for (int64_t i = 0; !rc && i < n; i++) {
        src[i] = df_batch_str(b, key, i);
        gt[i] = df_batch_str(b, "ground_truth", i);
        extra[i] = has_extra ? df_batch_str(b, "extra_info", i) : NULL;
    }
    if (!rc)
        rc = df_reward_python_score(cfg->python, n, src, responses, gt, extra, *out);
    free(src);
    free(gt);
    free(extra);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

int df_reward_naive(const df_reward_manager_cfg *cfg, df_batch *b, const char *const *responses,
                    float *scores, float *acc, int64_t *n_empty)
{
    const char *key = (cfg && cfg->reward_fn_key && cfg->reward_fn_key[0]) ? cfg->reward_fn_key
                                                                           : "data_source";
    df_reward_fn custom = cfg ? cfg->compute_score : NULL;
    int64_t n = df_batch_size(b);
    if (n > 0 && !responses)
        return df_error(DF_EINVAL, "reward manager: no decoded responses for %lld rows", (long long)n);
    const df_column *resp = df_batch_column(b, "response_ids");
    if (!resp)
        return df_error(DF_ENOTFOUND, "reward manager: batch has no column response_ids");
    if (resp->kind != DF_COL_TOK_I32 && resp->kind != DF_COL_TOK_F32)
        return df_error(DF_EINVAL, "reward manager: response_ids is not a per-token column");
    int rc = need_str_col(b, key);
    if (rc || (rc = need_str_col(b, "ground_truth")))
        return rc;
    bool has_extra = df_batch_str(b, "extra_info", 0) != NULL;
    /* the rollout's agent loop: an environment episode's return replaces the rule score; tool step
       rewards and interaction turn rewards (agent_reward) do not enter it, as in verl, whose
       reward manager scores the decoded response alone (src/workers/rollout/agent_loop.h) */
    const float *env_ret = df_batch_f32(b, "env_return");

    df_reward_result *py = NULL; /* cfg->python's results, one request for the batch */
    if (cfg && cfg->python && !env_ret && (rc = score_python(cfg, b, key, responses, has_extra, &py)))
        return rc; /* a NULL response goes as "", as below */
    /* score every row first, so a failure leaves the batch untouched */
    double *sc = malloc((size_t)(n ? n : 1) * sizeof *sc);
    bool *ok = malloc((size_t)(n ? n : 1) * sizeof *ok);
    char (*pred)[DF_REWARD_PRED_MAX] = malloc((size_t)(n ? n : 1) * sizeof *pred);
    const char **preds = malloc((size_t)(n ? n : 1) * sizeof *preds);
    int64_t *valid = calloc((size_t)(n ? n : 1), sizeof *valid);
    if (!sc || !ok || !pred || !preds || !valid) {
        free(sc);
        free(ok);
        free(pred);
        free(preds);
        free(valid);
        free(py);
        return df_error(DF_ENOMEM, "reward manager: out of memory");
    }
    const char *last_src = NULL; /* one-entry cache: batches usually hold one data_source */
    bool any_pred = false;
    df_reward_fn fn = custom;
    df_reward_kw_fn kw = NULL;
    for (int64_t i = 0; !rc && i < n; i++) {
        const char *src = df_batch_str(b, key, i);
        if (env_ret) {
            sc[i] = env_ret[i], ok[i] = env_ret[i] > 0, pred[i][0] = 0, preds[i] = pred[i];
            continue;
        }
        if (!py && !custom && (!last_src || strcmp(src, last_src))) {
            if ((rc = df_reward_resolve(src, &fn, &kw))) {
                rc = df_error_wrap(rc, "reward manager: row %lld", (long long)i);
                break;
            }
            last_src = src;
        }
        df_reward_result res;
        if (py)
            res = py[i];
        else
            rc = df_reward_call(fn, kw, src, responses[i] ? responses[i] : "", df_batch_str(b, "ground_truth", i),
                                has_extra ? df_batch_str(b, "extra_info", i) : NULL, cfg ? cfg->kwargs : NULL,
                                &res);
        sc[i] = res.score;
        ok[i] = res.acc;
        memcpy(pred[i], res.extra_pred ? res.pred : "", res.extra_pred ? sizeof res.pred : 1);
        preds[i] = pred[i];
        valid[i] = res.extra_pred;
        any_pred |= res.extra_pred;
        if (rc)
            rc = df_error_wrap(rc, "reward manager: scoring row %lld (data_source %s)",
                               (long long)i, src);
    }
    float *tls = NULL;
    if (!rc && any_pred) /* verl's reward_extra_info "pred": the dumps show it */
        rc = df_batch_set_str(b, "pred", preds);
    if (!rc && any_pred)
        rc = df_batch_set_i64(b, "pred_valid", valid);
    if (!rc && !any_pred) { /* not one left from an earlier scoring of this batch */
        df_batch_drop(b, "pred");
        df_batch_drop(b, "pred_valid");
    }
    drop_extra(b);
    if (!rc && py)
        rc = set_extra(cfg->python, b);
    if (!rc)
        rc = df_batch_alloc_tok_f32_like(b, "token_level_scores", "response_ids", &tls);
    free(pred);
    free(preds);
    free(valid);
    free(py);
    if (rc) {
        df_batch_drop(b, "pred");
        df_batch_drop(b, "pred_valid");
        drop_extra(b);
        free(sc);
        free(ok);
        return rc;
    }
    const int64_t *off = df_batch_offsets(b, "token_level_scores");
    int64_t empty = 0;
    for (int64_t i = 0; i < n; i++) {
        if (off[i + 1] > off[i])
            tls[off[i + 1] - 1] = (float)sc[i]; /* verl: reward_tensor[i, valid_response_length - 1] */
        else
            empty++;
        if (scores)
            scores[i] = (float)sc[i];
        if (acc)
            acc[i] = ok[i] ? 1.0f : 0.0f;
    }
    free(sc);
    free(ok);
    if (n_empty)
        *n_empty = empty;
    return DF_OK;
}
