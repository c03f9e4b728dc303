/*
 * `distflow data math` / df_math_convert: the real MATH-500 file to the verl
 * schema (verl's examples/data_preprocess/math_dataset.py), and malformed input.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "testutil.h"

#include "distflow/dataset.h"
#include "distflow/reward.h"

#define MATH500 DF_SHARED_DIR "/data/math500/test.jsonl"

static const char *path_in(void **state, const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", (const char *)*state, name);
    return buf[k];
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void need_math500(void)
{
    if (!file_exists(MATH500)) {
        print_message("skipping: %s not found\n", MATH500);
        skip();
    }
}

static char *field(const df_dataset *ds, int64_t i, const char *path)
{
    char *s = NULL;
    if (df_dataset_field(ds, i, path, &s))
        fail_msg("row %lld: %s: %s", (long long)i, path, df_last_error());
    return s;
}

#define ASSERT_FIELD(ds, i, path, want)                                                                      \
    do {                                                                                                     \
        char *s_ = field(ds, i, path);                                                                       \
        assert_string_equal(s_, want);                                                                       \
        free(s_);                                                                                            \
    } while (0)

static void test_math500(void **state)
{
    need_math500();
    const char *out = path_in(state, "math500/test.jsonl");
    assert_int_equal(mkdir(path_in(state, "math500"), 0755), 0);
    int64_t n = 0;
    if (df_math_convert(MATH500, out, NULL, NULL, &n))
        fail_msg("%s", df_last_error());
    assert_int_equal(n, 500);
    df_dataset *ds = NULL;
    const char *paths[] = {out};
    assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0);
    assert_int_equal(df_dataset_size(ds), 500);
    /* row 0, by hand from the raw file's first line */
    assert_string_equal(df_dataset_data_source(ds, 0), "HuggingFaceH4/MATH-500");
    assert_string_equal(df_dataset_ability(ds, 0), "math");
    assert_string_equal(df_dataset_reward_style(ds, 0), "rule");
    assert_string_equal(df_dataset_ground_truth(ds, 0), "\\left( 3, \\frac{\\pi}{2} \\right)");
    const char *role, *content;
    assert_int_equal(df_dataset_num_messages(ds, 0), 1);
    assert_int_equal(df_dataset_message(ds, 0, 0, &role, &content), 0);
    assert_string_equal(role, "user");
    assert_string_equal(content,
                        "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.  "
                        "Enter your answer in the form $(r,\\theta),$ where $r > 0$ and $0 \\le "
                        "\\theta < 2 \\pi.$ Let's think step by step and output the final answer "
                        "within \\boxed{}.");
    ASSERT_FIELD(ds, 0, "extra_info.split", "test");
    ASSERT_FIELD(ds, 0, "extra_info.index", "0");
    ASSERT_FIELD(ds, 0, "extra_info.level", "2");
    ASSERT_FIELD(ds, 0, "extra_info.subject", "Precalculus");
    ASSERT_FIELD(ds, 0, "extra_info.unique_id", "test/precalculus/807.json");
    ASSERT_FIELD(ds, 499, "extra_info.index", "499");
    /* through the data_source's scorer, every reference solution scores 1.0 against its row's ground truth */
    for (int64_t i = 0; i < n; i++) {
        char *sol = field(ds, i, "extra_info.answer");
        df_reward_result r;
        assert_int_equal(df_reward_compute(df_dataset_data_source(ds, i), sol, df_dataset_ground_truth(ds, i),
                                           NULL, NULL, &r),
                         0);
        if (r.score != 1.0 || !r.acc)
            fail_msg("row %lld: its own solution scores %g", (long long)i, r.score);
        free(sol);
    }
    df_dataset_free(ds);
}

/* The CLI: help lists the command, and it writes the same file as the library call. */
static void test_cli(void **state)
{
    need_math500();
    char cmd[1024], outp[4096];
    snprintf(cmd, sizeof cmd, "%s/distflow data --help 2>&1", DF_BINARY_DIR);
    assert_int_equal(df_test_command(cmd, outp, sizeof outp), 0);
    assert_non_null(strstr(outp, "  math "));
    const char *out = path_in(state, "cli/math.jsonl");
    snprintf(cmd, sizeof cmd, "%s/distflow data math --in %s --out %s --split eval --data-source math 2>&1",
             DF_BINARY_DIR, MATH500, out);
    assert_int_equal(df_test_command(cmd, outp, sizeof outp), 0);
    assert_non_null(strstr(outp, "wrote 500 rows"));
    df_dataset *ds = NULL;
    const char *paths[] = {out};
    assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0);
    assert_string_equal(df_dataset_data_source(ds, 3), "math"); /* scored by math_dapo */
    ASSERT_FIELD(ds, 3, "extra_info.split", "eval");
    df_dataset_free(ds);
    snprintf(cmd, sizeof cmd, "%s/distflow data math --out %s 2>&1", DF_BINARY_DIR, out);
    assert_int_not_equal(df_test_command(cmd, outp, sizeof outp), 0); /* --in is required */
}

static void test_malformed(void **state)
{
    const char *in = path_in(state, "raw.jsonl"), *out = path_in(state, "conv.jsonl");
    int64_t n = -1;
    /* the box wins over "answer"; no box: "answer"; lighteval's string level and type are kept */
    write_text(in,
               "{\"problem\": \"P\", \"solution\": \"so \\\\boxed{\\\\frac{1}{2}}\", \"answer\": \"x\"}\n\n"
               "{\"problem\": \"Q\", \"solution\": \"none\", \"answer\": \"7\", \"level\": \"Level 3\", "
               "\"type\": \"Algebra\"}\n");
    assert_int_equal(df_math_convert(in, out, "dev", "lighteval/MATH", &n), 0);
    assert_int_equal(n, 2);
    df_dataset *ds = NULL;
    const char *paths[] = {out};
    assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0);
    assert_string_equal(df_dataset_ground_truth(ds, 0), "\\frac{1}{2}");
    assert_string_equal(df_dataset_ground_truth(ds, 1), "7");
    assert_string_equal(df_dataset_data_source(ds, 1), "lighteval/MATH");
    assert_string_equal(df_dataset_extra_info(ds, 1), "{\"split\":\"dev\",\"index\":1,\"question\":\"Q\","
                                                      "\"answer\":\"none\",\"type\":\"Algebra\",\"level\":"
                                                      "\"Level 3\"}");
    df_dataset_free(ds);
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"{\"problem\": \"P\", \"solution\": \"\\\\boxed{1}\"}\n{\"problem\": \"P\"\n", "raw.jsonl:2:"},
        {"{\"problem\": \"P\", \"solution\": \"\\\\boxed{1}\"}\n\n{\"solution\": \"\\\\boxed{1}\"}\n",
         "raw.jsonl:3: missing \"problem\""},
        {"{\"problem\": \"P\"}\n", "raw.jsonl:1: missing \"solution\""},
        {"{\"problem\": 3, \"solution\": \"\\\\boxed{1}\"}\n",
         "raw.jsonl:1: \"problem\" must be a string, got integer"},
        {"{\"problem\": \"P\", \"solution\": \"\\\\boxed{1\"}\n",
         "raw.jsonl:1: \"solution\" has no complete \\boxed"},
        {"{\"problem\": \"P\", \"solution\": \"x\", \"answer\": 4}\n",
         "and the row has no string \"answer\""},
        {"[1, 2]\n", "raw.jsonl:1:"},
        {"\n\n", "raw.jsonl: no rows"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_text(in, bad[k].text);
        assert_int_equal(df_math_convert(in, out, NULL, NULL, &n), DF_EINVAL);
        if (!strstr(df_last_error(), bad[k].msg))
            fail_msg("case %zu: '%s' lacks '%s'", k, df_last_error(), bad[k].msg);
        assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0); /* the old output is still whole */
        assert_int_equal(df_dataset_size(ds), 2);
        df_dataset_free(ds);
    }
    const char *fresh = path_in(state, "never.jsonl");
    assert_int_equal(df_math_convert(in, fresh, NULL, NULL, &n), DF_EINVAL);
    assert_false(file_exists(fresh)); /* no half-written output */
    assert_int_equal(df_math_convert(path_in(state, "missing.jsonl"), fresh, NULL, NULL, &n), DF_ENOTFOUND);
    assert_false(file_exists(fresh));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_math500, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_cli, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_malformed, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
