/* Actor / reference role: log-probs and the PPO / SFT updates (actor.h). */
#include "engine/actor.h"

#include "distflow/algo.h"
#include "distflow/comm.h"
#include "distflow/optim.h"
#include "distflow/rng.h"
#include "engine/packing.h"
#include "util/timeutil.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct df_actor {
    df_model *model;
    df_actor_params p;
    bool trainable;
    float *grads;     /* [n_params] */
    df_adamw *opt;
    df_acts *acts;
    int64_t acts_tokens, acts_out;
    df_packed pk;
    float *buf[4];    /* per-token scratch: logp, entropy, dlogp, dentropy */
    float *w;         /* aggregation weights */
    float *wpg;       /* policy-loss weights: w times the TIS weights */
    int64_t n_micro;  /* micro-batches of this update so far: keys clip_cov's random choice */
    int64_t buf_cap;
    int64_t steps;
    df_progress bar;  /* update_policy's TTY bar, over samples */
    int64_t bar_done;
    df_comm *dp;      /* data-parallel group (borrowed); NULL: this rank alone */
};

/* Gradient all-reduce bucket: 8 Mi floats (32 MiB) per collective call, which bounds the
   temporary buffer MPI's reduction allocates (a 0.5B model's blob is 2 GiB). */
enum { GRAD_BUCKET = 8 << 20, DP_MAX_VALS = 8 };

int df_actor_create(df_model *model, const df_actor_params *p, bool trainable, df_actor **out)
{
    df_actor *a = calloc(1, sizeof *a);
    if (!a)
        return df_error(DF_ENOMEM, "out of memory creating the actor");
    a->model = model;
    a->p = *p;
    a->trainable = trainable;
    if (trainable) {
        a->grads = calloc((size_t)model->n_params, sizeof(float));
        df_adamw_config oc = {.beta1 = p->beta1, .beta2 = p->beta2, .eps = p->adam_eps,
                              .weight_decay = p->weight_decay};
        int rc = a->grads ? df_adamw_create(&oc, model->n_params, &a->opt)
                          : df_error(DF_ENOMEM, "out of memory allocating gradients");
        if (rc) {
            a->model = NULL;
            df_actor_free(a);
            return rc;
        }
    }
    *out = a;
    return DF_OK;
}

void df_actor_free(df_actor *a)
{
    if (!a)
        return;
    df_model_free(a->model);
    free(a->grads);
    df_adamw_free(a->opt);
    df_acts_free(a->acts);
    df_packed_free(&a->pk);
    for (int i = 0; i < 4; i++)
        free(a->buf[i]);
    free(a->w);
    free(a->wpg);
    free(a);
}

void df_actor_set_loss_params(df_actor *a, const df_actor_params *p)
{
    a->p.policy_loss = p->policy_loss;
    a->p.loss_agg_mode = p->loss_agg_mode;
    a->p.clip_ratio_low = p->clip_ratio_low;
    a->p.clip_ratio_high = p->clip_ratio_high;
    a->p.clip_ratio_c = p->clip_ratio_c;
    a->p.entropy_coeff = p->entropy_coeff;
    a->p.kl_loss_coef = p->kl_loss_coef;
    a->p.kl_loss_type = p->kl_loss_type;
    a->p.ppo_epochs = p->ppo_epochs;
    a->p.loss_agg_norm_length = p->loss_agg_norm_length;
    a->p.policy_drift_coeff = p->policy_drift_coeff;
    a->p.cpgd_drift_clip = p->cpgd_drift_clip;
    a->p.clip_cov_ratio = p->clip_cov_ratio;
    a->p.clip_cov_lb = p->clip_cov_lb;
    a->p.clip_cov_ub = p->clip_cov_ub;
    a->p.kl_cov_ratio = p->kl_cov_ratio;
    a->p.ppo_kl_coef = p->ppo_kl_coef;
}

void df_actor_set_comm(df_actor *a, df_comm *dp)
{
    a->dp = dp && df_comm_size(dp) > 1 ? dp : NULL;
}

df_model *df_actor_model(df_actor *a) { return a->model; }
int64_t df_actor_step_count(const df_actor *a) { return a->steps; }

/* Make sure activations and per-token buffers fit every micro-batch of a plan. */
static int reserve(df_actor *a, const df_batch *b, const int64_t *bounds, int64_t n_mb)
{
    int64_t max_tok, max_out;
    df_plan_extent(b, bounds, n_mb, &max_tok, &max_out);
    if (max_tok == 0) /* an empty batch (a DP rank's empty shard) needs nothing */
        return DF_OK;
    if (!a->acts || max_tok > a->acts_tokens || max_out > a->acts_out) {
        df_acts_free(a->acts);
        a->acts = NULL;
        a->acts_tokens = max_tok > a->acts_tokens ? max_tok : a->acts_tokens;
        a->acts_out = max_out > a->acts_out ? max_out : a->acts_out;
        int rc = df_acts_create(&a->model->cfg, a->acts_tokens, a->acts_out, &a->acts);
        if (rc)
            return rc;
    }
    if (max_out > a->buf_cap) {
        for (int i = 0; i < 4; i++) {
            free(a->buf[i]);
            a->buf[i] = malloc((size_t)max_out * sizeof(float));
        }
        free(a->w);
        free(a->wpg);
        a->w = malloc((size_t)max_out * sizeof(float));
        a->wpg = malloc((size_t)max_out * sizeof(float));
        a->buf_cap = max_out;
        for (int i = 0; i < 4; i++)
            if (!a->buf[i])
                return df_error(DF_ENOMEM, "out of memory for %lld token buffers", (long long)max_out);
        if (!a->w || !a->wpg)
            return df_error(DF_ENOMEM, "out of memory for %lld token buffers", (long long)max_out);
    }
    return DF_OK;
}

static int plan(df_actor *a, const df_batch *b, bool forward_only, int64_t **bounds, int64_t *n_mb)
{
    int64_t rows = forward_only ? a->p.logprob_micro_batch_size : a->p.micro_batch_size;
    int64_t toks = forward_only ? a->p.logprob_max_token_len : a->p.max_token_len;
    int rc = df_plan_micro_batches(b, rows, toks, bounds, n_mb);
    if (!rc && (rc = reserve(a, b, *bounds, *n_mb)))
        free(*bounds);
    return rc;
}

/*
 * Reduce v[0..n) over the DP group with `op`. `rc` is this rank's status so far and
 * travels with the values as a flag, so when any rank failed every rank returns an
 * error here rather than waiting for it in a later collective. No-op without DP.
 */
static int dp_reduce(df_actor *a, double *v, int n, df_comm_op op, int rc, const char *where)
{
    if (!a->dp)
        return rc;
    assert(n < DP_MAX_VALS);
    double buf[DP_MAX_VALS];
    memcpy(buf, v, (size_t)n * sizeof *v);
    buf[n] = rc ? 1.0 : 0.0; /* SUM counts failed ranks, MAX flags any */
    int crc = df_comm_allreduce(a->dp, buf, n + 1, DF_COMM_FLOAT64, op);
    if (rc)
        return rc;
    if (crc)
        return df_error_wrap(crc, "actor: data-parallel all-reduce of %s", where);
    if (buf[n] > 0)
        return df_error(DF_EINTERNAL,
                        "actor: another rank of the data-parallel group (%d ranks) failed before "
                        "the all-reduce of %s; its own error says why",
                        df_comm_size(a->dp), where);
    memcpy(v, buf, (size_t)n * sizeof *v);
    return DF_OK;
}

/* Sum the gradient blob over the DP group in buckets (flat layout, DESIGN.md §8). */
static int dp_allreduce_grads(df_actor *a)
{
    int64_t n = a->model->n_params;
    for (int64_t off = 0; a->dp && off < n; off += GRAD_BUCKET) {
        int64_t k = n - off < GRAD_BUCKET ? n - off : GRAD_BUCKET;
        int rc = df_comm_allreduce(a->dp, a->grads + off, k, DF_COMM_FLOAT32, DF_COMM_SUM);
        if (rc)
            return df_error_wrap(rc, "actor: gradient all-reduce of elements %lld..%lld of %lld",
                                 (long long)off, (long long)(off + k), (long long)n);
    }
    return DF_OK;
}

/* Log-probs of this rank's rows, and the entropy sum and token count when `ent_sum`. */
static int log_prob_local(df_actor *a, df_batch *b, const char *out_col, double *ent_sum,
                          int64_t *ent_n)
{
    float *dst;
    int rc = df_batch_alloc_tok_f32_like(b, out_col, "response_ids", &dst);
    if (rc)
        return rc;
    int64_t *bounds, n_mb;
    if ((rc = plan(a, b, true, &bounds, &n_mb)))
        return rc;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    for (int64_t m = 0; m < n_mb && !rc; m++) {
        if ((rc = df_pack_responses(&a->pk, b, bounds[m], bounds[m + 1])))
            break;
        float *ent = ent_sum ? a->buf[1] : NULL;
        rc = df_model_forward(a->model, a->acts, &a->pk.sb, a->p.temperature, dst + ro[bounds[m]], ent);
        for (int64_t j = 0; ent && j < a->pk.sb.n_out; j++)
            *ent_sum += ent[j];
        *ent_n += a->pk.sb.n_out;
    }
    free(bounds);
    return rc;
}

int df_actor_compute_log_prob(df_actor *a, df_batch *b, const char *out_col, double *entropy_mean)
{
    double ent[2] = {0, 0}; /* entropy sum, tokens */
    int64_t n_tok = 0;
    int rc = log_prob_local(a, b, out_col, entropy_mean ? &ent[0] : NULL, &n_tok);
    if (!entropy_mean)
        return rc;
    ent[1] = (double)n_tok;
    if ((rc = dp_reduce(a, ent, 2, DF_COMM_SUM, rc, "the entropy mean")))
        return rc;
    *entropy_mean = ent[1] > 0 ? ent[0] / ent[1] : 0.0;
    return DF_OK;
}

static double current_lr(const df_actor *a)
{
    df_lr_schedule s = {.kind = a->p.cosine ? DF_LR_COSINE : DF_LR_CONSTANT,
                        .warmup_steps = a->p.warmup_steps, .total_steps = a->p.total_steps,
                        .min_lr_ratio = a->p.min_lr_ratio, .num_cycles = a->p.num_cycles};
    return a->p.lr * df_lr_schedule_factor(&s, a->steps);
}

/* Clip, step at `lr`, and record grad_norm / lr under `prefix` ("actor" or "train"). */
static int optimizer_step(df_actor *a, double lr, df_metrics *m, const char *prefix)
{
    char key[64];
    double norm = df_clip_grad_norm(a->grads, a->model->n_params, a->p.grad_clip);
    if (isfinite(norm)) {
        int rc = df_adamw_step(a->opt, a->model->params, a->grads, lr);
        if (rc)
            return rc;
    } /* else: verl skips the update on a non-finite norm */
    snprintf(key, sizeof key, "%s/grad_norm", prefix);
    df_metrics_mean(m, key, norm);
    snprintf(key, sizeof key, "%s/lr", prefix);
    df_metrics_set(m, key, lr);
    return DF_OK;
}

/* Offsets of rows [s, e) of a ragged column, rebased to 0. */
static int rebased_offsets(const int64_t *ro, int64_t s, int64_t e, int64_t **out)
{
    int64_t *o = malloc((size_t)(e - s + 1) * sizeof *o);
    if (!o)
        return df_error(DF_ENOMEM, "out of memory");
    for (int64_t i = s; i <= e; i++)
        o[i - s] = ro[i] - ro[s];
    *out = o;
    return DF_OK;
}

/* A mini-batch's loss statistics: sums over micro-batches (and DP ranks) of terms
   already normalised by the mini-batch totals. */
enum { S_PG_LOSS, S_KL_LOSS, S_ENTROPY, S_CLIPFRAC, S_CLIPFRAC_LOWER, S_PPO_KL, N_SUMS };

/* The policy loss of one micro-batch (n samples from token `base` of b) into *st. */
static int policy_loss(df_actor *a, const df_batch *b, int64_t n, const int64_t *offs,
                       int64_t base, const float *logp, df_policy_loss_output *st)
{
    const df_actor_params *p = &a->p;
    df_policy_loss_fn fn = NULL;
    int rc = df_policy_loss_lookup(p->policy_loss, &fn);
    if (rc)
        return rc;
    const float *old = (const float *)df_batch_column(b, "old_log_probs")->data + base;
    const float *adv = (const float *)df_batch_column(b, "advantages")->data + base;
    const float *w = a->w;
    if (p->tis_imp_ratio_cap > 0) { /* verl weights pg_losses only */
        const float *ro = (const float *)df_batch_column(b, "rollout_log_probs")->data + base;
        if ((rc = df_tis_weights(offs[n], old, ro, p->tis_imp_ratio_cap, a->w, a->wpg)))
            return rc;
        w = a->wpg;
    }
    /* clip_cov's random choice: one stream per (step, micro-batch, DP rank) */
    uint64_t rank = (uint64_t)(a->dp ? df_comm_rank(a->dp) : 0);
    uint64_t key = df_rng_key(p->seed, (uint64_t)a->steps, (uint64_t)a->n_micro++, rank);
    df_policy_loss_input in = {.n = n, .offsets = offs, .log_prob = logp, .old_log_prob = old,
                               .advantages = adv,
                               .weights = w, .clip_ratio_low = (float)p->clip_ratio_low,
                               .clip_ratio_high = (float)p->clip_ratio_high,
                               .clip_ratio_c = (float)p->clip_ratio_c,
                               .policy_drift_coeff = p->policy_drift_coeff,
                               .cpgd_drift_clip = p->cpgd_drift_clip,
                               .clip_cov_ratio = p->clip_cov_ratio, .clip_cov_lb = p->clip_cov_lb,
                               .clip_cov_ub = p->clip_cov_ub, .kl_cov_ratio = p->kl_cov_ratio,
                               .ppo_kl_coef = p->ppo_kl_coef, .seed = key};
    return fn(&in, st);
}

/* Loss and gradient for one micro-batch [s, e) of a PPO mini-batch of
   global_tokens / global_seqs (over the whole DP group). */
static int ppo_micro(df_actor *a, const df_batch *b, int64_t s, int64_t e, int64_t global_tokens,
                     int64_t global_seqs, double *sums)
{
    const df_actor_params *p = &a->p;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    int64_t base = ro[s], n_tok = ro[e] - ro[s];
    float *logp = a->buf[0], *ent = a->buf[1], *dlogp = a->buf[2], *dent = a->buf[3];
    bool want_ent = p->entropy_coeff != 0; /* actor/entropy itself comes from old_log_prob */
    int64_t *offs = NULL;
    int rc = df_pack_responses(&a->pk, b, s, e);
    if (!rc)
        rc = df_model_forward(a->model, a->acts, &a->pk.sb, p->temperature, logp, want_ent ? ent : NULL);
    if (rc || (rc = rebased_offsets(ro, s, e, &offs)))
        return rc;
    rc = df_loss_agg_weights_ex(p->loss_agg_mode, e - s, offs, global_tokens, global_seqs,
                                p->loss_agg_norm_length, a->w);
    df_policy_loss_output st = {.grad = dlogp};
    if (!rc)
        rc = policy_loss(a, b, e - s, offs, base, logp, &st);
    double kl = 0, ent_loss = 0;
    if (!rc && p->use_kl_loss) {
        const float *ref = df_batch_column(b, "ref_log_prob")->data;
        rc = df_kl_loss(p->kl_loss_type, n_tok, logp, ref + base, a->w, (float)p->kl_loss_coef, &kl, dlogp);
    }
    for (int64_t j = 0; want_ent && j < n_tok; j++) {
        ent_loss += (double)a->w[j] * ent[j];
        dent[j] = (float)(-p->entropy_coeff * a->w[j]);
    }
    free(offs);
    if (!rc)
        rc = df_model_backward(a->model, a->acts, &a->pk.sb, p->temperature, dlogp,
                               want_ent ? dent : NULL, a->grads);
    if (rc)
        return rc;
    /* Losses are normalised by the mini-batch totals, so summing over micro-batches
       gives the mini-batch loss; statistics are token means, weighted by tokens. */
    double frac = (double)n_tok / (double)global_tokens;
    sums[S_PG_LOSS] += st.loss;
    sums[S_KL_LOSS] += kl;
    sums[S_ENTROPY] += ent_loss;
    sums[S_CLIPFRAC] += st.pg_clipfrac * frac;
    sums[S_CLIPFRAC_LOWER] += st.pg_clipfrac_lower * frac;
    sums[S_PPO_KL] += st.ppo_kl * frac;
    return DF_OK;
}

/* This rank's part of one mini-batch's gradient into a->grads (zeroed first). */
static int ppo_mini_local(df_actor *a, const df_batch *mb, int64_t tokens, int64_t seqs,
                          double *sums)
{
    memset(a->grads, 0, (size_t)a->model->n_params * sizeof(float));
    if (!mb || tokens <= 0)
        return DF_OK;
    int64_t *bounds, n_mb;
    int rc = plan(a, mb, false, &bounds, &n_mb);
    if (rc)
        return rc;
    for (int64_t k = 0; !rc && k < n_mb; k++)
        if (!(rc = ppo_micro(a, mb, bounds[k], bounds[k + 1], tokens, seqs, sums))) {
            a->bar_done += bounds[k + 1] - bounds[k];
            df_progress_update(&a->bar, a->bar_done, NULL);
        }
    free(bounds);
    return rc;
}

/*
 * One optimizer step on mini-batch `mb` (this rank's rows; NULL when it has none).
 * `rc` carries an earlier local failure into the first collective. Normalisers
 * are the DP group's totals, so summing the ranks' gradients gives the gradient
 * of the global mini-batch loss (verl agg_loss with global batch info).
 */
static int ppo_mini_batch(df_actor *a, const df_batch *mb, double lr, df_metrics *m, int rc)
{
    double tot[2] = {0, 0}; /* response tokens, responses */
    if (mb) {
        tot[0] = (double)df_batch_offsets(mb, "response_ids")[df_batch_size(mb)];
        tot[1] = (double)df_batch_size(mb);
    }
    if ((rc = dp_reduce(a, tot, 2, DF_COMM_SUM, rc, "the mini-batch sizes")))
        return rc;
    double sums[N_SUMS] = {0};
    rc = ppo_mini_local(a, mb, (int64_t)tot[0], (int64_t)tot[1], sums);
    if ((rc = dp_reduce(a, sums, N_SUMS, DF_COMM_SUM, rc, "the loss statistics")) ||
        (tot[0] > 0 && (rc = dp_allreduce_grads(a)))) /* no tokens anywhere: zero gradient */
        return rc;
    df_metrics_mean(m, "actor/pg_loss", sums[S_PG_LOSS]);
    df_metrics_mean(m, "actor/kl_loss", sums[S_KL_LOSS]);
    if (a->p.entropy_coeff != 0)
        df_metrics_mean(m, "actor/entropy_loss", sums[S_ENTROPY]);
    df_metrics_mean(m, "actor/pg_clipfrac", sums[S_CLIPFRAC]);
    df_metrics_mean(m, "actor/pg_clipfrac_lower", sums[S_CLIPFRAC_LOWER]);
    df_metrics_mean(m, "actor/ppo_kl", sums[S_PPO_KL]);
    return optimizer_step(a, lr, m, "actor");
}

static int check_ppo_batch(const df_actor *a, const df_batch *b)
{
    if (!a->trainable)
        return df_error(DF_EINVAL, "update_policy called on a frozen model");
    const char *need[] = {"prompt_ids", "response_ids", "old_log_probs", "advantages"};
    for (size_t i = 0; i < 4; i++)
        if (!df_batch_has(b, need[i]))
            return df_error(DF_EINVAL, "actor update needs column '%s'", need[i]);
    if (a->p.use_kl_loss && !df_batch_has(b, "ref_log_prob"))
        return df_error(DF_EINVAL, "use_kl_loss needs column 'ref_log_prob'");
    if (a->p.tis_imp_ratio_cap > 0 && !df_batch_has(b, "rollout_log_probs"))
        return df_error(DF_EINVAL,
                        "tis_imp_ratio_cap=%g needs column 'rollout_log_probs' (the sampler's log-probs)",
                        a->p.tis_imp_ratio_cap);
    return DF_OK;
}

int df_actor_update_policy(df_actor *a, df_batch *b, df_metrics *m)
{
    int rc = check_ppo_batch(a, b);
    int64_t n = df_batch_size(b);
    int64_t mbs = a->p.mini_batch_size > 0 ? a->p.mini_batch_size : (n > 0 ? n : 1);
    /* Every rank takes as many optimizer steps as the rank with the most mini-batches;
       ranks that ran out of rows join them with zero gradients. */
    double n_mini = rc ? 0 : (double)((n + mbs - 1) / mbs);
    if ((rc = dp_reduce(a, &n_mini, 1, DF_COMM_MAX, rc, "the mini-batch count")))
        return rc;
    double lr = current_lr(a);
    int epochs = a->p.ppo_epochs > 0 ? a->p.ppo_epochs : 1;
    df_progress_begin(&a->bar, a->p.progress_label, (int64_t)epochs * n);
    a->bar_done = 0;
    a->n_micro = 0;
    for (int ep = 0; ep < epochs && !rc; ep++) {
        for (int64_t k = 0; k < (int64_t)n_mini && !rc; k++) {
            int64_t s = k * mbs < n ? k * mbs : n, e = s + mbs < n ? s + mbs : n;
            df_batch *mb = NULL;
            if (e > s)
                rc = df_batch_slice(b, s, e, &mb);
            rc = ppo_mini_batch(a, mb, lr, m, rc);
            df_batch_free(mb);
        }
    }
    df_progress_end(&a->bar);
    a->steps++;
    return rc;
}

/* This rank's part of the SFT loss and gradient; `total` is the group's token count. */
static int sft_local(df_actor *a, df_batch *b, double total, double *loss)
{
    memset(a->grads, 0, (size_t)a->model->n_params * sizeof(float));
    if (df_batch_size(b) == 0)
        return DF_OK;
    int64_t *bounds, n_mb;
    int rc = plan(a, b, false, &bounds, &n_mb);
    if (rc)
        return rc;
    for (int64_t k = 0; k < n_mb && !rc && total > 0; k++) {
        if ((rc = df_pack_responses(&a->pk, b, bounds[k], bounds[k + 1])))
            break;
        float *logp = a->buf[0], *dlogp = a->buf[2];
        rc = df_model_forward(a->model, a->acts, &a->pk.sb, 1.0f, logp, NULL);
        for (int64_t j = 0; !rc && j < a->pk.sb.n_out; j++) {
            *loss -= logp[j] / total;
            dlogp[j] = (float)(-1.0 / total); /* d(-mean logp) / d logp */
        }
        if (!rc)
            rc = df_model_backward(a->model, a->acts, &a->pk.sb, 1.0f, dlogp, NULL, a->grads);
    }
    free(bounds);
    return rc;
}

int df_actor_sft_step(df_actor *a, df_batch *b, df_metrics *m)
{
    int rc = a->trainable ? DF_OK : df_error(DF_EINVAL, "sft step called on a frozen model");
    if (!rc && (!df_batch_has(b, "prompt_ids") || !df_batch_has(b, "response_ids")))
        rc = df_error(DF_EINVAL, "sft step needs columns 'prompt_ids' and 'response_ids'");
    double total = rc ? 0 : (double)df_batch_offsets(b, "response_ids")[df_batch_size(b)];
    if ((rc = dp_reduce(a, &total, 1, DF_COMM_SUM, rc, "the SFT token count")))
        return rc;
    double loss = 0;
    rc = sft_local(a, b, total, &loss);
    if ((rc = dp_reduce(a, &loss, 1, DF_COMM_SUM, rc, "the SFT loss")) ||
        (total > 0 && (rc = dp_allreduce_grads(a))))
        return rc;
    df_metrics_mean(m, "train/loss", loss);
    rc = optimizer_step(a, current_lr(a), m, "train");
    a->steps++;
    return rc;
}
