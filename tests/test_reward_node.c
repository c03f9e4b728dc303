/*
 * The reward node's reward-model mode (reward_model.enable; src/workers/reward/rm_score.c,
 * reward_node.c):
 *   - rm_scores of a batch split from tests/golden/tiny_qwen2_rm_expected.safetensors
 *     (prompt ++ response = the reference's sequences): the reference's score at each last
 *     response token, zero elsewhere, nothing for an empty response; the reference's
 *     scores in another order fail; df_worker_reward's token_level_scores / _rewards /
 *     score are rm_scores and no rule score or acc is computed (verl's managers return
 *     rm_scores as they are);
 *   - re-templating with input_tokenizer (verl _switch_chat_template): the response
 *     decoded with the actor's tokenizer (its eos text removed), appended to raw_prompt's
 *     messages, rendered with the reward model's own template and encoded by its own
 *     tokenizer, cut at max_length; the score is the model's on exactly those ids;
 *   - a GRPO step with reward_model.enable on a tiny model: rewards come from the reward model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testgolden.h"
#include "testutil.h"

#include "distflow/tokenizer.h"
#include "engine/hf_dir.h"
#include "testbounds.h"
#include "util/fsutil.h"
#include "workers/worker_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GOLDEN_DIR DF_SOURCE_DIR "/tests/golden"

/* The golden sequences as rows (prompt = the first prompt_lens[i] tokens), plus a row with an
   empty response (its prompt: sequence 0's) after them. */
static df_batch *golden_rows(const df_golden_batch *g)
{
    int64_t n;
    float *pl = df_golden_read_vec(g->exp, "batch.prompt_lens", &n);
    assert_int_equal(n, g->n_seqs);
    df_batch *b = df_batch_new(g->n_seqs + 1);
    int64_t po[8] = {0}, ro[8] = {0};
    int32_t pt[128], rt[128];
    for (int64_t i = 0; i <= g->n_seqs; i++) {
        int64_t s = i < g->n_seqs ? i : 0, p = (int64_t)pl[s], len = g->offsets[s + 1] - g->offsets[s];
        int64_t r = i < g->n_seqs ? len - p : 0;
        memcpy(pt + po[i], g->tokens + g->offsets[s], (size_t)p * sizeof *pt);
        memcpy(rt + ro[i], g->tokens + g->offsets[s] + p, (size_t)r * sizeof *rt);
        po[i + 1] = po[i] + p, ro[i + 1] = ro[i] + r;
    }
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, pt), DF_OK);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, rt), DF_OK);
    free(pl);
    return b;
}

/* Relative L2 error of the last-token values of rm_scores against want[0..n) (after checking that
   every other entry is exactly 0 and the empty row has none). */
static double last_token_error(const df_batch *b, const char *col, const float *want, int64_t n)
{
    const df_column *c = df_batch_column(b, col);
    assert_non_null(c);
    float got[8];
    for (int64_t i = 0; i < n; i++) {
        int64_t s = c->offsets[i], e = c->offsets[i + 1];
        assert_true(e > s);
        for (int64_t t = s; t < e - 1; t++)
            assert_true(((const float *)c->data)[t] == 0.0f);
        got[i] = ((const float *)c->data)[e - 1];
    }
    assert_int_equal(c->offsets[n + 1], c->offsets[n]); /* the empty response */
    return df_golden_rel_err(got, want, n);
}

static void test_rm_scores_golden(void **state)
{
    (void)state;
    df_golden_batch g;
    df_golden_batch_load(&g, GOLDEN_DIR "/tiny_qwen2_rm_expected.safetensors");
    float *want = df_golden_read_vec(g.exp, "scores", NULL);
    df_reward_model_params p = {.micro_batch_size = 2};
    df_reward_model *rm;
    if (df_reward_model_load(GOLDEN_DIR "/tiny_qwen2_rm", &p, &rm))
        fail_msg("%s", df_last_error());
    const double tol = df_golden_tol(tb_head_chain(&df_reward_model_model(rm)->cfg, df_golden_max_len(&g)));
    df_batch *b = golden_rows(&g);
    df_rm_scorer s = {.model = rm};
    assert_int_equal(df_rm_score_batch(&s, b), DF_OK);
    double e = last_token_error(b, "rm_scores", want, g.n_seqs);
    print_message("rm_scores rel err %.2e, bound %.2e\n", e, tol);
    assert_true(e <= tol);
    /* The reference's scores with rows 2 and 3 swapped do not pass. */
    float sw[4];
    memcpy(sw, want, sizeof sw);
    sw[2] = want[3], sw[3] = want[2];
    assert_true(last_token_error(b, "rm_scores", sw, g.n_seqs) > tol);

    /* The reward node: the manager returns rm_scores (verl naive / dapo with rm_scores). */
    df_dag_worker w = {0};
    w.reward.rm = rm;
    w.reward.scorer = s;
    w.reward.cfg.manager = "naive";
    df_batch *b2 = golden_rows(&g);
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_worker_reward(&w, NULL, b2, m), DF_OK);
    assert_true(last_token_error(b2, "token_level_scores", want, g.n_seqs) <= tol);
    assert_true(last_token_error(b2, "token_level_rewards", want, g.n_seqs) <= tol);
    const float *score = df_batch_f32(b2, "score");
    for (int64_t i = 0; i < g.n_seqs; i++)
        assert_true(fabs(score[i] - want[i]) <= tol * 4);
    assert_true(score[g.n_seqs] == 0.0f);
    assert_false(df_batch_has(b2, "acc")); /* no rule scorer ran (its data_source would be unknown) */
    assert_true(isnan(df_metrics_get(m, "critic/acc/mean", NAN)));
    df_metrics_free(m);
    df_batch_free(b2);
    df_batch_free(b);
    df_reward_model_free(rm);
    free(want);
    df_golden_batch_free(&g);
}

/* ---- re-templating with input_tokenizer --------------------------------------------------- */

static const char *const TEXTS[] = {"Add 1 and 3. What do you get?", "The answer is 4.", "Add 2 and 5.",
                                    "What do you get? It is 7."};

/* A tiny reward model with its own tokenizer (another vocabulary) and template in dir/model. */
static void rm_dir(const char *dir)
{
    df_test_tiny_model(dir, TEXTS, 4, 280, 16, 1, 11);
    char *md = df_path_join(dir, "model");
    df_model *m;
    df_tokenizer *tok;
    assert_int_equal(df_hf_dir_load(md, NULL, NULL, &m, &tok), DF_OK);
    assert_int_equal(df_model_to_value_model(&m, 5), DF_OK);
    assert_int_equal(df_tokenizer_set_chat_template(
                         tok, "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"),
                     DF_OK);
    assert_int_equal(df_model_save(m, md, DF_DTYPE_F32, 0), DF_OK);
    assert_int_equal(df_tokenizer_save(tok, md), DF_OK);
    df_model_free(m);
    df_tokenizer_free(tok);
    free(md);
}

static void test_retemplate(void **state)
{
    const char *dir = *state;
    rm_dir(dir);
    char *md = df_path_join(dir, "model");
    df_reward_model_params p = {.micro_batch_size = 1};
    df_reward_model *rm;
    df_tokenizer *rm_tok, *actor_tok;
    assert_int_equal(df_reward_model_load(md, &p, &rm), DF_OK);
    assert_int_equal(df_tokenizer_load(md, &rm_tok), DF_OK);
    const char *const texts[] = {"Add 1 and 3.", "4 is the answer"};
    assert_int_equal(df_tokenizer_train_bpe(texts, 2, 300, NULL, &actor_tok), DF_OK);

    /* One row: a prompt (its ids are not read), a response "The answer is 4." then the eos. */
    int32_t *r;
    int64_t nr;
    assert_int_equal(df_tokenizer_encode(actor_tok, "The answer is 4.<|im_end|>", false, &r, &nr), DF_OK);
    assert_true(df_tokenizer_is_eos(actor_tok, r[nr - 1]));
    df_batch *b = df_batch_new(1);
    int64_t po[2] = {0, 1}, ro[2] = {0, nr};
    int32_t pid[1] = {3};
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", po, pid), DF_OK);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", ro, r), DF_OK);
    const char *raw[1] = {"[{\"role\": \"user\", \"content\": \"Add 1 and 3. What do you get?\"}]"};
    assert_int_equal(df_batch_set_str(b, "raw_prompt", raw), DF_OK);

    /* What the reward model must read: its own template over the messages, its own ids. */
    const char *want_text = "[user] Add 1 and 3. What do you get?\n[assistant] The answer is 4.\n";
    int32_t *want;
    int64_t nw;
    assert_int_equal(df_tokenizer_encode(rm_tok, want_text, false, &want, &nw), DF_OK);
    df_rm_scorer s = {.model = rm, .input_tok = actor_tok, .rm_tok = rm_tok, .max_length = 100};
    int32_t *ids;
    int64_t n;
    assert_int_equal(df_rm_input(&s, b, 0, &ids, &n), DF_OK);
    assert_int_equal(n, nw);
    assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
    free(ids);
    /* max_length keeps the first tokens (verl's right truncation). */
    s.max_length = 5;
    assert_int_equal(df_rm_input(&s, b, 0, &ids, &n), DF_OK);
    assert_int_equal(n, 5);
    assert_memory_equal(ids, want, 5 * sizeof *ids);
    free(ids);
    /* The score placed at the last response token is the model's on those ids. */
    s.max_length = 100;
    assert_int_equal(df_rm_score_batch(&s, b), DF_OK);
    float direct;
    int64_t off[2] = {0, nw};
    assert_int_equal(df_reward_model_score(rm, 1, off, want, &direct), DF_OK);
    const float *got = df_batch_column(b, "rm_scores")->data;
    assert_true(got[nr - 1] == direct);
    for (int64_t t = 0; t < nr - 1; t++)
        assert_true(got[t] == 0.0f);
    /* Without raw_prompt there is nothing to re-template: the row is named. */
    df_batch *nb = df_batch_new(1);
    assert_int_equal(df_batch_set_tok_i32(nb, "prompt_ids", po, pid), DF_OK);
    assert_int_equal(df_batch_set_tok_i32(nb, "response_ids", ro, r), DF_OK);
    assert_error_mentions(df_rm_score_batch(&s, nb), DF_EINVAL, "row 0 has no raw_prompt");
    df_batch_free(nb);
    free(want), free(r), free(md);
    df_batch_free(b);
    df_tokenizer_free(rm_tok);
    df_tokenizer_free(actor_tok);
    df_reward_model_free(rm);
}

/* ---- a GRPO step scored by a reward model ------------------------------------------------- */

/* The rollout dump of step 1 in dir/out: rows, and how many scores are neither 0 nor 1 (a rule
   scorer's values); fails on a row with the rule scorer's acc. */
static int dumped_scores(const char *dir, int *non_binary)
{
    char path[1024], *text = NULL;
    snprintf(path, sizeof path, "%s/out/rollouts/1.jsonl", dir);
    assert_int_equal(df_read_file(path, &text, NULL), DF_OK);
    int rows = 0;
    *non_binary = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), rows++) {
        json_t *o = json_loads(l, 0, NULL);
        assert_non_null(o);
        double sc = json_number_value(json_object_get(o, "score"));
        *non_binary += sc != 0.0 && sc != 1.0;
        assert_null(json_object_get(o, "acc"));
        json_decref(o);
    }
    free(text);
    return rows;
}

static void test_grpo_with_reward_model(void **state)
{
    const char *dir = *state;
    df_test_digits_inputs(dir, "train.jsonl", 8, "openai/gsm8k", true);
    /* the reward model: the actor's trunk with a random score head, its tokenizer beside */
    char *md = df_path_join(dir, "model"), *rd = df_path_join(dir, "rm");
    df_model *m;
    assert_int_equal(df_hf_dir_load(md, NULL, NULL, &m, NULL), DF_OK);
    assert_int_equal(df_model_to_value_model(&m, 9), DF_OK);
    m->w.score_weight[0] += 3.0f; /* scores well away from 0 and 1 */
    assert_int_equal(df_hf_dir_save(m, DF_DTYPE_F32, md, NULL, rd), DF_OK);
    df_model_free(m);
    char yaml[4096];
    snprintf(
        yaml, sizeof yaml,
        "data: {train_files: [%s/train.jsonl], val_files: [%s/train.jsonl], train_batch_size: 4,\n"
        "       max_prompt_length: 128, max_response_length: 6}\n"
        "actor_rollout_ref:\n"
        "  model: {path: %s}\n"
        "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
        "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
        "reward_model: {enable: true, model: {path: %s, input_tokenizer: %s}, micro_batch_size_per_gpu: 3}\n"
        "algorithm: {adv_estimator: grpo}\n"
        "trainer: {total_training_steps: 1, test_freq: -1, val_before_train: false, logger: [],\n"
        "          default_local_dir: %s/out, rollout_data_dir: %s/out/rollouts}\n",
        dir, dir, md, rd, md, dir, dir);
    df_test_fit(yaml, "rm.yaml");
    int nb;
    assert_int_equal(dumped_scores(dir, &nb), 8);
    print_message("re-templated: %d of 8 scores are not 0 / 1\n", nb);
    assert_true(nb >= 6);
    /* input_tokenizer null: the actor's ids as they are, micro-batched by tokens */
    char yaml2[4096];
    snprintf(yaml2, sizeof yaml2, "%s", yaml);
    char *at = strstr(yaml2, "input_tokenizer: ");
    assert_non_null(at);
    memcpy(at, "input_tokenizer: null", strlen("input_tokenizer: null"));
    char *end = strchr(at + strlen("input_tokenizer: null"), '}');
    memmove(at + strlen("input_tokenizer: null"), end, strlen(end) + 1);
    df_config *c = df_test_config(yaml2, "rm2.yaml",
                                  (const char *const[]){"reward_model.use_dynamic_bsz=true",
                                                        "reward_model.forward_max_token_len_per_gpu=64"},
                                  2);
    if (df_test_run(NULL, c))
        fail_msg("%s", df_last_error());
    assert_int_equal(dumped_scores(dir, &nb), 8);
    assert_true(nb >= 6);
    /* reward_model.model.fsdp_config.mixed_precision.param_dtype reaches the reward model: bf16
       (verl's, the default) where this CPU has bf16 kernels, fp32 (df_test_config's pin) otherwise */
    for (int bf16 = 0; bf16 < 2; bf16++) {
        c = df_test_config(yaml, "rm7.yaml", (const char *const[]){
            bf16 ? "reward_model.model.fsdp_config.mixed_precision.param_dtype=bf16"
                 : "reward_model.model.fsdp_config.mixed_precision.param_dtype=fp32"}, 1);
        df_dag_worker *w = NULL;
        if (df_dag_worker_create(c, NULL, &w))
            fail_msg("%s", df_last_error());
        assert_true(df_reward_model_bf16(w->reward.rm) == (bf16 && df_model_bf16_available() == DF_OK));
        df_dag_worker_free(w), df_config_free(c);
    }
    /* Training rows no rule scorer knows are scored by the reward model (validation still needs one). */
    df_test_digits_inputs(dir, "unscored.jsonl", 8, "test/no_rule_scorer", false);
    char files[1200];
    snprintf(files, sizeof files, "data.train_files=[%s/unscored.jsonl]", dir);
    c = df_test_config(yaml, "rm3.yaml", (const char *const[]){files}, 1);
    if (df_test_run(NULL, c))
        fail_msg("%s", df_last_error());
    /* A missing reward model directory is refused before the run, naming the key; a causal LM
       when the worker loads it. */
    c = df_test_config(yaml, "rm4.yaml", (const char *const[]){"reward_model.model.path=/nonexistent/rm"}, 1);
    assert_int_equal(df_test_run(NULL, c), DF_ENOTFOUND);
    assert_last_error_mentions("reward_model.model.path=/nonexistent/rm");
    /* Without input_tokenizer the reward model must cover the actor's ids (97 < 300 here). */
    const char *small[] = {"reward_model.model.path=" GOLDEN_DIR "/tiny_qwen2_rm",
                           "reward_model.model.input_tokenizer=null",
                           "data.max_prompt_length=120"}; /* + 6: within its 128 positions */
    c = df_test_config(yaml, "rm6.yaml", small, 3);
    assert_int_equal(df_test_run(NULL, c), DF_EINVAL);
    assert_last_error_mentions("vocab_size 97 is below the actor tokenizer's");
    snprintf(files, sizeof files, "reward_model.model.path=%s", md);
    c = df_test_config(yaml, "rm5.yaml", (const char *const[]){files}, 1);
    assert_int_equal(df_test_run(NULL, c), DF_EUNSUPPORTED);
    assert_last_error_mentions("is not a reward model");
    assert_last_error_mentions("reward_model.model.path");
    free(md), free(rd);
}

/* The checks of df_config_validate_train for reward_model.enable. */
static void test_validate_keys(void **state)
{
    (void)state;
    static const char *BASE = "data: {train_batch_size: 8}\n"
                              "actor_rollout_ref:\n"
                              "  actor: {ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 8}\n"
                              "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
                              "algorithm: {adv_estimator: grpo}\n";
    const char *cases[][3] = {
        /* each with reward_model.enable=true: an override, the error's two phrases (NULL: valid) */
        {"reward_model.enable=true", "reward_model.micro_batch_size_per_gpu", "reward_model.enable=true"},
        {"reward_model.micro_batch_size=4", NULL, NULL}, /* the deprecated global size: below */
        {"reward_model.use_dynamic_bsz=true", NULL, NULL},
        {"reward_model.micro_batch_size_per_gpu=2", NULL, NULL},
        {"algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric='acc'", "gives no acc"},
    };
    for (int i = 0; i < 5; i++) {
        const char *ov[3] = {"reward_model.enable=true", cases[i][0],
                             i == 4 ? "reward_model.micro_batch_size_per_gpu=2"
                                    : "reward_model.forward_max_token_len_per_gpu=64"};
        df_config *c;
        if (df_config_load_text(df_config_schema_train(), BASE, "rm.yaml", i ? ov : ov + 1, i ? 3 : 2, &c))
            fail_msg("%s", df_last_error());
        int rc = df_config_validate_train(c, 1);
        if (i == 1) {
            assert_error_mentions(rc, DF_EINVAL, "reward_model.micro_batch_size=4");
            assert_last_error_mentions("deprecated");
        } else if (cases[i][1]) {
            assert_error_mentions(rc, DF_EINVAL, cases[i][1]);
            assert_last_error_mentions(cases[i][2]);
        } else if (rc) {
            fail_msg("case %d: %s", i, df_last_error());
        }
        df_config_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rm_scores_golden),
        cmocka_unit_test(test_validate_keys),
        cmocka_unit_test_setup_teardown(test_retemplate, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_grpo_with_reward_model, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
