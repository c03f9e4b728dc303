/*
 * test_guards.c — the non-finite guards (docs/numerics.md): NaN / Inf weights refused when a model
 * or a training state is loaded (naming the file, the tensor and the element), a NaN / Inf loss or
 * gradient norm failing the update (or skipped and counted with trainer.skip_nonfinite_steps), the
 * fit loop stopping without a checkpoint of that step, and no checkpoint written from non-finite
 * weights. The training runs poison the first policy-loss call of rank 0 only, so under mpiexec
 * every rank must still take the same decision.
 * mpi-test: np 2
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "testutil.h"

#include "distflow/algo.h"
#include "distflow/comm.h"
#include "distflow/reward.h"
#include "engine/hf_dir.h"
#include "engine/train_core.h"
#include "util/finite.h"
#include "workers/dag/checkpoint.h"
#include "workers/worker_internal.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static df_comm *world;
static int R;
static char dir[256];

static bool exists_at(const char *rel)
{
    char p[1024];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    return stat(p, &st) == 0;
}

/* ---- df_first_nonfinite ---- */

static void test_first_nonfinite(void **state)
{
    (void)state;
    int64_t n = 3 * 65536 + 17; /* several OpenMP blocks and a short last one */
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(i % 7) - 3.0f;
    x[1] = -0.0f, x[2] = FLT_MAX, x[3] = -FLT_MAX, x[4] = FLT_MIN / 4; /* finite extremes */
    assert_int_equal(df_first_nonfinite(x, n), -1);
    assert_int_equal(df_first_nonfinite(x, 0), -1);
    const int64_t at[] = {0, 65535, 65536, 2 * 65536 + 3, n - 1};
    const float bad[] = {NAN, INFINITY, -INFINITY, -NAN, NAN};
    for (size_t k = 0; k < sizeof at / sizeof *at; k++) {
        float keep = x[at[k]];
        x[at[k]] = bad[k];
        assert_int_equal(df_first_nonfinite(x, n), at[k]);
        x[at[k]] = keep;
    }
    x[n - 2] = INFINITY, x[70000] = NAN; /* two: the first wins whatever thread finds the later one */
    assert_int_equal(df_first_nonfinite(x, n), 70000);
    x[100] = -INFINITY; /* and one in the block before, which the same thread scans first */
    assert_int_equal(df_first_nonfinite(x, n), 100);
    assert_int_equal(df_first_nonfinite(x + 1, 5), -1); /* unaligned */
    free(x);
}

/* ---- loading ---- */

/* dir/<sub> saved from m in dtype, then loaded: rc, and the message must hold each of want[]. */
static void expect_load(const df_model *m, df_dtype dtype, const char *sub, int code, const char *const *want,
                        int n_want)
{
    char d[512];
    snprintf(d, sizeof d, "%s/%s", dir, sub);
    assert_int_equal(df_hf_dir_save(m, dtype, NULL, NULL, d), 0);
    df_model *r = NULL;
    int rc = df_model_load(d, &r);
    if (rc != code)
        fail_msg("loading %s: rc %d, expected %d (%s)", d, rc, code, df_last_error());
    for (int i = 0; i < n_want; i++)
        assert_last_error_mentions(want[i]);
    df_model_free(r);
}

static void test_load_refuses_nonfinite(void **state)
{
    (void)state;
    if (R != 0)
        return;
    df_model *m = df_test_micro_model(3);
    expect_load(m, DF_DTYPE_F32, "ok", DF_OK, NULL, 0);
    const df_param_desc *up = df_model_find_tensor(m, "model.layers.1.mlp.up_proj.weight");
    assert_non_null(up);
    char path[600];
    snprintf(path, sizeof path, "%s/nan/model.safetensors", dir);
    m->params[up->offset + 5] = NAN;
    const char *nan[] = {path, "\"model.layers.1.mlp.up_proj.weight\"", "non-finite", "element 5 of"};
    expect_load(m, DF_DTYPE_F32, "nan", DF_EINVAL, nan, 4);
    m->params[up->offset + 5] = 0.5f;
    /* bf16 keeps an Inf; 1e6 is finite in float32 but overflows float16 to Inf */
    const df_param_desc *norm = df_model_find_tensor(m, "model.norm.weight");
    m->params[norm->offset + 15] = -INFINITY;
    snprintf(path, sizeof path, "%s/inf/model.safetensors", dir);
    const char *inf[] = {path, "\"model.norm.weight\"", "element 15 of 16"};
    expect_load(m, DF_DTYPE_BF16, "inf", DF_EINVAL, inf, 3);
    m->params[norm->offset + 15] = 1e6f;
    expect_load(m, DF_DTYPE_F32, "big32", DF_OK, NULL, 0);
    snprintf(path, sizeof path, "%s/big16/model.safetensors", dir);
    const char *f16[] = {path, "\"model.norm.weight\"", "(inf) at element 15"};
    expect_load(m, DF_DTYPE_F16, "big16", DF_EINVAL, f16, 3);
    df_model_free(m);
}

static void test_train_state_refuses_nonfinite(void **state)
{
    (void)state;
    if (R != 0)
        return;
    df_core_optim o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .adam_eps = 1e-8, .grad_clip = 1.0};
    df_train_core c;
    assert_int_equal(df_train_core_init(&c, df_test_micro_model(4), &o, true, 0, "actor"), 0);
    char path[600];
    snprintf(path, sizeof path, "%s/train_state.safetensors", dir);
    assert_int_equal(df_train_core_save_state(&c, path), 0);
    assert_int_equal(df_train_core_load_state(&c, path), 0);
    c.opt->v[123] = INFINITY;
    assert_int_equal(df_train_core_save_state(&c, path), 0);
    assert_error_mentions(df_train_core_load_state(&c, path), DF_EINVAL, path);
    assert_last_error_mentions("exp_avg_sq holds a non-finite value (inf) at element 123");
    c.opt->v[123] = 0;
    c.model->params[9] = NAN;
    assert_int_equal(df_train_core_save_state(&c, path), 0);
    assert_error_mentions(df_train_core_load_state(&c, path), DF_EINVAL, "params holds a non-finite value");
    df_train_core_release(&c);
}

/* ---- the optimizer step ---- */

static void test_optimizer_step_guard(void **state)
{
    (void)state;
    if (R != 0)
        return;
    df_core_optim o = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .adam_eps = 1e-8, .grad_clip = 1.0};
    df_train_core c;
    assert_int_equal(df_train_core_init(&c, df_test_micro_model(5), &o, true, 0, "actor"), 0);
    int64_t n = c.model->n_params;
    float *before = malloc((size_t)n * sizeof *before);
    memcpy(before, c.model->params, (size_t)n * sizeof *before);
    df_metrics *m = df_metrics_new();
    for (int64_t i = 0; i < n; i++)
        c.grads[i] = 0.01f;
    c.grads[7] = NAN;
    assert_error_mentions(df_train_core_optimizer_step(&c, 1e-3, m, "actor", "mini-batch 2 of 3"), DF_EINVAL,
                          "actor: actor/grad_norm = nan is not finite (mini-batch 2 of 3)");
    assert_last_error_mentions("trainer.skip_nonfinite_steps=true");
    assert_memory_equal(before, c.model->params, (size_t)n * sizeof *before);
    assert_int_equal(c.opt->step, 0);
    assert_false(df_metrics_has(m, "actor/nonfinite_steps"));
    /* verl's skipping, asked for: nothing changes but the count */
    c.o.skip_nonfinite = true;
    assert_int_equal(df_train_core_optimizer_step(&c, 1e-3, m, "actor", NULL), 0);
    c.grads[7] = INFINITY;
    assert_int_equal(df_train_core_optimizer_step(&c, 1e-3, m, "actor", NULL), 0);
    assert_memory_equal(before, c.model->params, (size_t)n * sizeof *before);
    assert_int_equal(c.opt->step, 0);
    assert_near(df_metrics_get(m, "actor/nonfinite_steps", 0), 2, 0);
    assert_false(df_metrics_has(m, "actor/grad_norm"));
    c.grads[7] = 0.01f; /* a finite one goes through */
    assert_int_equal(df_train_core_optimizer_step(&c, 1e-3, m, "actor", NULL), 0);
    assert_int_equal(c.opt->step, 1);
    assert_true(df_metrics_has(m, "actor/grad_norm"));
    assert_near(df_metrics_get(m, "actor/nonfinite_steps", 0), 2, 0);
    assert_true(memcmp(before, c.model->params, (size_t)n * sizeof *before) != 0);
    df_metrics_free(m);
    free(before);
    df_train_core_release(&c);
}

/* ---- the fit loop ---- */

static int poison; /* policy-loss calls of rank 0 still to poison */

/* vanilla, with a NaN loss and gradient while `poison` lasts (rank 0 only) */
static int nan_loss(const df_policy_loss_input *in, df_policy_loss_output *out)
{
    int rc = df_policy_loss_vanilla(in, out);
    if (!rc && R == 0 && poison > 0) {
        poison--;
        out->loss = NAN;
        if (in->offsets[in->n] > 0)
            out->grad[0] = NAN;
    }
    return rc;
}

static df_config *job(const char *out, const char *const *ov, int n)
{
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 8,\n"
             "       max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.01}, ppo_mini_batch_size: 4, ppo_micro_batch_size_per_gpu: 4,\n"
             "          policy_loss: {loss_mode: test_nan}}\n"
             "  rollout: {n: 2, log_prob_micro_batch_size_per_gpu: 8}\n"
             "algorithm: {adv_estimator: grpo}\n"
             "trainer: {total_training_steps: 2, save_freq: 1, logger: [], default_local_dir: %s/%s}\n",
             dir, dir, dir, out);
    return df_test_config(yaml, "guards.yaml", ov, n);
}

static void test_nonfinite_loss_stops_the_run(void **state)
{
    (void)state;
    poison = 1;
    int rc = df_test_run(world, job("stop", NULL, 0));
    if (rc != DF_EINVAL)
        fail_msg("rc %d: %s", rc, df_last_error());
    assert_last_error_mentions("step 1");
    assert_last_error_mentions("actor: actor/pg_loss = nan is not finite (mini-batch 1 of 2, epoch 1 of 1, ");
    /* the rank that saw it names its micro-batch; the others say it came from elsewhere */
    assert_last_error_mentions(R == 0 ? "micro-batch 1 of " : "from another rank");
    assert_int_equal(df_comm_barrier(world), 0);
    assert_false(exists_at("stop/global_step_1"));
    assert_false(exists_at("stop/.global_step_1.tmp"));
    assert_false(exists_at("stop/latest_checkpointed_iteration.txt"));
    /* no line was written: no metrics.jsonl, not even the output directory (docs/checkpoints.md) */
    assert_false(exists_at("stop/metrics.jsonl"));
    assert_false(exists_at("stop"));
}

static void test_nonfinite_skipped_when_asked(void **state)
{
    (void)state;
    poison = 1;
    const char *skip[] = {"trainer.skip_nonfinite_steps=true"};
    if (df_test_run(world, job("skip", skip, 1)))
        fail_msg("%s", df_last_error());
    assert_int_equal(df_comm_barrier(world), 0);
    if (R != 0)
        return;
    json_t *lines = df_test_metrics(dir, "skip", true);
    assert_int_equal(json_array_size(lines), 2);
    json_t *one = json_array_get(lines, 0), *two = json_array_get(lines, 1);
    assert_near(json_number_value(json_object_get(one, "actor/nonfinite_steps")), 1, 0);
    assert_true(json_is_number(json_object_get(one, "actor/grad_norm"))); /* the second mini-batch's */
    assert_null(json_object_get(two, "actor/nonfinite_steps"));
    json_decref(lines);
    assert_true(exists_at("skip/global_step_2/actor/model.safetensors"));
}

static void test_huge_lr_stops_the_run(void **state)
{
    (void)state;
    poison = 0;
    const char *lr[] = {"actor_rollout_ref.actor.optim.lr=1e39"};
    int rc = df_test_run(world, job("lr", lr, 1));
    if (rc != DF_EINVAL)
        fail_msg("rc %d: %s", rc, df_last_error());
    assert_last_error_mentions("step 1");
    assert_last_error_mentions("is not finite");
    assert_int_equal(df_comm_barrier(world), 0);
    assert_false(exists_at("lr/global_step_1"));
    assert_false(exists_at("lr/latest_checkpointed_iteration.txt"));
}

static void test_no_checkpoint_of_nonfinite_weights(void **state)
{
    (void)state;
    poison = 0;
    df_config *cfg = job("ckpt", NULL, 0);
    df_dag_worker *w = NULL;
    if (df_dag_worker_create(cfg, world, &w))
        fail_msg("%s", df_last_error());
    df_model *m = df_actor_model(w->actor.model);
    const df_param_desc *d = df_model_find_tensor(m, "model.layers.0.self_attn.o_proj.weight");
    m->params[d->offset + 3] = NAN;
    w->step = 1;
    assert_error_mentions(df_worker_checkpoint_save(w), DF_EINVAL, "saving checkpoint global_step_1");
    assert_last_error_mentions("the actor's weights are not finite (tensor \"model.layers.0.self_attn.o_proj.weight\" "
                               "element 3 is nan)");
    m->params[d->offset + 3] = 0;
    assert_int_equal(df_comm_barrier(world), 0);
    assert_false(exists_at("ckpt/global_step_1"));
    assert_false(exists_at("ckpt/.global_step_1.tmp"));
    assert_int_equal(df_worker_checkpoint_save(w), 0); /* finite again: saved */
    assert_true(exists_at("ckpt/global_step_1/trainer_state.json"));
    df_dag_worker_free(w);
    df_config_free(cfg);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share) ||
        df_policy_loss_register("test_nan", nan_loss))
        return -1;
    R = df_comm_rank(world);
    if (!df_test_size_ok(df_comm_size(world)))
        return -1;
    return df_test_shared_inputs(world, "df_guards", 16, "test/digits", dir, sizeof dir);
}

static int teardown(void **state)
{
    (void)state;
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_nonfinite),
        cmocka_unit_test(test_load_refuses_nonfinite),
        cmocka_unit_test(test_train_state_refuses_nonfinite),
        cmocka_unit_test(test_optimizer_step_guard),
        cmocka_unit_test(test_nonfinite_loss_stops_the_run),
        cmocka_unit_test(test_nonfinite_skipped_when_asked),
        cmocka_unit_test(test_huge_lr_stops_the_run),
        cmocka_unit_test(test_no_checkpoint_of_nonfinite_weights),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
