/* Streaming rollout (df_rollout_stream) on a small random model: a stream fed everything at
 * once is df_rollout_generate bit for bit; feeding prompts one per forward, in another order,
 * gives every sequence the same tokens; a weight change between decode steps tags the tokens
 * after it with the new version and changes only them; abort returns at once; malformed feeds
 * are refused naming the prompt's id; a bf16 engine re-makes its weight copy at a change; a
 * change answered with recompute_kv rewrites the K / V in flight (a fresh forward's log-probs
 * after it, the cost counted), also mid-way through a chunked prefill. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>

#include <cmocka.h>

#include "distflow/model.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "testbounds.h"
#include "testutil.h"
#include "tolerance.h"

/* Prompts of lengths 3, 7, 1, 12, 5 with tokens derived from the index; keys and ids apart
 * from the index, so a mix-up of the three shows. */
#define NP 5
#define NS 3
#define MAXNEW 12
static const int64_t POFF[NP + 1] = {0, 3, 10, 11, 23, 28};
static int32_t PTOK[28];
static const uint64_t KEYS[NP] = {71, 3, 40, 9, 18};
static const int64_t IDS[NP] = {500, 501, 502, 503, 504};

static df_rollout_request request(int64_t n_samples)
{
    for (int i = 0; i < 28; i++)
        PTOK[i] = (int32_t)((i * 37 + 11) % 97);
    return (df_rollout_request){NP, POFF, PTOK, n_samples, 5, KEYS, NULL};
}

static df_sampling_params sampling(void)
{
    static const int32_t stop[1] = {13}; /* some responses stop early */
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.max_new_tokens = MAXNEW;
    sp.stop_ids = stop;
    sp.n_stop = 1;
    return sp;
}

/* ---- a scripted feeder and a collector ---------------------------------------------------- */

typedef struct {
    int32_t tok[MAXNEW];
    float logp[MAXNEW];
    int32_t ver[MAXNEW];
    int64_t n, got;
    int8_t reason;
} seq_out;

typedef struct {
    df_model *m;            /* changed in place by a swap */
    int64_t n_samples;
    const int64_t *plan;    /* prompts fed at each poll, in the order `order` (NULL: all at poll 0) */
    const int64_t *order;
    int64_t swap_at;        /* poll index of a weight change to version 1 (-1: none) */
    int64_t swap2_at;       /* poll index of a second change, to version 2 (-1: none) */
    bool recompute;         /* the change answers recompute_kv */
    int64_t abort_at;       /* poll index answering abort (-1: none) */
    int64_t polls, fed, delivered, delivered_at_abort;
    int64_t off[NP + 1];    /* a planned feed, copied from the prompts (reused at every poll) */
    int32_t tok[28];
    uint64_t key[NP];
    int64_t id[NP];
    seq_out out[NP][8];     /* [prompt][sample] */
} feeder;

static int64_t index_of_id(int64_t id)
{
    for (int64_t i = 0; i < NP; i++)
        if (IDS[i] == id)
            return i;
    fail_msg("unknown prompt id %lld", (long long)id);
    return -1;
}

static void perturb(df_model *m)
{
    for (int64_t i = 0; i < m->n_params; i++)
        m->params[i] *= (i % 3) ? 0.5f : 1.5f;
    df_model_weights_changed(m);
}

/* The next n prompts of f->order into f's own buffers (overwritten at the next feed: the
 * engine copies them). */
static void feed_planned(feeder *f, int64_t n, df_rollout_poll *p)
{
    f->off[0] = 0;
    for (int64_t c = 0; c < n; c++) {
        int64_t i = f->order[f->fed++], len = POFF[i + 1] - POFF[i];
        memcpy(f->tok + f->off[c], PTOK + POFF[i], (size_t)len * sizeof *f->tok);
        f->off[c + 1] = f->off[c] + len;
        f->key[c] = KEYS[i];
        f->id[c] = IDS[i];
    }
    p->n_prompts = n; /* a weight change answered at the same poll stays */
    p->prompt_offsets = f->off;
    p->prompt_tokens = f->tok;
    p->prompt_keys = f->key;
    p->prompt_ids = f->id;
}

static int poll_hook(void *user, df_rollout_poll *p)
{
    feeder *f = user;
    const int64_t k = f->polls++;
    assert_true(p->free_slots >= 0 && p->active >= 0);
    if (k == f->abort_at) {
        f->delivered_at_abort = f->delivered;
        p->abort = true;
        return DF_OK;
    }
    if (k == f->swap_at || k == f->swap2_at) {
        perturb(f->m);
        p->weights_changed = true;
        p->new_version = k == f->swap_at ? 1 : 2;
        p->recompute_kv = f->recompute;
    }
    if (!f->plan && f->fed == 0) {
        p->n_prompts = NP;
        p->prompt_offsets = POFF;
        p->prompt_tokens = PTOK;
        p->prompt_keys = KEYS;
        p->prompt_ids = IDS;
        f->fed = NP;
    } else if (f->plan && f->fed < NP && f->plan[k] > 0) {
        feed_planned(f, f->plan[k], p);
    }
    p->finish = f->fed == NP;
    return DF_OK;
}

static int seq_hook(void *user, const df_rollout_seq *s)
{
    feeder *f = user;
    int64_t i = index_of_id(s->prompt_id);
    assert_true(s->sample >= 0 && s->sample < f->n_samples && s->n_tokens <= MAXNEW);
    seq_out *o = &f->out[i][s->sample];
    memcpy(o->tok, s->tokens, (size_t)s->n_tokens * sizeof *o->tok);
    memcpy(o->logp, s->log_probs, (size_t)s->n_tokens * sizeof *o->logp);
    memcpy(o->ver, s->versions, (size_t)s->n_tokens * sizeof *o->ver);
    o->n = s->n_tokens;
    o->reason = s->finish_reason;
    o->got++;
    f->delivered++;
    return DF_OK;
}

static feeder *new_feeder(df_model *m, int64_t n_samples)
{
    feeder *f = calloc(1, sizeof *f);
    f->m = m;
    f->n_samples = n_samples;
    f->swap_at = f->swap2_at = f->abort_at = -1;
    return f;
}

static int stream(df_rollout_engine *e, feeder *f)
{
    df_sampling_params sp = sampling();
    df_rollout_stream_hooks h = {f, poll_hook, seq_hook, NULL};
    return df_rollout_stream(e, f->m, f->n_samples, 5, &sp, 0, &h);
}

static df_rollout_engine *engine_ex(const df_model *m, int64_t max_seqs, int64_t batched,
                                    df_rollout_dtype dt)
{
    df_rollout_options o = {max_seqs, 64, batched, dt, NULL, false, false, false};
    df_rollout_engine *e = NULL;
    if (df_rollout_engine_create_ex(&m->cfg, &o, &e))
        fail_msg("engine: %s", df_last_error());
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    return e;
}

static df_rollout_engine *engine(const df_model *m, int64_t max_seqs, df_rollout_dtype dt)
{
    return engine_ex(m, max_seqs, 0, dt);
}

/* Every sequence delivered once, with version v0 on every token. */
static void assert_all_delivered(const feeder *f, int32_t v0)
{
    assert_int_equal(f->delivered, NP * f->n_samples);
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < f->n_samples; j++) {
            const seq_out *o = &f->out[i][j];
            assert_int_equal(o->got, 1);
            assert_true(o->n >= 1);
            for (int64_t t = 0; v0 >= 0 && t < o->n; t++)
                assert_int_equal(o->ver[t], v0);
        }
}

/* ---- tests ------------------------------------------------------------------------------- */

/* (1) fed everything at the first poll and finished: df_rollout_generate, bit for bit. */
static void test_stream_is_generate(void **state)
{
    (void)state;
    df_model_config c = df_test_rollout_config(97);
    df_model *m = df_test_biased_model(&c, 1234);
    df_rollout_engine *e = engine(m, 4, DF_ROLLOUT_F32); /* 15 sequences through 4 slots */
    df_rollout_request q = request(NS);
    df_sampling_params sp = sampling();
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), 0);
    feeder *f = new_feeder(m, NS);
    assert_int_equal(stream(e, f), 0);
    assert_all_delivered(f, 0);
    int n_stop = 0;
    for (int64_t s = 0; s < r.n_seqs; s++) {
        const seq_out *o = &f->out[s / NS][s % NS];
        assert_int_equal(o->n, r.offsets[s + 1] - r.offsets[s]);
        assert_memory_equal(o->tok, r.tokens + r.offsets[s], (size_t)o->n * sizeof(int32_t));
        assert_memory_equal(o->logp, r.log_probs + r.offsets[s], (size_t)o->n * sizeof(float));
        assert_int_equal(o->reason, r.finish_reason[s]);
        n_stop += o->reason == DF_FINISH_STOP;
    }
    assert_true(n_stop > 0 && n_stop < r.n_seqs); /* both ends are exercised */
    df_rollout_stats st;
    df_rollout_engine_stats(e, &st);
    assert_int_equal(st.generated_tokens, r.offsets[r.n_seqs]);
    print_message("stream of %lld sequences: %lld decode steps, mean active %.2f, %lld polls\n",
                  (long long)r.n_seqs, (long long)st.decode_steps, st.mean_active,
                  (long long)f->polls);
    df_rollout_result_free(&r);
    /* free_cache_engine: the cache's pages go back when the stream returns, as after generate */
    df_rollout_options o = {4, 64, 0, DF_ROLLOUT_F32, NULL, true, false, false};
    df_rollout_engine *ef = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &ef), 0);
    feeder *g = new_feeder(m, NS);
    assert_int_equal(stream(ef, g), 0);
    assert_memory_equal(g->out, f->out, sizeof f->out);
    int64_t kv = df_rollout_engine_kv_resident(ef);
    assert_true(kv == 0 || kv == -1);
    free(g);
    df_rollout_engine_free(ef);
    free(f);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* (2) prompts fed over several polls, in another order, while others decode: the same tokens
 * per sequence (its generator is keyed by seed, prompt key and sample, not by admission),
 * log-probs within float rounding of other batch shapes. */
static void feed_per_step(int64_t max_seqs, int64_t batched, const int64_t *plan,
                          const int64_t *order)
{
    df_model_config c = df_test_rollout_config(97);
    df_model *m = df_test_biased_model(&c, 1234);
    df_rollout_engine *e = engine(m, 4, DF_ROLLOUT_F32);
    df_rollout_engine *e2 = engine_ex(m, max_seqs, batched, DF_ROLLOUT_F32);
    feeder *a = new_feeder(m, NS), *b = new_feeder(m, NS);
    b->plan = plan;
    b->order = order;
    assert_int_equal(stream(e, a), 0);
    assert_int_equal(stream(e2, b), 0);
    assert_all_delivered(b, 0);
    assert_true(b->polls > NP);
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < NS; j++) {
            const seq_out *x = &a->out[i][j], *y = &b->out[i][j];
            assert_int_equal(x->n, y->n);
            assert_memory_equal(x->tok, y->tok, (size_t)x->n * sizeof(int32_t));
            assert_int_equal(x->reason, y->reason);
            for (int64_t t = 0; t < x->n; t++)
                assert_true(fabsf(x->logp[t] - y->logp[t]) <= 1e-4f);
        }
    df_rollout_stats st;
    df_rollout_engine_stats(e2, &st);
    print_message("fed over polls (%lld rows per forward): %lld prefill batches, %lld polls\n",
                  (long long)batched, (long long)st.prefill_batches, (long long)b->polls);
    free(a);
    free(b);
    df_rollout_engine_free(e);
    df_rollout_engine_free(e2);
    df_model_free(m);
}

/* One prompt per poll, in reverse order. */
static void test_feed_per_step(void **state)
{
    (void)state;
    static const int64_t plan[NP] = {1, 1, 1, 1, 1}, order[NP] = {4, 3, 2, 1, 0};
    feed_per_step(4, 0, plan, order);
}

/* 8 rows per forward: the 12-token prompt (fed second, with a 1-token one) is prefilled in two
 * chunks, and a feed between them compacts the queue under it (its index moves). */
static void test_feed_per_step_chunked(void **state)
{
    (void)state;
    static const int64_t plan[6] = {2, 0, 1, 0, 1, 1}, order[NP] = {2, 3, 0, 1, 4};
    feed_per_step(8, 8, plan, order);
}

/* A swap before decode step 3 (every sequence admitted at poll 0: 10 slots for 5 x 2): tokens
 * 0..2 (the prefill's and two decode steps') carry version 0 and equal an unswapped run's bit
 * for bit; the later ones carry 1 and differ. */
static void check_swap(df_rollout_dtype dt)
{
    df_model_config c = df_test_rollout_config(97);
    df_model *m = df_test_biased_model(&c, 1234), *m2 = NULL;
    assert_int_equal(df_model_clone(m, &m2), 0);
    df_rollout_engine *e = engine(m, 10, dt);
    feeder *a = new_feeder(m, 2), *b = new_feeder(m2, 2);
    b->swap_at = 3; /* polls: 0 prefill, 1 and 2 decode, 3 the swap */
    assert_int_equal(stream(e, a), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, m2), 0);
    double t0 = omp_get_wtime();
    assert_int_equal(stream(e, b), 0);
    double sec = omp_get_wtime() - t0;
    assert_all_delivered(b, -1);
    int64_t changed = 0, after = 0;
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < 2; j++) {
            const seq_out *x = &a->out[i][j], *y = &b->out[i][j];
            int64_t n0 = y->n < 3 ? y->n : 3;
            assert_memory_equal(x->tok, y->tok, (size_t)n0 * sizeof(int32_t));
            assert_memory_equal(x->logp, y->logp, (size_t)n0 * sizeof(float));
            for (int64_t t = 0; t < y->n; t++)
                assert_int_equal(y->ver[t], t < 3 ? 0 : 1);
            bool differs = x->n != y->n;
            for (int64_t t = 3; t < y->n && t < x->n; t++)
                differs = differs || x->tok[t] != y->tok[t] || x->logp[t] != y->logp[t];
            changed += differs;
            after += y->n > 3;
        }
    assert_true(after > 0 && changed == after); /* every sequence that went on saw new weights */
    print_message("%s swap: %lld of %lld sequences changed after it; stream %.3f s\n",
                  dt == DF_ROLLOUT_BF16 ? "bf16" : "f32", (long long)changed, (long long)after, sec);
    free(a);
    free(b);
    df_rollout_engine_free(e);
    df_model_free(m);
    df_model_free(m2);
}

/* (3) version tagging across a weight change, float32 (the engine reads m in place). */
static void test_weight_swap_versions(void **state)
{
    (void)state;
    check_swap(DF_ROLLOUT_F32);
}

/* (6) the same on a bf16 engine: its own packed copy is made again at the change. */
static void test_weight_swap_bf16(void **state)
{
    (void)state;
    if (df_model_bf16_available() != DF_OK) {
        print_message("no native bf16 matmuls here: %s\n", df_last_error());
        skip();
    }
    check_swap(DF_ROLLOUT_BF16);
}

/* (4) abort: returns at once (no further poll or delivery), nothing in flight is delivered, and
 * the engine streams normally afterwards. */
static void test_abort(void **state)
{
    (void)state;
    df_model_config c = df_test_rollout_config(97);
    df_model *m = df_test_biased_model(&c, 1234);
    df_rollout_engine *e = engine(m, 4, DF_ROLLOUT_F32);
    feeder *f = new_feeder(m, NS), *ok = new_feeder(m, NS), *ref = new_feeder(m, NS);
    f->abort_at = 6;
    assert_int_equal(stream(e, ref), 0);
    assert_int_equal(stream(e, f), 0);
    assert_int_equal(f->polls, 7);
    assert_int_equal(f->delivered, f->delivered_at_abort);
    assert_true(f->delivered < NP * NS);
    assert_int_equal(stream(e, ok), 0);
    assert_all_delivered(ok, 0);
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < NS; j++)
            assert_memory_equal(&ok->out[i][j], &ref->out[i][j], sizeof(seq_out));
    free(f);
    free(ok);
    free(ref);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* A feed the hook answers at poll 0, for the malformed-feed test. */
typedef struct {
    int64_t n;
    const int64_t *off;
    const int32_t *tok;
    const int64_t *ids;
    bool finish_first;      /* feed and finish at poll 0, feed again at poll 1 */
    bool touch_weights;     /* change m's version without weights_changed */
    df_model *m;
    int64_t version;        /* new_version of a swap at poll 0 (0: no swap) */
    int64_t polls, seqs;
} bad_feed;

static int bad_poll(void *user, df_rollout_poll *p)
{
    bad_feed *b = user;
    const int64_t k = b->polls++;
    if (b->touch_weights)
        df_model_weights_changed(b->m);
    if (b->version) {
        p->weights_changed = true;
        p->new_version = b->version;
    }
    if (k == 0 || (k == 1 && b->finish_first)) { /* finish_first: the same feed again at poll 1 */
        p->n_prompts = b->n;
        p->prompt_offsets = b->off;
        p->prompt_tokens = b->tok;
        p->prompt_ids = b->ids;
    }
    p->finish = true;
    return DF_OK;
}

static int bad_seq(void *user, const df_rollout_seq *s)
{
    (void)s;
    ((bad_feed *)user)->seqs++;
    return DF_OK;
}

static int run_bad(df_rollout_engine *e, df_model *m, bad_feed *b)
{
    df_sampling_params sp = sampling();
    df_rollout_stream_hooks h = {b, bad_poll, bad_seq, NULL};
    b->m = m;
    return df_rollout_stream(e, m, 2, 5, &sp, 0, &h);
}

/* (5) malformed feeds and answers: DF_EINVAL naming the prompt's id, nothing delivered. */
static void test_malformed_feed(void **state)
{
    (void)state;
    df_model_config c = df_test_rollout_config(97);
    df_model *m = df_test_biased_model(&c, 1234);
    df_rollout_engine *e = engine(m, 4, DF_ROLLOUT_F32);
    const int64_t ids[2] = {40, 41}, empty[3] = {0, 3, 3}, two[3] = {0, 3, 5}, shifted[3] = {1, 3, 5};
    const int64_t toolong[3] = {0, 3, 3 + 64};
    int32_t tok[80] = {1, 2, 3, 4, 5}, badtok[5] = {1, 2, 3, 4, 97};
    bad_feed b = {.n = 2, .off = empty, .tok = tok, .ids = ids};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "prompt id 41 has 0 tokens");
    assert_int_equal(b.seqs, 0);
    b = (bad_feed){.n = 2, .off = toolong, .tok = tok, .ids = ids};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "prompt id 41 has 64 tokens");
    b = (bad_feed){.n = 2, .off = two, .tok = badtok, .ids = ids};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "prompt id 41 token 1 is 97");
    b = (bad_feed){.n = 2, .off = shifted, .tok = tok, .ids = ids};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "prompt_offsets[0]");
    b = (bad_feed){.n = 2, .off = two, .tok = tok, .ids = NULL};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "NULL offsets, tokens or ids");
    b = (bad_feed){.n = 2, .off = two, .tok = tok, .ids = ids, .finish_first = true};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "fed after finish");
    b = (bad_feed){.n = 2, .off = two, .tok = tok, .ids = ids, .touch_weights = true};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "without a poll answering weights_changed");
    b = (bad_feed){.n = 2, .off = two, .tok = tok, .ids = ids, .version = -3};
    assert_error_mentions(run_bad(e, m, &b), DF_EINVAL, "new_version -3");
    assert_int_equal(b.seqs, 0);
    /* the same feed, well-formed, runs: 2 prompts x 2 samples */
    b = (bad_feed){.n = 2, .off = two, .tok = tok, .ids = ids};
    assert_int_equal(run_bad(e, m, &b), 0);
    assert_int_equal(b.seqs, 4);
    df_sampling_params sp = sampling();
    df_rollout_stream_hooks h = {&b, bad_poll, NULL, NULL};
    assert_error_mentions(df_rollout_stream(e, m, 2, 5, &sp, 0, &h), DF_EINVAL, "hook");
    h.on_seq = bad_seq;
    assert_error_mentions(df_rollout_stream(e, m, 0, 5, &sp, 0, &h), DF_EINVAL, "n_samples");
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* ---- recomputing the KV cache at a weight change ------------------------------------------ */

/* Per prompt: sequences with a token of a version >= 1, and those whose first such token has
 * the log-prob a fresh float32 forward of m (the latest weights) gives it after the prompt and the
 * tokens before it (teacher-forced, testbounds.h), within the bound of two computations: twice
 * one float32 forward's (as other batch shapes in tests/test_rollout.c) plus, for a bf16 engine,
 * the relative bound of its bf16 roundings that tests/test_rollout_dtype.c's check_pair derives
 * (weight and activation of 4 GEMM stages and K / V per layer, 3 in the head and embedding). */
typedef struct {
    int64_t compared[NP], within[NP];
    double worst, best; /* largest and smallest |diff| / bound */
} fresh_cmp;

static fresh_cmp compare_fresh(const feeder *f, const df_model *m, df_rollout_dtype dt)
{
    fresh_cmp c = {.best = INFINITY};
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, 64, 64, &a), 0);
    const double L = (double)m->cfg.num_hidden_layers;
    const double rel16 = dt == DF_ROLLOUT_BF16
                             ? df_tol_gamma_prob(10 * L + 3, DF_TOL_LAMBDA, DF_U_BF16) : 0;
    int32_t ctx[64];
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < f->n_samples; j++) {
            const seq_out *o = &f->out[i][j];
            int64_t t1 = 0;
            while (t1 < o->n && o->ver[t1] < 1)
                t1++;
            if (t1 == o->n)
                continue;
            const int64_t P = POFF[i + 1] - POFF[i];
            memcpy(ctx, PTOK + POFF[i], (size_t)P * sizeof *ctx);
            memcpy(ctx + P, o->tok, (size_t)t1 * sizeof *ctx);
            float fresh;
            double err;
            tb_teacher_forced(m, a, ctx, P + t1, o->tok + t1, 1, 1.0f, tb_logp_eps(&m->cfg, 64),
                              &fresh, &err);
            const double bound = 2 * err + rel16 * fabs((double)fresh);
            const double r = fabs((double)o->logp[t1] - fresh) / bound;
            c.compared[i]++;
            c.within[i] += r <= 1.0;
            c.worst = fmax(c.worst, r);
            c.best = fmin(c.best, r);
        }
    df_acts_free(a);
    return c;
}

static int64_t sum_np(const int64_t *x)
{
    int64_t s = 0;
    for (int64_t i = 0; i < NP; i++)
        s += x[i];
    return s;
}

/* A weight change before decode step 3 (every sequence admitted at poll 0) answered with
 * recompute_kv: the first token after it has the log-prob a fresh forward of the new weights
 * gives it; with the cache kept, none has in float32, and in bf16 (whose bound is wide: the
 * rollout's own bf16 roundings) every one is at least 10 times further off than the farthest
 * recomputed one. Tokens 0..2 and their log-probs are the kept run's
 * bit for bit (recomputing changes no sampled token), versions 0 then 1, and the recomputation
 * rewrote P + 2 tokens of each sequence in flight (all but the last sampled). */
static void check_recompute(df_rollout_dtype dt)
{
    df_model_config c = df_test_rollout_config(97);
    df_model *m = df_test_biased_model(&c, 1234), *mk = NULL;
    assert_int_equal(df_model_clone(m, &mk), 0);
    df_rollout_engine *e = engine(m, 10, dt);
    feeder *r = new_feeder(m, 2), *k = new_feeder(mk, 2);
    r->swap_at = k->swap_at = 3;
    r->recompute = true;
    df_rollout_stats sr, sk;
    assert_int_equal(stream(e, r), 0);
    df_rollout_engine_stats(e, &sr);
    assert_int_equal(df_rollout_engine_load_weights(e, mk), 0);
    assert_int_equal(stream(e, k), 0);
    df_rollout_engine_stats(e, &sk);
    assert_all_delivered(r, -1);
    int64_t expect = 0;
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < 2; j++) {
            const seq_out *x = &r->out[i][j], *y = &k->out[i][j];
            const int64_t n0 = x->n < 3 ? x->n : 3;
            assert_memory_equal(x->tok, y->tok, (size_t)n0 * sizeof(int32_t));
            assert_memory_equal(x->logp, y->logp, (size_t)n0 * sizeof(float));
            for (int64_t t = 0; t < x->n; t++)
                assert_int_equal(x->ver[t], t < 3 ? 0 : 1);
            expect += x->n > 3 ? POFF[i + 1] - POFF[i] + 2 : 0;
        }
    assert_true(expect > 0);
    assert_int_equal(sr.recomputed_tokens, expect);
    assert_int_equal(sk.recomputed_tokens, 0);
    fresh_cmp cr = compare_fresh(r, m, dt), ck = compare_fresh(k, mk, dt);
    const int64_t nr = sum_np(cr.compared), nk = sum_np(ck.compared);
    print_message("%s: recomputed %lld tokens; first new token's log-prob vs a fresh forward: "
                  "%lld / %lld within the bound (worst %.3f of it), kept cache %lld / %lld "
                  "(nearest %.2f of it)\n", dt == DF_ROLLOUT_BF16 ? "bf16" : "f32",
                  (long long)sr.recomputed_tokens, (long long)sum_np(cr.within), (long long)nr,
                  cr.worst, (long long)sum_np(ck.within), (long long)nk, ck.best);
    assert_true(nr > 0 && nk > 0);
    assert_int_equal(sum_np(cr.within), nr);
    assert_true(ck.best > 10 * cr.worst);
    if (dt == DF_ROLLOUT_F32)
        assert_int_equal(sum_np(ck.within), 0);
    free(r);
    free(k);
    df_rollout_engine_free(e);
    df_model_free(m);
    df_model_free(mk);
}

/* (7) recompute_kv on a float32 engine. */
static void test_recompute_kv(void **state)
{
    (void)state;
    check_recompute(DF_ROLLOUT_F32);
}

/* (8) recompute_kv on a bf16 engine: the K / V rewritten in bf16 from its new copy. */
static void test_recompute_kv_bf16(void **state)
{
    (void)state;
    if (df_model_bf16_available() != DF_OK) {
        print_message("no native bf16 matmuls here: %s\n", df_last_error());
        skip();
    }
    check_recompute(DF_ROLLOUT_BF16);
}

/* (9) a change between the two chunks of the 12-token prompt (8 rows per forward; fed with the
 * 1-token prompt, whose 2 sequences have sampled token 0): with recompute_kv its 8 prefilled
 * tokens and the 1-token prompt's are recomputed (10 rows: forwards of 8 and 2), so both
 * prompts' first new-version tokens have a fresh forward's log-probs; with the cache kept
 * neither has. Prompts admitted after the change have them either way. A second change during
 * the recomputation starts it over. */
static void test_recompute_kv_chunked(void **state)
{
    (void)state;
    static const int64_t plan[6] = {2, 0, 0, 1, 1, 1}, order[NP] = {2, 3, 0, 1, 4};
    df_model_config c = df_test_rollout_config(97);
    df_model *m = df_test_biased_model(&c, 1234), *mk = NULL;
    assert_int_equal(df_model_clone(m, &mk), 0);
    df_rollout_engine *e = engine_ex(m, 8, 8, DF_ROLLOUT_F32);
    feeder *r = new_feeder(m, 2), *k = new_feeder(mk, 2);
    r->plan = k->plan = plan;
    r->order = k->order = order;
    r->swap_at = k->swap_at = 2; /* polls: 0 prompt 2's prefill, 1 prompt 3's first chunk */
    r->recompute = true;
    df_rollout_stats sr, sk;
    assert_int_equal(stream(e, r), 0);
    df_rollout_engine_stats(e, &sr);
    assert_int_equal(df_rollout_engine_load_weights(e, mk), 0);
    assert_int_equal(stream(e, k), 0);
    df_rollout_engine_stats(e, &sk);
    assert_all_delivered(r, -1);
    int64_t expect = 8; /* prompt 3's first chunk, and prompt 2 (its last token is token 0) */
    for (int64_t j = 0; j < 2; j++) {
        expect += r->out[2][j].n > 1;
        assert_int_equal(r->out[2][j].ver[0], 0);
        for (int64_t t = 0; t < r->out[3][j].n; t++)
            assert_int_equal(r->out[3][j].ver[t], 1);
    }
    assert_int_equal(sr.recomputed_tokens, expect);
    assert_int_equal(sk.recomputed_tokens, 0);
    fresh_cmp cr = compare_fresh(r, m, DF_ROLLOUT_F32), ck = compare_fresh(k, mk, DF_ROLLOUT_F32);
    print_message("chunked: recomputed %lld tokens; fresh log-probs %lld / %lld (worst %.3f of "
                  "the bound), kept cache %lld / %lld\n", (long long)sr.recomputed_tokens,
                  (long long)sum_np(cr.within), (long long)sum_np(cr.compared), cr.worst,
                  (long long)sum_np(ck.within), (long long)sum_np(ck.compared));
    for (int64_t i = 0; i < NP; i++) {
        assert_true(cr.compared[i] > 0);
        assert_int_equal(cr.within[i], cr.compared[i]);
        assert_int_equal(ck.within[i], i == 2 || i == 3 ? 0 : ck.compared[i]);
    }
    assert_int_equal(ck.compared[3], 2);
    /* a second change between the recomputation's two forwards starts it over: 8 + 10 rows,
     * and the tokens after it (all of version 2) have fresh log-probs of the latest weights */
    df_model *m2 = df_test_biased_model(&c, 1234);
    feeder *r2 = new_feeder(m2, 2);
    r2->plan = plan;
    r2->order = order;
    r2->swap_at = 2;
    r2->swap2_at = 3;
    r2->recompute = true;
    assert_int_equal(df_rollout_engine_load_weights(e, m2), 0);
    assert_int_equal(stream(e, r2), 0);
    df_rollout_engine_stats(e, &sr);
    assert_int_equal(sr.recomputed_tokens, 8 + expect);
    fresh_cmp c2 = compare_fresh(r2, m2, DF_ROLLOUT_F32);
    for (int64_t i = 0; i < NP; i++)
        assert_int_equal(c2.within[i], c2.compared[i]);
    assert_int_equal(c2.compared[3], 2);
    for (int64_t t = 0; t < r2->out[3][0].n; t++)
        assert_int_equal(r2->out[3][0].ver[t], 2);
    free(r2);
    df_model_free(m2);
    free(r);
    free(k);
    df_rollout_engine_free(e);
    df_model_free(m);
    df_model_free(mk);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_is_generate),
        cmocka_unit_test(test_feed_per_step),
        cmocka_unit_test(test_feed_per_step_chunked),
        cmocka_unit_test(test_weight_swap_versions),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_malformed_feed),
        cmocka_unit_test(test_weight_swap_bf16),
        cmocka_unit_test(test_recompute_kv),
        cmocka_unit_test(test_recompute_kv_bf16),
        cmocka_unit_test(test_recompute_kv_chunked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
