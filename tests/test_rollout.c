/* Rollout engine on a small random model: teacher-forced log-probs,
 * independence from batching / threads, seeding, filters, stop tokens,
 * length limits and errors. */
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

/* The longest prompt + response of a result: attention's key count. */
static int64_t longest(const df_rollout_request *q, const df_rollout_result *r)
{
    int64_t L = 1;
    for (int64_t s = 0; s < r->n_seqs; s++) {
        int64_t i = s / q->n_samples;
        int64_t n = q->prompt_offsets[i + 1] - q->prompt_offsets[i] + r->offsets[s + 1] - r->offsets[s];
        L = n > L ? n : L;
    }
    return L;
}

static df_model *small_model(void)
{
    df_model_config c = df_test_rollout_config(97);
    return df_test_biased_model(&c, 1234);
}

/* Prompts of lengths 3, 7, 1, 12, 5 with tokens derived from the index. */
#define NP 5
static const int64_t POFF[NP + 1] = {0, 3, 10, 11, 23, 28};
static int32_t PTOK[28];

static df_rollout_request request(int64_t n_samples, uint64_t seed)
{
    for (int i = 0; i < 28; i++)
        PTOK[i] = (int32_t)((i * 37 + 11) % 97);
    df_rollout_request q = {NP, POFF, PTOK, n_samples, seed, NULL, NULL};
    return q;
}

static df_sampling_params sampling(float t, int k, float p, int64_t max_new)
{
    df_sampling_params sp;
    df_sampling_params_defaults(&sp);
    sp.temperature = t;
    sp.top_k = k;
    sp.top_p = p;
    sp.max_new_tokens = max_new;
    return sp;
}

static df_rollout_result run(const df_model *m, int64_t max_seqs, int64_t max_len,
                             const df_rollout_request *q, const df_sampling_params *sp)
{
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, max_seqs, max_len, &e), 0);
    df_rollout_result r;
    int rc = df_rollout_generate(e, m, q, sp, &r, NULL, NULL);
    if (rc)
        fail_msg("generate: %s", df_last_error());
    assert_int_equal(r.n_seqs, q->n_prompts * q->n_samples);
    df_rollout_engine_free(e);
    return r;
}

/* Teacher-forced log-probs of sequence s of r at temperature T into lp, and each one's bound into
   err (tb_teacher_forced); a holds 128 tokens. */
static void teacher_forced(const df_model *m, df_acts *a, const df_rollout_request *q,
                           const df_rollout_result *r, int64_t s, float T, float *lp, double *err)
{
    int64_t i = s / q->n_samples, P = q->prompt_offsets[i + 1] - q->prompt_offsets[i];
    int64_t R = r->offsets[s + 1] - r->offsets[s];
    assert_true(P + R <= 128);
    tb_teacher_forced(m, a, q->prompt_tokens + q->prompt_offsets[i], P, r->tokens + r->offsets[s], R, T,
                      tb_logp_eps(&m->cfg, longest(q, r)), lp, err);
}

/* Per response token of r: the bound of one float computation of its log-prob (teacher_forced);
   malloc'd. */
static double *logp_bounds(const df_model *m, const df_rollout_request *q, const df_rollout_result *r,
                           float T)
{
    double *b = malloc(sizeof(double) * (size_t)(r->offsets[r->n_seqs] + 1));
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, 128, 128, &a), 0);
    float lp[128];
    for (int64_t s = 0; s < r->n_seqs; s++)
        teacher_forced(m, a, q, r, s, T, lp, b + r->offsets[s]);
    df_acts_free(a);
    return b;
}

/* The same tokens, and log-probs within twice bound[t] (two float computations of each, other
   batch shapes or threads), or equal when bound is NULL (the same computation, bit for bit). */
static void assert_same(const df_rollout_result *a, const df_rollout_result *b, const double *bound)
{
    assert_int_equal(a->n_seqs, b->n_seqs);
    assert_memory_equal(a->offsets, b->offsets, (size_t)(a->n_seqs + 1) * sizeof(int64_t));
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->offsets[a->n_seqs] * sizeof(int32_t));
    assert_memory_equal(a->finish_reason, b->finish_reason, (size_t)a->n_seqs);
    for (int64_t t = 0; t < a->offsets[a->n_seqs]; t++) {
        double tol = bound ? 2 * bound[t] : 0.0;
        assert_true(fabs((double)a->log_probs[t] - b->log_probs[t]) <= tol);
    }
}

/* Teacher-forced log-probs of every response with df_model_forward at temperature T: two
   float computations (decode with a KV cache, one prefill), each within teacher_forced's bound. */
static void check_teacher_forced(const df_model *m, const df_rollout_request *q,
                                 const df_rollout_result *r, float T)
{
    double worst = 0;
    df_acts *a = NULL;
    assert_int_equal(df_acts_create(&m->cfg, 128, 128, &a), 0);
    for (int64_t s = 0; s < r->n_seqs; s++) {
        int64_t R = r->offsets[s + 1] - r->offsets[s];
        float lp[128];
        double err[128];
        assert_true(R >= 1);
        teacher_forced(m, a, q, r, s, T, lp, err);
        for (int64_t t = 0; t < R; t++) {
            double bound = 2 * err[t];
            double d = fabs(r->log_probs[r->offsets[s] + t] - lp[t]);
            assert_true(d <= bound);
            worst = fmax(worst, d / bound);
        }
    }
    print_message("teacher-forced log-probs: worst error / bound %.3f\n", worst);
    df_acts_free(a);
}

static void test_greedy_logprobs_match_teacher_forcing(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(2, 5);
    df_sampling_params sp = sampling(1.0f, -1, 1.0f, 12);
    sp.greedy = true;
    df_rollout_result r = run(m, 4, 64, &q, &sp);
    for (int64_t s = 0; s < r.n_seqs; s++) {
        assert_int_equal(r.offsets[s + 1] - r.offsets[s], 12);
        assert_int_equal(r.finish_reason[s], DF_FINISH_LENGTH);
    }
    /* greedy samples of one prompt are identical */
    for (int64_t i = 0; i < NP; i++)
        assert_memory_equal(r.tokens + r.offsets[2 * i], r.tokens + r.offsets[2 * i + 1], 48);
    check_teacher_forced(m, &q, &r, 1.0f);
    df_rollout_result_free(&r);
    df_model_free(m);
}

static void test_sampled_logprobs_match_teacher_forcing(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(3, 9);
    df_sampling_params sp = sampling(0.8f, 20, 0.9f, 10);
    df_rollout_result r = run(m, 8, 64, &q, &sp);
    check_teacher_forced(m, &q, &r, 0.8f);
    df_rollout_result_free(&r);
    df_model_free(m);
}

static void test_batching_and_threads_change_nothing(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(3, 42);
    df_sampling_params sp = sampling(1.0f, 30, 0.95f, 16);
    df_rollout_result r64 = run(m, 64, 48, &q, &sp);
    df_rollout_result r3 = run(m, 3, 48, &q, &sp);
    df_rollout_result r1 = run(m, 1, 48, &q, &sp);
    df_rollout_result r2 = run(m, 2, 48, &q, &sp); /* n = 3 > 2: groups admitted in parts */
    /* other batch shapes: two float computations of each log-prob */
    double *atol = logp_bounds(m, &q, &r64, 1.0f);
    assert_same(&r64, &r3, atol);
    assert_same(&r64, &r1, atol);
    assert_same(&r64, &r2, atol);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    df_rollout_result t1 = run(m, 64, 48, &q, &sp);
    omp_set_num_threads(2);
    df_rollout_result t2 = run(m, 64, 48, &q, &sp);
    /* an engine made for one thread, then run with three: its scratch grows */
    omp_set_num_threads(1);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 3, 48, &e), 0);
    omp_set_num_threads(3);
    df_rollout_result t3;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &t3, NULL, NULL), 0);
    omp_set_num_threads(saved);
    assert_same(&t1, &t3, atol);
    df_rollout_result_free(&t3);
    df_rollout_engine_free(e);
    assert_same(&t1, &t2, atol);
    assert_same(&r64, &t1, atol);
    free(atol);
    df_rollout_result_free(&r64);
    df_rollout_result_free(&r3);
    df_rollout_result_free(&r1);
    df_rollout_result_free(&r2);
    df_rollout_result_free(&t1);
    df_rollout_result_free(&t2);
    df_model_free(m);
}

static bool same_response(const df_rollout_result *a, int64_t s, const df_rollout_result *b,
                          int64_t u)
{
    int64_t la = a->offsets[s + 1] - a->offsets[s], lb = b->offsets[u + 1] - b->offsets[u];
    return la == lb && !memcmp(a->tokens + a->offsets[s], b->tokens + b->offsets[u],
                               (size_t)la * sizeof(int32_t));
}

static void test_seeds_and_sample_streams(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(4, 100);
    df_sampling_params sp = sampling(1.0f, -1, 1.0f, 10);
    df_rollout_result a = run(m, 16, 32, &q, &sp);
    df_rollout_result b = run(m, 16, 32, &q, &sp);
    assert_same(&a, &b, NULL);
    /* samples j of one prompt differ from each other */
    int differ = 0;
    for (int64_t i = 0; i < NP; i++)
        for (int64_t j = 1; j < 4; j++)
            differ += !same_response(&a, i * 4, &a, i * 4 + j);
    assert_int_equal(differ, NP * 3);
    /* another seed gives other samples */
    q.seed = 101;
    df_rollout_result c = run(m, 16, 32, &q, &sp);
    int changed = 0;
    for (int64_t s = 0; s < a.n_seqs; s++)
        changed += !same_response(&a, s, &c, s);
    assert_int_equal(changed, a.n_seqs);
    /* prompt_keys: prompts 3 and 1 alone, keyed by their index, reproduce their rows */
    static const int64_t off2[3] = {0, 12, 19};
    int32_t tok2[19];
    memcpy(tok2, PTOK + POFF[3], 12 * 4);
    memcpy(tok2 + 12, PTOK + POFF[1], 7 * 4);
    const uint64_t keys[2] = {3, 1};
    df_rollout_request q2 = {2, off2, tok2, 4, 100, keys, NULL};
    df_rollout_result d = run(m, 5, 32, &q2, &sp);
    for (int64_t j = 0; j < 4; j++) {
        assert_true(same_response(&d, j, &a, 3 * 4 + j));
        assert_true(same_response(&d, 4 + j, &a, 1 * 4 + j));
    }
    df_rollout_result_free(&a);
    df_rollout_result_free(&b);
    df_rollout_result_free(&c);
    df_rollout_result_free(&d);
    df_model_free(m);
}

static void test_top_k_1_and_tiny_top_p_are_greedy(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(2, 8);
    df_sampling_params g = sampling(1.0f, -1, 1.0f, 10);
    g.greedy = true;
    df_sampling_params k1 = sampling(1.0f, 1, 1.0f, 10);
    df_sampling_params tp = sampling(1.0f, -1, 1e-6f, 10);
    df_sampling_params t0 = sampling(0.0f, -1, 1.0f, 10);
    df_rollout_result rg = run(m, 8, 32, &q, &g);
    df_rollout_result rk = run(m, 8, 32, &q, &k1);
    df_rollout_result rp = run(m, 8, 32, &q, &tp);
    df_rollout_result r0 = run(m, 8, 32, &q, &t0);
    /* greedy log-probs are at temperature 1 in every mode; other sampling paths */
    double *atol = logp_bounds(m, &q, &rg, 1.0f);
    assert_same(&rg, &rk, atol);
    assert_same(&rg, &rp, atol);
    assert_same(&rg, &r0, atol);
    free(atol);
    /* and a temperature-1 sample is not greedy */
    df_sampling_params s = sampling(1.0f, -1, 1.0f, 10);
    df_rollout_result rs = run(m, 8, 32, &q, &s);
    int differ = 0;
    for (int64_t i = 0; i < rs.n_seqs; i++)
        differ += !same_response(&rs, i, &rg, i);
    assert_true(differ >= rs.n_seqs / 2);
    df_rollout_result_free(&rg);
    df_rollout_result_free(&rk);
    df_rollout_result_free(&rp);
    df_rollout_result_free(&r0);
    df_rollout_result_free(&rs);
    df_model_free(m);
}

/* Stop ids end a response after (and including) their first occurrence. */
static void test_stop_ids_and_eos(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(3, 77);
    df_sampling_params sp = sampling(1.0f, -1, 1.0f, 20);
    df_rollout_result full = run(m, 64, 64, &q, &sp);
    /* stop on two tokens seen early in the first responses */
    int32_t stops[2] = {full.tokens[full.offsets[0] + 3], full.tokens[full.offsets[4] + 5]};
    sp.stop_ids = stops;
    sp.n_stop = 2;
    df_rollout_result cut = run(m, 64, 64, &q, &sp);
    int n_stopped = 0;
    for (int64_t s = 0; s < full.n_seqs; s++) {
        int64_t f0 = full.offsets[s], L = full.offsets[s + 1] - f0, k = 0;
        while (k < L && full.tokens[f0 + k] != stops[0] && full.tokens[f0 + k] != stops[1])
            k++;
        int64_t want = k < L ? k + 1 : L;
        int64_t c0 = cut.offsets[s];
        assert_int_equal(cut.offsets[s + 1] - c0, want);
        assert_memory_equal(cut.tokens + c0, full.tokens + f0, (size_t)want * 4);
        assert_int_equal(cut.finish_reason[s], k < L ? DF_FINISH_STOP : DF_FINISH_LENGTH);
        n_stopped += k < L;
    }
    assert_true(n_stopped >= 2);
    /* the model's eos ids stop too, unless ignore_eos */
    df_model_config c = m->cfg;
    m->cfg.eos_token_ids[0] = stops[0];
    m->cfg.n_eos = 1;
    sp.n_stop = 0;
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 64, 64, &e), 0);
    df_rollout_result eos, ign;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &eos, NULL, NULL), 0);
    int64_t k0 = 0;
    while (full.tokens[full.offsets[0] + k0] != stops[0])
        k0++;
    assert_int_equal(eos.offsets[1] - eos.offsets[0], k0 + 1);
    assert_int_equal(eos.finish_reason[0], DF_FINISH_STOP);
    sp.ignore_eos = true;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &ign, NULL, NULL), 0);
    assert_same(&ign, &full, NULL);
    m->cfg = c;
    df_rollout_engine_free(e);
    df_rollout_result_free(&full);
    df_rollout_result_free(&cut);
    df_rollout_result_free(&eos);
    df_rollout_result_free(&ign);
    df_model_free(m);
}

typedef struct {
    int64_t calls, last_done, last_tokens, total;
    bool monotone;
} progress_log;

static void on_progress(void *user, int64_t done, int64_t total, int64_t tokens)
{
    progress_log *p = user;
    p->monotone &= done >= p->last_done && tokens >= p->last_tokens;
    p->calls++;
    p->last_done = done;
    p->last_tokens = tokens;
    p->total = total;
}

static void test_lengths_progress_and_stats(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_request q = request(5, 3); /* n = 5 > max_num_seqs = 3 */
    df_sampling_params sp = sampling(1.0f, -1, 1.0f, 9);
    df_rollout_engine *e = NULL;
    /* max_seq_len 14: prompt 12 leaves room for 2 tokens, prompt 7 for 7 */
    assert_int_equal(df_rollout_engine_create(&m->cfg, 3, 14, &e), 0);
    df_rollout_result r;
    progress_log pl = {0, 0, 0, 0, true};
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, on_progress, &pl), 0);
    for (int64_t s = 0; s < r.n_seqs; s++) {
        int64_t i = s / 5, P = POFF[i + 1] - POFF[i], want = 14 - P < 9 ? 14 - P : 9;
        assert_int_equal(r.offsets[s + 1] - r.offsets[s], want);
        assert_int_equal(r.finish_reason[s], DF_FINISH_LENGTH);
    }
    assert_true(pl.monotone && pl.calls > 1);
    assert_int_equal(pl.last_done, 25);
    assert_int_equal(pl.total, 25);
    assert_int_equal(pl.last_tokens, r.offsets[25]);
    df_rollout_stats st;
    df_rollout_engine_stats(e, &st);
    assert_int_equal(st.generated_tokens, r.offsets[25]);
    /* each prompt is prefilled once per admission: groups of 5 into 3 slots take >= 2 */
    assert_true(st.prefill_tokens >= 2 * 28 && st.prefill_tokens <= 5 * 28);
    assert_true(st.mean_active > 1.0 && st.mean_active <= 3.0);
    assert_true(st.decode_steps > 0 && st.seconds > 0.0);
    /* whole groups with n <= max_num_seqs: each prompt prefilled exactly once */
    df_rollout_request q2 = request(3, 3);
    df_rollout_result r2;
    assert_int_equal(df_rollout_generate(e, m, &q2, &sp, &r2, NULL, NULL), 0);
    df_rollout_engine_stats(e, &st);
    assert_int_equal(st.prefill_tokens, 28);
    assert_int_equal(st.prefill_batches, NP);
    df_rollout_result_free(&r);
    df_rollout_result_free(&r2);
    df_rollout_engine_free(e);
    df_model_free(m);
}

static void expect_einval(df_rollout_engine *e, const df_model *m, const df_rollout_request *q,
                          const df_sampling_params *sp, const char *needle)
{
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, q, sp, &r, NULL, NULL), DF_EINVAL);
    assert_null(r.tokens);
    assert_null(r.offsets);
    if (!strstr(df_last_error(), needle))
        fail_msg("error \"%s\" lacks \"%s\"", df_last_error(), needle);
}

static void test_errors(void **state)
{
    (void)state;
    df_model *m = small_model();
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&m->cfg, 0, 16, &e), DF_EINVAL);
    assert_int_equal(df_rollout_engine_create(&m->cfg, 4, 1, &e), DF_EINVAL);
    assert_null(e);
    assert_int_equal(df_rollout_engine_create(&m->cfg, 4, 12, &e), 0);
    df_sampling_params sp = sampling(1.0f, -1, 1.0f, 4);
    df_rollout_request q = request(2, 1);
    expect_einval(e, m, &q, &sp, "prompt 3 has 12 tokens"); /* > max_seq_len - 1 = 11 */
    static const int64_t empty_off[3] = {0, 2, 2};
    df_rollout_request qe = {2, empty_off, PTOK, 1, 0, NULL, NULL};
    expect_einval(e, m, &qe, &sp, "prompt 1 has 0 tokens");
    static const int64_t off1[2] = {0, 3};
    const int32_t bad[3] = {1, 97, 2};
    df_rollout_request qb = {1, off1, bad, 1, 0, NULL, NULL};
    expect_einval(e, m, &qb, &sp, "token 1 is 97");
    df_rollout_request qn = {1, off1, PTOK, 0, 0, NULL, NULL};
    expect_einval(e, m, &qn, &sp, "n_samples");
    df_rollout_request qok = {1, off1, PTOK, 1, 0, NULL, NULL};
    sp.top_p = 2.0f;
    expect_einval(e, m, &qok, &sp, "top_p");
    sp.top_p = 1.0f;
    df_model_config c2 = m->cfg;
    c2.num_hidden_layers = 3;
    df_model *m3 = NULL;
    assert_int_equal(df_model_create(&c2, &m3), 0);
    expect_einval(e, m3, &qok, &sp, "differ");
    /* the engine still works after rejected calls */
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &qok, &sp, &r, NULL, NULL), 0);
    assert_int_equal(r.offsets[1], 4);
    df_rollout_result_free(&r);
    df_rollout_result_free(&r); /* idempotent */
    /* zero prompts: an empty result */
    df_rollout_request q0 = {0, NULL, NULL, 2, 0, NULL, NULL};
    assert_int_equal(df_rollout_generate(e, m, &q0, &sp, &r, NULL, NULL), 0);
    assert_int_equal(r.n_seqs, 0);
    assert_int_equal(r.offsets[0], 0);
    df_rollout_result_free(&r);
    df_model_free(m3);
    df_rollout_engine_free(e);
    df_model_free(m);
}

/* Expect df_rollout_generate to refuse a model made from c on engine e (message with needle). */
static void expect_refused(df_rollout_engine *e, const df_model_config *c, const char *needle)
{
    df_model *m = NULL;
    if (df_model_create(c, &m))
        fail_msg("model: %s", df_last_error());
    df_sampling_params sp = sampling(1.0f, -1, 1.0f, 4);
    static const int64_t off1[2] = {0, 3};
    df_rollout_request q = {1, off1, PTOK, 1, 0, NULL, NULL};
    expect_einval(e, m, &q, &sp, needle);
    df_model_free(m);
}

/* The engine's RoPE table and row buffers follow its own config: a model of the same shapes
 * with another RoPE, q/k norms (a wider rstd), another layer, attention window or Gemma 3
 * switch is refused, not run. */
static void test_rope_and_qk_norm_must_match(void **state)
{
    (void)state;
    df_model_config c = df_test_rollout_config(97);
    df_rollout_engine *e = NULL;
    assert_int_equal(df_rollout_engine_create(&c, 2, 16, &e), 0);
    df_model_config d = c;
    d.rope_theta = 500000.0;
    expect_refused(e, &d, "RoPE (theta 500000, local 0, default)");
    d = c;
    d.rope_type = DF_ROPE_LLAMA3;
    d.rope_factor = 8;
    d.rope_low_freq_factor = 1;
    d.rope_high_freq_factor = 4;
    d.rope_original_max_pos = 64;
    expect_refused(e, &d, "llama3 scaling");
    d = c;
    snprintf(d.model_type, sizeof d.model_type, "qwen3");
    d.qk_norm = true;
    d.o_proj_bias = true; /* goes with attention_bias in qwen3 */
    expect_refused(e, &d, "q/k norms (per head)");
    d = c; /* olmo2's layer on the same shapes: full-width norms, post-norm */
    snprintf(d.model_type, sizeof d.model_type, "olmo2");
    d.attention_bias = false;
    d.qk_norm = d.qk_norm_full = d.post_norm = true;
    expect_refused(e, &d, "layer (post-norm)");
    d = c; /* qwen2's use_sliding_window from layer 1: the engine's layer 1 attends over all */
    d.sliding_window = 4;
    d.max_window_layers = 1;
    expect_refused(e, &d, "layer 1 of the model attends over a window of 4 with its global RoPE, the engine's "
                          "over 0 with its global RoPE");
    df_rollout_engine_free(e);
    /* Gemma 3 (sliding layer 0 with its local RoPE, full layer 1): each switch and the local base */
    df_model_config g = c;
    df_test_gemma3(&g, 4, 2, 16);
    if (df_rollout_engine_create(&g, 2, 16, &e))
        fail_msg("%s", df_last_error());
    d = g;
    d.rope_local_theta = 5e3;
    expect_refused(e, &d, "RoPE (theta 1e+06, local 5000, default)");
    d = g;
    d.full_layers[0] = 3;
    expect_refused(e, &d, "layer 0 of the model attends over a window of 0 with its global RoPE, the engine's "
                          "over 4 with its local RoPE");
    d = g;
    d.geglu = false;
    expect_refused(e, &d, "MLP or query scale (Gemma 3's)");
    d = g;
    d.query_pre_attn_scalar = 8;
    expect_refused(e, &d, "MLP or query scale (Gemma 3's)");
    df_rollout_engine_free(e);
    /* llama3 on both sides: its parameters must match too */
    c.rope_type = DF_ROPE_LLAMA3;
    c.rope_factor = 8;
    c.rope_low_freq_factor = 1;
    c.rope_high_freq_factor = 4;
    c.rope_original_max_pos = 64;
    assert_int_equal(df_rollout_engine_create(&c, 2, 16, &e), 0);
    d = c;
    d.rope_factor = 4;
    expect_refused(e, &d, "differ");
    d = c; /* the same config runs */
    df_model *m = NULL;
    assert_int_equal(df_model_create(&d, &m), 0);
    assert_int_equal(df_model_init_random(m, 7), 0);
    df_sampling_params sp = sampling(1.0f, -1, 1.0f, 4);
    static const int64_t off1[2] = {0, 3};
    df_rollout_request q = {1, off1, PTOK, 1, 0, NULL, NULL};
    df_rollout_result r;
    assert_int_equal(df_rollout_generate(e, m, &q, &sp, &r, NULL, NULL), 0);
    assert_int_equal(r.offsets[1], 4);
    df_rollout_result_free(&r);
    df_model_free(m);
    df_rollout_engine_free(e);
}

static void test_memory_formula(void **state)
{
    (void)state;
    df_model_config c = df_test_rollout_config(97);
    /* 8 slots x 100 tokens, one thread, R = 2048 rows (formula in rollout.h):
     * KV 2*2*8*100*16*4 = 204800; activations 2048 * ((64+64+32+192+1)*4 + 20)
     * = 2932736; output rows 8 * ((32+32)*4 + 8) = 2112; scores 4*100*4 = 1600;
     * RoPE 100*8*4 = 3200; logits 2048*97*4 = 794624; outputs 8*100*8 = 6400 */
    int64_t want = 204800 + 2932736 + 2112 + 1600 + 3200 + 794624 + 6400;
    assert_int_equal(df_rollout_engine_bytes(&c, 8, 100), want);
}

int main(void)
{
    /* One thread except where the thread count is the subject: on a loaded
     * machine every OpenMP barrier of this tiny model can wait for a
     * descheduled thread, which makes the suite slow without testing more. */
    omp_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_logprobs_match_teacher_forcing),
        cmocka_unit_test(test_sampled_logprobs_match_teacher_forcing),
        cmocka_unit_test(test_batching_and_threads_change_nothing),
        cmocka_unit_test(test_seeds_and_sample_streams),
        cmocka_unit_test(test_top_k_1_and_tiny_top_p_are_greedy),
        cmocka_unit_test(test_stop_ids_and_eos),
        cmocka_unit_test(test_lengths_progress_and_stats),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_rope_and_qk_norm_must_match),
        cmocka_unit_test(test_memory_formula),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
