/* What the actor and the critic share: buffers, DP reductions, optimizer step, update loop (train_core.h). */
#include "engine/train_core.h"

#include "distflow/algo.h"
#include "distflow/rng.h"
#include "model/acts.h"
#include "model/ops.h"
#include "util/killpoint.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Gradient all-reduce bucket: 8 Mi floats (32 MiB) per collective call, which bounds the
   temporary buffer MPI's reduction allocates (a 0.5B model's blob is 2 GiB). */
enum { GRAD_BUCKET = 8 << 20 };

int df_train_core_init(df_train_core *c, df_model *model, const df_core_optim *o, bool trainable, int n_buf,
                       const char *who)
{
    assert(n_buf >= 0 && n_buf <= DF_CORE_MAX_BUFS);
    memset(c, 0, sizeof *c);
    c->model = model;
    c->who = who;
    c->trainable = trainable;
    c->o = *o;
    c->n_buf = n_buf;
    c->be = df_backend_cpu();
    if (!trainable)
        return DF_OK;
    int rc = o->lora.rank > 0 ? df_lora_create(model, &o->lora, o->lora_seed, &c->lora) : DF_OK;
    if (!rc && c->lora && o->lora_adapter && !(rc = df_lora_load_peft(c->lora, o->lora_adapter)))
        rc = df_lora_merge(c->lora, model);
    const int64_t n = rc ? 0 : df_train_core_n_train(c);
    c->grads = c->bgrads = rc ? NULL : calloc((size_t)(n > 0 ? n : 1), sizeof(float));
    if (!rc && !c->grads)
        rc = df_error(DF_ENOMEM, "out of memory allocating the %s's gradients", who);
    if (!rc && !o->shard_optim) /* else made whole or as a slice once the group is known */
        rc = df_train_core_shard(c);
    if (rc) {
        c->model = NULL; /* the caller keeps it */
        df_train_core_release(c);
    }
    return rc;
}

void df_train_core_release(df_train_core *c)
{
    if (c->dev_optim) {
        c->be.ops->group_close(c->be.ctx, c->dp_group);
        c->be.ops->release(c->be.ctx, c->dm);
        c->be.ops->release(c->be.ctx, c->dv);
        df_weights_dev_free(&c->wmaster);
    }
    df_model_free(c->model);
    df_lora_free(c->lora);
    if (c->bgrads != c->grads)
        c->be.ops->release(c->be.ctx, c->bgrads);
    free(c->grads);
    df_adamw_free(c->opt);
    df_train_core_gather_free(c);
    df_acts_free(c->acts);
    df_weights16_free(c->w16);
    df_packed_free(&c->pk);
    for (int i = 0; i < DF_CORE_MAX_BUFS; i++)
        free(c->buf[i]);
    free(c->offs);
    memset(c, 0, sizeof *c);
}

void df_train_core_set_comm(df_train_core *c, df_comm *dp)
{
    dp = dp && df_comm_size(dp) > 1 ? dp : NULL;
    if (c->dp_group && dp != c->dp) { /* the handle is the old group's */
        c->be.ops->group_close(c->be.ctx, c->dp_group);
        c->dp_group = NULL;
    }
    c->dp = dp;
}

/* The backend has every entry the optimizer on the device needs. */
static bool has_optim(const df_backend_ops *o)
{
    return o->adamw_step && o->grad_norm && o->scale && o->group_open && o->group_close &&
           o->allreduce_sum;
}

/* dev_optim: AdamW's moments in be's memory (once, at the first step: whole or, sharded, this
   rank's slice, which needs the DP group), from the host's (zeros, or a state loaded before). */
static int device_moments(df_train_core *c)
{
    if (c->dm)
        return DF_OK;
    const df_backend_ops *o = c->be.ops;
    int rc = df_train_core_shard(c);
    const size_t bytes = rc ? 0 : (size_t)c->opt->n * sizeof(float);
    if (!rc)
        rc = o->alloc(c->be.ctx, bytes, (void **)&c->dm);
    if (!rc)
        rc = o->alloc(c->be.ctx, bytes, (void **)&c->dv);
    if (!rc)
        rc = df_train_core_moments_to_device(c);
    if (rc) {
        o->release(c->be.ctx, c->dm);
        o->release(c->be.ctx, c->dv);
        c->dm = c->dv = NULL;
        return df_error_wrap(rc, "%s: AdamW's moments on the %s backend", c->who, o->name);
    }
    return DF_OK;
}

int df_train_core_set_backend(df_train_core *c, const df_backend *be)
{
    if (c->acts || c->bgrads != c->grads || c->shard)
        return df_error(DF_EINVAL, "%s: the backend is chosen before the first micro-batch", c->who);
    /* now, not after the first rollout */
    int rc = df_model_check_backend_ex(be, &c->model->cfg, c->bf16 ? DF_ACTS_BF16 : 0);
    if (rc)
        return df_error_wrap(rc, "%s", c->who);
    c->be = *be;
    if (!c->trainable || be->ops->host_memory)
        return DF_OK;
    rc = be->ops->alloc(be->ctx, (size_t)df_train_core_n_train(c) * sizeof(float), (void **)&c->bgrads);
    /* LoRA: the adapters' optimizer stays on the host (a few MiB a step each way); the merge
     * then writes the model there and the device's copy follows (df_train_core_weights_changed) */
    if (!rc && has_optim(be->ops) && !c->lora)
        c->dev_optim = true; /* the moments follow at the first step (device_moments) */
    if (rc) {
        c->bgrads = c->grads;
        c->be = df_backend_cpu();
        return df_error_wrap(rc, "%s: gradients and optimizer state on the %s backend", c->who,
                             be->ops->name);
    }
    return df_train_core_zero_grads(c);
}

int df_train_core_set_precision(df_train_core *c, bool bf16, bool bf16_only)
{
    if (c->acts || c->w16)
        return df_error(DF_EINVAL, "%s: the precision is chosen before the first micro-batch", c->who);
    if (bf16_only && (!bf16 || c->trainable))
        return df_error(DF_EINVAL, "%s: bf16 storage is for a frozen model computing in bf16", c->who);
    /* oneDNN's bf16 kernels are the CPU's; a device has its own (df_model_check_backend_ex) */
    int rc = bf16 && df_backend_is_cpu(&c->be) ? df_model_bf16_available() : DF_OK;
    if (!rc && bf16)
        rc = df_model_check_backend_ex(&c->be, &c->model->cfg, DF_ACTS_BF16);
    if (rc)
        return df_error_wrap(rc, "%s: mixed precision", c->who);
    c->bf16 = bf16;
    c->bf16_only = bf16_only;
    return DF_OK;
}

int df_train_core_set_offload(df_train_core *c, const char *dir)
{
    if (c->trainable || !c->bf16 || c->acts || c->w16)
        return df_error(DF_EINVAL, "%s: param_offload is for a frozen model computing in bf16, set "
                        "before its first pass", c->who);
    c->offload_dir = dir;
    return DF_OK;
}

void df_train_core_page_out(df_train_core *c)
{
    if (c->offload_dir)
        df_weights16_page_out(c->w16);
}

/* c->w16 from the model's current weights: on a device from a float32 copy there holding
 * them (the optimizer's master weights, which the forward reads too, else the forward's own),
 * converted there; otherwise the host's rounded (and uploaded into a device copy). The same
 * bits every way. */
static int refresh_w16(df_train_core *c)
{
    const df_model *m = c->model;
    if (c->dev_optim && df_weights_dev_current(&c->wmaster, m))
        return df_weights16_refresh_dev(c->w16, m, &c->wmaster.view);
    if (c->acts && !c->be.ops->host_memory && df_weights_dev_current(&c->acts->wdev, m))
        return df_weights16_refresh_dev(c->w16, m, &c->acts->wdev.view);
    return df_weights16_refresh_model(c->w16, m);
}

/* The bf16 copy the core's activations share (the layers' matmuls, the head, the embedding),
 * made once from the float32 weights (a frozen bf16-only core then gives back those the forward
 * no longer reads); later versions come from df_train_core_weights_changed. */
static int make_w16(df_train_core *c)
{
    if (c->w16)
        return DF_OK;
    /* in the compute backend's memory (a device: its own, refreshed there when it can) */
    int rc = df_weights16_create_on(&c->be, &c->model->cfg, DF_W16_LM_HEAD | DF_W16_EMBED, &c->w16);
    /* bf16-only: each float32 tensor the forward no longer reads goes as soon as it is converted */
    const bool head16 = c->be.ops->lmhead_fwd_w16 && c->be.ops->lmhead_bwd_w16;
    if (!rc)
        rc = c->bf16_only ? df_weights16_refresh_release(c->w16, c->model, head16, NULL)
                          : refresh_w16(c);
    if (!rc && c->offload_dir)
        rc = df_weights16_offload(c->w16, c->offload_dir);
    if (rc) {
        df_weights16_free(c->w16);
        c->w16 = NULL;
        return df_error_wrap(rc, "%s: the bf16 copy of the weights", c->who);
    }
    return DF_OK;
}

const df_weights_dev *df_train_core_device_weights(const df_train_core *c)
{
    return c->dev_optim ? &c->wmaster : NULL;
}

int df_train_core_weights16(df_train_core *c, const df_weights16 **out)
{
    *out = NULL;
    if (!c->bf16)
        return df_error(DF_EINVAL, "%s: no bf16 copy of the weights (mixed precision is off)", c->who);
    int rc = make_w16(c);
    if (!rc)
        *out = c->w16;
    return rc;
}

int df_train_core_weights_changed(df_train_core *c)
{
    /* the forward's float32 copy first: a device's bf16 copy is converted from it there */
    int rc = c->acts ? df_acts_load_weights(c->acts, c->model) : DF_OK;
    if (!rc && c->acts)
        rc = df_acts_lora_sync(c->acts);
    if (!rc && c->w16)
        rc = refresh_w16(c);
    return rc;
}

void df_train_core_drop_acts(df_train_core *c)
{
    df_acts_free(c->acts);
    c->acts = NULL;
    c->acts_tokens = c->acts_out = 0;
}

int df_train_core_zero_grads(df_train_core *c)
{
    int rc = c->be.ops->zero(c->be.ctx, c->bgrads, df_train_core_n_train(c));
    return rc ? df_error_wrap(rc, "%s: zeroing the gradients", c->who) : DF_OK;
}

int df_train_core_no_grads(df_train_core *c)
{
    if (c->dev_optim)
        return df_train_core_zero_grads(c);
    memset(c->grads, 0, (size_t)df_train_core_n_train(c) * sizeof(float));
    return DF_OK;
}

int df_train_core_moments_to_host(const df_train_core *c)
{
    if (!c->dm) /* none on the device yet: the host's are current */
        return DF_OK;
    const size_t bytes = (size_t)c->opt->n * sizeof(float);
    int rc = c->be.ops->download(c->be.ctx, c->opt->m, c->dm, bytes);
    if (!rc)
        rc = c->be.ops->download(c->be.ctx, c->opt->v, c->dv, bytes);
    return rc ? df_error_wrap(rc, "%s: AdamW's moments from the %s backend", c->who, c->be.ops->name)
              : DF_OK;
}

int df_train_core_moments_to_device(df_train_core *c)
{
    if (!c->dm) /* device_moments uploads them when it makes the device's */
        return DF_OK;
    const size_t bytes = (size_t)c->opt->n * sizeof(float);
    int rc = c->be.ops->upload(c->be.ctx, c->dm, c->opt->m, bytes);
    if (!rc)
        rc = c->be.ops->upload(c->be.ctx, c->dv, c->opt->v, bytes);
    return rc ? df_error_wrap(rc, "%s: AdamW's moments to the %s backend", c->who, c->be.ops->name)
              : DF_OK;
}

int df_train_core_grads_to_host(df_train_core *c)
{
    if (c->bgrads == c->grads || c->dev_optim)
        return DF_OK;
    int rc = c->be.ops->download(c->be.ctx, c->grads, c->bgrads,
                                 (size_t)df_train_core_n_train(c) * sizeof(float));
    return rc ? df_error_wrap(rc, "%s: gradients from the %s backend", c->who, c->be.ops->name) : DF_OK;
}

/* Make sure activations and per-token buffers fit every micro-batch of a plan. */
static int reserve(df_train_core *c, const df_batch *b, const int64_t *bounds, int64_t n_mb)
{
    int64_t max_tok, max_out;
    df_plan_extent(b, bounds, n_mb, &max_tok, &max_out);
    if (max_tok == 0) /* an empty batch (a DP rank's empty shard) needs nothing */
        return DF_OK;
    if (!c->acts || max_tok > c->acts_tokens || max_out > c->acts_out) {
        df_acts_free(c->acts);
        c->acts = NULL;
        c->acts_tokens = max_tok > c->acts_tokens ? max_tok : c->acts_tokens;
        c->acts_out = max_out > c->acts_out ? max_out : c->acts_out;
        /* a frozen core never runs a backward: forward-only activations */
        unsigned flags = (c->checkpoint ? DF_ACTS_CHECKPOINT : 0) | (c->bf16 ? DF_ACTS_BF16 : 0) |
                         (c->trainable ? 0 : DF_ACTS_FORWARD_ONLY);
        int rc = df_acts_create_ex(&c->be, &c->model->cfg, c->acts_tokens, c->acts_out, flags, &c->acts);
        if (!rc && c->dev_optim) /* one float32 copy on the device: the master weights */
            df_acts_borrow_weights(c->acts, &c->wmaster);
        if (!rc && c->bf16 && !(rc = make_w16(c)))
            rc = df_acts_share_weights16(c->acts, c->w16, c->model);
        if (!rc)
            rc = df_acts_load_weights(c->acts, c->model);
        if (!rc && c->lora)
            rc = df_acts_set_lora(c->acts, c->lora, c->bgrads);
        if (rc)
            return rc;
    }
    if (max_out > c->buf_cap) {
        bool ok = true;
        for (int i = 0; i < c->n_buf; i++) {
            free(c->buf[i]);
            ok = (c->buf[i] = malloc((size_t)max_out * sizeof(float))) && ok;
        }
        c->buf_cap = max_out;
        if (!ok) {
            c->buf_cap = 0; /* re-allocate next time */
            return df_error(DF_ENOMEM, "out of memory for %lld token buffers", (long long)max_out);
        }
    }
    return DF_OK;
}

int df_train_core_plan(df_train_core *c, const df_batch *b, int64_t rows, int64_t tokens, int64_t **bounds,
                       int64_t *n_mb)
{
    int rc = df_plan_micro_batches(b, rows, tokens, bounds, n_mb);
    if (!rc && (rc = reserve(c, b, *bounds, *n_mb)))
        free(*bounds);
    return rc;
}

int df_train_core_reduce(df_train_core *c, double *v, int n, df_comm_op op, int rc, const char *where)
{
    if (!c->dp)
        return rc;
    assert(n < DF_CORE_MAX_SUMS);
    double buf[DF_CORE_MAX_SUMS];
    memcpy(buf, v, (size_t)n * sizeof *v);
    buf[n] = rc ? 1.0 : 0.0; /* SUM counts failed ranks, MAX flags any */
    int crc = df_comm_allreduce(c->dp, buf, n + 1, DF_COMM_FLOAT64, op);
    if (rc)
        return rc;
    if (crc)
        return df_error_wrap(crc, "%s: data-parallel all-reduce of %s", c->who, where);
    if (buf[n] > 0)
        return df_error(DF_EINTERNAL,
                        "%s: another rank of the data-parallel group (%d ranks) failed before "
                        "the all-reduce of %s; its own error says why",
                        c->who, df_comm_size(c->dp), where);
    memcpy(v, buf, (size_t)n * sizeof *v);
    return DF_OK;
}

int df_train_core_allreduce_grads(df_train_core *c)
{
    int64_t n = df_train_core_n_train(c);
    const df_backend_ops *o = c->be.ops;
    if (c->dp && c->dev_optim && !c->dp_group) { /* collective: every rank's first all-reduce */
        int rc = o->group_open(c->be.ctx, c->dp, &c->dp_group);
        if (rc)
            return df_error_wrap(rc, "%s: the gradient all-reduce on the %s backend", c->who, o->name);
    }
    for (int64_t off = 0; c->dp && off < n; off += GRAD_BUCKET) {
        int64_t k = n - off < GRAD_BUCKET ? n - off : GRAD_BUCKET;
        int rc = c->dev_optim ? o->allreduce_sum(c->be.ctx, c->dp_group, c->bgrads + off, k)
                              : df_comm_allreduce(c->dp, c->grads + off, k, DF_COMM_FLOAT32, DF_COMM_SUM);
        if (rc)
            return df_error_wrap(rc, "%s: gradient all-reduce of elements %lld..%lld of %lld", c->who,
                                 (long long)off, (long long)(off + k), (long long)n);
    }
    return DF_OK;
}

double df_train_core_lr(const df_train_core *c)
{
    df_lr_schedule s = {.kind = c->o.schedule,
                        .warmup_steps = c->o.warmup_steps,
                        .total_steps = c->o.total_steps,
                        .min_lr_ratio = c->o.min_lr_ratio,
                        .num_cycles = c->o.num_cycles};
    return c->o.lr * df_lr_schedule_factor(&s, c->steps);
}

int df_train_core_nonfinite(df_train_core *c, df_metrics *m, const char *prefix, const char *what,
                            const char *where)
{
    char key[64];
    if (c->o.skip_nonfinite) {
        snprintf(key, sizeof key, "%s/nonfinite_steps", prefix);
        df_metrics_add(m, key, 1);
        return DF_OK;
    }
    return df_error(DF_EINVAL, "%s: %s is not finite%s%s%s: the update is refused and the run stops before "
                    "saving (lower the lr or check the data; trainer.skip_nonfinite_steps=true skips such "
                    "updates as verl does)", c->who, what, where ? " (" : "", where ? where : "", where ? ")" : "");
}

/* dev_optim: df_clip_grad_norm over bgrads (its norm, its rule for the coefficient). */
static int device_clip(df_train_core *c, double *norm)
{
    const df_backend_ops *o = c->be.ops;
    const int64_t n = c->model->n_params;
    int rc = o->grad_norm(c->be.ctx, c->bgrads, n, norm);
    const double max_norm = c->o.grad_clip;
    if (!rc && isfinite(*norm) && max_norm > 0) {
        const double coef = max_norm / (*norm + 1e-6);
        if (coef < 1.0)
            rc = o->scale(c->be.ctx, c->bgrads, n, (float)coef);
    }
    return rc ? df_error_wrap(rc, "%s: clipping the gradient on the %s backend", c->who, o->name) : DF_OK;
}

/* A sharded state steps over the group it was sliced for (df_train_core_set_comm may move dp). */
static int shard_group_kept(const df_train_core *c)
{
    if (c->shard && c->shard != c->dp)
        return df_error(DF_EINVAL, "%s: the data-parallel group changed after AdamW's state was sharded", c->who);
    return DF_OK;
}

/*
 * dev_optim, sharded: every rank's master weights whole again after each stepped its slice. The
 * others' slices are set to -0.0 and the blob summed over the group by the seam's allreduce_sum
 * (NCCL on a GPU; the seam has no broadcast): x + (-0.0) is x for every float x, +0.0 and NaN
 * included, in any order of the sum, so each weight keeps its owner's bits.
 */
static int device_share(df_train_core *c)
{
    const df_backend_ops *o = c->be.ops;
    float *w = c->wmaster.blob;
    const int64_t n = c->model->n_params, lo = c->shard_lo, hi = lo + c->opt->n;
    const int64_t at[2] = {0, hi}, len[2] = {lo, n - hi};
    int rc = DF_OK;
    for (int i = 0; i < 2 && !rc; i++)
        if (len[i] > 0 && !(rc = o->zero(c->be.ctx, w + at[i], len[i])))
            rc = o->scale(c->be.ctx, w + at[i], len[i], -1.0f);
    for (int64_t off = 0; !rc && off < n; off += GRAD_BUCKET)
        rc = o->allreduce_sum(c->be.ctx, c->dp_group, w + off, n - off < GRAD_BUCKET ? n - off : GRAD_BUCKET);
    return rc ? df_error_wrap(rc, "%s: the new weights of every optimizer shard on the %s backend", c->who,
                              o->name)
              : DF_OK;
}

/* dev_optim: df_adamw_step on the device's master weights (this rank's slice when sharded, then
   device_share), then their download to the model. */
static int device_adamw(df_train_core *c, double lr)
{
    const df_backend_ops *o = c->be.ops;
    df_model *m = c->model;
    /* the host's weights when they moved there (the first step, a loaded state): one upload */
    int rc = df_weights_dev_sync(&c->wmaster, &c->be, m, false);
    if (!rc)
        rc = device_moments(c);
    if (!rc)
        rc = shard_group_kept(c);
    if (!rc)
        rc = o->adamw_step(c->be.ctx, c->wmaster.blob + c->shard_lo, c->bgrads + c->shard_lo, c->dm, c->dv,
                           c->opt->n, &c->opt->cfg, c->opt->step + 1, lr);
    if (rc)
        return rc; /* lr or the backend: df_adamw_step's errors */
    c->opt->step++;
    if (c->shard && (rc = device_share(c)))
        return rc;
    rc = o->download(c->be.ctx, m->params, c->wmaster.blob, (size_t)m->n_params * sizeof(float));
    return rc ? df_error_wrap(rc, "%s: the new weights from the %s backend", c->who, o->name) : DF_OK;
}

/* dev_optim, after df_model_weights_changed: the master copy, which the forward reads
   (df_acts_borrow_weights), is this version; the bf16 copy is converted from it there. */
static int device_weights_out(df_train_core *c)
{
    c->wmaster.version = c->model->version;
    return c->w16 ? refresh_w16(c) : DF_OK;
}

/* df_adamw_step on the host over the trained blob, or (ZeRO-1) over this rank's slice of it, whose
   new values every rank then receives from its owner. */
static int host_adamw(df_train_core *c, double lr)
{
    float *p = c->lora ? c->lora->params : c->model->params;
    int rc = df_train_core_shard(c);
    if (!rc)
        rc = shard_group_kept(c);
    if (!rc)
        rc = df_adamw_step(c->opt, p + c->shard_lo, c->grads + c->shard_lo, lr);
    return !rc && c->shard ? df_train_core_share_slices(c, p) : rc;
}

int df_train_core_optimizer_step(df_train_core *c, double lr, df_metrics *m, const char *prefix, const char *where)
{
    char key[64], lr_key[64], what[96];
    double norm = 0;
    if (c->dev_optim) {
        int rc = device_clip(c, &norm);
        if (rc)
            return rc;
    } else {
        norm = df_clip_grad_norm(c->grads, df_train_core_n_train(c), c->o.grad_clip);
    }
    snprintf(key, sizeof key, "%s/grad_norm", prefix);
    snprintf(lr_key, sizeof lr_key, "%s/lr", prefix);
    if (!isfinite(norm)) { /* the weights stay as they are: skipped, or the run stops here */
        df_metrics_set(m, lr_key, lr);
        snprintf(what, sizeof what, "%s = %g", key, norm);
        return df_train_core_nonfinite(c, m, prefix, what, where);
    }
    int rc = c->dev_optim ? device_adamw(c, lr) : host_adamw(c, lr);
    if (!rc && c->lora) /* the model's targeted weights: W0 + s B A of the new adapter */
        rc = df_lora_merge(c->lora, c->model);
    df_model_weights_changed(c->model); /* copies of the old values are stale from here on */
    if (!rc) /* the bf16 copy and a device's copy follow */
        rc = c->dev_optim ? device_weights_out(c) : df_train_core_weights_changed(c);
    if (rc)
        return rc;
    df_metrics_mean(m, key, norm); /* grad_norm before lr: the order metrics.jsonl has always had */
    df_metrics_set(m, lr_key, lr);
    return DF_OK;
}

int df_train_core_rebased_offsets(df_train_core *c, const int64_t *ro, int64_t s, int64_t e, int64_t **out)
{
    if (e - s + 1 > c->offs_cap) {
        int64_t *o = realloc(c->offs, (size_t)(e - s + 1) * sizeof *o);
        if (!o)
            return df_error(DF_ENOMEM, "out of memory");
        c->offs = o;
        c->offs_cap = e - s + 1;
    }
    for (int64_t i = s; i <= e; i++)
        c->offs[i - s] = ro[i] - ro[s];
    *out = c->offs;
    return DF_OK;
}

static bool all_finite(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return false;
    return true;
}

/* This rank's part of one mini-batch's gradient into c->grads (zeroed first); bad[0]: the first
   micro-batch (from 1) after which the statistics were not finite, 0 if none; bad[1]: micro-batches. */
static int mini_local(df_train_core *c, const df_batch *mb, int64_t tokens, int64_t seqs,
                      const df_core_loss *l, double *sums, int64_t bad[2])
{
    bad[0] = bad[1] = 0;
    if (!mb || tokens <= 0)
        return df_train_core_no_grads(c);
    int64_t *bounds, n_mb;
    int rc = df_train_core_zero_grads(c);
    if (!rc)
        rc = df_train_core_plan(c, mb, l->micro_rows, l->micro_tokens, &bounds, &n_mb);
    if (rc)
        return rc;
    bad[1] = n_mb;
    for (int64_t k = 0; !rc && k < n_mb; k++) {
        df_kill_point("update"); /* test-only: a crash between micro-batches */
        if (!(rc = l->micro(l->user, mb, bounds[k], bounds[k + 1], tokens, seqs, sums))) {
            if (!bad[0] && !all_finite(sums, l->n_sums))
                bad[0] = k + 1;
            c->bar_done += bounds[k + 1] - bounds[k];
            df_progress_update(&c->bar, c->bar_done, NULL);
        }
    }
    free(bounds);
    return rc ? rc : df_train_core_grads_to_host(c);
}

/* The first statistic of sums that is not finite, "<prefix>/<name> = <value>", into what; false if none. */
static bool nonfinite_sum(const df_core_loss *l, const double *sums, char *what, size_t cap)
{
    for (int i = 0; i < l->n_sums; i++)
        if (!isfinite(sums[i])) {
            snprintf(what, cap, "%s/%s = %g", l->prefix, l->sum_names ? l->sum_names[i] : "loss", sums[i]);
            return true;
        }
    return false;
}

/*
 * One optimizer step on mini-batch `mb` (this rank's rows; NULL when it has none).
 * Normalisers are the DP group's totals, so summing the ranks' gradients gives the
 * gradient of the global mini-batch loss (verl agg_loss with global batch info).
 * `where` names the mini-batch in errors.
 */
static int mini_batch(df_train_core *c, const df_batch *mb, double lr, const df_core_loss *l, df_metrics *m,
                      int rc, const char *where)
{
    double tot[2] = {0, 0}; /* model tokens, responses with some (verl's seq-mean count) */
    if (mb) {
        const int32_t *mask = NULL; /* multi-turn: appended tokens are not the policy's */
        if (!rc)
            rc = df_batch_response_mask(mb, &mask);
        int64_t tk, sq;
        df_loss_agg_count_masked(df_batch_size(mb), df_batch_offsets(mb, "response_ids"), mask, &tk, &sq);
        tot[0] = (double)tk;
        tot[1] = (double)sq;
    }
    if ((rc = df_train_core_reduce(c, tot, 2, DF_COMM_SUM, rc, "the mini-batch sizes")))
        return rc;
    double sums[DF_CORE_MAX_SUMS] = {0};
    int64_t bad[2];
    rc = mini_local(c, mb, (int64_t)tot[0], (int64_t)tot[1], l, sums, bad);
    if ((rc = df_train_core_reduce(c, sums, l->n_sums, DF_COMM_SUM, rc, "the loss statistics")) ||
        (tot[0] > 0 && (rc = df_train_core_allreduce_grads(c)))) /* no tokens anywhere: zero gradient */
        return rc;
    char what[160], at[256];
    /* the sums are the group's: every rank sees the same non-finite statistic and decides alike */
    if (nonfinite_sum(l, sums, what, sizeof what)) {
        if (bad[0])
            snprintf(at, sizeof at, "%s, micro-batch %lld of %lld on rank %d of the data-parallel group", where,
                     (long long)bad[0], (long long)bad[1], c->dp ? df_comm_rank(c->dp) : 0);
        else
            snprintf(at, sizeof at, "%s, from another rank of the data-parallel group", where);
        return df_train_core_nonfinite(c, m, l->prefix, what, at);
    }
    l->record(l->user, sums, m);
    return df_train_core_optimizer_step(c, lr, m, l->prefix, where);
}

/* *out = b's rows in the order of the next permutation from `order`, or NULL (b as is) when
 * there is nothing to permute. */
static int permuted(const df_batch *b, df_rng *order, df_batch **out)
{
    int64_t n = df_batch_size(b);
    *out = NULL;
    if (n < 2)
        return DF_OK;
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    if (!idx)
        return df_error(DF_ENOMEM, "update: out of memory for the shuffle of %lld samples", (long long)n);
    for (int64_t i = 0; i < n; i++)
        idx[i] = i;
    df_rng_shuffle_i64(order, idx, n);
    int rc = df_batch_select(b, idx, n, out);
    free(idx);
    return rc;
}

int df_train_core_update(df_train_core *c, df_batch *b, int64_t mini_batch_size, int epochs,
                         const df_core_loss *loss, df_metrics *m, int rc)
{
    int64_t n = df_batch_size(b);
    int64_t mbs = mini_batch_size > 0 ? mini_batch_size : (n > 0 ? n : 1);
    /* Every rank takes as many optimizer steps as the rank with the most mini-batches;
       ranks that ran out of rows join them with zero gradients. */
    double n_mini = rc ? 0 : (double)((n + mbs - 1) / mbs);
    if ((rc = df_train_core_reduce(c, &n_mini, 1, DF_COMM_MAX, rc, "the mini-batch count")))
        return rc;
    double lr = df_train_core_lr(c);
    if (epochs <= 0)
        epochs = 1;
    df_progress_begin(&c->bar, c->progress_label, (int64_t)epochs * n);
    c->bar_done = 0;
    df_rng order; /* seeded at every update, as verl's make_iterator seeds its generator */
    df_rng_seed(&order, df_rng_key(loss->shuffle_seed, 0, 0, 0));
    for (int ep = 0; ep < epochs && !rc; ep++) {
        df_batch *shuffled = NULL;
        if (loss->shuffle)
            rc = permuted(b, &order, &shuffled); /* a failure still joins the collectives below */
        const df_batch *src = shuffled ? shuffled : b;
        for (int64_t k = 0; k < (int64_t)n_mini; k++) {
            int64_t s = k * mbs < n ? k * mbs : n, e = s + mbs < n ? s + mbs : n;
            df_batch *sliced = NULL; /* the whole batch is used as is, never copied */
            const df_batch *mb = e > s && s == 0 && e == n ? src : NULL;
            if (!rc && e > s && !mb && !(rc = df_batch_slice(src, s, e, &sliced)))
                mb = sliced;
            char where[96];
            snprintf(where, sizeof where, "mini-batch %lld of %lld, epoch %d of %d", (long long)k + 1,
                     (long long)n_mini, ep + 1, epochs);
            rc = mini_batch(c, mb, lr, loss, m, rc, where);
            df_batch_free(sliced);
            if (rc)
                break;
        }
        df_batch_free(shuffled);
    }
    df_progress_end(&c->bar);
    c->steps++;
    return rc;
}

int df_train_core_need_columns(const df_batch *b, const char *const *cols, int n, const char *what)
{
    const df_column *resp = df_batch_column(b, "response_ids");
    int64_t rows = df_batch_size(b);
    for (int i = 0; i < n; i++) {
        const df_column *col = df_batch_column(b, cols[i]);
        if (!col)
            return df_error(DF_EINVAL, "%s needs column '%s'", what, cols[i]);
        if (!strcmp(cols[i], "prompt_ids") || !strcmp(cols[i], "response_ids"))
            continue;
        if (col->kind != DF_COL_TOK_F32 || !resp ||
            memcmp(col->offsets, resp->offsets, (size_t)(rows + 1) * sizeof *col->offsets))
            return df_error(DF_EINVAL, "%s: column '%s' must hold one float per response token (laid out "
                                       "like response_ids)", what, cols[i]);
    }
    return DF_OK;
}
