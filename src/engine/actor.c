/* Actor / reference role: log-probs and the PPO / SFT updates (actor.h). */
#include "engine/actor.h"

#include "distflow/algo.h"
#include "distflow/algo_desc.h"
#include "distflow/async.h"
#include "distflow/rng.h"
#include "engine/routes.h"
#include "engine/train_core.h"
#include "util/killpoint.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per-token scratch of the core: logp, entropy, dlogp, dentropy, aggregation weights,
   policy-loss weights (w times the TIS or the decoupled objective's behaviour weights). */
enum { B_LOGP, B_ENT, B_DLOGP, B_DENT, B_W, B_WPG, B_RHO, N_BUF };

struct df_actor {
    df_train_core c;           /* model, gradients, AdamW, activations, DP comm, steps */
    df_actor_params p;
    int64_t n_micro;           /* micro-batches of this update so far: keys clip_cov's random choice */
    df_policy_loss_fn loss_fn; /* p.loss.policy_loss, looked up at this update's first micro-batch */
    df_metrics *micro;         /* one micro-batch's rollout_corr/ metrics, then folded into ... */
    df_metrics *folded;        /* ... this update's (verl reduce_metrics over micro-batches) */
};

int df_actor_create(df_model *model, const df_actor_params *p, bool trainable, df_actor **out)
{
    if (p->router_replay != DF_ROUTER_REPLAY_OFF && df_model_route_width(&model->cfg) == 0)
        return df_error(DF_EINVAL, "actor: router replay (actor_rollout_ref.actor.router_replay.mode) needs a model "
                        "with experts (qwen3_moe, qwen2_moe, mixtral, olmoe); %s has none", model->cfg.model_type);
    df_actor *a = calloc(1, sizeof *a);
    if (!a)
        return df_error(DF_ENOMEM, "out of memory creating the actor");
    a->p = *p;
    int rc = df_train_core_init(&a->c, model, &p->optim, trainable, N_BUF, "actor");
    if (rc) {
        free(a);
        return rc;
    }
    a->c.progress_label = p->progress_label;
    /* a frozen core's activations are forward-only (train_core.c reserve) */
    a->c.checkpoint = p->gradient_checkpointing;
    rc = df_train_core_set_precision(&a->c, p->bf16, p->bf16_weights);
    if (!rc && p->offload_dir)
        rc = df_train_core_set_offload(&a->c, p->offload_dir);
    if (rc) {
        a->c.model = NULL; /* the caller keeps it */
        df_actor_free(a);
        return rc;
    }
    *out = a;
    return DF_OK;
}

void df_actor_free(df_actor *a)
{
    if (!a)
        return;
    df_train_core_release(&a->c);
    df_metrics_free(a->micro);
    df_metrics_free(a->folded);
    free(a);
}

void df_actor_set_loss(df_actor *a, const df_actor_loss *l) { a->p.loss = *l; }

void df_actor_set_comm(df_actor *a, df_comm *dp) { df_train_core_set_comm(&a->c, dp); }
int df_actor_set_backend(df_actor *a, const df_backend *be) { return df_train_core_set_backend(&a->c, be); }
df_model *df_actor_model(df_actor *a) { return a->c.model; }
df_train_core *df_actor_core(df_actor *a) { return &a->c; }
int64_t df_actor_step_count(const df_actor *a) { return a->c.steps; }
bool df_actor_bf16(const df_actor *a) { return a->c.bf16; }
int df_actor_weights16(df_actor *a, const df_weights16 **out) { return df_train_core_weights16(&a->c, out); }
const df_weights_dev *df_actor_device_weights(const df_actor *a) { return df_train_core_device_weights(&a->c); }
int df_actor_save_state(df_actor *a, const char *path) { return df_train_core_save_state(&a->c, path); }
int df_actor_save_lora(const df_actor *a, const char *dir, const char *base_model)
{
    return df_train_core_save_lora(&a->c, dir, base_model);
}
int df_actor_load_state(df_actor *a, const char *path) { return df_train_core_load_state(&a->c, path); }
int df_actor_gather_begin(df_actor *a, bool saver) { return df_train_core_gather_begin(&a->c, saver); }
int df_actor_gather_end(df_actor *a) { return df_train_core_gather_end(&a->c); }

static int plan(df_actor *a, const df_batch *b, bool forward_only, int64_t **bounds, int64_t *n_mb)
{
    int64_t rows = forward_only ? a->p.logprob_micro_batch_size : a->p.micro_batch_size;
    int64_t toks = forward_only ? a->p.logprob_max_token_len : a->p.max_token_len;
    return df_train_core_plan(&a->c, b, rows, toks, bounds, n_mb);
}

/* Log-probs of this rank's rows (and sums of p^2 into sq_col, when given); ent non-NULL: the entropy
 * sum and token count added to ent[0], ent[1]. */
static int log_prob_local(df_actor *a, df_batch *b, const char *out_col, const char *sq_col, double *ent)
{
    df_train_core *c = &a->c;
    float *dst, *sq = NULL;
    int rc = df_batch_alloc_tok_f32_like(b, out_col, "response_ids", &dst);
    if (!rc && sq_col)
        rc = df_batch_alloc_tok_f32_like(b, sq_col, "response_ids", &sq);
    if (rc)
        return rc;
    int64_t *bounds, n_mb;
    if ((rc = plan(a, b, true, &bounds, &n_mb)))
        return rc;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    const int32_t *mask = NULL; /* multi-turn: the entropy of the model's tokens only (verl) */
    if (ent)
        rc = df_batch_response_mask(b, &mask);
    /* router replay: R2 records the routes of this (old-log-prob) pass, R3 replays the rollout's */
    df_routes_rec rec = {0};
    const bool record = a->p.router_replay == DF_ROUTER_REPLAY_R2 && c->trainable;
    if (!rc && record)
        rc = df_routes_record_begin(&c->model->cfg, b, &rec);
    for (int64_t m = 0; m < n_mb && !rc; m++) {
        if ((rc = df_pack_responses(&c->pk, b, bounds[m], bounds[m + 1])))
            break;
        if (record)
            df_routes_record_into(&rec, bounds[m], &c->pk.sb);
        else if (a->p.router_replay == DF_ROUTER_REPLAY_R3 &&
                 (rc = df_routes_replay(&c->model->cfg, b, bounds[m], bounds[m + 1], &c->pk.sb)))
            break;
        float *tok_ent = ent ? c->buf[B_ENT] : NULL;
        const df_head_out out = {.logp = dst + ro[bounds[m]], .entropy = tok_ent,
                                 .sum_pi_sq = sq ? sq + ro[bounds[m]] : NULL};
        rc = df_model_forward_head(c->model, c->acts, &c->pk.sb, a->p.temperature, &out);
        const int32_t *mk = mask ? mask + ro[bounds[m]] : NULL;
        for (int64_t j = 0; ent && j < c->pk.sb.n_out; j++)
            if (!mk || mk[j]) {
                ent[0] += tok_ent[j];
                ent[1] += 1.0;
            }
    }
    free(bounds);
    if (record)
        rc = df_routes_record_end(&rec, b, rc);
    if (!c->trainable) { /* the reference's memory is not held through the actor's update */
        df_train_core_drop_acts(c);
        df_train_core_page_out(c);
    }
    return rc;
}

int df_actor_compute_log_prob(df_actor *a, df_batch *b, const char *out_col, double *entropy_mean)
{
    return df_actor_compute_log_prob_sq(a, b, out_col, NULL, entropy_mean);
}

int df_actor_compute_log_prob_sq(df_actor *a, df_batch *b, const char *out_col, const char *sq_col,
                                 double *entropy_mean)
{
    double ent[2] = {0, 0}; /* entropy sum, tokens */
    int rc = log_prob_local(a, b, out_col, sq_col, entropy_mean ? ent : NULL);
    if (!entropy_mean)
        return rc;
    if ((rc = df_train_core_reduce(&a->c, ent, 2, DF_COMM_SUM, rc, "the entropy mean")))
        return rc;
    *entropy_mean = ent[1] > 0 ? ent[0] / ent[1] : 0.0;
    return DF_OK;
}

int df_actor_compute_base_log_prob(df_actor *a, df_batch *b, const char *out_col, const df_actor_params *ref,
                                   double *entropy_mean)
{
    df_train_core *c = &a->c;
    if (!c->lora)
        return df_error(DF_EINVAL, "df_actor_compute_base_log_prob: the actor trains no LoRA adapters");
    /* the base's weights in place of the merged ones (and in every copy: bf16, a device's) */
    int rc = df_lora_unmerge(c->lora, c->model);
    if (!rc)
        rc = df_train_core_weights_changed(c);
    const df_actor_params keep = a->p;
    a->p.router_replay = DF_ROUTER_REPLAY_OFF; /* the base model is the reference: it routes live */
    a->p.logprob_micro_batch_size = ref->logprob_micro_batch_size;
    a->p.logprob_max_token_len = ref->logprob_max_token_len;
    if (!rc)
        rc = df_actor_compute_log_prob(a, b, out_col, entropy_mean);
    a->p = keep;
    int mrc = df_lora_merge(c->lora, c->model); /* the policy back, whatever happened */
    if (!mrc)
        mrc = df_train_core_weights_changed(c);
    return rc ? rc : mrc;
}

/* A mini-batch's loss statistics: sums over micro-batches (and DP ranks) of terms
   already normalised by the mini-batch totals. */
enum { S_PG_LOSS, S_KL_LOSS, S_ENTROPY, S_CLIPFRAC, S_CLIPFRAC_LOWER, S_PPO_KL,
       S_BEHAV_W, S_BEHAV_KL, S_BEHAV_KEPT, S_BEHAV_DROPPED, N_SUMS };
static const char *const SUM_NAMES[N_SUMS] = {"pg_loss", "kl_loss", "entropy_loss", "pg_clipfrac",
                                              "pg_clipfrac_lower", "ppo_kl", "behave_imp_weight",
                                              "behave_approx_kl", "behave_kept", "behave_filtered_frac"};
_Static_assert((int)N_SUMS < (int)DF_CORE_MAX_SUMS, "df_train_core_reduce's limit");

/* out[t] = w[t] rho[t] (out may be w), or, geo true (verl's geo_mean takes its IS weights per
   sequence), w[t] times the geometric mean of the sequence's weights over its model tokens,
   exp(sum log(rho + 1e-10) / (tokens + 1e-8)), as verl's compute_policy_loss_geo_mean. */
static void weigh_by_rho(bool geo, int64_t n, const int64_t *offs, const int32_t *mask, const float *w,
                         const float *rho, float *out)
{
    for (int64_t i = 0; i < n; i++) {
        double g = 0, k = 0;
        for (int64_t t = offs[i]; geo && t < offs[i + 1]; t++)
            if (!mask || mask[t])
                g += log((double)rho[t] + 1e-10), k += 1;
        g = exp(g / (k + 1e-8));
        for (int64_t t = offs[i]; t < offs[i + 1]; t++)
            out[t] = geo ? (float)((double)w[t] * g) : w[t] * rho[t];
    }
}

/* verl's bypass-mode correction (compute_policy_loss_bypass_mode): the weights and rejections of
   the policy being trained (logp) against the rollout's log-probs (old), detached, and their
   rollout_corr/ metrics into a->micro; out[t] = w[t] times the weight with loss_type reinforce
   (ppo_clip's weights are measured, not applied, as verl). With rejections *keep (malloc'd, the
   caller frees) is the mask of the tokens kept, verl's effective_mask: the policy loss sees only
   those (its term, gradient, clip fractions and ppo_kl). */
static int bypass_weights(df_actor *a, int64_t n, const int64_t *offs, const int32_t *mask, const float *logp,
                          const float *old, const float *w, float *out, int32_t **keep)
{
    const df_actor_params *p = &a->p;
    const int64_t T = offs[n];
    int32_t *k = p->bypass_rs.n ? malloc((size_t)(T > 0 ? T : 1) * sizeof *k) : NULL;
    if (p->bypass_rs.n && !k)
        return df_error(DF_ENOMEM, "bypass-mode rejection: out of memory for %lld tokens", (long long)T);
    float *rho = a->c.buf[B_RHO];
    const df_rollout_corr_cfg cfg = {.is_level = p->bypass_is_level, .is_threshold = p->bypass_is_threshold,
                                     .rs = &p->bypass_rs};
    const bool weigh = p->bypass_is_level && p->bypass_reinforce;
    int rc = df_rollout_correction(&cfg, n, offs, mask, logp, old, rho, k, NULL, a->micro);
    for (int64_t t = 0; !rc && t < T; t++)
        out[t] = weigh ? w[t] * rho[t] : w[t];
    *keep = k;
    return rc;
}

/* verl's rollout_corr/ metrics of one micro-batch (dp_actor.update_policy): the off-policy gap of
   the policy being trained (logp) to the rollout's log-probs (bypass mode: old_log_probs), with
   the bypass correction's own (bypass_weights) already in a->micro; folded into a->folded. */
static int micro_rollout_corr(df_actor *a, const df_batch *b, int64_t n, const int64_t *offs, int64_t base,
                              const int32_t *mask, const float *logp)
{
    const df_column *rl = df_batch_column(b, a->p.bypass ? "old_log_probs" : "rollout_log_probs");
    if (!rl)
        return DF_OK;
    df_rollout_mismatch mm;
    int rc = df_rollout_mismatch_compute_masked(n, offs, mask, logp, (const float *)rl->data + base, 0, &mm);
    if (!rc)
        rc = df_rollout_offpolicy_record(&mm, a->micro);
    if (!rc)
        rc = df_metrics_fold(a->folded, a->micro);
    df_metrics_clear(a->micro);
    return rc;
}

/* The policy loss of one micro-batch (n samples from token `base` of b) into *st, its terms
   aggregated by the weights w (pg_weights); the decoupled objective's behaviour weights seen into
   *bst (mask: the model's tokens, or NULL). */
static int policy_loss(df_actor *a, const df_batch *b, int64_t n, const int64_t *offs, int64_t base,
                       const int32_t *mask, const float *logp, const float *w, df_policy_loss_output *st,
                       df_behav_stats *bst)
{
    const df_actor_params *p = &a->p;
    const df_actor_loss *l = &p->loss;
    const char *name = p->bypass_reinforce ? "gpg" : l->policy_loss; /* verl's bypass REINFORCE: -A log p */
    int rc = a->loss_fn ? DF_OK : df_policy_loss_lookup(name, &a->loss_fn);
    if (rc)
        return rc;
    const float *old = (const float *)df_batch_column(b, "old_log_probs")->data + base;
    const float *adv = (const float *)df_batch_column(b, "advantages")->data + base;
    const df_column *isw = df_batch_column(b, "rollout_is_weights");
    int32_t *keep = NULL; /* bypass mode's rejections */
    if (p->use_decoupled_loss) { /* AReaL's decoupled PPO: the ratio against the proximal policy
                                    (old_log_probs, the trainer's recompute), the policy term
                                    weighted by exp(proximal - behaviour), the behaviour policy
                                    being the rollout engine's log-probs */
        const float *rl = (const float *)df_batch_column(b, "rollout_log_probs")->data + base;
        if ((rc = df_behav_imp_weights(offs[n], old, rl, mask, p->behav_imp_weight_cap, w, a->c.buf[B_WPG],
                                       bst)))
            return rc;
        w = a->c.buf[B_WPG];
    } else if (p->tis_imp_ratio_cap > 0 || isw) { /* verl's pg_losses * rho: the TIS weights of
                                                     tis_imp_ratio_cap or rollout_correction's (not both) */
        float *rho = a->c.buf[B_RHO];
        if (isw)
            memcpy(rho, (const float *)isw->data + base, (size_t)offs[n] * sizeof *rho);
        else
            rc = df_tis_weights(offs[n], old, (const float *)df_batch_column(b, "rollout_log_probs")->data + base,
                                p->tis_imp_ratio_cap, NULL, rho);
        if (rc)
            return rc;
        weigh_by_rho(a->loss_fn == df_policy_loss_geo_mean, n, offs, mask, w, rho, a->c.buf[B_WPG]);
        w = a->c.buf[B_WPG]; /* w rho */
    } else if (p->bypass) {
        rc = bypass_weights(a, n, offs, mask, logp, old, w, a->c.buf[B_WPG], &keep);
        if (rc) {
            free(keep);
            return rc;
        }
        w = a->c.buf[B_WPG];
        mask = keep ? keep : mask;
    }
    /* clip_cov's random choice: one stream per (step, micro-batch, DP rank) */
    uint64_t rank = (uint64_t)(a->c.dp ? df_comm_rank(a->c.dp) : 0);
    uint64_t key = df_rng_key(p->seed, (uint64_t)a->c.steps, (uint64_t)a->n_micro++, rank);
    df_policy_loss_input in = {.n = n, .offsets = offs, .log_prob = logp, .old_log_prob = old,
                               .advantages = adv,
                               .weights = w, .clip_ratio_low = (float)l->clip_ratio_low,
                               .clip_ratio_high = (float)l->clip_ratio_high,
                               .clip_ratio_c = (float)l->clip_ratio_c,
                               .policy_drift_coeff = l->policy_drift_coeff,
                               .cpgd_drift_clip = l->cpgd_drift_clip,
                               .clip_cov_ratio = l->clip_cov_ratio, .clip_cov_lb = l->clip_cov_lb,
                               .clip_cov_ub = l->clip_cov_ub, .kl_cov_ratio = l->kl_cov_ratio,
                               .ppo_kl_coef = l->ppo_kl_coef, .seed = key, .config = l->config,
                               .response_mask = mask, .tau_pos = l->tau_pos, .tau_neg = l->tau_neg};
    rc = a->loss_fn(&in, st);
    if (!rc && p->bypass_reinforce) { /* verl's REINFORCE reports ppo_kl, the token mean of old - logp */
        double kl = 0, k = 0;
        for (int64_t t = 0; t < offs[n]; t++)
            if (!mask || mask[t])
                kl += (double)old[t] - logp[t], k += 1;
        st->ppo_kl = k > 0 ? kl / k : 0.0;
    }
    free(keep);
    return rc;
}

/* The aggregation weights of the policy term: loss_agg_mode's (w), or the loss's own where its
   descriptor fixes one (gspo, sapo: verl's agg_loss(..., "seq-mean-token-mean") whatever
   loss_agg_mode, which then aggregates only the KL and entropy terms) into B_WPG. */
static int pg_weights(df_actor *a, int64_t n, const int64_t *offs, const int32_t *mask, int64_t global_tokens,
                      int64_t global_seqs, const float *w, const float **out)
{
    const df_actor_loss *l = &a->p.loss;
    const df_policy_loss_desc *d = df_policy_loss_find(l->policy_loss);
    *out = w;
    if (!d || !d->loss_agg_mode || !strcmp(d->loss_agg_mode, l->loss_agg_mode))
        return DF_OK;
    *out = a->c.buf[B_WPG];
    return df_loss_agg_weights_masked(d->loss_agg_mode, n, offs, mask, global_tokens, global_seqs,
                                      l->loss_agg_norm_length, a->c.buf[B_WPG]);
}

/* Loss and gradient for one micro-batch [s, e) of a PPO mini-batch of
   global_tokens / global_seqs (over the whole DP group); df_core_loss.micro. */
static int ppo_micro(void *user, const df_batch *b, int64_t s, int64_t e, int64_t global_tokens,
                     int64_t global_seqs, double *sums)
{
    df_actor *a = user;
    df_train_core *c = &a->c;
    const df_actor_params *p = &a->p;
    const df_actor_loss *l = &p->loss;
    const int64_t *ro = df_batch_offsets(b, "response_ids");
    int64_t base = ro[s], n_tok = ro[e] - ro[s];
    float *logp = c->buf[B_LOGP], *ent = c->buf[B_ENT], *dlogp = c->buf[B_DLOGP], *dent = c->buf[B_DENT];
    float *w = c->buf[B_W];
    bool want_ent = l->entropy_coeff != 0; /* actor/entropy itself comes from old_log_prob */
    int64_t *offs = NULL;
    int rc = df_pack_responses(&c->pk, b, s, e);
    if (!rc && p->router_replay != DF_ROUTER_REPLAY_OFF) /* the recorded experts, R2's or the rollout's */
        rc = df_routes_replay(&c->model->cfg, b, s, e, &c->pk.sb);
    if (!rc)
        rc = df_model_forward(c->model, c->acts, &c->pk.sb, p->temperature, logp, want_ent ? ent : NULL);
    if (rc || (rc = df_train_core_rebased_offsets(c, ro, s, e, &offs)))
        return rc;
    const int32_t *mask = NULL; /* multi-turn: appended tokens have no loss terms (verl) */
    rc = df_batch_response_mask(b, &mask);
    mask = mask ? mask + base : NULL;
    if (!rc)
        rc = df_loss_agg_weights_masked(l->loss_agg_mode, e - s, offs, mask, global_tokens,
                                        global_seqs, l->loss_agg_norm_length, w);
    df_policy_loss_output st = {.grad = dlogp};
    df_behav_stats bst = {0};
    const float *wpg = w;
    if (!rc)
        rc = pg_weights(a, e - s, offs, mask, global_tokens, global_seqs, w, &wpg);
    if (!rc)
        rc = policy_loss(a, b, e - s, offs, base, mask, logp, wpg, &st, &bst);
    if (!rc)
        rc = micro_rollout_corr(a, b, e - s, offs, base, mask, logp);
    double kl = 0, ent_loss = 0;
    if (!rc && p->use_kl_loss) {
        const float *ref = df_batch_column(b, "ref_log_prob")->data;
        rc = df_kl_loss(l->kl_loss_type, n_tok, logp, ref + base, w, (float)l->kl_loss_coef, &kl, dlogp);
    }
    for (int64_t j = 0; want_ent && j < n_tok; j++) {
        ent_loss += (double)w[j] * ent[j];
        dent[j] = (float)(-l->entropy_coeff * w[j]);
    }
    if (!rc)
        rc = df_model_backward(c->model, c->acts, &c->pk.sb, p->temperature, dlogp,
                               want_ent ? dent : NULL, df_train_core_model_grads(c));
    if (rc)
        return rc;
    /* Losses are normalised by the mini-batch totals, so summing over micro-batches
       gives the mini-batch loss; statistics are means over the model tokens (the loss
       masks them), weighted by those tokens. */
    int64_t n_model;
    df_loss_agg_count_masked(e - s, offs, mask, &n_model, NULL);
    double frac = (double)n_model / (double)global_tokens;
    sums[S_PG_LOSS] += st.loss;
    sums[S_KL_LOSS] += kl;
    sums[S_ENTROPY] += ent_loss;
    sums[S_CLIPFRAC] += st.pg_clipfrac * frac;
    sums[S_CLIPFRAC_LOWER] += st.pg_clipfrac_lower * frac;
    sums[S_PPO_KL] += st.ppo_kl * frac;
    /* the behaviour weights: sums over this micro-batch's tokens, normalised like the rest */
    double g = (double)global_tokens;
    sums[S_BEHAV_W] += bst.weight_sum / g;
    sums[S_BEHAV_KL] += bst.approx_kl_sum / g;
    sums[S_BEHAV_KEPT] += (double)bst.n_kept / g;
    sums[S_BEHAV_DROPPED] += (double)(bst.n_tokens - bst.n_kept) / g;
    return DF_OK;
}

/* A mini-batch's global statistics as actor metrics; df_core_loss.record. */
static void ppo_record(void *user, const double *sums, df_metrics *m)
{
    const df_actor *a = user;
    df_metrics_mean(m, "actor/pg_loss", sums[S_PG_LOSS]);
    df_metrics_mean(m, "actor/kl_loss", sums[S_KL_LOSS]);
    if (a->p.loss.entropy_coeff != 0)
        df_metrics_mean(m, "actor/entropy_loss", sums[S_ENTROPY]);
    df_metrics_mean(m, "actor/pg_clipfrac", sums[S_CLIPFRAC]);
    df_metrics_mean(m, "actor/pg_clipfrac_lower", sums[S_CLIPFRAC_LOWER]);
    df_metrics_mean(m, "actor/ppo_kl", sums[S_PPO_KL]);
    if (!a->p.use_decoupled_loss)
        return;
    /* AReaL's behave_imp_weight and behave_approx_kl are means over the kept tokens */
    double kept = sums[S_BEHAV_KEPT];
    if (kept > 0) {
        df_metrics_mean(m, "actor/behave_imp_weight", sums[S_BEHAV_W] / kept);
        df_metrics_mean(m, "actor/behave_approx_kl", sums[S_BEHAV_KL] / kept);
    }
    df_metrics_mean(m, "actor/behave_filtered_frac", sums[S_BEHAV_DROPPED]);
}

static int check_ppo_batch(const df_actor *a, const df_batch *b)
{
    if (!a->c.trainable)
        return df_error(DF_EINVAL, "update_policy called on a frozen model");
    static const char *const need[] = {"prompt_ids", "response_ids", "old_log_probs", "advantages"};
    static const char *const kl[] = {"ref_log_prob"}, *const tis[] = {"rollout_log_probs"};
    int rc = df_train_core_need_columns(b, need, 4, "actor update");
    if (!rc && a->p.use_kl_loss)
        rc = df_train_core_need_columns(b, kl, 1, "actor update with use_kl_loss");
    if (!rc && a->p.tis_imp_ratio_cap > 0) /* the sampler's log-probs */
        rc = df_train_core_need_columns(b, tis, 1, "actor update with tis_imp_ratio_cap");
    if (!rc && a->p.use_decoupled_loss && a->p.tis_imp_ratio_cap > 0) /* two weights of the same ratio */
        rc = df_error(DF_EINVAL, "actor update: use_decoupled_loss and tis_imp_ratio_cap both weight the policy "
                                 "loss by exp(old - rollout log-prob); set one");
    if (!rc && a->p.use_decoupled_loss) /* the behaviour policy's log-probs */
        rc = df_train_core_need_columns(b, tis, 1, "actor update with use_decoupled_loss");
    return rc;
}

int df_actor_update_policy(df_actor *a, df_batch *b, df_metrics *m)
{
    int rc = check_ppo_batch(a, b);
    df_core_loss loss = {.n_sums = N_SUMS, .micro_rows = a->p.micro_batch_size,
                         .micro_tokens = a->p.max_token_len, .shuffle = a->p.shuffle,
                         .shuffle_seed = a->p.shuffle_seed, .micro = ppo_micro, .record = ppo_record,
                         .user = a, .prefix = "actor", .sum_names = SUM_NAMES};
    a->n_micro = 0;
    a->loss_fn = NULL; /* df_actor_set_loss may have changed the name since the last update */
    if (!rc && ((!a->micro && !(a->micro = df_metrics_new())) || (!a->folded && !(a->folded = df_metrics_new()))))
        rc = df_error(DF_ENOMEM, "actor update: out of memory for its metrics");
    if (!rc) /* nothing left from a failed update */
        df_metrics_clear(a->micro), df_metrics_clear(a->folded);
    rc = df_train_core_update(&a->c, b, a->p.mini_batch_size, a->p.loss.ppo_epochs, &loss, m, rc);
    /* verl's actor metrics replace the step's (the old-log-prob node's off-policy gap included) */
    return !rc && m ? df_metrics_merge(m, a->folded) : rc;
}

/* This rank's part of the SFT loss and gradient; `total` is the group's token count. */
static int sft_local(df_actor *a, df_batch *b, double total, double *loss)
{
    df_train_core *c = &a->c;
    if (df_batch_size(b) == 0)
        return df_train_core_no_grads(c);
    int64_t *bounds, n_mb;
    const float *mask = df_batch_has(b, "loss_mask") ? df_batch_column(b, "loss_mask")->data : NULL;
    int rc = df_train_core_zero_grads(c);
    if (rc || (rc = plan(a, b, false, &bounds, &n_mb)))
        return rc;
    for (int64_t k = 0; k < n_mb && !rc && total > 0; k++) {
        df_kill_point("update"); /* test-only: a crash between micro-batches */
        if ((rc = df_pack_responses(&c->pk, b, bounds[k], bounds[k + 1])))
            break;
        float *logp = c->buf[B_LOGP], *dlogp = c->buf[B_DLOGP];
        const float *w = mask ? mask + df_batch_offsets(b, "response_ids")[bounds[k]] : NULL;
        rc = df_model_forward(c->model, c->acts, &c->pk.sb, 1.0f, logp, NULL);
        for (int64_t j = 0; !rc && j < c->pk.sb.n_out; j++) {
            double wj = w ? w[j] : 1.0;
            *loss -= wj * logp[j] / total;
            dlogp[j] = (float)(-wj / total); /* d(-mean logp) / d logp */
        }
        if (!rc)
            rc = df_model_backward(c->model, c->acts, &c->pk.sb, 1.0f, dlogp, NULL, df_train_core_model_grads(c));
    }
    free(bounds);
    return rc ? rc : df_train_core_grads_to_host(c);
}

int df_actor_sft_step(df_actor *a, df_batch *b, df_metrics *m)
{
    int rc = a->c.trainable ? DF_OK : df_error(DF_EINVAL, "sft step called on a frozen model");
    if (!rc && (!df_batch_has(b, "prompt_ids") || !df_batch_has(b, "response_ids")))
        rc = df_error(DF_EINVAL, "sft step needs columns 'prompt_ids' and 'response_ids'");
    double total = rc ? 0 : (double)df_batch_offsets(b, "response_ids")[df_batch_size(b)];
    if (!rc && df_batch_has(b, "loss_mask")) { /* multi-turn SFT: the assistant tokens only */
        const float *w = df_batch_column(b, "loss_mask")->data;
        total = 0;
        for (int64_t j = 0; j < df_batch_offsets(b, "loss_mask")[df_batch_size(b)]; j++)
            total += w[j];
    }
    if ((rc = df_train_core_reduce(&a->c, &total, 1, DF_COMM_SUM, rc, "the SFT token count")))
        return rc;
    double loss = 0;
    rc = sft_local(a, b, total, &loss);
    if ((rc = df_train_core_reduce(&a->c, &loss, 1, DF_COMM_SUM, rc, "the SFT loss")) ||
        (total > 0 && (rc = df_train_core_allreduce_grads(&a->c))))
        return rc;
    df_metrics_mean(m, "train/loss", loss);
    char what[64];
    snprintf(what, sizeof what, "train/loss = %g", loss);
    if (!isfinite(loss))
        rc = df_train_core_nonfinite(&a->c, m, "train", what, NULL);
    else
        rc = df_train_core_optimizer_step(&a->c, df_train_core_lr(&a->c), m, "train", NULL);
    a->c.steps++;
    return rc;
}
