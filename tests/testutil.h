/*
 * testutil.h — helpers shared by the cmocka tests:
 * error assertions, a fresh temporary directory per test (cmocka fixtures:
 * cmocka_unit_test_setup_teardown(t, df_test_mkdtemp, df_test_rmtree); the test
 * receives the path in *state), and a tiny tokenizer + random Qwen2 model.
 */
#ifndef DF_TESTS_TESTUTIL_H
#define DF_TESTS_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>

#include "distflow/batch.h"
#include "distflow/common.h"
#include "distflow/config.h"
#include "distflow/metrics.h"
#include "distflow/model.h"
#include "distflow/rng.h"
#include "distflow/tokenizer.h"
#include "distflow/worker.h"
#include "engine/hf_dir.h"
#include "util/fsutil.h"

#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* A valid GRPO config: 8 prompts x 4 responses, mini-batch 4 prompts (16 samples), for tests
 * that load it with overrides (df_config_load_text). */
#define DF_TEST_GRPO_YAML                                                                        \
    "data:\n"                                                                                    \
    "  train_batch_size: 8\n"                                                                    \
    "actor_rollout_ref:\n"                                                                       \
    "  actor:\n"                                                                                 \
    "    ppo_mini_batch_size: 4\n"                                                               \
    "    ppo_micro_batch_size_per_gpu: 4\n"                                                      \
    "  rollout:\n"                                                                               \
    "    n: 4\n"                                                                                 \
    "algorithm:\n"                                                                               \
    "  adv_estimator: grpo\n"

static inline int df_test_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

/**
 * Run a shell command line: at most cap - 1 bytes of its output into out (NUL-terminated; the
 * rest is read and dropped, so the command never blocks on a full pipe). Returns its exit status,
 * or 128 + the signal that killed it.
 */
static inline int df_test_command(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, cap - 1, p);
    while (fgetc(p) != EOF)
        ;
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/** Remove `dir` and everything below it; 0 on success. */
static inline int df_test_remove_tree(const char *dir)
{
    return nftw(dir, df_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/** Fixture: *state = a new malloc'd directory /tmp/df_test_XXXXXX. */
static inline int df_test_mkdtemp(void **state)
{
    char *d = strdup("/tmp/df_test_XXXXXX");
    if (!d || !mkdtemp(d)) {
        free(d);
        return -1;
    }
    *state = d;
    return 0;
}

/** Fixture: remove the directory of df_test_mkdtemp and free its path. */
static inline int df_test_rmtree(void **state)
{
    df_test_remove_tree(*state);
    free(*state);
    return 0;
}

/**
 * DF_TEST_EXPECT_SIZE (set by the mpiexec runs of tests/CMakeLists' mpi-test lines):
 * whether the world has that many ranks (true when unset), so that a world of the
 * wrong size fails instead of passing trivially as one rank. Says why when not.
 */
static inline bool df_test_size_ok(int size)
{
    const char *want = getenv("DF_TEST_EXPECT_SIZE");
    if (want && atoi(want) != size) {
        print_error("a world of %d ranks, DF_TEST_EXPECT_SIZE=%s\n", size, want);
        return false;
    }
    return true;
}

/* |a - b| <= tol, with both values in the message. */
#define assert_near(a, b, tol)                                                                   \
    do {                                                                                         \
        double a_ = (double)(a), b_ = (double)(b);                                               \
        if (!(fabs(a_ - b_) <= (tol)))                                                           \
            fail_msg("%s = %.9g, expected %.9g (tol %g)", #a, a_, b_, (double)(tol));            \
    } while (0)

/** A reward that varies between samples of a random model: the share of digits in the response. */
static inline int df_test_digit_share(const char *data_source, const char *s, const char *gt, const char *extra,
                                      double *score)
{
    (void)data_source, (void)gt, (void)extra;
    size_t n = strlen(s), d = 0;
    for (size_t i = 0; i < n; i++)
        d += s[i] >= '0' && s[i] <= '9';
    *score = n ? (double)d / (double)n : 0.0;
    return 0;
}

/** Whether df_last_error() contains `text`. */
static inline bool df_test_error_mentions(const char *text)
{
    return strstr(df_last_error(), text) != NULL;
}

/* df_last_error() must contain `text`. */
#define assert_last_error_mentions(text)                                                         \
    do {                                                                                         \
        if (!df_test_error_mentions(text))                                                       \
            fail_msg("error '%s' does not mention '%s'", df_last_error(), (text));               \
    } while (0)

/* rc must be `code` and df_last_error() must contain `text`. */
#define assert_error_mentions(rc, code, text)                                                    \
    do {                                                                                         \
        assert_int_equal((rc), (code));                                                          \
        assert_last_error_mentions(text);                                                        \
    } while (0)

/** c as Gemma 3's layer (gemma3_text): sandwich (1 + w) norms, per-head q/k norms, GeGLU, the
 *  scaled embedding, tied, no biases, q scaled for query_pre_attn_scalar `qpas`, a window of
 *  `window` on every layer but those whose bit is set in `full` (layers < 64), the local RoPE
 *  (base 1e4) on those windowed layers and rope_theta 1e6 on the full ones. */
static inline void df_test_gemma3(df_model_config *c, int64_t window, uint64_t full, double qpas)
{
    snprintf(c->model_type, sizeof c->model_type, "gemma3_text");
    c->qk_norm = c->post_norm = c->sandwich_norm = c->norm_plus_one = c->embed_scale = c->geglu = true;
    c->attention_bias = false;
    c->query_pre_attn_scalar = qpas, c->rope_theta = 1e6, c->rope_local_theta = 1e4;
    c->sliding_window = window, c->max_window_layers = 0;
    c->full_layers[0] = full;
    c->tie_word_embeddings = true;
}

/**
 * dir/model: `tok` and a random model of `model_type` ("qwen2": its q/k/v biases; "llama": none)
 * using it (hidden, layers; head_dim 8, hidden / 8 heads, half as many KV heads, intermediate
 * 2 x hidden, max_pos positions), saved as an HF directory.
 */
static inline void df_test_random_model(const char *dir, const df_tokenizer *tok, const char *model_type,
                                        int hidden, int layers, uint64_t seed, int64_t max_pos)
{
    char *model_dir = df_path_join(dir, "model");
    assert_int_equal(df_tokenizer_save(tok, model_dir), 0);
    df_model_config cfg;
    df_model_config_defaults(&cfg);
    snprintf(cfg.model_type, sizeof cfg.model_type, "%s", model_type);
    cfg.attention_bias = !strcmp(model_type, "qwen2") || !strcmp(model_type, "qwen2_moe");
    cfg.vocab_size = df_tokenizer_vocab_size(tok);
    cfg.hidden_size = hidden;
    cfg.intermediate_size = 2 * hidden;
    cfg.num_hidden_layers = layers;
    cfg.num_attention_heads = hidden / 8;
    cfg.num_key_value_heads = hidden / 16;
    cfg.head_dim = 8;
    cfg.max_position_embeddings = max_pos;
    cfg.eos_token_ids[0] = df_tokenizer_eos_id(tok);
    cfg.n_eos = 1;
    if (!strcmp(model_type, "gemma3_text")) /* a window of 8 on all but the last layer */
        df_test_gemma3(&cfg, 8, (uint64_t)1 << (layers - 1), 16);
    if (!strcmp(model_type, "qwen3_moe")) { /* every layer sparse: the top 2 of 4 experts, renormalised */
        cfg.qk_norm = true;
        cfg.num_experts = 4, cfg.num_experts_per_tok = 2, cfg.moe_intermediate_size = hidden;
        cfg.norm_topk_prob = true, cfg.decoder_sparse_step = 1;
    }
    if (!strcmp(model_type, "qwen2_moe")) { /* every layer sparse: 2 of 4 unnormalised, a shared expert */
        cfg.num_experts = 4, cfg.num_experts_per_tok = 2, cfg.moe_intermediate_size = hidden;
        cfg.shared_expert_intermediate_size = 2 * hidden, cfg.decoder_sparse_step = 1;
    }
    df_model *m;
    assert_int_equal(df_model_create(&cfg, &m), 0);
    assert_int_equal(df_model_init_random(m, seed), 0);
    assert_int_equal(df_hf_dir_save(m, DF_DTYPE_F32, NULL, NULL, model_dir), 0);
    df_model_free(m);
    free(model_dir);
}

/** dir/model: a random 2-layer `type` model (hidden 32) with the SentencePiece-style tokenizer of
 *  tests/fixtures/sp_tokenizers/llama2_legacy and the Llama 2 chat template. */
static inline void df_test_sp_model(const char *dir, const char *type)
{
    df_tokenizer *tok = NULL;
    assert_int_equal(df_tokenizer_load(DF_SOURCE_DIR "/tests/fixtures/sp_tokenizers/llama2_legacy", &tok), 0);
    char *tmpl = NULL;
    assert_int_equal(df_read_file(DF_SOURCE_DIR "/tests/fixtures/chat_templates/meta-llama-Llama-2-7b-chat-hf.jinja",
                                  &tmpl, NULL), 0);
    assert_int_equal(df_tokenizer_set_chat_template(tok, tmpl), 0);
    free(tmpl);
    df_test_random_model(dir, tok, type, 32, 2, 11, 4096);
    df_tokenizer_free(tok);
}

/**
 * A tokenizer (byte-level BPE of `vocab` tokens trained on texts[n]) and a random Qwen2 using it
 * (df_test_random_model), saved as an HF directory dir/model.
 */
static inline void df_test_tiny_model_ex(const char *dir, const char *const *texts, int n, int vocab,
                                         int hidden, int layers, uint64_t seed, int64_t max_pos)
{
    df_tokenizer *tok;
    assert_int_equal(df_tokenizer_train_bpe(texts, n, vocab, NULL, &tok), 0);
    df_test_random_model(dir, tok, "qwen2", hidden, layers, seed, max_pos);
    df_tokenizer_free(tok);
}

/** df_test_tiny_model_ex with Qwen2Config's 32768 positions: the tests' jobs configure prompts of
 *  up to 4096 tokens, and train / eval refuse lengths past a model's range (workers/common/max_pos.h). */
static inline void df_test_tiny_model(const char *dir, const char *const *texts, int n, int vocab,
                                      int hidden, int layers, uint64_t seed)
{
    df_test_tiny_model_ex(dir, texts, n, vocab, hidden, layers, seed, 32768);
}

/** max |a - b| over the parameters of two models of the same shape. */
static inline double df_test_max_param_diff(const df_model *a, const df_model *b)
{
    assert_int_equal(a->n_params, b->n_params);
    double d = 0;
    for (int64_t i = 0; i < a->n_params; i++)
        d = fmax(d, fabs((double)a->params[i] - b->params[i]));
    return d;
}

/** ||x||_2 of n floats, summed in double. */
static inline double df_test_norm2(const float *x, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

/** ||a - c b||_2 of n floats, in double. */
static inline double df_test_dist2(const float *a, double c, const float *b, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += ((double)a[i] - c * b[i]) * ((double)a[i] - c * b[i]);
    return sqrt(s);
}

/** The config of df_test_micro_model: a 2-layer Qwen2 (vocab 40, hidden 16, intermediate 32, 2 heads,
 *  1 KV head, head_dim 8, 64 positions). */
static inline df_model_config df_test_micro_model_config(void)
{
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.intermediate_size = 32;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 2;
    c.num_key_value_heads = 1;
    c.head_dim = 8;
    c.max_position_embeddings = 64;
    return c;
}

/** A random model of df_test_micro_model_config with no tokenizer. */
static inline df_model *df_test_micro_model(uint64_t seed)
{
    df_model_config c = df_test_micro_model_config();
    df_model *m;
    assert_int_equal(df_model_create(&c, &m), 0);
    assert_int_equal(df_model_init_random(m, seed), 0);
    return m;
}

/** The rollout tests' small model shape: vocabulary `vocab`, hidden 32, 2 layers, 4 / 2 heads of 8,
 *  untied, q/k/v biases, no EOS ids; initializer_range 0.15, peaked enough that sampling differs
 *  from greedy. */
static inline df_model_config df_test_rollout_config(int64_t vocab)
{
    df_model_config c;
    df_model_config_defaults(&c);
    c.vocab_size = vocab;
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 8;
    c.max_position_embeddings = 256;
    c.initializer_range = 0.15;
    c.tie_word_embeddings = false;
    c.attention_bias = true;
    c.n_eos = 0;
    return c;
}

/** A random model of config c (df_model_init_random(seed)) with non-zero k / v biases, so a
 *  bias dropped anywhere shows. */
static inline df_model *df_test_biased_model(const df_model_config *c, uint64_t seed)
{
    df_model *m = NULL;
    assert_int_equal(df_model_create(c, &m), 0);
    assert_int_equal(df_model_init_random(m, seed), 0);
    for (int64_t l = 0; l < c->num_hidden_layers; l++)
        for (int64_t i = 0; i < c->num_key_value_heads * c->head_dim; i++) {
            m->w.layers[l].bk[i] = 0.05f * (float)((i % 5) - 2);
            m->w.layers[l].bv[i] = 0.03f * (float)((i % 3) - 1);
        }
    return m;
}

/** A random model (df_model_init_random) with its vectors (norms, biases) moved by N(0, 0.1), so
 *  that every path carries signal (O(1) activations). */
static inline df_model *df_test_signal_model(const df_model_config *c, uint64_t seed)
{
    df_model *m;
    if (df_model_create(c, &m))
        fail_msg("df_model_create: %s", df_last_error());
    assert_int_equal(df_model_init_random(m, seed), DF_OK);
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 5, 0, 0));
    for (int t = 0; t < m->n_tensors; t++) {
        const df_param_desc *d = &m->tensors[t];
        for (int64_t i = 0; d->ndim == 1 && i < d->numel; i++)
            m->params[d->offset + i] += (float)(0.1 * df_rng_normal(&r));
    }
    return m;
}

/** Packed sequences (at most 8, 64 tokens in all): random tokens, every row but each sequence's
 *  last scored against the next token. */
typedef struct {
    int32_t tok[64], tgt[64];
    int64_t off[8], rows[64];
    df_seq_batch b;
} df_test_packed;

/** Fill p with n sequences of lengths len[n] (sum <= 64), ids below V, from seed. */
static inline void df_test_pack(df_test_packed *p, const int64_t *len, int n, int64_t V, uint64_t seed)
{
    df_rng r;
    df_rng_seed(&r, df_rng_key(seed, 9, 0, 0));
    int64_t t = 0, n_out = 0;
    p->off[0] = 0;
    for (int s = 0; s < n; s++) {
        for (int64_t i = 0; i < len[s]; i++)
            p->tok[t + i] = (int32_t)df_rng_below(&r, (uint64_t)V);
        for (int64_t i = 0; i + 1 < len[s]; i++) {
            p->rows[n_out] = t + i;
            p->tgt[n_out++] = p->tok[t + i + 1];
        }
        t += len[s];
        p->off[s + 1] = t;
    }
    p->b = (df_seq_batch){t, p->tok, n, p->off, n_out, p->rows, p->tgt, NULL, NULL};
}

/** 4 samples with prompts of 3,1,2,4 tokens and responses of 2,3,0,1 tokens (ids 1..16). */
static inline df_batch *df_test_small_batch(void)
{
    static const int64_t po[] = {0, 3, 4, 6, 10}, ro[] = {0, 2, 5, 5, 6};
    static const int32_t p[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, r[] = {11, 12, 13, 14, 15, 16};
    df_batch *b = df_batch_new(4);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, p), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, r), 0);
    return b;
}

/** G rows from `seed`: prompts of 1-4 tokens (ids < 40), responses of 0-5 (every fifth empty). */
static inline df_batch *df_test_synth_batch(uint64_t seed, int64_t G)
{
    df_rng rng;
    df_rng_seed(&rng, df_rng_key(seed, 1, 2, 3));
    int64_t *po = calloc((size_t)G + 1, sizeof *po), *ro = calloc((size_t)G + 1, sizeof *ro);
    int32_t *pt = malloc((size_t)G * 4 * sizeof *pt), *rt = malloc((size_t)G * 5 * sizeof *rt + 4);
    for (int64_t i = 0; i < G; i++) {
        po[i + 1] = po[i] + 1 + (int64_t)df_rng_below(&rng, 4);
        ro[i + 1] = ro[i] + (i % 5 == 3 ? 0 : 1 + (int64_t)df_rng_below(&rng, 5));
        for (int64_t t = po[i]; t < po[i + 1]; t++)
            pt[t] = (int32_t)df_rng_below(&rng, 40);
        for (int64_t t = ro[i]; t < ro[i + 1]; t++)
            rt[t] = (int32_t)df_rng_below(&rng, 40);
    }
    df_batch *b = df_batch_new(G);
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, pt), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, rt), 0);
    free(po), free(ro), free(pt), free(rt);
    return b;
}

/**
 * GRPO test inputs in `dir`: `name` (e.g. "train.jsonl") with n <= 64 arithmetic
 * prompts "Add i and 2i+1. What do you get?" (ground truth 3i+1, data_source
 * `source`), and — when with_model — a tiny model trained on those prompts
 * (vocab 300, hidden 32, 2 layers, seed 7) in dir/model.
 */
static inline void df_test_digits_inputs(const char *dir, const char *name, int n, const char *source,
                                         bool with_model)
{
    char line[512], *data = calloc(1, 64 * 512);
    const char *texts[64];
    char store[64][128];
    assert_true(data && n <= 64);
    for (int i = 0; i < n; i++) {
        snprintf(store[i], sizeof store[i], "Add %d and %d. What do you get?", i, 2 * i + 1);
        texts[i] = store[i];
        int w = snprintf(line, sizeof line,
                         "{\"data_source\": \"%s\", \"prompt\": [{\"role\": \"user\", \"content\": "
                         "\"%s\"}], \"reward_model\": {\"style\": \"rule\", \"ground_truth\": \"%d\"}}\n",
                         source, store[i], 3 * i + 1);
        assert_true(w < (int)sizeof line);
        strcat(data, line);
    }
    char *path = df_path_join(dir, name);
    assert_int_equal(df_write_file_atomic(path, data, strlen(data)), 0);
    free(path);
    free(data);
    if (with_model)
        df_test_tiny_model(dir, texts, n, 300, 32, 2, 7);
}

/** df_test_digits_inputs with its model in dir/model, and a second model of the same shape and
 *  tokenizer but other weights (seed 11) in dir/b/model: two agent groups' models. */
static inline void df_test_two_models(const char *dir)
{
    df_test_digits_inputs(dir, "train.jsonl", 8, "test/digits", true);
    const char *texts[8];
    char store[8][128], b[1024];
    for (int i = 0; i < 8; i++) { /* df_test_digits_inputs' prompts: the same tokenizer */
        snprintf(store[i], sizeof store[i], "Add %d and %d. What do you get?", i, 2 * i + 1);
        texts[i] = store[i];
    }
    snprintf(b, sizeof b, "%s/b", dir);
    assert_int_equal(df_mkdir_p(b), 0);
    df_test_tiny_model(b, texts, 8, 300, 32, 2, 11);
}

/** A deep copy of m (free with df_model_free); fails the test when it cannot be made. */
static inline df_model *df_test_model_copy(const df_model *m)
{
    df_model *c = NULL;
    assert_int_equal(df_model_clone(m, &c), 0);
    return c;
}

/** Whether a and b hold bit-identical parameters. */
static inline bool df_test_same_params(const df_model *a, const df_model *b)
{
    return a->n_params == b->n_params && !memcmp(a->params, b->params, (size_t)a->n_params * sizeof *a->params);
}

/** Files a and b have the same bytes (the test fails naming them otherwise). */
static inline void df_test_same_file(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t na = 0, nb = 0;
    if (df_read_file(a, &x, &na) || df_read_file(b, &y, &nb))
        fail_msg("%s", df_last_error());
    if (na != nb || memcmp(x, y, na))
        fail_msg("%s and %s differ (%zu and %zu bytes)", a, b, na, nb);
    free(x);
    free(y);
}

/** PPO inputs on batch b, whose old_log_probs are a model's: the old log-probs moved off it, a
 *  reference beside them and advantages of both signs, per response token (ratios, clips and the
 *  KL all take part). */
static inline void df_test_ppo_columns(df_batch *b)
{
    float *old = df_batch_data_mut(b, "old_log_probs"), *ref, *adv;
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "ref_log_prob", "response_ids", &ref), 0);
    assert_int_equal(df_batch_alloc_tok_f32_like(b, "advantages", "response_ids", &adv), 0);
    const int64_t T = df_batch_offsets(b, "response_ids")[df_batch_size(b)];
    for (int64_t t = 0; t < T; t++) {
        old[t] += 0.05f * (float)(t % 3 - 1);
        ref[t] = old[t] + 0.03f * (float)(t % 5 - 2);
        adv[t] = (float)(t % 4) - 1.3f;
    }
}

/** Whether metric `key` is finite in a and the same bits in b (updates that must agree to the bit). */
static inline bool df_test_same_metric(const df_metrics *a, const df_metrics *b, const char *key)
{
    double x = df_metrics_get(a, key, NAN), y = df_metrics_get(b, key, NAN);
    return isfinite(x) && memcmp(&x, &y, sizeof x) == 0;
}

/** Whether a metrics line's `key` depends on the clock (timestamp, timing_s/..., timing_per_token_ms/...,
 *  perf/...): runs that must agree are compared without these. */
static inline bool df_test_clock_metric(const char *key)
{
    return !strcmp(key, "timestamp") || !strncmp(key, "timing_s/", 9) || !strncmp(key, "timing_per_token_ms/", 20) ||
           !strncmp(key, "perf/", 5);
}

/** The number `key` of a metrics line (or any JSON object); the test fails when it is missing. */
static inline double df_test_metric(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        fail_msg("metric %s missing", key);
    return json_number_value(v);
}

/**
 * A directory every rank of `world` shares: rank 0 makes "/tmp/<prefix>_XXXXXX" with `rows` digit
 * prompts of `source` in train.jsonl and the tiny model (df_test_digits_inputs), then its name is
 * broadcast into dir[cap] (cap bytes, the same on every rank). 0, or -1 when a step fails.
 */
static inline int df_test_shared_inputs(df_comm *world, const char *prefix, int rows, const char *source,
                                        char *dir, size_t cap)
{
    if (df_comm_rank(world) == 0) {
        snprintf(dir, cap, "/tmp/%s_XXXXXX", prefix);
        if (!mkdtemp(dir))
            return -1;
        df_test_digits_inputs(dir, "train.jsonl", rows, source, true);
    }
    return df_comm_broadcast(world, dir, cap, 0) ? -1 : 0;
}

/** The end of a test that used df_test_shared_inputs: every rank done, rank 0 removes dir, then
 *  df_comm_shutdown's status. */
static inline int df_test_shared_cleanup(df_comm *world, const char *dir)
{
    df_comm_barrier(world);
    if (df_comm_rank(world) == 0)
        df_test_remove_tree(dir);
    return df_comm_shutdown();
}

/**
 * The lines of step `step`'s rollout dumps in dir/<out>/rollouts (trainer.rollout_data_dir: one
 * <step>.jsonl, or one <step>.dp<d>.jsonl per data-parallel rank), each parsed, in a JSON array
 * (caller frees); a line that does not parse fails the test. *files (may be NULL): how many files.
 */
static inline json_t *df_test_rollout_dumps(const char *dir, const char *out, int step, int *files)
{
    char rdir[512], one[32], prefix[32];
    snprintf(rdir, sizeof rdir, "%s/%s/rollouts", dir, out);
    snprintf(one, sizeof one, "%d.jsonl", step);
    snprintf(prefix, sizeof prefix, "%d.dp", step);
    DIR *d = opendir(rdir);
    assert_non_null(d);
    json_t *rows = json_array();
    if (files)
        *files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, one) && strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        if (files)
            (*files)++;
        char path[1024], *text = NULL;
        snprintf(path, sizeof path, "%s/%s", rdir, e->d_name);
        assert_int_equal(df_read_file(path, &text, NULL), 0);
        for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
            json_t *o = json_loads(l, 0, NULL);
            if (!o)
                fail_msg("%s: a line does not parse", path);
            json_array_append_new(rows, o);
        }
        free(text);
    }
    closedir(d);
    return rows;
}

/**
 * The lines of dir/out/metrics.jsonl as a JSON array (caller frees); each line
 * must parse and, when `numbered`, line i must have "step" i + 1.
 */
static inline json_t *df_test_metrics(const char *dir, const char *out, bool numbered)
{
    char path[1024], *text;
    snprintf(path, sizeof path, "%s/%s/metrics.jsonl", dir, out);
    assert_int_equal(df_read_file(path, &text, NULL), 0);
    json_t *lines = json_array();
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        json_t *o = json_loads(l, 0, NULL);
        if (!o)
            fail_msg("%s line %zu does not parse", path, json_array_size(lines) + 1);
        if (numbered)
            assert_int_equal(json_integer_value(json_object_get(o, "step")), json_array_size(lines) + 1);
        json_array_append_new(lines, o);
    }
    free(text);
    return lines;
}

/* A model directory of this checkout for the commands that read only config.json (df_train_check:
 * plan, config check): the tiny golden Qwen2's config with Qwen2Config's 32768 positions (the golden
 * one's 128 is below the example configs' lengths, which the check refuses). */
#define DF_TEST_MODEL_DIR DF_SOURCE_DIR "/tests/fixtures/tiny_qwen2_config"

/* Command-line overrides pointing an example config at a model and data of this checkout, for the
 * commands that check the run's files (df_train_check: plan, config check): DF_TEST_MODEL_DIR and
 * four GSM8K-style rows (data_source openai/gsm8k) as training and validation data. */
#define DF_TEST_FILES                                                                                  \
    " actor_rollout_ref.model.path=" DF_TEST_MODEL_DIR " data.train_files=["                        \
    DF_SOURCE_DIR "/tests/fixtures/gsm8k_rows.jsonl] data.val_files=[" DF_SOURCE_DIR                 \
    "/tests/fixtures/gsm8k_rows.jsonl]"

/** A train config from YAML text (`name` in errors) plus n overrides; fails the test on error. */
static inline df_config *df_test_config(const char *yaml, const char *name, const char *const *ov, int n)
{
    /* The fixtures' values were computed in float32, and rollout-vs-actor checks use float32
       bounds (a bf16 rollout's logits alone move a log-prob by ~1e-2): pinned here, ahead of the
       caller's overrides (a test of mixed precision, the default where the CPU has bf16 kernels,
       sets them back). */
    static const char *const fp32[] = {
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp32",
        "critic.model.fsdp_config.mixed_precision.param_dtype=fp32",
        "reward_model.model.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.rollout.dtype=float32"};
    const int np = (int)(sizeof fp32 / sizeof fp32[0]);
    const char **all = calloc((size_t)(np + n), sizeof *all);
    assert_non_null(all);
    for (int i = 0; i < np; i++)
        all[i] = fp32[i];
    for (int i = 0; i < n; i++)
        all[np + i] = ov[i];
    df_config *cfg;
    int rc = df_config_load_text(df_config_schema_train(), yaml, name, all, np + n, &cfg);
    free(all);
    if (rc)
        fail_msg("%s", df_last_error());
    return cfg;
}

/** Run `distflow train` in-process on `cfg` (consumed): create the DAG worker on
    `comm` (NULL: rank 0 of 1), fit, free. Returns the status of create or fit. */
static inline int df_test_run(df_comm *comm, df_config *cfg)
{
    df_dag_worker *w = NULL;
    int rc = df_dag_worker_create(cfg, comm, &w);
    if (!rc)
        rc = df_dag_worker_fit(w);
    df_dag_worker_free(w);
    df_config_free(cfg);
    return rc;
}

/**
 * A run that had to succeed returned `rc` (0: nothing to do; `what` names it in the message). Else
 * this rank's error is printed and, in a job of more than one rank, the whole job ends now with
 * MPI_Abort (df_comm_abort, as `distflow train` does): the other ranks would wait in the run's
 * collectives until trainer.collective_timeout_s, or in the next test's, and a failed asynchronous
 * run leaves posted requests that MPI_Finalize in the group teardown waits for forever, so the test
 * would hang instead of failing. On one rank the test fails (fail_msg).
 */
static inline void df_test_run_ok(int rc, const char *what)
{
    if (!rc)
        return;
    df_comm *world = NULL;
    if (!df_comm_world(&world) && df_comm_size(world) > 1) {
        fprintf(stderr, "ERROR: rank %d of %d: %s: %s (ending the MPI job)\n", df_comm_rank(world),
                df_comm_size(world), what, df_last_error());
        fflush(stderr);
        df_comm_abort(1);
    }
    fail_msg("%s: %s", what, df_last_error());
}

/** df_test_run on rank 0 of 1 for YAML text (`name` in errors); fails the test on error. */
static inline void df_test_fit(const char *yaml, const char *name)
{
    if (df_test_run(NULL, df_test_config(yaml, name, NULL, 0)))
        fail_msg("%s", df_last_error());
}

#endif
