/*
 * Recording routes in the rollout engine (df_rollout_options.record_routes, R3; docs/rollout.md
 * "Recording routes (R3)") on tiny_qwen3_moe (layers 0 and 2 sparse of 3, 4 experts, top 2) and
 * tiny_mixtral (both layers sparse, a sliding window of 4). For every sequence the rollout's
 * routes are held against a training forward (df_model_forward with routes_out) of its packed
 * prompt ++ response, as src/engine/packing.c packs it:
 *   - every token's route but the last response token's equals the one the training forward
 *     records, or differs by a near tie: the experts it swaps have router logits within two
 *     decoders' rounding bound of each other (testbounds.h's chain up to the LM head, relative
 *     to each logit's magnitude, computed from the training forward's own router input);
 *   - -1 exactly where no forward routed the token: every layer of the last response token, and
 *     the last layer (sparse in both fixtures) of the tokens whose output row sampled nothing;
 *   - replaying the record in that training forward (routes_in) reproduces the rollout's
 *     log-probs within the rollout-vs-training bound (test_model_families' check_rollout), and
 *     with no flip the live training forward's bit for bit;
 * for greedy generations, n samples sharing a prompt's prefill (their prompt routes equal), a
 * prompt longer than max_num_batched_tokens (chunked prefill), multi-turn (a turn handler's
 * replies prefilled into the cache), a stream (bit-equal to generate) and a stream's weight
 * change with recompute_kv (the new weights' routes: the last rewrite wins). Also: a dense
 * model refused, record_routes off leaves the fields NULL, the memory formula, free_cache_engine.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "distflow/model.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "testbounds.h"
#include "tolerance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN DF_SOURCE_DIR "/tests/golden/"
#define MAXLEN 64

static df_model *load(const char *name)
{
    char dir[512];
    snprintf(dir, sizeof dir, GOLDEN "%s", name);
    df_model *m = NULL;
    if (df_model_load(dir, &m))
        fail_msg("%s: %s", name, df_last_error());
    return m;
}

/* Prompts of lengths 5, 9, 2 (and a long one of 20 for chunking), tokens from their index. */
#define NP 3
static const int64_t POFF[NP + 1] = {0, 5, 14, 16};
static int32_t PTOK[32];

static df_rollout_request request(int64_t n_samples, int64_t V)
{
    for (int i = 0; i < 32; i++)
        PTOK[i] = (int32_t)((i * 37 + 11) % V);
    return (df_rollout_request){NP, POFF, PTOK, n_samples, 7, NULL, NULL};
}

static df_sampling_params greedy(int64_t max_new)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.greedy = true;
    sp.max_new_tokens = max_new;
    sp.ignore_eos = true; /* the fixtures' greedy paths may reach their eos id early */
    return sp;
}

static df_rollout_options options(int64_t seqs, int64_t batched)
{
    return (df_rollout_options){.max_num_seqs = seqs, .max_seq_len = MAXLEN,
                                .max_num_batched_tokens = batched, .record_routes = true};
}

static df_rollout_engine *engine(const df_model *m, const df_rollout_options *o)
{
    df_rollout_engine *e = NULL;
    if (df_rollout_engine_create_ex(&m->cfg, o, &e))
        fail_msg("engine: %s", df_last_error());
    assert_int_equal(df_rollout_engine_load_weights(e, m), DF_OK);
    return e;
}

/* ---- against the training forward ------------------------------------------------------- */

typedef struct {
    int64_t rows, flips;   /* (token, sparse layer) routes compared; of them near-tie flips */
    int64_t rewritten;     /* last-layer routes -1 where a decode would have routed (recompute) */
    double worst;          /* the flips' largest logit gap / its bound */
    double margin;         /* the smallest gap between the k-th and the (k+1)-th logit of the
                              training forward over its bound (> 1: no flip possible there) */
} tally;

/* Layer l's router logits z of token t of the training forward in a (from its own router input,
 * in double) and their bounds dz: eps times each logit's magnitude sum_h |x_h W_eh|. */
static void router_logits(const df_model *m, const df_acts *a, int64_t l, int64_t t, double eps, double *z,
                          double *dz)
{
    const int64_t H = m->cfg.hidden_size;
    const float *x = a->xn2 + (df_acts_slot(a, l) * a->max_tokens + t) * H, *wr = m->w.layers[l].router;
    for (int64_t e = 0; e < m->cfg.num_experts; e++) {
        double s = 0, mag = 0;
        for (int64_t h = 0; h < H; h++) {
            s += (double)x[h] * wr[e * H + h];
            mag += fabs((double)x[h] * wr[e * H + h]);
        }
        z[e] = s;
        dz[e] = eps * mag;
    }
}

/* (z_(k) - z_(k+1)) / (dz_(k) + dz_(k+1)) over the order of z: how far the top k is from a tie. */
static double top_k_margin(const double *z, const double *dz, int64_t E, int64_t k)
{
    int64_t idx[256];
    for (int64_t e = 0; e < E; e++)
        idx[e] = e;
    for (int64_t i = 0; i < E; i++) /* selection sort, descending */
        for (int64_t j = i + 1; j < E; j++)
            if (z[idx[j]] > z[idx[i]]) {
                const int64_t x = idx[i];
                idx[i] = idx[j], idx[j] = x;
            }
    double worst = INFINITY;
    for (int64_t i = 0; i + 1 < E && i < k; i++) /* within the top k (order) and at its edge */
        worst = fmin(worst, (z[idx[i]] - z[idx[i + 1]]) / (dz[idx[i]] + dz[idx[i + 1]]));
    return worst;
}

/* One training forward of the packed sequence tok[0, P + R) (row P - 1 + j predicts tok[P + j]),
 * at temperature 1, replaying `in` and recording into `out` (either NULL). */
static void train_pass(const df_model *m, df_acts *a, const int32_t *tok, int64_t P, int64_t R,
                       const int32_t *in, int32_t *out, float *lp)
{
    int64_t off[2] = {0, P + R}, rows[MAXLEN];
    for (int64_t j = 0; j < R; j++)
        rows[j] = P - 1 + j;
    df_seq_batch sb = {.n_tokens = P + R, .tokens = tok, .n_seqs = 1, .seq_offsets = off, .n_out = R,
                       .out_rows = rows, .out_targets = tok + P, .routes_in = in, .routes_out = out};
    if (df_model_forward(m, a, &sb, 1.0f, lp, NULL))
        fail_msg("training forward: %s", df_last_error());
}

/*
 * Whether `got` (k experts, largest first) is the top-k order of some logits z' with
 * |z'_e - z_e| <= dz_e: each chosen expert's logit within the bound of those after it and of
 * every unchosen one's. z: the router's logits of the training forward's input, in double.
 */
static bool near_tie(const double *z, const double *dz, int64_t E, const int32_t *got, int64_t k,
                     double *ratio)
{
    bool ok = true;
    for (int64_t i = 0; i < k; i++) {
        const int32_t a = got[i];
        for (int64_t b = 0; b < E; b++) {
            bool later = false, chosen = false;
            for (int64_t j = 0; j < k; j++) {
                chosen |= got[j] == b;
                later |= j > i && got[j] == b;
            }
            if (b == a || (chosen && !later)) /* only experts ranked after a (or unchosen) */
                continue;
            const double gap = z[b] - z[a], bound = dz[a] + dz[b];
            if (gap > 0)
                *ratio = fmax(*ratio, gap / bound);
            ok &= gap <= bound;
        }
    }
    return ok;
}

/*
 * Check one sequence's rollout routes `rr` ([P + R, W]) against the training forward of prompt
 * p ++ response r. mask: the response_mask (NULL: all model tokens). rlp: the rollout's log-probs
 * (NULL: not compared, the weights changed under them). exact_last: the last layer's -1 pattern
 * is the prefills' (false after a recomputation, which routes no output row).
 */
static void check_seq(const df_model *m, df_acts *a, const int32_t *p, int64_t P, const int32_t *r, int64_t R,
                      const int8_t *mask, const float *rlp, const int32_t *rr, bool exact_last, tally *ty)
{
    const df_model_config *c = &m->cfg;
    const int64_t W = df_model_route_width(c), k = c->num_experts_per_tok, E = c->num_experts;
    const int64_t L = c->num_hidden_layers, T = P + R;
    assert_true(T <= MAXLEN && W > 0);
    int32_t tok[MAXLEN], *live = malloc(sizeof(int32_t) * (size_t)(T * W));
    int32_t *rep = malloc(sizeof(int32_t) * (size_t)(T * W));
    float lp_live[MAXLEN], lp_rep[MAXLEN];
    memcpy(tok, p, sizeof(int32_t) * (size_t)P);
    memcpy(tok + P, r, sizeof(int32_t) * (size_t)R);
    train_pass(m, a, tok, P, R, NULL, live, lp_live);
    /* the two decoders' router logits may differ by eps times each logit's magnitude, eps = twice
       one float forward's bound over the roundings before the LM head (every router is earlier) */
    const double eps = 2 * df_tol_gamma_prob(tb_head_chain(c, T), DF_TOL_LAMBDA, DF_U32);
    int64_t flips = 0;
    for (int64_t t = 0; t < T; t++) {
        /* the token after t was sampled from t's output row: a model token of the response */
        const bool sampled_next = t + 1 >= P && t + 1 < T && (!mask || mask[t + 1 - P]);
        for (int64_t l = 0; l < L; l++) {
            if (!df_model_layer_moe(c, l))
                continue;
            const int64_t col = df_model_route_col(c, l);
            const int32_t *got = rr + t * W + col, *want = live + t * W + col;
            const bool none = t == T - 1 || (l == L - 1 && !sampled_next);
            if (got[0] < 0 || none) {
                for (int64_t j = 0; j < k; j++)
                    if (got[j] != -1 || (exact_last && !none) || (!none && l != L - 1))
                        fail_msg("token %lld of %lld (prompt %lld) layer %lld: route entry %lld is %d, "
                                 "want %s", (long long)t, (long long)T, (long long)P, (long long)l,
                                 (long long)j, got[j], none ? "-1" : "an expert");
                ty->rewritten += !exact_last && !none;
                continue;
            }
            ty->rows++;
            double z[256], dz[256], ratio = 0;
            assert_true(E <= 256);
            router_logits(m, a, l, t, eps, z, dz);
            ty->margin = fmin(ty->margin, top_k_margin(z, dz, E, k));
            if (!memcmp(got, want, sizeof(int32_t) * (size_t)k))
                continue;
            /* a flip: allowed where the logits it swaps are within the two decoders' bound */
            const bool tie = near_tie(z, dz, E, got, k, &ratio);
            print_message("  route flip: token %lld of %lld layer %lld: rollout [%d %d], training [%d %d], "
                          "logit gap / bound %.3g%s\n", (long long)t, (long long)T, (long long)l, got[0],
                          k > 1 ? got[1] : -1, want[0], k > 1 ? want[1] : -1, ratio,
                          tie ? " (a near tie)" : "");
            if (!tie)
                fail_msg("token %lld layer %lld: the rollout's route is no near tie of the training "
                         "forward's", (long long)t, (long long)l);
            ty->worst = fmax(ty->worst, ratio);
            flips++;
        }
    }
    ty->flips += flips;
    /* replay: the record's experts are taken (and recorded again), -1 routes live */
    train_pass(m, a, tok, P, R, rr, rep, lp_rep);
    for (int64_t i = 0; i < T * W; i++)
        assert_int_equal(rep[i], rr[i] >= 0 ? rr[i] : live[i]);
    if (!flips)
        assert_memory_equal(lp_rep, lp_live, sizeof(float) * (size_t)R);
    const double leps = tb_logp_eps(c, T);
    for (int64_t j = 0; rlp && j < R; j++) {
        if (mask && !mask[j]) /* an appended token: no sampler log-prob */
            continue;
        const double err = leps * tb_row_scale(m, a, j, r[j], 1.0) + DF_U32 * fabs(lp_rep[j]);
        if (!(fabs(rlp[j] - lp_rep[j]) <= 2 * err))
            fail_msg("response token %lld: rollout log-prob %.7g, replayed training %.7g (bound %.3g)",
                     (long long)j, (double)rlp[j], (double)lp_rep[j], 2 * err);
    }
    free(live), free(rep);
}

/* Every sequence of result r (of request q) against the training forward. */
static tally check_result(const df_model *m, const df_rollout_request *q, const df_rollout_result *r,
                          const char *what)
{
    const int64_t W = df_model_route_width(&m->cfg);
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, MAXLEN, MAXLEN, &a), DF_OK);
    assert_non_null(r->route_offsets);
    assert_non_null(r->routes);
    assert_int_equal(r->route_offsets[0], 0);
    tally ty = {.margin = INFINITY};
    for (int64_t s = 0; s < r->n_seqs; s++) {
        const int64_t i = s / q->n_samples, P = q->prompt_offsets[i + 1] - q->prompt_offsets[i];
        const int64_t o = r->offsets[s], R = r->offsets[s + 1] - o;
        assert_int_equal(r->route_offsets[s + 1] - r->route_offsets[s], P + R);
        check_seq(m, a, q->prompt_tokens + q->prompt_offsets[i], P, r->tokens + o, R,
                  r->response_mask ? r->response_mask + o : NULL, r->log_probs + o,
                  r->routes + r->route_offsets[s] * W, true, &ty);
    }
    print_message("%s (%s): %lld routes against the training forward's, %lld near-tie flips (worst gap / "
                  "bound %.3g); smallest top-k margin / bound %.3g\n",
                  m->cfg.model_type, what, (long long)ty.rows, (long long)ty.flips, ty.worst, ty.margin);
    df_acts_free(a);
    return ty;
}

/* ---- tests ------------------------------------------------------------------------------- */

static const char *const MOE[] = {"tiny_qwen3_moe", "tiny_mixtral"};

/* Greedy generations, one sample each: the routes against the training forward's. */
static void test_greedy_routes_match_training(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        df_model *m = load(MOE[f]);
        const df_rollout_options o = options(4, 0);
        df_rollout_engine *e = engine(m, &o);
        const df_rollout_request q = request(1, m->cfg.vocab_size);
        const df_sampling_params sp = greedy(12);
        df_rollout_result r;
        if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
            fail_msg("%s: %s", MOE[f], df_last_error());
        const int64_t W = df_model_route_width(&m->cfg);
        assert_int_equal(W, 2 * 2); /* two sparse layers, top 2, in both */
        check_result(m, &q, &r, "greedy");
        /* the last response token's row: -1 on every layer */
        for (int64_t s = 0; s < r.n_seqs; s++)
            for (int64_t j = 0; j < W; j++)
                assert_int_equal(r.routes[(r.route_offsets[s + 1] - 1) * W + j], -1);
        df_rollout_result_free(&r);
        assert_null(r.routes);
        assert_null(r.route_offsets);
        df_rollout_engine_free(e);
        df_model_free(m);
    }
}

/* n = 3 sampled responses per prompt through 4 slots: one prefill per prompt, its K / V and routes
 * copied into the other samples' slots (continuous batching around them). */
static void test_samples_share_the_prompt_routes(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        df_model *m = load(MOE[f]);
        const df_rollout_options o = options(4, 0);
        df_rollout_engine *e = engine(m, &o);
        const df_rollout_request q = request(3, m->cfg.vocab_size);
        df_sampling_params sp;
        df_sampling_params_defaults(&sp);
        sp.max_new_tokens = 10;
        sp.ignore_eos = true;
        df_rollout_result r;
        if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
            fail_msg("%s: %s", MOE[f], df_last_error());
        df_rollout_stats st;
        df_rollout_engine_stats(e, &st);
        assert_int_equal(st.prefill_tokens, POFF[NP]); /* each prompt prefilled once */
        const int64_t W = df_model_route_width(&m->cfg);
        for (int64_t s = 0; s < r.n_seqs; s++) {
            const int64_t i = s / 3, P = POFF[i + 1] - POFF[i];
            assert_memory_equal(r.routes + r.route_offsets[s] * W, r.routes + r.route_offsets[3 * i] * W,
                                sizeof(int32_t) * (size_t)(P * W));
        }
        check_result(m, &q, &r, "3 samples per prompt");
        df_rollout_result_free(&r);
        df_rollout_engine_free(e);
        df_model_free(m);
    }
}

/* A prompt of 20 tokens with 8 rows per forward: prefilled in chunks into its first slot, its
 * routes copied with its K / V into the second sample's; batched with a short prompt after. */
static void test_chunked_prefill(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        df_model *m = load(MOE[f]);
        const df_rollout_options o = options(2, 8);
        df_rollout_engine *e = engine(m, &o);
        static const int64_t off[3] = {0, 20, 23};
        int32_t tok[23];
        for (int i = 0; i < 23; i++)
            tok[i] = (int32_t)((i * 29 + 5) % m->cfg.vocab_size);
        const df_rollout_request q = {2, off, tok, 2, 3, NULL, NULL};
        const df_sampling_params sp = greedy(9);
        df_rollout_result r;
        if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
            fail_msg("%s: %s", MOE[f], df_last_error());
        df_rollout_stats st;
        df_rollout_engine_stats(e, &st);
        assert_true(st.prefill_batches >= 4); /* 8 + 8 + 4, then the short prompt */
        const int64_t W = df_model_route_width(&m->cfg);
        assert_memory_equal(r.routes, r.routes + r.route_offsets[1] * W, sizeof(int32_t) * (size_t)(20 * W));
        check_result(m, &q, &r, "chunked prefill");
        df_rollout_result_free(&r);
        df_rollout_engine_free(e);
        df_model_free(m);
    }
}

/* ---- multi-turn ------------------------------------------------------------------------- */

typedef struct {
    int64_t V, replies;
    int32_t buf[8];
} turns;

static int on_turn(void *user, const df_turn_info *t, df_turn_reply *r)
{
    turns *h = user;
    if (t->turn > h->replies) {
        r->done = true;
        return DF_OK;
    }
    const int64_t n = 3 + (t->seq + t->turn) % 4;
    for (int64_t k = 0; k < n; k++)
        h->buf[k] = (int32_t)((t->seq * 7 + t->turn * 13 + k * 5 + 3) % h->V);
    r->tokens = h->buf;
    r->n_tokens = n;
    return DF_OK;
}

/* A turn handler's replies prefilled into the sequences' caches (continuations chunked by 6 rows
 * per forward, batched with prompts): their routes are the continuation's, the stop token's with
 * them, and the last layer routes only each continuation's last row. */
static void test_multi_turn(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        df_model *m = load(MOE[f]);
        const df_rollout_options o = options(3, 6);
        df_rollout_engine *e = engine(m, &o);
        const df_rollout_request q = request(2, m->cfg.vocab_size);
        df_sampling_params sp = greedy(40);
        int32_t stops[15];
        for (int i = 0; i < 15; i++) /* a quarter of the ids end a turn: turns of a few tokens */
            stops[i] = (int32_t)(4 * i + 1);
        sp.stop_ids = stops;
        sp.n_stop = 15;
        turns h = {m->cfg.vocab_size, 2, {0}};
        const df_turn_handler th = {&h, on_turn, 0};
        df_rollout_result r;
        if (df_rollout_generate_turns(e, m, &q, &sp, &th, &r, NULL, NULL))
            fail_msg("%s: %s", MOE[f], df_last_error());
        df_rollout_stats st;
        df_rollout_engine_stats(e, &st);
        int64_t appended = 0;
        for (int64_t t = 0; t < r.offsets[r.n_seqs]; t++)
            appended += !r.response_mask[t];
        assert_true(appended > 0 && st.appended_tokens == appended);
        check_result(m, &q, &r, "multi-turn");
        df_rollout_result_free(&r);
        df_rollout_engine_free(e);
        df_model_free(m);
    }
}

/* ---- streams ---------------------------------------------------------------------------- */

typedef struct {
    df_model *m;             /* perturbed in place at swap_at */
    int64_t polls, swap_at, V, W, n;
    int32_t tok[NP][MAXLEN], routes[NP][MAXLEN * 8];
    float logp[NP][MAXLEN];
    int64_t len[NP], plen[NP];
} feeder;

static int poll_hook(void *user, df_rollout_poll *p)
{
    feeder *f = user;
    const int64_t k = f->polls++;
    if (k == 0) {
        static int64_t ids[NP] = {0, 1, 2};
        p->n_prompts = NP;
        p->prompt_offsets = POFF;
        p->prompt_tokens = PTOK;
        p->prompt_ids = ids;
        p->finish = true;
    }
    if (k == f->swap_at) { /* new weights, every sequence's K / V (and routes) rewritten */
        for (int64_t i = 0; i < f->m->n_params; i++)
            f->m->params[i] *= (i % 3) ? 0.75f : 1.25f;
        df_model_weights_changed(f->m);
        p->weights_changed = true;
        p->new_version = 1;
        p->recompute_kv = true;
    }
    return DF_OK;
}

static int on_seq(void *user, const df_rollout_seq *s)
{
    feeder *f = user;
    const int64_t i = s->prompt_id;
    assert_true(i >= 0 && i < NP && s->n_tokens <= MAXLEN);
    assert_int_equal(s->prompt_len, POFF[i + 1] - POFF[i]);
    assert_non_null(s->routes);
    assert_true((s->prompt_len + s->n_tokens) * f->W <= MAXLEN * 8);
    memcpy(f->tok[i], s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
    memcpy(f->logp[i], s->log_probs, sizeof(float) * (size_t)s->n_tokens);
    memcpy(f->routes[i], s->routes, sizeof(int32_t) * (size_t)((s->prompt_len + s->n_tokens) * f->W));
    f->len[i] = s->n_tokens;
    f->plen[i] = s->prompt_len;
    f->n++;
    return DF_OK;
}

/* A stream fed everything at once records what df_rollout_generate does, bit for bit; with a weight
 * change and recompute_kv the new weights' routes replace the old ones (the last write wins). */
static void test_stream(void **state)
{
    (void)state;
    for (int fx = 0; fx < 2; fx++) {
        df_model *m = load(MOE[fx]);
        const df_rollout_options o = options(4, 0);
        df_rollout_engine *e = engine(m, &o);
        const df_rollout_request q = request(1, m->cfg.vocab_size);
        const df_sampling_params sp = greedy(12);
        df_rollout_result r;
        assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), DF_OK);
        const int64_t W = df_model_route_width(&m->cfg);
        feeder *f = calloc(1, sizeof *f);
        *f = (feeder){.m = m, .swap_at = -1, .V = m->cfg.vocab_size, .W = W};
        const df_rollout_stream_hooks hk = {f, poll_hook, on_seq, NULL};
        if (df_rollout_stream(e, m, 1, 7, &sp, 0, &hk))
            fail_msg("stream: %s", df_last_error());
        assert_int_equal(f->n, NP);
        for (int64_t i = 0; i < NP; i++) {
            assert_int_equal(f->len[i], r.offsets[i + 1] - r.offsets[i]);
            assert_memory_equal(f->tok[i], r.tokens + r.offsets[i], sizeof(int32_t) * (size_t)f->len[i]);
            assert_memory_equal(f->routes[i], r.routes + r.route_offsets[i] * W,
                                sizeof(int32_t) * (size_t)((f->plen[i] + f->len[i]) * W));
        }
        /* the swap before the third decode step: prompts and two tokens recomputed */
        df_model *m2 = NULL;
        assert_int_equal(df_model_clone(m, &m2), DF_OK);
        memset(f, 0, sizeof *f);
        *f = (feeder){.m = m2, .swap_at = 3, .V = m->cfg.vocab_size, .W = W};
        const df_rollout_stream_hooks hk2 = {f, poll_hook, on_seq, NULL};
        assert_int_equal(df_rollout_engine_load_weights(e, m2), DF_OK);
        if (df_rollout_stream(e, m2, 1, 7, &sp, 0, &hk2))
            fail_msg("stream: %s", df_last_error());
        df_rollout_stats st;
        df_rollout_engine_stats(e, &st);
        assert_true(st.recomputed_tokens > 0);
        assert_int_equal(f->n, NP);
        df_acts *a = NULL;
        assert_int_equal(df_acts_create(&m2->cfg, MAXLEN, MAXLEN, &a), DF_OK);
        tally ty = {.margin = INFINITY};
        for (int64_t i = 0; i < NP; i++) /* against the new weights' training forward */
            check_seq(m2, a, PTOK + POFF[i], f->plen[i], f->tok[i], f->len[i], NULL, NULL, f->routes[i],
                      false, &ty);
        print_message("%s (stream, recompute_kv): %lld routes against the new weights', %lld near-tie flips, "
                      "%lld last-layer routes rewritten to -1; smallest top-k margin / bound %.3g\n",
                      m->cfg.model_type, (long long)ty.rows, (long long)ty.flips, (long long)ty.rewritten,
                      ty.margin);
        assert_true(ty.rewritten >= NP); /* each prompt's last row, routed at its prefill, rewritten */
        df_acts_free(a);
        free(f);
        df_model_free(m2);
        df_rollout_result_free(&r);
        df_rollout_engine_free(e);
        df_model_free(m);
    }
}

/* ---- the rest ---------------------------------------------------------------------------- */

/* The checker's tie rule on hand-made logits: a swap inside the bound passes, one past it (or an
 * expert chosen over a clearly larger one) does not. */
static void test_near_tie_rule(void **state)
{
    (void)state;
    const double z[4] = {1.0, 1.0 + 1e-7, 0.5, -1.0}, dz[4] = {1e-6, 1e-6, 1e-6, 1e-6};
    double ratio = 0;
    const int32_t exact[2] = {1, 0}, swapped[2] = {0, 1}, edge[2] = {1, 2}, far[2] = {3, 1};
    assert_true(near_tie(z, dz, 4, exact, 2, &ratio));
    assert_true(near_tie(z, dz, 4, swapped, 2, &ratio) && ratio > 0 && ratio < 1);
    assert_false(near_tie(z, dz, 4, edge, 2, &ratio)); /* 2 chosen over 0: a gap of 0.5 */
    assert_false(near_tie(z, dz, 4, far, 2, &ratio));
    const double zt[4] = {2.0, 1.0, 1.0 + 1e-7, 0.0};
    const int32_t at_edge[2] = {0, 1};
    assert_true(near_tie(zt, dz, 4, at_edge, 2, &ratio)); /* 1 over 2 at the top k's edge */
    assert_true(top_k_margin(z, dz, 4, 1) < 1);  /* the first two nearly tie */
    assert_true(top_k_margin(zt, dz, 4, 1) > 1); /* a clear first */
    assert_true(top_k_margin(zt, dz, 4, 2) < 1); /* but a tie at the top 2's edge */
}

static void test_refusals_and_off(void **state)
{
    (void)state;
    /* a dense model has no route to record */
    df_model *d = load("tiny_qwen3");
    df_rollout_options o = options(2, 0);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&d->cfg, &o, &e), DF_EINVAL);
    assert_null(e);
    assert_non_null(strstr(df_last_error(), "record_routes"));
    df_model_free(d);
    /* off: neither field */
    df_model *m = load("tiny_qwen3_moe");
    o.record_routes = false;
    e = engine(m, &o);
    const df_rollout_request q = request(2, m->cfg.vocab_size);
    const df_sampling_params sp = greedy(5);
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), DF_OK);
    assert_null(r.route_offsets);
    assert_null(r.routes);
    df_rollout_result_free(&r);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* The bytes the record adds (rollout.h's formula), and free_cache_engine: the routes' pages given
 * back between calls, the next call's routes the same. */
static void test_memory_and_free_cache(void **state)
{
    (void)state;
    df_model *m = load("tiny_qwen3_moe");
    df_rollout_options on = options(4, 16), off = on;
    off.record_routes = false;
    const int64_t W = df_model_route_width(&m->cfg), R = 16;
    assert_int_equal(df_rollout_engine_bytes_ex(&m->cfg, &on) - df_rollout_engine_bytes_ex(&m->cfg, &off),
                     4 * MAXLEN * W * 2 + R * W * 4);
    on.free_cache_engine = true;
    df_rollout_engine *e = engine(m, &on);
    int64_t total = 0;
    df_rollout_engine_memory(e, NULL, &total);
    assert_int_equal(total, df_rollout_engine_bytes_ex(&m->cfg, &on));
    const df_rollout_request q = request(2, m->cfg.vocab_size);
    const df_sampling_params sp = greedy(8);
    df_rollout_result a, b;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &a, NULL, NULL), DF_OK);
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &b, NULL, NULL), DF_OK);
    assert_memory_equal(a.route_offsets, b.route_offsets, sizeof(int64_t) * (size_t)(a.n_seqs + 1));
    assert_memory_equal(a.routes, b.routes, sizeof(int32_t) * (size_t)(a.route_offsets[a.n_seqs] * W));
    check_result(m, &q, &b, "free_cache_engine");
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* A bf16 engine records too (its routes through the bf16 experts): the -1 pattern, every other
 * entry an expert (k distinct per layer), and the record replays in the training forward; how many
 * agree with the float32 training forward's is printed, not held (bf16 rounding moves near ties). */
static void test_bf16_records(void **state)
{
    (void)state;
    if (df_model_bf16_available() != DF_OK) {
        print_message("no native bf16 matmuls here: %s\n", df_last_error());
        return;
    }
    for (int f = 0; f < 2; f++) {
        df_model *m = load(MOE[f]);
        df_rollout_options o = options(4, 0);
        o.dtype = DF_ROLLOUT_BF16;
        df_rollout_engine *e = engine(m, &o);
        const df_rollout_request q = request(2, m->cfg.vocab_size);
        const df_sampling_params sp = greedy(10);
        df_rollout_result r;
        if (df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL))
            fail_msg("%s: %s", MOE[f], df_last_error());
        const df_model_config *c = &m->cfg;
        const int64_t W = df_model_route_width(c), k = c->num_experts_per_tok, L = c->num_hidden_layers;
        assert_true(W <= 8);
        df_acts *a = NULL;
        assert_int_equal(df_acts_create(c, MAXLEN, MAXLEN, &a), DF_OK);
        int64_t same = 0, compared = 0;
        for (int64_t s = 0; s < r.n_seqs; s++) {
            const int64_t i = s / q.n_samples, P = POFF[i + 1] - POFF[i], R = r.offsets[s + 1] - r.offsets[s];
            const int64_t T = P + R;
            const int32_t *rr = r.routes + r.route_offsets[s] * W;
            int32_t tok[MAXLEN], live[MAXLEN * 8], rep[MAXLEN * 8];
            float lp[MAXLEN];
            for (int64_t t = 0; t < T; t++)
                for (int64_t l = 0; l < L; l++) {
                    if (!df_model_layer_moe(c, l))
                        continue;
                    const int32_t *g = rr + t * W + df_model_route_col(c, l);
                    const bool none = t == T - 1 || (l == L - 1 && t < P - 1);
                    for (int64_t j = 0; j < k; j++) {
                        const bool expert = g[j] >= 0 && g[j] < c->num_experts && (!j || g[j] != g[j - 1]);
                        assert_true(none ? g[j] == -1 : expert);
                    }
                }
            memcpy(tok, PTOK + POFF[i], sizeof(int32_t) * (size_t)P);
            memcpy(tok + P, r.tokens + r.offsets[s], sizeof(int32_t) * (size_t)R);
            train_pass(m, a, tok, P, R, NULL, live, lp);
            train_pass(m, a, tok, P, R, rr, rep, lp);
            for (int64_t x = 0; x < T * W; x += k) {
                assert_int_equal(rep[x], rr[x] >= 0 ? rr[x] : live[x]);
                if (rr[x] >= 0) {
                    compared++;
                    same += !memcmp(rr + x, live + x, sizeof(int32_t) * (size_t)k);
                }
            }
        }
        print_message("%s (bf16 rollout): %lld of %lld routes as the float32 training forward's\n",
                      c->model_type, (long long)same, (long long)compared);
        df_acts_free(a);
        df_rollout_result_free(&r);
        df_rollout_engine_free(e);
        df_model_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_near_tie_rule),
        cmocka_unit_test(test_greedy_routes_match_training),
        cmocka_unit_test(test_samples_share_the_prompt_routes),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_multi_turn),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_bf16_records),
        cmocka_unit_test(test_refusals_and_off),
        cmocka_unit_test(test_memory_and_free_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
