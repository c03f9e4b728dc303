/*
 * One bf16 weight copy for the actor and the rollout, weight versions, and the KV cache's pages
 * given back between rollouts (rollout.h df_rollout_engine_share_weights16, free_cache_engine;
 * model.h df_model.version):
 *   - an optimizer step in place (the model's blob does not move) makes the engine's own bf16
 *     copy stale: the engine refuses it until the next weight sync;
 *   - an engine reading the actor's bf16 copy gives the bits an engine with its own copy gives
 *     (the same round-to-nearest-even of the same weights, read by the same kernels: the bound
 *     is 0), before and after an actor update, without a weight sync of its own, and allocates
 *     no copy;
 *   - free_cache_engine: after a rollout the cache holds no resident page (mincore), the next
 *     rollout gives the same bits; without it the pages stay;
 *   - the DAG worker shares the actor's copy when both are bf16, and its rollout after an update
 *     equals a fresh own-copy engine's on the updated weights (the worker-level bf16 resync);
 *     rollout.free_cache_engine reaches the engine.
 * The bf16 parts skip on a CPU without native bf16 matmuls (df_model_bf16_available).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"
#include "distflow/rollout.h"
#include "engine/actor.h"
#include "workers/worker_internal.h"

#include <stdlib.h>
#include <string.h>

static bool have_bf16(void)
{
    if (df_model_bf16_available() == DF_OK)
        return true;
    print_message("no native bf16 matmuls here: %s\n", df_last_error());
    return false;
}

static df_actor_params params(bool bf16)
{
    df_actor_params p = {.optim.lr = 2e-2, .optim.beta1 = 0.9, .optim.beta2 = 0.999, .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9, .micro_batch_size = 4, .logprob_micro_batch_size = 4,
                         .loss.ppo_epochs = 1, .loss.policy_loss = "vanilla", .loss.loss_agg_mode = "token-mean",
                         .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.2, .loss.clip_ratio_c = 3.0,
                         .temperature = 1.0f, .bf16 = bf16};
    return p;
}

/* One PPO update of a (an optimizer step on its weights, in place). */
static void update(df_actor *a)
{
    df_batch *b = df_test_small_batch();
    float *adv;
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    for (int j = 0; j < 6; j++)
        adv[j] = (float)(j % 3) - 0.8f;
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, m), 0);
    df_metrics_free(m);
    df_batch_free(b);
}

/* Prompts of lengths 3, 5, 1 (ids < 40, the micro model's vocabulary), 3 samples each. */
static const int64_t POFF[4] = {0, 3, 8, 9};
static const int32_t PTOK[9] = {5, 17, 2, 30, 11, 8, 1, 39, 23};

static df_rollout_request request(void) { return (df_rollout_request){3, POFF, PTOK, 3, 77, NULL, NULL}; }

static df_sampling_params sampling(void)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 12;
    sp.ignore_eos = true; /* every response as long as the cache allows: many pages written */
    return sp;
}

static df_rollout_options options(df_rollout_dtype dt, bool free_cache)
{
    return (df_rollout_options){.max_num_seqs = 4, .max_seq_len = 20, .dtype = dt, .free_cache_engine = free_cache};
}

static df_rollout_result run(df_rollout_engine *e, const df_model *m)
{
    df_rollout_request q = request();
    df_sampling_params sp = sampling();
    df_rollout_result r;
    if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
        fail_msg("generate: %s", df_last_error());
    return r;
}

/* A fresh engine with its own copy, synced with m now. */
static df_rollout_result run_fresh(const df_model *m, df_rollout_dtype dt)
{
    df_rollout_engine *e = NULL;
    df_rollout_options o = options(dt, false);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    df_rollout_result r = run(e, m);
    df_rollout_engine_free(e);
    return r;
}

static void assert_same(const df_rollout_result *a, const df_rollout_result *b)
{
    assert_int_equal(a->n_seqs, b->n_seqs);
    assert_memory_equal(a->offsets, b->offsets, (size_t)(a->n_seqs + 1) * sizeof *a->offsets);
    const size_t n = (size_t)a->offsets[a->n_seqs];
    assert_memory_equal(a->tokens, b->tokens, n * sizeof *a->tokens);
    assert_memory_equal(a->log_probs, b->log_probs, n * sizeof *a->log_probs);
}

/* Whether any log-prob differs (the weights moved). */
static bool moved(const df_rollout_result *a, const df_rollout_result *b)
{
    const int64_t n = a->offsets[a->n_seqs] < b->offsets[b->n_seqs] ? a->offsets[a->n_seqs] : b->offsets[b->n_seqs];
    for (int64_t t = 0; t < n; t++)
        if (a->log_probs[t] != b->log_probs[t] || a->tokens[t] != b->tokens[t])
            return true;
    return false;
}

/* The writers of the weights give new versions, each unique (a version names its model too). */
static void test_weight_versions(void **state)
{
    (void)state;
    df_model *m = df_test_micro_model(3), *c = NULL;
    const int64_t v0 = m->version;
    assert_true(v0 > 0);
    assert_int_equal(df_model_clone(m, &c), 0);
    assert_true(c->version > v0);
    assert_int_equal(df_model_init_random(m, 4), 0);
    assert_true(m->version > c->version);
    df_weights16 *w = NULL;
    assert_int_equal(df_weights16_create(&m->cfg, &w), 0);
    assert_false(df_weights16_is_current(w, m));
    assert_int_equal(df_weights16_refresh_model(w, m), 0);
    assert_int_equal(df_weights16_source_version(w), m->version);
    assert_true(df_weights16_is_current(w, m));
    assert_false(df_weights16_is_current(w, c)); /* the same shapes, another model */
    df_model_weights_changed(m);
    assert_false(df_weights16_is_current(w, m));
    assert_int_equal(df_weights16_refresh(w, &m->w), 0); /* a bare view carries no version */
    assert_false(df_weights16_is_current(w, m));
    df_weights16_free(w);
    df_model_free(m);
    df_model_free(c);
}

/* An optimizer step in place: the engine's own copy is stale until the next weight sync. */
static void test_inplace_step_refused(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    df_actor *a;
    df_actor_params p = params(true);
    assert_int_equal(df_actor_create(df_test_micro_model(3), &p, true, &a), 0);
    df_model *m = df_actor_model(a);
    df_rollout_engine *e = NULL;
    df_rollout_options o = options(DF_ROLLOUT_BF16, false);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    df_rollout_result before = run(e, m), r;
    const float *blob = m->params;
    update(a);
    assert_ptr_equal(m->params, blob); /* the same blob: a pointer check cannot tell */
    df_rollout_request q = request();
    df_sampling_params sp = sampling();
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "stale"));
    assert_null(r.tokens);
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    df_rollout_result after = run(e, m), fresh = run_fresh(m, DF_ROLLOUT_BF16);
    assert_same(&after, &fresh);
    assert_true(moved(&before, &after));
    df_rollout_result_free(&before);
    df_rollout_result_free(&after);
    df_rollout_result_free(&fresh);
    df_rollout_engine_free(e);
    df_actor_free(a);
}

/* The bytes of the copy a bf16 engine makes for itself (layers' matmuls, the LM head and the
 * embedding rows, as the mixed-precision actor's copy): what sharing saves. */
static int64_t own_copy_bytes(const df_model_config *cfg)
{
    df_weights16 *w = NULL;
    assert_int_equal(df_weights16_create_ex(cfg, DF_W16_LM_HEAD | DF_W16_EMBED, &w), 0);
    int64_t n = df_weights16_bytes(w);
    df_weights16_free(w);
    return n;
}

/* The actor's copy shared: the own copy's bits, before and after an update, and no copy made. */
static void test_shared_copy(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    df_actor *a;
    df_actor_params p = params(true);
    assert_int_equal(df_actor_create(df_test_micro_model(5), &p, true, &a), 0);
    df_model *m = df_actor_model(a);
    const df_weights16 *w16 = NULL;
    assert_int_equal(df_actor_weights16(a, &w16), 0); /* made before the actor's first plan */
    assert_true(df_weights16_is_current(w16, m));
    df_rollout_engine *e = NULL;
    df_rollout_options o = options(DF_ROLLOUT_BF16, true);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    assert_int_equal(df_rollout_engine_share_weights16(e, w16), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0); /* a no-op: the owner refreshes */
    int64_t total = 0;
    df_rollout_engine_memory(e, NULL, &total);
    assert_int_equal(total, df_rollout_engine_bytes_ex(&m->cfg, &o) - own_copy_bytes(&m->cfg));
    df_rollout_result s0 = run(e, m), own0 = run_fresh(m, DF_ROLLOUT_BF16);
    assert_same(&s0, &own0);
    update(a); /* no weight sync of the engine: the actor refreshed the shared copy */
    df_rollout_result s1 = run(e, m), own1 = run_fresh(m, DF_ROLLOUT_BF16);
    assert_same(&s1, &own1);
    assert_true(moved(&s0, &s1));
    /* a change the owner did not follow: refused, not read */
    df_model_weights_changed(m);
    df_rollout_request q = request();
    df_sampling_params sp = sampling();
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "shared copy"));
    /* sharing stopped: the engine's own copy comes back with the next sync */
    assert_int_equal(df_rollout_engine_share_weights16(e, NULL), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    df_rollout_engine_memory(e, NULL, &total);
    assert_int_equal(total, df_rollout_engine_bytes_ex(&m->cfg, &o));
    df_rollout_result s2 = run(e, m);
    assert_same(&s2, &own1);
    df_rollout_result_free(&s0);
    df_rollout_result_free(&own0);
    df_rollout_result_free(&s1);
    df_rollout_result_free(&own1);
    df_rollout_result_free(&s2);
    df_rollout_engine_free(e);
    df_actor_free(a);
}

/* Sharing is refused where it cannot serve: a float32 engine, a copy without the LM head. */
static void test_share_refused(void **state)
{
    (void)state;
    df_model *m = df_test_micro_model(3);
    df_weights16 *head = NULL, *layers = NULL;
    assert_int_equal(df_weights16_create_ex(&m->cfg, DF_W16_LM_HEAD, &head), 0);
    assert_int_equal(df_weights16_create_ex(&m->cfg, 0, &layers), 0);
    df_rollout_engine *e = NULL;
    df_rollout_options o = options(DF_ROLLOUT_F32, false);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    assert_int_equal(df_rollout_engine_share_weights16(e, head), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "float32 engine"));
    df_rollout_engine_free(e);
    if (have_bf16()) {
        o.dtype = DF_ROLLOUT_BF16;
        assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
        assert_int_equal(df_rollout_engine_share_weights16(e, layers), DF_EINVAL);
        assert_non_null(strstr(df_last_error(), "no LM head"));
        df_rollout_engine_free(e);
    }
    df_weights16_free(head);
    df_weights16_free(layers);
    df_model_free(m);
}

/* free_cache_engine: no resident page of the cache after a rollout, the same bits the next time. */
static void check_free_cache(df_rollout_dtype dt)
{
    df_model *m = df_test_micro_model(9);
    df_rollout_engine *keep = NULL, *drop = NULL;
    df_rollout_options ko = options(dt, false), dro = options(dt, true);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &ko, &keep), 0);
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &dro, &drop), 0);
    assert_int_equal(df_rollout_engine_load_weights(keep, m), 0);
    assert_int_equal(df_rollout_engine_load_weights(drop, m), 0);
    assert_int_equal(df_rollout_engine_kv_resident(drop), 0); /* reserved, not touched yet */
    int64_t kv = 0;
    df_rollout_engine_memory(keep, &kv, NULL);
    df_rollout_result a = run(keep, m), b = run(drop, m);
    assert_same(&a, &b);
    /* 3 prompts x 3 samples through 4 slots x 20 positions of every layer: most pages written */
    const int64_t kept = df_rollout_engine_kv_resident(keep);
    assert_true(kept > 0 && kept <= (kv + 2 * 4096 - 1) / 4096 * 4096 + 2 * 4096);
    assert_int_equal(df_rollout_engine_kv_resident(drop), 0);
    /* the activation scratch too: its 13 buffers keep at most their two partial end pages */
    assert_true(df_rollout_engine_scratch_resident(drop) <= 26 * 4096);
    df_rollout_result c = run(drop, m); /* refaulted as zeros: nothing read before written */
    assert_same(&a, &c);
    assert_int_equal(df_rollout_engine_kv_resident(drop), 0);
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_rollout_result_free(&c);
    df_rollout_engine_free(keep);
    df_rollout_engine_free(drop);
    df_model_free(m);
}

/* The scratch with free_cache_engine, where a prefill writes many of its pages: 3 prompts of 300
 * tokens in one forward of 900 rows (~150 pages of the micro shape's activation buffers; the
 * few rows of check_free_cache's prompts touch too few to tell from the partial end pages). */
static void check_free_scratch(df_rollout_dtype dt)
{
    df_model_config c = df_test_micro_model_config();
    c.max_position_embeddings = 512;
    df_model *m = NULL;
    assert_int_equal(df_model_create(&c, &m), 0);
    assert_int_equal(df_model_init_random(m, 9), 0);
    static int32_t tok[900];
    for (int i = 0; i < 900; i++)
        tok[i] = (int32_t)((i * 7 + 3) % 40);
    static const int64_t off[4] = {0, 300, 600, 900};
    const df_rollout_request q = {3, off, tok, 1, 5, NULL, NULL};
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 2;
    df_rollout_engine *e[2] = {NULL, NULL};
    int64_t resident[2];
    for (int drop = 0; drop < 2; drop++) {
        df_rollout_options o = {.max_num_seqs = 4, .max_seq_len = 320, .max_num_batched_tokens = 1024,
                                .dtype = dt, .free_cache_engine = drop};
        assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e[drop]), 0);
        assert_int_equal(df_rollout_engine_load_weights(e[drop], m), 0);
        df_rollout_result r;
        assert_int_equal(df_rollout_generate(e[drop], m, &q, &sp, &r, NULL, NULL), 0);
        df_rollout_result_free(&r);
        resident[drop] = df_rollout_engine_scratch_resident(e[drop]);
    }
    print_message("scratch resident after a 900-row prefill: %lld bytes kept, %lld freed\n",
                  (long long)resident[0], (long long)resident[1]);
    assert_true(resident[0] >= 100 * 4096);
    assert_true(resident[1] >= 0 && resident[1] <= 26 * 4096);
    df_rollout_engine_free(e[0]);
    df_rollout_engine_free(e[1]);
    df_model_free(m);
}

static void test_free_cache_engine(void **state)
{
    (void)state;
    check_free_cache(DF_ROLLOUT_F32);
    check_free_scratch(DF_ROLLOUT_F32);
    if (have_bf16()) {
        check_free_cache(DF_ROLLOUT_BF16);
        check_free_scratch(DF_ROLLOUT_BF16);
    }
}

/* ---- the DAG worker --------------------------------------------------------------------------- */

static df_comm *world;
static char dir[256];
static df_config *cfg; /* the worker borrows it: freed after the worker (done()) */

static df_dag_worker *worker(const char *extra)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       shuffle: false, max_prompt_length: 128, max_response_length: 6}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.05, weight_decay: 0.0}, ppo_mini_batch_size: 4,\n"
             "          ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 1, save_freq: -1, test_freq: -1, logger: [],\n"
             "          default_local_dir: %s/out}\n",
             dir, dir, dir);
    /* mixed precision and a bf16 rollout, set back over the test config's float32 pins */
    const char *ov[4] = {"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
                         "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16",
                         "actor_rollout_ref.rollout.dtype=bfloat16", extra};
    cfg = df_test_config(yaml, "share.yaml", ov, extra ? 4 : 3);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, world, &w))
        fail_msg("worker: %s", df_last_error());
    return w;
}

static void done(df_dag_worker *w)
{
    df_dag_worker_free(w);
    df_config_free(cfg);
    cfg = NULL;
}

/* Two prompts of the tiny model's vocabulary, greedy: what the worker's rollout gives. */
static df_batch *generate(df_rollout_engine *e, const df_model *m)
{
    static const int64_t po[] = {0, 4, 9};
    static const int32_t pt[] = {3, 14, 15, 9, 2, 6, 5, 35, 8};
    df_batch *prompts = df_batch_new(2), *out = NULL;
    assert_int_equal(df_batch_set_tok_i32(prompts, "prompt_ids", po, pt), 0);
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = 6;
    sp.ignore_eos = true;
    if (df_generate_batch(e, m, prompts, 2, &sp, 99, NULL, &out))
        fail_msg("generate: %s", df_last_error());
    df_batch_free(prompts);
    return out;
}

static void assert_same_column(const df_batch *a, const df_batch *b, const char *name, size_t esize)
{
    const df_column *x = df_batch_column(a, name), *y = df_batch_column(b, name);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(x->offsets[df_batch_size(a)], y->offsets[df_batch_size(b)]);
    assert_memory_equal(x->offsets, y->offsets, (size_t)(df_batch_size(a) + 1) * sizeof *x->offsets);
    assert_memory_equal(x->data, y->data, (size_t)x->offsets[df_batch_size(a)] * esize);
}

/* The worker's rollout reads the actor's copy, and after an update sees the new weights. */
static void test_worker_bf16_resync(void **state)
{
    (void)state;
    if (!have_bf16())
        skip();
    df_dag_worker *w = worker(NULL);
    assert_true(w->rollout.shared_w16);
    df_model *m = df_actor_model(w->actor.model);
    df_rollout_options o;
    df_rollout_engine_options(w->rollout.engine, &o);
    assert_true(o.free_cache_engine); /* verl's default */
    int64_t total = 0;
    df_rollout_engine_memory(w->rollout.engine, NULL, &total);
    const df_weights16 *w16 = NULL;
    assert_int_equal(df_actor_weights16(w->actor.model, &w16), 0);
    assert_int_equal(total, df_rollout_engine_bytes_ex(&m->cfg, &o) - own_copy_bytes(&m->cfg));
    assert_int_equal(df_worker_rollout_sync(w), 0);
    df_rollout_engine_memory(w->rollout.engine, NULL, &total); /* the sync made no copy either */
    assert_int_equal(total, df_rollout_engine_bytes_ex(&m->cfg, &o) - own_copy_bytes(&m->cfg));
    df_batch *before = generate(w->rollout.engine, m);
    if (df_dag_worker_fit(w))
        fail_msg("fit: %s", df_last_error());
    assert_int_equal(df_actor_step_count(w->actor.model), 1);
    assert_int_equal(df_rollout_engine_kv_resident(w->rollout.engine), 0); /* given back */
    assert_int_equal(df_worker_rollout_sync(w), 0);
    df_batch *after = generate(w->rollout.engine, m);
    /* a fresh engine with its own copy of the updated weights */
    df_rollout_engine *own = NULL;
    o.free_cache_engine = false;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &own), 0);
    assert_int_equal(df_rollout_engine_load_weights(own, m), 0);
    df_batch *fresh = generate(own, m);
    assert_same_column(after, fresh, "response_ids", sizeof(int32_t));
    assert_same_column(after, fresh, "rollout_log_probs", sizeof(float));
    const df_column *lb = df_batch_column(before, "rollout_log_probs"), *la = df_batch_column(after, "rollout_log_probs");
    const int64_t nb = lb->offsets[df_batch_size(before)], na = la->offsets[df_batch_size(after)];
    const int64_t n = nb < na ? nb : na;
    bool changed = false;
    for (int64_t t = 0; t < n; t++)
        changed |= ((const float *)lb->data)[t] != ((const float *)la->data)[t];
    assert_true(changed); /* the update moved the weights the rollout reads */
    df_batch_free(before);
    df_batch_free(after);
    df_batch_free(fresh);
    df_rollout_engine_free(own);
    done(w);
}

/* rollout.free_cache_engine=false reaches the engine; a float32 rollout keeps no bf16 copy. */
static void test_worker_keys(void **state)
{
    (void)state;
    df_dag_worker *w = worker("actor_rollout_ref.rollout.free_cache_engine=false");
    df_rollout_options o;
    df_rollout_engine_options(w->rollout.engine, &o);
    assert_false(o.free_cache_engine);
    done(w);
    if (!have_bf16())
        return;
    /* bf16 rollout, float32 actor: the engine keeps its own copy */
    w = worker("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32");
    assert_false(w->rollout.shared_w16);
    df_model *m = df_actor_model(w->actor.model);
    assert_int_equal(df_worker_rollout_sync(w), 0);
    int64_t total = 0;
    df_rollout_engine_options(w->rollout.engine, &o);
    df_rollout_engine_memory(w->rollout.engine, NULL, &total);
    assert_int_equal(total, df_rollout_engine_bytes_ex(&m->cfg, &o));
    done(w);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share))
        return -1;
    return df_test_shared_inputs(world, "df_share", 8, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_weight_versions),
        cmocka_unit_test(test_inplace_step_refused),
        cmocka_unit_test(test_shared_copy),
        cmocka_unit_test(test_share_refused),
        cmocka_unit_test(test_free_cache_engine),
        cmocka_unit_test(test_worker_bf16_resync),
        cmocka_unit_test(test_worker_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
