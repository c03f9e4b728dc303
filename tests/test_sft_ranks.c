/*
 * test_sft_ranks.c — `distflow sft` on several ranks (df_sft_run over the world) follows the
 * one-rank run of the same job.
 *
 * mpi-test: np 2 3
 * (as a plain ctest it runs with one rank and checks the run against itself.)
 *
 * Rank 0 first trains alone (a one-rank communicator split from the world) for the reference;
 * then every rank trains the same job together, each on its share of each batch. Every step's
 * batch is the whole training set (data.train_batch_size = its rows), so both runs see the same
 * global batch whatever the order. What must match, and how closely, follows from rounding
 * (tests/testtrain.h): step 1's loss is the token mean of -log p at the same initial weights, each
 * log-prob <= F apart in the two runs (tb_forward_bound: the ranks' micro-batches pack other rows
 * together), so the losses are <= F apart; its gradient norm by tt_e2e_grad_bound; the weights
 * after its Adam step parameter by parameter (tt_adam_first_step_check); the learning rate exactly.
 * With lr 0 the weights never move, so every step's loss and the validation loss (each rank its
 * shard of data.val_files, summed) are <= F apart. A wrong shard, a loss normalised per rank, a
 * gradient or validation sum left out all move these by far more than their bounds. Also: a rank
 * whose validation shard holds a malformed row fails every rank and leaves no output directory; a
 * resume continues an N-rank run to the straight run's bytes; resumed on one rank, its step 2 loss
 * is the N-rank step 2's within F (the same weights, from the checkpoint, and the same rows).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testmpi.h"
#include "testtrain.h"

#include "distflow/worker.h"
#include "util/fsutil.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static char dir[256];

#define ROWS 24        /* training rows: one global batch */
#define VAL_ROWS 12
#define MICRO 4        /* data.micro_batch_size_per_gpu */
#define POS 128        /* data.max_length: no sequence is longer */
#define LR 0.01
#define ADAM_EPS 1e-8  /* the SFT trainer's (src/workers/sft/sft_trainer.c) */
#define GRAD_CLIP 1.0  /* optim.clip_grad's default */

/* `distflow sft` as o says into dir/<out> with overrides; returns its status, *stopped the flag. */
static int sft_opts(const df_sft_opts *o, const char *out, const char *const *ov, int n, int *stopped)
{
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [%s/val.jsonl], prompt_key: prompt,\n"
             "       response_key: reward_model.ground_truth, train_batch_size: %d,\n"
             "       micro_batch_size_per_gpu: %d, max_length: %d}\n"
             "model: {partial_pretrain: %s/model, fsdp_config: {mixed_precision: {param_dtype: fp32}}}\n"
             "optim: {lr: %g, weight_decay: 0.0, lr_warmup_steps_ratio: 0.0}\n"
             "trainer: {total_training_steps: 2, save_freq: 1, test_freq: 1, seed: 5, logger: [],\n"
             "          default_local_dir: %s/%s}\n",
             dir, dir, ROWS, MICRO, POS, dir, LR, dir, out);
    df_config *cfg = NULL;
    int rc = df_config_load_text(df_config_schema_sft(), yaml, "sft.yaml", ov, n, &cfg);
    if (!rc)
        rc = df_sft_run(cfg, o, stopped);
    df_config_free(cfg);
    return rc;
}

/* `distflow sft` on comm into dir/<out> with overrides; returns its status. */
static int sft(df_comm *comm, const char *out, const char *const *ov, int n)
{
    return sft_opts(&(df_sft_opts){.comm = comm}, out, ov, n, NULL);
}

/* The reference on rank 0 alone, then the same job over the world into dir/<out>. */
static void sft_both(const char *ref, const char *out, const char *const *ov, int n)
{
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(W, R, 0, &self), 0);
    int rc = R == 0 ? sft(self, ref, ov, n) : DF_OK;
    df_comm_free(self);
    if (rc)
        print_error("the one-rank run: %s\n", df_last_error());
    if (df_test_all_max(rc != DF_OK)) /* all ranks leave together */
        fail_msg("the one-rank run failed");
    if (df_test_all_max(sft(W, out, ov, n)))
        fail_msg("rank %d: %s", R, df_last_error());
}

/* |a.key - b.key| <= bound plus the double rounding of a sum of a few dozen values. */
static void expect_within(json_t *a, json_t *b, const char *key, double bound, int step)
{
    double u = df_test_metric(a, key), v = df_test_metric(b, key);
    bound += df_tol_gamma(64, DF_U64) * fabs(u);
    if (!(fabs(u - v) <= bound))
        fail_msg("step %d: %s = %.9g on one rank, %.9g on %d (bound %.3g)", step, key, u, v, N, bound);
}

static df_model *load_model(const char *rel)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    df_model *m = NULL;
    assert_int_equal(df_model_load(p, &m), 0);
    return m;
}

/* trainer_state.json's world_size of dir/<out>/global_step_<step>. */
static int64_t world_size(const char *out, int step)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s/global_step_%d/trainer_state.json", dir, out, step);
    json_t *o = json_load_file(p, 0, NULL);
    assert_non_null(o);
    int64_t w = (int64_t)json_integer_value(json_object_get(o, "world_size"));
    json_decref(o);
    return w;
}

static void test_first_step(void **state)
{
    (void)state;
    sft_both("ref", "dp", NULL, 0);
    if (R != 0)
        return;
    json_t *ref = df_test_metrics(dir, "ref", true), *got = df_test_metrics(dir, "dp", true);
    assert_int_equal(json_array_size(ref), 2);
    assert_int_equal(json_array_size(got), 2);
    df_model *m0 = load_model("model");
    const double F = tb_forward_bound(m0, POS, 1.0f);
    json_t *a = json_array_get(ref, 0), *b = json_array_get(got, 0);
    expect_within(a, b, "train/loss", F, 1);
    double gn = df_test_metric(a, "train/grad_norm");
    /* T <= ROWS x POS trained tokens (the bound grows with sqrt(T): an upper bound is safe) */
    double dg = tt_e2e_grad_bound(m0, POS, MICRO * POS, ROWS * POS, N, gn, 1.0f);
    expect_within(a, b, "train/grad_norm", dg, 1);
    for (int s = 0; s < 2; s++)
        expect_within(json_array_get(ref, s), json_array_get(got, s), "train/lr", 0, s + 1);
    json_decref(ref);
    json_decref(got);

    df_model *w0 = load_model("ref/global_step_1"), *w1 = load_model("dp/global_step_1");
    int64_t free_params;
    double worst = tt_adam_first_step_check(m0, w0, w1, LR, ADAM_EPS, GRAD_CLIP, gn, dg, &free_params);
    double moved = df_test_max_param_diff(m0, w1);
    if (!(moved > 0.5 * LR)) /* the step itself must be far above what the check allows */
        fail_msg("the first step moved the weights by %.3g only", moved);
    print_message("[ %d ranks ] step-1 weights: max observed / bound %.3g (%lld of %lld parameters free), "
                  "max |w_1rank - w_dist| %.3g, F %.3g\n",
                  N, worst, (long long)free_params, (long long)m0->n_params, df_test_max_param_diff(w0, w1), F);
    assert_int_equal(world_size("ref", 2), 1);
    assert_int_equal(world_size("dp", 2), N);
    df_model_free(w0);
    df_model_free(w1);
    df_model_free(m0);
}

/* Rows j % N == 0 of dir/val.jsonl (rank 0's shard) into dir/val_shard.jsonl. */
static void write_val_shard(void)
{
    char p[512], *text = NULL, *out = calloc(1, 1 << 16);
    snprintf(p, sizeof p, "%s/val.jsonl", dir);
    assert_int_equal(df_read_file(p, &text, NULL), 0);
    int j = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n"), j++)
        if (j % N == 0)
            strcat(strcat(out, l), "\n");
    snprintf(p, sizeof p, "%s/val_shard.jsonl", dir);
    assert_int_equal(df_write_file_atomic(p, out, strlen(out)), 0);
    free(text);
    free(out);
}

/* lr 0: the weights stay the initial ones, so each step's loss and val/loss compare within F. The
   teeth: rank 0's validation shard alone gives a val/loss far outside F. */
static void test_frozen_losses(void **state)
{
    (void)state;
    const char *ov[] = {"optim.lr=0", NULL};
    sft_both("ref0", "dp0", ov, 1);
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(W, R, 0, &self), 0);
    char shard[600];
    snprintf(shard, sizeof shard, "data.val_files=[%s/val_shard.jsonl]", dir);
    ov[1] = shard;
    if (R == 0 && N > 1) {
        write_val_shard();
        assert_int_equal(sft(self, "ref0_shard", ov, 2), 0);
    }
    df_comm_free(self);
    if (R != 0)
        return;
    json_t *ref = df_test_metrics(dir, "ref0", true), *got = df_test_metrics(dir, "dp0", true);
    df_model *m0 = load_model("model");
    const double F = tb_forward_bound(m0, POS, 1.0f);
    for (int s = 0; s < 2; s++) {
        json_t *a = json_array_get(ref, s), *b = json_array_get(got, s);
        expect_within(a, b, "train/loss", F, s + 1);
        expect_within(a, b, "val/loss", F, s + 1);
    }
    if (N > 1) {
        json_t *part = df_test_metrics(dir, "ref0_shard", true);
        double whole = df_test_metric(json_array_get(ref, 0), "val/loss");
        double alone = df_test_metric(json_array_get(part, 0), "val/loss");
        print_message("val/loss %.6f, rank 0's shard alone %.6f, F %.3g\n", whole, alone, F);
        assert_true(fabs(whole - alone) > 10 * F);
        json_decref(part);
    }
    json_decref(ref);
    json_decref(got);
    df_model_free(m0);
}

/* A malformed row on rank 1's validation shard (row 1 of the file; rank 0's at np 1) fails every rank;
   nothing is written. (The training rows are read whole by every rank, the validation rows sharded.) */
static void test_one_rank_fails(void **state)
{
    (void)state;
    char good[512], bad[512], *text = NULL, p[512];
    snprintf(good, sizeof good, "%s/train.jsonl", dir);
    snprintf(bad, sizeof bad, "%s/bad.jsonl", dir);
    if (R == 0) {
        assert_int_equal(df_read_file(good, &text, NULL), 0);
        char *second = strchr(text, '\n') + 1;
        second[0] = '#'; /* row 1: not JSON any more */
        assert_int_equal(df_write_file_atomic(bad, text, strlen(text)), 0);
        free(text);
    }
    assert_int_equal(df_comm_barrier(W), 0);
    char file[600];
    snprintf(file, sizeof file, "data.val_files=[%s]", bad);
    const char *ov[] = {file};
    int rc = sft(W, "failed", ov, 1);
    const char *msg = df_last_error();
    bool holder = R == (N > 1 ? 1 : 0);
    bool wrong = rc == DF_OK || (holder ? !strstr(msg, "bad.jsonl:2") : rc != DF_EINTERNAL);
    if (wrong) /* holder: its own error, naming the row; the others: DF_EINTERNAL (another rank failed) */
        print_error("rank %d: status %d, error: %s\n", R, rc, msg);
    if (df_test_all_max(wrong)) /* every rank fails together, none left waiting in a collective */
        fail_msg("a rank's status or message is not the expected one");
    snprintf(p, sizeof p, "%s/failed", dir);
    assert_false(df_dir_exists(p));
}

/* test_first_step's N-rank run resumed from its step 1 to the same bytes; on one rank, to the N-rank
   run's step 2 loss within F. */
static void test_resume(void **state)
{
    (void)state;
    char from[600], p[600], q[600];
    snprintf(from, sizeof from, "trainer.resume_from_path=%s/dp/global_step_1", dir);
    const char *ov[] = {"trainer.resume_mode=resume_path", from};
    if (df_test_all_max(sft(W, "resumed", ov, 2)))
        fail_msg("rank %d: %s", R, df_last_error());
    int differ = 0; /* rank 0 compares; every rank learns the verdict */
    const char *files[] = {"model.safetensors", "train_state.safetensors", "trainer_state.json"};
    for (int i = 0; R == 0 && i < 3; i++) {
        snprintf(p, sizeof p, "%s/dp/global_step_2/%s", dir, files[i]);
        snprintf(q, sizeof q, "%s/resumed/global_step_2/%s", dir, files[i]);
        char *x = NULL, *y = NULL;
        size_t nx = 0, ny = 0;
        if (df_read_file(p, &x, &nx) || df_read_file(q, &y, &ny) || nx != ny || memcmp(x, y, nx))
            differ = i + 1;
        free(x);
        free(y);
    }
    if (df_test_all_max(differ))
        fail_msg("%s differs after the resume", files[(int)df_test_all_max(differ) - 1]);
    if (N == 1)
        return;
    df_comm *self = NULL;
    assert_int_equal(df_comm_split(W, R, 0, &self), 0);
    int rc = R == 0 ? sft(self, "other_world", ov, 2) : DF_OK;
    if (rc)
        print_error("the one-rank resume: %s\n", df_last_error());
    df_comm_free(self);
    if (df_test_all_max(rc != DF_OK))
        fail_msg("the %d-rank checkpoint does not resume on one rank", N);
    if (R != 0)
        return;
    json_t *dp = df_test_metrics(dir, "dp", true), *one = df_test_metrics(dir, "other_world", false);
    assert_int_equal(json_array_size(one), 1); /* step 2 only */
    df_model *m0 = load_model("model");
    const double F = tb_forward_bound(m0, POS, 1.0f);
    expect_within(json_array_get(dp, 1), json_array_get(one, 0), "train/loss", F, 2);
    expect_within(json_array_get(dp, 1), json_array_get(one, 0), "train/lr", 0, 2);
    assert_int_equal(world_size("other_world", 2), 1);
    json_decref(dp);
    json_decref(one);
    df_model_free(m0);
}

/* A stop flag raised on the last rank only, before the first step: every rank stops there (the
   flag is agreed), nothing is trained or written, and each reports the signal. */
static void test_stop_agreed(void **state)
{
    (void)state;
    static volatile sig_atomic_t flag;
    flag = R == N - 1 ? SIGTERM : 0;
    int stopped = -1;
    assert_int_equal(sft_opts(&(df_sft_opts){.comm = W, .stop = &flag}, "stopped", NULL, 0, &stopped), DF_ESTOPPED);
    assert_int_equal(stopped, SIGTERM);
    assert_int_equal(df_comm_barrier(W), 0);
    char p[600];
    snprintf(p, sizeof p, "%s/stopped", dir);
    assert_false(df_dir_exists(p));
}

static int setup(void **state)
{
    if (df_test_world_setup(state))
        return -1;
    if (R == 0) {
        snprintf(dir, sizeof dir, "/tmp/df_sft_ranks_XXXXXX");
        if (!mkdtemp(dir))
            return -1;
        df_test_digits_inputs(dir, "train.jsonl", ROWS, "test/digits", true);
        /* validation: the prompts after the training ones; every other answer four times over, so
           that the rows' losses differ widely and no shard's mean is the whole's */
        char *text = calloc(1, 1 << 14), line[512], p[512];
        for (int i = ROWS; i < ROWS + VAL_ROWS; i++) {
            int a = 3 * i + 1;
            char gt[64];
            snprintf(gt, sizeof gt, i % 2 ? "%d%d%d%d" : "%d", a, a, a, a);
            snprintf(line, sizeof line,
                     "{\"data_source\": \"test/digits\", \"prompt\": [{\"role\": \"user\", \"content\": "
                     "\"Add %d and %d. What do you get?\"}], \"reward_model\": {\"ground_truth\": \"%s\"}}\n",
                     i, 2 * i + 1, gt);
            strcat(text, line);
        }
        snprintf(p, sizeof p, "%s/val.jsonl", dir);
        int rc = df_write_file_atomic(p, text, strlen(text));
        free(text);
        if (rc)
            return -1;
    }
    return df_comm_broadcast(W, dir, sizeof dir, 0) ? -1 : 0;
}

static int teardown(void **state)
{
    df_comm_barrier(W);
    if (R == 0)
        df_test_remove_tree(dir);
    return df_test_world_teardown(state);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_step),
        cmocka_unit_test(test_frozen_losses),
        cmocka_unit_test(test_one_rank_fails),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_stop_agreed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
