/*
 * The optimizer on a device backend (issue 18): with the optimizer's entries of df_backend_ops
 * (adamw_step, grad_norm, scale, group_open / _close, allreduce_sum) the actor keeps its
 * gradient, master weights and AdamW moments in the backend's memory and all-reduces, clips and
 * steps there (train_core.c, dev_optim). Checked on any machine through the emulated device of
 * tests/emu_backend.h (the CPU's operators over memory the host cannot touch between calls):
 *
 *   - an actor's updates on the device are the CPU actor's to the bit: weights after every
 *     update (one optimizer step, then several), the grad_norm metric and the losses, with
 *     the clip active; the same for a device without the optimizer's entries (the host
 *     optimizer: one gradient download and one weight upload per step);
 *   - the device's transfers: no weight upload after the first step, one weight download per
 *     step, no gradient download; the forward reads the master weights (no second copy);
 *   - the training state: the file a device actor saves is the CPU actor's byte for byte (its
 *     moments downloaded), and an actor resumed from it on the device continues as the CPU's;
 *   - the test can fail: swapped betas in the device's AdamW, a device clip that does not
 *     scale, and (under MPI) an all-reduce that does nothing each change the weights;
 *   - a colocated rollout on the same device reads the actor's master weights after a step (no
 *     weight transfer, its own copy freed), drawing what an engine with its own copy draws, and
 *     its own copy again once the model's weights change outside a step (the master is stale);
 *   - ZeRO-1 on the device (fsdp_size -1, under mpiexec): each rank's device holds the moments of
 *     its slice only, steps it and shares it (the others' slices -0.0, summed): the weights, the
 *     grad_norm and the streamed checkpoint are the replicated CPU actor's bit for bit, and a
 *     sharded device actor resumed from that file continues as the CPU's;
 *   - the CPU's entries are the host functions (df_adamw_step, df_grad_norm, the clip's
 *     scaling, df_comm_allreduce), bit for bit; a device's norm may add in another order:
 *     within the bound derived below of df_grad_norm's, which a float32 sum exceeds.
 *
 * The same ops on the same inputs run on both sides (the all-reduce too: a sum of two ranks is
 * one commutative addition), so everything but the norm's order test is compared with memcmp.
 * Runs as one rank and under mpiexec, where each rank trains its shard of the batch:
 * mpi-test: np 2
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "emu_backend.h" /* before testmpi.h: its parameters N and W would shadow the world's */
#include "testmpi.h"

#include "distflow/backend.h"
#include "distflow/optim.h"
#include "distflow/rng.h"
#include "distflow/rollout.h"
#include "engine/actor.h"
#include "engine/rollout_internal.h"
#include "engine/train_core.h"
#include "model/acts.h"
#include "tolerance.h"
#include "util/fsutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ROWS = 8 };

static df_actor_params params(int epochs)
{
    df_actor_params p = {.optim.lr = 1e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.99, .optim.adam_eps = 1e-6,
                         .optim.weight_decay = 0.01, .optim.grad_clip = 0.05, .mini_batch_size = 0,
                         .micro_batch_size = 2, .logprob_micro_batch_size = 2, .loss.ppo_epochs = epochs,
                         .loss.policy_loss = "vanilla", .loss.loss_agg_mode = "token-mean",
                         .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.28, .loss.clip_ratio_c = 3.0,
                         .loss.entropy_coeff = 0.01, .use_kl_loss = true, .loss.kl_loss_coef = 0.1,
                         .loss.kl_loss_type = "low_var_kl", .temperature = 0.8f};
    return p;
}

/* This rank's shard of a PPO batch every rank builds alike: old log-probs near the model's. */
static df_batch *shard(void)
{
    df_batch *b = df_test_synth_batch(5, ROWS), *s = NULL;
    df_actor *a;
    df_actor_params p = params(1);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, false, &a), 0);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    df_actor_free(a);
    df_test_ppo_columns(b);
    assert_int_equal(df_batch_slice(b, (int64_t)R * ROWS / N, (int64_t)(R + 1) * ROWS / N, &s), 0);
    df_batch_free(b);
    return s;
}

/* A trainable actor of the test model on `be` (NULL: the CPU), over the world when N > 1, its
   AdamW state sharded over it (ZeRO-1) or whole. */
static df_actor *actor_on_ex(const df_backend *be, uint64_t seed, bool shard)
{
    df_actor *a;
    df_actor_params p = params(1);
    p.optim.shard_optim = shard;
    assert_int_equal(df_actor_create(df_test_micro_model(seed), &p, true, &a), 0);
    if (be)
        assert_int_equal(df_actor_set_backend(a, be), 0);
    df_actor_set_comm(a, N > 1 ? W : NULL);
    return a;
}

static df_actor *actor_on(const df_backend *be, uint64_t seed)
{
    return actor_on_ex(be, seed, false);
}

/* One update over b (one mini-batch) of `epochs` passes, an optimizer step each; its metrics. */
static df_metrics *update(df_actor *a, const df_batch *b, int epochs)
{
    df_actor_params p = params(epochs);
    df_actor_set_loss(a, &p.loss);
    df_batch *x = NULL;
    assert_int_equal(df_batch_slice(b, 0, df_batch_size(b), &x), 0);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, x, m), 0);
    df_batch_free(x);
    return m;
}

static emu_dev *new_dev(df_backend *be)
{
    emu_dev *d = calloc(1, sizeof *d);
    assert_non_null(d);
    *be = emu_open(d);
    return d;
}

static void test_updates_are_the_cpus(void **state)
{
    (void)state;
    df_batch *b = shard();
    df_backend be, be_host;
    emu_dev *dev = new_dev(&be), *host = new_dev(&be_host);
    emu_no_optim(host);
    df_actor *cpu = actor_on(NULL, 3), *d = actor_on(&be, 3), *h = actor_on(&be_host, 3);
    assert_true(df_actor_core(d)->dev_optim);
    assert_false(df_actor_core(h)->dev_optim);
    assert_false(df_actor_core(cpu)->dev_optim);
    const df_model *mc = df_actor_model(cpu), *md = df_actor_model(d), *mh = df_actor_model(h);
    const int64_t wbytes = mc->n_params * (int64_t)sizeof(float);
    int64_t steps = 0;
    for (int k = 0; k < 4; k++) {
        /* three updates of one optimizer step, then one of three (ppo_epochs) */
        const int epochs = k < 3 ? 1 : 3;
        const int64_t n_steps = epochs;
        const int64_t up0 = dev->up_bytes, down0 = dev->down_bytes, hup0 = host->up_bytes;
        df_metrics *mcpu = update(cpu, b, epochs), *mdev = update(d, b, epochs),
                   *mhost = update(h, b, epochs);
        steps += n_steps;
        if (!df_test_same_params(mc, md) || !df_test_same_params(mc, mh))
            fail_msg("update %d: the device's weights (optimizer %s) are not the CPU's", k + 1,
                     df_test_same_params(mc, md) ? "on the host" : "on the device");
        const char *keys[] = {"actor/grad_norm", "actor/pg_loss", "actor/kl_loss", "actor/lr"};
        for (int i = 0; i < 4; i++)
            if (!df_test_same_metric(mcpu, mdev, keys[i]) || !df_test_same_metric(mcpu, mhost, keys[i]))
                fail_msg("update %d: %s %.9g on the CPU, %.9g / %.9g on the device", k + 1, keys[i],
                         df_metrics_get(mcpu, keys[i], NAN), df_metrics_get(mdev, keys[i], NAN),
                         df_metrics_get(mhost, keys[i], NAN));
        /* the clip took part: the norm is above grad_clip (0.05) */
        assert_true(df_metrics_get(mcpu, "actor/grad_norm", 0) > 0.05);
        /* on the device: the weights come down once per step, never up after the first step (the
           batch's index arrays and the loss's inputs are far smaller), no gradient comes down */
        const int64_t up = dev->up_bytes - up0, down = dev->down_bytes - down0;
        if (k > 0)
            assert_true(up < wbytes);
        assert_true(down >= n_steps * wbytes && down < n_steps * wbytes + wbytes / 2);
        /* the host optimizer: a weight upload per step */
        assert_true(host->up_bytes - hup0 >= n_steps * wbytes);
        print_message("update %d (rank %d): %lld steps, grad_norm %.6g, device up %lld / down %lld bytes "
                      "(weights %lld)\n", k + 1, R, (long long)n_steps,
                      df_metrics_get(mcpu, "actor/grad_norm", NAN), (long long)up, (long long)down,
                      (long long)wbytes);
        df_metrics_free(mcpu), df_metrics_free(mdev), df_metrics_free(mhost);
    }
    /* the forward reads the master weights: one float32 copy of the model on the device */
    const df_train_core *cd = df_actor_core(d);
    assert_ptr_equal(cd->acts->wlent, &cd->wmaster);
    assert_null(cd->acts->wdev.blob);
    const df_model_view *fw = NULL;
    assert_int_equal(df_acts_weights(cd->acts, md, &fw), 0);
    assert_ptr_equal(fw->embed, cd->wmaster.view.embed);
    assert_int_equal(dev->adamw_steps, steps);
    assert_int_equal(host->adamw_steps, 0);
    assert_true(N > 1 ? dev->allreduces > 0 : dev->allreduces == 0);
    assert_int_equal(host->allreduces, 0);
    df_actor_free(d);
    df_actor_free(h);
    df_actor_free(cpu);
    assert_int_equal(emu_buffers(dev), 0); /* moments, master weights, gradient: all released */
    assert_int_equal(emu_buffers(host), 0);
    free(dev), free(host);
    df_batch_free(b);
}

/* One sampled rollout of 4 prompts x 2 on engine e from m. */
static df_rollout_result rollout_of(df_rollout_engine *e, const df_model *m)
{
    static const int64_t off[] = {0, 3, 5, 9, 10};
    static const int32_t tok[] = {1, 7, 3, 9, 2, 5, 5, 8, 11, 4};
    df_rollout_request q = {4, off, tok, 2, 9, NULL, NULL};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 6;
    sp.top_k = 10;
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), 0);
    return r;
}

/* A colocated rollout on the actor's device reads the actor's master weights after a step (no
 * weight transfer, its own copy freed) and draws what an engine with its own copy draws; before
 * the first step (no master copy yet) it uploads its own. */
static void test_rollout_reads_the_actors_weights(void **state)
{
    (void)state;
    if (N > 1)
        return; /* one actor is enough */
    df_batch *b = shard();
    df_backend be;
    emu_dev *dev = new_dev(&be);
    df_actor *a = actor_on(&be, 3);
    const df_model *m = df_actor_model(a);
    const int64_t wbytes = m->n_params * (int64_t)sizeof(float);
    df_rollout_options o = {8, 32, 0, DF_ROLLOUT_F32, &be, false, false, false};
    df_rollout_engine *shared, *own;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &shared), 0);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &own), 0);
    assert_int_equal(df_rollout_engine_share_device_weights(shared, df_actor_device_weights(a)), 0);
    int64_t up0 = dev->up_bytes;
    df_rollout_result r0 = rollout_of(shared, m);
    assert_true(dev->up_bytes - up0 >= wbytes); /* no master copy yet: its own, uploaded */
    df_metrics_free(update(a, b, 1));
    up0 = dev->up_bytes;
    const int held = emu_buffers(dev);
    df_rollout_result r1 = rollout_of(shared, m);
    assert_true(dev->up_bytes - up0 < wbytes); /* the actor's, read where they are */
    assert_int_equal(emu_buffers(dev), held - 1); /* its own copy freed */
    df_rollout_result r2 = rollout_of(own, m);
    assert_memory_equal(r1.tokens, r2.tokens, (size_t)r1.offsets[r1.n_seqs] * 4);
    assert_memory_equal(r1.log_probs, r2.log_probs, (size_t)r1.offsets[r1.n_seqs] * 4);
    assert_memory_not_equal(r0.log_probs, r1.log_probs, (size_t)r0.offsets[r0.n_seqs] * 4);
    /* the model's weights changed outside a step (a loaded state does so): the master copy is
       stale until the next step, so the rollout reads its own, uploaded */
    df_model *mm = df_actor_model(a);
    for (int64_t i = 0; i < mm->n_params; i += 3)
        mm->params[i] *= 0.5f;
    df_model_weights_changed(mm);
    df_rollout_result_free(&r1), df_rollout_result_free(&r2);
    r1 = rollout_of(shared, m), r2 = rollout_of(own, m);
    assert_memory_equal(r1.log_probs, r2.log_probs, (size_t)r1.offsets[r1.n_seqs] * 4);
    df_rollout_result_free(&r0), df_rollout_result_free(&r1), df_rollout_result_free(&r2);
    df_rollout_engine_free(shared);
    df_rollout_engine_free(own);
    df_actor_free(a);
    assert_int_equal(emu_buffers(dev), 0);
    free(dev);
    df_batch_free(b);
}

/* Save after two updates, resume on a device actor of other weights, continue: the CPU's bits. */
static void test_state_save_and_resume(void **state)
{
    (void)state;
    df_batch *b = shard();
    df_backend be, be2;
    emu_dev *dev = new_dev(&be), *dev2 = new_dev(&be2);
    df_actor *cpu = actor_on(NULL, 3), *d = actor_on(&be, 3);
    for (int k = 0; k < 2; k++) {
        df_metrics_free(update(cpu, b, k ? 2 : 1));
        df_metrics_free(update(d, b, k ? 2 : 1));
    }
    char dir[] = "/tmp/df_test_devopt_XXXXXX", pa[64], pb[64];
    assert_non_null(mkdtemp(dir));
    snprintf(pa, sizeof pa, "%s/cpu.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/dev.safetensors", dir);
    assert_int_equal(df_actor_save_state(cpu, pa), 0);
    assert_int_equal(df_actor_save_state(d, pb), 0);
    /* the moments came down for the file */
    const df_train_core *cc = df_actor_core(cpu), *cd = df_actor_core(d);
    const size_t bytes = (size_t)cc->model->n_params * sizeof(float);
    assert_memory_equal(cc->opt->m, cd->opt->m, bytes);
    assert_memory_equal(cc->opt->v, cd->opt->v, bytes);
    assert_int_equal(cc->opt->step, cd->opt->step);
    df_test_same_file(pa, pb);
    /* resumed on the device from other weights: the moments go up, the weights at the next step */
    df_actor *r = actor_on(&be2, 9);
    assert_int_equal(df_actor_load_state(r, pb), 0);
    df_metrics *mc = update(cpu, b, 2), *mr = update(r, b, 2);
    assert_true(df_test_same_params(df_actor_model(cpu), df_actor_model(r)));
    assert_true(df_test_same_metric(mc, mr, "actor/grad_norm"));
    assert_true(df_test_same_metric(mc, mr, "actor/lr"));
    assert_int_equal(df_actor_step_count(cpu), df_actor_step_count(r));
    df_metrics_free(mc), df_metrics_free(mr);
    unlink(pa), unlink(pb), rmdir(dir);
    df_actor_free(r), df_actor_free(d), df_actor_free(cpu);
    assert_int_equal(emu_buffers(dev), 0);
    assert_int_equal(emu_buffers(dev2), 0);
    free(dev), free(dev2);
    df_batch_free(b);
}

/* Rank 0 saves a's training state to path, streamed from every rank when a's state is sharded. */
static void save_from_all(df_actor *a, const char *path)
{
    df_train_core *c = df_actor_core(a);
    assert_int_equal(df_train_core_gather_begin(c, R == 0), 0);
    if (R == 0)
        assert_int_equal(df_actor_save_state(a, path), 0);
    assert_int_equal(df_train_core_gather_end(c), 0);
}

/* The index of a weight no rank's gradient touches: column 0 of the embedding row of a token the
   batch never holds (the LM head is untied). */
static int64_t untouched_weight(const df_model *m)
{
    df_batch *b = df_test_synth_batch(5, ROWS);
    bool used[64] = {false};
    const char *f[2] = {"prompt_ids", "response_ids"};
    assert_true(m->cfg.vocab_size <= 64 && !m->cfg.tie_word_embeddings);
    for (int i = 0; i < 2; i++)
        for (int64_t r = 0, len = 0; r < ROWS; r++) {
            const int32_t *t = df_batch_tok_i32(b, f[i], r, &len);
            for (int64_t k = 0; k < len; k++)
                used[t[k]] = true;
        }
    df_batch_free(b);
    int64_t row = 0;
    while (row < m->cfg.vocab_size && used[row])
        row++;
    assert_true(row < m->cfg.vocab_size);
    return df_model_find_tensor(m, "model.embed_tokens.weight")->offset + row * m->cfg.hidden_size;
}

/* Weight i set to -0.0 in a's model: AdamW keeps it there while its gradient is 0, and the sharded
   device's share must too (a sum with +0.0 would make it +0.0). */
static void negative_zero(df_actor *a, int64_t i)
{
    df_model *m = df_actor_model(a);
    m->params[i] = -0.0f;
    df_model_weights_changed(m);
}

static void test_sharded_on_the_device(void **state)
{
    (void)state;
    df_batch *b = shard();
    df_backend be, be2;
    emu_dev *dev = new_dev(&be), *dev2 = new_dev(&be2);
    df_actor *cpu = actor_on(NULL, 3), *d = actor_on_ex(&be, 3, true);
    const int64_t z = untouched_weight(df_actor_model(cpu));
    negative_zero(cpu, z), negative_zero(d, z);
    for (int k = 0; k < 3; k++) {
        df_metrics *mc = update(cpu, b, k < 2 ? 1 : 2), *md = update(d, b, k < 2 ? 1 : 2);
        if (!df_test_same_params(df_actor_model(cpu), df_actor_model(d)))
            fail_msg("update %d: the sharded device actor's weights are not the CPU's", k + 1);
        assert_true(df_test_same_metric(mc, md, "actor/grad_norm"));
        df_metrics_free(mc), df_metrics_free(md);
    }
    const float wz = df_actor_model(cpu)->params[z];
    assert_true(wz == 0.0f && signbit(wz)); /* still -0.0: the comparison above covered it */
    const df_train_core *cd = df_actor_core(d);
    const int64_t n = cd->model->n_params;
    int64_t lo = 0, hi = n;
    if (N > 1)
        df_train_core_shard_range(n, R, N, &lo, &hi);
    assert_true(cd->dev_optim && (N > 1) == (cd->shard != NULL));
    assert_true(cd->shard_lo == lo && cd->opt->n == hi - lo); /* dm, dv: that many floats */
    print_message("rank %d: moments of [%lld, %lld) of %lld weights on the device\n", R, (long long)lo,
                  (long long)hi, (long long)n);
    char dir[] = "/tmp/df_test_devzero_XXXXXX", pa[64], pb[64];
    if (R == 0)
        assert_non_null(mkdtemp(dir));
    assert_int_equal(df_comm_broadcast(W, dir, sizeof dir, 0), 0);
    snprintf(pa, sizeof pa, "%s/cpu.safetensors", dir);
    snprintf(pb, sizeof pb, "%s/dev.safetensors", dir);
    save_from_all(cpu, pa);
    save_from_all(d, pb);
    if (R == 0)
        df_test_same_file(pa, pb);
    assert_int_equal(df_comm_barrier(W), 0);
    df_actor *r = actor_on_ex(&be2, 9, true); /* each rank reads its slice, uploaded at the step */
    assert_int_equal(df_actor_load_state(r, pb), 0);
    df_metrics *mc = update(cpu, b, 2), *mr = update(r, b, 2);
    assert_true(df_test_same_params(df_actor_model(cpu), df_actor_model(r)));
    assert_true(df_test_same_metric(mc, mr, "actor/grad_norm"));
    df_metrics_free(mc), df_metrics_free(mr);
    assert_int_equal(df_comm_barrier(W), 0);
    if (R == 0)
        unlink(pa), unlink(pb), rmdir(dir);
    df_actor_free(r), df_actor_free(d), df_actor_free(cpu);
    assert_int_equal(emu_buffers(dev), 0);
    assert_int_equal(emu_buffers(dev2), 0);
    free(dev), free(dev2);
    df_batch_free(b);
}

/* ---- mutations of the device's entries: each must change the weights ---------------------- */

static int swapped_betas(void *ctx, float *p, const float *g, float *m, float *v, int64_t n,
                         const df_adamw_config *cfg, int64_t step, double lr)
{
    df_adamw_config s = *cfg;
    s.beta1 = cfg->beta2, s.beta2 = cfg->beta1;
    return emu_adamw_step(ctx, p, g, m, v, n, &s, step, lr);
}

static int no_scale(void *ctx, float *x, int64_t n, float s)
{
    (void)ctx, (void)x, (void)n, (void)s;
    return DF_OK;
}

static int no_allreduce(void *ctx, void *h, float *x, int64_t n)
{
    (void)ctx, (void)h, (void)x, (void)n;
    return DF_OK;
}

/* Whether one update on a device with `mutate` applied gives the CPU's weights (every rank's
   answer: the same on all). */
static bool same_after_mutation(void (*mutate)(emu_dev *))
{
    df_batch *b = shard();
    df_backend be;
    emu_dev *dev = new_dev(&be);
    mutate(dev);
    df_actor *cpu = actor_on(NULL, 3), *d = actor_on(&be, 3);
    df_metrics_free(update(cpu, b, 1));
    df_metrics_free(update(d, b, 1));
    bool same = df_test_same_params(df_actor_model(cpu), df_actor_model(d));
    df_actor_free(d), df_actor_free(cpu);
    free(dev);
    df_batch_free(b);
    return df_test_all_min(same) > 0;
}

static void mut_none(emu_dev *d) { (void)d; }
static void mut_betas(emu_dev *d) { d->ops.adamw_step = swapped_betas; }
static void mut_scale(emu_dev *d) { d->ops.scale = no_scale; }
static void mut_allreduce(emu_dev *d) { d->ops.allreduce_sum = no_allreduce; }

/* Mixed precision on the device: the forward's activations run a bf16 variant of the device's
 * table that lives in them (df_acts' ops16); the master weights they read outlive them, so the
 * first upload into the master through them must keep the device's own table: after the
 * activations are dropped and made again the master is still released and updated through it. */
static void test_bf16_master_outlives_the_acts(void **state)
{
    (void)state;
    df_backend be;
    emu_dev *dev = new_dev(&be);
    if (!emu_bf16(dev)) {
        print_message("SKIP: %s\n", df_last_error());
        df_clear_error();
        free(dev);
        return;
    }
    df_batch *b = shard();
    df_actor *a;
    df_actor_params p = params(1);
    p.bf16 = true;
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    assert_int_equal(df_actor_set_backend(a, &be), 0);
    df_actor_set_comm(a, N > 1 ? W : NULL);
    df_train_core *c = df_actor_core(a);
    assert_true(c->dev_optim && c->bf16);
    for (int k = 0; k < 2; k++) {
        df_metrics_free(update(a, b, 1));
        assert_ptr_equal(c->wmaster.be.ops, be.ops); /* not the activations' ops16 */
        df_train_core_drop_acts(c);
    }
    assert_true(dev->w16_calls > 0);
    df_actor_free(a);
    emu_close(dev);
    assert_int_equal(emu_buffers(dev), 0);
    free(dev);
    df_batch_free(b);
}

static void test_mutations_are_caught(void **state)
{
    (void)state;
    assert_true(same_after_mutation(mut_none));
    assert_false(same_after_mutation(mut_betas));
    assert_false(same_after_mutation(mut_scale));
    if (N > 1) /* one rank has no all-reduce to lose */
        assert_false(same_after_mutation(mut_allreduce));
}

/* ---- the CPU's entries and the norm's contract ---------------------------------------------- */

static void fill(float *x, int64_t n, uint64_t seed, double scale)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 1, 0, 0));
    for (int64_t i = 0; i < n; i++) /* magnitudes over six decades, either sign */
        x[i] = (float)((2 * df_rng_uniform(&r) - 1) * scale * pow(10.0, -6 * df_rng_uniform(&r)));
}

static void test_cpu_entries_are_the_host_functions(void **state)
{
    (void)state;
    const df_backend cpu = df_backend_cpu();
    const df_backend_ops *o = cpu.ops;
    enum { NE = 4099 };
    float *p[2], *g = malloc(NE * 4), *m[2], *v[2];
    for (int k = 0; k < 2; k++) {
        p[k] = malloc(NE * 4), m[k] = malloc(NE * 4), v[k] = malloc(NE * 4);
        fill(p[k], NE, 1, 1.0), fill(m[k], NE, 2, 1e-2), fill(v[k], NE, 3, 1e-4);
        for (int64_t i = 0; i < NE; i++)
            v[k][i] = fabsf(v[k][i]);
    }
    fill(g, NE, 4, 1e-1);
    df_adamw_config cfg = {.beta1 = 0.85, .beta2 = 0.995, .eps = 1e-7, .weight_decay = 0.1};
    df_adamw *opt;
    assert_int_equal(df_adamw_create(&cfg, NE, &opt), 0);
    memcpy(opt->m, m[0], NE * 4), memcpy(opt->v, v[0], NE * 4);
    opt->step = 6;
    assert_int_equal(df_adamw_step(opt, p[0], g, 3e-3), 0);
    assert_int_equal(o->adamw_step(cpu.ctx, p[1], g, m[1], v[1], NE, &cfg, 7, 3e-3), 0);
    assert_memory_equal(p[0], p[1], NE * 4);
    assert_memory_equal(opt->m, m[1], NE * 4);
    assert_memory_equal(opt->v, v[1], NE * 4);
    assert_int_equal(o->adamw_step(cpu.ctx, p[1], g, m[1], v[1], NE, &cfg, 0, 3e-3), DF_EINVAL);
    assert_int_equal(o->adamw_step(cpu.ctx, p[1], g, m[1], v[1], NE, &cfg, 8, -1.0), DF_EINVAL);
    df_adamw_free(opt);
    /* the norm is df_grad_norm's; the scale is the clip's */
    double norm = 0;
    assert_int_equal(o->grad_norm(cpu.ctx, g, NE, &norm), 0);
    assert_true(norm == df_grad_norm(g, NE));
    memcpy(p[0], g, NE * 4), memcpy(p[1], g, NE * 4);
    const double clipped = df_clip_grad_norm(p[0], NE, 0.25 * norm);
    assert_true(clipped == norm);
    assert_int_equal(o->scale(cpu.ctx, p[1], NE, (float)(0.25 * norm / (norm + 1e-6))), 0);
    assert_memory_equal(p[0], p[1], NE * 4);
    /* the all-reduce is df_comm_allreduce's, over the group the handle names */
    void *h = NULL;
    assert_int_equal(o->group_open(cpu.ctx, W, &h), 0);
    memcpy(p[0], g, NE * 4), memcpy(p[1], g, NE * 4);
    for (int64_t i = 0; i < NE; i++)
        p[0][i] *= (float)(R + 1), p[1][i] *= (float)(R + 1);
    assert_int_equal(df_comm_allreduce(W, p[0], NE, DF_COMM_FLOAT32, DF_COMM_SUM), 0);
    assert_int_equal(o->allreduce_sum(cpu.ctx, h, p[1], NE), 0);
    assert_memory_equal(p[0], p[1], NE * 4);
    o->group_close(cpu.ctx, h);
    for (int k = 0; k < 2; k++)
        free(p[k]), free(m[k]), free(v[k]);
    free(g);
}

/*
 * grad_norm's contract: squares exact in double (a float's 24-bit significand squared fits in
 * 53 bits), n - 1 additions of non-negative terms in double in any order, then a square root.
 * Each order's sum is S (1 + t), |t| <= gamma_{n-1}(u64) (Higham eq. 4.4: all terms >= 0, so
 * sum |x| = S), and the root adds one rounding: norm = sqrt(S) (1 + e), |e| <= gamma_{n-1} / 2 +
 * u + (their product) <= gamma_n. Two orders then differ by <= 2 gamma_n sqrt(S) <= 2 gamma_n /
 * (1 - gamma_n) max(norm_a, norm_b). A device's order (CUDA: 256-thread blocks over a grid-stride
 * loop, their partials summed) is held to it against df_grad_norm's.
 */
static double order_bound(int64_t n, double a, double b)
{
    const double gn = df_tol_gamma((double)n, DF_U64);
    return 2 * gn / (1 - gn) * fmax(a, b);
}

static void test_norm_order_bound(void **state)
{
    (void)state;
    const int64_t n = (int64_t)1 << 21;
    float *x = malloc((size_t)n * 4);
    fill(x, n, 11, 3.0);
    const double ref = df_grad_norm(x, n);
    /* reversed, and blocked as the CUDA kernel's pass 1 (1024 blocks x 256 threads, strided) */
    double rev = 0, part[1024] = {0}, blk = 0;
    for (int64_t i = n - 1; i >= 0; i--)
        rev += (double)x[i] * x[i];
    for (int64_t t = 0; t < 1024 * 256; t++) {
        double acc = 0;
        for (int64_t i = t; i < n; i += 1024 * 256)
            acc += (double)x[i] * x[i];
        part[t / 256] += acc;
    }
    for (int i = 0; i < 1024; i++)
        blk += part[i];
    float f32 = 0; /* a device summing in float32: what the contract excludes */
    for (int64_t i = 0; i < n; i++)
        f32 += x[i] * x[i];
    const double nr = sqrt(rev), nb = sqrt(blk), nf = sqrt((double)f32);
    print_message("norm %.17g: reversed %.3g, blocked %.3g, float32 %.3g apart; bound %.3g\n", ref,
                  fabs(nr - ref), fabs(nb - ref), fabs(nf - ref), order_bound(n, ref, ref));
    assert_true(fabs(nr - ref) <= order_bound(n, nr, ref));
    assert_true(fabs(nb - ref) <= order_bound(n, nb, ref));
    assert_true(fabs(nf - ref) > order_bound(n, nf, ref));
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpu_entries_are_the_host_functions),
        cmocka_unit_test(test_norm_order_bound),
        cmocka_unit_test(test_updates_are_the_cpus),
        cmocka_unit_test(test_state_save_and_resume),
        cmocka_unit_test(test_sharded_on_the_device),
        cmocka_unit_test(test_bf16_master_outlives_the_acts),
        cmocka_unit_test(test_mutations_are_caught),
        cmocka_unit_test(test_rollout_reads_the_actors_weights),
    };
    return cmocka_run_group_tests(tests, df_test_world_setup, df_test_world_teardown);
}
