/*
 * The MATH and math_dapo scorers, GSM8K's keyword arguments, and the
 * data_source dispatch (verl's default_compute_score). Every expected value
 * was checked by hand against the rules of verl's math_reward.py,
 * math_dapo.py and gsm8k.py (commit b178a3cd56f58b2d502255daba591e92833930a7)
 * and agrees with those Python files run on the same inputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "distflow/reward.h"

static double math(const char *resp, const char *gt)
{
    double s = -1;
    assert_int_equal(df_reward_math("HuggingFaceH4/MATH-500", resp, gt, NULL, &s), 0);
    return s;
}

/* `ans` in \boxed{} scored against gt. */
static double boxed(const char *ans, const char *gt)
{
    char buf[512];
    snprintf(buf, sizeof buf, "So the answer is $\\boxed{%s}$.", ans);
    return math(buf, gt);
}

typedef struct {
    const char *ans, *gt;
    double want;
} math_case;

/* Answers in every spelling the Hendrycks normalisation equates, and some it does not. */
static const math_case MATH_BOXED[] = {
    {"\\frac{1}{2}", "\\frac{1}{2}", 1},
    {"\\dfrac{1}{2}", "\\frac{1}{2}", 1}, /* dfrac -> frac */
    {"\\tfrac12", "\\frac{1}{2}", 1},     /* tfrac -> frac, then \frac12 -> \frac{1}{2} */
    {"\\frac12", "\\frac{1}{2}", 1},      /* fix_fracs */
    {"\\frac1{2}", "\\frac{1}{2}", 1},    /* fix_fracs, second argument braced */
    {"\\frac ab", "\\frac{a}{b}", 1},     /* spaces go before fix_fracs */
    {"1/2", "\\frac{1}{2}", 1},           /* fix_a_slash_b */
    {"-3/4", "\\frac{-3}{4}", 1},         /* a negative integer numerator */
    {"03/4", "\\frac{3}{4}", 0},          /* int("03") prints "3": not rewritten */
    {"0.5", "\\frac{1}{2}", 1},           /* the one decimal rewritten */
    {".5", "\\frac{1}{2}", 1},            /* leading '.' -> "0.5" -> \frac{1}{2} */
    {"\\frac{1}{2}", "0.5", 1},           /* both sides normalised */
    {"\\frac{2}{4}", "\\frac{1}{2}", 0},  /* no arithmetic */
    {"2/4", "\\frac{1}{2}", 0},
    {"\\left( 3, \\frac{\\pi}{2} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right)", 1},
    {"\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})", 1}, /* \left / \right dropped */
    {"5\\text{ cm}", "5", 1},                                          /* units after "\text{ " */
    {"5 \\text{ cm}", "5", 1},
    {"5\\text{cm}", "5", 0}, /* only "\text{ " (with the space) marks units */
    {"30^\\circ", "30", 1},  /* degrees */
    {"30^{\\circ}", "30", 1},
    {"50\\%", "50", 1},       /* percent */
    {"\\$18.90", "18.90", 1}, /* dollars */
    {"x = 5", "5", 1},        /* short left-hand side dropped */
    {"k=5", "5", 1},
    {"xy = 5", "5", 0},                                  /* "xy " is three characters: kept */
    {"\\sqrt2", "\\sqrt{2}", 1},                         /* fix_sqrt */
    {"2\\sqrt 3", "2\\sqrt{3}", 0},                      /* fix_sqrt runs before spaces go: \sqrt{ }3 */
    {"\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{2}", 1}, /* nested braces inside the box */
    {"\\!5", "5", 1},                                    /* inverse space */
    {"1\n2", "12", 1},                                   /* line break */
    {"10", "10.0", 0},                                   /* no numeric comparison */
    /* two "\text{ ": verl's assert raises and is_equiv compares the raw strings */
    {"5\\text{ m}\\text{ m}", "5\\text{ m}\\text{ m}", 1},
    {"5\\text{ m}\\text{ m}", "5", 0},
    {"\\frac", "\\frac", 1}, /* IndexError in fix_fracs: raw comparison */
    {"\\frac", "x", 0},
};

static void test_math_equivalence(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof MATH_BOXED / sizeof *MATH_BOXED; i++) {
        double got = boxed(MATH_BOXED[i].ans, MATH_BOXED[i].gt);
        if (got != MATH_BOXED[i].want)
            fail_msg("case %zu: \\boxed{%s} vs %s scored %g, want %g", i, MATH_BOXED[i].ans, MATH_BOXED[i].gt,
                     got, MATH_BOXED[i].want);
    }
}

static void test_math_boxes(void **state)
{
    (void)state;
    assert_true(math("The answer is 5", "5") == 0.0);             /* no box */
    assert_true(math("\\boxed{3} wait, \\boxed{4}", "4") == 1.0); /* the last box counts */
    assert_true(math("\\boxed{3} wait, \\boxed{4}", "3") == 0.0);
    assert_true(math("\\boxed{\\boxed{7}}", "7") == 1.0); /* the last "\boxed" is the inner one */
    assert_true(math("so $\\boxed 5$.", "5") == 1.0);     /* "\boxed " form, up to '$' */
    assert_true(math("\\boxed 5", "5") == 1.0);
    assert_true(math("\\boxed{a} then \\boxed {b}", "a") == 0.0); /* any "\boxed " wins */
    assert_true(math("\\fbox{5}", "5") == 0.0);                   /* verl's remove_boxed asserts */
    assert_true(math("\\boxed{5", "5") == 0.0);                   /* unbalanced */
    assert_true(math("\\boxed{5}", NULL) == 0.0);
    const char *a;
    size_t n;
    assert_true(df_reward_math_last_boxed("x \\boxed{\\frac{1}{2}} y", &a, &n));
    assert_int_equal(n, strlen("\\frac{1}{2}"));
    assert_memory_equal(a, "\\frac{1}{2}", n);
    assert_false(df_reward_math_last_boxed("\\fbox{2}", &a, &n));
    assert_false(df_reward_math_last_boxed("none", &a, &n));
}

static void test_math_strip(void **state)
{
    (void)state;
    char *s = NULL;
    assert_int_equal(df_reward_math_strip("\\left( \\dfrac12, .5 \\right)", &s), 0);
    assert_string_equal(s, "(\\frac{1}{2},0.5)");
    free(s);
    assert_int_equal(df_reward_math_strip("a\\text{ b}\\text{ c}", &s), DF_EINVAL); /* verl raises */
    assert_null(s);
    assert_int_equal(df_reward_math_strip("2\\sqrt", &s), DF_EINVAL);
    assert_int_equal(df_reward_math_strip("", &s), 0);
    assert_string_equal(s, "");
    free(s);
    bool eq = false;
    assert_int_equal(df_reward_math_is_equiv("\\tfrac{3}{4}", "3/4", &eq), 0);
    assert_true(eq);
}

static df_reward_result dapo(const char *resp, const char *gt, bool strict_box)
{
    df_reward_kwargs kw = df_reward_kwargs_default();
    kw.strict_box_verify = strict_box;
    df_reward_result r;
    memset(&r, 0x55, sizeof r);
    assert_int_equal(df_reward_math_dapo_ex(resp, gt, &kw, &r), 0);
    return r;
}

#define ASSERT_DAPO(resp, gt, box, want_score, want_pred)                                                    \
    do {                                                                                                     \
        df_reward_result r_ = dapo(resp, gt, box);                                                           \
        assert_true(r_.score == (want_score));                                                               \
        assert_int_equal(r_.acc, (want_score) > 0);                                                          \
        assert_string_equal(r_.pred, want_pred);                                                             \
    } while (0)

static char *padded(const char *head, const char *unit, int n)
{
    char *s = malloc(strlen(head) + strlen(unit) * (size_t)n + 1);
    strcpy(s, head);
    for (int i = 0; i < n; i++)
        strcat(s, unit);
    return s;
}

static void test_math_dapo(void **state)
{
    (void)state;
    ASSERT_DAPO("Reasoning...\nAnswer: 42", "42", false, 1.0, "42");
    ASSERT_DAPO("Answer: 41", "42", false, -1.0, "41");
    ASSERT_DAPO("The result is 42.", "42", false, -1.0, "[INVALID]"); /* no "Answer:" */
    ASSERT_DAPO("answer : \\boxed{7}", "7", false, 1.0, "7");         /* any case; \boxed{} unwrapped */
    ASSERT_DAPO("Answer: 1,000", "1000", false, 1.0, "1000");         /* commas of a number */
    ASSERT_DAPO("Answer: $\\frac{1}{2}$", "\\frac12", false, 1.0, "\\frac{1}{2}");
    ASSERT_DAPO("Answer: 5 dollars", "5", false, 1.0, "5"); /* REMOVED_EXPRESSIONS */
    ASSERT_DAPO("Answer: x = 7", "7", false, 1.0, "7");     /* after the last '=' */
    ASSERT_DAPO("ANSWER: 10^\\circ", "10", false, 1.0, "10");
    ASSERT_DAPO("Answer: \\text{(B)}", "B", false, -1.0, "(B)");
    ASSERT_DAPO("Answer:\n\n  7", "7", false, 1.0, "7");               /* \s* crosses lines */
    ASSERT_DAPO("Answer: 1\nAnswer: 2", "2", false, 1.0, "2");         /* the last match */
    ASSERT_DAPO("Answer: 1 Answer: 2", "2", false, -1.0, "1Answer:2"); /* one match to the line's end */
    /* the last 300 characters (code points): "Answer: 42\n" is 11 of them */
    char *s = padded("Answer: 42\n", "x", 289);
    ASSERT_DAPO(s, "42", false, 1.0, "42");
    free(s);
    s = padded("Answer: 42\n", "x", 290); /* the 'A' falls off: "nswer: 42" */
    ASSERT_DAPO(s, "42", false, -1.0, "[INVALID]");
    free(s);
    s = padded("Answer: 42\n", "\xc3\xa9", 289); /* 300 code points, 589 bytes */
    ASSERT_DAPO(s, "42", false, 1.0, "42");
    free(s);
    /* strict_box_verify: the last \boxed{} of the last 100 characters against the raw ground truth */
    ASSERT_DAPO("so \\boxed{42}", "42", true, 1.0, "42");
    ASSERT_DAPO("so \\boxed{ 42}", "42", true, -1.0, " 42");
    s = padded("\\boxed{42}", "x", 90);
    ASSERT_DAPO(s, "42", true, 1.0, "42");
    free(s);
    s = padded("\\boxed{42}", "x", 91);
    ASSERT_DAPO(s, "42", true, -1.0, "");
    free(s);
    ASSERT_DAPO("Answer: 42", "42", true, -1.0, ""); /* strict box ignores "Answer:" */
    double sc = 0;
    assert_int_equal(df_reward_math_dapo("math_dapo", "Answer: 3", "4", NULL, &sc), 0);
    assert_true(sc == -1.0);
    char *norm = NULL;
    assert_int_equal(df_reward_math_dapo_normalize("\\text{an }\\textbf{12,345} students", &norm), 0);
    assert_string_equal(norm, "12345");
    free(norm);
}

static double gsm(const char *resp, const char *gt, const char *method, bool last, double format_score)
{
    df_reward_kwargs kw = df_reward_kwargs_default();
    kw.method = method;
    kw.last_match = last;
    kw.format_score = format_score;
    df_reward_result r;
    assert_int_equal(df_reward_gsm8k_ex(resp, gt, &kw, &r), 0);
    return r.score;
}

static void test_gsm8k_kwargs(void **state)
{
    (void)state;
    const char *two = "#### 3\nno wait\n#### 4";
    assert_true(gsm(two, "3", "strict", false, 0.0) == 1.0); /* siiRL: the first match */
    assert_true(gsm(two, "4", "strict", false, 0.0) == 0.0);
    assert_true(gsm(two, "4", "strict", true, 0.0) == 1.0); /* current verl: the last match */
    assert_true(gsm(two, "3", "strict", true, 0.1) == 0.1); /* found but wrong: format_score */
    char *far = padded("#### 7", " words", 60);             /* the answer is 366 characters back */
    assert_true(gsm(far, "7", "strict", false, 0.1) == 1.0);
    assert_true(gsm(far, "7", "strict", true, 0.1) == 0.0); /* clipped away: no answer, 0 */
    free(far);
    assert_true(gsm("The answer is 18", "18", "strict", false, 0.1) == 0.0);   /* strict wants #### */
    assert_true(gsm("The answer is 18", "18", "flexible", false, 0.1) == 1.0); /* the last number */
    assert_true(gsm("The answer is 18.", "18", "flexible", true, 0.1) == 0.1); /* "18." is the match */
    assert_true(gsm("#### 1,234", "1234", "strict", true, 0.1) == 1.0);        /* strict drops ',' */
    assert_true(gsm("#### 1,234", "1234", "flexible", true, 0.1) == 0.1);      /* flexible keeps it */
    assert_true(gsm("Hmm.", "18", "flexible", true, 0.1) == 0.1);              /* "." alone is found */
    assert_true(gsm("no numbers", "18", "flexible", true, 0.1) == 0.0);
    assert_true(gsm("5-3", "-3", "flexible", false, 0.0) == 1.0);
    df_reward_kwargs kw = df_reward_kwargs_default();
    kw.score = 2.0;
    df_reward_result r;
    assert_int_equal(df_reward_gsm8k_ex("#### 18", "18", &kw, &r), 0);
    assert_true(r.score == 2.0);
    assert_true(r.acc);
    assert_string_equal(r.pred, "18");
    kw.method = "lenient";
    assert_int_equal(df_reward_gsm8k_ex("#### 18", "18", &kw, &r), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "lenient"));
}

/* A response each scorer grades differently: its scores name the scorer that graded it. */
typedef enum { S_GSM8K, S_MATH, S_DAPO, S_SYNTH } scorer_id;

static scorer_id which_scorer(const char *src)
{
    df_reward_result a, b, c;
    assert_int_equal(df_reward_compute(src, "\\boxed{\\frac12}", "\\frac{1}{2}", NULL, NULL, &a), 0);
    assert_int_equal(df_reward_compute(src, "Answer: 7", "7", NULL, NULL, &b), 0);
    assert_int_equal(df_reward_compute(src, "#### 007", "7", NULL, NULL, &c), 0);
    if (a.score == 1.0 && b.score == 0.0)
        return S_MATH;
    if (b.score == 1.0 && a.score == -1.0)
        return S_DAPO;
    if (c.score == 1.0)
        return S_SYNTH; /* integer comparison: 007 == 7 */
    assert_true(a.score == 0.0 && b.score == 0.0 && c.score == 0.0);
    return S_GSM8K;
}

static void test_dispatch(void **state)
{
    (void)state;
    static const struct {
        const char *src;
        scorer_id want;
        df_reward_fn fn;
    } table[] = {
        {"openai/gsm8k", S_GSM8K, df_reward_gsm8k},
        {"lighteval/MATH", S_MATH, df_reward_math},
        {"DigitalLearningGmbH/MATH-lighteval", S_MATH, df_reward_math},
        {"HuggingFaceH4/MATH-500", S_MATH, df_reward_math},
        {"math_dapo", S_DAPO, df_reward_math_dapo},
        {"math", S_DAPO, df_reward_math_dapo},
        {"math_dapo_reasoning", S_DAPO, df_reward_math_dapo},
        {"aime24", S_DAPO, df_reward_math_dapo},
        {"aime_2025", S_DAPO, df_reward_math_dapo},
        {"synthetic/arithmetic", S_SYNTH, df_reward_synthetic},
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        df_reward_fn fn = NULL;
        assert_int_equal(df_reward_lookup(table[i].src, &fn), 0);
        if (fn != table[i].fn || which_scorer(table[i].src) != table[i].want)
            fail_msg("data_source %s is routed to the wrong scorer", table[i].src);
    }
    df_reward_fn fn;
    assert_int_equal(df_reward_lookup("AIME24", &fn), DF_ENOTFOUND); /* verl's prefix is case-sensitive */
    assert_int_equal(df_reward_lookup("MATH-500", &fn), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "'MATH-500'"));
    assert_non_null(strstr(df_last_error(), "HuggingFaceH4/MATH-500"));
    assert_non_null(strstr(df_last_error(), "starting with \"aime\" is scored by math_dapo"));
    df_reward_result r;
    assert_int_equal(df_reward_compute("nope", "x", "y", NULL, NULL, &r), DF_ENOTFOUND);
}

/* A plugin's plain scorer: acc is derived from the score (1.0). */
static int plugin_score(const char *ds, const char *sol, const char *gt, const char *extra, double *score)
{
    (void)ds;
    (void)gt;
    (void)extra;
    *score = strstr(sol, "good") ? 1.0 : 0.25;
    return DF_OK;
}

static void test_plugin_shadows(void **state)
{
    (void)state;
    df_reward_result r;
    assert_int_equal(df_reward_register("aime_custom", plugin_score), 0); /* beats the aime* prefix */
    assert_int_equal(df_reward_compute("aime_custom", "good", "x", NULL, NULL, &r), 0);
    assert_true(r.score == 1.0 && r.acc);
    assert_int_equal(df_reward_compute("aime_custom", "Answer: x", "x", NULL, NULL, &r), 0);
    assert_true(r.score == 0.25 && !r.acc);
    assert_string_equal(r.pred, "");
}

/* The naive manager takes acc from the scorer and passes the keyword arguments. */
static void test_manager_acc_and_kwargs(void **state)
{
    (void)state;
    df_batch *b = df_batch_new(3);
    const int64_t off[] = {0, 2, 4, 6};
    const int32_t ids[] = {1, 2, 3, 4, 5, 6};
    const char *src[] = {"math_dapo", "math_dapo", "openai/gsm8k"};
    const char *gt[] = {"42", "42", "18"};
    const char *resp[] = {"Answer: 42", "Answer: 41", "#### 18"};
    df_batch_set_tok_i32(b, "response_ids", off, ids);
    df_batch_set_str(b, "data_source", src);
    df_batch_set_str(b, "ground_truth", gt);
    df_reward_kwargs kw = df_reward_kwargs_default();
    kw.score = 2.0; /* gsm8k: a correct answer scores 2, and is still acc 1 */
    df_reward_manager_cfg cfg = {.kwargs = &kw};
    float scores[3], acc[3];
    assert_int_equal(df_reward_naive(&cfg, b, resp, scores, acc, NULL), 0);
    const float want_s[] = {1, -1, 2}, want_a[] = {1, 0, 1};
    assert_memory_equal(scores, want_s, sizeof scores);
    assert_memory_equal(acc, want_a, sizeof acc);
    int64_t len;
    const float *t = df_batch_tok_f32(b, "token_level_scores", 1, &len);
    assert_int_equal(len, 2);
    assert_true(t[0] == 0.0f && t[1] == -1.0f);
    df_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_math_equivalence), cmocka_unit_test(test_math_boxes),
        cmocka_unit_test(test_math_strip),       cmocka_unit_test(test_math_dapo),
        cmocka_unit_test(test_gsm8k_kwargs),     cmocka_unit_test(test_dispatch),
        cmocka_unit_test(test_plugin_shadows),   cmocka_unit_test(test_manager_acc_and_kwargs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
