/* Reward functions (GSM8K, synthetic), the registry and the naive reward manager. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "distflow/reward.h"

static double gsm8k(const char *resp, const char *gt)
{
    double s = -1;
    assert_int_equal(df_reward_gsm8k("openai/gsm8k", resp, gt, NULL, &s), 0);
    return s;
}

static double synth(const char *resp, const char *gt)
{
    double s = -1;
    assert_int_equal(df_reward_synthetic("synthetic/arithmetic", resp, gt, NULL, &s), 0);
    return s;
}

static char *repeat(const char *head, const char *unit, int n, const char *tail)
{
    size_t len = strlen(head) + strlen(unit) * (size_t)n + strlen(tail) + 1;
    char *s = malloc(len);
    strcpy(s, head);
    for (int i = 0; i < n; i++)
        strcat(s, unit);
    strcat(s, tail);
    return s;
}

static void test_gsm8k_scorer(void **state)
{
    (void)state;
    assert_true(gsm8k("She makes 9 * 2 = 18.\n#### 18", "18") == 1.0);
    assert_true(gsm8k("#### 18", "19") == 0.0);             /* wrong answer: format_score 0 */
    assert_true(gsm8k("#### 1,234", "1234") == 1.0);        /* commas removed */
    assert_true(gsm8k("#### 1,234", "1,234") == 0.0);
    assert_true(gsm8k("#### -7", "-7") == 1.0);             /* negative */
    assert_true(gsm8k("#### 2.5", "2.5") == 1.0);           /* decimals compare as strings */
    assert_true(gsm8k("#### 2.50", "2.5") == 0.0);
    assert_true(gsm8k("#### 18.", "18") == 0.0);            /* the '.' is part of the match */
    assert_true(gsm8k("#### $18", "18") == 0.0);            /* '$' cannot start the number */
    assert_true(gsm8k("The answer is 18", "18") == 0.0);    /* missing #### (strict) */
    assert_true(gsm8k("####18", "18") == 0.0);              /* needs "#### " */
    assert_true(gsm8k("#### ", "18") == 0.0);
    assert_true(gsm8k("", "18") == 0.0);
    /* several ####: the first match counts (re.search; see reward.h) */
    assert_true(gsm8k("#### 3\nno wait\n#### 4", "3") == 1.0);
    assert_true(gsm8k("#### 3\nno wait\n#### 4", "4") == 0.0);
    assert_true(gsm8k("#### x and #### 5", "5") == 1.0);    /* "#### x" is no match */
    assert_true(gsm8k("So $1,234 in all.\n#### $1,234", "1234") == 0.0); /* '$' cannot start it */
    char out[16];
    assert_true(df_reward_gsm8k_extract("#### -1,000,000 ok", out, sizeof out));
    assert_string_equal(out, "-1000000");
    assert_false(df_reward_gsm8k_extract("#### -", out, sizeof out));
    assert_false(df_reward_gsm8k_extract("#### 123456789", out, 4));
}

static void test_gsm8k_long_response(void **state)
{
    (void)state;
    /* the whole response is searched, however long */
    char *s = repeat("", "reasoning ", 1000, "#### 42");
    assert_true(gsm8k(s, "42") == 1.0);
    free(s);
    s = repeat("#### 42\n", "y", 400, "");
    assert_true(gsm8k(s, "42") == 1.0);
    free(s);
}

/*
 * An answer of 270 digits (over the 255 bytes distflow used to cap answers at): verl's
 * compute_score (verl/utils/reward_score/gsm8k.py at b178a3cd, and siiRL's) compares it whole.
 * The response is 292 characters, inside verl's 300-character window, so every version agrees:
 * 1.0 for the same digits; 0.0 for a different last digit, a ground truth one digit shorter or
 * one digit longer (checked against both Python functions).
 */
static void test_gsm8k_long_answer(void **state)
{
    (void)state;
    char d[271], r[320], g[272];
    for (int i = 0; i < 270; i++)
        d[i] = (char)('0' + (7 * i + 3) % 10);
    d[270] = '\0';
    snprintf(r, sizeof r, "So the total is:\n#### %s", d);
    assert_int_equal(strlen(r), 292);
    assert_true(gsm8k(r, d) == 1.0);
    memcpy(g, d, sizeof d);
    g[269] = '0'; /* d ends in 6 */
    assert_true(gsm8k(r, g) == 0.0);
    g[269] = '\0';
    assert_true(gsm8k(r, g) == 0.0);
    snprintf(g, sizeof g, "%s1", d);
    assert_true(gsm8k(r, g) == 0.0);
    /* commas are dropped before the comparison, however long the answer */
    char rc[330], dc[280];
    snprintf(dc, sizeof dc, "%.100s,%.100s,%.70s", d, d + 100, d + 200);
    snprintf(rc, sizeof rc, "#### %s", dc);
    assert_true(gsm8k(rc, d) == 1.0);
    /* extract still needs room in the caller's buffer; the scorer does not */
    char out[300], small[100];
    assert_true(df_reward_gsm8k_extract(r, out, sizeof out));
    assert_string_equal(out, d);
    assert_false(df_reward_gsm8k_extract(r, small, sizeof small));
}

static void test_synthetic_scorer(void **state)
{
    (void)state;
    assert_true(synth("12 + 7 = 19\n19 - 5 = 14\n14 * 2 = 28\n#### 28", "28") == 1.0);
    assert_true(synth("#### 27", "28") == 0.0);
    assert_true(synth("#### 028", "28") == 1.0); /* compared as integers */
    assert_true(synth("#### -0", "0") == 1.0);
    assert_true(synth("#### -3", "-3") == 1.0);
    assert_true(synth("#### -3", "3") == 0.0);
    assert_true(synth("#### 28.5", "28") == 1.0); /* `-?[0-9]+` stops at the '.' */
    assert_true(synth("#### 27 then #### 28", "28") == 0.0); /* the first match decides */
    assert_true(synth("#### x then #### 28", "28") == 1.0);  /* "#### x" is no match */
    assert_true(synth("#### - 5 #### 28", "28") == 1.0);
    assert_true(synth("####28", "28") == 0.0);
    assert_true(synth("28", "28") == 0.0);
    assert_true(synth("", "28") == 0.0);
    assert_true(synth("#### 28", "twenty") == 0.0);
    assert_true(synth("#### 28", "") == 0.0);
    assert_true(synth("#### 123456789012345678901234567890", "123456789012345678901234567890") == 1.0);
    assert_true(synth("#### 123456789012345678901234567891", "123456789012345678901234567890") == 0.0);
}

static int half_score(const char *ds, const char *sol, const char *gt, const char *extra, double *score)
{
    (void)ds;
    (void)gt;
    *score = strlen(sol) >= 3 ? 1.0 : 0.5;
    /* the manager passes extra_info through */
    if (extra && strstr(extra, "bonus"))
        *score += 2.0;
    return DF_OK;
}

static int failing_score(const char *ds, const char *sol, const char *gt, const char *extra, double *score)
{
    (void)ds;
    (void)sol;
    (void)gt;
    (void)extra;
    *score = 0;
    return df_error(DF_EINVAL, "judge exploded");
}

static void test_registry(void **state)
{
    (void)state;
    df_reward_fn fn = NULL;
    assert_int_equal(df_reward_lookup("openai/gsm8k", &fn), 0);
    assert_ptr_equal(fn, df_reward_gsm8k);
    assert_int_equal(df_reward_lookup("synthetic/arithmetic", &fn), 0);
    assert_ptr_equal(fn, df_reward_synthetic);
    assert_int_equal(df_reward_lookup("some/MATH-like-set", &fn), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "'some/MATH-like-set'"));
    assert_non_null(strstr(df_last_error(), "openai/gsm8k"));
    assert_int_equal(df_reward_register("my/task", half_score), 0);
    assert_int_equal(df_reward_lookup("my/task", &fn), 0);
    assert_ptr_equal(fn, half_score);
    assert_int_equal(df_reward_register("my/task", failing_score), 0); /* replaces */
    assert_int_equal(df_reward_lookup("my/task", &fn), 0);
    assert_ptr_equal(fn, failing_score);
    assert_int_equal(df_reward_register("", half_score), DF_EINVAL);
    assert_int_equal(df_reward_register(NULL, half_score), DF_EINVAL);
    assert_int_equal(df_reward_register("x", NULL), DF_EINVAL);
    char longname[DF_REWARD_NAME_MAX + 1];
    memset(longname, 'a', DF_REWARD_NAME_MAX);
    longname[DF_REWARD_NAME_MAX] = '\0';
    assert_int_equal(df_reward_register(longname, half_score), DF_EINVAL);
    assert_int_equal(df_reward_lookup(NULL, &fn), DF_ENOTFOUND);
}

/* 4 rows: response lengths 3, 1, 0, 2. */
static df_batch *reward_batch(const char *src2)
{
    df_batch *b = df_batch_new(4);
    const int64_t off[] = {0, 3, 4, 4, 6};
    const int32_t ids[] = {1, 2, 3, 4, 5, 6};
    const char *src[] = {"openai/gsm8k", "synthetic/arithmetic", "openai/gsm8k", src2};
    const char *gt[] = {"72", "28", "5", "9"};
    const char *extra[] = {"{}", "{}", "{}", "{\"bonus\": 1}"};
    df_batch_set_tok_i32(b, "response_ids", off, ids);
    df_batch_set_str(b, "data_source", src);
    df_batch_set_str(b, "ground_truth", gt);
    df_batch_set_str(b, "extra_info", extra);
    return b;
}

static const char *const RESPONSES[] = {"so #### 72", "#### 27", "#### 5", "#### 9"};

static void test_naive_manager(void **state)
{
    (void)state;
    df_batch *b = reward_batch("synthetic/arithmetic");
    float scores[4], acc[4];
    int64_t empty = -1;
    assert_int_equal(df_reward_naive(NULL, b, RESPONSES, scores, acc, &empty), 0);
    assert_int_equal(empty, 1);
    const float want_scores[] = {1, 0, 1, 1}, want_acc[] = {1, 0, 1, 1};
    assert_memory_equal(scores, want_scores, sizeof scores);
    assert_memory_equal(acc, want_acc, sizeof acc);
    const int64_t *off = df_batch_offsets(b, "token_level_scores");
    assert_non_null(off);
    assert_int_equal(off[4], 6);
    int64_t len;
    const float *t = df_batch_tok_f32(b, "token_level_scores", 0, &len);
    const float all[] = {0, 0, 1, /* row 1 */ 0, /* row 2: empty */ /* row 3 */ 0, 1};
    assert_memory_equal(t, all, sizeof all); /* the score sits on each row's last token */
    assert_int_equal(len, 3);
    df_batch_tok_f32(b, "token_level_scores", 2, &len);
    assert_int_equal(len, 0);
    /* verl's gsm8k / synthetic scorers return no pred: no pred column (verl's reward_extra_info) */
    assert_false(df_batch_has(b, "pred"));

    /* a custom compute_score for every row (verl custom_reward_function); NULL outputs */
    df_reward_manager_cfg cfg = {.compute_score = half_score};
    assert_int_equal(df_reward_naive(&cfg, b, RESPONSES, scores, acc, NULL), 0);
    const float want2[] = {1, 1, 1, 3};
    assert_memory_equal(scores, want2, sizeof scores);
    assert_true(acc[3] == 0.0f && acc[0] == 1.0f);
    t = df_batch_tok_f32(b, "token_level_scores", 3, &len);
    assert_true(t[0] == 0.0f && t[1] == 3.0f);
    const char *shortr[] = {"ab", "ab", "ab", "ab"};
    assert_int_equal(df_reward_naive(&cfg, b, shortr, scores, NULL, NULL), 0);
    assert_true(scores[0] == 0.5f);
    assert_int_equal(df_reward_naive(&cfg, b, shortr, NULL, NULL, NULL), 0);

    /* reward_fn_key selects another column */
    const char *task[] = {"synthetic/arithmetic", "synthetic/arithmetic", "synthetic/arithmetic",
                          "synthetic/arithmetic"};
    df_batch_set_str(b, "task", task);
    df_reward_manager_cfg bykey = {.reward_fn_key = "task"};
    assert_int_equal(df_reward_naive(&bykey, b, RESPONSES, scores, acc, NULL), 0);
    const float want3[] = {1, 0, 1, 1}; /* all scored by the synthetic scorer */
    assert_memory_equal(scores, want3, sizeof scores);
    df_batch_free(b);

    /* a math_dapo row: its pred (math_dapo's dict) becomes the pred column, "" on the other rows;
       scoring again without one drops the column */
    b = reward_batch("math_dapo");
    const char *dapo[] = {"so #### 72", "#### 27", "#### 5", "Answer: 9"};
    assert_int_equal(df_reward_naive(NULL, b, dapo, scores, acc, NULL), 0);
    assert_true(scores[3] == 1.0f);
    const char *want_pred[] = {"", "", "", "9"};
    for (int i = 0; i < 4; i++)
        assert_string_equal(df_batch_str(b, "pred", i), want_pred[i]);
    assert_int_equal(df_reward_naive(&cfg, b, dapo, scores, acc, NULL), 0); /* custom: no pred */
    assert_false(df_batch_has(b, "pred"));
    df_batch_free(b);
}

static void test_naive_errors(void **state)
{
    (void)state;
    df_batch *b = reward_batch("my/unknown-task");
    float scores[4];
    assert_int_equal(df_reward_naive(NULL, b, RESPONSES, scores, NULL, NULL), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "row 3"));
    assert_non_null(strstr(df_last_error(), "'my/unknown-task'"));
    assert_false(df_batch_has(b, "token_level_scores")); /* batch untouched */
    assert_false(df_batch_has(b, "pred"));
    assert_int_equal(df_reward_register("my/unknown-task", failing_score), 0);
    assert_int_equal(df_reward_naive(NULL, b, RESPONSES, scores, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "scoring row 3 (data_source my/unknown-task): judge exploded"));
    assert_false(df_batch_has(b, "token_level_scores"));
    assert_int_equal(df_reward_naive(NULL, b, NULL, scores, NULL, NULL), DF_EINVAL);
    df_batch_drop(b, "ground_truth");
    assert_int_equal(df_reward_naive(NULL, b, RESPONSES, scores, NULL, NULL), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "ground_truth"));
    df_batch_drop(b, "response_ids");
    assert_int_equal(df_reward_naive(NULL, b, RESPONSES, scores, NULL, NULL), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "response_ids"));
    df_batch_free(b);
    /* an empty batch is fine */
    b = df_batch_new(0);
    const int64_t off[] = {0};
    const char *none[] = {NULL};
    df_batch_set_tok_i32(b, "response_ids", off, NULL);
    df_batch_set_str(b, "data_source", none);
    df_batch_set_str(b, "ground_truth", none);
    int64_t empty = -1;
    assert_int_equal(df_reward_naive(NULL, b, NULL, NULL, NULL, &empty), 0);
    assert_int_equal(empty, 0);
    assert_true(df_batch_has(b, "token_level_scores"));
    df_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gsm8k_scorer),   cmocka_unit_test(test_gsm8k_long_response),
        cmocka_unit_test(test_gsm8k_long_answer),
        cmocka_unit_test(test_synthetic_scorer), cmocka_unit_test(test_registry),
        cmocka_unit_test(test_naive_manager),  cmocka_unit_test(test_naive_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
