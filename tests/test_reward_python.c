/*
 * test_reward_python.c — verl's custom_reward_function as a Python file (df_reward_python_*,
 * src/algo/reward/python.c; docs/rewards.md "Python reward functions"): the functions of
 * tests/fixtures/reward_python/rewards.py called per response and per batch, their results read
 * as verl's reward managers read them, every failure a message naming the file, the function and
 * the row; then df_reward_naive with the bridge, and `train` / `config check` with the keys.
 * Needs python3 (scripts/install-deps.sh installs it).
 * mpi-test: np 2
 * (each rank its own python3 children; as a plain ctest it runs with one rank.)
 */
/* rounding-free (scripts/test-variants.sh skips it): Python scores, exact; no engine value is compared */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "distflow/reward.h"
#include "testutil.h"

#define FIX DF_SOURCE_DIR "/tests/fixtures/reward_python"
#define REWARDS FIX "/rewards.py"

static const char *const SRC[] = {"src/a", "src/b", "src/c"};
static const char *const SOL[] = {"1.5", "2", "-4"};
static const char *const GT[] = {"1.5", "7", "-4"};
static const char *const EXTRA[] = {"{\"index\": 10}", NULL, "{\"index\": 12}"};

static df_reward_python *open_ok(const char *name, const char *kwargs, bool batch)
{
    df_reward_python *p = NULL;
    df_reward_python_opts o = {.mode = batch ? DF_REWARD_PY_BATCH : DF_REWARD_PY_NAIVE};
    if (df_reward_python_open(REWARDS, name, kwargs, &o, &p))
        fail_msg("open %s: %s", name, df_last_error());
    return p;
}

/* Each argument reaches its parameter, kwargs arrive as keyword arguments, a dict's score / acc /
   pred are read, and the function's print() does not disturb the replies. */
static void test_per_response(void **state)
{
    (void)state;
    df_reward_python *p = open_ok("echo", "{\"bonus\": 0.5, \"tag\": \"x\"}", false);
    assert_int_equal(df_reward_python_mode(p), DF_REWARD_PY_NAIVE);
    df_reward_result r[3];
    for (int round = 0; round < 2; round++) { /* the child serves request after request */
        assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, EXTRA, r), 0);
        const double want[] = {2.0, 2.5, -3.5};
        const bool acc[] = {true, false, true};
        const char *pred[] = {"src/a|1.5|10|tag", "src/b|7|None|tag", "src/c|-4|12|tag"};
        for (int i = 0; i < 3; i++) {
            assert_true(r[i].score == want[i]);
            assert_int_equal(r[i].acc, acc[i]);
            assert_true(r[i].extra_pred);
            assert_string_equal(r[i].pred, pred[i]);
        }
    }
    assert_int_equal(df_reward_python_score(p, 0, NULL, NULL, NULL, NULL, NULL), 0);
    df_reward_python_close(p);
}

/* A bare number is the score (bool True = 1, int 0); acc is then score == 1, as for a df_reward_fn;
   extra_info may be NULL as a whole. */
static void test_plain_numbers(void **state)
{
    (void)state;
    df_reward_python *p = open_ok("plain", NULL, false);
    df_reward_result r[3];
    assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, NULL, r), 0);
    const double want[] = {1, 0, 1};
    for (int i = 0; i < 3; i++) {
        assert_true(r[i].score == want[i]);
        assert_int_equal(r[i].acc, want[i] == 1);
        assert_false(r[i].extra_pred);
        assert_string_equal(r[i].pred, "");
    }
    df_reward_python_close(p);
}

/* verl's BatchRewardManager form: one call with lists, its kwargs, one result per response. */
static void test_batch(void **state)
{
    (void)state;
    df_reward_python *p = open_ok("batch_lengths", "{\"scale\": 2}", true);
    assert_int_equal(df_reward_python_mode(p), DF_REWARD_PY_BATCH);
    df_reward_result r[3];
    assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, EXTRA, r), 0);
    const double want[] = {6, 2, 4};
    for (int i = 0; i < 3; i++)
        assert_true(r[i].score == want[i]);
    df_reward_python_close(p);

    p = open_ok("batch_short", NULL, true);
    assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, EXTRA, r), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "2 results for 3 responses"));
    df_reward_python_close(p);
}

/* Opening fails with the reason: no file, a syntax error (Python's own message), no such function,
   a name that is not a function, no interpreter. */
static void test_open_errors(void **state)
{
    (void)state;
    df_reward_python *p = (df_reward_python *)1;
    assert_int_equal(df_reward_python_open(FIX "/missing.py", "f", NULL, NULL, &p), DF_ENOTFOUND);
    assert_null(p);
    assert_non_null(strstr(df_last_error(), "missing.py"));
    assert_int_equal(df_reward_python_open(FIX "/broken.py", "compute_score", NULL, NULL, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "broken.py:compute_score"));
    assert_non_null(strstr(df_last_error(), "SyntaxError"));
    assert_int_equal(df_reward_python_open(REWARDS, "nope", NULL, NULL, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "defines no function 'nope'"));
    assert_int_equal(df_reward_python_open(REWARDS, "plain", "[1]", NULL, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "must be a JSON object, got '[1]'"));
    assert_int_equal(df_reward_python_open(REWARDS, "plain", "{\"a\": ", NULL, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "must be a JSON object"));
    assert_int_equal(df_reward_python_open(REWARDS, "not_callable", NULL, NULL, &p), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "defines no function 'not_callable'"));
    setenv("DF_PYTHON", "/nonexistent/python3", 1);
    assert_int_equal(df_reward_python_open(REWARDS, "plain", NULL, NULL, &p), DF_ENOTFOUND);
    unsetenv("DF_PYTHON");
    assert_non_null(strstr(df_last_error(), "Python 3 interpreter"));
    assert_null(p);
}

/* verl's reward_extra_info: a dict's other numeric keys per response (bools as 0 / 1, text left
   out); a key missing from one result, a reserved name or a malformed one is an error. */
static void test_extra_keys(void **state)
{
    (void)state;
    df_reward_python *p = open_ok("with_extra", NULL, false);
    df_reward_result r[3];
    assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, EXTRA, r), 0);
    int n_keys;
    const char *const *names;
    const double *v;
    df_reward_python_extra(p, &n_keys, &names, &v);
    assert_int_equal(n_keys, 2);
    int f = strcmp(names[0], "format_ok") ? 1 : 0, c = 1 - f; /* the dict's order */
    assert_string_equal(names[f], "format_ok");
    assert_string_equal(names[c], "chars");
    const double fmt[] = {1, 0, 0}, chars[] = {3, 1, 2};
    for (int i = 0; i < 3; i++)
        assert_true(v[f * 3 + i] == fmt[i] && v[c * 3 + i] == chars[i]);
    const char *const *texts; /* the other values, as JSON text */
    df_reward_python_extra_json(p, &n_keys, &names, &texts);
    assert_int_equal(n_keys, 2);
    int t = strcmp(names[0], "note") ? 1 : 0;
    assert_string_equal(names[t], "note");
    assert_string_equal(names[1 - t], "parts");
    for (int i = 0; i < 3; i++) {
        char want[64];
        snprintf(want, sizeof want, "[\"%s\", null]", SOL[i]);
        assert_string_equal(texts[t * 3 + i], "\"kept as text\"");
        assert_string_equal(texts[(1 - t) * 3 + i], want);
    }
    df_reward_python_close(p);
    static const struct {
        const char *fn, *want;
    } bad[] = {
        {"extra_missing", "'chars' is in other results of the batch but not in this one"},
        {"extra_reserved", "the result key 'index'"},
        {"extra_bad_name", "the result key 'pass rate'"},
        {"extra_mixed", "'chars' is a number in other results of the batch, \"two\" in this one"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        p = open_ok(bad[k].fn, NULL, false);
        assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, EXTRA, r), DF_EINVAL);
        if (!strstr(df_last_error(), bad[k].want))
            fail_msg("%s: %s", bad[k].fn, df_last_error());
        df_reward_python_extra(p, &n_keys, &names, &v);
        assert_int_equal(n_keys, 0);
        df_reward_python_extra_json(p, &n_keys, &names, &texts);
        assert_int_equal(n_keys, 0);
        df_reward_python_close(p);
    }
}

/* A call that fails names the function, the row and Python's reason; the child lives on. */
static void test_call_errors(void **state)
{
    (void)state;
    static const struct {
        const char *fn, *sol1, *want;
    } cases[] = {
        {"raises", "boom", "ValueError: cannot score boom"},
        {"returns_text", "2", "the score is a string, '1.0'"},
        {"returns_nan", "2", "the score is nan"},
        {"no_score", "2", "a dict without \"score\" (keys: acc)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        df_reward_python *p = open_ok(cases[c].fn, NULL, false);
        const char *sol[] = {"1", cases[c].sol1, "3"};
        df_reward_result r[3];
        assert_int_equal(df_reward_python_score(p, 3, SRC, sol, GT, EXTRA, r), DF_EINVAL);
        const char *msg = df_last_error();
        if (!strstr(msg, cases[c].want) || !strstr(msg, "rewards.py:") || !strstr(msg, cases[c].fn))
            fail_msg("%s: %s", cases[c].fn, msg);
        if (!strcmp(cases[c].fn, "raises")) { /* the row that raised; the next batch is scored */
            assert_non_null(strstr(msg, "(response 1 of the batch)"));
            const char *fine[] = {"1", "2", "3"};
            assert_int_equal(df_reward_python_score(p, 3, SRC, fine, GT, EXTRA, r), 0);
        }
        df_reward_python_close(p);
    }
}

/* A child that exits mid-batch: DF_EIO with its exit status, and every later call DF_EIO. */
static void test_child_dies(void **state)
{
    (void)state;
    df_reward_python *p = open_ok("dies", NULL, false);
    df_reward_result r[3];
    assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, EXTRA, r), DF_EIO);
    assert_non_null(strstr(df_last_error(), "exited with status 3"));
    assert_int_equal(df_reward_python_score(p, 3, SRC, SOL, GT, EXTRA, r), DF_EIO);
    df_reward_python_close(p);
}

/* verl's PrimeRewardManager: the calls run in a pool (several workers' pids), a call that raises or
   outlasts the batch's deadline scores 0.0 (a 60 s sleep is cut at 2 s), a sequence's first item
   is the score, a dict is refused naming prime; the next batch is scored by a fresh pool. */
static void test_prime(void **state)
{
    (void)state;
    char dir[] = "/tmp/df_prime_XXXXXX", kw[256];
    assert_non_null(mkdtemp(dir));
    snprintf(kw, sizeof kw, "{\"pid_dir\": \"%s\"}", dir);
    df_reward_python_opts o = {DF_REWARD_PY_PRIME, 4, 2.0};
    df_reward_python *p = NULL;
    if (df_reward_python_open(REWARDS, "prime_score", kw, &o, &p))
        fail_msg("%s", df_last_error());
    assert_int_equal(df_reward_python_mode(p), DF_REWARD_PY_PRIME);
    const char *src[] = {"a", "b", "c", "d", "e", "f"}, *sol[] = {"1", "sleep", "2", "boom", "seq", "3"};
    const char *gt[] = {"1", "x", "0", "x", "x", "0"};
    const double want[] = {2.0, 0.0, 2.0, 0.0, 0.5, 3.0}; /* a number + 1 where it is the ground truth */
    df_reward_result r[6];
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    if (df_reward_python_score(p, 6, src, sol, gt, NULL, r))
        fail_msg("%s", df_last_error());
    clock_gettime(CLOCK_MONOTONIC, &b);
    double took = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
    for (int i = 0; i < 6; i++)
        if (r[i].score != want[i] || r[i].extra_pred)
            fail_msg("response %d (%s): score %g, expected %g", i, sol[i], r[i].score, want[i]);
    assert_true(took >= 1.9 && took < 30); /* waited for the deadline, not for the sleep */
    int n_keys = -1;
    const char *const *names;
    const double *v;
    df_reward_python_extra(p, &n_keys, &names, &v);
    assert_int_equal(n_keys, 0);
    char cmd[300], out[64];
    snprintf(cmd, sizeof cmd, "ls %s | wc -l", dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    if (atoi(out) < 2) /* 4 calls of 0.3 s, 4 workers: not one after the other in one process */
        fail_msg("the prime calls ran in %d process(es)", atoi(out));
    const char *again[] = {"4"}, *dict[] = {"dict"};
    assert_int_equal(df_reward_python_score(p, 1, src, again, gt, NULL, r), 0);
    assert_true(r[0].score == 4.0);
    assert_error_mentions(df_reward_python_score(p, 1, src, dict, gt, NULL, r), DF_EINVAL,
                          "the prime reward manager reads a number, or a sequence");
    df_reward_python_close(p);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    o.processes = 0;
    assert_error_mentions(df_reward_python_open(REWARDS, "prime_score", NULL, &o, &p), DF_EINVAL,
                          "prime needs >= 1 process");
}

/* df_reward_naive with cfg.python: the reward_fn_key column is the data_source argument, the
   ground_truth and extra_info columns theirs; scores on each response's last token, acc, and the
   dict's pred kept as verl's reward_extra_info. */
static void test_naive_manager(void **state)
{
    (void)state;
    df_batch *b = df_batch_new(3);
    const int64_t off[] = {0, 2, 3, 3};
    const int32_t ids[] = {5, 6, 7};
    const char *task[] = {"t0", "t1", "t2"};
    assert_int_equal(df_batch_set_tok_i32(b, "response_ids", off, ids), 0);
    assert_int_equal(df_batch_set_str(b, "data_source", SRC), 0);
    assert_int_equal(df_batch_set_str(b, "task", task), 0);
    assert_int_equal(df_batch_set_str(b, "ground_truth", GT), 0);
    const char *extra[] = {"{\"index\": 10}", "{\"index\": 11}", "{\"index\": 12}"};
    assert_int_equal(df_batch_set_str(b, "extra_info", extra), 0);
    df_reward_manager_cfg cfg = {.reward_fn_key = "task", .python = open_ok("echo", NULL, false)};
    float scores[3], acc[3];
    int64_t empty = -1;
    assert_int_equal(df_reward_naive(&cfg, b, SOL, scores, acc, &empty), 0);
    const float want[] = {1.5f, 2.0f, -4.0f}, want_acc[] = {1, 0, 1};
    assert_memory_equal(scores, want, sizeof want);
    assert_memory_equal(acc, want_acc, sizeof want_acc);
    assert_int_equal(empty, 1);
    const float *tls = df_batch_column(b, "token_level_scores")->data;
    assert_true(tls[0] == 0.0f && tls[1] == 1.5f && tls[2] == 2.0f);
    assert_string_equal(df_batch_str(b, "pred", 0), "t0|1.5|10|");
    assert_string_equal(df_batch_str(b, "pred", 2), "t2|-4|12|");
    assert_null(df_batch_column(b, DF_REWARD_EXTRA_PREFIX "chars"));
    df_reward_python_close(cfg.python);
    cfg.python = open_ok("with_extra", NULL, false); /* its extra keys become columns */
    assert_int_equal(df_reward_naive(&cfg, b, SOL, scores, acc, &empty), 0);
    const float *chars = df_batch_f32(b, DF_REWARD_EXTRA_PREFIX "chars");
    assert_non_null(chars);
    assert_true(chars[0] == 3 && chars[1] == 1 && chars[2] == 2);
    assert_non_null(df_batch_f32(b, DF_REWARD_EXTRA_PREFIX "format_ok"));
    assert_string_equal(df_batch_str(b, DF_REWARD_EXTRA_PREFIX "note", 2), "\"kept as text\"");
    assert_string_equal(df_batch_str(b, DF_REWARD_EXTRA_PREFIX "parts", 2), "[\"-4\", null]");
    assert_null(df_reward_extra_key(df_batch_column(b, DF_REWARD_EXTRA_PREFIX "note"))); /* no metric */
    assert_string_equal(df_reward_extra_json_key(df_batch_column(b, DF_REWARD_EXTRA_PREFIX "note")), "note");
    df_reward_python_close(cfg.python);
    cfg.python = open_ok("plain", NULL, false); /* a later scoring without them drops them */
    assert_int_equal(df_reward_naive(&cfg, b, SOL, scores, acc, &empty), 0);
    assert_null(df_batch_column(b, DF_REWARD_EXTRA_PREFIX "chars"));
    assert_null(df_batch_column(b, DF_REWARD_EXTRA_PREFIX "note"));
    df_reward_python_close(cfg.python);

    /* the batch manager needs a batched bridge, and a batched bridge the batch manager */
    cfg.manager = "batch";
    cfg.python = open_ok("batch_lengths", NULL, true);
    assert_int_equal(df_reward_manager_run(&cfg, b, SOL, scores, acc, NULL, NULL), 0);
    assert_true(scores[0] == 3.0f && scores[1] == 1.0f && scores[2] == 2.0f);
    cfg.manager = "naive";
    assert_int_equal(df_reward_manager_run(&cfg, b, SOL, scores, acc, NULL, NULL), DF_EINVAL);
    df_reward_python_close(cfg.python);
    cfg.manager = "batch";
    cfg.python = NULL;
    assert_int_equal(df_reward_manager_run(&cfg, b, SOL, scores, acc, NULL, NULL), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "batch reward manager"));
    df_batch_free(b);
}

/* examples/rewards/gsm8k_format.py gives the scores of its C twin, examples/plugins/
   score_gsm8k_format.c, which are the built-in scorer's with format_score 0.1 (df_reward_gsm8k_ex);
   its dict also reports acc and the extracted answer. */
static void test_example_matches_builtin(void **state)
{
    (void)state;
    df_reward_python *p = NULL;
    if (df_reward_python_open(DF_SOURCE_DIR "/examples/rewards/gsm8k_format.py", "compute_score", NULL, NULL, &p))
        fail_msg("%s", df_last_error());
    const char *src[] = {"openai/gsm8k", "openai/gsm8k", "openai/gsm8k", "openai/gsm8k", "openai/gsm8k"};
    const char *sol[] = {"so 6 * 7 = 42\n#### 42", "#### 1,000", "I think #### 41", "the answer is 42",
                         "#### $5 then #### 6"};
    const char *gt[] = {"42", "1000", "42", "42", "5"};
    df_reward_result r[5];
    assert_int_equal(df_reward_python_score(p, 5, src, sol, gt, NULL, r), 0);
    df_reward_kwargs kw = df_reward_kwargs_default();
    kw.format_score = 0.1;
    const double want[] = {1.0, 1.0, 0.1, 0.0, 0.1};
    for (int i = 0; i < 5; i++) {
        df_reward_result c;
        assert_int_equal(df_reward_gsm8k_ex(sol[i], gt[i], &kw, &c), 0);
        if (r[i].score != c.score || c.score != want[i])
            fail_msg("'%s' vs '%s': Python %g, C %g, want %g", sol[i], gt[i], r[i].score, c.score, want[i]);
        assert_int_equal(r[i].acc, c.acc);
    }
    assert_string_equal(r[1].pred, "1000");
    df_reward_python_close(p);
}

/* ---- through config check and train ------------------------------------------------------- */

static df_comm *world;
static char dir[256];

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world))
        return -1;
    return df_test_shared_inputs(world, "df_reward_python", 8, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

/* A 2-step GRPO job on the digits rows with `reward` (YAML lines) into dir/`out`: its text in
   yaml[2048], written to path[cap]. */
static void write_job(const char *reward, const char *out, char *yaml, char *path, size_t cap)
{
    int len = snprintf(yaml, 2048,
                       "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
                       "       max_prompt_length: 128, max_response_length: 6}\n"
                       "actor_rollout_ref:\n"
                       "  model: {path: %s/model}\n"
                       "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4, optim: {lr: 0.01}}\n"
                       "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 4}\n"
                       "  ref: {log_prob_micro_batch_size_per_gpu: 4}\n"
                       "algorithm: {adv_estimator: grpo}\n%s"
                       "trainer: {total_training_steps: 2, save_freq: -1, test_freq: -1, val_before_train: false,\n"
                       "          logger: [], default_local_dir: %s/%s}\n",
                       dir, dir, reward, dir, out);
    assert_true(len > 0 && len < 2048);
    snprintf(path, cap, "%s/%s.yaml", dir, out);
    assert_int_equal(df_write_file_atomic(path, yaml, strlen(yaml)), 0);
}

/* Every step's critic/score/mean is `want`: the Python function scored every response. */
static void expect_scores(const char *out, double want)
{
    json_t *lines = df_test_metrics(dir, out, true), *o;
    size_t i;
    assert_int_equal(json_array_size(lines), 2);
    json_array_foreach(lines, i, o) {
        double got = df_test_metric(o, "critic/score/mean");
        if (got != want)
            fail_msg("%s step %zu: critic/score/mean %g, want %g", out, i + 1, got, want);
    }
    json_decref(lines);
}

/* train (on every rank of the world: each rank's reward node its own child) scores with the Python
   function per response (naive, with reward_kwargs passed on: the typed format_score and bonus, a
   key of any other name) and per batch (reward_manager=batch); 0.25 (+ format_score + bonus) only
   when the arguments are the rows' data_source and ground truth: 1.0 needs both kwargs. */
/* dir/ability.jsonl (its path into path): dir/train.jsonl's rows with data_source src/other and
   "ability": "test/digits" (rank 0 writes it; every rank returns once it is there). */
static void write_ability_rows(char *path, size_t cap)
{
    char *text = NULL;
    snprintf(path, cap, "%s/train.jsonl", dir);
    assert_int_equal(df_read_file(path, &text, NULL), 0);
    const char *from = "\"data_source\": \"test/digits\"";
    const size_t k = strlen(from);
    char *out = calloc(1, 2 * strlen(text) + 1), *o = out;
    for (const char *p = text, *hit; (hit = strstr(p, from)); p = hit + k) {
        o += sprintf(o, "%.*s\"data_source\": \"src/other\", \"ability\": \"test/digits\"", (int)(hit - p), p);
        if (!strstr(hit + k, from))
            strcpy(o, hit + k);
    }
    snprintf(path, cap, "%s/ability.jsonl", dir);
    if (df_comm_rank(world) == 0)
        assert_int_equal(df_write_file_atomic(path, out, strlen(out)), 0);
    assert_int_equal(df_comm_barrier(world), 0);
    free(text), free(out);
}

static void test_train(void **state)
{
    (void)state;
    char yaml[2048], path[512];
    write_job("custom_reward_function: {path: " REWARDS ", name: digits_bonus,\n"
              "                         reward_kwargs: {format_score: 0.5, bonus: 0.25}}\n",
              "naive", yaml, path, sizeof path);
    df_test_run_ok(df_test_run(world, df_test_config(yaml, path, NULL, 0)), "naive");
    expect_scores("naive", 1.0);
    write_job("custom_reward_function: {path: " REWARDS ", name: digits_quarter_batch}\n"
              "reward_model: {reward_manager: batch}\n",
              "batch", yaml, path, sizeof path);
    df_test_run_ok(df_test_run(world, df_test_config(yaml, path, NULL, 0)), "batch");
    expect_scores("batch", 0.25);
    write_job("custom_reward_function: {path: " REWARDS ", name: digits_quarter, reward_kwargs: {format_score: 0.5}}\n"
              "reward_model: {reward_manager: prime, reward_kwargs: {num_processes: 2, timeout: 60}}\n",
              "prime", yaml, path, sizeof path);
    df_test_run_ok(df_test_run(world, df_test_config(yaml, path, NULL, 0)), "prime");
    expect_scores("prime", 0.75);
    /* data.reward_fn_key: rows whose data_source is another, their "ability" test/digits; the function
       sees the ability as its data_source (digits_quarter gives -1 for any other) */
    char src[512], ov[2][600];
    write_ability_rows(src, sizeof src);
    write_job("custom_reward_function: {path: " REWARDS ", name: digits_quarter}\n", "by_key", yaml, path, sizeof path);
    snprintf(ov[0], sizeof ov[0], "data.train_files=[%s]", src);
    snprintf(ov[1], sizeof ov[1], "data.val_files=[%s]", src);
    const char *ovs[] = {ov[0], ov[1], "data.reward_fn_key=ability", "trainer.test_freq=2"};
    df_test_run_ok(df_test_run(world, df_test_config(yaml, path, ovs, 4)), "reward_fn_key");
    expect_scores("by_key", 0.25);
    /* validation scores by the key too; its metrics stay keyed by data_source, as verl's */
    json_t *lines = df_test_metrics(dir, "by_key", true);
    assert_true(df_test_metric(json_array_get(lines, 1), "val-aux/src/other/reward/mean@1") == 0.25);
    json_decref(lines);
}

/* config check refuses, naming the key: a missing .py file; the batch manager without a .py;
   reward_kwargs of other names with a library's df_reward_fn (no kwargs) or without any path (the
   built-in scorers read only the typed ones), each named with where it was set.
   (One rank: a CLI child under mpiexec would take the job's MPI environment.) */
static void test_config_check(void **state)
{
    (void)state;
    if (df_comm_size(world) > 1)
        return;
    static const struct {
        const char *reward, *want1, *want2;
    } cases[] = {
        {"custom_reward_function: {path: " FIX "/none.py}\n", "custom_reward_function.path", "none.py"},
        {"reward_model: {reward_manager: batch}\n", "reward_model.reward_manager=batch", "a .py file"},
        {"custom_reward_function: {path: " DF_BINARY_DIR "/plugins/test/libscore_const.so, name: score_quarter,\n"
         "                         reward_kwargs: {bonus: 0.25}}\n",
         "custom_reward_function.reward_kwargs.bonus (/",
         "check.yaml:10): keyword arguments, but custom_reward_function.path (/"},
        {"custom_reward_function: {reward_kwargs: {bonus: 0.25, tags: [a]}}\n",
         "check.yaml:9), custom_reward_function.reward_kwargs.tags (/",
         "check.yaml:9): keyword arguments for a Python custom_reward_function, but custom_reward_function.path "
         "is null: the built-in scorers read only"},
        {"algorithm.filter_groups: {enable: true, metric: chars}\n", "algorithm.filter_groups.metric='chars'",
         "another name is a numeric key of a Python reward function's results"},
        {"custom_reward_function: {path: " REWARDS ", name: digits_quarter}\n"
         "reward_model: {reward_manager: prime, reward_kwargs: {num_processes: 0}}\n",
         "check.yaml:10: reward_model.reward_kwargs: the prime reward manager:",
         "num_processes must be an integer in [1, 65536]"},
        {"custom_reward_function: {path: " REWARDS ", name: digits_quarter}\n"
         "reward_model: {reward_manager: prime, reward_kwargs: {workers: 4}}\n",
         "check.yaml:10: reward_model.reward_kwargs: the prime reward manager:",
         "unknown keyword argument 'workers' (it reads num_processes and timeout)"},
        {"", NULL, NULL},
        {"custom_reward_function: {path: ~/rewards.py}\n", NULL, NULL}, /* HOME is FIX: ~ expanded */
        {"custom_reward_function: {path: " REWARDS ", name: with_extra}\n" /* DAPO on its extra key */
         "algorithm.workflow_type: dapo\nalgorithm.filter_groups: {enable: true, metric: chars}\n", NULL, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char yaml[2048], path[512], cmd[1024], out[4096];
        write_job(cases[c].reward, "check", yaml, path, sizeof path);
        snprintf(cmd, sizeof cmd, "HOME=%s %s/distflow config check %s data.train_files=[%s/tests/fixtures/"
                 "gsm8k_rows.jsonl] 2>&1", FIX, DF_BINARY_DIR, path, DF_SOURCE_DIR);
        int st = df_test_command(cmd, out, sizeof out);
        if (!cases[c].want1) {
            assert_int_equal(st, 0);
            continue;
        }
        if (st == 0 || !strstr(out, cases[c].want1) || !strstr(out, cases[c].want2))
            fail_msg("case %zu: status %d, output %s", c, st, out);
    }
    /* prime's pool settings with the built-in scorers: a warning, not silence */
    char yaml[2048], path[512], cmd[1024], out[4096];
    write_job("reward_model: {reward_manager: prime, reward_kwargs: {num_processes: 4}}\n", "check", yaml, path,
              sizeof path);
    snprintf(cmd, sizeof cmd, "%s/distflow config check %s data.train_files=[%s/tests/fixtures/gsm8k_rows.jsonl] 2>&1",
             DF_BINARY_DIR, path, DF_SOURCE_DIR);
    int st = df_test_command(cmd, out, sizeof out);
    if (st != 0 || !strstr(out, "has no effect: the prime reward manager's pool (num_processes, timeout) runs a "
                                "Python custom_reward_function"))
        fail_msg("prime with the built-in scorers: status %d, output %s", st, out);
}

/* distflow eval --reward-function: every response scored by the Python function (0.25 for the
   digits rows' arguments) or a library's df_reward_fn (tests/plugins/score_const.c, 0.25: the CLI
   has no scorer of test/digits); a missing function refused naming the option. (One rank.) */
static void test_eval(void **state)
{
    (void)state;
    if (df_comm_size(world) > 1)
        return;
    static const struct {
        const char *fn, *want1, *want2;
        int status;
    } cases[] = {
        {REWARDS ":digits_quarter", "\nscore: 0.2500\n", "n_responses: 3\n", 0},
        {DF_BINARY_DIR "/plugins/test/libscore_const.so:score_quarter", "\nscore: 0.2500\n", "n_responses: 3\n", 0},
        {REWARDS ":nope", "--reward-function", "defines no function 'nope'", 1},
        {REWARDS ":digits_extra --output %s/eval.jsonl", "\nscore: 0.2500\n",
         "val-aux/test/digits/half/mean@1: 0.5000\n", 0},
        {REWARDS ":digits_quarter --reward-kwargs '{\"format_score\": 0.5}'", "\nscore: 0.7500\n", "n_prompts: 3", 0},
        {DF_BINARY_DIR "/plugins/test/libscore_const.so:score_quarter --reward-kwargs '{}'", "--reward-kwargs",
         "a library's df_reward_fn takes none", 1},
        {REWARDS ":digits_quarter --reward-manager prime --reward-manager-kwargs '{\"num_processes\": 2}'",
         "\nscore: 0.2500\n", "n_responses: 3\n", 0},
        {REWARDS ":digits_quarter_batch --reward-manager batch", "\nscore: 0.2500\n", "n_responses: 3\n", 0},
        {REWARDS ":digits_quarter --reward-manager prime --reward-manager-kwargs '{\"timeout\": 0}'",
         "--reward-manager-kwargs: the prime reward manager:", "timeout must be a number of seconds > 0", 1},
        {DF_BINARY_DIR "/plugins/test/libscore_const.so:score_quarter --reward-manager prime", "--reward-manager "
         "prime calls a Python --reward-function", "(FILE.py[:NAME])", 1},
        {REWARDS ":digits_quarter --reward-manager-kwargs '{}'", "--reward-manager-kwargs: only --reward-manager "
         "prime reads settings", "(its pool)", 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char cmd[2048], out[8192], fn[512];
        snprintf(fn, sizeof fn, cases[c].fn, dir); /* the one with --output: into dir */
        snprintf(cmd, sizeof cmd, "%s/distflow eval --model %s/model --data %s/train.jsonl --limit 3 "
                 "--max-response-length 4 --reward-function %s 2>&1", DF_BINARY_DIR, dir, dir, fn);
        int st = df_test_command(cmd, out, sizeof out);
        if ((st != 0) != cases[c].status || !strstr(out, cases[c].want1) || !strstr(out, cases[c].want2))
            fail_msg("%s: status %d, output %s", cases[c].fn, st, out);
    }
    /* --reward-fn-key: the scorer's data_source from the rows' "ability" (src/other would score -1) */
    char ab[512], cmd[2048], out[8192];
    write_ability_rows(ab, sizeof ab);
    snprintf(cmd, sizeof cmd, "%s/distflow eval --model %s/model --data %s --limit 3 --max-response-length 4 "
             "--reward-function %s:digits_quarter --reward-fn-key ability 2>&1", DF_BINARY_DIR, dir, ab, REWARDS);
    int st = df_test_command(cmd, out, sizeof out);
    if (st != 0 || !strstr(out, "\nscore: 0.2500\n"))
        fail_msg("--reward-fn-key ability: status %d, output %s", st, out);
    char path[512], *text = NULL; /* the extra key in every dumped row */
    snprintf(path, sizeof path, "%s/eval.jsonl", dir);
    assert_int_equal(df_read_file(path, &text, NULL), 0);
    int rows = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), rows++) {
        json_t *row = json_loads(l, 0, NULL);
        const json_t *why = row ? json_object_get(row, "why") : NULL;
        if (!row || json_real_value(json_object_get(row, "half")) != 0.5 ||
            strcmp(json_string_value(json_object_get(why, "rule")) ? json_string_value(json_object_get(why, "rule")) : "",
                   "digits") || strcmp(json_string_value(json_object_get(why, "gt")), json_string_value(json_object_get(row, "gts"))))
            fail_msg("eval.jsonl row %d has no \"half\": 0.5 or no \"why\" object: %s", rows, l);
        json_decref(row);
    }
    assert_int_equal(rows, 3);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_response), cmocka_unit_test(test_plain_numbers),
        cmocka_unit_test(test_batch),        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_call_errors),  cmocka_unit_test(test_child_dies),
        cmocka_unit_test(test_extra_keys),   cmocka_unit_test(test_prime),
        cmocka_unit_test(test_naive_manager), cmocka_unit_test(test_example_matches_builtin),
        cmocka_unit_test(test_train),
        cmocka_unit_test(test_config_check), cmocka_unit_test(test_eval),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
