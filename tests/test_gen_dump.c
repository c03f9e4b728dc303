/*
 * test_gen_dump.c — verl's _dump_generations (workers/dag/gen_dump.h), the writer of
 * trainer.validation_data_dir and trainer.rollout_data_dir: each line's keys and values on a
 * hand-made scored batch (score is the summed token_level_scores, not the scorer's score), the
 * file names per data-parallel rank, the atomic write and its error naming the setting.
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/batch.h"
#include "distflow/tokenizer.h"
#include "util/fsutil.h"
#include "workers/dag/gen_dump.h"

#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const TEXTS[] = {"Add 1 and 3. What do you get?", "#### 4", "the answer is 5"};

/* Three rows: two responses to prompt 0, one empty response to prompt 1; token_level_scores rows
   sum to 0.25 (0 + 0.5 - 0.25, as dapo's penalty on the last token) and 0.5, the scorer's score
   column says 1, 0.5, 1 (the empty response's only carrier). */
static df_batch *batch(const df_tokenizer *tok)
{
    int32_t *p = NULL, *r0 = NULL, *r1 = NULL;
    int64_t np, n0, n1;
    assert_int_equal(df_tokenizer_encode(tok, TEXTS[0], false, &p, &np), 0);
    assert_int_equal(df_tokenizer_encode(tok, TEXTS[1], false, &r0, &n0), 0);
    assert_int_equal(df_tokenizer_encode(tok, TEXTS[2], false, &r1, &n1), 0);
    assert_true(n0 >= 3 && n1 >= 1);
    df_batch *b = df_batch_new(3);
    int64_t poff[4] = {0, np, 2 * np, 3 * np}, roff[4] = {0, n0, n0 + n1, n0 + n1};
    int32_t *pids = malloc((size_t)(3 * np) * sizeof *pids), *rids = malloc((size_t)(n0 + n1) * sizeof *rids);
    float *tls = calloc((size_t)(n0 + n1), sizeof *tls);
    for (int k = 0; k < 3; k++)
        memcpy(pids + k * np, p, (size_t)np * sizeof *p);
    memcpy(rids, r0, (size_t)n0 * sizeof *r0);
    memcpy(rids + n0, r1, (size_t)n1 * sizeof *r1);
    tls[n0 - 2] = 0.5f, tls[n0 - 1] = -0.25f, tls[n0 + n1 - 1] = 0.5f;
    const int64_t idx[] = {11, 11, 12};
    const float score[] = {1, 0.5f, 1}, acc[] = {1, 0, 1}, ol[] = {-0.25f, 0, 0}, olf[] = {1, 0, 0};
    const char *const gts[] = {"4", "4", "9"}, *const src[] = {"openai/gsm8k", "openai/gsm8k", "x/y"};
    assert_int_equal(df_batch_set_tok_i32(b, "prompt_ids", poff, pids), 0);
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", roff, rids), 0);
    assert_int_equal(df_batch_set_tok_f32(b, "token_level_scores", roff, tls), 0);
    assert_int_equal(df_batch_set_i64(b, "index", idx), 0);
    assert_int_equal(df_batch_set_f32(b, "score", score), 0);
    assert_int_equal(df_batch_set_f32(b, "acc", acc), 0);
    assert_int_equal(df_batch_set_f32(b, "overlong_reward", ol), 0);
    assert_int_equal(df_batch_set_f32(b, "overlong", olf), 0);
    assert_int_equal(df_batch_set_str(b, "ground_truth", gts), 0);
    assert_int_equal(df_batch_set_str(b, "data_source", src), 0);
    free(p), free(r0), free(r1), free(pids), free(rids), free(tls);
    return b;
}

static df_tokenizer *tokenizer(void)
{
    df_tokenizer *tok;
    assert_int_equal(df_tokenizer_train_bpe(TEXTS, 3, 300, NULL, &tok), 0);
    return tok;
}

/* The dump of b as one JSON object per line. */
static json_t *dump(const df_tokenizer *tok, const df_batch *b, bool with_step)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_int_equal(df_gen_dump_rows(f, tok, b, with_step, 7), DF_OK);
    fclose(f);
    json_t *rows = json_array();
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
        json_t *o = json_loads(l, 0, NULL);
        assert_non_null(o);
        json_array_append_new(rows, o);
    }
    free(buf);
    return rows;
}

static void test_rows(void **state)
{
    (void)state;
    df_tokenizer *tok = tokenizer();
    df_batch *b = batch(tok);
    json_t *rows = dump(tok, b, true);
    assert_int_equal(json_array_size(rows), 3);
    json_t *r0 = json_array_get(rows, 0), *r2 = json_array_get(rows, 2);
    assert_string_equal(json_string_value(json_object_get(r0, "input")), TEXTS[0]);
    assert_string_equal(json_string_value(json_object_get(r0, "output")), TEXTS[1]);
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 1), "output")), TEXTS[2]);
    assert_string_equal(json_string_value(json_object_get(r2, "output")), "");
    assert_string_equal(json_string_value(json_object_get(r2, "gts")), "9");
    /* the sequence score: token_level_scores summed (exact: a few binary fractions) */
    assert_true(df_test_metric(r0, "score") == 0.25);
    assert_true(df_test_metric(json_array_get(rows, 1), "score") == 0.5);
    assert_true(df_test_metric(r2, "score") == 1.0); /* empty: the score column */
    assert_int_equal((int)df_test_metric(r0, "step"), 7);
    assert_true(df_test_metric(r0, "acc") == 1.0 && df_test_metric(json_array_get(rows, 1), "acc") == 0.0);
    assert_true(df_test_metric(r0, "overlong_reward") == -0.25 && df_test_metric(r0, "overlong") == 1.0);
    assert_int_equal((int)df_test_metric(r2, "index"), 12);
    assert_string_equal(json_string_value(json_object_get(r2, "data_source")), "x/y");
    assert_null(json_object_get(r0, "pred")); /* no column, no key */
    json_decref(rows);
    rows = dump(tok, b, false);
    assert_null(json_object_get(json_array_get(rows, 0), "step"));
    json_decref(rows);
    /* the reward manager's pred column (df_reward_naive) becomes each row's "pred" */
    const char *pred[] = {"72", "", "9"};
    assert_int_equal(df_batch_set_str(b, "pred", pred), 0);
    rows = dump(tok, b, false);
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 0), "pred")), "72");
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, 1), "pred")), "");
    json_decref(rows);
    df_batch_free(b);
    df_tokenizer_free(tok);
}

/* Names in dir other than "." / ".." (no temporary file left beside the dumps). */
static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void test_write(void **state)
{
    const char *root = *state;
    char *dir = df_path_join(root, "dumps/rollouts"), *text = NULL;
    assert_int_equal(df_gen_dump_write(dir, "trainer.rollout_data_dir", 7, 0, 1, "a\n", 2), DF_OK);
    assert_int_equal(df_gen_dump_write(dir, "trainer.rollout_data_dir", 7, 1, 2, "b\n", 2), DF_OK);
    char *one = df_path_join(dir, "7.jsonl"), *dp1 = df_path_join(dir, "7.dp1.jsonl");
    assert_int_equal(df_read_file(one, &text, NULL), 0);
    assert_string_equal(text, "a\n");
    free(text);
    assert_int_equal(df_read_file(dp1, &text, NULL), 0);
    assert_string_equal(text, "b\n");
    free(text);
    assert_int_equal(entries(dir), 2);
    /* a directory that cannot be made: the error names the setting */
    char *blocked = df_path_join(one, "sub");
    assert_int_not_equal(df_gen_dump_write(blocked, "trainer.rollout_data_dir", 8, 0, 1, "c\n", 2), DF_OK);
    assert_non_null(strstr(df_last_error(), "trainer.rollout_data_dir"));
    free(blocked), free(one), free(dp1), free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),
        cmocka_unit_test_setup_teardown(test_write, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
