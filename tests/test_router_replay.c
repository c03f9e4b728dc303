/*
 * Router replay in the engine (df_seq_batch.routes_in / routes_out; docs/models.md "Router
 * replay") on tiny_qwen3_moe (two sparse layers of 4 experts, top 2 renormalised):
 *   - a forward records each token's experts; replaying that record gives the same log-probs,
 *     entropies and gradients to the bit, and records the same routes again; -1 rows route live;
 *   - replaying other experts (each token's two unchosen ones on layer 0) moves the log-probs past
 *     their rounding bound, and the gradient under that replay is the derivative of the replayed
 *     loss: central differences of the loss on the router's and experts' largest-gradient weights
 *     agree within the loss's rounding bound over 2h (the backward routes as the forward did);
 *   - a checkpointed pass replays as the plain one does (the backward's recompute sees the routes);
 *   - an expert outside [0, E) or named twice in a row is refused naming the row;
 *   - the actor (engine/actor.c): R2's old-log-prob pass writes the batch field routed_experts,
 *     the forward's own routes; an update with R2 or R3 replays the field: with old_log_probs made
 *     under other experts than the live ones, a replaying update's first ratio is exactly 1
 *     (actor/ppo_kl 0, no clipping) and a live one's is not; R3's old-log-prob pass replays the
 *     field; the reference and a dense model refuse or ignore as documented.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "distflow/model.h"
#include "engine/actor.h"
#include "engine/packing.h"
#include "model/acts.h"
#include "testbounds.h"
#include "testgolden.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIXTURE DF_SOURCE_DIR "/tests/golden/tiny_qwen3_moe"

typedef struct {
    df_model *m;
    df_golden_batch gb;
    float *c, *d; /* the golden loss's weights of logp and entropy */
    int64_t W;    /* df_model_route_width */
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (df_model_load(FIXTURE, &f->m))
        fail_msg("%s", df_last_error());
    df_golden_batch_load(&f->gb, DF_SOURCE_DIR "/tests/golden/tiny_qwen3_moe_expected.safetensors");
    f->c = df_golden_read_vec(f->gb.exp, "loss.c", NULL);
    f->d = df_golden_read_vec(f->gb.exp, "loss.d", NULL);
    f->W = df_model_route_width(&f->m->cfg);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    df_model_free(f->m);
    df_golden_batch_free(&f->gb);
    free(f->c), free(f->d), free(f);
    return 0;
}

/* One forward (temperature 0.7) and, with grads, its backward, replaying `in` and recording into
 * `out` (either NULL); log-probs / entropies into lp / en. Returns the forward's status. */
static int pass(const fixture *f, const df_model *m, unsigned flags, const int32_t *in, int32_t *out, float *lp,
                float *en, float *grads)
{
    df_acts *a = NULL;
    const df_backend cpu = df_backend_cpu();
    assert_int_equal(df_acts_create_ex(&cpu, &m->cfg, f->gb.T, f->gb.n_out, flags, &a), DF_OK);
    df_seq_batch b = f->gb.b;
    b.routes_in = in;
    b.routes_out = out;
    int rc = df_model_forward(m, a, &b, 0.7f, lp, en);
    if (!rc && grads)
        assert_int_equal(df_model_backward(m, a, &b, 0.7f, f->c, f->d, grads), DF_OK);
    df_acts_free(a);
    return rc;
}

/* The golden loss sum(c logp) + sum(d entropy) of one replayed forward, in double. */
static double loss_of(const fixture *f, const df_model *m, const int32_t *in)
{
    const int64_t n = f->gb.n_out;
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(pass(f, m, 0, in, NULL, lp, en, NULL), DF_OK);
    double L = 0;
    for (int64_t i = 0; i < n; i++)
        L += (double)f->c[i] * lp[i] + (double)f->d[i] * en[i];
    free(lp), free(en);
    return L;
}

static void test_record_then_replay(void **state)
{
    fixture *f = *state;
    const int64_t T = f->gb.T, n = f->gb.n_out, P = f->m->n_params;
    assert_int_equal(f->W, 2 * 2); /* layers 0 and 2, top 2 */
    int32_t *rec = malloc(sizeof(int32_t) * (size_t)(T * f->W)), *again = malloc(sizeof(int32_t) * (size_t)(T * f->W));
    float *lp0 = malloc(sizeof(float) * (size_t)n), *en0 = malloc(sizeof(float) * (size_t)n);
    float *lp1 = malloc(sizeof(float) * (size_t)n), *en1 = malloc(sizeof(float) * (size_t)n);
    float *g0 = calloc((size_t)P, sizeof(float)), *g1 = calloc((size_t)P, sizeof(float));
    memset(rec, 0xff, sizeof(int32_t) * (size_t)(T * f->W));
    assert_int_equal(pass(f, f->m, 0, NULL, rec, lp0, en0, g0), DF_OK);
    for (int64_t i = 0; i < T * f->W; i++) /* every route written: an expert, the pair distinct */
        assert_true(rec[i] >= 0 && rec[i] < 4 && (i % 2 == 0 || rec[i] != rec[i - 1]));
    assert_int_equal(pass(f, f->m, 0, rec, again, lp1, en1, g1), DF_OK);
    assert_memory_equal(lp0, lp1, sizeof(float) * (size_t)n);
    assert_memory_equal(en0, en1, sizeof(float) * (size_t)n);
    assert_memory_equal(g0, g1, sizeof(float) * (size_t)P);
    assert_memory_equal(rec, again, sizeof(int32_t) * (size_t)(T * f->W));
    /* -1 rows route live: the same bits as no replay */
    for (int64_t i = 0; i < T * f->W; i++)
        again[i] = -1;
    memset(g1, 0, sizeof(float) * (size_t)P);
    assert_int_equal(pass(f, f->m, 0, again, NULL, lp1, en1, g1), DF_OK);
    assert_memory_equal(lp0, lp1, sizeof(float) * (size_t)n);
    assert_memory_equal(g0, g1, sizeof(float) * (size_t)P);
    free(rec), free(again), free(lp0), free(en0), free(lp1), free(en1), free(g0), free(g1);
}

/* rec's routes with layer 0's replaced by each token's two unchosen experts (of 4). */
static int32_t *other_experts(const fixture *f, const int32_t *rec)
{
    int32_t *r = malloc(sizeof(int32_t) * (size_t)(f->gb.T * f->W));
    memcpy(r, rec, sizeof(int32_t) * (size_t)(f->gb.T * f->W));
    for (int64_t t = 0; t < f->gb.T; t++) {
        int32_t *row = r + t * f->W, j = 0;
        const int32_t a = rec[t * f->W], b = rec[t * f->W + 1];
        for (int32_t e = 0; e < 4; e++)
            if (e != a && e != b)
                row[j++] = e;
    }
    return r;
}

static void test_replay_other_experts(void **state)
{
    fixture *f = *state;
    const int64_t T = f->gb.T, n = f->gb.n_out, P = f->m->n_params;
    int32_t *rec = malloc(sizeof(int32_t) * (size_t)(T * f->W));
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(pass(f, f->m, 0, NULL, rec, lp, en, NULL), DF_OK);
    int32_t *oth = other_experts(f, rec);
    float *lp2 = malloc(sizeof(float) * (size_t)n), *en2 = malloc(sizeof(float) * (size_t)n);
    float *g = calloc((size_t)P, sizeof(float)), *gc = calloc((size_t)P, sizeof(float));
    assert_int_equal(pass(f, f->m, 0, oth, NULL, lp2, en2, g), DF_OK);
    const double tol = df_golden_tol(tb_logp_chain(&f->m->cfg, df_golden_max_len(&f->gb)));
    const double moved = df_golden_rel_err(lp2, lp, n);
    print_message("layer 0 replayed on the unchosen experts: log-probs move %.2e (bound %.2e)\n", moved, tol);
    assert_true(moved > tol);
    /* checkpointed: the backward's recompute replays too */
    assert_int_equal(pass(f, f->m, DF_ACTS_CHECKPOINT, oth, NULL, lp, en, gc), DF_OK);
    assert_memory_equal(lp, lp2, sizeof(float) * (size_t)n);
    assert_memory_equal(g, gc, sizeof(float) * (size_t)P);
    /* The loss's rounding: |dL| <= tol (|c| |logp| + |d| |ent|) (tol bounds each vector's relative
     * L2 error); a central difference over 2h carries twice that over 2h, and h^2 L''' / 6 of
     * truncation, which 1e-3 of the gradient (h = 2^-7) covers for these smooth terms. */
    double nc = 0, nl = 0, nd = 0, ne = 0;
    for (int64_t i = 0; i < n; i++)
        nc += (double)f->c[i] * f->c[i], nl += (double)lp2[i] * lp2[i], nd += (double)f->d[i] * f->d[i],
            ne += (double)en2[i] * en2[i];
    const double h = 1.0 / 128, dL = tol * (sqrt(nc * nl) + sqrt(nd * ne)), fd_err = 2 * dL / (2 * h);
    const char *names[3] = {"model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.0.up_proj.weight",
                            "model.layers.0.mlp.experts.3.down_proj.weight"};
    df_model *m = NULL;
    assert_int_equal(df_model_clone(f->m, &m), DF_OK);
    for (int k = 0; k < 3; k++) {
        const df_param_desc *d = df_model_find_tensor(m, names[k]);
        assert_non_null(d);
        int64_t best = d->offset;
        for (int64_t i = d->offset; i < d->offset + d->numel; i++)
            best = fabsf(g[i]) > fabsf(g[best]) ? i : best;
        const float w0 = m->params[best];
        m->params[best] = w0 + (float)h;
        const double up = loss_of(f, m, oth);
        m->params[best] = w0 - (float)h;
        const double down = loss_of(f, m, oth);
        m->params[best] = w0;
        const double fd = (up - down) / (2 * h), bound = fd_err + 1e-3 * fabs(g[best]);
        print_message("%s [%lld]: gradient %.6g, central difference %.6g (bound %.2g)\n", names[k],
                      (long long)(best - d->offset), (double)g[best], fd, bound);
        assert_true(fabs(fd - g[best]) <= bound);
        assert_true(fabs(g[best]) > 10 * bound); /* a gradient the check can see */
    }
    df_model_free(m);
    free(rec), free(oth), free(lp), free(en), free(lp2), free(en2), free(g), free(gc);
}

static void test_bad_routes(void **state)
{
    fixture *f = *state;
    const int64_t T = f->gb.T, n = f->gb.n_out;
    int32_t *r = malloc(sizeof(int32_t) * (size_t)(T * f->W));
    float *lp = malloc(sizeof(float) * (size_t)n), *en = malloc(sizeof(float) * (size_t)n);
    assert_int_equal(pass(f, f->m, 0, NULL, r, lp, en, NULL), DF_OK);
    r[5 * f->W + 2] = 4; /* row 5, layer 2's first expert: there are 4 */
    assert_error_mentions(pass(f, f->m, 0, r, NULL, lp, en, NULL), DF_EINVAL, "route row 5");
    r[5 * f->W + 2] = r[5 * f->W + 3]; /* the same expert twice */
    assert_error_mentions(pass(f, f->m, 0, r, NULL, lp, en, NULL), DF_EINVAL, "twice");
    free(r), free(lp), free(en);
}

/* Actor settings for tiny_qwen3_moe: one mini-batch, one epoch, whole-batch micro-batches. */
static df_actor_params actor_params(int mode)
{
    df_actor_params p = {.optim.lr = 1e-3, .optim.beta1 = 0.9, .optim.beta2 = 0.999, .optim.adam_eps = 1e-8,
                         .optim.grad_clip = 1e9, .loss.ppo_epochs = 1, .loss.policy_loss = "vanilla",
                         .loss.loss_agg_mode = "token-mean", .loss.clip_ratio_low = 0.2, .loss.clip_ratio_high = 0.2,
                         .loss.clip_ratio_c = 3.0, .temperature = 0.7f, .router_replay = mode};
    return p;
}

/* The fixture's golden sequences as a batch: each sequence's first token its prompt, the rest
 * its response. */
static df_batch *golden_rows(const fixture *f)
{
    const int64_t S = f->gb.n_seqs, *o = f->gb.offsets;
    int64_t *po = malloc(sizeof(int64_t) * (size_t)(S + 1)), *ro = malloc(sizeof(int64_t) * (size_t)(S + 1));
    int32_t *pt = malloc(sizeof(int32_t) * (size_t)S), *rt = malloc(sizeof(int32_t) * (size_t)o[S]);
    po[0] = ro[0] = 0;
    for (int64_t s = 0; s < S; s++) {
        pt[s] = f->gb.tokens[o[s]];
        po[s + 1] = s + 1;
        ro[s + 1] = ro[s] + o[s + 1] - o[s] - 1;
        memcpy(rt + ro[s], f->gb.tokens + o[s] + 1, sizeof(int32_t) * (size_t)(o[s + 1] - o[s] - 1));
    }
    df_batch *b = df_batch_new(S);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, pt), DF_OK);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, rt), DF_OK);
    free(po), free(ro), free(pt), free(rt);
    return b;
}

/* Log-probs of b's responses by one engine forward replaying `routes` (NULL: live) into lp. */
static void engine_log_probs(const df_model *m, const df_batch *b, const int32_t *routes, float *lp)
{
    df_packed pk = {0};
    assert_int_equal(df_pack_responses(&pk, b, 0, df_batch_size(b)), DF_OK);
    pk.sb.routes_in = routes;
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, pk.sb.n_tokens, pk.sb.n_out, &a), DF_OK);
    assert_int_equal(df_model_forward(m, a, &pk.sb, 0.7f, lp, NULL), DF_OK);
    df_acts_free(a);
    df_packed_free(&pk);
}

/* An update of actor `mode` on b, whose old_log_probs were made under `routes`: its actor/ppo_kl. */
static double first_ratio_kl(const fixture *f, int mode, const df_batch *src, const int32_t *routes)
{
    df_model *m = NULL;
    assert_int_equal(df_model_clone(f->m, &m), DF_OK);
    df_actor *a = NULL;
    const df_actor_params p = actor_params(mode);
    assert_int_equal(df_actor_create(m, &p, true, &a), DF_OK);
    df_batch *b = NULL;
    assert_int_equal(df_batch_repeat_interleave(src, 1, &b), DF_OK);
    float *old, *adv;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "old_log_probs", "response_ids", &old), DF_OK);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), DF_OK);
    engine_log_probs(f->m, b, routes, old);
    const int64_t n = df_batch_offsets(b, "response_ids")[df_batch_size(b)];
    for (int64_t t = 0; t < n; t++)
        adv[t] = (float)(t % 3) - 0.9f;
    df_metrics *mt = df_metrics_new();
    assert_int_equal(df_actor_update_policy(a, b, mt), DF_OK);
    const double kl = df_metrics_get(mt, "actor/ppo_kl", NAN);
    df_metrics_free(mt);
    df_batch_free(b);
    df_actor_free(a);
    return kl;
}

static void test_actor_replay(void **state)
{
    fixture *f = *state;
    df_batch *b = golden_rows(f);
    /* R2: the old-log-prob pass records the forward's own routes */
    df_model *m = NULL;
    assert_int_equal(df_model_clone(f->m, &m), DF_OK);
    df_actor *a = NULL;
    df_actor_params p = actor_params(DF_ROUTER_REPLAY_R2);
    assert_int_equal(df_actor_create(m, &p, true, &a), DF_OK);
    assert_int_equal(df_actor_compute_log_prob(a, b, "old_log_probs", NULL), DF_OK);
    const df_column *col = df_batch_column(b, DF_ROUTES_COLUMN);
    assert_non_null(col);
    assert_int_equal(col->offsets[df_batch_size(b)], f->gb.T * f->W);
    int32_t *rec = malloc(sizeof(int32_t) * (size_t)(f->gb.T * f->W));
    const int64_t n_resp = df_batch_offsets(b, "response_ids")[df_batch_size(b)];
    float *lp = malloc(sizeof(float) * (size_t)(n_resp > f->gb.n_out ? n_resp : f->gb.n_out));
    assert_int_equal(pass(f, f->m, 0, NULL, rec, lp, NULL, NULL), DF_OK); /* the same tokens, packed alike */
    assert_memory_equal(col->data, rec, sizeof(int32_t) * (size_t)(f->gb.T * f->W));
    df_actor_free(a);
    /* an update replays the field: old_log_probs made under other experts give a first ratio of
       exactly 1 when replayed (R2, R3), not when routed live */
    int32_t *oth = other_experts(f, rec);
    assert_int_equal(df_batch_set_tok_i32(b, DF_ROUTES_COLUMN, col->offsets, oth), DF_OK);
    const double live = first_ratio_kl(f, DF_ROUTER_REPLAY_OFF, b, oth), r2 = first_ratio_kl(f, DF_ROUTER_REPLAY_R2, b, oth),
                 r3 = first_ratio_kl(f, DF_ROUTER_REPLAY_R3, b, oth);
    print_message("actor/ppo_kl of the first update: live %.3g, R2 %.3g, R3 %.3g\n", live, r2, r3);
    assert_true(r2 == 0.0 && r3 == 0.0 && fabs(live) > 1e-4);
    /* R3's old-log-prob pass replays the field (the rollout's): the replayed engine's bits */
    assert_int_equal(df_model_clone(f->m, &m), DF_OK);
    p = actor_params(DF_ROUTER_REPLAY_R3);
    assert_int_equal(df_actor_create(m, &p, true, &a), DF_OK);
    assert_int_equal(df_actor_compute_log_prob(a, b, "replayed", NULL), DF_OK);
    engine_log_probs(f->m, b, oth, lp);
    assert_memory_equal(df_batch_column(b, "replayed")->data, lp, sizeof(float) * (size_t)n_resp);
    /* a field of the wrong length is refused naming it */
    df_batch_drop(b, DF_ROUTES_COLUMN);
    assert_error_mentions(df_actor_compute_log_prob(a, b, "replayed", NULL), DF_EINVAL, DF_ROUTES_COLUMN);
    df_actor_free(a);
    /* a dense model has nothing to replay */
    df_model_config dense;
    df_model_config_defaults(&dense);
    dense.vocab_size = 16, dense.hidden_size = 16, dense.intermediate_size = 16, dense.num_hidden_layers = 1;
    dense.num_attention_heads = 2, dense.num_key_value_heads = 2, dense.head_dim = 8, dense.max_position_embeddings = 32;
    assert_int_equal(df_model_create(&dense, &m), DF_OK);
    assert_error_mentions(df_actor_create(m, &p, true, &a), DF_EINVAL, "needs a model with experts");
    df_model_free(m);
    free(rec), free(oth), free(lp);
    df_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_record_then_replay),
        cmocka_unit_test(test_replay_other_experts),
        cmocka_unit_test(test_bad_routes),
        cmocka_unit_test(test_actor_replay),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
