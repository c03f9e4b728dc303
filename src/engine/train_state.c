/* A trainable role's resume state as one safetensors file (train_core.h: df_train_core_save_state). */
#include "engine/train_core.h"

#include "model/safetensors.h"
#include "util/finite.h"
#include "util/fsutil.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_FORMAT "distflow-train-state/1"

static int set_i64(df_st_writer *w, const char *key, int64_t v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    return df_st_writer_set_metadata(w, key, buf);
}

/* The LoRA metadata of a state: rank, alpha ("%.17g") and targets (PEFT names, comma-separated,
 * in layout order). */
static void lora_meta(const df_lora *l, char v[3][160])
{
    snprintf(v[0], 160, "%lld", (long long)l->cfg.rank);
    snprintf(v[1], 160, "%.17g", l->cfg.alpha);
    v[2][0] = 0;
    for (int t = 0; t < DF_LORA_N_TARGETS; t++)
        if (l->cfg.targets >> t & 1u)
            snprintf(v[2] + strlen(v[2]), 160 - strlen(v[2]), "%s%s", v[2][0] ? "," : "",
                     df_lora_target_name((df_lora_target)t));
}

static const char *const lora_keys[3] = {"lora_rank", "lora_alpha", "lora_targets"};

/* With LoRA, "params" and the moments are the adapter's: its rank, alpha and targets say so. */
static int set_lora_meta(df_st_writer *w, const df_lora *l)
{
    if (!l)
        return DF_OK;
    char v[3][160];
    lora_meta(l, v);
    int rc = DF_OK;
    for (int i = 0; i < 3 && !rc; i++)
        rc = df_st_writer_set_metadata(w, lora_keys[i], v[i]);
    return rc;
}

int df_train_core_save_state(df_train_core *c, const char *path)
{
    if (!c->trainable)
        return df_error(DF_EINVAL, "%s: only a trainable %s has a training state", path, c->who);
    df_st_writer *w = NULL;
    int64_t shape[1] = {df_train_core_n_train(c)};
    float *params = c->lora ? c->lora->params : c->model->params;
    int rc = df_train_core_shard(c); /* AdamW's state, if no step made it yet */
    /* a device's moments to the host's copy first (model->params is current after every step) */
    if (!rc)
        rc = df_train_core_moments_to_host(c);
    if (!rc)
        rc = df_st_writer_new(&w);
    /* the master weights too: the HF directory beside may hold them rounded to bf16 / f16 */
    if (!rc)
        rc = df_st_writer_add_borrowed(w, "params", DF_DTYPE_F32, 1, shape, params);
    if (!rc)
        rc = df_train_core_add_moments(c, w, shape);
    if (!rc)
        rc = df_st_writer_set_metadata(w, "format", STATE_FORMAT);
    if (!rc)
        rc = df_st_writer_set_metadata(w, "role", c->who);
    if (!rc)
        rc = set_i64(w, "optim_step", c->opt->step);
    if (!rc)
        rc = set_i64(w, "lr_scheduler_step", c->steps);
    if (!rc)
        rc = set_lora_meta(w, c->lora);
    if (!rc)
        rc = df_st_writer_write(w, path);
    df_st_writer_free(w);
    return rc ? df_error_wrap(rc, "saving the %s's training state", c->who) : DF_OK;
}

/* Metadata key as a non-negative int64, else DF_EINVAL naming the file and key. */
static int get_i64(const df_st_file *f, const char *key, int64_t *out)
{
    const char *s = df_st_metadata(f, key);
    char *end = NULL;
    long long v = s ? strtoll(s, &end, 10) : -1;
    if (!s || end == s || *end || v < 0)
        return df_error(DF_EINVAL, "%s: metadata \"%s\" is missing or not a count", df_st_path(f), key);
    *out = (int64_t)v;
    return DF_OK;
}

/* The file's LoRA metadata against the core's: both without, or the same rank, alpha, targets. */
static int check_lora_meta(const df_st_file *f, const df_lora *l)
{
    const char *r = df_st_metadata(f, "lora_rank");
    if (!r && !l)
        return DF_OK;
    if (!r || !l)
        return df_error(DF_EINVAL, "%s: the state is of %s and this run trains %s", df_st_path(f),
                        r ? "LoRA adapters" : "the whole model", l ? "LoRA adapters" : "the whole model");
    char want[3][160];
    lora_meta(l, want);
    for (int i = 0; i < 3; i++) {
        const char *got = df_st_metadata(f, lora_keys[i]);
        if (!got || strcmp(got, want[i]))
            return df_error(DF_EINVAL, "%s: metadata %s is %s and this run's is %s", df_st_path(f),
                            lora_keys[i], got ? got : "(none)", want[i]);
    }
    return DF_OK;
}

/* Elements [lo, lo + count) of tensor `name` of f, which must be F32 [n], copied into dst. */
static int read_slice(const df_st_file *f, const char *name, int64_t n, int64_t lo, int64_t count, float *dst)
{
    df_st_tensor t;
    int rc = df_st_find(f, name, &t);
    if (rc)
        return rc;
    if (t.dtype != DF_DTYPE_F32 || t.ndim != 1 || t.shape[0] != n)
        return df_error(DF_EINVAL, "%s: tensor %s must be F32 [%" PRId64 "] (this model's parameter count)",
                        df_st_path(f), name, n);
    memcpy(dst, (const float *)t.data + lo, (size_t)count * sizeof(float));
    int64_t bad = df_first_nonfinite(dst, count); /* resuming from it would train on NaN */
    if (bad >= 0)
        return df_error(DF_EINVAL, "%s: tensor %s holds a non-finite value (%g) at element %" PRId64 " of %" PRId64,
                        df_st_path(f), name, (double)dst[bad], lo + bad, n);
    return DF_OK;
}

static int read_blob(const df_st_file *f, const char *name, int64_t n, float *dst)
{
    return read_slice(f, name, n, 0, n, dst);
}

int df_train_core_load_state(df_train_core *c, const char *path)
{
    if (!c->trainable)
        return df_error(DF_EINVAL, "%s: only a trainable %s has a training state", path, c->who);
    df_st_file *f = NULL;
    int rc = df_train_core_shard(c); /* ZeRO-1: this rank's slice of the moments only */
    if (!rc)
        rc = df_st_open(path, &f);
    if (rc)
        return df_error_wrap(rc, "loading the %s's training state", c->who);
    const char *fmt = df_st_metadata(f, "format");
    int64_t n = df_train_core_n_train(c), opt_step = 0, sched_step = 0;
    if (!fmt || strcmp(fmt, STATE_FORMAT))
        rc = df_error(DF_EINVAL, "%s: not a distflow training state (metadata format \"%s\", expected \"%s\")",
                      path, fmt ? fmt : "(none)", STATE_FORMAT);
    if (!rc)
        rc = check_lora_meta(f, c->lora);
    if (!rc)
        rc = get_i64(f, "optim_step", &opt_step);
    if (!rc)
        rc = get_i64(f, "lr_scheduler_step", &sched_step);
    /* read everything into the optimizer before touching the weights: a bad file changes nothing
       the caller would keep using (it fails the run anyway) */
    if (!rc)
        rc = read_slice(f, "exp_avg", n, c->shard_lo, c->opt->n, c->opt->m);
    if (!rc)
        rc = read_slice(f, "exp_avg_sq", n, c->shard_lo, c->opt->n, c->opt->v);
    if (!rc && c->lora) { /* the adapter, then the model's merged weights */
        rc = read_blob(f, "params", n, c->lora->params);
        if (!rc)
            rc = df_lora_merge(c->lora, c->model);
    } else if (!rc) {
        rc = read_blob(f, "params", n, c->model->params);
        df_model_weights_changed(c->model); /* even a failed read may have written some */
    }
    df_st_close(f);
    if (rc)
        return df_error_wrap(rc, "loading the %s's training state", c->who);
    c->opt->step = opt_step;
    c->steps = sched_step;
    /* the bf16 copy and a device backend's copy of the weights follow the loaded ones, and a
       device's moments (its master weights follow the model's new version at the next step) */
    rc = df_train_core_weights_changed(c);
    if (!rc)
        rc = df_train_core_moments_to_device(c);
    return rc ? df_error_wrap(rc, "loading the %s's training state", c->who) : DF_OK;
}

int df_train_core_save_lora(const df_train_core *c, const char *dir, const char *base_model)
{
    if (!c->lora)
        return DF_OK;
    char *d = df_path_join(dir, "lora_adapter");
    int rc = d ? df_lora_save_peft(c->lora, d, base_model) : df_error(DF_ENOMEM, "out of memory");
    free(d);
    return rc ? df_error_wrap(rc, "saving the %s's LoRA adapter", c->who) : DF_OK;
}
