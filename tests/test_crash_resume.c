/*
 * test_crash_resume.c — `distflow train` killed with SIGKILL anywhere, then run again with the same
 * command (resume_mode auto), ends bit-identical to the run that was never interrupted
 * (docs/checkpoints.md "Crash safety"; docs/testing.md "Kill points").
 *
 * The CLI runs as a child process (under mpiexec for 2 ranks); the kill points are the test-only
 * DF_TEST_KILL_AT events (src/util/killpoint.h), chosen from the event counts of the straight run,
 * so where a kill lands does not depend on the clock. For GRPO (in-reward KL controller), PPO
 * (critic) and DAPO (dynamic sampling), 4 steps with a checkpoint every 2, one output directory
 * takes in turn: a kill mid-generation late in the run, a kill between micro-batches of an update,
 * a kill after a step's metrics line before its checkpoint (the line must be dropped on resume and
 * written again), and a kill in the middle of a save; then a run to the end. Its final weights,
 * training states, trainer_state.json, data positions and metrics.jsonl (wall-clock metrics aside)
 * must equal the straight run's bytes. The same on 2 ranks, where the kills land on rank 1 or on
 * rank 0 and mpiexec ends the rest.
 *
 * Another number of ranks: a checkpoint of step 2 written by 2 ranks, resumed on 1, and one written
 * by 1 rank, resumed on 2, must read the prompts of steps 3 and 4 in the order the 1-rank run read
 * them (trainer.rollout_data_dir's "input" fields; a 2-rank step's dp0 file then its dp1 file),
 * steps 1 and 2 on 2 ranks those of 1 rank, and end at its data position.
 *
 * Kill between every write: a 2-step GRPO run with a checkpoint every step, stopped after its
 * checkpoint of step 1, is run again and killed before the 1st file-system operation (create,
 * write, fsync, rename, mkdir, removal) of the save of step 2, run again and killed before the
 * 2nd, and so on until a run ends. After every kill `latest` names a complete checkpoint (1, or 2
 * once published), the next start removes the temporaries the kill left (or puts back a checkpoint
 * a replacement had moved aside), and the final result equals the straight run's first 2 steps.
 */
/* rounding-free (scripts/test-variants.sh skips it): exit codes, files, two runs of one build compared */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testcli.h"

#include "distflow/reward.h"
#include "model/safetensors.h"
#include "util/timeutil.h"

enum { T = 4, SAVE = 2 };

static char dir[256];

/* dir/<algo>.yaml: T steps, a checkpoint every SAVE, shuffled data into a second epoch, warmup + cosine. */
static void write_yaml(const char *algo)
{
    char extra[1024], yaml[4096], p[512];
    if (!strcmp(algo, "ppo"))
        snprintf(extra, sizeof extra,
                 "critic:\n"
                 "  model: {path: %s/model}\n"
                 "  optim: {lr: 0.005, lr_warmup_steps: 1, warmup_style: cosine, total_training_steps: %d}\n"
                 "  ppo_mini_batch_size: 4\n"
                 "  ppo_micro_batch_size_per_gpu: 2\n"
                 "algorithm: {adv_estimator: gae, gamma: 1.0, lam: 0.95}\n",
                 dir, T);
    else if (!strcmp(algo, "grpo"))
        snprintf(extra, sizeof extra,
                 "algorithm: {adv_estimator: grpo, use_kl_in_reward: true,\n"
                 "            kl_ctrl: {type: adaptive, kl_coef: 0.05, target_kl: 0.01, horizon: 20}}\n");
    else
        snprintf(extra, sizeof extra,
                 "algorithm: {adv_estimator: grpo, workflow_type: dapo,\n"
                 "            filter_groups: {enable: true, metric: score, max_num_gen_batches: 4}}\n");
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8, shuffle: true,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01, lr_warmup_steps: 2, warmup_style: cosine, total_training_steps: %d},\n"
             "          ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 2}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "%s"
             "custom_reward_function: {path: %s/plugins/test/libscore_const.so, name: score_parity}\n"
             "trainer: {total_training_steps: %d, save_freq: %d, logger: [console]}\n",
             dir, dir, T, extra, DF_BINARY_DIR, T, SAVE);
    snprintf(p, sizeof p, "%s/%s.yaml", dir, algo);
    assert_int_equal(df_write_file_atomic(p, yaml, strlen(yaml)), 0);
}

/* `distflow train dir/<algo>.yaml` into dir/<out> with extra overrides; log dir/<out>.log. */
static int train(const char *algo, const char *out, int np, const char *kill_at, const char *counts,
                 const char *const *ov, int n_ov)
{
    char yaml[512], outp[600], log[600], cnt[600];
    snprintf(yaml, sizeof yaml, "%s/%s.yaml", dir, algo);
    snprintf(outp, sizeof outp, "trainer.default_local_dir=%s/%s", dir, out);
    snprintf(log, sizeof log, "%s/%s.log", dir, out);
    snprintf(cnt, sizeof cnt, "%s/%s", dir, counts ? counts : "");
    const char *argv[16] = {"train", yaml, outp};
    for (int i = 0; i < n_ov && i < 12; i++)
        argv[3 + i] = ov[i];
    df_cli_run o = {.np = np, .kill_at = kill_at, .counts = counts ? cnt : NULL, .log = log};
    return df_cli_exec(&o, argv);
}

static void path_of(char *p, size_t cap, const char *out, const char *rel)
{
    snprintf(p, cap, "%s/%s%s%s", dir, out, rel[0] ? "/" : "", rel);
}

/* A run that must end with status `want`; the log in the message otherwise. */
static void expect(int got, int want, const char *out, const char *what)
{
    if (got == want)
        return;
    char log[600];
    snprintf(log, sizeof log, "%s/%s.log", dir, out);
    char *text = df_cli_log(log);
    size_t n = strlen(text);
    fail_msg("%s: status %d, expected %d; log ends:\n%s", what, got, want, n > 3000 ? text + n - 3000 : text);
}

/* global_step_<step> of dir/<out> is complete: every file there, the JSON and safetensors readable. */
static void assert_complete(const char *out, int step, bool critic)
{
    char rel[256], p[1024];
    const char *roles[] = {"actor", critic ? "critic" : NULL};
    for (int r = 0; r < 2 && roles[r]; r++) {
        const char *files[] = {"model.safetensors", "train_state.safetensors"};
        for (int f = 0; f < 2; f++) {
            snprintf(rel, sizeof rel, "global_step_%d/%s/%s", step, roles[r], files[f]);
            path_of(p, sizeof p, out, rel);
            df_st_file *st = NULL;
            if (df_st_open(p, &st))
                fail_msg("latest names step %d, but: %s", step, df_last_error());
            df_st_close(st);
        }
    }
    for (int f = 0; f < 2; f++) {
        snprintf(rel, sizeof rel, "global_step_%d/%s", step, f ? "data.json" : "trainer_state.json");
        path_of(p, sizeof p, out, rel);
        json_t *o = json_load_file(p, 0, NULL);
        if (!o)
            fail_msg("latest names step %d, but %s does not parse", step, p);
        if (!f)
            assert_int_equal(json_integer_value(json_object_get(o, "global_step")), step);
        json_decref(o);
    }
}

/* After a kill: latest names a complete checkpoint or none, and metrics.jsonl holds a line for each
   step up to it (a resume keeps those and never writes them again); returns it (-1: none). */
static int check_after_kill(const char *out, bool critic)
{
    char p[1024];
    path_of(p, sizeof p, out, "");
    int latest = df_cli_latest(p);
    if (latest < 0)
        return latest;
    assert_complete(out, latest, critic);
    path_of(p, sizeof p, out, "metrics.jsonl");
    char *text = df_cli_log(p), key[32];
    for (int s = 1; s <= latest; s++) {
        snprintf(key, sizeof key, "{\"step\": %d,", s);
        if (!strstr(text, key))
            fail_msg("%s: latest names step %d, but the line of step %d is missing:\n%s", p, latest, s, text);
    }
    free(text);
    return latest;
}

/* The final checkpoint and metrics of dir/<a> and dir/<b> are the same, steps 1..last. */
static void assert_same_runs(const char *a, const char *b, int last, bool critic, bool state_json)
{
    char rel[256], pa[1024], pb[1024];
    const char *files[] = {"actor/model.safetensors", "actor/train_state.safetensors", "critic/model.safetensors",
                           "critic/train_state.safetensors", "trainer_state.json", "data.json"};
    for (int i = 0; i < 6; i++) {
        if ((i == 2 || i == 3) && !critic)
            continue;
        if (i == 4 && !state_json)
            continue;
        snprintf(rel, sizeof rel, "global_step_%d/%s", last, files[i]);
        path_of(pa, sizeof pa, a, rel);
        path_of(pb, sizeof pb, b, rel);
        df_test_same_file(pa, pb);
    }
    path_of(pa, sizeof pa, a, "");
    path_of(pb, sizeof pb, b, "");
    df_cli_same_metrics(pa, pb, 1, last);
    df_cli_no_temporaries(pb);
    assert_int_equal(df_cli_latest(pb), last);
}

/* One kill of the chain: the run must die at `kill_at`, and leave a resumable directory. */
static void kill_once(const char *algo, const char *out, int np, const char *kill_at, bool critic)
{
    char what[128];
    snprintf(what, sizeof what, "%s, %d rank(s), DF_TEST_KILL_AT=%s", algo, np, kill_at);
    expect(train(algo, out, np, kill_at, NULL, NULL, 0), DF_CLI_KILLED, out, what);
    print_message("%s: killed, latest %d\n", what, check_after_kill(out, critic));
}

/* The straight run, then the chain of kills in one directory, then the run to the end. */
static void check_kills(const char *algo, int np)
{
    double t0 = df_now();
    bool critic = !strcmp(algo, "ppo");
    char full[64], part[64], counts[64], at[64], p[1024];
    snprintf(full, sizeof full, "%s_np%d_full", algo, np);
    snprintf(part, sizeof part, "%s_np%d_kill", algo, np);
    snprintf(counts, sizeof counts, "%s_np%d.counts", algo, np);
    write_yaml(algo);
    expect(train(algo, full, np, NULL, counts, NULL, 0), DF_CLI_OK, full, "the straight run");
    path_of(p, sizeof p, counts, "");
    df_cli_counts c = df_cli_read_counts(p);
    assert_true(c.gen > 0 && c.update > 0 && c.metrics == T && c.save > 0);
    /* late in step 4 of 4, on the last rank: lines 1-3 written, latest = 2 */
    snprintf(at, sizeof at, "gen:%lld@%d", c.gen * 7 / 8, np - 1);
    kill_once(algo, part, np, at, critic);
    /* resumed from 2: an update of step 3 or 4 (half the run's updates remain) */
    snprintf(at, sizeof at, "update:%lld", c.update * 3 / 8 > 0 ? c.update * 3 / 8 : 1);
    kill_once(algo, part, np, at, critic);
    /* at step 4's metrics line and checkpoint (line written, checkpoint not): the resume from 2 drops
       lines 3 and 4 and writes them again */
    kill_once(algo, part, np, "metrics:2", critic);
    /* in the middle of step 4's save, after its step 3 and 4 lines */
    snprintf(at, sizeof at, "save:%lld@0", c.save / (T / SAVE) / 2);
    kill_once(algo, part, np, at, critic);
    expect(train(algo, part, np, NULL, NULL, NULL, 0), DF_CLI_OK, part, "the resumed run");
    assert_same_runs(full, part, T, critic, true);
    print_message("%s on %d rank(s): %.1f s\n", algo, np, df_now() - t0);
}

static void test_kills_grpo(void **state)
{
    (void)state;
    check_kills("grpo", 1);
}

static void test_kills_ppo(void **state)
{
    (void)state;
    check_kills("ppo", 1);
}

static void test_kills_dapo(void **state)
{
    (void)state;
    check_kills("dapo", 1);
}

/* 2 ranks: mpiexec ends the job when one rank dies; the chain resumes it on 2 ranks. */
static void test_kills_two_ranks(void **state)
{
    (void)state;
    if (!DF_MPIEXEC[0])
        skip(); /* built without MPI */
    check_kills("grpo", 2);
    check_kills("ppo", 2);
    check_kills("dapo", 2);
}

/* The "input" fields of dir/<dump>/<step>.jsonl, or of <step>.dp0.jsonl then <step>.dp1.jsonl (two
   data-parallel ranks), one per line, into buf. */
static void dump_inputs(const char *dump, int step, int ranks, char *buf, size_t cap)
{
    size_t at = 0;
    for (int r = 0; r < ranks; r++) {
        char rel[64], p[1024];
        if (ranks > 1)
            snprintf(rel, sizeof rel, "%d.dp%d.jsonl", step, r);
        else
            snprintf(rel, sizeof rel, "%d.jsonl", step);
        path_of(p, sizeof p, dump, rel);
        char *text = df_cli_log(p);
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            json_t *o = json_loads(line, 0, NULL);
            const char *in = json_string_value(json_object_get(o, "input"));
            if (!in)
                fail_msg("%s: a line without \"input\": %s", p, line);
            at += (size_t)snprintf(buf + at, at < cap ? cap - at : 0, "%s\n", in);
            json_decref(o);
        }
        free(text);
    }
    assert_true(at > 0 && at < cap);
}

/* Steps first..last of dir/<dump> (read from `ranks` ranks) hold the prompts of dir/dump_np1, in order. */
static void assert_same_prompts(const char *dump, int ranks, int first, int last)
{
    static char want[1 << 16], got[1 << 16];
    for (int s = first; s <= last; s++) {
        dump_inputs("dump_np1", s, 1, want, sizeof want);
        dump_inputs(dump, s, ranks, got, sizeof got);
        size_t k = 0, line = 1;
        for (; want[k] && want[k] == got[k]; k++)
            line += want[k] == '\n';
        if (want[k] || got[k])
            fail_msg("step %d: %s on %d rank(s) differs from 1 rank at line %zu of its inputs:\n%.80s\nvs\n%.80s", s, dump,
                     ranks, line, got + k, want + k);
    }
}

/* A checkpoint resumes on another number of ranks with the data order of one rank. */
static void test_resume_on_other_ranks(void **state)
{
    (void)state;
    if (!DF_MPIEXEC[0])
        skip(); /* built without MPI */
    char dump[600], from[600], log[600];
    write_yaml("grpo");
    /* unbalanced: verl's balance_batch moves samples between the ranks after generation */
    const char *ov[3] = {dump, "trainer.balance_batch=false", "trainer.total_training_steps=2"};
    snprintf(dump, sizeof dump, "trainer.rollout_data_dir=%s/dump_np1", dir);
    expect(train("grpo", "ranks_np1", 1, NULL, NULL, ov, 2), DF_CLI_OK, "ranks_np1", "1 rank");
    /* 2 ranks, steps 1 and 2, then steps 3 and 4 on 1 rank */
    snprintf(dump, sizeof dump, "trainer.rollout_data_dir=%s/dump_2to1", dir);
    expect(train("grpo", "ranks_2to1", 2, NULL, NULL, ov, 3), DF_CLI_OK, "ranks_2to1", "2 ranks, 2 steps");
    snprintf(log, sizeof log, "%s/ranks_2to1.log", dir);
    char *text = df_cli_log(log); /* every rank holds the 24 rows: counted once */
    if (!strstr(text, "data: 24 training prompts"))
        fail_msg("the 2-rank banner does not count 24 training prompts:\n%s", text);
    free(text);
    expect(train("grpo", "ranks_2to1", 1, NULL, NULL, ov, 2), DF_CLI_OK, "ranks_2to1", "resumed on 1 rank");
    text = df_cli_log(log);
    if (!strstr(text, "written by 2 ranks, on 1: the same data order"))
        fail_msg("the resume on 1 rank does not say the checkpoint's ranks:\n%s", text);
    free(text);
    assert_same_prompts("dump_2to1", 2, 1, 2);
    assert_same_prompts("dump_2to1", 1, 3, 4);
    /* the 1-rank checkpoint of step 2 on 2 ranks */
    snprintf(dump, sizeof dump, "trainer.rollout_data_dir=%s/dump_1to2", dir);
    snprintf(from, sizeof from, "trainer.resume_from_path=%s/ranks_np1/global_step_2", dir);
    const char *ov2[4] = {dump, "trainer.balance_batch=false", "trainer.resume_mode=resume_path", from};
    expect(train("grpo", "ranks_1to2", 2, NULL, NULL, ov2, 4), DF_CLI_OK, "ranks_1to2", "resumed on 2 ranks");
    assert_same_prompts("dump_1to2", 2, 3, 4);
    char pa[1024], pb[1024], rel[64];
    snprintf(rel, sizeof rel, "global_step_%d/data.json", T);
    path_of(pa, sizeof pa, "ranks_np1", rel);
    for (int k = 0; k < 2; k++) {
        path_of(pb, sizeof pb, k ? "ranks_1to2" : "ranks_2to1", rel);
        df_test_same_file(pa, pb);
    }
}

/* Every temporary listed in `before` (left by a kill) was removed or restored by the run logged in `log`. */
static void assert_cleaned(const char *before, const char *log)
{
    char *text = df_cli_log(log), name[256];
    for (const char *l = before; *l;) {
        const char *nl = strchr(l, '\n');
        snprintf(name, sizeof name, "/%.*s, left by", (int)(nl - l), l);
        if (!strstr(text, name) && !strstr(text, "restored "))
            fail_msg("the run after a kill did not remove %.*s:\n%s", (int)(nl - l), l, text);
        l = nl + 1;
    }
    free(text);
}

/* Kill before every file-system operation of the save of step 2 (checkpoint 1 in place), one kill
   per run, each run resuming from what the kills before left. */
static void test_kill_every_save_op(void **state)
{
    (void)state;
    double t0 = df_now();
    write_yaml("grpo");
    char p[1024], log[600], at[64], temps[4096] = "", prev_temps[4096] = "";
    path_of(p, sizeof p, "grpo_np1.counts", "");
    if (!df_file_exists(p))
        expect(train("grpo", "grpo_np1_full", 1, NULL, "grpo_np1.counts", NULL, 0), DF_CLI_OK, "grpo_np1_full",
               "the straight run");
    long long per_save = df_cli_read_counts(p).save / (T / SAVE);
    const char *ov[] = {"trainer.total_training_steps=2", "trainer.save_freq=1"};
    /* step 1 saved, step 2's line written, its save not begun */
    expect(train("grpo", "saves", 1, "metrics:2", NULL, ov, 2), DF_CLI_KILLED, "saves", "before the save of step 2");
    assert_int_equal(check_after_kill("saves", false), 1);
    int latest = 1, kills = 0, restored = 0;
    bool aside_tried = false;
    snprintf(log, sizeof log, "%s/saves.log", dir);
    for (long long k = 1;; k++) {
        snprintf(at, sizeof at, "save:%lld", k);
        int st = train("grpo", "saves", 1, at, NULL, ov, 2);
        char *text = df_cli_log(log);
        restored += strstr(text, "restored ") != NULL;
        free(text);
        if (kills > 0) /* this run started by removing what the last kill left */
            assert_cleaned(prev_temps, log);
        if (st == DF_CLI_OK)
            break;
        expect(st, DF_CLI_KILLED, "saves", at);
        kills++;
        assert_true(kills <= 2 * per_save);
        int now = check_after_kill("saves", false);
        assert_true(now == latest || (latest == 1 && now == 2)); /* never back, never a step not saved */
        path_of(p, sizeof p, "saves", "global_step_2");
        if (now == 1 && df_dir_exists(p) && !aside_tried) {
            /* published without its `latest` (killed before operation k): the next run replaces it,
               and the same k now falls between moving it aside and renaming the new one in */
            aside_tried = true;
            expect(train("grpo", "saves", 1, at, NULL, ov, 2), DF_CLI_KILLED, "saves", at);
            path_of(p, sizeof p, "saves", ".global_step_2.old.tmp");
            assert_true(df_dir_exists(p));
            assert_int_equal(check_after_kill("saves", false), 1);
        }
        path_of(p, sizeof p, "saves", "");
        df_cli_temporaries(p, temps, sizeof temps);
        memcpy(prev_temps, temps, sizeof temps);
        latest = now;
    }
    print_message("killed before each of %d file-system operations (%lld in a save), %d restore(s) of a "
                  "checkpoint moved aside: %.1f s\n", kills, per_save, restored, df_now() - t0);
    /* every operation at least once (a save that replaces a global_step_2 published without its
       `latest` has a few more), and a replacement killed between its two renames was undone */
    assert_true(kills >= per_save);
    assert_true(restored >= 1);
    assert_int_equal(latest, 2);
    assert_same_runs("grpo_np1_full", "saves", 2, false, false);
}

/* A reward that fails: a run that errors in its first step. */
static int fail_score(const char *data_source, const char *s, const char *gt, const char *extra, double *score)
{
    (void)data_source, (void)s, (void)gt, (void)extra, (void)score;
    return df_error(DF_EINVAL, "injected reward failure");
}

/* A run that fails or dies before its first metrics line, and `data gsm8k` on bad input, leave no
   output directory (nor an empty metrics.jsonl). */
static void test_failed_runs_leave_nothing(void **state)
{
    (void)state;
    char p[1024], yaml[2048];
    /* in-process: the reward fails during step 1 */
    assert_int_equal(df_reward_register("test/fail", fail_score), 0);
    df_test_digits_inputs(dir, "fail.jsonl", 8, "test/fail", false);
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/fail.jsonl], val_files: [], train_batch_size: 4, max_response_length: 4}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 2, save_freq: 1, logger: [], default_local_dir: %s/failed/out}\n",
             dir, dir, dir);
    assert_error_mentions(df_test_run(NULL, df_test_config(yaml, "fail.yaml", NULL, 0)), DF_EINVAL,
                          "injected reward failure");
    path_of(p, sizeof p, "failed", "");
    assert_false(df_dir_exists(p));
    /* the CLI killed in its first generation */
    write_yaml("grpo");
    expect(train("grpo", "early", 1, "gen:1", NULL, NULL, 0), DF_CLI_KILLED, "early", "gen:1");
    path_of(p, sizeof p, "early", "");
    assert_false(df_dir_exists(p));
    /* data gsm8k: a malformed input line, the output two directories down */
    char cmd[2048], out[4096];
    path_of(p, sizeof p, "raw.jsonl", "");
    assert_int_equal(df_write_file_atomic(p, "{\"question\": \"1+1\", \"answer\": \"#### 2\"}\n{\"question\"", 49), 0);
    snprintf(cmd, sizeof cmd, "%s/distflow data gsm8k --in %s --out %s/gsm/new/out.jsonl 2>&1", DF_BINARY_DIR, p, dir);
    int st = df_test_command(cmd, out, sizeof out);
    if (st == 0 || !strstr(out, "raw.jsonl:2"))
        fail_msg("data gsm8k on a cut line: exit %d, output:\n%s", st, out);
    path_of(p, sizeof p, "gsm", "");
    assert_false(df_dir_exists(p));
}

static int setup(void **state)
{
    (void)state;
    /* memory-backed where there is one: the runs fsync often, and a SIGKILL does not drop the page
       cache, so the file system does not change what is being tested */
    snprintf(dir, sizeof dir, "/dev/shm/df_crash_XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof dir, "/tmp/df_crash_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
    }
    df_test_digits_inputs(dir, "train.jsonl", 24, "openai/gsm8k", true);
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
        cmocka_unit_test(test_kills_grpo),
        cmocka_unit_test(test_kills_ppo),
        cmocka_unit_test(test_kills_dapo),
        cmocka_unit_test(test_kill_every_save_op),
        cmocka_unit_test(test_failed_runs_leave_nothing),
        cmocka_unit_test(test_kills_two_ranks),
        cmocka_unit_test(test_resume_on_other_ranks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
