/*
 * `distflow plot` (src/logging/plot.h, src/cli/cmd_plot.c): metrics.jsonl read into series (order,
 * nulls, non-numbers, a cut last line) and malformed files refused with the file and line; PNGs
 * drawn per panel and per --keys key, checked for the PNG signature, the page size in their IHDR
 * chunk, a plausible size and no temporary left behind. (test_loggers plots a real run's file.)
 */
/* rounding-free (scripts/test-variants.sh skips it): parsing, text and integers only */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "logging/plot.h"
#include "util/fsutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *write_text(const char *dir, const char *name, const char *text)
{
    char *p = df_path_join(dir, name);
    assert_int_equal(df_write_file_atomic(p, text, strlen(text)), 0);
    return p;
}

/* A hand-made file: steps out of order once, a null, a string field, a validation every 2 steps, the
   rows' timestamp once. */
static const char *METRICS =
    "{\"step\": 0, \"timestamp\": 1795880000.125, \"val-core/openai/gsm8k/acc/mean@1\": 0.1, \"timing_s/testing\": 2.5}\n"
    "{\"step\": 1, \"critic/score/mean\": 0.2, \"critic/score/max\": 1, \"actor/pg_loss\": 0.05, "
    "\"actor/entropy\": 1.5, \"timing_s/gen\": 3.0, \"note\": \"warmup\"}\n"
    "\n"
    "{\"step\": 3, \"critic/score/mean\": 0.4, \"critic/score/max\": 1, \"actor/pg_loss\": null, "
    "\"actor/entropy\": 1.3, \"timing_s/gen\": 2.9}\n"
    "{\"step\": 2, \"critic/score/mean\": 0.3, \"critic/score/max\": 1, \"actor/pg_loss\": -0.02, "
    "\"actor/entropy\": 1.4, \"timing_s/gen\": 3.1, \"val-core/openai/gsm8k/acc/mean@1\": 0.2}\n";

static void test_read_series(void **state)
{
    const char *dir = *state;
    char *p = write_text(dir, "metrics.jsonl", METRICS);
    df_metrics_table t;
    assert_int_equal(df_metrics_table_read(p, &t), 0);
    assert_int_equal(t.lines, 4);
    assert_false(t.cut_last_line);
    assert_int_equal(t.n, 7); /* the string field "note" is no series */
    assert_string_equal(t.s[0].key, "val-core/openai/gsm8k/acc/mean@1");
    assert_null(df_metrics_table_find(&t, "note"));
    assert_null(df_metrics_table_find(&t, "timestamp")); /* the row's wall time is no metric */
    const df_series *s = df_metrics_table_find(&t, "critic/score/mean");
    assert_int_equal(s->n, 3);
    const double score[] = {0.2, 0.3, 0.4}; /* sorted by step: line 4 holds step 3, line 5 step 2 */
    for (int i = 0; i < 3; i++)
        assert_true(s->x[i] == i + 1 && s->y[i] == score[i]);
    s = df_metrics_table_find(&t, "actor/pg_loss"); /* the null is skipped */
    assert_int_equal(s->n, 2);
    assert_true(s->x[0] == 1 && s->x[1] == 2 && s->y[1] == -0.02);
    s = df_metrics_table_find(&t, "val-core/openai/gsm8k/acc/mean@1");
    assert_true(s->n == 2 && s->x[0] == 0 && s->x[1] == 2);
    df_metrics_table_free(&t);
    free(p);

    /* a last line without its newline that does not parse was cut by a crash: skipped, reported */
    p = write_text(dir, "cut.jsonl", "{\"step\": 1, \"a\": 1}\n{\"step\": 2, \"a\": ");
    assert_int_equal(df_metrics_table_read(p, &t), 0);
    assert_true(t.cut_last_line && t.lines == 1 && t.s[0].n == 1);
    df_metrics_table_free(&t);
    free(p);
}

/* Each malformed file is refused with its path and the line. */
static void test_malformed(void **state)
{
    const char *dir = *state;
    static const struct {
        const char *text, *msg;
    } cases[] = {
        {"{\"step\": 1, \"a\": 1}\n{\"step\": 2, \"a\": 2\n{\"step\": 3}\n", "bad.jsonl:2: not valid JSON"},
        {"{\"step\": 1, \"a\": 1}\n\n[1, 2]\n", "bad.jsonl:3: expected a JSON object of metrics"},
        {"{\"a\": 1}\n", "bad.jsonl:1: no integer \"step\" in this line"},
        {"{\"step\": 1.5, \"a\": 1}\n", "bad.jsonl:1: no integer \"step\""},
        {"", "bad.jsonl: no metrics: the file is empty"},
        {"\n  \n", "bad.jsonl: no metrics: the file is empty"},
        {"{\"step\": 1, \"a\": null}\n{\"step\": 2, \"b\": \"x\"}\n", "bad.jsonl: no numeric metric in its 2 line(s)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *p = write_text(dir, "bad.jsonl", cases[i].text);
        df_metrics_table t;
        assert_int_equal(df_metrics_table_read(p, &t), DF_EINVAL);
        assert_int_equal(t.n, 0);
        assert_last_error_mentions(cases[i].msg);
        free(p);
    }
    df_metrics_table t;
    char *missing = df_path_join(dir, "none.jsonl");
    assert_int_equal(df_metrics_table_read(missing, &t), DF_ENOTFOUND);
    free(missing);
}

/* The PNG at dir/name: its signature, IHDR width x height, and at least min_bytes. */
static void check_png(const char *dir, const char *name, long min_bytes)
{
    char *p = df_path_join(dir, name), *data;
    size_t len;
    if (df_read_file(p, &data, &len))
        fail_msg("%s: %s", name, df_last_error());
    assert_memory_equal(data, "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
    const unsigned char *u = (const unsigned char *)data;
    unsigned w = (unsigned)u[16] << 24 | u[17] << 16 | u[18] << 8 | u[19];
    unsigned h = (unsigned)u[20] << 24 | u[21] << 16 | u[22] << 8 | u[23];
    assert_int_equal(w, 1100);
    assert_int_equal(h, 620);
    if ((long)len < min_bytes)
        fail_msg("%s: %zu bytes, fewer than %ld", name, len, min_bytes);
    free(data);
    free(p);
}

static int count_written, count_keys;
static void on_written(void *user, const char *png, const char *const *keys, int n)
{
    (void)user, (void)png, (void)keys;
    count_written++;
    count_keys += n;
}

/* No ".tmp" file left in dir. */
static void no_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strstr(e->d_name, ".tmp"))
            fail_msg("temporary left in %s: %s", dir, e->d_name);
    closedir(d);
}

static void test_panels(void **state)
{
    const char *dir = *state;
    if (!df_plot_available())
        skip();
    char *p = write_text(dir, "metrics.jsonl", METRICS), *out = df_path_join(dir, "plots/a");
    df_metrics_table t;
    assert_int_equal(df_metrics_table_read(p, &t), 0);
    int n = 0;
    count_written = count_keys = 0;
    assert_int_equal(df_plot_metrics(&t, out, NULL, 0, on_written, NULL, &n), 0);
    /* score, losses, entropy, timing (both timing_s/ series), validation; nothing else has data */
    assert_int_equal(n, 5);
    assert_int_equal(count_written, 5);
    assert_int_equal(count_keys, 2 + 1 + 1 + 2 + 1);
    const char *pngs[] = {"score.png", "losses.png", "entropy.png", "timing.png", "validation.png"};
    for (int i = 0; i < 5; i++)
        check_png(out, pngs[i], 8000);
    char *absent = df_path_join(out, "kl.png");
    assert_false(df_file_exists(absent));
    free(absent);
    no_temporaries(out);

    /* --keys: one PNG per key, '/' as '_', a prefix with '*' */
    const char *keys[] = {"actor/entropy", "timing_s/*"};
    assert_int_equal(df_plot_metrics(&t, out, keys, 2, NULL, NULL, &n), 0);
    assert_int_equal(n, 2);
    check_png(out, "actor_entropy.png", 8000);
    check_png(out, "timing_s_all.png", 8000);
    /* a key the file lacks: nothing drawn, the key named */
    const char *bad[] = {"actor/entropy", "actor/kl_loss"};
    assert_int_equal(df_plot_metrics(&t, dir, bad, 2, NULL, NULL, &n), DF_EINVAL);
    assert_last_error_mentions("no metric 'actor/kl_loss' in the file");
    assert_int_equal(n, 0);
    df_metrics_table_free(&t);
    free(p);

    /* metrics none of the panels know */
    p = write_text(dir, "other.jsonl", "{\"step\": 1, \"custom/x\": 1}\n{\"step\": 2, \"custom/x\": 2}\n");
    assert_int_equal(df_metrics_table_read(p, &t), 0);
    assert_int_equal(df_plot_metrics(&t, out, NULL, 0, NULL, NULL, &n), DF_EINVAL);
    assert_last_error_mentions("name some with --keys");
    df_metrics_table_free(&t);
    free(p), free(out);
}

/* The command: PNGs listed on stdout; a malformed file: exit 1 and the line on stderr. */
static void test_cli(void **state)
{
    const char *dir = *state;
    if (!df_plot_available())
        skip();
    char *p = write_text(dir, "metrics.jsonl", METRICS), cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd, "'%s/distflow' plot '%s' --out '%s/cli' --keys critic/score/mean,critic/score/max 2>&1",
             DF_BINARY_DIR, p, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    char want[1024];
    snprintf(want, sizeof want, "%s/cli/critic_score_max.png: critic/score/max\n", dir);
    if (!strstr(out, want))
        fail_msg("output lacks '%s': %s", want, out);
    char *cli = df_path_join(dir, "cli");
    check_png(cli, "critic_score_mean.png", 8000);
    free(p);
    p = write_text(dir, "bad.jsonl", "{\"step\": 1, \"a\": 1}\n{\"step\": 2, \"a\": }\n");
    snprintf(cmd, sizeof cmd, "'%s/distflow' plot '%s' --out '%s/cli' 2>&1", DF_BINARY_DIR, p, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 1);
    snprintf(want, sizeof want, "distflow plot: error: %s:2: not valid JSON", p);
    if (!strstr(out, want))
        fail_msg("output lacks '%s': %s", want, out);
    snprintf(cmd, sizeof cmd, "'%s/distflow' plot '%s' 2>&1", DF_BINARY_DIR, p);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 2); /* --out is required */
    free(p), free(cli);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_read_series, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_malformed, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_panels, df_test_mkdtemp, df_test_rmtree),
        cmocka_unit_test_setup_teardown(test_cli, df_test_mkdtemp, df_test_rmtree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
