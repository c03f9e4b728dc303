/*
 * The dapo reward manager (verl DAPORewardManager: naive scoring plus DAPO's
 * overlong penalty), the choice of manager, and the validator's warnings on
 * algorithm and reward settings (df_config_validate_train_ex, and through
 * `distflow config check`).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/config.h"
#include "distflow/reward.h"
#include "workers/worker_internal.h"


/* max_resp_len 20, buffer 5 tokens, factor 1: no penalty up to 15 tokens, then -0.2 per token. */
static const df_overlong_buffer_cfg OB = {.enable = true, .len = 5, .penalty_factor = 1.0};

/* The penalty is -(len - expected) / buffer * factor in double: one correctly rounded division
   of integers (the same double as the decimal literal) times an exact factor (1, 0.5, -0.7
   copied), so every value below is exact; the rewards add exact halves to 0 or 1. */
static void test_penalty_by_length(void **state)
{
    (void)state;
    assert_near(df_reward_overlong_penalty(&OB, 20, 0), 0.0, 0);
    assert_near(df_reward_overlong_penalty(&OB, 20, 10), 0.0, 0); /* below the buffer */
    assert_near(df_reward_overlong_penalty(&OB, 20, 15), 0.0, 0); /* at expected_len: exceed 0 */
    assert_near(df_reward_overlong_penalty(&OB, 20, 16), -0.2, 0); /* inside: -(16-15)/5 */
    assert_near(df_reward_overlong_penalty(&OB, 20, 18), -0.6, 0);
    assert_near(df_reward_overlong_penalty(&OB, 20, 20), -1.0, 0); /* at the limit: -factor */
    assert_near(df_reward_overlong_penalty(&OB, 20, 22), -1.4, 0); /* beyond: unclipped, as verl */
    /* the factor scales the ramp */
    df_overlong_buffer_cfg half = OB;
    half.penalty_factor = 0.5;
    assert_near(df_reward_overlong_penalty(&half, 20, 18), -0.3, 0);
    assert_near(df_reward_overlong_penalty(&half, 20, 20), -0.5, 0);
    half.penalty_factor = 0.0;
    assert_near(df_reward_overlong_penalty(&half, 20, 20), 0.0, 0);
    /* disabled or absent: no penalty at any length */
    df_overlong_buffer_cfg off = OB;
    off.enable = false;
    assert_near(df_reward_overlong_penalty(&off, 20, 20), 0.0, 0);
    assert_near(df_reward_overlong_penalty(NULL, 20, 20), 0.0, 0);
    /* a buffer longer than max_resp_len: expected_len < 0, every response is penalised (verl warns) */
    df_overlong_buffer_cfg big = {.enable = true, .len = 20, .penalty_factor = 1.0};
    assert_near(df_reward_overlong_penalty(&big, 10, 0), -0.5, 0); /* -(0 - (-10)) / 20 */
    assert_near(df_reward_overlong_penalty(&big, 10, 10), -1.0, 0);
}

/* len 0: verl would divide by zero; distflow takes the ramp's limit, a step at max_resp_len. */
static void test_penalty_zero_length_buffer(void **state)
{
    (void)state;
    df_overlong_buffer_cfg z = {.enable = true, .len = 0, .penalty_factor = 0.7};
    assert_near(df_reward_overlong_penalty(&z, 20, 0), 0.0, 0);
    assert_near(df_reward_overlong_penalty(&z, 20, 19), 0.0, 0);
    assert_near(df_reward_overlong_penalty(&z, 20, 20), -0.7, 0);
    assert_near(df_reward_overlong_penalty(&z, 20, 25), -0.7, 0);
    assert_true(isfinite(df_reward_overlong_penalty(&z, 1, 1)));
}

/* 4 rows of synthetic/arithmetic, response lengths 3, 6, 0, 8 (max_resp_len 8). */
static df_batch *batch4(void)
{
    df_batch *b = df_batch_new(4);
    const int64_t off[] = {0, 3, 9, 9, 17};
    int32_t ids[17] = {0};
    const char *src[] = {"synthetic/arithmetic", "synthetic/arithmetic", "synthetic/arithmetic",
                         "synthetic/arithmetic"};
    const char *gt[] = {"7", "7", "7", "7"};
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", off, ids), 0);
    assert_int_equal(df_batch_set_str(b, "data_source", src), 0);
    assert_int_equal(df_batch_set_str(b, "ground_truth", gt), 0);
    return b;
}

/* right, wrong, right (empty response), right */
static const char *const RESP[] = {"#### 7", "#### 8", "#### 7", "#### 7"};

static float last_token(const df_batch *b, int64_t i)
{
    int64_t len;
    const float *t = df_batch_tok_f32(b, "token_level_scores", i, &len);
    assert_true(len > 0);
    return t[len - 1];
}

static void test_dapo_manager_batch(void **state)
{
    (void)state;
    df_batch *b = batch4();
    /* max 8, buffer 4: expected 4; lengths 3 -> 0, 6 -> -0.5, 8 -> -1 (factor 1) */
    df_reward_manager_cfg cfg = {.manager = "dapo",
                                 .max_resp_len = 8,
                                 .overlong_buffer = {.enable = true, .len = 4, .penalty_factor = 1.0}};
    float scores[4], acc[4], over[4];
    int64_t empty = -1;
    assert_int_equal(df_reward_dapo(&cfg, b, RESP, scores, acc, over, &empty), 0);
    assert_int_equal(empty, 1);
    const float want_scores[] = {1, 0, 1, 1}; /* the scorer's score, without the penalty */
    assert_memory_equal(scores, want_scores, sizeof scores);
    assert_memory_equal(acc, want_scores, sizeof acc); /* acc from the raw score */
    assert_near(over[0], 0.0, 0);
    assert_near(over[1], -0.5, 0);
    assert_near(over[2], 0.0, 0); /* empty: exceed = 0 - 4 < 0 */
    assert_near(over[3], -1.0, 0);
    assert_near(last_token(b, 0), 1.0, 0);
    assert_near(last_token(b, 1), -0.5, 0); /* 0 + -0.5 */
    assert_near(last_token(b, 3), 0.0, 0);  /* 1 + -1 */
    int64_t len;
    const float *t = df_batch_tok_f32(b, "token_level_scores", 1, &len);
    for (int64_t j = 0; j + 1 < len; j++)
        assert_true(t[j] == 0.0f); /* only the last token carries the reward */
    df_batch_tok_f32(b, "token_level_scores", 2, &len);
    assert_int_equal(len, 0);

    /* penalty_factor scales what is added */
    cfg.overlong_buffer.penalty_factor = 2.0;
    assert_int_equal(df_reward_dapo(&cfg, b, RESP, NULL, NULL, over, NULL), 0);
    assert_near(over[1], -1.0, 0);
    assert_near(last_token(b, 3), -1.0, 0); /* 1 + -2 */
    df_batch_free(b);
}

/* With the buffer disabled the dapo manager is the naive one, token for token. */
static void test_dapo_disabled_is_naive(void **state)
{
    (void)state;
    df_batch *a = batch4(), *b = batch4();
    float sa[4], sb[4], over[4] = {9, 9, 9, 9};
    assert_int_equal(df_reward_naive(NULL, a, RESP, sa, NULL, NULL), 0);
    df_reward_manager_cfg cfg = {.manager = "dapo",
                                 .max_resp_len = 8,
                                 .overlong_buffer = {.enable = false, .len = 4, .penalty_factor = 1.0}};
    assert_int_equal(df_reward_dapo(&cfg, b, RESP, sb, NULL, over, NULL), 0);
    assert_memory_equal(sa, sb, sizeof sa);
    const df_column *ca = df_batch_column(a, "token_level_scores"),
                    *cb = df_batch_column(b, "token_level_scores");
    assert_memory_equal(ca->offsets, cb->offsets, 5 * sizeof(int64_t));
    assert_memory_equal(ca->data, cb->data, 17 * sizeof(float));
    for (int i = 0; i < 4; i++)
        assert_true(over[i] == 0.0f);
    assert_false(df_reward_manager_logs_overlong(&cfg));
    df_batch_free(a);
    df_batch_free(b);
}

static void test_manager_selection(void **state)
{
    (void)state;
    df_batch *b = batch4();
    float over[4] = {9, 9, 9, 9};
    df_reward_manager_cfg cfg = {
        .manager = "naive",
        .max_resp_len = 8,
        .overlong_buffer = {.enable = true, .len = 4, .penalty_factor = 1.0, .log = true}};
    /* naive ignores the buffer */
    assert_int_equal(df_reward_manager_run(&cfg, b, RESP, NULL, NULL, over, NULL), 0);
    assert_near(last_token(b, 3), 1.0, 0);
    assert_true(over[3] == 0.0f);
    assert_false(df_reward_manager_logs_overlong(&cfg));
    assert_int_equal(df_reward_manager_run(NULL, b, RESP, NULL, NULL, NULL, NULL), 0); /* NULL: naive */
    cfg.manager = "dapo";
    assert_true(df_reward_manager_logs_overlong(&cfg));
    assert_int_equal(df_reward_manager_run(&cfg, b, RESP, NULL, NULL, over, NULL), 0);
    assert_near(last_token(b, 3), 0.0, 0);
    assert_near(over[3], -1.0, 0);
    /* unknown names are refused before anything is scored, listing the known ones */
    df_batch_drop(b, "token_level_scores");
    cfg.manager = "custom";
    assert_error_mentions(df_reward_manager_run(&cfg, b, RESP, NULL, NULL, NULL, NULL), DF_ENOTFOUND,
                          "unknown reward manager 'custom' (known: naive, dapo, batch, prime, embodied)");
    assert_false(df_batch_has(b, "token_level_scores"));
    assert_error_mentions(df_reward_manager_check(&cfg), DF_ENOTFOUND, "'custom'");
    cfg.manager = "Naive"; /* names are exact, as verl's registry */
    assert_int_equal(df_reward_manager_check(&cfg), DF_ENOTFOUND);
    /* dapo with the buffer on needs a response limit and non-negative settings */
    cfg.manager = "dapo";
    cfg.max_resp_len = 0;
    assert_error_mentions(df_reward_dapo(&cfg, b, RESP, NULL, NULL, NULL, NULL), DF_EINVAL, "max_resp_len");
    cfg.max_resp_len = 8;
    cfg.overlong_buffer.len = -1;
    assert_error_mentions(df_reward_manager_check(&cfg), DF_EINVAL, "overlong_buffer.len=-1");
    cfg.overlong_buffer.len = 4;
    cfg.overlong_buffer.penalty_factor = -1;
    assert_int_equal(df_reward_manager_check(&cfg), DF_EINVAL);
    assert_false(df_batch_has(b, "token_level_scores"));
    df_batch_free(b);
}

/* ---- validator warnings ---------------------------------------------------- */

typedef struct {
    int n;
    char last[1024];
} warnings;

static void collect(void *user, const char *msg)
{
    warnings *w = user;
    w->n++;
    snprintf(w->last, sizeof w->last, "%s", msg);
}

static const char *BASE = "data: {train_batch_size: 8, max_response_length: 64}\n"
                          "actor_rollout_ref:\n"
                          "  actor: {ppo_mini_batch_size: 8, ppo_micro_batch_size_per_gpu: 8}\n"
                          "  rollout: {n: 4, log_prob_micro_batch_size_per_gpu: 8}\n"
                          "algorithm: {adv_estimator: grpo}\n";

/* Load BASE with overrides, validate on one rank; returns the status, warnings into *w. */
static int validate(warnings *w, const char *const *ov, int n_ov)
{
    df_config *c;
    if (df_config_load_text(df_config_schema_train(), BASE, "warn.yaml", ov, n_ov, &c))
        fail_msg("%s", df_last_error());
    memset(w, 0, sizeof *w);
    int rc = df_config_validate_train_ex(c, 1, collect, w);
    df_config_free(c);
    return rc;
}

static void test_warn_gspo_aggregation(void **state)
{
    (void)state;
    warnings w;
    const char *gspo[] = {"actor_rollout_ref.actor.policy_loss.loss_mode=gspo"};
    assert_int_equal(validate(&w, gspo, 1), 0); /* a warning, not an error */
    assert_int_equal(w.n, 1);
    assert_non_null(strstr(w.last, "actor_rollout_ref.actor.policy_loss.loss_mode='gspo' (command line)"));
    assert_non_null(strstr(w.last, "actor_rollout_ref.actor.loss_agg_mode='token-mean' (default)"));
    assert_non_null(strstr(w.last, "seq-mean-token-mean"));
    const char *gspo_seq[] = {"actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
                              "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean"};
    assert_int_equal(validate(&w, gspo_seq, 2), 0);
    assert_int_equal(w.n, 0);
    const char *gspo_sum[] = {"actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
                              "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"};
    assert_int_equal(validate(&w, gspo_sum, 2), 0);
    assert_int_equal(w.n, 1);
    const char *vanilla[] = {"actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"};
    assert_int_equal(validate(&w, vanilla, 1), 0);
    assert_int_equal(w.n, 0);
    /* the plain entry point stays silent */
    df_config *c;
    assert_int_equal(df_config_load_text(df_config_schema_train(), BASE, "warn.yaml", gspo, 1, &c), 0);
    assert_int_equal(df_config_validate_train(c, 1), 0);
    assert_int_equal(df_config_validate_train_ex(c, 1, NULL, NULL), 0);
    df_config_free(c);
}

static void test_warn_reward_settings(void **state)
{
    (void)state;
    warnings w;
    const char *naive_buf[] = {"reward_model.overlong_buffer.enable=true"};
    assert_int_equal(validate(&w, naive_buf, 1), 0);
    assert_int_equal(w.n, 1);
    assert_non_null(strstr(w.last, "only the dapo reward manager"));
    const char *dapo_ok[] = {"reward_model.reward_manager=dapo", "reward_model.overlong_buffer.enable=true",
                             "reward_model.overlong_buffer.len=16"};
    assert_int_equal(validate(&w, dapo_ok, 3), 0);
    assert_int_equal(w.n, 0);
    const char *dapo_long[] = {"reward_model.reward_manager=dapo",
                               "reward_model.overlong_buffer.enable=true"};
    assert_int_equal(validate(&w, dapo_long, 2), 0); /* default len 512 > max_response_length 64 */
    assert_int_equal(w.n, 1);
    assert_non_null(strstr(w.last, "reward_model.overlong_buffer.len=512 (default) is not below "
                                   "data.max_response_length=64 (warn.yaml:1)"));
    const char *dapo_equal[] = {"reward_model.reward_manager=dapo", "reward_model.overlong_buffer.enable=true",
                                "reward_model.overlong_buffer.len=64"}; /* expected_len 0: all penalised */
    assert_int_equal(validate(&w, dapo_equal, 3), 0);
    assert_int_equal(w.n, 1);
    /* KL both as a loss and in the reward: verl's notice, as a warning */
    const char *both_kl[] = {"actor_rollout_ref.actor.use_kl_loss=true", "algorithm.use_kl_in_reward=true"};
    assert_int_equal(validate(&w, both_kl, 2), 0);
    assert_int_equal(w.n, 1);
    assert_non_null(strstr(w.last, "both penalise KL"));
    const char *kwargs[] = {"reward_model.reward_kwargs.overlong_buffer_cfg.enable=true"};
    assert_int_equal(validate(&w, kwargs, 1), 0);
    assert_int_equal(w.n, 1);
    assert_non_null(strstr(w.last, "reward_model.overlong_buffer.*"));
    /* an unknown manager is an error of the validator, with the known names */
    const char *bad[] = {"reward_model.reward_manager=custom"};
    assert_int_equal(validate(&w, bad, 1), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "reward_model.reward_manager='custom' (command line)"));
    assert_non_null(strstr(df_last_error(), "known: naive, dapo"));
}

/* The worker's reward setup reads the keys, and its errors name the key at fault and where it was set. */
static void test_worker_reward_setup(void **state)
{
    (void)state;
    const char *ov[] = {"reward_model.reward_manager=dapo", "reward_model.overlong_buffer.enable=true",
                        "reward_model.overlong_buffer.len=7"};
    df_config *cfg;
    assert_int_equal(df_config_load_text(df_config_schema_train(),
                                         "actor_rollout_ref: {model: {path: /nonexistent}}\n"
                                         "data: {max_response_length: 32}\n",
                                         "r.yaml", ov, 3, &cfg),
                     0);
    df_dag_worker w = {.cfg = cfg};
    assert_int_equal(df_worker_settings_init(&w.global, cfg), 0); /* as df_dag_worker_create does first */
    assert_int_equal(df_worker_setup_reward(&w), 0);
    assert_string_equal(w.reward.cfg.manager, "dapo");
    assert_int_equal(w.reward.cfg.max_resp_len, 32);
    assert_true(w.reward.cfg.overlong_buffer.enable && w.reward.cfg.overlong_buffer.len == 7);
    /* custom_reward_function.reward_kwargs.* reach the built-in scorers: defaults first */
    const df_reward_kwargs *kw = w.reward.cfg.kwargs;
    assert_non_null(kw);
    assert_string_equal(kw->method, "strict");
    assert_true(kw->format_score == 0.0 && kw->score == 1.0 && !kw->last_match && !kw->strict_box_verify);
    assert_int_equal(df_config_set(cfg, "custom_reward_function.reward_kwargs.method", "flexible"), 0);
    assert_int_equal(df_config_set(cfg, "custom_reward_function.reward_kwargs.format_score", "0.1"), 0);
    assert_int_equal(df_config_set(cfg, "custom_reward_function.reward_kwargs.gsm8k_match", "last"), 0);
    assert_int_equal(df_config_set(cfg, "custom_reward_function.reward_kwargs.strict_box_verify", "true"), 0);
    assert_int_equal(df_worker_settings_init(&w.global, cfg), 0);
    assert_int_equal(df_worker_setup_reward(&w), 0);
    kw = w.reward.cfg.kwargs;
    assert_string_equal(kw->method, "flexible");
    assert_true(kw->format_score == 0.1 && kw->last_match && kw->strict_box_verify);
    df_reward_result r; /* as the manager scores a row */
    assert_int_equal(df_reward_compute("openai/gsm8k", "#### 5 ... so 7", "8", NULL, kw, &r), 0);
    assert_true(r.score == 0.1 && !r.acc);
    assert_string_equal(r.pred, "7");
    assert_int_equal(df_config_set(cfg, "reward_model.reward_manager", "custom"), 0);
    assert_int_equal(df_worker_settings_init(&w.global, cfg), 0); /* the typed struct lives until a change */
    assert_error_mentions(df_worker_setup_reward(&w), DF_ENOTFOUND,
                          "reward_model.reward_manager (set by program): unknown reward manager 'custom'");
    df_config_free(cfg);
}

/* `distflow config check`: exit 0 and "ok" (warnings on stderr), 1 with the validator's error. */
static int config_check(const char *args, char *out, size_t cap)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/distflow config check %s 2>&1", DF_BINARY_DIR, args);
    return df_test_command(cmd, out, cap);
}

/* An examples/demo config with a model and data of this checkout (the check reads the files). */
#define DEMO(name) DF_SOURCE_DIR "/examples/demo/" name ".yaml" DF_TEST_FILES

static void test_cli_config_check(void **state)
{
    (void)state;
    char out[8192];
    assert_int_equal(config_check(DEMO("gspo"), out, sizeof out), 0);
    assert_string_equal(out, "ok\n");
    assert_int_equal(config_check(DEMO("gspo") " actor_rollout_ref.actor.loss_agg_mode=token-mean", out, sizeof out),
                     0);
    assert_non_null(
        strstr(out, "distflow config: warning: actor_rollout_ref.actor.policy_loss.loss_mode='gspo'"));
    assert_non_null(strstr(out, "ok\n"));
    assert_int_equal(config_check(DEMO("dapo") " reward_model.reward_manager=custom", out, sizeof out), 1);
    assert_non_null(strstr(out, "error: reward_model.reward_manager='custom' (command line): unknown reward "
                                "manager 'custom' (known: naive, dapo, batch, prime, embodied)"));
    assert_int_equal(config_check(DEMO("dapo") " --world 3", out, sizeof out), 1);
    assert_non_null(strstr(out, "not divisible by the 3 data-parallel ranks"));
    assert_int_equal(config_check(DEMO("dapo") " --world 0", out, sizeof out), 1);
    assert_non_null(strstr(out, "--world must be between 1 and 1048576, got 0"));
    /* --world is the job's ranks: the actor's DP size is world / ulysses_sequence_parallel_size */
#define SP " actor_rollout_ref.actor.ulysses_sequence_parallel_size="
    assert_int_equal(config_check(DEMO("dapo") " --world 6" SP "2", out, sizeof out), 1);
    assert_non_null(strstr(out, "not divisible by the 3 data-parallel ranks"));
    assert_int_equal(config_check(DEMO("dapo") " --world 6" SP "3", out, sizeof out), 0);
    assert_string_equal(out, "ok\n");
    assert_int_equal(config_check(DEMO("dapo") " --world 6" SP "4", out, sizeof out), 1);
    assert_non_null(strstr(out, "error: actor_rollout_ref.actor.ulysses_sequence_parallel_size=4 (command line) "
                                "does not divide the 6 ranks running node 'actor_old_log_prob'"));
#undef SP
    /* reward_kwargs configure the built-in scorers: a custom library beside them is refused */
#define KW " custom_reward_function.reward_kwargs."
    assert_int_equal(config_check(DEMO("dapo") KW "method=flexible" KW "gsm8k_match=last", out, sizeof out), 0);
    assert_string_equal(out, "ok\n");
    assert_int_equal(config_check(DEMO("dapo") KW "method=lenient", out, sizeof out), 1);
    assert_non_null(strstr(out, "strict|flexible"));
    assert_int_equal(config_check(DEMO("dapo") KW "score=2 custom_reward_function.path=/x/lib.so", out, sizeof out),
                     1);
    assert_non_null(strstr(out, "custom_reward_function.reward_kwargs.score (command line): keyword arguments, but "
                                "custom_reward_function.path (command line) is a library"));
#undef KW
    /* --sft and a missing CONFIG say why instead of printing the usage */
    assert_int_equal(config_check("--sft " DF_SOURCE_DIR "/examples/demo/dapo.yaml", out, sizeof out), 2);
    assert_non_null(strstr(out, "error: check runs the `train` validator; SFT has none"));
    assert_int_equal(config_check("", out, sizeof out), 2);
    assert_non_null(strstr(out, "error: check needs a CONFIG file"));
}
#undef DEMO

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_penalty_by_length),    cmocka_unit_test(test_penalty_zero_length_buffer),
        cmocka_unit_test(test_dapo_manager_batch),   cmocka_unit_test(test_dapo_disabled_is_naive),
        cmocka_unit_test(test_manager_selection),    cmocka_unit_test(test_warn_gspo_aggregation),
        cmocka_unit_test(test_warn_reward_settings), cmocka_unit_test(test_cli_config_check),
        cmocka_unit_test(test_worker_reward_setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
