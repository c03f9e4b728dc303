/* Streaming rollout (df_rollout_stream) on a small random model: a stream fed everything at
 * once is df_rollout_generate bit for bit; feeding prompts one per forward, in another order,
 * gives every sequence the same tokens; a weight change between decode steps tags the tokens
 * after it with the new version and changes only them; abort returns at once; malformed feeds
 * are refused naming the prompt's id; a bf16 engine re-makes its weight copy at a change. */
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
#include "testutil.h"

static df_model_config small_config(void)
{
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 97;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 256;
    c.initializer_range = 0.15; /* peaked enough that sampling differs from greedy */
    c.tie_word_embeddings = false;
    c.attention_bias = true;
    c.n_eos = 0;
    return c;
}

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
    *p = (df_rollout_poll){.n_prompts = n, .prompt_offsets = f->off, .prompt_tokens = f->tok,
                           .prompt_keys = f->key, .prompt_ids = f->id};
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
    if (k == f->swap_at) {
        perturb(f->m);
        p->weights_changed = true;
        p->new_version = 1;
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
    f->swap_at = f->abort_at = -1;
    return f;
}

static int stream(df_rollout_engine *e, feeder *f)
{
    df_sampling_params sp = sampling();
    df_rollout_stream_hooks h = {f, poll_hook, seq_hook};
    return df_rollout_stream(e, f->m, f->n_samples, 5, &sp, 0, &h);
}

static df_rollout_engine *engine_ex(const df_model *m, int64_t max_seqs, int64_t batched,
                                    df_rollout_dtype dt)
{
    df_rollout_options o = {max_seqs, 64, batched, dt, NULL, false, false};
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
    df_model_config c = small_config();
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
    df_rollout_options o = {4, 64, 0, DF_ROLLOUT_F32, NULL, true, false};
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
    df_model_config c = small_config();
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
    df_model_config c = small_config();
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
    df_model_config c = small_config();
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
    df_rollout_stream_hooks h = {b, bad_poll, bad_seq};
    b->m = m;
    return df_rollout_stream(e, m, 2, 5, &sp, 0, &h);
}

/* (5) malformed feeds and answers: DF_EINVAL naming the prompt's id, nothing delivered. */
static void test_malformed_feed(void **state)
{
    (void)state;
    df_model_config c = small_config();
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
    df_rollout_stream_hooks h = {&b, bad_poll, NULL};
    assert_error_mentions(df_rollout_stream(e, m, 2, 5, &sp, 0, &h), DF_EINVAL, "hook");
    h.on_seq = bad_seq;
    assert_error_mentions(df_rollout_stream(e, m, 0, 5, &sp, 0, &h), DF_EINVAL, "n_samples");
    df_rollout_engine_free(e);
    df_model_free(m);
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
