/* Datasets (verl JSONL schema), their shards, and GSM8K conversion (the dataloader: test_dataloader.c). */
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

static char g_tmp[64];

static int setup_tmp(void **state)
{
    (void)state;
    strcpy(g_tmp, "/tmp/df_test_dataset_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}

static int teardown_tmp(void **state)
{
    (void)state;
    return df_test_remove_tree(g_tmp);
}

/* g_tmp/name in one of 16 rotating buffers (enough for any one test). */
static const char *tmp_path(const char *name)
{
    static char buf[16][256];
    static int k;
    k = (k + 1) % 16;
    snprintf(buf[k], sizeof buf[k], "%s/%s", g_tmp, name);
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

static df_dataset *load_text(const char *text, const df_dataset_opts *o)
{
    df_dataset *ds = NULL;
    int rc = df_dataset_load_buffer(text, strlen(text), "mem.jsonl", o, &ds);
    if (rc)
        fail_msg("load failed: %s", df_last_error());
    return ds;
}

static void expect_load_error(const char *text, int code, const char *msg)
{
    df_dataset *ds = NULL;
    assert_int_equal(df_dataset_load_buffer(text, strlen(text), "bad.jsonl", NULL, &ds), code);
    assert_null(ds);
    if (!strstr(df_last_error(), msg))
        fail_msg("error '%s' lacks '%s'", df_last_error(), msg);
}

/* ---- dataset ---------------------------------------------------------------- */

static const char *const GOOD =
    "{\"data_source\": \"openai/gsm8k\", \"prompt\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"1+1?\"}], \"ability\": \"math\","
    " \"reward_model\": {\"style\": \"rule\", \"ground_truth\": \"2\"},"
    " \"extra_info\": {\"split\": \"train\", \"index\": 0, \"answer\": \"1+1=2\\n#### 2\"}}\n"
    "\n"
    "   \n"
    "{\"data_source\": \"x\", \"prompt\": \"caf\\u00e9?\", \"reward_model\": {\"ground_truth\": 18}}\r\n"
    "{\"data_source\": \"x\", \"prompt\": \"a\", \"reward_model\": {\"ground_truth\": 2.5}, \"extra_info\": null}\n"
    "{\"data_source\": \"x\", \"prompt\": \"b\", \"reward_model\": {\"ground_truth\": -3.0}}";

static void test_load_rows(void **state)
{
    (void)state;
    df_dataset *ds = load_text(GOOD, NULL);
    assert_int_equal(df_dataset_size(ds), 4);
    assert_string_equal(df_dataset_data_source(ds, 0), "openai/gsm8k");
    assert_string_equal(df_dataset_ground_truth(ds, 0), "2");
    assert_string_equal(df_dataset_reward_style(ds, 0), "rule");
    assert_string_equal(df_dataset_ability(ds, 0), "math");
    assert_string_equal(df_dataset_extra_info(ds, 0),
                        "{\"split\":\"train\",\"index\":0,\"answer\":\"1+1=2\\n#### 2\"}");
    assert_string_equal(df_dataset_raw_prompt(ds, 0),
                        "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"1+1?\"}]");
    assert_int_equal(df_dataset_num_messages(ds, 0), 2);
    const char *role, *content;
    assert_int_equal(df_dataset_message(ds, 0, 1, &role, &content), 0);
    assert_string_equal(role, "user");
    assert_string_equal(content, "1+1?");
    assert_int_equal(df_dataset_message(ds, 0, 2, &role, &content), DF_EINVAL);
    /* plain-string prompt -> one user message; numbers as text; blank lines counted */
    assert_int_equal(df_dataset_num_messages(ds, 1), 1);
    assert_int_equal(df_dataset_message(ds, 1, 0, &role, &content), 0);
    assert_string_equal(role, "user");
    assert_string_equal(content, "caf\xc3\xa9?");
    assert_string_equal(df_dataset_raw_prompt(ds, 1), "[{\"role\":\"user\",\"content\":\"caf\xc3\xa9?\"}]");
    assert_string_equal(df_dataset_ground_truth(ds, 1), "18");
    assert_string_equal(df_dataset_ground_truth(ds, 2), "2.5");
    assert_string_equal(df_dataset_ground_truth(ds, 3), "-3.0");
    assert_string_equal(df_dataset_extra_info(ds, 1), "{}");
    assert_string_equal(df_dataset_extra_info(ds, 2), "{}");
    assert_string_equal(df_dataset_ability(ds, 1), "");
    assert_string_equal(df_dataset_reward_style(ds, 1), "");
    int64_t line = 0;
    assert_string_equal(df_dataset_source(ds, 1, &line), "mem.jsonl");
    assert_int_equal(line, 4);
    df_dataset_source(ds, 3, &line);
    assert_int_equal(line, 6);
    assert_null(df_dataset_data_source(ds, 4));
    assert_null(df_dataset_raw_prompt(ds, -1));
    assert_int_equal(df_dataset_num_messages(ds, 9), -1);
    df_dataset_free(ds);

    /* empty input is an empty dataset */
    ds = load_text("\n\n", NULL);
    assert_int_equal(df_dataset_size(ds), 0);
    df_dataset_free(ds);
}

static void test_field(void **state)
{
    (void)state;
    df_dataset *ds = load_text(GOOD, NULL);
    char *s = NULL;
    assert_int_equal(df_dataset_field(ds, 0, "extra_info.answer", &s), 0);
    assert_string_equal(s, "1+1=2\n#### 2");
    free(s);
    assert_int_equal(df_dataset_field(ds, 0, "extra_info.index", &s), 0);
    assert_string_equal(s, "0");
    free(s);
    assert_int_equal(df_dataset_field(ds, 0, "prompt.1.content", &s), 0);
    assert_string_equal(s, "1+1?");
    free(s);
    assert_int_equal(df_dataset_field(ds, 0, "reward_model", &s), 0);
    assert_string_equal(s, "{\"style\":\"rule\",\"ground_truth\":\"2\"}");
    free(s);
    assert_int_equal(df_dataset_field(ds, 2, "reward_model.ground_truth", &s), 0);
    assert_string_equal(s, "2.5");
    free(s);
    assert_int_equal(df_dataset_field(ds, 2, "extra_info", &s), 0);
    assert_string_equal(s, "");
    free(s);
    s = NULL;
    assert_int_equal(df_dataset_field(ds, 0, "extra_info.missing", &s), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "mem.jsonl:1: no field \"extra_info.missing\""));
    assert_int_equal(df_dataset_field(ds, 0, "prompt.2.content", &s), DF_ENOTFOUND);
    assert_int_equal(df_dataset_field(ds, 0, "prompt.x", &s), DF_ENOTFOUND);
    assert_int_equal(df_dataset_field(ds, 0, "extra_info.", &s), DF_ENOTFOUND);
    assert_int_equal(df_dataset_field(ds, 0, "", &s), DF_ENOTFOUND);
    assert_int_equal(df_dataset_field(ds, 7, "prompt", &s), DF_EINVAL);
    assert_null(s);
    df_dataset_free(ds);
}

static void test_malformed(void **state)
{
    (void)state;
    const char *ok = "{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": \"1\"}}\n";
    char buf[512];
    snprintf(buf, sizeof buf, "%s\n{\"data_source\": \"x\", \"prompt\": [}\n", ok);
    expect_load_error(buf, DF_EINVAL, "bad.jsonl:3:");
    expect_load_error(buf, DF_EINVAL, "invalid JSON");
    snprintf(buf, sizeof buf, "%s{\"prompt\": \"q\", \"prompt\": \"r\"}", ok);
    expect_load_error(buf, DF_EINVAL, "bad.jsonl:2:");
    expect_load_error("[1, 2]\n", DF_EINVAL, "bad.jsonl:1: expected a JSON object, got array");
    expect_load_error("{\"data_source\": \"x\", \"reward_model\": {\"ground_truth\": \"1\"}}",
                      DF_EINVAL, "bad.jsonl:1: missing \"prompt\"");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": 5, \"reward_model\": {\"ground_truth\": \"1\"}}",
                      DF_EINVAL, "\"prompt\" must be a list of chat messages or a string, got integer");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": [], \"reward_model\": {\"ground_truth\": \"1\"}}",
                      DF_EINVAL, "empty message list");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": [\"hi\"], \"reward_model\": {\"ground_truth\": \"1\"}}",
                      DF_EINVAL, "prompt[0] must be an object {role, content}, got string");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": [{\"content\": \"c\"}], \"reward_model\": {\"ground_truth\": \"1\"}}",
                      DF_EINVAL, "prompt[0].role must be a string, got nothing");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": [{\"role\": \"user\", \"content\": [1]}], "
                      "\"reward_model\": {\"ground_truth\": \"1\"}}",
                      DF_EINVAL, "prompt[0].content must be a string, got array");
    expect_load_error("{\"prompt\": \"q\", \"reward_model\": {\"ground_truth\": \"1\"}}", DF_EINVAL,
                      "bad.jsonl:1: missing \"data_source\"");
    expect_load_error("{\"data_source\": 3, \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": \"1\"}}",
                      DF_EINVAL, "data_source must be a string, got integer");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": \"q\"}", DF_EINVAL, "missing \"reward_model\"");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": \"1\"}", DF_EINVAL,
                      "reward_model must be an object, got string");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": [1]}}",
                      DF_EINVAL, "reward_model.ground_truth must be a string or number, got array");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": \"1\", "
                      "\"style\": 1}}",
                      DF_EINVAL, "reward_model.style must be a string");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": \"1\"}, "
                      "\"extra_info\": \"e\"}",
                      DF_EINVAL, "extra_info must be an object, got string");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": \"1\"}, "
                      "\"ability\": 1}",
                      DF_EINVAL, "ability must be a string, got integer");
    expect_load_error("{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": true}}",
                      DF_EINVAL, "got true");
}

/* verl's per-row agent_name against the job's one agent loop (df_dataset_opts.agent_loop). */
static void test_agent_name(void **state)
{
    (void)state;
#define ROW(agent) "{\"data_source\": \"x\", \"prompt\": \"q\", \"reward_model\": {\"ground_truth\": \"1\"}" agent "}\n"
    const char *text = ROW("") ROW(", \"agent_name\": null") ROW(", \"agent_name\": \"tool_agent\"");
    df_dataset_opts tool = {.agent_loop = "tool_agent"}, single = {.agent_loop = "single_turn_agent"};
    df_dataset *ds = load_text(text, &tool);
    assert_int_equal(df_dataset_size(ds), 3);
    df_dataset_free(ds);
    ds = load_text(text, NULL); /* not checked */
    df_dataset_free(ds);
    const struct {
        const char *row;
        const df_dataset_opts *o;
        const char *msg;
    } bad[] = {
        {ROW(", \"agent_name\": \"tool_agent\""), &single, "mem.jsonl:1: agent_name \"tool_agent\": the tool loop is off"},
        {ROW(", \"agent_name\": \"single_turn_agent\""), &tool, "agent_name \"single_turn_agent\": the tool loop is on"},
        {ROW(", \"agent_name\": \"react_agent\""), &single, "agent_name \"react_agent\": distflow's agent loops are"},
        {ROW(", \"agent_name\": 3"), &tool, "agent_name must be a string, got integer"},
    };
#undef ROW
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ds = NULL;
        assert_int_equal(df_dataset_load_buffer(bad[i].row, strlen(bad[i].row), "mem.jsonl", bad[i].o, &ds), DF_EINVAL);
        assert_null(ds);
        if (!strstr(df_last_error(), bad[i].msg))
            fail_msg("error '%s' lacks '%s'", df_last_error(), bad[i].msg);
    }
}

static void test_sft_options(void **state)
{
    (void)state;
    const char *text = "{\"extra_info\": {\"question\": \"Q1\", \"answer\": \"A1\"}}\n"
                       "{\"extra_info\": {\"question\": \"Q2\", \"answer\": \"A2\"}}\n";
    df_dataset_opts o = {.prompt_key = "extra_info.question", .reward_optional = true};
    df_dataset *ds = load_text(text, &o);
    assert_int_equal(df_dataset_size(ds), 2);
    const char *content;
    df_dataset_message(ds, 1, 0, NULL, &content);
    assert_string_equal(content, "Q2");
    assert_string_equal(df_dataset_data_source(ds, 0), "");
    assert_string_equal(df_dataset_ground_truth(ds, 0), "");
    char *s;
    assert_int_equal(df_dataset_field(ds, 1, "extra_info.answer", &s), 0);
    assert_string_equal(s, "A2");
    free(s);
    df_dataset_free(ds);
    /* without the options the same file is an RL error */
    expect_load_error(text, DF_EINVAL, "bad.jsonl:1: missing \"prompt\"");
}

static void test_files_and_filter(void **state)
{
    (void)state;
    const char *a = tmp_path("a.jsonl"), *b = tmp_path("b.jsonl");
    write_text(a, "{\"data_source\": \"s\", \"prompt\": \"a0\", \"reward_model\": {\"ground_truth\": \"0\"}}\n"
                  "{\"data_source\": \"s\", \"prompt\": \"a1\", \"reward_model\": {\"ground_truth\": \"1\"}}\n");
    write_text(b, "\n{\"data_source\": \"s\", \"prompt\": \"b0\", \"reward_model\": {\"ground_truth\": \"2\"}}\n"
                  "{\"data_source\": \"s\", \"prompt\": \"b1\", \"reward_model\": {\"ground_truth\": \"3\"}}\n"
                  "{\"data_source\": \"s\", \"prompt\": \"b2\", \"reward_model\": {\"ground_truth\": \"4\"}}\n");
    const char *paths[] = {a, b};
    df_dataset *ds = NULL;
    assert_int_equal(df_dataset_load(paths, 2, NULL, &ds), 0);
    assert_int_equal(df_dataset_size(ds), 5);
    int64_t line;
    assert_string_equal(df_dataset_source(ds, 2, &line), b);
    assert_int_equal(line, 2);
    for (int i = 0; i < 5; i++) {
        char want[2] = {(char)('0' + i), 0};
        assert_string_equal(df_dataset_ground_truth(ds, i), want);
    }
    const bool keep[] = {true, false, false, true, true};
    assert_int_equal(df_dataset_filter(ds, keep), 2);
    assert_int_equal(df_dataset_size(ds), 3);
    assert_string_equal(df_dataset_ground_truth(ds, 0), "0");
    assert_string_equal(df_dataset_ground_truth(ds, 1), "3");
    assert_string_equal(df_dataset_ground_truth(ds, 2), "4");
    assert_string_equal(df_dataset_raw_prompt(ds, 2), "[{\"role\":\"user\",\"content\":\"b2\"}]");
    assert_string_equal(df_dataset_source(ds, 1, &line), b);
    assert_int_equal(line, 3);
    const bool none[] = {false, false, false};
    assert_int_equal(df_dataset_filter(ds, none), 3);
    assert_int_equal(df_dataset_size(ds), 0);
    df_dataset_free(ds);

    /* a missing file / a bad line in the second file */
    const char *missing[] = {a, tmp_path("nope.jsonl")};
    ds = NULL;
    assert_int_equal(df_dataset_load(missing, 2, NULL, &ds), DF_ENOTFOUND);
    assert_non_null(strstr(df_last_error(), "nope.jsonl"));
    assert_null(ds);
    write_text(b, "{\"data_source\": \"s\", \"prompt\": \"b0\", \"reward_model\": {\"ground_truth\": \"2\"}}\n{oops}\n");
    assert_int_equal(df_dataset_load(paths, 2, NULL, &ds), DF_EINVAL);
    char want[300];
    snprintf(want, sizeof want, "%s:2:5: invalid JSON", b);
    if (!strstr(df_last_error(), want))
        fail_msg("'%s' lacks '%s'", df_last_error(), want);
    assert_int_equal(df_dataset_load(paths, 0, NULL, &ds), DF_EINVAL);
    /* a file with Parquet's magic is read as Parquet: a cut one is refused as such */
    write_text(b, "PAR1\x15\x04binary");
    assert_int_equal(df_dataset_load(paths, 2, NULL, &ds), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "truncated Parquet file"));
    assert_int_equal(df_gsm8k_convert(b, tmp_path("pq.jsonl"), NULL, NULL), DF_EINVAL);
    assert_false(file_exists(tmp_path("pq.jsonl")));
}

/* ---- Parquet files (verl's usual format; the reader itself: test_parquet.c) ---------- */

#define PQ_DIR DF_SOURCE_DIR "/tests/fixtures/parquet/"

/* Row i of a equals row j of b, accessor by accessor. */
static void same_row(const df_dataset *a, int64_t i, const df_dataset *b, int64_t j)
{
    assert_string_equal(df_dataset_data_source(a, i), df_dataset_data_source(b, j));
    assert_string_equal(df_dataset_ground_truth(a, i), df_dataset_ground_truth(b, j));
    assert_string_equal(df_dataset_reward_style(a, i), df_dataset_reward_style(b, j));
    assert_string_equal(df_dataset_ability(a, i), df_dataset_ability(b, j));
    assert_string_equal(df_dataset_extra_info(a, i), df_dataset_extra_info(b, j));
    assert_string_equal(df_dataset_raw_prompt(a, i), df_dataset_raw_prompt(b, j));
}

static int first_value(void *user, const char *value, const char *file, int64_t line)
{
    char *log = user;
    size_t n = strlen(log);
    snprintf(log + n, 256 - n, "%s@%s:%lld;", value, strrchr(file, '/') + 1, (long long)line);
    return 0;
}

static void test_parquet_files(void **state)
{
    (void)state;
    const char *pq[] = {PQ_DIR "gsm8k_verl.parquet"}, *js[] = {PQ_DIR "gsm8k_verl.jsonl"};
    df_dataset *a = NULL, *b = NULL;
    assert_int_equal(df_dataset_load(pq, 1, NULL, &a), DF_OK);
    assert_int_equal(df_dataset_load(js, 1, NULL, &b), DF_OK);
    assert_int_equal(df_dataset_size(a), 10);
    assert_int_equal(df_dataset_size(b), 10);
    for (int64_t i = 0; i < 10; i++)
        same_row(a, i, b, i); /* the Parquet file reads as its JSON-lines rendering (DuckDB's) */
    assert_string_equal(df_dataset_data_source(a, 0), "openai/gsm8k");
    assert_string_equal(df_dataset_ground_truth(a, 0), "60");
    assert_string_equal(df_dataset_reward_style(a, 0), "rule");
    const char *role, *content;
    assert_int_equal(df_dataset_message(a, 0, 0, &role, &content), DF_OK);
    assert_string_equal(role, "user");
    assert_non_null(strstr(content, "12 muffins per tray"));
    assert_non_null(strstr(df_dataset_extra_info(a, 0), "\"index\":0"));
    assert_non_null(strstr(df_dataset_extra_info(a, 6), "\"split\":\"test\"")); /* the second row group */
    int64_t row = 0;
    assert_string_equal(df_dataset_source(a, 6, &row), pq[0]);
    assert_int_equal(row, 7); /* 1-based row, where JSON lines give the line */
    df_dataset_free(a);

    /* shards and mixed formats: the rows of both files numbered in order */
    const char *both[] = {js[0], pq[0]};
    df_dataset_opts o = {.shard_index = 1, .shard_count = 3};
    assert_int_equal(df_dataset_load(both, 2, &o, &a), DF_OK);
    assert_int_equal(df_dataset_size(a), 7); /* global rows 1, 4, ..., 19 */
    for (int64_t i = 0; i < 7; i++)
        same_row(a, i, b, (1 + 3 * i) % 10), assert_int_equal(df_dataset_global_index(a, i), 1 + 3 * i);
    assert_string_equal(df_dataset_source(a, 4, &row), pq[0]);
    assert_int_equal(row, 4); /* global row 13 = row 4 of the Parquet file */
    df_dataset_free(a);
    df_dataset_free(b);

    /* a row that is not a dataset row names the file and the row */
    const char *types[] = {PQ_DIR "types_snappy.parquet"};
    assert_int_equal(df_dataset_load(types, 1, NULL, &a), DF_EINVAL);
    if (!strstr(df_last_error(), "types_snappy.parquet: row 1: missing"))
        fail_msg("%s", df_last_error());
    const char *blob[] = {PQ_DIR "blob.parquet"};
    assert_int_equal(df_dataset_load(blob, 1, NULL, &a), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "blob.parquet: row 2, column 'b': a value that is not UTF-8"));

    /* the converters read Hugging Face's own openai/gsm8k parquet layout (question, answer) */
    int64_t n = 0;
    const char *out = tmp_path("gsm8k_from_parquet.jsonl");
    assert_int_equal(df_gsm8k_convert(PQ_DIR "gsm8k_raw.parquet", out, "train", &n), DF_OK);
    assert_int_equal(n, 3);
    const char *conv[] = {out};
    assert_int_equal(df_dataset_load(conv, 1, NULL, &a), DF_OK);
    assert_string_equal(df_dataset_ground_truth(a, 0), "42");
    assert_string_equal(df_dataset_ground_truth(a, 2), "135");
    assert_non_null(strstr(df_dataset_extra_info(a, 1), "\"index\":1"));
    df_dataset_free(a);

    /* scans read Parquet too */
    char log[256] = "";
    assert_int_equal(df_dataset_scan_values(pq, 1, "extra_info.split", -1, first_value, log), DF_OK);
    assert_string_equal(log, "train@gsm8k_verl.parquet:1;test@gsm8k_verl.parquet:6;");
}

/* ---- shards -------------------------------------------------------------------- */

/* Row text with prompt "p<g>" and ground truth "<g>". */
static void add_row(char *buf, size_t cap, int g)
{
    size_t at = strlen(buf);
    snprintf(buf + at, cap - at,
             "{\"data_source\": \"s\", \"prompt\": \"p%d\", \"reward_model\": {\"ground_truth\": %d}}\n", g,
             g);
}

/* 11 rows over three files, with blank lines: a (rows 0-3), b (4-8), c (9-10). */
static void write_three(const char *paths[3])
{
    static const int first[4] = {0, 4, 9, 11};
    for (int f = 0; f < 3; f++) {
        char text[2048] = "";
        for (int g = first[f]; g < first[f + 1]; g++) {
            if (g % 3 == 1)
                strcat(text, "\n  \r\n"); /* blank lines are not rows */
            add_row(text, sizeof text, g);
        }
        write_text(paths[f], text);
    }
}

static df_dataset *load_shard(const char *const *paths, int n, int k, int count)
{
    df_dataset_opts o = {.shard_index = k, .shard_count = count};
    df_dataset *ds = NULL;
    if (df_dataset_load(paths, n, &o, &ds))
        fail_msg("shard %d of %d: %s", k, count, df_last_error());
    return ds;
}

static void test_shards(void **state)
{
    (void)state;
    const char *paths[3] = {tmp_path("a.jsonl"), tmp_path("b.jsonl"), tmp_path("c.jsonl")};
    write_three(paths);
    df_dataset *all = load_shard(paths, 3, 0, 0);
    assert_int_equal(df_dataset_size(all), 11);
    assert_int_equal(df_dataset_global_size(all), 11);
    int si = -1, sc = -1;
    df_dataset_shard(all, &si, &sc);
    assert_int_equal(si, 0);
    assert_int_equal(sc, 1);
    for (int count = 1; count <= 12; count++) {
        int seen[11] = {0};
        for (int k = 0; k < count; k++) {
            df_dataset *ds = load_shard(paths, 3, k, count);
            assert_int_equal(df_dataset_global_size(ds), 11);
            assert_int_equal(df_dataset_size(ds), (11 - k + count - 1) / count);
            df_dataset_shard(ds, &si, &sc);
            assert_int_equal(si, k);
            assert_int_equal(sc, count);
            for (int64_t i = 0; i < df_dataset_size(ds); i++) {
                int64_t g = df_dataset_global_index(ds, i), line, want_line;
                assert_int_equal(g, k + i * count); /* strided, in file order */
                char want[16];
                snprintf(want, sizeof want, "%lld", (long long)g);
                assert_string_equal(df_dataset_ground_truth(ds, i), want);
                /* same file and line as in the unsharded load */
                assert_string_equal(df_dataset_source(ds, i, &line), df_dataset_source(all, g, &want_line));
                assert_int_equal(line, want_line);
                seen[g]++;
            }
            assert_int_equal(df_dataset_global_index(ds, df_dataset_size(ds)), -1);
            assert_int_equal(df_dataset_global_index(ds, -1), -1);
            df_dataset_free(ds);
        }
        for (int g = 0; g < 11; g++)
            assert_int_equal(seen[g], 1); /* every row in exactly one shard */
    }
    int64_t line;
    assert_string_equal(df_dataset_source(all, 7, &line), paths[1]);
    assert_int_equal(line, 8); /* b: a blank pair before rows 4 and 7 */
    df_dataset_free(all);

    /* the same shard from a buffer */
    df_dataset_opts o = {.shard_index = 2, .shard_count = 3};
    df_dataset *ds = load_text(GOOD, &o);
    assert_int_equal(df_dataset_size(ds), 1);
    assert_int_equal(df_dataset_global_size(ds), 4);
    assert_int_equal(df_dataset_global_index(ds, 0), 2);
    assert_string_equal(df_dataset_ground_truth(ds, 0), "2.5");
    df_dataset_free(ds);
}

static void test_shard_errors(void **state)
{
    (void)state;
    const char *a = tmp_path("a.jsonl"), *b = tmp_path("b.jsonl");
    char text[2048] = "";
    for (int g = 0; g < 3; g++)
        add_row(text, sizeof text, g);
    write_text(a, text);
    /* b: global row 3 fine, row 4 bad JSON at b:3, row 5 without a prompt at b:4, row 6 fine */
    text[0] = '\0';
    add_row(text, sizeof text, 3);
    strcat(text, "\n{\"data_source\": \"s\", oops}\n{\"data_source\": \"s\", \"reward_model\": {\"ground_truth\": 5}}\n");
    add_row(text, sizeof text, 6);
    write_text(b, text);
    const char *paths[] = {a, b};
    char want[300];
    df_dataset *ds = NULL;
    df_dataset_opts o = {.shard_index = 1, .shard_count = 3};
    /* shard 1 of 3 holds rows 1 and 4: row 4's error, with its file:line:column */
    assert_int_equal(df_dataset_load(paths, 2, &o, &ds), DF_EINVAL);
    assert_null(ds);
    snprintf(want, sizeof want, "%s:3:", b);
    if (!strstr(df_last_error(), want) || !strstr(df_last_error(), "invalid JSON"))
        fail_msg("'%s' lacks '%s' / invalid JSON", df_last_error(), want);
    o.shard_index = 2; /* rows 2 and 5: the missing prompt */
    assert_int_equal(df_dataset_load(paths, 2, &o, &ds), DF_EINVAL);
    snprintf(want, sizeof want, "%s:4: missing \"prompt\"", b);
    if (!strstr(df_last_error(), want))
        fail_msg("'%s' lacks '%s'", df_last_error(), want);
    o.shard_index = 0; /* rows 0, 3, 6: the bad lines are another rank's */
    ds = load_shard(paths, 2, 0, 3);
    assert_int_equal(df_dataset_size(ds), 3);
    assert_int_equal(df_dataset_global_size(ds), 7);
    assert_int_equal(df_dataset_global_index(ds, 2), 6);
    assert_string_equal(df_dataset_ground_truth(ds, 2), "6");
    int64_t line;
    assert_string_equal(df_dataset_source(ds, 2, &line), b);
    assert_int_equal(line, 5);
    df_dataset_free(ds);
    /* not a shard */
    const int bad[][2] = {{-1, 2}, {2, 2}, {0, -1}, {1, 0}, {1, 1}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        o = (df_dataset_opts){.shard_index = bad[k][0], .shard_count = bad[k][1]};
        ds = NULL;
        assert_int_equal(df_dataset_load(paths, 2, &o, &ds), DF_EINVAL);
        assert_null(ds);
        assert_non_null(strstr(df_last_error(), "shard"));
        assert_int_equal(df_dataset_load_buffer("", 0, "x", &o, &ds), DF_EINVAL);
    }
}

static void test_head_is_global(void **state)
{
    (void)state;
    char text[4096] = "";
    for (int g = 0; g < 20; g++)
        add_row(text, sizeof text, g);
    df_dataset *all = load_text(text, NULL);
    assert_int_equal(df_dataset_head(all, -1), 0);
    assert_int_equal(df_dataset_head(all, 25), 0);
    assert_int_equal(df_dataset_head(all, 12), 8); /* unsharded: the first 12 rows */
    assert_int_equal(df_dataset_size(all), 12);
    assert_string_equal(df_dataset_ground_truth(all, 11), "11");
    assert_int_equal(df_dataset_global_size(all), 20);
    df_dataset_free(all);

    df_dataset_opts o = {.shard_index = 1, .shard_count = 3};
    df_dataset *ds = load_text(text, &o); /* rows 1, 4, 7, 10, 13, 16, 19 */
    assert_int_equal(df_dataset_head(ds, 11), 3); /* keeps 1, 4, 7, 10 */
    assert_int_equal(df_dataset_size(ds), 4);
    assert_int_equal(df_dataset_global_index(ds, 3), 10);
    const bool keep[] = {true, false, true, true}; /* 1, 7, 10 */
    assert_int_equal(df_dataset_filter(ds, keep), 1);
    assert_int_equal(df_dataset_head(ds, 8), 1); /* global < 8, not the first 8 left */
    assert_int_equal(df_dataset_size(ds), 2);
    assert_int_equal(df_dataset_global_index(ds, 1), 7);
    assert_string_equal(df_dataset_ground_truth(ds, 1), "7");
    assert_int_equal(df_dataset_head(ds, 0), 2);
    assert_int_equal(df_dataset_size(ds), 0);
    assert_int_equal(df_dataset_head(ds, 5), 0);
    assert_int_equal(df_dataset_global_size(ds), 20);
    df_dataset_free(ds);
}

/* ---- GSM8K ------------------------------------------------------------------------ */

static void test_gsm8k_extract(void **state)
{
    (void)state;
    char out[32];
    assert_true(df_gsm8k_extract_answer("a\n#### 72", out, sizeof out));
    assert_string_equal(out, "72");
    assert_true(df_gsm8k_extract_answer("#### 1,234,567", out, sizeof out));
    assert_string_equal(out, "1234567");
    assert_true(df_gsm8k_extract_answer("#### -5.5", out, sizeof out));
    assert_string_equal(out, "-5.5");
    assert_true(df_gsm8k_extract_answer("#### 3 then #### 4", out, sizeof out)); /* first wins */
    assert_string_equal(out, "3");
    assert_true(df_gsm8k_extract_answer("#### x #### 9", out, sizeof out)); /* first that matches */
    assert_string_equal(out, "9");
    assert_true(df_gsm8k_extract_answer("#### -x #### 8", out, sizeof out));
    assert_string_equal(out, "8");
    assert_false(df_gsm8k_extract_answer("####72", out, sizeof out));
    assert_false(df_gsm8k_extract_answer("#### $7", out, sizeof out));
    assert_false(df_gsm8k_extract_answer("no answer", out, sizeof out));
    assert_false(df_gsm8k_extract_answer("#### 123456", out, 4)); /* does not fit */
}

static uint64_t fnv1a64_file(const char *path, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    uint64_t h = 0xcbf29ce484222325ULL;
    int c;
    *bytes = 0;
    while ((c = fgetc(f)) != EOF) {
        h = (h ^ (uint64_t)(unsigned char)c) * 0x100000001b3ULL;
        (*bytes)++;
    }
    fclose(f);
    return h;
}

static void test_gsm8k_real_files(void **state)
{
    (void)state;
    /* hashes of the rows verl's preprocessing writes, from tests/golden/gsm8k_verl_reference.py */
    static const struct {
        const char *split;
        int64_t rows;
        size_t bytes;
        uint64_t fnv;
    } want[] = {{"train", 7473, 7940014, 0xbde889e611d74477ULL},
                {"test", 1319, 1420649, 0xe071c9fd59f254bfULL}};
    for (int k = 0; k < 2; k++) {
        char in[512];
        snprintf(in, sizeof in, "%s/data/gsm8k/%s.jsonl", DF_SHARED_DIR, want[k].split);
        if (!file_exists(in)) {
            print_message("skipping: %s not found\n", in);
            skip();
        }
        const char *out = tmp_path(k ? "test.jsonl" : "train.jsonl");
        int64_t n = 0;
        if (df_gsm8k_convert(in, out, NULL, &n))
            fail_msg("%s", df_last_error());
        assert_int_equal(n, want[k].rows);
        size_t bytes;
        uint64_t h = fnv1a64_file(out, &bytes);
        assert_int_equal(bytes, want[k].bytes);
        assert_true(h == want[k].fnv);
        df_dataset *ds = NULL;
        const char *paths[] = {out};
        assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0);
        assert_int_equal(df_dataset_size(ds), want[k].rows);
        for (int64_t i = 0; i < df_dataset_size(ds); i++) {
            assert_string_equal(df_dataset_data_source(ds, i), "openai/gsm8k");
            assert_true(df_dataset_ground_truth(ds, i)[0] != '\0');
        }
        if (k == 0) {
            const char *content;
            df_dataset_message(ds, 0, 0, NULL, &content);
            assert_string_equal(content,
                                "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                                "many clips in May. How many clips did Natalia sell altogether in April and "
                                "May? Let's think step by step and output the final answer after \"####\".");
            assert_string_equal(df_dataset_ground_truth(ds, 0), "72");
            assert_string_equal(df_dataset_ability(ds, 0), "math");
            assert_string_equal(df_dataset_reward_style(ds, 0), "rule");
            char *s;
            assert_int_equal(df_dataset_field(ds, 7472, "extra_info.index", &s), 0);
            assert_string_equal(s, "7472");
            free(s);
            assert_int_equal(df_dataset_field(ds, 0, "extra_info.split", &s), 0);
            assert_string_equal(s, "train");
            free(s);
        }
        df_dataset_free(ds);
    }
}

/* --multiturn-tool: verl's gsm8k_multiturn_w_tool rows (system prompt, tools / interaction kwargs). */
static void test_gsm8k_tool_rows(void **state)
{
    (void)state;
    const char *in = tmp_path("raw_t.jsonl"), *out = tmp_path("conv_t.jsonl");
    int64_t n = -1;
    write_text(in, "{\"question\": \"Q?\", \"answer\": \"work\\n#### 1,000\"}\n");
    assert_int_equal(df_gsm8k_convert_tool(in, out, "train", &n), 0);
    assert_int_equal(n, 1);
    df_dataset *ds = NULL;
    const char *paths[] = {out};
    assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0);
    assert_int_equal(df_dataset_num_messages(ds, 0), 2);
    const char *role, *content;
    assert_int_equal(df_dataset_message(ds, 0, 0, &role, &content), 0);
    assert_string_equal(role, "system");
    assert_string_equal(content, DF_GSM8K_TOOL_SYSTEM);
    assert_string_equal(df_dataset_extra_info(ds, 0),
                        "{\"split\":\"train\",\"index\":0,\"answer\":\"work\\n#### 1,000\",\"question\":\"Q?\","
                        "\"need_tools_kwargs\":true,\"tools_kwargs\":{\"calc_gsm8k_reward\":{\"create_kwargs\":"
                        "{\"ground_truth\":\"1000\"}}},\"interaction_kwargs\":{\"query\":\"Q?\",\"ground_truth\":\"1000\"}}");
    df_dataset_free(ds);
}

static void test_gsm8k_malformed(void **state)
{
    (void)state;
    const char *in = tmp_path("raw.jsonl"), *out = tmp_path("conv.jsonl");
    int64_t n = -1;
    /* a good conversion with an explicit split name and a blank line */
    write_text(in, "{\"question\": \"Q \\u2019?\", \"answer\": \"work\\n#### 1,000\"}\n\n"
                   "{\"question\": \"R\", \"answer\": \"#### -2\"}\n");
    assert_int_equal(df_gsm8k_convert(in, out, "dev", &n), 0);
    assert_int_equal(n, 2);
    df_dataset *ds = NULL;
    const char *paths[] = {out};
    assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0);
    assert_string_equal(df_dataset_ground_truth(ds, 0), "1000");
    assert_string_equal(df_dataset_ground_truth(ds, 1), "-2");
    assert_string_equal(df_dataset_extra_info(ds, 1),
                        "{\"split\":\"dev\",\"index\":1,\"answer\":\"#### -2\",\"question\":\"R\"}");
    df_dataset_free(ds);
    FILE *f = fopen(out, "rb");
    char line[1024];
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_non_null(strstr(line, "\"content\": \"Q \\u2019? Let's think step by step")); /* Python escaping */

    /* failures name in:line and leave the previous output untouched */
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"{\"question\": \"Q\", \"answer\": \"#### 1\"}\n{\"question\": \"Q\"\n", "raw.jsonl:2:"},
        {"{\"question\": \"Q\", \"answer\": \"#### 1\"}\n\n{\"answer\": \"#### 1\"}\n",
         "raw.jsonl:3: missing \"question\""},
        {"{\"question\": \"Q\", \"answer\": 5}\n", "raw.jsonl:1: \"answer\" must be a string, got integer"},
        {"{\"question\": \"Q\", \"answer\": \"no final line\"}\n",
         "raw.jsonl:1: answer has no \"#### <number>\" final answer"},
        {"\"just a string\"\n", "raw.jsonl:1: expected a JSON object"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        write_text(in, bad[k].text);
        assert_int_equal(df_gsm8k_convert(in, out, NULL, &n), DF_EINVAL);
        if (!strstr(df_last_error(), bad[k].msg))
            fail_msg("case %zu: '%s' lacks '%s'", k, df_last_error(), bad[k].msg);
        assert_int_equal(df_dataset_load(paths, 1, NULL, &ds), 0); /* old output still whole */
        assert_int_equal(df_dataset_size(ds), 2);
        df_dataset_free(ds);
    }
    const char *fresh = tmp_path("never.jsonl");
    assert_int_equal(df_gsm8k_convert(in, fresh, NULL, &n), DF_EINVAL);
    assert_false(file_exists(fresh));
    assert_int_equal(df_gsm8k_convert(tmp_path("missing.jsonl"), fresh, NULL, &n), DF_ENOTFOUND);
    assert_false(file_exists(fresh));
    /* unwritable destination */
    write_text(in, "{\"question\": \"Q\", \"answer\": \"#### 1\"}\n");
    assert_int_equal(df_gsm8k_convert(in, tmp_path("no/such/dir.jsonl"), NULL, &n), DF_EIO);
    /* the input as the output: refused, the input kept */
    assert_int_equal(df_gsm8k_convert(in, in, NULL, &n), DF_EINVAL);
    assert_last_error_mentions("the output is the input file");
    char *text = NULL;
    assert_int_equal(df_read_file(in, &text, NULL), 0);
    assert_string_equal(text, "{\"question\": \"Q\", \"answer\": \"#### 1\"}\n");
    free(text);
    /* an input without rows, as df_math_convert: no empty output */
    write_text(in, "\n\n");
    assert_int_equal(df_gsm8k_convert(in, fresh, NULL, &n), DF_EINVAL);
    assert_last_error_mentions("raw.jsonl: no rows");
    assert_int_equal(df_gsm8k_convert_tool(in, fresh, NULL, &n), DF_EINVAL);
    assert_false(file_exists(fresh));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_rows),
        cmocka_unit_test(test_field),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_agent_name),
        cmocka_unit_test(test_sft_options),
        cmocka_unit_test(test_files_and_filter),
        cmocka_unit_test(test_parquet_files),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_shard_errors),
        cmocka_unit_test(test_head_is_global),
        cmocka_unit_test(test_gsm8k_extract),
        cmocka_unit_test(test_gsm8k_real_files),
        cmocka_unit_test(test_gsm8k_malformed),
        cmocka_unit_test(test_gsm8k_tool_rows),
    };
    return cmocka_run_group_tests(tests, setup_tmp, teardown_tmp);
}
