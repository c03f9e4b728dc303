/* Multi-turn streams (df_rollout_stream with df_rollout_stream_hooks.turns) on a small random
 * model, with a handler that appends fixed token runs after each assistant turn:
 *   - fed every prompt at once and finished: df_rollout_generate_turns bit for bit (tokens,
 *     log-probs, finish reasons, response_mask, assistant turns); the handler is told the fed
 *     id and the sample;
 *   - fed one prompt per poll, in another order, through fewer slots: the same tokens and masks;
 *   - a weight change mid-conversation: model tokens sampled after it carry the new version,
 *     an appended reply its stop token's version, and everything before it is the unchanged
 *     run's bit for bit; with recompute_kv the first new-version token of a sequence that holds
 *     a reply has the log-prob a fresh forward of the whole conversation gives it, and the
 *     recomputation rewrites exactly the cached tokens (a reply waiting for its prefill: none of
 *     it, nor its stop token). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <stdio.h>

#include <cmocka.h>

#include "distflow/model.h"
#include "distflow/rollout.h"
#include "model/acts.h"
#include "testbounds.h"
#include "testutil.h"

#define V 97
#define MAXLEN 64
#define MAXNEW 40
#define NP 5
#define NS 2
#define ID0 500 /* fed ids: ID0 + prompt index, apart from the index so a mix-up shows */

static const int64_t POFF[NP + 1] = {0, 3, 10, 11, 23, 28};
static int32_t PTOK[28];
static const uint64_t KEYS[NP] = {71, 3, 40, 9, 18};
static int32_t STOPS[16];

static df_model *small_model(void)
{
    df_model_config c = df_test_rollout_config(V);
    return df_test_biased_model(&c, 1234);
}

static df_rollout_request request(void)
{
    for (int i = 0; i < 28; i++)
        PTOK[i] = (int32_t)((i * 37 + 11) % V);
    return (df_rollout_request){NP, POFF, PTOK, NS, 5, KEYS, NULL};
}

/* Every 6th id stops a turn: turns of a few tokens on this model. */
static df_sampling_params sampling(void)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    for (int i = 0; i < 16; i++)
        STOPS[i] = (int32_t)(i * 6 + 2);
    sp.stop_ids = STOPS;
    sp.n_stop = 16;
    sp.max_new_tokens = MAXNEW;
    return sp;
}

/* ---- the handler: 2 replies of 3-5 tokens per sequence, then done --------------------- */

typedef struct {
    int64_t id0;   /* what df_turn_info.prompt is offset by: 0 (generate) or ID0 (a stream) */
    int64_t calls;
    int32_t buf[8];
} fixed_turns;

static int on_turn(void *user, const df_turn_info *t, df_turn_reply *r)
{
    fixed_turns *f = user;
    const int64_t i = t->prompt - f->id0;
    assert_true(i >= 0 && i < NP && t->sample >= 0 && t->sample < NS);
    assert_int_equal(t->seq, t->prompt * NS + t->sample);
    f->calls++;
    if (t->turn > 2) {
        r->done = true;
        return DF_OK;
    }
    const int64_t n = 3 + (i + t->sample + t->turn) % 3;
    for (int64_t k = 0; k < n; k++)
        f->buf[k] = (int32_t)((i * 7 + t->sample * 3 + t->turn * 13 + k * 5 + 1) % V);
    r->tokens = f->buf;
    r->n_tokens = n;
    return DF_OK;
}

/* ---- a feeder and a collector ---------------------------------------------------------- */

typedef struct {
    int32_t tok[MAXNEW], ver[MAXNEW];
    float logp[MAXNEW];
    int8_t mask[MAXNEW];
    int64_t n, got;
    int32_t turns;
    int8_t reason;
} seq_out;

typedef struct {
    df_model *m;           /* changed in place by a swap */
    bool one_per_poll;     /* feed prompts NP-1 .. 0, one per poll; else all at poll 0 */
    int64_t swap_at;       /* poll of a weight change to version 1 (-1: none) */
    bool recompute;
    int64_t polls, fed;
    int64_t off[2], id[1];
    uint64_t key[1];
    int64_t ids[NP];
    seq_out out[NP][NS];
} feeder;

static void perturb(df_model *m)
{
    for (int64_t i = 0; i < m->n_params; i++)
        m->params[i] *= (i % 3) ? 0.5f : 1.5f;
    df_model_weights_changed(m);
}

static int poll_hook(void *user, df_rollout_poll *p)
{
    feeder *f = user;
    const int64_t k = f->polls++;
    if (k == f->swap_at) {
        perturb(f->m);
        p->weights_changed = true;
        p->new_version = 1;
        p->recompute_kv = f->recompute;
    }
    if (!f->one_per_poll && f->fed == 0) {
        for (int64_t i = 0; i < NP; i++)
            f->ids[i] = ID0 + i;
        p->n_prompts = NP, p->prompt_offsets = POFF, p->prompt_tokens = PTOK;
        p->prompt_keys = KEYS, p->prompt_ids = f->ids;
        f->fed = NP;
    } else if (f->one_per_poll && f->fed < NP) {
        const int64_t i = NP - 1 - f->fed++;
        f->off[0] = 0, f->off[1] = POFF[i + 1] - POFF[i];
        f->key[0] = KEYS[i], f->id[0] = ID0 + i;
        p->n_prompts = 1, p->prompt_offsets = f->off, p->prompt_tokens = PTOK + POFF[i];
        p->prompt_keys = f->key, p->prompt_ids = f->id;
    }
    p->finish = f->fed == NP;
    return DF_OK;
}

static int seq_hook(void *user, const df_rollout_seq *s)
{
    feeder *f = user;
    const int64_t i = s->prompt_id - ID0;
    assert_true(i >= 0 && i < NP && s->sample >= 0 && s->sample < NS && s->n_tokens <= MAXNEW);
    assert_non_null(s->response_mask);
    seq_out *o = &f->out[i][s->sample];
    memcpy(o->tok, s->tokens, (size_t)s->n_tokens * sizeof *o->tok);
    memcpy(o->logp, s->log_probs, (size_t)s->n_tokens * sizeof *o->logp);
    memcpy(o->ver, s->versions, (size_t)s->n_tokens * sizeof *o->ver);
    memcpy(o->mask, s->response_mask, (size_t)s->n_tokens);
    o->n = s->n_tokens;
    o->turns = s->assistant_turns;
    o->reason = s->finish_reason;
    o->got++;
    return DF_OK;
}

static feeder *new_feeder(df_model *m)
{
    feeder *f = calloc(1, sizeof *f);
    f->m = m;
    f->swap_at = -1;
    return f;
}

static df_rollout_engine *engine(const df_model *m, int64_t max_seqs)
{
    df_rollout_options o = {max_seqs, MAXLEN, 0, DF_ROLLOUT_F32, NULL, false, false, false};
    df_rollout_engine *e = NULL;
    if (df_rollout_engine_create_ex(&m->cfg, &o, &e))
        fail_msg("engine: %s", df_last_error());
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    return e;
}

static int stream(df_rollout_engine *e, feeder *f, fixed_turns *ft)
{
    df_sampling_params sp = sampling();
    memset(ft, 0, sizeof *ft);
    ft->id0 = ID0;
    const df_turn_handler h = {ft, on_turn, 0};
    df_rollout_stream_hooks hooks = {.user = f, .poll = poll_hook, .on_seq = seq_hook, .turns = &h};
    return df_rollout_stream(e, f->m, NS, 5, &sp, 0, &hooks);
}

/* Sequences with a reply between two model turns. */
static int64_t conversations(const feeder *f)
{
    int64_t k = 0;
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < NS; j++)
            k += f->out[i][j].turns >= 2;
    return k;
}

/* ---- tests ------------------------------------------------------------------------------- */

/* (1) fed at once: df_rollout_generate_turns, bit for bit; (2) fed one per poll through 3 slots,
 * last prompt first: the same tokens, masks and turns (log-probs within other batch shapes'
 * rounding). */
static void test_stream_turns_is_generate(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_engine *e = engine(m, 4);
    df_rollout_request q = request();
    df_sampling_params sp = sampling();
    fixed_turns g = {0}, s = {0}, s2 = {0};
    const df_turn_handler h = {&g, on_turn, 0};
    df_rollout_result r;
    assert_int_equal(df_rollout_generate_turns(e, m, &q, &sp, &h, &r, NULL, NULL), 0);
    feeder *f = new_feeder(m);
    assert_int_equal(stream(e, f, &s), 0);
    assert_int_equal(s.calls, g.calls);
    for (int64_t q_s = 0; q_s < r.n_seqs; q_s++) {
        const seq_out *o = &f->out[q_s / NS][q_s % NS];
        const int64_t at = r.offsets[q_s];
        assert_int_equal(o->got, 1);
        assert_int_equal(o->n, r.offsets[q_s + 1] - at);
        assert_memory_equal(o->tok, r.tokens + at, (size_t)o->n * sizeof(int32_t));
        assert_memory_equal(o->logp, r.log_probs + at, (size_t)o->n * sizeof(float));
        assert_memory_equal(o->mask, r.response_mask + at, (size_t)o->n);
        assert_int_equal(o->turns, r.assistant_turns[q_s]);
        assert_int_equal(o->reason, r.finish_reason[q_s]);
        for (int64_t t = 0; t < o->n; t++)
            assert_int_equal(o->ver[t], 0);
    }
    const int64_t conv = conversations(f);
    assert_true(conv > 0); /* replies were appended and decoding went on after them */
    df_rollout_engine *e3 = engine(m, 3);
    feeder *f2 = new_feeder(m);
    f2->one_per_poll = true;
    assert_int_equal(stream(e3, f2, &s2), 0);
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < NS; j++) {
            const seq_out *x = &f->out[i][j], *y = &f2->out[i][j];
            assert_int_equal(x->n, y->n);
            assert_memory_equal(x->tok, y->tok, (size_t)x->n * sizeof(int32_t));
            assert_memory_equal(x->mask, y->mask, (size_t)x->n);
            assert_int_equal(x->turns, y->turns);
            for (int64_t t = 0; t < x->n; t++)
                assert_true(fabsf(x->logp[t] - y->logp[t]) <= 1e-4f);
        }
    print_message("multi-turn stream: %lld of %d sequences with several turns, %lld handler calls\n",
                  (long long)conv, NP * NS, (long long)s.calls);
    df_rollout_result_free(&r);
    free(f), free(f2);
    df_rollout_engine_free(e), df_rollout_engine_free(e3);
    df_model_free(m);
}

/* The first token of version >= 1 of o (o->n: none). */
static int64_t first_new(const seq_out *o)
{
    int64_t t = 0;
    while (t < o->n && o->ver[t] < 1)
        t++;
    return t;
}

/* Versions of a swapped run y against the unswapped x: non-decreasing; a reply carries its stop
 * token's version; everything before the first new-version token is x's. Returns the sequences
 * that hold a reply of version 0 and model tokens of version 1 after it. */
static int64_t check_versions(const feeder *x, const feeder *y)
{
    int64_t mid = 0;
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < NS; j++) {
            const seq_out *a = &x->out[i][j], *b = &y->out[i][j];
            const int64_t t1 = first_new(b);
            bool reply0 = false, model1 = false;
            for (int64_t t = 0; t < b->n; t++) {
                if (t > 0)
                    assert_true(b->ver[t] >= b->ver[t - 1]);
                if (!b->mask[t]) /* appended: the version of the token before it */
                    assert_int_equal(b->ver[t], b->ver[t - 1]);
                reply0 = reply0 || (!b->mask[t] && b->ver[t] == 0);
                model1 = model1 || (b->mask[t] && b->ver[t] == 1 && reply0);
            }
            mid += model1;
            assert_true(t1 <= a->n);
            assert_memory_equal(a->tok, b->tok, (size_t)t1 * sizeof(int32_t));
            assert_memory_equal(a->logp, b->logp, (size_t)t1 * sizeof(float));
            assert_memory_equal(a->mask, b->mask, (size_t)t1);
        }
    return mid;
}

/* The K / V a recomputation at the change rewrites (every sequence admitted before it): for each
 * sequence in flight then (one with a token of version 1), its prompt and its tokens of version
 * 0 but the last one sampled, or, when a reply was waiting for its prefill (the last version-0
 * tokens appended), up to the reply's stop token. *waiting: sequences with a reply waiting. */
static int64_t expect_recomputed(const feeder *f, int64_t *waiting)
{
    int64_t total = 0;
    *waiting = 0;
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < NS; j++) {
            const seq_out *o = &f->out[i][j];
            const int64_t n0 = first_new(o);
            if (n0 == o->n)
                continue;
            assert_true(n0 >= 1);
            int64_t end = n0 - 1;
            *waiting += !o->mask[end];
            while (end > 0 && !o->mask[end])
                end--;
            total += POFF[i + 1] - POFF[i] + end;
        }
    return total;
}

/* (3) a weight change mid-conversation (all sequences admitted at poll 0, 10 slots), the cache
 * kept: later model tokens carry version 1, earlier ones are the unchanged run's. (4) the same
 * with recompute_kv: a sequence's first version-1 model token after a reply has the log-prob of
 * a fresh forward of the new weights over the prompt and the whole response before it. */
static void test_swap_mid_conversation(void **state)
{
    (void)state;
    df_model *m = small_model(), *mk = NULL, *mr = NULL;
    assert_int_equal(df_model_clone(m, &mk), 0);
    assert_int_equal(df_model_clone(m, &mr), 0);
    df_rollout_engine *e = engine(m, NP * NS);
    fixed_turns ft;
    feeder *x = new_feeder(m), *k = new_feeder(mk), *r = new_feeder(mr);
    k->swap_at = r->swap_at = 6; /* 3 sequences have a reply waiting for its prefill then */
    r->recompute = true;
    assert_int_equal(stream(e, x, &ft), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, mk), 0);
    assert_int_equal(stream(e, k, &ft), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, mr), 0);
    assert_int_equal(stream(e, r, &ft), 0);
    df_rollout_stats st;
    df_rollout_engine_stats(e, &st);
    const int64_t mid_k = check_versions(x, k), mid_r = check_versions(x, r);
    assert_true(mid_k > 0 && mid_r > 0);
    int64_t waiting = 0;
    assert_int_equal(st.recomputed_tokens, expect_recomputed(r, &waiting));
    /* the recomputed run against a fresh forward of its latest weights */
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&mr->cfg, MAXLEN, MAXLEN, &a), 0);
    int64_t compared = 0;
    double worst = 0;
    int32_t ctx[MAXLEN];
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 0; j < NS; j++) {
            const seq_out *o = &r->out[i][j];
            const int64_t t1 = first_new(o), P = POFF[i + 1] - POFF[i];
            if (t1 == o->n || !memchr(o->mask, 0, (size_t)t1)) /* no reply before the change */
                continue;
            memcpy(ctx, PTOK + POFF[i], (size_t)P * sizeof *ctx);
            memcpy(ctx + P, o->tok, (size_t)t1 * sizeof *ctx);
            float fresh;
            double err;
            tb_teacher_forced(mr, a, ctx, P + t1, o->tok + t1, 1, 1.0f, tb_logp_eps(&mr->cfg, MAXLEN), &fresh, &err);
            worst = fmax(worst, fabs((double)o->logp[t1] - fresh) / (2 * err));
            compared++;
        }
    df_acts_free(a);
    print_message("swap mid-conversation: %lld (kept) / %lld (recomputed) sequences with a reply at "
                  "version 0 and model tokens at 1; recomputed %lld tokens (%lld sequences with a reply "
                  "waiting), fresh log-probs of %lld within %.3f of the bound\n", (long long)mid_k,
                  (long long)mid_r, (long long)st.recomputed_tokens, (long long)waiting, (long long)compared,
                  worst);
    assert_true(compared > 0 && waiting > 0);
    assert_true(worst <= 1.0);
    free(x), free(k), free(r);
    df_rollout_engine_free(e);
    df_model_free(m), df_model_free(mk), df_model_free(mr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_turns_is_generate),
        cmocka_unit_test(test_swap_mid_conversation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
