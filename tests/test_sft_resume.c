/*
 * test_sft_resume.c — `distflow sft` checkpoints and resume (docs/checkpoints.md, "SFT").
 *
 * 6 steps (two shuffled epochs of 3, warmup + cosine) with a checkpoint every 2, run straight; then
 * the same command in another directory killed with SIGKILL between micro-batches of step 4 (after
 * checkpoint 2 and step 3's metrics line), after step 6's metrics line before its checkpoint, and in
 * the middle of a save, each time run again (resume_mode auto) to the end: the final model, training
 * state, trainer_state.json and metrics.jsonl (tokens per second aside) must be the straight run's
 * bytes, with no temporaries left. resume_mode=resume_path from the straight run's global_step_4
 * continues it to the same bytes (also as an earlier distflow wrote it, with rows_per_rank);
 * resume_mode=disable starts afresh beside a checkpoint; a
 * checkpoint of another dataset size is refused; on 2 ranks (mpiexec) a run killed on rank 1 between
 * micro-batches and on rank 0 mid-save resumes to the straight 2-rank run's bytes, and its checkpoint
 * of step 2 continues on 1 rank to the 1-rank run's data position; trainer.max_ckpt_to_keep prunes; checkpoint contents without model, optimizer and
 * extra are refused, and a run killed before its first step or refused leaves no output directory.
 * model.fsdp_config.mixed_precision.param_dtype (default bf16, as verl's SFT trainer) reaches the
 * matmuls: where this CPU has native bf16 kernels the default and a forced fp32 run train different
 * weights and the banners say which dtype ran; elsewhere the default gives one notice and the same
 * float32 weights.
 */
/* rounding-free (scripts/test-variants.sh skips it): exit codes, files, two runs of one build compared */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testcli.h"

#include <jansson.h>
#include <math.h>

enum { STEPS = 6, EVERY = 2 };

static char dir[256];

/* `distflow sft dir/sft.yaml` on np ranks into dir/<out> with overrides; log dir/<out>.log. */
static int sft_np(int np, const char *out, const char *kill_at, const char *counts, const char *const *ov,
                  int n_ov)
{
    char yaml[512], outp[600], log[600], cnt[600];
    snprintf(yaml, sizeof yaml, "%s/sft.yaml", dir);
    snprintf(outp, sizeof outp, "trainer.default_local_dir=%s/%s", dir, out);
    snprintf(log, sizeof log, "%s/%s.log", dir, out);
    snprintf(cnt, sizeof cnt, "%s/%s", dir, counts ? counts : "");
    const char *argv[16] = {"sft", yaml, outp};
    for (int i = 0; i < n_ov && i < 12; i++)
        argv[3 + i] = ov[i];
    df_cli_run o = {.np = np, .kill_at = kill_at, .counts = counts ? cnt : NULL, .log = log};
    return df_cli_exec(&o, argv);
}

static int sft(const char *out, const char *kill_at, const char *counts, const char *const *ov, int n_ov)
{
    return sft_np(1, out, kill_at, counts, ov, n_ov);
}

static bool log_has(const char *out, const char *text);

static void expect(int got, int want, const char *out, const char *what)
{
    if (got == want)
        return;
    char log[600];
    snprintf(log, sizeof log, "%s/%s.log", dir, out);
    char *text = df_cli_log(log);
    fail_msg("%s: status %d, expected %d; log:\n%s", what, got, want, text);
}

static void at(char *p, size_t cap, const char *out, const char *rel)
{
    snprintf(p, cap, "%s/%s%s%s", dir, out, rel[0] ? "/" : "", rel);
}

/* global_step_<step> of dir/a and dir/b hold the same model and training state; `all`: and the same
   trainer_state.json, and metrics 1..step. */
static void assert_same(const char *a, const char *b, int step, bool all)
{
    const char *files[] = {"model.safetensors", "train_state.safetensors", "trainer_state.json"};
    char rel[128], pa[1024], pb[1024];
    for (int i = 0; i < (all ? 3 : 2); i++) {
        snprintf(rel, sizeof rel, "global_step_%d/%s", step, files[i]);
        at(pa, sizeof pa, a, rel);
        at(pb, sizeof pb, b, rel);
        df_test_same_file(pa, pb);
    }
    at(pa, sizeof pa, a, "");
    at(pb, sizeof pb, b, "");
    if (all)
        df_cli_same_metrics(pa, pb, 1, step);
    df_cli_no_temporaries(pb);
    assert_int_equal(df_cli_latest(pb), step);
}

static void test_sft_kills(void **state)
{
    (void)state;
    expect(sft("full", NULL, "sft.counts", NULL, 0), DF_CLI_OK, "full", "the straight run");
    char p[1024], kill_at[64];
    at(p, sizeof p, "sft.counts", "");
    df_cli_counts c = df_cli_read_counts(p);
    assert_int_equal(c.update, STEPS * 2); /* 2 micro-batches a step */
    assert_int_equal(c.metrics, STEPS);
    /* between the micro-batches of step 4: checkpoint 2, lines 1-3 */
    expect(sft("kill", "update:8", NULL, NULL, 0), DF_CLI_KILLED, "kill", "update:8");
    at(p, sizeof p, "kill", "");
    assert_int_equal(df_cli_latest(p), 2);
    /* resumed from 2: step 6's line written, its checkpoint not (lines 3-6 go again) */
    expect(sft("kill", "metrics:4", NULL, NULL, 0), DF_CLI_KILLED, "kill", "metrics:4");
    assert_int_equal(df_cli_latest(p), 4);
    /* resumed from 4: in the middle of step 6's save */
    snprintf(kill_at, sizeof kill_at, "save:%lld", c.save / (STEPS / EVERY) / 2);
    expect(sft("kill", kill_at, NULL, NULL, 0), DF_CLI_KILLED, "kill", kill_at);
    assert_int_equal(df_cli_latest(p), 4);
    expect(sft("kill", NULL, NULL, NULL, 0), DF_CLI_OK, "kill", "the resumed run");
    assert_same("full", "kill", STEPS, true);
}

/* "epoch" * 100 + "step" of dir/<out>/global_step_<step>/trainer_state.json: the data position. */
static int64_t data_position(const char *out, int step)
{
    char p[1024], rel[64];
    snprintf(rel, sizeof rel, "global_step_%d/trainer_state.json", step);
    at(p, sizeof p, out, rel);
    json_t *o = json_load_file(p, 0, NULL);
    if (!o)
        fail_msg("%s does not load", p);
    int64_t pos = json_integer_value(json_object_get(o, "epoch")) * 100 + json_integer_value(json_object_get(o, "step"));
    json_decref(o);
    return pos;
}

/* 2 ranks: mpiexec ends the job when one rank dies (rank 1 between micro-batches, rank 0 in the middle
   of a save); resumed on 2 ranks it ends with the straight 2-rank run's bytes; its step 2 resumed on
   1 rank ends where the 1-rank run's data ends. */
static void test_sft_kills_two_ranks(void **state)
{
    (void)state;
    if (!DF_MPIEXEC[0])
        skip(); /* built without MPI */
    expect(sft_np(2, "np2", NULL, "np2.counts", NULL, 0), DF_CLI_OK, "np2", "the straight 2-rank run");
    char p[1024], kill_at[64];
    at(p, sizeof p, "np2.counts", "");
    df_cli_counts c = df_cli_read_counts(p); /* rank 0's counts; the ranks step together */
    assert_int_equal(c.update, STEPS); /* 4 rows a rank: one micro-batch a step */
    expect(sft_np(2, "np2_kill", "update:4@1", NULL, NULL, 0), DF_CLI_KILLED, "np2_kill", "update:4@1");
    at(p, sizeof p, "np2_kill", "");
    assert_int_equal(df_cli_latest(p), 2);
    snprintf(kill_at, sizeof kill_at, "save:%lld@0", c.save / (STEPS / EVERY) / 2); /* in step 4's save */
    expect(sft_np(2, "np2_kill", kill_at, NULL, NULL, 0), DF_CLI_KILLED, "np2_kill", kill_at);
    assert_int_equal(df_cli_latest(p), 2);
    expect(sft_np(2, "np2_kill", NULL, NULL, NULL, 0), DF_CLI_OK, "np2_kill", "the resumed 2-rank run");
    assert_same("np2", "np2_kill", STEPS, true);
    char from[600];
    snprintf(from, sizeof from, "trainer.resume_from_path=%s/np2/global_step_2", dir);
    const char *ov[] = {"trainer.resume_mode=resume_path", from};
    expect(sft("np2_to1", NULL, NULL, ov, 2), DF_CLI_OK, "np2_to1", "a 2-rank checkpoint on 1 rank");
    if (!log_has("np2_to1", "written by 2 ranks, this run has 1: the same data order"))
        fail_msg("the resume on 1 rank does not say the checkpoint's ranks");
    assert_int_equal(data_position("np2_to1", STEPS), data_position("full", STEPS));
    assert_int_equal(data_position("np2", 2), data_position("full", 2));
}

/* SIGTERM after the first step: the step in progress finishes and is checkpointed (save_freq > 0),
   exit 143 (docs/checkpoints.md, "Stopping"); the same command resumes from it. */
static void test_sft_sigterm(void **state)
{
    (void)state;
    char yaml[512], outp[600], log[600], lines[600], p[1024];
    snprintf(yaml, sizeof yaml, "%s/sft.yaml", dir);
    snprintf(outp, sizeof outp, "trainer.default_local_dir=%s/sig", dir);
    snprintf(log, sizeof log, "%s/sig.log", dir);
    const char *argv[] = {"sft", yaml, outp, "trainer.total_training_steps=1000", "trainer.save_freq=1000", NULL};
    df_cli_run o = {.np = 1, .log = log};
    pid_t pid = df_cli_spawn(&o, argv);
    snprintf(lines, sizeof lines, "%s/sig/metrics.jsonl", dir);
    df_cli_wait_line(lines, pid);
    assert_int_equal(kill(pid, SIGTERM), 0);
    expect(df_cli_wait(&o, pid, "sft"), 143, "sig", "SIGTERM after the first step");
    assert_true(log_has("sig", "stopped on request after step"));
    at(p, sizeof p, "sig", "");
    int step = df_cli_latest(p);
    char rel[64];
    snprintf(rel, sizeof rel, "global_step_%d/train_state.safetensors", step);
    at(p, sizeof p, "sig", rel);
    assert_true(step >= 1 && step < 1000 && df_file_exists(p));
    at(p, sizeof p, "sig", "");
    df_cli_no_temporaries(p);
    /* resumed (to one step more than it had): it starts after the checkpoint */
    char more[64];
    snprintf(more, sizeof more, "trainer.total_training_steps=%d", step + 1);
    const char *ov[] = {more};
    expect(sft("sig", NULL, NULL, ov, 1), DF_CLI_OK, "sig", "the resumed run");
    char from[400];
    snprintf(from, sizeof from, "resuming from %s/sig/global_step_%d at step %d", dir, step, step + 1);
    assert_true(log_has("sig", from));
}

/* optim.lr_scheduler=wsd reaches the optimizer: 22 steps, warmup 2 (the yaml's), lr 0.01: the peak
   through step 21 (scheduler steps 2..19 stable, 20 the decay's start), then the cosine: step 22 is half
   way down (0.005; min_lr_ratio 0), as test_optim's hand-worked case. */
static void test_sft_wsd(void **state)
{
    (void)state;
    const char *ov[] = {"optim.lr_scheduler=wsd", "trainer.total_training_steps=22"};
    expect(sft("wsd", NULL, NULL, ov, 2), DF_CLI_OK, "wsd", "lr_scheduler=wsd");
    json_t *lines = df_test_metrics(dir, "wsd", true);
    assert_int_equal(json_array_size(lines), 22);
    const double want[][2] = {{1, 0.0}, {2, 0.005}, {3, 0.01}, {20, 0.01}, {21, 0.01}, {22, 0.005}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        double got = df_test_metric(json_array_get(lines, (size_t)want[i][0] - 1), "train/lr");
        if (!(fabs(got - want[i][1]) <= 1e-15)) /* a few double roundings of values ~0.01 */
            fail_msg("step %.0f: train/lr %.17g, expected %g", want[i][0], got, want[i][1]);
    }
    json_decref(lines);
}

static void test_sft_resume_modes(void **state)
{
    (void)state;
    char p[1024], from[1200];
    at(p, sizeof p, "full", "global_step_6");
    if (!df_dir_exists(p))
        expect(sft("full", NULL, NULL, NULL, 0), DF_CLI_OK, "full", "the straight run");
    /* resume_path: the straight run's step 4 continued elsewhere to the same bytes */
    snprintf(from, sizeof from, "trainer.resume_from_path=%s/full/global_step_4", dir);
    const char *path[] = {"trainer.resume_mode=resume_path", from};
    expect(sft("other", NULL, NULL, path, 2), DF_CLI_OK, "other", "resume_path");
    assert_same("full", "other", STEPS, false);
    char q[1024];
    at(p, sizeof p, "full", "");
    at(q, sizeof q, "other", "");
    df_cli_same_metrics(p, q, 5, 6); /* the resumed steps' lines only */
    /* an earlier distflow's checkpoint (trainer_state.json with rows_per_rank, not rows): the same */
    char cmd[2600], out[512], *text = NULL;
    snprintf(cmd, sizeof cmd, "mkdir -p %s/old && cp -r %s/full/global_step_4 %s/old/", dir, dir, dir);
    assert_int_equal(df_test_command(cmd, out, sizeof out), 0);
    at(p, sizeof p, "old", "global_step_4/trainer_state.json");
    assert_int_equal(df_read_file(p, &text, NULL), 0);
    char *k = strstr(text, "\"rows\"");
    assert_non_null(k);
    char *legacy = malloc(strlen(text) + 32);
    sprintf(legacy, "%.*s\"rows_per_rank\"%s", (int)(k - text), text, k + strlen("\"rows\""));
    assert_int_equal(df_write_file_atomic(p, legacy, strlen(legacy)), 0);
    free(text), free(legacy);
    snprintf(from, sizeof from, "trainer.resume_from_path=%s/old/global_step_4", dir);
    expect(sft("legacy", NULL, NULL, path, 2), DF_CLI_OK, "legacy", "an earlier distflow's checkpoint");
    assert_same("full", "legacy", STEPS, false);
    /* a resume_from_path without resume_mode=resume_path is refused before anything is written */
    const char *auto_from[] = {from};
    expect(sft("auto_from", NULL, NULL, auto_from, 1) != DF_CLI_OK, true, "auto_from", "resume_from_path with auto");
    assert_true(log_has("auto_from", "is read only with trainer.resume_mode=resume_path"));
    at(p, sizeof p, "auto_from", "");
    assert_false(df_dir_exists(p));
    /* disable: afresh beside the checkpoints (2 steps: its own step 2 replaces the one there) */
    const char *fresh[] = {"trainer.resume_mode=disable", "trainer.total_training_steps=2"};
    expect(sft("other", NULL, NULL, fresh, 2), DF_CLI_OK, "other", "resume_mode=disable");
    json_t *lines = df_test_metrics(dir, "other", true);
    assert_int_equal(json_array_size(lines), 2);
    json_decref(lines);
    assert_int_equal(df_cli_latest(q), 2);
    /* trainer.max_ckpt_to_keep=1: the newest checkpoint alone stays */
    const char *keep[] = {"trainer.max_ckpt_to_keep=1"};
    expect(sft("keep", NULL, NULL, keep, 1), DF_CLI_OK, "keep", "max_ckpt_to_keep=1");
    at(p, sizeof p, "keep", "global_step_4");
    assert_false(df_dir_exists(p));
    at(p, sizeof p, "keep", "global_step_6");
    assert_true(df_dir_exists(p));
    /* another dataset size: refused naming the file */
    char files[600];
    snprintf(files, sizeof files, "data.train_files=[%s/fewer.jsonl]", dir);
    const char *fewer[] = {files};
    expect(sft("full", NULL, NULL, fewer, 1), 1, "full", "a smaller dataset");
    at(p, sizeof p, "full.log", "");
    char *log = df_cli_log(p);
    if (!strstr(log, "global_step_6/trainer_state.json: written for 24 training rows"))
        fail_msg("the refusal does not name the file and the sizes:\n%s", log);
    free(log);
}

/* A run that fails or dies before its first step leaves no output directory behind. */
static void test_sft_nothing_left(void **state)
{
    (void)state;
    const char *bad[] = {"trainer.checkpoint.save_contents=[model]"};
    expect(sft("refused", NULL, NULL, bad, 1), 1, "refused", "save_contents without optimizer");
    char p[1024];
    at(p, sizeof p, "refused.log", "");
    char *log = df_cli_log(p);
    assert_non_null(strstr(log, "trainer.checkpoint.save_contents"));
    free(log);
    at(p, sizeof p, "refused", "");
    assert_false(df_dir_exists(p));
    expect(sft("early", "update:1", NULL, NULL, 0), DF_CLI_KILLED, "early", "update:1");
    at(p, sizeof p, "early", "");
    assert_false(df_dir_exists(p));
}

/* The global_step_2 model of dir/<out>: its bytes and size. */
static char *step2_model(const char *out, size_t *len)
{
    char p[1024];
    at(p, sizeof p, out, "global_step_2/model.safetensors");
    char *bytes = NULL;
    assert_int_equal(df_read_file(p, &bytes, len), 0);
    return bytes;
}

static bool log_has(const char *out, const char *text)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s.log", dir, out);
    char *log = df_cli_log(p);
    bool found = strstr(log, text) != NULL;
    free(log);
    return found;
}

static void test_sft_precision(void **state)
{
    (void)state;
    const char *f32[] = {"trainer.total_training_steps=2",
                         "model.fsdp_config.mixed_precision.param_dtype=fp32"};
    expect(sft("prec_f32", NULL, NULL, f32, 2), DF_CLI_OK, "prec_f32", "param_dtype=fp32");
    expect(sft("prec_def", NULL, NULL, f32, 1), DF_CLI_OK, "prec_def", "the default param_dtype");
    assert_true(log_has("prec_f32", "matmuls in float32"));
    size_t na, nb;
    char *a = step2_model("prec_f32", &na), *b = step2_model("prec_def", &nb);
    bool same = na == nb && !memcmp(a, b, na);
    if (df_model_bf16_available() == DF_OK) {
        assert_true(log_has("prec_def", "matmuls in bf16 with float32 accumulation"));
        assert_false(same);
    } else {
        assert_true(log_has("prec_def", "notice: model.fsdp_config.mixed_precision.param_dtype=bf16"));
        assert_true(same);
    }
    free(a);
    free(b);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/dev/shm/df_sft_XXXXXX");
    if (!mkdtemp(dir)) {
        snprintf(dir, sizeof dir, "/tmp/df_sft_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
    }
    df_test_digits_inputs(dir, "train.jsonl", 24, "openai/gsm8k", true);
    df_test_digits_inputs(dir, "fewer.jsonl", 16, "openai/gsm8k", false);
    char yaml[2048], p[512];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], prompt_key: prompt,\n"
             "       response_key: reward_model.ground_truth, train_batch_size: 8, micro_batch_size_per_gpu: 4,\n"
             "       max_length: 128}\n"
             "model: {partial_pretrain: %s/model}\n"
             "optim: {lr: 0.01, lr_warmup_steps: 2, lr_scheduler: cosine}\n"
             "trainer: {total_epochs: 2, save_freq: %d, seed: 3, logger: [console]}\n",
             dir, dir, EVERY);
    snprintf(p, sizeof p, "%s/sft.yaml", dir);
    return df_write_file_atomic(p, yaml, strlen(yaml)) ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    return df_test_remove_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sft_kills),
        cmocka_unit_test(test_sft_resume_modes),
        cmocka_unit_test(test_sft_kills_two_ranks),
        cmocka_unit_test(test_sft_sigterm),
        cmocka_unit_test(test_sft_wsd),
        cmocka_unit_test(test_sft_nothing_left),
        cmocka_unit_test(test_sft_precision),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
