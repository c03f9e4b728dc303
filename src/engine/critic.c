/* The PPO critic: values of response tokens and the clipped value update (critic.h). */
#include "engine/critic.h"

#include "distflow/algo.h"
#include "engine/packing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per-token scratch of the core: predictions, their gradient, aggregation weights. */
enum { B_VPRED, B_DVPRED, B_W, N_BUF };

/* A mini-batch's statistics, summed over micro-batches and DP ranks. */
enum { S_VF_LOSS, S_CLIPFRAC, S_VPRED, N_SUMS };
static const char *const SUM_NAMES[N_SUMS] = {"vf_loss", "vf_clipfrac", "vpred_mean"};

struct df_critic {
    df_train_core c; /* value model, gradients, AdamW, activations, DP comm, steps */
    df_critic_params p;
};

static int check_loss(const df_critic_loss *l)
{
    int64_t off[1] = {0};
    int rc = df_loss_agg_weights_ex(l->loss_agg_mode, 0, off, 1, 1, 1, NULL);
    if (rc)
        return df_error_wrap(rc, "critic.loss_agg_mode");
    if (!(l->cliprange_value >= 0) || !isfinite(l->cliprange_value))
        return df_error(DF_EINVAL, "critic.cliprange_value must be a finite number >= 0, got %g",
                        l->cliprange_value);
    return DF_OK;
}

int df_critic_create(df_model *model, const df_critic_params *p, df_critic **out)
{
    if (!model || !p || !out)
        return df_error(DF_EINVAL, "df_critic_create: NULL argument");
    if (model->cfg.num_labels != 1)
        return df_error(DF_EINVAL,
                        "the critic needs a value model (num_labels 1, a score head), got num_labels %lld; "
                        "convert a causal LM with df_model_to_value_model",
                        (long long)model->cfg.num_labels);
    int rc = check_loss(&p->loss);
    if (rc)
        return rc;
    df_critic *c = calloc(1, sizeof *c);
    if (!c)
        return df_error(DF_ENOMEM, "out of memory creating the critic");
    c->p = *p;
    if ((rc = df_train_core_init(&c->c, model, &p->optim, true, N_BUF, "critic"))) {
        free(c);
        return rc;
    }
    c->c.progress_label = p->progress_label;
    c->c.checkpoint = p->gradient_checkpointing;
    if ((rc = df_train_core_set_precision(&c->c, p->bf16, false))) {
        c->c.model = NULL; /* the caller keeps it */
        df_critic_free(c);
        return rc;
    }
    *out = c;
    return DF_OK;
}

void df_critic_free(df_critic *c)
{
    if (!c)
        return;
    df_train_core_release(&c->c);
    free(c);
}

int df_critic_set_loss(df_critic *c, const df_critic_loss *l)
{
    int rc = check_loss(l);
    if (!rc)
        c->p.loss = *l;
    return rc;
}

void df_critic_set_comm(df_critic *c, df_comm *dp)
{
    df_train_core_set_comm(&c->c, dp);
}

int df_critic_set_backend(df_critic *c, const df_backend *be)
{
    return df_train_core_set_backend(&c->c, be);
}
df_model *df_critic_model(df_critic *c)
{
    return c->c.model;
}
const df_train_core *df_critic_core(const df_critic *c)
{
    return &c->c;
}
int64_t df_critic_step_count(const df_critic *c)
{
    return c->c.steps;
}
int df_critic_save_state(df_critic *c, const char *path)
{
    return df_train_core_save_state(&c->c, path);
}

int df_critic_save_lora(const df_critic *c, const char *dir, const char *base_model)
{
    return df_train_core_save_lora(&c->c, dir, base_model);
}
int df_critic_load_state(df_critic *c, const char *path)
{
    return df_train_core_load_state(&c->c, path);
}

int df_critic_gather_begin(df_critic *c, bool saver)
{
    return df_train_core_gather_begin(&c->c, saver);
}

int df_critic_gather_end(df_critic *c)
{
    return df_train_core_gather_end(&c->c);
}

int df_critic_compute_values(df_critic *c, df_batch *b)
{
    static const char *const cols[] = {"prompt_ids", "response_ids"};
    int rc = df_train_core_need_columns(b, cols, 2, "critic compute_values");
    float *dst;
    if (rc || (rc = df_batch_alloc_tok_f32_like(b, "values", "response_ids", &dst)))
        return rc;
    int64_t *bounds, n_mb;
    df_train_core *k = &c->c;
    if ((rc = df_train_core_plan(k, b, c->p.forward_micro_batch_size, c->p.forward_max_token_len, &bounds,
                                 &n_mb)))
        return rc;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    for (int64_t m = 0; m < n_mb && !rc; m++)
        if (!(rc = df_pack_responses(&k->pk, b, bounds[m], bounds[m + 1])))
            rc = df_model_forward_values(k->model, k->acts, &k->pk.sb, dst + ro[bounds[m]]);
    free(bounds);
    return rc;
}

/* Loss and gradient of micro-batch [s, e) of a mini-batch of global_tokens / global_seqs
   (over the DP group); df_core_loss.micro. */
static int value_micro(void *user, const df_batch *b, int64_t s, int64_t e, int64_t global_tokens,
                       int64_t global_seqs, double *sums)
{
    df_critic *c = user;
    df_train_core *k = &c->c;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    int64_t base = ro[s], n_tok = ro[e] - ro[s];
    float *v = k->buf[B_VPRED], *dv = k->buf[B_DVPRED], *w = k->buf[B_W];
    int64_t *offs = NULL;
    int rc = df_pack_responses(&k->pk, b, s, e);
    if (!rc)
        rc = df_model_forward_values(k->model, k->acts, &k->pk.sb, v);
    if (rc || (rc = df_train_core_rebased_offsets(k, ro, s, e, &offs)))
        return rc;
    const int32_t *mask = NULL; /* multi-turn: appended tokens have no value loss (verl) */
    rc = df_batch_response_mask(b, &mask);
    mask = mask ? mask + base : NULL;
    if (!rc)
        rc = df_loss_agg_weights_masked(c->p.loss.loss_agg_mode, e - s, offs, mask, global_tokens,
                                        global_seqs, c->p.loss.loss_agg_norm_length, w);
    df_value_loss_input in = {.n = e - s,
                              .offsets = offs,
                              .vpreds = v,
                              .values = (const float *)df_batch_column(b, "values")->data + base,
                              .returns = (const float *)df_batch_column(b, "returns")->data + base,
                              .weights = w,
                              .cliprange_value = c->p.loss.cliprange_value,
                              .response_mask = mask};
    df_value_loss_output st = {.grad = dv};
    if (!rc)
        rc = df_value_loss(&in, &st);
    if (!rc)
        rc = df_model_backward_values(k->model, k->acts, &k->pk.sb, dv, df_train_core_model_grads(k));
    if (rc)
        return rc;
    /* the loss is normalised by the mini-batch totals; token means are weighted by tokens */
    df_loss_agg_count_masked(e - s, offs, mask, &n_tok, NULL);
    double frac = (double)n_tok / (double)global_tokens;
    sums[S_VF_LOSS] += st.loss;
    sums[S_CLIPFRAC] += st.vf_clipfrac * frac;
    sums[S_VPRED] += st.vpred_mean * frac;
    return DF_OK;
}

/* A mini-batch's global statistics under verl's critic/ names; df_core_loss.record. */
static void value_record(void *user, const double *sums, df_metrics *m)
{
    (void)user;
    df_metrics_mean(m, "critic/vf_loss", sums[S_VF_LOSS]);
    df_metrics_mean(m, "critic/vf_clipfrac", sums[S_CLIPFRAC]);
    df_metrics_mean(m, "critic/vpred_mean", sums[S_VPRED]);
}

int df_critic_update(df_critic *c, df_batch *b, df_metrics *m)
{
    static const char *const cols[] = {"prompt_ids", "response_ids", "values", "returns"};
    int rc = df_train_core_need_columns(b, cols, 4, "critic update");
    df_core_loss loss = {.n_sums = N_SUMS,
                         .micro_rows = c->p.micro_batch_size,
                         .micro_tokens = c->p.max_token_len,
                         .shuffle = c->p.shuffle,
                         .shuffle_seed = c->p.shuffle_seed,
                         .micro = value_micro,
                         .record = value_record,
                         .user = c,
                         .prefix = "critic",
                         .sum_names = SUM_NAMES};
    return df_train_core_update(&c->c, b, c->p.mini_batch_size, c->p.loss.ppo_epochs, &loss, m, rc);
}
