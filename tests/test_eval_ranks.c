/*
 * test_eval_ranks.c — `distflow eval` under mpiexec (docs/validation.md, "distflow eval on N ranks"):
 * each rank generates for its shard of the file (rows i % N == rank), rank 0 scores every response
 * in the file's order, prints and writes --output. The results must not depend on N.
 *
 * One sampled job (n = 4, temperature 1, --batch 2, --limit, a prompt skipped as too long, two data
 * sources) on 1, 2 and 3 ranks must print the same stdout, byte for byte, and write the same
 * --output bytes; a greedy job the same on 1 and 3 ranks. Why equality, and no tolerance, holds:
 *   - each response's tokens are drawn from a generator keyed by the seed, its prompt's
 *     dataset-wide index and its sample number (docs/rollout.md, "Determinism"), not by the rank or
 *     the prompt's place in the rank's batch; other batch shapes change the logits only in their
 *     last bits, which moves a token only when a uniform draw falls within that rounding of a
 *     boundary of the cumulative distribution (a chance of the order of float32's 2^-24 per token;
 *     test_rollout's batching test makes the same assumption);
 *   - rank 0 then applies the same operations to the same values in the same order as one rank:
 *     the responses sorted by dataset index, scored in batches of --batch prompts cut as one
 *     rank's dataloader cuts them, every sum (score, acc, lengths, each validation metric) added in
 *     that order (src/workers/dag/evaluate.c). So every printed digit is the same, not only those
 *     of exact sums. (Here acc and score are 0 or 1 per response, the math_dapo rows 1 and the
 *     gsm8k rows 0 for a random model, so their sums are exact in any order; the sampled text is
 *     in the --output bytes and the lengths.)
 * A seed keyed by a rank's local row, a shard read twice or not at all, a --limit applied per rank,
 * or dumps in rank order each change the bytes compared here (scripts/mutations.txt, eval-*).
 *
 * Failures: a malformed row that only rank 1 parses, a missing model, a data source no scorer
 * knows (found by rank 0's scoring) and an --output rank 0 cannot write each end every rank with an
 * error line of its own ("error on rank r of N") and a non-zero exit, within the timeout (no rank
 * left waiting in a collective), and leave no --output file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"
#include "util/fsutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ROWS = 14, LIMIT = 13, SKIPPED_ROW = 5 };

static char dir[256];

/* The prompt of row i (the long one is skipped by --max-prompt-length 160). */
static void prompt_of(int i, char *buf, size_t cap)
{
    if (i != SKIPPED_ROW) {
        snprintf(buf, cap, "Add %d and %d. What do you get?", i, 2 * i + 1);
        return;
    }
    buf[0] = '\0';
    for (int k = 0; k < 40; k++)
        strncat(buf, "Add 5 and 11. ", cap - strlen(buf) - 1);
}

/* dir/<name>: ROWS rows; i % 3 == 1 is math_dapo with the ground truth "[INVALID]" (the pred of a
 * response with no "Answer:" line, so these rows score 1: acc is not all zeros), the rest
 * openai/gsm8k (0 for a random model). `bad_row` >= 0: that row is cut JSON; `bad_source`: row 1's
 * data_source is one no scorer knows. */
static void write_data(const char *name, int bad_row, bool bad_source)
{
    char *text = calloc(1, 64 * 1024), line[2048], prompt[1024];
    assert_non_null(text);
    for (int i = 0; i < ROWS; i++) {
        prompt_of(i, prompt, sizeof prompt);
        bool dapo = i % 3 == 1;
        char gt[32];
        snprintf(gt, sizeof gt, dapo ? "[INVALID]" : "%d", 3 * i + 1);
        const char *src = bad_source && i == 1 ? "no/such/source" : dapo ? "math_dapo" : "openai/gsm8k";
        if (i == bad_row)
            snprintf(line, sizeof line, "{\"data_source\": \"%s\", \"prompt\": [{\"role\": \"us\n", src);
        else
            snprintf(line, sizeof line,
                     "{\"data_source\": \"%s\", \"prompt\": [{\"role\": \"user\", \"content\": \"%s\"}], "
                     "\"reward_model\": {\"style\": \"rule\", \"ground_truth\": \"%s\"}}\n",
                     src, prompt, gt);
        strcat(text, line);
    }
    char *p = df_path_join(dir, name);
    assert_int_equal(df_write_file_atomic(p, text, strlen(text)), 0);
    free(p);
    free(text);
}

/* `distflow eval --model dir/<model> --data dir/<data> <args> --output dir/<output>.jsonl` on np ranks
 * (1: without mpiexec); stdout into dir/<tag>.out, stderr into dir/<tag>.err. The exit status. */
static int eval_run_to(int np, const char *model, const char *data, const char *args, const char *tag,
                       const char *output)
{
    char cmd[4096], launcher[600] = "", sink[64];
    if (np > 1)
        snprintf(launcher, sizeof launcher, "%s --oversubscribe -np %d ", DF_MPIEXEC, np);
    /* `timeout` turns a rank left waiting into a failure (124, or 137 after the KILL) instead of a stalled
       ctest; its TERM lets mpiexec end the ranks */
    snprintf(
        cmd, sizeof cmd,
        "OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
        "OMPI_MCA_mpi_yield_when_idle=1 timeout -k 10 120 %s%s/distflow eval --model %s/%s --data %s/%s %s "
        "--output %s/%s.jsonl > %s/%s.out 2> %s/%s.err",
        launcher, DF_BINARY_DIR, dir, model, dir, data, args, dir, output, dir, tag, dir, tag);
    return df_test_command(cmd, sink, sizeof sink);
}

/* eval_run_to with --output dir/<tag>.jsonl. */
static int eval_run(int np, const char *model, const char *data, const char *args, const char *tag)
{
    return eval_run_to(np, model, data, args, tag, tag);
}

/* dir/<tag><ext>'s text (malloc'd); fails the test when it cannot be read. */
static char *read_out(const char *tag, const char *ext)
{
    char p[600], *text = NULL;
    snprintf(p, sizeof p, "%s/%s%s", dir, tag, ext);
    if (df_read_file(p, &text, NULL))
        fail_msg("%s: %s", p, df_last_error());
    return text;
}

static bool output_exists(const char *output)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s.jsonl", dir, output);
    return df_file_exists(p);
}

static int count_of(const char *text, const char *s)
{
    int n = 0;
    for (const char *p = strstr(text, s); p; p = strstr(p + 1, s))
        n++;
    return n;
}

/* The first line where a and b differ, as "line K: <a's> | <b's>" into buf. */
static const char *first_diff(const char *a, const char *b, char *buf, size_t cap)
{
    int line = 1;
    const char *la = a, *lb = b;
    for (; *a && *a == *b; a++, b++)
        if (*a == '\n')
            line++, la = a + 1, lb = b + 1;
    snprintf(buf, cap, "line %d: %.*s | %.*s", line, (int)strcspn(la, "\n"), la, (int)strcspn(lb, "\n"), lb);
    return buf;
}

/* A successful run: exit 0, its stdout and --output returned (malloc'd). */
static void run_ok(int np, const char *args, const char *tag, char **out, char **dump)
{
    int st = eval_run(np, "model", "eval.jsonl", args, tag);
    if (st) {
        char *err = read_out(tag, ".err");
        fail_msg("eval on %d rank(s) exited %d:\n%s", np, st, err);
    }
    *out = read_out(tag, ".out");
    *dump = read_out(tag, ".jsonl");
}

static const char *SAMPLED = "--n 4 --temperature 1.0 --seed 3 --batch 2 --max-response-length 12 "
                             "--limit 13 --max-prompt-length 160";

/* What the sampled job must print whatever the rank count, and how its --output must look. */
static void check_sampled(const char *out, const char *dump, const char *err_tag)
{
    /* rows 0..12 (--limit 13) without row 5 (too long): 12 prompts, 4 of them math_dapo */
    if (!strstr(out, "n_prompts: 12\n") || !strstr(out, "n_responses: 48\n") ||
        !strstr(out, "accuracy: 0.3333\n") || !strstr(out, "val-core/math_dapo/acc/mean@4: 1.0000\n") ||
        !strstr(out, "val-core/openai/gsm8k/acc/mean@4: 0.0000\n") ||
        !strstr(out, "val-core/math_dapo/acc/maj@4/mean: 1.0000\n") ||
        strstr(out, "openai/gsm8k/acc/maj@")) /* gsm8k's scorer predicts nothing to vote on */
        fail_msg("unexpected results:\n%s", out);
    assert_int_equal(count_of(out, "accuracy:"), 1); /* rank 0 alone prints */
    char *err = read_out(err_tag, ".err");
    if (count_of(err, "skipped 1 prompts longer than 160 tokens") != 1) /* the total over ranks, once */
        fail_msg("the skipped prompts are not reported once:\n%s", err);
    free(err);
    /* 48 lines in the file's order: index non-decreasing, 4 per prompt; pred only on the math_dapo
       rows (i % 3 == 1), whatever else their scoring batch holds */
    assert_int_equal(count_of(dump, "\n"), 48);
    long last = -1;
    int differ = 0;
    char prev_out[4096] = "";
    for (const char *l = dump; *l; l = strchr(l, '\n') + 1) {
        const char *ix = strstr(l, "\"index\":");
        assert_non_null(ix);
        long index = strtol(ix + 8, NULL, 10);
        assert_true(index >= last && index != SKIPPED_ROW && index < LIMIT);
        bool pred = strstr(l, "\"pred\":") && strstr(l, "\"pred\":") < strchr(l, '\n');
        bool want = index % 3 == 1;
        if (pred != want)
            fail_msg("row %ld: pred %s in its dump line", index, pred ? "present" : "absent");
        const char *o = strstr(l, "\"output\":"), *e = strstr(l, "\"gts\":");
        assert_true(o && e && e > o && (size_t)(e - o) < sizeof prev_out);
        if (index == last && strncmp(prev_out, o, (size_t)(e - o)))
            differ++;
        snprintf(prev_out, sizeof prev_out, "%.*s", (int)(e - o), o);
        last = index;
    }
    /* sampled: the responses of a prompt differ (else a seed bug would not show) */
    assert_true(differ >= 12);
}

static void test_same_results_on_1_2_3_ranks(void **state)
{
    (void)state;
    char *out1, *dump1;
    run_ok(1, SAMPLED, "s1", &out1, &dump1);
    check_sampled(out1, dump1, "s1");
    if (!DF_MPIEXEC[0]) {
        free(out1), free(dump1);
        skip(); /* built without MPI */
    }
    for (int np = 2; np <= 3; np++) {
        char tag[8], *out, *dump;
        snprintf(tag, sizeof tag, "s%d", np);
        run_ok(np, SAMPLED, tag, &out, &dump);
        check_sampled(out, dump, tag);
        char d[1024];
        if (strcmp(out, out1)) /* d: 1 rank's | np ranks' */
            fail_msg("%d ranks print other lines than 1 rank, %s", np, first_diff(out1, out, d, sizeof d));
        if (strcmp(dump, dump1))
            fail_msg("the --output of %d ranks differs from 1 rank's, %s", np,
                     first_diff(dump1, dump, d, sizeof d));
        free(out), free(dump);
    }
    free(out1), free(dump1);
    /* greedy: 1 and 3 ranks */
    const char *greedy = "--n 2 --max-response-length 12 --limit 13 --max-prompt-length 160";
    char *g1, *gd1, *g3, *gd3;
    run_ok(1, greedy, "g1", &g1, &gd1);
    run_ok(3, greedy, "g3", &g3, &gd3);
    char d[1024];
    if (strcmp(g1, g3))
        fail_msg("greedy: 3 ranks print other lines than 1 rank, %s", first_diff(g1, g3, d, sizeof d));
    if (strcmp(gd1, gd3))
        fail_msg("greedy: the --output of 3 ranks differs, %s", first_diff(gd1, gd3, d, sizeof d));
    assert_int_equal(count_of(gd1, "\n"), 24);
    free(g1), free(gd1), free(g3), free(gd3);
}

/* A failed run on np ranks: non-zero, every rank's own error line, `mentions` said, no --output
 * (dir/<output>.jsonl; NULL: dir/<tag>.jsonl). */
static void expect_failure(int np, const char *model, const char *data, const char *tag, const char *output,
                           const char *mentions)
{
    output = output ? output : tag;
    int st = eval_run_to(np, model, data, SAMPLED, tag, output);
    char *err = read_out(tag, ".err");
    if (st == 0 || st == 124 || st == 128 + 9 || !strstr(err, mentions))
        fail_msg("%s on %d rank(s): exit %d (want an error naming '%s'):\n%s", tag, np, st, mentions, err);
    for (int r = 0; np > 1 && r < np; r++) {
        char line[64];
        snprintf(line, sizeof line, "error on rank %d of %d", r, np);
        if (!strstr(err, line)) /* printed right before that rank returns 1 */
            fail_msg("%s: rank %d did not fail with an error of its own:\n%s", tag, r, err);
    }
    free(err);
    if (output_exists(output))
        fail_msg("%s: a failed run left its --output", tag);
}

static void test_failures_end_every_rank(void **state)
{
    (void)state;
    write_data("bad.jsonl", 1, false);
    write_data("unknown.jsonl", -1, true);
    expect_failure(1, "model", "bad.jsonl", "bad1", NULL, "bad.jsonl:2");
    expect_failure(1, "model", "unknown.jsonl", "unknown1", NULL, "no/such/source");
    /* a row for verl's tool loop without --tool-config would be answered single-turn */
    const char *tool = "{\"agent_name\": \"tool_agent\", \"data_source\": \"openai/gsm8k\", \"prompt\": \"1+2?\", "
                       "\"reward_model\": {\"ground_truth\": \"3\"}}\n";
    char *p = df_path_join(dir, "tool.jsonl");
    assert_int_equal(df_write_file_atomic(p, tool, strlen(tool)), 0);
    free(p);
    expect_failure(1, "model", "tool.jsonl", "tool1", NULL, "tool.jsonl:1: agent_name \"tool_agent\": the tool loop is off");
    if (!DF_MPIEXEC[0])
        skip(); /* built without MPI */
    /* row 1 is parsed by rank 1 alone (the others only count its line) */
    expect_failure(2, "model", "bad.jsonl", "bad2", NULL, "bad.jsonl:2");
    expect_failure(3, "model", "bad.jsonl", "bad3", NULL, "bad.jsonl:2");
    expect_failure(2, "no_such_model", "eval.jsonl", "nomodel2", NULL, "no_such_model");
    /* generation succeeds everywhere; rank 0's scoring fails */
    expect_failure(2, "model", "unknown.jsonl", "unknown2", NULL, "no/such/source");
    /* everything succeeds but rank 0's write of --output (into a directory that does not exist) */
    expect_failure(2, "model", "eval.jsonl", "nodir2", "no_such_dir/out", "--output");
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_eval_ranks_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    write_data("eval.jsonl", -1, false);
    char store[ROWS][1024];
    const char *texts[ROWS];
    for (int i = 0; i < ROWS; i++)
        prompt_of(i, store[i], sizeof store[i]), texts[i] = store[i];
    df_test_tiny_model(dir, texts, ROWS, 300, 32, 2, 7);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_results_on_1_2_3_ranks),
        cmocka_unit_test(test_failures_end_every_rank),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
