/*
 * test_console.c — what a user of `distflow train` sees (src/workers/dag/console.c) and what it
 * checks before it loads anything (src/workers/dag/preflight.c):
 *  - the CLI run: the banner on stdout names the parameter count, the world and the pipeline;
 *    each step's line precedes its `saved` line; tok/s is labelled per rank; the summary names the
 *    last checkpoint; nothing of that goes to stderr; config.yaml reloads to the same resolved
 *    config; a second run resumes and says so; metrics.jsonl rows carry "step" then "timestamp";
 *  - trainer.val_only validates, logs step 0 and exits without training or saving;
 *  - the pre-flight errors: an unknown data_source, a missing model directory (a hub id gets the
 *    download hint), a missing data file, val_only without validation data, data.reward_fn_key's scorers.
 */
/* rounding-free (scripts/test-variants.sh skips it): the console's text, checks before compute */
#include "testutil.h"

#include "distflow/metrics.h"

#include <time.h>

static char dir[64];

/* The tiny model and 8 digit prompts (openai/gsm8k) in dir, once for every test. */
static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/df_console_XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    df_test_digits_inputs(dir, "train.jsonl", 8, "openai/gsm8k", true);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    df_test_remove_tree(dir);
    return 0;
}

/* The job: 4 prompts x 2 responses a step, `steps` steps, each saved, validation at the last. */
static void job_yaml(const char *out, int steps, char *yaml, size_t cap)
{
    snprintf(yaml, cap,
             "data: {train_files: [%s/train.jsonl], val_files: [%s/train.jsonl], train_batch_size: 4,\n"
             "       max_prompt_length: 128, max_response_length: 6, val_max_samples: 2}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 8}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: %d, save_freq: 1, test_freq: %d, val_before_train: false,\n"
             "          logger: [console], default_local_dir: %s/%s}\n",
             dir, dir, dir, steps, steps, dir, out);
}

static char *read_at(const char *rel)
{
    char *path = df_path_join(dir, rel), *text = NULL;
    if (df_read_file(path, &text, NULL))
        fail_msg("cannot read %s: %s", path, df_last_error());
    free(path);
    return text;
}

/* `needle` in text after `from` (NULL: the start); fails showing the text otherwise. */
static const char *after(const char *text, const char *from, const char *needle)
{
    const char *p = strstr(from ? from : text, needle);
    if (!p)
        fail_msg("'%s' missing%s:\n%s", needle, from ? " after the previous line" : "", text);
    return p;
}

/* The resolved config as `config show` prints it, the `# where` comments removed. */
static char *values_of(const df_config *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    assert_int_equal(df_config_dump(c, f), 0);
    fclose(f);
    char *w = text;
    for (char *r = text; *r;) {
        if (!strncmp(r, "  # ", 4)) /* our values hold no "  # " */
            r += strcspn(r, "\n");
        else
            *w++ = *r++;
    }
    *w = 0;
    return text;
}

/* `distflow train` on dir/job.yaml with `extra`, stdout and stderr apart; its exit status. */
static int train_cli(const char *extra)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && OMP_NUM_THREADS=1 %s/distflow train job.yaml %s >out.txt 2>err.txt", dir,
             DF_BINARY_DIR, extra);
    char none[8];
    return df_test_command(cmd, none, sizeof none);
}

static void test_cli_console(void **state)
{
    (void)state;
    char yaml[4096], cfg_path[128];
    job_yaml("cli", 2, yaml, sizeof yaml);
    snprintf(cfg_path, sizeof cfg_path, "%s/job.yaml", dir);
    assert_int_equal(df_write_file_atomic(cfg_path, yaml, strlen(yaml)), 0);
    double t0 = (double)time(NULL);
    assert_int_equal(train_cli(""), 0);
    double t1 = (double)time(NULL) + 1;
    char *out = read_at("out.txt"), *err = read_at("err.txt");
    /* the banner: the model's parameter count as config.json gives it, the world, the pipeline */
    df_model *m = NULL;
    char model_dir[128], expect[512], n[32];
    snprintf(model_dir, sizeof model_dir, "%s/model", dir);
    assert_int_equal(df_model_load(model_dir, &m), 0);
    int64_t total = 0;
    for (int i = 0; i < m->n_tensors; i++)
        total += m->tensors[i].numel;
    snprintf(n, sizeof n, "%.1fK", (double)total / 1e3);
    df_model_free(m);
    const char *p = after(out, NULL, "== distflow ");
    snprintf(expect, sizeof expect, "config (the full resolved copy: %s/cli/config.yaml), keys set:\n", dir);
    p = after(out, p, expect);
    p = after(out, p, "  trainer.total_training_steps: 2  # ");
    snprintf(expect, sizeof expect, "model: %s/model: Qwen2ForCausalLM, %s parameters (2 layers, hidden 32", dir, n);
    p = after(out, p, expect);
    p = after(out, p, "data: 8 training prompts, 2 validation prompts; 4 prompts x 2 responses a step\n");
    p = after(out, p, "world: 1 rank on 1 machine (1 per machine); cpu\n");
    p = after(out, p, "pipeline grpo, nodes in order (data-parallel x model-parallel ranks): rollout_actor 1x1, "
                      "function_reward 1x1");
    p = after(out, p, "start: fresh (trainer.resume_mode=auto): steps 1 to 2\n");
    /* each step's line, then its checkpoint; the validation of step 2 between them */
    p = after(out, p, "\nstep 1/2 | score ");
    after(out, p, " | tok/s/rank ");
    snprintf(expect, sizeof expect, "\nsaved %s/cli/global_step_1\nstep 2/2 | ", dir);
    p = after(out, p, expect);
    p = after(out, p, "\nvalidation at step 2: score ");
    snprintf(expect, sizeof expect, "\nsaved %s/cli/global_step_2\n== finished: steps 1 to 2 of 2 in ", dir);
    p = after(out, p, expect);
    p = after(out, p, "\nvalidation at step 2: score ");
    snprintf(expect, sizeof expect, "\ncheckpoint: %s/cli/global_step_2 (the same command resumes from it", dir);
    p = after(out, p, expect);
    snprintf(expect, sizeof expect, "\nmetrics: %s/cli/metrics.jsonl; config: %s/cli/config.yaml\n", dir, dir);
    after(out, p, expect);
    if (strstr(err, "step ") || strstr(err, "saved ") || strstr(err, "model: "))
        fail_msg("progress on stderr:\n%s", err);
    free(out), free(err);

    /* config.yaml: the same resolved values as the job's file */
    df_config *orig = NULL, *copy = NULL;
    char copy_path[128];
    snprintf(copy_path, sizeof copy_path, "%s/cli/config.yaml", dir);
    assert_int_equal(df_config_load(df_config_schema_train(), cfg_path, NULL, 0, &orig), 0);
    if (df_config_load(df_config_schema_train(), copy_path, NULL, 0, &copy))
        fail_msg("%s", df_last_error());
    char *a = values_of(orig), *b = values_of(copy);
    assert_string_equal(a, b);
    free(a), free(b);
    df_config_free(orig), df_config_free(copy);

    /* metrics.jsonl: "step" then "timestamp" (Unix seconds) within the run, not decreasing */
    json_t *lines = df_test_metrics(dir, "cli", true), *row;
    size_t i;
    double last = 0;
    char *text = read_at("cli/metrics.jsonl");
    assert_true(!strncmp(text, "{\"step\": 1, \"timestamp\": ", 25));
    free(text);
    assert_int_equal(json_array_size(lines), 2);
    json_array_foreach(lines, i, row) {
        double ts = json_number_value(json_object_get(row, "timestamp"));
        if (!(ts >= t0 && ts <= t1 && ts >= last))
            fail_msg("row %zu: timestamp %.3f outside [%.0f, %.0f] or before %.3f", i, ts, t0, t1, last);
        last = ts;
    }
    json_decref(lines);

    /* a third step: the same command resumes, says so, and records the config it ran with */
    assert_int_equal(train_cli("trainer.total_training_steps=3 trainer.test_freq=-1"), 0);
    out = read_at("out.txt");
    snprintf(expect, sizeof expect, "start: resuming from %s/cli/global_step_2 (trainer.resume_mode=auto): "
             "steps 3 to 3\n", dir);
    p = after(out, NULL, expect);
    p = after(out, p, "\nstep 3/3 | ");
    after(out, p, "\n== finished: steps 3 to 3 of 3 in ");
    free(out);
    text = read_at("cli/config.yaml");
    after(text, NULL, "total_training_steps: 3  # command line\n");
    free(text);
}

/* trainer.val_only: one validation logged as step 0 (also with val_before_train false), nothing trained. */
static void test_val_only(void **state)
{
    (void)state;
    char yaml[4096];
    job_yaml("val", 2, yaml, sizeof yaml);
    const char *ov[] = {"trainer.val_only=true", "trainer.logger=[]"};
    if (df_test_run(NULL, df_test_config(yaml, "val.yaml", ov, 2)))
        fail_msg("%s", df_last_error());
    json_t *lines = df_test_metrics(dir, "val", false);
    assert_int_equal(json_array_size(lines), 1);
    json_t *row = json_array_get(lines, 0);
    assert_int_equal(json_integer_value(json_object_get(row, "step")), 0);
    assert_true(json_is_number(json_object_get(row, "val-core/openai/gsm8k/acc/mean@1")));
    assert_null(json_object_get(row, "actor/pg_loss"));
    json_decref(lines);
    char *latest = df_path_join(dir, "val/latest_checkpointed_iteration.txt"),
         *step1 = df_path_join(dir, "val/global_step_1");
    assert_false(df_file_exists(latest));
    assert_false(df_dir_exists(step1));
    free(latest), free(step1);
}

/* df_train_check on the job with overrides: its status (the message in df_last_error). */
static int check_with(const char *const *ov, int n)
{
    char yaml[4096];
    job_yaml("chk", 2, yaml, sizeof yaml);
    df_config *c = df_test_config(yaml, "chk.yaml", ov, n);
    int rc = df_train_check(c, 1, NULL, NULL, NULL);
    df_config_free(c);
    return rc;
}

static void write_rows(const char *name, const char *third_source)
{
    char text[2048] = "";
    for (int i = 0; i < 4; i++) {
        char line[256];
        snprintf(line, sizeof line,
                 "{\"data_source\": \"%s\", \"prompt\": \"Add %d and 1.\", \"reward_model\": {\"ground_truth\": "
                 "\"%d\"}}\n",
                 i == 2 ? third_source : "openai/gsm8k", i, i + 1);
        strcat(text, line);
    }
    char *path = df_path_join(dir, name);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    free(path);
}

static void test_preflight(void **state)
{
    (void)state;
    char val[256], train[256], model[256];
    assert_int_equal(check_with(NULL, 0), 0);
    /* a data_source without a scorer, where it first appears; only the rows the run reads count */
    write_rows("mixed.jsonl", "nobody/knows");
    snprintf(val, sizeof val, "data.val_files=[%s/mixed.jsonl]", dir);
    const char *v1[] = {val, "data.val_max_samples=3"};
    char want[512];
    snprintf(want, sizeof want, "data.val_files: %s/mixed.jsonl:3: unknown reward function for data_source "
             "'nobody/knows' (known: ", dir);
    assert_error_mentions(check_with(v1, 2), DF_ENOTFOUND, want);
    assert_last_error_mentions("custom_reward_function.path");
    const char *v2[] = {val}; /* the job's val_max_samples: 2 */
    assert_int_equal(check_with(v2, 1), 0);
    snprintf(train, sizeof train, "data.train_files=[%s/train.jsonl, %s/mixed.jsonl]", dir, dir);
    const char *t1[] = {train};
    assert_error_mentions(check_with(t1, 1), DF_ENOTFOUND, "data.train_files: ");
    assert_last_error_mentions("mixed.jsonl:3: unknown reward function for data_source 'nobody/knows'");
    const char *t2[] = {train, "data.train_max_samples=10"}; /* 8 rows, then the first 2 of mixed */
    assert_int_equal(check_with(t2, 2), 0);
    const char *t3[] = {train, "data.train_max_samples=11"};
    assert_int_equal(check_with(t3, 2), DF_ENOTFOUND);
    /* a missing data file */
    snprintf(train, sizeof train, "data.train_files=[%s/train.jsonl, %s/none.jsonl]", dir, dir);
    const char *t4[] = {train};
    snprintf(want, sizeof want, "data.train_files[1]=%s/none.jsonl: no such file", dir);
    assert_error_mentions(check_with(t4, 1), DF_ENOTFOUND, want);
    /* model directories: a hub id gets the download hint, another path says what it lacks */
    const char *m1[] = {"actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct"};
    assert_error_mentions(check_with(m1, 1), DF_ENOTFOUND,
                          "command line: actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct: no such "
                          "directory. If that is a Hugging Face hub id: distflow reads local files only, so "
                          "download it first (huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir "
                          "Qwen2.5-0.5B-Instruct) and set actor_rollout_ref.model.path=Qwen2.5-0.5B-Instruct");
    snprintf(model, sizeof model, "actor_rollout_ref.model.path=%s/no/such/model", dir);
    const char *m2[] = {model};
    assert_error_mentions(check_with(m2, 1), DF_ENOTFOUND, "/no/such/model: no such directory (a Hugging Face");
    snprintf(model, sizeof model, "actor_rollout_ref.model.path=%s", dir); /* a directory without config.json */
    const char *m3[] = {model};
    assert_error_mentions(check_with(m3, 1), DF_ENOTFOUND, "the directory has no config.json");
    snprintf(model, sizeof model, "data.tokenizer=%s", dir);
    const char *m4[] = {model};
    assert_error_mentions(check_with(m4, 1), DF_ENOTFOUND, "data.tokenizer=");
    assert_last_error_mentions("the directory has no tokenizer.json");
    /* val_only needs validation data */
    const char *o1[] = {"trainer.val_only=true", "data.val_files=[]"};
    assert_error_mentions(check_with(o1, 2), DF_EINVAL, "trainer.val_only=true validates and exits, but "
                                                        "data.val_files is empty");
    /* data.reward_fn_key: the scorer is the one its column names (gsm8k_rows' extra_info.split "test": none) */
    snprintf(train, sizeof train, "data.train_files=[%s]", DF_SOURCE_DIR "/tests/fixtures/gsm8k_rows.jsonl");
    const char *o2[] = {train, "data.reward_fn_key=extra_info.split"};
    assert_error_mentions(check_with(o2, 2), DF_ENOTFOUND,
                          "gsm8k_rows.jsonl:1: unknown reward function for data_source 'test'");
    assert_last_error_mentions("(the column data.reward_fn_key names)");
    assert_int_equal(check_with(o2, 1), 0); /* by data_source: openai/gsm8k */
}

static void write_file(const char *name, const char *text)
{
    char *path = df_path_join(dir, name);
    assert_int_equal(df_write_file_atomic(path, text, strlen(text)), 0);
    free(path);
}

/* verl's command line: `key=value ...` without a file is the defaults and the overrides (the same
   output as an empty file); a first argument with '=' that names a file is still the file. */
static void test_overrides_only(void **state)
{
    (void)state;
    static char a[65536], b[65536]; /* `config show` of every key: ~22 KB */
    char cmd[1024];
    write_file("empty.yaml", "{}\n");
    write_file("seed=9.yaml", "trainer: {seed: 9}\n");
    const char *ov = "trainer.seed=5 data.train_batch_size=12";
    snprintf(cmd, sizeof cmd, "cd %s && %s/distflow config show %s 2>&1", dir, DF_BINARY_DIR, ov);
    assert_int_equal(df_test_command(cmd, a, sizeof a), 0);
    snprintf(cmd, sizeof cmd, "cd %s && %s/distflow config show empty.yaml %s 2>&1", dir, DF_BINARY_DIR, ov);
    assert_int_equal(df_test_command(cmd, b, sizeof b), 0);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "  seed: 5  # command line\n"));
    snprintf(cmd, sizeof cmd, "cd %s && %s/distflow config show seed=9.yaml 2>&1", dir, DF_BINARY_DIR);
    assert_int_equal(df_test_command(cmd, a, sizeof a), 0);
    assert_non_null(strstr(a, "  seed: 9  # seed=9.yaml:1\n"));
}

/* metrics.jsonl rows: "timestamp" right after "step", milliseconds; left out when negative. */
static void test_metrics_timestamp(void **state)
{
    (void)state;
    df_metrics *m = df_metrics_new();
    assert_int_equal(df_metrics_set(m, "a/b", 1.5), 0);
    char *line = NULL;
    assert_int_equal(df_metrics_to_json_at(m, 3, 1700000000.25, &line), 0);
    assert_string_equal(line, "{\"step\": 3, \"timestamp\": 1700000000.250, \"a/b\": 1.5}\n");
    free(line);
    assert_int_equal(df_metrics_to_json_at(m, 3, -1, &line), 0);
    assert_string_equal(line, "{\"step\": 3, \"a/b\": 1.5}\n");
    free(line);
    df_metrics_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_metrics_timestamp),
        cmocka_unit_test(test_overrides_only),
        cmocka_unit_test(test_preflight),
        cmocka_unit_test(test_val_only),
        cmocka_unit_test(test_cli_console),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
