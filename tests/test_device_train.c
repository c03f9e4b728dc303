/*
 * trainer.device on a backend whose memory is not the host's, end to end: `distflow train`
 * in-process with trainer.device=cuda, where this test registers the emulated device of
 * tests/emu_backend.h under the name "cuda" (the CPU's operators over memory the host cannot
 * touch between calls; the real CUDA backend is not linked into the tests). Two GRPO steps
 * with a KL loss and a reference, and two PPO steps with a critic: the rollout, old /
 * reference log-probs, values and the actor's and critic's updates all run there, and every
 * metric but the timings is the CPU run's, to the digit
 * metrics.jsonl prints (the same operators on the same inputs give the same bits; the rollout
 * samples with top-k, drawn on the device by its `sample` entry). A run with the rollout left on
 * the host would not read the device's weights and still pass, so the emulated device's
 * counters must show the rollout's attention over its KV cache. The device run asks for verl's
 * bf16 defaults, which a device without bf16 matmuls (the emulated one without emu_bf16) runs
 * in float32 after a notice: a silent bf16 there would change the metrics; with them, the CPU's
 * bf16 run's metrics. Under mpiexec each rank
 * has its own emulated device, the gradient all-reduced through the seam (its allreduce_sum) and
 * the Data Coordinator's payloads moved through it (its alltoallv):
 * mpi-test: np 2
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "emu_backend.h"
#include "testutil.h"

#include "distflow/comm.h"
#include "distflow/reward.h"

#include <math.h>

static df_comm *world;
static char dir[256];
static emu_dev dev;

static bool rank0(void) { return df_comm_rank(world) == 0; }

static int open_emu(df_backend *out)
{
    *out = emu_open(&dev);
    return DF_OK;
}

/* bf16_asked: the device run leaves verl's bf16 defaults (param_dtype, rollout.dtype), which a
 * device without bf16 matmuls turns into float32 with a notice: the CPU's float32 run. */
static df_config *config_of(const char *device, const char *out, bool ppo, const char *const *ov,
                            int n_ov);

/* A run that must succeed (config_of's arguments). */
static void train_ov(const char *device, const char *out, bool ppo, const char *const *ov, int n_ov)
{
    df_test_run_ok(df_test_run(world, config_of(device, out, ppo, ov, n_ov)), out);
}

static void train(const char *device, const char *out, bool bf16_asked, bool ppo)
{
    const char *const bf16[] = {"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
                                "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16",
                                "actor_rollout_ref.rollout.dtype=bfloat16",
                                "critic.model.fsdp_config.mixed_precision.param_dtype=bf16"};
    train_ov(device, out, ppo, bf16, bf16_asked ? 3 + ppo : 0);
}

/* The job: 2 GRPO (or PPO with `ppo`) steps on `device` into dir/out, with n_ov overrides. */
static df_config *config_of(const char *device, const char *out, bool ppo, const char *const *ov,
                            int n_ov)
{
    char yaml[2048], critic[512] = "";
    if (ppo)
        snprintf(critic, sizeof critic,
                 "critic: {model: {path: %s/model}, optim: {lr: 0.005}, ppo_mini_batch_size: 2,\n"
                 "         ppo_micro_batch_size_per_gpu: 4}\n", dir);
    snprintf(yaml, sizeof yaml,
             "data: {train_files: [%s/train.jsonl], val_files: [], train_batch_size: 4,\n"
             "       shuffle: false, max_prompt_length: 128, max_response_length: 8}\n"
             "actor_rollout_ref:\n"
             "  model: {path: %s/model}\n"
             "  actor: {optim: {lr: 0.02}, ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4,\n"
             "          use_kl_loss: true, kl_loss_coef: 0.1, entropy_coeff: 0.01}\n"
             "  rollout: {n: 4, top_k: 20, log_prob_micro_batch_size_per_gpu: 8}\n"
             "  ref: {log_prob_micro_batch_size_per_gpu: 8}\n"
             "%s"
             "algorithm: {adv_estimator: %s}\n"
             "trainer: {total_training_steps: 2, save_freq: -1, test_freq: -1, logger: [],\n"
             "          device: %s, default_local_dir: %s/%s}\n",
             dir, dir, critic, ppo ? "gae" : "grpo", device, dir, out);
    return df_test_config(yaml, "device_train.yaml", ov, n_ov);
}

/* The reference's param_offload moves host bf16 weights: on a device it is refused, naming the
 * key and the device, not silently a no-op. */
static void test_ref_offload_refused_on_device(void **state)
{
    (void)state;
    const char *const ov[] = {"actor_rollout_ref.ref.fsdp_config.param_offload=true"};
    assert_int_equal(df_test_run(world, config_of("cuda", "offload", false, ov, 1)), DF_EINVAL);
    assert_non_null(strstr(df_last_error(), "param_offload"));
    assert_non_null(strstr(df_last_error(), "trainer.device=cuda"));
    df_clear_error();
}

/* The metrics of the rollout's log-probs (training/rollout_probs_diff_..., rollout_corr/...): the
 * device's sampled log-probs sit within emu_head_logp_bound of the host's (test_device_emu), so
 * a mean of them or of their differences moves by at most that, a sequence's sum (at most
 * max_response_length = 8 tokens) by 8x, its importance ratio exp(sum) and chi2's square of it
 * by 16x relatively: 16 x the bound x (1 + |value|) covers each. */
static double rollout_logp_bound;

static bool from_rollout_logp(const char *key)
{
    return !strncmp(key, "training/rollout_probs_diff", 27) || !strncmp(key, "rollout_corr/", 13);
}

/* Every metric but the clocks of runs a (CPU) and b (the device) within rel (0: equal) at the
 * first `steps` steps, and present at both (the rollout_probs_diff ones within
 * rollout_logp_bound); the count compared. */
static int same_metrics(const char *a_out, const char *b_out, const char *must_move, double rel,
                        size_t steps)
{
    json_t *a = df_test_metrics(dir, a_out, true), *b = df_test_metrics(dir, b_out, true);
    assert_int_equal(json_array_size(a), 2);
    assert_int_equal(json_array_size(b), 2);
    int compared = 0;
    for (size_t i = 0; i < 2; i++) {
        json_t *la = json_array_get(a, i), *lb = json_array_get(b, i), *v;
        const char *key;
        json_object_foreach(la, key, v) {
            if (df_test_clock_metric(key) || !json_is_number(v))
                continue;
            json_t *w = json_object_get(lb, key);
            const double x = json_number_value(v), y = json_number_value(w);
            const double tol = from_rollout_logp(key) ? 16 * rollout_logp_bound * (1 + fabs(x))
                                                      : rel * (fabs(x) + (rel > 0 ? 0.01 : 0));
            if (!json_is_number(w) || (i < steps && !(fabs(x - y) <= tol)))
                fail_msg("%s step %zu %s: cpu %.10g, device %.10g", b_out, i + 1, key,
                         json_number_value(v), json_number_value(w));
            compared++;
        }
        assert_true(json_number_value(json_object_get(la, must_move)) > 0);
    }
    json_decref(a);
    json_decref(b);
    return compared;
}

static void test_grpo_on_the_device_is_the_cpus(void **state)
{
    (void)state;
    train("cpu", "cpu", false, false);
    const int64_t calls0 = dev.calls, kv0 = dev.kv_attentions, a2a0 = dev.alltoallvs;
    train("cuda", "dev", true, false);
    print_message("device: %lld calls, %lld uploads (%lld bytes), %lld downloads (%lld bytes)\n",
                  (long long)(dev.calls - calls0), (long long)dev.uploads, (long long)dev.up_bytes,
                  (long long)dev.downloads, (long long)dev.down_bytes);
    /* every rank's rollout ran there (checked below); rank 0 wrote the metrics */
    assert_int_equal(df_comm_barrier(world), 0);
    const int compared = rank0() ? same_metrics("cpu", "dev", "actor/grad_norm", 0, 2) : 41;
    print_message("%d metrics equal\n", compared);
    assert_true(compared > 40);
    /* the rollout ran there: its attention over the KV cache, per layer of every forward */
    assert_true(dev.kv_attentions - kv0 >= 2 * 8);
    /* the Data Coordinator's payloads through the device (balance_batch moves the rollout's
     * batch every step) on more than one rank; one rank has nothing to move */
    print_message("device: %lld payload moves\n", (long long)(dev.alltoallvs - a2a0));
    if (df_comm_size(world) > 1)
        assert_true(dev.alltoallvs - a2a0 >= 2);
    else
        assert_int_equal(dev.alltoallvs, a2a0);
    assert_int_equal(emu_buffers(&dev), 0);
}

/*
 * PPO: the critic's values and updates on the device too. One path differs from the CPU's by
 * design: on a device the value head's H-term dot products are a float32 GEMM, the CPU sums them
 * in double (docs/backend.md), so values move by up to gamma_H sum_i |w_i h_i| (H = 32 here:
 * 1.9e-6 of that sum) and everything downstream with them: GAE's sums over at most 8 tokens
 * (twice each value), the advantages' whitening and the losses' means. Step 1 must agree within
 * 1e-4 relative, 50x gamma_H, for those sums and the conditioning of values near zero, plus
 * 1e-6 absolute (1e-4 of 0.01) for means that cancel to rounding (the whitened advantages' mean
 * is 0 up to ~1e-9, the scores and values are O(0.01..1)); step 2
 * is not compared, as after one Adam step a gradient that is zero up to rounding moves its
 * weight by +-lr either way (tests/test_kl_reward.c). A swapped column or a flipped sign moves
 * step 1 by far more.
 */
static void test_ppo_on_the_device_is_the_cpus(void **state)
{
    (void)state;
    train("cpu", "ppo_cpu", false, true);
    train("cuda", "ppo_dev", true, true);
    assert_int_equal(df_comm_barrier(world), 0);
    const int compared = rank0() ? same_metrics("ppo_cpu", "ppo_dev", "critic/grad_norm", 1e-4, 1) : 51;
    print_message("%d metrics equal\n", compared);
    assert_true(compared > 50);
    assert_int_equal(emu_buffers(&dev), 0);
}

/*
 * Mixed precision on the device: the emulated "cuda" with the CPU's bf16 entries (emu_bf16),
 * the actor and the reference in bf16 (their bf16 copies in the device's memory, refreshed there
 * after each optimizer step from the device's master weights), the rollout float32 on both
 * sides (the device's rollout is float32): every metric of the CPU's bf16 run, to the digit.
 * The bf16 matmuls must have run on the device (its gemm_w16 / gemm_bf16 calls and on-device
 * conversions counted), and the metrics must differ from the float32 device run's (a bf16
 * request quietly run in float32 would pass the comparison otherwise). Runs last: the device's
 * table keeps the bf16 entries. Skipped where the CPU has no native bf16.
 */
/* LoRA (docs/lora.md) on the device: the backward's adapter gradients there, the adapters'
 * optimizer on the host, the merged weights uploaded after every step (and the adapter's device
 * copy): the CPU run's metrics to the digit, as the full fine-tune's. */
static void test_lora_on_the_device_is_the_cpus(void **state)
{
    (void)state;
    const char *const lora[] = {"actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=8",
                                "actor_rollout_ref.actor.optim.lr=0.005"};
    train_ov("cpu", "lora_cpu", false, lora, 3);
    train_ov("cuda", "lora_dev", false, lora, 3);
    assert_int_equal(df_comm_barrier(world), 0);
    const int compared = rank0() ? same_metrics("lora_cpu", "lora_dev", "actor/grad_norm", 0, 2) : 41;
    print_message("%d metrics equal\n", compared);
    assert_true(compared > 40);
    /* a LoRA critic (its score head trained whole) too, within test_ppo_on_the_device_is_the_cpus's
     * bound for the value head's float32 GEMM on a device */
    const char *const critic[] = {"critic.model.lora_rank=4", "critic.model.lora_alpha=8"};
    train_ov("cpu", "lora_ppo_cpu", true, critic, 2);
    train_ov("cuda", "lora_ppo_dev", true, critic, 2);
    assert_int_equal(df_comm_barrier(world), 0);
    const int n = rank0() ? same_metrics("lora_ppo_cpu", "lora_ppo_dev", "critic/grad_norm", 1e-4, 1) : 51;
    assert_true(n > 50);
    assert_int_equal(emu_buffers(&dev), 0);
}

static void test_grpo_bf16_on_the_device_is_the_cpus(void **state)
{
    (void)state;
    if (!emu_bf16(&dev)) {
        print_message("SKIP: %s\n", df_last_error());
        df_clear_error();
        return;
    }
    const char *const ov[] = {"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
                              "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=bf16",
                              "actor_rollout_ref.rollout.dtype=float32"};
    train_ov("cpu", "bf16_cpu", false, ov, 3);
    const int64_t w16 = dev.w16_calls, conv = dev.conversions;
    train_ov("cuda", "bf16_dev", false, ov, 3);
    print_message("device: %lld bf16 GEMMs, %lld bf16 conversions\n", (long long)(dev.w16_calls - w16),
                  (long long)(dev.conversions - conv));
    assert_true(dev.w16_calls - w16 > 100);
    assert_true(dev.conversions - conv > 0);
    assert_int_equal(df_comm_barrier(world), 0);
    assert_int_equal(emu_buffers(&dev), 0);
    if (!rank0()) /* rank 0 wrote the metrics */
        return;
    const int compared = same_metrics("bf16_cpu", "bf16_dev", "actor/grad_norm", 0, 2);
    print_message("%d metrics equal\n", compared);
    assert_true(compared > 40);
    /* not the float32 run (test_grpo_on_the_device_is_the_cpus's "dev") */
    json_t *a = df_test_metrics(dir, "dev", true), *b = df_test_metrics(dir, "bf16_dev", true);
    const double x = json_number_value(json_object_get(json_array_get(a, 0), "actor/grad_norm"));
    const double y = json_number_value(json_object_get(json_array_get(b, 0), "actor/grad_norm"));
    print_message("step 1 actor/grad_norm: float32 %.10g, bf16 %.10g\n", x, y);
    assert_true(x != y);
    json_decref(a);
    json_decref(b);
}

static int setup(void **state)
{
    (void)state;
    if (df_comm_world(&world) || df_reward_register("test/digits", df_test_digit_share) ||
        df_backend_register("cuda", open_emu))
        return -1;
    if (df_test_shared_inputs(world, "df_devtrain", 16, "test/digits", dir, sizeof dir))
        return -1;
    char path[512];
    df_model *m = NULL;
    snprintf(path, sizeof path, "%s/model", dir);
    if (df_model_load(path, &m))
        return -1;
    rollout_logp_bound = emu_head_logp_bound(m, 1.0f); /* rollout.temperature 1 */
    df_model_free(m);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    emu_close(&dev);
    return df_test_shared_cleanup(world, dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grpo_on_the_device_is_the_cpus),
        cmocka_unit_test(test_ppo_on_the_device_is_the_cpus),
        cmocka_unit_test(test_ref_offload_refused_on_device),
        cmocka_unit_test(test_lora_on_the_device_is_the_cpus),
        cmocka_unit_test(test_grpo_bf16_on_the_device_is_the_cpus),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
