/* Multi-turn rollouts (df_rollout_generate_turns) on a small random model: a turn handler that
 * appends fixed token runs after each assistant turn and ends after k replies. Pins that the
 * appended tokens are prefilled once into the sequence's own KV cache (prefill counts), that
 * the cache continuation is the same function as a re-prefill of the whole conversation
 * (teacher-forced log-probs, greedy turns equal to fresh single-turn generations on the
 * growing prompt), the response_mask, the limits (max_assistant_turns, the response budget),
 * independence from batching / chunking, and the handler's errors. float32 and bf16. */
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
#include "tolerance.h"
#include "workers/rollout/rollout_batch.h"

#define V 97
#define MAXLEN 128

static df_model *small_model(void)
{
    df_model_config c = df_test_rollout_config(V);
    return df_test_biased_model(&c, 1234);
}

static bool have_bf16(void)
{
    if (df_model_bf16_available() == DF_OK)
        return true;
    print_message("no native bf16 matmuls here: %s\n", df_last_error());
    return false;
}

/* Prompts of lengths 3, 7, 1, 12, 5. */
#define NP 5
static const int64_t POFF[NP + 1] = {0, 3, 10, 11, 23, 28};
static int32_t PTOK[28];

static df_rollout_request request(int64_t n_samples, uint64_t seed)
{
    for (int i = 0; i < 28; i++)
        PTOK[i] = (int32_t)((i * 37 + 11) % V);
    return (df_rollout_request){NP, POFF, PTOK, n_samples, seed, NULL, NULL};
}

/* Every 6th id stops a turn: turns of a few tokens on this model. */
static int32_t STOPS[16];

static df_sampling_params sampling(bool greedy, int64_t max_new)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    for (int i = 0; i < 16; i++)
        STOPS[i] = (int32_t)(i * 6 + 2);
    sp.stop_ids = STOPS;
    sp.n_stop = 16;
    sp.greedy = greedy;
    sp.max_new_tokens = max_new;
    return sp;
}

static bool is_stop(int32_t t) { return t % 6 == 2 && t < 16 * 6; }

/* ---- the handler: fixed runs, done after `replies` of them ------------------------------- */

#define MAXSEQ 32
#define MAXSPAN 16
typedef struct {
    int64_t replies;  /* replies per sequence before done */
    int64_t len0;     /* a reply has len0 + (seq + turn) % 4 tokens */
    int fail_at;      /* > 0: the fail_at-th call returns DF_EIO; < 0: it gives no tokens */
    int64_t calls;
    int64_t at[MAXSEQ][MAXSPAN], len[MAXSEQ][MAXSPAN], n[MAXSEQ]; /* replies given */
    int32_t buf[64];
} fixed_turns;

static int32_t reply_token(int64_t seq, int64_t turn, int64_t k)
{
    return (int32_t)((seq * 7 + turn * 13 + k * 5 + 1) % V);
}

static int on_turn(void *user, const df_turn_info *t, df_turn_reply *r)
{
    fixed_turns *f = user;
    f->calls++;
    if (f->fail_at > 0 && f->calls == f->fail_at)
        return df_error(DF_EIO, "the tool is down");
    if (f->fail_at < 0 && f->calls == -f->fail_at)
        return DF_OK; /* neither done nor tokens */
    /* what the engine says: this turn is the response's tail and ends at a stop token */
    assert_true(t->n_turn >= 1 && t->n_turn <= t->n_response);
    assert_ptr_equal(t->turn_tokens, t->response + t->n_response - t->n_turn);
    assert_true(is_stop(t->turn_tokens[t->n_turn - 1]));
    assert_true(t->prompt >= 0 && t->prompt < NP);
    assert_true(t->seq < MAXSEQ && f->n[t->seq] == t->turn - 1);
    if (t->turn > f->replies) {
        r->done = true;
        return DF_OK;
    }
    int64_t n = f->len0 + (t->seq + t->turn) % 4;
    for (int64_t k = 0; k < n; k++)
        f->buf[k] = reply_token(t->seq, t->turn, k);
    f->at[t->seq][f->n[t->seq]] = t->n_response;
    f->len[t->seq][f->n[t->seq]++] = n;
    r->tokens = f->buf;
    r->n_tokens = n;
    return DF_OK;
}

static df_turn_handler handler(fixed_turns *f, int64_t replies, int64_t len0, int64_t max_turns)
{
    memset(f, 0, sizeof *f);
    f->replies = replies;
    f->len0 = len0;
    return (df_turn_handler){f, on_turn, max_turns};
}

static df_rollout_result generate(const df_model *m, const df_rollout_options *o,
                                  const df_rollout_request *q, const df_sampling_params *sp,
                                  const df_turn_handler *h, df_rollout_stats *st)
{
    df_rollout_engine *e = NULL;
    if (df_rollout_engine_create_ex(&m->cfg, o, &e))
        fail_msg("engine: %s", df_last_error());
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    df_rollout_result r;
    if (df_rollout_generate_turns(e, m, q, sp, h, &r, NULL, NULL))
        fail_msg("generate: %s", df_last_error());
    if (st)
        df_rollout_engine_stats(e, st);
    df_rollout_engine_free(e);
    return r;
}

static df_rollout_options options(df_rollout_dtype dt, int64_t seqs, int64_t batched)
{
    return (df_rollout_options){seqs, MAXLEN, batched, dt, NULL, false, false, false};
}

/* ---- checks ------------------------------------------------------------------------------ */

/* (c) The mask is 0 exactly on the handler's replies (that were appended), which hold its
 * tokens and log-prob 0; returns the appended tokens. Turn counts: the mask's model runs. */
static int64_t check_mask(const fixed_turns *f, const df_rollout_result *r)
{
    int64_t appended = 0;
    for (int64_t s = 0; s < r->n_seqs; s++) {
        const int64_t o = r->offsets[s], R = r->offsets[s + 1] - o;
        int8_t want[MAXLEN];
        memset(want, 1, sizeof want);
        for (int64_t k = 0; k < f->n[s]; k++) {
            if (f->at[s][k] >= R) /* refused: over the budget */
                continue;
            for (int64_t t = 0; t < f->len[s][k]; t++) {
                want[f->at[s][k] + t] = 0;
                assert_int_equal(r->tokens[o + f->at[s][k] + t], reply_token(s, k + 1, t));
                assert_true(r->log_probs[o + f->at[s][k] + t] == 0.0f);
            }
            appended += f->len[s][k];
        }
        assert_memory_equal(r->response_mask + o, want, (size_t)R);
        int32_t runs = 0;
        for (int64_t t = 0; t < R; t++)
            runs += want[t] && (t == 0 || !want[t - 1]);
        assert_int_equal(r->assistant_turns[s], runs);
    }
    return appended;
}

/* (a) Every prompt prefilled once (one admission per group here), every appended token once. */
static void check_prefill(const df_rollout_request *q, const df_rollout_stats *st, int64_t appended)
{
    print_message("prefill tokens %lld = prompts %lld + appended %lld (decode steps %lld)\n",
                  (long long)st->prefill_tokens, (long long)q->prompt_offsets[q->n_prompts],
                  (long long)appended, (long long)st->decode_steps);
    assert_int_equal(st->appended_tokens, appended);
    assert_int_equal(st->prefill_tokens, q->prompt_offsets[q->n_prompts] + appended);
}

/* Teacher-forced log-probs (float32 training forward) of every response token of r into lp,
 * each one's bound into err. */
static void teacher_forced(const df_model *m, const df_rollout_request *q, const df_rollout_result *r,
                           float *lp, double *err)
{
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, MAXLEN, MAXLEN, &a), 0);
    for (int64_t s = 0; s < r->n_seqs; s++) {
        int64_t i = s / q->n_samples, P = q->prompt_offsets[i + 1] - q->prompt_offsets[i];
        int64_t R = r->offsets[s + 1] - r->offsets[s];
        assert_true(P + R <= MAXLEN);
        tb_teacher_forced(m, a, q->prompt_tokens + q->prompt_offsets[i], P, r->tokens + r->offsets[s], R,
                          1.0f, tb_logp_eps(&m->cfg, MAXLEN), lp + r->offsets[s], err + r->offsets[s]);
    }
    df_acts_free(a);
}

/* (b) The model tokens' log-probs equal a single-pass forward of the whole conversation: float32
 * within twice the float32 bound of each; bf16 (relative error of the vector) within the bf16
 * roundings of test_rollout_dtype's bound, and above the float32 one. */
static void check_teacher_forced(const df_model *m, const df_rollout_request *q,
                                 const df_rollout_result *r, df_rollout_dtype dt)
{
    const int64_t n = r->offsets[r->n_seqs];
    float *lp = malloc((size_t)n * sizeof *lp);
    double *err = malloc((size_t)n * sizeof *err), worst = 0, f32 = 0, num = 0, den = 0;
    teacher_forced(m, q, r, lp, err);
    int64_t model = 0;
    for (int64_t t = 0; t < n; t++) {
        if (!r->response_mask[t])
            continue;
        double d = fabs((double)r->log_probs[t] - lp[t]);
        worst = fmax(worst, d / (2 * err[t]));
        f32 = fmax(f32, 2 * err[t] / (fabs((double)lp[t]) + 1e-30));
        num += d * d;
        den += (double)lp[t] * lp[t];
        model++;
    }
    assert_true(model > 0);
    if (dt == DF_ROLLOUT_F32) {
        print_message("f32 multi-turn vs teacher forcing: worst |diff| / bound %.3f over %lld tokens\n",
                      worst, (long long)model);
        assert_true(worst <= 1.0);
    } else {
        double rel = sqrt(num) / (sqrt(den) + 1e-30), L = (double)m->cfg.num_hidden_layers;
        double bound = df_tol_gamma_prob(10.0 * L + 2, DF_TOL_LAMBDA, DF_U_BF16) + f32;
        print_message("bf16 multi-turn vs teacher forcing: rel err %.2e (bound %.2e, float32 %.2e)\n",
                      rel, bound, f32);
        assert_true(rel <= bound);
        assert_true(rel > f32);
    }
    free(lp), free(err);
}

/* Sequences with at least two assistant turns: the test exercises continuations. */
static int64_t multi(const df_rollout_result *r)
{
    int64_t k = 0;
    for (int64_t s = 0; s < r->n_seqs; s++)
        k += r->assistant_turns[s] >= 2;
    return k;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void run_kv_reuse(df_rollout_dtype dt)
{
    df_model *m = small_model();
    df_rollout_request q = request(2, 5);
    df_sampling_params sp = sampling(false, 100);
    fixed_turns f;
    df_turn_handler h = handler(&f, 3, 4, 0);
    df_rollout_options o = options(dt, 16, 0);
    df_rollout_stats st;
    df_rollout_result r = generate(m, &o, &q, &sp, &h, &st);
    print_message("%s: %lld of %lld sequences with >= 2 turns, %lld handler calls\n",
                  dt == DF_ROLLOUT_BF16 ? "bf16" : "f32", (long long)multi(&r), (long long)r.n_seqs,
                  (long long)f.calls);
    assert_true(multi(&r) >= r.n_seqs / 2);
    int64_t appended = check_mask(&f, &r);
    check_prefill(&q, &st, appended);
    assert_int_equal(st.generated_tokens + appended, r.offsets[r.n_seqs]);
    check_teacher_forced(m, &q, &r, dt);
    df_rollout_result_free(&r);
    df_model_free(m);
}

static void test_kv_reuse_mask_and_teacher_forcing(void **state)
{
    (void)state;
    run_kv_reuse(DF_ROLLOUT_F32);
    if (have_bf16())
        run_kv_reuse(DF_ROLLOUT_BF16);
}

/* (e) Greedy: each model turn equals a fresh single-turn generation whose prompt is the prompt
 * plus the response before that turn (model and appended tokens), with the budget left. */
static void run_greedy_equals_reprefill(df_rollout_dtype dt)
{
    df_model *m = small_model();
    df_rollout_request q = request(1, 0);
    const int64_t max_new = 60;
    df_sampling_params sp = sampling(true, max_new);
    fixed_turns f;
    df_turn_handler h = handler(&f, 3, 3, 0);
    df_rollout_options o = options(dt, 4, 0);
    df_rollout_result r = generate(m, &o, &q, &sp, &h, NULL);
    assert_true(multi(&r) >= 2);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    assert_int_equal(df_rollout_engine_load_weights(e, m), 0);
    int64_t turns = 0;
    for (int64_t s = 0; s < r.n_seqs; s++) {
        const int64_t o0 = r.offsets[s], R = r.offsets[s + 1] - o0, P = POFF[s + 1] - POFF[s];
        for (int64_t a = 0; a < R; a++) {
            if (!r.response_mask[o0 + a] || (a > 0 && r.response_mask[o0 + a - 1]))
                continue; /* not the start of a model turn */
            int64_t b = a;
            while (b < R && r.response_mask[o0 + b])
                b++;
            int32_t prompt[MAXLEN];
            memcpy(prompt, PTOK + POFF[s], (size_t)P * sizeof(int32_t));
            memcpy(prompt + P, r.tokens + o0, (size_t)a * sizeof(int32_t));
            int64_t off[2] = {0, P + a};
            df_rollout_request q1 = {1, off, prompt, 1, 0, NULL, NULL};
            df_sampling_params sp1 = sp;
            sp1.max_new_tokens = max_new - a;
            df_rollout_result r1;
            assert_int_equal(df_rollout_generate(e, m, &q1, &sp1, &r1, NULL, NULL), 0);
            assert_int_equal(r1.offsets[1], b - a);
            assert_memory_equal(r1.tokens, r.tokens + o0 + a, (size_t)(b - a) * sizeof(int32_t));
            df_rollout_result_free(&r1);
            turns++;
        }
    }
    print_message("%s: %lld greedy turns equal to a re-prefill of the conversation\n",
                  dt == DF_ROLLOUT_BF16 ? "bf16" : "f32", (long long)turns);
    assert_true(turns > r.n_seqs);
    df_rollout_engine_free(e);
    df_rollout_result_free(&r);
    df_model_free(m);
}

static void test_greedy_turns_equal_reprefill(void **state)
{
    (void)state;
    run_greedy_equals_reprefill(DF_ROLLOUT_F32);
    if (have_bf16())
        run_greedy_equals_reprefill(DF_ROLLOUT_BF16);
}

/* Sampled: the same tokens whatever the slots, the token budget (chunked prompts and chunked
 * continuations: budget 6 < a reply of 6 to 9 tokens + the stop token) and so the interleaving
 * of turns. */
static void test_batching_and_chunking_change_nothing(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(3, 42);
    df_sampling_params sp = sampling(false, 90);
    fixed_turns f1, f2;
    df_turn_handler h1 = handler(&f1, 4, 6, 0), h2 = handler(&f2, 4, 6, 0);
    df_rollout_options wide = options(DF_ROLLOUT_F32, 15, 0), narrow = options(DF_ROLLOUT_F32, 3, 6);
    df_rollout_stats s1, s2;
    df_rollout_result a = generate(m, &wide, &q, &sp, &h1, &s1);
    df_rollout_result b = generate(m, &narrow, &q, &sp, &h2, &s2);
    assert_true(multi(&a) >= a.n_seqs / 2);
    assert_int_equal(a.offsets[a.n_seqs], b.offsets[b.n_seqs]);
    assert_memory_equal(a.offsets, b.offsets, (size_t)(a.n_seqs + 1) * sizeof(int64_t));
    assert_memory_equal(a.tokens, b.tokens, (size_t)a.offsets[a.n_seqs] * sizeof(int32_t));
    assert_memory_equal(a.response_mask, b.response_mask, (size_t)a.offsets[a.n_seqs]);
    assert_memory_equal(a.finish_reason, b.finish_reason, (size_t)a.n_seqs);
    assert_memory_equal(a.assistant_turns, b.assistant_turns, (size_t)a.n_seqs * sizeof(int32_t));
    float *lp = malloc((size_t)a.offsets[a.n_seqs] * sizeof *lp);
    double *err = malloc((size_t)a.offsets[a.n_seqs] * sizeof *err);
    teacher_forced(m, &q, &a, lp, err);
    for (int64_t t = 0; t < a.offsets[a.n_seqs]; t++)
        assert_true(fabs((double)a.log_probs[t] - b.log_probs[t]) <= 4 * err[t]);
    /* the narrow engine prefilled in more batches (one group at a time, chunks of 6 rows), the
       same tokens: every prompt and every appended token once */
    assert_int_equal(s1.appended_tokens, s2.appended_tokens);
    assert_int_equal(s1.prefill_tokens, q.prompt_offsets[NP] + s1.appended_tokens);
    assert_int_equal(s2.prefill_tokens, q.prompt_offsets[NP] + s2.appended_tokens);
    assert_true(s2.prefill_batches > s1.prefill_batches);
    free(lp), free(err);
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_model_free(m);
}

/* (d) max_assistant_turns ends a sequence (STOP) without asking for the last turn; the budget
 * counts appended tokens and a reply over it is not appended (LENGTH, the turn's stop last). */
static void test_limits(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(2, 7);
    df_rollout_options o = options(DF_ROLLOUT_F32, 16, 0);
    /* at most 2 assistant turns: one reply each */
    df_sampling_params sp = sampling(false, 100);
    fixed_turns f;
    df_turn_handler h = handler(&f, 10, 3, 2);
    df_rollout_result r = generate(m, &o, &q, &sp, &h, NULL);
    int64_t two = 0;
    for (int64_t s = 0; s < r.n_seqs; s++) {
        const int64_t R = r.offsets[s + 1] - r.offsets[s];
        assert_true(r.assistant_turns[s] >= 1 && r.assistant_turns[s] <= 2);
        assert_true(f.n[s] <= 1);
        if (r.assistant_turns[s] == 2 && is_stop(r.tokens[r.offsets[s + 1] - 1])) {
            assert_int_equal(r.finish_reason[s], DF_FINISH_STOP);
            assert_int_equal(f.n[s], 1);
            two++;
        }
        assert_true(R <= 100);
    }
    check_mask(&f, &r);
    assert_true(two > 0);
    df_rollout_result_free(&r);
    /* a small budget: model + appended tokens within it, replies that do not fit refused */
    const int64_t budget = 14;
    sp = sampling(false, budget);
    h = handler(&f, 10, 5, 0);
    df_rollout_stats st;
    r = generate(m, &o, &q, &sp, &h, &st);
    int64_t refused = 0;
    for (int64_t s = 0; s < r.n_seqs; s++) {
        const int64_t R = r.offsets[s + 1] - r.offsets[s];
        assert_true(R <= budget);
        assert_int_equal(r.finish_reason[s], DF_FINISH_LENGTH); /* replies never end here */
        if (f.n[s] > 0 && f.at[s][f.n[s] - 1] >= R) { /* the last reply was refused */
            assert_true(f.at[s][f.n[s] - 1] + f.len[s][f.n[s] - 1] >= budget);
            assert_true(is_stop(r.tokens[r.offsets[s + 1] - 1]));
            assert_int_equal(f.at[s][f.n[s] - 1], R);
            refused++;
        }
    }
    assert_true(refused > 0);
    check_prefill(&q, &st, check_mask(&f, &r));
    df_rollout_result_free(&r);
    df_model_free(m);
}

/* No handler: the single-turn call, mask all 1 and one turn per sequence. */
static void test_single_turn_unchanged(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(2, 3);
    df_sampling_params sp = sampling(false, 30);
    df_rollout_options o = options(DF_ROLLOUT_F32, 4, 0);
    df_rollout_stats st;
    df_rollout_result a = generate(m, &o, &q, &sp, NULL, &st);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    df_rollout_result b;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &b, NULL, NULL), 0);
    assert_memory_equal(a.tokens, b.tokens, (size_t)a.offsets[a.n_seqs] * sizeof(int32_t));
    assert_memory_equal(a.log_probs, b.log_probs, (size_t)a.offsets[a.n_seqs] * sizeof(float));
    for (int64_t t = 0; t < a.offsets[a.n_seqs]; t++)
        assert_int_equal(a.response_mask[t], 1);
    for (int64_t s = 0; s < a.n_seqs; s++)
        assert_int_equal(a.assistant_turns[s], 1);
    assert_int_equal(st.appended_tokens, 0);
    assert_int_equal(st.prefill_tokens, q.prompt_offsets[NP]);
    df_rollout_engine_free(e);
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_model_free(m);
}

/* The handler's status ends the call with its message; a reply of nothing is refused. */
static void test_handler_errors(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(2, 5);
    df_sampling_params sp = sampling(false, 60);
    df_rollout_options o = options(DF_ROLLOUT_F32, 4, 0);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    fixed_turns f;
    df_turn_handler h = handler(&f, 3, 4, 0);
    df_rollout_result r;
    f.fail_at = 3;
    assert_int_equal(df_rollout_generate_turns(e, m, &q, &sp, &h, &r, NULL, NULL), DF_EIO);
    assert_non_null(strstr(df_last_error(), "the tool is down"));
    assert_null(r.tokens);
    h = handler(&f, 3, 4, 0);
    f.fail_at = -2;
    assert_int_equal(df_rollout_generate_turns(e, m, &q, &sp, &h, &r, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "neither ended"));
    df_turn_handler none = {NULL, NULL, 0};
    assert_int_equal(df_rollout_generate_turns(e, m, &q, &sp, &none, &r, NULL, NULL), DF_EINVAL);
    /* the engine is usable afterwards */
    h = handler(&f, 1, 2, 0);
    assert_int_equal(df_rollout_generate_turns(e, m, &q, &sp, &h, &r, NULL, NULL), 0);
    check_mask(&f, &r);
    df_rollout_result_free(&r);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* The rollout node's batch: response_mask next to response_ids with a handler (the result's
 * mask), none without one. */
static void test_batch_carries_the_mask(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(2, 5);
    df_batch *prompts = df_batch_new(NP);
    assert_int_equal(df_batch_set_tok_i32(prompts, "prompt_ids", POFF, PTOK), 0);
    df_sampling_params sp = sampling(false, 40);
    df_rollout_options o = options(DF_ROLLOUT_F32, 10, 0);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create_ex(&m->cfg, &o, &e), 0);
    fixed_turns f;
    df_turn_handler h = handler(&f, 2, 3, 0);
    df_batch *b = NULL;
    assert_int_equal(df_generate_batch_turns(e, m, prompts, 2, &sp, &h, q.seed, NULL, &b), 0);
    const int32_t *mask = NULL;
    assert_int_equal(df_batch_response_mask(b, &mask), 0);
    assert_non_null(mask);
    /* the same call straight on the engine: the batch holds its tokens and mask */
    fixed_turns f2;
    df_turn_handler h2 = handler(&f2, 2, 3, 0);
    df_rollout_result r;
    assert_int_equal(df_rollout_generate_turns(e, m, &q, &sp, &h2, &r, NULL, NULL), 0);
    const int64_t n = r.offsets[r.n_seqs];
    assert_memory_equal(df_batch_offsets(b, "response_ids"), r.offsets, (size_t)(r.n_seqs + 1) * sizeof(int64_t));
    assert_memory_equal(df_batch_column(b, "response_ids")->data, r.tokens, (size_t)n * sizeof(int32_t));
    int64_t zeros = 0;
    for (int64_t t = 0; t < n; t++) {
        assert_int_equal(mask[t], r.response_mask[t]);
        zeros += !mask[t];
    }
    assert_true(zeros > 0);
    /* verl's num_turns: assistant turns + appended replies + 1 */
    const int64_t *nt = df_batch_i64(b, "num_turns");
    assert_non_null(nt);
    for (int64_t s = 0; s < r.n_seqs; s++) {
        int64_t replies = 0;
        for (int64_t k = 0; k < f2.n[s]; k++)
            replies += f2.at[s][k] < r.offsets[s + 1] - r.offsets[s];
        assert_int_equal(nt[s], r.assistant_turns[s] + replies + 1);
    }
    df_batch_free(b);
    assert_int_equal(df_generate_batch(e, m, prompts, 2, &sp, q.seed, NULL, &b), 0);
    assert_false(df_batch_has(b, "response_mask"));
    df_batch_free(b);
    df_rollout_result_free(&r);
    df_batch_free(prompts);
    df_rollout_engine_free(e);
    df_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_reuse_mask_and_teacher_forcing),
        cmocka_unit_test(test_greedy_turns_equal_reprefill),
        cmocka_unit_test(test_batching_and_chunking_change_nothing),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_single_turn_unchanged),
        cmocka_unit_test(test_handler_errors),
        cmocka_unit_test(test_batch_carries_the_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
