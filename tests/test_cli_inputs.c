/*
 * The command line's handling of bad input ("bad input gets a clear error and loses nothing"; "no
 * setting is silently ignored"): an output that names an input, empty paths, numbers out of range,
 * options with no effect, inputs without rows, unknown subcommands, repeated options, a directory
 * given as a file. Each case runs `distflow` in the test's directory and checks the exit status,
 * the message, and that nothing was written or overwritten.
 */
#include "testembodied.h"
#include "testutil.h"

#include "distflow/dataset.h"

#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#define SRC DF_SOURCE_DIR
#define TOK DF_SHARED_DIR "/data/tokenizers/qwen2.5"
#define RAW_GSM8K "{\"question\": \"Two and two?\", \"answer\": \"2 + 2 = 4\\n#### 4\"}\n"
#define RAW_MATH "{\"problem\": \"Two and two?\", \"solution\": \"It is $\\\\boxed{4}$.\"}\n"

/* `cd dir && distflow ARGS 2>&1` (ARGS printf-style): its exit status, its output in out[cap]. */
static int cli(const char *dir, char *out, size_t cap, const char *fmt, ...)
{
    char args[3072], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd '%s' && %s/distflow %s 2>&1", dir, DF_BINARY_DIR, args);
    return df_test_command(cmd, out, cap);
}

/* The run of ARGS in dir exits with `code` and says `msg`. */
static void expect(const char *dir, int code, const char *msg, const char *fmt, ...)
{
    char args[3072], out[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int rc = cli(dir, out, sizeof out, "%s", args);
    if (rc != code || !strstr(out, msg))
        fail_msg("distflow %s: exit %d, expected %d with '%s'; output:\n%s", args, rc, code, msg, out);
}

static void put(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
}

/* dir/name's bytes (malloc'd), for "untouched" checks. */
static char *slurp(const char *dir, const char *name)
{
    char path[1024], *text = NULL;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_int_equal(df_read_file(path, &text, NULL), 0);
    return text;
}

static bool exists(const char *dir, const char *name)
{
    char path[1024];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return lstat(path, &st) == 0;
}

/* dir: raw.jsonl (one raw GSM8K row), g.jsonl (it converted), p.yaml (a train config). */
static void inputs(const char *dir)
{
    char out[4096];
    put(dir, "raw.jsonl", RAW_GSM8K);
    put(dir, "p.yaml", DF_TEST_GRPO_YAML);
    if (cli(dir, out, sizeof out, "data gsm8k --in raw.jsonl --out g.jsonl"))
        fail_msg("%s", out);
}

/* An output naming an input file (by any spelling: ./x, a symbolic link) is refused before
   anything is read, and the input keeps its bytes. */
static void test_output_names_an_input(void **state)
{
    const char *dir = *state;
    inputs(dir);
    char link[1024];
    snprintf(link, sizeof link, "%s/link.jsonl", dir);
    assert_int_equal(symlink("raw.jsonl", link), 0);
    char *raw = slurp(dir, "raw.jsonl"), *g = slurp(dir, "g.jsonl"), *p = slurp(dir, "p.yaml");
    static const struct {
        const char *args, *msg;
    } cases[] = {
        {"data gsm8k --in raw.jsonl --out raw.jsonl", "--out names the input file --in (raw.jsonl)"},
        {"data gsm8k --in raw.jsonl --out ./raw.jsonl", "--out names the input file --in"},
        {"data gsm8k --in raw.jsonl --out link.jsonl", "--out names the input file --in"},
        {"data math --in raw.jsonl --out raw.jsonl", "--out names the input file --in"},
        {"data jsonl --in g.jsonl --out g.jsonl", "--out names the input file --in (g.jsonl)"},
        {"data synth --out g.jsonl --n 2 --exclude g.jsonl", "--out names the input file --exclude"},
        {"eval --model no_model --data g.jsonl --output g.jsonl", "--output names the input file --data"},
        {"eval --model no_model --data g.jsonl --tool-config p.yaml --output p.yaml",
         "--output names the input file --tool-config"},
        {"plan p.yaml --dot p.yaml", "--dot names the config file p.yaml"},
        {"data marft-demos --workflow p.yaml --in g.jsonl --out g.jsonl --tokenizer " TOK,
         "--out names the input file --in"},
        {"data marft-demos --workflow p.yaml --in g.jsonl --out p.yaml --tokenizer " TOK,
         "--out names the input file --workflow"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        expect(dir, 2, cases[i].msg, "%s", cases[i].args);
        char *raw2 = slurp(dir, "raw.jsonl"), *g2 = slurp(dir, "g.jsonl"), *p2 = slurp(dir, "p.yaml");
        assert_string_equal(raw2, raw);
        assert_string_equal(g2, g);
        assert_string_equal(p2, p);
        free(raw2), free(g2), free(p2);
    }
    /* the converters' own check, for callers other than the CLI */
    assert_int_equal(df_gsm8k_convert(link, link, NULL, NULL), DF_EINVAL);
    assert_last_error_mentions("the output is the input file");
    char *raw2 = slurp(dir, "raw.jsonl");
    assert_string_equal(raw2, raw);
    free(raw2), free(raw), free(g), free(p);
}

/* An empty path option is refused: it would write into (or read) the current directory. */
static void test_empty_paths(void **state)
{
    const char *dir = *state;
    inputs(dir);
    char cwd[1024];
    snprintf(cwd, sizeof cwd, "%s/cwd", dir);
    assert_int_equal(mkdir(cwd, 0755), 0);
    expect(cwd, 2, "--out expects a path, got ''", "init-model --config %s/examples/demo/model_config.json "
                                                  "--tokenizer " TOK " --out=", SRC);
    expect(cwd, 2, "--out expects a path, got ''", "plot ../g.jsonl --out=");
    expect(cwd, 2, "--out expects a path, got ''", "data gsm8k --in ../raw.jsonl --out ''");
    expect(cwd, 2, "--output expects a path, got ''", "eval --model no_model --data ../g.jsonl --output=");
    expect(cwd, 2, "--in expects a path, got ''", "data jsonl --in= --out x.jsonl");
    /* nothing was written there */
    DIR *d = opendir(cwd);
    assert_non_null(d);
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            fail_msg("%s was written in the current directory", e->d_name);
    closedir(d);
}

/* An empty option value is refused naming the option, as an empty path is: '' was written as the
   rows' split or data_source, or taken as the default; an empty help PREFIX listed every key. Where
   '' means something (free text, --messages-key: none) it is still taken. */
static void test_empty_values(void **state)
{
    const char *dir = *state;
    inputs(dir);
    put(dir, "math.jsonl", RAW_MATH);
    static const struct {
        const char *args, *msg;
    } cases[] = {
        {"data gsm8k --in raw.jsonl --out e.jsonl --split ''", "--split expects a non-empty value, got ''"},
        {"data gsm8k --multiturn-tool --in raw.jsonl --out e.jsonl --split=", "--split expects a non-empty"},
        {"data math --in math.jsonl --out e.jsonl --split ''", "--split expects a non-empty value, got ''"},
        {"data math --in math.jsonl --out e.jsonl --data-source ''", "--data-source expects a non-empty"},
        {"data synth --out e.jsonl --n 2 --split ''", "--split expects a non-empty value, got ''"},
        {"embodied tasks --out e.jsonl --split train --env-name ''", "--env-name expects a non-empty value"},
        {"eval --model m --data g.jsonl --output e.jsonl --reward-fn-key ''",
         "--reward-fn-key expects a non-empty value, got ''"},
        {"config help ''", "help PREFIX expects a key prefix, got '' (leave it out to list every key)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect(dir, 2, cases[i].msg, "%s", cases[i].args);
    assert_false(exists(dir, "e.jsonl"));
    char out[4096];
    if (cli(dir, out, sizeof out, "data tokenizer --in g.jsonl --vocab-size 300 --out tk --messages-key '' "
                                  "--system ''"))
        fail_msg("%s", out);
}

/* eval checks what would fail only after the whole generation before it loads the model (the model
   named here does not exist: its error would come first otherwise). */
static void test_eval_checks_before_loading(void **state)
{
    const char *dir = *state;
    inputs(dir);
    char *g = slurp(dir, "g.jsonl"), mix[4096]; /* line 2: a data_source no scorer knows */
    snprintf(mix, sizeof mix, "%s{\"data_source\": \"bogus/source\", \"prompt\": [{\"role\": \"user\", "
             "\"content\": \"Q\"}], \"reward_model\": {\"style\": \"rule\", \"ground_truth\": \"4\"}}\n", g);
    put(dir, "mix.jsonl", mix);
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/outdir", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    expect(dir, 1, "--output: nodir/x.jsonl: no such directory nodir",
           "eval --model no_model --data g.jsonl --output nodir/x.jsonl");
    expect(dir, 1, "--output: outdir: is a directory", "eval --model no_model --data g.jsonl --output outdir");
    expect(dir, 1,
           "--data: mix.jsonl:2: unknown reward function for data_source 'bogus/source'",
           "eval --model no_model --data mix.jsonl");
    expect(dir, 1, "set --reward-function to a Python file", "eval --model no_model --data mix.jsonl");
    /* the rows evaluated only (--limit), and none with --reward-function: the model is next */
    expect(dir, 1, "no_model", "eval --model no_model --data mix.jsonl --limit 1");
    expect(dir, 1, "no_model", "eval --model no_model --data mix.jsonl --reward-function x.py");
    assert_false(exists(dir, "nodir"));
    free(g);
}

/* Numbers outside an option's range, or not finite, are refused naming the option and the range;
   nothing is written. */
static void test_number_ranges(void **state)
{
    const char *dir = *state;
    inputs(dir);
    static const struct {
        const char *args, *msg;
    } cases[] = {
        {"eval --model m --data g.jsonl --temperature nan", "--temperature expects a finite number, got 'nan'"},
        {"eval --model m --data g.jsonl --temperature inf", "--temperature expects a finite number, got 'inf'"},
        {"eval --model m --data g.jsonl --temperature -1", "--temperature must be >= 0, got -1"},
        {"eval --model m --data g.jsonl --top-p 1.5", "--top-p must be in [0, 1], got 1.5"},
        {"eval --model m --data g.jsonl --top-k 4294967297", "--top-k must be in [-1, 2147483647], got 4294967297"},
        {"eval --model m --data g.jsonl --top-k -5", "--top-k must be in [-1, 2147483647], got -5"},
        {"eval --model m --data g.jsonl --top-p 0.9", "--top-p shapes sampling"}, /* greedy would ignore it */
        {"eval --model m --data g.jsonl --seed 3 --temperature 0", "--seed shapes sampling"},
        {"eval --model m --data g.jsonl --limit 0", "--limit must be >= 1, got 0"},
        {"eval --model m --data g.jsonl --limit -1", "--limit must be >= 1, got -1"},
        {"eval --model m --data g.jsonl --batch -1", "--batch must be >= 1, got -1"},
        {"eval --model m --data g.jsonl --n 0", "--n must be >= 1, got 0"},
        {"eval --model m --data g.jsonl --max-assistant-turns -3", "--max-assistant-turns must be >= 0, got -3"},
        {"eval --model m --data g.jsonl --max-response-length 0", "--max-response-length must be >= 1"},
        {"embodied eval p.yaml --model m --temperature nan", "--temperature expects a finite number"},
        {"embodied eval p.yaml --model m --n 0", "--n must be >= 1, got 0"},
        {"embodied demos --out s.jsonl --max-steps 8 --chunks 2 --trials 0", "--trials must be >= 1, got 0"},
        {"embodied tasks --out s.jsonl --split train --trials 0", "--trials must be >= 1, got 0"},
        {"data synth --out s.jsonl --n 5 --min-steps 4294967298", "--min-steps must be in [1, 64], got 4294967298"},
        {"data synth --out s.jsonl --n 5 --max-operand 4294967316",
         "--max-operand must be in [1, 1000000000], got 4294967316"},
        {"data synth --out s.jsonl --n 5 --ops '+-*/'", "--ops \"+-*/\": 1 to 3 of \"+-*\""},
        {"data synth --out s.jsonl --n 0", "--n must be >= 1, got 0"},
        {"data synth --out s.jsonl --n 5 --bare-answers 1.5", "--bare-answers must be in [0, 1], got 1.5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        expect(dir, 2, cases[i].msg, "%s", cases[i].args);
    assert_false(exists(dir, "s.jsonl"));
}

/* An option that would have no effect in the mode given is refused. */
static void test_options_without_effect(void **state)
{
    const char *dir = *state;
    inputs(dir);
    expect(dir, 2, "--max-assistant-turns limits a multi-turn conversation: it needs --tool-config",
           "eval --model m --data g.jsonl --max-assistant-turns 3");
    expect(dir, 2, "--max-user-turns counts the replies of --interaction-config",
           "eval --model m --data g.jsonl --tool-config p.yaml --max-user-turns 2");
    expect(dir, 2, "--world is the job size `check` checks for; show takes none", "config show p.yaml --world 2");
    expect(dir, 2, "--world is the job size `check` checks for; help takes none", "config help --world 2");
    expect(dir, 2, "help takes one PREFIX", "config help data trainer");
    /* the tokenizer's keys: one that no row has would train on empty text */
    expect(dir, 1, "--response-key nope: none of the 1 rows of g.jsonl without a conversation",
           "data tokenizer --in g.jsonl --vocab-size 300 --out tk --response-key nope");
    expect(dir, 1, "--messages-key nope: no row of g.jsonl has a conversation there",
           "data tokenizer --in g.jsonl --vocab-size 300 --out tk --messages-key nope");
    assert_false(exists(dir, "tk"));
    char out[4096];
    if (cli(dir, out, sizeof out, "data tokenizer --in g.jsonl --vocab-size 300 --out tk --response-key "
                                  "extra_info.question"))
        fail_msg("%s", out);
}

/* An input without rows is refused by every command that reads rows, and nothing is written. */
static void test_empty_inputs(void **state)
{
    const char *dir = *state;
    put(dir, "empty.jsonl", "\n\n");
    expect(dir, 1, "empty.jsonl: no rows", "data gsm8k --in empty.jsonl --out e.jsonl");
    expect(dir, 1, "empty.jsonl: no rows", "data gsm8k --multiturn-tool --in empty.jsonl --out e.jsonl");
    expect(dir, 1, "empty.jsonl: no rows", "data math --in empty.jsonl --out e.jsonl");
    expect(dir, 1, "empty.jsonl: no rows", "data jsonl --in empty.jsonl --out e.jsonl");
    expect(dir, 1, "empty.jsonl: no rows", "data tokenizer --in empty.jsonl --vocab-size 300 --out tk");
    assert_false(exists(dir, "e.jsonl"));
    assert_false(exists(dir, "tk"));
    /* a success rate over no episodes */
    emb_model(dir, NULL);
    expect(dir, 1, "empty.jsonl: no rows",
           "embodied eval %s/examples/demo/embodied_srpo.yaml --model model --data empty.jsonl", SRC);
}

/* The parser: an unknown subcommand is named, a repeated option refused, a directory given as a
   file says so. */
static void test_parser(void **state)
{
    const char *dir = *state;
    inputs(dir);
    expect(dir, 2, "distflow data: error: unknown subcommand 'bogus'", "data bogus");
    expect(dir, 2, "distflow data: error: missing subcommand", "data");
    expect(dir, 2, "distflow embodied: error: unknown subcommand 'bogus'", "embodied bogus");
    expect(dir, 2, "distflow config: error: unknown subcommand 'bogus'", "config bogus");
    expect(dir, 2, "--tokenizer given twice",
           "tokenize --tokenizer " DF_SHARED_DIR "/data/tokenizers/gpt2 --tokenizer " TOK " hi");
    expect(dir, 2, "--out given twice", "data gsm8k --in raw.jsonl --out a.jsonl --out=b.jsonl");
    char out[4096];
    assert_int_equal(cli(dir, out, sizeof out, "tokenize --tokenizer " TOK " --chat --chat hi"), 0); /* a flag */
    expect(dir, 1, ".: is a directory, not a file", "data gsm8k --in . --out a.jsonl");
    assert_false(exists(dir, "a.jsonl"));
    assert_false(exists(dir, "b.jsonl"));
}

/* The helpers behind these checks. */
static void test_fsutil_checks(void **state)
{
    const char *dir = *state;
    put(dir, "a.txt", "a");
    char a[1024], b[1024], l[1024], sub[1024];
    snprintf(a, sizeof a, "%s/a.txt", dir);
    snprintf(b, sizeof b, "%s/./a.txt", dir);
    snprintf(l, sizeof l, "%s/l.txt", dir);
    snprintf(sub, sizeof sub, "%s/none/x.txt", dir);
    assert_int_equal(link(a, l), 0);
    assert_true(df_same_file(a, b));
    assert_true(df_same_file(a, l)); /* a hard link */
    assert_false(df_same_file(a, dir));
    assert_false(df_same_file(a, sub)); /* one missing */
    assert_int_equal(df_check_output_path(a), DF_OK);
    assert_error_mentions(df_check_output_path(dir), DF_EINVAL, "is a directory");
    assert_error_mentions(df_check_output_path(sub), DF_ENOTFOUND, "no such directory");
    assert_error_mentions(df_check_output_path(""), DF_EINVAL, "empty path");
    snprintf(sub, sizeof sub, "%s/a.txt/x.txt", dir);
    assert_error_mentions(df_check_output_path(sub), DF_EINVAL, "a.txt is not a directory");
    char *text;
    assert_error_mentions(df_read_file(dir, &text, NULL), DF_EIO, "is a directory, not a file");
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, df_test_mkdtemp, df_test_rmtree)
    const struct CMUnitTest tests[] = {
        T(test_output_names_an_input), T(test_empty_paths), T(test_empty_values),
        T(test_eval_checks_before_loading), T(test_number_ranges), T(test_options_without_effect),
        T(test_empty_inputs), T(test_parser), T(test_fsutil_checks),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
