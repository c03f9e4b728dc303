/* A frozen reward model scoring token sequences at their last token (reward_model.h). */
#include "engine/reward_model.h"

#include "distflow/batch.h"
#include "engine/packing.h"
#include "engine/train_core.h"

#include <stdlib.h>
#include <string.h>

struct df_reward_model {
    df_train_core c; /* frozen: the model, forward-only activations, packing, precision */
    df_reward_model_params p;
};

int df_reward_model_create(df_model *model, const df_reward_model_params *p, df_reward_model **out)
{
    if (!model || !p || !out)
        return df_error(DF_EINVAL, "df_reward_model_create: NULL argument");
    if (model->cfg.num_labels != 1)
        return df_error(DF_EINVAL,
                        "a reward model needs a score head with one label (num_labels 1), got "
                        "num_labels %lld",
                        (long long)model->cfg.num_labels);
    df_reward_model *rm = calloc(1, sizeof *rm);
    if (!rm)
        return df_error(DF_ENOMEM, "out of memory creating the reward model");
    rm->p = *p;
    df_core_optim none = {0};
    int rc = df_train_core_init(&rm->c, model, &none, false, 0, "reward model");
    /* bf16: frozen, so only the bf16 copy of the matmul weights is kept (verl loads its reward
       model in bf16), made at the first score as the reference's */
    if (!rc && (rc = df_train_core_set_precision(&rm->c, p->bf16, p->bf16)))
        rm->c.model = NULL; /* the caller keeps it */
    if (rc) {
        df_reward_model_free(rm);
        return rc;
    }
    *out = rm;
    return DF_OK;
}

int df_reward_model_load(const char *dir, const df_reward_model_params *p, df_reward_model **out)
{
    *out = NULL;
    df_model *m;
    int rc = df_model_load(dir, &m);
    if (rc)
        return rc;
    if (m->cfg.num_labels != 1) {
        df_model_free(m);
        return df_error(DF_EUNSUPPORTED,
                        "%s/config.json: a causal LM (architectures *ForCausalLM or none) is "
                        "not a reward model; a *ForSequenceClassification or *ForTokenClassification "
                        "checkpoint with one label is needed",
                        dir);
    }
    if ((rc = df_reward_model_create(m, p, out)))
        df_model_free(m);
    return rc;
}

void df_reward_model_free(df_reward_model *rm)
{
    if (!rm)
        return;
    df_train_core_release(&rm->c);
    free(rm);
}

int df_reward_model_set_backend(df_reward_model *rm, const df_backend *be)
{
    return df_train_core_set_backend(&rm->c, be);
}

const df_model *df_reward_model_model(const df_reward_model *rm)
{
    return rm->c.model;
}

bool df_reward_model_bf16(const df_reward_model *rm) { return rm->c.bf16; }

/*
 * The sequences as a batch the core packs: prompt_ids = the whole sequence and a
 * one-token response_ids repeating its last token, so that the one output row per
 * sequence (the row that predicts response token 0) is the sequence's last token. The
 * extra token comes after that row, which the causal mask keeps it from seeing.
 */
static int as_batch(int64_t n, const int64_t *offsets, const int32_t *tokens, int64_t vocab, df_batch **out)
{
    int64_t *ro = malloc((size_t)(n + 1) * sizeof *ro);
    int32_t *last = malloc((size_t)(n ? n : 1) * sizeof *last);
    df_batch *b = df_batch_new(n);
    int rc = ro && last && b ? DF_OK : df_error(DF_ENOMEM, "out of memory packing reward model inputs");
    for (int64_t i = 0; i < n && !rc; i++) {
        if (offsets[i + 1] <= offsets[i])
            rc = df_error(DF_EINVAL, "reward model: sequence %lld is empty", (long long)i);
        for (int64_t t = offsets[i]; t < offsets[i + 1] && !rc; t++)
            if (tokens[t] < 0 || tokens[t] >= vocab)
                rc = df_error(DF_EINVAL,
                              "reward model: token %d at position %lld of sequence %lld is outside "
                              "its vocabulary of %lld",
                              tokens[t], (long long)(t - offsets[i]), (long long)i, (long long)vocab);
        if (!rc)
            last[i] = tokens[offsets[i + 1] - 1];
        ro[i] = i;
    }
    if (!rc) {
        ro[n] = n;
        rc = df_batch_set_tok_i32(b, "prompt_ids", offsets, tokens);
    }
    if (!rc)
        rc = df_batch_set_tok_i32(b, "response_ids", ro, last);
    free(ro);
    free(last);
    if (rc)
        df_batch_free(b);
    *out = rc ? NULL : b;
    return rc;
}

int df_reward_model_score(df_reward_model *rm, int64_t n, const int64_t *offsets, const int32_t *tokens,
                          float *scores)
{
    if (!rm || n < 0 || (n > 0 && (!offsets || !tokens || !scores)))
        return df_error(DF_EINVAL, "df_reward_model_score: NULL argument");
    if (n == 0)
        return DF_OK;
    df_train_core *k = &rm->c;
    df_batch *b;
    int rc = as_batch(n, offsets, tokens, k->model->cfg.vocab_size, &b);
    if (rc)
        return rc;
    /* the token budget counts each sequence's extra token (one per sequence) */
    int64_t *bounds = NULL, n_mb = 0;
    rc = df_train_core_plan(k, b, rm->p.micro_batch_size, rm->p.max_token_len, &bounds, &n_mb);
    for (int64_t m = 0; m < n_mb && !rc; m++)
        if (!(rc = df_pack_responses(&k->pk, b, bounds[m], bounds[m + 1])))
            rc = df_model_forward_values(k->model, k->acts, &k->pk.sb, scores + bounds[m]);
    free(bounds);
    df_batch_free(b);
    return rc ? df_error_wrap(rc, "reward model") : DF_OK;
}
