/*
 * test_resume.c — checkpoint and bit-exact resume of `distflow train` (docs/checkpoints.md).
 *
 * For GRPO (with the adaptive in-reward KL controller), PPO (critic) and DAPO (dynamic sampling; and
 * with data.gen_batch_size = 2 x train_batch_size, whose dataloader counts generation batches):
 * a run of K steps straight through, and a run stopped at step J (trainer.total_training_steps=J,
 * the lr schedules pinned to K steps by optim.total_training_steps) then continued to K by a new
 * worker from the checkpoint alone (resume_mode auto), must end with byte-identical actor (and
 * critic) weights and training state and the same metrics.jsonl lines, wall-clock metrics
 * (timing_s/..., perf/..., the rows' timestamp) left out. The data (shuffled, 24 rows in batches
 * of 8) rolls into a second epoch after the checkpoint, and the lr schedules are warmup + cosine,
 * so the dataloader position, the schedule step, the AdamW moments and the KL coefficient must all
 * be restored. Then the
 * failures: resume_path without a checkpoint, stale temporaries from a killed save, a truncated
 * training state, a corrupt trainer_state.json, a data position for another number of rows; a
 * checkpoint of an earlier distflow (data_dp_rank_0.json) resumes at its position. And stopping on request: a stop
 * flag raised on rank 0 during step 1 stops every rank after it with its checkpoint, from which a
 * resume gives the straight run's bits; `distflow train` exits 143 after SIGTERM with a checkpoint,
 * and dies at once on a second signal.
 * mpi-test: np 2
 */
/* rounding-free (scripts/test-variants.sh skips it): exit codes, files, two runs of one build compared */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testcli.h"

#include "distflow/comm.h"
#include "distflow/reward.h"

#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { K = 5, J = 2 };

static df_comm *world;
static int R;
static char dir[256];

/* The YAML of the job of algorithm `algo` ("grpo", "ppo", "dapo", "dapo_gen") into dir/<out>, into
   yaml[4096]. */
static void job_yaml(const char *algo, const char *out, char *yaml)
{
    char extra[1024] = "";
    /* verl's DAPO recipe: rounds of 16 prompts for steps of 8 (24 rows: one round an epoch) */
    const char *gen = strcmp(algo, "dapo_gen") ? "" : " gen_batch_size: 16,";
    if (!strcmp(algo, "ppo"))
        snprintf(extra, sizeof extra,
                 "critic:\n"
                 "  model: {path: %s/model}\n"
                 "  optim: {lr: 0.005, lr_warmup_steps: 1, warmup_style: cosine, total_training_steps: %d}\n"
                 "  ppo_mini_batch_size: 4\n"
                 "  ppo_micro_batch_size_per_gpu: 4\n"
                 "algorithm: {adv_estimator: gae, gamma: 1.0, lam: 0.95}\n",
                 dir, K);
    else if (!strcmp(algo, "grpo"))
        snprintf(extra, sizeof extra,
                 "algorithm: {adv_estimator: grpo, use_kl_in_reward: true,\n"
                 "            kl_ctrl: {type: adaptive, kl_coef: 0.05, target_kl: 0.01, horizon: 20}}\n");
    else
        snprintf(extra, sizeof extra,
                 "algorithm: {adv_estimator: grpo, workflow_type: dapo,\n"
                 "            filter_groups: {enable: true, metric: score, max_num_gen_batches: 4}}\n");
    snprintf(yaml, 4096,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8,%s shuffle: true,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, lr_warmup_steps: 2, warmup_style: cosine, total_training_steps: %d},\n"
             "          ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "%s"
             "trainer: {total_training_steps: %d, save_freq: %d, logger: [], default_local_dir: %s/%s}\n",
             dir, gen, dir, K, extra, K, J, dir, out);
}

/* The job's config, with n overrides. */
static df_config *job(const char *algo, const char *out, const char *const *ov, int n)
{
    char yaml[4096];
    job_yaml(algo, out, yaml);
    return df_test_config(yaml, "resume.yaml", ov, n);
}

static int run(df_comm *comm, const char *algo, const char *out, const char *const *ov, int n)
{
    return df_test_run(comm, job(algo, out, ov, n));
}

/* The bytes of dir/<out>/<rel>; fails the test when missing. */
static char *file_bytes(const char *out, const char *rel, size_t *len)
{
    char p[1024], *data;
    snprintf(p, sizeof p, "%s/%s/%s", dir, out, rel);
    if (df_read_file(p, &data, len))
        fail_msg("%s", df_last_error());
    return data;
}

static void assert_same_file(const char *a, const char *b, const char *rel)
{
    size_t na, nb;
    char *x = file_bytes(a, rel, &na), *y = file_bytes(b, rel, &nb);
    if (na != nb || memcmp(x, y, na))
        fail_msg("%s/%s and %s/%s differ (%zu and %zu bytes)", a, rel, b, rel, na, nb);
    free(x);
    free(y);
}

/* metrics.jsonl of dir/<out> without wall-clock metrics, one canonical line per step. */
static char *metrics_canon(const char *out)
{
    json_t *lines = df_test_metrics(dir, out, true), *o;
    size_t i;
    char *all = calloc(1, 1);
    json_array_foreach(lines, i, o) {
        const char *key;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(o, tmp, key, v) {
            if (df_test_clock_metric(key))
                json_object_del(o, key);
        }
        char *line = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
        all = realloc(all, strlen(all) + strlen(line) + 2);
        strcat(strcat(all, line), "\n");
        free(line);
    }
    assert_int_equal(json_array_size(lines), K);
    json_decref(lines);
    return all;
}

static void assert_same_runs(const char *algo, const char *full, const char *part);
static void write_at(const char *rel, const char *text);

/* K steps straight, and J steps then a new worker resuming to K: the same bits. */
static void check_resume(const char *algo)
{
    char full[64], part[64];
    snprintf(full, sizeof full, "%s_full", algo);
    snprintf(part, sizeof part, "%s_part", algo);
    if (run(world, algo, full, NULL, 0))
        fail_msg("%s", df_last_error());
    const char *stop[] = {"trainer.total_training_steps=2"};
    if (run(world, algo, part, stop, 1))
        fail_msg("%s", df_last_error());
    if (R == 0) { /* a crash after logging step J + 1: its line, and half of the next, are dropped */
        char p[512];
        snprintf(p, sizeof p, "%s/%s/metrics.jsonl", dir, part);
        FILE *f = fopen(p, "a");
        assert_non_null(f);
        fputs("{\"step\": 3, \"actor/pg_loss\": 123.0}\n{\"step\": 4, \"actor/pg", f);
        fclose(f);
    }
    assert_int_equal(df_comm_barrier(world), 0);
    if (run(world, algo, part, NULL, 0)) /* resume_mode auto: from global_step_J */
        fail_msg("%s", df_last_error());
    assert_same_runs(algo, full, part);
}

/* The final checkpoints and the metrics of runs dir/<full> and dir/<part> are the same (rank 0). */
static void assert_same_runs(const char *algo, const char *full, const char *part)
{
    if (R != 0)
        return;
    char rel[128];
    snprintf(rel, sizeof rel, "global_step_%d/actor/model.safetensors", K);
    assert_same_file(full, part, rel);
    snprintf(rel, sizeof rel, "global_step_%d/actor/train_state.safetensors", K);
    assert_same_file(full, part, rel);
    if (!strcmp(algo, "ppo")) {
        snprintf(rel, sizeof rel, "global_step_%d/critic/model.safetensors", K);
        assert_same_file(full, part, rel);
        snprintf(rel, sizeof rel, "global_step_%d/critic/train_state.safetensors", K);
        assert_same_file(full, part, rel);
    }
    snprintf(rel, sizeof rel, "global_step_%d/trainer_state.json", K);
    assert_same_file(full, part, rel);
    snprintf(rel, sizeof rel, "global_step_%d/data.json", K);
    assert_same_file(full, part, rel);
    char *a = metrics_canon(full), *b = metrics_canon(part);
    if (strcmp(a, b))
        fail_msg("%s: metrics differ\nstraight:\n%s\nresumed:\n%s", algo, a, b);
    free(a);
    free(b);
    size_t n;
    char *latest = file_bytes(part, "latest_checkpointed_iteration.txt", &n);
    assert_int_equal(atoi(latest), K);
    free(latest);
}

static void test_resume_grpo(void **state)
{
    (void)state;
    check_resume("grpo");
}

/* A checkpoint of an earlier distflow, whose data position was data_dp_rank_0.json (each rank
   shuffled its own shard) instead of data.json: it resumes at that position. With one rank the
   order was today's, so the run ends with the straight run's bits; with more (a warning says the
   epoch's rows may repeat or be skipped) it ends at the straight run's data position. */
static void test_resume_legacy(void **state)
{
    (void)state;
    const int n = df_comm_size(world);
    const char *stop[] = {"trainer.total_training_steps=2"};
    if (run(world, "grpo", "legacy", stop, 1))
        fail_msg("%s", df_last_error());
    if (R == 0) {
        char *text = file_bytes("legacy", "global_step_2/data.json", NULL), p[1024];
        json_t *o = json_loads(text, 0, NULL);
        free(text);
        int64_t rows = json_integer_value(json_object_get(o, "rows"));
        json_t *old = json_pack("{s:s, s:i, s:i, s:O, s:O, s:I}", "format", "distflow-checkpoint/1", "dp_rank", 0,
                                "dp_size", n, "epoch", json_object_get(o, "epoch"), "step",
                                json_object_get(o, "step"), "rows_per_rank", (json_int_t)(rows / n));
        char *out = json_dumps(old, JSON_INDENT(2));
        write_at("legacy/global_step_2/data_dp_rank_0.json", out);
        snprintf(p, sizeof p, "%s/legacy/global_step_2/data.json", dir);
        assert_int_equal(unlink(p), 0);
        free(out), json_decref(old), json_decref(o);
    }
    assert_int_equal(df_comm_barrier(world), 0);
    if (run(world, "grpo", "legacy", NULL, 0))
        fail_msg("%s", df_last_error());
    if (n == 1)
        assert_same_runs("grpo", "grpo_full", "legacy");
    else if (R == 0)
        assert_same_file("grpo_full", "legacy", "global_step_5/data.json");
}

static void test_resume_ppo(void **state)
{
    (void)state;
    check_resume("ppo");
}

static void test_resume_dapo(void **state)
{
    (void)state;
    check_resume("dapo");
}

static void test_resume_dapo_gen(void **state)
{
    (void)state;
    check_resume("dapo_gen");
    /* its data position counts batches of 16: another gen_batch_size is refused, naming both */
    const char *other[] = {"data.gen_batch_size=8", "trainer.total_training_steps=6"};
    assert_error_mentions(run(world, "dapo_gen", "dapo_gen_part", other, 2), DF_EINVAL,
                          "counts batches of 16 prompts, this run's data.gen_batch_size is 8");
}

static bool exists_at(const char *rel);

/* ---- stopping at a step boundary (SIGINT / SIGTERM) ---- */

static volatile sig_atomic_t stop_flag;
static bool raise_stop; /* the reward of rank 0 raises stop_flag, as a signal handler would */

/* df_test_digit_share, raising the stop flag on rank 0 when asked (under mpiexec the other ranks must
   stop at the same step all the same) */
static int digits_or_stop(const char *data_source, const char *s, const char *gt, const char *extra, double *score)
{
    if (raise_stop && R == 0)
        stop_flag = SIGTERM;
    return df_test_digit_share(data_source, s, gt, extra, score);
}

/* A GRPO run asked to stop during step 1 checkpoints step 1 and stops; resuming gives the
   uninterrupted run's bits. */
static void test_stop_then_resume(void **state)
{
    (void)state;
    if (!exists_at("grpo_full/global_step_5") && run(world, "grpo", "grpo_full", NULL, 0))
        fail_msg("%s", df_last_error());
    df_config *cfg = job("grpo", "grpo_stop", NULL, 0);
    df_dag_worker *w = NULL;
    stop_flag = 0;
    raise_stop = true;
    int rc = df_dag_worker_create(cfg, world, &w);
    if (!rc) {
        df_dag_worker_set_stop_flag(w, &stop_flag);
        rc = df_dag_worker_fit(w);
    }
    raise_stop = false;
    assert_error_mentions(rc, DF_ESTOPPED, "stopped on request after step 1 of 5");
    assert_int_equal(df_dag_worker_stopped(w), SIGTERM); /* on every rank, whichever raised it */
    df_dag_worker_free(w);
    df_config_free(cfg);
    assert_int_equal(df_comm_barrier(world), 0);
    if (R == 0) {
        size_t n;
        char *latest = file_bytes("grpo_stop", "latest_checkpointed_iteration.txt", &n);
        assert_string_equal(latest, "1\n");
        free(latest);
        assert_true(exists_at("grpo_stop/global_step_1/actor/train_state.safetensors"));
        assert_false(exists_at("grpo_stop/global_step_2"));
        json_t *lines = df_test_metrics(dir, "grpo_stop", true);
        assert_int_equal(json_array_size(lines), 1);
        json_decref(lines);
    }
    if (run(world, "grpo", "grpo_stop", NULL, 0))
        fail_msg("%s", df_last_error());
    assert_same_runs("grpo", "grpo_full", "grpo_stop");
}

/* `distflow train` for 1000 steps in a child (df_cli_spawn), output to dir/<log>, into dir/<out>;
   returns once its first step is done (a metrics.jsonl line). */
static pid_t spawn_train(const char *out, const char *log)
{
    char yaml[512], logp[512], outp[600], data[600], lines[600];
    snprintf(yaml, sizeof yaml, "%s/cli.yaml", dir);
    snprintf(logp, sizeof logp, "%s/%s", dir, log);
    snprintf(outp, sizeof outp, "trainer.default_local_dir=%s/%s", dir, out);
    snprintf(data, sizeof data, "data.train_files=[%s/cli.jsonl]", dir); /* a reward the CLI knows */
    const char *argv[] = {"train", yaml, "trainer.total_training_steps=1000", "trainer.save_freq=1000", outp, data,
                          NULL};
    pid_t pid = df_cli_spawn(&(df_cli_run){.np = 1, .log = logp}, argv);
    snprintf(lines, sizeof lines, "%s/%s/metrics.jsonl", dir, out);
    df_cli_wait_line(lines, pid);
    return pid;
}

static void test_signals_cli(void **state)
{
    (void)state;
    if (df_comm_size(world) != 1) /* the CLI as a user runs it, outside an mpiexec job */
        return;
    char yaml[4096];
    job_yaml("grpo", "sig", yaml);
    write_at("cli.yaml", yaml);
    df_test_digits_inputs(dir, "cli.jsonl", 24, "openai/gsm8k", false);
    /* one SIGTERM: the step running finishes, is checkpointed, exit 143 */
    pid_t pid = spawn_train("sig", "sig.log");
    assert_int_equal(kill(pid, SIGTERM), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    char *log = file_bytes(".", "sig.log", NULL);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 143 || !strstr(log, "stopped on request after step"))
        fail_msg("distflow train after SIGTERM: status 0x%x, output:\n%s", st, log);
    free(log);
    size_t n;
    char *latest = file_bytes("sig", "latest_checkpointed_iteration.txt", &n), rel[64];
    int step = atoi(latest);
    free(latest);
    snprintf(rel, sizeof rel, "sig/global_step_%d/actor/train_state.safetensors", step);
    assert_true(step >= 1 && step < 1000 && exists_at(rel));
    /* a second signal ends it at once, by that signal's default action (SIGINT and SIGTERM: two signals
       of one kind could merge into one; the kernel may deliver them in either order) */
    pid = spawn_train("sig2", "sig2.log");
    assert_int_equal(kill(pid, SIGINT), 0);
    assert_int_equal(kill(pid, SIGTERM), 0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st) || (WTERMSIG(st) != SIGTERM && WTERMSIG(st) != SIGINT))
        fail_msg("distflow train after SIGINT + SIGTERM: status 0x%x, expected killed by one of them", st);
}

/* ---- failures (rank 0 alone) ---- */

static void write_at(const char *rel, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    assert_int_equal(df_mkdir_parent(p), 0);
    assert_int_equal(df_write_file_atomic(p, text, strlen(text)), 0);
}

static bool exists_at(const char *rel)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return stat(p, &st) == 0;
}

/* cp -r of dir/<from> to dir/<to> (the shell's: the test's own files). */
static void copy_tree(const char *from, const char *to)
{
    char cmd[1200], out[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s/%s' && cp -r '%s/%s' '%s/%s'", dir, to, dir, from, dir, to);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
}

static void test_failures(void **state)
{
    (void)state;
    df_comm *self = NULL; /* collective: every rank splits, rank 0 runs */
    assert_int_equal(df_comm_split(world, R, 0, &self), 0);
    if (R != 0) {
        df_comm_free(self);
        return;
    }
    int w = df_comm_size(world);
    const char *one[] = {"trainer.total_training_steps=1", "trainer.save_freq=1"};
    char path[600], ovp[700];
    /* resume_path naming nothing */
    snprintf(path, sizeof path, "%s/nowhere/global_step_3", dir);
    snprintf(ovp, sizeof ovp, "trainer.resume_from_path=%s", path);
    const char *missing[] = {"trainer.resume_mode=resume_path", ovp};
    assert_error_mentions(run(self, "grpo", "err", missing, 2), DF_ENOTFOUND, path);
    if (w == 1) { /* the same from the command line (not from inside an mpiexec job): a non-zero exit
                     and the path in the message */
        char yaml[4096], cmd[2048], out[8192];
        job_yaml("grpo", "cli", yaml);
        write_at("cli.yaml", yaml);
        /* rows of a data_source the CLI scores ("test/digits" is registered in this process only) */
        df_test_digits_inputs(dir, "cli_err.jsonl", 24, "openai/gsm8k", false);
        snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s/distflow train %s/cli.yaml trainer.resume_mode=resume_path %s "
                 "data.train_files=[%s/cli_err.jsonl] 2>&1", DF_BINARY_DIR, dir, ovp, dir);
        int st = df_test_command(cmd, out, sizeof out);
        if (st == 0 || !strstr(out, path))
            fail_msg("distflow train with a missing resume_from_path: exit %d, output:\n%s", st, out);
    }
    const char *unset[] = {"trainer.resume_mode=resume_path"};
    assert_error_mentions(run(self, "grpo", "err", unset, 1), DF_EINVAL, "needs trainer.resume_from_path");

    /* stale temporaries of a killed save are removed at the next start, other files kept */
    write_at("stale/.global_step_7.tmp/actor/model.safetensors", "partial");
    write_at("stale/.global_step_2.old.tmp/trainer_state.json", "{}");
    write_at("stale/.global_step_x.tmp", "not ours");
    if (run(self, "grpo", "stale", one, 2))
        fail_msg("%s", df_last_error());
    assert_false(exists_at("stale/.global_step_7.tmp"));
    assert_false(exists_at("stale/.global_step_2.old.tmp"));
    assert_true(exists_at("stale/.global_step_x.tmp"));
    assert_true(exists_at("stale/global_step_1/trainer_state.json"));

    /* a save that fails (global_step_2 is taken by a file) leaves latest at the checkpoint before it
       and no temporary behind */
    write_at("failsave/global_step_2", "in the way");
    const char *two[] = {"trainer.total_training_steps=2", "trainer.save_freq=1"};
    assert_error_mentions(run(self, "grpo", "failsave", two, 2), DF_EIO, "failsave/global_step_2");
    size_t n;
    char *latest = file_bytes("failsave", "latest_checkpointed_iteration.txt", &n);
    assert_string_equal(latest, "1\n");
    free(latest);
    assert_false(exists_at("failsave/.global_step_2.tmp"));

    /* the checkpoints of a one-rank run: the world size is checked against this run's */
    if (w == 1) {
        /* a truncated training state is refused, naming the file */
        copy_tree("stale", "trunc");
        char p[1024];
        snprintf(p, sizeof p, "%s/trunc/global_step_1/actor/train_state.safetensors", dir);
        assert_int_equal(truncate(p, 4096), 0);
        assert_error_mentions(run(self, "grpo", "trunc", one, 2), DF_EINVAL, p);
        /* resume_mode=disable starts afresh beside it */
        const char *fresh[] = {"trainer.total_training_steps=1", "trainer.save_freq=1", "trainer.resume_mode=disable"};
        if (run(self, "grpo", "trunc", fresh, 3))
            fail_msg("%s", df_last_error());
        /* a corrupt trainer_state.json, and a data position over other rows */
        copy_tree("stale", "badjson");
        write_at("badjson/global_step_1/trainer_state.json", "{\"format\": \"distflow-checkpoint/1\", \"global_st");
        assert_error_mentions(run(self, "grpo", "badjson", one, 2), DF_EINVAL, "global_step_1/trainer_state.json");
        copy_tree("stale", "world");
        char *text = file_bytes("world", "global_step_1/data.json", NULL);
        char *at = strstr(text, "\"rows\": 24");
        assert_non_null(at);
        at[strlen("\"rows\": ")] = '9';
        write_at("world/global_step_1/data.json", text);
        free(text);
        assert_error_mentions(run(self, "grpo", "world", one, 2), DF_EINVAL,
                              "written for 94 rows, this run's data gives 24 (the dataset or its filters changed)");
        /* latest naming a checkpoint that is not there */
        write_at("world/latest_checkpointed_iteration.txt", "9\n");
        assert_error_mentions(run(self, "grpo", "world", one, 2), DF_ENOTFOUND, "global_step_9 does not exist");
        /* resume_path to a checkpoint of another run: continues from it (here: nothing left to train) */
        snprintf(ovp, sizeof ovp, "trainer.resume_from_path=%s/stale/global_step_1", dir);
        const char *other[] = {"trainer.total_training_steps=1", "trainer.resume_mode=resume_path", ovp};
        if (run(self, "grpo", "other", other, 3))
            fail_msg("%s", df_last_error());
        assert_false(exists_at("other/global_step_1"));
    }
    df_comm_free(self);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", digits_or_stop))
        return -1;
    R = df_comm_rank(world);
    if (!df_test_size_ok(df_comm_size(world)))
        return -1;
    return df_test_shared_inputs(world, "df_resume", 24, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_grpo),
        cmocka_unit_test(test_resume_legacy),
        cmocka_unit_test(test_resume_ppo),
        cmocka_unit_test(test_resume_dapo),
        cmocka_unit_test(test_resume_dapo_gen),
        cmocka_unit_test(test_stop_then_resume),
        cmocka_unit_test(test_signals_cli),
        cmocka_unit_test(test_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
