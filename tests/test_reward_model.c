/*
 * Reward models (src/engine/reward_model.h): an HF *ForSequenceClassification /
 * *ForTokenClassification directory scored at each sequence's last token.
 *   - scores of tests/golden/tiny_qwen2_rm (a random Qwen2ForSequenceClassification
 *     written by tests/golden/gen_reward_model.py: plain torch after transformers'
 *     modeling_qwen2.py in float64; transformers is not installed here, so no file was
 *     produced or read by it) against that reference, in one forward and micro-batched by
 *     count and by token budget; the scores in another order, or a moved weight, fail;
 *   - a *ForTokenClassification (value-model) directory scored at the last row equals
 *     df_model_forward_values there;
 *   - malformed directories: no score.weight, a mis-shaped one, two labels, an unknown
 *     architecture, a causal LM; bad sequences.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testgolden.h"
#include "testutil.h"

#include "distflow/model.h"
#include "engine/reward_model.h"
#include "model/safetensors.h"
#include "testbounds.h"
#include "tolerance.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_DIR DF_SOURCE_DIR "/tests/golden"
#define RM_DIR GOLDEN_DIR "/tiny_qwen2_rm"

/* Against the float64 reference: a value's rounding chain (tests/testbounds.h) over the
   longest sequence, as test_value_head.c bounds the value head. */
#define SCORE_TOL(m, g) df_golden_tol(tb_head_chain(&(m)->cfg, df_golden_max_len(g)))

static df_reward_model *load_rm(const char *dir, int64_t mbs, int64_t tokens)
{
    df_reward_model_params p = {.micro_batch_size = mbs, .max_token_len = tokens};
    df_reward_model *rm = NULL;
    if (df_reward_model_load(dir, &p, &rm))
        fail_msg("%s", df_last_error());
    return rm;
}

/* Relative L2 error of the reward model's scores of g's sequences against `want`. */
static double score_error(df_reward_model *rm, const df_golden_batch *g, const float *want)
{
    float *s = malloc(sizeof(float) * (size_t)g->n_seqs);
    assert_non_null(s);
    if (df_reward_model_score(rm, g->n_seqs, g->offsets, g->tokens, s))
        fail_msg("%s", df_last_error());
    double e = df_golden_rel_err(s, want, g->n_seqs);
    free(s);
    return e;
}

static void test_golden_scores(void **state)
{
    (void)state;
    df_golden_batch g;
    df_golden_batch_load(&g, GOLDEN_DIR "/tiny_qwen2_rm_expected.safetensors");
    float *want = df_golden_read_vec(g.exp, "scores", NULL);
    df_reward_model *rm = load_rm(RM_DIR, 0, 0);
    const df_model *m = df_reward_model_model(rm);
    /* Qwen2ForSequenceClassification: one label, no score.bias in the file, read as 0. */
    assert_true(m->cfg.seq_cls);
    assert_int_equal(m->cfg.num_labels, 1);
    assert_null(m->w.lm_head);
    assert_true(m->w.score_bias[0] == 0.0f);
    const double tol = SCORE_TOL(m, &g);
    double e = score_error(rm, &g, want);
    print_message("scores rel err %.2e, bound %.2e\n", e, tol);
    assert_true(e <= tol);
    df_reward_model_free(rm);

    /* Micro-batched: one sequence at a time, two, and a token budget (each forward then holds
       fewer sequences, some alone): the same scores in the same order. */
    const int64_t limits[][2] = {{1, 0}, {2, 0}, {0, 16}, {3, 24}};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        rm = load_rm(RM_DIR, limits[i][0], limits[i][1]);
        e = score_error(rm, &g, want);
        print_message("micro_batch_size %lld, max_token_len %lld: rel err %.2e\n", (long long)limits[i][0],
                      (long long)limits[i][1], e);
        assert_true(e <= tol);
        df_reward_model_free(rm);
    }

    /* The test can fail: the reference's scores of sequences 0 and 1 swapped, the score read one
       token early (the second-to-last row), and a moved weight. */
    rm = load_rm(RM_DIR, 2, 0);
    float swapped[4];
    memcpy(swapped, want, sizeof swapped);
    swapped[0] = want[1], swapped[1] = want[0];
    assert_true(score_error(rm, &g, swapped) > tol);
    int64_t early[5];
    for (int s = 0; s <= g.n_seqs; s++)
        early[s] = g.offsets[s] - s; /* each sequence without its last token */
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)g.T);
    int64_t k = 0;
    for (int s = 0; s < g.n_seqs; s++)
        for (int64_t t = g.offsets[s]; t < g.offsets[s + 1] - 1; t++)
            toks[k++] = g.tokens[t];
    float got[4];
    assert_int_equal(df_reward_model_score(rm, g.n_seqs, early, toks, got), DF_OK);
    e = df_golden_rel_err(got, want, g.n_seqs);
    print_message("one token early: rel err %.2e\n", e);
    assert_true(e > tol);
    df_model *mm = (df_model *)df_reward_model_model(rm);
    mm->w.layers[1].wq[5] += 1e-3f;
    e = score_error(rm, &g, want);
    print_message("wq[5] + 1e-3: rel err %.2e\n", e);
    assert_true(e > tol);
    free(toks);
    free(want);
    df_reward_model_free(rm);
    df_golden_batch_free(&g);
}

/*
 * In bf16 (reward_model.model.fsdp_config.mixed_precision.param_dtype, verl's dtype for its reward
 * model): the golden scores within bf16 accuracy. Bound, as test_model_golden's bf16 model: each
 * of the 4 GEMM stages of a layer rounds both operands to bf16 (u = 2^-8; products exact, float
 * sums): 8 per layer, and the bf16 embedding table 1 (the score head is float32), in
 * df_tol_gamma_prob, plus the float32 bound. The error must also exceed the float32 bound, so
 * the scores really come from the bf16 copy, whose float32 layer weights are then released.
 */
static void test_golden_scores_bf16(void **state)
{
    (void)state;
    if (df_model_bf16_available() != DF_OK) {
        print_message("no native bf16 matmuls here: %s\n", df_last_error());
        skip();
    }
    df_golden_batch g;
    df_golden_batch_load(&g, GOLDEN_DIR "/tiny_qwen2_rm_expected.safetensors");
    float *want = df_golden_read_vec(g.exp, "scores", NULL);
    df_reward_model_params p = {.micro_batch_size = 2, .bf16 = true};
    df_reward_model *rm = NULL;
    if (df_reward_model_load(RM_DIR, &p, &rm))
        fail_msg("%s", df_last_error());
    assert_true(df_reward_model_bf16(rm));
    const df_model *m = df_reward_model_model(rm);
    const double f32 = SCORE_TOL(m, &g), L = (double)m->cfg.num_hidden_layers;
    const double tol = df_tol_gamma_prob(8 * L + 1, DF_TOL_LAMBDA, DF_U_BF16) + f32;
    double e = score_error(rm, &g, want);
    print_message("bf16 scores rel err %.2e, bound %.2e (float32 %.2e)\n", e, tol, f32);
    assert_true(e <= tol);
    assert_true(e > f32);
    /* the same model in float32 stays within the float32 bound: the dtype is the difference */
    df_reward_model_free(rm);
    p.bf16 = false;
    assert_int_equal(df_reward_model_load(RM_DIR, &p, &rm), DF_OK);
    assert_false(df_reward_model_bf16(rm));
    assert_true(score_error(rm, &g, want) <= f32);
    free(want);
    df_reward_model_free(rm);
    df_golden_batch_free(&g);
}

/* A *ForTokenClassification directory (the critic's fixture, with a bias) scores at each
   sequence's last row what df_model_forward_values gives there. */
static void test_token_classification(void **state)
{
    (void)state;
    df_golden_batch g;
    df_golden_batch_load(&g, GOLDEN_DIR "/tiny_qwen2_value_expected.safetensors");
    df_reward_model *rm = load_rm(GOLDEN_DIR "/tiny_qwen2_value", 1, 0);
    const df_model *m = df_reward_model_model(rm);
    assert_false(m->cfg.seq_cls);
    assert_true(m->w.score_bias[0] != 0.0f);
    float got[8], want[8];
    assert_true(g.n_seqs <= 8);
    assert_int_equal(df_reward_model_score(rm, g.n_seqs, g.offsets, g.tokens, got), DF_OK);
    int64_t rows[8];
    for (int s = 0; s < g.n_seqs; s++)
        rows[s] = g.offsets[s + 1] - 1;
    df_seq_batch b = {g.T, g.tokens, g.n_seqs, g.offsets, g.n_seqs, rows, NULL, NULL, NULL};
    df_acts *a;
    assert_int_equal(df_acts_create(&m->cfg, g.T, g.n_seqs, &a), DF_OK);
    assert_int_equal(df_model_forward_values(m, a, &b, want), DF_OK);
    /* two float computations of the same values: twice one's bound */
    double e = df_golden_rel_err(got, want, g.n_seqs), tol = 2 * SCORE_TOL(m, &g);
    print_message("token classification: rel err %.2e, bound %.2e\n", e, tol);
    assert_true(e <= tol);
    df_acts_free(a);
    df_reward_model_free(rm);
    df_golden_batch_free(&g);
}

/* ---- malformed directories ------------------------------------------------------------- */

/* Copy the fixture into dir with config.json's text replaced by `config` (NULL: kept) and
   score.weight dropped (drop) or given `rows` rows (rows > 0). */
static void write_variant(const char *dir, const char *config, bool drop, int64_t rows)
{
    char *text = NULL;
    assert_int_equal(df_read_file(RM_DIR "/config.json", &text, NULL), DF_OK);
    char *cp = df_path_join(dir, "config.json"), *wp = df_path_join(dir, "model.safetensors");
    FILE *f = fopen(cp, "w");
    assert_non_null(f);
    fputs(config ? config : text, f);
    fclose(f);
    df_model *m;
    assert_int_equal(df_model_load(RM_DIR, &m), DF_OK);
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), DF_OK);
    float *big = calloc((size_t)(rows > 0 ? rows : 1) * (size_t)m->cfg.hidden_size, sizeof(float));
    for (int i = 0; i < m->n_tensors; i++) {
        const df_param_desc *d = &m->tensors[i];
        if (!strcmp(d->name, "score.bias"))
            continue; /* HF's sequence classifier has none */
        if (!strcmp(d->name, "score.weight") && drop)
            continue;
        int64_t shape[2] = {d->shape[0], d->shape[1]};
        const float *data = m->params + d->offset;
        if (!strcmp(d->name, "score.weight") && rows > 0)
            shape[0] = rows, data = big;
        assert_int_equal(df_st_writer_add_borrowed(w, d->name, DF_DTYPE_F32, d->ndim, shape, data), DF_OK);
    }
    assert_int_equal(df_st_writer_write(w, wp), DF_OK);
    df_st_writer_free(w);
    free(big);
    df_model_free(m);
    free(text), free(cp), free(wp);
}

/* fixture's config.json with "architectures" / "id2label" replaced */
static char *config_with(const char *arch, int n_labels)
{
    json_error_t err;
    json_t *o = json_load_file(RM_DIR "/config.json", 0, &err);
    assert_non_null(o);
    json_object_set_new(o, "architectures", json_pack("[s]", arch));
    json_t *labels = json_object();
    for (int i = 0; i < n_labels; i++) {
        char k[8], v[16];
        snprintf(k, sizeof k, "%d", i), snprintf(v, sizeof v, "LABEL_%d", i);
        json_object_set_new(labels, k, json_string(v));
    }
    json_object_set_new(o, "id2label", labels);
    json_object_del(o, "label2id");
    char *s = json_dumps(o, JSON_INDENT(2));
    json_decref(o);
    return s;
}

static void expect_load_error(const char *dir, int code, const char *a, const char *b)
{
    df_reward_model_params p = {0};
    df_reward_model *rm = (df_reward_model *)0x1;
    df_clear_error();
    int rc = df_reward_model_load(dir, &p, &rm);
    print_message("  -> %s\n", df_last_error());
    assert_int_equal(rc, code);
    assert_null(rm);
    assert_non_null(strstr(df_last_error(), a));
    if (b)
        assert_non_null(strstr(df_last_error(), b));
}

static void test_malformed_dirs(void **state)
{
    const char *dir = *state;
    /* No score.weight: the file and the tensor are named. */
    write_variant(dir, NULL, true, 0);
    expect_load_error(dir, DF_EINVAL, "model.safetensors", "missing tensor \"score.weight\"");
    /* score.weight with two rows where config.json has one label. */
    write_variant(dir, NULL, false, 2);
    expect_load_error(dir, DF_EINVAL, "\"score.weight\" has shape [2, 32]", "[1, 32]");
    /* Two labels in config.json (verl loads reward models with num_labels 1). */
    char *c2 = config_with("Qwen2ForSequenceClassification", 2);
    write_variant(dir, c2, false, 2);
    expect_load_error(dir, DF_EUNSUPPORTED, "config.json", "\"id2label\" gives 2 labels");
    free(c2);
    /* An architecture other than the supported heads, and a causal LM. */
    char *qa = config_with("Qwen2ForQuestionAnswering", 1);
    write_variant(dir, qa, false, 0);
    expect_load_error(dir, DF_EUNSUPPORTED, "config.json", "\"Qwen2ForQuestionAnswering\" is not supported");
    free(qa);
    expect_load_error(GOLDEN_DIR "/tiny_qwen2", DF_EUNSUPPORTED, "tiny_qwen2/config.json",
                      "is not a reward model");
    /* The same files under LlamaForSequenceClassification parse (llama has no q/k/v biases,
       so the Qwen2 weights do not fit: an unexpected tensor, named). */
    char *ll = config_with("LlamaForSequenceClassification", 1);
    json_t *o = json_loads(ll, 0, NULL);
    json_object_set_new(o, "model_type", json_string("llama"));
    free(ll);
    ll = json_dumps(o, 0);
    json_decref(o);
    write_variant(dir, ll, false, 0);
    expect_load_error(dir, DF_EINVAL, "unexpected tensor", "bias");
    free(ll);
    /* A score.bias in a sequence classifier's file is read (verl's token-classification load). */
    write_variant(dir, NULL, false, 0);
    df_model *m;
    assert_int_equal(df_model_load(RM_DIR, &m), DF_OK);
    m->w.score_bias[0] = 0.25f;
    df_st_writer *w;
    assert_int_equal(df_st_writer_new(&w), DF_OK);
    for (int i = 0; i < m->n_tensors; i++)
        assert_int_equal(df_st_writer_add_borrowed(w, m->tensors[i].name, DF_DTYPE_F32, m->tensors[i].ndim,
                                                   m->tensors[i].shape, m->params + m->tensors[i].offset),
                         DF_OK);
    char *wp = df_path_join(dir, "model.safetensors");
    assert_int_equal(df_st_writer_write(w, wp), DF_OK);
    df_st_writer_free(w);
    df_model *r;
    assert_int_equal(df_model_load(dir, &r), DF_OK);
    assert_true(r->w.score_bias[0] == 0.25f);
    df_model_free(r);
    df_model_free(m);
    free(wp);
}

static void test_bad_sequences(void **state)
{
    (void)state;
    df_reward_model *rm = load_rm(RM_DIR, 0, 0);
    int32_t toks[4] = {5, 6, 7, 200};
    int64_t empty[3] = {0, 2, 2}, ok[2] = {0, 4};
    float s[2];
    df_clear_error();
    assert_int_equal(df_reward_model_score(rm, 2, empty, toks, s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "sequence 1 is empty"));
    assert_int_equal(df_reward_model_score(rm, 1, ok, toks, s), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "token 200 at position 3"));
    assert_int_equal(df_reward_model_score(rm, 0, NULL, NULL, NULL), DF_OK);
    /* A causal LM is not a reward model. */
    df_model *lm = df_test_micro_model(3);
    df_reward_model_params p = {0};
    df_reward_model *bad;
    assert_int_equal(df_reward_model_create(lm, &p, &bad), DF_EINVAL);
    df_model_free(lm);
    df_reward_model_free(rm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_scores),
        cmocka_unit_test(test_golden_scores_bf16),
        cmocka_unit_test(test_token_classification),
        cmocka_unit_test_setup_teardown(test_malformed_dirs, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test(test_bad_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
